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
import { registry } from '../ops/registry.js';
import { attrScalar, type AttrValue, type Attrs, type DimLabel, type Shape } from '../ops/types.js';
import type { LoadedPlan } from '../plans/loader.js';
import type { Program } from '../plans/model.js';
import { evalLineage, groupKey, type LineageNF } from '../lineage/model.js';
import { logicalOrder } from '../sdfg/execute.js';
import { producers, result, type Producer, type Stage, type StageResult } from './prove.js';

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
interface Comp {
  readonly kind: 'idx' | 'range';
  readonly cover: readonly number[];
  readonly total: number;
}
interface Part {
  readonly key: string;
  readonly comps: readonly Comp[];
}

export interface Relation {
  readonly logical: number;
  /** [start, end) per dim of the logical tensor. */
  readonly ranges: readonly (readonly [number, number])[];
  /** parallel = scale x logical region (or, with `part`, one addend of that). */
  readonly scale: Frac;
  readonly part?: Part;
}

type Derived = Relation | string;

function regionKey(r: Relation): string {
  return `${r.logical}@${r.ranges.map(([a, b]) => `${a}:${b}`).join(',')}`;
}
function relKey(r: Relation): string {
  return `${regionKey(r)}*${r.scale.num}/${r.scale.den}${r.part === undefined ? '' : `+${r.part.key}`}`;
}
function sameRel(a: Relation, b: Relation): boolean {
  return relKey(a) === relKey(b) && coverKey(a.part) === coverKey(b.part);
}
function coverKey(p: Part | undefined): string {
  return p === undefined ? '' : p.comps.map((c) => c.cover.join(',')).join(';');
}

