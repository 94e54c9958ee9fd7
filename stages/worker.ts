/**
 * Piscina worker: proves one stage of a plan. The plan text is sent with each task and
 * loaded once per worker (cached by key), so a replacement worker (after a deadline or a
 * crash) can resume on its own.
 */
import { loadPlanText, type LoadedPlan } from '../plans/loader.js';
import { logicalOrder } from '../sdfg/execute.js';
import { decompose, Prover, type Stage, type StageResult } from './prove.js';

export interface StageTask {
  readonly key: string;
  readonly file: string;
  readonly text: string;
  readonly stage: number;
  /** Fault injection for tests of the pool: hang (busy loop) or crash (the worker exits). */
  readonly fault?: { readonly stage: number; readonly kind: 'hang' | 'crash' };
}

let cached: { key: string; plan: LoadedPlan; stages: Stage[]; prover: Prover } | undefined;

export default function proveStage(task: StageTask): StageResult {
  if (cached?.key !== task.key) {
    const plan = loadPlanText(task.file, task.text);
    cached = { key: task.key, plan, stages: decompose(plan, logicalOrder(plan)), prover: new Prover(plan) };
  }
  if (task.fault?.stage === task.stage) {
    if (task.fault.kind === 'crash') process.exit(70);
    for (;;) {
      // A stuck proof: only the deadline ends it.
    }
  }
  const stage = cached.stages[task.stage];
  if (stage === undefined) throw new Error(`no stage ${task.stage}`);
  return cached.prover.prove(stage);
}
