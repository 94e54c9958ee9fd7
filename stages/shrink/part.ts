/**
 * Witnesses for plans proved per template (docs/engine.md, "Witnesses per template").
 *
 * Past the per-rank bound (L3: 8,192 ranks) a plan's stages are proved per template at tensor
 * level, which only ever says "proved". A stage it leaves open is refuted here on one rank:
 * the closure of that rank's obligation (the ops and collective calls it runs on every rank it
 * reaches, stopping at claims, as the stage builder's walk does) is written as a plan of its
 * own, on a mesh of exactly those ranks, each with its program instantiated (concrete shapes,
 * attributes and claims; groups and peers as rank lists). It is loaded with every check except
 * tiling (lineage/load.ts loadPartObject: a few ranks hold a few regions), reduced by the lane reducer, proved by the
 * element engine and evaluated numerically. A difference with a witness there is a witness of
 * the stage: the part's inputs are the stage's inputs at those ranks, free symbols constrained
 * only by their claims, computed by the same ops, and its obligation is one of the stage's.
 * A proof of the part proves nothing about the stage's other ranks, so it is never used as one.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { loadPartObject } from '../../lineage/load.js';
import { PlanError } from '../../plans/errors.js';
import type { Program } from '../../plans/model.js';
import type { RawOp, RawParallelOp, RawParallelTensor, RawPlan, RawProgram } from '../../plans/raw.js';
import type { AttrValue } from '../../ops/types.js';
import { registry } from '../../ops/registry.js';
import { evalLineage, groupKey, type LineageNF } from '../../lineage/model.js';
import type { ProvePart, Stage, Stop } from '../decompose/prove.js';
import { extractLogicalRaw, logicalClosure, stageOf } from '../decompose/extract.js';
import { rawLineage } from './components.js';
import { reducePlan, ReductionError } from './reduce.js';
import { cutList, prefixWitness, proveStage, twoDraws, zeroCutWitness } from './stage-reduce.js';
import { diagnoseWitness } from '../verify.js';
import { axisSites } from '../engines/tensorlevel/frames.js';
import { foldCall, foldMasks, newFoldState, reduceOf, type FoldState } from './fold.js';
import { boxPart } from './box.js';

/** Most ranks a part may reach (a dp all-reduce over 64 ranks reaches 64). */
const MAX_PART_RANKS = 1024;
/** Most (rank, tensor) entries a part's closure may visit. */
const MAX_PART_ENTRIES = 200_000;

export class PartError extends Error {}

/** The peer rank of a send or receive on rank r, when the plan gives it as a shift along mesh axes. */
function shiftPeer(plan: LoadedPlan, r: number, op: number): number | undefined {
  const spec = (plan.programs[plan.rankProgram[r] as number] as Program).peers[op];
  if (spec === undefined || spec.kind !== 'shift') return undefined;
  const c = plan.mesh.coords(r);
  for (const [a, d] of spec.shift) c[a] = (c[a] as number) + d;
  return plan.mesh.rankOf(c);
}

/**
 * The send paired with receive `op` on rank r: the k-th receive from a peer pairs with the
 * peer's k-th send to r (the loader's matching). Why not, when there is none or a peer is given
 * by a rank expression.
 */
function pairedSend(plan: LoadedPlan, r: number, op: number): { peer: number; send: number } | string {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  const kindOf = (prog: Program, o: number): string => registry.get(prog.ops.kind[o] as number).name;
  const peer = shiftPeer(plan, r, op);
  if (peer === undefined) return `'${p.ops.ids.name(op)}' has a peer given by a rank expression`;
  const q = plan.programs[plan.rankProgram[peer] as number] as Program;
  // The receives of r from the peer and the peer's sends to r, each in program order.
  const toward = (prog: Program, at: number, kind: string, other: number): number[] | string => {
    const out: number[] = [];
    for (const o of prog.collectiveSites) {
      if (kindOf(prog, o) !== kind) continue;
      const x = shiftPeer(plan, at, o);
      if (x === undefined) return `'${prog.ops.ids.name(o)}' has a peer given by a rank expression`;
      if (x === other) out.push(o);
    }
    return out;
  };
  const mine = toward(p, r, 'recv', peer);
  if (typeof mine === 'string') return mine;
  const theirs = toward(q, peer, 'send', r);
  if (typeof theirs === 'string') return theirs;
  const send = theirs[mine.indexOf(op)];
  return send === undefined ? `no send pairs with '${p.ops.ids.name(op)}' on rank ${r}` : { peer, send };
}

