/**
 * Stage extraction (docs/engine.md, "Per-stage reduction"): one stage of a plan written as a
 * standalone ordinary plan file.
 *
 * A stage is cut from the rest of the plan by lineage: its inputs are free symbols
 * constrained only by their lineage, and its value is computed by the ops in its closure.
 * So the stage is exactly a plan whose
 *  - logical graph is the logical ops the stage's logical value is computed by, from the
 *    logical tensors its inputs name (contract inputs of the extracted plan);
 *  - programs keep, per template, the ops and collectives that the closure runs on some rank
 *    of the template, the tensors they read and write, the lineage of the stage's inputs and
 *    obligations; other lineage is dropped (those claims belong to other stages).
 * The extracted plan is loaded with every check of the loader, and its stage of the same
 * logical tensor is checked to have exactly the original stage's obligations (rank, tensor,
 * lineage) and inputs; anything else is an ExtractionError, and the caller proves the stage
 * in place.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { loadPlanObject } from '../../lineage/load.js';
import { PlanError } from '../../plans/errors.js';
import type { Program } from '../../plans/model.js';
import type { RawCollective, RawLogicalTensor, RawOp, RawParallelOp, RawParallelTensor, RawPlan, RawProgram } from '../../plans/raw.js';
import { logicalOrder } from '../../sdfg/execute.js';
import { evalLineage, type LineageNF } from '../../lineage/model.js';
import { decompose, producers, type Producer, type Stage } from './prove.js';

export class ExtractionError extends Error {}

export interface StageClosure {
  /** "rank:tensor" keys of every parallel tensor the closure reaches. */
  readonly seen: Set<string>;
  /** Inputs (assumed by lineage), by "rank:tensor". */
  readonly inputs: Map<string, LineageNF>;
  /** Per program: local op indices (ops and per-rank collective calls) run by the closure. */
  readonly ops: Set<number>[];
  /** Indices into plan.collectives of the collective instances the closure runs. */
  readonly collectives: Set<number>;
  /** Logical ops the logical value is computed by, and the logical tensors it starts from. */
  readonly logicalOps: Set<number>;
  readonly logicalInputs: Set<number>;
}

/** Producer of each (rank, tensor), as the stage builder sees it (shared with stages/decompose/prove.ts). */
const producerMap = producers;

