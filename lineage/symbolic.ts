/**
 * Lineage checked per template, with the rank's mesh coordinates as symbols.
 *
 * A program runs on a set of ranks; when that set is a box (the product of one coordinate set
 * per mesh axis, as `"all"` and `{"where": ...}` give) and a tensor's index map (or DTensor
 * placements) is affine in the coordinates, the tensor's claims over all those ranks form one
 * *family*:
 *  - every check `evalLineage` makes on one rank (ranges inside the logical tensor, stripes
 *    disjoint and non-empty, lengths equal to the local shape, chunk inside 0..n-1) is an
 *    inequality or equality between affine functions, decided over the whole box from each
 *    function's minimum and maximum (exact over a product set: sum of per-axis extremes);
 *  - when every mesh axis moves at most one thing (one dim's ranges, or the chunk index), the
 *    union of the family's regions is the product over dims of each dim's union of intervals,
 *    and every chunk of the family is held at every element of that union. So the family's
 *    cells (coordinate-compressed, as in check.ts) and chunks are computed per dim and per
 *    axis, never per rank.
 * Whatever is not affine, not a box or not separable is enumerated per distinct coordinates,
 * exactly as check.ts does, and enters the same tiling check as single-claim families. When a
 * check fails, the claims of the failing tensor are enumerated and check.ts reports the
 * error, so messages (rank, region, chunk) are those of the per-rank path.
 * docs/engine.md ("Loading is per template") has the argument that both paths agree.
 */
import type { Shape } from '../ops/types.js';
import type { IssueSink } from '../plans/errors.js';
import { checkRunClock } from '../plans/clock.js';
import { type Box, type Mesh, programBoxes } from '../plans/mesh.js';
import { type Contract, type IntSpec, type LineageSpec, type LogicalGraph, placementStr, type Program, type RankView } from '../plans/model.js';
import { type Claim, type Coverage, MAX_CELLS, checkContract, checkTiling, claimAxes, claimsOfSpec, lowerBound } from './check.js';
import { groupKey, type ValueMap } from './model.js';
import { type Aff, cutBox, fitOnBox } from './fit.js';


const identityRanks = new WeakMap<Mesh, boolean>();
function ranksAreRowMajor(mesh: Mesh): boolean {
  let v = identityRanks.get(mesh);
  if (v === undefined) {
    v = mesh.rankAt.every((r, i) => r === i);
    identityRanks.set(mesh, v);
  }
  return v;
}

function constAff(c: number, axes: number): Aff {
  return { c, k: new Array<number>(axes).fill(0) };
}

/** An IntSpec as an affine function of the coordinates (`rank` is row-major over them), if it is one. */
function toAff(s: IntSpec, mesh: Mesh): Aff | undefined {
  const n = mesh.axes.length;
  if (typeof s === 'number') return constAff(s, n);
  const f = s.affine;
  if (f === undefined) return undefined;
  const k = new Array<number>(n).fill(0);
  for (const [v, x] of f.k) {
    if (v === 'rank') {
      if (!ranksAreRowMajor(mesh)) return undefined;
      let stride = 1;
      for (let a = n - 1; a >= 0; a--) {
        k[a] = (k[a] as number) + x * stride;
        stride *= mesh.sizes[a] as number;
      }
    } else k[mesh.axisIndex(v)] = (k[mesh.axisIndex(v)] as number) + x;
  }
  return { c: f.c, k };
}

/** toAff, or else one affine function on the box (fit.ts: checked at every coordinate it reads). */
function toAffOn(s: IntSpec, mesh: Mesh, box: Box): Aff | undefined {
  return toAff(s, mesh) ?? fitOnBox(s, mesh, box);
}

/** Mesh axes read by the spec's expressions that are not affine as written (where a box may be cut). */
function nonAffineAxes(p: Program, t: number, spec: LineageSpec, mesh: Mesh): number[] {
  const out = new Set<number>();
  const note = (s: IntSpec | undefined): void => {
    if (s === undefined || typeof s === 'number' || toAff(s, mesh) !== undefined) return;
    for (const v of s.vars) if (v !== 'rank') out.add(mesh.axisIndex(v));
  };
  if (spec.kind === 'index') {
    for (const d of spec.dims ?? []) for (const x of d ?? []) note(x);
    note(spec.idx);
  }
  for (const d of p.shapeSpecs[t] ?? []) note(d);
  return [...out].filter((a) => a >= 0).sort((a, b) => (mesh.sizes[a] as number) - (mesh.sizes[b] as number));
}

