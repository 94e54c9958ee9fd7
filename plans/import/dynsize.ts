/**
 * Data-dependent sizes by dense masking (issue 34; docs/import.md, "Data-dependent sizes").
 * Megatron's legacy SwitchMLP, traced with torch 2.x, prints the tokens an expert receives as
 * `nonzero: "i64[u0, 1]" = aten.nonzero(mask)`, `x[nonzero]` of `[u0, 1, h]`, the expert MLP on
 * `[u0, ...]` (views with `sym_size(nonzero, 0)`, mm, gelu, their backward, a weight gradient
 * contracting over u0) and `index_put(zeros, [nonzero], y)` back to a dense tensor. The plan has
 * only static shapes, so a tensor Y of `[u, ...]` selected by `nonzero(m)` (m a boolean [N]) is
 * held as a dense D of `[N, ...]` with Y[r] = D[i_r], i_r the r-th true position of m (what
 * nonzero lists, ascending); the rows of D where m is false hold values nothing may read:
 *
 *   x[nonzero(m)]                 D = x (one dim inserted per trailing dim of the positions)
 *   row-wise ops                  the op on D (element-wise with operands that do not span
 *                                 the u dim, mm / softmax / sums on other dims, views that
 *                                 keep the u dim leading, t / transpose)
 *   index_put(x, [nz], Y)         where(m, D, x);  accumulate: x + where(m, D, 0)
 *   mm(Aᵀ, B), sum over the u dim where(m, ·, 0) on an operand, then the op
 *   sym_size(nz, 0) in sizes      N (zeros of [u, ...] are zeros of [N, ...])
 *   _assert_scalar(u0 >= 0), ...  dropped (the import summary counts them)
 *
 * Every value that leaves the u world goes through a rule that reads only rows where m is true,
 * so it equals what the program computed. Anything else reading such a tensor (softmax, cumsum,
 * sort along u, a mean over u, two symbols meeting, a collective, an output) is exit 2 naming
 * the line, the construct and what to do.
 */
import type { FxArg, FxNode, FxType } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, TensorVal, Val } from './lower.js';

/** A symbol's meaning: the rows of `mask` that are true; `rows` = N. */
interface SymInfo {
  readonly mask: TensorVal;
  readonly rows: number;
  readonly origin: string;
}
/** Where a dense tensor has its u dim: 0, or 1 for a transposed matrix awaiting a contraction. */
interface Dyn {
  readonly sym: string;
  readonly dim: number;
}
interface State {
  graph: unknown;
  readonly syms: Map<string, SymInfo>;
  readonly dyn: Map<string, Dyn>;
}
const STATE = new WeakMap<Lowerer, State>();

/** Per lowering and graph (a later graph's u0 is another symbol). */
function state(l: Lowerer): State {
  let s = STATE.get(l);
  if (s === undefined || s.graph !== l.g) STATE.set(l, (s = { graph: l.g, syms: new Map(), dyn: new Map() }));
  return s;
}

const POS = 'the positions nonzero(mask) lists (a data-dependent size)';
const SIZE = 'a data-dependent size';
const COND = 'a condition on a data-dependent size';
const HOW = 'docs/import.md, "Data-dependent sizes", lists the uses read densely; keep the selected rows leading and row-wise, or dispatch with a 0/1 mask multiply';

const prod = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
const originOf = (l: Lowerer, n: FxNode): string => n.loc ?? `${l.g.file}:${n.line}`;

function opaque(what: string, data: Record<string, string | number>): OpaqueVal {
  return { kind: 'opaque', what, data };
}
function symOf(v: Val | undefined, what: string): string | undefined {
  return v?.kind === 'opaque' && v.what === what ? String(v.data['sym']) : undefined;
}

