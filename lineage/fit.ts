/**
 * Affine fits of lineage expressions on a box, and cuts of a box into pieces on which they
 * hold (issue 37; docs/engine.md, "Loading is per template", "Piecewise-affine specs").
 *
 * An expression that is not affine as written (`//`, `%`, `min`, `max`: SP sequence shards
 * under zig-zag CP are chunk r for tp 0-3 and chunk 2cp-1-r for tp 4-7) may still equal one
 * affine function on a box, or on each piece of the box cut along one axis. The fit reads the
 * expression at the box's base and one step along each axis it reads, then checks the
 * function at every coordinate of the axes the expression reads (its value depends on those
 * only): the fitted function equals the expression at every rank of the box, so every family
 * check (lineage/symbolic.ts) made with it is the per-rank check.
 */
import type { Box, Mesh } from '../plans/mesh.js';
import type { IntSpec } from '../plans/model.js';

/** An affine function of the mesh coordinates: c + sum k[a] * coord[a]. */
export interface Aff {
  readonly c: number;
  readonly k: number[];
}

/** Points checked per fitted expression (the product of the read axes' coordinate counts). */
const MAX_FIT_POINTS = 4096;
/** Pieces a box is cut into along one axis. */
const MAX_PIECES = 16;
/** Longest axis a box is cut along. */
const MAX_CUT_AXIS = 64;

/**
 * `s` as one affine function on `box` (checked at every coordinate it reads), or undefined.
 * Only mesh axes: an expression reading `rank` is left to the caller's other paths.
 */
export function fitOnBox(s: IntSpec, mesh: Mesh, box: Box): Aff | undefined {
  if (typeof s === 'number') return undefined;
  if (s.vars.includes('rank')) return undefined;
  const n = mesh.axes.length;
  const axes = s.vars.map((v) => mesh.axisIndex(v));
  if (axes.some((a) => a < 0)) return undefined;
  let points = 1;
  for (const a of axes) points *= (box.sets[a] as Int32Array).length;
  if (points > MAX_FIT_POINTS) return undefined;
  const x = Array.from(box.lo);
  const env = (v: string): number => x[mesh.axisIndex(v)] as number;
  const at = (): number | undefined => {
    try {
      const y = s.eval(env);
      return Number.isSafeInteger(y) ? y : undefined;
    } catch {
      return undefined;
    }
  };
  const f0 = at();
  if (f0 === undefined) return undefined;
  const k = new Array<number>(n).fill(0);
  for (const a of axes) {
    const set = box.sets[a] as Int32Array;
    if (set.length < 2) continue;
    const step = (set[1] as number) - (set[0] as number);
    x[a] = set[1] as number;
    const f1 = at();
    x[a] = set[0] as number;
    if (f1 === undefined || (f1 - f0) % step !== 0) return undefined;
    k[a] = (f1 - f0) / step;
  }
  let c = f0;
  for (let a = 0; a < n; a++) c -= (k[a] as number) * (box.lo[a] as number);
  // Every coordinate of the read axes (the others do not change the value).
  const read = [...new Set(axes)];
  const pos = new Int32Array(read.length);
  for (;;) {
    const y = at();
    let want = c;
    for (const a of read) want += (k[a] as number) * (x[a] as number);
    if (y !== want) return undefined;
    let i = read.length - 1;
    for (; i >= 0; i--) {
      const a = read[i] as number;
      const set = box.sets[a] as Int32Array;
      pos[i] = (pos[i] as number) + 1;
      if ((pos[i] as number) < set.length) {
        x[a] = set[pos[i] as number] as number;
        break;
      }
      pos[i] = 0;
      x[a] = set[0] as number;
    }
    if (i < 0) break;
  }
  return { c, k };
}

/** The box with axis `a` restricted to `coords` (a non-empty subset of its set). */
function subBox(box: Box, a: number, coords: Int32Array): Box {
  const sets = box.sets.map((s, b) => (b === a ? coords : s));
  const lo = Int32Array.from(box.lo);
  const hi = Int32Array.from(box.hi);
  lo[a] = coords[0] as number;
  hi[a] = coords[coords.length - 1] as number;
  const count = sets.reduce((p, s) => p * s.length, 1);
  return { sets, lo, hi, isBox: true, count };
}

/**
 * The box cut along one of `axes` into runs of consecutive coordinates (in its set's order) on
 * each of which `fits` holds, each run as long as it can be: the first axis that cuts into at
 * most MAX_PIECES pieces, or undefined. The pieces are disjoint and cover the box.
 */
export function cutBox(box: Box, axes: readonly number[], fits: (b: Box) => boolean): Box[] | undefined {
  for (const a of axes) {
    const set = box.sets[a] as Int32Array;
    // Runs are grown one coordinate at a time (quadratic in the axis): short axes only.
    if (set.length < 2 || set.length > MAX_CUT_AXIS) continue;
    const out: Box[] = [];
    let i = 0;
    while (i < set.length && out.length < MAX_PIECES) {
      // The longest run from i that fits (a single coordinate must fit, else no cut on this axis).
      let best: Box | undefined;
      let j = i + 1;
      for (; j <= set.length; j++) {
        const b = subBox(box, a, set.subarray(i, j));
        if (!fits(b)) break;
        best = b;
      }
      if (best === undefined) break;
      out.push(best);
      i = j - 1;
    }
    if (i === set.length && out.length > 1) return out;
  }
  return undefined;
}