function add(a: Aff, b: Aff, s = 1): Aff {
  const k = new Array<number>(a.k.length);
  for (let i = 0; i < k.length; i++) k[i] = (a.k[i] as number) + s * (b.k[i] as number);
  return { c: a.c + s * b.c, k };
}

function minOn(f: Aff, box: Box): number {
  let v = f.c;
  for (let a = 0; a < f.k.length; a++) {
    const x = f.k[a] as number;
    if (x !== 0) v += x > 0 ? x * (box.lo[a] as number) : x * (box.hi[a] as number);
  }
  return v;
}
function maxOn(f: Aff, box: Box): number {
  let v = f.c;
  for (let a = 0; a < f.k.length; a++) {
    const x = f.k[a] as number;
    if (x !== 0) v += x > 0 ? x * (box.hi[a] as number) : x * (box.lo[a] as number);
  }
  return v;
}
/** Axes along which f varies on the box. */
function movedBy(f: Aff, box: Box): number[] {
  const out: number[] = [];
  f.k.forEach((x, a) => {
    if (x !== 0 && (box.sets[a] as Int32Array).length > 1) out.push(a);
  });
  return out;
}
function safeAll(fs: readonly Aff[], box: Box): boolean {
  return fs.every((f) => Number.isSafeInteger(minOn(f, box)) && Number.isSafeInteger(maxOn(f, box)));
}

interface AffineSpec {
  /** Per dim, the stripes [lo, hi) in layout order. */
  readonly dims: { lo: Aff; hi: Aff }[][];
  readonly idx: Aff;
  readonly value: Omit<ValueMap, 'idx'>;
}

/** The spec as affine functions, or undefined when some part is not affine (or `evalLineage` would reject it). */
function affineSpec(spec: LineageSpec, mesh: Mesh, logicalShape: Shape, box: Box): AffineSpec | undefined {
  const n = mesh.axes.length;
  if (spec.kind === 'index') {
    if (spec.dims !== undefined && spec.dims.length !== logicalShape.length) return undefined;
    const dims: { lo: Aff; hi: Aff }[][] = [];
    for (let d = 0; d < logicalShape.length; d++) {
      const dim = spec.dims?.[d];
      if (dim === undefined) {
        dims.push([{ lo: constAff(0, n), hi: constAff(logicalShape[d] as number, n) }]);
        continue;
      }
      const stripes: { lo: Aff; hi: Aff }[] = [];
      for (let i = 0; i + 1 < dim.length; i += 2) {
        const lo = toAffOn(dim[i] as IntSpec, mesh, box);
        const hi = toAffOn(dim[i + 1] as IntSpec, mesh, box);
        if (lo === undefined || hi === undefined) return undefined;
        stripes.push({ lo, hi });
      }
      if (dim.length % 2 !== 0) return undefined;
      dims.push(stripes);
    }
    const idx = toAffOn(spec.idx, mesh, box);
    if (idx === undefined) return undefined;
    return { dims, idx, value: { n: spec.n, reduce: spec.reduce, divisor: spec.divisor, split: spec.split } };
  }
  // DTensor placements, as lineage/model.ts expandPlacements, with even chunks only (uneven
  // torch.chunk sizes are a min(), not affine: those specs are enumerated).
  if (spec.placements.length !== n) return undefined;
  const lo = logicalShape.map(() => constAff(0, n));
  const len = [...logicalShape];
  let idx = constAff(0, n);
  let nn = 1;
  let divisor = 1;
  let reduce: 'sum' | 'max' | 'min' | undefined;
  for (let a = 0; a < n; a++) {
    const p = spec.placements[a];
    const m = mesh.sizes[a] as number;
    if (p === undefined || p.k === 'R') continue;
    if (p.k === 'S') {
      if (p.dim >= logicalShape.length) return undefined;
      const L = len[p.dim] as number;
      if (L % m !== 0) return undefined;
      const chunk = L / m;
      const step = constAff(0, n);
      step.k[a] = chunk;
      lo[p.dim] = add(lo[p.dim] as Aff, step);
      len[p.dim] = chunk;
    } else {
      const r = p.reduce === 'avg' ? 'sum' : p.reduce;
      if (reduce !== undefined && reduce !== r) return undefined;
      if (r !== 'sum' && reduce === r) return undefined;
      reduce = r;
      const k = new Array<number>(n).fill(0);
      idx.k.forEach((x, i) => (k[i] = x * m));
      k[a] = (k[a] as number) + 1;
      idx = { c: idx.c * m, k };
      nn *= m;
      if (p.reduce === 'avg') divisor *= m;
    }
  }
  const dims = lo.map((l, d) => [{ lo: l, hi: add(l, constAff(len[d] as number, n)) }]);
  return { dims, idx, value: { n: nn, reduce: reduce ?? 'sum', divisor, split: '' } };
}

