/**
 * Dataflow checks on the parallel graph.
 *  - SSA per rank: each local tensor produced at most once (by a local op or a collective).
 *  - Every consumed tensor is produced, or is an input with lineage to a contract input.
 *  - Acyclicity, including cycles through collectives and the order of collective calls on a
 *    rank (a blocking call cannot wait for a later one: that is a deadlock; sends are taken
 *    as non-blocking, receives and collectives as blocking). The check runs
 *    on the quotient graph that merges ranks sharing a program; a cycle in the real graph
 *    maps to a cycle there, so an acyclic quotient proves the plan acyclic. Only when the
 *    quotient has a cycle is the exact per-rank graph built, to confirm and report it.
 *    The quotient needs one collective record per distinct (program, call site) tuple, so
 *    `collectives` may be the per-template records of symcoll.ts; `exactCollectives` gives
 *    the per-rank instances, built only for the exact graph.
 */
import { registry } from '../ops/registry.js';
import { type Csr, cycleText, findCycle, toCsr } from './cycles.js';
import type { IssueSink, PlanIssue } from './errors.js';
import type { CollectiveInstance, Contract, LogicalGraph, Program } from './model.js';

/** Largest exact per-rank graph built to confirm a quotient cycle. */
const MAX_EXACT_NODES = 20_000_000;

export function checkDataflow(
  programs: Program[],
  rankProgram: Int32Array,
  collectives: CollectiveInstance[],
  logical: LogicalGraph,
  contract: Contract,
  sink: IssueSink,
  warnings: PlanIssue[],
  exactCollectives: () => CollectiveInstance[] = () => collectives,
): void {
  const isContractInput = new Uint8Array(logical.tensors.size);
  for (const t of contract.inputs) if (t >= 0) isContractInput[t] = 1;
  // Per-program counts from local ops (including per-rank collective calls).
  const baseProd = programs.map((p) => new Int32Array(p.tensors.size));
  const baseCons = programs.map((p) => new Uint8Array(p.tensors.size));
  programs.forEach((p, pi) => {
    const prod = baseProd[pi] as Int32Array;
    const cons = baseCons[pi] as Uint8Array;
    for (let op = 0; op < p.ops.size; op++) {
      for (const t of p.ops.opOutputs(op)) if (t >= 0) prod[t] = (prod[t] as number) + 1;
      for (const t of p.ops.opInputs(op)) if (t >= 0) cons[t] = 1;
    }
  });
  // Multi-rank collectives add per-rank production and consumption.
  const extraProd = new Map<number, Map<number, number>>();
  const extraCons = new Map<number, Set<number>>();
  for (const c of collectives) {
    c.group.forEach((r, i) => {
      if (c.sites[i] !== -1) return;
      const o = c.outputs[i] as number;
      if (o >= 0) {
        let m = extraProd.get(r);
        if (m === undefined) extraProd.set(r, (m = new Map()));
        m.set(o, (m.get(o) ?? 0) + 1);
      }
      const t = c.inputs[i] as number;
      if (t >= 0) {
        let s = extraCons.get(r);
        if (s === undefined) extraCons.set(r, (s = new Set()));
        s.add(t);
      }
    });
  }
  programs.forEach((p, pi) => {
    const prod = baseProd[pi] as Int32Array;
    const cons = baseCons[pi] as Uint8Array;
    const everUsed = new Uint8Array(p.tensors.size);
    let checkedBase = false;
    // Without multi-rank collectives every rank of the program has the same counts: check once.
    const ranks = extraProd.size === 0 && extraCons.size === 0 ? p.ranks.subarray(0, 1) : p.ranks;
    for (const r of ranks) {
      if (rankProgram[r] !== pi) continue;
      const ep = extraProd.get(r);
      const ec = extraCons.get(r);
      if (ep === undefined && ec === undefined) {
        if (checkedBase) continue;
        checkedBase = true;
      }
      const label = ep === undefined && ec === undefined && p.ranks.length > 1 ? `ranks of ${p.name}` : `rank ${r}`;
      for (let t = 0; t < p.tensors.size; t++) {
        const np = (prod[t] as number) + (ep?.get(t) ?? 0);
        const used = cons[t] === 1 || (ec?.has(t) ?? false);
        if (np > 0 || used) everUsed[t] = 1;
        const where = `${label} tensor '${p.tensors.name(t)}'`;
        const path = p.tensors.paths[t] as string;
        if (np > 1) sink.add(path, `is produced ${np} times (SSA: each tensor is written once per rank)`, where);
        const lin = p.lineage[t];
        if (np === 0 && used && lin === undefined) sink.add(path, 'is consumed but never produced and has no lineage (dangling)', where);
        if (np === 0 && lin !== undefined && !isContractInput[lin.logical]) {
          sink.add(path, `is never produced on this rank, yet its lineage claims logical '${logical.tensors.name(lin.logical)}', which is computed, not an iteration input`, where);
        }
        if (np > 0 && !used && lin === undefined) {
          warnings.push({ path, where, message: 'is computed but never used and has no lineage (dead work?)' });
        }
      }
    }
    for (let t = 0; t < p.tensors.size; t++) {
      if (!everUsed[t] && p.lineage[t] === undefined) {
        sink.add(p.tensors.paths[t] as string, 'is declared but never produced or consumed (dangling)', `${p.name} tensor '${p.tensors.name(t)}'`);
      }
    }
  });
  if (sink.size > 0) return;
  const quotient = buildFlowGraph(programs, rankProgram, collectives, 'program');
  const qc = findCycle(quotient);
  if (qc === undefined) return;
  const nodes = programs.reduce((s, p) => s + p.ops.size * p.ranks.length, 0);
  if (nodes > MAX_EXACT_NODES) {
    sink.add(quotient.path(qc[0] as number), `possible cycle (checked on ranks merged by program; the plan is too large for the exact check): ${cycleText(qc.map(quotient.label))}`);
    return;
  }
  const exact = buildFlowGraph(programs, rankProgram, exactCollectives(), 'rank');
  const ec = findCycle(exact);
  if (ec !== undefined) {
    sink.add(exact.path(ec[0] as number), `the parallel graph has a cycle (a deadlock if it runs): ${cycleText(ec.map(exact.label))}`);
  }
}

