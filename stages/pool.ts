/**
 * Proves stages in a pool of worker threads (piscina). Each stage has a deadline: a worker
 * that exceeds it is stopped and the stage is "unknown" (never "verified"); a worker that
 * dies takes only its current stage with it. The run always completes.
 */
import { createHash } from 'node:crypto';
import { Piscina } from 'piscina';
import type { Stage, StageResult } from './prove.js';
import type { StageTask } from './worker.js';

export interface PoolOptions {
  readonly jobs: number;
  /** Per-stage deadline in milliseconds. */
  readonly deadlineMs: number;
  readonly engine?: 'normal' | 'z3';
  readonly onStage?: (done: number, total: number) => void;
  readonly fault?: StageTask['fault'];
}

export async function proveInPool(file: string, text: string, stages: readonly Stage[], opts: PoolOptions): Promise<StageResult[]> {
  const pool = new Piscina({ filename: new URL('./worker.js', import.meta.url).href, maxThreads: Math.max(1, opts.jobs), minThreads: 1, idleTimeout: 1000 });
  const key = createHash('sha256').update(text).digest('hex');
  let done = 0;
  try {
    return await Promise.all(
      stages.map(async (stage, i): Promise<StageResult> => {
        const t0 = performance.now();
        const task: StageTask = { key, file, text, stage: i, engine: opts.engine ?? 'normal', deadlineMs: opts.deadlineMs, ...(opts.fault === undefined ? {} : { fault: opts.fault }) };
        let result: StageResult;
        try {
          result = (await pool.run(task, { signal: AbortSignal.timeout(opts.deadlineMs) })) as StageResult;
        } catch (e) {
          const err = e as Error;
          const reason =
            err.name === 'AbortError'
              ? `deadline of ${(opts.deadlineMs / 1000).toFixed(1)} s exceeded; the worker was stopped`
              : `the worker proving this stage failed (${err.message}); it was replaced`;
          result = { stage, status: 'unknown', reason, failingRanks: [...new Set(stage.obligations.map((o) => o.rank))], logicalOps: 0, parallelOps: 0, terms: 0, ms: performance.now() - t0 };
        }
        opts.onStage?.(++done, stages.length);
        return result;
      }),
    );
  } finally {
    await pool.destroy();
  }
}
