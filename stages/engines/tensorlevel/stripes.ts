/**
 * Striped regions at tensor level (docs/engine.md, "Tensor-level proofs", rule 13): a parallel
 * tensor that holds several ranges of one logical dim, in its own order (context parallelism's
 * zig-zag chunks r and 2 cp - 1 - r of the sequence).
 *
 * A relation keeps one range per dim; a striped dim holds a *placeholder* range instead:
 * [P, P + n) with P = -(id + 1) 2^40 - 12345, one id per list of pieces (interned by content, so equal
 * placeholders are equal lists), n the pieces' total length (the local size). Every rule that
 * only compares ranges and carries them along a label (a `batch` label, a sum's cover) is
 * right for any index set, so it stays right for the placeholder; a rule that computes with a
 * bound (a reshape's flat offsets, a chunk of a range, a narrowing) would compute nonsense
 * from it, and `restripe` refuses every result holding a bound below 0 or past 2^39 that is not
 * a placeholder. Covers (which addends a tensor holds) are rewritten to the pieces themselves,
 * so that covers from different ranks unite as ranges do. Per template the pieces may be affine
 * in the coordinates (a zig-zag chunk of a micro-batch's rows moves with dp): they are interned
 * by their functions, so equal placeholders are equal at every rank, and the two places that
 * move values between coordinates substitute the pieces (`substRange`, for frames.ts
 * substValue) or read their axes (`rangeAxes`, for a group sum's "region does not move").
 */
import type { LineageNF } from '../../../lineage/model.js';
import { iadd, iaxes, icmp, iconst, ikey, imul, isub, type Int } from './sym.js';
import { claimRelation, isPack, isRouted, isSoftmax, isSum, type Comp, type Derived, type Range, type Relation } from './relations.js';

const SPAN = 2 ** 40;
/**
 * Odd offset of every placeholder: arithmetic a rule does on bounds (k P + c, a flat offset, a
 * sum of two bounds) keeps it only when the coefficients of placeholders sum to 1, so a
 * computed bound is not read as some other placeholder.
 */
const MAGIC = 12345;
/** Distinct stripe lists a process interns (placeholders stay within the safe integers). */
const MAX_STRIPES = 4000;
const table: { readonly pieces: readonly Range[]; readonly len: number }[] = [];
const byKey = new Map<string, number>();

/** Pieces of one dim in local order, contiguous neighbours merged: one range, a placeholder, or why neither. */
export function stripeRange(pieces0: readonly Range[]): Range | string {
  const pieces: [Int, Int][] = [];
  for (const [a, b] of pieces0) {
    const p = stripeOf([a, b]);
    if (p !== undefined) {
      for (const q of p) pieces.push([q[0], q[1]]);
      continue;
    }
    // Lengths are constants; order and disjointness are decided as functions (icmp: constant differences).
    const n = iconst(isub(b, a));
    if (wild(a) || wild(b) || n === undefined || n <= 0) return 'a striped region with an empty, varying or out-of-range piece';
    const last = pieces[pieces.length - 1];
    if (last !== undefined && last[1] === a) last[1] = b;
    else pieces.push([a, b]);
  }
  const first = pieces[0];
  if (first === undefined) return 'an empty striped region';
  if (pieces.length === 1) return first;
  // Disjoint pieces (a sum over them counts each index once), at every rank.
  for (let i = 0; i < pieces.length; i++)
    for (let j = i + 1; j < pieces.length; j++) {
      const [a, b] = pieces[i] as [Int, Int];
      const [c, d] = pieces[j] as [Int, Int];
      const before = icmp(b, c);
      const after = icmp(d, a);
      if (before === undefined || after === undefined || (before > 0 && after > 0)) return 'a striped region whose pieces overlap (or may, at some rank)';
    }
  const key = pieces.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',');
  let id = byKey.get(key);
  if (id === undefined) {
    if (table.length >= MAX_STRIPES) return `more than ${MAX_STRIPES} distinct striped regions`;
    id = table.length;
    table.push({ pieces, len: pieces.reduce((s, [a, b]) => s + (iconst(isub(b, a)) as number), 0) });
    byKey.set(key, id);
  }
  const p = -(id + 1) * SPAN - MAGIC;
  return [p, p + (table[id] as { len: number }).len];
}

/** The pieces a placeholder stands for (local order), or undefined for any other range. */
export function stripeOf([a, b]: Range): readonly Range[] | undefined {
  if (typeof a !== 'number' || typeof b !== 'number' || a >= 0 || (a + MAGIC) % SPAN !== 0) return undefined;
  const e = table[-(a + MAGIC) / SPAN - 1];
  return e !== undefined && b - a === e.len ? e.pieces : undefined;
}

