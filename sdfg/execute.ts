/**
 * Execution of a loaded plan's two graphs over any scalar algebra: Float64 for numeric
 * evaluation (witnesses, bug confirmation) or exact terms for symbolic execution.
 * The parallel graph runs in dataflow order across ranks; collectives fire when every
 * member's input is available.
 */
import type { Algebra, Dense } from '../ops/algebra.js';
import { registry } from '../ops/registry.js';
import type { Attrs } from '../ops/types.js';
import type { LoadedPlan } from '../lineage/load.js';
import type { Program } from '../plans/model.js';
import type { LineageNF } from '../lineage/model.js';

/** Values of the logical graph's tensors, by logical tensor id. */
export type LogicalValues<S> = (Dense<S> | undefined)[];

/** Runs the logical graph from the given input values (contract inputs). */
export function executeLogical<S>(plan: LoadedPlan, alg: Algebra<S>, inputs: LogicalValues<S>): LogicalValues<S> {
  const lg = plan.logical;
  const vals: LogicalValues<S> = [...inputs];
  const order = logicalOrder(plan);
  for (const op of order) {
    const ins = [...lg.ops.opInputs(op)].map((t) => {
      const v = vals[t];
      if (v === undefined) throw new Error(`logical tensor '${lg.tensors.name(t)}' has no value`);
      return v;
    });
    const outs = registry.get(lg.ops.kind[op] as number).apply(alg, ins, lg.attrs[op] as Attrs);
    lg.ops.opOutputs(op).forEach((t, k) => (vals[t] = outs[k]));
  }
  return vals;
}

/** Logical ops in topological order: the one order the loader computed (LogicalGraph.order). */
export function logicalOrder(plan: LoadedPlan): readonly number[] {
  return plan.logical.order;
}

/** Per rank, the value of each local tensor (undefined until computed). */
export type RankValues<S> = (Dense<S> | undefined)[][];

/**
 * Wrappers around each op a parallel run applies (interval certificates use them to know which
 * op of which rank declares a requirement, stages/engines/interval.ts): each gets a thunk that
 * applies the op and returns what the op's outputs are to be.
 */
export interface ParallelHooks<S> {
  /** Local op `op` of rank `rank`. */
  local?(rank: number, op: number, apply: () => Dense<S>[]): Dense<S>[];
  /** Collective instance `ci` of `plan.collectives` (its outputs per group member). */
  collective?(ci: number, apply: () => (Dense<S> | undefined)[]): (Dense<S> | undefined)[];
}

/**
 * Runs every rank's program. `input(rank, tensor)` supplies tensors that no op or collective
 * produces on that rank (they have lineage to a contract input: the loader checked it).
 */
