/**
 * Tensor-level rules for ring attention (context parallelism; docs/engine.md, "Tensor-level
 * proofs", rule 14): attention_partial over one key block is the online-softmax statistics of
 * the logical attention restricted to those keys (`Softmax`), attention_combine of two blocks
 * with disjoint keys is the statistics over their union, and statistics over every key the rows
 * can see give the logical output's rows; attention_partial_backward with those complete
 * statistics is one addend of the logical attention_backward's outputs (dq summed over the
 * block's keys, dk and dv over its queries). Also the packaging ring attention uses around its
 * sends: a split of a region (plain or striped) and a concat of values that are no one region
 * (`Pack`), read back only by a split at its items.
 */
import { registry } from '../../../ops/registry.js';
import type { Attrs, OpDef, Shape } from '../../../ops/types.js';
import { type Range, ONE, feq, type Comp, type Part, type Relation, type Softmax, type Pack, type Value, type Derived, isSum, isSoftmax, isPack, isOpaque, isMaxPart, attrsKey, coversAll, dimAttr, unionCover } from './relations.js';
import { SliceRules } from './slices.js';
import { stripeOf, windowOf } from './stripes.js';
import { iadd, icmp, iscale, isub, type Int } from './sym.js';
import type { OpRef } from './world.js';

/** One block of a ring step: the logical attention, the rows it computes and the keys it reads. */
interface Block {
  readonly op: number;
  /** Batch dims, query heads, query positions Q (of the logical output's leading dims). */
  readonly rows: readonly Range[];
  /** Batch dims, kv heads, key positions K. */
  readonly kv: readonly Range[];
  /** The keys whose sum the block is, extended by keys no row of Q can see (cover, [s, e)). */
  readonly keys: readonly Int[];
  /** The queries whose sum dk / dv of the block is, extended by queries that see no key of K. */
  readonly queries: readonly Int[];
  readonly sk: number;
  readonly sq: number;
  readonly d: number;
  readonly dv: number;
}

const eq = (a: Int, b: Int): boolean => icmp(a, b) === 0;
const sameRanges = (a: readonly Range[], b: readonly Range[]): boolean => a.length === b.length && a.every((x, i) => eq(x[0], (b[i] as Range)[0]) && eq(x[1], (b[i] as Range)[1]));
const sameCover = (a: readonly Int[], b: readonly Int[]): boolean => a.length === b.length && a.every((x, i) => eq(x, b[i] as Int));
const plainRel = (v: Value | undefined): v is Relation => v !== undefined && !isSum(v) && !isOpaque(v) && v.part === undefined && v.bcast === undefined && feq(v.scale, ONE);

/** The pack's item at local positions [off, off + n) along its dim, if one is exactly there. */
function itemAt(x: Pack, off: number, n: number): Relation | undefined {
  let at = 0;
  for (let i = 0; i < x.items.length; i++) {
    const m = x.sizes[i] as number;
    if (at === off && m === n) return x.items[i] as Relation;
    at += m;
  }
  return undefined;
}

export abstract class RingRules extends SliceRules {
  private kinds: { attn: number; bwd: number } | undefined;

  /**
   * Ring attention's ops and a split of a pack; undefined when the op is none of them (the
   * other rules apply). A string: the rule applied and refused.
   */
  protected ringOp(r: number, op: number, k: number, def: OpDef, vals: readonly Value[], attrs: Attrs, outShape: Shape): Derived | undefined {
    if (def.name === 'split' && vals.length === 1 && isPack(vals[0] as Value)) return this.splitPack(vals[0] as Pack, attrs, k, outShape);
    if (def.name === 'slice' && vals.length === 1 && isPack(vals[0] as Value)) return this.slicePack(vals[0] as Pack, attrs, outShape);
    if (def.name === 'attention_partial') return this.partial(r, op, k, vals, attrs);
    if (def.name === 'attention_combine') return this.combineStats(k, vals);
    if (def.name === 'attention_partial_backward') return this.partialBackward(r, op, k, vals, attrs);
    return undefined;
  }

  private attnKinds(): { attn: number; bwd: number } {
    this.kinds ??= { attn: registry.id('attention'), bwd: registry.id('attention_backward') };
    return this.kinds;
  }