/** The u-world facts a name holds: dense tensor with its u dim, positions, size, or condition. */
function facts(l: Lowerer, a: FxArg | undefined): { v: Val | undefined; dyn?: Dyn; pos?: string; size?: string; cond?: boolean } {
  if (a?.kind !== 'name') return { v: undefined };
  const v = l.peek(a.name);
  if (v?.kind === 'tensor') {
    const d = state(l).dyn.get(v.id);
    return d === undefined ? { v } : { v, dyn: d };
  }
  const pos = symOf(v, POS);
  if (pos !== undefined) return { v, pos };
  const size = symOf(v, SIZE);
  if (size !== undefined) return { v, size };
  if (v?.kind === 'opaque' && v.what === COND) return { v, cond: true };
  return { v };
}
/** Does an argument (or a list of them) hold a u-world value? */
function touches(l: Lowerer, a: FxArg | undefined): boolean {
  if (a === undefined) return false;
  if (a.kind === 'list') return a.items.some((x) => touches(l, x));
  const f = facts(l, a);
  return f.dyn !== undefined || f.pos !== undefined || f.size !== undefined || f.cond === true;
}

function info(l: Lowerer, sym: string): SymInfo {
  return state(l).syms.get(sym) ?? l.fail(`the data-dependent size ${sym} is used before a nonzero defines it`);
}

/** Records t as the dense form of a u tensor (u dim `dim`), confined to the graph. */
function mark(l: Lowerer, t: TensorVal, d: Dyn): TensorVal {
  state(l).dyn.set(t.id, d);
  l.confined.set(t.id, `the dense form of a tensor whose size depends on the data (${d.sym}), which may not leave the graph: ${HOW}`);
  return t;
}

/** The annotation's u dim must be where the rule put it, and its dense shape the rule's. */
function checkType(l: Lowerer, n: FxNode, t: TensorVal, d: Dyn | undefined): void {
  const ty: FxType | undefined = n.type;
  if (ty === undefined) return;
  const dyn = ty.dyn ?? [];
  const at = dyn.findIndex((u) => u !== undefined);
  if (dyn.filter((u) => u !== undefined).length > 1) l.fail(`${n.target}: a result with two data-dependent sizes (${dyn.filter((u) => u !== undefined).join(', ')}) is not supported; ${HOW}`);
  if (d === undefined ? at >= 0 : at !== d.dim || dyn[at] !== d.sym) l.fail(`${n.target}: the graph says ${n.name} is [${shapeText(ty)}], but the dense form has ${d === undefined ? 'no data-dependent size' : `${d.sym} at dim ${d.dim}`}; ${HOW}`);
  const dense = ty.shape.map((s, i) => (dyn[i] === undefined ? s : info(l, dyn[i] as string).rows));
  if (dense.length !== t.shape.length || dense.some((s, i) => s !== t.shape[i])) l.fail(`${n.target}: the graph says ${n.name} is [${shapeText(ty)}], the mapped op gives [${t.shape.join(', ')}] (dense)`);
}
const shapeText = (t: FxType): string => t.shape.map((s, i) => t.dyn?.[i] ?? String(s)).join(', ');

/** The node with every symbolic size in its arguments replaced by N (views, zeros); `lead`: whether the u symbol was the first size. */
function substituted(l: Lowerer, n: FxNode, k: number): { node: FxNode; sym?: string; lead: boolean } {
  const a = n.args[k];
  if (a?.kind !== 'list') return { node: n, lead: false };
  let sym: string | undefined;
  let lead = false;
  const items = a.items.map((x, i): FxArg => {
    const s = facts(l, x).size;
    if (s === undefined) return x;
    if (sym !== undefined && sym !== s) l.fail(`${n.target}: two data-dependent sizes (${sym}, ${s}) in one shape; ${HOW}`);
    if (sym !== undefined) l.fail(`${n.target}: the data-dependent size ${s} twice in one shape; ${HOW}`);
    sym = s;
    lead = i === 0;
    const rows = info(l, s).rows;
    return { kind: 'num', value: rows, text: String(rows) };
  });
  const args = [...n.args];
  args[k] = { kind: 'list', items };
  return sym === undefined ? { node: n, lead } : { node: { ...n, args }, sym, lead };
}

