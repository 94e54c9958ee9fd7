/**
 * What tensor-level proofs derive (docs/engine.md, "Tensor-level proofs"): relations (`scale`
 * times a region of a tensor of the logical world, or one addend of it), sums of relations,
 * routed MoE buffers, exact fractions for their scales, and the arithmetic on covers of
 * addends. Plain data and pure functions; the rules that derive them are the prover's
 * (stages/engines/tensorlevel/prover.ts and the classes it extends).
 */
import { groupKey, type LineageNF } from '../../../lineage/model.js';
import type { AttrValue, Attrs, DimLabel, Shape } from '../../../ops/types.js';
import type { Placement } from '../../../plans/model.js';
import { canonJson } from '../../cache/canon.js';
import type { Stage } from '../../decompose/prove.js';
import { iadd, icmp, iconst, ikey, imul, isub, type Int } from './sym.js';

export type Range = readonly [Int, Int];

/** An exact positive or negative rational, num/den in lowest terms (den > 0). */
export interface Frac {
  readonly num: number;
  readonly den: number;
}
export const ONE: Frac = { num: 1, den: 1 };
function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
export function frac(num: number, den: number): Frac | undefined {
  if (den === 0 || !Number.isSafeInteger(num) || !Number.isSafeInteger(den)) return undefined;
  const g = gcd(num, den) || 1;
  const s = den < 0 ? -1 : 1;
  return { num: (s * num) / g, den: (s * den) / g };
}
export const fmul = (a: Frac, b: Frac): Frac | undefined => frac(a.num * b.num, a.den * b.den);
export const feq = (a: Frac, b: Frac): boolean => a.num === b.num && a.den === b.den;
export const fkey = (a: Frac): string => `${a.num}/${a.den}`;
export const fdiv = (a: Frac, b: Frac): Frac | undefined => frac(a.num * b.den, a.den * b.num);
export function parseFrac(v: number | string): Frac | undefined {
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return frac(v, 1);
    return undefined;
  }
  const m = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(v);
  return m === null ? undefined : frac(Number(m[1]), Number(m[2] ?? '1'));
}

/**
 * One addend of a decomposition: the addends with one `key` sum to the relation's value.
 * A decomposition has one or more components (a sum of two partial values has two); per
 * component, `cover` lists which addends this tensor holds: addend indices (`idx`), or
 * [start, end) pairs of a summed range (`range`), and `total` is their number or the summed
 * dim's size. A set of addends is the whole value when, per component, their covers
 * partition 0..total.
 */
export interface Comp {
  readonly kind: 'idx' | 'range';
  readonly cover: readonly Int[];
  readonly total: number;
}
export interface Part {
  readonly key: string;
  readonly comps: readonly Comp[];
  /** Max-addends (amax on a slice): combined by max only, never added, scaled or mapped. */
  readonly max?: true;
}
export const isMaxPart = (r: Relation): boolean => r.part?.max === true;

export interface Relation {
  readonly logical: number;
  /** [start, end) per dim of the logical tensor (affine in the coordinates per template: stages/engines/tensorlevel/sym.ts). */
  readonly ranges: readonly Range[];
  /** parallel = scale x logical region (or, with `part`, one addend of that). */
  readonly scale: Frac;
  readonly part?: Part;
  /**
   * Broadcast dims: the logical region is one index wide there and the parallel tensor holds
   * copies of it along the dim (an expand); consumers resolve them against a partner input.
   */
  readonly bcast?: readonly number[];
}

/**
 * A sum of relations of one local shape (squared norms of parameters held in different ways,
 * added up before an all-reduce). Terms are normalized: one per tensor, region and
 * decomposition, in key order.
 */
