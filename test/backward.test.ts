import { strict as assert } from 'node:assert';
import type { Dense } from '../ops/algebra.js';
import { registry } from '../ops/registry.js';
import type { Attrs } from '../ops/types.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { mulberry32 } from '../stages/witness/numeric.js';
import { EagerBuilder } from './helpers.js';

interface Sample {
  op: string;
  shapes: number[][];
  attrs?: Attrs;
  /** Inputs that must stay away from 0 (denominators). */
  positive?: number[];
  /** Inputs that get no gradient (masks, indices). */
  noGrad?: number[];
  /** Integer inputs: input index -> the values drawn from (ids, labels, routing choices). */
  ints?: Record<number, number[]>;
}

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

const samples: Sample[] = [
  { op: 'add', shapes: [[2, 3], [3]] },
  { op: 'sub', shapes: [[2, 1], [2, 3]] },
  { op: 'mul', shapes: [[2, 3], [1, 3]] },
  { op: 'div', shapes: [[2, 3], [2, 1]], positive: [1] },
  { op: 'neg', shapes: [[2, 2]] },
  { op: 'identity', shapes: [[3]] },
  { op: 'scale', shapes: [[2, 2]], attrs: { factor: '-1/3' } },
  { op: 'exp', shapes: [[3]] },
  { op: 'tanh', shapes: [[3]] },
  { op: 'sigmoid', shapes: [[3]] },
  { op: 'silu', shapes: [[3]] },
  { op: 'gelu', shapes: [[4]], attrs: { approximate: 'none' } },
  { op: 'gelu', shapes: [[4]], attrs: { approximate: 'tanh' } },
  { op: 'matmul', shapes: [[2, 3], [3, 4]] },
  { op: 'matmul', shapes: [[3], [3, 2]] },
  { op: 'matmul', shapes: [[2, 3], [3]] },
  { op: 'matmul', shapes: [[3], [3]] },
  { op: 'matmul', shapes: [[2, 2, 3], [3, 4]] },
  { op: 'linear', shapes: [[2, 3], [4, 3], [4]] },
  { op: 'linear', shapes: [[2, 2, 3], [4, 3]] },
  { op: 'sum', shapes: [[2, 3, 4]], attrs: { dims: [1] } },
  { op: 'sum', shapes: [[2, 3]], attrs: { keepdim: true } },
  { op: 'mean', shapes: [[2, 3, 4]], attrs: { dims: [0, -1] } },
  { op: 'softmax', shapes: [[2, 4]], attrs: { dim: 1 } },
  { op: 'log_softmax', shapes: [[2, 4]], attrs: { dim: -1 } },
  { op: 'expand', shapes: [[3, 1]], attrs: { shape: [2, 3, 4] } },
  { op: 'transpose', shapes: [[2, 3, 4]], attrs: { dim0: 0, dim1: 2 } },
  { op: 'permute', shapes: [[2, 3, 4]], attrs: { dims: [2, 0, 1] } },
  { op: 'reshape', shapes: [[2, 6]], attrs: { shape: [3, -1] } },
  { op: 'slice', shapes: [[2, 5]], attrs: { dim: 1, start: 1, end: 3 } },
  { op: 'pad', shapes: [[2, 3]], attrs: { dim: -1, before: 1, after: 2 } },
  { op: 'concat', shapes: [[2, 3], [1, 3]], attrs: { dim: 0 } },
  { op: 'split', shapes: [[5, 2]], attrs: { dim: 0, sizes: [2, 3] } },
  { op: 'layer_norm', shapes: [[2, 4], [4], [4]], attrs: { eps: '1/100' } },
  { op: 'layer_norm', shapes: [[2, 2, 3]], attrs: { eps: '1/10', normalized_dims: 2 } },
  { op: 'rms_norm', shapes: [[3, 4], [4]], attrs: { eps: '1/100' } },
  { op: 'rms_norm', shapes: [[2, 3]], attrs: { eps: '1/1000' } },
  { op: 'swiglu', shapes: [[2, 3], [2, 3]] },
  { op: 'dropout', shapes: [[2, 3], [2, 3]], attrs: { p: '1/4' }, noGrad: [1] },
  { op: 'rope', shapes: [[2, 3, 4], [3, 4], [3, 4]] },
  { op: 'rope', shapes: [[2, 2], [1, 2], [2, 2]] },
  { op: 'attention', shapes: [[2, 3, 2], [1, 3, 2], [1, 3, 2]], attrs: { causal: true } },
  { op: 'attention', shapes: [[1, 2, 2, 3], [1, 2, 3, 3], [1, 2, 3, 2]], attrs: { scale: '1/2' } },
  { op: 'mse_loss', shapes: [[3, 2], [3, 2]], attrs: { reduction: 'mean' } },
  { op: 'mse_loss', shapes: [[3, 2], [3, 2]], attrs: { reduction: 'sum' } },
  { op: 'log', shapes: [[3]], positive: [0] },
  { op: 'sqrt', shapes: [[2, 3]], positive: [0] },
  { op: 'where', shapes: [[2, 1], [2, 3], [3]], noGrad: [0], ints: { 0: [0, 1] } },
  { op: 'maximum', shapes: [[2, 3], [3]] },
  { op: 'minimum', shapes: [[2, 1], [2, 3]] },
  // Piecewise constant: no input gets a gradient.
  { op: 'compare', shapes: [[2, 3], [3]], attrs: { rel: 'gt' }, noGrad: [0, 1] },
  { op: 'iota', shapes: [[]], attrs: { shape: [2, 3], dim: 1, step: 1 }, noGrad: [0] },
  { op: 'assert_mask', shapes: [[2, 3], [2, 1]], noGrad: [1], ints: { 1: [1] } },
  { op: 'embedding', shapes: [[3], [4, 2]], noGrad: [0], ints: { 0: range(4) } },
  { op: 'gather', shapes: [[2, 4], [2, 3]], noGrad: [1], ints: { 1: range(4) } },
  { op: 'vocab_mask', shapes: [[3]], attrs: { start: 2, end: 4 }, noGrad: [0], ints: { 0: range(6) } },
  { op: 'vocab_local_ids', shapes: [[3]], attrs: { start: 2, end: 4 }, noGrad: [0], ints: { 0: range(6) } },
  { op: 'cross_entropy', shapes: [[4, 3], [4]], attrs: { reduction: 'mean' }, noGrad: [1], ints: { 1: [-100, 0, 1, 2] } },
  { op: 'cross_entropy', shapes: [[3, 3], [3]], attrs: { reduction: 'none', ignore_index: 1 }, noGrad: [1], ints: { 1: range(3) } },
  { op: 'topk', shapes: [[2, 4]], attrs: { k: 2 } },
  { op: 'moe_dispatch', shapes: [[3, 2], [3, 2]], attrs: { experts: 3 }, noGrad: [1], ints: { 1: range(3) } },
  { op: 'moe_dispatch', shapes: [[3, 2], [3, 2], [3, 2]], attrs: { experts: 3 }, noGrad: [1], ints: { 1: range(3) } },
  { op: 'moe_gather', shapes: [[3, 4, 2], [2, 2]], noGrad: [1], ints: { 1: range(3) } },
  { op: 'moe_combine', shapes: [[2, 4, 3], [2, 2], [2, 2]], noGrad: [1], ints: { 1: range(2) } },
  { op: 'moe_combine', shapes: [[2, 2, 3], [2, 1]], noGrad: [1], ints: { 1: range(2) } },
];

