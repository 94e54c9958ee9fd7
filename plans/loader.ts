/**
 * The plan's structure, untrusted JSON -> checked graphs: every phase of loadPlan but the last
 * (lineage/load.ts adds lineage and is loadPlan). Phases run in order and each stops the load
 * with every issue it found (PlanError): format, schema, text limits, mesh, logical graph and
 * contract, rank programs, shapes, collectives, dataflow. The shape and collective checks run
 * once per template with the mesh coordinates as symbols where they can (symcoll.ts), per
 * rank elsewhere; the loaded plan's `stats` says which ran.
 */
import { IssueSink, PlanError, type PlanIssue } from './errors.js';
import { checkRunClock } from './clock.js';
import { findTooDeep, MAX_DEPTH, MAX_PLAN_BYTES } from './json.js';
import { validateSchema } from './schema.js';
import { Mesh, programBox, rankEnv, type Box } from './mesh.js';
import { buildLogical } from './logical.js';
import { buildPrograms, checkOpAt, checkTensorDims, checkView, evalInt, instantiate, instantiateAttrs, specVars } from './programs.js';
import { buildCollectives } from './collectives.js';
import { checkCollectivesSymbolic, groupText, type CollectiveKind, type CollectiveStats, type Reps } from './symcoll.js';
import { checkDataflow } from './dataflow.js';
import { ExprError, exprIssue } from './expr.js';
import type { AttrSpec, CollectiveInstance, Contract, LogicalGraph, Plan, Program, RankView } from './model.js';
import type { RawPlan } from './raw.js';
import type { Shape } from '../ops/types.js';
import { registry } from '../ops/registry.js';

/**
 * Limits on the plan as written. Loading costs grow with the text (programs, their ops and
 * lineage), not with the ranks that run it, so these are what bounds a load; plan files are
 * untrusted, and without them a padded or bloated file costs gigabytes before any check
 * fails. Each has a CLI flag that raises it (--max-file-mb, --max-depth, --max-ops,
 * --max-claims); library callers pass LoadOptions.limits, or set the process default with
 * setDefaultLimits (the CLI does, and its proof workers receive the same limits).
 */
export interface PlanLimits {
  /** Bytes of plan text read (file or standard input). */
  readonly bytes: number;
  /** JSON nesting depth. */
  readonly depth: number;
  /** Ops as written: logical ops, ops of every program, multi-rank collectives. */
  readonly ops: number;
  /** Lineage claims as written: tensors with lineage, over every program. */
  readonly claims: number;
}
/**
 * The largest generated preset (L2: 80 layers, pp4 dp16 tp8, 32 micro-batches) has about
 * 290,000 ops as written and a 190 MiB indented file; the defaults leave room above it.
 */
export const DEFAULT_LIMITS: PlanLimits = { bytes: MAX_PLAN_BYTES, depth: MAX_DEPTH, ops: 500_000, claims: 500_000 };

let processLimits: PlanLimits = DEFAULT_LIMITS;

/** Sets the limits loads use when they pass none (the CLI's flags; workers get them per task). */
export function setDefaultLimits(l: Partial<PlanLimits>): void {
  processLimits = { ...DEFAULT_LIMITS, ...l };
}

/** The limits loads use when they pass none. */
export function defaultLimits(): PlanLimits {
  return processLimits;
}

/** How a load checks (per template or per rank) and within which limits. */
export interface LoadOptions {
  /**
   * 'template' (default): checks once per template where the coordinate dependence is
   * symbolic (affine, boxes, mesh shifts), per rank elsewhere. 'rank': every check rank by
   * rank, as before; the tests run both and compare.
   */
  readonly checks?: 'template' | 'rank';
  readonly limits?: Partial<PlanLimits>;
}

/**
 * The rank-independent phases of a load (format, schema, text limits, mesh, logical graph and
 * contract, programs). Throws PlanError like a load. Returns the plan's size as written.
 */
export function checkStructure(file: string, raw: unknown, opts: LoadOptions = {}): { ops: number; claims: number } {
  const sink = new IssueSink(file);
  const { plan, mesh, size } = structure(file, raw, sink, opts);
  const { graph } = buildLogical(plan, sink);
  sink.throwIfAny();
  buildPrograms(plan, mesh, graph, sink);
  sink.throwIfAny();
  return size;
}

/** Ops and lineage claims as written, on any JSON value (the schema has not run yet): what is not an array counts 0. */
function sizeAsWritten(raw: unknown): { ops: number; claims: number } {
  const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
  const field = (v: unknown, k: string): unknown => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>)[k] : undefined);
  const logical = field(raw, 'logical');
  const parallel = field(raw, 'parallel');
  let ops = arr(field(logical, 'ops')).length + arr(field(parallel, 'collectives')).length;
  let claims = 0;
  for (const p of arr(field(parallel, 'programs'))) {
    ops += arr(field(p, 'ops')).length;
    for (const t of arr(field(p, 'tensors'))) if (field(t, 'lineage') !== undefined) claims++;
  }
  return { ops, claims };
}

