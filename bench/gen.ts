/**
 * Plan generation: size and time of every preset (npm run bench:gen). The verifier never
 * runs here; this measures the generator and the JSON it writes.
 */
import { generatePlan } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';

console.log('| preset | model | mesh | logical ops | ops per rank program | plan size | generation |');
console.log('|---|---|---|--:|--:|--:|--:|');
for (const [name, p] of Object.entries(PRESETS)) {
  const t0 = performance.now();
  const plan = generatePlan({ model: p.model, par: p.par });
  const text = JSON.stringify(plan);
  const s = (performance.now() - t0) / 1000;
  const logical = (plan['logical'] as { ops: unknown[] }).ops.length;
  const perRank = (plan['parallel'] as { programs: { ops: unknown[] }[] }).programs[0]?.ops.length ?? 0;
  console.log(`| ${name} | ${p.model.family}, ${p.model.layers} layer(s), hidden ${p.model.hidden} | dp${p.par.dp} tp${p.par.tp}, ${p.par.micro} micro-batch(es) (${p.par.dp * p.par.tp} ranks) | ${logical} | ${perRank} | ${(text.length / 1e6).toFixed(2)} MB | ${s.toFixed(2)} s |`);
}