function numelOf(s: readonly number[]): number {
  return s.reduce((p, v) => p * v, 1);
}

describe('backward rules match central finite differences', () => {
  it('every differentiable op has a sample here', () => {
    const covered = new Set(samples.map((s) => s.op));
    const missing = registry.names().filter((n) => registry.get(registry.id(n)).backward !== 'none' && !covered.has(n));
    assert.deepEqual(missing, []);
  });
  samples.forEach((s, si) => {
    it(`${s.op} ${JSON.stringify(s.shapes)} ${s.attrs === undefined ? '' : JSON.stringify(s.attrs)}`, () => {
      const def = registry.get(registry.id(s.op));
      assert.notEqual(def.backward, 'none');
      const rnd = mulberry32(1000 + si);
      const attrs = s.attrs ?? {};
      const draw = (i: number): number => {
        const dom = s.ints?.[i];
        if (dom !== undefined) return dom[Math.floor(rnd() * dom.length)] as number;
        return s.positive?.includes(i) ? 0.5 + rnd() : rnd() * 2 - 1;
      };
      const inputs: Dense<number>[] = s.shapes.map((shape, i) => ({ shape, data: Array.from({ length: numelOf(shape) }, () => draw(i)) }));
      const outs = def.apply(floatAlgebra, inputs, attrs);
      const weights = outs.map((o) => o.data.map(() => rnd() * 2 - 1));
      const loss = (ins: Dense<number>[]): number =>
        def.apply(floatAlgebra, ins, attrs).reduce((acc, o, k) => acc + o.data.reduce((a, v, j) => a + v * ((weights[k] as number[])[j] as number), 0), 0);
      const b = new EagerBuilder();
      const inRefs = inputs.map((x) => b.put(x));
      const outRefs = outs.map((o) => b.put(o));
      const gRefs = outs.map((o, k) => b.put({ shape: o.shape, data: weights[k] as number[] }));
      const grads = (def.backward as Exclude<typeof def.backward, 'none'>)(b, { inputs: inRefs, outputs: outRefs, grads: gRefs, attrs });
      inputs.forEach((x, i) => {
        if (s.noGrad?.includes(i)) {
          assert.equal(grads[i], undefined, `input ${i} should get no gradient`);
          return;
        }
        const gref = grads[i];
        assert.ok(gref !== undefined, `no gradient for input ${i}`);
        const g = b.vals[gref] as Dense<number>;
        assert.deepEqual([...g.shape], [...x.shape], `gradient of input ${i} has the wrong shape`);
        const h = 1e-5;
        x.data.forEach((v, j) => {
          const plus = inputs.map((y, k) => (k === i ? { shape: y.shape, data: y.data.map((u, jj) => (jj === j ? v + h : u)) } : y));
          const minus = inputs.map((y, k) => (k === i ? { shape: y.shape, data: y.data.map((u, jj) => (jj === j ? v - h : u)) } : y));
          const fd = (loss(plus) - loss(minus)) / (2 * h);
          const an = g.data[j] as number;
          assert.ok(Math.abs(an - fd) <= 1e-6 + 1e-5 * Math.abs(fd), `input ${i} element ${j}: backward ${an}, finite difference ${fd}`);
        });
      });
    });
  });
});