function structure(file: string, raw: unknown, sink: IssueSink, opts: LoadOptions): { plan: RawPlan; mesh: Mesh; size: { ops: number; claims: number } } {
  if (raw !== null && typeof raw === 'object' && 'format' in raw && (raw as { format: unknown }).format !== 'planproof/v1') {
    throw new PlanError(file, [{ path: '$.format', message: `unsupported plan format ${JSON.stringify((raw as { format: unknown }).format)}; this planproof reads "planproof/v1"` }]);
  }
  const limits = { ...processLimits, ...opts.limits };
  const deep = findTooDeep(raw, limits.depth);
  if (deep !== undefined) throw new PlanError(file, [{ path: deep, message: `nested deeper than ${limits.depth} levels (the limit; --max-depth raises it)` }]);
  // Counted before the schema check: validating a million ops costs more than refusing them.
  const { ops, claims } = sizeAsWritten(raw);
  if (ops > limits.ops) sink.add('$.parallel.programs', `the plan has ${ops.toLocaleString('en-US')} ops as written; the limit is ${limits.ops.toLocaleString('en-US')} (--max-ops raises it; loadPlan: limits.ops)`);
  if (claims > limits.claims) sink.add('$.parallel.programs', `the plan has ${claims.toLocaleString('en-US')} lineage claims as written; the limit is ${limits.claims.toLocaleString('en-US')} (--max-claims raises it; loadPlan: limits.claims)`);
  sink.throwIfAny();
  checkRunClock();
  validateSchema(raw, sink);
  sink.throwIfAny();
  const plan = raw as RawPlan;
  sink.throwIfAny();
  const mesh = buildMesh(plan, sink);
  sink.throwIfAny();
  return { plan, mesh, size: { ops, claims } };
}

/** What loadStructure checked and built: the plan without its lineage checked. */
interface PlanStructure {
  readonly file: string;
  readonly plan: RawPlan;
  readonly mesh: Mesh;
  readonly logical: LogicalGraph;
  readonly contract: Contract;
  readonly programs: Program[];
  readonly rankProgram: Int32Array;
  /** A rank's view of its program (shared by ranks with the same coordinates on the axes it uses). */
  readonly view: (rank: number) => RankView;
  /** Every collective instance rank by rank, built on first use. */
  readonly perRank: () => CollectiveInstance[];
  /** The collective instances the checks built (per template: one per class). */
  readonly quotient: CollectiveInstance[];
  readonly kinds: CollectiveKind[];
  readonly cstats: CollectiveStats;
  readonly warnings: PlanIssue[];
  readonly boxes: Box[];
  readonly shapeChecks: number;
  readonly mode: 'template' | 'rank';
  /** Milliseconds per phase so far; `lap(name)` records the next one. */
  readonly ms: Record<string, number>;
  readonly lap: (name: string) => void;
  /** The load's issue sink: later phases add to it. */
  readonly sink: IssueSink;
}

/**
 * Every phase of a load but lineage (lineage/load.ts runs that one and builds the LoadedPlan):
 * format, schema, text limits, mesh, logical graph and contract, programs, shapes,
 * collectives, dataflow. Throws PlanError like a load.
 */
