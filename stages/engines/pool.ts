/**
 * Proves stages in a pool of worker threads (piscina). Each stage has a deadline: a worker
 * that exceeds it is stopped and the stage is "unknown" (never "verified"); a worker that
 * dies takes only its current stage with it. The run always completes. Workers are recycled
 * (a fresh pool every `recycleAfter` stages per worker) and have a heap limit.
 */
import { createHash } from 'node:crypto';
import { Piscina } from 'piscina';
import type { Stage, StageResult } from '../decompose/prove.js';
import type { StageTask } from './worker.js';
import { defaultLimits } from '../../plans/loader.js';

/**
 * A whole run's time limit (--time-limit): an absolute end on performance.now() and the
 * seconds it was set from (for messages). Stages not started by then are "unknown"; a stage's
 * deadline is cut to the time left.
 */
export interface TimeLimit {
  readonly endAt: number;
  readonly seconds: number;
}

/** The reason of a stage the run's time limit left unattempted. */
export function notAttempted(limit: TimeLimit): string {
  return `not attempted: the run's time limit of ${limit.seconds} s (--time-limit) was reached`;
}

/** Milliseconds left before the time limit (Infinity without one). */
export function timeLeft(limit: TimeLimit | undefined): number {
  return limit === undefined ? Infinity : limit.endAt - performance.now();
}

export interface PoolOptions {
  readonly jobs: number;
  /** Per-stage deadline in milliseconds. */
  readonly deadlineMs: number;
  /** The run's time limit: stages are not started past it, and a stage's deadline is cut to what is left. */
  readonly timeLimit?: TimeLimit;
  readonly engine?: 'normal' | 'z3';
  /** After each stage: proofs done, proofs asked for, and the stage just finished. */
  readonly onStage?: (done: number, total: number, stage: Stage) => void;
  /**
   * A worker module to run instead of stages/engines/worker.js, and the workerData it gets (tests
   * wrap the worker to make a stage hang or crash: test/fault-worker.ts).
   */
  readonly worker?: WorkerModule;
  /** Workers are replaced after this many stages each (memory hygiene; Z3 grows). */
  readonly recycleAfter?: number;
  /** Heap limit of a worker (MiB): a stage that exceeds it kills only its worker. */
  readonly workerHeapMb?: number;
  /** Send each stage's obligations with its task (stages not from the worker's own decomposition). */
  readonly custom?: boolean;
  /** Stage indices the numeric run shows differing (no eager retry after a lazy difference). */
  readonly witnessed?: ReadonlySet<number>;
  /** The normal form's work budget, when not the default (one budget per pool: a worker keeps one budgeted prover). */
  readonly budget?: number;
  /**
   * A pool the caller keeps across calls (newPool; the caller destroys it). Starting workers
   * costs more than a small round of stages (stages/infer/boundary.ts proves hints in rounds), and a
   * worker reloads the plan only when its text changes. No recycling then: the caller's
   * calls are few.
   */
  readonly pool?: Piscina;
  /**
   * A wall-clock end (performance.now() in this thread) for the whole call: no stage starts
   * after it, and a running stage's deadline is cut to it. Stages left are "unknown" (not
   * attempted), so a caller's time limit bounds the call, not only the gaps between calls.
   */
  readonly stopAt?: number;
  /**
   * Which limit `stopAt` is, as the reasons of the stages it stops name it ("verify --infer's
   * limit of 120 s on its inference rounds"): never "the time limit" alone, which a reader takes
   * for --time-limit.
   */
  readonly stopWhy?: string;
  /**
   * The deadline counts the process's CPU time as well as the wall clock: a stage is stopped
   * once both have passed it (still at `stopAt`, the time limit and 10 times the deadline). On a
   * machine shared with other work a stage of 1 s of CPU took past 10 s of wall time, and
   * inference dropped its hint for it (docs/engine.md, "Workers and deadlines").
   */
  readonly cpuDeadline?: boolean;
}

/**
 * An abort signal for one stage: at `ms` of wall time, or, with `cpu`, once the process has
 * also used `ms` of CPU time since `cpu0` (re-armed for what is missing), never after `hardMs`.
 */
function stageSignal(ms: number, hardMs: number, cpu: boolean): { signal: AbortSignal; clear: () => void } {
  if (!cpu) return { signal: AbortSignal.timeout(ms), clear: () => undefined };
  const ctl = new AbortController();
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    const used = process.cpuUsage(cpu0);
    const cpuMs = (used.user + used.system) / 1000;
    const wall = performance.now() - t0;
    const wait = Math.min(ms - cpuMs, hardMs - wall);
    if (wait < 1) {
      const e = new Error('deadline');
      e.name = 'AbortError';
      ctl.abort(e);
      return;
    }
    timer = setTimeout(check, Math.ceil(wait));
  };
  timer = setTimeout(check, Math.min(ms, hardMs));
  return { signal: ctl.signal, clear: () => clearTimeout(timer) };
}

/** What stopAt is when the caller does not say. */
const STOP_WHY = "the caller's time limit";

/** The reason of a stage a caller's time limit (PoolOptions.stopAt, named by `why`) left unattempted. */
export function notStarted(why: string = STOP_WHY): string {
  return `not attempted: ${why} was reached before this stage started`;
}

/** The reason of a stage stopped `ms` after it started by a caller's time limit named by `why`. */
export function stoppedBy(ms: number, what: 'worker' | 'proof', why: string = STOP_WHY): string {
  return `stopped after ${(ms / 1000).toFixed(1)} s: ${why} was reached; the ${what} was stopped`;
}

/** A module exporting a default function with stages/engines/worker.js's signature, and its workerData. */
export interface WorkerModule {
  readonly file: URL;
  readonly data?: unknown;
}

