/**
 * loadPlan: untrusted JSON -> validated normal form. plans/loader.ts runs every phase up to
 * dataflow (loadStructure); this module adds the last one, lineage (claims, tiling and the
 * contract, per template with lineage/symbolic.ts or rank by rank with lineage/check.ts), and
 * builds the LoadedPlan every later layer reads. Each phase stops the load with every issue
 * it found (PlanError).
 */
import { IssueSink } from '../plans/errors.js';
import { ExprError, exprIssue } from '../plans/expr.js';
import { finiteNumbersByName, numberFromJson, parsePlanJson, readPlanText } from '../plans/json.js';
import { defaultLimits, loadStructure, type LoadOptions } from '../plans/loader.js';
import type { CollectiveInstance, Contract, LogicalGraph, Plan, PlanGuard } from '../plans/model.js';
import { numel } from '../ops/types.js';
import type { CollectiveKind, CollectiveStats } from '../plans/symcoll.js';
import { checkLineage, collectClaims, type Claim, type Coverage } from './check.js';
import { checkLineageSymbolic, type LineageStats } from './symbolic.js';

/** Which path each check took, for `inspect` and the benchmarks. */
interface LoadStats {
  readonly checks: 'template' | 'rank';
  /** Programs whose ranks are a box (product of per-axis coordinate sets). */
  readonly boxPrograms: number;
  /** Op and tensor shape checks run (each once per distinct coordinates it depends on). */
  readonly shapeChecks: number;
  readonly collectives: CollectiveStats;
  readonly lineage: LineageStats;
  /** Milliseconds per phase. */
  readonly ms: Record<string, number>;
}

/** A plan that passed every load check: the graphs, rank programs, collectives and lineage, checked. */
export interface LoadedPlan extends Plan {
  /** Every lineage claim, one per (tensor, distinct coordinates): built on first use. */
  readonly claims: Claim[];
  readonly coverage: Coverage[];
  /** Collective instances counted by op and group kind (without building them). */
  readonly collectiveKinds: CollectiveKind[];
  /** The multi-rank entries of $.parallel.collectives (few: one per entry as written), for per-template stages. */
  readonly multiRank: CollectiveInstance[];
  readonly stats: LoadStats;
}

/** Reads a plan file (within the load limits) and loads it: see loadPlanObject. Throws PlanError on an invalid plan. */
export function loadPlan(file: string, opts: LoadOptions = {}): LoadedPlan {
  const text = readPlanText(file, { ...defaultLimits(), ...opts.limits }.bytes);
  return loadPlanText(file, text, opts);
}

/** Loads plan JSON text; `file` names it in error messages. Throws PlanError on an invalid plan. */
export function loadPlanText(file: string, text: string, opts: LoadOptions = {}): LoadedPlan {
  return loadPlanObject(file, parsePlanJson(file, text), opts);
}

/** Loads an already parsed plan (untrusted JSON value). Throws PlanError with every issue of the first failing phase. */
export function loadPlanObject(file: string, raw: unknown, opts: LoadOptions = {}): LoadedPlan {
  return load(file, raw, opts, false);
}

/**
 * Loads some ranks of another plan (stages/shrink/part.ts: one rank's stage part, extracted for a
 * witness): every check of loadPlanObject except tiling — claims are evaluated and checked one
 * by one but need not tile their logical tensors, and the contract outputs need not be held.
 * Internal: not part of the library API (index.ts), never applied to a user's plan file.
 */
export function loadPartObject(file: string, raw: unknown, opts: LoadOptions = {}): LoadedPlan {
  return load(file, raw, opts, true);
}

