/**
 * Dispatch by boolean mask, as hand-written MoE layers do it (issue 33; docs/import.md,
 * "Dispatch by mask"): `torch.where(expert_mask[e])` / `nonzero`, `x[mask]`, `y[mask] = v`,
 * `index_add_`, `unbind`. A mask's positions fix a size the graph cannot leave symbolic, so the
 * capture writes them as the run found them (`planproof.positions(mask, [...])`). They are
 * used only where the mask is a function of constants and routing choices: those choices are
 * pinned to the run's (aten-sort.ts, `pinRouting`), after which the mask's formula evaluates
 * to the run's mask on every input, and the positions are exact. A mask computed from any
 * other value (activations, inputs) is refused: its positions would hold only for inputs
 * that the proof could not tell apart from others.
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, TensorVal, Val } from './lower.js';
import { pinRouting } from './aten-sort.js';

const prod = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
const I64 = 'int64';

/** Ops whose value is exactly ATen's on integer and boolean operands (evaluated the same on both sides). */
const EXACT = new Set(['identity', 'reshape', 'expand', 'slice', 'concat', 'split', 'permute', 'transpose', 'compare', 'where', 'add', 'sub', 'mul', 'neg', 'sum', 'scale', 'iota', 'pad', 'maximum', 'minimum']);

interface Recorded {
  readonly mask: TensorVal;
  /** Row-major [k, mask rank]: nonzero(mask) as the run computed it. */
  readonly flat: readonly number[];
  readonly loc: string;
}
/** Per lowering: mask tensor id -> its recorded positions. */
const RECORDED = new WeakMap<Lowerer, Map<string, Recorded>>();

function recorded(l: Lowerer): Map<string, Recorded> {
  let m = RECORDED.get(l);
  if (m === undefined) RECORDED.set(l, (m = new Map()));
  return m;
}

/** Per lowering: the values of the constant index tensors made here (row-major), by tensor id. */
const KNOWN = new WeakMap<Lowerer, Map<string, readonly number[]>>();

/** The values of a constant index tensor this module made (positions, their columns), if it is one. */
function knownInts(l: Lowerer, id: string): readonly number[] | undefined {
  return KNOWN.get(l)?.get(id);
}

/** A constant int64 tensor of `shape` holding `values` (row-major). */
function constInts(l: Lowerer, values: readonly number[], shape: number[], out?: string): TensorVal {
  const one = values.map((v) => l.one('reshape', [l.constant(v)], { shape: [1] }, undefined, I64));
  const flat = one.length === 1 ? (one[0] as TensorVal) : l.one('concat', one, { dim: 0 }, undefined, I64);
  const t = l.one('reshape', [flat], { shape }, out, I64);
  let m = KNOWN.get(l);
  if (m === undefined) KNOWN.set(l, (m = new Map()));
  m.set(t.id, values);
  return t;
}

/**
 * x[ids] = v (accumulate False) with ids a constant of distinct values (a mask's positions):
 * those rows replaced by v's (broadcast), each written once, the others kept. Undefined when
 * ids are not such a constant; repeated ids are refused (ATen keeps one write, unspecified which).
 */
export function putDistinct(l: Lowerer, n: FxNode, x: TensorVal, ids: TensorVal, v: TensorVal, out: string | undefined): TensorVal | undefined {
  const vals = knownInts(l, ids.id);
  if (vals === undefined || ids.shape.length !== 1) return undefined;
  if (new Set(vals).size !== vals.length) l.fail(`${n.target}: x[ids] = v with repeated ids keeps one write, unspecified which`);
  const rows = x.shape[0] as number;
  const rest = x.shape.slice(1);
  const width = prod(rest);
  const k = vals.length;
  const full = [k, ...rest];
  const g = l.one('reshape', [v.shape.length === full.length && v.shape.every((d, i) => d === full[i]) ? v : l.one('expand', [v], { shape: full })], { shape: [k, width] });
  const placed = l.one('embedding_backward', [g, ids], { num_embeddings: rows });
  const hitRows = new Set(vals);
  const hit = l.one('compare', [constInts(l, Array.from({ length: rows }, (_, r) => (hitRows.has(r) ? 1 : 0)), [rows, 1]), l.constant(0)], { rel: 'ne' }, undefined, 'bool');
  const r = l.one('where', [hit, placed, l.one('reshape', [x], { shape: [rows, width] })]);
  return l.one('reshape', [r], { shape: [...x.shape] }, out, x.dtype);
}

