/**
 * Independent components of a stage and rank symmetry (docs/engine.md, "Stage components").
 *
 * A stage whose closure runs no collective is, rank by rank, independent: the obligations of
 * rank r are computed from rank r's inputs only. Each rank's part (a component) is written
 * as a single-rank plan:
 *  - the rank's program instantiated for it: concrete shapes, attributes and lineage, on a
 *    mesh whose axes all have size 1;
 *  - the logical graph of the stage, with every dim of a `batch` (SIMD) class cut to the
 *    window the component's claims use along that class, and the claims' offsets translated
 *    by the window's start.
 * Dp replicas then give the same component plan, byte for byte: one proof covers them all, a
 * hit being confirmed on the full text. Each distinct component plan is loaded with every
 * check of the loader, checked to hold the rank's obligations (translated), reduced by the
 * lane reducer, and proved.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { loadPlanObject } from '../../lineage/load.js';
import { PlanError } from '../../plans/errors.js';
import type { Program } from '../../plans/model.js';
import type { RawDimIndex, RawLineage, RawParallelOp, RawParallelTensor, RawPlan, RawRange } from '../../plans/raw.js';
import type { AttrValue } from '../../ops/types.js';
import type { LineageNF } from '../../lineage/model.js';
import type { Stage } from '../decompose/prove.js';
import { analyzeReduction } from './reduce.js';
import { extractLogicalRaw, stageClosure, stageOf, type StageClosure } from '../decompose/extract.js';

export class ComponentError extends Error {}

/** [start, width] per logical tensor and dim, for dims cut to a window. */
type Windows = Map<string, [number, number]>;
const wkey = (logical: number, d: number): string => `${logical}:${d}`;

/** Obligations of one rank, as a stage. */
export function rankStage(stage: Stage, rank: number): Stage {
  return { index: stage.index, logical: stage.logical, obligations: stage.obligations.filter((o) => o.rank === rank) };
}

/** True when the stage's closure runs no collective: its ranks are independent components. */
export function splitsByRank(c: StageClosure): boolean {
  return c.collectives.size === 0;
}

export function rawLineage(full: LoadedPlan, nf: LineageNF, win: Windows): RawLineage {
  const index: RawDimIndex[] = nf.ranges.map((b, d) => {
    const o = win.get(wkey(nf.logical, d))?.[0] ?? 0;
    const rs: RawRange[] = [];
    for (let i = 0; i + 1 < b.length; i += 2) rs.push([(b[i] as number) - o, (b[i + 1] as number) - o]);
    return rs.length === 1 ? (rs[0] as RawRange) : rs;
  });
  const v = nf.value;
  const complete = v.n === 1 && v.divisor === 1;
  return {
    logical: full.logical.tensors.name(nf.logical),
    index,
    ...(complete ? {} : { value: { chunk: v.idx, of: v.n, ...(v.reduce === 'sum' ? {} : { reduce: v.reduce }), ...(v.divisor === 1 ? {} : { divisor: v.divisor }), ...(v.split === '' ? {} : { split: v.split }) } }),
  };
}

/** The claims of one rank's component (inputs and obligations), by "rank:tensor". */
function claims(full: LoadedPlan, stage: Stage, c: StageClosure): Map<string, LineageNF> {
  const m = new Map(c.inputs);
  for (const o of stage.obligations) m.set(`${o.rank}:${o.tensor}`, o.nf);
  return m;
}

/**
 * The single-rank plan of rank `rank`'s component. `win` cuts logical dims to windows;
 * pass an empty map for the uncut component.
 */
const rawOpsCache = new WeakMap<object, Map<string, RawParallelOp>>();
const logicalCache = new WeakMap<Stage, Map<string, ReturnType<typeof extractLogicalRaw>>>();

