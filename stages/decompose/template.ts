/**
 * Stages of a plan past the per-rank stage bound (plans/loader.ts, stageWorkTooLarge),
 * decomposed from the programs' templates instead of rank by rank.
 *
 * A stage is the same as decompose's (stages/decompose/prove.ts): the obligations of one logical tensor.
 * Here an obligation is (program, tensor, number of ranks): a tensor with lineage that an op of
 * the program writes is produced on every rank running the program, so the per-rank
 * decomposition would list it once per rank. Only multi-rank collectives ($.parallel.collectives)
 * produce on some ranks of a program; they are few (text-sized) and counted member by member.
 *
 * Each stage's size at full shapes is counted as StageBuilder.build counts it before its
 * "too large" check: the elements of every (rank, tensor) its parallel closure reaches, of its
 * own logical tensor and of the logical tensors its inputs name. The closure is walked over
 * (program, tensor) nodes: a local op keeps the rank set, a group call whose group lies inside
 * the program (a box spanning the group's axes, as plans/symcoll.ts matches it) keeps it too,
 * and the other calls (send/recv by mesh shift, groups across programs) are resolved by counting
 * which ranks of which program they reach. Where a step reaches only part of a program's ranks,
 * or cannot be resolved per template (rank-list groups, peers given by expression, multi-rank
 * collectives), the walk stops there and the count is a lower bound, said so in the reason.
 *
 * Stages over the size limit are "unknown (too large)". A stage under it is proved when its
 * ranks are independent (no collective in its closure, complete obligations), one rank part
 * at a time through the ordinary StageBuilder and Prover (proveLocal); otherwise it is
 * "unknown" with what is missing. No numeric run is made here, so the verdict is "unknown".
 */
import { viewAxes } from '../../plans/loader.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { CollectiveInstance, Program } from '../../plans/model.js';
import { registry } from '../../ops/registry.js';
import { numel } from '../../ops/types.js';
import { groupBase } from '../../plans/collectives.js';
import { programBox } from '../../plans/mesh.js';
import { MAX_STAGE_ELEMENTS, Prover, type Obligation, type Producer, type ProducerLookup, type Stage, type StageResult } from './prove.js';
import { StageCanonizer } from '../cache/canon.js';
import { DEFAULT_TERM_BUDGET } from '../../sdfg/terms.js';
import { evalLineage } from '../../lineage/model.js';

/** Obligations of one (program, tensor): `ranks` of the program's ranks produce it. */
export interface TemplatePart {
  readonly program: number;
  readonly tensor: number;
  readonly ranks: number;
}

export interface TemplateStage {
  readonly index: number;
  readonly logical: number;
  readonly parts: TemplatePart[];
}

export interface TemplateStageSize {
  /** Elements the per-rank builder would count; a lower bound when `exact` is false. */
  readonly elements: number;
  readonly exact: boolean;
  /** Why the count is only a lower bound. */
  readonly partial?: string;
  /** The first collective call the closure runs (then its ranks are not independent). */
  readonly collective?: string;
  /** Mesh axes (-1: `rank`) the lineage specs the closure reaches depend on. */
  readonly specAxes: ReadonlySet<number>;
}

/** Per program: which op writes each tensor, and which ops are collective call sites. */
interface ProgramIndex {
  readonly producer: Int32Array;
  readonly site: Uint8Array;
  /** Per tensor: ranks of the program on which a multi-rank collective writes it. */
  readonly multi: Map<number, number>;
  /** A group call whose group spans axes the program's ranks cover whole: every member runs it. */
  readonly inside: Uint8Array;
  /** Sum over the program's ranks of the tensor's element count; NaN until computed. */
  readonly total: Float64Array;
  /** Element count when the shape does not depend on the rank, else -1. */
  readonly constNumel: Float64Array;
}

/** Distinct rank classes proved per stage, at most: past it the stage stays "unknown". */
const MAX_RANK_CLASSES = 64;

export interface LocalProof {
  readonly status: 'proved' | 'unknown';
  readonly reason?: string;
  /** Classes of ranks with identical parts (one proof each). */
  readonly classes: number;
}