  /**
   * q, k, v as one block of a logical attention op A = attention(q_L, k_L, v_L): batch dims
   * alike, query heads the groups of the kv heads, head dims whole, one range of query and one
   * of key positions; the block's mask must be A's restricted to the block, and every row must
   * see at least one key of it (attention_partial refuses an empty row). See docs/engine.md.
   */
  private block(r: number, op: number, q: Value | undefined, kk: Value | undefined, v: Value | undefined, attrs: Attrs): Block | string {
    if (!plainRel(q) || !plainRel(kk) || !plainRel(v)) return 'ring attention of inputs that are not whole regions of one logical tensor each';
    const w = this.world;
    const cands = w.index.get(`${this.attnKinds().attn}|${q.logical},${kk.logical},${v.logical}`) ?? [];
    const n = q.ranges.length;
    const qs = w.shape(q.logical);
    const ks = w.shape(kk.logical);
    const vs = w.shape(v.logical);
    if (n < 3 || kk.ranges.length !== n || v.ranges.length !== n) return 'ring attention inputs of different ranks';
    for (const A of cands) {
      const o = w.ops[A] as OpRef;
      if (!o.factors.every((f) => feq(f, ONE))) continue;
      // The score scale is A's (its default reads the head dim, whole on both sides).
      if (attrsKey({ scale: o.attrs['scale'] ?? null }) !== attrsKey({ scale: attrs['scale'] ?? null })) continue;
      if ((o.attrs['q_offset'] ?? 0) !== 0 || (o.attrs['k_offset'] ?? 0) !== 0) continue;
      const hq = qs[n - 3] as number;
      const hk = ks[n - 3] as number;
      const g = hq / hk;
      const [sq, sk, d, dv] = [qs[n - 2] as number, ks[n - 2] as number, qs[n - 1] as number, vs[n - 1] as number];
      for (let i = 0; i < n - 3; i++) if (!sameRanges([q.ranges[i] as Range], [kk.ranges[i] as Range]) || !sameRanges([q.ranges[i] as Range], [v.ranges[i] as Range])) return 'ring attention: q, k and v hold different batch rows';
      const [qh, kh, vh] = [q.ranges[n - 3] as Range, kk.ranges[n - 3] as Range, v.ranges[n - 3] as Range];
      if (!Number.isInteger(g) || !eq(qh[0], iscale(kh[0], g)) || !eq(qh[1], iscale(kh[1], g)) || !sameRanges([kh], [vh])) return 'ring attention: query heads that are not the groups of the kv heads';
      if (!sameRanges([q.ranges[n - 1] as Range, kk.ranges[n - 1] as Range, v.ranges[n - 1] as Range], [[0, d], [0, d], [0, dv]])) return 'ring attention: a head dim sliced';
      const Q = q.ranges[n - 2] as Range;
      const K = kk.ranges[n - 2] as Range;
      if (!sameRanges([K], [v.ranges[n - 2] as Range])) return 'ring attention: k and v hold different positions';
      if (stripeOf(Q) !== undefined || stripeOf(K) !== undefined) return 'ring attention over a striped block (split it into its chunks first)';
      let keys: Int[] = [K[0], K[1]];
      let queries: Int[] = [Q[0], Q[1]];
      const causal = attrs['causal'] === true;
      if (o.attrs['causal'] !== true) {
        if (causal) return "ring attention: a causal block of a logical attention that is not causal";
      } else {
        if (sq !== sk) return 'ring attention: a causal attention with queries and keys of different lengths';
        if (causal) {
          // Local mask j + k_off <= i + q_off is the global j <= i iff q_off - Q0 = k_off - K0,
          // and row Q0 sees key K0 (so every row sees one) iff K0 <= Q0.
          const qo = attrs['q_offset'] === undefined ? 0 : this.attrInt(r, op, 'q_offset');
          const ko = attrs['k_offset'] === undefined ? 0 : this.attrInt(r, op, 'k_offset');
          if (qo === undefined || ko === undefined) return 'ring attention: causal offsets not known';
          if (!eq(isub(qo, Q[0]), isub(ko, K[0]))) return 'ring attention: a causal block whose mask is not the global one (offsets)';
          if ((icmp(K[0], Q[0]) ?? 1) > 0) return 'ring attention: a causal block with a row that sees no key';
        } else if ((icmp(K[1], iadd(Q[0], 1)) ?? 1) > 0) {
          // Unmasked: every key of the block must be visible from every row (j <= i).
          return 'ring attention: an unmasked block holding keys some rows must not see';
        }
        // Keys from Q1 on are seen by no row of Q; queries before K0 see no key of K.
        if ((icmp(K[1], Q[1]) ?? -1) >= 0) keys = [K[0], sk];
        if ((icmp(Q[0], K[0]) ?? 1) <= 0) queries = [0, Q[1]];
      }
      const rows = [...q.ranges.slice(0, n - 3), qh, Q];
      const kv = [...kk.ranges.slice(0, n - 3), kh, K];
      return { op: A, rows, kv, keys, queries, sk, sq, d, dv };
    }
    return `no logical attention reads ${w.name(q.logical)}, ${w.name(kk.logical)}, ${w.name(v.logical)} with these attributes`;
  }