/** A bound no legitimate region has: what arithmetic on a placeholder gives. */
function wild(a: Int): boolean {
  const v = typeof a === 'number' ? a : a.v;
  return v < 0 || v >= SPAN / 2;
}

/** A range at the member whose coordinates `sub` substitutes: a placeholder's pieces are substituted and interned again. */
export function substRange(rg: Range, sub: (a: Int) => Int): Range {
  const p = stripeOf(rg);
  if (p === undefined) return [sub(rg[0]), sub(rg[1])];
  const r = stripeRange(p.map(([a, b]) => [sub(a), sub(b)] as Range));
  // Substitution keeps lengths and order (the same affine differences): never a reason here.
  if (typeof r === 'string') throw new Error(`striped region at a member: ${r}`);
  return r;
}

/** The mesh axes a range moves with, a placeholder's pieces' included. */
export function rangeAxes(rg: Range): number[] {
  return (stripeOf(rg) ?? [rg]).flatMap(([a, b]) => [...iaxes(a), ...iaxes(b)]);
}

/** A range no rule may hold: a bound out of [0, 2^39) that is not a placeholder. */
export function badRange(rg: Range): boolean {
  return (wild(rg[0]) || wild(rg[1])) && stripeOf(rg) === undefined;
}

/** A claim's normal form with each striped dim as its placeholder pair (numbers, as the claim's other ranges). */
function stripedNF(nf: LineageNF): LineageNF | string {
  if (nf.ranges.every((r) => r.length === 2)) return nf;
  const ranges: (readonly number[])[] = [];
  for (const r of nf.ranges) {
    if (r.length === 2) {
      ranges.push(r);
      continue;
    }
    const pieces: Range[] = [];
    for (let i = 0; i + 1 < r.length; i += 2) pieces.push([r[i] as number, r[i + 1] as number]);
    const rg = stripeRange(pieces);
    if (typeof rg === 'string') return rg;
    ranges.push([rg[0] as number, rg[1] as number]);
  }
  return { ...nf, ranges };
}

/** The relation a claim states, striped dims as placeholders. */
export function claimWithStripes(nf: LineageNF): Relation | string {
  const s = stripedNF(nf);
  return typeof s === 'string' ? s : claimRelation(s);
}

/** A striped region as text (messages). */
export function showRange(rg: Range, show: (a: Int) => string): string {
  const p = stripeOf(rg);
  return p === undefined ? `${show(rg[0])}:${show(rg[1])}` : p.map(([a, b]) => `${show(a)}:${show(b)}`).join('+');
}

/**
 * A rule's result made honest about stripes: placeholders in ranges stay (they are what the
 * rule carried), placeholders in covers become their pieces (ascending), and any other bound
 * outside [0, 2^39) is a rule computing with a placeholder: refused.
 */
export function restripe(d: Derived): Derived {
  if (typeof d === 'string') return d;
  if (isRouted(d)) return [...d.region, ...d.blocks].some(([a, b]) => wild(a) || wild(b)) ? 'a striped region in a routed buffer' : d;
  const rel = (r: Relation): Relation | string => {
    for (const rg of r.ranges) if (badRange(rg)) return 'a rule computed with a striped region (several ranges along one dim)';
    if (r.part === undefined || !r.part.comps.some((c) => c.kind === 'range' && c.cover.some(wild))) return r;
    const comps: Comp[] = [];
    for (const c of r.part.comps) {
      if (c.kind !== 'range' || !c.cover.some(wild)) {
        comps.push(c);
        continue;
      }
      const pairs: (readonly [Int, Int])[] = [];
      for (let i = 0; i + 1 < c.cover.length; i += 2) {
        const rg: Range = [c.cover[i] as Int, c.cover[i + 1] as Int];
        const p = stripeOf(rg);
        if (p !== undefined) pairs.push(...p);
        else if (wild(rg[0]) || wild(rg[1])) return 'a rule computed with a striped region (several ranges along one dim)';
        else pairs.push(rg);
      }
      // Ascending, so that equal sets have equal covers (unionCover orders them the same way).
      if (pairs.some(([a]) => icmp(a, (pairs[0] as Range)[0]) === undefined)) return 'a striped cover whose order depends on the coordinates';
      pairs.sort((x, y) => icmp(x[0], y[0]) as number);
      comps.push({ ...c, cover: pairs.flatMap(([a, b]) => [a, b]) });
    }
    return { ...r, part: { ...r.part, comps } };
  };
  // Softmax statistics hold plain rows and keys only (ring.ts never builds them from pieces).
  if (isSoftmax(d)) return d.rows.some(([a, b]) => wild(a) || wild(b)) || d.keys.some(wild) ? 'softmax statistics over a striped region' : d;
  if (isPack(d)) {
    const items: Relation[] = [];
    for (const t of d.items) {
      const x = rel(t);
      if (typeof x === 'string') return x;
      items.push(x);
    }
    return { ...d, items };
  }
  if (isSum(d)) {
    const terms: Relation[] = [];
    for (const t of d.terms) {
      const x = rel(t);
      if (typeof x === 'string') return x;
      terms.push(x);
    }
    return { terms };
  }
  return rel(d);
}

