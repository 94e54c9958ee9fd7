/**
 * `nn.EmbeddingBag` / `F.embedding_bag` (issue 33: PyTorch's text classification tutorial),
 * the ATen ops `_embedding_bag` (and `_embedding_bag_forward_only`) and
 * `_embedding_bag_dense_backward`, lowered to planproof ops whose exact real meaning is the
 * kernel's value for non-decreasing offsets (docs/import.md, "EmbeddingBag"):
 *
 *   M[b, j]  = [o_b ≤ j]·[j < o_{b+1}]·[ids_j ≠ p]   (o_B = N: the last bag runs to the end;
 *                                                    p the padding_idx, no factor without one)
 *   out      = M · embedding(w, ids)        'sum'
 *            = (M · embedding(w, ids)) / max(Σ_j M[b, j], 1)   'mean' (an empty bag is 0)
 *   dw       = embedding_backward(Mᵀ · (g / max(Σ_j M[b, j], 1)), ids)   ('sum' without the division)
 *
 * The offsets stay symbolic (a graph's integer tensor, compared with positions), so the bags
 * are the program's on every input. The forward's other outputs (offset2bag, bag_size,
 * max_indices) are opaque: only the matching backward reads them (bag_size), through the bag
 * matrix above; any other reader is an import error.
 * Not supported (exit 2, with the reason): mode 'max', per_sample_weights, include_last_offset,
 * scale_grad_by_freq, sparse gradients, 2-D indices at the ATen level.
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, TensorVal, Val } from './lower.js';

const WHAT = 'the EmbeddingBag bags';
const MODES = ['sum', 'mean', 'max'] as const;

/** Refuses the arguments whose meaning is not lowered here; `at` maps each argument to its position. */
function refuseUnsupported(l: Lowerer, n: FxNode, at: Readonly<Record<string, number>>): void {
  const flag = (name: string): boolean => {
    const k = at[name];
    return k !== undefined && l.bool(l.arg(n, k, name), name, false);
  };
  const how = 'use mode "mean" or "sum" without it, or nn.Embedding and a sum over each bag';
  if (flag('scale_grad_by_freq')) l.fail(`${n.target}: scale_grad_by_freq=True is not supported; ${how}`);
  if (flag('sparse')) l.fail(`${n.target}: sparse=True (sparse gradients) is not supported; ${how}`);
  if (flag('include_last_offset')) l.fail(`${n.target}: include_last_offset=True is not supported; ${how}`);
  const psw = at['per_sample_weights'];
  const w = psw === undefined ? undefined : l.arg(n, psw, 'per_sample_weights');
  if (w !== undefined && w.kind !== 'none') l.fail(`${n.target}: per_sample_weights is not supported; ${how}`);
}

/** The padding_idx argument at position k: -1 (None in the graph) when there is none. */
function paddingIdx(l: Lowerer, n: FxNode, k: number): number {
  const p = l.arg(n, k, 'padding_idx');
  return p === undefined || p.kind === 'none' ? -1 : l.int(p, 'padding_idx');
}

function modeOf(l: Lowerer, n: FxNode, k: number): 'sum' | 'mean' {
  const m = MODES[l.int(l.arg(n, k, 'mode'), 'mode', 0)] ?? l.fail(`${n.target}: unknown mode`);
  if (m === 'max') l.fail(`${n.target}: mode "max" is not supported (its backward routes each gradient to the arg-max row); use mode "mean" or "sum"`);
  return m;
}

/**
 * M [B, N] (weight dtype, 0/1) and max(Σ_j M[b, j], 1) as [B, 1], from offsets [B] over the N
 * positions of ids; a position holding the padding index `pad` (≥ 0) is in no bag (ATen skips it
 * in the sum, the mean's count and the gradient).
 */
function bags(l: Lowerer, offsets: TensorVal, ids: TensorVal, pad: number, dtype: string): { m: TensorVal; denom: TensorVal } {
  const N = ids.shape[0] as number;
  const B = offsets.shape[0] as number;
  const o = offsets.dtype;
  const start = l.one('reshape', [offsets], { shape: [B, 1] }, undefined, o);
  const last = l.one('reshape', [l.constant(N)], { shape: [1] }, undefined, o);
  const next = B === 1 ? last : l.one('concat', [l.one('slice', [offsets], { dim: 0, start: 1, end: B }, undefined, o), last], { dim: 0 }, undefined, o);
  const end = l.one('reshape', [next], { shape: [B, 1] }, undefined, o);
  const j = l.one('iota', [l.constant(0)], { shape: [B, N], dim: 1, step: 1 }, undefined, 'int64');
  const from = l.one('compare', [start, j], { rel: 'le' }, undefined, 'bool');
  const to = l.one('compare', [j, end], { rel: 'lt' }, undefined, 'bool');
  const inRange = l.one('mul', [from, to], {}, undefined, dtype);
  const kept = pad < 0 ? undefined : l.one('compare', [l.one('reshape', [ids], { shape: [1, N] }, undefined, ids.dtype), l.constant(pad)], { rel: 'ne' }, undefined, 'bool');
  const m = kept === undefined ? inRange : l.one('mul', [inRange, kept], {}, undefined, dtype);
  const denom = l.one('maximum', [l.one('sum', [m], { dims: [1], keepdim: true }, undefined, dtype), l.constant(1)], {}, undefined, dtype);
  return { m, denom };
}