/** The closure walk of one rank's obligation, per template: ops per rank, claims assumed, ranks reached. */
export function closure(plan: LoadedPlan, logical: number, rank: number, tensor: number, maxHolders = MAX_PART_RANKS, maxRanks = MAX_PART_RANKS, pass?: ReadonlySet<number>): { ops: Map<number, Set<number>>; inputs: Map<string, LineageNF>; obligations: Map<string, LineageNF>; groups: Map<string, number[]>; peers: Map<string, number>; cutAddends: number; fold?: { state: FoldState; masks: Map<number, number[][] | undefined>; scales: Map<string, string> } } {
  const mesh = plan.mesh;
  const local = new Map<number, Int32Array>();
  const producerOp = (pi: number, t: number): number => {
    let a = local.get(pi);
    if (a === undefined) {
      const p = plan.programs[pi] as Program;
      a = new Int32Array(p.tensors.size).fill(-1);
      for (let op = 0; op < p.ops.size; op++) for (const x of p.ops.opOutputs(op)) a[x] = op;
      local.set(pi, a);
    }
    return a[t] ?? -1;
  };
  const kindOf = (p: Program, op: number): string => registry.get(p.ops.kind[op] as number).name;
  const isSite = new Map<number, Set<number>>();
  const sites = (pi: number): Set<number> => {
    let s = isSite.get(pi);
    if (s === undefined) isSite.set(pi, (s = new Set((plan.programs[pi] as Program).collectiveSites)));
    return s;
  };
  // Call sites on groups along these axes, in program order (the loader's matching, as per template).
  const onAxes = (pi: number, axes: readonly number[]): readonly number[] => {
    const p = plan.programs[pi] as Program;
    const s = axisSites(p, axes);
    if (s === undefined) throw new PartError(`program '${p.name}' names groups by rank list`);
    return s;
  };
  const ops = new Map<number, Set<number>>();
  const add = (r: number, op: number): void => {
    let s = ops.get(r);
    if (s === undefined) {
      ops.set(r, (s = new Set()));
      if (ops.size > maxRanks) throw new PartError(`the part reaches more than ${maxRanks} ranks`);
    }
    s.add(op);
  };
  const inputs = new Map<string, LineageNF>();
  const obligations = new Map<string, LineageNF>();
  const groups = new Map<string, number[]>();
  const peers = new Map<string, number>();
  const nf = (r: number, t: number): LineageNF | undefined => {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    return spec === undefined ? undefined : evalLineage(spec, mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
  };
  const seen = new Set<string>();
  const stack: [number, number][] = [[rank, tensor]];
  // Addend obligations are checked as a group (their combination against the logical value):
  // the holders of a group's other addends join the part. Indexed on first need, by a scan of
  // the programs' tensors claiming the stage's logical tensor, rank by rank (cheap: claims only).
  let holders: Map<string, [number, number][]> | undefined;
  const groupOf = (c: LineageNF): string => `${groupKey(c.value)}|${JSON.stringify(c.ranges)}`;
  /** The holders of `c`'s addend group: (rank, tensor) pairs. */
  const groupHolders = (c: LineageNF): [number, number][] => {
    if (holders === undefined) {
      const index = new Map<string, [number, number][]>();
      for (const q of plan.programs) {
        for (let u = 0; u < q.tensors.size; u++) {
          if (q.lineage[u]?.logical !== logical) continue;
          for (const m of q.ranks) {
            const x = nf(m, u) as LineageNF;
            if (x.value.n === 1) continue;
            const k = groupOf(x);
            const l = index.get(k) ?? [];
            if (l.length === 0) index.set(k, l);
            l.push([m, u]);
          }
        }
      }
      holders = index;
    }
    return holders.get(groupOf(c)) ?? [];
  };
  const joinGroup = (c: LineageNF): void => {
    const l = groupHolders(c);
    if (l.length > maxHolders) throw new PartError(`an addend group of '${plan.logical.tensors.name(logical)}' has ${l.length} holders (at most ${maxHolders} in a part)`);
    for (const x of l) stack.push(x);
  };
  // The start's stage also holds addends of other groups (micro-batch partial gradients summed
  // into it; under SP, dp x tp x micro of them): when such a group is too large to join, its
  // members are cut as inputs, assumed as claimed (docs/engine.md, "Witnesses per template").
  // The start's own group (an addend start) is always joined whole: its check needs every member.
  const startNF = nf(rank, tensor);
  let cutAddends = 0;
  const bigGroup = (c: LineageNF): boolean => groupHolders(c).length > maxHolders;
  const joined = new Set<string>();
  // All-reduce calls whose groups are larger than a part may be: folded once the rest of the
  // walk is done (stages/shrink/fold.ts), keyed by call instance.
  const deferred = new Map<string, { name: string; reduce: string; members: number[]; site: (m: number) => number }>();
  const drain = (): void => {
  while (stack.length > 0) {
    const [r, t] = stack.pop() as [number, number];
    const key = `${r}:${t}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (seen.size > MAX_PART_ENTRIES) throw new PartError(`the part reaches more than ${MAX_PART_ENTRIES} tensors`);
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const op = producerOp(pi, t);
    const claim = nf(r, t);
    const cut = claim !== undefined && claim.logical === logical && op >= 0 && claim.value.n > 1 && key !== `${rank}:${tensor}` && startNF !== undefined && (startNF.value.n === 1 || groupOf(claim) !== groupOf(startNF)) && bigGroup(claim);
    // A claim of a logical tensor in `pass` is walked through, computed rather than assumed
    // (stages/shrink/deepen.ts: a part of a coarser cut); a contract input never is.
    if (claim !== undefined && pass !== undefined && claim.logical !== logical && op >= 0 && pass.has(claim.logical)) {
      if (!sites(pi).has(op)) {
        add(r, op);
        for (const x of p.ops.opInputs(op)) stack.push([r, x]);
        continue;
      }
      throw new PartError(`a claim to walk through ('${p.tensors.name(t)}') is a collective's output`);
    }
    if (claim !== undefined && (claim.logical !== logical || op < 0 || cut)) {
      if (op < 0 && p.inferred?.has(t) === true) throw new PartError(`'${p.tensors.name(t)}' has only an inferred hint and no producer`);
      inputs.set(key, claim);
      if (cut) cutAddends++;
      continue;
    }
    if (claim !== undefined) {
      obligations.set(key, claim);
      const g = groupOf(claim);
      if (claim.value.n > 1 && !joined.has(g)) {
        joined.add(g);
        joinGroup(claim);
      }
    }
    if (op < 0) throw new PartError(`'${p.tensors.name(t)}' on rank ${r} has no producer and no lineage`);
    if (!sites(pi).has(op)) {
      add(r, op);
      for (const x of p.ops.opInputs(op)) stack.push([r, x]);
      continue;
    }
    const kind = kindOf(p, op);
    if (kind === 'recv') {
      const pair = pairedSend(plan, r, op);
      if (typeof pair === 'string') throw new PartError(pair);
      const { peer, send } = pair;
      const q = plan.programs[plan.rankProgram[peer] as number] as Program;
      add(r, op);
      add(peer, send);
      peers.set(`${r}:${op}`, peer);
      peers.set(`${peer}:${send}`, r);
      const x = q.ops.opInputs(send)[0];
      if (x !== undefined) stack.push([peer, x]);
      continue;
    }
    // Attributes naming ranks (a broadcast's src, send_recv's src and dst) would need renumbering.
    if (kind === 'broadcast' || kind === 'send_recv') throw new PartError(`'${p.ops.ids.name(op)}' (${kind}) names ranks in its attributes`);
    const g = p.groups[op];
    if (g === undefined || g.kind !== 'axes') throw new PartError(`'${p.ops.ids.name(op)}' (${kind}) has no axis group`);
    const k = onAxes(pi, g.axes).indexOf(op);
    const members = [...mesh.groupAlong(r, g.axes)];
    for (let i = 1; i < members.length; i++) if ((members[i] as number) <= (members[i - 1] as number)) throw new PartError(`the group of '${p.ops.ids.name(op)}' is not in rank order`);
    const site = (m: number): number => {
      const qi = plan.rankProgram[m] as number;
      const q = plan.programs[qi] as Program;
      const qs = qi === pi ? op : (onAxes(qi, g.axes)[k] ?? -1);
      if (qs < 0 || q.ops.kind[qs] !== p.ops.kind[op]) throw new PartError(`no call matches '${p.ops.ids.name(op)}' on rank ${m}`);
      return qs;
    };
    if (members.length > maxRanks) {
      const reduce = reduceOf(plan, r, op);
      if (reduce === undefined) throw new PartError(`'${p.ops.ids.name(op)}' (${kind}) has a group of ${members.length} ranks (at most ${maxRanks} in a part; only an all-reduce is folded)`);
      // This rank's own contribution is walked now; the other members' once the walk is done.
      const qs = site(r);
      add(r, qs);
      const x = p.ops.opInputs(qs)[0];
      if (x !== undefined) stack.push([r, x]);
      const call = `${members[0] as number}|${g.axes.join(',')}|${k}`;
      if (!deferred.has(call)) deferred.set(call, { name: p.ops.ids.name(op), reduce, members, site });
      continue;
    }
    for (const m of members) {
      const qs = site(m);
      add(m, qs);
      groups.set(`${m}:${qs}`, members);
      const x = (plan.programs[plan.rankProgram[m] as number] as Program).ops.opInputs(qs)[0];
      if (x !== undefined) stack.push([m, x]);
    }
  }
  };
  drain();
  if (deferred.size === 0) return { ops, inputs, obligations, groups, peers, cutAddends };
  // Fold each large all-reduce into one representative per class of members (fold.ts), walk
  // the representatives' contributions, then check the zeros against everything the part holds.
  const state = newFoldState();
  const scales = new Map<string, string>();
  for (const d of deferred.values()) {
    const f = foldCall(plan, logical, d.name, d.reduce, d.members, d.site, inputs, new Set([...ops.keys(), ...[...inputs.keys()].map((key) => Number(key.split(':')[0]))]), state);
    if (typeof f === 'string') throw new PartError(`'${d.name}' (all_reduce) has a group of ${d.members.length} ranks (at most ${maxRanks} in a part) and cannot be folded: ${f}`);
    const kept = [...f.kept.keys()].sort((a, b) => a - b);
    for (const m of kept) {
      const qs = d.site(m);
      add(m, qs);
      groups.set(`${m}:${qs}`, kept);
      const factor = f.factor(m);
      if (factor !== undefined) scales.set(`${m}:${qs}`, factor);
      const x = (plan.programs[plan.rankProgram[m] as number] as Program).ops.opInputs(qs)[0];
      if (x !== undefined) stack.push([m, x]);
    }
  }
  drain();
  const masks = foldMasks(plan, inputs, state);
  if (typeof masks === 'string') throw new PartError(`a group too large for a part cannot be folded: ${masks}`);
  return { ops, inputs, obligations, groups, peers, cutAddends, fold: { state, masks, scales } };
}

