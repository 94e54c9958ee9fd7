/**
 * Options checked before any work: the input-size limits (README, "Options that bound a run":
 * --max-file-mb, --max-depth, --max-ops, --max-claims, --max-ranks) and the engine's numbers
 * (--seed, --jobs, --deadline, --time-limit).
 */
import { DEFAULT_LIMITS, type PlanLimits } from '../plans/loader.js';

/** --max-ranks by default: 65,536 ranks rank by rank is minutes of work at most. */
export const DEFAULT_MAX_RANKS = 65_536;

/** The input-size limits of the command line (validated by limitOptionError). */
export function limitsFrom(a: LimitFlags): PlanLimits {
  const n = (v: unknown, d: number): number => (typeof v === 'number' ? v : d);
  return { bytes: Math.floor(n(a['max-file-mb'], DEFAULT_LIMITS.bytes / (1024 * 1024)) * 1024 * 1024), depth: n(a['max-depth'], DEFAULT_LIMITS.depth), ops: n(a['max-ops'], DEFAULT_LIMITS.ops), claims: n(a['max-claims'], DEFAULT_LIMITS.claims) };
}

/** The limit flags as yargs gives them. */
export interface LimitFlags {
  readonly 'max-file-mb'?: unknown;
  readonly 'max-depth'?: unknown;
  readonly 'max-ops'?: unknown;
  readonly 'max-claims'?: unknown;
  readonly 'max-ranks'?: unknown;
}

/** --max-file-mb, --max-depth, --max-ops, --max-claims, --max-ranks where the command takes them: positive, and integers where they count things. */
export function limitOptionError(a: LimitFlags, got: (flag: string, v: unknown) => string): string | undefined {
  const { 'max-file-mb': maxFileMb, 'max-depth': maxDepth } = a;
  // V8 strings top out near 512 MiB: a larger limit could not be read anyway.
  if (maxFileMb !== undefined && (typeof maxFileMb !== 'number' || !Number.isFinite(maxFileMb) || maxFileMb <= 0 || maxFileMb > 512)) return `--max-file-mb must be a number of MiB in (0, 512], got ${got('max-file-mb', maxFileMb)}`;
  // Walkers of the plan (the schema validator, JSON.stringify) recurse on its nesting.
  if (maxDepth !== undefined && (typeof maxDepth !== 'number' || !Number.isSafeInteger(maxDepth) || maxDepth < 1 || maxDepth > 1000)) return `--max-depth must be an integer from 1 to 1000, got ${got('max-depth', maxDepth)}`;
  for (const flag of ['max-ops', 'max-claims', 'max-ranks'] as const) {
    const v = a[flag];
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1)) return `--${flag} must be a positive integer, got ${got(flag, v)}`;
  }
  return undefined;
}

/** The engine's numbers where the command takes them (yargs accepts any number, NaN included): checked before any work. */
export function engineOptionError(a: { seed?: unknown; jobs?: unknown; deadline?: unknown; timeLimit?: unknown; inferTimeLimit?: unknown }, got: (flag: string, v: unknown) => string): string | undefined {
  const { seed, jobs, deadline, timeLimit, inferTimeLimit } = a;
  if (inferTimeLimit !== undefined && (typeof inferTimeLimit !== 'number' || !Number.isFinite(inferTimeLimit) || inferTimeLimit <= 0 || inferTimeLimit > 7 * 86400)) return `--infer-time-limit must be a number of seconds in (0, 604800], got ${got('infer-time-limit', inferTimeLimit)}`;
  if (seed !== undefined && (typeof seed !== 'number' || !Number.isSafeInteger(seed))) return `--seed must be an integer, got ${got('seed', seed)}`;
  if (jobs !== undefined && (typeof jobs !== 'number' || !Number.isSafeInteger(jobs) || jobs < 0 || jobs > 256)) return `--jobs must be an integer from 0 to 256, got ${got('jobs', jobs)}`;
  if (deadline !== undefined && (typeof deadline !== 'number' || !Number.isFinite(deadline) || deadline <= 0 || deadline > 86400)) return `--deadline must be a number of seconds in (0, 86400], got ${got('deadline', deadline)}`;
  if (timeLimit !== undefined && (typeof timeLimit !== 'number' || !Number.isFinite(timeLimit) || timeLimit <= 0 || timeLimit > 7 * 86400)) return `--time-limit must be a number of seconds in (0, 604800], got ${got('time-limit', timeLimit)}`;
  return undefined;
}
