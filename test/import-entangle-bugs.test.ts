/**
 * Issue 34: Entangle's reproduced bugs as published (test/fixtures/entangle-bugs). Bug 6, a loss
 * accumulated over two micro-batches without dividing by their number, is NOT EQUIVALENT with a
 * witness at the accumulated loss; the same graphs with each micro-batch's loss divided by 2 (the
 * fix) are VERIFIED. Bug 9, the SP LayerNorm weight gradient never all-reduced, imports at full
 * size and is never proved (UNKNOWN: no witness at 10^8 elements), every stage upstream of it
 * proved; with the all-reduce added (the fix) it is VERIFIED at tensor level.
 */
import { strict as assert } from 'node:assert';
import { verifyImportDir as verifyDir } from './helpers.js';

const GA = 'test/fixtures/entangle-bugs/grad_accumulation';
const LN = 'test/fixtures/entangle-bugs/layernorm';

/** Each micro-batch's loss divided by the number of micro-batches (2) before it is accumulated. */
const halved = (s: string): string =>
  s
    .replace(/(\n +)(add_1: "f32\[\]" = torch\.ops\.aten\.add\.Tensor\(arg4_1, )detach_2\)/, '$1half: "f32[]" = torch.ops.aten.div.Tensor(detach_2, 2)$1$2half)')
    .replace(/(\n +)(add_3: "f32\[\]" = torch\.ops\.aten\.add\.Tensor\(add_1, )detach_5\)/, '$1half_1: "f32[]" = torch.ops.aten.div.Tensor(detach_5, 2)$1$2half_1)');

/** The LayerNorm weight gradient all-reduced over the tensor-parallel group (Megatron's fix). */
const reduced = (s: string): string =>
  s.replace(
    /\n( +)getitem_58: "f16\[1536\]" = fused_layer_norm_affine_bwd\[1\]\n/,
    "\n$1getitem_58_p: \"f16[1536]\" = fused_layer_norm_affine_bwd[1]\n$1all_reduce_ln: \"f16[1536]\" = torch.ops._c10d_functional.all_reduce.default(getitem_58_p, 'sum', '12');  getitem_58_p = None\n$1getitem_58: \"f16[1536]\" = torch.ops._c10d_functional.wait_tensor.default(all_reduce_ln);  all_reduce_ln = None\n",
  );

describe("Entangle's reproduced bugs (examples/data of github.com/nyu-systems/Entangle)", function () {
  this.timeout(120_000);

  it('bug 6, gradient accumulation: the loss not divided by the number of micro-batches is NOT EQUIVALENT at the accumulated loss', async () => {
    const v = await verifyDir(GA);
    assert.equal(v.code, 1, JSON.stringify(v.stages));
    assert.equal(v.stages.find((s) => s.logical === 'loss_sum')?.status, 'not_equivalent', JSON.stringify(v.stages));
  });

  it('bug 6 fixed (each micro-batch loss divided by 2): VERIFIED', async () => {
    const v = await verifyDir(GA, [[/^rank0\.py$/, halved]]);
    assert.equal(v.code, 0, JSON.stringify(v.stages));
  });

  it('bug 9, SP LayerNorm gradient not all-reduced, at full size: imports; never proved at the gradient, every stage before it proved', async () => {
    const v = await verifyDir(LN);
    assert.notEqual(v.code, 0, JSON.stringify(v.stages));
    const open = v.stages.filter((s) => s.status !== 'proved').map((s) => s.logical);
    assert.deepEqual(open, ['grad.pre_mlp_layernorm.weight'], JSON.stringify(v.stages));
  });

  it('bug 9 fixed (the gradient all-reduced over the tensor-parallel group) at full size: VERIFIED', async () => {
    const v = await verifyDir(LN, [[/^rank0\.py$/, reduced], [/^rank1\.py$/, reduced]]);
    assert.equal(v.code, 0, JSON.stringify(v.stages));
  });
});