function load(file: string, raw: unknown, opts: LoadOptions, subset: boolean): LoadedPlan {
  const { plan, mesh, logical, contract, programs, rankProgram, view, perRank, quotient, kinds, cstats, warnings, boxes, shapeChecks, mode, ms, lap, sink } = loadStructure(file, raw, opts);
  let claimList: Claim[] | undefined;
  const claimsNow = (s: IssueSink): Claim[] => {
    try {
      return collectClaims(programs, rankProgram, mesh, logical, view, s);
    } catch (e) {
      if (!(e instanceof ExprError)) throw e;
      exprIssue(s, e, '$.parallel', -1);
      return [];
    }
  };
  let coverage: Coverage[];
  let lstats: LineageStats = { symbolicTensors: 0, piecewiseTensors: 0, enumeratedTensors: 0, enumeratedClaims: 0, explained: 0 };
  if (subset) {
    claimList = claimsNow(sink);
    coverage = [];
  } else if (mode === 'template') {
    const r = checkLineageSymbolic(programs, rankProgram, mesh, logical, contract, view, sink, { symbolic: true });
    sink.throwIfAny();
    coverage = r.coverage ?? [];
    lstats = r.stats;
  } else {
    claimList = claimsNow(sink);
    sink.throwIfAny();
    coverage = checkLineage(claimList, programs, logical, contract, sink);
    lstats = { ...lstats, enumeratedTensors: programs.reduce((n, p) => n + p.lineage.filter((l) => l !== undefined).length, 0), enumeratedClaims: claimList.length };
  }
  sink.throwIfAny();
  lap('lineage');

  const pins = pinsOf(plan, logical, contract, sink);
  sink.throwIfAny();
  const specialized = pins === undefined ? specializedOf(plan) : [...(specializedOf(plan) ?? []), pins.note];
  const guards = guardsOf(plan);
  // (`x-planproof-run-inputs` only picks a witness draw, which the guards still check: anything else is ignored)
  const runInputs = finiteNumbersByName(plan['x-planproof-run-inputs']);
  return {
    file,
    name: plan.name ?? '',
    description: plan.description ?? '',
    ...(specialized === undefined ? {} : { specialized }),
    ...(guards === undefined ? {} : { guards }),
    ...(runInputs === undefined ? {} : { runInputs }),
    ...(pins === undefined ? {} : { pins: pins.pins }),
    mesh,
    logical,
    programs,
    rankProgram,
    get collectives(): CollectiveInstance[] {
      return perRank();
    },
    contract,
    warnings,
    view,
    get claims(): Claim[] {
      if (claimList === undefined) {
        const s = new IssueSink(file);
        claimList = claimsNow(s);
        if (s.size > 0) throw new Error(`internal inconsistency: the per-template lineage check passed but per-rank claims fail: ${s.issues.map((i) => i.message).join('; ')}`);
      }
      return claimList;
    },
    coverage,
    collectiveKinds: kinds,
    // Instances without a per-rank call site: the plan-level spelling (both modes put them in the list).
    multiRank: quotient.filter((c) => c.sites.every((x) => x < 0)),
    stats: { checks: mode, boxPrograms: boxes.filter((b) => b.isBox).length, shapeChecks, collectives: cstats, lineage: lstats, ms },
  };
}

const CMPS = new Set(['eq', 'ne', 'lt', 'le', 'gt', 'ge']);

/**
 * The `x-planproof-pins` of a plan: `{ "<contract input>": { "shape": [...], "at": [[element,
 * value], ...] } }`. A pin applies only where it means what it meant when written: the input
 * still a contract input of that shape, with declared values holding the value (so some input
 * has every pinned value: a pin never makes the verified set empty). Plans derived from this
 * one (reduced, cut, boxed: other shapes and domains) drop the pins that no longer fit, which
 * only widens what is proved; the `specialized` note names the pins applied. Malformed JSON is
 * an error naming its path.
 */
