/**
 * Piscina worker: proves one stage of a plan. Each task references the plan, compact JSON
 * (the caller's parsed plan re-serialized, never the file's raw text) in shared memory; a
 * worker decodes and loads it once (cached by key), so a replacement worker (after a deadline
 * or a crash) can resume on its own.
 */
import { type PlanLimits } from '../../plans/loader.js';
import { loadPlanText, type LoadedPlan } from '../../lineage/load.js';
import { logicalOrder } from '../../sdfg/execute.js';
import { decompose, Prover, type Stage, type StageResult } from '../decompose/prove.js';
import { Z3Prover } from './z3.js';
import type { Program } from '../../plans/model.js';
import { evalLineage } from '../../lineage/model.js';

export interface StageTask {
  readonly key: string;
  readonly file: string;
  /** UTF-8 of the compact plan JSON, shared with the caller (not copied per task). */
  readonly plan: SharedArrayBuffer;
  /** The caller's load limits: a worker accepts what the caller accepted. */
  readonly limits: PlanLimits;
  readonly stage: number;
  readonly engine: 'normal' | 'z3';
  readonly deadlineMs: number;
  /** The numeric run shows this stage's tensor differing (see Prover.prove). */
  readonly witnessed?: boolean;
  /** A stage built by the caller (stages/infer/boundary.ts splits stages per hint): its logical tensor and obligations as [rank, tensor]. */
  readonly custom?: { readonly logical: number; readonly obligations: readonly (readonly [number, number])[] };
  /** The normal form's work budget when not the default (hint stages after a certified refutation). */
  readonly budget?: number;
}

let cached: { key: string; plan: LoadedPlan; stages: Stage[]; prover: Prover; budgeted?: Prover; z3?: Z3Prover } | undefined;

export default async function proveStage(task: StageTask): Promise<StageResult> {
  if (cached?.key !== task.key) {
    const plan = loadPlanText(task.file, Buffer.from(task.plan).toString('utf8'), { limits: task.limits });
    cached = { key: task.key, plan, stages: decompose(plan, logicalOrder(plan)), prover: new Prover(plan) };
  }
  const stage = task.custom === undefined ? cached.stages[task.stage] : customStage(cached.plan, task.stage, task.custom);
  if (stage === undefined) throw new Error(`no stage ${task.stage}`);
  if (task.engine === 'z3') {
    quietStderr();
    cached.z3 ??= new Z3Prover(cached.plan);
    return cached.z3.prove(stage, task.deadlineMs);
  }
  if (task.budget !== undefined) cached.budgeted ??= new Prover(cached.plan, task.budget);
  return (task.budget === undefined ? cached.prover : (cached.budgeted as Prover)).prove(stage, task.witnessed === true);
}

/**
 * Z3 (wasm) prints its abort and a wasm stack trace on stderr when it runs out of memory, from
 * this thread and from its own pthreads (whose output is piped through this thread's stderr).
 * The user gets the stage's reason instead ("Z3 did not decide it: ..."), never a trace, so a
 * worker that has run Z3 keeps its stderr to itself (workers print nothing else).
 */
function quietStderr(): void {
  if (quiet) return;
  quiet = true;
  process.stderr.write = (() => true) as typeof process.stderr.write;
}
let quiet = false;

function customStage(plan: LoadedPlan, index: number, c: NonNullable<StageTask['custom']>): Stage {
  const obligations = c.obligations.map(([rank, tensor]) => {
    const spec = (plan.programs[plan.rankProgram[rank] as number] as Program).lineage[tensor];
    if (spec === undefined) throw new Error(`rank ${rank} tensor ${tensor} has no lineage`);
    return { rank, tensor, nf: evalLineage(spec, plan.mesh, rank, plan.logical.shapes[spec.logical] ?? [], plan.view(rank).shapes[tensor] ?? []) };
  });
  return { index, logical: c.logical, obligations };
}
