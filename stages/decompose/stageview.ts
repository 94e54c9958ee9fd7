/**
 * One stage as a person reads it (`planproof explain`, the HTML report's drawings): the
 * logical ops that compute its tensor, the parallel ops and collectives that compute its
 * obligations on each rank, the input relations it assumes and the output relations it must
 * prove. Built from the prover's own closure walk (stages/decompose/extract.ts stageClosure), so the
 * picture shows exactly what the proof covered.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { regionStr, valueStr, type LineageNF } from '../../lineage/model.js';
import type { Program } from '../../plans/model.js';
import type { Mesh } from '../../plans/mesh.js';
import type { Attrs } from '../../ops/types.js';
import { registry } from '../../ops/registry.js';
import { logicalOrder } from '../../sdfg/execute.js';
import { stageClosure } from './extract.js';
import { decompose, type Stage } from './prove.js';

interface ViewOp {
  readonly id: string;
  readonly kind: string;
  readonly inputs: string[];
  readonly outputs: string[];
}

interface ViewParallelOp extends ViewOp {
  readonly rank: number;
}

interface ViewCollective {
  readonly id: string;
  readonly kind: string;
  /** Its attributes as `key: value` (`reduce: avg`, `dim: 0`): a wrong reduce op is often the bug itself. */
  readonly attrs: string;
  /** Its group: the mesh axes it spans and the ranks (`dp [0,1]`), or the ranks alone. */
  readonly group: string;
  /** Per group member: rank, input and output tensor names ('' when the member has none). */
  readonly members: { rank: number; input: string; output: string }[];
}

/** A lineage claim: rank, local tensor, and the logical region and value it holds. */
export interface ViewRelation {
  readonly rank: number;
  readonly tensor: string;
  readonly logical: string;
  readonly region: string;
  readonly value: string;
}

export interface StageView {
  /** 1-based, as in the report. */
  readonly index: number;
  readonly count: number;
  readonly logical: string;
  readonly logicalOps: ViewOp[];
  readonly logicalInputs: string[];
  readonly parallelOps: ViewParallelOp[];
  readonly collectives: ViewCollective[];
  readonly inputs: ViewRelation[];
  readonly outputs: ViewRelation[];
}

/** The plan's stages, as the verifier decomposes it. */
export function planStages(plan: LoadedPlan): Stage[] {
  return decompose(plan, logicalOrder(plan));
}

/**
 * The stage a user names: a 1-based index, or a logical tensor name. A string that is both
 * (a tensor named "3" and a different stage 3) is refused as ambiguous.
 */
export function findStage(stages: readonly Stage[], plan: LoadedPlan, key: string): Stage | { error: string } {
  const byName = stages.filter((s) => plan.logical.tensors.name(s.logical) === key);
  const n = /^[0-9]+$/.test(key) ? Number(key) : undefined;
  const byIndex = n === undefined ? undefined : stages[n - 1];
  if (byIndex !== undefined && byName.length > 0 && byName[0] !== byIndex) return { error: `stage '${key}' is ambiguous: stage ${key} is '${plan.logical.tensors.name(byIndex.logical)}', and logical tensor '${key}' is stage ${(byName[0] as Stage).index + 1}` };
  const s = byIndex ?? byName[0];
  if (s !== undefined) return s;
  if (n !== undefined) return { error: `no stage ${key}: the plan has ${stages.length} stage(s), numbered 1 to ${stages.length}` };
  const known = plan.logical.tensors.id(key) >= 0;
  return { error: known ? `logical tensor '${key}' has no stage: no rank computes a claim on it (it is a contract input or only read)` : `no stage named '${key}': no logical tensor of that name` };
}

/** The mesh axes whose groups are exactly `members` (`dp`, `dp,tp`), or '' when none are. */
function groupAxes(mesh: Mesh, members: readonly number[]): string {
  const first = members[0];
  if (first === undefined) return '';
  const axes = mesh.axes.map((_, a) => a).filter((a) => members.some((r) => mesh.coord(r, a) !== mesh.coord(first, a)));
  if (axes.length === 0) return '';
  const along = [...mesh.groupAlong(first, axes)].sort((x, y) => x - y);
  const want = [...members].sort((x, y) => x - y);
  return along.length === want.length && along.every((r, i) => r === want[i]) ? axes.map((a) => mesh.axes[a]).join(',') : '';
}