/**
 * A set of claims on one logical tensor: per dim, the union of the intervals the claims hold
 * (flat [s0, e0, s1, e1, ...]); every claim's chunk is held at every element of the product.
 */
interface Family {
  readonly logical: number;
  readonly program: number;
  readonly tensor: number;
  readonly path: string;
  readonly dims: number[][];
  /** The chunks held, as flat [s0, e0, s1, e1, ...] ranges. */
  readonly chunks: number[];
  readonly value: Omit<ValueMap, 'idx'>;
  readonly holders: number;
  /** Distinct claims in the family, and a key that equal families share. */
  readonly distinct: number;
  readonly key: string;
}

export interface LineageStats {
  /** Tensors whose claims were checked as one family over their program's ranks. */
  symbolicTensors: number;
  /** Of the boxes those tensors were checked on, how many were cut into pieces first (fit.ts). */
  piecewiseTensors: number;
  /** Tensors whose claims were enumerated per distinct coordinates (and the claims). */
  enumeratedTensors: number;
  enumeratedClaims: number;
  /** Logical tensors whose tiling failed and were re-checked claim by claim for the report. */
  explained: number;
}

/** Enumerating more claims than this to explain a failure is refused; the symbolic message stands. */
const MAX_EXPLAIN_CLAIMS = 2_000_000;
/** Cell marks per logical tensor (sum over families of cells x chunks). */
const MAX_MARKS = 1 << 26;

interface SpecRef {
  readonly p: Program;
  readonly t: number;
  readonly spec: LineageSpec;
  readonly ranks: Int32Array;
}

/**
 * Phase 1: validate every spec (affine families over boxes, or claims per distinct
 * coordinates); phase 2: tiling per logical tensor and the output contract. Issues go to
 * `sink`; callers throw after each phase like the per-rank path.
 */