/** The mask of `sym` as a bool of shape [1.., N, 1..] with N at `dim` of `rank` dims. */
function maskAt(l: Lowerer, sym: string, dim: number, rank: number): TensorVal {
  const s = info(l, sym);
  const shape = Array.from({ length: rank }, (_, i) => (i === dim ? s.rows : 1));
  return shape.length === 1 ? s.mask : l.one('reshape', [s.mask], { shape }, undefined, 'bool');
}
/** t with the rows of its u dim where the mask is false set to 0: what a sum over u may read. */
function zeroJunk(l: Lowerer, t: TensorVal, d: Dyn): TensorVal {
  return l.one('where', [maskAt(l, d.sym, d.dim, t.shape.length), t, l.constant(0)], {}, undefined, t.dtype);
}

/** The dense tensor of an argument, with its u facts; refuses a non-tensor. */
function dense(l: Lowerer, n: FxNode, a: FxArg | undefined, what: string): { t: TensorVal; dyn?: Dyn } {
  const f = facts(l, a);
  if (f.pos !== undefined || f.size !== undefined || f.cond === true) l.fail(`${n.target}: argument ${what} is ${f.pos !== undefined ? POS : f.size !== undefined ? SIZE : COND}, read here as a tensor; ${HOW}`);
  const t = l.tensor(a, what);
  return f.dyn === undefined ? { t } : { t, dyn: f.dyn };
}

type DynRule = (l: Lowerer, n: FxNode, base: Rule) => Val;

/** Binds the base rule's tensor result as dense (u dim `d`, or static), checked against the annotation. */
function result(l: Lowerer, n: FxNode, v: Val, d: Dyn | undefined): Val {
  if (v.kind !== 'tensor') return l.fail(`${n.target}: expected one tensor result for a data-dependent size; ${HOW}`);
  checkType(l, n, v, d);
  if (d !== undefined) mark(l, v, d);
  return v;
}

/** The one symbol of the dense operands (two different symbols meeting are refused). */
function oneSym(l: Lowerer, n: FxNode, ds: readonly (Dyn | undefined)[]): string {
  const syms = [...new Set(ds.filter((d): d is Dyn => d !== undefined).map((d) => d.sym))];
  if (syms.length > 1) l.fail(`${n.target}: two different data-dependent sizes meet (${syms.join(' and ')}: the rows of two selections); ${HOW}`);
  return syms[0] ?? l.fail(`${n.target}: internal: no data-dependent operand`);
}

/**
 * Element-wise and row-wise ops: every dense operand has its u dim leading and the result's
 * rank; a static operand must not span the u dim (fewer dims, or size 1 there), so each row of
 * the result is the op on that row alone.
 */
const rowwise: DynRule = (l: Lowerer, n: FxNode, base: Rule) => {
  const ops: { t: TensorVal; dyn?: Dyn }[] = [];
  const walk = (a: FxArg | undefined, what: string): void => {
    if (a === undefined) return;
    if (a.kind === 'list') a.items.forEach((x, i) => walk(x, `${what}[${i}]`));
    else if (a.kind === 'name' && l.peek(a.name)?.kind !== 'none') ops.push(dense(l, n, a, what));
  };
  n.args.forEach((a, i) => walk(a, `${i}`));
  for (const [k, a] of Object.entries(n.kwargs)) walk(a, k);
  const sym = oneSym(l, n, ops.map((o) => o.dyn));
  const rank = Math.max(...ops.map((o) => o.t.shape.length));
  for (const o of ops) {
    if (o.dyn !== undefined && (o.dyn.dim !== 0 || o.t.shape.length !== rank)) l.fail(`${n.target}: an operand has its data-dependent size at dim ${o.dyn.dim} of ${o.t.shape.length} dims, another's result has ${rank}: the rows would not line up; ${HOW}`);
    if (o.dyn === undefined && o.t.shape.length === rank && o.t.shape[0] !== 1) l.fail(`${n.target}: a static operand of [${o.t.shape.join(', ')}] spans the data-dependent rows (${sym}); ${HOW}`);
  }
  return result(l, n, base(l, n), { sym, dim: 0 });
};