export function componentRaw(full: LoadedPlan, raw: RawPlan, stage: Stage, rank: number, c: StageClosure, win: Windows): RawPlan {
  const sub = rankStage(stage, rank);
  // The logical part depends only on the logical closure: built once per stage and closure.
  let lc = logicalCache.get(stage);
  if (lc === undefined) logicalCache.set(stage, (lc = new Map()));
  const lkey = `${[...c.logicalOps].sort((a, b) => a - b).join(',')}|${[...c.logicalInputs].sort((a, b) => a - b).join(',')}`;
  let lpart = lc.get(lkey);
  if (lpart === undefined) lc.set(lkey, (lpart = extractLogicalRaw(full, raw, sub, c)));
  const base = { tensors: structuredClone(lpart.tensors), ops: structuredClone(lpart.ops), contract: { inputs: [...lpart.contractInputs], outputs: [lpart.target] } };
  const pi = full.rankProgram[rank] as number;
  const p = full.programs[pi] as Program;
  const rp = raw.parallel.programs[pi];
  if (rp === undefined) throw new ComponentError(`program ${pi} not in the plan file`);
  const v = full.view(rank);
  let rawOps = rawOpsCache.get(rp);
  if (rawOps === undefined) rawOpsCache.set(rp, (rawOps = new Map(rp.ops.map((o) => [o.id, o]))));
  const ops: RawParallelOp[] = [...(c.ops[pi] ?? [])].sort((a, b) => a - b).map((op) => {
    const ro = rawOps.get(p.ops.ids.name(op));
    if (ro === undefined) throw new ComponentError(`op '${p.ops.ids.name(op)}' not in the plan file`);
    const out: RawParallelOp = { id: ro.id, op: ro.op, inputs: [...ro.inputs], outputs: [...ro.outputs] };
    const attrs = v.attrs[op] ?? {};
    if (Object.keys(attrs).length > 0) out.attrs = structuredClone(attrs) as Record<string, AttrValue>;
    if (ro.loc !== undefined) out.loc = ro.loc;
    return out;
  });
  const cl = claims(full, sub, c);
  const used = new Set<number>();
  for (const op of c.ops[pi] ?? []) for (const t of [...p.ops.opInputs(op), ...p.ops.opOutputs(op)]) used.add(t);
  const tensors: RawParallelTensor[] = [...used].sort((a, b) => a - b).map((t) => {
    const nf = cl.get(`${rank}:${t}`);
    const dtype = p.dtypes[t];
    return { id: p.tensors.name(t), shape: [...(v.shapes[t] ?? [])], ...(dtype === undefined ? {} : { dtype }), ...(nf === undefined ? {} : { lineage: rawLineage(full, nf, win) }) };
  });
  const lg = full.logical;
  for (const t of base.tensors) {
    const id = lg.tensors.id(t.id);
    t.shape = t.shape.map((s, d) => win.get(wkey(id, d))?.[1] ?? s);
  }
  const name = `${raw.name ?? full.name} / stage ${stage.index + 1} (${lg.tensors.name(stage.logical)}) / component`;
  return {
    format: 'planproof/v1',
    name,
    description: `One rank's component of stage ${stage.index + 1}, instantiated on a one-rank mesh, batch dims cut to the component's window (docs/engine.md, "Stage components").`,
    mesh: { axes: raw.mesh.axes.map((a) => ({ name: a.name, size: 1 })) },
    logical: { tensors: base.tensors, ops: base.ops },
    parallel: { programs: [{ name: 'component', ranks: 'all', tensors, ops }] },
    contract: base.contract,
  };
}

/**
 * Windows of a component: for each logical class that is `batch` in the uncut component plan
 * and whose logical dims all have one size N, the hull of the component's claims along it,
 * when narrower than N. `classes` comes from analyzing the uncut component plan.
 */
export function windowsOf(full: LoadedPlan, stage: Stage, rank: number, c: StageClosure, classes: ClassInfo): Windows {
  const hull = new Map<number, [number, number]>();
  for (const nf of claims(full, rankStage(stage, rank), c).values()) {
    nf.ranges.forEach((b, d) => {
      const cls = classes.cls.get(wkey(nf.logical, d));
      if (cls === undefined) return;
      for (let i = 0; i + 1 < b.length; i += 2) {
        const h = hull.get(cls);
        const s = b[i] as number;
        const e = b[i + 1] as number;
        hull.set(cls, h === undefined ? [s, e] : [Math.min(h[0], s), Math.max(h[1], e)]);
      }
    });
  }
  const win: Windows = new Map();
  for (const [key, cls] of classes.cls) {
    const h = hull.get(cls);
    const n = classes.size.get(cls);
    if (h === undefined || n === undefined || h[1] - h[0] >= n) continue;
    win.set(key, [h[0], h[1] - h[0]]);
  }
  return win;
}

/** Batch classes of logical dims in an uncut component plan, with their common size. */
export interface ClassInfo {
  /** "logical:dim" (full plan's logical ids) -> class, for dims of batch classes with one size. */
  readonly cls: Map<string, number>;
  readonly size: Map<number, number>;
}

export function batchClasses(full: LoadedPlan, comp: LoadedPlan): ClassInfo {
  // Windows are ranges: slice semantics only (lane labels of reshape join dims by index mod f).
  const a = analyzeReduction(comp, { lanes: false });
  const lg = comp.logical;
  const sizes = new Map<number, Set<number>>();
  const members: [string, number][] = [];
  for (let t = 0; t < lg.tensors.size; t++) {
    const fullId = full.logical.tensors.id(lg.tensors.name(t));
    (lg.shapes[t] ?? []).forEach((s, d) => {
      const cls = a.logicalClass?.[t]?.[d];
      if (cls === undefined || a.logicalRole?.[t]?.[d] !== 'batch') return;
      let ss = sizes.get(cls);
      if (ss === undefined) sizes.set(cls, (ss = new Set()));
      ss.add(s);
      members.push([wkey(fullId, d), cls]);
    });
  }
  const size = new Map<number, number>();
  for (const [cls, ss] of sizes) if (ss.size === 1) size.set(cls, [...ss][0] as number);
  return { cls: new Map(members.filter(([, cls]) => size.has(cls))), size };
}

