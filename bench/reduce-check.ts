/**
 * Shape reduction checked against full shapes on random plans and mutants (issue 12):
 * `npm run bench:reduce -- --runs 500 [--seed N] [--family mlp|reshape|both]`. For each plan
 * from test/reduce-plans.ts (Megatron MLPs, and reshape-heavy plans that exercise the lane
 * rules of reshape and expand), the verdict and the failing stages at full shapes and at
 * reduced shapes must be equal. `--runs` plans per family.
 * Prints the counts (plans, reduced, verdicts at full shapes, disagreements) and exits 1 on
 * any disagreement.
 * `--zero-cut`: instead, zero-extension cuts (stages/shrink/reduce.ts zeroCutPlan, witnesses only) on
 * `--runs` MLP plans with cuttable dims: a plan verified at full shapes is never refuted at the
 * cut, and every refutation at the cut is one at full shapes.
 */
import fc from 'fast-check';
import yargs from 'yargs';
import { loadPlanObject } from '../lineage/load.js';
import { reducePlan, zeroCutPlan } from '../stages/shrink/reduce.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';
import { mlpPlan, planParams, reshapeParams, reshapePlan, zeroCutParams } from '../test/reduce-plans.js';
import type { RawPlan } from '../plans/raw.js';

const a = yargs(process.argv.slice(2)).option('runs', { type: 'number', default: 500 }).option('seed', { type: 'number', default: 2026 }).option('family', { choices: ['mlp', 'reshape', 'both'] as const, default: 'both' as const }).option('zero-cut', { type: 'boolean', default: false }).strict().parseSync();
if (a.zeroCut) {
  const z = { plans: 0, cut: 0, verifiedFull: 0, refutedAtCut: 0, provedAtCut: 0, violations: 0 };
  const z0 = performance.now();
  for (const p of fc.sample(zeroCutParams, { numRuns: a.runs, seed: a.seed })) {
    const raw = mlpPlan(p);
    const plan = loadPlanObject('random.json', JSON.parse(JSON.stringify(raw)));
    z.plans++;
    const cut = zeroCutPlan(plan, raw);
    if (cut === undefined) continue;
    z.cut++;
    const full = verifyPlan(plan);
    const at = verifyPlan(cut.plan);
    if (full.verdict === 'verified') z.verifiedFull++;
    if (at.verdict === 'not_equivalent') z.refutedAtCut++;
    if (at.verdict === 'verified') z.provedAtCut++;
    if ((full.verdict === 'verified' && at.verdict === 'not_equivalent') || (at.verdict === 'not_equivalent' && full.verdict !== 'not_equivalent')) {
      z.violations++;
      console.log(`VIOLATION ${JSON.stringify(p)}: full ${full.verdict}, at the cut ${at.verdict}`);
    }
  }
  console.log(JSON.stringify({ zeroCut: z, seed: a.seed, seconds: Math.round((performance.now() - z0) / 100) / 10 }));
  process.exit(z.violations === 0 ? 0 : 1);
}
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
