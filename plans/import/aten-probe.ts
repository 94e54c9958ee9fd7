/**
 * ATen ops of training scripts as people write them that the held-out probes trip on (issue 33):
 * class-weighted NLL (`F.nll_loss` / `F.cross_entropy` with `weight=`, with ignored labels as
 * Hugging Face pads them with -100), `fill_` with a 0-d tensor value, and `fill_` / `zero_` of
 * uninitialized memory (`empty_like(x).fill_(1)`: every element written), and the in-place
 * layout ops `transpose_` / `t_` (torch 1.13's CPU GRU), and `flip` (reverse cumulative sums). Each rule lowers to
 * planproof ops whose exact real meaning is the ATen kernel's value (docs/import.md):
 *
 *   nll_w(lp, t; w, ii)  per row n: −w[t_n]·lp[n, t_n]·[t_n ≠ ii]
 *                        'sum': Σ_n; 'mean': Σ_n over the total weight W = Σ_n w[t_n]·[t_n ≠ ii]
 *   its backward         ∂/∂lp[n, c] = −g·w[t_n]·[t_n ≠ ii]·[c = t_n]  (over W for 'mean')
 *
 * w[t_n] is read as Σ_c [c = t_n]·w_c (an exact sum with one nonzero term for a label in range),
 * so the labels stay symbolic over their declared values and no gather of the weight is needed.
 * The unweighted forms keep the cross-entropy rules of aten.ts (`withProbe` falls back to them).
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, Rule, TensorVal, Val } from './lower.js';

type Reduction = 'none' | 'mean' | 'sum';

function reductionOf(l: Lowerer, v: number): Reduction {
  return (['none', 'mean', 'sum'] as const)[v] ?? l.fail('bad reduction');
}

/**
 * The label masks of NLL over lp [N, C] (shared with the unweighted rule, aten.ts `nllGrad`): the
 * 0/1 one-hot of the labels [N, C] and [t_n ≠ ignore_index] as [N, 1].
 */
export function labelMasks(l: Lowerer, lp: TensorVal, tgt: TensorVal, ii: number, what: string): { onehot: TensorVal; valid: TensorVal } {
  if (lp.shape.length !== 2 || tgt.shape.length !== 1) l.fail(`${what}: only [N, C] log-probabilities and [N] labels are supported`);
  const [N, C] = lp.shape as [number, number];
  const classes = l.one('iota', [l.constant(0)], { shape: [N, C], dim: 1, step: 1 }, undefined, 'int64');
  const col = l.one('reshape', [tgt], { shape: [N, 1] }, undefined, tgt.dtype);
  const onehot = l.one('compare', [classes, col], { rel: 'eq' }, undefined, 'bool');
  return { onehot, valid: l.one('compare', [col, l.constant(ii)], { rel: 'ne' }, undefined, 'bool') };
}

/**
 * The per-row pieces of weighted NLL over lp [N, C]: the one-hot of the labels [N, C] and each row's
 * weight w[t_n]·[t_n ≠ ii] as [N, 1]; without a weight (w = 1) the row's weight is [t_n ≠ ii].
 */
function rowWeights(l: Lowerer, lp: TensorVal, tgt: TensorVal, w: TensorVal | undefined, ii: number): { onehot: TensorVal; wv: TensorVal } {
  const { onehot, valid } = labelMasks(l, lp, tgt, ii, w === undefined ? 'nll_loss' : 'nll_loss with class weights');
  if (w === undefined) return { onehot, wv: l.one('identity', [valid], {}, undefined, lp.dtype) };
  const C = lp.shape[1] as number;
  if (w.shape.length !== 1 || w.shape[0] !== C) l.fail(`nll_loss: the class weight has shape [${w.shape.join(', ')}], expected [${C}]`);
  // w[t_n] = Σ_c [c = t_n]·w_c; an ignored label (outside the classes) picks no weight and is masked anyway.
  const picked = l.one('sum', [l.one('mul', [onehot, w], {}, undefined, w.dtype)], { dims: [1], keepdim: true });
  return { onehot, wv: l.one('mul', [picked, valid], {}, undefined, w.dtype) };
}

/**
 * nll_loss_forward(lp, t, weight, reduction, ii): [loss, total_weight], both tensors. Also the
 * unweighted form (w undefined) on log-probabilities that are not a log_softmax of [N, C] logits
 * aten.ts pairs into cross-entropy (the tutorials' `F.log_softmax` of [B, T, V] then
 * `.view(-1, V)` into `nn.NLLLoss`): NLL is the formula above on any lp.
 */