export function loadComponent(text: string, file: string): LoadedPlan {
  try {
    return loadPlanObject(file, JSON.parse(text));
  } catch (e) {
    // A component held only as partial values: name a tensor it starts from as the contract
    // output (it enters no equality; extract.ts, withOutputFallback).
    if (e instanceof PlanError && /partial values/.test(e.message)) {
      const raw = JSON.parse(text) as RawPlan;
      for (const alt of raw.contract.inputs) {
        try {
          return loadPlanObject(file, { ...raw, contract: { inputs: raw.contract.inputs, outputs: [alt] } });
        } catch {
          // next candidate
        }
      }
    }
    const msg = e instanceof PlanError ? e.issues.slice(0, 3).map((i) => `${i.path}: ${i.message}`).join('; ') : e instanceof Error ? e.message : String(e);
    throw new ComponentError(`the component plan does not load: ${msg}`);
  }
}

/**
 * Checks that a loaded component plan holds exactly rank `rank`'s obligations of the stage
 * (offsets translated by the windows, on its one rank) and reaches as many tensors. Returns
 * its stage.
 */
export function checkComponent(full: LoadedPlan, stage: Stage, rank: number, c: StageClosure, win: Windows, comp: LoadedPlan): Stage {
  const name = full.logical.tensors.name(stage.logical);
  const s = stageOf(comp, name);
  if (s === undefined) throw new ComponentError(`the component plan has no stage for '${name}'`);
  const tr = (nf: LineageNF): string => JSON.stringify([nf.ranges.map((b, d) => b.map((x) => x - (win.get(wkey(nf.logical, d))?.[0] ?? 0))), nf.value]);
  const p = full.programs[full.rankProgram[rank] as number] as Program;
  const want = rankStage(stage, rank).obligations.map((o) => `${p.tensors.name(o.tensor)}|${tr(o.nf)}`).sort();
  const cp = comp.programs[0] as Program;
  const got = s.obligations.map((o) => `${cp.tensors.name(o.tensor)}|${JSON.stringify([o.nf.ranges, o.nf.value])}`).sort();
  if (want.join('\n') !== got.join('\n')) throw new ComponentError(`the component of rank ${rank} has other obligations than the stage on that rank`);
  const cc = stageClosure(comp, s);
  if (cc.seen.size !== c.seen.size || cc.inputs.size !== c.inputs.size) throw new ComponentError(`the component of rank ${rank} reaches ${cc.seen.size} tensors (${cc.inputs.size} inputs), the stage on that rank ${c.seen.size} (${c.inputs.size})`);
  // Inputs: same tensors, same lineage after translation.
  for (const [k, nf] of c.inputs) {
    const t = Number(k.split(':')[1]);
    const ct = cp.tensors.id(p.tensors.name(t));
    const cnf = cc.inputs.get(`0:${ct}`);
    if (cnf === undefined || JSON.stringify([cnf.ranges, cnf.value]) !== tr(nf) || comp.logical.tensors.name(cnf.logical) !== full.logical.tensors.name(nf.logical)) throw new ComponentError(`the component of rank ${rank}: input '${p.tensors.name(t)}' has other lineage`);
  }
  return s;
}

/**
 * A plan's text up to a bijective renaming of its ids: logical tensors, logical ops, parallel
 * tensors and parallel ops renamed in order of appearance; name, description and source
 * locations dropped (they enter no value). Two plans with equal texts differ only by such a
 * renaming, so they build the same equalities over renamed symbols: one proof covers both.
 */
export function renamedText(raw: RawPlan): string | undefined {
  // Multi-rank collectives name tensors per program: not renamed here, so no text at all.
  if ((raw.parallel.collectives ?? []).length > 0) return undefined;
  const r = structuredClone(raw);
  const lt = new Map(r.logical.tensors.map((t, i) => [t.id, `L${i}`]));
  const ren = (m: Map<string, string>, x: string): string => m.get(x) ?? `?${x}`;
  delete r.name;
  delete r.description;
  for (const t of r.logical.tensors) {
    t.id = ren(lt, t.id);
    delete t.loc;
  }
  r.logical.ops.forEach((o, i) => {
    o.id = `o${i}`;
    o.inputs = o.inputs.map((x) => ren(lt, x));
    o.outputs = o.outputs.map((x) => ren(lt, x));
    delete o.loc;
  });
  r.contract = { inputs: r.contract.inputs.map((x) => ren(lt, x)), outputs: r.contract.outputs.map((x) => ren(lt, x)) };
  for (const p of r.parallel.programs) {
    const pt = new Map((p.tensors ?? []).map((t, i) => [t.id, `T${i}`]));
    delete p.name;
    for (const t of p.tensors ?? []) {
      t.id = ren(pt, t.id);
      delete t.loc;
      if (t.lineage !== undefined) t.lineage = { ...t.lineage, logical: ren(lt, t.lineage.logical) };
    }
    p.ops.forEach((o, i) => {
      o.id = `p${i}`;
      o.inputs = o.inputs.map((x) => ren(pt, x));
      o.outputs = o.outputs.map((x) => ren(pt, x));
      delete o.loc;
    });
  }
  return JSON.stringify(r);
}
