/**
 * Tensors with no elements (issue 33; docs/import.md, "Empty selections"): an MoE expert that
 * receives no token on a rank runs on `x[mask]` of shape [0, D], and the captured graph holds
 * its linear, activation, backward `mm`s, `index_add_` / `index_put` of no rows. The plan has
 * no 0-size dims, so such a tensor is never a plan tensor: it is an opaque "empty" value (it has
 * exactly one value, the one with no elements), and each op reading one is rewritten by what
 * it computes on zero elements:
 *
 *   an op of static output shape with a 0-element result (views, element-wise ops, mm over a
 *   0-size row dim, creation ops)          = empty
 *   mm / bmm contracting a 0-size dim      = zeros (a sum of no products)
 *   sum over a 0-size dim                  = zeros
 *   embedding_dense_backward of no ids     = zeros (no rows added)
 *   index_put / index_add of no rows       = the target, unchanged (in place: the same name)
 *   cat with 0-element pieces              = cat of the others
 *
 * A 0-element result whose size depends on data (`nonzero`, `x[mask]`) is accepted only as a
 * mask's empty selection, under the mask's own soundness condition (aten-mask.ts): the mask is
 * determined by pinned routing and constants, so it selects nothing on every input the verdict
 * covers. Any other op reading an empty value (mean over zero elements is NaN in PyTorch, max is
 * an error, a collective, a program output) is exit 2 naming the op.
 */
import type { FxArg, FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, Val } from './lower.js';
import { filled, uninitialized } from './lower.js';
import { requireEmptySelection } from './aten-mask.js';

const WHAT = 'a tensor with no elements';
const numel = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);

/** The empty value of `shape` (one dim 0) made at `origin`; any reader without a rule here is refused. */
function emptyVal(l: Lowerer, shape: readonly number[], dtype: string, origin: string): OpaqueVal {
  return {
    kind: 'opaque',
    what: WHAT,
    data: { shape: JSON.stringify(shape), dtype, origin },
    materialize: () =>
      l.fail(`a tensor with no elements [${shape.join(', ')}] (made at ${origin}, e.g. an expert that received no token in the captured run) is read by an op with no rule for zero elements; docs/import.md, "Empty selections", lists the ops rewritten (the way on: a run in which every selection is non-empty, or a 0/1 mask multiply as in moe_top1.py)`),
  };
}

/**
 * Checks owed by an empty value before anything reads it: a mask's empty positions (nonzero of
 * a mask selecting nothing) are sound only under the mask's condition, which, like the
 * positions of a non-empty mask, is checked where the positions are read, not where the
 * capture wrote them (an `x[mask] = 0` fill never reads them).
 */
const owed = new WeakMap<OpaqueVal, () => void>();

/** Runs (once) the checks owed by the empty values among an operand. */
function settle(l: Lowerer, a: FxArg | undefined): void {
  if (a === undefined) return;
  if (a.kind === 'list') {
    for (const x of a.items) settle(l, x);
    return;
  }
  if (a.kind !== 'name') return;
  const v = l.peek(a.name);
  for (const x of v?.kind === 'list' ? v.items : [v]) {
    if (x?.kind !== 'opaque') continue;
    const check = owed.get(x);
    if (check === undefined) continue;
    owed.delete(x);
    check();
  }
}

const originOf = (l: Lowerer, n: FxNode): string => n.loc ?? `${l.g.file}:${n.line}`;

/** Is v a value with no elements (an empty value, or a plan tensor with a 0-size dim)? */
function isEmpty(v: Val | undefined): boolean {
  if (v === undefined) return false;
  if (v.kind === 'opaque') return v.what === WHAT;
  return v.kind === 'tensor' && numel(v.shape) === 0;
}
const emptyArg = (l: Lowerer, a: FxArg | undefined): boolean => a?.kind === 'name' && isEmpty(l.peek(a.name));
function anyEmpty(l: Lowerer, a: FxArg | undefined): boolean {
  if (a === undefined) return false;
  if (a.kind === 'list') return a.items.some((x) => anyEmpty(l, x));
  if (a.kind !== 'name') return false;
  const v = l.peek(a.name);
  return v?.kind === 'list' ? v.items.some(isEmpty) : isEmpty(v);
}