/** Row-wise along a dim: softmax and the like; the dim must not be the u dim. */
function alongDim(k: number, name: string): DynRule {
  return (l: Lowerer, n: FxNode, base: Rule) => {
    const x = dense(l, n, n.args[0], 'self');
    let d = l.int(l.arg(n, k, name), name);
    if (d < 0) d += x.t.shape.length;
    if (x.dyn !== undefined && d === x.dyn.dim) l.fail(`${n.target} along the data-dependent dim (${x.dyn.sym}) mixes the selected rows with each other; ${HOW}`);
    return rowwise(l, n, base);
  };
}

/** sum / mean: over dims other than u, row-wise; a sum over u reads only the selected rows. */
function reduction(mean: boolean): DynRule {
  return (l: Lowerer, n: FxNode, base: Rule) => {
    const x = dense(l, n, n.args[0], 'self');
    const d = x.dyn ?? l.fail(`${n.target}: internal: no data-dependent operand`);
    const r = x.t.shape.length;
    const dimsArg = l.arg(n, 1, 'dim');
    const dims = dimsArg === undefined || dimsArg.kind === 'none' || (dimsArg.kind === 'list' && dimsArg.items.length === 0) ? x.t.shape.map((_, i) => i) : l.ints(dimsArg, 'dim').map((i) => (i < 0 ? i + r : i));
    if (!dims.includes(d.dim)) return rowwise(l, n, base);
    if (mean) l.fail(`${n.target} over the data-dependent dim (${d.sym}) divides by the number of selected rows, which the dense form does not hold; ${HOW}`);
    const z = zeroJunk(l, x.t, d);
    return result(l, n, l.withValue((n.args[0] as { name: string }).name, z, () => base(l, n)), undefined);
  };
}

