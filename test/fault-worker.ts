/**
 * The proof worker with a fault injected, for test/pool.test.ts: the stage named in workerData
 * hangs (only its deadline ends it) or crashes its worker; every other stage is proved by the
 * product's worker. Injected through PoolOptions.worker, so the product ships no fault hook.
 */
import { workerData } from 'node:worker_threads';
import proveStage, { type StageTask } from '../stages/engines/worker.js';
import type { StageResult } from '../stages/decompose/prove.js';

export interface Fault {
  readonly stage: number;
  /** hang: a busy loop; wait: a wait that uses no CPU; crash: the worker exits. */
  readonly kind: 'hang' | 'wait' | 'crash';
}

const fault = workerData as Fault;

export default async function faultyStage(task: StageTask): Promise<StageResult> {
  if (task.stage === fault.stage) {
    if (fault.kind === 'crash') process.exit(70);
    if (fault.kind === 'wait') await new Promise(() => undefined);
    for (;;) {
      // A stuck proof: only the deadline ends it.
    }
  }
  return proveStage(task);
}