/** The node's result as an empty value (its annotated shape). */
function bindEmpty(l: Lowerer, n: FxNode): Val {
  const t = n.type ?? l.fail(`${n.target}: a result with no elements needs its type annotation`);
  return l.bind(n, emptyVal(l, t.shape, t.dtype, originOf(l, n)));
}

/** The node's annotated result shape, which must have elements (a reduction over the empty dim). */
const outShape = (l: Lowerer, n: FxNode): readonly number[] => (n.type ?? l.fail(`${n.target}: no type annotation`)).shape;

/** Ops whose output shape is a function of their operands' shapes (never of values): a 0-element result is the empty value. */
const STATIC = new Set(
  (
    't view _unsafe_view reshape _reshape_alias permute transpose unsqueeze squeeze expand slice select clone detach alias _to_copy copy copy_ contiguous lift_fresh_copy ' +
    'mm bmm matmul addmm linear mul add sub div neg mul_ add_ sub_ div_ gelu gelu_backward silu silu_backward relu relu_ threshold_backward sigmoid sigmoid_backward tanh tanh_backward exp log sqrt rsqrt pow ' +
    '_softmax _softmax_backward_data where masked_fill zeros_like ones_like full_like new_zeros new_ones new_full new_empty_strided new_empty empty_like embedding sum mean index_select gather'
  )
    .split(' ')
    .map((k) => `aten.${k}`)
    .concat(['getitem']),
);
/** Creation ops (no tensor operand), and slices of length 0 (literal bounds): a 0-element result is the empty value. `aten.empty` stays uninitialized memory (op maps test its size). */
const CREATE = new Set(['aten.zeros', 'aten.ones', 'aten.full']);

/** Ops whose list of pieces may hold a 0-size one though neither operand nor (untyped) result shows it. */
const SIZED = new Set(['aten.split_with_sizes', 'aten.unsafe_split_with_sizes']);

/** A rule for a node with an empty operand or result; undefined: no rewrite applies (the default handling follows). */
type EmptyRule = (l: Lowerer, n: FxNode, base: Rule) => Val | undefined;

/** The bool masks among index_put / index of an index list, which must select nothing. */
function checkMasks(l: Lowerer, n: FxNode, idx: FxArg | undefined): void {
  if (idx?.kind !== 'list') return;
  for (const a of idx.items) {
    if (a.kind !== 'name') continue;
    const v = l.peek(a.name);
    if (v?.kind === 'tensor' && v.dtype === 'bool' && numel(v.shape) > 0) requireEmptySelection(l, n, v);
  }
}

/** A write of no rows (x[mask] = v, index_add of none): the target as it was. */
function unchanged(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  const target = n.args[0];
  const x = l.tensor(target, 'self');
  // In place: the target's name keeps its value; the result is a view of it. Else a fresh copy.
  if (inPlace) return l.bind(n, x, (target as { name: string }).name);
  return l.bind(n, l.one('identity', [x], {}, l.out(n), x.dtype));
}

const indexPut =
  (inPlace: boolean): EmptyRule =>
  (l, n) => {
    if (emptyArg(l, n.args[0])) return bindEmpty(l, n);
    // The values have no rows only when the indices select none (shapes are checked by ATen).
    if (!emptyArg(l, n.args[2]) && !anyEmpty(l, n.args[1])) return undefined;
    // Every index selects nothing: an empty one, or a mask meeting its condition (checkMasks).
    const idx = n.args[1];
    if (idx?.kind === 'list' && idx.items.some((a) => a.kind === 'name' && !emptyArg(l, a) && l.peek(a.name)?.kind === 'tensor' && (l.peek(a.name) as { dtype: string }).dtype !== 'bool')) return undefined;
    checkMasks(l, n, n.args[1]);
    return unchanged(l, n, inPlace);
  };

