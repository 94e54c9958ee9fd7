/**
 * planproof as a library: the package's public API (`import ... from 'planproof'`).
 *
 * A training framework calls it before launch: load its plan, verify it, print or inspect
 * the report. Everything else in dist/ is internal and may change between versions; these
 * names are the ones kept stable. README.md ("Use it as a library") has a worked example.
 *
 * ```ts
 * import { loadPlan, verifyPlan, formatReport } from 'planproof';
 * const report = verifyPlan(loadPlan('plan.json'));
 * console.log(formatReport(report));
 * if (report.verdict !== 'verified') process.exitCode = 1;
 * ```
 */

/**
 * Reads a plan file, checks it (schema, mesh, shapes, collectives, dataflow, lineage) and
 * returns it loaded; throws {@link PlanError} with every issue found (file and JSON path).
 */
export { loadPlan, loadPlanText, type LoadedPlan } from './lineage/load.js';
export type { LoadOptions, PlanLimits } from './plans/loader.js';
/** The error an invalid plan raises: `issues` lists each problem with its JSON path. */
export { PlanError, type PlanIssue } from './plans/errors.js';
/**
 * Proves a loaded plan equivalent to its logical graph in this thread (`verifyPlan`) or in
 * worker threads under a per-stage deadline (`verifyPlanInPool`); the report's verdict is
 * "verified" only from an exact proof, "not_equivalent" only with a witness.
 */
export { type VerifyOptions, type PoolVerifyOptions } from './stages/verify.js';
import { verifyPlan as verifyPlanRaw, verifyPlanInPool as verifyPlanInPoolRaw, type VerifyOptions, type PoolVerifyOptions } from './stages/verify.js';
import { confirmGuardedPinned, confirmGuardedPinnedSync } from './stages/witness/guards.js';
import { unimpliedPin } from './stages/witness/pins.js';
import { PlanError as PlanErrorOf } from './plans/errors.js';
import type { LoadedPlan } from './lineage/load.js';
import type { VerifyReport } from './stages/report.js';
/** Pins a plan file holds must be implied by its reads (stages/witness/pins.ts); else the plan is refused. */
function checkPins(plan: LoadedPlan): void {
  const pin = unimpliedPin(plan);
  if (pin !== undefined) throw new PlanErrorOf(plan.file, [pin]);
}
/** Proves `plan` in this thread; a "not_equivalent" of a plan with values read into Python only with a witness that keeps them (stages/witness/guards.ts). */
export function verifyPlan(plan: LoadedPlan, opts: VerifyOptions = {}): VerifyReport {
  checkPins(plan);
  return confirmGuardedPinnedSync(plan, verifyPlanRaw(plan, opts), (p) => verifyPlanRaw(p, opts));
}
/** As verifyPlan, in worker threads under a per-stage deadline; `text` is the plan's compact JSON. */
export async function verifyPlanInPool(plan: LoadedPlan, text: string, opts: PoolVerifyOptions): Promise<VerifyReport> {
  checkPins(plan);
  // The second run, under pins, never reads or writes the proof cache: its proofs hold on the pinned inputs only.
  const uncached: { -readonly [K in keyof PoolVerifyOptions]?: PoolVerifyOptions[K] } = { ...opts };
  delete uncached.cache;
  return confirmGuardedPinned(plan, text, await verifyPlanInPoolRaw(plan, text, opts), async (p, t) => verifyPlanInPoolRaw(p, t ?? text, uncached as PoolVerifyOptions));
}
export type { VerifyReport, StageReport, Verdict } from './stages/report.js';
/**
 * The pipeline `planproof verify` runs (docs/engine.md, "The pipeline"): per template, inferred
 * boundaries, per-stage or rank by rank with shape reduction, as the plan calls for; the same
 * verdict as the command line. `reportOf` gives the verdict report of its result.
 */
export { verifyPipeline, reportOf, ROUTES, type PipelineOptions, type PipelineResult, type Route, type RouteName } from './stages/pipeline.js';
/** The report as the CLI prints it: verdict, first failing stage, witness values. */
export { formatReport } from './stages/report.js';
/** Generates a plan (JSON, the only thing the verifier reads) from a model and a parallelism; PRESETS holds named ones. */
export { generatePlan, type GenOptions } from './plans/gen/plan.js';
export { PRESETS, type Preset } from './plans/gen/presets.js';
/** The catalog of real parallelization bugs, each a mutation of a generated plan (docs/bugs.md). */
export { BUGS, bugById, type Bug, type BugContext } from './plans/gen/bugs.js';
/** The operator registry: every op the plan format accepts, one record of rules each. */
export { registry, type OpRegistry } from './ops/registry.js';
/** An op's record of rules (shape, eval over any Algebra, dims, backward) and the scalar domain it evaluates over. */
export type { OpDef } from './ops/types.js';
export type { Algebra } from './ops/algebra.js';