/**
 * Logical tensors the whole stage starts from, found per template: from every program's
 * obligations of the stage, on one rank of the program, back through its ops and across its
 * collectives and receives to the matching calls of the other members (as the closure walk
 * does rank by rank), up to claims. Each is met by the closure of a real obligation of the
 * stage, so it is one of the stage's logical inputs (the builder's logical side starts from
 * every claim its obligations' closures meet): the part's logical side may start from it too,
 * and computes the same function. Without them, the part of a rank that no longer reaches the
 * others (one rank skipping the clipping) computes every other gradient on the logical side
 * from the model's inputs: the whole forward and backward of the model. A walk that cannot
 * follow a call (rank-list groups, a peer given by a rank expression) stops there: fewer
 * starts only make the logical side larger.
 */
function stageStarts(plan: LoadedPlan, logical: number): ReadonlySet<number> {
  // Per plan and logical tensor: a stage's parts (two per stage, many stages) share it.
  let memo = STARTS.get(plan);
  if (memo === undefined) STARTS.set(plan, (memo = new Map()));
  let out = memo.get(logical);
  if (out === undefined) memo.set(logical, (out = stageStartsOnce(plan, logical)));
  return out;
}

const STARTS = new WeakMap<LoadedPlan, Map<number, ReadonlySet<number>>>();

