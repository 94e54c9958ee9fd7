/**
 * `-inf` before a softmax (issue 33). Two ways people write the causal mask:
 *
 *   - a fill: `scores.masked_fill(mask, float('-inf'))` then `softmax` (nanoGPT);
 *   - an additive mask: a float tensor of 0 and -inf built once (`torch.full((T, T),
 *     float('-inf')).triu(1)`, a module buffer, `zeros.masked_fill(~causal, -inf)`) and added,
 *     `softmax(scores * scale + mask)` (Hugging Face, many nanoGPT forks).
 *
 * Infinities are not exact real values, so a tensor holding -inf is not a tensor here: it is a
 * pair (x, m) of a finite tensor and a 0/1 mask of x's shape, standing for the extended-real
 * tensor that is -inf where m = 1 and x elsewhere (x there is any finite value: 0 here). It is a
 * value only softmax may read. Each op below maps pairs to pairs, exactly as IEEE arithmetic
 * maps the extended reals (-inf + r = -inf + -inf = -inf; layout ops and copies move elements;
 * triu/tril put the finite 0 below/above the diagonal):
 *
 *   full(-inf)              = (0, 1)
 *   masked_fill(x, m, -inf) = (x, m)
 *   view / slice / expand / transpose / permute / detach / clone / float cast of (x, m)
 *                           = (op x, op m)
 *   triu_k (x, m)           = (triu_k x, triu_k m)       (and tril)
 *   (x, m) + t, t + (x, m)  = (x + t, m)                  (t finite: a tensor or a number)
 *   (x, m) + (y, n)         = (x + y, m ∨ n)
 *
 * and softmax of a pair is what it computes in exact arithmetic (e^{-inf} = 0),
 *
 *   softmax((x, m))_i = e^{x_i}·[¬m_i] / Σ_j e^{x_j}·[¬m_j]
 *                     = softmax(x)_i·[¬m_i] / Σ_j softmax(x)_j·[¬m_j],
 *
 * (the softmax of the finite part, zeroed where masked and renormalized), each step an exact
 * identity along any dim for a row with at least one unmasked entry (a fully masked row is NaN
 * in torch and a division by zero here). Anything else reading a pair (a cast to an integer, a
 * multiplication, a subtraction, log_softmax, a collective, an output) is an import error naming
 * the line that made the -inf and, on the next line, the line that read it. Its gradient needs
 * nothing more: softmax's backward reads the softmax output, the gradient of an addition passes
 * to the finite operand unchanged, and masked_fill's backward fills the gradient with the
 * finite 0. `torch.finfo(dtype).min` is a finite number and needs none of this: it is computed
 * with as the number it is.
 */
import type { FxArg, FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, TensorVal, Val } from './lower.js';

const WHAT = 'a tensor filled with -inf (only softmax may read it)';

/** Is `a` the Python number -inf? */
export function isNegInf(a: FxArg | undefined): boolean {
  return a?.kind === 'num' && a.value === -Infinity;
}

/** The pair (x, where): -inf where `where` (0/1, broadcast to x) holds, x elsewhere; made at `origin`. */
function pair(l: Lowerer, x: TensorVal, where: TensorVal, origin: string): OpaqueVal {
  // The mask gets x's shape, so every layout op below applies to both alike.
  const m = where.shape.length === x.shape.length && where.shape.every((d, i) => d === x.shape[i]) ? where : l.one('expand', [where], { shape: [...x.shape] }, undefined, where.dtype);
  return {
    kind: 'opaque',
    what: WHAT,
    data: { shape: JSON.stringify(x.shape), dtype: x.dtype, origin },
    tensors: { x, where: m },
    materialize: () =>
      l.fail(`the -inf fill made at ${origin} is read by an op other than softmax: infinities are not exact real values, so a tensor holding -inf may only be added to finite scores, viewed, sliced or copied (triu / tril too) and then read by softmax (exact: the -inf entries get probability 0; docs/import.md)`),
  };
}

const originOf = (l: Lowerer, n: FxNode): string => (n.loc === undefined ? `${l.g.file}:${n.line}` : n.loc);

/** x with -inf where `where` (0/1, broadcast to x) holds: an opaque value softmax reads. */
export function negInfFilled(l: Lowerer, n: FxNode, x: TensorVal, where: TensorVal): OpaqueVal {
  return pair(l, x, where, originOf(l, n));
}