export function checkLineageSymbolic(
  programs: Program[],
  rankProgram: Int32Array,
  mesh: Mesh,
  logical: LogicalGraph,
  contract: Contract,
  view: (r: number) => RankView,
  sink: IssueSink,
  opts: { symbolic: boolean },
): { coverage: Coverage[] | undefined; stats: LineageStats } {
  const stats: LineageStats = { symbolicTensors: 0, piecewiseTensors: 0, enumeratedTensors: 0, enumeratedClaims: 0, explained: 0 };
  const families = new Map<number, Family[]>();
  const refs = new Map<number, SpecRef[]>();
  const familyCache = new Map<string, Family | null>();
  const pieceCache = new Map<string, Family[] | null>();
  const push = <T>(m: Map<number, T[]>, k: number, v: T): void => {
    let l = m.get(k);
    if (l === undefined) m.set(k, (l = []));
    l.push(v);
  };
  for (const p of programs) {
    const ranks = p.ranks.every((r) => rankProgram[r] === p.index) ? p.ranks : Int32Array.from([...p.ranks].filter((r) => rankProgram[r] === p.index));
    // A program of one rank (the explicit spelling) keeps the per-rank check: it is one claim.
    // A program whose ranks are not one box (one rank spelled apart) is a few disjoint boxes,
    // one family each; past MAX_BOXES its claims are enumerated.
    const boxes = opts.symbolic && ranks.length > 1 ? programBoxes(ranks, mesh) : undefined;
    p.lineage.forEach((spec, t) => {
      if (spec === undefined) return;
      if ((t & 255) === 0) checkRunClock();
      push(refs, spec.logical, { p, t, spec, ranks });
      const fams: Family[] = [];
      let complete = boxes !== undefined;
      for (const [bi, box] of (boxes ?? []).entries()) {
        // Generated plans repeat a few hundred lineage patterns over hundreds of thousands of
        // tensors: a family depends only on the pattern, the shapes and the box.
        const sig = `${p.index}|${bi}|${(logical.shapes[spec.logical] as Shape).join(',')}|${(p.shapeSpecs[t] ?? []).map(intSig).join(',')}|${specSig(spec)}`;
        let hit = familyCache.get(sig);
        if (hit === undefined) familyCache.set(sig, (hit = familyOf(p, t, spec, box, box.count, mesh, logical) ?? null));
        if (hit !== null) {
          fams.push({ ...hit, logical: spec.logical, program: p.index, tensor: t, path: spec.path, holders: box.count });
          continue;
        }
        // Piecewise affine (SP shards under zig-zag CP): the box cut along an axis that a
        // non-affine expression reads, one family per piece (fit.ts); else enumerated.
        let cut = pieceCache.get(sig);
        if (cut === undefined) {
          const fit = new Map<Box, Family>();
          const pieces = cutBox(box, nonAffineAxes(p, t, spec, mesh), (b) => {
            const fam = familyOf(p, t, spec, b, b.count, mesh, logical);
            if (fam !== undefined) fit.set(b, fam);
            return fam !== undefined;
          });
          cut = pieces === undefined ? null : pieces.map((b) => fit.get(b) as Family);
          pieceCache.set(sig, cut);
        }
        if (cut === null) {
          complete = false;
          break;
        }
        stats.piecewiseTensors++;
        for (const fam of cut) fams.push({ ...fam, logical: spec.logical, program: p.index, tensor: t, path: spec.path });
      }
      if (complete) {
        stats.symbolicTensors++;
        for (const fam of fams) push(families, spec.logical, fam);
        return;
      }
      stats.enumeratedTensors++;
      const claims: Claim[] = [];
      claimsOfSpec(p, t, spec, ranks, mesh, logical, view, sink, claims);
      stats.enumeratedClaims += claims.length;
      for (const c of claims) push(families, spec.logical, claimFamily(c, p));
    });
  }
  if (sink.size > 0) return { coverage: undefined, stats };
  const coverage: Coverage[] = [];
  // Logical tensors with the same shape and the same families (every layer's activation, say)
  // tile alike: the check runs once per such layout.
  const keyIds = new Map<string, number>();
  const layouts = new Map<string, TileResult>();
  for (const [lt, list] of [...families].sort((a, b) => a[0] - b[0])) {
    const ids = [
      ...new Set(
        list.map((f) => {
          let id = keyIds.get(f.key);
          if (id === undefined) keyIds.set(f.key, (id = keyIds.size));
          return id;
        }),
      ),
    ].sort((a, b) => a - b);
    const sig = `${(logical.shapes[lt] as Shape).join(',')}|${ids.join(',')}`;
    let r = layouts.get(sig);
    if (r === undefined) layouts.set(sig, (r = tileFamilies(lt, list, logical)));
    if (r.ok) {
      coverage.push({ ...r.coverage, logical: lt, holders: list.reduce((n, f) => n + f.holders, 0) });
      continue;
    }
    // Explain with the per-rank check: same messages, naming ranks, regions and chunks.
    stats.explained++;
    const specs = refs.get(lt) ?? [];
    const estimate = specs.reduce((s, x) => s + distinctCount(x, mesh), 0);
    if (estimate <= MAX_EXPLAIN_CLAIMS) {
      const claims: Claim[] = [];
      for (const x of specs) claimsOfSpec(x.p, x.t, x.spec, x.ranks, mesh, logical, view, sink, claims);
      const before = sink.size;
      const c = checkTiling(lt, claims, programs, logical, sink);
      if (sink.size > before) continue;
      if (c !== undefined) {
        // The claim-by-claim check passed where the family check did not: trust neither.
        throw new Error(`internal inconsistency: the per-template lineage check of '${logical.tensors.name(lt)}' failed (${r.message}) but the per-rank check passed`);
      }
    }
    // The layout's verdict may come from another tensor: the message is this one's.
    const own = tileFamilies(lt, list, logical);
    if (!own.ok) sink.add(own.path, own.message, `logical tensor '${logical.tensors.name(lt)}'`);
  }
  if (sink.size > 0) return { coverage: undefined, stats };
  checkContract(coverage, logical, contract, sink);
  return { coverage, stats };
}