/** The relation a lineage claim states, or why it has none here (striped regions, max/min addends). */
export function claimRelation(nf: LineageNF): Derived {
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

function canon(v: AttrValue | undefined): string {
  if (v === undefined) return 'u';
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  return `{${Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canon(v[k])}`)
    .join(',')}}`;
}
const attrsKey = (a: Attrs | undefined): string => canon((a ?? {}) as AttrValue);

/** Unions two covers of one decomposition; undefined when they overlap. */
function unionCover(kind: Comp['kind'], a: readonly number[], b: readonly number[]): number[] | undefined {
  if (kind === 'idx') {
    const s = new Set(a);
    for (const x of b) {
      if (s.has(x)) return undefined;
      s.add(x);
    }
    return [...s].sort((x, y) => x - y);
  }
  const pairs: [number, number][] = [];
  for (let i = 0; i < a.length; i += 2) pairs.push([a[i] as number, a[i + 1] as number]);
  for (let i = 0; i < b.length; i += 2) pairs.push([b[i] as number, b[i + 1] as number]);
  pairs.sort((x, y) => x[0] - y[0]);
  const out: number[] = [];
  for (const [s, e] of pairs) {
    const last = out.length - 1;
    if (last > 0 && s < (out[last] as number)) return undefined;
    if (last > 0 && s === out[last]) out[last] = e;
    else out.push(s, e);
  }
  return out;
}
function compAll(p: Comp): boolean {
  return p.kind === 'idx' ? p.cover.length === p.total && p.cover.every((x, i) => x === i) : p.cover.length === 2 && p.cover[0] === 0 && p.cover[1] === p.total;
}
function coversAll(p: Part): boolean {
  return p.comps.every(compAll);
}
/** Two addends of one decomposition together; undefined when they overlap in some component. */
function unionPart(a: Part, b: Part): Part | undefined {
  if (a.key !== b.key || a.comps.length !== b.comps.length) return undefined;
  const comps: Comp[] = [];
  for (let i = 0; i < a.comps.length; i++) {
    const x = a.comps[i] as Comp;
    const y = b.comps[i] as Comp;
    if (x.kind !== y.kind || x.total !== y.total) return undefined;
    const u = unionCover(x.kind, x.cover, y.cover);
    if (u === undefined) return undefined;
    comps.push({ ...x, cover: u });
  }
  return { key: a.key, comps };
}

/** Logical ops by kind and input tensors, for finding the logical op a parallel op slices. */
function logicalIndex(plan: LoadedPlan, canon: Int32Array): Map<string, number[]> {
  const lg = plan.logical;
  const m = new Map<string, number[]>();
  for (let op = 0; op < lg.ops.size; op++) {
    const k = `${lg.ops.kind[op] as number}|${[...lg.ops.opInputs(op)].map((x) => canon[x] as number).join(',')}`;
    const l = m.get(k);
    if (l === undefined) m.set(k, [op]);
    else l.push(op);
  }
  return m;
}

const MAX_DEPTH = 4000;

interface Sig {
  readonly inputs: readonly (readonly DimLabel[])[];
  readonly outputs: readonly (readonly DimLabel[])[];
  readonly sums: ReadonlySet<string>;
  readonly grouped: readonly { readonly label: string; readonly of: string; readonly ratio: number }[];
}

/**
 * Logical tensors computed by the same op kind, attributes and (canonical) inputs are one
 * value: each maps to the first such tensor, so a parallel op matches whichever of the copies
 * its claims name.
 */
function logicalCanon(plan: LoadedPlan): Int32Array {
  const lg = plan.logical;
  const canon = Int32Array.from({ length: lg.tensors.size }, (_, i) => i);
  const seen = new Map<string, number>();
  for (const op of logicalOrderOf(plan)) {
    const k = `${lg.ops.kind[op] as number}|${[...lg.ops.opInputs(op)].map((x) => canon[x] as number).join(',')}|${attrsKey(lg.attrs[op])}`;
    const prev = seen.get(k);
    if (prev === undefined) {
      seen.set(k, op);
      continue;
    }
    const a = lg.ops.opOutputs(prev);
    lg.ops.opOutputs(op).forEach((t, i) => (canon[t] = canon[a[i] as number] as number));
  }
  return canon;
}

/**
 * Derives relations and checks obligations; one per plan (its indexes are shared by stages).
 */
export class TensorLevelProver {
  private readonly prod: Map<string, Producer>;
  private readonly index: Map<string, number[]>;
  private readonly dimsCache = new Map<number, Sig | null>();
  private readonly scaleKind: number;
  private readonly addKind: number;
  private readonly identityKind: number;
  private readonly canon: Int32Array;
  constructor(readonly plan: LoadedPlan) {
    this.prod = producers(plan);
    this.canon = logicalCanon(plan);
    this.index = logicalIndex(plan, this.canon);
    this.scaleKind = registry.id('scale');
    this.addKind = registry.id('add');
    this.identityKind = registry.id('identity');
  }

  prove(stage: Stage): StageResult | { why: string } {
    const t0 = performance.now();
    const memo = new Map<string, Derived>();
    const inputs = new Map<string, LineageNF>();
    const derive = (r: number, t: number, depth: number): Derived => {
      const key = `${r}:${t}`;
      const hit = memo.get(key);
      if (hit !== undefined) return hit;
      if (depth > MAX_DEPTH) return 'the stage is deeper than the tensor-level walk goes';
      const d = this.deriveOne(stage, r, t, depth, derive, inputs);
      memo.set(key, d);
      return d;
    };
    const lshape = this.plan.logical.shapes[stage.logical] ?? [];
    // Partial obligations: by region and decomposition, the derived parts must partition the value.
    const groups = new Map<string, { claim: Relation; parts: Relation[] }>();
    for (const o of stage.obligations) {
      const claim = this.canonical(claimRelation(o.nf));
      if (typeof claim === 'string') return { why: `rank ${o.rank}: the claim is ${claim}` };
      const d = derive(o.rank, o.tensor, 0);
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
      if (byIdx.size !== n) return { why: `addends of ${this.plan.logical.tensors.name(g.claim.logical)}: ${byIdx.size} of ${n} are computed in this stage` };
      let acc: Part | undefined;
      for (const d of byIdx.values()) {
        const p = d.part as Part;
        if (acc === undefined) acc = p;
        else {
          if (acc.key !== p.key) return { why: `the claimed addends of ${this.plan.logical.tensors.name(g.claim.logical)} derive from different decompositions` };
          const u = unionPart(acc, p);
          if (u === undefined) return { why: `the claimed addends of ${this.plan.logical.tensors.name(g.claim.logical)} overlap` };
          acc = u;
        }
      }
      if (acc === undefined || !coversAll(acc)) return { why: `the claimed addends of ${this.plan.logical.tensors.name(g.claim.logical)} do not add up to the whole value` };
    }
    void lshape;
    return result(stage, 'proved', undefined, [], { logicalOps: 0, parallelOps: memo.size }, 0, t0);
  }

  private canonical(d: Derived): Derived {
    return typeof d === 'string' ? d : { ...d, logical: this.canon[d.logical] as number };
  }

  private tensorName(r: number, t: number): string {
    return (this.plan.programs[this.plan.rankProgram[r] as number] as Program).tensors.name(t);
  }

  private show(r: Relation): string {
    const s = r.scale.num === 1 && r.scale.den === 1 ? '' : `${r.scale.num}/${r.scale.den} x `;
    const p = r.part === undefined ? '' : ` (addends ${r.part.comps.map((c) => `${c.cover.join(',')} of ${c.total}`).join(' + ')})`;
    return `${s}${this.plan.logical.tensors.name(r.logical)}[${r.ranges.map(([a, b]) => `${a}:${b}`).join(',')}]${p}`;
  }

  private deriveOne(stage: Stage, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, inputs: Map<string, LineageNF>): Derived {
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const key = `${r}:${t}`;
    const pr = this.prod.get(key);
    const spec = p.lineage[t];
    if (spec !== undefined && (spec.logical !== stage.logical || pr === undefined)) {
      // A stage input: its claim is assumed (the stage that produces it proves it).
      const nf = this.claimNF(r, t);
      if (nf === undefined) return 'no lineage';
      inputs.set(key, nf);
      return this.canonical(claimRelation(nf));
    }
    if (pr === undefined) return `'${p.tensors.name(t)}' has no producer and no lineage`;
    if (pr.op >= 0) return this.deriveOp(r, pr.op, t, depth, derive);
    const c = plan.collectives[pr.inst];
    if (c === undefined) return 'missing collective';
    const ins: Relation[] = [];
    for (let i = 0; i < c.group.length; i++) {
      const x = c.inputs[i] as number;
      if (x < 0) {
        ins.push(undefined as unknown as Relation);
        continue;
      }
      const d = derive(c.group[i] as number, x, depth + 1);
      if (typeof d === 'string') return d;
      ins.push(d);
    }
    const me = c.group.indexOf(r);
    return this.deriveCollective(registry.get(c.kind).name, c.attrs, ins, me, c.group.length, plan.view(r).shapes[t] ?? []);
  }

  private claimNF(r: number, t: number): LineageNF | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    if (spec === undefined) return undefined;
    return this.nfOf(r, t);
  }

  private readonly nfCache = new Map<string, LineageNF>();
  private nfOf(r: number, t: number): LineageNF {
    const key = `${r}:${t}`;
    const hit = this.nfCache.get(key);
    if (hit !== undefined) return hit;
    // evalLineage through the stage builder's conventions (plans/loader view shapes).
    const nf = evalNF(this.plan, r, t);
    if (this.nfCache.size > 1_000_000) this.nfCache.clear();
    this.nfCache.set(key, nf);
    return nf;
  }

  private deriveCollective(kind: string, attrs: Attrs, ins: readonly (Relation | undefined)[], me: number, g: number, outShape: Shape): Derived {
    const present = ins.filter((x): x is Relation => x !== undefined);
    switch (kind) {
      case 'send':
      case 'recv':
      case 'send_recv': {
        const x = present[0];
        return x ?? 'a point-to-point transfer with no input';
      }
      case 'broadcast': {
        const x = present[0];
        return x ?? 'a broadcast with no source';
      }
      case 'all_reduce':
      case 'reduce_scatter': {
        const red = String(attrs['reduce']);
        if (present.length !== g) return 'a member passes no input';
        const comb = this.combine(present, red, g);
        if (typeof comb === 'string') return comb;
        if (kind === 'all_reduce') return comb;
        const d = this.normDim(attrs['dim'], comb.ranges.length);
        const [s, e] = comb.ranges[d] as [number, number];
        const w = (e - s) / g;
        if (!Number.isInteger(w)) return 'reduce_scatter of a region not divisible by the group';
        const ranges = comb.ranges.map((x, i) => (i === d ? ([s + me * w, s + (me + 1) * w] as [number, number]) : x));
        return this.checked({ ...comb, ranges }, outShape);
      }
      case 'all_gather': {
        if (present.length !== g) return 'a member passes no input';
        const first = present[0] as Relation;
        const d = this.normDim(attrs['dim'], first.ranges.length);
        let end = (first.ranges[d] as [number, number])[0];
        for (const x of present) {
          if (x.logical !== first.logical || x.part !== undefined || !feq(x.scale, first.scale)) return 'all_gather of inputs that are not slices of one value';
          if (x.ranges.some((rg, i) => i !== d && (rg[0] !== (first.ranges[i] as [number, number])[0] || rg[1] !== (first.ranges[i] as [number, number])[1]))) return 'all_gather of slices that differ outside the gathered dim';
          if ((x.ranges[d] as [number, number])[0] !== end) return 'all_gather of slices that are not contiguous in group order';
          end = (x.ranges[d] as [number, number])[1];
        }
        const ranges = first.ranges.map((x, i) => (i === d ? ([(first.ranges[d] as [number, number])[0], end] as [number, number]) : x));
        return this.checked({ logical: first.logical, ranges, scale: first.scale }, outShape);
      }
      case 'all_to_all': {
        if (present.length !== g) return 'a member passes no input';
        const first = present[0] as Relation;
        const sd = this.normDim(attrs['split_dim'], first.ranges.length);
        const cd = this.normDim(attrs['concat_dim'], first.ranges.length);
        if (sd === cd) return 'all_to_all along one dim';
        let end = (first.ranges[cd] as [number, number])[0];
        for (const x of present) {
          if (x.logical !== first.logical || x.part !== undefined || !feq(x.scale, first.scale)) return 'all_to_all of inputs that are not slices of one value';
          if (x.ranges.some((rg, i) => i !== cd && (rg[0] !== (first.ranges[i] as [number, number])[0] || rg[1] !== (first.ranges[i] as [number, number])[1]))) return 'all_to_all of slices that differ outside the concatenated dim';
          if ((x.ranges[cd] as [number, number])[0] !== end) return 'all_to_all of slices that are not contiguous in group order';
          end = (x.ranges[cd] as [number, number])[1];
        }
        const [s, e] = first.ranges[sd] as [number, number];
        const w = (e - s) / g;
        if (!Number.isInteger(w)) return 'all_to_all of a region not divisible by the group';
        const ranges = first.ranges.map((x, i) => (i === cd ? ([(first.ranges[cd] as [number, number])[0], end] as [number, number]) : i === sd ? ([s + me * w, s + (me + 1) * w] as [number, number]) : x));
        return this.checked({ logical: first.logical, ranges, scale: first.scale }, outShape);
      }
      default:
        return `collective '${kind}' has no tensor-level rule`;
    }
  }

  /** all_reduce / reduce_scatter of the members' inputs: a partition of addends, or replicas. */
  private combine(xs: readonly Relation[], red: string, g: number): Relation | string {
    const first = xs[0] as Relation;
    for (const x of xs) if (regionKey(x) !== regionKey(first) || !feq(x.scale, first.scale) || (x.part?.key ?? '') !== (first.part?.key ?? '')) return `${red} over members that hold different values (${xs.map((y) => this.show(y)).slice(0, 3).join('; ')})`;
    if (red === 'max' || red === 'min') {
      if (xs.every((x) => x.part === undefined)) return first;
      return `${red} of addends`;
    }
    if (red !== 'sum' && red !== 'avg') return `reduction '${red}'`;
    const post = red === 'avg' ? (frac(1, g) as Frac) : ONE;
    if (first.part === undefined) {
      // Replicas summed: g times the value.
      const s = fmul(first.scale, fmul(frac(g, 1) as Frac, post) as Frac);
      return s === undefined ? 'scale overflow' : { logical: first.logical, ranges: first.ranges, scale: s };
    }
    let acc: Part = first.part;
    for (const x of xs.slice(1)) {
      const u = unionPart(acc, x.part as Part);
      if (u === undefined) return `${red} of overlapping addends`;
      acc = u;
    }
    const s = fmul(first.scale, post);
    if (s === undefined) return 'scale overflow';
    if (coversAll(acc)) return { logical: first.logical, ranges: first.ranges, scale: s };
    return { logical: first.logical, ranges: first.ranges, scale: s, part: acc };
  }

  private normDim(v: AttrValue | undefined, rank: number): number {
    const d = typeof v === 'number' ? v : 0;
    return d < 0 ? d + rank : d;
  }

  /** The derived region must be what the parallel tensor holds: its local shape. */
  private checked(rel: Relation, shape: Shape): Derived {
    if (shape.length !== rel.ranges.length) return `derived ${this.show(rel)} for a tensor of rank ${shape.length}`;
    for (let i = 0; i < shape.length; i++) {
      const [a, b] = rel.ranges[i] as [number, number];
      if (b - a !== shape[i]) return `derived ${this.show(rel)} for a tensor of shape [${shape.join(',')}]`;
    }
    return rel;
  }

  private sig(op: number): Sig | null {
    const hit = this.dimsCache.get(op);
    if (hit !== undefined) return hit;
    const lg = this.plan.logical;
    let s: Sig | null;
    try {
      const d = registry.get(lg.ops.kind[op] as number).dims(
        [...lg.ops.opInputs(op)].map((x) => lg.shapes[x] ?? []),
        lg.attrs[op] as Attrs,
      );
      s = { inputs: d.inputs, outputs: d.outputs, sums: new Set(d.sums ?? []), grouped: d.grouped ?? [] };
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
    const kind = p.ops.kind[op] as number;
    const ins: Relation[] = [];
    for (const x of p.ops.opInputs(op)) {
      const d = derive(r, x, depth + 1);
      if (typeof d === 'string') return d;
      ins.push(d);
    }
    const outs = [...p.ops.opOutputs(op)];
    const k = outs.indexOf(t);
    const attrs = view.attrs[op] as Attrs;
    const outShape = view.shapes[t] ?? [];
    const def = registry.get(kind);
    // Rules that need no logical counterpart.
    if (kind === this.scaleKind && ins.length === 1 && (ins[0] as Relation).logical >= 0) {
      const f = parseFrac(attrScalar(attrs, 'factor'));
      const x = ins[0] as Relation;
      const byLogical = this.sliced(op, r, kind, ins, attrs, k, outShape, def.name);
      if (typeof byLogical !== 'string') return byLogical;
      if (f === undefined || f.num === 0) return `scale by ${String(attrs['factor'])}`;
      const s = fmul(x.scale, f);
      return s === undefined ? 'scale overflow' : this.checked({ ...x, scale: s }, outShape);
    }
    if (kind === this.identityKind && ins.length === 1) return this.checked(ins[0] as Relation, outShape);
    if (kind === this.addKind && ins.length === 2 && (ins[0] as Relation).part !== undefined) {
      // Gradient accumulation: two addends of one decomposition.
      const [a, b] = ins as [Relation, Relation];
      const pa = a.part as Part;
      const pb = b.part;
      if (pb !== undefined && pa.key === pb.key && regionKey(a) === regionKey(b) && feq(a.scale, b.scale)) {
        const part = unionPart(pa, pb);
        if (part === undefined) return 'add of overlapping addends';
        return this.checked(coversAll(part) ? { logical: a.logical, ranges: a.ranges, scale: a.scale } : { ...a, part }, outShape);
      }
      // Addends of two values added by a logical add: the sums of their addends add up.
      if (pb !== undefined && feq(a.scale, b.scale)) {
        const q = this.index.get(`${kind}|${this.canon[a.logical] as number},${this.canon[b.logical] as number}`);
        for (const op of q ?? []) {
          const sig = this.sig(op);
          const lout = this.plan.logical.ops.opOutputs(op)[0] as number;
          if (sig === null) continue;
          const lshape = this.plan.logical.shapes[lout] ?? [];
          // Both inputs must be the same region of same-shaped values (no broadcasting).
          if (a.ranges.length !== lshape.length || (this.plan.logical.shapes[a.logical] ?? []).join(',') !== lshape.join(',') || (this.plan.logical.shapes[b.logical] ?? []).join(',') !== lshape.join(',')) continue;
          if (a.ranges.some((x, i) => x[0] !== (b.ranges[i] as [number, number])[0] || x[1] !== (b.ranges[i] as [number, number])[1])) continue;
          const part: Part = { key: `add|${op}|${pa.key}|${pb.key}`, comps: [...pa.comps, ...pb.comps] };
          return this.checked({ logical: this.canon[lout] as number, ranges: a.ranges, scale: a.scale, part }, outShape);
        }
      }
      return `add of ${this.show(a)} and ${this.show(b)}`;
    }
    return this.sliced(op, r, kind, ins, attrs, k, outShape, def.name);
  }

  /** Same op on a slice (or a plain-sum addend) of a logical op with these logical inputs. */
  private sliced(_op: number, _r: number, kind: number, ins: readonly Relation[], attrs: Attrs, k: number, outShape: Shape, name: string): Derived {
    const lg = this.plan.logical;
    const cands = this.index.get(`${kind}|${ins.map((x) => x.logical).join(',')}`);
    if (cands === undefined) return `no logical '${name}' reads ${ins.map((x) => lg.tensors.name(x.logical)).join(', ')}`;
    const def = registry.get(kind);
    let why = '';
    for (const q of cands) {
      const sig = this.sig(q);
      if (sig === null) continue;
      const lq = lg.attrs[q] as Attrs;
      const out = lg.ops.opOutputs(q)[k];
      if (out === undefined) continue;
      const lshape = lg.shapes[out] ?? [];
      let d: Derived;
      if (def.sliceRegions !== undefined) {
        if (ins.some((x) => x.part !== undefined)) {
          why = `'${name}' of an addend`;
          continue;
        }
        const inShapes = [...lg.ops.opInputs(q)].map((x) => lg.shapes[x] ?? []);
        const regs = def.sliceRegions(inShapes, [...lg.ops.opOutputs(q)].map((x) => lg.shapes[x] ?? []), ins.map((x) => x.ranges), lq, attrs);
        if (typeof regs === 'string') {
          why = regs;
          continue;
        }
        const reg = regs[k];
        if (reg === undefined || ins.some((x) => !feq(x.scale, ONE))) {
          why = `'${name}' of a scaled value`;
          continue;
        }
        d = this.checked({ logical: this.canon[out] as number, ranges: reg, scale: ONE }, outShape);
      } else {
        if (attrsKey(attrs) !== attrsKey(lq)) {
          why = `'${name}' attributes differ from the logical op's`;
          continue;
        }
        d = this.bySig(sig, ins, k, out, lshape, outShape, `${q}`);
      }
      if (typeof d !== 'string') return d;
      why = d;
    }
    return why === '' ? `no logical '${name}' matches` : why;
  }

  private bySig(sig: Sig, ins: readonly Relation[], k: number, out: number, lshape: Shape, outShape: Shape, q: string): Derived {
    const lg = this.plan.logical;
    if (ins.some((x) => x.part !== undefined || !feq(x.scale, ONE))) return `'${lg.tensors.name(out)}' from an addend or a scaled value (no linearity rule yet)`;
    // Ranges per label, from the inputs; they must agree.
    const at = new Map<string, [number, number]>();
    const role = new Map<string, string>();
    for (let i = 0; i < ins.length; i++) {
      const labels = sig.inputs[i];
      const x = ins[i] as Relation;
      const shape = lg.shapes[x.logical] ?? [];
      if (labels === undefined || labels.length !== x.ranges.length) return 'labels do not match the input rank';
      for (let d = 0; d < labels.length; d++) {
        const l = labels[d] as DimLabel;
        const rg = x.ranges[d] as [number, number];
        role.set(l.label, l.role);
        const prev = at.get(l.label);
        if (prev !== undefined && (prev[0] !== rg[0] || prev[1] !== rg[1])) return `inputs sliced differently along '${l.label}'`;
        at.set(l.label, rg);
        const full = rg[0] === 0 && rg[1] === shape[d];
        const paired = sig.grouped.some((g) => g.label === l.label || g.of === l.label);
        if (!full && !paired && l.role !== 'batch' && !(l.role === 'contracted' && sig.sums.has(l.label))) return `an input is sliced along '${l.label}' (${l.role})`;
      }
    }
    for (const g of sig.grouped) {
      const a = at.get(g.label);
      const b = at.get(g.of);
      if (a === undefined || b === undefined) return `grouped label '${g.label}' without '${g.of}'`;
      if (a[0] !== b[0] * g.ratio || a[1] !== b[1] * g.ratio) return `'${g.label}' sliced [${a[0]}, ${a[1]}) but '${g.of}' [${b[0]}, ${b[1]}) (groups of ${g.ratio})`;
    }
    const labels = sig.outputs[k];
    if (labels === undefined || labels.length !== lshape.length) return 'labels do not match the output rank';
    const ranges: [number, number][] = labels.map((l, d) => at.get(l.label) ?? [0, lshape[d] as number]);
    // Plain sums: a summed label sliced in the inputs and absent from this output.
    const own = new Set(labels.map((l) => l.label));
    let part: Part | undefined;
    for (const [l, rg] of at) {
      if (own.has(l) || !sig.sums.has(l) || role.get(l) !== 'contracted') continue;
      const total = this.labelSize(sig, ins, l);
      if (rg[0] === 0 && rg[1] === total) continue;
      if (part !== undefined) return 'sliced along two summed labels';
      part = { key: `sum|${q}|${l}|${k}`, comps: [{ kind: 'range', cover: [rg[0], rg[1]], total }] };
    }
    // A label sliced in the inputs that this output lacks and does not sum over: the output reads
    // the whole dim, so a slice is not the logical op on a slice.
    for (const [l, rg] of at) {
      if (own.has(l) || (part !== undefined && part.key.endsWith(`|${l}|${k}`))) continue;
      // A paired label rides on its partner (kv heads with the query heads of their groups).
      if (sig.grouped.some((g) => (g.of === l && own.has(g.label)) || (g.label === l && own.has(g.of)))) continue;
      const total = this.labelSize(sig, ins, l);
      if (!(rg[0] === 0 && rg[1] === total)) return `sliced along '${l}', which output ${k} reads whole`;
    }
    return this.checked({ logical: this.canon[out] as number, ranges, scale: ONE, ...(part === undefined ? {} : { part }) }, outShape);
  }

  private labelSize(sig: { inputs: readonly (readonly DimLabel[])[] }, ins: readonly Relation[], label: string): number {
    const lg = this.plan.logical;
    for (let i = 0; i < ins.length; i++) {
      const d = (sig.inputs[i] ?? []).findIndex((l) => l.label === label);
      if (d >= 0) return (lg.shapes[(ins[i] as Relation).logical] ?? [])[d] as number;
    }
    return -1;
  }
}

function logicalOrderOf(plan: LoadedPlan): readonly number[] {
  return logicalOrder(plan);
}

function evalNF(plan: LoadedPlan, r: number, t: number): LineageNF {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  const spec = p.lineage[t];
  if (spec === undefined) throw new Error('no lineage');
  return evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
}

/**
 * Tries every stage at tensor level; returns the proved results by stage index, and why the
 * others were left to the element engines (first reason per stage).
 */
export function proveTensorLevel(plan: LoadedPlan, stages: readonly Stage[]): { proved: Map<number, StageResult>; open: Map<number, string> } {
  const prover = new TensorLevelProver(plan);
  const proved = new Map<number, StageResult>();
  const open = new Map<number, string>();
  for (const s of stages) {
    let r: StageResult | { why: string };
    try {
      r = prover.prove(s);
    } catch (e) {
      r = { why: `tensor-level error: ${e instanceof Error ? e.message : String(e)}` };
    }
    if ('why' in r) open.set(s.index, r.why);
    else proved.set(s.index, { ...r, decidedBy: 'tensor' });
  }
  return { proved, open };
}