export interface Sum {
  readonly terms: readonly Relation[];
}
/**
 * A routed buffer (mixture of experts, the packed layout: OpDef.routing): the parallel
 * tensor's rows along `sdim` are the slots of the tokens in `blocks` (row ranges of the logical
 * routing choices `idx`, [N, k]), one segment of |block| x k rows per block in order, each
 * packed per expert as dispatch packs them; along `edim` it holds the experts `region[edim]`.
 * Slot (i, j) of a block, at its place in expert e's segment, holds `factor` x the row of
 * logical tensor `of` at the place the logical dispatch gives that slot (the logical
 * buffer is the same permutation of all N tokens' slots); along the other dims, `region`. The
 * rows after a segment's slots (padding) are zero when `padZero`. `region[sdim]` is the whole
 * slot dim (the blocks say which rows). docs/engine.md, "Routed buffers".
 */
export interface Routed {
  readonly routed: true;
  /** The logical tensor (canonical id) and its region (field names differ from Relation's: a routed buffer is never read as one). */
  readonly of: number;
  readonly region: readonly Range[];
  readonly edim: number;
  readonly sdim: number;
  /** The logical routing choices (canonical id), their number of experts and choices per token. */
  readonly idx: number;
  readonly experts: number;
  readonly k: number;
  readonly blocks: readonly Range[];
  readonly factor: Frac;
  readonly padZero: boolean;
}
/**
 * Ring attention's online-softmax statistics (docs/engine.md, rule 14; ring.ts): output `out`
 * (0 the block-normalized output, 1 the row max, 2 the row sum of exp(score - max)) of
 * attention_partial over the rows `rows` (batch dims, query heads, query positions) of the
 * logical attention op `op`, restricted to the key positions `keys` (a cover: [start, end)
 * pairs, ascending) and the logical op's mask. Never a region of a tensor: only ring.ts's rules
 * read it (materialize refuses it).
 */
export interface Softmax {
  readonly softmax: true;
  readonly op: number;
  readonly out: number;
  readonly rows: readonly Range[];
  readonly keys: readonly Int[];
}
/**
 * Values side by side along `dim` that are no one region (a concat of addends of different
 * decompositions, as ring attention packs its gradient accumulators for one send): item i is
 * local positions [off_i, off_i + sizes[i]) along dim. Only a split at the items' bounds reads
 * it (ring.ts); materialize refuses it.
 */
export interface Pack {
  readonly pack: true;
  readonly dim: number;
  readonly items: readonly Relation[];
  readonly sizes: readonly number[];
}
export type Value = Relation | Sum | Routed | Softmax | Pack;
export type Derived = Value | string;
export const isSum = (v: Value): v is Sum => 'terms' in v;
export const isRouted = (v: Value): v is Routed => 'routed' in v;
export const isSoftmax = (v: Value): v is Softmax => 'softmax' in v;
export const isPack = (v: Value): v is Pack => 'pack' in v;
/** Values no region rule reads: routed buffers, softmax statistics, packs. */
export const isOpaque = (v: Value): v is Routed | Softmax | Pack => isRouted(v) || isSoftmax(v) || isPack(v);
export const termsOf = (v: Relation | Sum): readonly Relation[] => (isSum(v) ? v.terms : [v]);
/** The slots a routed buffer holds, in order: equal keys mean aligned rows. */
export const slotKey = (v: Routed): string => `${v.idx}|${v.experts}|${v.k}|${v.blocks.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')}`;
/** Everything a value says, as text (memo keys). */
export function valueKey(v: Value): string {
  if (isSoftmax(v)) return `S${v.op}.${v.out}@${v.rows.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')}|${v.keys.map(ikey).join(',')}`;
  if (isPack(v)) return `P${v.dim}|${v.sizes.join(',')}|${v.items.map((r) => valueKey(r)).join('|')}`;
  if (isRouted(v)) return `R${v.of}@${v.region.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')}|${v.edim},${v.sdim}|${slotKey(v)}*${fkey(v.factor)}${v.padZero ? 'z' : ''}`;
  return termsOf(v)
    .map((r) => `${relKey(r)}#${coverKey(r.part)}`)
    .join('&');
}
export function termKey(r: Relation): string {
  return `${regionKey(r)}+${r.part?.key ?? ''}`;
}

/**
 * Adds relations: terms of one tensor, region and decomposition merge (replicas add their
 * factors; addends of one scale unite their covers); the rest stay separate terms.
 */
