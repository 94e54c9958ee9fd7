/**
 * ATen rules for the token permutation of expert-parallel MoE layers as Megatron and DeepSpeed
 * write them (issue 33): `argsort(ids, stable=True)`, `bincount` of routing choices,
 * `index_copy` by a permutation (the un-permute) and `index_select` (its backward). Each is
 * written with exact integer ops (compare, sum, iota, embedding), so the positions are the
 * ATen values for every routing, not an uninterpreted choice:
 *
 *   stable argsort: pos[s] = #{t : v[t] < v[s]} + #{t < s : v[t] = v[s]} (the sorted position of
 *   element s; ties keep their order), and perm[p] = sum_s s * [pos[s] = p].
 *   bincount: counts[e] = sum_s [v[s] = e].
 *   index_copy(self, 0, perm, src) with perm a permutation of every row: row r is src[inv[r]],
 *   inv[r] = sum_i i * [perm[i] = r].
 */
import type { FxNode } from './fxtext.js';
import type { RawParallelOp } from '../raw.js';
import type { Lowerer, Rule, TensorVal, Val } from './lower.js';

/** Tensors an argsort made, per lowering: permutations of 0..n-1 (index_copy relies on it). */
const PERMS = new WeakMap<Lowerer, Set<string>>();

function perms(l: Lowerer): Set<string> {
  let s = PERMS.get(l);
  if (s === undefined) PERMS.set(l, (s = new Set()));
  return s;
}

/** Positions along `dim` of a tensor of `shape` (int64). */
function positions(l: Lowerer, shape: number[], dim: number): TensorVal {
  return l.one('iota', [l.constant(0)], { shape, dim, step: 1 }, undefined, 'int64');
}

const I64 = 'int64';

/** inv[r] = sum_i i * [p[i] = r]: where each value of the permutation p ([n]) sits. */
function invert(l: Lowerer, p: TensorVal, out?: string): TensorVal {
  const n = p.shape[0] as number;
  const hit = l.one('compare', [l.one('reshape', [p], { shape: [n, 1] }, undefined, I64), positions(l, [1, n], 1)], { rel: 'eq' }, undefined, I64);
  return l.one('sum', [l.one('mul', [positions(l, [n, 1], 0), hit], {}, undefined, I64)], { dims: [0] }, out, I64);
}

function vector(l: Lowerer, n: FxNode, what: string): TensorVal {
  const v = l.tensor(n.args[0], what);
  if (v.shape.length !== 1) l.fail(`${n.target}: only a 1-D ${what} is supported, got [${v.shape.join(', ')}]`);
  return v;
}

function argsort(l: Lowerer, n: FxNode): Val {
  const v = vector(l, n, 'self');
  if (!l.bool(n.kwargs['stable'] ?? n.args[1], 'stable', false)) {
    l.fail(`${n.target}: argsort without stable=True orders equal values arbitrarily (PyTorch leaves it unspecified); write torch.argsort(x, stable=True) as Megatron does`);
  }
  const d = l.int(n.kwargs['dim'] ?? n.args[2], 'dim', -1);
  if (d !== -1 && d !== 0) l.fail(`${n.target}: dim ${d} of a 1-D tensor`);
  const descending = l.bool(n.kwargs['descending'] ?? n.args[3], 'descending', false);
  const len = v.shape[0] as number;
  const col = l.one('reshape', [v], { shape: [1, len] }, undefined, v.dtype); // v[t] along columns
  const row = l.one('reshape', [v], { shape: [len, 1] }, undefined, v.dtype); // v[s] along rows
  const ahead = l.one('compare', [col, row], { rel: descending ? 'gt' : 'lt' }, undefined, I64);
  const tie = l.one('compare', [col, row], { rel: 'eq' }, undefined, I64);
  const earlier = l.one('compare', [positions(l, [1, len], 1), positions(l, [len, 1], 0)], { rel: 'lt' }, undefined, I64);
  const pos = l.one('sum', [l.one('add', [ahead, l.one('mul', [tie, earlier], {}, undefined, I64)], {}, undefined, I64)], { dims: [1] }, undefined, I64);
  const perm = invert(l, pos, l.out(n));
  perms(l).add(perm.id);
  return l.bind(n, perm);
}

/** Follows views back from `id` to the op that made it. */
function producer(l: Lowerer, id: string): { op: string; inputs: string[]; outputs: string[] } | undefined {
  for (let i = l.ops.length - 1; i >= 0; i--) {
    const op = l.ops[i];
    if (op === undefined || !op.outputs.includes(id)) continue;
    if (['reshape', 'identity'].includes(op.op) && op.inputs[0] !== undefined) return producer(l, op.inputs[0]);
    return { op: op.op, inputs: [...op.inputs], outputs: [...op.outputs] };
  }
  return undefined;
}

