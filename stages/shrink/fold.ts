/**
 * Folding an all-reduce too large for a part (docs/engine.md, "Groups too large for a part").
 *
 * A part (stages/shrink/part.ts) takes every member of a collective it reaches; D3's clipping
 * all-reduce spans 2,048 ranks and 405B's would span 16,384. When the group is larger than a
 * part may be, its members are put in classes and one representative per class is kept:
 * members of one class run the same ops (program, call site, attributes and shapes of what
 * they compute before the call) on inputs that are, each, the same logical slice (the same
 * values) or a slice the witness sets to zero. So each computes the same contribution, and
 * the all-reduce of the whole group is the all-reduce of the representatives, each counted
 * as often as its class has members (a scale before a sum; nothing for max and min).
 *
 * The zeros: a member's input slice is zero when it is disjoint from every slice the part
 * holds otherwise (per logical tensor, their bounding box). The part's logical side then reads
 * each such tensor masked to that box (zero outside), and a representative's zero inputs are
 * scaled by 0, so that the part computes the stage at inputs that are zero there: a real input
 * of the stage, whose other ranks' claims are slices of the same values. Each fold condition is
 * checked, never assumed; when one fails the part says why and stays open.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { evalLineage, type LineageNF } from '../../lineage/model.js';
import type { Program } from '../../plans/model.js';
import { registry } from '../../ops/registry.js';
import { neededDomains } from '../witness/domains.js';

/** Regions as LineageNF writes them: per dim, [s0, e0, s1, e1, ...]. */
type Ranges = readonly (readonly number[])[];

/** The bounding box of region `b` and box `a` (per dim one range [lo, hi]). */
function bbox(a: Ranges | undefined, b: Ranges): number[][] {
  return b.map((r, d) => {
    let lo = Infinity;
    let hi = -Infinity;
    for (let i = 0; i < r.length; i += 2) {
      lo = Math.min(lo, r[i] as number);
      hi = Math.max(hi, r[i + 1] as number);
    }
    const o = a?.[d];
    return o === undefined ? [lo, hi] : [Math.min(lo, o[0] as number), Math.max(hi, o[1] as number)];
  });
}

/** Whether region `a` misses box `box`: along some dim none of a's ranges meets the box's. */
function disjoint(a: Ranges, box: Ranges): boolean {
  return a.some((r, d) => {
    const [lo, hi] = box[d] as [number, number];
    for (let i = 0; i < r.length; i += 2) if ((r[i] as number) < hi && (r[i + 1] as number) > lo) return false;
    return true;
  });
}

/** What a member computes before the call, within its program: ops and the claims they read. */
interface Contribution {
  readonly ops: readonly number[];
  readonly inputs: readonly number[];
}

/** The walk from a call's inputs back to claims, in one program; why not, when it runs a collective or meets the stage's own tensor. */
function contribution(p: Program, producers: Int32Array, sites: ReadonlySet<number>, site: number, logical: number): Contribution | string {
  const ops = new Set<number>();
  const inputs = new Set<number>();
  const seen = new Set<number>();
  const stack = [...p.ops.opInputs(site)];
  while (stack.length > 0) {
    const t = stack.pop() as number;
    if (seen.has(t)) continue;
    seen.add(t);
    const spec = p.lineage[t];
    const op = producers[t] ?? -1;
    if (spec !== undefined) {
      if (spec.logical === logical) return `a member's contribution reads the stage's own tensor ('${p.tensors.name(t)}')`;
      if (p.inferred?.has(t) === true) return `a member's contribution reads an inferred hint ('${p.tensors.name(t)}')`;
      inputs.add(t);
      continue;
    }
    if (op < 0) return `'${p.tensors.name(t)}' has no producer and no lineage`;
    if (sites.has(op)) return `a member's contribution runs a further collective ('${p.ops.ids.name(op)}')`;
    ops.add(op);
    for (const x of p.ops.opInputs(op)) stack.push(x);
  }
  return { ops: [...ops].sort((a, b) => a - b), inputs: [...inputs].sort((a, b) => a - b) };
}