const indexAdd =
  (inPlace: boolean): EmptyRule =>
  (l, n) => {
    if (emptyArg(l, n.args[0])) return bindEmpty(l, n);
    // (no ids, hence no source rows: ATen checks the two agree)
    if (!emptyArg(l, n.args[2])) return undefined;
    return unchanged(l, n, inPlace);
  };

/** Zeros of the result's shape, when the result has elements (a contraction or sum over a 0-size dim). */
const zerosIfFull: EmptyRule = (l, n) => {
  const s = outShape(l, n);
  if (numel(s) === 0) return undefined;
  return filled(l, n, 0, s);
};

/**
 * split_with_sizes with a 0 among the sizes (`recv.split(recv_counts.tolist())` where an expert
 * got no rows from some member): the split by the other sizes, an empty piece at each 0. The
 * sizes are the graph's literals (values read into Python, listed with the verdict).
 */
const splitSizes: EmptyRule = (l, n, base) => {
  const sizes = l.ints(n.args[1], 'split_sizes');
  if (!sizes.includes(0)) return undefined;
  const a = n.args[0];
  const xv = a?.kind === 'name' ? l.peek(a.name) : undefined;
  const shape = xv?.kind === 'tensor' ? xv.shape : xv?.kind === 'opaque' && xv.what === WHAT ? (JSON.parse(String(xv.data['shape'])) as number[]) : l.fail(`${n.target}: expected a tensor`);
  const dtype = xv?.kind === 'tensor' ? xv.dtype : String((xv as OpaqueVal).data['dtype']);
  let d = l.int(n.args[2], 'dim', 0);
  if (d < 0) d += shape.length;
  const piece = (): OpaqueVal => emptyVal(l, shape.map((s, i) => (i === d ? 0 : s)), dtype, originOf(l, n));
  const kept = sizes.filter((k) => k > 0);
  let items: readonly Val[] = [];
  if (kept.length > 0) {
    const sub = base(l, { ...n, args: [a as FxArg, { kind: 'list', items: kept.map((k) => ({ kind: 'num', value: k, text: String(k) })) }, ...n.args.slice(2)] });
    if (sub.kind !== 'list' || sub.items.length !== kept.length) return l.fail(`${n.target}: expected ${kept.length} pieces`);
    items = sub.items;
  }
  let j = 0;
  return l.bind(n, { kind: 'list', items: sizes.map((k) => (k > 0 ? (items[j++] as Val) : piece())) }, (a as { name?: string }).name);
};

