/**
 * The op maps planproof ships (plans/import/opmap.ts says what a map is): what the custom
 * kernels of common training and serving stacks compute, as ATen. Each entry follows the
 * kernel's published reference semantics (apex's FusedLayerNormAffineFunction, vLLM's
 * `_custom_ops` and `forward_native`, Transformer Engine's TorchScript ops); a user with another
 * version of a kernel writes their own map.
 */
import type { OpMap } from './opmap.js';
import { te } from './opmaps-te.js';

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

/**
 * vLLM's rotary embedding of one tensor (`x`, new value `out`) with `cos`, `sin` ([tokens, 1,
 * rot_dim / 2], gathered by position): its view as [tokens, heads, head_size], the first rot_dim
 * dims rotated as forward_native does, the rest unchanged (partial rotary), viewed back. NeoX
 * pairs dim i with i + rot_dim / 2; GPT-J pairs 2i with 2i + 1 (x[..., ::2], x[..., 1::2]).
 */
const rotate = (x: string, shape: string, out: string, neox: boolean): string => {
  const a = (s: string): string => `${x}_${s}`;
  const halves = neox
    ? [`${a('h')} = torch.ops.aten.chunk.default(${a('r')}, 2, -1)`, `${a('1')} = ${a('h')}[0]`, `${a('2')} = ${a('h')}[1]`]
    : [`${a('u')} = torch.ops.aten.unflatten.int(${a('r')}, -1, [-1, 2])`, `${a('1')} = torch.ops.aten.select.int(${a('u')}, -1, 0)`, `${a('2')} = torch.ops.aten.select.int(${a('u')}, -1, 1)`];
  const join = neox ? [`${a('o')} = torch.ops.aten.cat.default([${a('o1')}, ${a('o2')}], -1)`] : [`${a('st')} = torch.ops.aten.stack.default([${a('o1')}, ${a('o2')}], -1)`, `${a('o')} = torch.ops.aten.view.default(${a('st')}, [num_tokens, -1, rot_dim])`];
  return [
    `${a('v')} = torch.ops.aten.view.default(${x}, [num_tokens, -1, head_size])`,
    `${a('r')} = torch.ops.aten.slice.Tensor(${a('v')}, -1, 0, rot_dim)`,
    ...halves,
    `${a('a')} = torch.ops.aten.mul.Tensor(${a('1')}, cos)`,
    `${a('b')} = torch.ops.aten.mul.Tensor(${a('2')}, sin)`,
    `${a('o1')} = torch.ops.aten.sub.Tensor(${a('a')}, ${a('b')})`,
    `${a('c')} = torch.ops.aten.mul.Tensor(${a('2')}, cos)`,
    `${a('d')} = torch.ops.aten.mul.Tensor(${a('1')}, sin)`,
    `${a('o2')} = torch.ops.aten.add.Tensor(${a('c')}, ${a('d')})`,
    ...join,
    `${a('s')} = torch.ops.aten.slice_scatter.default(${a('v')}, ${a('o')}, -1, 0, rot_dim)`,
    `${out} = torch.ops.aten.view.default(${a('s')}, ${shape})`,
  ].join('\n');
};
/** The rotary body: cos and sin rows of cos_sin_cache (cos first, then sin) at each position. */
const rotary = (neox: boolean): string =>
  [
    'p = torch.ops.aten.view.default(positions, [num_tokens])',
    'cs = torch.ops.aten.embedding.default(cos_sin_cache, p)',
    'c = torch.ops.aten.chunk.default(cs, 2, -1)',
    'c0 = c[0]',
    's0 = c[1]',
    'cos = torch.ops.aten.unsqueeze.default(c0, -2)',
    'sin = torch.ops.aten.unsqueeze.default(s0, -2)',
    rotate('query', 'query_shape', 'qn', neox),
    rotate('key', 'key_shape', 'kn', neox),
    'return (qn, kn)',
  ].join('\n');

/**
 * vLLM's attention as one causal sequence (FlashAttention's causal prefill): the query heads
 * grouped per key/value head by a view (query head h = g·G + j reads key/value head g), the
 * scores of each group one bmm, the future masked with -inf before the softmax (aten-neginf.ts).
 */