/** Per program: each tensor's producing op (-1: none), and the collective sites; once per plan. */
function programIndex(plan: LoadedPlan): { producers: Int32Array[]; sites: Set<number>[] } {
  let ix = PROGRAM_INDEX.get(plan);
  if (ix === undefined) {
    const producers = plan.programs.map((p) => {
      const a = new Int32Array(p.tensors.size).fill(-1);
      for (let op = 0; op < p.ops.size; op++) for (const x of p.ops.opOutputs(op)) a[x] = op;
      return a;
    });
    PROGRAM_INDEX.set(plan, (ix = { producers, sites: plan.programs.map((p) => new Set(p.collectiveSites)) }));
  }
  return ix;
}

const PROGRAM_INDEX = new WeakMap<LoadedPlan, { producers: Int32Array[]; sites: Set<number>[] }>();

function stageStartsOnce(plan: LoadedPlan, logical: number): Set<number> {
  const out = new Set<number>();
  const mesh = plan.mesh;
  const { producers, sites } = programIndex(plan);
  const seen = plan.programs.map((p) => new Uint8Array(p.tensors.size));
  const stack: [number, number][] = [];
  plan.programs.forEach((p, pi) => {
    for (let t = 0; t < p.tensors.size; t++) if (p.lineage[t]?.logical === logical && (producers[pi]?.[t] as number) >= 0) stack.push([pi, t]);
  });
  while (stack.length > 0) {
    const [pi, t] = stack.pop() as [number, number];
    const mark = seen[pi] as Uint8Array;
    if (mark[t]) continue;
    mark[t] = 1;
    const p = plan.programs[pi] as Program;
    const spec = p.lineage[t];
    const op = producers[pi]?.[t] as number;
    if (spec !== undefined && (spec.logical !== logical || op < 0)) {
      out.add(spec.logical);
      continue;
    }
    if (op < 0) continue;
    if (!(sites[pi] as Set<number>).has(op)) {
      for (const x of p.ops.opInputs(op)) stack.push([pi, x]);
      continue;
    }
    const r = p.ranks[0];
    if (r === undefined) continue;
    const kind = registry.get(p.ops.kind[op] as number).name;
    if (kind === 'recv') {
      // The paired send, as the closure walk pairs them; a walk that cannot pair stops here.
      const pair = pairedSend(plan, r, op);
      if (typeof pair === 'string') continue;
      const qi = plan.rankProgram[pair.peer] as number;
      const x = (plan.programs[qi] as Program).ops.opInputs(pair.send)[0];
      if (x !== undefined) stack.push([qi, x]);
      continue;
    }
    // As the closure walk: a broadcast or send_recv names ranks in its attributes, and the
    // walk does not follow them (following every member would meet claims no obligation reads).
    if (kind === 'broadcast' || kind === 'send_recv') continue;
    const g = p.groups[op];
    if (g === undefined || g.kind !== 'axes') continue;
    const mineOnAxes = axisSites(p, g.axes);
    const k = mineOnAxes?.indexOf(op) ?? -1;
    if (k < 0) continue;
    const progs = new Set<number>();
    for (const m of mesh.groupAlong(r, g.axes)) progs.add(plan.rankProgram[m] as number);
    for (const qi of progs) {
      const q = plan.programs[qi] as Program;
      const qs = qi === pi ? op : axisSites(q, g.axes)?.[k];
      if (qs === undefined || q.ops.kind[qs] !== p.ops.kind[op]) continue;
      const x = q.ops.opInputs(qs)[0];
      if (x !== undefined) stack.push([qi, x]);
    }
  }
  return out;
}

