/**
 * Vocab range masks as exporters print them (docs/engine.md, rule 10, Compare forms),
 * recognized once for both sides: a rank's program (stages/engines/tensorlevel/slices.ts
 * vocabOf) and the logical graph (world.ts, a mask that never holds). Each side gives its own
 * view of its graph. Two families:
 *  - Megatron: `(ids < s) | (ids >= e)` lowered to `[[ids < s] + [ids >= e] > 0]`;
 *  - vLLM (VocabParallelEmbedding.get_masked_input_and_mask): the inside mask
 *    `[(ids >= s)·(ids < e) + (ids >= a)·(ids < b) > 0]` (the added-vocabulary range [a, b)
 *    empty), the outside mask `[inside == 0]`, and the local ids `inside · (ids − offset)`,
 *    offset = `s·[ids in [s, e)] + k·[ids in [a, b)]`: ids − s inside, 0 (row 0) outside.
 */

/** What the matcher reads of a graph (a rank's program or the logical graph). */
export interface MaskGraph {
  /** The op writing tensor t, or -1 (an input). */
  producer(t: number): number;
  isAdd(op: number): boolean;
  /** A compare op's relation ('lt', 'ge', 'gt', ...), undefined for another op. */
  compareRel(op: number): string | undefined;
  inputs(op: number): readonly number[];
  /** The one value of a constant scalar, else undefined. */
  constant(t: number): number | undefined;
  /** Shapes as text, to check that no input broadcasts. */
  shapeKey(t: number): string;
  isMul(op: number): boolean;
  isSub(op: number): boolean;
  /** A scale op's input and integer factor, else undefined. */
  scaled(op: number): { x: number; f: number } | undefined;
}

type Range = { ids: number; s: number; e: number };

/**
 * The two inputs of `op` as `[ids >= a]` and `[ids < b]` (0/1 compares of one ids tensor with
 * constant scalars, in either order, no input broadcasting to t's shape): the ids and {a, b}.
 */
function geLtPair(g: MaskGraph, op: number, t: number): { ids: number; ge: number; lt: number } | undefined {
  if (g.inputs(op).length !== 2) return undefined;
  let ids: number | undefined;
  let ge: number | undefined;
  let lt: number | undefined;
  for (const c of g.inputs(op)) {
    const cop = g.producer(c);
    const how = cop < 0 ? undefined : g.compareRel(cop);
    const [x, k] = cop < 0 ? [] : [...g.inputs(cop)];
    const v = k === undefined ? undefined : g.constant(k);
    if (x === undefined || v === undefined || (ids !== undefined && x !== ids) || g.shapeKey(x) !== g.shapeKey(t) || g.shapeKey(c) !== g.shapeKey(t)) return undefined;
    ids = x;
    if (how === 'ge' && ge === undefined) ge = v;
    else if (how === 'lt' && lt === undefined) lt = v;
    else return undefined;
  }
  return ids === undefined || ge === undefined || lt === undefined ? undefined : { ids, ge, lt };
}

/** `(ids >= s)·(ids < e)` (torch's `&` of two bool compares of one ids tensor with constants), in either order: 1 exactly where s <= id < e (never, when s >= e). */
function rangeMask(g: MaskGraph, t: number): Range | undefined {
  const op = g.producer(t);
  const p = op < 0 || !g.isMul(op) ? undefined : geLtPair(g, op, t);
  return p === undefined ? undefined : { ids: p.ids, s: p.ge, e: p.lt };
}

/**
 * 1 exactly where the id is in [s, e), s < e: a range mask, or `[R1 + R2 > 0]` of two range
 * masks of the same ids of which one is empty (vLLM's `org_vocab_mask | added_vocab_mask` when
 * the model adds no vocabulary).
 */
export function insideMask(g: MaskGraph, t: number): Range | undefined {
  const r = rangeMask(g, t);
  if (r !== undefined) return r.s < r.e ? r : undefined;
  const op = g.producer(t);
  if (op < 0 || g.compareRel(op) !== 'gt') return undefined;
  const [x0, z] = g.inputs(op) as [number, number];
  if (z === undefined || g.constant(z) !== 0 || g.shapeKey(x0) !== g.shapeKey(t)) return undefined;
  const aop = g.producer(x0);
  if (aop < 0 || !g.isAdd(aop) || g.inputs(aop).length !== 2) return undefined;
  const parts = g.inputs(aop).map((c) => (g.shapeKey(c) === g.shapeKey(t) ? rangeMask(g, c) : undefined));
  if (parts.some((q) => q === undefined)) return undefined;
  const [a, b] = parts as [Range, Range];
  if (a.ids !== b.ids) return undefined;
  if (b.s >= b.e && a.s < a.e) return a;
  if (a.s >= a.e && b.s < b.e) return b;
  return undefined;
}