/**
 * Pins the routing choices `id` depends on, then fails unless `id` is computed by exact integer
 * ops from constants only: then the plan's value of it is the run's, on every input.
 */
function requireDetermined(l: Lowerer, r: Recorded, what: string): void {
  pinRouting(l, r.mask.id, `${r.loc} (the positions of a mask)`);
  const made = new Map<string, { op: string; inputs: readonly string[] }>();
  for (const op of l.ops) for (const o of op.outputs) made.set(o, op);
  const constants = new Set(l.extra.filter((e) => e.constant !== undefined).map((e) => e.id));
  const seen = new Set<string>();
  const todo = [r.mask.id];
  while (todo.length > 0) {
    const t = todo.pop() as string;
    if (seen.has(t)) continue;
    seen.add(t);
    const op = made.get(t);
    if (op === undefined) {
      if (!constants.has(t)) l.fail(`${what}: the mask depends on '${t}', not only on routing choices (torch.topk indices) and constants; its positions (a size that depends on the data) would hold only for the captured values. Dispatch with a 0/1 mask multiply (moe_top1.py) instead`);
      continue;
    }
    if (!EXACT.has(op.op)) l.fail(`${what}: the mask is computed with '${op.op}' from routing choices; only exact integer ops (one_hot, comparisons, sums, cumsum) are supported there`);
    todo.push(...op.inputs);
  }
}

/**
 * A mask that selects nothing (x[mask] of no rows, aten-empty.ts): its recorded positions must
 * be none, and it must be determined by pinned routing and constants as any other mask, so that
 * it selects nothing on every input the verdict covers.
 */
export function requireEmptySelection(l: Lowerer, n: FxNode, mask: TensorVal): void {
  const r = recorded(l).get(mask.id) ?? l.fail(`${n.target}: a boolean mask selects no element in the captured run, and the capture recorded no positions for it (a mask of at most 4096 elements, captured by planproof capture)`);
  if (r.flat.length !== 0) l.fail(`${n.target}: the graph says the mask selects nothing, but its recorded positions are ${r.flat.length / mask.shape.length}`);
  requireDetermined(l, r, `${n.target}`);
}

/** The recorded positions of `mask`, checked and pinned: one int64 index tensor per mask dim. */
export function maskIndices(l: Lowerer, n: FxNode, mask: TensorVal, what: string): TensorVal[] {
  const r = recorded(l).get(mask.id) ?? l.fail(`${n.target}: a boolean mask index (x[mask]) selects a number of elements that depends on the data, and the capture recorded no positions for ${what} (a mask of at most 4096 elements, captured by planproof capture)`);
  requireDetermined(l, r, `${n.target}`);
  const d = mask.shape.length;
  const k = r.flat.length / d;
  if (k === 0) l.fail(`${n.target}: the mask ${what} selects nothing in the captured run (an empty tensor)`);
  return mask.shape.map((_, j) => constInts(l, r.flat.filter((_, i) => i % d === j), [k]));
}

/** The row ids of a mask over x's leading dims, flattened: sum_j pos[:, j] * stride_j (constants). */
function flatIds(l: Lowerer, n: FxNode, mask: TensorVal): TensorVal {
  const r = recorded(l).get(mask.id) ?? l.fail(`${n.target}: no positions recorded for the mask`);
  requireDetermined(l, r, `${n.target}`);
  const d = mask.shape.length;
  const k = r.flat.length / d;
  if (k === 0) l.fail(`${n.target}: the mask selects nothing in the captured run (an empty tensor)`);
  const ids: number[] = [];
  for (let i = 0; i < k; i++) {
    let f = 0;
    for (let j = 0; j < d; j++) f = f * (mask.shape[j] as number) + (r.flat[i * d + j] as number);
    ids.push(f);
  }
  return constInts(l, ids, [k]);
}

