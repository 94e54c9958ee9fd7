/**
 * Plan generation: size and time of every preset (npm run bench:gen). The verifier never
 * runs here; this measures the generator and the JSON it writes. One SPMD program per
 * pipeline stage serves all of that stage's ranks, so size grows with layers, micro-batches
 * and stages, not with the number of ranks.
 */
import { generatePlan } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';

console.log('| preset | model | mesh (ranks) | logical ops | programs | ops in all programs | plan size | generation | heap after |');
console.log('|---|---|---|--:|--:|--:|--:|--:|--:|');
for (const [name, p] of Object.entries(PRESETS)) {
  const t0 = performance.now();
  const plan = generatePlan({ model: p.model, par: p.par });
  const text = JSON.stringify(plan);
  const s = (performance.now() - t0) / 1000;
  const logical = (plan['logical'] as { ops: unknown[] }).ops.length;
  const progs = (plan['parallel'] as { programs: { ops: unknown[] }[] }).programs;
  const ops = progs.reduce((n, x) => n + x.ops.length, 0);
  const pp = p.par.pp ?? 1;
  const heap = process.memoryUsage().heapUsed / 2 ** 20;
  console.log(
    `| ${name} | ${p.model.family}, ${p.model.layers} layer(s), hidden ${p.model.hidden} | pp${pp} dp${p.par.dp} tp${p.par.tp}${p.par.sp === true ? ' sp' : ''}, ${p.par.micro} micro-batch(es) (${pp * p.par.dp * p.par.tp}) | ${logical} | ${progs.length} | ${ops} | ${(text.length / 1e6).toFixed(2)} MB | ${s.toFixed(2)} s | ${heap.toFixed(0)} MB |`,
  );
}