function pinsOf(plan: { readonly [k: string]: unknown }, logical: LogicalGraph, contract: Contract, sink: IssueSink): { pins: Map<number, Map<number, number>>; note: string } | undefined {
  const x = plan['x-planproof-pins'];
  if (x === undefined) return undefined;
  const at = '$.x-planproof-pins';
  if (typeof x !== 'object' || x === null || Array.isArray(x)) {
    sink.add(at, 'must be an object mapping contract input names to { "shape": [...], "at": [[element, value], ...] }');
    return undefined;
  }
  const inputs = new Set(contract.inputs);
  const pins = new Map<number, Map<number, number>>();
  for (const [name, entry] of Object.entries(x as Record<string, unknown>)) {
    const e = entry as { shape?: unknown; at?: unknown } | null;
    const shape = e?.shape;
    const list = e?.at;
    if (typeof e !== 'object' || e === null || !Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && (d as number) >= 0) || !Array.isArray(list) || !list.every((p) => Array.isArray(p) && p.length === 2 && Number.isInteger(p[0]) && typeof p[1] === 'number')) {
      sink.add(`${at}.${name}`, 'must be { "shape": [...], "at": [[element, value], ...] } with integer elements and number values');
      continue;
    }
    const t = logical.tensors.id(name);
    const dom = t < 0 ? undefined : logical.domains[t];
    const have = t < 0 ? undefined : (logical.shapes[t] ?? []);
    // Not the tensor the pin was written for (another plan's, or this plan reduced or cut): not applied.
    if (t < 0 || !inputs.has(t) || dom === undefined || have === undefined || have.length !== shape.length || have.some((d, i) => d !== shape[i])) continue;
    const n = numel(have);
    const m = new Map<number, number>();
    for (const [el, v] of list as [number, number][]) if (el >= 0 && el < n && dom.includes(v)) m.set(el, v);
    if (m.size > 0) pins.set(t, m);
  }
  if (pins.size === 0) return undefined;
  return { pins, note: pinsNote(logical, pins) };
}

/** The `specialized` note of a plan with pins: which elements a verdict assumes at which values. */
export function pinsNote(logical: LogicalGraph, pins: ReadonlyMap<number, ReadonlyMap<number, number>>): string {
  const text = [...pins].map(([t, m]) => [...m].map(([e, v]) => `${logical.tensors.name(t)}[${e}] = ${v}`).join(', '));
  return `inputs held at the values the reads imply: ${text.join('; ').slice(0, 300)} (x-planproof-pins)`;
}

/**
 * The `x-planproof-guards` of a plan. A malformed entry is kept as a guard that never holds
 * (values null), never dropped: dropping one could let a witness that changes a read refute.
 */
function guardsOf(plan: { readonly [k: string]: unknown }): readonly PlanGuard[] | undefined {
  const x = plan['x-planproof-guards'];
  if (x === undefined) return undefined;
  const list = Array.isArray(x) ? x : [x];
  const never = (where: string): PlanGuard => ({ program: -1, tensor: '', cmp: 'eq', values: null, where });
  return list.map((g: unknown): PlanGuard => {
    if (typeof g !== 'object' || g === null) return never('a malformed guard');
    const o = g as Record<string, unknown>;
    const where = typeof o['where'] === 'string' ? o['where'].slice(0, 500) : 'a guard without a place';
    const program = o['program'] === 'logical' ? -1 : o['program'];
    const cmp = o['cmp'];
    if (typeof program !== 'number' || !Number.isInteger(program) || typeof o['tensor'] !== 'string' || typeof cmp !== 'string' || !CMPS.has(cmp)) return never(where);
    const base = { program, tensor: o['tensor'], cmp: cmp as PlanGuard['cmp'], where };
    const v = o['values'];
    if (Array.isArray(v)) {
      const nums = v.map(numberFromJson);
      return { ...base, values: nums.every((e): e is number => e !== undefined) ? nums : null };
    }
    const other = typeof o['other'] === 'string' ? o['other'] : numberFromJson(o['otherValue']);
    if (other !== undefined && typeof o['outcome'] === 'boolean') return { ...base, other, outcome: o['outcome'] };
    return { ...base, values: null };
  });
}

/** The `x-planproof-specialized` notes of a plan (strings only; anything else is ignored as an extension). */
function specializedOf(plan: { readonly [k: string]: unknown }): readonly string[] | undefined {
  const x = plan['x-planproof-specialized'];
  if (!Array.isArray(x)) return undefined;
  const notes = x.filter((v): v is string => typeof v === 'string').map((v) => v.slice(0, 500));
  return notes.length === 0 ? undefined : notes;
}