function intSig(x: IntSpec): string {
  return typeof x === 'number' ? String(x) : `(${x.source})`;
}

/** Everything of a spec but its logical tensor and path: equal signatures, equal families. */
function specSig(spec: LineageSpec): string {
  if (spec.kind === 'placements') return `P${spec.placements.map(placementStr).join(',')}`;
  const dims = spec.dims === undefined ? 'all' : spec.dims.map((d) => (d === undefined ? '*' : d.map(intSig).join(','))).join(';');
  return `I${dims}|${intSig(spec.idx)}|${spec.n}|${spec.reduce}|${spec.divisor}|${spec.split}`;
}

/** Distinct coordinate tuples the per-rank path would enumerate for one spec. */
function distinctCount(x: SpecRef, mesh: Mesh): number {
  const ax = claimAxes(x.p, x.t, x.spec, mesh);
  let d = 1;
  for (const a of ax) d *= a < 0 ? x.ranks.length : (mesh.sizes[a] as number);
  return Math.min(d, x.ranks.length);
}

function claimFamily(c: Claim, p: Program): Family {
  const v = c.nf.value;
  const key = `${c.nf.ranges.map((r) => r.join(',')).join(';')}|${v.idx}|${groupKey(v)}`;
  return {
    logical: c.nf.logical,
    program: p.index,
    tensor: c.tensor,
    path: p.lineage[c.tensor]?.path ?? (p.tensors.paths[c.tensor] as string),
    dims: c.nf.ranges.map((r) => [...r]),
    chunks: [v.idx, v.idx + 1],
    value: { n: v.n, reduce: v.reduce, divisor: v.divisor, split: v.split },
    holders: c.holders,
    distinct: 1,
    key,
  };
}

