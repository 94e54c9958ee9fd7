/**
 * Lowering checks split out of test/capture.test.ts (pure graph text, no capture and no fixture):
 * -inf fills read only by softmax, the strides of a view of a split piece, the fresh items of a
 * tuple as separate storages, and the expert-parallel permutation ops refused where not exact.
 */
import { strict as assert } from 'node:assert';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';

describe('-inf fills (masked_fill(mask, float("-inf"))): only softmax may read them', () => {
  const graph = (body: string): string => ['class g(torch.nn.Module):', '    def forward(self, x: "f32[2, 3]", m: "b8[2, 3]"):', '        f: "f32[2, 3]" = torch.ops.aten.masked_fill.Scalar(x, m, -inf)', body].join('\n');
  it('softmax of the fill is the softmax zeroed where masked and renormalized', () => {
    const low = lowerGraph(parseFxGraph('g.py', graph('        s: "f32[2, 3]" = torch.ops.aten._softmax.default(f, -1, False)\n        return (s,)')));
    assert.deepEqual(low.ops.map((o) => o.op), ['compare', 'softmax', 'mul', 'sum', 'div']);
  });
  it('any other reader is an import error naming the fill', () => {
    assert.throws(() => lowerGraph(parseFxGraph('g.py', graph('        a: "f32[2, 3]" = torch.ops.aten.add.Tensor(f, 1.0)\n        return (a,)'))), /the -inf fill made at g\.py:3 is read by an op other than softmax/);
  });
});

describe("a view of a split piece has the piece's strides (GPT-2's baddbmm scores on a fused QKV)", () => {
  const graph = (st: string): string =>
    [
      'class g(torch.nn.Module):',
      '    def forward(self, x: "f32[1, 4, 24]"):',
      '        split = torch.ops.aten.split.Tensor(x, 8, 2)',
      '        q: "f32[1, 4, 8]" = split[0]',
      '        v: "f32[1, 4, 2, 4]" = torch.ops.aten.view.default(q, [1, 4, 2, 4])',
      '        p: "f32[1, 2, 4, 4]" = torch.ops.aten.permute.default(v, [0, 2, 1, 3])',
      `        r: "f32[2, 4, 4]" = torch.ops.aten._reshape_alias.default(p, [2, 4, 4], [${st}])`,
      '        return (r,)',
    ].join('\n');
  it("q.view(B, T, H, d).permute(0, 2, 1, 3).reshape(-1, T, d): the strides [4, 24, 1] torch gives are that view, a reshape", () => {
    const low = lowerGraph(parseFxGraph('g.py', graph('4, 24, 1')));
    assert.ok(low.ops.some((o) => o.op === 'reshape'));
  });
  it('strides that are not a view of the piece are refused', () => {
    assert.throws(() => lowerGraph(parseFxGraph('g.py', graph('4, 8, 1'))), /is not a view of its input \(shape \[1, 2, 4, 4\], strides \[96, 4, 24, 1\]\)/);
  });
});

describe("a tuple's fresh items are separate storages (ResNet's `out += identity` on BatchNorm's output)", () => {
  const graph = (body: string): string =>
    [
      'class g(torch.nn.Module):',
      '    def forward(self, x: "f32[4, 2, 3, 3]", w: "f32[2]", b: "f32[2]", rm: "f32[2]", rv: "f32[2]", r: "f32[4, 2, 3, 3]"):',
      '        bn = torch.ops.aten.native_batch_norm.default(x, w, b, rm, rv, True, 0.1, 1e-05)',
      '        out: "f32[4, 2, 3, 3]" = bn[0]',
      '        mean: "f32[2]" = bn[1]',
      body,
    ].join('\n');
  it('a write through the output leaves the saved mean readable', () => {
    const low = lowerGraph(parseFxGraph('g.py', graph('        a: "f32[4, 2, 3, 3]" = torch.ops.aten.add_.Tensor(out, r)\n        m: "f32[2]" = torch.ops.aten.mul.Tensor(mean, 2.0)\n        return (a, m)')));
    assert.ok(low.ops.some((o) => o.op === 'mean'));
  });
  it('a view of the written item still goes stale', () => {
    assert.throws(() => lowerGraph(parseFxGraph('g.py', graph('        v: "f32[4, 18]" = torch.ops.aten.view.default(out, [4, 18])\n        a: "f32[4, 2, 3, 3]" = torch.ops.aten.add_.Tensor(out, r)\n        m: "f32[4, 18]" = torch.ops.aten.mul.Tensor(v, 2.0)\n        return (a, m)'))), /'v' is read after its storage was written in place/);
  });
});

describe('expert-parallel permutation ops (argsort, bincount, index_copy): refused where not exact', () => {
  const graph = (...body: string[]): string => ['class g(torch.nn.Module):', '    def forward(self, v: "i64[4]", x: "f32[4, 3]"):', ...body.map((b) => `        ${b}`)].join('\n');
  const lower = (...body: string[]): unknown => lowerGraph(parseFxGraph('g.py', graph(...body)));
  it('argsort without stable=True (ties in an order PyTorch leaves unspecified)', () => {
    assert.throws(() => lower('p: "i64[4]" = torch.ops.aten.argsort.default(v)', 'return (p,)'), /argsort without stable=True[\s\S]*torch\.argsort\(x, stable=True\)/);
  });
  it('a stable argsort lowers to exact integer ops', () => {
    const low = lowerGraph(parseFxGraph('g.py', graph('p: "i64[4]" = torch.ops.aten.argsort.stable(v, stable = True)', 'return (p,)')));
    assert.ok(low.ops.every((o) => ['reshape', 'compare', 'iota', 'mul', 'add', 'sum'].includes(o.op)), low.ops.map((o) => o.op).join(' '));
  });
  it('bincount of anything but routing choices (its length would depend on the largest value)', () => {
    assert.throws(() => lower('c: "i64[3]" = torch.ops.aten.bincount.default(v, None, 3)', 'return (c,)'), /bincount[\s\S]*only counts of routing choices/);
  });
  it('index_copy by an index that is not an argsort permutation (repeated indices keep an unspecified write)', () => {
    assert.throws(() => lower('y: "f32[4, 3]" = torch.ops.aten.index_copy.default(x, 0, v, x)', 'return (y,)'), /index_copy[\s\S]*permutation of every row/);
  });
});