/** A collective's attributes, one `key: value` per attribute in key order. */
function attrsStr(attrs: Attrs): string {
  return Object.keys(attrs)
    .sort()
    .map((k) => `${k}: ${typeof attrs[k] === 'string' ? (attrs[k] as string) : JSON.stringify(attrs[k])}`)
    .join(', ');
}

function relation(plan: LoadedPlan, rank: number, tensor: string, nf: LineageNF): ViewRelation {
  return { rank, tensor, logical: plan.logical.tensors.name(nf.logical), region: regionStr(nf.ranges), value: valueStr(nf.value) };
}

/** The stage's view: see the module comment. */
export function stageView(plan: LoadedPlan, stages: readonly Stage[], stage: Stage): StageView {
  const c = stageClosure(plan, stage);
  const lg = plan.logical;
  const tname = (r: number, t: number): string => (plan.programs[plan.rankProgram[r] as number] as Program).tensors.name(t);
  const logicalOps = logicalOrder(plan)
    .filter((op) => c.logicalOps.has(op))
    .map((op) => ({ id: lg.ops.ids.name(op), kind: registry.get(lg.ops.kind[op] as number).name, inputs: [...lg.ops.opInputs(op)].map((t) => lg.tensors.name(t)), outputs: [...lg.ops.opOutputs(op)].map((t) => lg.tensors.name(t)) }));
  // A program's op runs on every rank of its template: shown on the ranks whose tensors the closure reached.
  const ranks = [...new Set([...c.seen].map((k) => Number(k.split(':')[0])))].sort((a, b) => a - b);
  const parallelOps: ViewParallelOp[] = [];
  for (const r of ranks) {
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    for (const op of [...(c.ops[pi] ?? [])].sort((a, b) => a - b)) {
      const def = registry.get(p.ops.kind[op] as number);
      if (def.collective !== undefined) continue;
      const outs = [...p.ops.opOutputs(op)];
      if (!outs.some((t) => c.seen.has(`${r}:${t}`))) continue;
      parallelOps.push({ rank: r, id: p.ops.ids.name(op), kind: def.name, inputs: [...p.ops.opInputs(op)].map((t) => tname(r, t)), outputs: outs.map((t) => tname(r, t)) });
    }
  }
  const collectives = [...c.collectives].sort((a, b) => a - b).map((i) => {
    const inst = plan.collectives[i];
    if (inst === undefined) throw new Error(`collective instance ${i} is missing`);
    return {
      id: inst.id,
      kind: registry.get(inst.kind).name,
      attrs: attrsStr(inst.attrs),
      group: ((axes: string, ranks: string): string => (axes === '' ? ranks : `${axes} ${ranks}`))(groupAxes(plan.mesh, [...inst.group]), `[${[...inst.group].join(',')}]`),
      members: [...inst.group].map((r, k) => ({ rank: r, input: (inst.inputs[k] as number) >= 0 ? tname(r, inst.inputs[k] as number) : '', output: (inst.outputs[k] as number) >= 0 ? tname(r, inst.outputs[k] as number) : '' })),
    };
  });
  const inputs = [...c.inputs.entries()].map(([k, nf]) => {
    const [r, t] = k.split(':').map(Number) as [number, number];
    return relation(plan, r, tname(r, t), nf);
  }).sort((a, b) => a.rank - b.rank || a.tensor.localeCompare(b.tensor));
  const outputs = stage.obligations.map((o) => relation(plan, o.rank, tname(o.rank, o.tensor), o.nf)).sort((a, b) => a.rank - b.rank || a.tensor.localeCompare(b.tensor));
  return { index: stage.index + 1, count: stages.length, logical: lg.tensors.name(stage.logical), logicalOps, logicalInputs: [...c.logicalInputs].map((t) => lg.tensors.name(t)).sort(), parallelOps, collectives, inputs, outputs };
}
