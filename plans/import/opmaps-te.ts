/**
 * The `te` op map: Transformer Engine 1.x's TorchScript ops (`torch.ops.tex_ts.*`, registered
 * in transformer_engine/pytorch/csrc/ts_fp8_op.cpp; TE's Python calls them for LayerNorm,
 * RMSNorm, GELU and every GEMM, so they are what a traced TE model prints). Only the non-fp8
 * forms are mapped, each to what TE's CUDA kernel computes (transformer_engine/common): an fp8
 * output or operand is a quantization, not an exact function of its input, so those calls are
 * refused by name, never mapped as an identity. Dtype arguments are TE's DType enum as ints
 * (kFloat32 3, kFloat16 4, kBFloat16 5, kFloat8E4M3 6, kFloat8E5M2 7).
 */
import type { OpMap, OpMapCase, OpMapEntry } from './opmap.js';

const FP8 = { in: [6, 7] };
const REAL = { in: [3, 4, 5] };

/** LayerNorm over the last dim (the weight's shape); zero-centered gamma scales by 1 + weight. */
const ln = (w: string): string => `r = torch.ops.aten.native_layer_norm.default(input, normalized_shape, ${w}, bias, eps)\ny = r[0]\nreturn y`;
/** RMSNorm as TE's rmsnorm kernel: x * rsqrt(mean(x^2, -1) + eps) * gamma. */
const rms = (w: string): string =>
  ['p = torch.ops.aten.pow.Tensor_Scalar(input, 2)', 'm = torch.ops.aten.mean.dim(p, [-1], True)', 'a = torch.ops.aten.add.Tensor(m, eps)', 'q = torch.ops.aten.rsqrt.default(a)', 'n = torch.ops.aten.mul.Tensor(input, q)', `y = torch.ops.aten.mul.Tensor(n, ${w})`, 'return y'].join('\n');
const GAMMA1 = 'g = torch.ops.aten.add.Tensor(weight, 1)\n';
/** A zero_centered_gamma flag that is neither True nor False (not a literal) is refused naming it. */
const gammaCases = (body: (w: string) => string): OpMapCase[] => [
  { when: { zero_centered_gamma: false }, body: body('weight') },
  { when: { zero_centered_gamma: true }, body: GAMMA1 + body('g') },
];

/**
 * TE's gelu (common/util/math.h): the tanh approximation with TE's own float constants,
 * x * (0.5 + 0.5 * tanh(x * (0.79788456 + 0.03567741 * x^2))). These are not ATen's
 * gelu(approximate='tanh') constants (sqrt(2/pi), 0.044715 * sqrt(2/pi)) as exact reals, so the
 * body spells TE's formula rather than calling aten.gelu.
 */
const GELU = [
  'x2 = torch.ops.aten.mul.Tensor(input, input)',
  'a = torch.ops.aten.mul.Tensor(x2, 0.03567741)',
  'b = torch.ops.aten.add.Tensor(a, 0.79788456)',
  'c = torch.ops.aten.mul.Tensor(input, b)',
  't = torch.ops.aten.tanh.default(c)',
  'h = torch.ops.aten.mul.Tensor(t, 0.5)',
  'k = torch.ops.aten.add.Tensor(h, 0.5)',
  'y = torch.ops.aten.mul.Tensor(input, k)',
  'return y',
].join('\n');

const GEMM_ARGS = ['A', 'A_scale_inverse', 'A_fp8_tensor', 'A_type', 'transa', 'B', 'B_scale_inverse', 'B_fp8_tensor', 'B_type', 'transb', 'D', 'D_scale', 'D_type', 'D_amax', 'bias', 'bias_type', 'pre_gelu_out', 'grad', 'workspace', 'workspaceSize', 'accumulate', 'use_split_accumulator'];
/**
 * te_gemm is cuBLAS column-major: on row-major tensors it computes D = op(B) @ op(A), op(X)
 * being X^T under its flag (TE's Linear forward is layout "TN": D = inp @ weight^T).
 */
const gemm = (transa: boolean, transb: boolean): OpMapCase => ({
  when: { A_type: REAL, B_type: REAL, D_type: REAL, transa, transb, bias: { empty: true }, pre_gelu_out: { empty: true }, accumulate: false },
  body: [
    ...(transa ? ['a = torch.ops.aten.t.default(A)'] : []),
    ...(transb ? ['b = torch.ops.aten.t.default(B)'] : []),
    `d = torch.ops.aten.mm.default(${transb ? 'b' : 'B'}, ${transa ? 'a' : 'A'})`,
    'return d',
  ].join('\n'),
});

