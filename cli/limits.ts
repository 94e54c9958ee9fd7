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

/** --max-file-mb, --max-depth, --max-ops, --max-claims: positive, and integers where they count things. */
export function limitOptionError(a: LimitFlags): string | undefined {
  const { 'max-file-mb': maxFileMb, 'max-depth': maxDepth, 'max-ops': maxOps, 'max-claims': maxClaims } = a;
  // V8 strings top out near 512 MiB: a larger limit could not be read anyway.
  if (typeof maxFileMb !== 'number' || !Number.isFinite(maxFileMb) || maxFileMb <= 0 || maxFileMb > 512) return `--max-file-mb must be a number of MiB in (0, 512], got ${String(maxFileMb)}`;
  // Walkers of the plan (the schema validator, JSON.stringify) recurse on its nesting.
  if (typeof maxDepth !== 'number' || !Number.isSafeInteger(maxDepth) || maxDepth < 1 || maxDepth > 1000) return `--max-depth must be an integer from 1 to 1000, got ${String(maxDepth)}`;
  for (const [flag, v] of [['--max-ops', maxOps], ['--max-claims', maxClaims], ['--max-ranks', a['max-ranks'] ?? DEFAULT_MAX_RANKS]] as const) {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) return `${flag} must be a positive integer, got ${String(v)}`;
  }
  return undefined;
}

/** Numeric options yargs accepts as any number (NaN included): checked before any work. */
export function engineOptionError(a: { seed?: unknown; jobs?: unknown; deadline?: unknown; timeLimit?: unknown }): string | undefined {
  const { seed, jobs, deadline, timeLimit } = a;
  if (typeof seed !== 'number' || !Number.isSafeInteger(seed)) return `--seed must be an integer, got ${String(seed)}`;
  if (typeof jobs !== 'number' || !Number.isSafeInteger(jobs) || jobs < 0 || jobs > 256) return `--jobs must be an integer from 0 to 256, got ${String(jobs)}`;
  if (typeof deadline !== 'number' || !Number.isFinite(deadline) || deadline <= 0 || deadline > 86400) return `--deadline must be a number of seconds in (0, 86400], got ${String(deadline)}`;
  if (timeLimit !== undefined && (typeof timeLimit !== 'number' || !Number.isFinite(timeLimit) || timeLimit <= 0 || timeLimit > 7 * 86400)) return `--time-limit must be a number of seconds in (0, 604800], got ${String(timeLimit)}`;
  return undefined;
}
