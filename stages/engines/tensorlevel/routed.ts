/**
 * Tensor-level rules for vocabulary-parallel ops and MoE routing: ids outside a rank's vocabulary
 * range, masked lookups and their sums, and routed buffers (a routing-dependent permutation of
 * the tokens' slots) through dispatch, expert ops and combine (docs/engine.md, "Tensor-level
 * proofs").
 */
import { registry } from '../../../ops/registry.js';
import { numel, type Attrs, type DimLabel, type OpDef, type Shape } from '../../../ops/types.js';
import type { Program } from '../../../plans/model.js';
import { type Range, ONE, fmul, feq, fkey, type Relation, type Routed, type Value, type Derived, isRouted, slotKey, attrsKey, unionCover, chunkOf } from './relations.js';
import { RingRules } from './ring.js';
import { iadd, iconst, ikey, imul, isub, type Int } from './sym.js';
import type { OpRef } from './world.js';

export abstract class RoutedRules extends RingRules {
  /** All values of the logical ids lie in [0, V): a partition of [0, V) covers every id. */
  protected idsBelow(rel: Relation, V: number): string | undefined {
    const dom = this.world.domain(rel.logical);
    if (dom === undefined) return `the values of ${this.world.name(rel.logical)} are not known`;
    if (dom.length > 0 && ((dom[0] as number) < 0 || (dom[dom.length - 1] as number) >= V)) return `ids of ${this.world.name(rel.logical)} outside [0, ${V})`;
    return undefined;
  }