/** The value bound to `a`, when it holds -inf. */
export function negInfOf(l: Lowerer, a: FxArg | undefined): OpaqueVal | undefined {
  if (a?.kind !== 'name') return undefined;
  const v = l.val(a, 'self');
  return v.kind === 'opaque' && v.what === WHAT ? v : undefined;
}

const partsOf = (f: OpaqueVal): { x: TensorVal; where: TensorVal; origin: string } => ({
  x: f.tensors?.['x'] as TensorVal,
  where: f.tensors?.['where'] as TensorVal,
  origin: String(f.data?.['origin'] ?? '?'),
});

/** softmax over `dim` of an -inf tensor: the finite part's softmax, zeroed where -inf and renormalized. */
export function maskedSoftmax(l: Lowerer, n: FxNode, filled: OpaqueVal, dim: number): Val {
  const { x, where } = partsOf(filled);
  const keep = l.one('compare', [where, l.constant(0)], { rel: 'eq' }, undefined, 'bool');
  const p = l.one('softmax', [x], { dim });
  const kept = l.one('mul', [p, keep], {}, undefined, x.dtype);
  const d = dim < 0 ? dim + x.shape.length : dim;
  const total = l.one('sum', [kept], { dims: [d], keepdim: true });
  return l.bind(n, l.one('div', [kept, total], {}, l.out(n)));
}

/**
 * Ops that move or copy elements (and triu / tril, which put the finite 0 in place): on an -inf
 * tensor, the rule runs on the finite part and on the mask alike (under the names `<node>.x`
 * and `<node>.m`) and the results are the pair.
 */
const THROUGH = ['aten.detach', 'aten.alias', 'aten.clone', 'aten.lift_fresh_copy', 'aten.view', 'aten._unsafe_view', 'aten.reshape', 'aten._reshape_alias', 'aten.unsqueeze', 'aten.squeeze', 'aten.t', 'aten.transpose', 'aten.permute', 'aten.expand', 'aten.slice', 'aten.triu', 'aten.tril'];
const FLOAT = new Set(['float16', 'bfloat16', 'float32', 'float64']);

function through(rule: Rule): Rule {
  return (l, n) => {
    const f = negInfOf(l, n.args[0]);
    if (f === undefined || n.args[0]?.kind !== 'name') return rule(l, n);
    const name = n.args[0].name;
    const { x, where, origin } = partsOf(f);
    const part = (v: TensorVal, suffix: string): TensorVal => {
      const r = l.withValue(name, v, () => rule(l, { ...n, name: `${n.name}.${suffix}` }));
      return r.kind === 'tensor' ? r : l.fail(`${n.target} of the -inf fill made at ${origin}: not a tensor`);
    };
    const px = part(x, 'x');
    const pm = part(where, 'm');
    if (n.type !== undefined && (px.shape.length !== n.type.shape.length || px.shape.some((d, i) => d !== n.type?.shape[i]))) {
      l.fail(`${n.target}: the graph says ${n.name} has shape [${n.type.shape.join(', ')}], the mapped op gives [${px.shape.join(', ')}]`);
    }
    return l.bind(n, pair(l, px, pm, origin));
  };
}

/** A float cast or copy of an -inf tensor is itself; a cast to an integer type is refused (-inf has no integer value). */
function castThrough(rule: Rule): Rule {
  return (l, n) => {
    const f = negInfOf(l, n.args[0]);
    if (f === undefined) return rule(l, n);
    const to = n.type?.dtype ?? 'float32';
    if (!FLOAT.has(to)) l.fail(`${n.target} of the -inf fill made at ${partsOf(f).origin} to ${to}: -inf has no value there`);
    return l.bind(n, f);
  };
}

/** Factories with the fill value -inf (`torch.full((T, T), float('-inf'))`): (0, 1). */
function fullNegInf(rule: Rule, valueAt: number, shapeOf: (l: Lowerer, n: FxNode) => readonly number[]): Rule {
  return (l, n) => {
    if (!isNegInf(n.args[valueAt])) return rule(l, n);
    const shape = [...shapeOf(l, n)];
    const x = l.one('expand', [l.constant(0)], { shape }, `${l.out(n)}.x`, n.type?.dtype ?? 'float32');
    const m = l.one('expand', [l.constant(1)], { shape }, `${l.out(n)}.m`, 'bool');
    return l.bind(n, negInfFilled(l, n, x, m));
  };
}

