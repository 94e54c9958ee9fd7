/**
 * Tensor-level proofs (docs/engine.md, "Tensor-level proofs"): a stage proved by relations
 * between whole tensors, never by their elements, so its cost does not grow with shapes.
 *
 * A relation says what a parallel tensor holds: `scale` times a region (one [start, end) per
 * dim) of a logical tensor, or one addend of such a value. The relations of a stage's inputs
 * are their lineage claims; every parallel op and collective in the stage's closure derives
 * its outputs' relations from its inputs' by one of the rules below, each a consequence of
 * an op record's own data (its `dims` labels, trusted and tested per op family as for shape
 * reduction) or of a collective's definition:
 *  - same op on a slice: a parallel op with the kind, attributes and logical inputs of a
 *    logical op, inputs sliced only along its `batch` labels (identically), computes the same
 *    slice of the logical op's outputs;
 *  - plain sums: sliced along a label the op record lists in `sums`, it computes one addend
 *    (the sum over that range) of every output that lacks the label;
 *  - layout: a reshape whose sliced dims are outermost in their merged or split group;
 *  - addends: added together (gradient accumulation) or combined by an all-reduce /
 *    reduce-scatter whose members hold a partition of the addends, they give the value;
 *  - all-gather, all-to-all, broadcast and point-to-point move regions between ranks;
 *  - `scale` multiplies the relation's factor.
 * A stage is proved when every obligation's derived relation is its claim. Anything else
 * (a rule that does not apply, a region that is not one range per dim) leaves the stage to
 * the element engines: this layer only ever says "proved", never "differs".
 */
import { registry } from '../../../ops/registry.js';
import { attrScalar, numel, type AttrValue, type Attrs, type DecompExpr, type DimLabel, type OpDef, type Shape } from '../../../ops/types.js';
import type { LoadedPlan } from '../../../lineage/load.js';
import type { Placement, Program } from '../../../plans/model.js';
import { evalLineage, groupKey, type LineageNF } from '../../../lineage/model.js';
import { programBox } from '../../../plans/mesh.js';
import { logicalOrder } from '../../../sdfg/execute.js';
import { result, type Producer, type Stage, type StageResult } from '../../decompose/prove.js';
import { canonJson } from '../../cache/canon.js';
import { iadd, iaxes, icmp, iconst, ieval, ikey, imul, iscale, isub, isubst, Sym, type Int } from './sym.js';
import { checkRunClock, TimeLimitReached } from '../../clock.js';

type Range = readonly [Int, Int];

