/**
 * Tensor-level rules for collectives: all-reduce / reduce-scatter of addends that partition a
 * value, all-gather, all-to-all, broadcast and point-to-point moving regions between ranks, and
 * region maps lifted over rank-dependent bounds (docs/engine.md, "Tensor-level proofs").
 */
import type { Attrs, Shape } from '../../../ops/types.js';
import { everyPoint, setId } from './frames.js';
import { type Range, type Frac, ONE, frac, fmul, feq, type Part, isMaxPart, type Relation, type Sum, type Value, type Derived, isSum, isRouted, isOpaque, termsOf, termKey, addTerms, sameRel, chunkOf, coversAll, unionParts, MAX_LIFT_POINTS, type Shared, type Pack, isPack } from './relations.js';
import { RoutedRules } from './routed.js';
import { concatStripes, stripeChunk } from './stripes.js';
import { iaxes, ieval, ikey, Sym, type Int } from './sym.js';


export abstract class CollectiveRules extends RoutedRules {
  protected deriveCollective(kind: string, attrs: Attrs, shared: Shared, me: Int, g: number, outShape: Shape, src: number): Derived {
    const ins = shared.ins;
    const once = (k: string, f: () => Derived): Derived => {
      const hit = shared.memo.get(k);
      if (hit !== undefined) return hit;
      const v = f();
      shared.memo.set(k, v);
      return v;
    };
    const values = ins.filter((x): x is Value => x !== undefined);
    if (values.some(isOpaque)) {
      if (kind === 'send' || kind === 'recv' || kind === 'send_recv') return me === 1 && ins[0] !== undefined ? ins[0] : 'a point-to-point transfer with no input from its sender';
      // A coalesced all-reduce (Megatron's grad buffer, DDP's bucket): packs alike on every
      // member, reduced item by item.
      if (kind === 'all_reduce' && values.every(isPack)) return once('combinePacks', () => this.combinePacks(values as Pack[], String(attrs['reduce']), g));
      if (!values.some(isRouted)) return `'${kind}' of ring attention's statistics or a pack of several values`;
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
        // A striped dim: chunk me of the local positions, mapped through the pieces (stripes.ts).
        const striped = stripeChunk(comb.ranges[d] as Range, g, me, this.pieces.size > 0 ? this.boundsOver(me) : undefined);
        if (typeof striped === 'string') return striped;
        const chunk = striped ?? chunkOf(comb.ranges[d] as Range, g, me);
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

  /** An affine value's least and largest value over the current box (this.frame), if any. */
  protected boundsOver(a: Int): { lo: number; hi: number } | undefined {
    const fr = this.frame;
    if (typeof a === 'number' || fr === undefined) return undefined;
    let lo = a.v;
    let hi = a.v;
    for (let i = 0; i < a.k.length; i++) {
      const c = a.k[i] ?? 0;
      const set = fr.sets[i];
      if (c === 0 || set === undefined || set.length === 0) continue;
      const x0 = fr.x0[i] as number;
      const e1 = c * ((set[0] as number) - x0);
      const e2 = c * ((set[set.length - 1] as number) - x0);
      lo += Math.min(e1, e2);
      hi += Math.max(e1, e2);
    }
    return { lo, hi };
  }

  protected gather(present: readonly Relation[], attrs: Attrs, outShape: Shape): Derived {
    const first = present[0] as Relation;
    const joined = this.concatAlong(present, this.normDim(attrs['dim'], first.ranges.length), 'all_gather');
    return typeof joined === 'string' ? joined : this.checked(joined, outShape);
  }

  /** all_to_all inputs: slices of one value, contiguous along concat_dim; the concatenated region. */
  protected a2aCheck(present: readonly Relation[], attrs: Attrs): Relation | string {
    const first = present[0] as Relation;
    const sd = this.normDim(attrs['split_dim'], first.ranges.length);
    const cd = this.normDim(attrs['concat_dim'], first.ranges.length);
    if (sd === cd) return 'all_to_all along one dim';
    return this.concatAlong(present, cd, 'all_to_all');
  }

  /** Whole slices of one value, equal outside dim d and contiguous along it in group order: their concatenation. */
  protected concatAlong(present: readonly Relation[], d: number, what: string): Relation | string {
    const first = present[0] as Relation;
    let end = (first.ranges[d] as Range)[0];
    for (const x of present) {
      if (x.logical !== first.logical || x.part !== undefined || x.bcast !== undefined || !feq(x.scale, first.scale)) return `${what} of inputs that are not slices of one value`;
      if (x.ranges.some((rg, i) => i !== d && (rg[0] !== (first.ranges[i] as Range)[0] || rg[1] !== (first.ranges[i] as Range)[1]))) return `${what} of slices that differ outside dim ${d}`;
      if ((x.ranges[d] as Range)[0] !== end) {
        // Not contiguous (context parallelism's zig-zag chunks): a striped region, or why not.
        const st = concatStripes(present, d);
        return typeof st === 'string' ? `${what} of slices that are not contiguous in group order (${st})` : st;
      }
      end = (x.ranges[d] as Range)[1];
    }
    return { logical: first.logical, scale: first.scale, ranges: first.ranges.map((x, i) => (i === d ? ([(first.ranges[d] as Range)[0], end] as Range) : x)) };
  }

  /**
   * all_reduce of packs (a concat of values that are no one region, ring.ts): element-wise, so
   * item i of the result is the reduction of every member's item i, when all members' packs
   * have the same dim and item sizes (the same local positions hold item i everywhere).
   */
  private combinePacks(xs: readonly Pack[], red: string, g: number): Derived {
    const first = xs[0];
    if (first === undefined || xs.length !== g) return 'a member passes no input';
    if (xs.some((x) => x.dim !== first.dim || x.sizes.length !== first.sizes.length || x.sizes.some((n, i) => n !== first.sizes[i]))) return 'all_reduce of packs whose items differ between members';
    const items: Relation[] = [];
    for (let i = 0; i < first.items.length; i++) {
      const c = this.combine(xs.map((x) => x.items[i] as Relation), red, g);
      if (typeof c === 'string') return `all_reduce of a pack, item ${i}: ${c}`;
      const m = this.materialize(c);
      if (typeof m === 'string') return `all_reduce of a pack, item ${i}: ${m}`;
      items.push(m);
    }
    return { pack: true, dim: first.dim, items, sizes: first.sizes };
  }

  /** all_reduce / reduce_scatter of the members' inputs: a partition of addends, or replicas. */
  protected combine(xs0: readonly Value[], red: string, g: number): Derived {
    if (xs0.some(isOpaque)) return `${red} over routed MoE buffers, softmax statistics or packs`;
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
  protected lifted(regs: readonly (readonly Range[])[], f: (rs: (readonly [number, number])[][]) => (readonly [number, number])[][] | string, memoKey?: string): Range[][] | string {
    const axes = [...new Set(regs.flatMap((rg) => rg.flatMap(([a, b]) => [...iaxes(a), ...iaxes(b)])))].sort((x, y) => x - y);
    const at = (x: ArrayLike<number>, x0: ArrayLike<number>): (readonly [number, number])[][] => regs.map((rg) => rg.map(([a, b]) => [ieval(a, x, x0), ieval(b, x, x0)] as const));
    if (axes.length === 0) return f(at([], []));
    const fr = this.frame;
    if (fr === undefined) return 'a rank-dependent region outside a template';
    // The same map of the same affine regions over the same box (a reshape repeated in every
    // layer and micro-batch) is checked once. The walk reads the frame only on `axes` (every
    // axis a bound has a coefficient on; elsewhere x stays at x0 and no term moves), so frames
    // that agree there share it: every pipeline stage's and cp rank's program, not one each.
    const key = memoKey === undefined ? undefined : `${memoKey}|${regs.map((rg) => rg.map(([a, b]) => `${ikey(a)}:${ikey(b)}`).join(',')).join(';')}|${axes.map((a) => `${a}@${fr.x0[a] ?? ''}:${setId(fr.sets[a])}`).join(',')}`;
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
  protected readonly liftMemo = new Map<string, Range[][] | string>();

  protected liftedWalk(
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

}