export function loadStructure(file: string, raw: unknown, opts: LoadOptions = {}): PlanStructure {
  const mode = opts.checks ?? 'template';
  const ms: Record<string, number> = {};
  let t0 = performance.now();
  const lap = (name: string): void => {
    const t = performance.now();
    ms[name] = Math.round((t - t0) * 10) / 10;
    t0 = t;
    checkRunClock(); // between phases: a large plan's load is bounded like its proof
  };
  const sink = new IssueSink(file);
  const { plan, mesh } = structure(file, raw, sink, opts);
  lap('structure');

  const { graph: logical, contract } = buildLogical(plan, sink);
  sink.throwIfAny();
  lap('logical');

  const { programs, rankProgram } = buildPrograms(plan, mesh, logical, sink);
  sink.throwIfAny();
  // Conflicting assignments stopped the load above: each program runs exactly its ranks.
  const assigned = programs.map((p) => p.ranks);
  const boxes = assigned.map((r) => programBox(r, mesh));
  lap('programs');

  // Views for consumers: one per program and distinct coordinates on the axes its shapes and
  // attributes use, shared by the ranks with those coordinates, built on first use.
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
  const reps = representatives(mesh, assigned, boxes);
  const shapeChecks = mode === 'template' ? checkShapesPerTemplate(programs, mesh, reps, sink) : checkShapesPerView(programs, mesh, view, viewKey, sink);
  sink.throwIfAny();
  lap('shapes');

  // What buildCollectives reads of the plan as written: its multi-rank entries only. perRank
  // below keeps this, not the parse tree (ops, tensors, lineage: most of a large plan, 230 MB
  // of the 405B one), alive for as long as the loaded plan lives, so a caller that drops the
  // tree frees it.
  const collPlan: RawPlan = { format: plan.format, mesh: plan.mesh, contract: plan.contract, logical: { tensors: [], ops: [] }, parallel: { programs: [], ...(plan.parallel.collectives === undefined ? {} : { collectives: plan.parallel.collectives }) } };
  let allCollectives: CollectiveInstance[] | undefined;
  const perRank = (): CollectiveInstance[] => {
    if (allCollectives === undefined) {
      const s = new IssueSink(file);
      allCollectives = buildCollectives(collPlan, mesh, programs, rankProgram, view, s);
      if (s.size > 0) throw new Error(`internal inconsistency: the per-template checks passed but per-rank matching finds: ${s.issues.map((i) => i.message).join('; ')}`);
    }
    return allCollectives;
  };
  let quotient: CollectiveInstance[] = [];
  let kinds: CollectiveKind[] = [];
  let cstats: CollectiveStats = { symbolicSites: 0, perRankSites: 0, p2p: 'none', p2pClasses: 0 };
  try {
    if (mode === 'template') {
      const c = checkCollectivesSymbolic(plan, mesh, programs, rankProgram, view, sink, boxes, reps);
      quotient = c.quotient;
      kinds = c.kinds;
      cstats = c.stats;
    } else {
      quotient = allCollectives = buildCollectives(plan, mesh, programs, rankProgram, view, sink);
      kinds = kindsOf(mesh, quotient);
      cstats = { ...cstats, perRankSites: programs.reduce((n, p) => n + p.collectiveSites.length, 0) };
    }
  } catch (e) {
    if (!(e instanceof ExprError)) throw e;
    exprIssue(sink, e, '$.parallel', -1);
  }
  sink.throwIfAny();
  lap('collectives');

  const warnings: PlanIssue[] = [];
  checkDataflow(programs, rankProgram, quotient, logical, contract, sink, warnings, perRank);
  sink.throwIfAny();
  lap('dataflow');

  return { file, plan, mesh, logical, contract, programs, rankProgram, view, perRank, quotient, kinds, cstats, warnings, boxes, shapeChecks, mode, ms, lap, sink };
}

/**
 * The mesh axes (-1: `rank`) a program's shapes and attributes depend on: ranks with the same
 * coordinates on them share one view.
 */
export function viewAxes(p: Program, mesh: Mesh): number[] {
  const vars = new Set<string>();
  for (const s of p.shapeSpecs) for (const d of s) for (const v of specVars(d)) vars.add(v);
  for (const a of p.attrSpecs) for (const [, e] of a.exprs) for (const v of e.vars) vars.add(v);
  return [...vars].map((v) => (v === 'rank' ? -1 : mesh.axisIndex(v))).sort((x, y) => x - y);
}

/** One rank per distinct coordinates on `axes` (-1: rank), in rank order, per program. */
function representatives(mesh: Mesh, assigned: readonly Int32Array[], boxes: readonly Box[]): Reps {
  const cache = new Map<string, Int32Array>();
  return (p, axes) => {
    const key = `${p.index}|${axes.join(',')}`;
    let out = cache.get(key);
    if (out !== undefined) return out;
    const ranks = assigned[p.index] as Int32Array;
    const box = boxes[p.index] as Box;
    if (axes.length === 0) out = ranks.subarray(0, Math.min(1, ranks.length));
    else if (axes.includes(-1)) out = ranks;
    else if (box.isBox) {
      // The product of the box's coordinates on `axes`, others at their lowest.
      const coord = Array.from(box.lo);
      const list: number[] = [];
      const rec = (i: number): void => {
        if (i === axes.length) return void list.push(mesh.rankOf(coord));
        const a = axes[i] as number;
        for (const c of box.sets[a] as Int32Array) {
          coord[a] = c;
          rec(i + 1);
        }
        coord[a] = box.lo[a] as number;
      };
      rec(0);
      out = Int32Array.from(list.sort((x, y) => x - y));
    } else {
      const seen = new Set<string>();
      const list: number[] = [];
      for (const r of ranks) {
        const k = axes.map((a) => mesh.coord(r, a)).join(',');
        if (!seen.has(k)) {
          seen.add(k);
          list.push(r);
        }
      }
      out = Int32Array.from(list);
    }
    cache.set(key, out);
    return out;
  };
}

