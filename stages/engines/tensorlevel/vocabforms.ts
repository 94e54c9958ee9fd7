/**
 * Megatron's vocab range mask as exporters print it, `(ids < s) | (ids >= e)` lowered to
 * `[[ids < s] + [ids >= e] > 0]` (docs/engine.md, rule 10, Compare forms), recognized once for
 * both sides: a rank's program (stages/engines/tensorlevel/slices.ts vocabOf) and the logical
 * graph (world.ts, a mask that never holds). Each side gives its own view of its graph.
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
}

/**
 * The ids and range [s, e) when t is `[[ids < s] + [ids >= e] > 0]` (two 0/1 compares of one
 * ids tensor with constant scalars s < e, added, compared with 0, no broadcast): 1 exactly where
 * the id is outside [s, e). Undefined for anything else.
 */
export function outsideMask(g: MaskGraph, t: number): { ids: number; s: number; e: number } | undefined {
  const op = g.producer(t);
  if (op < 0 || g.compareRel(op) !== 'gt') return undefined;
  const [x0, z] = g.inputs(op) as [number, number];
  if (z === undefined || g.constant(z) !== 0) return undefined;
  const aop = g.producer(x0);
  if (aop < 0 || !g.isAdd(aop)) return undefined;
  let ids: number | undefined;
  let s: number | undefined;
  let e: number | undefined;
  for (const c of g.inputs(aop)) {
    const cop = g.producer(c);
    const how = cop < 0 ? undefined : g.compareRel(cop);
    const [x, k] = cop < 0 ? [] : [...g.inputs(cop)];
    const v = k === undefined ? undefined : g.constant(k);
    if (x === undefined || v === undefined || (ids !== undefined && x !== ids) || g.shapeKey(x) !== g.shapeKey(t) || g.shapeKey(c) !== g.shapeKey(t)) return undefined;
    ids = x;
    if (how === 'lt' && s === undefined) s = v;
    else if (how === 'ge' && e === undefined) e = v;
    else return undefined;
  }
  return ids === undefined || s === undefined || e === undefined || s >= e ? undefined : { ids, s, e };
}