export function nllForward(l: Lowerer, n: FxNode, w: TensorVal | undefined): Val {
  const lp = l.tensor(n.args[0], 'self');
  const tgt = l.tensor(n.args[1], 'target');
  const r = reductionOf(l, l.int(n.args[3], 'reduction'));
  const { onehot, wv } = rowWeights(l, lp, tgt, w, l.int(n.args[4], 'ignore_index', -100));
  const at = l.one('sum', [l.one('mul', [onehot, lp], {}, undefined, lp.dtype)], { dims: [1], keepdim: true });
  const per = l.one('neg', [l.one('mul', [wv, at])]);
  const total = l.one('sum', [wv], {}, `${l.out(n)}.total_weight`);
  let loss: TensorVal;
  if (r === 'none') loss = l.one('reshape', [per], { shape: [lp.shape[0] as number] }, `${l.out(n)}.loss`);
  else if (r === 'sum') loss = l.one('sum', [per], {}, `${l.out(n)}.loss`);
  else loss = l.one('div', [l.one('sum', [per]), total], {}, `${l.out(n)}.loss`);
  return l.bind(n, { kind: 'list', items: [loss, total] });
}

/** nll_loss_backward(g, lp, t, weight, reduction, ii, total_weight): the gradient of lp (unweighted: w undefined, as nllForward). */
export function nllBackward(l: Lowerer, n: FxNode, w: TensorVal | undefined): Val {
  const g = l.tensor(n.args[0], 'grad_output');
  const lp = l.tensor(n.args[1], 'self');
  const tgt = l.tensor(n.args[2], 'target');
  const r = reductionOf(l, l.int(n.args[4], 'reduction'));
  const { onehot, wv } = rowWeights(l, lp, tgt, w, l.int(n.args[5], 'ignore_index', -100));
  const gr = r === 'none' ? l.one('reshape', [g], { shape: [lp.shape[0] as number, 1] }) : g;
  const neg = l.one('neg', [l.one('mul', [l.one('mul', [onehot, wv], {}, undefined, wv.dtype), gr])]);
  if (r !== 'mean') return l.bind(n, l.one('identity', [neg], {}, l.out(n)));
  // 'mean': over the total weight the forward returned (its second output, as ATen passes it).
  return l.bind(n, l.one('div', [neg, l.tensor(n.args[6], 'total_weight')], {}, l.out(n)));
}

/**
 * x.fill_(v) with v a 0-d tensor (`Tensor.fill_(tensor)`, what `masked_fill`'s Tensor overload
 * and code computing the fill value on device write): v broadcast to x's shape, written through x.
 * A float value into an integer x truncates: refused.
 */
function fillTensor(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  // (uninitialized memory, `x.new_empty(()).fill_(v)`: every element is written, its shape and dtype are the empty's)
  const x = isUninitialized(l, n) ? uninitializedShape(l, n) : l.tensor(n.args[0], 'self');
  const v = l.tensor(n.args[1], 'value');
  if (v.shape.length !== 0) l.fail(`${n.target}: the value has shape [${v.shape.join(', ')}]; fill_ takes a 0-d tensor`);
  const fl = (d: string): boolean => d.startsWith('float') || d === 'bfloat16';
  if (!fl(x.dtype) && x.dtype !== 'bool' && fl(v.dtype)) l.fail(`${n.target}: a ${v.dtype} value filled into a ${x.dtype} tensor truncates; not supported`);
  const val = x.dtype === 'bool' && v.dtype !== 'bool' ? l.one('compare', [v, l.constant(0)], { rel: 'ne' }, undefined, 'bool') : v;
  const out = l.one('expand', [val], { shape: [...x.shape] }, l.out(n), x.dtype);
  if (inPlace) l.write(n.args[0], out);
  return l.bind(n, out);
}

/**
 * x.fill_(c) / x.zero_() of uninitialized memory (`torch.empty_like(d).fill_(1)`, what
 * `nn.CosineEmbeddingLoss` runs): every element is written, so x is the constant afterwards and
 * nothing of the uninitialized values can be read.
 */
function fillUninitialized(l: Lowerer, n: FxNode, c: number): Val {
  const { shape, dtype } = uninitializedShape(l, n);
  if (!Number.isFinite(c)) l.fail(`${n.target}: the fill value ${c} is not a finite number`);
  const k = dtype === 'bool' ? l.one('compare', [l.constant(c), l.constant(0)], { rel: 'ne' }, undefined, 'bool') : l.constant(c);
  const v = l.one('expand', [k], { shape }, l.out(n), dtype);
  l.write(n.args[0], v);
  return l.bind(n, v);
}

function uninitializedShape(l: Lowerer, n: FxNode): { shape: number[]; dtype: string } {
  const d = l.val(n.args[0], 'self');
  return { shape: JSON.parse(String(d.kind === 'opaque' ? d.data['shape'] : '[]')) as number[], dtype: String(d.kind === 'opaque' ? d.data['dtype'] : 'float32') };
}

function isUninitialized(l: Lowerer, n: FxNode): boolean {
  const a = n.args[0];
  if (a === undefined || a.kind !== 'name') return false;
  const v = l.val(a, 'self');
  return v.kind === 'opaque' && v.what === 'uninitialized memory';
}

function isTensorArg(l: Lowerer, n: FxNode, k: number): boolean {
  const a = n.args[k];
  return a !== undefined && a.kind === 'name' && l.val(a, 'value').kind === 'tensor';
}

