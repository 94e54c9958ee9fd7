/**
 * ATen ops of training code as people write it (issue 33): powers and reciprocals (RMSNorm's
 * pow and rsqrt), comparisons and boolean masks, masked_fill and where, clamp, ReLU and their
 * gradients, slicing and selecting backwards, stack, norms (clip_grad_norm_), positions
 * (arange) and factories of constants. Each rule lowers to planproof ops whose exact real
 * meaning is the ATen op's (docs/import.md); booleans are their 0/1 values.
 */
import type { AttrValue } from '../../ops/types.js';
import { ImportError, type FxArg, type FxNode } from './fxtext.js';
import { indexPutInt } from './aten-index.js';
import { pinRouting } from './aten-sort.js';
import { maskPut, positional } from './aten-mask.js';
import { isNegInf, negInfFilled } from './aten-neginf.js';
import { filled, type ImportGuard, type Lowerer, type Rule, type TensorVal, type Val } from './lower.js';
import { absOf } from './aten-loops.js';

type Rel = 'gt' | 'ge' | 'lt' | 'le' | 'eq' | 'ne';

/** x ** e for a Python number e: exact for integer exponents and ±1/2. */
function power(l: Lowerer, x: TensorVal, e: number, out: string | undefined): TensorVal {
  if (e === 0.5) return l.one('sqrt', [x], {}, out);
  if (e === -0.5) return l.one('div', [l.constant(1), l.one('sqrt', [x])], {}, out, x.dtype);
  if (!Number.isInteger(e) || Math.abs(e) > 64) l.fail(`pow with exponent ${e}: only integer exponents up to 64 and ±0.5 are exact here (write sqrt or exp/log explicitly)`);
  if (e === 0) return l.one('expand', [l.constant(1)], { shape: [...x.shape] }, out, x.dtype);
  // Square-and-multiply: x^13 in five multiplications.
  let acc: TensorVal | undefined;
  let base = x;
  for (let k = Math.abs(e); k > 0; k >>= 1) {
    if (k & 1) acc = acc === undefined ? base : l.one('mul', [acc, base]);
    if (k > 1) base = l.one('mul', [base, base]);
  }
  const pos = acc as TensorVal;
  if (e < 0) return l.one('div', [l.constant(1), pos], {}, out, x.dtype);
  return l.one('identity', [pos], {}, out);
}

/** A comparison as 0/1 (dtype bool), with a Python scalar on either side. */
function compare(rel: Rel): Rule {
  return (l, n) => {
    const a = l.operand(n.args[0], 'self');
    const b = l.operand(n.args[1], 'other');
    return l.bind(n, l.one('compare', [a, b], { rel }, l.out(n), 'bool'));
  };
}

/** where(cond, a, b) with Python scalars allowed for a and b (masked_fill, where.ScalarOther). */
function select(l: Lowerer, n: FxNode, cond: TensorVal, a: TensorVal, b: TensorVal, inPlaceTarget?: FxArg): Val {
  const dtype = b.dtype === 'int64' && a.dtype !== 'int64' ? a.dtype : b.dtype;
  const r = l.one('where', [cond, a, b], {}, inPlaceTarget === undefined ? l.out(n) : undefined, dtype);
  if (inPlaceTarget !== undefined) l.write(inPlaceTarget, r);
  return l.bind(n, r);
}

/** A fill value of masked_fill / where: a finite Python number or a tensor. */
function fillValue(l: Lowerer, a: FxArg | undefined, what: string): TensorVal {
  if (a?.kind === 'num' && !Number.isFinite(a.value)) {
    l.fail(`${what} is ${a.text}: infinities are not exact real values; a causal mask with torch.finfo(dtype).min (as Hugging Face writes it) gives the same softmax and is supported`);
  }
  return l.operand(a, what);
}