export function addTerms(list: readonly Relation[]): Relation | Sum | string {
  if (list.some(isMaxPart)) return 'max-addends added';
  const groups = new Map<string, Relation[]>();
  for (const r of list) {
    const k = termKey(r);
    const g = groups.get(k);
    if (g === undefined) groups.set(k, [r]);
    else g.push(r);
  }
  const out: Relation[] = [];
  for (const k of [...groups.keys()].sort()) {
    const g = groups.get(k) as Relation[];
    const first = g[0] as Relation;
    if (first.part === undefined) {
      let sc: Frac | undefined = frac(0, 1);
      for (const r of g) sc = sc === undefined ? undefined : frac(sc.num * r.scale.den + r.scale.num * sc.den, sc.den * r.scale.den);
      if (sc === undefined) return 'scale overflow';
      if (sc.num !== 0) out.push({ logical: first.logical, ranges: first.ranges, scale: sc });
      continue;
    }
    // Replicas of one addend (the same cover) add their factors (a gradient counted 1/dp on
    // each of dp replicas, summed over dp, counts once); distinct addends then unite.
    const byCover = new Map<string, Relation>();
    for (const r of g) {
      const ck = coverKey(r.part);
      const prev = byCover.get(ck);
      if (prev === undefined) {
        byCover.set(ck, r);
        continue;
      }
      const sc = frac(prev.scale.num * r.scale.den + r.scale.num * prev.scale.den, prev.scale.den * r.scale.den);
      if (sc === undefined) return 'scale overflow';
      byCover.set(ck, { ...prev, scale: sc });
    }
    const reps = [...byCover.values()];
    const s0 = (reps[0] as Relation).scale;
    if (s0.num === 0) return 'addends that cancel';
    if (reps.some((r) => !feq(r.scale, s0))) return 'addends of one value with different scale factors';
    const u = unionParts(reps.map((r) => r.part as Part));
    if (u === undefined) return 'overlapping addends';
    out.push(coversAll(u) ? { logical: first.logical, ranges: first.ranges, scale: s0 } : { ...first, scale: s0, part: u });
  }
  if (out.length === 0) return 'a sum that cancels';
  return out.length === 1 ? (out[0] as Relation) : { terms: out };
}

export function regionKey(r: Relation): string {
  return `${r.logical}@${r.ranges.map(([a, b]) => `${a}:${b}`).join(',')}${r.bcast === undefined ? '' : `^${r.bcast.join(',')}`}`;
}
function relKey(r: Relation): string {
  return `${regionKey(r)}*${r.scale.num}/${r.scale.den}${r.part === undefined ? '' : `+${r.part.key}`}`;
}
export function sameRel(a: Relation, b: Relation): boolean {
  return relKey(a) === relKey(b) && coverKey(a.part) === coverKey(b.part);
}
/**
 * Whether a derived addend is the claimed one as affine functions of the coordinates: the same
 * region and scale, and one component holding index c of the claim, as the index c or as the
 * range [c, c + 1) of the same total (a sum over one element of a split dim): as c runs over
 * the claim's group, the derived addends cover their decomposition once, as the walk in
 * proveTemplate checks point by point.
 */
export function sameAddend(d: Relation, claim: Relation): boolean {
  if (regionKey(d) !== regionKey(claim) || !feq(d.scale, claim.scale) || d.part === undefined || claim.part === undefined || d.part.max === true || claim.part.max === true) return false;
  if (d.part.comps.length !== 1 || claim.part.comps.length !== 1) return false;
  const dc = d.part.comps[0] as Comp;
  const cc = claim.part.comps[0] as Comp;
  if (cc.kind !== 'idx' || cc.cover.length !== 1 || dc.total !== cc.total) return false;
  const c = cc.cover[0] as Int;
  if (dc.kind === 'idx') return dc.cover.length === 1 && icmp(dc.cover[0] as Int, c) === 0;
  return dc.cover.length === 2 && icmp(dc.cover[0] as Int, c) === 0 && icmp(dc.cover[1] as Int, iadd(c, 1)) === 0;
}
/** One component's cover as a key (affine bounds by their interned text). */
const compKey = (c: Comp): string => c.cover.map(ikey).join(',');
function coverKey(p: Part | undefined): string {
  return p === undefined ? '' : p.comps.map(compKey).join(';');
}

