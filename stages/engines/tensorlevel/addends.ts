/**
 * The addend walk of proveTemplate (docs/engine.md, "Tensor level per template"): an addend
 * claim checked at every coordinate of the axes its index and the derived addends move with.
 * At 405B with SP that is 6.5 million coordinates; building the claim and the derived relation
 * as objects at each one (substValue, then text keys of interned affine values) cost ~75 s and
 * most of the run's garbage. Here each part's affine values are numbers per coordinate in a
 * typed array, and what the walk decides is decided on them, exactly as on the objects:
 *
 * - Substituting coordinates on `axes` into `v + sum_a k[a] (x[a] - x0[a])` leaves the
 *   coefficients off `axes` (the residual) the same at every coordinate; only the value moves.
 *   So two substituted values of one slot are equal (as interned values, hence as text) iff
 *   their numbers are, and two relations substituted from one derived relation are `sameRel`
 *   iff all their slots' numbers are (the rest, logical, scale, keys, is the same object).
 * - `axes` holds every axis of the claim's index and of the derived addend's covers, so those
 *   substitute to plain numbers: the addends are built from numbers, with no interning.
 * - The group key is the claim's region substituted, as text; it is built once per distinct
 *   numbers of the region's slots that move on `axes` (once per part when none does).
 * - Replicas from two parts (two programs) are compared as objects, as before.
 * Visits, messages and the order of the checks are the walk's (everyPoint: the first axis
 * outermost), so the answer is the same.
 */
import { substValue, type TemplateFrame } from './frames.js';
import { type Comp, type Part, type Relation, regionKey, sameRel, unionParts, coversAll, isProduct } from './relations.js';
import type { Int } from './sym.js';

/** One part's walk: its derived relation and its slots' numbers at every coordinate. */
interface Walked {
  readonly d: Relation;
  readonly axes: readonly number[];
  readonly frame: TemplateFrame;
  /** Coordinates in walk order, `axes.length` per point (for the rare object comparison). */
  readonly xs: Int32Array;
  /** The derived relation's slots (ranges, then covers), `nd` per point. */
  readonly vals: Float64Array;
  readonly nd: number;
  /** Number of slots that are the covers (the last ones). */
  readonly ncover: number;
}

interface Entry {
  readonly w: Walked;
  readonly point: number;
}

/** A relation's affine values in a fixed order: ranges (start, end per dim), then each component's cover. */
function slotsOf(r: Relation): Int[] {
  const out: Int[] = [];
  for (const [a, b] of r.ranges) out.push(a, b);
  for (const c of r.part?.comps ?? []) for (const x of c.cover) out.push(x);
  return out;
}

function safe(a: Float64Array, from: number, n: number): boolean {
  for (let i = from; i < from + n; i++) if (!Number.isSafeInteger(a[i])) return false;
  return true;
}

/** Per slot: its value at the base, and its coefficient on each walk axis (row-major). */
function affineTable(slots: readonly Int[], axes: readonly number[]): { base: Float64Array; coef: Float64Array; moves: boolean[] } {
  const base = new Float64Array(slots.length);
  const coef = new Float64Array(slots.length * axes.length);
  const moves: boolean[] = [];
  slots.forEach((s, i) => {
    let m = false;
    if (typeof s === 'number') base[i] = s;
    else {
      base[i] = s.v;
      axes.forEach((a, j) => {
        const k = s.k[a] ?? 0;
        coef[i * axes.length + j] = k;
        if (k !== 0) m = true;
      });
    }
    moves.push(m);
  });
  return { base, coef, moves };
}

/** The addend groups of one stage: per group key, the derived addend of each claimed index. */
export class AddendGroups {
  private readonly groups = new Map<string, { n: number; byIdx: Map<number, Entry> }>();