function maskedFill(inPlace: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const mask = l.tensor(n.args[1], 'mask');
    if (isNegInf(n.args[2])) {
      // A causal mask as people write it: only softmax may read the result (aten-neginf.ts).
      const v = negInfFilled(l, n, x, mask);
      if (inPlace && n.args[0]?.kind === 'name') l.bind({ ...n, name: n.args[0].name }, v);
      return l.bind(n, v);
    }
    return select(l, n, mask, fillValue(l, n.args[2], 'value'), x, inPlace ? n.args[0] : undefined);
  };
}

/**
 * triu / tril (`torch.tril(torch.ones(T, T))`, a causal mask): x where the column index minus the
 * row index is ≥ k (triu) or ≤ k (tril), 0 elsewhere; the indices are exact integers (iota).
 */
function triangle(upper: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const k = l.int(l.arg(n, 1, 'diagonal'), 'diagonal', 0);
    if (x.shape.length < 2) l.fail(`${n.target} of a ${x.shape.length}-D tensor (torch needs at least 2 dims)`);
    const rc = x.shape.slice(-2);
    const col = l.one('iota', [l.constant(0)], { shape: rc, dim: 1, step: 1 }, undefined, 'int64');
    const row = l.one('iota', [l.constant(0)], { shape: rc, dim: 0, step: 1 }, undefined, 'int64');
    const keep = l.one('compare', [l.one('sub', [col, row], {}, undefined, 'int64'), l.constant(k)], { rel: upper ? 'ge' : 'le' }, undefined, 'bool');
    // (x·[keep]: of booleans, their and; of numbers, x or 0)
    return l.bind(n, l.one('mul', [x, keep], {}, l.out(n), x.dtype));
  };
}

/** max(x, lo) and / or min(x, hi) (clamp; ReLU is clamp at 0). */
function clampRule(which: 'both' | 'min' | 'max', inPlace: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const lo = which === 'max' ? undefined : l.arg(n, 1, 'min');
    const hi = which === 'min' ? undefined : which === 'max' ? l.arg(n, 1, 'max') : l.arg(n, 2, 'max');
    let r = x;
    const bound = (a: FxArg | undefined): TensorVal | undefined => (a === undefined || a.kind === 'none' ? undefined : fillValue(l, a, 'clamp bound'));
    const lb = bound(lo);
    const hb = bound(hi);
    if (lb === undefined && hb === undefined) l.fail(`${n.target}: neither min nor max given`);
    if (lb !== undefined) r = l.one('maximum', [r, lb], {}, undefined, x.dtype);
    if (hb !== undefined) r = l.one('minimum', [r, hb], {}, undefined, x.dtype);
    r = l.one('identity', [r], {}, inPlace ? undefined : l.out(n));
    if (inPlace) l.write(n.args[0], r);
    return l.bind(n, r);
  };
}

/** a AND b, a OR b, NOT a of booleans (0/1); integers are refused (bitwise on their bits). */
function logical(kind: 'and' | 'or' | 'not', bitwise: boolean): Rule {
  return (l, n) => {
    const a = l.tensor(n.args[0], 'self');
    const b = kind === 'not' ? undefined : l.tensor(n.args[1], 'other');
    if (bitwise && [a, b].some((t) => t !== undefined && t.dtype !== 'bool')) l.fail(`${n.target} on ${a.dtype} tensors works on their bits: only booleans are supported`);
    const truth = (t: TensorVal): TensorVal => (t.dtype === 'bool' ? t : l.one('compare', [t, l.constant(0)], { rel: 'ne' }, undefined, 'bool'));
    const out = l.out(n);
    if (kind === 'not') return l.bind(n, l.one('compare', [a, l.constant(0)], { rel: 'eq' }, out, 'bool'));
    const [x, y] = [truth(a), truth(b as TensorVal)];
    // and: x·y; or: [x + y > 0] (x + y is a count, 0 to 2, not a boolean).
    if (kind === 'and') return l.bind(n, l.one('mul', [x, y], {}, out, 'bool'));
    return l.bind(n, l.one('compare', [l.one('add', [x, y], {}, undefined, 'int64'), l.constant(0)], { rel: 'gt' }, out, 'bool'));
  };
}