function bincount(l: Lowerer, n: FxNode): Val {
  const v = vector(l, n, 'self');
  const w = n.kwargs['weights'] ?? n.args[1];
  if (w !== undefined && w.kind !== 'none') l.fail(`${n.target}: bincount with weights is not supported`);
  const len = n.type?.shape[0] ?? l.fail(`${n.target}: needs its result annotated with its shape`);
  // Its length is max(max(v) + 1, minlength): a shape that depends on the data, except for
  // routing choices (topk's indices over at most `len` experts), which are all below `len`.
  const p = producer(l, v.id);
  const scores = p?.op === 'topk' && p.outputs[1] !== undefined ? l.tensors.get(p.inputs[0] as string) : undefined;
  const experts = scores?.shape[scores.shape.length - 1];
  if (experts === undefined || experts > len) {
    l.fail(`${n.target}: its length depends on the largest value; only counts of routing choices (torch.topk indices over at most minlength=${len} experts) are supported`);
  }
  const hit = l.one('compare', [l.one('reshape', [v], { shape: [v.shape[0] as number, 1] }, undefined, v.dtype), positions(l, [1, len], 1)], { rel: 'eq' }, undefined, I64);
  return l.bind(n, l.one('sum', [hit], { dims: [0] }, l.out(n), I64));
}

/**
 * histc(x, bins, min, max) with min < max given: count[b] = Σ_s [x_s ≥ e_b] − [x_s ≥ e_{b+1}],
 * e_b = min + b·(max − min)/bins, the last bin closed at max (x = max counts there, x > max and
 * x < min nowhere), as ATen bins them (in exact arithmetic). min = max (the data's own range)
 * is refused: the edges would depend on the values.
 */
function histc(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const bins = l.int(l.arg(n, 1, 'bins'), 'bins', 100);
  const numOr = (k: number, what: string): number => {
    const a = l.arg(n, k, what);
    return a === undefined || a.kind === 'none' ? 0 : l.num(a, what);
  };
  const lo = numOr(2, 'min');
  const hi = numOr(3, 'max');
  if (!(lo < hi)) l.fail(`${n.target}: min ${lo} and max ${hi} take the range from the data; give min < max`);
  if (bins < 1 || bins > 1024) l.fail(`${n.target}: ${bins} bins (1 to 1024 supported)`);
  const flat = x.shape.length === 1 ? x : l.one('reshape', [x], { shape: [x.shape.reduce((a, b) => a * b, 1)] });
  const edge = (b: number): TensorVal => l.constant(lo + (b * (hi - lo)) / bins);
  // 0/1 and counts as int64, so the result (a count) is known to be an integer: `.long()` of it is exact.
  const atLeast = (b: number): TensorVal => (b === bins ? l.one('compare', [flat, l.constant(hi)], { rel: 'gt' }, undefined, I64) : l.one('compare', [flat, edge(b)], { rel: 'ge' }, undefined, I64));
  const counts: TensorVal[] = [];
  let above = atLeast(0);
  for (let b = 0; b < bins; b++) {
    const next = atLeast(b + 1);
    counts.push(l.one('reshape', [l.one('sum', [l.one('sub', [above, next], {}, undefined, I64)], {}, undefined, I64)], { shape: [1] }, undefined, I64));
    above = next;
  }
  return l.bind(n, counts.length === 1 ? l.one('identity', [counts[0] as TensorVal], {}, l.out(n), x.dtype) : l.one('concat', counts, { dim: 0 }, l.out(n), x.dtype));
}

/**
 * perm // k (floor_divide by a positive integer) of an argsort's permutation, whose values are
 * 0..n-1: Σ_{j=1}^{⌊(n-1)/k⌋} [perm ≥ j·k], exact (Megatron's `sorted_indices // topk`, the
 * token of each sorted slot). Other operands are refused: their range is not known.
 */