/** Is this x[mask] = v with v holding one row per selected element (not a broadcast fill)? */
export function positional(l: Lowerer, x: TensorVal, mask: TensorVal, v: TensorVal): boolean {
  const r = recorded(l).get(mask.id);
  if (r === undefined || v.shape.length !== x.shape.length - mask.shape.length + 1) return false;
  return v.shape[0] === r.flat.length / mask.shape.length;
}

/**
 * x[mask] = v (or += v) with v one row per selected element: the rows at the mask's (distinct)
 * positions replaced by (or added to) v's, in nonzero's order, as ATen writes them.
 */
export function maskPut(l: Lowerer, n: FxNode, x: TensorVal, mask: TensorVal, v: TensorVal, accumulate: boolean, out: string | undefined): TensorVal {
  const d = mask.shape.length;
  const rows = prod(mask.shape);
  const width = prod(x.shape.slice(d));
  const ids = flatIds(l, n, mask);
  const k = ids.shape[0] as number;
  const g = l.one('reshape', [v], { shape: [k, width] });
  // Positions are distinct: the backward of a lookup places each row once.
  const placed = l.one('embedding_backward', [g, ids], { num_embeddings: rows });
  const xf = l.one('reshape', [x], { shape: [rows, width] });
  const r = accumulate ? l.one('add', [xf, placed]) : l.one('where', [l.one('reshape', [mask], { shape: [rows, 1] }, undefined, 'bool'), placed, xf]);
  return l.one('reshape', [r], { shape: [...x.shape] }, out, x.dtype);
}

function positions(l: Lowerer, n: FxNode): Val {
  const mask = l.tensor(n.args[0], 'mask');
  const flat = l.ints(n.args[1], 'positions');
  const d = mask.shape.length;
  if (d === 0 || flat.length % d !== 0) l.fail(`${n.target}: ${flat.length} numbers are not positions in a ${d}-dim mask`);
  for (let i = 0; i < flat.length; i++) {
    const p = flat[i] as number;
    if (!Number.isInteger(p) || p < 0 || p >= (mask.shape[i % d] as number)) l.fail(`${n.target}: position ${p} out of range`);
  }
  const r: Recorded = { mask, flat, loc: n.loc ?? `${l.g.file}:${n.line}` };
  recorded(l).set(mask.id, r);
  // nonzero's result: materialized (checked, pinned) only where something reads it.
  const v: OpaqueVal = {
    kind: 'opaque',
    what: 'the positions of a mask',
    data: { mask: mask.id },
    materialize: () => {
      requireDetermined(l, r, 'aten.nonzero (torch.where(mask), mask.nonzero())');
      const k = flat.length / d;
      if (k === 0) l.fail(`${n.target}: the mask selects nothing in the captured run (an empty tensor)`);
      return constInts(l, flat, [k, d]);
    },
  };
  return l.bind(n, v);
}

/** index_add(self, 0, index, source, alpha): self + the source rows summed at their ids (any ids, repeated ones add). */
const indexAdd = (inPlace: boolean): Rule => (l, n) => {
  const x = l.tensor(n.args[0], 'self');
  const dim = l.int(n.args[1], 'dim');
  if (dim !== 0 && dim !== -x.shape.length) l.fail(`${n.target}: only dim 0 is supported`);
  const ids = l.tensor(n.args[2], 'index');
  if (ids.shape.length !== 1) l.fail(`${n.target}: a 1-D index is expected`);
  const src = l.tensor(n.args[3], 'source');
  const alpha = l.num(n.kwargs['alpha'] ?? n.args[4], 'alpha', 1);
  const width = prod(x.shape.slice(1));
  const k = ids.shape[0] as number;
  if (src.shape[0] !== k || prod(src.shape.slice(1)) !== width) l.fail(`${n.target}: source [${src.shape.join(', ')}] does not match ${k} rows of [${x.shape.join(', ')}]`);
  const g = l.one('reshape', [alpha === 1 ? src : l.one('scale', [src], { factor: alpha })], { shape: [k, width] });
  const added = l.one('embedding_backward', [g, ids], { num_embeddings: x.shape[0] as number });
  const r = l.one('add', [x, x.shape.length === 2 ? added : l.one('reshape', [added], { shape: [...x.shape] })], {}, inPlace ? undefined : l.out(n), x.dtype);
  // In place (Mixtral's final_hidden_states.index_add_): the written tensor's name holds the sum.
  if (inPlace) l.write(n.args[0], r);
  return l.bind(n, r);
};

