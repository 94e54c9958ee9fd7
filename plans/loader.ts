/**
 * loadPlan: untrusted JSON -> validated normal form. Phases run in order and each stops the
 * load with every issue it found (PlanError): parse, schema, mesh, logical graph and
 * contract, rank programs, per-rank shapes, collectives, dataflow, lineage.
 */
import { IssueSink, PlanError, PlanTooLargeError, type PlanIssue } from './errors.js';
import { findTooDeep, MAX_DEPTH, parsePlanJson, readPlanText } from './json.js';
import { validateSchema } from './schema.js';
import { Mesh } from './mesh.js';
import { buildLogical } from './logical.js';
import { buildPrograms, checkView, instantiate, specVars } from './programs.js';
import { buildCollectives } from './collectives.js';
import { checkDataflow } from './dataflow.js';
import { ExprError, exprIssue } from './expr.js';
import type { CollectiveInstance, Plan, Program, RankView } from './model.js';
import type { RawPlan } from './raw.js';
import { checkLineage, collectClaims, type Claim, type Coverage } from '../lineage/check.js';

/**
 * What this version holds per rank: a view (shapes and attributes) of every rank of a
 * program whose shapes or attributes depend on the coordinates, and one lineage claim per
 * (tensor, distinct coordinates it depends on). Past these, a load would exhaust the heap
 * (a 6 GB heap holds about 1.6M claims per 0.8 GB), so it stops early with "unknown".
 */
export const MAX_RANK_CLAIMS = 4_000_000;
export const MAX_VIEW_ENTRIES = 20_000_000;

/**
 * The mesh axes (-1: `rank`) a program's shapes and attributes depend on: ranks with the same
 * coordinates on them share one view.
 */
function viewAxes(p: Program, mesh: Mesh): number[] {
  const vars = new Set<string>();
  for (const s of p.shapeSpecs) for (const d of s) for (const v of specVars(d)) vars.add(v);
  for (const a of p.attrSpecs) for (const [, e] of a.exprs) for (const v of e.vars) vars.add(v);
  return [...vars].map((v) => (v === 'rank' ? -1 : mesh.axisIndex(v))).sort((x, y) => x - y);
}

/** How many distinct coordinate tuples `ranks` take on `axes` (at most the rank count). */
function distinctOn(axes: readonly number[], ranks: number, mesh: Mesh): number {
  let d = 1;
  for (const a of axes) d *= a < 0 ? ranks : (mesh.sizes[a] ?? 1);
  return Math.min(ranks, d);
}

/** Claims and per-rank view entries the load would build (before building them). */
export function loadSize(programs: readonly Program[], mesh: Mesh): { claims: number; viewEntries: number } {
  let claims = 0;
  let viewEntries = 0;
  for (const p of programs) {
    const n = p.ranks.length;
    if (p.coordDependent) viewEntries += distinctOn(viewAxes(p, mesh), n, mesh) * (p.shapeSpecs.length + p.attrSpecs.length);
    p.lineage.forEach((spec, t) => {
      if (spec === undefined) return;
      const axes = new Set<number>(spec.axes);
      for (const d of p.shapeSpecs[t] ?? []) for (const v of specVars(d)) axes.add(v === 'rank' ? -1 : mesh.axisIndex(v));
      claims += distinctOn([...axes], n, mesh);
    });
  }
  return { claims, viewEntries };
}

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

/**
 * The rank-independent phases of a load (format, schema, mesh, logical graph and contract,
 * programs), then the size the per-rank phases would take. Throws PlanError like a load.
 */
export function checkStructure(file: string, raw: unknown): { claims: number; viewEntries: number } {
  const sink = new IssueSink(file);
  const { plan, mesh } = structure(file, raw, sink);
  const { graph } = buildLogical(plan, sink);
  sink.throwIfAny();
  const { programs } = buildPrograms(plan, mesh, graph, sink);
  sink.throwIfAny();
  return loadSize(programs, mesh);
}

function structure(file: string, raw: unknown, sink: IssueSink): { plan: RawPlan; mesh: Mesh } {
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
  return { plan, mesh };
}

export function loadPlanObject(file: string, raw: unknown): LoadedPlan {
  const sink = new IssueSink(file);
  const { plan, mesh } = structure(file, raw, sink);

  const { graph: logical, contract } = buildLogical(plan, sink);
  sink.throwIfAny();

  const { programs, rankProgram } = buildPrograms(plan, mesh, logical, sink);
  sink.throwIfAny();
  const size = loadSize(programs, mesh);
  if (size.claims > MAX_RANK_CLAIMS || size.viewEntries > MAX_VIEW_ENTRIES) {
    throw new PlanTooLargeError(
      file,
      `too large for this version to load: ${size.claims.toLocaleString('en-US')} per-rank lineage claims (at most ${MAX_RANK_CLAIMS.toLocaleString('en-US')}) and ${size.viewEntries.toLocaleString('en-US')} per-rank shape and attribute entries (at most ${MAX_VIEW_ENTRIES.toLocaleString('en-US')}). Lineage is checked rank by rank, so this grows with ranks x tensors; see docs/engine.md ("Not in this version")`,
    );
  }

  // Views: one per program and distinct coordinates on the axes its shapes and attributes
  // use (one per program when they use none), shared by the ranks with those coordinates.
  const axesOf = programs.map((p) => (p.coordDependent ? viewAxes(p, mesh) : []));
  const viewKey = (p: Program, rank: number): string => `${p.index}|${(axesOf[p.index] as number[]).map((a) => (a < 0 ? rank : mesh.coord(rank, a))).join(',')}`;
  const views = new Map<string, RankView>();
  const view = (rank: number): RankView => {
    const p = programs[rankProgram[rank] as number];
    if (p === undefined) throw new Error(`rank ${rank} has no program`);
    const key = viewKey(p, rank);
    let v = views.get(key);
    if (v === undefined) views.set(key, (v = instantiate(p, mesh, rank)));
    return v.rank === rank ? v : { ...v, rank };
  };
  for (const p of programs) {
    // One rank per distinct view: the checks depend only on the view.
    const seen = new Set<string>();
    const ranks = p.ranks.filter((r) => {
      const k = viewKey(p, r);
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    });
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