  /** Statistics of a block, or (the output, over every key) the logical output's rows. */
  private stats(b: { op: number; rows: readonly Range[]; keys: readonly Int[]; sk: number; dv: number }, out: number): Derived {
    const complete = b.keys.length === 2 && eq(b.keys[0] as Int, 0) && eq(b.keys[1] as Int, b.sk);
    if (out === 0 && complete) {
      const [id, f] = this.world.canon((this.world.ops[b.op] as OpRef).outputs[0] as number);
      return { logical: id, ranges: [...b.rows, [0, b.dv]], scale: f };
    }
    const s: Softmax = { softmax: true, op: b.op, out, rows: b.rows, keys: b.keys };
    return s;
  }

  private partial(r: number, op: number, k: number, vals: readonly Value[], attrs: Attrs): Derived {
    const b = this.block(r, op, vals[0], vals[1], vals[2], attrs);
    return typeof b === 'string' ? b : this.stats(b, k);
  }

  /** attention_combine of (o, m, l) over keys K1 and over keys K2, disjoint: over K1 u K2. */
  private combineStats(k: number, vals: readonly Value[]): Derived {
    if (vals.length !== 6 || !vals.every(isSoftmax)) return 'attention_combine of values that are not one block\'s statistics each';
    const s = vals as readonly Softmax[];
    const [a, b] = [s[0] as Softmax, s[3] as Softmax];
    for (let i = 0; i < 6; i++) {
      const x = s[i] as Softmax;
      const ref = i < 3 ? a : b;
      if (x.out !== i % 3 || x.op !== a.op || !sameRanges(x.rows, a.rows) || !sameCover(x.keys, ref.keys)) return 'attention_combine of statistics that are not (output, max, sum) of one block each, of one attention and rows';
    }
    const keys = unionCover('range', a.keys, b.keys);
    if (keys === undefined) return 'attention_combine of blocks whose keys overlap';
    const o = this.world.ops[a.op] as OpRef;
    const ks = this.world.shape(o.inputs[1] as number);
    const vs = this.world.shape(o.inputs[2] as number);
    return this.stats({ op: a.op, rows: a.rows, keys, sk: ks[ks.length - 2] as number, dv: vs[vs.length - 1] as number }, k);
  }

