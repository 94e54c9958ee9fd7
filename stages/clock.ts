/**
 * The run's time limit (--time-limit) as seen by the engine's long loops in this thread: the
 * tensor-level derivations, per-template work and the inference test. The worker pool has its
 * own (stages/pool.ts, per stage); this one bounds what runs in the main thread between its
 * checks, so `--time-limit 1` ends a run within about a second whatever phase it is in. Past
 * the limit `checkRunClock` throws TimeLimitReached, which the CLI turns into an "unknown"
 * verdict (never a partial "verified"); code that catches errors per stage rethrows it.
 */
import type { VerifyReport } from './report.js';

/** Thrown by checkRunClock once the run's time limit has passed. */
export class TimeLimitReached extends Error {
  constructor(readonly seconds: number) {
    super(`stopped at the time limit (--time-limit ${seconds})`);
    this.name = 'TimeLimitReached';
  }
}

let endAt = Infinity;
let seconds = 0;

/** Sets the limit (performance.now() time of the end), or clears it with undefined. */
export function setRunClock(limit: { readonly endAt: number; readonly seconds: number } | undefined): void {
  endAt = limit?.endAt ?? Infinity;
  seconds = limit?.seconds ?? 0;
}

/** Throws TimeLimitReached past the run's time limit (a clock read: cheap enough per step). */
export function checkRunClock(): void {
  if (endAt !== Infinity && performance.now() > endAt) throw new TimeLimitReached(seconds);
}

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