interface FlowGraph extends Csr {
  label: (node: number) => string;
  path: (node: number) => string;
}

/**
 * Nodes: every op of every unit (a unit is a program, or a rank), an extra "done" node per
 * collective call, and one node per distinct collective instance. Edges: producer -> consumer
 * within a unit; call -> instance -> call done; call done -> next call on the unit.
 */
function buildFlowGraph(programs: Program[], rankProgram: Int32Array, collectives: CollectiveInstance[], mode: 'program' | 'rank'): FlowGraph {
  const unitCount = mode === 'program' ? programs.length : rankProgram.length;
  const unitProgram = (u: number): Program => (mode === 'program' ? programs[u] : programs[rankProgram[u] as number]) as Program;
  const unitOf = (rank: number): number => (mode === 'program' ? (rankProgram[rank] as number) : rank);
  const base = new Int32Array(unitCount + 1);
  for (let u = 0; u < unitCount; u++) {
    const p = unitProgram(u);
    base[u + 1] = (base[u] as number) + p.ops.size + p.collectiveSites.length;
  }
  // Done node of a call site: after the unit's ops, in site order.
  const siteSlot = programs.map((p) => {
    const m = new Int32Array(p.ops.size).fill(-1);
    p.collectiveSites.forEach((op, k) => (m[op] = k));
    return m;
  });
  const opNode = (u: number, op: number): number => (base[u] as number) + op;
  const doneNode = (u: number, op: number): number => {
    const p = unitProgram(u);
    return (base[u] as number) + p.ops.size + ((siteSlot[p.index] as Int32Array)[op] as number);
  };
  const producerNode = new Map<number, Int32Array>();
  const prodOf = (u: number): Int32Array => {
    let m = producerNode.get(u);
    if (m === undefined) {
      const p = unitProgram(u);
      m = new Int32Array(p.tensors.size).fill(-1);
      for (let op = 0; op < p.ops.size; op++) {
        const isCall = (siteSlot[p.index] as Int32Array)[op] as number >= 0;
        for (const t of p.ops.opOutputs(op)) if (t >= 0) m[t] = isCall ? doneNode(u, op) : opNode(u, op);
      }
      producerNode.set(u, m);
    }
    return m;
  };
  const src: number[] = [];
  const dst: number[] = [];
  const edge = (a: number, b: number): void => {
    if (a >= 0 && b >= 0) {
      src.push(a);
      dst.push(b);
    }
  };
  for (let u = 0; u < unitCount; u++) {
    const p = unitProgram(u);
    const prod = prodOf(u);
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opInputs(op)) if (t >= 0) edge(prod[t] as number, opNode(u, op));
    for (let k = 1; k < p.collectiveSites.length; k++) edge(doneNode(u, p.collectiveSites[k - 1] as number), opNode(u, p.collectiveSites[k] as number));
  }
  // Consumers per unit, for multi-rank instances whose outputs feed local ops.
  const consumerCache = new Map<number, Map<number, number[]>>();
  const consumersOf = (u: number, t: number): number[] => {
    let m = consumerCache.get(u);
    if (m === undefined) {
      m = new Map();
      const p = unitProgram(u);
      for (let op = 0; op < p.ops.size; op++) {
        for (const x of p.ops.opInputs(op)) {
          let l = m.get(x);
          if (l === undefined) m.set(x, (l = []));
          l.push(opNode(u, op));
        }
      }
      consumerCache.set(u, m);
    }
    return m.get(t) ?? [];
  };
  const instKeys = new Map<string, number>();
  const instLabels: string[] = [];
  const instPaths: string[] = [];
  let next = base[unitCount] as number;
  const instEdges: [number, number][] = [];
  collectives.forEach((c) => {
    const units = [...c.group].map(unitOf);
    const p2p = registry.get(c.kind).collective?.pattern === 'p2p';
    const key = c.sites[0] === -1 ? `m${c.path}|${units.join(',')}` : units.map((u, i) => `${u}:${c.sites[i]}`).join(',');
    if (instKeys.has(key)) return;
    const node = next++;
    instKeys.set(key, node);
    instLabels.push(`${registry.get(c.kind).name} '${c.id}' on [${[...c.group].join(', ')}]`);
    instPaths.push(c.path);
    c.group.forEach((r, i) => {
      const u = units[i] as number;
      const s = c.sites[i] as number;
      if (s >= 0) {
        // A send does not wait for its receiver (buffered, as batched isend/irecv), so
        // only receivers and collective members wait for the instance.
        const sender = p2p && i === 0;
        instEdges.push([opNode(u, s), node], sender ? [opNode(u, s), doneNode(u, s)] : [node, doneNode(u, s)]);
      } else {
        const tin = c.inputs[i] as number;
        if (tin >= 0) instEdges.push([prodOf(u)[tin] as number, node]);
        const tout = c.outputs[i] as number;
        if (tout >= 0) for (const cn of consumersOf(u, tout)) instEdges.push([node, cn]);
      }
    });
  });
  for (const [a, b] of instEdges) edge(a, b);
  const csr = toCsr(next, src, dst);
  const unitAt = (node: number): number => {
    let lo = 0;
    let hi = unitCount;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((base[mid] as number) <= node) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const describe = (node: number): [string, string] => {
    if (node >= (base[unitCount] as number)) {
      const k = node - (base[unitCount] as number);
      return [instLabels[k] as string, instPaths[k] as string];
    }
    const u = unitAt(node);
    const p = unitProgram(u);
    let local = node - (base[u] as number);
    const done = local >= p.ops.size;
    if (done) local = p.collectiveSites[local - p.ops.size] as number;
    const who = mode === 'program' ? p.name : `rank ${u}`;
    return [`${who} op '${p.ops.ids.name(local)}'${done ? ' (completion)' : ''}`, p.ops.ids.paths[local] as string];
  };
  return { ...csr, label: (x) => describe(x)[0], path: (x) => describe(x)[1] };
}
