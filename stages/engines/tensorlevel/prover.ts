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
import type { LoadedPlan } from '../../../lineage/load.js';
import { registry } from '../../../ops/registry.js';
import type { Program } from '../../../plans/model.js';
import { checkRunClock, TimeLimitReached } from '../../clock.js';
import { result, type Producer, type Stage, type StageResult } from '../../decompose/prove.js';
import { type Frac, feq, fdiv, type Comp, type Part, isMaxPart, type Relation, type Value, type Derived, regionKey, sameRel, coversAll, unionParts, MAX_DEPTH, type StageRef, type Ctx, type Shared } from './relations.js';
import { claimWithStripes, restripe } from './stripes.js';
import { TemplateRules } from './template.js';

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
export class TensorLevelProver extends TemplateRules {
  prove(stage: Stage): StageResult | { why: string } {
    checkRunClock();
    const t0 = performance.now();
    const derive = this.deriver(stage, { memo: new Map(), coll: new Map(), collImpure: new Set() });
    const memo = { size: 0 };
    const lshape = this.plan.logical.shapes[stage.logical] ?? [];
    // Partial obligations: by region and decomposition, the derived parts must partition the value.
    const groups = new Map<string, { claim: Relation; parts: Relation[] }>();
    for (const o of stage.obligations) {
      const claim = this.canonical(claimWithStripes(o.nf));
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
      const parts = [...byIdx.values()].map((d) => d.part as Part);
      const key = parts[0]?.key;
      if (parts.some((p) => p.key !== key)) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} derive from different decompositions` };
      // All at once, as proveTemplate's check does (addends.ts): a product's rectangles (SP or
      // CP weight gradients: micro-batch rows x sequence chunks) tile a grid that no order of
      // pairwise merges reaches one rectangle at a time. unionParts refuses any overlap.
      const acc = unionParts(parts);
      if (acc === undefined) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} overlap or do not unite into one region` };
      if (!coversAll(acc)) return { why: `the claimed addends of ${this.world.name(g.claim.logical)} do not add up to the whole value` };
    }
    void lshape;
    return result(stage, 'proved', undefined, [], { logicalOps: 0, parallelOps: memo.size }, 0, t0);
  }

  /** The deriver of `deriveFromClaims`, kept across calls (it shares their memo). */
  protected claimsDeriver: ((r: number, t: number, depth: number) => Derived) | undefined;
  /** Per canonical id, the logical tensors equal to it and their factors (tensor = factor x canonical). */
  protected realOf: Map<number, { logical: number; f: Frac }[]> | undefined;

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
      // A placeholder (stripes.ts) is no range a lineage spec could state as one pair.
      if (a < 0) return 'a striped region (several ranges along one dim)';
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

  /** The derive function of one stage (or of one isolated collective derivation: `ctx.seen`). */
  protected deriver(stage: StageRef, ctx: Ctx): (r: number, t: number, depth: number) => Derived {
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

  protected deriveOne(stage: StageRef, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, ctx: Ctx): Derived {
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
      const rel = this.canonical(claimWithStripes(nf));
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
    return restripe(this.deriveCollective(registry.get(c.kind).name, c.attrs, shared, me, c.group.length, plan.view(r).shapes[t] ?? [], src));
  }

  /**
   * A collective call's members' inputs, derived once per stage (ctx.coll) and across stages
   * (`across`): a call derived without recomputing any claim holds in every stage whose own
   * tensor is none of the claims it assumed (every clipped gradient reads one global norm:
   * derived once, not once per parameter). Otherwise `derive` runs in isolation (its own memo),
   * recording the claims it assumes and recomputes. `key`: a collective instance (rank by
   * rank) or a call site per template (negative).
   */
  protected sharedCall(key: number, stage: StageRef, ctx: Ctx, derive: (sub: (r: number, t: number, depth: number) => Derived) => Shared | string): Shared | string {
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