  /**
   * Walks one part: at every coordinate of `axes` (each over its set of the frame's box), the
   * claimed index and region there, and the derived addend there, recorded in its group.
   * Returns the walk's first reason to stop, if any.
   */
  walk(claim: Relation, d: Relation, axes: readonly number[], frame: TemplateFrame, n: number): string | undefined {
    const cpart = claim.part as Part;
    const idx0 = (cpart.comps[0] as Comp).cover[0] as Int;
    // The index is a number at each coordinate iff it moves only on `axes` (then everywhere).
    if (typeof idx0 !== 'number' && idx0.k.some((k, a) => k !== 0 && !axes.includes(a))) return 'an addend index that depends on the coordinates';
    const dslots = slotsOf(d);
    // (The caller walks every axis of the covers; a cover that would stay affine is not walked here.)
    const off = (x: Int): boolean => typeof x !== 'number' && x.k.some((k, a) => k !== 0 && !axes.includes(a));
    if ((d.part?.comps ?? []).some((c) => c.cover.some(off))) return 'an addend cover that moves on axes not walked';
    const ncover = (d.part?.comps ?? []).reduce((q, c) => q + c.cover.length, 0);
    const regSlots = claim.ranges.flatMap(([a, b]) => [a, b]);
    const A = axes.length;
    const dt = affineTable(dslots, axes);
    const rt = affineTable(regSlots, axes);
    const it = affineTable([idx0], axes);
    const movingReg = rt.moves.flatMap((m, i) => (m ? [i] : []));
    const sizes = axes.map((a) => (frame.sets[a] as Int32Array).length);
    const points = sizes.reduce((q, s) => q * s, 1);
    const nd = dslots.length;
    const w: Walked = { d, axes, frame, xs: new Int32Array(points * A), vals: new Float64Array(points * nd), nd, ncover };
    const dx = new Float64Array(A);
    const pos = new Int32Array(A);
    const gkByRegion = new Map<string | number, string>();
    const x0 = frame.x0;
    const valueAt = (t: { base: Float64Array; coef: Float64Array }, i: number): number => {
      let s = t.base[i] as number;
      for (let j = 0; j < A; j++) s += (t.coef[i * A + j] as number) * (dx[j] as number);
      return s;
    };
    for (let p = 0; p < points; p++) {
      // The coordinates of point p, the last axis fastest (everyPoint's order).
      for (let j = 0; j < A; j++) {
        const a = axes[j] as number;
        const c = (frame.sets[a] as Int32Array)[pos[j] as number] as number;
        w.xs[p * A + j] = c;
        dx[j] = c - (x0[a] as number);
      }
      for (let i = 0; i < nd; i++) w.vals[p * nd + i] = valueAt(dt, i);
      const idx = valueAt(it, 0);
      // Sym.of's range, which the objects' walk enforced by throwing.
      if (!Number.isSafeInteger(idx) || !safe(w.vals, p * nd, nd)) return 'affine value out of the safe integer range';
      // The moving slots' numbers as the key: one slot (the usual case) as the number itself,
      // with no text built per point; the key's form is fixed per walk, so forms never mix.
      let rk: string | number;
      if (movingReg.length === 1) rk = valueAt(rt, movingReg[0] as number);
      else {
        rk = '';
        for (const i of movingReg) rk += `${valueAt(rt, i)},`;
      }
      let gk = gkByRegion.get(rk);
      if (gk === undefined) {
        const cl = substValue(claim, axes, this.coords(w, p), x0) as Relation;
        gkByRegion.set(rk, (gk = `${cpart.key}@${regionKey(cl)}`));
      }
      let g = this.groups.get(gk);
      if (g === undefined) this.groups.set(gk, (g = { n, byIdx: new Map() }));
      const prev = g.byIdx.get(idx);
      if (prev !== undefined && !this.same(prev, { w, point: p })) return `replicas of addend ${idx} derive different values`;
      g.byIdx.set(idx, { w, point: p });
      for (let j = A - 1; j >= 0; j--) {
        if (++(pos[j] as number) < (sizes[j] as number)) break;
        pos[j] = 0;
      }
    }
    return undefined;
  }

  /** Every group holds all its addends once, and they add up to the whole value. */
  check(): string | undefined {
    for (const [gk, g] of this.groups) {
      if (g.byIdx.size !== g.n) return `addends ${gk}: ${g.byIdx.size} of ${g.n} are computed in this stage`;
      const es = [...g.byIdx.values()];
      const fast = unionCoversAll(es);
      const all = fast ?? ((): boolean => {
        const u = unionParts(es.map((e) => this.part(e)));
        return u !== undefined && coversAll(u);
      })();
      if (!all) return `the claimed addends ${gk} do not add up to the whole value`;
    }
    return undefined;
  }

  /** The full coordinates of a point (the axes off the walk at the base). */
  private coords(w: Walked, p: number): number[] {
    const x = [...w.frame.x0];
    w.axes.forEach((a, j) => {
      x[a] = w.xs[p * w.axes.length + j] as number;
    });
    return x;
  }

  private same(a: Entry, b: Entry): boolean {
    if (a.w === b.w) {
      for (let i = 0; i < a.w.nd; i++) if (a.w.vals[a.point * a.w.nd + i] !== b.w.vals[b.point * b.w.nd + i]) return false;
      return true;
    }
    const at = (e: Entry): Relation => substValue(e.w.d, e.w.axes, this.coords(e.w, e.point), e.w.frame.x0) as Relation;
    return sameRel(at(a), at(b));
  }

  /** The derived addend at a point: its covers are numbers there (their axes are walked). */
  private part(e: Entry): Part {
    const p = e.w.d.part as Part;
    let i = e.point * e.w.nd + (e.w.nd - e.w.ncover);
    const comps: Comp[] = p.comps.map((c) => {
      const cover: number[] = [];
      for (let k = 0; k < c.cover.length; k++) cover.push(e.w.vals[i++] as number);
      return { kind: c.kind, cover, total: c.total };
    });
    return p.max === true ? { key: p.key, comps, max: true } : { key: p.key, comps };
  }
}