function floorDivide(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const k = n.args[1]?.kind === 'num' ? l.num(n.args[1], 'other') : NaN;
  if (!perms(l).has(x.id) || !Number.isInteger(k) || k < 1) {
    l.fail(`${n.target}: only an argsort's permutation divided by a positive integer (perm // topk) is supported`);
  }
  if (k === 1) return l.bind(n, l.one('identity', [x], {}, l.out(n), I64));
  const len = x.shape[0] as number;
  const steps = Math.floor((len - 1) / k);
  if (steps === 0) return l.bind(n, l.one('scale', [x], { factor: 0 }, l.out(n), I64));
  let acc: TensorVal | undefined;
  for (let j = 1; j <= steps; j++) {
    const ge = l.one('compare', [x, l.constant(j * k)], { rel: 'ge' }, j === steps && acc === undefined ? l.out(n) : undefined, I64);
    acc = acc === undefined ? ge : l.one('add', [acc, ge], {}, j === steps ? l.out(n) : undefined, I64);
  }
  return l.bind(n, acc as TensorVal);
}

/** Rows of x ([n, ...]) picked by the integer ids ([k]): an embedding lookup of the flattened rows. */
function rows(l: Lowerer, x: TensorVal, ids: TensorVal, out: string): TensorVal {
  const rest = x.shape.slice(1);
  const width = rest.reduce((a, b) => a * b, 1);
  const w = rest.length === 1 ? x : l.one('reshape', [x], { shape: [x.shape[0] as number, width] });
  const e = l.one('embedding', [ids, w], {}, rest.length === 1 ? out : undefined, x.dtype);
  return rest.length === 1 ? e : l.one('reshape', [e], { shape: [ids.shape[0] as number, ...rest] }, out);
}

function dim0(l: Lowerer, n: FxNode, x: TensorVal): void {
  const d = l.int(n.args[1], 'dim');
  if (d !== 0 && d !== -x.shape.length) l.fail(`${n.target}: only dim 0 is supported`);
  if (x.shape.length < 1) l.fail(`${n.target}: a 0-d tensor`);
}

function indexCopy(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  dim0(l, n, x);
  const ix = l.tensor(n.args[2], 'index');
  const src = l.tensor(n.args[3], 'source');
  // With repeated indices PyTorch keeps one of the writes, unspecified which: only an argsort's
  // permutation of every row is exact (each row written once, nothing of self left).
  if (!perms(l).has(ix.id) || ix.shape[0] !== x.shape[0]) {
    l.fail(`${n.target}: only an index that is a permutation of every row (torch.argsort's) is supported`);
  }
  if (n.target.endsWith('_')) l.fail(`${n.target}: in-place index_copy_ is not supported; use index_copy`);
  return l.bind(n, rows(l, src, invert(l, ix), l.out(n)));
}

function indexSelect(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  dim0(l, n, x);
  const ix = l.tensor(n.args[2], 'index');
  if (ix.shape.length !== 1) l.fail(`${n.target}: a 1-D index is expected`);
  return l.bind(n, rows(l, x, ix, l.out(n)));
}

/**
 * Routing choices as the run chose them (`planproof.routing`, written by the capture after each
 * topk): an identity of the symbolic choices, switched to the chosen values by `pinRouting` when
 * a value read into Python depends on them. Split sizes read with `.tolist()` are baked into the
 * graph as constants; with the choices left symbolic, verify's random inputs would route
 * differently from the baked sizes and refute a correct program. Pinned, the plan is the
 * program on the inputs that route as the run did (an open set around the captured inputs
 * where no scores tie), and off it the same analytic formulas (linear, GELU, softmax, MSE), so
 * equal there means equal everywhere on it and a difference anywhere is one on it too.
 */
interface Routing {
  readonly id: string;
  readonly op: RawParallelOp;
  readonly pinned: string;
  /** topk's values, and the scores gathered at the pinned choices that replace them. */
  readonly values: string;
  readonly pinnedValues: string;
  /** A top-1 choice: its score kept as [..., 1] and flat, and the scores it was chosen from. */
  readonly rowMax?: { readonly keep: string; readonly flat: string; readonly scores: string; readonly last: number };
  /** Ops from this index on read the routing (the ones before made it). */
  readonly from: number;
  readonly loc: string;
  done: boolean;
}
const ROUTINGS = new WeakMap<Lowerer, Routing[]>();