  /** Derived ids: a whole-valued relation (no factor, no addend). */
  protected idsRel(r: number, x: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Relation | string {
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
  protected vocabRule(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived | undefined {
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
      const oh = this.oneHotRule(r, op, t, depth, derive);
      if (oh !== undefined) return oh;
      const [c, a, b] = ins as [number, number, number];
      const m = this.vocabOf(r, c, 'outside');
      if (m === undefined || !this.zeroOf(r, a, b)) return undefined;
      // The lookup, through reshapes that keep flat positions (Megatron's [s, b] -> [s·b] views).
      const bch = this.reshapeChain(r, b);
      const lb = bch.base;
      const lop = this.prodOp(r, lb);
      const lk = lop < 0 ? undefined : registry.get(p.ops.kind[lop] as number).lookup;
      if (lk === undefined) return undefined;
      if (this.coordAttrs(r, lop)) return 'per template: a lookup whose attributes depend on the coordinates';
      const lins = [...p.ops.opInputs(lop)];
      const idx = lins[lk.index] as number;
      const tab = lins[lk.table] as number;
      const loc = this.vocabOf(r, idx, 'local');
      if (loc === undefined || loc.ids !== m.ids || loc.s !== m.s || (loc.e !== undefined && loc.e !== m.e)) return undefined;
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
      const idxLog = this.alongChain(r, X, this.reshapeChain(r, idx).ops);
      if (typeof idxLog === 'string') return idxLog;
      const whole: Relation = { ...T, ranges: T.ranges.map((x, i) => (i === td ? ([0, V] as Range) : x)) };
      const args: Relation[] = [];
      args[lk.index] = idxLog;
      args[lk.table] = whole;
      const L = this.sliced(p.ops.kind[lop] as number, args, (view.attrs[lop] ?? {}) as Attrs, 0, sh(lb), registry.get(p.ops.kind[lop] as number).name);
      if (typeof L === 'string') return L;
      if (L.part !== undefined) return 'a masked lookup of an addend';
      const out = this.alongChain(r, L, bch.ops);
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
      // g masked to inside ids: g - where(outside(ids), g, 0 x g) (autograd of `x - where`), or
      // where(outside(ids), 0, g) (autograd of `out[mask] = 0`).
      const masked = ((): { g: number; c: number } | undefined => {
        const sop = this.prodOp(r, gm);
        if (sop < 0) return undefined;
        if (p.ops.kind[sop] === this.whereKind) {
          const [c, z, g] = p.ops.opInputs(sop) as unknown as [number, number, number];
          return sh(g).join(',') === sh(gm).join(',') && this.zeroOf(r, z, g) ? { g, c } : undefined;
        }
        if (p.ops.kind[sop] !== this.subKind) return undefined;
        const [g, w] = p.ops.opInputs(sop) as unknown as [number, number];
        if (sh(w).join(',') !== sh(g).join(',') || sh(gm).join(',') !== sh(g).join(',')) return undefined;
        const wop = this.prodOp(r, w);
        if (wop < 0 || p.ops.kind[wop] !== this.whereKind) return undefined;
        const [c, g2, z] = p.ops.opInputs(wop) as unknown as [number, number, number];
        return g2 === g && this.zeroOf(r, z, g) ? { g, c } : undefined;
      })();
      if (masked === undefined) return undefined;
      const { g, c } = masked;
      const m = this.vocabOf(r, c, 'outside');
      if (m === undefined || m.ids !== loc.ids || m.s !== loc.s || (loc.e !== undefined && m.e !== loc.e)) return undefined;
      // Local ids written as ids - s take their range's end from the mask they are paired with.
      const e = (loc.e ?? m.e) as Int;
      if (this.coordAttrs(r, op)) return 'per template: a scatter whose attributes depend on the coordinates';
      const at = (view.attrs[op] ?? {}) as Attrs;
      if (at[sc.size] !== iconst(isub(e, loc.s))) return `a scatter of ${String(at[sc.size])} rows for ids in [${String(loc.s)}, ${String(e)})`;
      if (!this.alignedMask(sh(c), sh(g), sh(loc.ids)) || numel(sh(idx)) !== numel(sh(loc.ids)) || numel(sh(G)) !== numel(sh(g))) return 'a vocab mask that does not line up with the scatter';
      const X = this.idsRel(r, loc.ids, depth, derive);
      if (typeof X === 'string') return X;
      const g0 = derive(r, g, depth + 1);
      const gr = typeof g0 === 'string' ? g0 : this.materialize(g0);
      if (typeof gr === 'string') return gr;
      const dom = this.world.domain(X.logical);
      if (dom === undefined || dom.length === 0) return `the values of ${this.world.name(X.logical)} are not known`;
      const eMax = this.maxOver(r, e);
      if (eMax === undefined) return 'a vocab range whose end is not bounded';
      const V = Math.max(eMax, (dom[dom.length - 1] as number) + 1);
      const bad = this.idsBelow(X, V);
      if (bad !== undefined) return bad;
      const idxLog = this.alongChain(r, X, this.reshapeChain(r, idx).ops);
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
      return this.checked({ ...S, ranges: S.ranges.map((x, i) => (i === td ? ([loc.s, e] as Range) : x)) }, outShape);
    }
    return undefined;
  }

  /**
   * One-hot update on a vocab shard (Megatron's vocab-parallel cross-entropy backward,
   * `grad[arange, masked_target] -= 1 - target_mask`; docs/engine.md rule 10): where([iota_1 ==
   * local(ids)], X[., local(ids)] - (1 - outside(ids)), X), with X columns [s, e) of a logical
   * Y over all its rows, and the ids whole, one per row. Inside the range row i changes at
   * column ids_i - s by -1; outside, at the masked row c by 0. So it is columns [s, e) of
   * Y - onehot(ids): the world's tensor for that (LogicalWorld.oneHot), which the single-device
   * graph spells with a mask that never holds. Undefined when the pattern is not this one.
   */
  protected oneHotRule(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived | undefined {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const sh = (x: number): Shape => view.shapes[x] ?? [];
    const kindOf = (x: number): number => {
      const o = this.prodOp(r, x);
      return o < 0 ? -1 : (p.ops.kind[o] as number);
    };
    const inOf = (x: number): number[] => [...p.ops.opInputs(this.prodOp(r, x))];
    const [c, a, x] = [...p.ops.opInputs(op)] as [number, number, number];
    const xs = sh(x);
    if (xs.length !== 2 || sh(t).join(',') !== xs.join(',') || kindOf(c) !== this.compareKind || this.coordAttrs(r, this.prodOp(r, c))) return undefined;
    if ((view.attrs[this.prodOp(r, c)] ?? {})['rel'] !== 'eq') return undefined;
    const [u, v] = inOf(c) as [number, number];
    const iotaKind = registry.id('iota');
    const [io, li] = kindOf(u) === iotaKind ? [u, v] : [v, u];
    const iop = this.prodOp(r, io);
    if (kindOf(io) !== iotaKind || this.coordAttrs(r, iop)) return undefined;
    const at = view.attrs[iop] ?? {};
    if (at['dim'] !== 1 || Number(at['step']) !== 1 || sh(io).join(',') !== xs.join(',') || this.constScalar(r, inOf(io)[0] as number) !== 0) return undefined;
    const loc = this.vocabOf(r, li, 'local');
    // Row i compares with id i: the ids as a column [N, 1] (a row vector would broadcast along
    // the columns), and the update expanded from a column.
    const column = (y: number): boolean => sh(y).join(',') === `${xs[0]},1`;
    if (loc === undefined || !column(li) || numel(sh(loc.ids)) !== xs[0]) return undefined;
    // a = expand(X[., local] - (1 - outside)), through reshapes.
    if (kindOf(a) !== this.expandKind || !column(inOf(a)[0] as number)) return undefined;
    const sb = this.reshapeChain(r, inOf(a)[0] as number).base;
    if (kindOf(sb) !== this.subKind) return undefined;
    const [gv, rs] = inOf(sb) as [number, number];
    const gb = this.reshapeChain(r, gv).base;
    const gk = kindOf(gb);
    const lk = gk < 0 ? undefined : registry.get(gk).lookup;
    if (lk === undefined || lk.dim !== 'last' || lk.out !== 'aligned' || numel(sh(gv)) !== xs[0] || numel(sh(rs)) !== xs[0]) return undefined;
    const gins = inOf(gb);
    const gl = this.vocabOf(r, gins[lk.index] as number, 'local');
    if (gins[lk.table] !== x || gl === undefined || gl.ids !== loc.ids || gl.s !== loc.s) return undefined;
    if (kindOf(rs) !== this.subKind) return undefined;
    const [one, mk] = inOf(rs) as [number, number];
    let mb = mk;
    for (let i = 0; i < 16 && (kindOf(mb) === this.identityKind || kindOf(mb) === this.reshapeKind); i++) mb = inOf(mb)[0] as number;
    const m = this.vocabOf(r, mb, 'outside');
    if (this.constScalar(r, one) !== 1 || m === undefined || m.ids !== loc.ids || m.s !== loc.s || (loc.e !== undefined && loc.e !== m.e) || (gl.e !== undefined && gl.e !== m.e)) return undefined;
    if (numel(sh(mb)) !== xs[0] || typeof m.s !== 'number' || typeof m.e !== 'number' || xs[1] !== m.e - m.s) return undefined;
    // The values: X is columns [s, e) of Y over all its rows; the ids are whole.
    const X0 = derive(r, x, depth + 1);
    const X = typeof X0 === 'string' ? X0 : this.materialize(X0);
    if (typeof X === 'string') return X;
    const I = this.idsRel(r, loc.ids, depth, derive);
    if (typeof I === 'string') return I;
    const w = this.world;
    const ys = w.shape(X.logical);
    const rows = X.ranges[0] as Range;
    const cols = X.ranges[1] as Range;
    if (X.part !== undefined || X.bcast !== undefined || !feq(X.scale, ONE) || ys.length !== 2 || rows[0] !== 0 || rows[1] !== ys[0] || cols[0] !== m.s || cols[1] !== m.e) return 'a one-hot update of a vocab shard that is not columns [s, e) of every row';
    const is = w.shape(I.logical);
    if (I.part !== undefined || I.bcast !== undefined || !feq(I.scale, ONE) || numel(is) !== ys[0] || I.ranges.some(([lo, hi], d) => lo !== 0 || hi !== is[d])) return 'a one-hot update whose ids are not the whole logical ids';
    const bad = this.idsBelow(I, ys[1] as number);
    if (bad !== undefined) return bad;
    const [cy, fy] = w.canon(X.logical);
    const [ci, fi] = w.canon(I.logical);
    const z = feq(fy, ONE) && feq(fi, ONE) ? w.oneHot.get(`onehot|${cy}|${ci}`) : undefined;
    if (z === undefined) return `no single-device one-hot update of ${w.name(X.logical)} by ${w.name(I.logical)}`;
    return this.checked({ logical: z, ranges: [rows, cols], scale: ONE }, sh(t));
  }

  /** The region and slots must be what the parallel tensor holds: its local shape. */
  protected checkedRouted(v: Routed, shape: Shape): Routed | string {
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
  protected routedOp(kind: number, def: OpDef, attrs: Attrs, k: number, vals: readonly Value[], outShape: Shape): Derived | undefined {
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
  protected routedA2a(values: readonly Value[], attrs: Attrs, me: Int, g: number, outShape: Shape): Derived {
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

}
