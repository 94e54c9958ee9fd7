/**
 * loadPlan: untrusted JSON -> validated normal form. Phases run in order and each stops the
 * load with every issue it found (PlanError): parse, schema, mesh, logical graph and
 * contract, rank programs, per-rank shapes, collectives, dataflow, lineage.
 */
import { IssueSink, PlanError, type PlanIssue } from './errors.js';
import { findTooDeep, MAX_DEPTH, parsePlanJson, readPlanText } from './json.js';
import { validateSchema } from './schema.js';
import { Mesh } from './mesh.js';
import { buildLogical } from './logical.js';
import { buildPrograms, checkView, instantiate } from './programs.js';
import { buildCollectives } from './collectives.js';
import { checkDataflow } from './dataflow.js';
import { ExprError, exprIssue } from './expr.js';
import type { CollectiveInstance, Plan, RankView } from './model.js';
import type { RawPlan } from './raw.js';
import { checkLineage, collectClaims, type Claim, type Coverage } from '../lineage/check.js';

export interface LoadedPlan extends Plan {
  readonly claims: Claim[];
  readonly coverage: Coverage[];
}

export function loadPlan(file: string): LoadedPlan {
  const text = readPlanText(file);
  return loadPlanText(file, text);
}

export function loadPlanText(file: string, text: string): LoadedPlan {
  return loadPlanObject(file, parsePlanJson(file, text));
}

export function loadPlanObject(file: string, raw: unknown): LoadedPlan {
  const sink = new IssueSink(file);
  if (raw !== null && typeof raw === 'object' && 'format' in raw && (raw as { format: unknown }).format !== 'planproof/v1') {
    throw new PlanError(file, [{ path: '$.format', message: `unsupported plan format ${JSON.stringify((raw as { format: unknown }).format)}; this planproof reads "planproof/v1"` }]);
  }
  const deep = findTooDeep(raw);
  if (deep !== undefined) throw new PlanError(file, [{ path: deep, message: `nested deeper than ${MAX_DEPTH} levels (limit of the plan format)` }]);
  validateSchema(raw, sink);
  sink.throwIfAny();
  const plan = raw as RawPlan;

  const mesh = buildMesh(plan, sink);
  sink.throwIfAny();

  const { graph: logical, contract } = buildLogical(plan, sink);
  sink.throwIfAny();

  const { programs, rankProgram } = buildPrograms(plan, mesh, logical, sink);
  sink.throwIfAny();

  // Views: one per program when nothing depends on coordinates, else one per rank (cached).
  const shared = new Map<number, RankView>();
  const perRank = new Map<number, RankView>();
  const view = (rank: number): RankView => {
    const p = programs[rankProgram[rank] as number];
    if (p === undefined) throw new Error(`rank ${rank} has no program`);
    if (!p.coordDependent) {
      let v = shared.get(p.index);
      if (v === undefined) shared.set(p.index, (v = instantiate(p, mesh, p.ranks[0] as number)));
      return v.rank === rank ? v : { ...v, rank };
    }
    let v = perRank.get(rank);
    if (v === undefined) perRank.set(rank, (v = instantiate(p, mesh, rank)));
    return v;
  };
  for (const p of programs) {
    const ranks = p.coordDependent ? [...p.ranks] : [p.ranks[0] as number];
    for (const r of ranks) {
      try {
        checkView(view(r), sink, p.coordDependent || p.ranks.length === 1 ? `rank ${r} ` : '');
      } catch (e) {
        if (!(e instanceof ExprError)) throw e;
        exprIssue(sink, e, p.path, r);
      }
      if (sink.size >= sink.cap) break;
    }
  }
  sink.throwIfAny();

  let collectives: CollectiveInstance[];
  try {
    collectives = buildCollectives(plan, mesh, programs, rankProgram, view, sink);
  } catch (e) {
    if (!(e instanceof ExprError)) throw e;
    exprIssue(sink, e, '$.parallel', -1);
    collectives = [];
  }
  sink.throwIfAny();

  const warnings: PlanIssue[] = [];
  checkDataflow(programs, rankProgram, collectives, logical, contract, sink, warnings);
  sink.throwIfAny();

  let claims: Claim[] = [];
  try {
    claims = collectClaims(programs, rankProgram, mesh, logical, view, sink);
  } catch (e) {
    if (!(e instanceof ExprError)) throw e;
    exprIssue(sink, e, '$.parallel', -1);
  }
  sink.throwIfAny();
  const coverage = checkLineage(claims, programs, logical, contract, sink);
  sink.throwIfAny();

  return {
    file,
    name: plan.name ?? '',
    description: plan.description ?? '',
    mesh,
    logical,
    programs,
    rankProgram,
    collectives,
    contract,
    warnings,
    view,
    claims,
    coverage,
  };
}

function buildMesh(raw: RawPlan, sink: IssueSink): Mesh {
  const axes = raw.mesh.axes.map((a) => a.name);
  const sizes = raw.mesh.axes.map((a) => a.size);
  const seen = new Set<string>();
  axes.forEach((a, i) => {
    if (seen.has(a)) sink.add(`$.mesh.axes[${i}].name`, `axis '${a}' is declared twice`);
    seen.add(a);
  });
  const size = sizes.reduce((p, s) => p * s, 1);
  if (size > 1 << 20) {
    sink.add('$.mesh.axes', `the mesh has ${size} ranks; at most ${1 << 20} are supported`);
    return new Mesh(['x'], [1]);
  }
  let rankAt: Int32Array | undefined;
  if (raw.mesh.ranks !== undefined) {
    const rs = raw.mesh.ranks;
    if (rs.length !== size) sink.add('$.mesh.ranks', `lists ${rs.length} ranks but the mesh has ${size} coordinates`);
    else {
      const hit = new Uint8Array(size);
      rs.forEach((r, i) => {
        if (r >= size) sink.add(`$.mesh.ranks[${i}]`, `rank ${r} is not in 0..${size - 1}`);
        else if (hit[r]) sink.add(`$.mesh.ranks[${i}]`, `rank ${r} appears twice`);
        else hit[r] = 1;
      });
      rankAt = Int32Array.from(rs);
    }
  }
  return new Mesh(axes, sizes, sink.size === 0 ? rankAt : undefined);
}

