/**
 * Piscina worker: proves one stage of a plan. The plan text is sent with each task and
 * loaded once per worker (cached by key), so a replacement worker (after a deadline or a
 * crash) can resume on its own.
 */
import { loadPlanText, type LoadedPlan } from '../plans/loader.js';
import { logicalOrder } from '../sdfg/execute.js';
import { decompose, Prover, type Stage, type StageResult } from './prove.js';
import { Z3Prover } from './z3.js';

export interface StageTask {
  readonly key: string;
  readonly file: string;
  readonly text: string;
  readonly stage: number;
  readonly engine: 'normal' | 'z3';
  readonly deadlineMs: number;
  /** The numeric run shows this stage's tensor differing (see Prover.prove). */
  readonly witnessed?: boolean;
  /** Fault injection for tests of the pool: hang (busy loop) or crash (the worker exits). */
  readonly fault?: { readonly stage: number; readonly kind: 'hang' | 'crash' };
}

let cached: { key: string; plan: LoadedPlan; stages: Stage[]; prover: Prover; z3?: Z3Prover } | undefined;

export default async function proveStage(task: StageTask): Promise<StageResult> {
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
  if (task.engine === 'z3') {
    cached.z3 ??= new Z3Prover(cached.plan);
    return cached.z3.prove(stage, task.deadlineMs);
  }
  return cached.prover.prove(stage, task.witnessed === true);
}