/** The dims list of a norm / reduction argument: all dims when absent or None. */
function dimsArg(l: Lowerer, a: FxArg | undefined, rank: number): number[] | undefined {
  if (a === undefined || a.kind === 'none') return undefined;
  const ds = l.ints(a, 'dim').map((d) => (d < 0 ? d + rank : d));
  return ds.length === 0 ? undefined : ds;
}

/** The 2-norm over dims (clip_grad_norm_'s per-gradient norms): sqrt of the sum of squares. */
function norm2(l: Lowerer, n: FxNode, x: TensorVal, p: FxArg | undefined, dimArg: FxArg | undefined, keepdimArg: FxArg | undefined): Val {
  const ord = p === undefined || p.kind === 'none' ? 2 : l.num(p, 'p');
  if (ord !== 2 && ord !== 1 && ord !== Infinity) l.fail(`${n.target}: the ${ord}-norm is not supported (the 1-, 2- and inf-norms are)`);
  const dims = dimsArg(l, dimArg, x.shape.length);
  const keepdim = l.bool(keepdimArg, 'keepdim', false);
  if (ord !== 2) {
    // clip_grad_norm_(norm_type=1 or inf): the sum or the maximum of |x| = max(x, −x), exact.
    const a = absOf(l, x);
    const all = x.shape.map((_, i) => i);
    if (ord === 1) return l.bind(n, l.one('sum', [a], dims === undefined ? (keepdim ? { dims: all, keepdim: true } : {}) : { dims, keepdim }, l.out(n)));
    return l.bind(n, l.one('amax', [a], { dims: dims ?? all, keepdim }, l.out(n)));
  }
  const sq = l.one('mul', [x, x]);
  const s = dims === undefined ? l.one('sum', [sq], keepdim ? { dims: x.shape.map((_, i) => i), keepdim: true } : {}) : l.one('sum', [sq], { dims, keepdim });
  return l.bind(n, l.one('sqrt', [s], {}, l.out(n)));
}

/** The zero tensor of `sizes` with `g` at [start, end) along `dim` (slice_backward, select_backward). */
function padInto(l: Lowerer, n: FxNode, g: TensorVal, sizes: readonly number[], dim: number, start: number): Val {
  const d = dim < 0 ? dim + sizes.length : dim;
  const size = sizes[d] ?? l.fail(`dim ${dim} out of range`);
  const len = g.shape[d] ?? l.fail(`dim ${dim} out of range of the gradient`);
  const before = start < 0 ? start + size : start;
  const after = size - before - len;
  if (before < 0 || after < 0) l.fail(`${n.target}: [${before}, ${before + len}) is not within ${size}`);
  if (before === 0 && after === 0) return l.bind(n, l.one('identity', [g], {}, l.out(n)));
  return l.bind(n, l.one('pad', [g], { dim: d, before, after }, l.out(n)));
}

/** Python-number fill of the factories `new_*` and the dtype the graph annotates. */
function newFilled(value: number | 'arg'): Rule {
  return (l, n) => filled(l, n, value === 'arg' ? l.num(n.args[2], 'fill_value') : value, l.ints(n.args[1], 'size'));
}

/** arange(end), arange(start, end), arange(start, end, step): positions. */
function arange(l: Lowerer, n: FxNode): Val {
  const nums = n.args.filter((a) => a.kind === 'num').map((a, i) => l.num(a, `arg ${i}`));
  const [start, end, step] = nums.length === 1 ? [0, nums[0] as number, 1] : [nums[0] as number, nums[1] as number, nums[2] ?? 1];
  if (step === 0) l.fail('arange with step 0');
  const len = Math.max(0, Math.ceil((end - start) / step));
  if (len === 0) l.fail('an empty arange is not supported');
  const attrs: Record<string, AttrValue> = { shape: [len], dim: 0, step };
  return l.bind(n, l.one('iota', [l.constant(start)], attrs, l.out(n), n.type?.dtype ?? 'int64'));
}