/**
 * Slices of one value, equal outside dim d, side by side along d in order (an all-gather, a
 * concat): the value at the union of their ranges in that order, striped when they are not
 * contiguous. Each local index along d then holds the logical index of its piece.
 */
export function concatStripes(present: readonly Relation[], d: number): Relation | string {
  const first = present[0] as Relation;
  for (const x of present) {
    if (x.logical !== first.logical || x.part !== undefined || x.bcast !== undefined || x.scale.num !== first.scale.num || x.scale.den !== first.scale.den) return 'slices that are not of one value';
    if (x.ranges.some((rg, i) => i !== d && (rg[0] !== (first.ranges[i] as Range)[0] || rg[1] !== (first.ranges[i] as Range)[1]))) return `slices that differ outside dim ${d}`;
  }
  const rg = stripeRange(present.map((x) => x.ranges[d] as Range));
  if (typeof rg === 'string') return rg;
  return { logical: first.logical, scale: first.scale, ranges: first.ranges.map((x, i) => (i === d ? rg : x)) };
}

/**
 * Member me's chunk of g along a striped range (a reduce-scatter of the local positions): the
 * logical indices at local positions [me w, (me + 1) w), w = n / g. Per rank (me a number) the
 * window is mapped through the pieces; per template (me affine) only when the chunks are the
 * pieces themselves, equally long and equally spaced (s_j = s_0 + j delta: chunk me starts at
 * s_0 + me delta, affine in me), or when `within` (me's least and largest value on the
 * current box) keeps every window inside one piece.
 */
export function stripeChunk(rg: Range, g: number, me: Int, within?: { readonly lo: number; readonly hi: number }): Range | string | undefined {
  const pieces = stripeOf(rg);
  if (pieces === undefined) return undefined;
  const n = iconst(isub(rg[1], rg[0])) as number;
  if (n % g !== 0) return 'reduce_scatter of a striped region not divisible by the group';
  const w = n / g;
  if (typeof me === 'number') {
    const lo = me * w;
    const out: Range[] = [];
    let off = 0;
    for (const [a, b] of pieces) {
      const len = iconst(isub(b, a)) as number;
      const s = Math.max(lo, off);
      const e = Math.min(lo + w, off + len);
      if (s < e) out.push([iadd(a, s - off), iadd(a, e - off)]);
      off += len;
    }
    return stripeRange(out);
  }
  // Per piece of a program cut into pieces (pieces.ts): when me's every value on the piece
  // ([lo, hi]) puts its window inside one stripe k, the chunk is that stripe's positions
  // me w - off_k on: affine in me, and what the numeric branch above gives at each me.
  if (within !== undefined) {
    let off = 0;
    for (const [a, b] of pieces) {
      const len = iconst(isub(b, a));
      if (len === undefined) break;
      if (within.lo * w >= off && (within.hi + 1) * w <= off + len) {
        const at = imul(me, w);
        if (at === undefined) break;
        const lo = iadd(iadd(a, -off), at);
        return [lo, iadd(lo, w)];
      }
      off += len;
    }
  }
  const s0 = (pieces[0] as Range)[0];
  const delta = pieces.length > 1 ? iconst(isub((pieces[1] as Range)[0], s0)) : 0;
  if (delta === undefined || pieces.length !== g || pieces.some(([a, b], j) => iconst(isub(b, a)) !== w || iconst(isub(a, s0)) !== j * delta)) return 'reduce_scatter of a striped region whose chunks are not its pieces';
  const off = imul(me, delta);
  if (off === undefined) return 'reduce_scatter of a striped region';
  const lo = iadd(s0, off);
  return [lo, iadd(lo, w)];
}


