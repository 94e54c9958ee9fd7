/**
 * MoE dispatch by boolean mask (plans/import/aten-mask.ts, docs/import.md "Dispatch by mask"):
 * the recorded positions of a mask are used only where the mask is a function of routing
 * choices (pinned) and constants; a mask computed from data is refused. Lowered graphs are
 * evaluated in Float64 with the registry's own value rules and compared with what PyTorch
 * computes for the same program (values written out below, from torch 1.13).
 */
import { strict as assert } from 'node:assert';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';
import type { Lowered } from '../plans/import/lower.js';
import { registry } from '../ops/registry.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import type { Dense } from '../ops/algebra.js';

/** Runs the lowered ops in order on the inputs (constants hold their value). */
function run(low: Lowered, inputs: Record<string, number[]>): Map<string, Dense<number>> {
  const v = new Map<string, Dense<number>>();
  const dense = (shape: readonly number[], data: number[]): Dense<number> => ({ shape: [...shape], data });
  for (const t of low.inputs) v.set(t.id, dense(t.shape, inputs[t.id] ?? assert.fail(`no value for ${t.id}`)));
  for (const e of low.extra) if (e.constant !== undefined) v.set(e.id, { shape: [...e.shape], data: [e.constant] });
  for (const op of low.ops) {
    const def = registry.get(registry.id(op.op));
    const outs = def.apply(floatAlgebra, op.inputs.map((i) => v.get(i) ?? assert.fail(`${op.id}: no value for ${i}`)), op.attrs ?? {});
    op.outputs.forEach((o, k) => v.set(o, outs[k] as Dense<number>));
  }
  return v;
}

const returned = (low: Lowered, vals: Map<string, Dense<number>>, k: number): number[] => {
  const t = low.outputs[k];
  assert.ok(t?.kind === 'tensor');
  return [...(vals.get(t.id) as Dense<number>).data];
};

// scores: 4 tokens x 3 experts; top-2 routing [[0, 2], [1, 0], [2, 1], [0, 1]] (as topk gives it).
const SCORES = [0.5, 0.1, 0.4, 0.3, 0.6, 0.1, 0.1, 0.3, 0.6, 0.7, 0.2, 0.1];
const X = [1, 2, 3, 4, 5, 6, 7, 8];
const HEAD = [
  'class g(torch.nn.Module):',
  '    def forward(self, s: "f32[4, 3]", x: "f32[4, 2]"):',
  '        topk = torch.ops.aten.topk.default(s, 2)',
  '        v: "f32[4, 2]" = topk[0]',
  '        i: "i64[4, 2]" = topk[1]',
  '        r: "i64[4, 2]" = torch.ops.planproof.routing.default(i, [0, 2, 1, 0, 2, 1, 0, 1])',
];

