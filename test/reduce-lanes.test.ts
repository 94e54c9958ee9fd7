/**
 * Lane labels (OpDef.lanes) of ops whose attributes spell sizes, checked numerically: for every
 * sample, every lane label and every factor f dividing its sizes, lane j of the full op's
 * output equals the op at sizes divided by f (attributes from OpDef.laneAttrs) applied to
 * lane j of the inputs (element i of a labeled dim is in lane i mod f). A wrong labeling (the
 * outer dim of a merge) is caught by the same check.
 */
import { strict as assert } from 'node:assert';
import type { Dense } from '../ops/algebra.js';
import { reshapeLanes } from '../ops/layout.js';
import { registry } from '../ops/registry.js';
import type { Attrs, DimSig, OpDef, Shape } from '../ops/types.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { mulberry32 } from '../stages/witness/numeric.js';

interface LaneSample {
  readonly op: string;
  readonly shapes: Shape[];
  readonly attrs: Attrs;
}

export const LANE_SAMPLES: LaneSample[] = [
  { op: 'reshape', shapes: [[2, 6]], attrs: { shape: [3, -1] } },
  { op: 'reshape', shapes: [[4, 6]], attrs: { shape: [24] } },
  { op: 'reshape', shapes: [[24]], attrs: { shape: [2, 3, 4] } },
  { op: 'reshape', shapes: [[2, 4, 8]], attrs: { shape: [2, 4, 2, 4] } },
  { op: 'reshape', shapes: [[2, 1, 4, 6]], attrs: { shape: [2, 4, 1, 6] } },
  { op: 'reshape', shapes: [[6, 4]], attrs: { shape: [2, 3, 2, 2] } },
  { op: 'reshape', shapes: [[2, 4, 2, 4]], attrs: { shape: [8, -1] } },
  { op: 'reshape', shapes: [[4, 6]], attrs: { shape: [4, 6] } },
  { op: 'expand', shapes: [[3, 1]], attrs: { shape: [2, 3, 4] } },
  { op: 'expand', shapes: [[4, 1]], attrs: { shape: [-1, 6] } },
  { op: 'expand', shapes: [[2, 4]], attrs: { shape: [2, -1] } },
  { op: 'expand', shapes: [[4]], attrs: { shape: [6, 4] } },
  { op: 'iota', shapes: [[]], attrs: { shape: [4, 6], dim: 1, step: 1 } },
  { op: 'iota', shapes: [[]], attrs: { shape: [6, 4, 2], dim: 0, step: 2 } },
];

const divisors = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1).filter((f) => f > 1 && n % f === 0);
const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

function randomDense(shape: Shape, rnd: () => number): Dense<number> {
  const n = shape.reduce((p, d) => p * d, 1);
  return { shape: [...shape], data: Array.from({ length: n }, () => Math.round(rnd() * 1000) / 100) };
}

/** Index of `idx` in a row-major tensor of `shape`. */
const flat = (shape: Shape, idx: readonly number[]): number => idx.reduce((p, i, d) => p * (shape[d] as number) + i, 0);

/** Lane `lane` of a tensor: reduced index b of a dim with factor f is full index b*f + j. */
function laneOf(x: Dense<number>, factors: readonly number[], lane: ReadonlyMap<number, number>, laneDims: readonly number[]): Dense<number> {
  const shape = x.shape.map((s, d) => s / (factors[d] ?? 1));
  const n = shape.reduce((p, d) => p * d, 1);
  const data: number[] = [];
  for (let k = 0; k < n; k++) {
    const idx: number[] = [];
    let r = k;
    for (let d = shape.length - 1; d >= 0; d--) {
      idx.unshift(r % (shape[d] as number));
      r = Math.floor(r / (shape[d] as number));
    }
    const full = idx.map((b, d) => b * (factors[d] ?? 1) + (lane.get(laneDims[d] ?? -1) ?? 0));
    data.push(x.data[flat(x.shape, full)] as number);
  }
  return { shape, data };
}

/**
 * Why the lane labels `sig` of `def` on `shapes` are wrong for the factors `f` (label -> factor),
 * or undefined when every lane of the full op is the reduced op on that lane.
 */
export function laneDiff(def: OpDef, shapes: readonly Shape[], attrs: Attrs, sig: DimSig, f: ReadonlyMap<string, number>, seed = 1): string | undefined {
  const rnd = mulberry32(seed);
  const ins = shapes.map((s) => randomDense(s, rnd));
  const outs = def.apply(floatAlgebra, ins, attrs);
  const labels = [...f.keys()];
  const factorsOf = (ls: readonly { label: string }[]): number[] => ls.map((l) => f.get(l.label) ?? 1);
  const laneIds = (ls: readonly { label: string }[]): number[] => ls.map((l) => labels.indexOf(l.label));
  const inF = sig.inputs.map(factorsOf);
  const outF = sig.outputs.map(factorsOf);
  const redAttrs = def.laneAttrs === undefined ? attrs : def.laneAttrs(attrs, outF);
  // Every combination of lanes, one lane index per label.
  const combos: Map<number, number>[] = [new Map()];
  labels.forEach((l, k) => {
    const next: Map<number, number>[] = [];
    for (const c of combos) for (let j = 0; j < (f.get(l) as number); j++) next.push(new Map([...c, [k, j]]));
    combos.splice(0, combos.length, ...next);
  });
  for (const lane of combos) {
    const rin = ins.map((x, i) => laneOf(x, inF[i] ?? [], lane, laneIds(sig.inputs[i] ?? [])));
    let rout: Dense<number>[];
    try {
      const want = def.shape(rin.map((x) => x.shape), redAttrs);
      rout = def.apply(floatAlgebra, rin, redAttrs);
      if (JSON.stringify(want[0]) !== JSON.stringify(rout[0]?.shape)) return `reduced shape ${JSON.stringify(rout[0]?.shape)}, shape rule ${JSON.stringify(want[0])}`;
    } catch (e) {
      return `the op at reduced sizes fails: ${e instanceof Error ? e.message : String(e)}`;
    }
    for (const [o, full] of outs.entries()) {
      const exp = laneOf(full, outF[o] ?? [], lane, laneIds(sig.outputs[o] ?? []));
      const got = rout[o] as Dense<number>;
      if (JSON.stringify(exp.shape) !== JSON.stringify(got.shape)) return `lane ${JSON.stringify([...lane])}: shape ${JSON.stringify(got.shape)}, expected ${JSON.stringify(exp.shape)}`;
      const k = exp.data.findIndex((v, i) => v !== got.data[i]);
      if (k >= 0) return `lane ${JSON.stringify([...lane])}: element ${k} is ${String(got.data[k])}, lane of the full op ${String(exp.data[k])}`;
    }
  }
  return undefined;
}