export function executeParallel<S>(plan: LoadedPlan, alg: Algebra<S>, input: (rank: number, tensor: number) => Dense<S>, hooks?: ParallelHooks<S>): RankValues<S> {
  const nRanks = plan.mesh.size;
  const prog = (r: number): Program => plan.programs[plan.rankProgram[r] as number] as Program;
  const vals: RankValues<S> = Array.from({ length: nRanks }, (_, r) => new Array<Dense<S> | undefined>(prog(r).tensors.size));
  // Local consumers per program (collective call sites are driven by their instances).
  const isSite = plan.programs.map((p) => {
    const m = new Uint8Array(p.ops.size);
    for (const op of p.collectiveSites) m[op] = 1;
    return m;
  });
  const localConsumers = plan.programs.map((p, pi) => {
    const c: number[][] = Array.from({ length: p.tensors.size }, () => []);
    // Once per distinct input: the queue below subtracts every occurrence of the tensor at once.
    for (let op = 0; op < p.ops.size; op++) if (!(isSite[pi] as Uint8Array)[op]) for (const t of new Set(p.ops.opInputs(op))) (c[t] as number[]).push(op);
    return c;
  });
  const pending: Int32Array[] = Array.from({ length: nRanks }, (_, r) => {
    const p = prog(r);
    const a = new Int32Array(p.ops.size);
    for (let op = 0; op < p.ops.size; op++) a[op] = p.ops.opInputs(op).length;
    return a;
  });
  const produced: Uint8Array[] = Array.from({ length: nRanks }, (_, r) => new Uint8Array(prog(r).tensors.size));
  // Collective instances waiting on (rank, tensor).
  const waiting = new Map<string, number[]>();
  const instPending = new Int32Array(plan.collectives.length);
  plan.collectives.forEach((c, ci) => {
    c.group.forEach((r, i) => {
      const t = c.inputs[i] as number;
      const o = c.outputs[i] as number;
      if (o >= 0) (produced[r] as Uint8Array)[o] = 1;
      if (t < 0) return;
      instPending[ci] = (instPending[ci] as number) + 1;
      const key = `${r}:${t}`;
      const l = waiting.get(key);
      if (l === undefined) waiting.set(key, [ci]);
      else l.push(ci);
    });
  });
  for (let r = 0; r < nRanks; r++) {
    const p = prog(r);
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) (produced[r] as Uint8Array)[t] = 1;
  }
  const queue: [number, number][] = [];
  const set = (r: number, t: number, v: Dense<S>): void => {
    (vals[r] as (Dense<S> | undefined)[])[t] = v;
    queue.push([r, t]);
  };
  const runLocal = (r: number, op: number): void => {
    const p = prog(r);
    const view = plan.view(r);
    const ins = [...p.ops.opInputs(op)].map((t) => (vals[r] as Dense<S>[])[t] as Dense<S>);
    const apply = (): Dense<S>[] => registry.get(p.ops.kind[op] as number).apply(alg, ins, view.attrs[op] as Attrs);
    const outs = hooks?.local === undefined ? apply() : hooks.local(r, op, apply);
    p.ops.opOutputs(op).forEach((t, k) => set(r, t, outs[k] as Dense<S>));
  };
  const runInstance = (ci: number): void => {
    const c = plan.collectives[ci];
    if (c === undefined) return;
    const rule = registry.get(c.kind).collective;
    if (rule === undefined) throw new Error('not a collective');
    const ins = [...c.group].map((r, i) => {
      const t = c.inputs[i] as number;
      return t >= 0 ? (vals[r] as Dense<S>[])[t] : undefined;
    });
    const apply = (): (Dense<S> | undefined)[] => rule.applyGroup(alg, ins, c.attrs, c.group);
    const outs = hooks?.collective === undefined ? apply() : hooks.collective(ci, apply);
    c.group.forEach((r, i) => {
      const o = c.outputs[i] as number;
      const v = outs[i];
      if (o >= 0 && v !== undefined) set(r, o, v);
    });
  };
  for (let r = 0; r < nRanks; r++) {
    const p = prog(r);
    for (let t = 0; t < p.tensors.size; t++) if (!(produced[r] as Uint8Array)[t] && p.lineage[t] !== undefined) set(r, t, input(r, t));
    for (let op = 0; op < p.ops.size; op++) if (!(isSite[p.index] as Uint8Array)[op] && p.ops.opInputs(op).length === 0) runLocal(r, op);
  }
  plan.collectives.forEach((_, ci) => {
    if (instPending[ci] === 0) runInstance(ci);
  });
  for (let i = 0; i < queue.length; i++) {
    const [r, t] = queue[i] as [number, number];
    const p = prog(r);
    for (const op of (localConsumers[p.index] as number[][])[t] as number[]) {
      const pend = pending[r] as Int32Array;
      // An op may read the same tensor twice: count every occurrence.
      const uses = p.ops.opInputs(op).filter((x) => x === t).length;
      pend[op] = (pend[op] as number) - uses;
      if (pend[op] === 0) runLocal(r, op);
    }
    for (const ci of waiting.get(`${r}:${t}`) ?? []) {
      instPending[ci] = (instPending[ci] as number) - 1;
      if (instPending[ci] === 0) runInstance(ci);
    }
  }
  return vals;
}

/** Row-major flat index in the logical tensor of local element `flat` under lineage `nf`. */
export function logicalIndexer(nf: LineageNF, logicalShape: readonly number[]): (flat: number) => number {
  // Per dim, the list of logical coordinates the local dim enumerates (ranges in list order).
  const coords = nf.ranges.map((r) => {
    const out: number[] = [];
    for (let i = 0; i < r.length; i += 2) for (let x = r[i] as number; x < (r[i + 1] as number); x++) out.push(x);
    return out;
  });
  const localShape = coords.map((c) => c.length);
  const lst: number[] = [];
  const gst: number[] = [];
  let a = 1;
  let b = 1;
  for (let d = localShape.length - 1; d >= 0; d--) {
    lst[d] = a;
    gst[d] = b;
    a *= localShape[d] as number;
    b *= logicalShape[d] as number;
  }
  return (flat) => {
    let g = 0;
    for (let d = 0; d < localShape.length; d++) {
      const i = Math.floor(flat / (lst[d] as number)) % (localShape[d] as number);
      g += ((coords[d] as number[])[i] as number) * (gst[d] as number);
    }
    return g;
  };
}
