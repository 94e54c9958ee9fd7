/**
 * `-inf` fills before a softmax (issue 33): `scores.masked_fill(mask, float('-inf'))` then
 * `softmax`, the causal mask as people write it (nanoGPT, many attention implementations).
 * Infinities are not exact real values, so the filled tensor is not a tensor here: it is a
 * value only softmax may read, and softmax of it is what it computes in exact arithmetic,
 *
 *   softmax(x with -inf where m)_i = e^{x_i}·[¬m_i] / Σ_j e^{x_j}·[¬m_j]
 *                                  = softmax(x)_i·[¬m_i] / Σ_j softmax(x)_j·[¬m_j],
 *
 * (the softmax of the unfilled scores, zeroed where masked and renormalized over the row),
 * each step an exact identity for a row with at least one unmasked entry (a fully masked row is
 * NaN in torch and a division by zero here). Anything else reading the filled tensor is an
 * import error naming the line. Its gradient needs nothing more: softmax's backward reads the
 * softmax output, and masked_fill's backward fills the gradient with the finite 0.
 */
import type { FxArg, FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, TensorVal, Val } from './lower.js';

const WHAT = 'a tensor filled with -inf (only softmax may read it)';

/** Is `a` the Python number -inf? */
export function isNegInf(a: FxArg | undefined): boolean {
  return a?.kind === 'num' && a.value === -Infinity;
}

/** x with -inf where `where` (0/1, broadcast to x) holds: an opaque value softmax reads. */
export function negInfFilled(l: Lowerer, n: FxNode, x: TensorVal, where: TensorVal): OpaqueVal {
  const loc = n.loc === undefined ? `${l.g.file}:${n.line}` : n.loc;
  return {
    kind: 'opaque',
    what: WHAT,
    data: { shape: JSON.stringify(x.shape), dtype: x.dtype },
    tensors: { x, where },
    materialize: () => l.fail(`the -inf fill made at ${loc} is read by an op other than softmax: infinities are not exact real values, so only softmax(masked_fill(x, mask, -inf)) is supported (it is exact: the masked entries get probability 0)`),
  };
}

/** The value bound to `a`, when it is an -inf fill. */
export function negInfOf(l: Lowerer, a: FxArg | undefined): OpaqueVal | undefined {
  if (a?.kind !== 'name') return undefined;
  const v = l.val(a, 'self');
  return v.kind === 'opaque' && v.what === WHAT ? v : undefined;
}

/** softmax over `dim` of an -inf fill: the unfilled scores' softmax, zeroed where filled and renormalized. */
export function maskedSoftmax(l: Lowerer, n: FxNode, filled: OpaqueVal, dim: number): Val {
  const x = filled.tensors?.['x'] as TensorVal;
  const where = filled.tensors?.['where'] as TensorVal;
  const keep = l.one('compare', [where, l.constant(0)], { rel: 'eq' }, undefined, 'bool');
  const p = l.one('softmax', [x], { dim });
  const kept = l.one('mul', [p, keep], {}, undefined, x.dtype);
  const d = dim < 0 ? dim + x.shape.length : dim;
  const total = l.one('sum', [kept], { dims: [d], keepdim: true });
  return l.bind(n, l.one('div', [kept, total], {}, l.out(n)));
}