/**
 * What `coversAll(unionParts(parts))` answers for these addends, computed on their numbers
 * (relations.ts's unionParts and unionGrid step for step, with its unionCover, on covers that
 * are numbers: no Part objects, no text keys; 4 million addends in SP's weight gradients at 405B).
 * Undefined where that path would leave the numbers (two addends or fewer, decompositions or
 * components that differ, a product's pairwise merges): the caller then runs unionParts.
 */
function unionCoversAll(es: readonly Entry[]): boolean | undefined {
  const e0 = es[0];
  if (e0 === undefined || es.length <= 2) return undefined;
  const p0 = e0.w.d.part as Part;
  for (const e of es) {
    const p = e.w.d.part as Part;
    if (p === p0) continue;
    if (p.key !== p0.key || p.comps.length !== p0.comps.length || p.comps.some((c, i) => c.kind !== (p0.comps[i] as Comp).kind || c.total !== (p0.comps[i] as Comp).total)) return undefined;
  }
  const covers = es.map((e) => coversOf(e));
  let u: number[][] | undefined;
  if (isProduct(p0)) {
    u = gridN(covers, p0.comps, 0);
    if (u === undefined) return es.length > MAX_PRODUCT_UNION_N ? false : undefined;
  } else {
    u = [];
    for (let i = 0; i < p0.comps.length; i++) {
      const all: number[] = [];
      for (const c of covers) for (const x of c[i] as number[]) all.push(x);
      const ui = unionCoverN((p0.comps[i] as Comp).kind, all);
      if (ui === undefined) return false;
      u.push(ui);
    }
  }
  return u.every((c, i) => {
    const { kind, total } = p0.comps[i] as Comp;
    return kind === 'idx' ? c.length === total && c.every((x, j) => x === j) : c.length === 2 && c[0] === 0 && c[1] === total;
  });
}

/** relations.ts's MAX_PRODUCT_UNION: past it a product that is no grid is not united. */
const MAX_PRODUCT_UNION_N = 64;

/** An entry's covers, per component, as numbers. */
function coversOf(e: Entry): number[][] {
  const w = e.w;
  let i = e.point * w.nd + (w.nd - w.ncover);
  return (w.d.part as Part).comps.map((c) => {
    const out: number[] = [];
    for (let k = 0; k < c.cover.length; k++) out.push(w.vals[i++] as number);
    return out;
  });
}

/** A cover as a map key (compKey's text; a lone number as itself). */
const keyN = (c: readonly number[]): string | number => (c.length === 1 ? (c[0] as number) : c.join(','));

/** unionGrid on numbers (the components' kinds and totals already agree). */
function gridN(ps: readonly (readonly number[][])[], comps: readonly Comp[], i: number): number[][] | undefined {
  const groups = new Map<string | number, (readonly number[][])[]>();
  for (const p of ps) {
    const k = keyN(p[i] as number[]);
    const g = groups.get(k);
    if (g === undefined) groups.set(k, [p]);
    else g.push(p);
  }
  const all: number[] = [];
  for (const g of groups.values()) for (const x of (g[0] as number[][])[i] as number[]) all.push(x);
  const head = unionCoverN((comps[i] as Comp).kind, all);
  if (head === undefined) return undefined;
  if (i + 1 === comps.length) return groups.size === ps.length ? [head] : undefined;
  let rest: number[][] | undefined;
  for (const g of groups.values()) {
    const r = gridN(g, comps, i + 1);
    if (r === undefined) return undefined;
    if (rest === undefined) rest = r;
    else if (r.length !== rest.length || r.some((c, j) => !sameNums(c, rest?.[j] as number[]))) return undefined;
  }
  return rest === undefined ? undefined : [head, ...rest];
}

const sameNums = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * relations.ts's unionCover(kind, [], all) on covers that are numbers, without its pairs and
 * closures (on numbers icmp is the sign of the difference, never undefined): for 'idx' the
 * indices sorted, undefined on a repeat; for ranges the [start, end) pairs in a stable sort by
 * start (ties keep their order, as Array.prototype.sort does there), adjacent ones merged,
 * undefined where one starts before the last one ends (the first pair is never compared).
 */
export function unionCoverN(kind: Comp['kind'], all: readonly number[]): number[] | undefined {
  if (kind === 'idx') {
    const s = new Set<number>();
    for (const x of all) {
      if (s.has(x)) return undefined;
      s.add(x);
    }
    return [...s].sort((x, y) => x - y);
  }
  const n = all.length >> 1;
  const ord = new Int32Array(n);
  for (let i = 0; i < n; i++) ord[i] = i;
  ord.sort((i, j) => (all[2 * i] as number) - (all[2 * j] as number) || i - j);
  const out: number[] = [];
  for (let k = 0; k < n; k++) {
    const i = ord[k] as number;
    const st = all[2 * i] as number;
    const e = all[2 * i + 1] as number;
    const last = out.length - 1;
    if (last > 0 && st < (out[last] as number)) return undefined;
    if (last > 0 && st === out[last]) out[last] = e;
    else out.push(st, e);
  }
  return out;
}