describe('MoE dispatch by mask (Mixtral: torch.where(expert_mask[e]), x[None, top_x], index_add_)', () => {
  // Expert 0's tokens (nonzero of (r == 0) as [slot, token] pairs: slot 0 of tokens 0 and 3, slot 1 of token 1).
  const mixtral = [
    ...HEAD,
    '        m: "b8[4, 2]" = torch.ops.aten.eq.Scalar(r, 0)',
    '        p: "b8[2, 4]" = torch.ops.aten.permute.default(m, [1, 0])',
    '        nz: "i64[3, 2]" = torch.ops.planproof.positions.default(p, [0, 0, 0, 3, 1, 1])',
    '        u = torch.ops.aten.unbind.int(nz, 1)',
    '        idx: "i64[3]" = u[0]',
    '        top_x: "i64[3]" = u[1]',
    '        ux: "f32[1, 4, 2]" = torch.ops.aten.unsqueeze.default(x, 0)',
    '        cur: "f32[1, 3, 2]" = torch.ops.aten.index.Tensor(ux, [None, top_x])',
    '        uv: "f32[4, 2, 1]" = torch.ops.aten.unsqueeze.default(v, 2)',
    '        w: "f32[3, 1]" = torch.ops.aten.index.Tensor(uv, [top_x, idx])',
    '        c2: "f32[3, 2]" = torch.ops.aten.view.default(cur, [3, 2])',
    '        y: "f32[3, 2]" = torch.ops.aten.mul.Tensor(c2, w)',
    '        z: "f32[4, 2]" = torch.ops.aten.zeros.default([4, 2], dtype = torch.float32)',
    '        a: "f32[4, 2]" = torch.ops.aten.index_add_.default(z, 0, top_x, y)',
    '        return (z,)',
  ].join('\n');

  it("computes what PyTorch computes, with the routing pinned and the verdict's specialization listed", () => {
    const low = lowerGraph(parseFxGraph('g.py', mixtral));
    const out = returned(low, run(low, { s: SCORES, x: X }), 0);
    // PyTorch: rows 0, 1, 3 get x * (their expert-0 score): 0.5, 0.3, 0.7; row 2 stays 0 (in place).
    const want = [0.5, 1, 0.9, 1.2, 0, 0, 4.9, 5.6];
    out.forEach((o, k) => assert.ok(Math.abs(o - (want[k] as number)) < 1e-12, `out[${k}]: ${o}, PyTorch ${want[k]}`));
    assert.equal(low.reads.length, 1);
    assert.match(low.reads[0] ?? '', /the routing choices 'r' pinned to those the run made \(the value read at g\.py:\d+ \(the positions of a mask\) depends on them\)/);
    // Pinned: nothing reads topk's values any more (the scores at the pinned choices instead).
    const vId = low.ops.find((o) => o.op === 'topk')?.outputs[0];
    assert.ok(!low.ops.some((o) => o.op !== 'topk' && o.inputs.includes(vId as string)));
  });

  it('an index_add_ whose result is read through the written name is the sum, not the zeros it started from', () => {
    const low = lowerGraph(parseFxGraph('g.py', mixtral));
    assert.ok(returned(low, run(low, { s: SCORES, x: X }), 0).some((o) => o !== 0));
  });

  it('a mask computed from the data (x > 0), not from routing choices, is refused: its positions would hold only for the captured values', () => {
    const text = [
      ...HEAD,
      '        m: "b8[4, 2]" = torch.ops.aten.gt.Scalar(x, 3.5)',
      '        nz: "i64[5, 2]" = torch.ops.planproof.positions.default(m, [1, 1, 2, 0, 2, 1, 3, 0, 3, 1])',
      '        u = torch.ops.aten.unbind.int(nz, 1)',
      '        rows: "i64[5]" = u[0]',
      '        sel: "f32[5, 2]" = torch.ops.aten.index.Tensor(x, [rows])',
      '        return (sel,)',
    ].join('\n');
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /the mask depends on 'x', not only on routing choices/);
  });

  it('positions the capture did not record (another exporter\'s nonzero) are refused', () => {
    const text = [...HEAD, '        m: "b8[4, 2]" = torch.ops.aten.eq.Scalar(r, 0)', '        nz: "i64[3, 2]" = torch.ops.aten.nonzero.default(m)', '        return (nz,)'].join('\n');
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /its size depends on the data/);
  });
});

describe('MoE dispatch by mask (y[mask] = expert(x[mask]), backward index_put with accumulate)', () => {
  // Tokens whose first choice is expert 2: token 2 only.
  const body = (put: string): string =>
    [
      ...HEAD,
      '        first: "i64[4]" = torch.ops.aten.select.int(r, 1, 0)',
      '        m: "b8[4]" = torch.ops.aten.eq.Scalar(first, 2)',
      '        pm: "i64[1, 1]" = torch.ops.planproof.positions.default(m, [2])',
      '        sel: "f32[1, 2]" = torch.ops.aten.index.Tensor(x, [m])',
      '        y: "f32[1, 2]" = torch.ops.aten.mul.Tensor(sel, 10.0)',
      put,
    ].join('\n');

  it('x[mask] = v writes the selected rows, the others kept; x[mask] += v (accumulate) adds', () => {
    const set = lowerGraph(parseFxGraph('g.py', body('        o: "f32[4, 2]" = torch.ops.aten.index_put.default(x, [m], y)\n        return (o,)')));
    assert.deepEqual(returned(set, run(set, { s: SCORES, x: X }), 0), [1, 2, 3, 4, 50, 60, 7, 8]);
    const acc = lowerGraph(parseFxGraph('g.py', body('        o: "f32[4, 2]" = torch.ops.aten.index_put.default(x, [m], y, True)\n        return (o,)')));
    assert.deepEqual(returned(acc, run(acc, { s: SCORES, x: X }), 0), [1, 2, 3, 4, 55, 66, 7, 8]);
  });

  it('a scalar fill (x[mask] = 0, vocab-parallel embedding) stays a where over the mask, needing no positions', () => {
    const text = ['class g(torch.nn.Module):', '    def forward(self, s: "f32[4, 3]"):', '        m: "b8[4, 3]" = torch.ops.aten.gt.Scalar(s, 0.45)', '        o: "f32[4, 3]" = torch.ops.aten.index_put.default(s, [m], 0.0)', '        return (o,)'].join('\n');
    const low = lowerGraph(parseFxGraph('g.py', text));
    assert.equal(low.reads.length, 0);
    assert.deepEqual(returned(low, run(low, { s: SCORES }), 0), SCORES.map((v) => (v > 0.45 ? 0 : v)));
  });
});

