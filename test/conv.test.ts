/**
 * Convolutions and pooling (plans/import/aten-conv.ts). What they compute is checked against
 * PyTorch's numbers by the committed captures of examples/torch/ddp_cnn.py (test/capture.test.ts:
 * ddp_cnn, ddp_cnn-geometry with strides, padding, dilation and overlapping windows,
 * ddp_cnn-ties with equal maxima in max-pooling windows); here, small graphs in Float64 against
 * values PyTorch gave, and what is refused and why.
 */
import { strict as assert } from 'node:assert';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';
import { importGraphs, checkRelations } from '../plans/import/plan.js';
import { loadPlanObject } from '../lineage/load.js';
import { executeLogical } from '../sdfg/execute.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import type { Dense } from '../ops/algebra.js';

const graph = (sig: string, body: readonly string[]): string => ['class g(torch.nn.Module):', `    def forward(self, ${sig}):`, ...body.map((b) => `        ${b}`)].join('\n');

/** Runs a one-graph program in Float64 on the given inputs; returns its outputs in order. */
function run(text: string, inputs: Record<string, { placements: string[] }>, values: Record<string, number[]>, outputs: readonly string[]): number[][] {
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

describe('max pooling: the gradient goes to the first maximum of each window (ATen CPU)', () => {
  it('a 1x1x2x4 input with ties, kernel 2: the values and gradient torch 1.13 computed', () => {
    // torch: x = [[3, 3, 1, 2], [0, 3, 2, 2]] (one channel); F.max_pool2d(x, 2) = [3, 2];
    // backward of ones: [[1, 0, 0, 1], [0, 0, 0, 0]] (the first 3 and the first 2 in scan order).
    const text = graph('x: "f32[1, 1, 2, 4]", g: "f32[1, 1, 1, 2]"', [
      'm = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2])',
      'y: "f32[1, 1, 1, 2]" = m[0]',
      'i: "i64[1, 1, 1, 2]" = m[1]',
      'dx: "f32[1, 1, 2, 4]" = torch.ops.aten.max_pool2d_with_indices_backward.default(g, x, [2, 2], [], [0, 0], [1, 1], False, i)',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: { placements: ['R'] }, g: { placements: ['R'] } }, { x: [3, 3, 1, 2, 0, 3, 2, 2], g: [1, 1] }, ['y', 'dx']);
    assert.deepEqual(y, [3, 2]);
    assert.deepEqual(dx, [1, 0, 0, 1, 0, 0, 0, 0]);
  });
});

describe('convolution: stride, padding, dilation against values torch 1.13 computed', () => {
  it('conv2d of a 1x1x4x4 ramp with a 2x2 kernel, stride 2, padding 1, and its backward', () => {
    // torch: x = arange(16).view(1, 1, 4, 4), w = [[1, 2], [3, 4]], b = 0.5;
    // F.conv2d(x, w, b, stride=2, padding=1) = [[0.5, 11.5, 9.5], [40.5, 84.5, 40.5], [24.5, 41.5, 15.5]];
    // with g = ones: grad_input = [[4, 3, 4, 3], [2, 1, 2, 1], [4, 3, 4, 3], [2, 1, 2, 1]], grad_weight = [[40, 36], [24, 20]] (sums of x at each offset), grad_bias = 9.
    const text = graph('x: "f32[1, 1, 4, 4]", w: "f32[1, 1, 2, 2]", b: "f32[1]", g: "f32[1, 1, 3, 3]"', [
      'y: "f32[1, 1, 3, 3]" = torch.ops.aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)',
      'cb = torch.ops.aten.convolution_backward.default(g, x, w, [1], [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])',
      'dx: "f32[1, 1, 4, 4]" = cb[0]',
      'dw: "f32[1, 1, 2, 2]" = cb[1]',
      'db: "f32[1]" = cb[2]',
      'return (y, dx, dw, db)',
    ]);
    const R = { placements: ['R'] };
    const [y, dx, dw, db] = run(text, { x: R, w: R, b: R, g: R }, { x: Array.from({ length: 16 }, (_, i) => i), w: [1, 2, 3, 4], b: [0.5], g: Array.from({ length: 9 }, () => 1) }, ['y', 'dx', 'dw', 'db']);
    assert.deepEqual(y, [0.5, 11.5, 9.5, 40.5, 84.5, 40.5, 24.5, 41.5, 15.5]);
    assert.deepEqual(dx, [4, 3, 4, 3, 2, 1, 2, 1, 4, 3, 4, 3, 2, 1, 2, 1]);
    assert.deepEqual(dw, [40, 36, 24, 20]);
    assert.deepEqual(db, [9]);
  });
  it('a depthwise conv2d (groups = 2 channels), and its backward', () => {
    // torch: x = arange(18).view(1, 2, 3, 3), w = [[[[1, 2], [3, 4]]], [[[0, -1], [2, 1]]]],
    // b = [0.5, -1], F.conv2d(x, w, b, groups=2), g = arange(1, 9).view(1, 2, 2, 2).
    const text = graph('x: "f32[1, 2, 3, 3]", w: "f32[2, 1, 2, 2]", b: "f32[2]", g: "f32[1, 2, 2, 2]"', [
      'y: "f32[1, 2, 2, 2]" = torch.ops.aten.convolution.default(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 2)',
      'cb = torch.ops.aten.convolution_backward.default(g, x, w, [2], [1, 1], [0, 0], [1, 1], False, [0, 0], 2, [True, True, True])',
      'dx: "f32[1, 2, 3, 3]" = cb[0]',
      'dw: "f32[2, 1, 2, 2]" = cb[1]',
      'db: "f32[2]" = cb[2]',
      'return (y, dx, dw, db)',
    ]);
    const R = { placements: ['R'] };
    const [y, dx, dw, db] = run(text, { x: R, w: R, b: R, g: R }, { x: Array.from({ length: 18 }, (_, i) => i), w: [1, 2, 3, 4, 0, -1, 2, 1], b: [0.5, -1], g: [1, 2, 3, 4, 5, 6, 7, 8] }, ['y', 'dx', 'dw', 'db']);
    assert.deepEqual(y, [27.5, 37.5, 57.5, 67.5, 26, 28, 32, 34]);
    assert.deepEqual(dx, [1, 4, 4, 6, 20, 16, 9, 24, 16, 0, -5, -6, 10, 10, -2, 14, 23, 8]);
    assert.deepEqual(dw, [27, 37, 57, 67, 293, 319, 371, 397]);
    assert.deepEqual(db, [10, 26]);
  });
});

describe('average pooling against values torch 1.13 computed', () => {
  const R = { placements: ['R'] };
  const ramp = Array.from({ length: 16 }, (_, i) => i);
  it('_adaptive_avg_pool2d of a 4x4 ramp to 2x2, and its backward', () => {
    const text = graph('x: "f32[1, 1, 4, 4]", g: "f32[1, 1, 2, 2]"', [
      'y: "f32[1, 1, 2, 2]" = torch.ops.aten._adaptive_avg_pool2d.default(x, [2, 2])',
      'dx: "f32[1, 1, 4, 4]" = torch.ops.aten._adaptive_avg_pool2d_backward.default(g, x)',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: R, g: R }, { x: ramp, g: [1, 2, 3, 4] }, ['y', 'dx']);
    assert.deepEqual(y, [2.5, 4.5, 10.5, 12.5]);
    assert.deepEqual(dx, [0.25, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 1, 0.75, 0.75, 1, 1]);
  });
  it('avg_pool2d with kernel 2, stride 2, padding 1 (the zeros counted), and its backward', () => {
    const text = graph('x: "f32[1, 1, 4, 4]", g: "f32[1, 1, 3, 3]"', [
      'y: "f32[1, 1, 3, 3]" = torch.ops.aten.avg_pool2d.default(x, [2, 2], [2, 2], [1, 1])',
      'dx: "f32[1, 1, 4, 4]" = torch.ops.aten.avg_pool2d_backward.default(g, x, [2, 2], [2, 2], [1, 1], False, True, None)',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: R, g: R }, { x: ramp, g: Array.from({ length: 9 }, (_, i) => i) }, ['y', 'dx']);
    assert.deepEqual(y, [0, 0.75, 0.75, 3, 7.5, 4.5, 3, 6.75, 3.75]);
    assert.deepEqual(dx, [0, 0.25, 0.25, 0.5, 0.75, 1, 1, 1.25, 0.75, 1, 1, 1.25, 1.5, 1.75, 1.75, 2]);
  });
});

describe('convolutions and pooling that are not mapped are refused with the reason', () => {
  const conv = (args: string, w = '"f32[2, 1, 3, 3]"'): string =>
    graph(`x: "f32[1, 2, 5, 5]", w: ${w}`, [`y: "f32[1, 2, 3, 3]" = torch.ops.aten.convolution.default(x, w, None, ${args})`, 'return (y,)']);
  it('groups that do not divide the channels', () => {
    assert.throws(() => lowerGraph(parseFxGraph('g.py', conv('[1, 1], [0, 0], [1, 1], False, [0, 0], 3'))), /groups=3 does not divide the 2 input and 2 output channels/);
  });
  it('a transposed convolution is mapped (plans/import/aten-cv.ts): a graph stating the ordinary output size is refused by the shape check', () => {
    // (5x5 input, 3x3 kernel, stride 1: the transposed output is 7x7, the ordinary one 3x3; test/cv-ops.test.ts checks its values)
    assert.throws(() => lowerGraph(parseFxGraph('g.py', conv('[1, 1], [0, 0], [1, 1], True, [0, 0], 1', '"f32[2, 2, 3, 3]"'))), /the graph says y has shape \[1, 2, 3, 3\], the mapped op gives \[1, 2, 7, 7\]/);
  });
  it('max pooling with padding (an -inf border)', () => {
    const text = graph('x: "f32[1, 1, 4, 4]"', ['m = torch.ops.aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1])', 'y: "f32[1, 1, 2, 2]" = m[0]', 'return (y,)']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /max pooling pads with -inf, which is not an exact real/);
  });
  it('ceil_mode where it adds a partial window', () => {
    const text = graph('x: "f32[1, 1, 5, 5]"', ['m = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2], [0, 0], [1, 1], True)', 'y: "f32[1, 1, 3, 3]" = m[0]', 'return (y,)']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /ceil_mode=True adds a partial window here \(3 outputs instead of 2\)/);
  });
  it('the max-pooling indices read by anything but its backward', () => {
    const text = graph('x: "f32[1, 1, 4, 4]"', ['m = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2])', 'i: "i64[1, 1, 2, 2]" = m[1]', 'j: "i64[1, 1, 2, 2]" = torch.ops.aten.add.Tensor(i, 1)', 'return (j,)']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /the max-pooling indices, which only its matching backward op may read/);
  });
});