/** The tensor's claims over the whole box as one family, or undefined to enumerate them. */
function familyOf(p: Program, t: number, spec: LineageSpec, box: Box, holders: number, mesh: Mesh, logical: LogicalGraph): Family | undefined {
  const lshape = logical.shapes[spec.logical] as Shape;
  const f = affineSpec(spec, mesh, lshape, box);
  if (f === undefined) return undefined;
  const local = (p.shapeSpecs[t] ?? []).map((d) => toAffOn(d, mesh, box));
  if (local.length !== lshape.length || local.some((d) => d === undefined)) return undefined;
  const all: Aff[] = [f.idx];
  for (const st of f.dims) for (const s of st) all.push(s.lo, s.hi, add(s.hi, s.lo, -1));
  if (!safeAll(all, box)) return undefined;
  // Every check evalLineage makes on one rank, over the whole box at once.
  for (let d = 0; d < lshape.length; d++) {
    const full = lshape[d] as number;
    const st = f.dims[d] as { lo: Aff; hi: Aff }[];
    let held = constAff(0, mesh.axes.length);
    for (const s of st) {
      const len = add(s.hi, s.lo, -1);
      if (minOn(s.lo, box) < 0 || maxOn(s.hi, box) > full || minOn(len, box) < 0) return undefined;
      if (st.length > 1 && minOn(len, box) < 1) return undefined;
      held = add(held, len);
    }
    for (let i = 0; i < st.length; i++) {
      for (let j = i + 1; j < st.length; j++) {
        const a = st[i] as { lo: Aff; hi: Aff };
        const b = st[j] as { lo: Aff; hi: Aff };
        // Disjoint in the same order on every rank; anything else is left to the per-rank path.
        if (minOn(add(b.lo, a.hi, -1), box) < 0 && minOn(add(a.lo, b.hi, -1), box) < 0) return undefined;
      }
    }
    const diff = add(held, local[d] as Aff, -1);
    if (movedBy(diff, box).length > 0 || minOn(diff, box) !== 0) return undefined;
  }
  if (minOn(f.idx, box) < 0 || maxOn(f.idx, box) > f.value.n - 1) return undefined;
  // Separable: each axis moves one dim's ranges or the chunk, not two of them.
  const owner = new Int32Array(mesh.axes.length).fill(-2);
  const claim = (a: number, who: number): boolean => {
    if (owner[a] === -2 || owner[a] === who) {
      owner[a] = who;
      return true;
    }
    return false;
  };
  for (let d = 0; d < lshape.length; d++) {
    for (const s of f.dims[d] as { lo: Aff; hi: Aff }[]) for (const a of [...movedBy(s.lo, box), ...movedBy(s.hi, box)]) if (!claim(a, d)) return undefined;
  }
  for (const a of movedBy(f.idx, box)) if (!claim(a, -1)) return undefined;
  // Per dim, the intervals over the coordinates of the axes that move it.
  let distinct = 1;
  const dims = f.dims.map((st, d) => {
    const axes = [...owner.keys()].filter((a) => owner[a] === d);
    const out: number[] = [];
    // Distinct claims along this dim: by start when the lengths do not vary (the usual case).
    const s0 = st[0] as { lo: Aff; hi: Aff };
    const lenAff = add(s0.hi, s0.lo, -1);
    const fixedLen = st.length === 1 && movedBy(lenAff, box).length === 0;
    if (fixedLen) {
      // Closed form: blocks of length L whose starts step by L along the fastest axis, by
      // L x (its size) along the next, ... tile one contiguous range, one block per coordinate.
      const L = minOn(lenAff, box);
      const mr = L > 0 ? mixedRadix(s0.lo, axes, box, L) : undefined;
      if (mr !== undefined) {
        distinct *= mr.count;
        return [mr.start, mr.start + L * mr.count];
      }
    }
    const starts = new Set<number>();
    const keys = new Set<string>();
    forEachCoord(axes, box, (coord) => {
      for (const s of st) out.push(evalAt(s.lo, coord), evalAt(s.hi, coord));
      if (fixedLen) starts.add(out[out.length - 2] as number);
      else keys.add(out.slice(out.length - 2 * st.length).join(','));
    });
    distinct *= fixedLen ? starts.size : keys.size;
    return out;
  });
  const idxAxes = [...owner.keys()].filter((a) => owner[a] === -1);
  const chunks: number[] = [];
  const mr = mixedRadix(f.idx, idxAxes, box, 1);
  if (mr !== undefined) {
    chunks.push(mr.start, mr.start + mr.count);
    distinct *= mr.count;
  } else {
    const chunkSet = new Set<number>();
    forEachCoord(idxAxes, box, (coord) => chunkSet.add(evalAt(f.idx, coord)));
    const sorted = [...chunkSet].sort((a, b) => a - b);
    for (const c of sorted) {
      if (chunks.length > 0 && chunks[chunks.length - 1] === c) chunks[chunks.length - 1] = c + 1;
      else chunks.push(c, c + 1);
    }
    distinct *= sorted.length;
  }
  // An axis with one coordinate in the box is a constant of the family: folded in, so that
  // programs at other coordinates of that axis get other keys.
  const affKey = (x: Aff): string => {
    let c = x.c;
    const parts = x.k.map((k, a) => {
      const set = box.sets[a] as Int32Array;
      if (k !== 0 && set.length === 1) c += k * (set[0] as number);
      return k === 0 || set.length <= 1 ? 0 : `${k}@${boxId(box, a)}`;
    });
    return `${c}:${parts.join(',')}`;
  };
  const key = `A${f.dims.map((st) => st.map((s) => `${affKey(s.lo)}-${affKey(s.hi)}`).join('+')).join(';')}|${affKey(f.idx)}|${groupKey({ ...f.value, idx: 0 })}`;
  return { logical: spec.logical, program: p.index, tensor: t, path: spec.path, dims, chunks, value: f.value, holders, distinct, key };
}

/**
 * When f over the box's coordinates on `axes` takes the values start, start + unit, ...,
 * start + unit x (count - 1), each once (its coefficients, sorted, are unit, unit x m1,
 * unit x m1 x m2, ... over contiguous coordinate ranges of sizes m1, m2, ...): that range.
 */
function mixedRadix(f: Aff, axes: readonly number[], box: Box, unit: number): { start: number; count: number } | undefined {
  const byStep = [...axes].sort((a, b) => (f.k[a] as number) - (f.k[b] as number));
  let step = unit;
  for (const a of byStep) {
    const set = box.sets[a] as Int32Array;
    if ((set[set.length - 1] as number) - (set[0] as number) + 1 !== set.length) return undefined;
    if (f.k[a] !== step) return undefined;
    step *= set.length;
  }
  return { start: evalAt(f, Int32Array.from(box.lo)), count: step / unit };
}

