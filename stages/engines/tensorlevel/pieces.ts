/**
 * Programs split into sub-boxes per template (docs/engine.md, "Tensor level per template",
 * piecewise-affine claims): when a claim is not one affine function over its program's box
 * (under SP with zig-zag CP a rank's sequence shard is chunk r for tp 0-3 and chunk 2cp-1-r for
 * tp 4-7), the box is cut along one axis into equal translated sub-ranges on which the claim
 * is affine. Each piece is a box: the per-template argument holds on it unchanged.
 */
import type { LoadedPlan } from '../../../lineage/load.js';
import type { TemplateFrame } from './frames.js';

/** At most this many pieces per program: a few, never a walk rank by rank. */
export const MAX_PIECES = 8;

/**
 * The ways to cut `frame` into m equal pieces along one axis it varies (m = 2, then more, up
 * to MAX_PIECES), in the order to try them. Each piece's set along the axis is the first
 * piece's set translated, so every check on a piece that reads coordinates only relative to
 * its base (affine values, bounds over the box) decides the same on all pieces.
 */
export function splits(plan: LoadedPlan, frame: TemplateFrame): TemplateFrame[][] {
  const out: TemplateFrame[][] = [];
  for (let m = 2; m <= MAX_PIECES; m++) {
    for (let a = 0; a < frame.sets.length; a++) {
      const ps = cutAlong(plan, frame, a, m);
      if (ps !== undefined) out.push(ps);
    }
  }
  return out;
}

/** `frame` cut into m equal translated pieces along axis a, or undefined when it cannot be. */
export function cutAlong(plan: LoadedPlan, frame: TemplateFrame, a: number, m: number): TemplateFrame[] | undefined {
  const set = frame.sets[a];
  if (set === undefined || set.length < m || set.length % m !== 0) return undefined;
  const len = set.length / m;
  for (let j = 1; j < m; j++) {
    const d = (set[j * len] as number) - (set[0] as number);
    for (let i = 0; i < len; i++) if ((set[j * len + i] as number) !== (set[i] as number) + d) return undefined;
  }
  const pieces: TemplateFrame[] = [];
  for (let j = 0; j < m; j++) {
    const sub = Int32Array.from(set.subarray(j * len, (j + 1) * len));
    const x0 = [...frame.x0];
    x0[a] = sub[0] as number;
    const sets = frame.sets.map((s, b) => (b === a ? sub : s));
    pieces.push({ r0: plan.mesh.rankOf(x0), x0, sets, full: frame.full.map((f, b) => (b === a ? sub.length === (plan.mesh.sizes[a] as number) : f)) });
  }
  return pieces;
}

/** The axis a cut of `whole` runs along (the one whose set its pieces split). */
export function cutAxis(whole: TemplateFrame, pieces: readonly TemplateFrame[]): number {
  return whole.sets.findIndex((s, a) => (pieces[0]?.sets[a]?.length ?? s.length) !== s.length);
}

/** The piece of `pieces` holding coordinates x, by index (pieces of one split partition the box). */
export function pieceOf(pieces: readonly TemplateFrame[], x: readonly number[]): number {
  return pieces.findIndex((f) => f.sets.every((s, a) => s.includes(x[a] as number)));
}
