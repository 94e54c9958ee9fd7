/**
 * ATen rules for NLP / speech training code as people write it (issue 33): HiFi-GAN's and
 * WaveNet's `torch.nn.utils.weight_norm` (the fused `_weight_norm_interface` and its
 * backward), gated units (`F.glu`, `nn.GLU`, and `glu_backward`), hand-written norms
 * (`torch.var_mean`, `torch.var`, `torch.std`, `torch.std_mean`) and `torch.logsumexp`. Each
 * lowers to planproof ops whose exact real meaning is the ATen kernel's value (docs/import.md,
 * "NLP / speech ops"); the float kernels compute the same reals in another order:
 *
 *   _weight_norm_interface(v, g, d) = (v·(g/‖v‖), ‖v‖), ‖v‖ the 2-norm over every dim but d
 *                                      (kept as size 1), d = 0 or the last dim
 *   _weight_norm_interface_backward(gw, v, g, ‖v‖, d):
 *     a = Σ gw·v (over every dim but d), grad_g = a/‖v‖, grad_v = (g/‖v‖)·(gw − v·a/‖v‖²)
 *   glu(x, d) = x₁·σ(x₂), x₁, x₂ the halves of x along d
 *   glu_backward(gy, x, d) = cat(gy·σ(x₂), gy·x₁·σ(x₂)·(1 − σ(x₂))) along d
 *   var(x; dims, c) = Σ (x − mean)² / (N − c), N the count over dims; std = sqrt(var)
 *   logsumexp(x; dims) = log Σ exp(x) (the kernel subtracts the maximum first: the same real)
 *
 *   sort(v, stable=True, descending=d) of a vector (length bucketing: `torch.sort(lengths,
 *   descending=True, stable=True)`) = (v[perm], perm), perm aten-sort.ts's exact stable argsort
 *   gather / scatter / scatter_add along a dim d other than the last (`lprobs.gather(1,
 *   target.unsqueeze(1))` on [B, C, T] logits, and its backward): the last-dim rules of
 *   aten-index.ts on the operands with d and the last dim swapped, the result swapped back
 *   (out[..i_d..i_last] = x[..index[..i_d..i_last]..i_last] read in swapped coordinates is the
 *   same element: a transpose only renames positions)
 *
 * Their backwards other than weight norm's and glu's are composites torch 1.13 records as
 * ordinary ops (sub, mul, exp, masked_fill).
 */
import type { FxArg, FxNode } from './fxtext.js';
import { INDEX_RULES } from './aten-index.js';
import { SORT_RULES } from './aten-sort.js';
import { scaleBy, type Lowerer, type Rule, type TensorVal, type Val } from './lower.js';

/** Reduction dims of a `dim` argument (None or [] meaning every dim), made non-negative. */
function reduceDims(l: Lowerer, n: FxNode, k: number, rank: number): number[] {
  const a = l.arg(n, k, 'dim');
  const all = Array.from({ length: rank }, (_, i) => i);
  if (a === undefined || a.kind === 'none') return all;
  const ds = (a.kind === 'list' ? l.ints(a, 'dim') : [l.int(a, 'dim')]).map((d) => (d < 0 ? d + rank : d));
  for (const d of ds) if (d < 0 || d >= rank) l.fail(`${n.target}: dim ${d} out of range for a tensor of rank ${rank}`);
  return ds.length === 0 ? all : [...new Set(ds)].sort((p, q) => p - q);
}

/** Every dim of a rank-r tensor but d (weight norm's reduction), d made non-negative and checked. */
function exceptDim(l: Lowerer, n: FxNode, d: number, rank: number): number[] {
  const dd = d < 0 ? d + rank : d;
  // (torch calls the fused kernel only for dim 0 or the last; -1 on the Python side means "the whole tensor", never passed here)
  if (dd !== 0 && dd !== rank - 1) l.fail(`${n.target}: dim ${d} of a rank-${rank} weight (the fused kernel takes 0 or the last dim)`);
  return Array.from({ length: rank }, (_, i) => i).filter((i) => i !== dd);
}

function weightNorm(l: Lowerer, n: FxNode): Val {
  const v = l.tensor(n.args[0], 'v');
  const g = l.tensor(n.args[1], 'g');
  const dims = exceptDim(l, n, l.int(l.arg(n, 2, 'dim'), 'dim', 0), v.shape.length);
  const norm = l.one('sqrt', [l.one('sum', [l.one('mul', [v, v])], { dims, keepdim: true })], {}, undefined, v.dtype);
  const w = l.one('mul', [v, l.one('div', [g, norm], {}, undefined, v.dtype)], {}, `${l.out(n)}.0`, v.dtype);
  return l.bind(n, { kind: 'list', items: [w, norm] });
}