/** The part as a plan file: its ranks renumbered 0..n-1 on a one-axis mesh, programs instantiated. */
export function partRaw(plan: LoadedPlan, raw: RawPlan, stage: Stage, c: ReturnType<typeof closure>, maxRanks = MAX_PART_RANKS, logicalSide?: ReturnType<typeof extractLogicalRaw>): { raw: RawPlan; ranks: number[] } {
  const ranks = [...c.ops.keys(), ...[...c.inputs.keys()].map((k) => Number(k.split(':')[0]))].filter((r, i, a) => a.indexOf(r) === i).sort((a, b) => a - b);
  if (ranks.length > maxRanks) throw new PartError(`the part reaches ${ranks.length} ranks (at most ${maxRanks})`);
  const id = new Map(ranks.map((r, i) => [r, i]));
  const lg = plan.logical;
  // Logical side: the ops the stage's value is computed by, from the logical tensors the part's inputs name.
  // The stage's logical side, unless the caller gives its own (stages/shrink/replicas.ts: inputs only).
  const lpart = logicalSide ?? extractLogicalRaw(plan, raw, stage, logicalClosure(plan, stage.logical, c.inputs.values(), stageStarts(plan, stage.logical)));
  if (c.fold !== undefined) maskLogical(lpart, c.fold.masks, plan);
  const rawOps = new Map<number, Map<string, RawParallelOp>>();
  const programs: RawProgram[] = ranks.map((r) => {
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    let byId = rawOps.get(pi);
    if (byId === undefined) rawOps.set(pi, (byId = new Map((raw.parallel.programs[pi]?.ops ?? []).map((o) => [o.id, o]))));
    const v = plan.view(r);
    const mine = [...(c.ops.get(r) ?? [])].sort((a, b) => a - b);
    const used = new Set<number>();
    const ops: RawParallelOp[] = mine.map((op) => {
      const ro = byId.get(p.ops.ids.name(op));
      if (ro === undefined) throw new PartError(`op '${p.ops.ids.name(op)}' not in the plan file`);
      for (const t of [...p.ops.opInputs(op), ...p.ops.opOutputs(op)]) used.add(t);
      const out: RawParallelOp = { id: ro.id, op: ro.op, inputs: [...ro.inputs], outputs: [...ro.outputs] };
      const attrs = v.attrs[op] ?? {};
      if (Object.keys(attrs).length > 0) out.attrs = structuredClone(attrs) as Record<string, AttrValue>;
      const members = c.groups.get(`${r}:${op}`);
      if (members !== undefined) out.group = members.map((m) => id.get(m) as number);
      const peer = c.peers.get(`${r}:${op}`);
      if (peer !== undefined) out.peer = id.get(peer) as number;
      if (ro.microbatch !== undefined) out.microbatch = ro.microbatch;
      if (ro.loc !== undefined) out.loc = ro.loc;
      return out;
    });
    for (const k of c.inputs.keys()) if (Number(k.split(':')[0]) === r) used.add(Number(k.split(':')[1]));
    const tensors: RawParallelTensor[] = [...used].sort((a, b) => a - b).map((t) => {
      const key = `${r}:${t}`;
      const claim = c.inputs.get(key) ?? c.obligations.get(key);
      const dtype = p.dtypes[t];
      return { id: p.tensors.name(t), shape: [...(v.shapes[t] ?? [])], ...(dtype === undefined ? {} : { dtype }), ...(claim === undefined ? {} : { lineage: rawLineage(plan, claim, new Map()) }) };
    });
    if (c.fold !== undefined) foldProgram(r, p, mine, ops, tensors, c.fold);
    return { name: `rank ${r}`, ranks: [id.get(r) as number], tensors, ops };
  });
  const target = lg.tensors.name(stage.logical);
  return {
    ranks,
    raw: {
      format: 'planproof/v1',
      name: `${raw.name ?? plan.name} / stage ${stage.index + 1} (${target}) / part`,
      description: `Ranks ${ranks.slice(0, 8).join(', ')}${ranks.length > 8 ? ', ...' : ''} of stage ${stage.index + 1}: one rank's obligation and what it reads, instantiated (docs/engine.md, "Witnesses per template").`,
      mesh: { axes: [{ name: 'part', size: ranks.length }] },
      logical: { tensors: lpart.tensors, ops: lpart.ops },
      parallel: { programs },
      contract: { inputs: lpart.contractInputs, outputs: [target] },
    },
  };
}