/** unbind(x, dim): each slice along dim, without it. */
function unbind(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  let d = l.int(l.arg(n, 1, 'dim'), 'dim', 0);
  if (d < 0) d += x.shape.length;
  const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
  const shape = x.shape.filter((_, i) => i !== d);
  const known = knownInts(l, x.id);
  if (known !== undefined && x.shape.length === 2) {
    // A mask's positions: each column a constant (so x[ids] = v can tell its ids are distinct).
    const cols = x.shape[1] as number;
    const pick = (i: number): number[] => (d === 1 ? known.filter((_, j) => j % cols === i) : known.slice(i * cols, (i + 1) * cols));
    return l.bind(n, { kind: 'list', items: Array.from({ length: size }, (_, i) => constInts(l, pick(i), shape)) }, (n.args[0] as { name?: string }).name);
  }
  const items: TensorVal[] = [];
  for (let i = 0; i < size; i++) items.push(l.one('reshape', [l.one('slice', [x], { dim: d, start: i, end: i + 1 })], { shape }, undefined, x.dtype));
  // The pieces are views of x (LSTM's steps over time, `q, k, v = qkv.unbind(0)`): a write
  // through one makes x stale, and the others stay readable (disjoint pieces, lower.ts).
  return l.bind(n, { kind: 'list', items }, (n.args[0] as { name?: string }).name);
}

/**
 * cumsum(x, dim): out_i = Σ_j [j ≤ i]·x_j along dim, a sum against the 0/1 triangle (exact;
 * Switch's token priority `cumsum(one_hot(expert), dim=-2)`). Up to 1,024 along dim.
 */
function cumsum(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const nd = x.shape.length;
  let d = l.int(n.args[1], 'dim');
  if (d < 0) d += nd;
  const len = x.shape[d] ?? l.fail(`dim ${d} out of range`);
  if (len > 1024) l.fail(`${n.target}: ${len} elements along dim ${d}: at most 1,024 are supported`);
  const dtype = n.type?.dtype ?? (x.dtype === 'bool' ? I64 : x.dtype);
  const dims = x.shape.map((_, i) => i);
  const front = [d, ...dims.filter((i) => i !== d)];
  const xp = d === 0 ? x : l.one('permute', [x], { dims: front });
  const rest = xp.shape.slice(1);
  const xe = l.one('reshape', [xp], { shape: [len, 1, ...rest] });
  const j = l.one('iota', [l.constant(0)], { shape: [len, len], dim: 0, step: 1 }, undefined, I64);
  const i = l.one('iota', [l.constant(0)], { shape: [len, len], dim: 1, step: 1 }, undefined, I64);
  const tri = l.one('reshape', [l.one('compare', [j, i], { rel: 'le' }, undefined, I64)], { shape: [len, len, ...rest.map(() => 1)] }, undefined, I64);
  const sum = l.one('sum', [l.one('mul', [xe, tri], {}, undefined, xe.dtype)], { dims: [0] }, d === 0 ? l.out(n) : undefined, dtype);
  if (d === 0) return l.bind(n, sum);
  const back = dims.map((k) => front.indexOf(k));
  return l.bind(n, l.one('permute', [sum], { dims: back }, l.out(n), dtype));
}

export const MASK_RULES: Record<string, Rule> = {
  'aten.cumsum': cumsum,
  'planproof.positions': positions,
  'aten.index_add': indexAdd(false),
  'aten.index_add_': indexAdd(true),
  'aten.unbind': unbind,
};