function weightNormBackward(l: Lowerer, n: FxNode): Val {
  const gw = l.tensor(n.args[0], 'grad_w');
  const v = l.tensor(n.args[1], 'saved_v');
  const g = l.tensor(n.args[2], 'saved_g');
  const norm = l.tensor(n.args[3], 'saved_norms');
  const dims = exceptDim(l, n, l.int(l.arg(n, 4, 'dim'), 'dim', 0), v.shape.length);
  const a = l.one('sum', [l.one('mul', [gw, v])], { dims, keepdim: true });
  const gradG = l.one('div', [a, norm], {}, undefined, g.dtype);
  const inner = l.one('sub', [gw, l.one('mul', [v, l.one('div', [gradG, norm], {}, undefined, v.dtype)])], {}, undefined, v.dtype);
  const gradV = l.one('mul', [l.one('div', [g, norm], {}, undefined, v.dtype), inner], {}, `${l.out(n)}.0`, v.dtype);
  return l.bind(n, { kind: 'list', items: [gradV, gradG] });
}

/** The two halves of x along d (glu's operands), d made non-negative. */
function halves(l: Lowerer, n: FxNode, x: TensorVal, dArg: number): { a: TensorVal; b: TensorVal; d: number } {
  const d = dArg < 0 ? dArg + x.shape.length : dArg;
  const size = x.shape[d] ?? l.fail(`${n.target}: dim ${dArg} out of range`);
  if (size % 2 !== 0) l.fail(`${n.target}: dim ${dArg} has odd size ${size}`);
  const h = size / 2;
  return { a: l.one('slice', [x], { dim: d, start: 0, end: h }), b: l.one('slice', [x], { dim: d, start: h, end: size }), d };
}

function glu(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const { a, b } = halves(l, n, x, l.int(l.arg(n, 1, 'dim'), 'dim', -1));
  return l.bind(n, l.one('mul', [a, l.one('sigmoid', [b])], {}, l.out(n), x.dtype));
}

function gluBackward(l: Lowerer, n: FxNode): Val {
  const gy = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'self');
  const { a, b, d } = halves(l, n, x, l.int(l.arg(n, 2, 'dim'), 'dim', -1));
  const s = l.one('sigmoid', [b]);
  const ga = l.one('mul', [gy, s], {}, undefined, x.dtype);
  const gb = l.one('sigmoid_backward', [l.one('mul', [gy, a], {}, undefined, x.dtype), s]);
  return l.bind(n, l.one('concat', [ga, gb], { dim: d }, l.out(n)));
}

/**
 * The correction of a var / std overload: `correction` (None: 1) for `.correction`, `unbiased`
 * (default True: 1, else 0) for `.dim` and `.default`.
 */
function correctionOf(l: Lowerer, n: FxNode): number {
  if (n.target.includes('.correction')) {
    const c = n.kwargs['correction'] ?? n.args[2];
    return c === undefined || c.kind === 'none' ? 1 : l.num(c, 'correction');
  }
  const u = n.target.endsWith('.default') ? l.arg(n, 1, 'unbiased') : l.arg(n, 2, 'unbiased');
  return l.bool(u, 'unbiased', true) ? 1 : 0;
}

/** var and mean of x over the node's dims (with keepdim as asked), exactly. */
function varMean(l: Lowerer, n: FxNode, outVar: string | undefined, outMean: string | undefined): { v: TensorVal; m: TensorVal } {
  const x = l.tensor(n.args[0], 'self');
  // `.default(self, unbiased)` reduces everything; the others take dim at position 1.
  const dims = n.target.endsWith('.default') ? x.shape.map((_, i) => i) : reduceDims(l, n, 1, x.shape.length);
  const keepdim = l.bool(n.kwargs['keepdim'] ?? (n.target.includes('.correction') ? undefined : n.args[3]), 'keepdim', false);
  const c = correctionOf(l, n);
  const count = dims.reduce((p, d) => p * (x.shape[d] as number), 1);
  if (!(count - c > 0)) l.fail(`${n.target}: ${count} elements with correction ${c} (torch returns inf or nan)`);
  const mk = l.one('mean', [x], { dims, keepdim: true }, keepdim ? outMean : undefined, x.dtype);
  const dev = l.one('sub', [x, mk], {}, undefined, x.dtype);
  const ss = l.one('sum', [l.one('mul', [dev, dev])], { dims, keepdim }, undefined, x.dtype);
  const v = scaleBy(l, ss, 'div', count - c, outVar);
  const m = keepdim ? mk : l.one('reshape', [mk], { shape: v.shape.slice() }, outMean, x.dtype);
  return { v, m };
}

function varRule(what: 'var' | 'std' | 'var_mean' | 'std_mean'): Rule {
  return (l, n) => {
    const out = l.out(n);
    if (what === 'var') return l.bind(n, varMean(l, n, out, undefined).v);
    if (what === 'std') return l.bind(n, l.one('sqrt', [varMean(l, n, undefined, undefined).v], {}, out));
    const { v, m } = varMean(l, n, what === 'var_mean' ? `${out}.0` : undefined, undefined);
    return l.bind(n, { kind: 'list', items: [what === 'var_mean' ? v : l.one('sqrt', [v], {}, `${out}.0`), m] });
  };
}