const RULES: Record<string, DynRule> = {
  'aten.nonzero': (l: Lowerer, n: FxNode) => {
    const ty = n.type;
    const u = ty?.dyn?.[0];
    const x = dense(l, n, n.args[0], 'self');
    if (x.dyn !== undefined) l.fail(`${n.target} of a tensor that is itself a selection (${x.dyn.sym}): nested data-dependent sizes are not supported; ${HOW}`);
    const r = x.t.shape.length;
    if (u === undefined || ty === undefined || ty.shape.length !== 2 || ty.dyn?.[1] !== undefined || ty.shape[1] !== r) l.fail(`${n.target}: expected a result annotated [u<k>, ${r}]`);
    // [N] or [N, 1] (a top-1 choice kept as a column): the positions' rows are the mask's rows.
    if (!(r === 1 || (r === 2 && x.t.shape[1] === 1))) l.fail(`${n.target} of a mask of [${x.t.shape.join(', ')}]: only the positions of a [N] or [N, 1] mask are read densely (flatten it first); ${HOW}`);
    const st = state(l);
    if (st.syms.has(u)) l.fail(`${n.target}: the data-dependent size ${u} is defined twice`);
    const rows = x.t.shape[0] as number;
    const flat = r === 1 ? x.t : l.one('reshape', [x.t], { shape: [rows] }, undefined, x.t.dtype);
    // nonzero of a non-bool tensor lists its nonzero elements: the mask is x != 0.
    const mask = flat.dtype === 'bool' ? flat : l.one('compare', [flat, l.constant(0)], { rel: 'ne' }, undefined, 'bool');
    st.syms.set(u, { mask, rows, origin: originOf(l, n) });
    // `cols`: nonzero's columns (a [N, 1] mask's second is the column index, always 0).
    return l.bind(n, opaque(POS, { sym: u, trail: 1, cols: r }));
  },
  'aten.sym_size': (l: Lowerer, n: FxNode) => {
    const f = facts(l, n.args[0]);
    const d = l.int(l.arg(n, 1, 'dim'), 'dim');
    const sym = f.pos ?? f.dyn?.sym;
    if (sym === undefined || (f.dyn !== undefined && d !== f.dyn.dim) || (f.pos !== undefined && d !== 0)) l.fail(`${n.target}: only the data-dependent dim's size is read symbolically (static sizes print as numbers)`);
    if (n.type?.sym !== sym) l.fail(`${n.target}: the graph says ${n.type?.sym ?? 'a tensor'}, expected Sym(${sym})`);
    return l.bind(n, opaque(SIZE, { sym }));
  },
  'aten._assert_scalar': (l: Lowerer, n: FxNode) => {
    if (!facts(l, n.args[0]).cond) l.fail(`${n.target}: only runtime assertions on the bounds of a data-dependent size are dropped`);
    return l.bind(n, { kind: 'none' });
  },
  'aten.index': (l: Lowerer, n: FxNode) => {
    const x = dense(l, n, n.args[0], 'self');
    const idx = n.args[1];
    if (idx?.kind !== 'list' || idx.items.length !== 1) l.fail(`${n.target}: x[nonzero(mask)] is read densely only as the one index of dim 0; ${HOW}`);
    const pos = facts(l, idx.items[0]).pos ?? l.fail(`${n.target}: an index other than nonzero's positions, on a data-dependent size; ${HOW}`);
    if (x.dyn !== undefined) l.fail(`${n.target}: a selection of a selection (${x.dyn.sym} by ${pos}); ${HOW}`);
    const s = info(l, pos);
    if (x.t.shape[0] !== s.rows) l.fail(`${n.target}: nonzero's positions are rows of a mask of ${s.rows}, the indexed tensor has ${x.t.shape[0] ?? 0} rows`);
    const t = l.one('reshape', [x.t], { shape: selectedShape(l, n, idx.items[0], x.t.shape) }, l.out(n), x.t.dtype);
    return result(l, n, l.bind(n, t), { sym: pos, dim: 0 });
  },
  // nonzero(m)[:, 0] (the row indices) and nonzero(m).squeeze(1): the positions without their column dim.
  'aten.select': (l: Lowerer, n: FxNode, base: Rule) => {
    const f = facts(l, n.args[0]);
    if (f.pos === undefined) return rowwiseSelect(l, n, base);
    const v = f.v as OpaqueVal;
    if (l.int(n.args[1], 'dim') !== 1 || l.int(n.args[2], 'index') !== 0 || v.data['trail'] !== 1) l.fail(`${n.target} of nonzero's positions: only the row indices (column 0) are read; ${HOW}`);
    return l.bind(n, opaque(POS, { sym: f.pos, trail: 0, cols: 1 }));
  },
  'aten.index_put': (l: Lowerer, n: FxNode) => indexPut(l, n, false),
  'aten.index_put_': (l, n) => indexPut(l, n, true),
  'aten.mm': (l: Lowerer, n: FxNode, base: Rule) => {
    const a = dense(l, n, n.args[0], 'self');
    const b = dense(l, n, n.args[1], 'mat2');
    const sym = oneSym(l, n, [a.dyn, b.dyn]);
    // A row-wise product (u rows of a), or u columns of b: the other operand static.
    if (a.dyn?.dim === 0 && b.dyn === undefined) return result(l, n, base(l, n), { sym, dim: 0 });
    if (b.dyn?.dim === 1 && a.dyn === undefined) return result(l, n, base(l, n), { sym, dim: 1 });
    // A contraction over u (a weight gradient, aᵀ·b): only the selected rows' products summed.
    if (a.dyn?.dim === 1 && b.dyn?.dim === 0) {
      const z = zeroJunk(l, a.t, a.dyn);
      return result(l, n, l.withValue((n.args[0] as { name: string }).name, z, () => base(l, n)), undefined);
    }
    return l.fail(`${n.target}: a product with the data-dependent size (${sym}) at dims ${a.dyn?.dim ?? '-'} and ${b.dyn?.dim ?? '-'}: only row-wise products and a contraction over it are read densely; ${HOW}`);
  },
  'aten.t': (l, n, base) => transposed(l, n, base, 0, 1),
  'aten.transpose': (l, n, base) => transposed(l, n, base, l.int(n.args[1], 'dim0'), l.int(n.args[2], 'dim1')),
  'aten.view': (l, n, base) => viewRule(l, n, base),
  'aten._unsafe_view': (l, n, base) => viewRule(l, n, base),
  'aten.reshape': (l, n, base) => viewRule(l, n, base),
  'aten.unsqueeze': (l: Lowerer, n: FxNode, base: Rule) => {
    const x = dense(l, n, n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.t.shape.length + 1;
    if (d === 0) l.fail(`${n.target} at dim 0 moves the data-dependent dim; ${HOW}`);
    return rowwise(l, n, base);
  },
  'aten.squeeze': (l: Lowerer, n: FxNode, base: Rule) => {
    const f = facts(l, n.args[0]);
    if (f.pos !== undefined) {
      const v = f.v as OpaqueVal;
      const d = n.args[1] === undefined ? [] : l.ints(n.args[1], 'dim');
      if (d.length !== 1 || (d[0] !== 1 && d[0] !== -1) || v.data['trail'] !== 1 || v.data['cols'] !== 1) l.fail(`${n.target} of nonzero's positions: only squeeze(1) of a [N] mask's positions is read; ${HOW}`);
      return l.bind(n, opaque(POS, { sym: f.pos, trail: 0, cols: 1 }));
    }
    const x = dense(l, n, n.args[0], 'self');
    if (n.args[1] === undefined) l.fail(`${n.target} of every size-1 dim would squeeze the data-dependent dim when one row is selected; squeeze a given dim`);
    const dims = l.ints(n.args[1], 'dim').map((d) => (d < 0 ? d + x.t.shape.length : d));
    if (dims.includes(0)) l.fail(`${n.target} of the data-dependent dim; ${HOW}`);
    return rowwise(l, n, base);
  },
  'aten._softmax': alongDim(1, 'dim'),
  'aten._log_softmax': alongDim(1, 'dim'),
  'aten._softmax_backward_data': alongDim(2, 'dim'),
  'aten.sum': reduction(false),
  'aten.mean': reduction(true),
  'aten.new_zeros': (l, n, base) => created(l, n, base, 1),
  'aten.new_ones': (l, n, base) => created(l, n, base, 1),
  'aten.new_full': (l, n, base) => created(l, n, base, 1),
  'aten.zeros': (l, n, base) => created(l, n, base, 0),
  'aten.ones': (l, n, base) => created(l, n, base, 0),
  'aten.full': (l, n, base) => created(l, n, base, 0),
};
for (const k of 'add sub mul div neg exp log tanh sigmoid silu relu gelu gelu_backward silu_backward sigmoid_backward tanh_backward threshold_backward clone detach alias _to_copy contiguous sqrt rsqrt pow zeros_like ones_like full_like'.split(' ')) RULES[`aten.${k}`] = rowwise;
// linear(x, w, b) of selected rows x: each row times the static weight.
RULES['aten.linear'] = (l: Lowerer, n: FxNode, base: Rule) => {
  const x = dense(l, n, n.args[0], 'input');
  const w = dense(l, n, n.args[1], 'weight');
  const b = n.args[2] === undefined || n.args[2].kind === 'none' ? undefined : dense(l, n, n.args[2], 'bias');
  if (x.dyn?.dim !== 0 || w.dyn !== undefined || b?.dyn !== undefined) l.fail(`${n.target}: only selected rows times a static weight are read densely; ${HOW}`);
  return result(l, n, base(l, n), x.dyn);
};
for (const k of ['ge', 'le', 'gt', 'lt', 'eq'])
  RULES[`sym.${k}`] = (l: Lowerer, n: FxNode) => {
    const s = facts(l, n.args[0]).size;
    const c = n.args[1];
    if (s === undefined || c?.kind !== 'num') l.fail(`${n.target}: only a data-dependent size compared with a number is read (a runtime assertion's bound)`);
    return l.bind(n, opaque(COND, { sym: s, expr: n.type?.sym ?? '' }));
  };

function transposed(l: Lowerer, n: FxNode, base: Rule, i: number, j: number): Val {
  const x = dense(l, n, n.args[0], 'self');
  const d = x.dyn ?? l.fail(`${n.target}: internal: no data-dependent operand`);
  const r = x.t.shape.length;
  const [a, b] = [((i % r) + r) % r, ((j % r) + r) % r];
  const at = d.dim === a ? b : d.dim === b ? a : d.dim;
  if (at !== 0 && !(at === 1 && r === 2)) l.fail(`${n.target} moves the data-dependent dim (${d.sym}) to dim ${at} of ${r}: only a matrix transposed for a contraction is read; ${HOW}`);
  return result(l, n, base(l, n), { sym: d.sym, dim: at });
}

/** A view of a dense tensor: the u dim leading before and after (rows map to rows), sizes with N for the symbol. */
function viewRule(l: Lowerer, n: FxNode, base: Rule): Val {
  const x = dense(l, n, n.args[0], 'self');
  const s = substituted(l, n, 1);
  const sizes = n.args[1]?.kind === 'list' ? n.args[1].items : [];
  const first = sizes[0];
  const leadMinus = first?.kind === 'num' && first.value === -1 && s.sym === undefined;
  if (x.dyn === undefined) l.fail(`${n.target}: a view of a static tensor to a data-dependent size; ${HOW}`);
  if (x.dyn.dim !== 0 || !(s.lead || leadMinus) || (s.sym !== undefined && s.sym !== x.dyn.sym)) l.fail(`${n.target}: a view that does not keep the data-dependent dim (${x.dyn.sym}) leading mixes the selected rows; ${HOW}`);
  const rest = prod(x.t.shape.slice(1));
  const v = base(l, s.node);
  if (v.kind === 'tensor' && (v.shape[0] !== x.t.shape[0] || prod(v.shape.slice(1)) !== rest)) l.fail(`${n.target}: the view does not keep one row per selected row; ${HOW}`);
  return result(l, n, v, { sym: x.dyn.sym, dim: 0 });
}

/** zeros / new_zeros and the like: a size with the symbol makes a dense tensor (every row the fill). */
function created(l: Lowerer, n: FxNode, base: Rule, k: number): Val {
  const s = substituted(l, n, k);
  if (s.sym !== undefined && !s.lead) l.fail(`${n.target}: a data-dependent size that is not the first dim; ${HOW}`);
  // (new_zeros(y, size) reads only y's dtype: the dense y is as good as any)
  return result(l, n, base(l, s.node), s.sym === undefined ? undefined : { sym: s.sym, dim: 0 });
}

/**
 * index_put(x, [nonzero(m)], Y): row i_r of x replaced by (or, accumulating, added) Y[r], that is
 * row i where m holds by D[i]; nonzero's positions are distinct, so each row is written once.
 */
function indexPut(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  const x = dense(l, n, n.args[0], 'self');
  if (x.dyn !== undefined) l.fail(`${n.target} into a tensor that is itself a selection (${x.dyn.sym}); ${HOW}`);
  const idx = n.args[1];
  if (idx?.kind !== 'list' || idx.items.length !== 1) l.fail(`${n.target}: x[nonzero(mask)] = y is read densely only with the positions as the one index of dim 0; ${HOW}`);
  const pos = facts(l, idx.items[0]).pos ?? l.fail(`${n.target}: an index other than nonzero's positions with a data-dependent value; ${HOW}`);
  const s = info(l, pos);
  if (x.t.shape[0] !== s.rows) l.fail(`${n.target}: nonzero's positions are rows of a mask of ${s.rows}, the target has ${x.t.shape[0] ?? 0} rows`);
  const y = dense(l, n, n.args[2], 'values');
  const acc = l.bool(l.arg(n, 3, 'accumulate'), 'accumulate', false);
  const full = selectedShape(l, n, idx.items[0], x.t.shape);
  let d: TensorVal;
  if (y.dyn !== undefined) {
    if (y.dyn.sym !== pos) oneSym(l, n, [y.dyn, { sym: pos, dim: 0 }]);
    if (y.dyn.dim !== 0 || y.t.shape.length !== full.length || y.t.shape.some((v, i) => v !== full[i])) l.fail(`${n.target}: values of [${y.t.shape.join(', ')}] (dense) for the selected rows of [${full.join(', ')}]: only values of the selection's own shape are read densely; ${HOW}`);
    d = l.one('reshape', [y.t], { shape: [...x.t.shape] }, undefined, y.t.dtype);
  } else if (prod(y.t.shape) === 1) {
    d = y.t.shape.length === 0 ? y.t : l.one('reshape', [y.t], { shape: [] }, undefined, y.t.dtype);
  } else {
    return l.fail(`${n.target}: static values of [${y.t.shape.join(', ')}] for a data-dependent number of rows; ${HOW}`);
  }
  const m = maskAt(l, pos, 0, x.t.shape.length);
  const out = inPlace ? undefined : l.out(n);
  const r = acc ? l.one('add', [x.t, l.one('where', [m, d, l.constant(0)], {}, undefined, x.t.dtype)], {}, out, x.t.dtype) : l.one('where', [m, d, x.t], {}, out, x.t.dtype);
  if (inPlace) l.write(n.args[0], r);
  return result(l, n, l.bind(n, r), undefined);
}

/** The node with its annotation's u dims as N (a Sym annotation dropped): what the base rules check against. */
function densified(l: Lowerer, n: FxNode): FxNode {
  const ty = n.type;
  if (ty === undefined || (ty.dyn === undefined && ty.sym === undefined)) return n;
  if (ty.sym !== undefined) return { ...n, type: undefined };
  return { ...n, type: { dtype: ty.dtype, shape: ty.shape.map((s, i) => (ty.dyn?.[i] === undefined ? s : info(l, ty.dyn[i] as string).rows)) } };
}

/**
 * The dense shape of x[positions]: the rows, one dim of 1 per trailing dim of the positions
 * (nonzero's [u, 1]), x's other dims. A [N, 1] mask's two-column positions as one index would
 * also gather row 0 (the column index) for every selected row: refused.
 */
function selectedShape(l: Lowerer, n: FxNode, a: FxArg | undefined, x: readonly number[]): number[] {
  const v = facts(l, a).v as OpaqueVal;
  if (v.data['cols'] !== 1) l.fail(`${n.target}: the positions of a [N, 1] mask (two columns: row, column) used as one index; index with nonzero(mask)[:, 0] (the rows); ${HOW}`);
  return [info(l, String(v.data['sym'])).rows, ...(v.data['trail'] === 1 ? [1] : []), ...x.slice(1)];
}

/** select of a dense tensor along a dim other than u: row-wise. */
function rowwiseSelect(l: Lowerer, n: FxNode, base: Rule): Val {
  const x = dense(l, n, n.args[0], 'self');
  let d = l.int(n.args[1], 'dim');
  if (d < 0) d += x.t.shape.length;
  if (x.dyn === undefined || d === x.dyn.dim) l.fail(`${n.target} along the data-dependent dim picks one selected row by its place; ${HOW}`);
  return rowwise(l, n, base);
}

const baseKey = (n: FxNode): string => (n.target === 'getitem' ? 'getitem' : n.target.slice(0, n.target.lastIndexOf('.')));

/** The rules, each first seeing whether its node reads or makes a data-dependent size (above). */
export function withDynsize(rules: Readonly<Record<string, Rule>>): Record<string, Rule> {
  const r: Record<string, Rule> = {};
  const keys = new Set([...Object.keys(rules), ...Object.keys(RULES)]);
  for (const k of keys) {
    const raw: Rule = rules[k] ?? ((l, n) => l.fail(`unsupported op '${n.target}'`));
    // (the rules below read the dense form: annotations with u dims are given as dense shapes)
    const base: Rule = (l, n) => raw(l, densified(l, n));
    r[k] = (l: Lowerer, n: FxNode) => {
      const ty = n.type;
      const reads = n.args.some((a) => touches(l, a)) || Object.values(n.kwargs).some((a) => touches(l, a));
      if (!reads && ty?.dyn === undefined && ty?.sym === undefined) return base(l, n);
      const rule = RULES[n.target] ?? RULES[baseKey(n)];
      if (rule === undefined) {
        const what = reads ? 'reads a tensor whose size depends on the data' : `makes a result of data-dependent size [${ty === undefined ? '' : shapeText(ty)}]`;
        return l.fail(`${n.target} ${what} (rows selected by nonzero): no rule says what it computes on the dense form; ${HOW}`);
      }
      return rule(l, n, base);
    };
  }
  return r;
}