/** A layout op's region map over the logical shapes: a piece's region to its output block, or why not. */
export type LogicalMap = (rs: readonly Range[]) => readonly Range[] | string;
/** The same map over the local shapes: a piece's local positions to its local output block. */
export type LocalMap = (inShape: readonly number[], rs: [number, number][]) => readonly (readonly [number, number])[] | string;

/** Local sizes of a region (its ranges' lengths), or undefined when one varies. */
function localSizes(ranges: readonly Range[]): number[] | undefined {
  const out: number[] = [];
  for (const [a, b] of ranges) {
    const n = iconst(isub(b, a));
    if (n === undefined) return undefined;
    out.push(n);
  }
  return out;
}

/**
 * A layout op with a region map (OpDef.sliceRegions: reshape) on a striped input, piece by
 * piece: piece j's region of the logical input maps to a block O_j of the logical output
 * (`logical`), and the local positions of piece j map to a block O'_j of the local output
 * (`local`, the same map over the local shapes). Accepted when every O'_j is full but along one
 * output dim e, where it is piece j's local positions, and every O_j has that length along e
 * and is the same elsewhere. Then each local block is the row-major reshape of the same
 * elements (the piece's) to the same block shape as its logical block, and the blocks sit along
 * e in piece order: the output is O_0 with the ranges O_j[e] as the pieces along e (a merged
 * row offset moves them: sample b's chunk [s, e) is [b S + s, b S + e) of the flat rows).
 */
export function stripedLayout(
  ranges: readonly Range[],
  sd: number,
  outShape: readonly number[],
  logical: LogicalMap,
  local: LocalMap,
): Range[] | string {
  const pieces = stripeOf(ranges[sd] as Range);
  if (pieces === undefined) return 'no striped dim';
  const localIn = localSizes(ranges);
  if (localIn === undefined) return 'a region of varying size';
  const ps: LayoutPiece[] = [];
  let off = 0;
  for (const [a, b] of pieces) {
    const len = iconst(isub(b, a)) as number;
    ps.push({ logical: ranges.map((rg, i) => (i === sd ? ([a, b] as Range) : rg)), local: localIn.map((n, i) => (i === sd ? [off, off + len] : [0, n])) });
    off += len;
  }
  const out = piecewiseLayout(ps, localIn, outShape, logical, local);
  // A split that takes the pieces apart (heads merged with the batch, split back): one box.
  return typeof out === 'string' && out === MOVES ? (joinedLayout(ps, localIn, outShape, logical, local) ?? out) : out;
}

/**
 * A layout op on a plain region that one range per output dim cannot state: a merge whose inner
 * dim is sliced (Megatron's [s, b, heads/tp, d] -> [s, b·heads/tp, d]). Dim `d` of the input
 * is taken index by index: index i is a block of the merged dim, and the output is striped
 * along it, the blocks in index order (as stripedLayout). Undefined when this does not apply.
 */
export function mergedLayout(
  ranges: readonly Range[],
  outShape: readonly number[],
  logical: LogicalMap,
  local: LocalMap,
): Range[] | undefined {
  const localIn = localSizes(ranges);
  if (localIn === undefined || ranges.some(([a]) => typeof a !== 'number')) return undefined;
  for (let d = 0; d < ranges.length; d++) {
    const n = localIn[d] as number;
    const a = (ranges[d] as Range)[0] as number;
    if (n < 2 || n > MAX_MERGED_PIECES) continue;
    const ps: LayoutPiece[] = [];
    for (let i = 0; i < n; i++) ps.push({ logical: ranges.map((rg, k) => (k === d ? ([a + i, a + i + 1] as Range) : rg)), local: localIn.map((m, k) => (k === d ? [i, i + 1] : [0, m])) });
    const out = piecewiseLayout(ps, localIn, outShape, logical, local);
    if (typeof out !== 'string') return out;
  }
  return undefined;
}

/** Most indices mergedLayout takes one by one (each is a layout computation). */
const MAX_MERGED_PIECES = 4096;
const MOVES = 'a layout op that moves a striped dim into others';

/** One piece of a layout op's input: its region of the logical input and its local positions. */
interface LayoutPiece {
  readonly logical: readonly Range[];
  readonly local: [number, number][];
}