function logsumexp(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const dims = reduceDims(l, n, 1, x.shape.length);
  const keepdim = l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false);
  const s = l.one('sum', [l.one('exp', [x])], { dims, keepdim }, undefined, x.dtype);
  return l.bind(n, l.one('log', [s], {}, l.out(n)));
}

/**
 * A last-dim rule of aten-index.ts applied along another dim: the tensor operands (positions
 * `tensors`) transposed so that `dim` is last, the rule run on them, its result transposed back.
 */
function alongLast(base: Rule, tensors: readonly number[]): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r = x.shape.length;
    let d = l.int(l.arg(n, 1, 'dim'), 'dim');
    if (d < 0) d += r;
    if (d === r - 1 || r < 2) return base(l, n);
    const swap = (t: TensorVal): TensorVal => (t.shape.length === r ? l.one('transpose', [t], { dim0: d, dim1: r - 1 }, undefined, t.dtype) : l.fail(`${n.target}: an operand of rank ${t.shape.length} with self of rank ${r}`));
    const names: string[] = [];
    const args: FxArg[] = n.args.map((a, k) => {
      if (k === 1) return { kind: 'num', value: r - 1, text: String(r - 1) };
      if (!tensors.includes(k) || a.kind !== 'name') return a;
      names.push(`${n.name}.swap${k}`);
      return { kind: 'name', name: `${n.name}.swap${k}` };
    });
    const swapped = tensors.filter((k) => n.args[k]?.kind === 'name').map((k) => swap(l.tensor(n.args[k], `argument ${k}`)));
    const inner: FxNode = { ...n, name: `${n.name}.last`, type: undefined, args };
    const run = (i: number): Val => (i === names.length ? base(l, inner) : l.withValue(names[i] as string, swapped[i] as TensorVal, () => run(i + 1)));
    const y = run(0);
    if (y.kind !== 'tensor') return l.fail(`${n.target}: expected a tensor result`);
    return l.bind(n, l.one('transpose', [y], { dim0: d, dim1: r - 1 }, l.out(n), y.dtype));
  };
}

/** CTC: no exact rule yet; refused with what to do (never dropped or approximated). */
const ctcRefused: Rule = (l, n) =>
  l.fail(`${n.target}: F.ctc_loss has no exact rule (a sum over every alignment of the targets, computed by the kernel's dynamic programme over the lengths): planproof cannot check a step that computes it. To proceed, verify the acoustic model without it: make its log-probabilities a contract output (cap.output("log_probs", ..., placement)) and verify the step with a frame-level loss (cross-entropy on aligned frames) in its place; see docs/import.md, "NLP / speech ops"`);

/** torch.sort of a vector with stable=True: the stable argsort (aten-sort.ts) and the values it picks. */
const sortRule: Rule = (l, n) => {
  if (!n.target.includes('.stable')) l.fail(`${n.target}: torch.sort without stable=True orders equal values arbitrarily (PyTorch leaves it unspecified); write torch.sort(x, stable=True), as length-bucketing code that must be reproducible does`);
  const v = l.tensor(n.args[0], 'self');
  const kw = n.kwargs;
  const inner: FxNode = { ...n, name: `${n.name}.perm`, type: undefined, args: [n.args[0] as FxArg], kwargs: { ...(kw['stable'] === undefined ? {} : { stable: kw['stable'] }), ...(kw['dim'] === undefined ? {} : { dim: kw['dim'] }), ...(kw['descending'] === undefined ? {} : { descending: kw['descending'] }) } };
  const perm = (SORT_RULES['aten.argsort'] ?? l.fail('internal: no argsort rule'))(l, inner);
  if (perm.kind !== 'tensor') return l.fail(`${n.target}: expected the permutation`);
  return l.bind(n, { kind: 'list', items: [l.one('gather', [v, perm], {}, `${l.out(n)}.0`, v.dtype), perm] });
};

const baseRule = (name: string): Rule => INDEX_RULES[name] ?? ((l) => l.fail(`internal: no rule ${name}`));

export const NL_RULES: Record<string, Rule> = {
  'aten._weight_norm_interface': weightNorm,
  'aten._weight_norm_interface_backward': weightNormBackward,
  'aten.glu': glu,
  'aten.glu_backward': gluBackward,
  'aten.var': varRule('var'),
  'aten.std': varRule('std'),
  'aten.var_mean': varRule('var_mean'),
  'aten.std_mean': varRule('std_mean'),
  'aten.logsumexp': logsumexp,
  'aten.sort': sortRule,
  'aten._ctc_loss': ctcRefused,
  'aten._ctc_loss_backward': ctcRefused,
  'aten.ctc_loss': ctcRefused,
  // (these replace aten-index.ts's entries, which they call for the last dim)
  'aten.gather': alongLast(baseRule('aten.gather'), [0, 2]),
  'aten.scatter': alongLast(baseRule('aten.scatter'), [0, 2, 3]),
  'aten.scatter_add': alongLast(baseRule('aten.scatter_add'), [0, 2, 3]),
};