describe('Switch capacity (HF SwitchTransformersTop1Router: argmax, one_hot, cumsum, token_priority <= capacity, .bool())', () => {
  // 1 sequence of 4 tokens, argmax routing [0, 0, 1, 0] pinned; capacity 2: the third token of expert 0 is dropped.
  const text = [
    'class g(torch.nn.Module):',
    '    def forward(self, s: "f32[1, 4, 2]", x: "f32[1, 4, 2]"):',
    '        a: "i64[1, 4]" = torch.ops.aten.argmax.default(s, -1)',
    '        r: "i64[1, 4]" = torch.ops.planproof.routing.default(a, [0, 0, 1, 0])',
    '        z: "i64[1, 4, 2]" = torch.ops.aten.zeros.default([1, 4, 2], dtype = torch.int64)',
    '        u: "i64[1, 4, 1]" = torch.ops.aten.unsqueeze.default(r, -1)',
    '        oh: "i64[1, 4, 2]" = torch.ops.aten.scatter_.value(z, -1, u, 1)',
    '        c: "i64[1, 4, 2]" = torch.ops.aten.cumsum.default(z, -2)',
    '        le: "b8[1, 4, 2]" = torch.ops.aten.le.Scalar(c, 2)',
    '        m: "i64[1, 4, 2]" = torch.ops.aten.mul.Tensor(z, le)',
    '        mx = torch.ops.aten.max.dim(s, -1)',
    '        p: "f32[1, 4]" = mx[0]',
    '        sel: "i64[1, 4]" = torch.ops.aten.select.int(m, 2, 0)',
    '        b: "b8[1, 4]" = torch.ops.aten._to_copy.default(sel, dtype = torch.bool)',
    '        pos: "i64[2, 2]" = torch.ops.planproof.positions.default(b, [0, 0, 0, 1])',
    '        h: "f32[2, 2]" = torch.ops.aten.index.Tensor(x, [b])',
    '        y: "f32[2, 2]" = torch.ops.aten.mul.Tensor(h, 10.0)',
    '        n: "f32[1, 4, 2]" = torch.ops.aten.clone.default(x)',
    '        o: "f32[1, 4, 2]" = torch.ops.aten.index_put_.default(n, [b], y)',
    '        q: "f32[1, 4, 1]" = torch.ops.aten.unsqueeze.default(p, -1)',
    '        f: "f32[1, 4, 2]" = torch.ops.aten.mul.Tensor(q, n)',
    '        return (c, f)',
  ].join('\n');
  const S = [0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4];

  it('cumsum is the running count; the capacity mask, .bool() and the row maximum are what PyTorch computes', () => {
    const low = lowerGraph(parseFxGraph('g.py', text));
    const vals = run(low, { s: S, x: X });
    assert.deepEqual(returned(low, vals, 0), [1, 0, 2, 0, 2, 1, 3, 1]);
    // PyTorch: tokens 0 and 1 (expert 0, within capacity) get 10·x, tokens 2 and 3 keep x; all times their max score.
    const want = [0.9 * 10, 0.9 * 20, 0.8 * 30, 0.8 * 40, 0.7 * 5, 0.7 * 6, 0.6 * 7, 0.6 * 8];
    returned(low, vals, 1).forEach((o, k) => assert.ok(Math.abs(o - (want[k] as number)) < 1e-12, `f[${k}]: ${o}, PyTorch ${want[k]}`));
  });

  it('pinned, the row maximum of the scores a top-1 choice was made from is the score at the choice (no amax left)', () => {
    const low = lowerGraph(parseFxGraph('g.py', text));
    assert.equal(low.reads.length, 1);
    const amax = low.ops.filter((o) => o.op === 'amax').flatMap((o) => o.outputs);
    assert.ok(!low.ops.some((o) => o.inputs.some((i) => amax.includes(i))), 'nothing reads an amax of the scores');
  });

  it('.bool() of an integer is x != 0, not the integer (a 2 stays true, not 2)', () => {
    const low = lowerGraph(parseFxGraph('g.py', ['class g(torch.nn.Module):', '    def forward(self, v: "i64[3]"):', '        b: "b8[3]" = torch.ops.aten._to_copy.default(v, dtype = torch.bool)', '        return (b,)'].join('\n')));
    assert.deepEqual(returned(low, run(low, { v: [0, 2, -1] }), 0), [0, 1, 1]);
  });
});