/** x[mask] = v with one boolean mask over x's leading dims (index_put with accumulate False): where. */
function indexPut(inPlace: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const idx = n.args[1];
    if (idx?.kind !== 'list' || idx.items.length === 0) return l.fail(`${n.target}: expected a list of indices`);
    const first = l.tensor(idx.items[0], 'indices[0]');
    const accumulate = l.bool(l.arg(n, 3, 'accumulate'), 'accumulate', false);
    if (first.dtype !== 'bool') {
      const ids = idx.items.map((a, i) => l.tensor(a, `indices[${i}]`));
      const r = indexPutInt(l, n, x, ids, l.operand(n.args[2], 'values'), accumulate, inPlace ? undefined : l.out(n));
      if (inPlace) l.write(n.args[0], r);
      return l.bind(n, r);
    }
    if (idx.items.length !== 1) return l.fail(`${n.target}: only one boolean mask index is supported (x[mask] = v)`);
    const mask = first;
    const vals = n.args[2]?.kind === 'name' ? l.tensor(n.args[2], 'values') : undefined;
    if (vals !== undefined && positional(l, x, mask, vals)) {
      // y[mask] = v with one row of v per selected element (MoE dispatch by mask): by position.
      const r = maskPut(l, n, x, mask, vals, accumulate, inPlace ? undefined : l.out(n));
      if (inPlace) l.write(n.args[0], r);
      return l.bind(n, r);
    }
    if (accumulate) l.fail(`${n.target}: accumulate=True with a boolean mask is not supported`);
    if (mask.shape.length > x.shape.length || mask.shape.some((d, i) => d !== x.shape[i])) l.fail(`${n.target}: the mask [${mask.shape.join(', ')}] must be x's leading dims [${x.shape.join(', ')}]`);
    // The mask's dims lead; where broadcasts from the trailing end, so give it x's rank.
    const m = mask.shape.length === x.shape.length ? mask : l.one('reshape', [mask], { shape: [...mask.shape, ...x.shape.slice(mask.shape.length).map(() => 1)] }, undefined, 'bool');
    return select(l, n, m, fillValue(l, n.args[2], 'values'), x, inPlace ? n.args[0] : undefined);
  };
}

/** The traced result's element count, which shows whether a mask selected everything. */
/** softplus's βx, the mask βx > threshold and β (its arguments from position `at`). */
function softplusArgs(l: Lowerer, n: FxNode, x: TensorVal, at: number): { bx: TensorVal; big: TensorVal; beta: TensorVal } {
  const b = l.num(l.arg(n, at, 'beta'), 'beta', 1);
  if (b === 0) l.fail(`${n.target}: beta 0 divides by zero`);
  const beta = l.constant(b);
  const bx = l.one('mul', [x, beta]);
  const big = l.one('compare', [bx, l.constant(l.num(l.arg(n, at + 1, 'threshold'), 'threshold', 20))], { rel: 'gt' }, undefined, 'bool');
  return { bx, big, beta };
}

const numel = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);