const RULES: Record<string, EmptyRule> = {
  'aten.split_with_sizes': splitSizes,
  'aten.unsafe_split_with_sizes': splitSizes,
  // nonzero of a mask selecting nothing: the mask's soundness condition, then the empty value.
  'planproof.positions': (l, n, base) => {
    if (l.ints(n.args[1], 'positions').length > 0) return undefined;
    base(l, n);
    const mask = l.tensor(n.args[0], 'mask');
    const v = bindEmpty(l, n);
    if (v.kind === 'opaque') owed.set(v, () => requireEmptySelection(l, n, mask));
    return v;
  },
  // x[mask] selecting nothing (a data-dependent size: only a determined mask's), or x[ids] with no ids.
  'aten.index': (l, n) => {
    if (numel(outShape(l, n)) > 0) return undefined;
    checkMasks(l, n, n.args[1]);
    return bindEmpty(l, n);
  },
  'aten.index_put': indexPut(false),
  'aten.index_put_': indexPut(true),
  'aten.index_add': indexAdd(false),
  'aten.index_add_': indexAdd(true),
  'aten.mm': zerosIfFull,
  'aten.bmm': zerosIfFull,
  'aten.sum': zerosIfFull,
  'aten.embedding_dense_backward': zerosIfFull,
  // cat skips 0-element pieces (ATen's own rule for them): the cat of the others.
  'aten.cat': (l, n, base) => {
    const xs = n.args[0];
    if (xs?.kind !== 'list') return undefined;
    if (numel(outShape(l, n)) === 0) return bindEmpty(l, n);
    const kept = xs.items.filter((a) => !emptyArg(l, a));
    if (kept.length === 1) {
      const x = l.tensor(kept[0], 'tensors[0]');
      return l.bind(n, l.one('identity', [x], {}, l.out(n), x.dtype));
    }
    return base(l, { ...n, args: [{ kind: 'list', items: kept }, ...n.args.slice(1)] });
  },
  // new_zeros(self, size) and the like read only self's dtype: a fill of the size given.
  'aten.new_zeros': (l, n) => (numel(outShape(l, n)) > 0 ? filled(l, n, 0, outShape(l, n)) : undefined),
  'aten.new_ones': (l, n) => (numel(outShape(l, n)) > 0 ? filled(l, n, 1, outShape(l, n)) : undefined),
  'aten.new_empty_strided': (l, n) => (numel(outShape(l, n)) > 0 ? l.bind(n, uninitialized(l, n, outShape(l, n))) : undefined),
  // unbind of an empty value (mistral-src's `batch_idx, nth_expert = torch.where(...)`): its columns, each empty.
  'aten.unbind': (l, n) => {
    const v = n.args[0]?.kind === 'name' ? l.peek(n.args[0].name) : undefined;
    if (v?.kind !== 'opaque' || v.what !== WHAT) return undefined;
    const shape = JSON.parse(String(v.data['shape'])) as number[];
    let d = l.int(l.arg(n, 1, 'dim'), 'dim', 0);
    if (d < 0) d += shape.length;
    const size = shape[d] ?? l.fail(`dim ${d} out of range`);
    const rest = shape.filter((_, i) => i !== d);
    const items = Array.from({ length: size }, () => emptyVal(l, rest, String(v.data['dtype']), originOf(l, n)));
    return l.bind(n, { kind: 'list', items });
  },
  'aten.mean': (l, n) => (numel(outShape(l, n)) > 0 ? l.fail(`${n.target}: the mean over zero elements (an empty tensor) is NaN in PyTorch, not a value the plan can hold`) : undefined),
};

const baseKey = (n: FxNode): string => (n.target === 'getitem' ? 'getitem' : n.target.slice(0, n.target.lastIndexOf('.')));

/** A rule that first sees whether its node reads or makes a tensor with no elements. */
function emptyAware(base: Rule): Rule {
  return (l, n) => {
    const reads = n.args.some((a) => anyEmpty(l, a)) || Object.values(n.kwargs).some((a) => anyEmpty(l, a));
    const makes = n.type !== undefined && numel(n.type.shape) === 0;
    const key = baseKey(n);
    if (!reads && !makes && !SIZED.has(key)) return base(l, n);
    for (const a of n.args) settle(l, a);
    for (const a of Object.values(n.kwargs)) settle(l, a);
    // (an item of a list holding an empty one: only the empty items are rewritten)
    if (key === 'getitem' && !makes) return base(l, n);
    const special = RULES[key];
    const r = special?.(l, n, base);
    if (r !== undefined) return r;
    if (makes && (STATIC.has(key) || CREATE.has(key)) && (reads || CREATE.has(key) || key === 'getitem' || key === 'aten.slice')) return bindEmpty(l, n);
    // A 0-element result from operands with elements, not rewritten here: as before this module.
    if (!reads) return base(l, n);
    if (key.startsWith('_c10d_functional') || key.startsWith('c10d') || key.startsWith('planproof.')) l.fail(`${n.target} of a tensor with no elements: a collective or planproof op on an empty tensor is not supported`);
    return l.fail(`${n.target} reads a tensor with no elements (an empty selection in the captured run, e.g. an expert that received no token): no rule says what it computes on zero elements (docs/import.md, "Empty selections", lists the ops rewritten)`);
  };
}

/** The rules, each first handling tensors with no elements (above). */
export function withEmpty(rules: Readonly<Record<string, Rule>>): Record<string, Rule> {
  const r: Record<string, Rule> = {};
  for (const [k, rule] of Object.entries(rules)) r[k] = emptyAware(rule);
  return r;
}