/** The relation a lineage claim states, or why it has none here (striped regions, max/min addends). */
export function claimRelation(nf: LineageNF): Relation | string {
  const ranges: [number, number][] = [];
  for (const r of nf.ranges) {
    if (r.length !== 2) return 'a striped region (several ranges along one dim)';
    ranges.push([r[0] as number, r[1] as number]);
  }
  const v = nf.value;
  const scale = frac(v.divisor, 1);
  if (scale === undefined) return 'a divisor that is not an integer';
  if (v.n === 1) return { logical: nf.logical, ranges, scale };
  if (v.reduce !== 'sum') return `addends combined by ${v.reduce}`;
  // logical = sum(chunks) / divisor: the chunks sum to divisor x logical.
  return { logical: nf.logical, ranges, scale, part: { key: `claim|${groupKey(v)}|${nf.logical}|${ranges.join(';')}`, comps: [{ kind: 'idx', cover: [v.idx], total: v.n }] } };
}

/** Attributes as canonical text (stages/cache/canon.ts's form, keys sorted). */
/** Canonical attributes, once per attribute object (the plan's objects are never modified; opFor asks 10^5 times on the demo). */
const ATTRS_KEY = new WeakMap<object, string>();
export function attrsKey(a: Attrs | undefined): string {
  if (a === undefined) return '{}';
  let k = ATTRS_KEY.get(a);
  if (k === undefined) ATTRS_KEY.set(a, (k = canonJson(a as AttrValue)));
  return k;
}

/** Unions two covers of one decomposition; undefined when they overlap. */
export function unionCover(kind: Comp['kind'], a: readonly Int[], b: readonly Int[]): Int[] | undefined {
  // Per template the bounds may be affine in the coordinates: they are ordered only when their
  // differences are constants (the same coefficients), which is what icmp decides.
  const order = (x: Int, y: Int): number => icmp(x, y) ?? Number.NaN;
  if (kind === 'idx') {
    const s = new Set<Int>(a);
    for (const x of b) {
      if (s.has(x)) return undefined;
      s.add(x);
    }
    const out = [...s];
    for (let i = 1; i < out.length; i++) if (Number.isNaN(order(out[0] as Int, out[i] as Int))) return undefined;
    return out.sort(order);
  }
  const pairs: [Int, Int][] = [];
  for (let i = 0; i < a.length; i += 2) pairs.push([a[i] as Int, a[i + 1] as Int]);
  for (let i = 0; i < b.length; i += 2) pairs.push([b[i] as Int, b[i + 1] as Int]);
  const first = pairs[0];
  if (first !== undefined && pairs.some(([s, e]) => Number.isNaN(order(first[0], s)) || Number.isNaN(order(first[0], e)))) return undefined;
  pairs.sort((x, y) => order(x[0], y[0]));
  const out: Int[] = [];
  for (const [s, e] of pairs) {
    const last = out.length - 1;
    if (last > 0 && (icmp(s, out[last] as Int) as number) < 0) return undefined;
    if (last > 0 && s === out[last]) out[last] = e;
    else out.push(s, e);
  }
  return out;
}

/** Member `me` of g's chunk of [s, e): [s + me w, s + (me + 1) w) with w = (e - s) / g a constant. */
export function chunkOf([s, e]: Range, g: number, me: Int): Range | undefined {
  const n = iconst(isub(e, s));
  if (n === undefined || !Number.isInteger(n / g)) return undefined;
  const w = n / g;
  const a = imul(me, w);
  if (a === undefined) return undefined;
  const lo = iadd(s, a);
  return [lo, iadd(lo, w)];
}

