/**
 * The edits the bug catalog (plans/gen/bugs.ts) makes to a generated plan: finding ops and
 * reducers, scaling a gradient, changing attributes, giving one rank a program of its own. Kept
 * apart from the catalog so each entry reads as what it breaks, not how the JSON is walked.
 */
import type { AttrValue } from '../../ops/types.js';
import type { RawParallelOp, RawParallelTensor, RawInt, RawPlan, RawProgram, RawSelector } from '../raw.js';

/** A generated program: the generator always writes its tensors. */
export type Program = RawProgram & { tensors: RawParallelTensor[] };

export function programs(plan: RawPlan): Program[] {
  return plan.parallel.programs as Program[];
}

export function program(plan: RawPlan, i = 0): Program {
  const p = programs(plan)[i];
  if (p === undefined) throw new Error('plan has no program');
  return p;
}

export function find(ops: RawParallelOp[], pred: (o: RawParallelOp) => boolean, what: string, last = false): RawParallelOp {
  const list = ops.filter(pred);
  const o = last ? list[list.length - 1] : list[0];
  if (o === undefined) throw new Error(`bug injection: no ${what} in this plan`);
  return o;
}

export const axesOf = (o: RawParallelOp): string[] => (o.group !== undefined && !Array.isArray(o.group) && 'axes' in o.group ? o.group.axes : []);
export const isAr = (axis: string) => (o: RawParallelOp): boolean => o.op === 'all_reduce' && axesOf(o).includes(axis);

/** The all-reduce over `axis` that the value `name` was computed from (walking back through local ops). */
export function reducerOf(ops: RawParallelOp[], name: string, axis: string): RawParallelOp {
  const seen = new Set<string>();
  const stack = [name];
  while (stack.length > 0) {
    const t = stack.pop() as string;
    if (seen.has(t)) continue;
    seen.add(t);
    const o = ops.find((x) => x.outputs.includes(t));
    if (o === undefined) continue;
    if (isAr(axis)(o)) return o;
    if (o.op !== 'all_reduce') stack.push(...o.inputs.slice(0, 1));
  }
  throw new Error(`bug injection: no ${axis} all-reduce behind '${name}'`);
}

/** The shape of tensor `id` as the program declares it. */
export function shapeIn(prog: Program, id: string): RawInt[] {
  const t = prog.tensors.find((x) => x.id === id);
  if (t === undefined) throw new Error(`bug injection: no tensor '${id}' in the program`);
  return t.shape;
}

/** Puts a `scale` by `factor` between an optimizer step and its gradient; returns the new tensor. */
export function scaleGradient(prog: Program, step: RawParallelOp, factor: number, suffix: string): string {
  const g = step.inputs[1] as string;
  const id = `${g}.${suffix}`;
  prog.tensors.push({ id, shape: shapeIn(prog, g) });
  prog.ops.splice(prog.ops.indexOf(step), 0, { id, op: 'scale', inputs: [g], outputs: [id], attrs: { factor } });
  step.inputs[1] = id;
  return id;
}

/** Changes constants of the first `op` in a program (one rank's copy, or the shared one). */
export function changeAttr(prog: Program, op: string, what: string, attrs: Record<string, AttrValue>): string {
  const o = find(prog.ops, (x) => x.op === op, what);
  o.attrs = { ...(o.attrs ?? {}), ...attrs };
  return o.id;
}

/** Swaps the attributes (position offsets) of the first pair of zig-zag chunk ops of `op`. */
export function swapChunkAttrs(p: RawPlan, op: string): string {
  const [a, b] = program(p).ops.filter((x) => x.op === op && /\/cp\//.test(x.id));
  if (a === undefined || b === undefined) throw new Error(`bug injection: no zig-zag ${op} pair`);
  [a.attrs, b.attrs] = [b.attrs, a.attrs];
  return a.id;
}

/** Applies one mutation to every program (per-rank programs share their structure); returns the first place. */
export function everyProgram(plan: RawPlan, f: (prog: Program) => string): string {
  const ids = programs(plan).map(f);
  return ids[0] as string;
}

/** Replaces a collective by a local copy, keeping the dataflow. */
export function toIdentity(o: RawParallelOp): string {
  o.op = 'identity';
  delete o.attrs;
  delete o.group;
  return o.id;
}

/** The ranks a generated program's selector names ('all', a list, or `where` on the row-major mesh); plans/gen reads only ops/, so not plans/programs.ts selectRanks. */
export function ranksOf(plan: RawPlan, sel: RawSelector): number[] {
  const axes = plan.mesh.axes;
  const size = axes.reduce((n, a) => n * a.size, 1);
  if (sel === 'all' || sel === undefined) return Array.from({ length: size }, (_, r) => r);
  if (Array.isArray(sel)) return sel as number[];
  const where = (sel as { where: Record<string, number | number[]> }).where;
  const out: number[] = [];
  for (let r = 0; r < size; r++) {
    let rest = r;
    const coord = new Map<string, number>();
    for (let a = axes.length - 1; a >= 0; a--) {
      const ax = axes[a] as { name: string; size: number };
      coord.set(ax.name, rest % ax.size);
      rest = Math.floor(rest / ax.size);
    }
    if (Object.entries(where).every(([k, v]) => (Array.isArray(v) ? v : [v]).includes(coord.get(k) ?? -1))) out.push(r);
  }
  return out;
}

/**
 * Spells `rank` apart: the program that runs it loses it, and a copy runs it alone (the other
 * programs, a pipeline's other stages, keep their ranks). `nRanks` bounds the rank (a check).
 */
export function ownProgram(plan: RawPlan, rank: number, nRanks: number): Program {
  if (rank >= nRanks) throw new Error(`bug injection: rank ${rank} is outside the plan's ${nRanks} ranks`);
  const progs = programs(plan);
  const base = progs.find((p) => ranksOf(plan, p.ranks).includes(rank));
  if (base === undefined) throw new Error(`bug injection: no program runs rank ${rank}`);
  const copy = JSON.parse(JSON.stringify(base)) as Program;
  base.ranks = ranksOf(plan, base.ranks).filter((r) => r !== rank);
  copy.ranks = [rank];
  progs.push(copy);
  return copy;
}