/** A worker pool for proveInPool's `pool` option. */
export function newPool(jobs: number, workerHeapMb = DEFAULT_WORKER_HEAP_MB, worker?: WorkerModule): Piscina {
  return new Piscina({
    filename: (worker?.file ?? new URL('./worker-entry.cjs', import.meta.url)).href,
    ...(worker?.data === undefined ? {} : { workerData: worker.data }),
    maxThreads: Math.max(1, jobs),
    minThreads: 1,
    idleTimeout: 1000,
    resourceLimits: { maxOldGenerationSizeMb: workerHeapMb },
  });
}

const DEFAULT_RECYCLE_AFTER = 200;
const DEFAULT_WORKER_HEAP_MB = 6144;

export async function proveInPool(file: string, text: string, stages: readonly Stage[], opts: PoolOptions): Promise<StageResult[]> {
  const jobs = Math.max(1, opts.jobs);
  const key = createHash('sha256').update(text).digest('hex');
  // The plan goes to workers once, in shared memory: a task carries a reference, not a copy of
  // the text (a structured clone per task cost gigabytes on a large or padded plan).
  const shared = new SharedArrayBuffer(Buffer.byteLength(text, 'utf8'));
  Buffer.from(shared).write(text, 'utf8');
  const limits = defaultLimits();
  // Recycling: a fresh pool for every batch of jobs x recycleAfter stages.
  const batch = opts.pool !== undefined ? Math.max(1, stages.length) : jobs * Math.max(1, opts.recycleAfter ?? DEFAULT_RECYCLE_AFTER);
  const results: StageResult[] = [];
  let done = 0;
  for (let start = 0; start < stages.length; start += batch) {
    const pool = opts.pool ?? newPool(jobs, opts.workerHeapMb, opts.worker);
    try {
      // At most `jobs` tasks in flight: a deadline must measure a stage's run, not its wait.
      const slice = stages.slice(start, start + batch);
      const part: StageResult[] = new Array<StageResult>(slice.length);
      let next = 0;
      // Tasks name a stage by its index in the decomposition (workers decompose too), so any
      // subset may be sent.
      const runOne = async (stage: Stage): Promise<StageResult> => {
        const t0 = performance.now();
        // A caller's stop time (stages/infer/boundary.ts rounds) and the run's time limit (--time-limit) both bound the stage.
        const stopLeft = opts.stopAt === undefined ? Infinity : opts.stopAt - t0;
        if (stopLeft <= 0) {
          opts.onStage?.(++done, stages.length, stage);
          return { stage, status: 'unknown', reason: notStarted(opts.stopWhy), failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
        }
        const runLeft = timeLeft(opts.timeLimit);
        const left = Math.min(runLeft, stopLeft);
        let cut = left < opts.deadlineMs;
        const deadlineMs = Math.max(1, Math.floor(Math.min(opts.deadlineMs, left)));
        const task: StageTask = { key, file, plan: shared, limits, stage: stage.index, engine: opts.engine ?? 'normal', deadlineMs, witnessed: opts.witnessed?.has(stage.index) === true, ...(opts.budget === undefined ? {} : { budget: opts.budget }), ...(opts.custom === true ? { custom: { logical: stage.logical, obligations: stage.obligations.map((o) => [o.rank, o.tensor] as const) } } : {}) };
        let result: StageResult;
        // Deadlines are whole milliseconds (a timer set to the floor of what is left can fire a
        // fraction of one before the limit): under a millisecond left is the limit reached, not a
        // task started only to be stopped.
        const reached = opts.timeLimit !== undefined && runLeft < 1;
        try {
          if (opts.timeLimit !== undefined && reached) throw new Error(notAttempted(opts.timeLimit));
          // Past a cut deadline (the time limit, the caller's stop) the wall clock alone stops it.
          // (A stage that waits without using CPU is still stopped at 10 times its deadline.)
          const sig = stageSignal(deadlineMs, cut ? deadlineMs : Math.max(1, Math.floor(Math.min(left, 10 * deadlineMs))), opts.cpuDeadline === true && !cut);
          try {
            result = (await pool.run(task, { signal: sig.signal })) as StageResult;
          } finally {
            sig.clear();
          }
        } catch (e) {
          const err = e as Error;
          // A CPU-time deadline may run on to the caller's stop: then that stopped it.
          if (!cut && opts.cpuDeadline === true && performance.now() - t0 >= left - 1 && left < 10 * deadlineMs) cut = true;
          const reason =
            opts.timeLimit !== undefined && reached
              ? notAttempted(opts.timeLimit)
              : err.name === 'AbortError'
                ? cut && opts.timeLimit !== undefined && runLeft <= stopLeft
                  ? `stopped after ${(left / 1000).toFixed(1)} s: the run's time limit of ${opts.timeLimit.seconds} s (--time-limit) was reached; the worker was stopped`
                  : cut
                    ? `${stoppedBy(deadlineMs, 'worker', opts.stopWhy)} (stage deadline ${(opts.deadlineMs / 1000).toFixed(1)} s)`
                    : `deadline of ${(opts.deadlineMs / 1000).toFixed(1)} s exceeded; the worker was stopped`
                : `the worker proving this stage failed (${err.message}); it was replaced`;
          result = { stage, status: 'unknown', reason, failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: performance.now() - t0 };
        }
        opts.onStage?.(++done, stages.length, stage);
        return result;
      };
      const lane = async (): Promise<void> => {
        while (next < slice.length) {
          const j = next++;
          part[j] = await runOne(slice[j] as Stage);
        }
      };
      await Promise.all(Array.from({ length: Math.min(jobs, slice.length) }, lane));
      for (const x of part) results.push(x);
    } finally {
      if (opts.pool === undefined) await pool.destroy();
    }
  }
  return results;
}