/** What a fold did, for the report: calls, ranks kept, tensors masked. */
function foldText(plan: LoadedPlan, fold: NonNullable<ReturnType<typeof closure>['fold']>): string {
  const calls = fold.state.calls.map((f) => `'${f.name}' over ${f.members} ranks kept as ${f.kept.size} (rank(s) ${[...f.kept].slice(0, 6).map(([m, n]) => `${m} x${n}`).join(', ')}${f.kept.size > 6 ? ', ...' : ''})`).join('; ');
  const whole = [...fold.masks.values()].filter((b) => b === undefined).length;
  const names = [...fold.masks.keys()].slice(0, 3).map((l) => `'${plan.logical.tensors.name(l)}'`).join(', ');
  return `folded for a witness (docs/engine.md, "Groups too large for a part"): ${calls}, each kept rank standing for the members that run the same ops on the same slices or on zeros; the witness is zero outside the slices the part holds in ${fold.masks.size} logical tensor(s) (${names}${fold.masks.size > 3 ? ', ...' : ''}; ${whole} zero everywhere)`;
}

/** A name not in `taken` (and now taken), from `base`. */
function fresh(taken: Set<string>, base: string): string {
  let n = base;
  for (let i = 1; taken.has(n); i++) n = `${base}#${i}`;
  taken.add(n);
  return n;
}

/**
 * A rank's program in a folded part (stages/shrink/fold.ts): its inputs whose slices the
 * witness sets to zero are scaled by 0 before any op reads them, and a representative's
 * input to a folded all-reduce is scaled by the count of members it stands for.
 */
function foldProgram(r: number, p: Program, mine: readonly number[], ops: RawParallelOp[], tensors: RawParallelTensor[], fold: NonNullable<ReturnType<typeof closure>['fold']>): void {
  const taken = new Set(tensors.map((t) => t.id));
  const shapeOf = new Map(tensors.map((t) => [t.id, t]));
  const head: RawParallelOp[] = [];
  const rename = new Map<string, string>();
  for (const [key] of fold.state.zero) {
    const [rr, t] = key.split(':').map(Number) as [number, number];
    if (rr !== r) continue;
    const name = p.tensors.name(t);
    const z = fresh(taken, `${name}@zero`);
    const src = shapeOf.get(name);
    tensors.push({ id: z, shape: [...(src?.shape ?? [])], ...(src?.dtype === undefined ? {} : { dtype: src.dtype }) });
    head.push({ id: fresh(taken, `part/zero/${name}`), op: 'scale', inputs: [name], outputs: [z], attrs: { factor: '0' } });
    rename.set(name, z);
  }
  for (const o of ops) o.inputs = o.inputs.map((x) => rename.get(x) ?? x);
  const out: RawParallelOp[] = [...head];
  mine.forEach((op, i) => {
    const o = ops[i] as RawParallelOp;
    const factor = fold.scales.get(`${r}:${op}`);
    if (factor !== undefined) {
      const x = o.inputs[0] as string;
      const y = fresh(taken, `${x}@fold`);
      const src = shapeOf.get(p.tensors.name(p.ops.opInputs(op)[0] as number));
      tensors.push({ id: y, shape: [...(src?.shape ?? [])], ...(src?.dtype === undefined ? {} : { dtype: src.dtype }) });
      out.push({ id: fresh(taken, `part/fold/${o.id}`), op: 'scale', inputs: [x], outputs: [y], attrs: { factor } });
      o.inputs = [y, ...o.inputs.slice(1)];
    }
    out.push(o);
  });
  ops.splice(0, ops.length, ...out);
}

/**
 * The logical side of a folded part reads each tensor with zero slices masked: equal to the
 * input inside the box of the slices the part holds, zero outside (a slice and a zero pad per
 * dim that the box narrows; a scale by 0 when the part holds none of it).
 */