export const TRAINING_RULES: Record<string, Rule> = {
  'aten.index_put': indexPut(false),
  'aten.index_put_': indexPut(true),
  'aten.masked_select': (l, n) => {
    // Its size depends on the data: only a full selection (the traced size) is exact, and then
    // "the mask is full" is a proof obligation (assert_mask), not an assumption.
    const x = l.tensor(n.args[0], 'self');
    const mask = l.tensor(n.args[1], 'mask');
    const full = numel(x.shape);
    if (n.type === undefined || numel(n.type.shape) !== full) l.fail(`${n.target}: a selection of part of the tensor has a size that depends on the data; only a full mask (every element selected in the traced run) is supported`);
    return l.bind(n, l.one('reshape', [l.one('assert_mask', [x, mask])], { shape: [full] }, l.out(n)));
  },
  'aten.masked_scatter': (l, n) => {
    // self with src's leading elements written where mask holds: with a full mask, src reshaped.
    const x = l.tensor(n.args[0], 'self');
    const mask = l.tensor(n.args[1], 'mask');
    const src = l.tensor(n.args[2], 'source');
    if (numel(src.shape) !== numel(x.shape)) l.fail(`${n.target}: only a full mask (a source as large as the tensor) is supported`);
    const s = l.one('reshape', [src], { shape: [...x.shape] });
    return l.bind(n, l.one('assert_mask', [s, mask], {}, l.out(n)));
  },
  // ---- powers and reciprocals
  'aten.pow.Tensor_Scalar': (l, n) => l.bind(n, power(l, l.tensor(n.args[0], 'self'), l.num(n.args[1], 'exponent'), l.out(n))),
  'aten.pow.Scalar': (l, n) => {
    // base ** x = exp(x · log base): exact with log base an uninterpreted constant.
    const base = l.num(n.args[0], 'self');
    if (!(base > 0)) l.fail(`pow of the base ${base}: only a positive base is supported`);
    const x = l.tensor(n.args[1], 'exponent');
    return l.bind(n, l.one('exp', [l.one('mul', [x, l.one('log', [l.constant(base)])])], {}, l.out(n), x.dtype));
  },
  'aten.rsqrt': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    return l.bind(n, l.one('div', [l.constant(1), l.one('sqrt', [x])], {}, l.out(n), x.dtype));
  },
  'aten.reciprocal': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    return l.bind(n, l.one('div', [l.constant(1), x], {}, l.out(n), x.dtype));
  },
  'aten.rsub': (l, n) => {
    // other − alpha · self
    const x = l.tensor(n.args[0], 'self');
    const other = l.operand(n.args[1], 'other');
    const alpha = l.num(n.kwargs['alpha'] ?? n.args[2], 'alpha', 1);
    const ax = alpha === 1 ? x : l.one('scale', [x], { factor: alpha });
    return l.bind(n, l.one('sub', [other, ax], {}, l.out(n), x.dtype));
  },

  // ---- comparisons, booleans, selection
  'aten.gt': compare('gt'),
  'aten.ge': compare('ge'),
  'aten.lt': compare('lt'),
  'aten.le': compare('le'),
  'aten.eq': compare('eq'),
  'aten.ne': compare('ne'),
  'aten.logical_not': logical('not', false),
  'aten.logical_and': logical('and', false),
  'aten.logical_or': logical('or', false),
  'aten.bitwise_not': logical('not', true),
  'aten.bitwise_and': logical('and', true),
  'aten.bitwise_or': logical('or', true),
  'aten.masked_fill.Scalar': maskedFill(false),
  'aten.masked_fill.Tensor': maskedFill(false),
  'aten.masked_fill_.Scalar': maskedFill(true),
  'aten.masked_fill_.Tensor': maskedFill(true),
  // where.self, .ScalarSelf, .ScalarOther, .Scalar: fillValue takes a tensor or a Python number alike.
  'aten.where': (l, n) => {
    // torch.where(mask, scores, float('-inf')) (or -inf first): an -inf fill only softmax reads.
    const [c, a, b] = [n.args[0], n.args[1], n.args[2]];
    if (isNegInf(b) && !isNegInf(a)) return l.bind(n, negInfFilled(l, n, l.tensor(a, 'self'), l.one('compare', [l.tensor(c, 'condition'), l.constant(0)], { rel: 'eq' }, undefined, 'bool')));
    if (isNegInf(a) && !isNegInf(b)) return l.bind(n, negInfFilled(l, n, l.tensor(b, 'other'), l.tensor(c, 'condition')));
    return select(l, n, l.tensor(c, 'condition'), fillValue(l, a, 'self'), fillValue(l, b, 'other'));
  },

  // ---- clamp, ReLU, maximum and their gradients
  'aten.maximum': (l, n) => l.bind(n, l.one('maximum', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'other')], {}, l.out(n))),
  'aten.minimum': (l, n) => l.bind(n, l.one('minimum', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'other')], {}, l.out(n))),
  'aten.clamp': clampRule('both', false),
  'aten.clamp_': clampRule('both', true),
  'aten.clamp_min': clampRule('min', false),
  'aten.clamp_min_': clampRule('min', true),
  'aten.clamp_max': clampRule('max', false),
  'aten.clamp_max_': clampRule('max', true),
  'aten.relu': (l, n) => l.bind(n, l.one('maximum', [l.tensor(n.args[0], 'self'), l.constant(0)], {}, l.out(n))),
  'aten.relu_': (l, n) => {
    const r = l.one('maximum', [l.tensor(n.args[0], 'self'), l.constant(0)]);
    l.write(n.args[0], r);
    return l.bind(n, r);
  },
  // ---- softplus as ATen's CPU kernel computes it: x where βx > threshold, else
  // log(1 + exp(βx)) / β; its backward g where βx > threshold, else g·z / (z + 1), z = exp(βx).
  // (The threshold is a branch of the kernel, not an approximation: above it PyTorch returns x.)
  'aten.softplus': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const { bx, big, beta } = softplusArgs(l, n, x, 1);
    const soft = l.one('div', [l.one('log', [l.one('add', [l.constant(1), l.one('exp', [bx])])]), beta]);
    return l.bind(n, l.one('where', [big, x, soft], {}, l.out(n), x.dtype));
  },
  'aten.softplus_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const { bx, big } = softplusArgs(l, n, x, 2);
    const z = l.one('exp', [bx]);
    return l.bind(n, l.one('where', [big, g, l.one('mul', [g, l.one('div', [z, l.one('add', [z, l.constant(1)])])])], {}, l.out(n), g.dtype));
  },
  // any(x) / any(x, dim): the maximum of x != 0 (0 or 1) over the dims, a boolean. What
  // F.gaussian_nll_loss checks (`if torch.any(var < 0): raise`), read into Python.
  'aten.any': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const t = x.dtype === 'bool' ? x : l.one('compare', [x, l.constant(0)], { rel: 'ne' }, undefined, 'bool');
    const all = x.shape.map((_, i) => i);
    const dims = n.target === 'aten.any.dim' ? [((l.int(n.args[1], 'dim') % x.shape.length) + x.shape.length) % x.shape.length] : all;
    if (x.shape.length === 0) return l.bind(n, l.one('identity', [t], {}, l.out(n), 'bool'));
    return l.bind(n, l.one('amax', [t], { dims, keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) && n.target === 'aten.any.dim' }, l.out(n), 'bool'));
  },
  'aten.threshold_backward': (l, n) => {
    // grad where self > threshold, else 0 (ReLU's backward reads its output).
    const g = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const mask = l.one('compare', [x, l.operand(n.args[2], 'threshold')], { rel: 'gt' }, undefined, 'bool');
    return l.bind(n, l.one('mul', [g, mask], {}, l.out(n), g.dtype));
  },

  // ---- slicing backwards, select, stack
  'aten.slice_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    if (l.int(n.args[5], 'step', 1) !== 1) l.fail('slice_backward with a step other than 1 is not supported');
    return padInto(l, n, g, l.ints(n.args[1], 'input_sizes'), l.int(n.args[2], 'dim'), l.num(n.args[3], 'start'));
  },
  'aten.select.int': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    let i = l.int(n.args[2], 'index');
    if (i < 0) i += size;
    if (i < 0 || i >= size) l.fail(`index ${i} out of range for size ${size}`);
    const s = l.one('slice', [x], { dim: d, start: i, end: i + 1 });
    // A view of x's storage, like slice: a write through it (`t[i, :n] = v`, pad_sequence's
    // copy_ into each row) is written into x (Lowerer.write). Bound as a fresh tensor, such a
    // write was dropped and x read as before it (tried: pad_sequence's rows read as zeros).
    return l.bindRegion(n, l.one('reshape', [s], { shape: x.shape.filter((_, k) => k !== d) }, l.out(n)), (n.args[0] as { name: string }).name, d, i, i + 1, s.shape);
  },
  'aten.select_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const sizes = l.ints(n.args[1], 'input_sizes');
    let d = l.int(n.args[2], 'dim');
    if (d < 0) d += sizes.length;
    const u = l.one('reshape', [g], { shape: [...g.shape.slice(0, d), 1, ...g.shape.slice(d)] });
    return padInto(l, n, u, sizes, d, l.int(n.args[3], 'index'));
  },
  'aten.stack': (l, n) => {
    const xs = n.args[0];
    if (xs?.kind !== 'list' || xs.items.length === 0) return l.fail('expected a non-empty list of tensors');
    const ts = xs.items.map((x, i) => l.tensor(x, `tensors[${i}]`));
    const r = (ts[0] as TensorVal).shape.length + 1;
    let d = l.int(n.args[1], 'dim', 0);
    if (d < 0) d += r;
    const us = ts.map((t) => l.one('reshape', [t], { shape: [...t.shape.slice(0, d), 1, ...t.shape.slice(d)] }));
    return l.bind(n, us.length === 1 ? l.one('identity', us, {}, l.out(n)) : l.one('concat', us, { dim: d }, l.out(n)));
  },

  // ---- norms (clip_grad_norm_)
  'aten.norm.ScalarOpt_dim': (l, n) => norm2(l, n, l.tensor(n.args[0], 'self'), n.args[1], n.args[2], l.arg(n, 3, 'keepdim')),
  'aten.norm.Scalar': (l, n) => norm2(l, n, l.tensor(n.args[0], 'self'), n.args[1], undefined, undefined),
  'aten.norm.ScalarOpt_dtype': (l, n) => norm2(l, n, l.tensor(n.args[0], 'self'), n.args[1], undefined, undefined),
  'aten.linalg_vector_norm': (l, n) => norm2(l, n, l.tensor(n.args[0], 'self'), l.arg(n, 1, 'ord'), l.arg(n, 2, 'dim'), l.arg(n, 3, 'keepdim')),

  // ---- factories
  'aten.new_zeros': newFilled(0),
  'aten.new_ones': newFilled(1),
  'aten.new_full': newFilled('arg'),
  'aten.arange': arange,
  'aten.triu': triangle(true),
  'aten.tril': triangle(false),
  // `.item()`, `float(t)`, `bool(t)`: the value leaves the graph; what the program does with it
  // in Python is baked into the ops after it. Recorded: the plan is specialized to that value.
  'aten._local_scalar_dense': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const where = n.loc ?? `${l.g.file}:${n.line}`;
    l.reads.push(`${where}: the value of '${x.id}' read into Python`);
    pinRouting(l, x.id, where);
    return l.bind(n, { kind: 'none' });
  },
  // What a witness must reproduce of a read (planproof capture writes it after each read):
  // `guard(t, 'eq', [values])`, or `guard(a, cmp, b, outcome)` for a comparison Python made.
  'planproof.guard': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const cmp = l.str(n.args[1], 'cmp');
    const where = n.loc ?? `${l.g.file}:${n.line}`;
    if (!['eq', 'ne', 'lt', 'le', 'gt', 'ge'].includes(cmp)) throw new ImportError(l.g.file, n.line, `planproof.guard: comparison '${cmp}' is none of eq ne lt le gt ge`);
    const c = cmp as ImportGuard['cmp'];
    const b = n.args[2];
    if (n.args.length <= 3) {
      // An exact read: its values (None: too many to record, so never reproduced).
      const values = b === undefined || b.kind === 'none' ? null : b.kind === 'list' ? b.items.map((v) => l.num(v, 'value')) : [l.num(b, 'value')];
      l.guards.push({ tensor: x.id, cmp: c, values, where });
    } else {
      const other = b?.kind === 'name' ? l.tensor(b, 'other').id : l.num(b, 'other');
      const o = n.args[3];
      if (o?.kind !== 'bool') throw new ImportError(l.g.file, n.line, 'planproof.guard: the outcome (4th argument) must be True or False');
      l.guards.push({ tensor: x.id, cmp: c, other, outcome: o.value, where });
    }
    return l.bind(n, { kind: 'none' });
  },
  // torch.tensor(data) inside the step: the constant made from Python data, returned as is.
  'aten.lift_fresh': (l, n) => l.bind(n, l.tensor(n.args[0], 'self')),
  // Point-to-point (planproof capture writes dist.send / dist.recv as these): matched in order
  // per (sender, receiver) pair by the loader, like a plan's own send and recv.
  'planproof.send': (l, n) => {
    const x = l.tensor(n.args[0], 'tensor');
    const dst = l.int(n.args[1], 'dst');
    l.ops.push({ id: `${l.out(n)}.op`, op: 'send', inputs: [x.id], outputs: [], peer: dst, loc: l.locOf(n) });
    return l.bind(n, { kind: 'none' });
  },
  'planproof.recv': (l, n) => {
    const src = l.int(n.args[0], 'src');
    const type = n.type ?? l.fail('planproof.recv needs its result annotated with a dtype and shape');
    const t = l.addTensor(l.out(n), type.shape, type.dtype);
    l.ops.push({ id: `${t.id}.op`, op: 'recv', inputs: [], outputs: [t.id], peer: src, loc: l.locOf(n) });
    return l.bind(n, t);
  },
  // What dist.reduce leaves on a rank other than dst (planproof capture): torch documents only
  // dst's value (gloo leaves partial sums). A free input of the plan, which the logical program
  // never reads: an output that depends on it is not the logical one.
  'planproof.unspecified': (l, n) => {
    l.tensor(n.args[0], 'reduced');
    const type = n.type ?? l.fail('planproof.unspecified needs its result annotated with a dtype and shape');
    const t = l.addTensor(l.out(n), type.shape, type.dtype);
    l.extra.push({ id: t.id, shape: t.shape, dtype: t.dtype, unspecified: true, line: n.line });
    return l.bind(n, t);
  },
  // Autograd's CopySlices (a write through a view, x[mask] = v) views the gradient with
  // as_strided: supported when that is the tensor itself (its size, its strides, offset 0).
  'aten.as_strided': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const size = l.ints(n.args[1], 'size');
    const stride = l.ints(n.args[2], 'stride');
    const offset = l.int(l.arg(n, 3, 'storage_offset'), 'storage_offset', 0);
    const own = l.stridesAt(n.args[0]);
    const same = (a: readonly number[], b: readonly number[] | undefined): boolean => b !== undefined && a.length === b.length && a.every((v, i) => v === b[i]);
    if (offset !== 0 || !same(size, x.shape) || !same(stride, own)) l.fail(`as_strided to size [${size.join(', ')}], strides [${stride.join(', ')}], offset ${offset} is not the tensor itself (shape [${x.shape.join(', ')}], strides [${own?.join(', ') ?? 'unknown'}]): only that view is supported`);
    return l.bind(n, x, (n.args[0] as { name?: string }).name);
  },
  'aten.square': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    return l.bind(n, l.one('mul', [x, x], {}, l.out(n)));
  },
};
