/**
 * Shape reduction checked against full shapes on random plans and mutants (issue 12):
 * `npm run bench:reduce -- --runs 500 [--seed N] [--family mlp|reshape|both]`. For each plan
 * from test/reduce-plans.ts (Megatron MLPs, and reshape-heavy plans that exercise the lane
 * rules of reshape and expand), the verdict and the failing stages at full shapes and at
 * reduced shapes must be equal. `--runs` plans per family.
 * Prints the counts (plans, reduced, verdicts at full shapes, disagreements) and exits 1 on
 * any disagreement.
 */
import fc from 'fast-check';
import yargs from 'yargs';
import { loadPlanObject } from '../lineage/load.js';
import { reducePlan } from '../stages/reduce.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';
import { mlpPlan, planParams, reshapeParams, reshapePlan } from '../test/reduce-plans.js';
import type { RawPlan } from '../plans/raw.js';

const a = yargs(process.argv.slice(2)).option('runs', { type: 'number', default: 500 }).option('seed', { type: 'number', default: 2026 }).option('family', { choices: ['mlp', 'reshape', 'both'] as const, default: 'both' as const }).strict().parseSync();
const failing = (r: VerifyReport): string => r.stages.filter((s) => s.status !== 'proved').map((s) => `${s.logical}:${s.status}`).join(',');
const counts = { reshapePlans: 0, plans: 0, reduced: 0, verified: 0, not_equivalent: 0, unknown: 0, disagree: 0, elementsFull: 0, elementsReduced: 0 };
const t0 = performance.now();
const raws: { raw: RawPlan; params: unknown }[] = [];
if (a.family !== 'reshape') for (const p of fc.sample(planParams, { numRuns: a.runs, seed: a.seed })) raws.push({ raw: mlpPlan(p), params: p });
if (a.family !== 'mlp') for (const p of fc.sample(reshapeParams, { numRuns: a.runs, seed: a.seed })) raws.push({ raw: reshapePlan(p), params: p });
counts.reshapePlans = a.family === 'mlp' ? 0 : a.runs;
for (const { raw, params: p } of raws) {
  const plan = loadPlanObject('random.json', JSON.parse(JSON.stringify(raw)));
  const full = verifyPlan(plan);
  counts.plans++;
  counts[full.verdict]++;
  const red = reducePlan(plan, raw);
  if (red === undefined) continue;
  counts.reduced++;
  const sum = (pl: typeof plan): number => pl.logical.shapes.reduce((s, sh) => s + sh.reduce((x, y) => x * y, 1), 0);
  counts.elementsFull += sum(plan);
  counts.elementsReduced += sum(red.plan);
  const r = verifyPlan(red.plan);
  if (r.verdict !== full.verdict || failing(r) !== failing(full)) {
    counts.disagree++;
    console.log(`DISAGREE ${JSON.stringify(p)}: full ${full.verdict} [${failing(full)}], reduced ${r.verdict} [${failing(r)}]`);
  }
}
console.log(JSON.stringify({ ...counts, seed: a.seed, seconds: Math.round((performance.now() - t0) / 100) / 10 }));
process.exit(counts.disagree === 0 ? 0 : 1);