function maskLogical(lpart: ReturnType<typeof extractLogicalRaw>, masks: ReadonlyMap<number, number[][] | undefined>, plan: LoadedPlan): void {
  const taken = new Set(lpart.tensors.map((t) => t.id));
  const head: RawOp[] = [];
  const rename = new Map<string, string>();
  for (const [l, box] of masks) {
    const name = plan.logical.tensors.name(l);
    const src = lpart.tensors.find((t) => t.id === name);
    if (src === undefined) continue;
    // Masking a tensor the part computes would not make the stage's own value zero there.
    if (!lpart.contractInputs.includes(name)) throw new PartError(`'${name}' has zero slices but the part's logical side computes it`);
    const shape = [...src.shape];
    const add = (op: string, input: string, attrs: Record<string, AttrValue>, sh: number[], what: string): string => {
      const y = fresh(taken, `${name}@${what}`);
      lpart.tensors.push({ id: y, shape: sh, role: 'activation', ...(src.dtype === undefined ? {} : { dtype: src.dtype }) });
      head.push({ id: fresh(taken, `part/mask/${y}`), op, inputs: [input], outputs: [y], attrs });
      return y;
    };
    let cur = name;
    if (box === undefined) cur = add('scale', cur, { factor: '0' }, shape, 'zero');
    else {
      box.forEach(([lo, hi], d) => {
        const n = shape[d] as number;
        if ((lo as number) <= 0 && (hi as number) >= n) return;
        const cut = shape.map((x, i) => (i === d ? (hi as number) - (lo as number) : x));
        const s = add('slice', cur, { dim: d, start: lo as number, end: hi as number }, cut, `box${d}`);
        cur = add('pad', s, { dim: d, before: lo as number, after: n - (hi as number) }, shape, `mask${d}`);
      });
    }
    if (cur !== name) rename.set(name, cur);
  }
  for (const o of lpart.ops) o.inputs = o.inputs.map((x) => rename.get(x) ?? x);
  lpart.ops.unshift(...head);
}

/**
 * The obligation of `tensor` on `rank` (stage `stage` of the logical tensor), extracted with its
 * closure, reduced and proved with a numeric run; or why it could not be.
 */
export const provePart: ProvePart = (plan, raw, stage, rank, tensor, seed) => partProver()(plan, raw, stage, rank, tensor, seed);

/** provePart with the exact engine's term budget set (tests lower it to reach "too large" at small sizes). */
export const partProver = (opts: PartOptions = {}): ProvePart => (plan, raw, stage, rank, tensor, seed) => {
  try {
    // The logical side on the box the part's claims hold (stages/shrink/box.ts): a rank's rows, not every rank's.
    return provePartOf(plan, raw, stage, rank, closure(plan, stage.logical, rank, tensor, opts.maxHolders, opts.maxRanks), seed, opts, undefined, (pr) => boxPart(pr) ?? pr);
  } catch (e) {
    if (e instanceof PartError) return { why: e.message };
    throw e;
  }
};

/**
 * A rewrite of a written part that also keeps fewer ranks (stages/shrink/periodic.ts): the kept
 * ranks as indices into the written part's ranks (rank j of the rewrite is kept[j]), the number
 * of obligations it has, and what it did (prefixed to the reason).
 */
export interface PartRewrite {
  readonly raw: RawPlan;
  readonly kept: readonly number[];
  readonly obligations: number;
  readonly note: string;
}

interface PartOptions {
  readonly termBudget?: number;
  readonly maxHolders?: number;
  readonly maxRanks?: number;
  /** Milliseconds each exact attempt may take before it stops as "too large" (for a witness only: then the numeric run). */
  readonly exactMs?: number;
}

/**
 * A part from its closure `c`: written as a plan, loaded, reduced and proved with the numeric
 * run and the cuts for witnesses. `logicalSide`: the part's logical side when the caller
 * gives its own (stages/shrink/deepen.ts: from the part's inputs alone). Throws PartError.
 */