/** The stage builder reached a tensor that a rank-local stage cannot have. */
class NotLocalError extends Error {}

/** A call that leaves the program: the (program, tensor) nodes it reaches, with rank counts. */
type Reach = { readonly nodes: readonly (readonly [number, number, number])[] } | { readonly unresolved: string };

export class TemplateStages {
  private readonly index: ProgramIndex[];
  private readonly reach = new Map<number, Reach>();
  private canon: StageCanonizer | undefined;
  /** Per program and tensor: the number of the last size() walk that reached it with all ranks. */
  private readonly stamps: Int32Array[];
  private walks = 0;
  /** Canonical forms of the rank parts proved so far. */
  private readonly provedForms = new Set<string>();
  /** Rank-part proofs run, and parts covered by an equal form already proved. */
  proofsRun = 0;
  proofsShared = 0;
  private readonly opStride: number;

  constructor(
    readonly plan: LoadedPlan,
    private readonly maxElements = MAX_STAGE_ELEMENTS,
  ) {
    const mesh = plan.mesh;
    this.opStride = Math.max(1, ...plan.programs.map((p) => p.ops.size));
    this.stamps = plan.programs.map((p) => new Int32Array(p.tensors.size));
    this.index = plan.programs.map((p) => {
      const producer = new Int32Array(p.tensors.size).fill(-1);
      for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) producer[t] = op;
      const site = new Uint8Array(p.ops.size);
      for (const op of p.collectiveSites) site[op] = 1;
      const box = programBox(p.ranks, mesh);
      const inside = new Uint8Array(p.ops.size);
      // As plans/symcoll.ts: a rank-list group anywhere in the program sends it all rank by rank.
      const rankLists = [...p.collectiveSites].some((op) => p.groups[op]?.kind === 'ranks');
      for (const op of p.collectiveSites) {
        const g = p.groups[op];
        if (rankLists || g?.kind !== 'axes' || !box.isBox) continue;
        if (g.axes.every((a) => (box.sets[a] as Int32Array).length === (mesh.sizes[a] as number))) inside[op] = 1;
      }
      const constNumel = new Float64Array(p.tensors.size);
      p.shapeSpecs.forEach((s, t) => (constNumel[t] = s.every((d) => typeof d === 'number') ? numel(s as number[]) : -1));
      return { producer, site, multi: new Map<number, number>(), inside, total: new Float64Array(p.tensors.size).fill(NaN), constNumel };
    });
    for (const c of plan.multiRank) {
      c.group.forEach((r, i) => {
        const o = c.outputs[i] as number;
        if (o < 0) return;
        const m = (this.index[plan.rankProgram[r] as number] as ProgramIndex).multi;
        m.set(o, (m.get(o) ?? 0) + 1);
      });
    }
  }

  /** One stage per logical tensor with produced claims, in topological order of the logical graph (as decompose). */
  decompose(order: readonly number[]): TemplateStage[] {
    const plan = this.plan;
    const byLogical = new Map<number, TemplatePart[]>();
    plan.programs.forEach((p, pi) => {
      const ix = this.index[pi] as ProgramIndex;
      for (let t = 0; t < p.tensors.size; t++) {
        const spec = p.lineage[t];
        if (spec === undefined) continue;
        const ranks = (ix.producer[t] as number) >= 0 ? p.ranks.length : (ix.multi.get(t) ?? 0);
        if (ranks === 0) continue;
        let l = byLogical.get(spec.logical);
        if (l === undefined) byLogical.set(spec.logical, (l = []));
        l.push({ program: pi, tensor: t, ranks });
      }
    });
    const pos = new Int32Array(plan.logical.tensors.size).fill(-1);
    order.forEach((op, i) => {
      for (const t of plan.logical.ops.opOutputs(op)) pos[t] = i;
    });
    return [...byLogical.entries()]
      .sort((a, b) => (pos[a[0]] as number) - (pos[b[0]] as number) || a[0] - b[0])
      .map(([logical, parts], index) => ({ index, logical, parts }));
  }

  /**
   * Distinct ranks holding the stage's obligations: programs run disjoint rank sets, so a
   * program with a part on all its ranks counts them all; parts written by multi-rank
   * collectives count their members (few: the plan-level collectives as written).
   */
  ranksOf(stage: TemplateStage): number {
    const plan = this.plan;
    const full = new Set<number>();
    const some = new Map<number, Set<number>>();
    for (const part of stage.parts) {
      if (part.ranks >= (plan.programs[part.program] as Program).ranks.length) full.add(part.program);
      else some.set(part.program, (some.get(part.program) ?? new Set()).add(part.tensor));
    }
    let n = 0;
    for (const pi of full) n += (plan.programs[pi] as Program).ranks.length;
    const members = new Set<number>();
    for (const c of plan.multiRank) {
      c.group.forEach((r, i) => {
        const pi = plan.rankProgram[r] as number;
        if (!full.has(pi) && some.get(pi)?.has(c.outputs[i] as number) === true) members.add(r);
      });
    }
    return n + members.size;
  }

  /** Elements over all ranks of program `pi` of tensor `t` (views are shared per distinct coordinates). */
  private total(pi: number, t: number): number {
    const ix = this.index[pi] as ProgramIndex;
    const hit = ix.total[t] as number;
    if (!Number.isNaN(hit)) return hit;
    const p = this.plan.programs[pi] as Program;
    const c = ix.constNumel[t] as number;
    let n = 0;
    if (c >= 0) n = c * p.ranks.length;
    else for (const r of p.ranks) n += numel(this.plan.view(r).shapes[t] ?? []);
    ix.total[t] = n;
    return n;
  }

  /** The stage's size at full shapes, counted as the per-rank stage builder counts it. */
  size(stage: TemplateStage): TemplateStageSize {
    const plan = this.plan;
    const lg = plan.logical;
    const progs = plan.programs;
    // Visited (program, tensor) with all of the program's ranks: stamped with this walk's number
    // (one array per program for every stage, not one per stage); partial visits keep their largest count.
    const walk = ++this.walks;
    const full = this.stamps;
    const partial = new Map<number, number>();
    const inputLogical = new Set<number>();
    let partialWhy: string | undefined;
    let collective: string | undefined;
    const specAxes = new Set<number>();
    let elements = 0;
    const stack: number[] = [];
    const stride = Math.max(1, ...progs.map((p) => p.tensors.size));
    const visit = (pi: number, t: number, ranks: number, why: string): void => {
      if (ranks >= (progs[pi] as Program).ranks.length) stack.push(pi, t);
      else {
        const k = pi * stride + t;
        partial.set(k, Math.max(partial.get(k) ?? 0, ranks));
        partialWhy ??= why;
      }
    };
    for (const part of stage.parts) visit(part.program, part.tensor, part.ranks, 'a multi-rank collective produces the tensor on some ranks of its program');
    while (stack.length > 0) {
      const t = stack.pop() as number;
      const pi = stack.pop() as number;
      const seen = full[pi] as Int32Array;
      if (seen[t] === walk) continue;
      seen[t] = walk;
      elements += this.total(pi, t);
      const p = progs[pi] as Program;
      const ix = this.index[pi] as ProgramIndex;
      const op = ix.producer[t] as number;
      const multi = ix.multi.has(t);
      const spec = p.lineage[t];
      if (spec !== undefined) for (const a of spec.axes) specAxes.add(a);
      if (spec !== undefined && (spec.logical !== stage.logical || (op < 0 && !multi))) {
        inputLogical.add(spec.logical);
        continue;
      }
      if (multi) {
        partialWhy ??= `a multi-rank collective writes '${p.tensors.name(t)}' of program '${p.name}'`;
        continue;
      }
      if (op < 0) continue;
      if (ix.site[op] !== 1) {
        for (const x of p.ops.opInputs(op)) stack.push(pi, x);
        continue;
      }
      collective ??= `'${p.ops.ids.name(op)}' of program '${p.name}'`;
      if (ix.inside[op] === 1) {
        const x = p.ops.opInputs(op)[0] ?? -1;
        if (x >= 0) stack.push(pi, x);
        continue;
      }
      const r = this.reachOf(pi, op);
      if ('unresolved' in r) {
        partialWhy ??= r.unresolved;
        continue;
      }
      for (const [q, x, n] of r.nodes) visit(q, x, n, `call '${p.ops.ids.name(op)}' of program '${p.name}' reaches only some ranks of another program`);
    }
    for (const [k, n] of partial) {
      const pi = Math.floor(k / stride);
      const t = k % stride;
      if ((full[pi] as Int32Array)[t] === walk) continue;
      const c = (this.index[pi] as ProgramIndex).constNumel[t] as number;
      // A rank-dependent shape on part of the ranks: left out, so the count stays a lower bound.
      if (c >= 0) elements += c * n;
      else partialWhy ??= 'a rank-dependent shape on part of a program';
    }
    elements += numel(lg.shapes[stage.logical] ?? []);
    for (const L of inputLogical) elements += numel(lg.shapes[L] ?? []);
    const extra = { specAxes, ...(collective === undefined ? {} : { collective }) };
    return partialWhy === undefined ? { elements, exact: true, ...extra } : { elements, exact: false, partial: partialWhy, ...extra };
  }

  /** Whether a stage of this size would be refused by the per-rank builder's size check. */
  tooLarge(s: TemplateStageSize): boolean {
    return s.elements > this.maxElements;
  }

  get limit(): number {
    return this.maxElements;
  }

  /**
   * Proves a stage under the size limit whose closure runs no collective. Its ranks are then
   * independent (docs/engine.md, "Stage components"): rank r's obligations are computed from
   * rank r's inputs only, so the stage holds iff each rank's part holds. With complete
   * obligations (no addends to compare across ranks) each part is its own stage, built by the
   * ordinary StageBuilder with producers read from the template. Two ranks of one program that
   * agree on every mesh coordinate the closure's lineage specs and the program's shapes and
   * attributes use get the same views and the same lineage, so the same equalities (ranks only
   * appear in messages): one proof per class of such ranks covers the class.
   */
  proveLocal(stage: TemplateStage, size: TemplateStageSize, budget = DEFAULT_TERM_BUDGET): LocalProof {
    const plan = this.plan;
    const mesh = plan.mesh;
    if (size.collective !== undefined) return { status: 'unknown', classes: 0, reason: `its closure runs the collective call ${size.collective}, so its ranks are not independent, and a stage with collectives is built only rank by rank over the whole plan (instances of collectives made per template for the stage builder are not in this version)` };
    if (!size.exact) return { status: 'unknown', classes: 0, reason: `its closure is not resolved per template (${size.partial ?? ''})` };
    // Representatives per program: one rank per distinct coordinates on the axes that matter.
    const byProgram = new Map<number, TemplatePart[]>();
    for (const part of stage.parts) {
      let l = byProgram.get(part.program);
      if (l === undefined) byProgram.set(part.program, (l = []));
      l.push(part);
    }
    const reps: { rank: number; members: number; parts: TemplatePart[] }[] = [];
    for (const [pi, parts] of byProgram) {
      const p = plan.programs[pi] as Program;
      const axes = [...new Set([...size.specAxes, ...viewAxes(p, mesh)])].sort((a, b) => a - b);
      if (axes.includes(-1)) {
        if (p.ranks.length > MAX_RANK_CLASSES) return { status: 'unknown', classes: 0, reason: `program '${p.name}' uses \`rank\` in its shapes, attributes or lineage, so each of its ${p.ranks.length} ranks is its own class (at most ${MAX_RANK_CLASSES} proofs per stage on this path)` };
      }
      const seen = new Map<string, { rank: number; members: number; parts: TemplatePart[] }>();
      for (const r of p.ranks) {
        const key = axes.map((a) => (a < 0 ? r : mesh.coord(r, a))).join(',');
        const hit = seen.get(key);
        if (hit !== undefined) hit.members++;
        else {
          seen.set(key, { rank: r, members: 1, parts });
          if (reps.length + seen.size > MAX_RANK_CLASSES) return { status: 'unknown', classes: 0, reason: `its ranks fall into more than ${MAX_RANK_CLASSES} classes of distinct coordinates (at most ${MAX_RANK_CLASSES} proofs per stage on this path)` };
        }
      }
      for (const x of seen.values()) reps.push(x);
    }
    const lookup = this.localProducers();
    const prover = new Prover(plan, budget, lookup);
    this.canon ??= new StageCanonizer(plan, lookup);
    for (const rep of reps) {
      const r = rep.rank;
      const obligations: Obligation[] = [];
      for (const part of rep.parts) {
        const p = plan.programs[part.program] as Program;
        const spec = p.lineage[part.tensor];
        if (spec === undefined) continue;
        const nf = evalLineage(spec, mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[part.tensor] ?? []);
        if (nf.value.n !== 1 || nf.value.divisor !== 1) return { status: 'unknown', classes: reps.length, reason: `rank ${r} '${p.tensors.name(part.tensor)}' holds partial addends, whose replicas are compared across ranks: such a stage is not split by rank` };
        obligations.push({ rank: r, tensor: part.tensor, nf });
      }
      const sub: Stage = { index: stage.index, logical: stage.logical, obligations };
      let res: StageResult;
      let form: string | undefined;
      try {
        // Equal canonical forms build the same equalities up to renaming (stages/cache/canon.ts): a
        // proved form covers every later part with the same text (compared whole, not hashed).
        form = this.canon.form(sub).text;
        if (form !== undefined && this.provedForms.has(form)) {
          this.proofsShared++;
          continue;
        }
        this.proofsRun++;
        res = prover.prove(sub);
      } catch (e) {
        if (!(e instanceof NotLocalError)) throw e;
        return { status: 'unknown', classes: reps.length, reason: e.message };
      }
      if (res.status === 'proved') {
        if (form !== undefined) this.provedForms.add(form);
        continue;
      }
      const stands = `rank ${r}, standing for ${rep.members} rank(s) of its program with the same coordinates`;
      const why = res.status === 'differs' ? `normal forms differ, and this path has no numeric run for a witness: ${res.reason ?? ''}` : (res.reason ?? 'undecided');
      return { status: 'unknown', classes: reps.length, reason: `${stands}: ${why}` };
    }
    return { status: 'proved', classes: reps.length };
  }

  /**
   * Producers read from the templates. Collective outputs get a producer (so that a claimed one
   * is an input, as with the plan-wide map) whose instance is refused: a stage that would walk
   * through a collective is never built here, so nothing is assumed that the builder recomputes.
   */
  private localProducers(): ProducerLookup {
    const plan = this.plan;
    return {
      get: (key: string): Producer | undefined => {
        const i = key.indexOf(':');
        const r = Number(key.slice(0, i));
        const t = Number(key.slice(i + 1));
        const pi = plan.rankProgram[r] as number;
        const ix = this.index[pi] as ProgramIndex;
        if (ix.multi.has(t)) return { op: -1, inst: -1 };
        const op = ix.producer[t] as number;
        if (op < 0) return undefined;
        // A collective's output: an input of the stage is only asked whether it has a producer;
        // walking through it asks for the instance, which this lookup refuses.
        if (ix.site[op] === 1) return { op: -1, inst: pi * this.opStride + op };
        return { op, inst: -1 };
      },
      instance: (inst: number): CollectiveInstance | undefined => {
        if (inst < 0) throw new NotLocalError('the stage reaches a multi-rank collective');
        const p = plan.programs[Math.floor(inst / this.opStride)] as Program;
        throw new NotLocalError(`the stage reaches the collective call '${p.ops.ids.name(inst % this.opStride)}' of program '${p.name}'`);
      },
    };
  }

  /**
   * The (program, input tensor, ranks) a call site that leaves its program reads: send/recv by
   * mesh shift (matched per (P, shift, Q) class in program order, as plans/symcoll.ts), and
   * axis groups spanning programs (each member's k-th call on the same axes, as the per-rank
   * matcher queues them per communicator). Integer arithmetic over the ranks, cached per site.
   */
  private reachOf(pi: number, op: number): Reach {
    const key = pi * this.opStride + op;
    const hit = this.reach.get(key);
    if (hit !== undefined) return hit;
    const r = this.computeReach(pi, op);
    this.reach.set(key, r);
    return r;
  }

  private computeReach(pi: number, op: number): Reach {
    const plan = this.plan;
    const mesh = plan.mesh;
    const progs = plan.programs;
    const p = progs[pi] as Program;
    const def = registry.get(p.ops.kind[op] as number);
    const name = `call '${p.ops.ids.name(op)}' of program '${p.name}'`;
    if (def.collective?.pattern === 'p2p') {
      const peer = p.peers[op];
      if (peer?.kind !== 'shift') return { unresolved: `${name} names its peer by expression` };
      if (def.collective.side === 'send') return { nodes: [] };
      // Data shift d (source -> this rank) is minus the peer shift; the k-th receive with d pairs with the k-th send with d.
      const d = new Int32Array(mesh.axes.length);
      for (const [a, x] of peer.shift) d[a] = (d[a] as number) - x;
      const dataShift = (q: Program, o: number, send: boolean): string | undefined => {
        const s = q.peers[o];
        if (s?.kind !== 'shift' || registry.get(q.ops.kind[o] as number).collective?.pattern !== 'p2p') return undefined;
        if ((registry.get(q.ops.kind[o] as number).collective?.side === 'send') !== send) return undefined;
        const e = new Int32Array(mesh.axes.length);
        for (const [a, x] of s.shift) e[a] = (e[a] as number) + (send ? x : -x);
        return e.join(',');
      };
      const key = d.join(',');
      const k = [...p.collectiveSites].filter((o) => dataShift(p, o, false) === key).indexOf(op);
      const count = new Map<number, number>();
      for (const r of p.ranks) {
        const c = mesh.coords(r);
        let out = false;
        d.forEach((x, a) => {
          c[a] = (c[a] as number) - x;
          if ((c[a] as number) < 0 || (c[a] as number) >= (mesh.sizes[a] as number)) out = true;
        });
        if (out) return { unresolved: `${name} receives from outside the mesh` };
        const q = plan.rankProgram[mesh.rankOf(c)] as number;
        count.set(q, (count.get(q) ?? 0) + 1);
      }
      const nodes: [number, number, number][] = [];
      for (const [qi, n] of count) {
        const q = progs[qi] as Program;
        const s = [...q.collectiveSites].filter((o) => dataShift(q, o, true) === key)[k];
        const x = s === undefined ? -1 : (q.ops.opInputs(s)[0] ?? -1);
        if (x < 0) return { unresolved: `${name} has no matching send in program '${q.name}'` };
        nodes.push([qi, x, n]);
      }
      return { nodes };
    }
    const g = p.groups[op];
    if (g?.kind !== 'axes') return { unresolved: `${name} names its group by rank list` };
    if (progs.some((q) => [...q.collectiveSites].some((o) => q.groups[o]?.kind === 'ranks'))) return { unresolved: `${name} shares communicators with rank-list groups` };
    const A = g.axes;
    const sameAxes = (q: Program, o: number): boolean => {
      const h = q.groups[o];
      return h?.kind === 'axes' && h.axes.length === A.length && h.axes.every((a, i) => a === A[i]);
    };
    const k = [...p.collectiveSites].filter((o) => sameAxes(p, o)).indexOf(op);
    // The groups of the program's ranks, named by their base (group axes at 0); every member of one counts.
    const bases = new Set<number>();
    for (const r of p.ranks) bases.add(groupBase(mesh, r, A));
    const count = new Map<number, number>();
    for (let r = 0; r < mesh.size; r++) {
      if (!bases.has(groupBase(mesh, r, A))) continue;
      const q = plan.rankProgram[r] as number;
      count.set(q, (count.get(q) ?? 0) + 1);
    }
    const nodes: [number, number, number][] = [];
    for (const [qi, n] of count) {
      const q = progs[qi] as Program;
      const s = [...q.collectiveSites].filter((o) => sameAxes(q, o))[k];
      if (s === undefined) return { unresolved: `${name} has no matching call in program '${q.name}'` };
      // A member without an input (a broadcast's receivers) reads nothing.
      const x = q.ops.opInputs(s)[0] ?? -1;
      if (x >= 0) nodes.push([qi, x, n]);
    }
    return { nodes };
  }
}