function routing(l: Lowerer, n: FxNode): Val {
  const ix = l.tensor(n.args[0], 'indices');
  const chosen = l.ints(n.args[1], 'values');
  const size = ix.shape.reduce((a, b) => a * b, 1);
  if (chosen.length !== size) l.fail(`${n.target}: ${chosen.length} values for ${size} choices`);
  const one = chosen.map((v) => l.one('reshape', [l.constant(v)], { shape: [1] }, undefined, I64));
  const flat = one.length === 1 ? (one[0] as TensorVal) : l.one('concat', one, { dim: 0 }, undefined, I64);
  const pinned = l.one('reshape', [flat], { shape: [...ix.shape] }, undefined, I64);
  // The topk that chose them (argmax / max.dim's indices: a topk of 1, reshaped when keepdim is False).
  let src = ix.id;
  let top: RawParallelOp | undefined;
  for (let i = l.ops.length - 1; i >= 0 && top === undefined; i--) {
    const o = l.ops[i] as RawParallelOp;
    if (!o.outputs.includes(src)) continue;
    if (o.op === 'topk' && o.outputs[1] === src) top = o;
    else if (o.op === 'reshape' && o.inputs[0] !== undefined) src = o.inputs[0];
    else break;
  }
  const scores = top === undefined ? undefined : l.tensors.get(top.inputs[0] as string);
  const topIx = l.tensors.get(src);
  if (top === undefined || scores === undefined || topIx === undefined) return l.fail(`${n.target}: expected the indices of a topk`);
  // Pinned, topk's values are the scores at the pinned choices (the same on the inputs that
  // route as the run did), so the whole plan is one analytic formula.
  const pinnedValues = l.one('gather', [scores, topIx.id === ix.id ? pinned : l.one('reshape', [pinned], { shape: [...topIx.shape] }, undefined, I64)], {}, undefined, scores.dtype);
  // A top-1 choice: the row maximum (max.dim's values, torch.max(...).values) is its score too.
  const k = (top.attrs as { k?: number } | undefined)?.k;
  const rowMax = k === 1 ? { keep: pinnedValues.id, flat: l.one('reshape', [pinnedValues], { shape: scores.shape.slice(0, -1) }).id, scores: scores.id, last: scores.shape.length - 1 } : undefined;
  const r = l.one('identity', [ix], {}, l.out(n), ix.dtype);
  const op = l.ops[l.ops.length - 1] as RawParallelOp;
  let list = ROUTINGS.get(l);
  if (list === undefined) ROUTINGS.set(l, (list = []));
  list.push({ id: r.id, op, pinned: pinned.id, values: top.outputs[0] as string, pinnedValues: pinnedValues.id, ...(rowMax === undefined ? {} : { rowMax }), from: l.ops.length, loc: n.loc ?? `${l.g.file}:${n.line}`, done: false });
  return l.bind(n, r);
}

/** Ops from `from` on read `to` where they read `id`, and so do the names bound to it. */
function replaceFrom(l: Lowerer, from: number, id: string, to: string): void {
  for (const op of l.ops.slice(from)) op.inputs.forEach((t, k) => t === id && (op.inputs[k] = to));
  const tv = l.tensors.get(to);
  if (tv !== undefined) l.redirect(id, tv);
}

/** Pins every routing choice the tensor `id` (a value read into Python at `where`) depends on. */
export function pinRouting(l: Lowerer, id: string, where: string): void {
  const list = ROUTINGS.get(l) ?? [];
  if (list.every((r) => r.done)) return;
  const made = new Map<string, RawParallelOp>();
  for (const op of l.ops) for (const o of op.outputs) made.set(o, op);
  const seen = new Set<string>();
  const todo = [id];
  while (todo.length > 0) {
    const t = todo.pop() as string;
    if (seen.has(t)) continue;
    seen.add(t);
    const op = made.get(t);
    if (op !== undefined) todo.push(...op.inputs);
  }
  for (const r of list) {
    if (r.done || !seen.has(r.id)) continue;
    r.op.inputs[0] = r.pinned;
    // (and the ops lowered after the pin: a mask's positions pin it mid-layer, before the gates are read)
    replaceFrom(l, r.from, r.values, r.pinnedValues);
    const m = r.rowMax;
    if (m !== undefined) {
      // The row maximum of the scores a top-1 choice was made from is the score at the choice
      // on the inputs that route as the run did (with ties too: the choice is a maximum).
      for (const op of l.ops) {
        const a = (op.attrs ?? {}) as { dims?: number[]; keepdim?: boolean };
        if (op.op !== 'amax' || op.inputs[0] !== m.scores || a.dims?.length !== 1 || a.dims[0] !== m.last) continue;
        replaceFrom(l, r.from, op.outputs[0] as string, a.keepdim === true ? m.keep : m.flat);
      }
    }
    r.done = true;
    l.reads.push(`${r.loc}: the routing choices '${r.id}' pinned to those the run made (the value read at ${where} depends on them)`);
  }
}

export const SORT_RULES: Record<string, Rule> = {
  'aten.argsort': argsort,
  'aten.bincount': bincount,
  'aten.histc': histc,
  'aten.floor_divide': floorDivide,
  'aten.index_copy': indexCopy,
  'aten.index_select': indexSelect,
  'planproof.routing': routing,
};