/** _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset, padding_idx). */
function forward(l: Lowerer, n: FxNode): Val {
  refuseUnsupported(l, n, { scale_grad_by_freq: 3, sparse: 5, per_sample_weights: 6, include_last_offset: 7 });
  const w = l.tensor(l.arg(n, 0, 'weight'), 'weight');
  const ids = l.tensor(l.arg(n, 1, 'indices'), 'indices');
  const offsets = l.tensor(l.arg(n, 2, 'offsets'), 'offsets');
  const mode = modeOf(l, n, 4);
  if (ids.shape.length !== 1 || offsets.shape.length !== 1 || w.shape.length !== 2) l.fail(`${n.target}: expected 1-D indices and offsets and a 2-D weight`);
  const N = ids.shape[0] as number;
  const B = offsets.shape[0] as number;
  if (N === 0 || B === 0) l.fail(`${n.target}: no indices or no bags (an empty tensor)`);
  const pad = paddingIdx(l, n, 8);
  const { m, denom } = bags(l, offsets, ids, pad, w.dtype);
  const rows = l.one('embedding', [ids, w], {}, undefined, w.dtype);
  const summed = l.one('matmul', [m, rows], {}, mode === 'sum' ? `${l.out(n)}.0` : undefined, w.dtype);
  const out = mode === 'sum' ? summed : l.one('div', [summed, denom], {}, `${l.out(n)}.0`, w.dtype);
  const saved: OpaqueVal = { kind: 'opaque', what: WHAT, data: { mode, ids: ids.id, pad }, tensors: { m, denom } };
  return l.bind(n, { kind: 'list', items: [out, saved, saved, saved] });
}

/** _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx). */
function denseBackward(l: Lowerer, n: FxNode): Val {
  refuseUnsupported(l, n, { scale_grad_by_freq: 6, per_sample_weights: 8 });
  const g = l.tensor(l.arg(n, 0, 'grad'), 'grad');
  const ids = l.tensor(l.arg(n, 1, 'indices'), 'indices');
  // The bags are read from bag_size, which autograd always passes from the forward (in mode
  // 'sum' ATen returns an empty offset2bag and the backward graph recomputes it from the
  // offsets: that copy is not read, and its ops are pruned).
  const saved = l.val(l.arg(n, 3, 'bag_size'), 'bag_size');
  if (saved.kind !== 'opaque' || saved.what !== WHAT || saved.data['ids'] !== ids.id || saved.tensors === undefined) {
    l.fail(`${n.target}: expected bag_size of _embedding_bag over the same indices`);
  }
  const mode = modeOf(l, n, 7);
  if (saved.data['mode'] !== mode) l.fail(`${n.target}: mode ${mode}, but the forward's was ${String(saved.data['mode'])}`);
  if (saved.data['pad'] !== paddingIdx(l, n, 9)) l.fail(`${n.target}: padding_idx ${paddingIdx(l, n, 9)}, but the forward's was ${String(saved.data['pad'])}`);
  const m = saved.tensors['m'] as TensorVal;
  const denom = saved.tensors['denom'] as TensorVal;
  const per = mode === 'mean' ? l.one('div', [g, denom], {}, undefined, g.dtype) : g;
  const mt = l.one('transpose', [m], { dim0: 0, dim1: 1 }, undefined, m.dtype);
  const atIds = l.one('matmul', [mt, per], {}, undefined, g.dtype);
  return l.bind(n, l.one('embedding_backward', [atIds, ids], { num_embeddings: l.int(l.arg(n, 5, 'num_weights'), 'num_weights') }, l.out(n), g.dtype));
}

export const BAG_RULES: Record<string, Rule> = {
  'aten._embedding_bag': forward,
  'aten._embedding_bag_forward_only': forward,
  'aten._embedding_bag_dense_backward': denseBackward,
};