export function provePartOf(plan: LoadedPlan, raw: RawPlan, stage: Stage, rank: number, c: ReturnType<typeof closure>, seed: number, opts: PartOptions = {}, logicalSide?: ReturnType<typeof extractLogicalRaw>, rewrite?: (pr: RawPlan) => RawPlan | PartRewrite | string): ReturnType<ProvePart> {
  {
    const written = partRaw(plan, raw, stage, c, opts.maxRanks, logicalSide);
    // The caller's rewrite of the part (stages/shrink/deepen.ts: its logical side on the box it
    // holds; stages/shrink/periodic.ts: one period, one rank per class of copies, or why not).
    const rw = rewrite === undefined ? written.raw : rewrite(written.raw);
    if (typeof rw === 'string') return { why: rw };
    const dropping = 'kept' in rw;
    const pr = dropping ? rw.raw : rw;
    const ranks = dropping ? rw.kept.map((i) => written.ranks[i] as number) : written.ranks;
    const expected = dropping ? rw.obligations : c.obligations.size;
    let part: LoadedPlan;
    try {
      part = loadPartObject(`${plan.file} (stage ${stage.index + 1}, rank ${rank})`, JSON.parse(JSON.stringify(pr)));
    } catch (e) {
      if (e instanceof PlanError) return { why: `the part does not load: ${e.issues.slice(0, 2).map((i) => `${i.path}: ${i.message}`).join('; ')}` };
      throw e;
    }
    const target = plan.logical.tensors.name(stage.logical);
    let st = stageOf(part, target);
    if (st === undefined || st.obligations.length !== expected) return { why: `the part has ${st?.obligations.length ?? 0} obligations of '${target}', its closure ${expected}` };
    let use = part;
    let useRaw = pr;
    let reduced = false;
    let notReduced: string | undefined;
    try {
      const red = reducePlan(part, pr, true);
      const rs = red === undefined ? undefined : stageOf(red.plan, target);
      if (red !== undefined && rs !== undefined && rs.obligations.length === st.obligations.length) {
        use = red.plan;
        useRaw = red.raw;
        st = rs;
        reduced = true;
      } else notReduced = red === undefined ? 'no dim can shrink' : 'the reduced part has other obligations';
    } catch (e) {
      if (!(e instanceof ReductionError)) throw e;
      notReduced = e.message;
    }
    const stop = (): Stop | undefined => (opts.exactMs === undefined ? undefined : { at: performance.now() + opts.exactMs, reason: `too large for the exact engine within ${opts.exactMs / 1000} s (a part tried for a witness only)` });
    const proved = proveStage({ info: { stage: stage.index + 1, logical: target, mode: reduced ? 'reduced' : 'extracted', reduced: [], kept: [] }, plan: use, stage: st }, seed, opts.termBudget, stop());
    let { result, numeric } = proved;
    // The exact engine gave up on the part: a witness needs no normal form (docs/engine.md,
    // "Numeric witnesses of large parts"), only the numeric run, on two draws.
    if (result.status === 'unknown' && /too large/.test(result.reason ?? '')) {
      const two = twoDraws(use, target, seed, result);
      if (two !== undefined && two.result.status === 'differs') ({ result, numeric } = two);
    }
    // Still open and large: a prefix cut of its value-indexed axes (a vocabulary), for a
    // witness only, as per stage (docs/engine.md, "Prefix cuts for witnesses").
    if (!(result.status === 'differs' && numeric.mismatches.some((m) => m.logical === target)) && /too large|differs/.test(`${result.status} ${result.reason ?? ''}`)) {
      const pre = prefixWitness(use, useRaw, target, seed);
      if (pre !== undefined && pre.result.status === 'differs' && pre.found.length > 0) {
        result = { ...pre.result, stage: result.stage, reason: `cut to a prefix for a witness (${pre.cut.join(', ')}, its ids restricted to it); witness values at the cut part's shapes: ${pre.result.reason ?? ''}` };
        numeric = { ...numeric, mismatches: pre.found };
      }
    }
    // Still open: a zero-extension cut of its contracted dims (a global norm's every gradient),
    // for a witness only (docs/engine.md, "Zero-extension cuts for witnesses").
    if (!(result.status === 'differs' && numeric.mismatches.some((m) => m.logical === target)) && /too large|differs/.test(`${result.status} ${result.reason ?? ''}`)) {
      const z = zeroCutWitness(use, useRaw, target, seed, stop(), opts.termBudget);
      if ('why' in z) result = { ...result, reason: `${result.reason ?? ''}; no zero-extension cut: ${z.why}` };
      else if (z.result.status === 'differs' && z.found.length > 0) {
        result = { ...z.result, stage: result.stage, reason: `cut for a witness by zero extension (${cutList(z.cut)}; the inputs are zero at the positions cut); witness values at the cut part's shapes: ${z.result.reason ?? ''}` };
        numeric = { ...numeric, mismatches: z.found };
      } else result = { ...result, reason: `${result.reason ?? ''}; at a zero-extension cut (${z.cut.length} dims; for witnesses only): ${z.result.status}${z.result.reason === undefined ? '' : ` (${z.result.reason.slice(0, 200)})`}` };
    }
    // Back to the full plan's ranks.
    const witness = numeric.mismatches.filter((m) => m.logical === target).map((m) => ({ ...m, rank: ranks[m.rank] ?? m.rank }));
    const failingRanks = result.failingRanks.map((r) => ranks[r] ?? r);
    if (c.fold !== undefined) result = { ...result, reason: `${result.reason ?? ''}; ${foldText(plan, c.fold)}` };
    if (dropping) result = { ...result, reason: `${rw.note}: ${result.reason ?? ''}` };
    if (c.cutAddends > 0) result = { ...result, reason: `${result.reason ?? ''}; assumed as claimed: ${c.cutAddends} addend(s) of '${target}' on the part's ranks (their group has more holders than a part takes; they are obligations of this stage too, so the stage fails whether or not they hold)` };
    // Witness-only evidence: the part's values are at its own (cut) shapes and rank numbers.
    const diagnosis = witness.length === 0 ? undefined : diagnoseWitness(witness, result.reason ?? '');
    return { rank, ranks, result: { ...result, failingRanks }, witness, reduced, raw: useRaw, ...(notReduced === undefined ? {} : { notReduced: notReduced.slice(0, 300) }), ...(diagnosis === undefined ? {} : { diagnosis }) };
  }
}