/** Whether t equals m.s at every position where m's ids are in [m.s, m.e) (an offset `s·[inside] + k·[never]`, or the constant s). */
function offsetInside(g: MaskGraph, t: number, m: Range, depth = 0): boolean {
  if (g.constant(t) === m.s) return true;
  const op = g.producer(t);
  if (op < 0 || depth > 4 || g.shapeKey(t) !== g.shapeKey(m.ids)) return false;
  const sc = g.scaled(op);
  if (sc !== undefined) {
    const r = rangeMask(g, sc.x);
    return r !== undefined && r.ids === m.ids && r.s === m.s && r.e === m.e && sc.f === m.s;
  }
  if (!g.isAdd(op) || g.inputs(op).length !== 2) return false;
  const [x, y] = g.inputs(op) as [number, number];
  return (offsetInside(g, x, m, depth + 1) && zeroInside(g, y, m)) || (offsetInside(g, y, m, depth + 1) && zeroInside(g, x, m));
}

/** Whether t is 0 wherever m's ids are in [m.s, m.e): k·[ids in an empty range or one disjoint from m's]. */
function zeroInside(g: MaskGraph, t: number, m: Range): boolean {
  const op = g.producer(t);
  const sc = op < 0 ? undefined : g.scaled(op);
  if (sc === undefined || g.shapeKey(t) !== g.shapeKey(m.ids)) return false;
  if (sc.f === 0) return true;
  const r = rangeMask(g, sc.x);
  return r !== undefined && r.ids === m.ids && (r.s >= r.e || r.e <= m.s || r.s >= m.e);
}

/** vLLM's local ids `inside · (ids − offset)`: ids − s where the id is in [s, e), 0 elsewhere (in either operand order). */
export function maskedLocalIds(g: MaskGraph, t: number): Range | undefined {
  const op = g.producer(t);
  if (op < 0 || !g.isMul(op) || g.inputs(op).length !== 2) return undefined;
  const ins = g.inputs(op);
  for (let i = 0; i < 2; i++) {
    const m = insideMask(g, ins[i] as number);
    const d = ins[1 - i] as number;
    const dop = g.producer(d);
    if (m === undefined || dop < 0 || !g.isSub(dop) || g.shapeKey(d) !== g.shapeKey(t) || g.shapeKey(ins[i] as number) !== g.shapeKey(t)) continue;
    const [x, off] = g.inputs(dop) as [number, number];
    if (x === m.ids && off !== undefined && offsetInside(g, off, m)) return m;
  }
  return undefined;
}

/**
 * The ids and range [s, e) when t is `[[ids < s] + [ids >= e] > 0]` (two 0/1 compares of one
 * ids tensor with constant scalars s < e, added, compared with 0, no broadcast): 1 exactly where
 * the id is outside [s, e); or vLLM's `[inside == 0]` (insideMask). Undefined for anything else.
 */
export function outsideMask(g: MaskGraph, t: number): { ids: number; s: number; e: number } | undefined {
  const op = g.producer(t);
  // vLLM: `~inside`, lowered to [inside == 0].
  if (op >= 0 && g.compareRel(op) === 'eq') {
    const [m, z] = g.inputs(op) as [number, number];
    return z !== undefined && g.constant(z) === 0 && g.shapeKey(m) === g.shapeKey(t) ? insideMask(g, m) : undefined;
  }
  if (op < 0 || g.compareRel(op) !== 'gt') return undefined;
  const [x0, z] = g.inputs(op) as [number, number];
  if (z === undefined || g.constant(z) !== 0) return undefined;
  const aop = g.producer(x0);
  // [ids < s] + [ids >= e]: outside [s, e) when s < e.
  const p = aop < 0 || !g.isAdd(aop) ? undefined : geLtPair(g, aop, t);
  return p === undefined || p.lt >= p.ge ? undefined : { ids: p.ids, s: p.lt, e: p.ge };
}