const UNIFIED_ATTENTION = [
  // [tokens, kv, G, hs] -> [kv, G, tokens, hs] -> [kv, G·tokens, hs]: each group's rows, query head by query head
  'q4 = torch.ops.aten.view.default(query, [num_tokens, kv_heads, -1, head_size])',
  'qp = torch.ops.aten.permute.default(q4, [1, 2, 0, 3])',
  'qr = torch.ops.aten.reshape.default(qp, [kv_heads, -1, head_size])',
  'kp = torch.ops.aten.permute.default(key, [1, 2, 0])',
  's = torch.ops.aten.bmm.default(qr, kp)',
  'hs = torch.ops.aten.scalar_tensor.default(head_size)',
  'scale = torch.ops.aten.rsqrt.default(hs)',
  'ss = torch.ops.aten.mul.Tensor(s, scale)',
  's4 = torch.ops.aten.view.default(ss, [kv_heads, -1, num_tokens, num_tokens])',
  'i = torch.ops.aten.arange.default(num_tokens)',
  'row = torch.ops.aten.view.default(i, [1, 1, num_tokens, 1])',
  'col = torch.ops.aten.view.default(i, [1, 1, 1, num_tokens])',
  'future = torch.ops.aten.gt.Tensor(col, row)',
  'f = torch.ops.aten.masked_fill.Scalar(s4, future, -inf)',
  'p = torch.ops.aten._softmax.default(f, -1, False)',
  'p3 = torch.ops.aten.view.default(p, [kv_heads, -1, num_tokens])',
  'vp = torch.ops.aten.permute.default(value, [1, 0, 2])',
  'o = torch.ops.aten.bmm.default(p3, vp)',
  'o4 = torch.ops.aten.view.default(o, [kv_heads, -1, num_tokens, head_size])',
  'op = torch.ops.aten.permute.default(o4, [2, 0, 1, 3])',
  'y = torch.ops.aten.reshape.default(op, [num_tokens, -1, head_size])',
  'return (y,)',
].join('\n');

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
    '_C.rotary_embedding.default': {
      doc: 'vLLM rotary_embedding(positions, query!, key!, head_size, cos_sin_cache, is_neox): RotaryEmbedding.forward_native on the first rot_dim = cos_sin_cache.size(1) dims of each head',
      args: ['positions', 'query', 'key', 'head_size', 'cos_sin_cache', 'is_neox'],
      mutates: ['query', 'key'],
      sizes: { num_tokens: ['positions', 0], rot_dim: ['cos_sin_cache', 1], query_shape: 'query', key_shape: 'key' },
      cases: [
        // (newer vLLM makes key optional: the query-only form is another kernel signature)
        { when: { key: null }, refuse: 'key is None (a query-only rotary): not mapped' },
        { when: { positions: { ndim: 1 }, is_neox: true }, body: rotary(true) },
        { when: { positions: { ndim: 1 }, is_neox: false }, body: rotary(false) },
        // Otherwise refused naming the arguments: is_neox must be a literal (the body differs), positions one dim of tokens.
      ],
    },
    'vllm.unified_attention_with_output.default': {
      doc: "vLLM unified_attention_with_output(query, key, value, output!, layer_name): causal scaled-dot-product attention, grouped-query, of one sequence (a prefill); query [tokens, heads, head_size], key and value [tokens, kv_heads, head_size], query head h reading key/value head h // (heads / kv_heads), scale head_size^-1/2",
      args: ['query', 'key', 'value', 'output', 'layer_name'],
      mutates: ['output'],
      sizes: { num_tokens: ['query', 0], kv_heads: ['key', 1], head_size: ['query', 2] },
      cases: [
        { when: { query: { ndim: 3 }, key: { ndim: 3 }, value: { ndim: 3 } }, body: UNIFIED_ATTENTION },
        // (a flattened [tokens, heads * head_size] query is a newer vLLM's form: the head size is then not in the graph)
      ],
    },
    'vllm.all_reduce.default': { doc: "vLLM's tensor-parallel all-reduce (sum) over the named group", args: ['input', 'group_name'], body: "r = torch.ops._c10d_functional.all_reduce.default(input, 'sum', group_name)\nreturn r" },
  },
};

/** The shipped maps by name (`--op-map apex`, `"opMap": ["apex", "tg"]`). */
export const SHIPPED_OPMAPS: Readonly<Record<string, OpMap>> = { apex, te, tg, vllm };