/** A folded call: the members kept, each with how many members it stands for. */
interface FoldedCall {
  readonly name: string;
  readonly members: number;
  /** Kept member -> its class's size (itself included). */
  readonly kept: ReadonlyMap<number, number>;
  /** The factor to scale a kept member's input by ('sum': its count; 'avg': count x kept / members), or undefined (max, min). */
  readonly factor: (m: number) => string | undefined;
}

/** The fold state of a part: zero inputs, and every zero slice per logical tensor (for the final check). */
export interface FoldState {
  readonly calls: FoldedCall[];
  /** `rank:tensor` of kept members' inputs set to zero. */
  readonly zero: Map<string, LineageNF>;
  /** Per logical tensor, the distinct regions set to zero (kept or folded members). */
  readonly zeroSlices: Map<number, Map<string, Ranges>>;
}

export const newFoldState = (): FoldState => ({ calls: [], zero: new Map(), zeroSlices: new Map() });

/**
 * Classes of the members of one all-reduce call and their representatives. `site(m)`: the
 * call on member m; `held`: the claims the part holds so far (`rank:tensor`), whose slices stay
 * nonzero; `inPart`: ranks already in the part (kept as themselves). Returns why not, when a
 * fold condition fails.
 */
export function foldCall(plan: LoadedPlan, logical: number, name: string, reduce: string, members: readonly number[], site: (m: number) => number, held: ReadonlyMap<string, LineageNF>, inPart: ReadonlySet<number>, state: FoldState): FoldedCall | string {
  if (reduce !== 'sum' && reduce !== 'avg' && reduce !== 'max' && reduce !== 'min') return `reduce '${reduce}'`;
  // Per logical tensor, the box of the slices the part holds: slices outside it may be zero.
  const box = new Map<number, number[][]>();
  for (const c of held.values()) box.set(c.logical, bbox(box.get(c.logical), c.ranges));
  const producers = new Map<number, Int32Array>();
  const contribs = new Map<string, Contribution | string>();
  const viewIds = new Map<unknown, number>();
  const viewKeys = new Map<string, string>();
  const sliceIds = new Map<string, number>();
  const classes = new Map<string, number[]>();
  const zeroOf = new Map<number, { t: number; nf: LineageNF }[]>();
  for (const m of members) {
    const qi = plan.rankProgram[m] as number;
    const q = plan.programs[qi] as Program;
    const qs = site(m);
    const ck = `${qi}:${qs}`;
    let c = contribs.get(ck);
    if (c === undefined) {
      let prod = producers.get(qi);
      if (prod === undefined) {
        prod = new Int32Array(q.tensors.size).fill(-1);
        for (let op = 0; op < q.ops.size; op++) for (const x of q.ops.opOutputs(op)) prod[x] = op;
        producers.set(qi, prod);
      }
      contribs.set(ck, (c = contribution(q, prod, new Set(q.collectiveSites), qs, logical)));
    }
    if (typeof c === 'string') return c;
    // Attributes and shapes of what it computes: ranks sharing a view share them.
    const v = plan.view(m);
    let vid = viewIds.get(v.attrs);
    if (vid === undefined) viewIds.set(v.attrs, (vid = viewIds.size));
    const vk = `${ck}:${vid}`;
    let vkey = viewKeys.get(vk);
    if (vkey === undefined) {
      const cc = c;
      viewKeys.set(vk, (vkey = JSON.stringify([cc.ops.map((o) => v.attrs[o] ?? null), [...cc.ops.flatMap((o) => [...q.ops.opOutputs(o)]), ...cc.inputs].map((t) => v.shapes[t] ?? null)])));
    }
    const keys: number[] = [];
    const zeros: { t: number; nf: LineageNF }[] = [];
    for (const t of c.inputs) {
      const spec = q.lineage[t];
      if (spec === undefined) return `'${q.tensors.name(t)}' has no claim`;
      const nf = evalLineage(spec, plan.mesh, m, plan.logical.shapes[spec.logical] ?? [], v.shapes[t] ?? []);
      if (nf.value.n !== 1) return `rank ${m}'s '${q.tensors.name(t)}' is an addend (its value is not one slice's)`;
      const b = box.get(nf.logical);
      let k: string;
      if (b === undefined || disjoint(nf.ranges, b)) {
        k = `Z${nf.logical}`;
        zeros.push({ t, nf });
        let z = state.zeroSlices.get(nf.logical);
        if (z === undefined) state.zeroSlices.set(nf.logical, (z = new Map()));
        z.set(JSON.stringify(nf.ranges), nf.ranges);
      } else k = JSON.stringify(nf);
      let id = sliceIds.get(k);
      if (id === undefined) sliceIds.set(k, (id = sliceIds.size));
      keys.push(id);
    }
    const key = `${ck}|${vkey}|${keys.join(',')}`;
    const l = classes.get(key);
    if (l === undefined) classes.set(key, [m]);
    else l.push(m);
    zeroOf.set(m, zeros);
  }
  // One representative per class: a member already in the part if there is one (it stands for
  // the others), else the lowest rank; other members already in the part stand for themselves.
  const kept = new Map<number, number>();
  for (const l of classes.values()) {
    const mine = l.filter((m) => inPart.has(m));
    const rep = mine[0] ?? (l[0] as number);
    kept.set(rep, l.length - mine.length + (mine.length === 0 ? 0 : 1));
    for (const m of mine.slice(1)) kept.set(m, 1);
  }
  for (const m of kept.keys()) {
    for (const { t, nf } of zeroOf.get(m) ?? []) state.zero.set(`${m}:${t}`, nf);
  }
  const n = members.length;
  const k = kept.size;
  const folded: FoldedCall = {
    name,
    members: n,
    kept,
    factor: (m) => {
      const c = kept.get(m) ?? 1;
      if (reduce === 'sum') return c === 1 ? undefined : String(c);
      if (reduce === 'avg') return c * k === n ? undefined : `${c * k}/${n}`;
      return undefined;
    },
  };
  state.calls.push(folded);
  return folded;
}