/** Additions with an -inf tensor: (x, m) + t = (x + t, m); (x, m) + (y, k) = (x + y, m ∨ k). */
function addThrough(rule: Rule): Rule {
  return (l, n) => {
    const fa = negInfOf(l, n.args[0]);
    const fb = negInfOf(l, n.args[1]);
    if (fa === undefined && fb === undefined) return rule(l, n);
    const origin = partsOf((fa ?? fb) as OpaqueVal).origin;
    const alpha = n.kwargs['alpha'];
    // alpha scales the second operand: -inf·alpha is +inf (alpha < 0) or NaN (alpha = 0).
    if (alpha !== undefined && l.num(alpha, 'alpha') !== 1) l.fail(`${n.target} with alpha of the -inf fill made at ${origin}: only alpha = 1 is supported`);
    const finite = (f: OpaqueVal | undefined, a: FxArg | undefined, what: string): TensorVal => (f === undefined ? l.operand(a, what) : partsOf(f).x);
    const a = finite(fa, n.args[0], 'self');
    const b = finite(fb, n.args[1], 'other');
    const sum = l.one('add', [a, b], {}, `${l.out(n)}.x`, fa === undefined ? (fb as OpaqueVal).tensors?.['x']?.dtype : a.dtype);
    const ma = fa === undefined ? undefined : partsOf(fa).where;
    const mb = fb === undefined ? undefined : partsOf(fb).where;
    // m ∨ k of 0/1 masks is [m + k > 0].
    const m = ma !== undefined && mb !== undefined ? l.one('compare', [l.one('add', [ma, mb], {}, undefined, 'int64'), l.constant(0)], { rel: 'gt' }, undefined, 'bool') : ((ma ?? mb) as TensorVal);
    return l.bind(n, pair(l, sum, m, origin));
  };
}

/**
 * `baddbmm(mask, q, k)` with an -inf mask as `self` (torch 1.13's nn.MultiheadAttention adds its
 * float `attn_mask` so: `baddbmm(attn_mask, q, k.transpose(-2, -1))`): β·(x, m) + α·q@k is
 * (β·x + α·q@k, m) for β > 0 (β·-inf = -inf); the finite part is the rule on x. β = 0 does not
 * read self; β < 0 would make +inf: refused.
 */
function baddbmmThrough(rule: Rule): Rule {
  return (l, n) => {
    const f = negInfOf(l, n.args[0]);
    if (f === undefined || n.args[0]?.kind !== 'name') return rule(l, n);
    const beta = l.num(n.kwargs['beta'], 'beta', 1);
    if (beta === 0) return rule(l, n);
    const { x, where, origin } = partsOf(f);
    if (beta < 0) l.fail(`${n.target} with beta ${beta} of the -inf fill made at ${origin}: -inf times a negative number is +inf, not supported`);
    const r = l.withValue(n.args[0].name, x, () => rule(l, { ...n, name: `${n.name}.x`, type: undefined }));
    if (r.kind !== 'tensor') return l.fail(`${n.target} of the -inf fill made at ${origin}: not a tensor`);
    return l.bind(n, pair(l, r, where, origin));
  };
}

/** The rules with -inf tensors carried through the ops above (the others refuse them). */
export function withNegInf(rules: Readonly<Record<string, Rule>>): Record<string, Rule> {
  const r: Record<string, Rule> = { ...rules };
  for (const k of THROUGH) if (r[k] !== undefined) r[k] = through(r[k]);
  if (r['aten._to_copy'] !== undefined) r['aten._to_copy'] = castThrough(r['aten._to_copy']);
  if (r['aten.add'] !== undefined) r['aten.add'] = addThrough(r['aten.add']);
  if (r['aten.baddbmm'] !== undefined) r['aten.baddbmm'] = baddbmmThrough(r['aten.baddbmm']);
  const full = r['aten.full'];
  if (full !== undefined) r['aten.full'] = fullNegInf(full, 1, (l, n) => l.ints(n.args[0], 'size'));
  const fullLike = r['aten.full_like'];
  if (fullLike !== undefined) r['aten.full_like'] = fullNegInf(fullLike, 1, (l, n) => l.tensor(n.args[0], 'self').shape);
  const newFull = r['aten.new_full'];
  if (newFull !== undefined) r['aten.new_full'] = fullNegInf(newFull, 2, (l, n) => l.ints(n.args[1], 'size'));
  return r;
}