/** Shape and attribute checks, each tensor and op once per distinct coordinates it depends on. */
function checkShapesPerTemplate(programs: Program[], mesh: Mesh, reps: Reps, sink: IssueSink): number {
  let checks = 0;
  const axisOf = (v: string): number => (v === 'rank' ? -1 : mesh.axisIndex(v));
  for (const p of programs) {
    if (p.ranks.length === 0) continue;
    const label = (r: number): string => (p.coordDependent || p.ranks.length === 1 ? `rank ${r} ` : '');
    const tAxes = p.shapeSpecs.map((s) => [...new Set(s.flatMap((d) => specVars(d).map(axisOf)))].sort((a, b) => a - b));
    const constant = p.shapeSpecs.map((s) => (s.every((d) => typeof d === 'number') ? (s as number[]) : undefined));
    const shapeAt = (t: number, env: (n: string) => number): Shape => constant[t] ?? (p.shapeSpecs[t] ?? []).map((d) => evalInt(d, env));
    const guard = (r: number, f: () => void): void => {
      try {
        f();
      } catch (e) {
        if (!(e instanceof ExprError)) throw e;
        exprIssue(sink, e, p.path, r);
      }
    };
    tAxes.forEach((axes, t) => {
      if ((t & 255) === 0) checkRunClock();
      for (const r of reps(p, axes)) {
        checks++;
        guard(r, () => checkTensorDims(p, t, shapeAt(t, rankEnv(mesh, r)), sink, label(r)));
      }
    });
    for (let op = 0; op < p.ops.size && sink.size < sink.cap; op++) {
      if ((op & 255) === 0) checkRunClock();
      const axes = new Set<number>();
      for (const t of p.ops.opInputs(op)) for (const a of tAxes[t] ?? []) axes.add(a);
      for (const t of p.ops.opOutputs(op)) for (const a of tAxes[t] ?? []) axes.add(a);
      const spec = p.attrSpecs[op] as AttrSpec;
      for (const [, e] of spec.exprs) for (const v of e.vars) axes.add(axisOf(v));
      for (const r of reps(p, [...axes].sort((a, b) => a - b))) {
        checks++;
        guard(r, () => {
          const env = rankEnv(mesh, r);
          checkOpAt(p, op, (t) => shapeAt(t, env), instantiateAttrs(spec, env), sink, label(r));
        });
      }
    }
    if (sink.size >= sink.cap) break;
  }
  return checks;
}

/** The per-rank path: every distinct view of every program, all its ops. */
function checkShapesPerView(programs: Program[], mesh: Mesh, view: (r: number) => RankView, viewKey: (p: Program, r: number) => string, sink: IssueSink): number {
  let checks = 0;
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
      checks += p.ops.size + p.tensors.size;
      try {
        checkView(view(r), sink, p.coordDependent || p.ranks.length === 1 ? `rank ${r} ` : '');
      } catch (e) {
        if (!(e instanceof ExprError)) throw e;
        exprIssue(sink, e, p.path, r);
      }
      if (sink.size >= sink.cap) break;
    }
  }
  return checks;
}

function kindsOf(mesh: Mesh, list: readonly CollectiveInstance[]): CollectiveKind[] {
  const m = new Map<string, { op: string; over: string; groupSize: number; instances: number }>();
  for (const c of list) {
    const op = registry.get(c.kind).name;
    const over = groupText(mesh, c.group);
    const e = m.get(`${op}|${over}`);
    if (e === undefined) m.set(`${op}|${over}`, { op, over, groupSize: c.group.length, instances: 1 });
    else e.instances++;
  }
  return [...m.values()];
}

/**
 * Rank-by-rank work the proof stages (stages/decompose/prove.ts) would do on this plan: one entry per
 * (rank, tensor) and (rank, op). Past MAX_STAGE_ENTRIES they would exhaust the heap, so verify
 * decomposes the stages per template instead (stages/decompose/template.ts).
 */
export const MAX_STAGE_ENTRIES = 8_000_000;
/** Per-rank tensor and op entries of a plan (what MAX_STAGE_ENTRIES bounds). */
export function stageEntries(plan: Plan): number {
  let n = 0;
  plan.rankProgram.forEach((pi) => {
    const p = plan.programs[pi];
    if (p !== undefined) n += p.tensors.size + p.ops.size;
  });
  return n;
}
/** `max` is injectable so that tests can force a small plan onto the per-template stage path. */
export function stageWorkTooLarge(plan: Plan, max = MAX_STAGE_ENTRIES): string | undefined {
  const n = stageEntries(plan);
  if (n <= max) return undefined;
  return `building its stages rank by rank would take ${n.toLocaleString('en-US')} per-rank tensor and op entries (at most ${max.toLocaleString('en-US')}): stages are decomposed per template instead (docs/engine.md, "Stages per template")`;
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

