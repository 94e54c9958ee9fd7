/**
 * The op maps planproof ships (plans/import/opmap.ts says what a map is): what the custom
 * kernels of common training and serving stacks compute, as ATen. Each entry follows the
 * kernel's published reference semantics (apex's FusedLayerNormAffineFunction, vLLM's
 * `_custom_ops`); a user with another version of a kernel writes their own map.
 */
import type { OpMap } from './opmap.js';

const apex: OpMap = {
  format: 'planproof-opmap/v1',
  ops: {
    'apex.fused_layer_norm_affine_fwd.default': {
      doc: 'apex FusedLayerNormAffineFunction.forward: (output, mean, invvar), the statistics saved for the backward',
      args: ['input', 'weight', 'bias', 'normalized_shape', 'eps'],
      body: 'r = torch.ops.aten.native_layer_norm.default(input, normalized_shape, weight, bias, eps)\nreturn r',
    },
    'apex.fused_layer_norm_affine_bwd.default': {
      doc: 'apex FusedLayerNormAffineFunction.backward: (grad_input, grad_weight, grad_bias) from the saved mean and invvar',
      args: ['grad_output', 'mean', 'invvar', 'input', 'normalized_shape', 'weight', 'bias', 'eps', 'memory_efficient'],
      body: 'r = torch.ops.aten.native_layer_norm_backward.default(grad_output, input, normalized_shape, mean, invvar, weight, bias, [True, True, True])\nreturn r',
    },
    'apex.fused_layer_norm_fwd.default': {
      doc: 'apex FusedLayerNormFunction.forward (no affine parameters)',
      args: ['input', 'normalized_shape', 'eps'],
      body: 'r = torch.ops.aten.native_layer_norm.default(input, normalized_shape, None, None, eps)\nreturn r',
    },
  },
};

/** Tracing markers: ops that log a tensor and return it unchanged (a graph tracer's probes). */
const tg: OpMap = {
  format: 'planproof-opmap/v1',
  ops: {
    'tg.log_tensor.default': { doc: 'returns its input', args: ['t', 's'], body: 'return t' },
    'tg.inplace_log_tensor.default': { doc: 'logs its input in place: the new value is the old', args: ['t', 's'], mutates: ['t'], body: 'return (t,)' },
  },
};

/** RMSNorm as vLLM's kernels compute it: x * rsqrt(mean(x^2, -1) + eps) * weight. */
const RMS = (x: string, out: string): string =>
  [`p = torch.ops.aten.pow.Tensor_Scalar(${x}, 2)`, 'm = torch.ops.aten.mean.dim(p, [-1], True)', 'a = torch.ops.aten.add.Tensor(m, epsilon)', 'r = torch.ops.aten.rsqrt.default(a)', `n = torch.ops.aten.mul.Tensor(${x}, r)`, `${out} = torch.ops.aten.mul.Tensor(n, weight)`].join('\n');

const vllm: OpMap = {
  format: 'planproof-opmap/v1',
  ops: {
    '_C.rms_norm.default': { doc: 'vLLM rms_norm(result!, input, weight, epsilon)', args: ['result', 'input', 'weight', 'epsilon'], mutates: ['result'], body: `${RMS('input', 'y')}\nreturn (y,)` },
    '_C.fused_add_rms_norm.default': {
      doc: 'vLLM fused_add_rms_norm(input!, residual!, weight, epsilon): residual += input; input = rms_norm(residual)',
      args: ['input', 'residual', 'weight', 'epsilon'],
      mutates: ['input', 'residual'],
      body: `s = torch.ops.aten.add.Tensor(input, residual)\n${RMS('s', 'y')}\nreturn (y, s)`,
    },
    '_C.silu_and_mul.default': {
      doc: 'vLLM silu_and_mul(out!, input): silu(input[..., :d]) * input[..., d:], d = input.size(-1) // 2',
      args: ['out', 'input'],
      mutates: ['out'],
      body: 'c = torch.ops.aten.chunk.default(input, 2, -1)\na = c[0]\nb = c[1]\ns = torch.ops.aten.silu.default(a)\ny = torch.ops.aten.mul.Tensor(s, b)\nreturn (y,)',
    },
    'vllm.all_reduce.default': { doc: "vLLM's tensor-parallel all-reduce (sum) over the named group", args: ['input', 'group_name'], body: "r = torch.ops._c10d_functional.all_reduce.default(input, 'sum', group_name)\nreturn r" },
  },
};

/** The shipped maps by name (`--op-map apex`, `"opMap": ["apex", "tg"]`). */
export const SHIPPED_OPMAPS: Readonly<Record<string, OpMap>> = { apex, tg, vllm };