  /**
   * attention_partial_backward(g, q, k, v, o, m, l) of one block, with o the logical output's
   * rows and (m, l) the statistics over every key: P = exp(s - m) / l is the logical softmax at
   * the block, so dq is the addend over the block's keys of the logical dq rows, and dk, dv the
   * addends over its queries of the logical dk, dv rows of its keys.
   */
  private partialBackward(r: number, op: number, k: number, vals: readonly Value[], attrs: Attrs): Derived {
    if (vals.length !== 7) return 'attention_partial_backward without its seven inputs';
    const b = this.block(r, op, vals[1], vals[2], vals[3], attrs);
    if (typeof b === 'string') return b;
    const [g, o, m, l] = [vals[0], vals[4], vals[5], vals[6]];
    const w = this.world;
    const A = w.ops[b.op] as OpRef;
    const [oid, of] = w.canon(A.outputs[0] as number);
    const outRows = [...b.rows, [0, b.dv] as Range];
    if (!plainRel(g) || !sameRanges(g.ranges, outRows)) return 'attention_partial_backward: the output gradient is not the block rows of one tensor';
    if (!plainRel(o) || o.logical !== oid || !feq(of, ONE) || !sameRanges(o.ranges, outRows)) return 'attention_partial_backward: the output is not the logical attention output at the block rows';
    for (const [x, out] of [[m, 1], [l, 2]] as const) {
      if (x === undefined || !isSoftmax(x) || x.op !== b.op || x.out !== out || !sameRanges(x.rows, b.rows) || !(x.keys.length === 2 && eq(x.keys[0] as Int, 0) && eq(x.keys[1] as Int, b.sk))) return 'attention_partial_backward: row statistics that are not over every key of these rows';
    }
    const bwd = (w.index.get(`${this.attnKinds().bwd}|${g.logical},${A.inputs.join(',')},${oid}`) ?? []).find((x) => {
      const B = w.ops[x] as OpRef;
      return B.factors.every((f) => feq(f, ONE)) && attrsKey(B.attrs) === attrsKey(A.attrs);
    });
    if (bwd === undefined) return `no logical attention_backward reads ${w.name(g.logical)} and the attention's inputs and output`;
    const [id, f] = w.canon((w.ops[bwd] as OpRef).outputs[k] as number);
    const n = b.rows.length + 1;
    const comp: Comp = k === 0 ? { kind: 'range', cover: b.keys, total: b.sk } : { kind: 'range', cover: b.queries, total: b.sq };
    const ranges = k === 0 ? [...b.rows, [0, b.d] as Range] : [...b.kv, [0, k === 1 ? b.d : b.dv] as Range];
    if (ranges.length !== n) return 'attention_partial_backward: ranks differ';
    // A block whose cover is every key (query) is the whole value: the rest add zero.
    const part: Part = { key: `ring|${bwd}|${k}`, comps: [comp] };
    return coversAll(part) ? { logical: id, ranges, scale: f } : { logical: id, ranges, scale: f, part };
  }

  /** A concat of relations that are no one region: a pack (read only by a split at its items). */
  protected packOf(ins: readonly Value[], local: readonly Shape[], attrs: Attrs, outShape: Shape): Pack | string {
    const dim = dimAttr(attrs, 'dim', outShape.length);
    if (dim === undefined) return 'a concat without a dim';
    const items: Relation[] = [];
    for (const x of ins) {
      if (isSum(x) || isOpaque(x) || x.bcast !== undefined || isMaxPart(x)) return 'a concat of values that are not relations';
      items.push(x);
    }
    return { pack: true, dim, items, sizes: local.map((s) => s[dim] as number) };
  }

  private splitPack(x: Pack, attrs: Attrs, k: number, outShape: Shape): Derived {
    const dim = dimAttr(attrs, 'dim', outShape.length);
    const sizes = attrs['sizes'];
    if (dim !== x.dim || !Array.isArray(sizes)) return 'a split of a pack along another dim';
    let off = 0;
    for (let i = 0; i < k; i++) off += Number(sizes[i]);
    return itemAt(x, off, outShape[dim] as number) ?? 'a split of a pack not at its items';
  }

  /**
   * A slice of a pack at one item's bounds (`buf[off:off + n]` after Megatron's coalesced
   * gradient all-reduce, torch's `_unflatten_dense_tensors`): that item. Any other slice is refused.
   */
  private slicePack(x: Pack, attrs: Attrs, outShape: Shape): Derived {
    const dim = dimAttr(attrs, 'dim', outShape.length);
    const start = attrs['start'];
    const end = attrs['end'];
    if (dim !== x.dim || typeof start !== 'number' || typeof end !== 'number') return 'a slice of a pack along another dim';
    return itemAt(x, start, end - start) ?? 'a slice of a pack not at its items';
  }

  /**
   * Output k of a split along dim of a region with no logical counterpart: the local window
   * [off, off + size) mapped through the region's range there (its pieces when striped).
   */
  protected splitRel(x: Value, inShape: Shape, attrs: Attrs, k: number, outShape: Shape): Relation | undefined {
    if (isSum(x) || isOpaque(x) || x.bcast !== undefined || isMaxPart(x)) return undefined;
    const dim = dimAttr(attrs, 'dim', inShape.length);
    const sizes = attrs['sizes'];
    if (dim === undefined || !Array.isArray(sizes) || inShape.length !== x.ranges.length) return undefined;
    let off = 0;
    for (let i = 0; i < k; i++) off += Number(sizes[i]);
    const nr = windowOf(x.ranges[dim] as Range, off, outShape[dim] as number);
    if (nr === undefined) return undefined;
    const c = this.checked({ ...x, ranges: x.ranges.map((q, i) => (i === dim ? nr : q)) }, outShape);
    return typeof c === 'string' ? undefined : c;
  }
}