/**
 * The final check of a part's folds: per logical tensor with zero slices, the box of the
 * slices the part holds nonzero (every claim not set to zero) must miss every zero slice, and
 * 0 must be a value the tensor can take (a float input whose uses need no positive value).
 * Returns the masks (logical tensor -> box, undefined: zero everywhere) or why not.
 */
export function foldMasks(plan: LoadedPlan, held: ReadonlyMap<string, LineageNF>, state: FoldState): Map<number, number[][] | undefined> | string {
  const box = new Map<number, number[][]>();
  for (const [k, c] of held) if (state.zeroSlices.has(c.logical) && !state.zero.has(k)) box.set(c.logical, bbox(box.get(c.logical), c.ranges));
  const out = new Map<number, number[][] | undefined>();
  const need = state.zeroSlices.size === 0 ? [] : domainsOf(plan);
  for (const [l, zs] of state.zeroSlices) {
    const name = plan.logical.tensors.name(l);
    const b = box.get(l);
    if (b !== undefined) for (const z of zs.values()) if (!disjoint(z, b)) return `a zero slice of '${name}' meets the slices the part holds (${JSON.stringify(z)} and the box ${JSON.stringify(b)})`;
    const dtype = plan.logical.dtypes?.[l];
    if (plan.logical.domains[l] !== undefined || (dtype !== undefined && !/^(float|bfloat|half|double)/.test(dtype))) return `'${name}' is not a real tensor (zero is not one of its values)`;
    if (need[l] === 'positive') return `'${name}' must be positive where it is used (zero is outside its domain)`;
    out.set(l, b);
  }
  return out;
}

const DOMAINS = new WeakMap<LoadedPlan, ReturnType<typeof neededDomains>>();
function domainsOf(plan: LoadedPlan): ReturnType<typeof neededDomains> {
  let d = DOMAINS.get(plan);
  if (d === undefined) DOMAINS.set(plan, (d = neededDomains(plan)));
  return d;
}

/** The reduction of an all-reduce call on a rank's view (its `reduce` attribute). */
export function reduceOf(plan: LoadedPlan, r: number, op: number): string | undefined {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  if (registry.get(p.ops.kind[op] as number).name !== 'all_reduce') return undefined;
  const a = plan.view(r).attrs[op]?.['reduce'];
  return typeof a === 'string' ? a : undefined;
}