const axisSetIds = new Map<string, number>();
const boxAxisIds = new WeakMap<Box, Int32Array>();
/** A small id per distinct coordinate set (for family keys): equal sets, equal ids. */
function boxId(box: Box, a: number): number {
  let ids = boxAxisIds.get(box);
  if (ids === undefined) {
    ids = Int32Array.from(box.sets.map((s) => {
      const first = s[0] ?? 0;
      const last = s[s.length - 1] ?? -1;
      const k = last - first + 1 === s.length ? `${first}-${last}` : s.join('.');
      let id = axisSetIds.get(k);
      if (id === undefined) axisSetIds.set(k, (id = axisSetIds.size));
      return id;
    }));
    boxAxisIds.set(box, ids);
  }
  return ids[a] as number;
}

/** Calls `f` with a coordinate vector for every combination of the box's coordinates on `axes` (others at their first). */
function forEachCoord(axes: readonly number[], box: Box, f: (coord: Int32Array) => void): void {
  const coord = Int32Array.from(box.lo);
  const pos = new Int32Array(axes.length);
  for (;;) {
    f(coord);
    let i = axes.length - 1;
    for (; i >= 0; i--) {
      const a = axes[i] as number;
      const set = box.sets[a] as Int32Array;
      pos[i] = (pos[i] as number) + 1;
      if ((pos[i] as number) < set.length) {
        coord[a] = set[pos[i] as number] as number;
        break;
      }
      pos[i] = 0;
      coord[a] = set[0] as number;
    }
    if (i < 0) return;
  }
}

function evalAt(f: Aff, coord: Int32Array): number {
  let v = f.c;
  for (let a = 0; a < f.k.length; a++) {
    const x = f.k[a] as number;
    if (x !== 0) v += x * (coord[a] as number);
  }
  return v;
}

type TileResult = { ok: true; coverage: Coverage } | { ok: false; path: string; message: string };

