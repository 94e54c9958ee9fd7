/**
 * One printed ATen graph run in Float64 through the importer and the executor: the helpers of
 * the op-rule tests that compare a mapping's numbers with torch's (complex, cv-ops, nl-ops).
 */
import { strict as assert } from 'node:assert';
import { importGraphs, checkRelations } from '../plans/import/plan.js';
import { loadPlanObject } from '../lineage/load.js';
import { executeLogical } from '../sdfg/execute.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import type { Dense } from '../ops/algebra.js';

/** A graph module `g` whose forward takes `sig` and runs `body`, as torch prints it. */
export const graph = (sig: string, body: readonly string[]): string => ['class g(torch.nn.Module):', `    def forward(self, ${sig}):`, ...body.map((b) => `        ${b}`)].join('\n');

/**
 * Runs a one-graph program in Float64 on the given inputs (every one replicated; `ids`: the
 * integer ones, values below 10); returns its outputs in order.
 */
export function runGraph(text: string, values: Record<string, number[]>, outputs: readonly string[], ids: readonly string[] = []): number[][] {
  const inputs = Object.fromEntries(Object.keys(values).map((k) => [k, ids.includes(k) ? { placements: ['R'], values: { range: [0, 10] } } : { placements: ['R'] }]));
  const relations = checkRelations('r.json', { format: 'planproof-relations/v1', mesh: { axes: [{ name: 'dp', size: 1 }] }, inputs, outputs: outputs.map((node) => ({ name: `out_${node}`, node, placements: ['R'] })) });
  const { plan: raw } = importGraphs({ logical: { name: 'logical.py', text }, ranks: [{ name: 'rank0.py', text }], relations, relationsFile: 'r.json' });
  const plan = loadPlanObject('g', JSON.parse(JSON.stringify(raw)));
  const lg = plan.logical;
  const ins: (Dense<number> | undefined)[] = [];
  for (const id of raw.contract.inputs) {
    const t = lg.tensors.id(id);
    const c = /^const\.(m?)([0-9]+)$/.exec(id);
    ins[t] = { shape: lg.shapes[t] as readonly number[], data: c !== null ? [(c[1] === 'm' ? -1 : 1) * Number(c[2])] : (values[id] as number[]) };
  }
  const vals = executeLogical(plan, floatAlgebra, ins);
  return outputs.map((o) => [...(vals[lg.tensors.id(`out_${o}`)] as Dense<number>).data]);
}

/** Equal to torch's float64 numbers up to rounding (1e-12 relative). */
export function close(got: readonly number[], want: readonly number[], what: string): void {
  assert.equal(got.length, want.length, `${what}: size`);
  got.forEach((v, i) => assert.ok(Math.abs(v - (want[i] as number)) <= 1e-12 * Math.max(1, Math.abs(want[i] as number)), `${what}[${i}]: planproof ${v}, torch ${want[i]}`));
}