describe('empty selections (plans/import/aten-empty.ts: an expert that receives no token)', () => {
  // Consistent scores: top-2 routing [[0, 2], [1, 0], [0, 1], [0, 1]]; no token's first choice is expert 2.
  const S2 = [0.5, 0.1, 0.4, 0.3, 0.6, 0.1, 0.6, 0.3, 0.1, 0.7, 0.2, 0.1];
  const head = [
    'class g(torch.nn.Module):',
    '    def forward(self, s: "f32[4, 3]", x: "f32[4, 2]"):',
    '        topk = torch.ops.aten.topk.default(s, 2)',
    '        v: "f32[4, 2]" = topk[0]',
    '        i: "i64[4, 2]" = topk[1]',
    '        r: "i64[4, 2]" = torch.ops.planproof.routing.default(i, [0, 2, 1, 0, 0, 1, 0, 1])',
    '        first: "i64[4]" = torch.ops.aten.select.int(r, 1, 0)',
    '        m: "b8[4]" = torch.ops.aten.eq.Scalar(first, 2)',
    '        pm: "i64[0, 1]" = torch.ops.planproof.positions.default(m, [])',
    '        sel: "f32[0, 2]" = torch.ops.aten.index.Tensor(x, [m])',
  ];
  const lower = (...body: string[]): Lowered => lowerGraph(parseFxGraph('g.py', [...head, ...body].join('\n')));
  const out = (low: Lowered): number[] => returned(low, run(low, { s: S2, x: X }), 0);

  it('x[mask] = expert(x[mask]) selecting nothing leaves x as it was (element-wise ops on the empty rows stay empty); the routing is pinned', () => {
    const low = lower('        y: "f32[0, 2]" = torch.ops.aten.mul.Tensor(sel, 10.0)', '        o: "f32[4, 2]" = torch.ops.aten.index_put.default(x, [m], y)', '        return (o,)');
    // PyTorch: y is empty, o equals x.
    assert.deepEqual(out(low), X);
    assert.equal(low.reads.length, 1);
    assert.match(low.reads[0] ?? '', /the routing choices 'r' pinned to those the run made \(the value read at g\.py:\d+ \(the positions of a mask\) depends on them\)/);
  });

  it("mm contracting the empty rows (a linear's weight gradient) is zeros", () => {
    const low = lower('        t: "f32[2, 0]" = torch.ops.aten.t.default(sel)', '        w: "f32[2, 2]" = torch.ops.aten.mm.default(t, sel)', '        return (w,)');
    assert.deepEqual(out(low), [0, 0, 0, 0]);
  });

  it('sum over the empty dim (a bias gradient) is zeros', () => {
    assert.deepEqual(out(lower('        b: "f32[2]" = torch.ops.aten.sum.dim_IntList(sel, [0])', '        return (b,)')), [0, 0]);
  });

  it("index_add_ of no rows (Mixtral's final_hidden_states.index_add_(0, top_x, ...)) leaves the target; the name read afterwards holds it", () => {
    const low = lower('        c: "f32[4, 2]" = torch.ops.aten.clone.default(x)', '        u = torch.ops.aten.unbind.int(pm, 1)', '        top_x: "i64[0]" = u[0]', '        a: "f32[4, 2]" = torch.ops.aten.index_add_.default(c, 0, top_x, sel)', '        return (c,)');
    assert.deepEqual(out(low), X);
  });

  it('cat with an empty piece is the cat of the others', () => {
    assert.deepEqual(out(lower('        k: "f32[4, 2]" = torch.ops.aten.cat.default([x, sel])', '        return (k,)')), X);
  });

  it('embedding_dense_backward of no ids is zeros of the table', () => {
    const low = lower('        u = torch.ops.aten.unbind.int(pm, 1)', '        ids: "i64[0]" = u[0]', '        e: "f32[3, 2]" = torch.ops.aten.embedding_dense_backward.default(sel, ids, 3, -1, False)', '        return (e,)');
    assert.deepEqual(out(low), [0, 0, 0, 0, 0, 0]);
  });

  it("split_with_sizes with a 0 (recv.split(counts) where a peer sent no rows) gives an empty piece; a slice of length 0 is empty", () => {
    const text = [
      'class g(torch.nn.Module):',
      '    def forward(self, x: "f32[4, 2]"):',
      '        sp = torch.ops.aten.split_with_sizes.default(x, [0, 3, 0, 1])',
      '        a: "f32[0, 2]" = sp[0]',
      '        b: "f32[3, 2]" = sp[1]',
      '        c: "f32[1, 2]" = sp[3]',
      '        z: "f32[0, 2]" = torch.ops.aten.slice.Tensor(x, 0, 2, 2)',
      '        k: "f32[4, 2]" = torch.ops.aten.cat.default([a, b, z, c])',
      '        return (k,)',
    ].join('\n');
    const low = lowerGraph(parseFxGraph('g.py', text));
    assert.deepEqual(returned(low, run(low, { x: X }), 0), X);
  });

  it('refused: mean over zero elements (NaN in PyTorch), an op with no rule for zero elements, an empty output, an empty mask computed from data', () => {
    assert.throws(() => lower('        a: "f32[2]" = torch.ops.aten.mean.dim(sel, [0])', '        return (a,)'), /the mean over zero elements \(an empty tensor\) is NaN in PyTorch/);
    assert.throws(() => lower('        a: "f32[2]" = torch.ops.aten.amax.default(sel, [0])', '        return (a,)'), /aten\.amax\.default reads a tensor with no elements[^\n]*no rule says what it computes on zero elements/);
    assert.throws(() => lower('        return (sel,)'), /a tensor with no elements \[0, 2\][^\n]*is read by an op with no rule for zero elements/);
    const fromData = ['class g(torch.nn.Module):', '    def forward(self, x: "f32[4, 2]"):', '        m: "b8[4, 2]" = torch.ops.aten.gt.Scalar(x, 100.0)', '        pm: "i64[0, 2]" = torch.ops.planproof.positions.default(m, [])', '        sel: "f32[0]" = torch.ops.aten.index.Tensor(x, [m])', '        o: "f32[4, 2]" = torch.ops.aten.index_put.default(x, [m], sel)', '        return (o,)'].join('\n');
    assert.throws(() => lowerGraph(parseFxGraph('g.py', fromData)), /the mask depends on 'x', not only on routing choices/);
  });

  it("a fill x[mask] = 0 by a data mask that selected nothing in the run is a where (its positions are never read); reading those positions is refused", () => {
    // Megatron's vocab-parallel embedding: `masked_input[input_mask] = 0` where no id fell outside
    // the shard in the captured run. The positions are written but the fill never reads them.
    const head = ['class g(torch.nn.Module):', '    def forward(self, x: "f32[4, 2]"):', '        m: "b8[4, 2]" = torch.ops.aten.lt.Scalar(x, 0.0)', '        pm: "i64[0, 2]" = torch.ops.planproof.positions.default(m, [])'];
    const fill = [...head, '        z: "f32[]" = torch.ops.aten.full.default([], 0.0)', '        o: "f32[4, 2]" = torch.ops.aten.index_put_.default(x, [m], z)', '        return (o,)'].join('\n');
    const low = lowerGraph(parseFxGraph('g.py', fill));
    // On inputs where the mask does select (negative entries), the fill is applied: a where, not the run's empty selection.
    assert.deepEqual(returned(low, run(low, { x: [1, -2, 3, -4, 5, 6, -7, 8] }), 0), [1, 0, 3, 0, 5, 6, 0, 8]);
    const read = [...head, '        r: "i64[0]" = torch.ops.aten.select.int(pm, 1, 0)', '        s: "f32[0, 2]" = torch.ops.aten.index_select.default(x, 0, r)', '        t: "f32[2]" = torch.ops.aten.sum.dim_IntList(s, [0])', '        return (t,)'].join('\n');
    assert.throws(() => lowerGraph(parseFxGraph('g.py', read)), /the mask depends on 'x', not only on routing choices/);
  });
});