/** An fp8 op: refused whatever its arguments. */
const fp8 = (args: string[], why: string): OpMapEntry => ({ doc: `refused: ${why}`, args, cases: [{ when: {}, refuse: `${why}: not mapped (an fp8 cast is never taken as the identity)` }] });
const QUANT = 'quantizes to fp8, which is not an exact function of its input';

export const te: OpMap = {
  format: 'planproof-opmap/v1',
  ops: {
    'tex_ts.layernorm_fwd_inf_ts.default': {
      doc: 'TE layernorm_fwd_inf(input, weight, bias, eps, sm_margin, zero_centered_gamma): the normalized output over the last dim (sm_margin only schedules)',
      args: ['input', 'weight', 'bias', 'eps', 'sm_margin', 'zero_centered_gamma'],
      sizes: { normalized_shape: 'weight' },
      cases: gammaCases(ln),
    },
    'tex_ts.rmsnorm_fwd_inf_ts.default': {
      doc: 'TE rmsnorm_fwd_inf(input, weight, eps, sm_margin, zero_centered_gamma): x * rsqrt(mean(x^2, -1) + eps) * gamma',
      args: ['input', 'weight', 'eps', 'sm_margin', 'zero_centered_gamma'],
      cases: gammaCases(rms),
    },
    'tex_ts.gelu_ts.default': {
      doc: "TE gelu(input, scale, amax, scale_inv, fp8_tensor, otype): TE's tanh-approximate GELU; with a non-fp8 otype the fp8 scaling arguments are not read (common/util/vectorized_pointwise.h)",
      args: ['input', 'scale', 'amax', 'scale_inv', 'fp8_tensor', 'otype'],
      cases: [
        { when: { otype: FP8 }, refuse: 'gelu_ts with an fp8 otype (6, 7) quantizes its output to fp8: not mapped' },
        { when: { otype: REAL }, body: GELU },
      ],
    },
    'tex_ts.te_gemm_ts.default': {
      doc: 'TE te_gemm (22 arguments): D = op(B) @ op(A) when A, B and D are fp32/fp16/bf16, with no bias, no GELU epilogue and accumulate False',
      args: GEMM_ARGS,
      cases: [
        { when: { A_type: FP8 }, refuse: 'A is fp8 (A_type 6 or 7): an fp8 GEMM reads quantized operands and their scale inverses: not mapped' },
        { when: { B_type: FP8 }, refuse: 'B is fp8 (B_type 6 or 7): an fp8 GEMM reads quantized operands and their scale inverses: not mapped' },
        { when: { D_type: FP8 }, refuse: 'D is fp8 (D_type 6 or 7): the product is quantized: not mapped' },
        { when: { bias: { empty: false } }, refuse: 'a bias is given (the BIAS epilogue, or the bias gradient it writes when grad): not mapped' },
        { when: { pre_gelu_out: { empty: false } }, refuse: 'pre_gelu_out is given (the GELU or dGELU epilogue): not mapped' },
        { when: { accumulate: true }, refuse: "accumulate adds the product to D's previous contents: not mapped" },
        gemm(true, false),
        gemm(false, false),
        gemm(false, true),
        gemm(true, true),
      ],
    },
    'tex_ts.cast_to_fp8_ts.default': fp8(['input', 'scale', 'amax', 'scale_inv', 'fp8_tensor', 'otype'], `cast_to_fp8_ts ${QUANT}`),
    'tex_ts.cast_to_fp8_noalloc_ts.default': fp8(['input', 'scale', 'output', 'amax', 'scale_inv', 'fp8_tensor', 'otype'], `cast_to_fp8_noalloc_ts ${QUANT}`),
    'tex_ts.cast_from_fp8_ts.default': fp8(['input', 'scale_inv', 'fp8_tensor', 'itype', 'otype'], 'cast_from_fp8_ts reads an fp8 tensor, whose values an fp8 cast rounded'),
    'tex_ts.layernorm_fwd_fp8_inf_ts.default': fp8(['input', 'weight', 'bias', 'eps', 'scale', 'amax', 'scale_inv', 'fp8_tensor', 'otype', 'sm_margin', 'zero_centered_gamma'], `layernorm_fwd_fp8_inf_ts ${QUANT}`),
    'tex_ts.rmsnorm_fwd_fp8_inf_ts.default': fp8(['input', 'weight', 'eps', 'scale', 'amax', 'scale_inv', 'fp8_tensor', 'otype', 'sm_margin', 'zero_centered_gamma'], `rmsnorm_fwd_fp8_inf_ts ${QUANT}`),
  },
};