/**
 * x.transpose_(d0, d1) / x.t_() (what torch 1.13's CPU `nn.GRU` / `nn.RNN` do to their stacked
 * outputs with batch_first): the op changes x's sizes and strides, not its storage, so the name
 * x is rebound to the transposed view and every other alias of the storage keeps its own
 * layout and values (nothing is written).
 */
function inPlaceView(base: Rule): Rule {
  return (l, n) => {
    const a = n.args[0];
    if (a === undefined || a.kind !== 'name') return l.fail(`${n.target}: in-place op on something that is not a named tensor`);
    const v = base(l, n);
    l.bind({ ...n, name: a.name }, v, a.name);
    return v;
  };
}

/**
 * torch.flip(x, dims): along each dim d, out[i] = Σ_j [i + j = n − 1]·x[j] (n = x.shape[d]), a
 * product with the 0/1 anti-identity (`iota`, `add`, `compare`) summed over j: exactly the
 * reversal (one nonzero term per element), the dim moved to the front and back by `permute`.
 */
function flipDim(l: Lowerer, x: TensorVal, d: number, out?: string): TensorVal {
  const len = x.shape[d] as number;
  const dims = x.shape.map((_, i) => i);
  const front = [d, ...dims.filter((i) => i !== d)];
  const xp = d === 0 ? x : l.one('permute', [x], { dims: front });
  const rest = xp.shape.slice(1);
  const xe = l.one('reshape', [xp], { shape: [len, 1, ...rest] });
  const j = l.one('iota', [l.constant(0)], { shape: [len, len], dim: 0, step: 1 }, undefined, 'int64');
  const i = l.one('iota', [l.constant(0)], { shape: [len, len], dim: 1, step: 1 }, undefined, 'int64');
  const anti = l.one('compare', [l.one('add', [j, i], {}, undefined, 'int64'), l.constant(len - 1)], { rel: 'eq' }, undefined, 'int64');
  const am = l.one('reshape', [anti], { shape: [len, len, ...rest.map(() => 1)] }, undefined, 'int64');
  const sum = l.one('sum', [l.one('mul', [xe, am], {}, undefined, x.dtype)], { dims: [0] }, d === 0 ? out : undefined, x.dtype);
  return d === 0 ? sum : l.one('permute', [sum], { dims: dims.map((k) => front.indexOf(k)) }, out, x.dtype);
}

function flip(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const nd = x.shape.length;
  const dims = [...new Set(l.ints(n.args[1], 'dims').map((d) => (d < 0 ? d + nd : d)))];
  if (dims.some((d) => d < 0 || d >= nd)) l.fail(`${n.target}: a dim out of range for [${x.shape.join(', ')}]`);
  if (dims.some((d) => (x.shape[d] as number) > 1024)) l.fail(`${n.target}: at most 1,024 elements along a flipped dim are supported`);
  let v = x;
  dims.forEach((d, k) => {
    v = flipDim(l, v, d, k === dims.length - 1 ? l.out(n) : undefined);
  });
  return l.bind(n, dims.length === 0 ? l.one('identity', [x], {}, l.out(n)) : v);
}

/** `rules` with the weighted NLL forms and fill with a tensor value; every other form falls back to the rule given. */
export function withProbe(rules: Record<string, Rule>): Record<string, Rule> {
  const fallback = (name: string): Rule => rules[name] ?? ((l: Lowerer, n: FxNode): Val => l.fail(`unsupported ATen op '${n.target}'`));
  const nllF = fallback('aten.nll_loss_forward');
  const nllB = fallback('aten.nll_loss_backward');
  const fill = fallback('aten.fill_');
  const fillF = fallback('aten.fill');
  const zero = fallback('aten.zero_');
  const transpose = fallback('aten.transpose');
  const t = fallback('aten.t');
  return {
    ...rules,
    'aten.nll_loss_forward': (l, n) => {
      const w = l.optTensor(n.args[2], 'weight');
      return w === undefined ? nllF(l, n) : nllForward(l, n, w);
    },
    'aten.nll_loss_backward': (l, n) => {
      const w = l.optTensor(n.args[3], 'weight');
      return w === undefined ? nllB(l, n) : nllBackward(l, n, w);
    },
    'aten.fill_': (l, n) => {
      if (isTensorArg(l, n, 1)) return fillTensor(l, n, true);
      return isUninitialized(l, n) ? fillUninitialized(l, n, l.num(n.args[1], 'value')) : fill(l, n);
    },
    'aten.flip': flip,
    'aten.transpose_': inPlaceView(transpose),
    'aten.t_': inPlaceView(t),
    'aten.zero_': (l, n) => (isUninitialized(l, n) ? fillUninitialized(l, n, 0) : zero(l, n)),
    'aten.fill': (l, n) => (isTensorArg(l, n, 1) ? fillTensor(l, n, false) : fillF(l, n)),
  };
}