function compAll(p: Comp): boolean {
  return p.kind === 'idx' ? p.cover.length === p.total && p.cover.every((x, i) => x === i) : p.cover.length === 2 && p.cover[0] === 0 && p.cover[1] === p.total;
}
/** An integer `dim` attribute of a tensor of rank n, normalized to 0..n-1; undefined when it is not one. */
export function dimAttr(attrs: Attrs, key: string, n: number): number | undefined {
  const v = attrs[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < -n || v >= n) return undefined;
  return v < 0 ? v + n : v;
}

export function coversAll(p: Part): boolean {
  return p.comps.every(compAll);
}
/**
 * A product of two decompositions (a zero pad of one addend's chunk, rule 11: addend index x
 * chunk of the padded dim) carries PRODUCT in its key, kept by every rule that rebuilds a key
 * around it. Its addends are rectangles (one cover per component), so two unite only when they
 * differ in one component: per-component union, right for sums of separate decompositions
 * (rule 6), would take cells (0, a) and (1, b) for the whole.
 */
export const PRODUCT = 'prod|';
export const isProduct = (p: Part): boolean => p.key.includes(PRODUCT);
/** Products of at most this many addends are united (pairwise, until one rectangle is left). */
const MAX_PRODUCT_UNION = 64;

/** Many addends of one decomposition together (sorted once: a group of 512 is not 512 merges). */
export function unionParts(ps: readonly Part[]): Part | undefined {
  const first = ps[0];
  if (first === undefined) return undefined;
  if (ps.length <= 2) return ps.length === 1 ? first : unionPart(first, ps[1] as Part);
  if (isProduct(first)) {
    const grid = unionGrid(ps, 0);
    if (grid !== undefined) return { key: first.key, comps: grid };
    if (ps.length > MAX_PRODUCT_UNION) return undefined;
    const rest = [...ps];
    // Rectangles merge along one component at a time; what does not end as one is not a union.
    for (let merged = true; merged && rest.length > 1; ) {
      merged = false;
      for (let i = 0; i < rest.length && !merged; i++)
        for (let j = i + 1; j < rest.length && !merged; j++) {
          const u = unionPart(rest[i] as Part, rest[j] as Part);
          if (u === undefined) continue;
          rest[i] = u;
          rest.splice(j, 1);
          merged = true;
        }
    }
    return rest.length === 1 ? rest[0] : undefined;
  }
  const comps: Comp[] = [];
  for (let i = 0; i < first.comps.length; i++) {
    const c0 = first.comps[i] as Comp;
    const all: Int[] = [];
    for (const p of ps) {
      const c = p.comps[i];
      if (p.key !== first.key || p.comps.length !== first.comps.length || c === undefined || c.kind !== c0.kind || c.total !== c0.total) return undefined;
      for (const x of c.cover) all.push(x);
    }
    const u = unionCover(c0.kind, [], all);
    if (u === undefined) return undefined;
    comps.push({ ...c0, cover: u });
  }
  return { key: first.key, comps };
}

/**
 * A product's rectangles that tile a grid (SP weight gradients: micro-batch and dp addends x
 * sequence shards, 16,384 of them at 405B), united in O(n log n) instead of pairwise.
 * Components from `i` on: the rectangles are grouped by their cover along component i; the
 * distinct covers must be disjoint (unionCover), and every group's rectangles must unite, by
 * the same rule on the components after i, to one and the same rectangle R. Then the
 * rectangles are disjoint and their union is (union of the covers) x R. Undefined otherwise
 * (the caller may still try pairwise merges).
 */
function unionGrid(ps: readonly Part[], i: number): Comp[] | undefined {
  const p0 = ps[0] as Part;
  const c0 = p0.comps[i] as Comp;
  for (const p of ps) {
    const c = p.comps[i];
    if (p.key !== p0.key || p.comps.length !== p0.comps.length || c === undefined || c.kind !== c0.kind || c.total !== c0.total) return undefined;
  }
  const groups = new Map<string, Part[]>();
  for (const p of ps) {
    const k = compKey(p.comps[i] as Comp);
    const g = groups.get(k);
    if (g === undefined) groups.set(k, [p]);
    else g.push(p);
  }
  const all: Int[] = [];
  for (const g of groups.values()) for (const x of (g[0] as Part).comps[i]?.cover ?? []) all.push(x);
  const u = unionCover(c0.kind, [], all);
  if (u === undefined) return undefined;
  const head: Comp = { ...c0, cover: u };
  if (i + 1 === p0.comps.length) return groups.size === ps.length ? [head] : undefined;
  let rest: Comp[] | undefined;
  let restKey = '';
  for (const g of groups.values()) {
    const r = unionGrid(g, i + 1);
    if (r === undefined) return undefined;
    const k = r.map(compKey).join(';');
    if (rest === undefined) [rest, restKey] = [r, k];
    else if (k !== restKey) return undefined;
  }
  return rest === undefined ? undefined : [head, ...rest];
}