/** The stage builder's closure walk (StageBuilder.build, step 1), recording what it runs. */
export function stageClosure(plan: LoadedPlan, stage: Stage, prod: Map<string, Producer> = producerMap(plan)): StageClosure {
  const lg = plan.logical;
  const inputs = new Map<string, LineageNF>();
  const seen = new Set<string>();
  const ops = plan.programs.map(() => new Set<number>());
  const collectives = new Set<number>();
  const lineage = (r: number, t: number): LineageNF | undefined => {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    return spec === undefined ? undefined : evalLineage(spec, plan.mesh, r, lg.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
  };
  const stack = stage.obligations.map((o) => [o.rank, o.tensor] as [number, number]);
  while (stack.length > 0) {
    const [r, t] = stack.pop() as [number, number];
    const key = `${r}:${t}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const nf = lineage(r, t);
    const pr = prod.get(key);
    if (nf !== undefined && (nf.logical !== stage.logical || pr === undefined)) {
      inputs.set(key, nf);
      continue;
    }
    if (pr === undefined) continue;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    if (pr.op >= 0) {
      (ops[pi] as Set<number>).add(pr.op);
      for (const x of p.ops.opInputs(pr.op)) stack.push([r, x]);
    } else {
      const c = plan.collectives[pr.inst];
      if (c === undefined) continue;
      collectives.add(pr.inst);
      c.group.forEach((m, i) => {
        const site = c.sites[i] as number;
        if (site >= 0) (ops[plan.rankProgram[m] as number] as Set<number>).add(site);
        const x = c.inputs[i] as number;
        if (x >= 0) stack.push([m, x]);
      });
    }
  }
  return { seen, inputs, ops, collectives, ...logicalClosure(plan, stage.logical, inputs.values()) };
}

/**
 * The logical side of a stage: from its tensor back to the logical tensors its inputs' claims
 * name, or to contract inputs (the builder's evalLogical).
 */
export function logicalClosure(plan: LoadedPlan, logical: number, inputs: Iterable<LineageNF>, more: Iterable<number> = []): Pick<StageClosure, 'logicalOps' | 'logicalInputs'> {
  const lg = plan.logical;
  // `more`: further logical inputs of the stage, met by other obligations' closures (stages/shrink/part.ts).
  const logicalInputs = new Set<number>([...[...inputs].map((nf) => nf.logical), ...[...more].filter((t) => t !== logical)]);
  const logicalOps = new Set<number>();
  const done = new Set<number>(logicalInputs);
  const lstack = [logical];
  while (lstack.length > 0) {
    const x = lstack.pop() as number;
    if (done.has(x)) continue;
    done.add(x);
    const op = lg.producer[x] as number;
    if (op < 0) {
      logicalInputs.add(x);
      continue;
    }
    logicalOps.add(op);
    for (const y of lg.ops.opInputs(op)) lstack.push(y);
  }
  return { logicalOps, logicalInputs };
}

interface ExtractedStage {
  readonly raw: RawPlan;
  readonly plan: LoadedPlan;
  /** The stage of the same logical tensor in the extracted plan. */
  readonly stage: Stage;
  readonly closure: StageClosure;
}

/**
 * The stage as a standalone plan file. `raw` is the plan file the loaded `plan` came from.
 */
export function extractStageRaw(plan: LoadedPlan, raw: RawPlan, stage: Stage, closure: StageClosure): RawPlan {
  const { tensors, ops, contractInputs, target } = extractLogicalRaw(plan, raw, stage, closure);
  return { ...extractParallelRaw(plan, raw, stage, closure, tensors, ops, contractInputs), name: `${raw.name ?? plan.name} / stage ${stage.index + 1} (${target})` };
}

/** The logical part of an extracted stage: the ops its value is computed by, their tensors, the contract inputs. */
export function extractLogicalRaw(plan: LoadedPlan, raw: RawPlan, stage: Stage, closure: Pick<StageClosure, 'logicalOps' | 'logicalInputs'>): { tensors: RawLogicalTensor[]; ops: RawOp[]; contractInputs: string[]; target: string } {
  const lg = plan.logical;
  const target = lg.tensors.name(stage.logical);
  // Logical graph: the ops the value is computed by (in file order), their tensors.
  const keepOps = new Set([...closure.logicalOps].map((op) => lg.ops.ids.name(op)));
  const ops: RawOp[] = raw.logical.ops.filter((o) => keepOps.has(o.id)).map((o) => structuredClone(o));
  const ltensors = new Set<string>([...closure.logicalInputs].map((t) => lg.tensors.name(t)));
  ltensors.add(target);
  for (const o of ops) for (const t of [...o.inputs, ...o.outputs]) ltensors.add(t);
  // A tensor the stage assumes that a kept op also computes (another output of the multi-output
  // op its value comes from: apex's LayerNorm backward gives both weight and bias gradients, and
  // Megatron all-reduces them in one buffer) is that op's output here, not a contract input.
  // The stage then assumes the claim on it of the value the logical graph computes, which is
  // what the claim states; a proof with the value free (in place) is no weaker an assumption.
  const produced = new Set(ops.flatMap((o) => o.outputs));
  const inputNames = new Set([...closure.logicalInputs].map((t) => lg.tensors.name(t)).filter((t) => !produced.has(t)));
  const tensors: RawLogicalTensor[] = raw.logical.tensors.filter((t) => ltensors.has(t.id)).map((t) => {
    const c = structuredClone(t);
    // Roles are descriptive; the extracted plan's inputs are the stage's assumed tensors.
    if (inputNames.has(t.id) && c.role !== 'input' && c.role !== 'param' && c.role !== 'optimizer_state') c.role = 'input';
    // An integer tensor the stage starts from keeps the values the full plan gives it (its
    // domain may come from propagation through layout ops, which the extracted plan lacks).
    // A dyadic constant's (a loss seed of 1/2) has no integer range to write: left real.
    const dom = lg.domains[lg.tensors.id(t.id)];
    if (inputNames.has(t.id) && c.values === undefined && dom !== undefined && dom.length > 0 && dom.every(Number.isInteger) && c.dtype !== 'bool') {
      const lo = dom[0] as number;
      const hi = dom[dom.length - 1] as number;
      c.values = hi - lo + 1 === dom.length ? { range: [lo, hi + 1] } : { range: [lo, lo + 1], also: dom.slice(1) };
      c.dtype ??= 'int64';
    }
    return c;
  });
  const contractInputs = [...inputNames].sort();
  return { tensors, ops, contractInputs, target };
}

function extractParallelRaw(plan: LoadedPlan, raw: RawPlan, stage: Stage, closure: StageClosure, tensors: RawLogicalTensor[], ops: RawOp[], contractInputs: string[]): RawPlan {
  const target = plan.logical.tensors.name(stage.logical);
  // Parallel side: per program, the ops the closure runs, and their tensors.
  const inputTensors = plan.programs.map(() => new Set<number>());
  for (const key of closure.inputs.keys()) {
    const [r, t] = key.split(':').map(Number) as [number, number];
    (inputTensors[plan.rankProgram[r] as number] as Set<number>).add(t);
  }
  // Tensors of the multi-rank collectives the closure runs.
  const collTensors = plan.programs.map(() => new Set<number>());
  for (const ci of closure.collectives) {
    const c = plan.collectives[ci];
    c?.group.forEach((m, i) => {
      const set = collTensors[plan.rankProgram[m] as number] as Set<number>;
      for (const x of [c.inputs[i] as number, c.outputs[i] as number]) if (x >= 0) set.add(x);
    });
  }
  const programs: RawProgram[] = raw.parallel.programs.map((rp, pi) => {
    const p = plan.programs[pi] as Program;
    const keep = new Set([...(closure.ops[pi] ?? [])].map((op) => p.ops.ids.name(op)));
    const pops: RawParallelOp[] = rp.ops.filter((o) => keep.has(o.id)).map((o) => structuredClone(o));
    const used = new Set<string>();
    for (const o of pops) for (const t of [...o.inputs, ...o.outputs]) used.add(t);
    for (const t of collTensors[pi] ?? []) used.add(p.tensors.name(t));
    const ptensors: RawParallelTensor[] = [];
    for (const t of rp.tensors ?? []) {
      if (!used.has(t.id)) continue;
      const c = structuredClone(t);
      const id = p.tensors.id(t.id);
      const spec = p.lineage[id];
      // Lineage kept: the stage's obligations (its logical tensor) and its inputs. Other
      // claims (by-products of a multi-output op) belong to other stages.
      if (spec !== undefined && spec.logical !== stage.logical && !(inputTensors[pi] as Set<number>).has(id)) delete c.lineage;
      ptensors.push(c);
    }
    const out: RawProgram = { ...(rp.name === undefined ? {} : { name: rp.name }), ranks: structuredClone(rp.ranks), tensors: ptensors, ops: pops };
    return out;
  });
  const keepColl = new Set([...closure.collectives].map((ci) => plan.collectives[ci]?.path).filter((x): x is string => x !== undefined));
  const collectives: RawCollective[] = (raw.parallel.collectives ?? []).filter((_, i) => keepColl.has(`$.parallel.collectives[${i}]`)).map((c) => structuredClone(c));
  return {
    format: 'planproof/v1',
    name: `${raw.name ?? plan.name} / stage ${stage.index + 1} (${target})`,
    description: `Stage ${stage.index + 1} of ${raw.name ?? plan.name}: the obligations of logical '${target}', extracted by planproof (docs/engine.md, "Per-stage reduction").`,
    mesh: structuredClone(raw.mesh),
    logical: { tensors, ops },
    parallel: { programs, ...(collectives.length > 0 ? { collectives } : {}) },
    // The schema wants an output: the stage's tensor (a stage held only as partial values fails
    // the loader's output check, and the stage is proved in place).
    contract: { inputs: contractInputs, outputs: [target] },
  };
}

/** Key of an obligation or input that does not depend on tensor numbering. */
function relKey(plan: LoadedPlan, r: number, t: number, nf: LineageNF): string {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  return `${r}|${p.tensors.name(t)}|${plan.logical.tensors.name(nf.logical)}|${JSON.stringify(nf.ranges)}|${JSON.stringify(nf.value)}`;
}

/** The stage of `logicalName` in a loaded (extracted) plan, or undefined. */
export function stageOf(plan: LoadedPlan, logicalName: string): Stage | undefined {
  const id = plan.logical.tensors.id(logicalName);
  return decompose(plan, logicalOrder(plan)).find((s) => s.logical === id);
}

/**
 * Loads an extracted stage plan and checks it is the same stage: the same obligations and
 * the same inputs, with the same lineage, on the same ranks. Throws ExtractionError otherwise.
 */
export function loadExtracted(full: LoadedPlan, stage: Stage, closure: StageClosure, raw: RawPlan, file: string): ExtractedStage {
  let plan: LoadedPlan;
  try {
    plan = loadPlanObject(file, JSON.parse(JSON.stringify(raw)));
  } catch (e) {
    const msg = e instanceof PlanError ? e.issues.slice(0, 3).map((i) => `${i.path}: ${i.message}`).join('; ') : e instanceof Error ? e.message : String(e);
    throw new ExtractionError(`the extracted stage does not load: ${msg}`);
  }
  const name = full.logical.tensors.name(stage.logical);
  const s = stageOf(plan, name);
  if (s === undefined) throw new ExtractionError(`the extracted plan has no stage for '${name}'`);
  const want = stage.obligations.map((o) => relKey(full, o.rank, o.tensor, o.nf)).sort();
  const got = s.obligations.map((o) => relKey(plan, o.rank, o.tensor, o.nf)).sort();
  if (want.join('\n') !== got.join('\n')) throw new ExtractionError(`the extracted stage of '${name}' has other obligations (${got.length} against ${want.length})`);
  const c = stageClosure(plan, s);
  const keys = (pl: LoadedPlan, m: Map<string, LineageNF>): string[] =>
    [...m.entries()].map(([k, nf]) => {
      const [r, t] = k.split(':').map(Number) as [number, number];
      return relKey(pl, r, t, nf);
    }).sort();
  if (keys(full, closure.inputs).join('\n') !== keys(plan, c.inputs).join('\n')) throw new ExtractionError(`the extracted stage of '${name}' has other inputs`);
  if (c.seen.size !== closure.seen.size) throw new ExtractionError(`the extracted stage of '${name}' reaches ${c.seen.size} tensors, the stage in place ${closure.seen.size}`);
  return { raw, plan, stage: s, closure: c };
}

/** Extracts and loads one stage (see the module comment). */
export function extractStage(full: LoadedPlan, raw: RawPlan, stage: Stage): ExtractedStage {
  const closure = stageClosure(full, stage);
  const r = extractStageRaw(full, raw, stage, closure);
  return withOutputFallback(r, (x) => loadExtracted(full, stage, closure, x, `${full.file} (stage ${stage.index + 1})`));
}

/**
 * The loader wants a contract output held complete. A stage held only as partial values
 * (a row-parallel matmul before its all-reduce) names instead a logical tensor it starts
 * from; the contract output enters no equality of the stage (decomposition and stage building
 * do not read it), only the loader's output check.
 */
export function withOutputFallback(raw: RawPlan, load: (r: RawPlan) => ExtractedStage): ExtractedStage {
  try {
    return load(raw);
  } catch (e) {
    if (!(e instanceof ExtractionError) || !/partial values/.test(e.message)) throw e;
    for (const alt of raw.contract.inputs) {
      try {
        return load({ ...raw, contract: { inputs: raw.contract.inputs, outputs: [alt] } });
      } catch (e2) {
        if (!(e2 instanceof ExtractionError)) throw e2;
      }
    }
    throw e;
  }
}
