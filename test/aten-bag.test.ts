/**
 * nn.EmbeddingBag (plans/import/aten-bag.ts): what is lowered (modes 'mean' and 'sum', the bags
 * from symbolic offsets, padding_idx) and what is refused with the reason (mode 'max', per-sample
 * weights, include_last_offset, a reader of the forward's bookkeeping outputs other than the
 * backward). The values are checked against PyTorch's, forward and backward, in
 * test/capture.test.ts (the embbag_textcls_ddp fixtures).
 */
import { strict as assert } from 'node:assert';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';

function graph(call: string, after: readonly string[] = ['o: "f32[2, 3]" = eb[0]', 'return (o,)']): string {
  const body = [`eb = torch.ops.aten._embedding_bag.default(${call})`, ...after];
  return ['class G(torch.nn.Module):', '    def forward(self, w: "f32[5, 3]", ids: "i64[4]", off: "i64[2]", p: "f32[4]"):', ...body.map((b) => `        ${b}`)].join('\n') + '\n';
}
const lower = (text: string): ReturnType<typeof lowerGraph> => lowerGraph(parseFxGraph('g.py', text));

describe('aten-bag: EmbeddingBag', () => {
  it("modes 'sum' and 'mean' lower to the bag matrix times the embedded rows ('mean' divided by the bag sizes)", () => {
    const sum = lower(graph('w, ids, off, False, 0, False, None')).ops.map((o) => o.op);
    const mean = lower(graph('w, ids, off, False, 1, False, None')).ops.map((o) => o.op);
    for (const ops of [sum, mean]) for (const op of ['iota', 'compare', 'embedding', 'matmul']) assert.ok(ops.includes(op), `${op} in ${ops.join(' ')}`);
    assert.ok(mean.includes('div') && !sum.includes('div'));
  });
  it('the backward reads the forward\'s bags; mode "max", per_sample_weights and include_last_offset are refused', () => {
    const back = graph('w, ids, off, False, 1, False, None', [
      'o: "f32[2, 3]" = eb[0]',
      'o2b: "i64[4]" = eb[1]',
      'bs: "i64[2]" = eb[2]',
      'mi: "i64[2]" = eb[3]',
      'dw: "f32[5, 3]" = torch.ops.aten._embedding_bag_dense_backward.default(o, ids, o2b, bs, mi, 5, False, 1, None)',
      'return (dw,)',
    ]);
    assert.ok(lower(back).ops.some((o) => o.op === 'embedding_backward'));
    assert.throws(() => lower(graph('w, ids, off, False, 2, False, None')), /mode "max" is not supported/);
    assert.throws(() => lower(graph('w, ids, off, False, 0, False, p')), /per_sample_weights is not supported/);
    assert.throws(() => lower(graph('w, ids, off, False, 1, False, None, True')), /include_last_offset=True is not supported/);
    // padding_idx: the positions holding it are in no bag (one more factor in the bag matrix).
    assert.ok(lower(graph('w, ids, off, False, 1, False, None, False, 0')).ops.filter((o) => o.op === 'compare').length > lower(graph('w, ids, off, False, 1, False, None')).ops.filter((o) => o.op === 'compare').length);
  });
  it("the forward's offset2bag read by another op is an import error, not a value", () => {
    const text = graph('w, ids, off, False, 1, False, None', ['o2b: "i64[4]" = eb[1]', 'a: "i64[4]" = torch.ops.aten.add.Tensor(o2b, 1)', 'return (a,)']);
    assert.throws(() => lower(text), /the EmbeddingBag bags, which only its matching backward op may read/);
  });
  it("a write through a row's slice (pad_sequence's copy_ into full[i, :n]) is written into the padded tensor, which stays readable", () => {
    const text = [
      'class G(torch.nn.Module):',
      '    def forward(self, a: "f32[2]", w: "f32[3, 2]"):',
      '        full: "f32[2, 3]" = torch.ops.aten.full.default([2, 3], 0.0)',
      '        row: "f32[3]" = torch.ops.aten.select.int(full, 0, 1)',
      '        head: "f32[2]" = torch.ops.aten.slice.Tensor(row, 0, 0, 2)',
      '        c: "f32[2]" = torch.ops.aten.copy_.default(head, a)',
      '        mm: "f32[2, 2]" = torch.ops.aten.mm.default(full, w)',
      '        return (mm,)',
    ].join('\n');
    // (before, select was a fresh tensor: the write was dropped and full read as zeros)
    const ops = lower(text + '\n').ops.map((o) => o.op);
    assert.ok(ops.filter((o) => o === 'concat').length >= 2, ops.join(' '));
  });
});