/** Two addends of one decomposition together; undefined when they overlap in some component. */
function unionPart(a: Part, b: Part): Part | undefined {
  if (a.key !== b.key || a.comps.length !== b.comps.length) return undefined;
  const comps: Comp[] = [];
  // A product's rectangles: equal covers in every component but one.
  const sameCover = (x: Comp, y: Comp): boolean => x.cover.length === y.cover.length && x.cover.every((v, i) => ikey(v) === ikey(y.cover[i] as Int));
  if (isProduct(a) && a.comps.filter((x, i) => !sameCover(x, b.comps[i] as Comp)).length !== 1) return undefined;
  for (let i = 0; i < a.comps.length; i++) {
    const x = a.comps[i] as Comp;
    const y = b.comps[i] as Comp;
    if (x.kind !== y.kind || x.total !== y.total) return undefined;
    if (isProduct(a) && sameCover(x, y)) {
      comps.push(x);
      continue;
    }
    const u = unionCover(x.kind, x.cover, y.cover);
    if (u === undefined) return undefined;
    comps.push({ ...x, cover: u });
  }
  return { key: a.key, comps };
}

export const MAX_DEPTH = 4000;
/** Coordinates a rank-dependent region map is checked at (TensorLevelProver.lifted). */
export const MAX_LIFT_POINTS = 4096;

/** Whether every Shard of these placements splits its current piece into equal chunks. */
export function evenPlacements(placements: readonly Placement[], sizes: readonly number[], shape: readonly number[]): boolean {
  const len = [...shape];
  return placements.every((p, a) => {
    if (p.k !== 'S') return true;
    const L = len[p.dim];
    const m = sizes[a] as number;
    if (L === undefined || L % m !== 0) return false;
    len[p.dim] = L / m;
    return true;
  });
}

/** What a derivation reads of its stage: which logical tensor it proves. */
export type StageRef = Pick<Stage, 'logical'>;

/** Where a derivation records what it assumed and recomputed (for reuse across stages). */
interface Seen {
  readonly assumes: Set<number>;
  readonly recomputes: Set<number>;
}
export interface Ctx {
  /** Values this stage derived from a claim with a producer (stage-dependent: see `pure`). */
  readonly memo: Map<number, Derived>;
  readonly coll: Map<number, Shared | string>;
  /** Collective instances in `coll` whose derivation reached a claim with a producer. */
  readonly collImpure?: Set<number>;
  readonly seen?: Seen;
}

/** A collective instance's members' input relations, derived once per stage. */
export interface Shared {
  readonly ins: readonly (Value | undefined)[];
  readonly memo: Map<string, Derived>;
}

export interface Sig {
  readonly inputs: readonly (readonly DimLabel[])[];
  readonly outputs: readonly (readonly DimLabel[])[];
  readonly sums: ReadonlySet<string>;
  readonly maxes: ReadonlySet<string>;
  readonly grouped: readonly { readonly label: string; readonly of: string; readonly ratio: number }[];
}

/** k > 0: `to` is `from` and k trailing unit dims; k < 0: `from` is `to` and -k of them; else undefined. */
export function trailingUnits(from: Shape, to: Shape): number | undefined {
  const [short, long, sign] = from.length <= to.length ? [from, to, 1] : [to, from, -1];
  for (let i = 0; i < long.length; i++) if (i < short.length ? long[i] !== short[i] : long[i] !== 1) return undefined;
  return sign * (long.length - short.length);
}
