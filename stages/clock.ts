/**
 * The run's time limit at the stages layer: plans/clock.ts holds the clock itself (loading is
 * part of the run); this adds the report of a run stopped by it.
 */
import type { VerifyReport } from './report.js';

export { checkRunClock, setRunClock, TimeLimitReached } from '../plans/clock.js';

/** The report of a run stopped at its time limit `ms` after it started: "unknown", no stage decided. */
export function timeUpReport(file: string, name: string, seconds: number, ms: number, seed: number, loadMs: number): VerifyReport {
  return {
    file,
    name,
    verdict: 'unknown',
    summary: `stopped at the time limit (--time-limit ${seconds}) after ${(ms / 1000).toFixed(1)} s, before every stage was decided`,
    stages: [],
    numeric: { evaluated: false, seed, claimsChecked: 0, mismatches: 0, reason: 'not run: the time limit was reached first' },
    approximations: [],
    ms: Math.round(ms),
    phases: { load: loadMs },
    timeLimit: { seconds, reached: true },
  };
}
