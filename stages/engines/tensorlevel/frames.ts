/**
 * Programs per template for tensor-level proofs (docs/engine.md, "Tensor level per template"):
 * a program's base rank and box of coordinates, walks over coordinates, affine values
 * substituted at a group member, and the collective call sites a group along some axes makes.
 */
import type { LoadedPlan } from '../../../lineage/load.js';
import { evalLineage, type LineageNF } from '../../../lineage/model.js';
import { programBox } from '../../../plans/mesh.js';
import type { Program } from '../../../plans/model.js';
import { type Relation, type Value, isSum, isRouted, isSoftmax, isPack } from './relations.js';
import { substRange } from './stripes.js';
import { isubst, type Int } from './sym.js';

/**
 * A program's collective call sites on groups along these mesh axes (as written), in program
 * order: the loader matches the k-th such call of one program with the k-th of another
 * (plans/symcoll.ts). Undefined when the program also names groups by rank list (those may
 * share queues with axis groups: plans/collectives.ts), so no match is read from it.
 */
export function axisSites(p: Program, axes: readonly number[]): readonly number[] | undefined {
  if ([...p.collectiveSites].some((op) => p.groups[op]?.kind === 'ranks')) return undefined;
  const key = axes.join('.');
  return [...p.collectiveSites].filter((op) => {
    const g = p.groups[op];
    return g?.kind === 'axes' && g.axes.join('.') === key;
  });
}

/** A stage decomposed per template, as proveTemplate reads it (stages/decompose/template.ts TemplateStage). */
export interface TemplateStageRef {
  readonly logical: number;
  readonly parts: readonly { readonly program: number; readonly tensor: number; readonly ranks: number }[];
}

/** A program per template: its base rank (lowest coordinates), their values, and the box. */
export interface TemplateFrame {
  readonly r0: number;
  readonly x0: readonly number[];
  readonly sets: readonly Int32Array[];
  /** Per axis: the program's ranks take every coordinate of it. */
  readonly full: readonly boolean[];
}

export function templateFrame(plan: LoadedPlan, p: Program): TemplateFrame | string {
  const box = programBox(p.ranks, plan.mesh);
  if (!box.isBox) return `per template: the ranks of program '${p.name}' are not a box of mesh coordinates`;
  if (p.shapeSpecs.some((sh) => sh.some((d) => typeof d !== 'number'))) return `per template: program '${p.name}' has shapes that depend on the coordinates`;
  const x0 = Array.from(box.lo);
  return { r0: plan.mesh.rankOf(x0), x0, sets: box.sets, full: box.sets.map((s, a) => s.length === plan.mesh.sizes[a]) };
}

/**
 * Calls `visit` at every coordinate of `axes` (each over its set of the box; the other axes at
 * the base), stopping at the first reason it returns.
 */
export function everyPoint(axes: readonly number[], sets: readonly Int32Array[], x0: readonly number[], visit: (x: readonly number[]) => string | undefined): string | undefined {
  const x = [...x0];
  const walk = (j: number): string | undefined => {
    if (j === axes.length) return visit(x);
    const a = axes[j] as number;
    for (const c of sets[a] as Int32Array) {
      x[a] = c;
      const bad = walk(j + 1);
      if (bad !== undefined) return bad;
    }
    x[a] = x0[a] as number;
    return undefined;
  };
  return walk(0);
}

/** Two programs' boxes agree on every axis but `skip` (then affine values mean the same in both). */
export function sameSetsOutside(a: TemplateFrame, b: TemplateFrame, skip: readonly number[]): boolean {
  // (One frame: the same sets. A dp group of 512 members in one program compared 512 sets of
  // 512 coordinates per call: 1.5 s of L1's 5 s.)
  if (a === b) return true;
  return a.sets.every((s, i) => {
    if (skip.includes(i)) return true;
    const t = b.sets[i];
    return t !== undefined && t.length === s.length && s.every((c, j) => c === t[j]);
  });
}

/** A value at the group member whose coordinates on `axes` are `at`. */
export function substValue(v: Value, axes: readonly number[], at: readonly number[], x0: readonly number[]): Value {
  const sub = (a: Int): Int => isubst(a, axes, at, x0);
  const rel = (r: Relation): Relation => ({
    ...r,
    ranges: r.ranges.map((rg) => substRange(rg, sub)),
    ...(r.part === undefined ? {} : { part: { ...r.part, comps: r.part.comps.map((c) => ({ ...c, cover: c.cover.map(sub) })) } }),
  });
  if (isSoftmax(v)) return { ...v, rows: v.rows.map((rg) => substRange(rg, sub)), keys: v.keys.map(sub) };
  if (isPack(v)) return { ...v, items: v.items.map(rel) };
  if (isRouted(v)) return { ...v, region: v.region.map(([a, b]) => [sub(a), sub(b)] as const), blocks: v.blocks.map(([a, b]) => [sub(a), sub(b)] as const) };
  return isSum(v) ? { terms: v.terms.map(rel) } : rel(v);
}

export function evalNF(plan: LoadedPlan, r: number, t: number): LineageNF {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  const spec = p.lineage[t];
  if (spec === undefined) throw new Error('no lineage');
  return evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
}

/** A coordinate set as text, built once per set (frames share their sets). */
const SET_TEXT = new WeakMap<Int32Array, string>();
function setText(set: Int32Array | undefined): string {
  if (set === undefined) return '';
  let t = SET_TEXT.get(set);
  if (t === undefined) SET_TEXT.set(set, (t = set.join('.')));
  return t;
}
/**
 * A coordinate set as a small integer, equal for sets of equal text (setText): keys built per
 * claim and per lifted call hold this instead of the set's text (128 coordinates of dp are
 * ~400 characters, hashed at every lookup).
 */
const SET_ID = new WeakMap<Int32Array, number>();
const SET_IDS = new Map<string, number>();
export function setId(set: Int32Array | undefined): number {
  if (set === undefined) return -1;
  let id = SET_ID.get(set);
  if (id === undefined) {
    const t = setText(set);
    id = SET_IDS.get(t);
    if (id === undefined) SET_IDS.set(t, (id = SET_IDS.size));
    SET_ID.set(set, id);
  }
  return id;
}