/** stripedLayout's rule over any list of pieces in local order. */
function piecewiseLayout(
  pieces: readonly LayoutPiece[],
  localIn: readonly number[],
  outShape: readonly number[],
  logical: LogicalMap,
  local: LocalMap,
): Range[] | string {
  let e = -1;
  let base: readonly Range[] | undefined;
  const outPieces: Range[] = [];
  let off = 0;
  for (const p of pieces) {
    const o = logical(p.logical);
    if (typeof o === 'string') return o;
    const lo = local(localIn, p.local);
    if (typeof lo === 'string') return lo;
    const cut = lo.flatMap(([x, y], i) => (x === 0 && y === outShape[i] ? [] : [i]));
    const c = cut[0];
    const len = c === undefined ? 0 : ((lo[c] as readonly number[])[1] as number) - ((lo[c] as readonly number[])[0] as number);
    if (cut.length !== 1 || c === undefined || (e >= 0 && c !== e) || (lo[c] as readonly number[])[0] !== off) return MOVES;
    e = c;
    const oc = o[c] as Range;
    if (iconst(isub(oc[1], oc[0])) !== len) return 'a layout op that maps a piece of a striped dim to a block of another size';
    outPieces.push(oc);
    if (base !== undefined && o.some((rg, i) => i !== c && (rg[0] !== (base as readonly Range[])[i]?.[0] || rg[1] !== (base as readonly Range[])[i]?.[1]))) return 'a layout op whose pieces land in different blocks';
    base ??= o;
    off += len;
  }
  if (base === undefined) return 'no pieces';
  const rg = stripeRange(outPieces);
  if (typeof rg === 'string') return rg;
  return base.map((x, i) => (i === e ? rg : x));
}

/**
 * Pieces that a layout op puts back together: piece j's local block and logical block are the
 * same block shape, differ from piece 0's only along one output dim c, and follow each other
 * along c (local [j u, (j + 1) u), logical [o + j u, o + (j + 1) u)); their local blocks fill
 * the output. Then the output is one logical box: [o, o + J u) along c, piece 0's elsewhere.
 */
function joinedLayout(
  pieces: readonly LayoutPiece[],
  localIn: readonly number[],
  outShape: readonly number[],
  logical: LogicalMap,
  local: LocalMap,
): Range[] | undefined {
  const os: (readonly Range[])[] = [];
  const los: (readonly (readonly [number, number])[])[] = [];
  for (const p of pieces) {
    const o = logical(p.logical);
    const lo = local(localIn, p.local);
    if (typeof o === 'string' || typeof lo === 'string' || lo.length !== outShape.length || o.length !== lo.length) return undefined;
    os.push(o);
    los.push(lo);
  }
  const o0 = os[0];
  const l0 = los[0];
  if (o0 === undefined || l0 === undefined || pieces.length < 2) return undefined;
  const differs = l0.flatMap((_, i) => (los.some((l) => (l[i] as readonly number[])[0] !== (l0[i] as readonly number[])[0]) ? [i] : []));
  const c = differs[0];
  if (differs.length !== 1 || c === undefined) return undefined;
  const u = ((l0[c] as readonly number[])[1] as number) - ((l0[c] as readonly number[])[0] as number);
  const start = (o0[c] as Range)[0];
  if (typeof start !== 'number') return undefined;
  for (let j = 0; j < pieces.length; j++) {
    const o = os[j] as readonly Range[];
    const lo = los[j] as readonly (readonly [number, number])[];
    for (let i = 0; i < lo.length; i++) {
      const [la, lb] = lo[i] as readonly [number, number];
      const [oa, ob] = o[i] as Range;
      if (i === c) {
        if (la !== j * u || lb !== (j + 1) * u || oa !== start + j * u || ob !== start + (j + 1) * u) return undefined;
      } else if (la !== 0 || lb !== outShape[i] || oa !== (o0[i] as Range)[0] || ob !== (o0[i] as Range)[1] || iconst(isub(ob, oa)) !== lb) return undefined;
    }
  }
  if (pieces.length * u !== outShape[c]) return undefined;
  return o0.map((x, i) => (i === c ? ([start, start + pieces.length * u] as Range) : x));
}

/**
 * The local window [off, off + w) of a region held along one dim (its pieces in local order
 * when striped): the logical pieces it covers, in order, as one range (striped when several).
 * Undefined when a piece's length depends on the coordinates.
 */
export function windowOf(rg: Range, off: number, w: number): Range | undefined {
  const pieces = stripeOf(rg) ?? [rg];
  const out: Range[] = [];
  let at = 0;
  for (const [a, b] of pieces) {
    const len = iconst(isub(b, a));
    if (len === undefined) return undefined;
    const s = Math.max(off, at);
    const e = Math.min(off + w, at + len);
    if (s < e) out.push([iadd(a, s - at), iadd(a, e - at)]);
    at += len;
  }
  const nr = stripeRange(out);
  return typeof nr === 'string' ? undefined : nr;
}