/** The tiling check of check.ts (no gap, complete partial groups) on families instead of claims. */
function tileFamilies(lt: number, all: readonly Family[], logical: LogicalGraph): TileResult {
  const shape = logical.shapes[lt] as Shape;
  const first = all[0] as Family;
  let holders = 0;
  // Families with equal keys hold the same claims: one of each is enough for the tiling.
  const distinct = new Map<string, Family>();
  for (const f of all) {
    holders += f.holders;
    if (!distinct.has(f.key)) distinct.set(f.key, f);
  }
  const list = [...distinct.values()];
  const claims = list.reduce((s, x) => s + x.distinct, 0);
  const bounds = shape.map((full, d) => {
    let n = 2;
    for (const f of list) n += (f.dims[d] ?? []).length;
    const all = new Float64Array(n);
    all[0] = 0;
    all[1] = full;
    let k = 2;
    for (const f of list) for (const x of f.dims[d] ?? []) all[k++] = x;
    all.sort();
    let m = 0;
    for (let i = 0; i < n; i++) if (i === 0 || all[i] !== all[i - 1]) all[m++] = all[i] as number;
    return Int32Array.from(all.subarray(0, m));
  });
  const sizes = bounds.map((b) => b.length - 1);
  const cells = sizes.reduce((p, s) => p * s, 1);
  if (cells > MAX_CELLS) return { ok: false, path: first.path, message: `lineage is split into ${cells} distinct blocks; more than ${MAX_CELLS} cannot be checked` };
  const strides = sizes.map((_, d) => sizes.slice(d + 1).reduce((p, s) => p * s, 1));
  let marks = 0;
  const cellsOf = (f: Family): Int32Array => {
    let acc = new Int32Array(1);
    f.dims.forEach((r, d) => {
      const b = bounds[d] as Int32Array;
      const hit = new Uint8Array(sizes[d] as number);
      let hits = 0;
      for (let i = 0; i < r.length; i += 2) {
        const lo = lowerBound(b, r[i] as number);
        const hi = lowerBound(b, r[i + 1] as number);
        for (let k = lo; k < hi; k++) {
          if (hit[k] === 0) hits++;
          hit[k] = 1;
        }
      }
      const idx = new Int32Array(hits);
      let j = 0;
      for (let k = 0; k < hit.length; k++) if (hit[k] === 1) idx[j++] = k * (strides[d] as number);
      const next = new Int32Array(acc.length * hits);
      let w = 0;
      for (let i = 0; i < acc.length; i++) {
        const a = acc[i] as number;
        for (let q = 0; q < hits; q++) next[w++] = a + (idx[q] as number);
      }
      acc = next;
    });
    marks += acc.length * (f.chunks.length / 2);
    return acc;
  };
  const complete = new Uint8Array(cells);
  const groups = new Map<string, { n: number; v: Omit<ValueMap, 'idx'>; fams: Family[] }>();
  for (const f of list) {
    const v = f.value;
    if (v.n === 1 && v.divisor === 1) {
      for (const x of cellsOf(f)) complete[x] = 1;
      continue;
    }
    const gk = groupKey({ ...v, idx: 0 });
    let g = groups.get(gk);
    if (g === undefined) groups.set(gk, (g = { n: v.n, v, fams: [] }));
    g.fams.push(f);
  }
  const name = logical.tensors.name(lt);
  const partialHeld = new Uint8Array(cells);
  for (const g of groups.values()) {
    const fc = g.fams.map((f) => cellsOf(f));
    if (marks > MAX_MARKS) return { ok: false, path: first.path, message: `lineage of '${name}' needs more than ${MAX_MARKS} cell marks to check` };
    // Per cell, the union of the chunk ranges of the families that hold it must be 0..n-1
    // (every range is inside 0..n-1: checked per family).
    const start = new Int32Array(cells + 1);
    g.fams.forEach((f, i) => {
      for (const x of fc[i] as Int32Array) start[x + 1] = (start[x + 1] as number) + f.chunks.length / 2;
    });
    for (let x = 0; x < cells; x++) start[x + 1] = (start[x + 1] as number) + (start[x] as number);
    const total = start[cells] as number;
    const lo = new Float64Array(total);
    const hi = new Float64Array(total);
    const fill = start.slice(0, cells);
    g.fams.forEach((f, i) => {
      for (const x of fc[i] as Int32Array) {
        for (let j = 0; j < f.chunks.length; j += 2) {
          const at = fill[x] as number;
          lo[at] = f.chunks[j] as number;
          hi[at] = f.chunks[j + 1] as number;
          fill[x] = at + 1;
        }
      }
    });
    for (let x = 0; x < cells; x++) {
      const a = start[x] as number;
      const b = start[x + 1] as number;
      if (a === b) continue;
      partialHeld[x] = 1;
      let held: number;
      if (b - a === 1) held = (hi[a] as number) - (lo[a] as number);
      else {
        const order = Array.from({ length: b - a }, (_, i) => a + i).sort((p, q) => (lo[p] as number) - (lo[q] as number));
        held = 0;
        let end = -1;
        for (const i of order) {
          const l = Math.max(lo[i] as number, end);
          if ((hi[i] as number) > l) held += (hi[i] as number) - l;
          end = Math.max(end, hi[i] as number);
        }
      }
      if (held < g.n) return { ok: false, path: (g.fams[0] as Family).path, message: `elements ${cellText(x, sizes, strides, bounds)} are held as partial addends (sum of ${g.n}) but only ${held} distinct chunk(s) are held: the partial group is incomplete` };
    }
  }
  let partialOnly = false;
  let allComplete = true;
  for (let x = 0; x < cells; x++) {
    if (complete[x] === 1) continue;
    allComplete = false;
    if (partialHeld[x] === 1) {
      partialOnly = true;
      continue;
    }
    return { ok: false, path: first.path, message: `elements ${cellText(x, sizes, strides, bounds)} are held by no rank: the lineage does not tile the tensor` };
  }
  return { ok: true, coverage: { logical: lt, claims, holders, complete: allComplete, partialOnly, hasPartials: groups.size > 0 } };
}

function cellText(x: number, sizes: number[], strides: number[], bounds: Int32Array[]): string {
  return `[${sizes
    .map((_, d) => {
      const k = Math.floor(x / (strides[d] as number)) % (sizes[d] as number);
      const b = bounds[d] as Int32Array;
      return `${b[k]}:${b[k + 1]}`;
    })
    .join(', ')}]`;
}