/** Factors to try: each batch label alone at each divisor of its sizes, then all at their gcd. */
function factorSets(shapes: readonly Shape[], outShapes: readonly Shape[], sig: DimSig): Map<string, number>[] {
  const size = new Map<string, number>();
  const visit = (ls: readonly (readonly { label: string; role: string }[])[], ss: readonly Shape[]): void =>
    ls.forEach((l, i) => l.forEach((x, d) => {
      if (x.role === 'batch') size.set(x.label, gcd(size.get(x.label) ?? 0, (ss[i] as Shape)[d] as number));
    }));
  visit(sig.inputs, shapes);
  visit(sig.outputs, outShapes);
  const sets: Map<string, number>[] = [];
  for (const [l, g] of size) for (const f of divisors(g)) sets.push(new Map([[l, f]]));
  const all = new Map([...size].filter(([, g]) => g > 1));
  if (all.size > 1) sets.push(all);
  return sets;
}

describe('lane labels of ops whose attributes spell sizes (shape reduction)', () => {
  for (const s of LANE_SAMPLES) {
    it(`${s.op} ${JSON.stringify(s.shapes)} ${JSON.stringify(s.attrs)}: every lane is the op at reduced sizes`, () => {
      const def = registry.get(registry.id(s.op));
      assert.ok(def.lanes !== undefined && def.laneAttrs !== undefined);
      const sig = def.lanes(s.shapes, s.attrs);
      const outShapes = def.shape(s.shapes, s.attrs);
      const sets = factorSets(s.shapes, outShapes, sig);
      // the check bites: some label can shrink on every sample
      assert.ok(sets.length > 0, 'no lane label can shrink here');
      for (const f of sets) assert.equal(laneDiff(def, s.shapes, s.attrs, sig, f), undefined, `factors ${JSON.stringify([...f])}`);
    });
  }

  it('keeps the outer dims of a merge or split group fixed, with the reason', () => {
    const sig = reshapeLanes([2, 4, 8], [2, 4, 2, 4]);
    assert.deepEqual(sig.outputs[0]?.map((l) => l.role), ['batch', 'batch', 'fixed', 'batch']);
    assert.deepEqual(sig.inputs[0]?.map((l) => l.role), ['batch', 'batch', 'batch']);
    assert.match(sig.outputs[0]?.[2]?.why ?? '', /not the innermost dim of its merge\/split group/);
    const merge = reshapeLanes([3, 4], [12]);
    assert.deepEqual(merge.inputs[0]?.map((l) => l.role), ['fixed', 'batch']);
  });

  it('catches a wrong lane labeling: the outer dim of a merge labeled with the merged dim', () => {
    const def = registry.get(registry.id('reshape'));
    const wrong: DimSig = { inputs: [[{ label: 'a', role: 'batch' }, { label: 'b', role: 'fixed' }]], outputs: [[{ label: 'a', role: 'batch' }]] };
    const d = laneDiff(def, [[2, 6]], { shape: [12] }, wrong, new Map([['a', 2]]));
    assert.ok(d !== undefined && /lane/.test(d), String(d));
    // the right labeling of the same reshape passes
    assert.equal(laneDiff(def, [[2, 6]], { shape: [12] }, reshapeLanes([2, 6], [12]), new Map([['g0', 2]])), undefined);
    // and a rewritten attribute that does not match the lanes is caught too
    const bad: OpDef = { ...def, laneAttrs: (at) => at };
    assert.ok(laneDiff(bad, [[2, 6]], { shape: [12] }, reshapeLanes([2, 6], [12]), new Map([['g0', 2]])) !== undefined);
  });

  it("catches an iota whose position dim is labeled batch (its values are the positions), and keeps it fixed", () => {
    const def = registry.get(registry.id('iota'));
    const at = { shape: [4, 6], dim: 1, step: 1 };
    assert.deepEqual(def.lanes?.([[]], at).outputs[0]?.map((l) => l.role), ['batch', 'fixed']);
    const wrong: DimSig = { inputs: [[]], outputs: [[{ label: 'a', role: 'batch' }, { label: 'b', role: 'batch' }]] };
    assert.ok(laneDiff(def, [[]], at, wrong, new Map([['b', 2]])) !== undefined);
  });
});