/** An exact positive or negative rational, num/den in lowest terms (den > 0). */
interface Frac {
  readonly num: number;
  readonly den: number;
}
const ONE: Frac = { num: 1, den: 1 };
function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
function frac(num: number, den: number): Frac | undefined {
  if (den === 0 || !Number.isSafeInteger(num) || !Number.isSafeInteger(den)) return undefined;
  const g = gcd(num, den) || 1;
  const s = den < 0 ? -1 : 1;
  return { num: (s * num) / g, den: (s * den) / g };
}
const fmul = (a: Frac, b: Frac): Frac | undefined => frac(a.num * b.num, a.den * b.den);
const feq = (a: Frac, b: Frac): boolean => a.num === b.num && a.den === b.den;
const fkey = (a: Frac): string => `${a.num}/${a.den}`;
const fdiv = (a: Frac, b: Frac): Frac | undefined => frac(a.num * b.den, a.den * b.num);
function parseFrac(v: number | string): Frac | undefined {
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
const isMaxPart = (r: Relation): boolean => r.part?.max === true;

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
interface Sum {
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
interface Routed {
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
type Value = Relation | Sum | Routed;
type Derived = Value | string;
const isSum = (v: Value): v is Sum => 'terms' in v;
const isRouted = (v: Value): v is Routed => 'routed' in v;
const termsOf = (v: Relation | Sum): readonly Relation[] => (isSum(v) ? v.terms : [v]);
/** The slots a routed buffer holds, in order: equal keys mean aligned rows. */
const slotKey = (v: Routed): string => `${v.idx}|${v.experts}|${v.k}|${v.blocks.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')}`;
/** Everything a value says, as text (memo keys). */
function valueKey(v: Value): string {
  if (isRouted(v)) return `R${v.of}@${v.region.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')}|${v.edim},${v.sdim}|${slotKey(v)}*${fkey(v.factor)}${v.padZero ? 'z' : ''}`;
  return termsOf(v)
    .map((r) => `${relKey(r)}#${coverKey(r.part)}`)
    .join('&');
}
function termKey(r: Relation): string {
  return `${regionKey(r)}+${r.part?.key ?? ''}`;
}

/**
 * Adds relations: terms of one tensor, region and decomposition merge (replicas add their
 * factors; addends of one scale unite their covers); the rest stay separate terms.
 */
function addTerms(list: readonly Relation[]): Relation | Sum | string {
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

function regionKey(r: Relation): string {
  return `${r.logical}@${r.ranges.map(([a, b]) => `${a}:${b}`).join(',')}${r.bcast === undefined ? '' : `^${r.bcast.join(',')}`}`;
}
function relKey(r: Relation): string {
  return `${regionKey(r)}*${r.scale.num}/${r.scale.den}${r.part === undefined ? '' : `+${r.part.key}`}`;
}
function sameRel(a: Relation, b: Relation): boolean {
  return relKey(a) === relKey(b) && coverKey(a.part) === coverKey(b.part);
}
/**
 * Whether a derived addend is the claimed one as affine functions of the coordinates: the same
 * region and scale, and one component holding index c of the claim, as the index c or as the
 * range [c, c + 1) of the same total (a sum over one element of a split dim): as c runs over
 * the claim's group, the derived addends cover their decomposition once, as the walk in
 * proveTemplate checks point by point.
 */
function sameAddend(d: Relation, claim: Relation): boolean {
  if (regionKey(d) !== regionKey(claim) || !feq(d.scale, claim.scale) || d.part === undefined || claim.part === undefined || d.part.max === true || claim.part.max === true) return false;
  if (d.part.comps.length !== 1 || claim.part.comps.length !== 1) return false;
  const dc = d.part.comps[0] as Comp;
  const cc = claim.part.comps[0] as Comp;
  if (cc.kind !== 'idx' || cc.cover.length !== 1 || dc.total !== cc.total) return false;
  const c = cc.cover[0] as Int;
  if (dc.kind === 'idx') return dc.cover.length === 1 && icmp(dc.cover[0] as Int, c) === 0;
  return dc.cover.length === 2 && icmp(dc.cover[0] as Int, c) === 0 && icmp(dc.cover[1] as Int, iadd(c, 1)) === 0;
}
function coverKey(p: Part | undefined): string {
  return p === undefined ? '' : p.comps.map((c) => c.cover.join(',')).join(';');
}

/** The relation a lineage claim states, or why it has none here (striped regions, max/min addends). */
function claimRelation(nf: LineageNF): Relation | string {
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
function attrsKey(a: Attrs | undefined): string {
  if (a === undefined) return '{}';
  let k = ATTRS_KEY.get(a);
  if (k === undefined) ATTRS_KEY.set(a, (k = canonJson(a as AttrValue)));
  return k;
}

/**
 * Which ops' value-only attributes (OpDef.valueAttrs) a derivation relied on being equal
 * (docs/engine.md, "Incremental re-verification"). Such attributes enter tensor-level rules
 * only through equality of whole attribute sets (a world op found by its key, a parallel op
 * matched to a logical one); every comparison that comes out equal is recorded here as a
 * union of the two ops. A derivation stays valid under any change of those values that keeps
 * each class's values equal. An attribute set of such an op kind that is not one of the plan's
 * own objects (instantiated per rank from an expression, or built by a rule) cannot be traced
 * back to an op: comparing it equal marks the record unusable (`poisoned`).
 */
export class AttrUse {
  private readonly occ = new WeakMap<object, number>();
  private readonly up: number[] = [];
  /** Per occurrence: 'L<op>' (logical op) or 'P<program>:<op>' (an op of a program). */
  readonly refs: string[] = [];
  poisoned: string | undefined;
  /** Op kinds with value-only attributes (same() is called on every world lookup that hits). */
  private readonly valuedKinds: ReadonlySet<number>;
  constructor(plan: LoadedPlan) {
    this.valuedKinds = new Set(registry.defs.flatMap((d, id) => ((d.valueAttrs?.length ?? 0) > 0 ? [id] : [])));
    const valued = (kind: number): boolean => this.valuedKinds.has(kind);
    const add = (a: object | undefined, ref: string): void => {
      const id = this.refs.length;
      this.refs.push(ref);
      this.up.push(id);
      if (a === undefined) return;
      const prev = this.occ.get(a);
      // One object shared by two ops: their values are one value, so they are one class.
      if (prev !== undefined) this.union(prev, id);
      else this.occ.set(a, id);
    };
    const lg = plan.logical;
    for (let op = 0; op < lg.ops.size; op++) if (valued(lg.ops.kind[op] as number)) add(lg.attrs[op], `L${op}`);
    plan.programs.forEach((p, pi) => {
      for (let op = 0; op < p.ops.size; op++) {
        if (!valued(p.ops.kind[op] as number)) continue;
        const spec = p.attrSpecs[op];
        // Attributes with expressions are instantiated per rank: those objects are no op's.
        add(spec !== undefined && spec.exprs.length === 0 ? spec.attrs : undefined, `P${pi}:${op}`);
      }
    });
  }
  private find(i: number): number {
    let r = i;
    while (this.up[r] !== r) r = this.up[r] as number;
    while (this.up[i] !== r) {
      const n = this.up[i] as number;
      this.up[i] = r;
      i = n;
    }
    return r;
  }
  private union(a: number, b: number): void {
    const [ra, rb] = [this.find(a), this.find(b)];
    if (ra !== rb) this.up[Math.max(ra, rb)] = Math.min(ra, rb);
  }
  /** Attribute sets `a` and `b` of op kind `kind` compared equal, and a rule relies on it. */
  same(kind: number, a: Attrs | undefined, b: Attrs | undefined): void {
    if (!this.valuedKinds.has(kind)) return;
    const oa = a === undefined ? undefined : this.occ.get(a);
    const ob = b === undefined ? undefined : this.occ.get(b);
    if (oa === undefined || ob === undefined) {
      this.poisoned ??= `'${registry.get(kind).name}' attributes compared that are not a plan op's own`;
      return;
    }
    this.union(oa, ob);
  }
  /** The classes of two or more ops, each a list of occurrence refs. */
  classes(): string[][] {
    const by = new Map<number, string[]>();
    this.refs.forEach((ref, i) => {
      const r = this.find(i);
      const l = by.get(r);
      if (l === undefined) by.set(r, [ref]);
      else l.push(ref);
    });
    return [...by.values()].filter((l) => l.length > 1);
  }
}

/** Unions two covers of one decomposition; undefined when they overlap. */
function unionCover(kind: Comp['kind'], a: readonly Int[], b: readonly Int[]): Int[] | undefined {
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
function chunkOf([s, e]: Range, g: number, me: Int): Range | undefined {
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
function dimAttr(attrs: Attrs, key: string, n: number): number | undefined {
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
const isProduct = (p: Part): boolean => p.key.includes(PRODUCT);
/** Products of at most this many addends are united (pairwise, until one rectangle is left). */
const MAX_PRODUCT_UNION = 64;

/** Many addends of one decomposition together (sorted once: a group of 512 is not 512 merges). */
export function unionParts(ps: readonly Part[]): Part | undefined {
  const first = ps[0];
  if (first === undefined) return undefined;
  if (ps.length <= 2) return ps.length === 1 ? first : unionPart(first, ps[1] as Part);
  if (isProduct(first)) {
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

const MAX_DEPTH = 4000;
/** Coordinates a rank-dependent region map is checked at (TensorLevelProver.lifted). */
const MAX_LIFT_POINTS = 4096;

/** Whether every Shard of these placements splits its current piece into equal chunks. */
function evenPlacements(placements: readonly Placement[], sizes: readonly number[], shape: readonly number[]): boolean {
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
type StageRef = Pick<Stage, 'logical'>;

/** Where a derivation records what it assumed and recomputed (for reuse across stages). */
interface Seen {
  readonly assumes: Set<number>;
  readonly recomputes: Set<number>;
}
interface Ctx {
  /** Values this stage derived from a claim with a producer (stage-dependent: see `pure`). */
  readonly memo: Map<number, Derived>;
  readonly coll: Map<number, Shared | string>;
  /** Collective instances in `coll` whose derivation reached a claim with a producer. */
  readonly collImpure?: Set<number>;
  readonly seen?: Seen;
}

/** A collective instance's members' input relations, derived once per stage. */
interface Shared {
  readonly ins: readonly (Value | undefined)[];
  readonly memo: Map<string, Derived>;
}

interface Sig {
  readonly inputs: readonly (readonly DimLabel[])[];
  readonly outputs: readonly (readonly DimLabel[])[];
  readonly sums: ReadonlySet<string>;
  readonly maxes: ReadonlySet<string>;
  readonly grouped: readonly { readonly label: string; readonly of: string; readonly ratio: number }[];
}

/** A logical op, or a virtual one (defined by the rules, never in the plan). */
interface OpRef {
  readonly kind: number;
  readonly attrs: Attrs;
  /** Canonical tensor ids, and the factor each input is of them (logical input = factor x id). */
  readonly inputs: readonly number[];
  readonly factors: readonly Frac[];
  /** Tensor ids it defines: logical ones for a logical op, virtual ones (>= the logical count) otherwise. */
  readonly outputs: readonly number[];
}

/**
 * The logical graph as the rules see it, grown with virtual tensors:
 *  - logical tensors computed by the same op kind, attributes and (canonical) inputs are one
 *    value (each maps to the first);
 *  - an op with a rescaling identity (OpDef.rescale: a mean over N rows is 1/N times their sum)
 *    maps its outputs to factor x the outputs of the rescaled op, a virtual op when the plan
 *    has none;
 *  - a parallel op with no logical counterpart defines a virtual op: the same op applied to
 *    the whole logical inputs (its value is well defined; a slice of it is what the rules
 *    derive for the parallel op).
 * canon[t] = (id, factor): logical tensor t equals factor x tensor id.
 */
class LogicalWorld {
  readonly nLogical: number;
  readonly ops: OpRef[] = [];
  /** kind|inputs -> op indices. */
  readonly index = new Map<string, number[]>();
  private readonly byKey = new Map<string, number>();
  private readonly canonId: Int32Array;
  private readonly canonScale: Frac[];
  private readonly vShapes: Shape[] = [];
  /** Per virtual tensor: the op kind and inputs that name it (names are built only when shown). */
  private readonly vDefs: { kind: number; inputs: readonly number[] }[] = [];
  private readonly vNames = new Map<number, string>();
  private readonly domains: (readonly number[] | undefined)[];
  constructor(
    readonly plan: LoadedPlan,
    readonly use?: AttrUse,
  ) {
    const lg = plan.logical;
    this.nLogical = lg.tensors.size;
    this.canonId = Int32Array.from({ length: lg.tensors.size }, (_, i) => i);
    this.canonScale = Array.from({ length: lg.tensors.size }, () => ONE);
    this.domains = [...lg.domains];
    for (const op of logicalOrder(plan)) {
      const kind = lg.ops.kind[op] as number;
      const def = registry.get(kind);
      const attrs = (lg.attrs[op] ?? {}) as Attrs;
      const inputs = [...lg.ops.opInputs(op)].map((x) => this.canonId[x] as number);
      const factors = [...lg.ops.opInputs(op)].map((x) => this.canonScale[x] as Frac);
      const outs = [...lg.ops.opOutputs(op)];
      // Integer values keep their range through layout ops.
      if (def.movesValues === true) {
        const ds = [...lg.ops.opInputs(op)].map((x) => this.domains[x]);
        if (ds.every((d) => d !== undefined)) outs.forEach((t) => (this.domains[t] = [...new Set(ds.flat() as number[])].sort((x, y) => x - y)));
      }
      // A logical identity is its input (a copy).
      if (def.name === 'identity' && outs.length === 1 && inputs.length === 1) {
        this.alias(outs[0] as number, lg.ops.opInputs(op)[0] as number, ONE);
        continue;
      }
      const key = `${kind}|${attrsKey(attrs)}|${inputs.map((x, i) => `${x}*${fkey(factors[i] as Frac)}`).join(',')}`;
      const prev = this.byKey.get(key);
      if (prev !== undefined) {
        this.use?.same(kind, attrs, (this.ops[prev] as OpRef).attrs);
        const a = (this.ops[prev] as OpRef).outputs;
        outs.forEach((t, i) => this.alias(t, a[i] as number, ONE));
        continue;
      }
      this.register(key, { kind, attrs, inputs, factors, outputs: outs });
      const inShapes = [...lg.ops.opInputs(op)].map((x) => lg.shapes[x] ?? []);
      // A decomposition (clip_grad_norm as its parts): each output is the expression's value.
      const dec = factors.every((f) => feq(f, ONE)) ? def.decompose?.(inputs.length, attrs, inShapes, [...lg.ops.opInputs(op)].map((x) => this.domains[x])) : undefined;
      if (dec !== undefined) {
        const ids = dec.map((e) => this.build(e, inputs));
        if (ids.every((x) => x !== undefined)) outs.forEach((t, i) => this.alias(t, ids[i] as number, ONE));
        continue;
      }
      const re = def.rescale?.(inShapes, attrs, [...lg.ops.opInputs(op)].map((x) => this.domains[x]));
      const f = re === undefined ? undefined : parseFrac(re.factor);
      if (re === undefined || f === undefined) continue;
      const other = re.op === undefined ? kind : registry.id(re.op);
      const v = this.opFor(other, re.attrs, inputs, factors);
      if (v === undefined) continue;
      outs.forEach((t, i) => this.alias(t, (this.ops[v] as OpRef).outputs[i] as number, f));
    }
  }

  /** Logical tensor t equals factor x tensor `to` (itself canonical, or mapped through). */
  private alias(t: number, to: number, factor: Frac): void {
    const [base, f0] = this.canon(to);
    const s = fmul(factor, f0);
    if (s === undefined) return;
    this.canonId[t] = base;
    this.canonScale[t] = s;
  }

  /** Virtual tensors equal to another tensor (a decomposed op's output is its expression's value). */
  private readonly vAlias = new Map<number, number>();
  private register(key: string, op: OpRef): number {
    const i = this.ops.length;
    this.ops.push(op);
    this.byKey.set(key, i);
    const k = `${op.kind}|${op.inputs.join(',')}`;
    const l = this.index.get(k);
    if (l === undefined) this.index.set(k, [i]);
    else l.push(i);
    return i;
  }

  /** The op computing `kind(attrs)` of these canonical inputs: the plan's, or a new virtual one. */
  opFor(kind: number, attrs: Attrs, inputs: readonly number[], factors: readonly Frac[] = inputs.map(() => ONE)): number | undefined {
    const key = `${kind}|${attrsKey(attrs)}|${inputs.map((x, i) => `${x}*${fkey(factors[i] as Frac)}`).join(',')}`;
    const hit = this.byKey.get(key);
    if (hit !== undefined) {
      this.use?.same(kind, attrs, (this.ops[hit] as OpRef).attrs);
      return hit;
    }
    // An op that has no value (bad attributes, shapes, scaled inputs) stays so: asked again, it
    // is not re-checked and grows no new virtual tensors.
    if (this.noOp.has(key)) return undefined;
    const def = registry.get(kind);
    let outShapes: Shape[];
    try {
      if (registry.checkAttrs(kind, attrs) !== undefined) return this.none(key);
      outShapes = def.shape(inputs.map((x) => this.shape(x)), attrs);
    } catch {
      return this.none(key);
    }
    const outputs = outShapes.map((sh) => {
      this.vShapes.push(sh);
      this.vDefs.push({ kind, inputs });
      return this.nLogical + this.vShapes.length - 1;
    });
    // A virtual op reads factor x its canonical inputs: only unscaled ones have a shape rule to trust.
    if (factors.some((f) => !feq(f, ONE))) return this.none(key);
    const q = this.register(key, { kind, attrs, inputs, factors, outputs });
    // A single-output op with a decomposition: its output is the decomposition's value (the op
    // stays registered, so the same op on a slice still finds it).
    const dec = def.decompose?.(inputs.length, attrs, inputs.map((x) => this.shape(x)), inputs.map((x) => this.domain(x)));
    const root = dec?.length === 1 && outputs.length === 1 ? dec[0] : undefined;
    if (root !== undefined && !('input' in root)) {
      const id = this.build(root, inputs);
      if (id !== undefined) this.vAlias.set(outputs[0] as number, id);
    }
    return q;
  }

  private readonly noOp = new Set<string>();
  private none(key: string): undefined {
    this.noOp.add(key);
    return undefined;
  }

  private build(e: DecompExpr, inputs: readonly number[]): number | undefined {
    if ('input' in e) return inputs[e.input];
    if ('sum' in e) {
      const ids = e.sum.map((x) => this.build(x, inputs));
      if (ids.some((x) => x === undefined)) return undefined;
      return this.sumOf(ids.map((id) => ({ id: id as number, coef: ONE })));
    }
    const args = e.args.map((x) => this.build(x, inputs));
    if (args.some((x) => x === undefined)) return undefined;
    const q = this.opFor(registry.id(e.op), e.attrs, args as number[]);
    return q === undefined ? undefined : (this.ops[q] as OpRef).outputs[e.output ?? 0];
  }

  /**
   * The tensor sum of coef x id, in one normal form (terms merged and sorted by id, scales
   * then left-nested adds), so two spellings of one sum get one id.
   */
  sumOf(terms: readonly { id: number; coef: Frac }[]): number | undefined {
    const m = new Map<number, Frac>();
    for (const t of terms) {
      const prev = m.get(t.id);
      const c = prev === undefined ? t.coef : frac(prev.num * t.coef.den + t.coef.num * prev.den, prev.den * t.coef.den);
      if (c === undefined) return undefined;
      m.set(t.id, c);
    }
    const ids = [...m.keys()].filter((id) => (m.get(id) as Frac).num !== 0).sort((a, b) => a - b);
    let acc: number | undefined;
    for (const id of ids) {
      const c = m.get(id) as Frac;
      let x: number | undefined = id;
      if (!feq(c, ONE)) {
        const q = this.opFor(registry.id('scale'), { factor: fkey(c) }, [id]);
        x = q === undefined ? undefined : (this.ops[q] as OpRef).outputs[0];
      }
      if (x === undefined) return undefined;
      if (acc === undefined) acc = x;
      else {
        if (this.shape(acc).join(',') !== this.shape(x).join(',')) return undefined;
        const q = this.opFor(registry.id('add'), {}, [acc, x]);
        acc = q === undefined ? undefined : (this.ops[q] as OpRef).outputs[0];
        if (acc === undefined) return undefined;
      }
    }
    return acc;
  }

  shape(id: number): Shape {
    return id < this.nLogical ? (this.plan.logical.shapes[id] ?? []) : (this.vShapes[id - this.nLogical] ?? []);
  }
  name(id: number): string {
    if (id < this.nLogical) return this.plan.logical.tensors.name(id);
    const hit = this.vNames.get(id);
    if (hit !== undefined) return hit;
    const v = this.vDefs[id - this.nLogical];
    if (v === undefined) return `#${id}`;
    let n = `${registry.get(v.kind).name}(${v.inputs.map((x) => this.name(x)).join(', ')})`;
    // Deep sums (hundreds of squared norms) would spell megabytes: messages keep the start.
    if (n.length > 2000) n = `${n.slice(0, 2000)}...)`;
    this.vNames.set(id, n);
    return n;
  }
  /** The values an integer tensor may hold (ascending), when the plan says. */
  domain(id: number): readonly number[] | undefined {
    return id < this.nLogical ? this.domains[id] : undefined;
  }
  /** (canonical id, factor) of a tensor id. */
  canon(id: number): [number, Frac] {
    if (id < this.nLogical) return [this.canonId[id] as number, this.canonScale[id] as Frac];
    const a = this.vAlias.get(id);
    return a === undefined ? [id, ONE] : this.canon(a);
  }
}

/** A relation derived from claims (TensorLevelProver.deriveFromClaims), in a rank's numbers. */
export interface DerivedClaim {
  /** Logical tensors equal to the derived value: parallel = num/den x the region of each. */
  readonly logicals: readonly { readonly logical: number; readonly num: number; readonly den: number }[];
  /** [start, end) per logical dim. */
  readonly ranges: readonly (readonly [number, number])[];
  /** One addend: `cover` lists addend indices ('idx') or a [start, end) of a summed dim ('range') out of `total`. */
  readonly part?: { readonly kind: 'idx' | 'range'; readonly cover: readonly number[]; readonly total: number };
}

/**
 * Derives relations and checks obligations; one per plan (its indexes are shared by stages).
 */
export class TensorLevelProver {
  private readonly localProd: Int32Array[];
  private readonly collProd = new Map<number, number>();
  /** A claim's relation per (rank, tensor): the same in every stage that assumes it. */
  private readonly claimCache = new Map<number, Relation | string>();
  /**
   * deriveOp results by content: the rank's view (shapes, attributes), the op, the output and
   * the input values. Ranks that hold the same values (dp replicas of a parameter) derive once.
   */
  private readonly opMemo = new Map<string, Derived>();
  /** Per view shape table: per op, the id of its signature text (attributes and shapes it reads). */
  private readonly opSigs = new WeakMap<object, Map<number, number>>();
  private readonly sigIds = new Map<string, number>();
  /** Values interned by content: an object seen before costs a lookup, not a key. */
  private readonly valueIds = new WeakMap<object, number>();
  private readonly valueByKey = new Map<string, number>();
  private valueId(v: Value): number {
    const hit = this.valueIds.get(v);
    if (hit !== undefined) return hit;
    const k = valueKey(v);
    let id = this.valueByKey.get(k);
    if (id === undefined) this.valueByKey.set(k, (id = this.valueByKey.size));
    this.valueIds.set(v, id);
    return id;
  }
  /**
   * (rank, tensor) as one number: rank * tensorKey + tensor. tensorKey is the largest program's
   * tensor count, so keys stay small integers (Maps of doubles allocate on every lookup).
   */
  private readonly tensorKey: number;
  /** Collective call sites per template as keys: -1 - (program * opKey + op). */
  private readonly opKey: number;
  /** Collective instances derived once for every stage that assumes none of their claims. */
  private readonly across = new Map<number, { shared: Shared | string; assumes: Set<number> }>();
  private readonly world: LogicalWorld;
  /** Records the value-only attribute equalities derivations rely on (AttrUse), when asked. */
  private readonly use: AttrUse | undefined;
  private readonly dimsCache = new Map<number, Sig | null>();
  private readonly scaleKind: number;
  private readonly addKind: number;
  private readonly identityKind: number;
  private readonly reshapeKind: number;
  private readonly subKind: number;
  private readonly whereKind: number;
  private readonly expandKind: number;
  /** Per program, per template (stages/decompose/template.ts plans): its base rank, coordinates and box. */
  private readonly tmpl: readonly (TemplateFrame | string)[] | undefined;
  /** Per program: the collective call site writing each tensor, or -1 (per template only). */
  private readonly siteProd: Int32Array[] = [];
  constructor(
    readonly plan: LoadedPlan,
    opts: { readonly perTemplate?: boolean; readonly attrUse?: AttrUse } = {},
  ) {
    this.use = opts.attrUse;
    if (opts.perTemplate === true) {
      this.tmpl = plan.programs.map((p) => templateFrame(plan, p));
      this.siteProd = plan.programs.map((p) => {
        const a = new Int32Array(p.tensors.size).fill(-1);
        for (const op of p.collectiveSites) for (const t of p.ops.opOutputs(op)) a[t] = op;
        return a;
      });
    }
    // Producers without per-rank string keys: a local op per (program, tensor), and the
    // collective instance per (rank, output) (L1: 512 ranks x 15k tensors would be 7M strings).
    this.tensorKey = Math.max(1, ...plan.programs.map((p) => p.tensors.size));
    this.opKey = Math.max(1, ...plan.programs.map((p) => p.ops.size));
    this.localProd = plan.programs.map((p) => {
      const a = new Int32Array(p.tensors.size).fill(-1);
      const sites = new Set(p.collectiveSites);
      for (let op = 0; op < p.ops.size; op++) if (!sites.has(op)) for (const t of p.ops.opOutputs(op)) a[t] = op;
      return a;
    });
    if (opts.perTemplate !== true) plan.collectives.forEach((c, ci) => c.group.forEach((r, i) => {
      const o = c.outputs[i] as number;
      if (o >= 0) this.collProd.set(r * this.tensorKey + o, ci);
    }));
    this.world = new LogicalWorld(plan, opts.attrUse);
    this.scaleKind = registry.id('scale');
    this.addKind = registry.id('add');
    this.identityKind = registry.id('identity');
    this.reshapeKind = registry.id('reshape');
    this.subKind = registry.id('sub');
    this.whereKind = registry.id('where');
    this.expandKind = registry.id('expand');
  }

  prove(stage: Stage): StageResult | { why: string } {
    checkRunClock();
    const t0 = performance.now();
    const derive = this.deriver(stage, { memo: new Map(), coll: new Map(), collImpure: new Set() });
    const memo = { size: 0 };
    const lshape = this.plan.logical.shapes[stage.logical] ?? [];
    // Partial obligations: by region and decomposition, the derived parts must partition the value.
    const groups = new Map<string, { claim: Relation; parts: Relation[] }>();
    for (const o of stage.obligations) {
      const claim = this.canonical(claimRelation(o.nf));
      if (typeof claim === 'string') return { why: `rank ${o.rank}: the claim is ${claim}` };
      const d0 = derive(o.rank, o.tensor, 0);
      const d = typeof d0 === 'string' ? d0 : this.materialize(d0);
      if (typeof d === 'string') return { why: `rank ${o.rank} '${this.tensorName(o.rank, o.tensor)}': ${d}` };
      if (claim.part === undefined) {
        if (d.part !== undefined || !sameRel(d, claim)) return { why: `rank ${o.rank} '${this.tensorName(o.rank, o.tensor)}': derived ${this.show(d)}, claimed ${this.show(claim)}` };
        continue;
      }
      // An addend claim: replicas of one addend derive alike; the addends together partition the value.
      if (d.part === undefined || regionKey(d) !== regionKey(claim) || !feq(d.scale, claim.scale)) return { why: `rank ${o.rank} '${this.tensorName(o.rank, o.tensor)}': derived ${this.show(d)}, claimed addend ${this.show(claim)}` };
      const gk = `${claim.part.key}`;
      let g = groups.get(gk);
      if (g === undefined) groups.set(gk, (g = { claim, parts: [] }));
      g.parts.push(d);
      (g as { idx?: Map<number, Relation> }).idx ??= new Map();
      const byIdx = (g as { idx?: Map<number, Relation> }).idx as Map<number, Relation>;
      const idx = (claim.part.comps[0] as Comp).cover[0] as number;
      const prev = byIdx.get(idx);
      if (prev !== undefined && !sameRel(prev, d)) return { why: `rank ${o.rank}: replicas of addend ${idx} derive different values` };
      byIdx.set(idx, d);
    }
    for (const g of groups.values()) {
      const byIdx = (g as { idx?: Map<number, Relation> }).idx as Map<number, Relation>;
      const n = ((g.claim.part as Part).comps[0] as Comp).total;
      if (byIdx.size !== n) return { why: `addends of ${this.world.name(g.claim.logical)}: ${byIdx.size} of ${n} are computed in this stage` };
      let acc: Part | undefined;
      for (const d of byIdx.values()) {
        const p = d.part as Part;
        if (acc === undefined) acc = p;
        else {
          if (acc.key !== p.key) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} derive from different decompositions` };
          const u = unionPart(acc, p);
          if (u === undefined) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} overlap` };
          acc = u;
        }
      }
      if (acc === undefined || !coversAll(acc)) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} do not add up to the whole value` };
    }
    void lshape;
    return result(stage, 'proved', undefined, [], { logicalOps: 0, parallelOps: memo.size }, 0, t0);
  }

  /** The deriver of `deriveFromClaims`, kept across calls (it shares their memo). */
  private claimsDeriver: ((r: number, t: number, depth: number) => Derived) | undefined;
  /** Per canonical id, the logical tensors equal to it and their factors (tensor = factor x canonical). */
  private realOf: Map<number, { logical: number; f: Frac }[]> | undefined;

  /**
   * The relation of tensor t on rank r derived from the plan's claims, every claim a boundary
   * (no stage: nothing is recomputed), restated on the logical tensors equal to it; or why
   * there is none. Cut-point inference's structural candidates (stages/infer/infer-struct.ts): a
   * hint derived this way is still proved as a stage before anything assumes it.
   */
  deriveFromClaims(r: number, t: number): DerivedClaim | string {
    if (this.tmpl !== undefined) return 'a per-template prover';
    this.claimsDeriver ??= this.deriver({ logical: -1 }, { memo: new Map(), coll: new Map(), collImpure: new Set() });
    const d0 = this.claimsDeriver(r, t, 0);
    const d = typeof d0 === 'string' ? d0 : this.materialize(d0);
    if (typeof d === 'string') return d;
    if (d.bcast !== undefined && d.bcast.length > 0) return 'a broadcast region';
    if (isMaxPart(d)) return 'a max-addend';
    const ranges: [number, number][] = [];
    for (const [a, b] of d.ranges) {
      if (typeof a !== 'number' || typeof b !== 'number') return 'a rank-dependent range';
      ranges.push([a, b]);
    }
    let part: DerivedClaim['part'];
    if (d.part !== undefined) {
      const c = d.part.comps[0];
      if (d.part.comps.length !== 1 || c === undefined || c.cover.some((x) => typeof x !== 'number')) return 'an addend of several decompositions';
      part = { kind: c.kind, cover: c.cover as number[], total: c.total };
    }
    if (this.realOf === undefined) {
      this.realOf = new Map();
      for (let L = 0; L < this.world.nLogical; L++) {
        const [c, f] = this.world.canon(L);
        let l = this.realOf.get(c);
        if (l === undefined) this.realOf.set(c, (l = []));
        l.push({ logical: L, f });
      }
    }
    // parallel = scale x canonical, and L = f x canonical: parallel = (scale / f) x L.
    const logicals = (this.realOf.get(d.logical) ?? []).flatMap(({ logical, f }) => {
      const q = f.num === 0 ? undefined : fdiv(d.scale, f);
      return q === undefined ? [] : [{ logical, num: q.num, den: q.den }];
    });
    if (logicals.length === 0) return 'a value no logical tensor holds';
    return { logicals, ranges, ...(part === undefined ? {} : { part }) };
  }

  /**
   * A stage decomposed per template (stages/decompose/template.ts): each part (program, tensor) is
   * derived once at the program's base rank, with rank-dependent quantities affine in the
   * coordinates, and must equal its claim as affine functions, hence at every rank. Addend
   * claims are checked per coordinate of the axes their index and the derived addends depend
   * on: the derived addends of each claimed region must partition its value, as prove() checks
   * rank by rank.
   */
  proveTemplate(stage: TemplateStageRef): { proved: true } | { why: string; part?: number } {
    checkRunClock();
    const tmpl = this.tmpl;
    if (tmpl === undefined) return { why: 'not a per-template prover' };
    const derive = this.deriver(stage, { memo: new Map(), coll: new Map(), collImpure: new Set() });
    const groups = new Map<string, { n: number; byIdx: Map<number, Relation> }>();
    for (const [pix, part] of stage.parts.entries()) {
      const prog = this.plan.programs[part.program] as Program;
      const frame = tmpl[part.program];
      if (frame === undefined || typeof frame === 'string') return { why: frame ?? 'no template' };
      if (part.ranks !== prog.ranks.length) return { why: `per template: ${part.ranks} of the ${prog.ranks.length} ranks of '${prog.name}' hold '${prog.tensors.name(part.tensor)}'` };
      this.frame = frame;
      const r0 = frame.r0;
      const name = `'${prog.name}' '${prog.tensors.name(part.tensor)}'`;
      const claim = this.canonical(this.templateClaim(r0, part.tensor));
      if (typeof claim === 'string') return { why: `${name}: the claim is ${claim}`, part: pix };
      const d0 = derive(r0, part.tensor, 0);
      const d = typeof d0 === 'string' ? d0 : this.materialize(d0);
      if (typeof d === 'string') return { why: `${name}: ${d}`, part: pix };
      if (claim.part === undefined) {
        if (d.part !== undefined || !sameRel(d, claim)) return { why: `${name}: derived ${this.show(d)}, claimed ${this.show(claim)}`, part: pix };
        continue;
      }
      if (d.part === undefined || regionKey(d) !== regionKey(claim) || !feq(d.scale, claim.scale)) return { why: `${name}: derived ${this.show(d)}, claimed addend ${this.show(claim)}`, part: pix };
      const idx0 = (claim.part.comps[0] as Comp).cover[0] as Int;
      const n = (claim.part.comps[0] as Comp).total;
      // The axes the index and the addends move with; the region's other axes stay symbolic in
      // the group key: along them every region sees the same addends (docs/engine.md).
      const axes = [...new Set([...iaxes(idx0), ...d.part.comps.flatMap((c) => c.cover.flatMap(iaxes))])].sort((a, b) => a - b);
      const points = axes.reduce((q, a) => q * (frame.sets[a] as Int32Array).length, 1);
      if (points > MAX_LIFT_POINTS) {
        // Too many coordinates to walk: proved without the walk when the derived addend equals
        // the claimed one as affine functions of the coordinates (so at every rank) and the
        // claim is of placements (affine, templateClaim) whose every partial axis this program
        // spans whole: then every addend of every group is claimed by a rank of this part, the
        // partial index idx * m + c runs over 0..n-1 once per group, and the derived addends
        // partition each value as the walk would find (docs/engine.md, "Tensor level per template").
        const spec = prog.lineage[part.tensor];
        const whole = spec?.kind === 'placements' && spec.placements.every((pl, a) => pl.k !== 'P' || (frame.sets[a]?.length ?? 0) === (this.plan.mesh.sizes[a] as number));
        if (whole && sameAddend(d, claim)) continue;
        return { why: `${name}: addends over ${points} coordinates` };
      }
      const bad = everyPoint(axes, frame.sets, frame.x0, (x) => {
          const at = (c: Relation): Relation => substValue(c, axes, x, frame.x0) as Relation;
          const cl = at(claim);
          const dx = at(d);
          const idx = iconst(((cl.part as Part).comps[0] as Comp).cover[0] as Int);
          if (idx === undefined) return 'an addend index that depends on the coordinates';
          const gk = `${(claim.part as Part).key}@${regionKey(cl)}`;
          let g = groups.get(gk);
          if (g === undefined) groups.set(gk, (g = { n, byIdx: new Map() }));
          const prev = g.byIdx.get(idx);
          if (prev !== undefined && !sameRel(prev, dx)) return `replicas of addend ${idx} derive different values`;
          g.byIdx.set(idx, dx);
          return undefined;
      });
      if (bad !== undefined) return { why: `${name}: ${bad}` };
    }
    for (const [gk, g] of groups) {
      if (g.byIdx.size !== g.n) return { why: `addends ${gk}: ${g.byIdx.size} of ${g.n} are computed in this stage` };
      const u = unionParts([...g.byIdx.values()].map((r) => r.part as Part));
      if (u === undefined || !coversAll(u)) return { why: `the claimed addends ${gk} do not add up to the whole value` };
    }
    return { proved: true };
  }

  /** A sum as one relation: complete terms of one region are the region of their tensor sum. */
  private materialize(v: Value): Relation | string {
    if (isRouted(v)) return `a routed MoE buffer (${this.world.name(v.of)}: its rows are a routing-dependent permutation of the tokens' slots) read by an op with no routing rule`;
    if (!isSum(v)) return v;
    const first = v.terms[0] as Relation;
    if (v.terms.some((t) => t.part !== undefined || t.bcast !== undefined || regionKey({ ...t, logical: first.logical }) !== regionKey(first))) return `a sum of ${v.terms.length} values that are not all whole, or not one region`;
    // A factor common to every term stays outside the sum (c a + c b is c x (a + b)).
    const common = v.terms.every((t) => feq(t.scale, first.scale));
    const coefs = v.terms.map((t) => (common ? ONE : t.scale));
    if (coefs.some((c) => c === undefined)) return 'scale overflow';
    const id = this.world.sumOf(v.terms.map((t, i) => ({ id: t.logical, coef: coefs[i] as Frac })));
    if (id === undefined) return `a sum of ${v.terms.length} values of different shapes`;
    const [cid, f] = this.world.canon(id);
    const scale = common ? fmul(f, first.scale) : f;
    if (scale === undefined) return 'scale overflow';
    return { logical: cid, ranges: first.ranges, scale };
  }

  /** A relation of a logical tensor, restated on its canonical tensor (claims name logical ones). */
  private canonical(d: Relation | string): Relation | string {
    if (typeof d === 'string') return d;
    const [id, f] = this.world.canon(d.logical);
    const scale = fmul(d.scale, f);
    return scale === undefined ? 'scale overflow' : { ...d, logical: id, scale };
  }

  private tensorName(r: number, t: number): string {
    return (this.plan.programs[this.plan.rankProgram[r] as number] as Program).tensors.name(t);
  }

  private show(r: Relation): string {
    const s = r.scale.num === 1 && r.scale.den === 1 ? '' : `${r.scale.num}/${r.scale.den} x `;
    const f = (a: Int): string => this.showInt(a);
    const p = r.part === undefined ? '' : ` (addends ${r.part.comps.map((c) => `${c.cover.map(f).join(',')} of ${c.total}`).join(' + ')})`;
    return `${s}${this.world.name(r.logical)}[${r.ranges.map(([a, b]) => `${f(a)}:${f(b)}`).join(',')}]${p}`;
  }

  /** A rank-dependent bound in the mesh's words: "16032*tp + 16032" (coordinates from the program's base). */
  private showInt(a: Int): string {
    if (typeof a === 'number') return String(a);
    const x0 = this.frame?.x0;
    let c = a.v;
    const terms: string[] = [];
    a.k.forEach((k, i) => {
      if (k === 0) return;
      c -= k * (x0?.[i] ?? 0);
      terms.push(`${k === 1 ? '' : `${k}*`}${this.plan.mesh.axes[i] ?? `x${i}`}`);
    });
    return `(${[...terms, ...(c === 0 ? [] : [String(c)])].join(' + ')})`;
  }

  /**
   * Values derived in every stage alike: a derivation that reached no claimed tensor with a
   * producer depends on no stage (the stage decides only whether such a claim is assumed or
   * recomputed: deriveOne), so one derivation serves all. With lineage only at the boundary,
   * every output's stage walks the whole graph: derived once, not once per output.
   */
  private readonly pure = new Map<number, Derived>();
  /** Counts derivations that reached a claim with a producer (or a depth limit): `pure` is a snapshot test. */
  private impure = 0;

  /** The derive function of one stage (or of one isolated collective derivation: `ctx.seen`). */
  private deriver(stage: StageRef, ctx: Ctx): (r: number, t: number, depth: number) => Derived {
    const derive = (r: number, t: number, depth: number): Derived => {
      const key = r * this.tensorKey + t;
      const ph = this.pure.get(key);
      if (ph !== undefined) return ph;
      const hit = ctx.memo.get(key);
      if (hit !== undefined) {
        this.impure++;
        return hit;
      }
      if (depth > MAX_DEPTH) {
        this.impure++;
        return 'the stage is deeper than the tensor-level walk goes';
      }
      const before = this.impure;
      const d = this.deriveOne(stage, r, t, depth, derive, ctx);
      if (this.impure !== before) ctx.memo.set(key, d);
      else {
        if (this.pure.size > 16_000_000) this.pure.clear();
        this.pure.set(key, d);
      }
      return d;
    };
    return derive;
  }

  private deriveOne(stage: StageRef, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, ctx: Ctx): Derived {
    checkRunClock();
    if (this.tmpl !== undefined) return this.deriveOneTemplate(stage, r, t, depth, derive, ctx);
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const lop = (this.localProd[pi] as Int32Array)[t] as number;
    const inst = lop >= 0 ? -1 : this.collProd.get(r * this.tensorKey + t);
    const pr: Producer | undefined = lop >= 0 ? { op: lop, inst: -1 } : inst === undefined ? undefined : { op: -1, inst };
    const spec = p.lineage[t];
    if (spec !== undefined && pr !== undefined) {
      this.impure++;
      if (spec.logical === stage.logical) ctx.seen?.recomputes.add(spec.logical);
      else ctx.seen?.assumes.add(spec.logical);
    }
    if (spec !== undefined && (spec.logical !== stage.logical || pr === undefined)) {
      // A stage input: its claim is assumed (the stage that produces it proves it).
      const ck = r * this.tensorKey + t;
      const hit = this.claimCache.get(ck);
      if (hit !== undefined) return hit;
      const nf = this.claimNF(r, t);
      if (nf === undefined) return 'no lineage';
      const rel = this.canonical(claimRelation(nf));
      if (this.claimCache.size > 2_000_000) this.claimCache.clear();
      this.claimCache.set(ck, rel);
      return rel;
    }
    if (pr === undefined) return `'${p.tensors.name(t)}' has no producer and no lineage`;
    if (pr.op >= 0) return this.deriveOp(r, pr.op, t, depth, derive);
    const c = plan.collectives[pr.inst];
    if (c === undefined) return 'missing collective';
    // One derivation per collective instance and stage: every member's output reads the same
    // inputs (an all-reduce over 512 ranks is combined once, not once per member).
    const shared = this.sharedCall(pr.inst, stage, ctx, (sub) => {
      const ins: (Value | undefined)[] = [];
      for (let i = 0; i < c.group.length; i++) {
        const x = c.inputs[i] as number;
        if (x < 0) {
          ins.push(undefined);
          continue;
        }
        const d = sub(c.group[i] as number, x, depth + 1);
        if (typeof d === 'string') return d;
        ins.push(d);
      }
      return { ins, memo: new Map() };
    });
    if (typeof shared === 'string') return shared;
    const me = c.group.indexOf(r);
    // A broadcast's value is its source member's input (other members may pass a buffer).
    const src = typeof c.attrs['src'] === 'number' ? c.group.indexOf(c.attrs['src']) : -1;
    return this.deriveCollective(registry.get(c.kind).name, c.attrs, shared, me, c.group.length, plan.view(r).shapes[t] ?? [], src);
  }

  /**
   * A collective call's members' inputs, derived once per stage (ctx.coll) and across stages
   * (`across`): a call derived without recomputing any claim holds in every stage whose own
   * tensor is none of the claims it assumed (every clipped gradient reads one global norm:
   * derived once, not once per parameter). Otherwise `derive` runs in isolation (its own memo),
   * recording the claims it assumes and recomputes. `key`: a collective instance (rank by
   * rank) or a call site per template (negative).
   */
  private sharedCall(key: number, stage: StageRef, ctx: Ctx, derive: (sub: (r: number, t: number, depth: number) => Derived) => Shared | string): Shared | string {
    let shared = ctx.coll.get(key);
    if (shared !== undefined && ctx.collImpure?.has(key) === true) this.impure++;
    const across = this.across.get(key);
    if (shared === undefined && across !== undefined && !across.assumes.has(stage.logical)) {
      shared = across.shared;
      if (across.assumes.size > 0) this.impure++;
      for (const a of across.assumes) ctx.seen?.assumes.add(a);
    }
    if (shared === undefined) {
      const seen = { assumes: new Set<number>(), recomputes: new Set<number>() };
      const sub = this.deriver(stage, { memo: new Map(), coll: new Map(), collImpure: new Set(), seen });
      const before = this.impure;
      shared = derive(sub);
      ctx.coll.set(key, shared);
      if (this.impure !== before) ctx.collImpure?.add(key);
      if (seen.recomputes.size === 0) this.across.set(key, { shared, assumes: seen.assumes });
      for (const a of seen.assumes) ctx.seen?.assumes.add(a);
      for (const a of seen.recomputes) ctx.seen?.recomputes.add(a);
    }
    return shared;
  }

  /**
   * deriveOne per template: r is the program's base rank and every rank-dependent quantity is
   * affine in the coordinates (stages/engines/tensorlevel/sym.ts). Claims are fitted over the coordinates they
   * depend on and checked at each; a collective whose group lies inside the program reads its
   * members' inputs as the base's input with the group's coordinates substituted.
   */
  private deriveOneTemplate(stage: StageRef, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, ctx: Ctx): Derived {
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const lop = (this.localProd[pi] as Int32Array)[t] as number;
    const site = lop >= 0 ? -1 : ((this.siteProd[pi] as Int32Array)[t] as number);
    const produced = lop >= 0 || site >= 0;
    const spec = p.lineage[t];
    if (spec !== undefined && produced) {
      this.impure++;
      if (spec.logical === stage.logical) ctx.seen?.recomputes.add(spec.logical);
      else ctx.seen?.assumes.add(spec.logical);
    }
    if (spec !== undefined && (spec.logical !== stage.logical || !produced)) {
      // A hint (lineage marked inferred) is proved where it is produced; on a tensor no op
      // writes nothing proves it, so it is never assumed.
      if (!produced && p.inferred?.has(t) === true) return `'${p.tensors.name(t)}' has only an inferred hint and no producer`;
      const ck = r * this.tensorKey + t;
      const hit = this.claimCache.get(ck);
      if (hit !== undefined) return hit;
      const rel = this.canonical(this.templateClaim(r, t));
      this.claimCache.set(ck, rel);
      return rel;
    }
    if (!produced) return `'${p.tensors.name(t)}' has no producer and no lineage`;
    if (lop >= 0) {
      const a = p.attrSpecs[lop];
      if (a !== undefined && a.exprs.length > 0) return `per template: op '${p.ops.ids.name(lop)}' has attributes that depend on the coordinates`;
      return this.deriveOp(r, lop, t, depth, derive);
    }
    const frame = this.tmpl?.[pi];
    if (frame === undefined || typeof frame === 'string') return frame ?? 'no template';
    const attrSpec = p.attrSpecs[site];
    if (attrSpec !== undefined && attrSpec.exprs.length > 0) return `per template: collective '${p.ops.ids.name(site)}' has attributes that depend on the coordinates`;
    const g = p.groups[site];
    if (g === undefined) return this.p2pTemplate(r, pi, site, depth, derive);
    if (g.kind !== 'axes') return `per template: collective '${p.ops.ids.name(site)}' has a group given by ranks (derived rank by rank)`;
    const axes = [...g.axes].sort((a, b) => a - b);
    const mesh = plan.mesh;
    const members = axes.reduce((q, a) => q * (mesh.sizes[a] as number), 1);
    if (members > MAX_LIFT_POINTS) return this.bigGroupSum(r, pi, site, t, axes, members, depth, derive);
    const key = -1 - (pi * this.opKey + site);
    const shared = this.sharedCall(key, stage, ctx, (sub) => this.groupInputs(r, pi, site, g.axes, axes, depth, sub));
    if (typeof shared === 'string') return shared;
    // This rank's place in its group, affine in the group's coordinates.
    let stride = 1;
    let pos = 0;
    const k = Array<number>(mesh.axes.length).fill(0);
    for (let j = axes.length - 1; j >= 0; j--) {
      const a = axes[j] as number;
      pos += (frame.x0[a] as number) * stride;
      k[a] = stride;
      stride *= mesh.sizes[a] as number;
    }
    const kind = registry.get(p.ops.kind[site] as number).name;
    if (kind === 'broadcast') return 'per template: a broadcast (its source is a rank, not a place in the group)';
    return this.deriveCollective(kind, plan.view(r).attrs[site] ?? {}, shared, Sym.of(pos, k), shared.ins.length, plan.view(r).shapes[t] ?? [], -1);
  }

  /**
   * An all-reduce (sum or avg) over a group too large to list (past MAX_LIFT_POINTS members) as
   * one symbolic sum (docs/engine.md, "Tensor level per template"). Taken only when the group's
   * members are exactly this program's ranks along the group axes (its box spans them whole and
   * no other program runs one of its ranks), and the base's input, derived once with affine
   * coordinates, is one addend of a decomposition into as many addends as members whose index
   * is the member's position in the group (plans/mesh.ts groupAlong: the written axes in order,
   * the last fastest), over a region and a scale the group axes do not move. Then the members
   * hold the addends 0..n-1 once each, and their sum is the whole region (avg: over n).
   */
  private bigGroupSum(r: number, pi: number, site: number, t: number, written: readonly number[], n: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.tmpl?.[pi] as TemplateFrame;
    const kind = registry.get(p.ops.kind[site] as number).name;
    const red = String((plan.view(r).attrs[site] ?? {})['reduce']);
    const no = (why: string): string => `per template: a ${kind} over a group of ${n} members: ${why}`;
    if (kind !== 'all_reduce' || (red !== 'sum' && red !== 'avg')) return no('only a sum or avg all-reduce is taken as one symbolic sum');
    if (!written.every((a) => frame.full[a] === true)) return no(`program '${p.name}' does not span the group axes whole`);
    const boxRanks = frame.sets.reduce((q, s) => q * s.length, 1);
    if (p.ranks.length !== boxRanks || p.ranks.some((x) => plan.rankProgram[x] !== pi)) return no(`another program runs some of the ranks of '${p.name}'`);
    const x = p.ops.opInputs(site)[0];
    if (x === undefined) return 'a collective with no input';
    const d0 = derive(frame.r0, x, depth + 1);
    if (typeof d0 === 'string') return d0;
    const d = this.materialize(d0);
    if (typeof d === 'string') return d;
    const comp = d.part?.comps[0];
    if (d.part === undefined || d.part.max === true || d.part.comps.length !== 1 || comp === undefined || d.bcast !== undefined || comp.total !== n) return no('its input is not one addend of a decomposition into as many addends as members');
    // The member's position: the written axes in order, the last fastest (groupAlong).
    const k = Array<number>(mesh.axes.length).fill(0);
    let stride = 1;
    for (let j = written.length - 1; j >= 0; j--) {
      const a = written[j] as number;
      k[a] = stride;
      stride *= mesh.sizes[a] as number;
    }
    const pos = Sym.of(written.reduce((q, a) => q + (frame.x0[a] as number) * (k[a] as number), 0), k);
    const c = comp.cover[0] as Int;
    const one = comp.kind === 'idx' ? comp.cover.length === 1 : comp.cover.length === 2 && icmp(comp.cover[1] as Int, iadd(c, 1)) === 0;
    if (!one || icmp(c, pos) !== 0) return no("its addend index is not the member's position in the group");
    if (d.ranges.some(([lo, hi]) => [...iaxes(lo), ...iaxes(hi)].some((a) => written.includes(a)))) return no('its region moves along the group axes');
    const scale = red === 'avg' ? fmul(d.scale, frac(1, n) as Frac) : d.scale;
    if (scale === undefined) return 'scale overflow';
    return this.checked({ logical: d.logical, ranges: d.ranges, scale }, plan.view(r).shapes[t] ?? []);
  }

  /**
   * The members' inputs of a group call per template, in coordinate order (plans/mesh.ts
   * groupAlong: the last group axis fastest). A member in this program is the base's input with
   * the group's coordinates substituted; a member in another program (a group along an axis
   * the program does not vary, as pipeline stages) runs the call that the loader's matching
   * pairs with this one: the same position among its calls on the same group axes. The other
   * axes' coordinates must be the same sets in both programs, so affine values carry over.
   */
  private groupInputs(r: number, pi: number, site: number, written: readonly number[], axes: readonly number[], depth: number, derive: (r: number, t: number, depth: number) => Derived): Shared | string {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.tmpl?.[pi] as TemplateFrame;
    const n = axes.reduce((q, a) => q * (mesh.sizes[a] as number), 1);
    if (n > MAX_LIFT_POINTS) return `per template: a group of ${n} members`;
    const k = this.sitesOn(pi, written).indexOf(site);
    const ins: Value[] = [];
    // The members of the base rank's group, in the order the loader matches them.
    for (const m of mesh.groupAlong(frame.r0, axes)) {
      const at = mesh.coords(m);
      const qi = plan.rankProgram[m] as number;
      const qf = this.tmpl?.[qi];
      if (qf === undefined || typeof qf === 'string') return qf ?? 'no template';
      // Only axes neither program varies may differ (pipeline stages): where either varies, the
      // two bases agree, so affine values (and region maps checked on this frame) mean the same.
      if (!sameSetsOutside(frame, qf, axes.filter((a) => (frame.sets[a]?.length ?? 0) === 1 && (qf.sets[a]?.length ?? 0) === 1))) return `per template: the group of '${p.ops.ids.name(site)}' reaches program '${(plan.programs[qi] as Program).name}', whose ranks differ outside the group`;
      const q = plan.programs[qi] as Program;
      let qs = site;
      if (qi !== pi) {
        qs = this.sitesOn(qi, written)[k] ?? -1;
        if (qs < 0 || q.ops.kind[qs] !== p.ops.kind[site] || attrsKey(plan.view(qf.r0).attrs[qs]) !== attrsKey(plan.view(r).attrs[site]) || (q.attrSpecs[qs]?.exprs.length ?? 0) > 0) return `per template: no matching call of '${p.ops.ids.name(site)}' in program '${q.name}'`;
        this.use?.same(p.ops.kind[site] as number, plan.view(qf.r0).attrs[qs], plan.view(r).attrs[site]);
      }
      const x = q.ops.opInputs(qs)[0];
      if (x === undefined) return 'a collective with no input';
      const d = derive(qf.r0, x, depth + 1);
      if (typeof d === 'string') return d;
      ins.push(substValue(d, axes, at, qf.x0));
    }
    return { ins, memo: new Map() };
  }

  /** Per program: its call sites on groups along these axes (as written), in program order. */
  private sitesOn(pi: number, axes: readonly number[]): number[] {
    const key = `${pi}|${axes.join('.')}`;
    let hit = this.siteLists.get(key);
    if (hit === undefined) {
      hit = [...(axisSites(this.plan.programs[pi] as Program, axes) ?? [])];
      this.siteLists.set(key, hit);
    }
    return hit;
  }
  private readonly siteLists = new Map<string, number[]>();

  /**
   * A receive per template from a peer given by a shift along axes the program does not vary
   * (pipeline stages): every rank of the box receives from the same program, at the same
   * coordinates elsewhere. The send it pairs with is the same position among the sender's sends
   * to this rank as this receive among its receives from the sender (plans/collectives.ts).
   */
  private p2pTemplate(r: number, pi: number, site: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.tmpl?.[pi] as TemplateFrame;
    const name = registry.get(p.ops.kind[site] as number).name;
    const peerOf = (q: Program, op: number, x0: readonly number[]): number | undefined => {
      const spec = q.peers[op];
      if (spec === undefined || spec.kind !== 'shift') return undefined;
      const c = [...x0];
      for (const [a, d] of spec.shift) {
        const v = (c[a] as number) + d;
        if (v < 0 || v >= (mesh.sizes[a] as number)) return undefined;
        c[a] = v;
      }
      return mesh.rankOf(c);
    };
    if (name !== 'recv') return `per template: '${name}' between ranks is derived rank by rank`;
    const spec = p.peers[site];
    if (spec === undefined || spec.kind !== 'shift') return `per template: '${p.ops.ids.name(site)}' has a peer given by a rank`;
    if (spec.shift.some(([a]) => (frame.sets[a]?.length ?? 0) !== 1)) return `per template: '${p.ops.ids.name(site)}' shifts along an axis the program varies`;
    const peer = peerOf(p, site, frame.x0);
    if (peer === undefined) return `per template: '${p.ops.ids.name(site)}' has no peer`;
    const qi = plan.rankProgram[peer] as number;
    const qf = this.tmpl?.[qi];
    if (qf === undefined || typeof qf === 'string') return qf ?? 'no template';
    const shifted = spec.shift.map(([a]) => a);
    if (shifted.some((a) => (qf.sets[a]?.length ?? 0) !== 1) || !sameSetsOutside(frame, qf, shifted) || qf.r0 !== peer) return `per template: '${p.ops.ids.name(site)}' receives from program '${(plan.programs[qi] as Program).name}', whose ranks differ`;
    const q = plan.programs[qi] as Program;
    const mine = [...p.collectiveSites].filter((op) => registry.get(p.ops.kind[op] as number).name === 'recv' && peerOf(p, op, frame.x0) === peer);
    const theirs = [...q.collectiveSites].filter((op) => registry.get(q.ops.kind[op] as number).name === 'send' && peerOf(q, op, qf.x0) === frame.r0);
    const sendOp = theirs[mine.indexOf(site)];
    if (sendOp === undefined) return `per template: no send pairs with '${p.ops.ids.name(site)}'`;
    const x = q.ops.opInputs(sendOp)[0];
    if (x === undefined) return 'a send with no input';
    return derive(qf.r0, x, depth + 1);
  }

  /**
   * A claim per template: its normal form at every coordinate of the axes its spec reads (the
   * loader's `axes`), fitted as affine functions at the base and one step per axis and checked
   * at every point; constant parts (factor, addend count, reduction) must not vary.
   */
  private templateClaim(r: number, t: number): Relation | string {
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const frame = this.tmpl?.[pi];
    if (frame === undefined || typeof frame === 'string') return frame ?? 'no template';
    const spec = p.lineage[t];
    if (spec === undefined) return 'no lineage';
    if (spec.axes.includes(-1)) return 'a claim that reads the rank number';
    // An index map of numbers and affine expressions (plans/expr.ts: built from literals, axes,
    // + - and constant products, never out of range) is affine by construction: fitted along
    // every axis the program varies, it is exact, and the walk below would only repeat it.
    // Placements (torch.chunk sizes) and other expressions are walked over the axes they read.
    // Placements are affine too when every Shard splits its piece evenly (lineage/model.ts
    // expandPlacements: offsets lo + c * L/m, partial indices idx * m + c): nothing is clamped.
    const lshape0 = plan.logical.shapes[spec.logical] ?? [];
    const affineSpec = spec.kind === 'index' ? [...(spec.dims ?? []).flatMap((d) => d ?? []), spec.idx].every((x) => typeof x === 'number' || x.affine !== undefined) : evenPlacements(spec.placements, plan.mesh.sizes, lshape0);
    const axes = (affineSpec ? frame.sets.map((_, a) => a) : [...spec.axes]).filter((a) => (frame.sets[a]?.length ?? 0) > 1).sort((a, b) => a - b);
    const points = axes.reduce((q, a) => q * (frame.sets[a] as Int32Array).length, 1);
    if (!affineSpec && points > MAX_LIFT_POINTS) return `a claim over ${points} coordinates (at most ${MAX_LIFT_POINTS})`;
    const mesh = plan.mesh;
    // Shapes do not depend on the coordinates (templateFrame): the base view's, never a view per rank.
    const lshape = plan.logical.shapes[spec.logical] ?? [];
    const local = plan.view(r).shapes[t] ?? [];
    const nfAt = (x: readonly number[]): LineageNF => evalLineage(spec, mesh, mesh.rankOf(x), lshape, local);
    // Flattened to numbers: [ranges..., idx], with the constant parts as text.
    const flat = (nf: LineageNF): { nums: number[]; fixed: string } | string => {
      const nums: number[] = [];
      for (const rg of nf.ranges) {
        if (rg.length !== 2) return 'a striped region (several ranges along one dim)';
        nums.push(rg[0] as number, rg[1] as number);
      }
      const v = nf.value;
      nums.push(v.n === 1 ? 0 : v.idx);
      return { nums, fixed: `${nf.logical}|${v.divisor}|${v.n}|${v.reduce}|${groupKey(v)}` };
    };
    const x0 = [...frame.x0];
    const nf0 = nfAt(x0);
    const b = flat(nf0);
    if (typeof b === 'string') return b;
    const coefs = b.nums.map(() => Array<number>(x0.length).fill(0));
    for (const a of axes) {
      const next = (frame.sets[a] as Int32Array).find((c) => c > (x0[a] as number));
      if (next === undefined) continue;
      const x = [...x0];
      x[a] = next;
      const f = flat(nfAt(x));
      if (typeof f === 'string') return f;
      if (f.fixed !== b.fixed || f.nums.length !== b.nums.length) return 'a claim whose factor, addends or reduction depend on the coordinates';
      const step = next - (x0[a] as number);
      for (let i = 0; i < b.nums.length; i++) {
        const diff = ((f.nums[i] as number) - (b.nums[i] as number)) / step;
        if (!Number.isInteger(diff)) return 'a claim that is not affine in the coordinates';
        (coefs[i] as number[])[a] = diff;
      }
    }
    const sym = b.nums.map((v, i) => Sym.of(v, coefs[i] as number[]));
    // Checked at every coordinate of its axes (the others stay at the base).
    const bad = affineSpec
      ? undefined
      : everyPoint(axes, frame.sets, x0, (x) => {
          const f = flat(nfAt(x));
          if (typeof f === 'string') return f;
          return f.fixed !== b.fixed || f.nums.some((v, i) => v !== ieval(sym[i] as Int, x, x0)) ? 'a claim that is not affine in the coordinates' : undefined;
        });
    if (bad !== undefined) return bad;
    const ranges: Range[] = [];
    for (let d = 0; d + 1 < sym.length; d += 2) ranges.push([sym[d] as Int, sym[d + 1] as Int]);
    const v = nf0.value;
    const scale = frac(v.divisor, 1);
    if (scale === undefined) return 'a divisor that is not an integer';
    if (v.n === 1) return { logical: nf0.logical, ranges, scale };
    if (v.reduce !== 'sum') return `addends combined by ${v.reduce}`;
    const idx = sym[sym.length - 1] as Int;
    return { logical: nf0.logical, ranges, scale, part: { key: `claim|${groupKey(v)}|${nf0.logical}|${ranges.map(([a, c]) => `${ikey(a)}:${ikey(c)}`).join(';')}`, comps: [{ kind: 'idx', cover: [idx], total: v.n }] } };
  }

  private claimNF(r: number, t: number): LineageNF | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    if (spec === undefined) return undefined;
    return this.nfOf(r, t);
  }

  private readonly nfCache = new Map<number, LineageNF>();
  private nfOf(r: number, t: number): LineageNF {
    const key = r * this.tensorKey + t;
    const hit = this.nfCache.get(key);
    if (hit !== undefined) return hit;
    // evalLineage through the stage builder's conventions (plans/loader view shapes).
    const nf = evalNF(this.plan, r, t);
    if (this.nfCache.size > 100_000) this.nfCache.clear();
    this.nfCache.set(key, nf);
    return nf;
  }

  private deriveCollective(kind: string, attrs: Attrs, shared: Shared, me: Int, g: number, outShape: Shape, src: number): Derived {
    const ins = shared.ins;
    const once = (k: string, f: () => Derived): Derived => {
      const hit = shared.memo.get(k);
      if (hit !== undefined) return hit;
      const v = f();
      shared.memo.set(k, v);
      return v;
    };
    const values = ins.filter((x): x is Value => x !== undefined);
    if (values.some(isRouted)) {
      if (kind === 'send' || kind === 'recv' || kind === 'send_recv') return me === 1 && ins[0] !== undefined ? ins[0] : 'a point-to-point transfer with no input from its sender';
      if (kind !== 'all_to_all') return `'${kind}' of a routed MoE buffer`;
      if (values.length !== g || !values.every(isRouted)) return 'all_to_all of routed and plain buffers';
      return this.routedA2a(values, attrs, me, g, outShape);
    }
    const p2p = kind === 'send' || kind === 'recv' || kind === 'send_recv' || kind === 'broadcast' || kind === 'all_reduce' || kind === 'reduce_scatter';
    // Collectives that move regions need each input as one relation.
    const mats = p2p ? [] : values.map((v) => this.materialize(v));
    const bad = mats.find((m): m is string => typeof m === 'string');
    if (bad !== undefined) return bad;
    const present = p2p ? [] : (mats as Relation[]);
    switch (kind) {
      case 'send':
      case 'recv':
      case 'send_recv': {
        // Point to point: member 0 sends, member 1 receives (ops/collectives.ts).
        const x = shared.ins[0];
        return me === 1 && x !== undefined ? x : 'a point-to-point transfer with no input from its sender';
      }
      case 'broadcast': {
        const x = src >= 0 ? shared.ins[src] : undefined;
        return x ?? 'a broadcast with no source input';
      }
      case 'all_reduce':
      case 'reduce_scatter': {
        const red = String(attrs['reduce']);
        if (values.length !== g) return 'a member passes no input';
        const comb0 = once('combine', () => this.combine(values, red, g));
        if (typeof comb0 === 'string' || kind === 'all_reduce') return comb0;
        const comb = this.materialize(comb0);
        if (typeof comb === 'string') return comb;
        const d = this.normDim(attrs['dim'], comb.ranges.length);
        const chunk = chunkOf(comb.ranges[d] as Range, g, me);
        if (chunk === undefined) return 'reduce_scatter of a region not divisible by the group';
        const ranges = comb.ranges.map((x, i) => (i === d ? chunk : x));
        return this.checked({ ...comb, ranges }, outShape);
      }
      case 'all_gather': {
        if (present.length !== g) return 'a member passes no input';
        return once(`gather${outShape.join(',')}`, () => this.gather(present, attrs, outShape));
      }
      case 'all_to_all': {
        if (present.length !== g) return 'a member passes no input';
        const check = once('a2a', () => this.a2aCheck(present, attrs)) as Relation | string;
        if (typeof check === 'string') return check;
        const first = present[0] as Relation;
        const sd = this.normDim(attrs['split_dim'], first.ranges.length);
        const cd = this.normDim(attrs['concat_dim'], first.ranges.length);
        const chunk = chunkOf(first.ranges[sd] as Range, g, me);
        if (chunk === undefined) return 'all_to_all of a region not divisible by the group';
        const ranges = first.ranges.map((x, i) => (i === cd ? (check.ranges[cd] as Range) : i === sd ? chunk : x));
        return this.checked({ logical: first.logical, ranges, scale: first.scale }, outShape);
      }
      default:
        return `collective '${kind}' has no tensor-level rule`;
    }
  }

  private gather(present: readonly Relation[], attrs: Attrs, outShape: Shape): Derived {
    const first = present[0] as Relation;
    const joined = this.concatAlong(present, this.normDim(attrs['dim'], first.ranges.length), 'all_gather');
    return typeof joined === 'string' ? joined : this.checked(joined, outShape);
  }

  /** all_to_all inputs: slices of one value, contiguous along concat_dim; the concatenated region. */
  private a2aCheck(present: readonly Relation[], attrs: Attrs): Relation | string {
    const first = present[0] as Relation;
    const sd = this.normDim(attrs['split_dim'], first.ranges.length);
    const cd = this.normDim(attrs['concat_dim'], first.ranges.length);
    if (sd === cd) return 'all_to_all along one dim';
    return this.concatAlong(present, cd, 'all_to_all');
  }

  /** Whole slices of one value, equal outside dim d and contiguous along it in group order: their concatenation. */
  private concatAlong(present: readonly Relation[], d: number, what: string): Relation | string {
    const first = present[0] as Relation;
    let end = (first.ranges[d] as Range)[0];
    for (const x of present) {
      if (x.logical !== first.logical || x.part !== undefined || x.bcast !== undefined || !feq(x.scale, first.scale)) return `${what} of inputs that are not slices of one value`;
      if (x.ranges.some((rg, i) => i !== d && (rg[0] !== (first.ranges[i] as Range)[0] || rg[1] !== (first.ranges[i] as Range)[1]))) return `${what} of slices that differ outside dim ${d}`;
      if ((x.ranges[d] as Range)[0] !== end) return `${what} of slices that are not contiguous in group order`;
      end = (x.ranges[d] as Range)[1];
    }
    return { logical: first.logical, scale: first.scale, ranges: first.ranges.map((x, i) => (i === d ? ([(first.ranges[d] as Range)[0], end] as Range) : x)) };
  }

  /** all_reduce / reduce_scatter of the members' inputs: a partition of addends, or replicas. */
  private combine(xs0: readonly Value[], red: string, g: number): Derived {
    if (xs0.some(isRouted)) return `${red} over routed MoE buffers`;
    const xs = xs0 as readonly (Relation | Sum)[];
    if (red === 'max' && xs.every((x) => !isSum(x) && isMaxPart(x))) {
      // Max-addends of one value over a partition of the maxed range: their max is the value.
      const rs = xs as Relation[];
      const first = rs[0] as Relation;
      if (rs.some((x) => termKey(x) !== termKey(first) || !feq(x.scale, first.scale))) return 'max over max-addends of different values';
      const u = unionParts(rs.map((x) => x.part as Part));
      if (u === undefined || !coversAll(u)) return 'max over max-addends that do not cover the whole range';
      return { logical: first.logical, ranges: first.ranges, scale: first.scale };
    }
    if (red === 'max' || red === 'min') {
      const first = xs[0];
      if (first === undefined || isSum(first) || first.part !== undefined || xs.some((x) => isSum(x) || !sameRel(x, first))) return `${red} over members that do not hold one whole value`;
      return first;
    }
    if (red !== 'sum' && red !== 'avg') return `reduction '${red}'`;
    // The members' values added up (replicas add their factors, addends unite), then averaged.
    const sum = addTerms(xs.flatMap(termsOf));
    if (typeof sum === 'string') return `${red}: ${sum}`;
    const post = red === 'avg' ? (frac(1, g) as Frac) : ONE;
    const scaled = termsOf(sum).map((t) => ({ ...t, scale: fmul(t.scale, post) }));
    if (scaled.some((t) => t.scale === undefined)) return 'scale overflow';
    const ts = scaled as Relation[];
    return ts.length === 1 ? (ts[0] as Relation) : { terms: ts };
  }


  /**
   * A numeric region map (an op record's sliceRegions) on regions that may depend on the
   * coordinates: evaluated at every coordinate of the axes they depend on (the current
   * program's box), and accepted only when the results are one affine function of them (fitted
   * at the base and one step per axis, then checked at every point). Exhaustive over the box,
   * so the result holds at every rank.
   */
  private lifted(regs: readonly (readonly Range[])[], f: (rs: (readonly [number, number])[][]) => (readonly [number, number])[][] | string, memoKey?: string): Range[][] | string {
    const axes = [...new Set(regs.flatMap((rg) => rg.flatMap(([a, b]) => [...iaxes(a), ...iaxes(b)])))].sort((x, y) => x - y);
    const at = (x: ArrayLike<number>, x0: ArrayLike<number>): (readonly [number, number])[][] => regs.map((rg) => rg.map(([a, b]) => [ieval(a, x, x0), ieval(b, x, x0)] as const));
    if (axes.length === 0) return f(at([], []));
    const fr = this.frame;
    if (fr === undefined) return 'a rank-dependent region outside a template';
    // The same map of the same affine regions over the same box (a reshape repeated in every
    // layer and micro-batch) is checked once.
    const key = memoKey === undefined ? undefined : `${memoKey}|${regs.map((rg) => rg.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')).join(';')}|${fr.x0.join(',')}|${fr.sets.map((s0) => s0.join('.')).join(',')}`;
    if (key !== undefined) {
      const hit = this.liftMemo.get(key);
      if (hit !== undefined) return hit;
    }
    const res = this.liftedWalk(regs, f, axes, at, fr);
    if (key !== undefined) {
      if (this.liftMemo.size > 200_000) this.liftMemo.clear();
      this.liftMemo.set(key, res);
    }
    return res;
  }
  private readonly liftMemo = new Map<string, Range[][] | string>();

  private liftedWalk(
    regs: readonly (readonly Range[])[],
    f: (rs: (readonly [number, number])[][]) => (readonly [number, number])[][] | string,
    axes: readonly number[],
    at: (x: ArrayLike<number>, x0: ArrayLike<number>) => (readonly [number, number])[][],
    fr: { readonly x0: readonly number[]; readonly sets: readonly Int32Array[] },
  ): Range[][] | string {
    const points = axes.reduce((n, a) => n * (fr.sets[a]?.length ?? 0), 1);
    if (points > MAX_LIFT_POINTS) return `a rank-dependent region over ${points} coordinates (at most ${MAX_LIFT_POINTS})`;
    const base = f(at(fr.x0, fr.x0));
    if (typeof base === 'string') return base;
    // Coefficients from one step along each axis.
    const coefs = base.map((rg) => rg.map(() => [Array<number>(fr.x0.length).fill(0), Array<number>(fr.x0.length).fill(0)] as [number[], number[]]));
    for (const a of axes) {
      const set = fr.sets[a] as Int32Array;
      const next = set.find((c) => c > (fr.x0[a] as number));
      if (next === undefined) continue;
      const x = [...fr.x0];
      x[a] = next;
      const r = f(at(x, fr.x0));
      if (typeof r === 'string') return r;
      const step = next - (fr.x0[a] as number);
      for (let i = 0; i < base.length; i++) {
        const bi = base[i] as (readonly [number, number])[];
        const ri = r[i];
        if (ri === undefined || ri.length !== bi.length) return 'a region map whose shape depends on the rank';
        for (let d = 0; d < bi.length; d++) {
          for (const e of [0, 1] as const) {
            const diff = ((ri[d] as readonly [number, number])[e] - (bi[d] as readonly [number, number])[e]) / step;
            if (!Number.isInteger(diff)) return 'a region map that is not affine in the coordinates';
            ((coefs[i] as [number[], number[]][])[d] as [number[], number[]])[e][a] = diff;
          }
        }
      }
    }
    const out: Range[][] = base.map((rg, i) => rg.map(([a, b], d) => {
      const [ka, kb] = (coefs[i] as [number[], number[]][])[d] as [number[], number[]];
      return [Sym.of(a, ka), Sym.of(b, kb)] as const;
    }));
    // Checked at every coordinate of the axes (the others stay at the base).
    const bad = everyPoint(axes, fr.sets, fr.x0, (x) => {
      const r = f(at(x, fr.x0));
      if (typeof r === 'string') return r;
      for (let i = 0; i < out.length; i++) {
        const oi = out[i] as Range[];
        for (let d = 0; d < oi.length; d++) {
          const [a, b] = oi[d] as Range;
          const got = (r[i] ?? [])[d];
          if (got === undefined || got[0] !== ieval(a, x, fr.x0) || got[1] !== ieval(b, x, fr.x0)) return 'a region map that is not affine in the coordinates';
        }
      }
      return undefined;
    });
    return bad ?? out;
  }

  /** Per template: the current program's base coordinates and box (stages/engines/tensorlevel/sym.ts); undefined per rank. */
  private frame: { readonly x0: readonly number[]; readonly sets: readonly Int32Array[] } | undefined;

  private normDim(v: AttrValue | undefined, rank: number): number {
    const d = typeof v === 'number' ? v : 0;
    return d < 0 ? d + rank : d;
  }

  /**
   * Input relation x (a plain scaled region: no addend, no broadcast) narrowed along dim to
   * [start, end) of the local input: the same logical tensor, that sub-region. Undefined when
   * the attributes are not integers (per template: affine in the coordinates).
   */
  private narrowed(r: number, op: number, x: Relation, inShape: Shape, attrs: Attrs, n: NonNullable<OpDef['narrows']>, outShape: Shape): Relation | undefined {
    if (x.part !== undefined || x.bcast !== undefined || inShape.length !== x.ranges.length) return undefined;
    const d = dimAttr(attrs, n.dim, inShape.length);
    if (d === undefined) return undefined;
    const s = this.attrInt(r, op, n.start);
    const e = this.attrInt(r, op, n.end);
    const rg = x.ranges[d];
    if (s === undefined || e === undefined || rg === undefined) return undefined;
    const ranges = x.ranges.map((q, i): Range => (i === d ? [iadd(q[0], s), iadd(q[0], e)] : q));
    const c = this.checked({ ...x, ranges }, outShape);
    return typeof c === 'string' ? undefined : c;
  }

  /**
   * Input relation x (a plain scaled region [a, b) along dim of logical L, no addend, no
   * broadcast) padded with `before` = a zeros ahead and `after` = |L| - b behind: the chunk at its
   * own place in a tensor of L's extent, zero elsewhere. That is the addend over [a, b) of the
   * whole of L along dim (key pad|L|dim): pads of chunks that partition L along dim sum to L.
   */
  private padded(r: number, op: number, x: Relation, inShape: Shape, attrs: Attrs, z: NonNullable<OpDef['zeroPads']>, outShape: Shape): Relation | undefined {
    if (x.bcast !== undefined || inShape.length !== x.ranges.length) return undefined;
    // An addend of one decomposition (a micro-batch's or a data-parallel rank's gradient): the
    // pad is the cell (its addend, this chunk) of the product of that decomposition and the
    // chunks; a product of products, or of a sum of decompositions, is refused.
    if (x.part !== undefined && (x.part.max === true || x.part.comps.length !== 1 || isProduct(x.part))) return undefined;
    const d = dimAttr(attrs, z.dim, inShape.length);
    if (d === undefined) return undefined;
    const before = this.attrInt(r, op, z.before);
    const after = this.attrInt(r, op, z.after);
    const rg = x.ranges[d];
    const size = this.world.shape(x.logical)[d];
    if (before === undefined || after === undefined || rg === undefined || size === undefined) return undefined;
    // The chunk goes back to its own place, and the result spans L's whole extent along dim.
    if (icmp(before, rg[0]) !== 0 || icmp(iadd(rg[1], after), size) !== 0) return undefined;
    const ranges = x.ranges.map((q, i): Range => (i === d ? [0, size] : q));
    const chunk: Comp = { kind: 'range', cover: [rg[0], rg[1]], total: size };
    const part: Part = x.part === undefined ? { key: `pad|${x.logical}|${d}`, comps: [chunk] } : { key: `${PRODUCT}pad|${x.logical}|${d}|${x.part.key}`, comps: [...x.part.comps, chunk] };
    const c = this.checked({ ...x, ranges, part }, outShape);
    return typeof c === 'string' ? undefined : c;
  }

  /** The derived region must be what the parallel tensor holds: its local shape. */
  private checked(rel: Relation, shape: Shape): Relation | string {
    if (shape.length !== rel.ranges.length) return `derived ${this.show(rel)} for a tensor of rank ${shape.length}`;
    for (let i = 0; i < shape.length; i++) {
      const [a, b] = rel.ranges[i] as Range;
      const n = iconst(isub(b, a));
      if (n !== shape[i] && !(n === 1 && rel.bcast?.includes(i) === true)) return `derived ${this.show(rel)} for a tensor of shape [${shape.join(',')}]`;
    }
    return rel;
  }

  private sig(op: number): Sig | null {
    const hit = this.dimsCache.get(op);
    if (hit !== undefined) return hit;
    const o = this.world.ops[op] as OpRef;
    let s: Sig | null;
    try {
      const d = registry.get(o.kind).dims(
        o.inputs.map((x) => this.world.shape(x)),
        o.attrs,
      );
      s = { inputs: d.inputs, outputs: d.outputs, sums: new Set(d.sums ?? []), maxes: new Set(d.maxes ?? []), grouped: d.grouped ?? [] };
    } catch {
      s = null;
    }
    this.dimsCache.set(op, s);
    return s;
  }

  private deriveOp(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const vocab = this.vocabRule(r, op, t, depth, derive);
    if (vocab !== undefined) return vocab;
    const vals: Value[] = [];
    for (const x of p.ops.opInputs(op)) {
      const d = derive(r, x, depth + 1);
      if (typeof d === 'string') return d;
      vals.push(d);
    }
    // What the op reads from the rank's view: its attributes and its tensors' shapes (views
    // differ per coordinates; replicas that agree on these derive alike).
    // Keyed by the view's shape table: plan.view(r) copies a shared view per rank ({ ...v, rank }),
    // and its tables (built fresh per instantiated view, plans/programs.ts) are what the signature reads.
    let sigs = this.opSigs.get(view.shapes);
    if (sigs === undefined) this.opSigs.set(view.shapes, (sigs = new Map()));
    let osig = sigs.get(op);
    if (osig === undefined) {
      const sh = (x: number): string => (view.shapes[x] ?? []).join(',');
      const text = `${attrsKey(view.attrs[op])}|${[...p.ops.opInputs(op)].map(sh).join(';')}|${[...p.ops.opOutputs(op)].map(sh).join(';')}`;
      osig = this.sigIds.get(text);
      if (osig === undefined) this.sigIds.set(text, (osig = this.sigIds.size));
      sigs.set(op, osig);
    }
    const mkey = `${plan.rankProgram[r] as number}|${op}|${t}|${osig}|${vals.map((v) => this.valueId(v)).join(',')}`;
    const hit = this.opMemo.get(mkey);
    if (hit !== undefined) return hit;
    const d = this.deriveOpFrom(r, op, t, vals);
    if (this.opMemo.size > 500_000) this.opMemo.clear();
    this.opMemo.set(mkey, d);
    return d;
  }

  /** The local op writing tensor t on rank r, or -1 (inputs and collective outputs). */
  private prodOp(r: number, t: number): number {
    return (this.localProd[this.plan.rankProgram[r] as number] as Int32Array)[t] ?? -1;
  }

  /**
   * Back through reshapes that only add or drop trailing unit dims: they keep every element
   * at its flat position, so positions line up with the tensor they start from.
   */
  private unitBase(r: number, t: number): number {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const shapes = this.plan.view(r).shapes;
    for (let i = 0; i < 16; i++) {
      const op = this.prodOp(r, t);
      if (op < 0 || p.ops.kind[op] !== this.reshapeKind) return t;
      const x = p.ops.opInputs(op)[0] as number;
      if (trailingUnits(shapes[x] ?? [], shapes[t] ?? []) === undefined) return t;
      t = x;
    }
    return t;
  }

  /** A vocab-range op (OpDef.vocabRange) writing t through unit reshapes: its ids and range. */
  private vocabOf(r: number, t: number, want: 'outside' | 'local'): { ids: number; s: Int; e: Int } | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const op = this.prodOp(r, this.unitBase(r, t));
    if (op < 0 || registry.get(p.ops.kind[op] as number).vocabRange !== want) return undefined;
    const s = this.attrInt(r, op, 'start');
    const e = this.attrInt(r, op, 'end');
    if (s === undefined || e === undefined) return undefined;
    return { ids: p.ops.opInputs(op)[0] as number, s, e };
  }

  /**
   * An integer attribute: per rank its value; per template, an attribute written as an
   * expression of the coordinates is its affine form (plans/expr.ts), else undefined.
   */
  private attrInt(r: number, op: number, key: string): Int | undefined {
    const pi = this.plan.rankProgram[r] as number;
    const p = this.plan.programs[pi] as Program;
    const e = p.attrSpecs[op]?.exprs.find(([keys]) => keys.length === 1 && keys[0] === key);
    if (this.tmpl === undefined || e === undefined) {
      const v = (this.plan.view(r).attrs[op] ?? {})[key];
      return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
    }
    const frame = this.tmpl[pi];
    const aff = e[1].affine;
    if (frame === undefined || typeof frame === 'string' || aff === undefined) return undefined;
    const mesh = this.plan.mesh;
    const k = Array<number>(mesh.axes.length).fill(0);
    let v = aff.c;
    for (const [name, c] of aff.k) {
      const a = mesh.axes.indexOf(name);
      if (a < 0) return undefined;
      k[a] = c;
      v += c * (frame.x0[a] as number);
    }
    // Coefficients on axes the program does not vary along fold into the value.
    for (let a = 0; a < k.length; a++) if ((frame.sets[a]?.length ?? 0) <= 1) k[a] = 0;
    return Sym.of(v, k);
  }

  /** Per template, whether op's attributes depend on the coordinates (then its base values stand for no other rank). */
  private coordAttrs(r: number, op: number): boolean {
    if (this.tmpl === undefined) return false;
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    return (p.attrSpecs[op]?.exprs.length ?? 0) > 0;
  }

  /** The largest value over the current ranks (the program's box per template). */
  private maxOver(r: number, a: Int): number | undefined {
    if (typeof a === 'number') return a;
    const frame = this.tmpl?.[this.plan.rankProgram[r] as number];
    if (frame === undefined || typeof frame === 'string') return undefined;
    let m = a.v;
    a.k.forEach((c, i) => {
      const set = frame.sets[i] as Int32Array;
      const x0 = frame.x0[i] as number;
      m += Math.max(c * ((set[0] as number) - x0), c * ((set[set.length - 1] as number) - x0));
    });
    return m;
  }

  /** Whether tensor z is 0 x tensor x (a scale by 0 of it). */
  private zeroOf(r: number, z: number, x: number): boolean {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const op = this.prodOp(r, z);
    if (op < 0 || p.ops.kind[op] !== this.scaleKind || p.ops.opInputs(op)[0] !== x || this.coordAttrs(r, op)) return false;
    const f = parseFrac(attrScalar(this.plan.view(r).attrs[op] ?? {}, 'factor'));
    return f !== undefined && f.num === 0;
  }

  /**
   * The condition c, read at the positions of a tensor of shape `of`, is the element at the
   * same position of ids: c equals `of` on leading dims and is 1 on trailing ones, and holds
   * as many elements as the ids.
   */
  private alignedMask(c: Shape, of: Shape, ids: Shape): boolean {
    if (c.length !== of.length || numel(c) !== numel(ids)) return false;
    let lead = true;
    for (let d = 0; d < c.length; d++) {
      if (lead && c[d] === of[d]) continue;
      lead = false;
      if (c[d] !== 1) return false;
    }
    return true;
  }

  /**
   * A relation restated through a reshape that adds or drops trailing unit dims (local shapes
   * `from` -> `to`): the same reshape of the logical tensor (a virtual op when the plan has none).
   */
  private unitLog(rel: Relation, from: Shape, to: Shape): Relation | string {
    const k = trailingUnits(from, to);
    if (k === undefined) return 'a reshape that is not of trailing unit dims';
    if (isMaxPart(rel)) return 'a reshape of a max-addend';
    if (k === 0) return rel;
    const w = this.world;
    const ls = w.shape(rel.logical);
    let shape: number[];
    let ranges: Range[];
    if (k > 0) {
      shape = [...ls, ...Array<number>(k).fill(1)];
      ranges = [...rel.ranges, ...Array.from({ length: k }, () => [0, 1] as const)];
    } else {
      const n = ls.length + k;
      if (n < 0 || ls.slice(n).some((x) => x !== 1)) return 'a reshape that drops logical dims that are not units';
      shape = ls.slice(0, n);
      ranges = rel.ranges.slice(0, n);
    }
    const q = w.opFor(this.reshapeKind, { shape }, [rel.logical]);
    const out = q === undefined ? undefined : (w.ops[q] as OpRef).outputs[0];
    if (out === undefined) return 'no reshape of the logical tensor';
    const [id, f] = w.canon(out);
    const scale = fmul(rel.scale, f);
    if (scale === undefined) return 'scale overflow';
    const bcast = rel.bcast?.filter((d) => d < ranges.length);
    return { logical: id, ranges, scale, ...(rel.part === undefined ? {} : { part: { key: `lin|${q}|0|0|${rel.part.key}`, comps: rel.part.comps } }), ...(bcast === undefined || bcast.length === 0 ? {} : { bcast }) };
  }

  /**
   * Broadcast dims of an input resolved against a partner input (right-aligned, as
   * broadcasting aligns dims) that holds a range of the same local size there: the input is
   * that range of the logical expand to the partner's size (every index holds the one value).
   */
  private resolveBcast(ins: readonly Relation[], local: readonly Shape[]): Relation[] {
    if (ins.length < 2 || ins.every((x) => x.bcast === undefined)) return [...ins];
    const w = this.world;
    return ins.map((x, i) => {
      if (x.bcast === undefined || x.part?.max === true) return x;
      const shape = [...w.shape(x.logical)];
      const ranges = [...x.ranges];
      const left: number[] = [];
      for (const d of x.bcast) {
        const n = (local[i] ?? [])[d];
        const fromRight = x.ranges.length - d;
        const partner = ins.find((y, j) => {
          const dj = y.ranges.length - fromRight;
          const rg = y.ranges[dj];
          return j !== i && dj >= 0 && rg !== undefined && y.bcast?.includes(dj) !== true && iconst(isub(rg[1], rg[0])) === n && (w.shape(y.logical)[dj] as number) > 1;
        });
        if (partner === undefined) {
          left.push(d);
          continue;
        }
        const dj = partner.ranges.length - fromRight;
        shape[d] = w.shape(partner.logical)[dj] as number;
        ranges[d] = partner.ranges[dj] as Range;
      }
      if (left.length === x.bcast.length) return x;
      const q = w.opFor(this.expandKind, { shape }, [x.logical]);
      const out = q === undefined ? undefined : (w.ops[q] as OpRef).outputs[0];
      if (out === undefined) return x;
      const [id, f] = w.canon(out);
      const scale = fmul(x.scale, f);
      if (scale === undefined) return x;
      return { logical: id, ranges, scale, ...(x.part === undefined ? {} : { part: { key: `lin|${q}|0|0|${x.part.key}`, comps: x.part.comps } }), ...(left.length === 0 ? {} : { bcast: left }) };
    });
  }

  /** All values of the logical ids lie in [0, V): a partition of [0, V) covers every id. */
  private idsBelow(rel: Relation, V: number): string | undefined {
    const dom = this.world.domain(rel.logical);
    if (dom === undefined) return `the values of ${this.world.name(rel.logical)} are not known`;
    if (dom.length > 0 && ((dom[0] as number) < 0 || (dom[dom.length - 1] as number) >= V)) return `ids of ${this.world.name(rel.logical)} outside [0, ${V})`;
    return undefined;
  }

  /** Derived ids: a whole-valued relation (no factor, no addend). */
  private idsRel(r: number, x: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Relation | string {
    const d0 = derive(r, x, depth + 1);
    const d = typeof d0 === 'string' ? d0 : this.materialize(d0);
    if (typeof d === 'string') return d;
    if (d.part !== undefined || d.bcast !== undefined || !feq(d.scale, ONE)) return 'ids that are not one logical tensor region';
    return d;
  }

  /**
   * Megatron's vocab-parallel idioms (docs/engine.md, "Vocab-parallel rules"), recognized from
   * the rank's own ops and checked piece by piece; undefined when the op is not one of them.
   *  - masked lookup: where(outside(ids), 0 x L, L) with L a lookup (OpDef.lookup) of
   *    local(ids) into a table slice [s, e) along its lookup dim is the addend over [s, e) of
   *    the lookup of ids into the whole table (ids lie in [0, V));
   *  - masked scatter: a scatter (OpDef.scatter) of size e - s of g masked to inside(ids)
   *    (g - where(outside(ids), g, 0 x g), plus any 0 x y) at local(ids) is rows [s, e) of
   *    the scatter of g at ids of size V.
   */
  private vocabRule(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived | undefined {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const kind = p.ops.kind[op] as number;
    const def = registry.get(kind);
    // Called for every derived op: leave at once unless it is a where or a scatter.
    if (kind !== this.whereKind && def.scatter === undefined) return undefined;
    const view = plan.view(r);
    const ins = [...p.ops.opInputs(op)];
    const sh = (x: number): Shape => view.shapes[x] ?? [];
    const outShape = sh(t);
    if (kind === this.whereKind && ins.length === 3) {
      const [c, a, b] = ins as [number, number, number];
      const m = this.vocabOf(r, c, 'outside');
      if (m === undefined || !this.zeroOf(r, a, b)) return undefined;
      const lb = this.unitBase(r, b);
      const lop = this.prodOp(r, lb);
      const lk = lop < 0 ? undefined : registry.get(p.ops.kind[lop] as number).lookup;
      if (lk === undefined) return undefined;
      if (this.coordAttrs(r, lop)) return 'per template: a lookup whose attributes depend on the coordinates';
      const lins = [...p.ops.opInputs(lop)];
      const idx = lins[lk.index] as number;
      const tab = lins[lk.table] as number;
      const loc = this.vocabOf(r, idx, 'local');
      if (loc === undefined || loc.ids !== m.ids || loc.s !== m.s || loc.e !== m.e) return undefined;
      if (!this.alignedMask(sh(c), sh(b), sh(m.ids)) || numel(sh(idx)) !== numel(sh(m.ids))) return 'a vocab mask that does not line up with the lookup';
      const X = this.idsRel(r, m.ids, depth, derive);
      if (typeof X === 'string') return X;
      const T0 = derive(r, tab, depth + 1);
      const T = typeof T0 === 'string' ? T0 : this.materialize(T0);
      if (typeof T === 'string') return T;
      if (T.part !== undefined || T.bcast !== undefined) return 'a lookup into an addend or a broadcast of a table';
      const td = lk.dim === 'first' ? 0 : T.ranges.length - 1;
      const V = this.world.shape(T.logical)[td] as number;
      const tr = T.ranges[td] as Range;
      if (tr[0] !== m.s || tr[1] !== m.e) return `a lookup into rows [${tr[0]}, ${tr[1]}) masked to ids in [${m.s}, ${m.e})`;
      const bad = this.idsBelow(X, V);
      if (bad !== undefined) return bad;
      const idxLog = this.unitLog(X, sh(m.ids), sh(idx));
      if (typeof idxLog === 'string') return idxLog;
      const whole: Relation = { ...T, ranges: T.ranges.map((x, i) => (i === td ? ([0, V] as Range) : x)) };
      const args: Relation[] = [];
      args[lk.index] = idxLog;
      args[lk.table] = whole;
      const L = this.sliced(p.ops.kind[lop] as number, args, (view.attrs[lop] ?? {}) as Attrs, 0, sh(lb), registry.get(p.ops.kind[lop] as number).name);
      if (typeof L === 'string') return L;
      if (L.part !== undefined) return 'a masked lookup of an addend';
      const out = this.unitLog(L, sh(lb), sh(b));
      if (typeof out === 'string') return out;
      return this.checked({ ...out, part: { key: `vocab|${V}`, comps: [{ kind: 'range', cover: [m.s, m.e], total: V }] } }, outShape);
    }
    const sc = def.scatter;
    if (sc !== undefined && ins.length === 2) {
      const G = ins[sc.grad] as number;
      const idx = ins[sc.index] as number;
      const loc = this.vocabOf(r, idx, 'local');
      if (loc === undefined) return undefined;
      // Through adds of zero (autograd's accumulation of a 0 x y gradient).
      let gm = this.unitBase(r, G);
      for (let i = 0; i < 8; i++) {
        const aop = this.prodOp(r, gm);
        if (aop < 0 || p.ops.kind[aop] !== this.addKind) break;
        const [u, v] = p.ops.opInputs(aop) as unknown as [number, number];
        if (sh(u).join(',') !== sh(gm).join(',') || sh(v).join(',') !== sh(gm).join(',')) break;
        const zu = this.prodOp(r, u);
        const zv = this.prodOp(r, v);
        const zero = (z: number, zp: number): boolean => zp >= 0 && this.zeroOf(r, z, p.ops.opInputs(zp)[0] as number);
        if (zero(v, zv)) gm = u;
        else if (zero(u, zu)) gm = v;
        else break;
      }
      const sop = this.prodOp(r, gm);
      if (sop < 0 || p.ops.kind[sop] !== this.subKind) return undefined;
      const [g, w] = p.ops.opInputs(sop) as unknown as [number, number];
      if (sh(w).join(',') !== sh(g).join(',') || sh(gm).join(',') !== sh(g).join(',')) return undefined;
      const wop = this.prodOp(r, w);
      if (wop < 0 || p.ops.kind[wop] !== this.whereKind) return undefined;
      const [c, g2, z] = p.ops.opInputs(wop) as unknown as [number, number, number];
      const m = this.vocabOf(r, c, 'outside');
      if (g2 !== g || !this.zeroOf(r, z, g) || m === undefined || m.ids !== loc.ids || m.s !== loc.s || m.e !== loc.e) return undefined;
      if (this.coordAttrs(r, op)) return 'per template: a scatter whose attributes depend on the coordinates';
      const at = (view.attrs[op] ?? {}) as Attrs;
      if (at[sc.size] !== iconst(isub(loc.e, loc.s))) return `a scatter of ${String(at[sc.size])} rows for ids in [${loc.s}, ${loc.e})`;
      if (!this.alignedMask(sh(c), sh(g), sh(loc.ids)) || numel(sh(idx)) !== numel(sh(loc.ids)) || numel(sh(G)) !== numel(sh(g))) return 'a vocab mask that does not line up with the scatter';
      const X = this.idsRel(r, loc.ids, depth, derive);
      if (typeof X === 'string') return X;
      const g0 = derive(r, g, depth + 1);
      const gr = typeof g0 === 'string' ? g0 : this.materialize(g0);
      if (typeof gr === 'string') return gr;
      const dom = this.world.domain(X.logical);
      if (dom === undefined || dom.length === 0) return `the values of ${this.world.name(X.logical)} are not known`;
      const eMax = this.maxOver(r, loc.e);
      if (eMax === undefined) return 'a vocab range whose end is not bounded';
      const V = Math.max(eMax, (dom[dom.length - 1] as number) + 1);
      const bad = this.idsBelow(X, V);
      if (bad !== undefined) return bad;
      const idxLog = this.unitLog(X, sh(loc.ids), sh(idx));
      if (typeof idxLog === 'string') return idxLog;
      const gLog = this.unitLog(gr, sh(g), sh(G));
      if (typeof gLog === 'string') return gLog;
      const td = sc.dim === 'first' ? 0 : outShape.length - 1;
      const full = outShape.map((x, i) => (i === td ? V : x));
      const args: Relation[] = [];
      args[sc.grad] = gLog;
      args[sc.index] = idxLog;
      const loc2: Shape[] = [];
      loc2[sc.grad] = sh(G);
      loc2[sc.index] = sh(idx);
      const S = this.sliced(kind, this.resolveBcast(args, loc2), { ...at, [sc.size]: V }, 0, full, def.name);
      if (typeof S === 'string') return S;
      const sr = S.ranges[td] as Range;
      if (sr[0] !== 0 || sr[1] !== V) return 'a scatter that is not whole along its rows';
      return this.checked({ ...S, ranges: S.ranges.map((x, i) => (i === td ? ([loc.s, loc.e] as Range) : x)) }, outShape);
    }
    return undefined;
  }

  /** The region and slots must be what the parallel tensor holds: its local shape. */
  private checkedRouted(v: Routed, shape: Shape): Routed | string {
    const name = this.world.name(v.of);
    if (shape.length !== v.region.length) return `derived a routed buffer of ${name} for a tensor of rank ${shape.length}`;
    let slots = 0;
    for (const [a, b] of v.blocks) {
      const n = iconst(isub(b, a));
      if (n === undefined || n <= 0) return `routed buffer of ${name}: a token block whose size depends on the coordinates`;
      slots += n * v.k;
    }
    for (let d = 0; d < shape.length; d++) {
      const [a, b] = v.region[d] as Range;
      const n = d === v.sdim ? slots : iconst(isub(b, a));
      if (n !== shape[d]) return `derived a routed buffer of ${name} (${slots} slots) for a tensor of shape [${shape.join(',')}]`;
    }
    return v;
  }

  /**
   * Routed buffers (mixture of experts, packed layout; docs/engine.md "Routed buffers"):
   *  - dispatch of a block of token rows (tokens, routing choices and weights, the same rows,
   *    every choice) is a routed buffer of the logical dispatch with that one block;
   *  - an op whose slot label is SIMD ('batch') in every routed input, met by no plain input,
   *    maps rows to rows: a routed buffer of the logical op (padding stays zero through an
   *    input it is linear in);
   *  - an op that sums over the slot label (routed inputs aligned, one zero-padded and linear)
   *    gives the tokens' addend of the logical op's output (padding rows add nothing);
   *  - gather and combine of a buffer holding exactly one block, with that block's routing
   *    choices (and weights), are that block's rows of the logical gather or combine.
   * Undefined: no routed input and no dispatch (the plain rules apply).
   */
  private routedOp(kind: number, def: OpDef, attrs: Attrs, k: number, vals: readonly Value[], outShape: Shape): Derived | undefined {
    const role = def.routing?.(attrs);
    const ri = vals.flatMap((v, i) => (isRouted(v) ? [i] : []));
    if (ri.length === 0 && role !== 'dispatch') return undefined;
    const w = this.world;
    const name = def.name;
    const plain = (v: Value): Relation | string => {
      const m = this.materialize(v);
      if (typeof m === 'string') return m;
      if (m.part !== undefined || m.bcast !== undefined) return `'${name}': an addend or a broadcast value beside a routed buffer`;
      return m;
    };
    // The logical op of this kind on these logical inputs with these attributes, read without factors.
    const logicalOp = (logicals: readonly number[]): number | string => {
      const cands = (w.index.get(`${kind}|${logicals.join(',')}`) ?? []).filter((q) => {
        const o = w.ops[q] as OpRef;
        return attrsKey(o.attrs) === attrsKey(attrs) && o.factors.every((f) => feq(f, ONE));
      });
      if (cands[0] !== undefined) this.use?.same(kind, attrs, (w.ops[cands[0]] as OpRef).attrs);
      return cands[0] ?? `no logical '${name}' reads ${logicals.map((x) => w.name(x)).join(', ')} with these attributes`;
    };
    const same = (a: Range, b: Range): boolean => a[0] === b[0] && a[1] === b[1];
    if (role === 'dispatch') {
      if (ri.length > 0) return `'${name}' of a routed buffer`;
      const ins: Relation[] = [];
      for (const v of vals) {
        const m = plain(v);
        if (typeof m === 'string') return m;
        ins.push(m);
      }
      const [x, ix, wt] = ins;
      if (x === undefined || ix === undefined || x.ranges.length !== 2 || ix.ranges.length !== 2) return `'${name}' of inputs that are not [tokens, features] and [tokens, k]`;
      const rows = x.ranges[0] as Range;
      const kk = w.shape(ix.logical)[1] as number;
      // The routing choices are integers: compared, never scaled.
      if (!feq(ix.scale, ONE) || !same(ix.ranges[0] as Range, rows) || !same(ix.ranges[1] as Range, [0, kk])) return `'${name}': the routing choices are not every choice of the tokens' rows`;
      if (wt !== undefined && (wt.ranges.length !== 2 || !wt.ranges.every((rg, d) => same(rg, ix.ranges[d] as Range)))) return `'${name}': the routing weights are not the routing choices' rows`;
      const q = logicalOp(ins.map((y) => y.logical));
      if (typeof q === 'string') return q;
      const [of, f] = w.canon((w.ops[q] as OpRef).outputs[0] as number);
      const ls = w.shape(of);
      const scale = fmul(fmul(x.scale, wt?.scale ?? ONE) ?? ONE, f);
      if (scale === undefined || fmul(x.scale, wt?.scale ?? ONE) === undefined) return 'scale overflow';
      const v: Routed = { routed: true, of, region: [[0, ls[0] as number], [0, ls[1] as number], x.ranges[1] as Range], edim: 0, sdim: 1, idx: ix.logical, experts: ls[0] as number, k: kk, blocks: [rows], factor: scale, padZero: true };
      return this.checkedRouted(v, outShape);
    }
    const rs = ri.map((i) => vals[i] as Routed);
    const r0 = rs[0] as Routed;
    if (rs.some((v) => slotKey(v) !== slotKey(r0))) return `'${name}' of routed buffers of different routings or token blocks`;
    if (role === 'gather' || role === 'combine') {
      if (ri.length !== 1 || ri[0] !== 0) return `'${name}' of a routed buffer as its routing`;
      const [ix, wt] = [vals[1], vals[2]].map((v) => (v === undefined ? undefined : plain(v)));
      if (typeof ix === 'string') return ix;
      if (typeof wt === 'string') return wt;
      if (ix === undefined) return `'${name}' without routing choices`;
      const block = r0.blocks[0] as Range;
      if (r0.blocks.length !== 1 || r0.edim !== 0 || r0.sdim !== 1 || r0.region.length !== 3) return `'${name}' of a buffer holding ${r0.blocks.length} token blocks`;
      if (!same(r0.region[0] as Range, [0, r0.experts])) return `'${name}' of a buffer holding some of the experts`;
      if (ix.logical !== r0.idx || !feq(ix.scale, ONE) || !same(ix.ranges[0] as Range, block) || !same(ix.ranges[1] as Range, [0, r0.k])) return `'${name}': the routing choices are not the buffer's tokens' choices`;
      if (wt !== undefined && (wt.ranges.length !== 2 || !wt.ranges.every((rg, d) => same(rg, ix.ranges[d] as Range)))) return `'${name}': the routing weights are not the routing choices' rows`;
      const q = logicalOp([r0.of, ix.logical, ...(wt === undefined ? [] : [wt.logical])]);
      if (typeof q === 'string') return q;
      const [of, f] = w.canon((w.ops[q] as OpRef).outputs[0] as number);
      const s1 = fmul(r0.factor, wt?.scale ?? ONE);
      const scale = s1 === undefined ? undefined : fmul(s1, f);
      if (scale === undefined) return 'scale overflow';
      const feat = r0.region[2] as Range;
      return this.checked({ logical: of, ranges: role === 'gather' ? [block, [0, r0.k], feat] : [block, feat], scale }, outShape);
    }
    if (role !== undefined) return `'${name}' of a routed buffer`;
    // Every input as a region of its logical tensor; a routed one with its whole slot dim.
    const pseudo: Relation[] = [];
    for (const v of vals) {
      if (isRouted(v)) {
        pseudo.push({ logical: v.of, ranges: v.region, scale: v.factor });
        continue;
      }
      const m = plain(v);
      if (typeof m === 'string') return m;
      pseudo.push(m);
    }
    if (def.sliceRegions !== undefined) return `'${name}' (a layout op that spells sizes) of a routed buffer`;
    const q = logicalOp(pseudo.map((x) => x.logical));
    if (typeof q === 'string') return q;
    const sig = this.sig(q);
    const o = w.ops[q] as OpRef;
    const out = o.outputs[k];
    if (sig === null || out === undefined) return `'${name}' has no dims for its logical op`;
    const lab = (i: number, d: number): DimLabel | undefined => sig.inputs[i]?.[d];
    const sl = lab(ri[0] as number, r0.sdim);
    const el = lab(ri[0] as number, r0.edim);
    if (sl === undefined || el === undefined) return 'labels do not match the input rank';
    for (const i of ri) {
      const v = vals[i] as Routed;
      if (lab(i, v.sdim)?.label !== sl.label || lab(i, v.edim)?.label !== el.label) return `'${name}': routed inputs whose slot or expert dims carry different labels`;
    }
    // A plain input along the slot label would be read in the logical slot order.
    if (vals.some((v, i) => !isRouted(v) && (sig.inputs[i] ?? []).some((l) => l.label === sl.label))) return `'${name}': a plain input meets the routed slots`;
    const labels = sig.outputs[k] ?? [];
    const so = labels.findIndex((l) => l.label === sl.label);
    const eo = labels.findIndex((l) => l.label === el.label);
    if (eo < 0 || el.role !== 'batch') return `'${name}': the expert dim is not kept row by row`;
    const lin = def.linearIn?.(vals.length) ?? [];
    const d = this.bySig(sig, lin, pseudo, k, out, outShape, q);
    if (typeof d === 'string') return d;
    const [of, f] = w.canon(d.logical);
    const scale = fmul(d.scale, f);
    if (scale === undefined) return 'scale overflow';
    if (d.part !== undefined || d.bcast !== undefined) return `'${name}' of a routed buffer gives an addend or a broadcast`;
    const padZero = ri.some((i) => (vals[i] as Routed).padZero && lin.includes(i));
    if (so >= 0) {
      // Row to row: each output slot reads only the same slot of every input (SIMD).
      if (sl.role !== 'batch') return `'${name}': the slot dim is '${sl.role}', not SIMD`;
      return this.checkedRouted({ routed: true, of, region: d.ranges, edim: eo, sdim: so, idx: r0.idx, experts: r0.experts, k: r0.k, blocks: r0.blocks, factor: scale, padZero }, outShape);
    }
    // Summed over the slots: the held tokens' addend (padding adds zero through a linear input).
    if (sl.role !== 'contracted' || !sig.sums.has(sl.label)) return `'${name}' reads the routed slots as a whole`;
    if (!padZero) return `'${name}' sums over routed slots whose padding rows may not be zero`;
    const cover = unionCover('range', [], r0.blocks.flatMap(([a, b]) => [a, b]));
    if (cover === undefined) return `'${name}' sums over overlapping token blocks`;
    const N = w.shape(r0.idx)[0] as number;
    const whole = cover.length === 2 && cover[0] === 0 && cover[1] === N;
    const rel: Relation = { logical: of, ranges: d.ranges, scale, ...(whole ? {} : { part: { key: `route|${q}|${k}|${r0.idx}`, comps: [{ kind: 'range' as const, cover, total: N }] } }) };
    return this.checked(rel, outShape);
  }

  /**
   * all_to_all of routed buffers: experts split and slots concatenated (every member sends
   * each its experts' slots of its own blocks), or slots split and experts concatenated
   * (members hold the same blocks; member j gets block j back, which needs equal blocks in
   * arithmetic order so that the j-th chunk of the slots is block j, affine in j).
   */
  private routedA2a(values: readonly Value[], attrs: Attrs, me: Int, g: number, outShape: Shape): Derived {
    const rs = values as readonly Routed[];
    const f0 = rs[0] as Routed;
    const sd = this.normDim(attrs['split_dim'], f0.region.length);
    const cd = this.normDim(attrs['concat_dim'], f0.region.length);
    const rk = (v: Routed, skip: number): string => `${v.of}|${v.edim},${v.sdim}|${v.idx}|${v.experts}|${v.k}|${fkey(v.factor)}|${v.padZero}|${v.region.map(([a, b], d) => (d === skip ? '' : `${ikey(a)}:${ikey(b)}`)).join(',')}`;
    if (sd === f0.edim && cd === f0.sdim) {
      if (rs.some((v) => rk(v, -1) !== rk(f0, -1))) return 'all_to_all of routed buffers of different values or experts';
      const chunk = chunkOf(f0.region[sd] as Range, g, me);
      if (chunk === undefined) return 'all_to_all of experts not divisible by the group';
      return this.checkedRouted({ ...f0, region: f0.region.map((x, d) => (d === sd ? chunk : x)), blocks: rs.flatMap((v) => v.blocks) }, outShape);
    }
    if (sd === f0.sdim && cd === f0.edim) {
      if (rs.some((v) => rk(v, cd) !== rk(f0, cd) || slotKey(v) !== slotKey(f0))) return 'all_to_all of routed buffers of different values or token blocks';
      let end = (f0.region[cd] as Range)[0];
      for (const v of rs) {
        const [a, b] = v.region[cd] as Range;
        if (a !== end) return 'all_to_all of experts that are not contiguous in group order';
        end = b;
      }
      const bs = f0.blocks;
      if (bs.length !== g) return `all_to_all splits the slots of ${bs.length} token blocks over ${g} members`;
      const b0 = bs[0] as Range;
      const width = iconst(isub(b0[1], b0[0]));
      const step = g > 1 ? iconst(isub((bs[1] as Range)[0], b0[0])) : 0;
      if (width === undefined || step === undefined || bs.some(([a, b], j) => a !== iadd(b0[0], j * step) || b !== iadd(a, width))) return 'all_to_all of token blocks that are not equal and evenly spaced';
      const at = imul(me, step);
      if (at === undefined) return 'all_to_all: a block place that is not affine';
      const lo = iadd(b0[0], at);
      return this.checkedRouted({ ...f0, region: f0.region.map((x, d) => (d === cd ? ([(f0.region[cd] as Range)[0], end] as Range) : x)), blocks: [[lo, iadd(lo, width)]] }, outShape);
    }
    return 'all_to_all of a routed buffer along other dims than its experts and slots';
  }

  private deriveOpFrom(r: number, op: number, t: number, vals: readonly Value[]): Derived {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const kind = p.ops.kind[op] as number;
    const outs = [...p.ops.opOutputs(op)];
    const k = outs.indexOf(t);
    const attrs = view.attrs[op] as Attrs;
    const outShape = view.shapes[t] ?? [];
    const def = registry.get(kind);
    const routed = this.routedOp(kind, def, attrs, k, vals, outShape);
    if (routed !== undefined) return routed;
    const vals0 = vals as readonly (Relation | Sum)[];
    // Rules that need no logical counterpart.
    if (kind === this.scaleKind && vals.length === 1) {
      const f = parseFrac(attrScalar(attrs, 'factor'));
      const x = vals0[0] as Relation | Sum;
      if (f !== undefined && f.num !== 0 && !termsOf(x).some(isMaxPart)) {
        const ts = termsOf(x).map((tm) => ({ ...tm, scale: fmul(tm.scale, f) }));
        if (ts.some((tm) => tm.scale === undefined)) return 'scale overflow';
        const rs = ts as Relation[];
        return rs.length === 1 ? this.checked(rs[0] as Relation, outShape) : { terms: rs };
      }
    }
    if (kind === this.identityKind && vals.length === 1) {
      const x = vals0[0] as Relation | Sum;
      return isSum(x) ? x : this.checked(x, outShape);
    }
    if (kind === this.addKind && vals.length === 2) {
      const added = this.add(r, op, vals0 as [Relation | Sum, Relation | Sum], attrs, outShape);
      if (added !== undefined) return added;
    }
    const ins: Relation[] = [];
    for (const v of vals) {
      const m = this.materialize(v);
      if (typeof m === 'string') return m;
      ins.push(m);
    }
    if (kind === this.expandKind && ins.length === 1) {
      // Unit dims repeated: the same logical region, broadcast there (resolved by a consumer).
      const x = ins[0] as Relation;
      const xs = view.shapes[p.ops.opInputs(op)[0] as number] ?? [];
      const ls = this.world.shape(x.logical);
      if (xs.length === outShape.length && !isMaxPart(x)) {
        const bc = new Set(x.bcast ?? []);
        let ok = true;
        for (let d = 0; d < xs.length; d++) {
          if (xs[d] === outShape[d]) continue;
          const rg = x.ranges[d] as Range;
          if (xs[d] !== 1 || ls[d] !== 1 || rg[0] !== 0 || rg[1] !== 1) ok = false;
          bc.add(d);
        }
        if (ok) return this.checked({ ...x, bcast: [...bc].sort((a, b) => a - b) }, outShape);
      }
    }
    const local = [...p.ops.opInputs(op)].map((x) => view.shapes[x] ?? []);
    const d = this.sliced(kind, this.resolveBcast(ins, local), attrs, k, outShape, def.name);
    // A narrowing op (OpDef.narrows) or a zero pad (OpDef.zeroPads) with no logical counterpart:
    // the narrowed region of the same logical tensor, or one addend of its whole, rather than a
    // virtual op consumers cannot match.
    if ((def.narrows !== undefined || def.zeroPads !== undefined) && k === 0 && ins.length === 1 && (typeof d === 'string' || d.logical >= this.world.nLogical)) {
      const x = ins[0] as Relation;
      const n = def.narrows !== undefined ? this.narrowed(r, op, x, local[0] ?? [], attrs, def.narrows, outShape) : this.padded(r, op, x, local[0] ?? [], attrs, def.zeroPads as NonNullable<OpDef['zeroPads']>, outShape);
      if (n !== undefined) return n;
    }
    if (typeof d === 'string' && kind === this.reshapeKind && ins.length === 1 && trailingUnits(local[0] ?? [], outShape) !== undefined) {
      // Trailing unit dims added or dropped: the same reshape of the logical tensor, on any region.
      const u = this.unitLog(ins[0] as Relation, local[0] ?? [], outShape);
      if (typeof u !== 'string') return this.checked(u, outShape);
    }
    return d;
  }

  /**
   * add: of addends of one decomposition (gradient accumulation), of addends of two values (to
   * the addends of their sum), of whole values (the logical add, when the plan has one); any
   * other add of same-shaped values is a Sum. Undefined: left to the general rule.
   */
  private add(r: number, op: number, [a, b]: [Relation | Sum, Relation | Sum], attrs: Attrs, outShape: Shape): Derived | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const view = this.plan.view(r);
    // Element-wise of same-shaped local tensors only (no broadcasting).
    const same = [...p.ops.opInputs(op)].every((x) => (view.shapes[x] ?? []).join(',') === outShape.join(','));
    if (!same || Object.keys(attrs).length > 0) return undefined;
    if (!isSum(a) && !isSum(b)) {
      if (a.part === undefined && b.part === undefined) {
        // Whole values: the plan's own add, if it has one for these tensors.
        const d = this.sliced(this.addKind, [a, b], attrs, 0, outShape, 'add', false);
        if (typeof d !== 'string') return d;
      } else if (a.part !== undefined && b.part !== undefined && a.part.key !== b.part.key && feq(a.scale, b.scale) && a.ranges.every((x, i) => x[0] === (b.ranges[i] as Range)[0] && x[1] === (b.ranges[i] as Range)[1]) && this.world.shape(a.logical).join(',') === this.world.shape(b.logical).join(',')) {
        // Addends of two values: the sums of their addends add up to the add of the two values.
        const q = this.world.opFor(this.addKind, {}, [a.logical, b.logical]);
        const lout = q === undefined ? undefined : (this.world.ops[q] as OpRef).outputs[0];
        if (lout !== undefined) {
          const [id, f] = this.world.canon(lout);
          const scale = fmul(a.scale, f);
          // (Never of a product: its rectangles and these separate components would mix.)
          const part: Part | undefined = isProduct(a.part) || isProduct(b.part) ? undefined : { key: `add|${q}|${a.part.key}|${b.part.key}`, comps: [...a.part.comps, ...b.part.comps] };
          if (scale !== undefined && part !== undefined) return this.checked({ logical: id, ranges: a.ranges, scale, part }, outShape);
        }
      }
    }
    // Anything else: a sum of terms (replicas add factors, addends of one value unite).
    return addTerms([...termsOf(a), ...termsOf(b)]);
  }

  /**
   * Same op on a slice (or a plain-sum addend) of a logical op with these logical inputs, or
   * of a virtual op with the parallel op's own attributes.
   */
  private sliced(kind: number, ins0: readonly Relation[], attrs: Attrs, k: number, outShape: Shape, name: string, virtual = true): Relation | string {
    const w = this.world;
    let ins = ins0;
    const def = registry.get(kind);
    const cands = [...(w.index.get(`${kind}|${ins.map((x) => x.logical).join(',')}`) ?? [])];
    let why = '';
    const tryOp = (q: number): Relation | string | undefined => {
      const sig = this.sig(q);
      const o = w.ops[q] as OpRef;
      const out = o.outputs[k];
      if (sig === null || out === undefined) return undefined;
      // The op reads factor x its canonical inputs: restate the parallel inputs against the
      // op's actual inputs (par = s x id = (s / factor) x input).
      const lin0 = def.linearIn?.(ins.length) ?? [];
      const adj: Relation[] = [];
      for (let i = 0; i < ins.length; i++) {
        const x = ins[i] as Relation;
        const f = o.factors[i] ?? ONE;
        if (feq(f, ONE)) {
          adj.push(x);
          continue;
        }
        const sc = fdiv(x.scale, f);
        if (sc === undefined || (!feq(sc, ONE) && !lin0.includes(i))) return `input ${i} is ${fkey(f)} x its canonical value`;
        adj.push({ ...x, scale: sc });
      }
      ins = adj;
      let d: Relation | string;
      if (def.sliceRegions !== undefined) {
        // Layout ops are linear in their one input: scale factors and addends pass through.
        const x = ins[0];
        if (ins.length !== 1 || x === undefined || !(def.linearIn?.(1) ?? []).includes(0)) return `'${name}' on a slice needs one input it is linear in`;
        if (isMaxPart(x)) return `'${name}' of a max-addend`;
        if (x.bcast !== undefined) return `'${name}' of a broadcast value`;
        const slice = def.sliceRegions.bind(def);
        const inShapes = o.inputs.map((y) => w.shape(y));
        const outShapes = o.outputs.map((y) => w.shape(y));
        // Keyed by everything the map reads: the op kind, shapes and both attribute sets.
        const memoKey = `${kind}|${JSON.stringify(inShapes)}|${JSON.stringify(outShapes)}|${attrsKey(o.attrs)}|${attrsKey(attrs)}`;
        const regs = this.lifted(ins.map((y) => y.ranges), (rs) => slice(inShapes, outShapes, rs, o.attrs, attrs), memoKey);
        if (typeof regs === 'string') return regs;
        const reg = regs[k];
        if (reg === undefined) return `'${name}' has no output ${k}`;
        d = { logical: out, ranges: reg, scale: x.scale, ...(x.part === undefined ? {} : { part: { key: `lin|${q}|0|${k}|${x.part.key}`, comps: x.part.comps } }) };
      } else {
        if (attrsKey(attrs) !== attrsKey(o.attrs)) return `'${name}' attributes differ from the logical op's`;
        this.use?.same(kind, attrs, o.attrs);
        d = this.bySig(sig, def.linearIn?.(ins.length) ?? [], ins, k, out, outShape, q);
      }
      if (typeof d === 'string') return d;
      // Restated on the canonical tensor (a mean's output is 1/N x the sum's).
      const [id, f] = w.canon(d.logical);
      const scale = fmul(d.scale, f);
      if (scale === undefined) return 'scale overflow';
      return this.checked({ ...d, logical: id, scale }, outShape);
    };
    for (const q of cands) {
      ins = ins0;
      const d = tryOp(q);
      if (d === undefined) continue;
      if (typeof d !== 'string') return d;
      why = d;
    }
    // No logical op fits: the same op on the whole logical inputs defines a virtual value.
    ins = ins0;
    // Layout ops only on whole inputs: their attributes spell the local sizes.
    const whole = ins.every((x) => x.ranges.every(([a, b], d) => a === 0 && b === w.shape(x.logical)[d]));
    if (virtual && (def.sliceRegions === undefined || whole) && def.collective === undefined) {
      const q = w.opFor(kind, attrs, ins.map((x) => x.logical));
      if (q !== undefined && !cands.includes(q)) {
        const d = tryOp(q);
        if (d !== undefined && typeof d !== 'string') return d;
        if (typeof d === 'string') why = d;
      }
    }
    return why === '' ? `no logical '${name}' reads ${ins.map((x) => w.name(x.logical)).join(', ')}` : why;
  }

  /**
   * The op on slices of its inputs, by its labels: `batch` labels sliced alike in every input
   * give that slice of the output; a `sums` label sliced gives one addend of the outputs
   * without it; grouped labels slice in blocks; every other label must be whole. Scale
   * factors and addends pass through inputs the op is linear in (OpDef.linearIn).
   */
  private bySig(sig: Sig, lin: readonly number[], ins: readonly Relation[], k: number, out: number, outShape: Shape, q: number): Relation | string {
    const w = this.world;
    let scale = ONE;
    let inPart: { i: number; part: Part } | undefined;
    for (let i = 0; i < ins.length; i++) {
      const x = ins[i] as Relation;
      const linear = lin.includes(i);
      if (!feq(x.scale, ONE)) {
        if (!linear) return `'${w.name(out)}' from a scaled value of an input it is not linear in`;
        const s = fmul(scale, x.scale);
        if (s === undefined) return 'scale overflow';
        scale = s;
      }
      if (x.part !== undefined) {
        if (x.part.max === true) return `'${w.name(out)}' from a max-addend`;
        if (!linear || inPart !== undefined) return `'${w.name(out)}' from an addend of an input it is not linear in (or of two inputs)`;
        inPart = { i, part: x.part };
      }
    }
    // Ranges per label, from the inputs; they must agree.
    const at = new Map<string, Range>();
    const role = new Map<string, string>();
    for (let i = 0; i < ins.length; i++) {
      const labels = sig.inputs[i];
      const x = ins[i] as Relation;
      const shape = w.shape(x.logical);
      if (labels === undefined || labels.length !== x.ranges.length) return 'labels do not match the input rank';
      for (let d = 0; d < labels.length; d++) {
        const l = labels[d] as DimLabel;
        const rg = x.ranges[d] as Range;
        role.set(l.label, l.role);
        const prev = at.get(l.label);
        if (prev !== undefined && (prev[0] !== rg[0] || prev[1] !== rg[1])) return `inputs sliced differently along '${l.label}'`;
        at.set(l.label, rg);
        const full = rg[0] === 0 && rg[1] === shape[d];
        const paired = sig.grouped.some((g) => g.label === l.label || g.of === l.label);
        if (!full && !paired && l.role !== 'batch' && !(l.role === 'contracted' && (sig.sums.has(l.label) || sig.maxes.has(l.label)))) return `an input is sliced along '${l.label}' (${l.role})`;
      }
    }
    for (const g of sig.grouped) {
      const a = at.get(g.label);
      const b = at.get(g.of);
      if (a === undefined || b === undefined) return `grouped label '${g.label}' without '${g.of}'`;
      if (a[0] !== iscale(b[0], g.ratio) || a[1] !== iscale(b[1], g.ratio)) return `'${g.label}' sliced [${a[0]}, ${a[1]}) but '${g.of}' [${b[0]}, ${b[1]}) (groups of ${g.ratio})`;
    }
    // Broadcast dims: a label every input holds only as a broadcast stays one on the output.
    const bcastOf = new Map<string, boolean>();
    for (let i = 0; i < ins.length; i++) {
      const x = ins[i] as Relation;
      (sig.inputs[i] ?? []).forEach((l, d) => {
        const b = x.bcast?.includes(d) === true;
        const prev = bcastOf.get(l.label);
        bcastOf.set(l.label, prev === undefined ? b : prev && b);
        if (prev !== undefined && prev !== b && (b || prev)) bcastOf.set(l.label, false);
      });
      // Only SIMD dims may hold copies: a sum or a norm over copies is not the op on one index.
      if (x.bcast !== undefined && x.bcast.some((d) => { const l = (sig.inputs[i] ?? [])[d]; return l === undefined || l.role !== 'batch' || bcastOf.get(l.label) !== true; })) return `'${w.name(out)}' from a broadcast input with no partner`;
    }
    const lshape = w.shape(out);
    const labels = sig.outputs[k];
    if (labels === undefined || labels.length !== lshape.length) return 'labels do not match the output rank';
    const ranges: Range[] = labels.map((l, d) => at.get(l.label) ?? [0, lshape[d] as number]);
    // Plain sums: a summed label sliced in the inputs and absent from this output.
    const own = new Set(labels.map((l) => l.label));
    let part: Part | undefined;
    const summed = new Set<string>();
    const cut: { l: string; comp: Comp; mx: boolean }[] = [];
    for (const [l, rg] of at) {
      const mx = sig.maxes.has(l);
      if (own.has(l) || !(sig.sums.has(l) || mx) || role.get(l) !== 'contracted') continue;
      const total = this.labelSize(sig, ins, l);
      if (rg[0] === 0 && rg[1] === total) continue;
      cut.push({ l, comp: { kind: 'range', cover: [rg[0], rg[1]], total }, mx });
      summed.add(l);
    }
    const c0 = cut[0];
    if (c0 !== undefined && cut.length === 1 && inPart === undefined) {
      part = { key: `${c0.mx ? 'max' : 'sum'}|${q}|${c0.l}|${k}`, comps: [c0.comp], ...(c0.mx ? { max: true as const } : {}) };
    } else if (cut.length > 0) {
      // Two cuts (two summed labels sliced, as SP's sequence chunk of a micro-batch's rows; or one
      // of an addend, through a linear input): the cell of a product of two decompositions
      // (PRODUCT). Never of max-addends, of a product, or of a sum of decompositions.
      const ip = inPart?.part;
      if (cut.length + (ip === undefined ? 0 : 1) !== 2 || cut.some((c) => c.mx) || (ip !== undefined && (ip.max === true || ip.comps.length !== 1 || isProduct(ip)))) return 'sliced along two summed labels, or along one of an addend';
      part = { key: `${PRODUCT}sum|${q}|${cut.map((c) => c.l).join(',')}|${k}${ip === undefined ? '' : `|${inPart?.i}|${ip.key}`}`, comps: [...(ip?.comps ?? []), ...cut.map((c) => c.comp)] };
      inPart = undefined;
    }
    // A label sliced in the inputs that this output lacks and does not sum over: the output reads
    // the whole dim, so a slice is not the logical op on a slice.
    for (const [l, rg] of at) {
      if (own.has(l) || summed.has(l)) continue;
      // A paired label rides on its partner (kv heads with the query heads of their groups).
      if (sig.grouped.some((g) => (g.of === l && own.has(g.label)) || (g.label === l && own.has(g.of)))) continue;
      const total = this.labelSize(sig, ins, l);
      if (!(rg[0] === 0 && rg[1] === total)) return `sliced along '${l}', which output ${k} reads whole`;
    }
    // An addend through a linear input: the addends' images add up to the image of their sum.
    if (inPart !== undefined) part = { key: `lin|${q}|${inPart.i}|${k}|${inPart.part.key}`, comps: inPart.part.comps };
    const bcast = labels.flatMap((l, d) => (bcastOf.get(l.label) === true ? [d] : []));
    return { logical: out, ranges, scale, ...(part === undefined ? {} : { part }), ...(bcast.length === 0 ? {} : { bcast }) };
  }

  private labelSize(sig: { inputs: readonly (readonly DimLabel[])[] }, ins: readonly Relation[], label: string): number {
    for (let i = 0; i < ins.length; i++) {
      const d = (sig.inputs[i] ?? []).findIndex((l) => l.label === label);
      if (d >= 0) return this.world.shape((ins[i] as Relation).logical)[d] as number;
    }
    return -1;
  }
}

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

/** k > 0: `to` is `from` and k trailing unit dims; k < 0: `from` is `to` and -k of them; else undefined. */
function trailingUnits(from: Shape, to: Shape): number | undefined {
  const [short, long, sign] = from.length <= to.length ? [from, to, 1] : [to, from, -1];
  for (let i = 0; i < long.length; i++) if (i < short.length ? long[i] !== short[i] : long[i] !== 1) return undefined;
  return sign * (long.length - short.length);
}

/** A stage decomposed per template, as proveTemplate reads it (stages/decompose/template.ts TemplateStage). */
export interface TemplateStageRef {
  readonly logical: number;
  readonly parts: readonly { readonly program: number; readonly tensor: number; readonly ranks: number }[];
}

/** A program per template: its base rank (lowest coordinates), their values, and the box. */
interface TemplateFrame {
  readonly r0: number;
  readonly x0: readonly number[];
  readonly sets: readonly Int32Array[];
  /** Per axis: the program's ranks take every coordinate of it. */
  readonly full: readonly boolean[];
}

function templateFrame(plan: LoadedPlan, p: Program): TemplateFrame | string {
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
function everyPoint(axes: readonly number[], sets: readonly Int32Array[], x0: readonly number[], visit: (x: readonly number[]) => string | undefined): string | undefined {
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
function sameSetsOutside(a: TemplateFrame, b: TemplateFrame, skip: readonly number[]): boolean {
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
function substValue(v: Value, axes: readonly number[], at: readonly number[], x0: readonly number[]): Value {
  const sub = (a: Int): Int => isubst(a, axes, at, x0);
  const rel = (r: Relation): Relation => ({
    ...r,
    ranges: r.ranges.map(([a, b]) => [sub(a), sub(b)] as const),
    ...(r.part === undefined ? {} : { part: { ...r.part, comps: r.part.comps.map((c) => ({ ...c, cover: c.cover.map(sub) })) } }),
  });
  if (isRouted(v)) return { ...v, region: v.region.map(([a, b]) => [sub(a), sub(b)] as const), blocks: v.blocks.map(([a, b]) => [sub(a), sub(b)] as const) };
  return isSum(v) ? { terms: v.terms.map(rel) } : rel(v);
}

function evalNF(plan: LoadedPlan, r: number, t: number): LineageNF {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  const spec = p.lineage[t];
  if (spec === undefined) throw new Error('no lineage');
  return evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
}

const DONE = new WeakMap<LoadedPlan, Map<string, StageResult | { why: string }>>();

/**
 * Tries every stage at tensor level; returns the proved results by stage index, and why the
 * others were left to the element engines (first reason per stage).
 */
export function proveTensorLevel(plan: LoadedPlan, stages: readonly Stage[], stopAtOpen = false): { proved: Map<number, StageResult>; open: Map<number, string> } {
  let prover: TensorLevelProver | undefined;
  // Per plan and stage (decompose numbers a plan's stages the same way every time): a second
  // call, after the shape-reduction pre-pass, derives nothing twice.
  let seen = DONE.get(plan);
  if (seen === undefined) DONE.set(plan, (seen = new Map()));
  const proved = new Map<number, StageResult>();
  const open = new Map<number, string>();
  for (const s of stages) {
    const key = `${s.index}|${s.logical}|${s.obligations.length}`;
    let r = seen.get(key);
    if (r === undefined) {
      try {
        prover ??= new TensorLevelProver(plan);
        r = prover.prove(s);
      } catch (e) {
        if (e instanceof TimeLimitReached) throw e;
        r = { why: `tensor-level error: ${e instanceof Error ? e.message : String(e)}` };
      }
      seen.set(key, r);
    }
    if ('why' in r) {
      open.set(s.index, r.why);
      // A caller that needs every stage proved (round 0 of verify --infer) stops here.
      if (stopAtOpen) break;
    } else proved.set(s.index, { ...r, decidedBy: 'tensor' });
  }
  return { proved, open };
}
