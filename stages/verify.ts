/**
 * The verdict of a plan, with evidence for each outcome:
 *  - verified: every stage proved in the exact normal form, and the numeric run agrees;
 *  - not equivalent: some stage's normal forms differ AND the numeric run from real inputs
 *    shows concrete differing values on that stage's tensor (the witness);
 *  - unknown: anything else, with the reason (a difference without a witness, an
 *    undischarged side condition, a plan too large to evaluate numerically, ...).
 */
import { MAX_STAGE_ENTRIES, stageWorkTooLarge } from '../plans/loader.js';
import { type LoadedPlan } from '../lineage/load.js';
import { verifyPerTemplate } from './decompose/template-verify.js';
import { registry } from '../ops/registry.js';
import { logicalOrder } from '../sdfg/execute.js';
import { numericCheck, type Mismatch, type NumericReport } from './witness/numeric.js';
import { diagnose, tensorValues, type Diagnosis, type TensorValues } from './witness/diagnose.js';
import { decompose, Prover, type Stage, type StageResult } from './decompose/prove.js';
import { notAttempted, proveInPool, timeLeft, type PoolOptions, type TimeLimit } from './engines/pool.js';
import { CONSTANTS_MS, earlyCertificate, runStageMethods, runStageMethodsInThread, type StageFallback } from './portfolio.js';

export type { TimeLimit } from './engines/pool.js';
import { Z3Prover } from './engines/z3.js';
import { proveDistinct, withProofs } from './cache/dedup.js';
import type { ProofCache } from './cache/cache.js';
import { proveTensorLevel } from './engines/tensorlevel/prover.js';
import type { Engine, StageReport, Verdict, VerifyReport } from './report.js';

/** Phase timings: lap(name) records the time since the previous lap. */
function phaseClock(): { lap: (name: string) => void; phases: Record<string, number> } {
  const phases: Record<string, number> = {};
  let t = performance.now();
  return {
    phases,
    lap: (name) => {
      const now = performance.now();
      phases[name] = Math.round((phases[name] ?? 0) + (now - t));
      t = now;
    },
  };
}

/** Options of verifyPlan (and verifyPlanInPool). */
export interface VerifyOptions {
  readonly seed?: number;
  /** Tensor-level proofs before the exact normal form (default true). */
  readonly tensorLevel?: boolean;
  /**
   * Progress: verifyPlan calls it after each stage proof; verifyPlanInPool in stages decided
   * (a proof deciding a whole class of equal stages counts them all) out of all stages.
   */
  readonly onStage?: (done: number, total: number) => void;
  /** Per-rank entries past which stages are decomposed per template (default MAX_STAGE_ENTRIES; lowered by tests). */
  readonly maxStageEntries?: number;
}

/**
 * Proves a loaded plan stage by stage in this thread: "verified" only if every stage is
 * proved exactly, "not_equivalent" only with a numeric witness, otherwise "unknown" with reasons.
 */
export function verifyPlan(plan: LoadedPlan, opts: VerifyOptions = {}): VerifyReport {
  const t0 = performance.now();
  const seed = opts.seed ?? 1;
  const big = tooLargeToDecompose(plan, seed, t0, opts.maxStageEntries, opts.tensorLevel);
  if (big !== undefined) return big;
  const stages = decompose(plan, logicalOrder(plan));
  let first = numericCheck(plan, seed);
  const witnessed = witnessedStages(plan, stages, first);
  // A certified refutation settles its stage; later ones get a brief deadline (as in verifyPlanInPool).
  const cert = earlyCertificate(plan, stages, first);
  // Tensor-level proofs first, as in verifyPlanInPool.
  const tl = opts.tensorLevel === false ? undefined : proveTensorLevel(plan, stages.filter((s) => !witnessed.has(s.index) && s.index !== cert?.stage));
  const known = tl?.proved ?? new Map<number, StageResult>();
  const todo = cert === undefined ? stages : stages.filter((s) => s.index < cert.stage);
  const rest = proveInProcess(plan, todo.filter((s) => !known.has(s.index)), opts.onStage, witnessed);
  const results: StageResult[] = new Array<StageResult>(stages.length);
  for (const [i, r] of known) results[i] = r;
  for (const r of rest) results[r.stage.index] = r;
  if (cert !== undefined) {
    // The refuted stage's own proof, briefly (its residual says more); else the certificate.
    const own = stages[cert.stage] as Stage;
    const [r] = proveInProcess(plan, [own], undefined, witnessed, undefined, SETTLED_DEADLINE_MS);
    if (r !== undefined && r.status === 'differs') results[cert.stage] = r;
    else {
      // Only a certificate that settles its stage joins the numeric report (as in verifyPlanInPool).
      results[cert.stage] = { ...cert.result, stage: own };
      first = cert.numeric;
    }
    const later = stages.filter((s) => s.index > cert.stage && !known.has(s.index));
    for (const r of proveInProcess(plan, later, undefined, witnessed, undefined, SETTLED_DEADLINE_MS)) results[r.stage.index] = r.status === 'proved' ? r : refutedBefore(r.stage, cert.stage);
  }
  // The portfolio's records that run in one thread (stages/portfolio.ts), in the pool path's
  // order and with its conditions: a library caller's report names the same deciding records.
  const { results: decided, numeric } = runStageMethodsInThread({ plan, text: '', engine: 'normal', sharded: false, merge: false, deadlineMs: CONSTANTS_MS, results, numeric: first });
  return withTensorReasons(assemble(plan, decided, numeric, numeric.seed, t0), tl?.open);
}

/**
 * An undecided stage also says where tensor-level derivation stopped ("derived 1/512 x
 * grad[...], claimed grad[...]" points at an averaging all-reduce), which localizes a stage the
 * element engines find too large.
 */
function withTensorReasons(r: VerifyReport, open: ReadonlyMap<number, string> | undefined): VerifyReport {
  if (open === undefined || open.size === 0) return r;
  return { ...r, stages: r.stages.map((s) => (s.status === 'unknown' && open.has(s.index - 1) ? { ...s, reason: `${s.reason ?? 'undecided'}; at tensor level: ${open.get(s.index - 1) ?? ''}` } : s)) };
}

/**
 * Stage decomposition walks every rank: past the loader's bound (plans/loader.ts
 * stageWorkTooLarge) the stages are decomposed per template instead (stages/decompose/template.ts), each
 * "unknown" with its reason, for library callers as for the CLI, never a heap exhaustion.
 */
function tooLargeToDecompose(plan: LoadedPlan, seed: number, t0: number, maxEntries = MAX_STAGE_ENTRIES, tensorLevel?: boolean): VerifyReport | undefined {
  if (stageWorkTooLarge(plan, maxEntries) === undefined) return undefined;
  return verifyPerTemplate(plan, { seed, maxStageEntries: maxEntries, t0, ...(tensorLevel === undefined ? {} : { tensorLevel }) });
}

/** Indices of the stages whose logical tensor the numeric run shows differing. */
export function witnessedStages(plan: LoadedPlan, stages: readonly Stage[], n: NumericReport): Set<number> {
  const failing = new Set(n.failingTensors);
  return new Set(stages.flatMap((s, i) => (failing.has(plan.logical.tensors.name(s.logical)) ? [i] : [])));
}

function proveInProcess(plan: LoadedPlan, stages: readonly Stage[], onStage: ((done: number, total: number) => void) | undefined, witnessed: ReadonlySet<number>, limit?: TimeLimit, deadlineMs?: number): StageResult[] {
  const prover = new Prover(plan);
  return stages.map((s, i) => {
    let r: StageResult;
    try {
      r = limit !== undefined && timeLeft(limit) <= 0 ? unattempted(s, limit) : prover.prove(s, witnessed.has(s.index), inThreadStop(limit, deadlineMs));
    } catch (e) {
      r = engineError(s, e);
    }
    onStage?.(i + 1, stages.length);
    return r;
  });
}

/**
 * Where an in-thread proof stops (no worker to terminate: the normal form looks at the clock,
 * Prover.prove), with the reason the pool gives for the same stop.
 */
function inThreadStop(limit: TimeLimit | undefined, deadlineMs: number | undefined): { at: number; reason: string } | undefined {
  const left = limit === undefined ? Infinity : timeLeft(limit);
  const dl = deadlineMs ?? Infinity;
  if (left === Infinity && dl === Infinity) return undefined;
  const now = performance.now();
  if (left < dl && limit !== undefined)
    return { at: now + left, reason: `stopped after ${(left / 1000).toFixed(1)} s: the run's time limit of ${limit.seconds} s (--time-limit) was reached; the proof was stopped` };
  return { at: now + dl, reason: `deadline of ${(dl / 1000).toFixed(1)} s exceeded; the proof was stopped` };
}

export interface PoolVerifyOptions extends VerifyOptions {
  /** Worker threads; 0 proves in this thread. */
  readonly jobs: number;
  /** Decision procedure: the exact normal form (default) or Z3 alone (a cross-check). */
  readonly engine?: Engine;
  /** Per-stage deadline (ms). */
  readonly deadlineMs: number;
  /** A worker module instead of stages/engines/worker.js (tests inject faults with it): see PoolOptions.worker. */
  readonly worker?: PoolOptions['worker'];
  readonly recycleAfter?: number;
  /** Prove each distinct canonical stage once (default true). */
  readonly dedup?: boolean;
  /** Persistent proof cache (stages/cache/cache.ts). */
  readonly cache?: ProofCache;
  /** Tensor-level proofs before the element engines (default true; --no-tensor-level). */
  readonly tensorLevel?: boolean;
  /** The whole run's time limit (--time-limit): see TimeLimit. */
  readonly timeLimit?: TimeLimit;
  /**
   * A sharded run (`planproof verify --shard i/n`): only the stages whose class representative
   * falls to shard `index` (1-based) of `count` are proved, each result handed to `record`;
   * the others stand in as proved (never reported: a shard writes a part, not a report), and
   * the phases after the proofs (witness search, Z3, per-stage fallback) are left to the merge.
   */
  readonly shard?: { readonly index: number; readonly count: number; readonly record: (r: StageResult) => void };
  /**
   * `planproof merge`: the results the shards proved, by stage index, used instead of proving;
   * everything else runs as in a single run, so the report is the one a single run gives.
   */
  readonly proved?: ReadonlyMap<number, ShardResult>;
  /**
   * Stages still undecided because they are too large are handed to this hook (per-stage
   * extraction and reduction, stages/shrink/stage-reduce.ts perStageFallback). Passed in rather than
   * imported: stage-reduce.ts builds its reports with this module.
   */
  readonly fallback?: StageFallback;
}

/** A stage result as a part file carries it (the stage by its index). */
export type ShardResult = Omit<StageResult, 'stage'>;

/** A merge asked for a stage no part proved (parts of other runs, or a part missing). */
export class MergeError extends Error {}

/** Results for every stage: the known ones as given, the others proved by `prove`. */
async function proveRest(stages: readonly Stage[], known: ReadonlyMap<number, StageResult> | undefined, prove: (some: readonly Stage[]) => Promise<StageResult[]>): Promise<StageResult[]> {
  if (known === undefined) return prove(stages);
  const out: StageResult[] = new Array<StageResult>(stages.length);
  for (const [i, r] of known) out[i] = r;
  const rest = stages.filter((s) => !known.has(s.index));
  for (const r of rest.length === 0 ? [] : await prove(rest)) out[r.stage.index] = r;
  return out;
}

/**
 * verifyPlan with stages proved in worker threads under a per-stage deadline. `text` is the
 * plan's JSON (what workers load; e.g. JSON.stringify of the parsed plan).
 */
export async function verifyPlanInPool(plan: LoadedPlan, text: string, opts: PoolVerifyOptions): Promise<VerifyReport> {
  const engine = opts.engine ?? 'normal';
  const t0 = performance.now();
  const seed = opts.seed ?? 1;
  const limit = opts.timeLimit;
  const clock = phaseClock();
  const big = tooLargeToDecompose(plan, seed, t0, opts.maxStageEntries, opts.tensorLevel);
  if (big !== undefined) return big;
  const stages = decompose(plan, logicalOrder(plan));
  clock.lap('decompose');
  let first = numericCheck(plan, seed);
  const witnessed = witnessedStages(plan, stages, first);
  clock.lap('numeric');
  // Not in a shard or a merge: their stage proofs are the parts' business.
  const cert = opts.shard === undefined && opts.proved === undefined ? earlyCertificate(plan, stages, first) : undefined;
  // The certificate's witness joins the numeric report only when it settles its stage (the
  // stage's own brief proof did not): a stage refuted by its proof reports what a run without
  // the certificate (a shard's, a merge's) reports.
  let settledByCertificate = false;
  clock.lap('certify');
  // Progress in stages decided out of all stages (see VerifyOptions.onStage).
  let decided = 0;
  const weights = new Map<number, number>();
  const advance = (n: number): void => {
    if (n <= 0 || opts.onStage === undefined) return;
    decided = Math.min(stages.length, decided + n);
    opts.onStage(decided, stages.length);
  };
  const stageDone = (_d: number, _t: number, s: Stage): void => advance(weights.get(s.index) ?? 1);
  const repOf = new Map<number, number>();
  const ownedDone = new Set<number>();
  // Never the proof cache in a shard (its stand-ins for other shards' stages are not proofs)
  // nor in a merge (the parts proved what a cache hit would skip).
  const cache = opts.shard === undefined && opts.proved === undefined ? opts.cache : undefined;
  // Sharded runs and merges (PoolVerifyOptions.shard, .proved) wrap the proofs.
  const proveSome = async (some: readonly Stage[]): Promise<StageResult[]> => {
    const proved = opts.proved;
    if (proved !== undefined)
      return some.map((s) => {
        const r = proved.get(s.index);
        if (r === undefined) throw new MergeError(`no part holds the proof of stage ${s.index + 1} (${plan.logical.tensors.name(s.logical)}): the parts come from runs with other options or another plan`);
        return { ...r, stage: s };
      });
    const sh = opts.shard;
    if (sh === undefined) return proveAny(some);
    const mine = some.filter((s) => (repOf.get(s.index) ?? s.index) % sh.count === sh.index - 1);
    const got = new Map((mine.length === 0 ? [] : await proveAny(mine)).map((r) => [r.stage.index, r]));
    for (const r of got.values()) {
      sh.record(r);
      ownedDone.add(r.stage.index);
    }
    return some.map((s) => got.get(s.index) ?? { stage: s, status: 'proved', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 });
  };
  // Proves any subset of the decomposition (the pool and the workers index stages by Stage.index).
  // After a certified refutation (earlyCertificate) the earlier stages are proved as usual, so
  // that the first failing stage is the one named; the refuted stage and the later ones get a
  // brief deadline each.
  const proveAny = async (some: readonly Stage[]): Promise<StageResult[]> => {
    if (cert === undefined) return proveAnyStage(some);
    const before = some.filter((s) => s.index < cert.stage);
    const got = new Map((before.length === 0 ? [] : await proveAnyStage(before)).map((r) => [r.stage.index, r]));
    // The refuted stage's own proof, briefly: its residual says more than the certificate
    // ("-1/2*(...)" names an average); past that deadline, the certificate settles it.
    const own = some.find((s) => s.index === cert.stage);
    if (own !== undefined) {
      const [r] = await proveAnyStage([own], Math.min(opts.deadlineMs, SETTLED_DEADLINE_MS));
      if (r !== undefined && r.status === 'differs') got.set(own.index, r);
      else {
        got.set(own.index, { ...cert.result, stage: own });
        settledByCertificate = true;
      }
    }
    // Later stages assume their inputs are right, so a proved one still says something (the
    // update after a wrong gradient is itself right); each gets the brief deadline, and one it
    // does not decide is left open with the refutation named.
    const later = some.filter((s) => s.index > cert.stage);
    if (later.length > 0) for (const r of await proveAnyStage(later, Math.min(opts.deadlineMs, SETTLED_DEADLINE_MS))) got.set(r.stage.index, r.status === 'proved' ? r : refutedBefore(r.stage, cert.stage));
    return some.map((s) => got.get(s.index) ?? refutedBefore(s, cert.stage));
  };
  const proveAnyStage = async (some: readonly Stage[], deadlineMs = opts.deadlineMs): Promise<StageResult[]> => {
    if (opts.jobs > 0) {
      return proveInPool(plan.file, text, some, {
        jobs: opts.jobs,
        witnessed,
        deadlineMs,
        ...(limit === undefined ? {} : { timeLimit: limit }),
        engine,
        ...(opts.recycleAfter === undefined ? {} : { recycleAfter: opts.recycleAfter }),
        onStage: stageDone,
        ...(opts.worker === undefined ? {} : { worker: opts.worker }),
      });
    }
    if (engine === 'normal') return proveInProcess(plan, some, (d, t) => stageDone(d, t, some[d - 1] as Stage), witnessed, limit, deadlineMs);
    const prover = new Z3Prover(plan);
    const out: StageResult[] = [];
    for (const [i, s] of some.entries()) {
      try {
        const left = timeLeft(limit);
        out.push(limit !== undefined && left <= 0 ? unattempted(s, limit) : await prover.prove(s, Math.min(deadlineMs, left)));
      } catch (e) {
        out.push(engineError(s, e));
      }
      stageDone(i + 1, some.length, s);
    }
    return out;
  };
  // Tensor-level proofs first (stages/engines/tensorlevel/prover.ts): whole-tensor relations, whatever the
  // shapes. A stage the numeric run shows differing is left to the element engines.
  const tl = engine === 'normal' && opts.tensorLevel !== false ? proveTensorLevel(plan, stages.filter((s) => !witnessed.has(s.index) && s.index !== cert?.stage)) : undefined;
  const known = tl?.proved;
  advance(known?.size ?? 0);
  clock.lap('tensorLevel');
  // Stage deduplication and the proof cache hook (stages/cache/dedup.ts).
  const distinct = opts.dedup === false ? undefined : await proveDistinct(plan, stages, proveSome, cache, known, { weights, decided: advance, repOf });
  let results = distinct?.results ?? (await proveRest(stages, known, proveSome));
  clock.lap('stages');
  // A shard's report is never shown: the phases after the proofs are the merge's. Its
  // stand-ins for other shards' stages (and the stages they cover) become "unknown" here, so
  // a library caller reading a shard's report never sees a proof no one made.
  const sharded = opts.shard !== undefined;
  if (sharded) results = results.map((r, i) => (known?.has(i) === true || ownedDone.has(i) || ownedDone.has(repOf.get(i) ?? i) ? r : { ...r, status: 'unknown', reason: 'left to another shard (--shard): planproof merge gives the verdict', failingRanks: [] }));
  if (cert !== undefined && settledByCertificate) first = cert.numeric;
  // Then the portfolio for what the proofs left open (stages/portfolio.ts STAGE_METHODS, in order).
  const x = { plan, text, engine, sharded, merge: opts.proved !== undefined, deadlineMs: opts.deadlineMs, results, numeric: first, ...(limit === undefined ? {} : { limit }), ...(opts.worker === undefined ? {} : { worker: opts.worker }), ...(opts.fallback === undefined ? {} : { fallback: opts.fallback }) };
  const { results: decidedResults, numeric } = await runStageMethods(x, clock.lap);
  results = decidedResults;
  const assembled = withTensorReasons(assemble(plan, results, numeric, numeric.seed, t0), tl?.open);
  clock.lap('report');
  const reached = limit !== undefined && results.some((r) => (r.reason ?? '').includes('(--time-limit)'));
  const timed = { ...assembled, phases: clock.phases, ...(limit === undefined ? {} : { timeLimit: { seconds: limit.seconds, reached } }) };
  const report = distinct === undefined ? timed : withProofs(timed, distinct);
  return engine === 'z3' ? { ...report, engine, stages: report.stages.map((s) => (s.status === 'proved' ? { ...s, decidedBy: 'z3' as const } : s)) } : report;
}

/** The deadline of the refuted stage's own proof after a certificate (as stages/infer/boundary.ts gives settled stages). */
const SETTLED_DEADLINE_MS = 2_000;

function refutedBefore(s: Stage, at: number): StageResult {
  return { stage: s, status: 'unknown', reason: `left open: the plan is already refuted at stage ${at + 1} (a certified witness), and later stages get ${SETTLED_DEADLINE_MS / 1000} s each`, failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
}

/** A stage the run's time limit left unattempted: "unknown", never a verdict. */
function unattempted(s: Stage, limit: TimeLimit): StageResult {
  return { stage: s, status: 'unknown', reason: notAttempted(limit), failingRanks: [...new Set(s.obligations.map((o) => o.rank))], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
}

export function engineError(s: Stage, e: unknown): StageResult {
  return { stage: s, status: 'unknown', reason: `engine error: ${e instanceof Error ? e.message : String(e)}`, failingRanks: s.obligations.map((o) => o.rank), logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
}

/** Turns stage results and the numeric run into the verdict and the report. */
export function assemble(plan: LoadedPlan, results: readonly StageResult[], numeric: NumericReport, seed: number, t0: number): VerifyReport {
  const lg = plan.logical;
  const reports: StageReport[] = [];
  // Every rank's values at the witness draw, for the diagnosis: evaluated on first use only.
  const valuesOf = numeric.evaluated && numeric.mismatches.length > 0 ? tensorValues(plan, numeric.seed, numeric.draw) : undefined;
  results.forEach((r, i) => {
    const s = r.stage;
    const name = lg.tensors.name(s.logical);
    const prodOp = lg.producer[s.logical] as number;
    const op = prodOp < 0 ? undefined : { id: lg.ops.ids.name(prodOp), kind: registry.get(lg.ops.kind[prodOp] as number).name, ...(lg.ops.loc[prodOp] === undefined ? {} : { loc: lg.ops.loc[prodOp] as string }) };
    const base = {
      index: i + 1,
      logical: name,
      ...(op === undefined ? {} : { op }),
      ranks: [...new Set(s.obligations.map((o) => o.rank))].sort((a, b) => a - b),
      // Failing ranks only where a stage is refuted: an undecided stage (stopped, not
      // attempted, an engine error) has no rank shown wrong.
      failingRanks: r.status === 'differs' ? r.failingRanks : [],
      logicalOps: r.logicalOps,
      parallelOps: r.parallelOps,
      ms: r.ms,
    };
    if (r.status === 'proved') {
      reports.push({ ...base, status: 'proved', decidedBy: r.decidedBy ?? 'normal' });
      return;
    }
    if (r.status === 'unknown') {
      reports.push({ ...base, status: 'unknown', reason: r.reason ?? 'undecided' });
      return;
    }
    const witness = numeric.mismatches.filter((m) => m.logical === name);
    if (witness.length > 0) {
      const d = diagnoseWitness(witness, r.reason ?? '', valuesOf?.(s.logical));
      // Failing ranks include every rank the witness or the diagnosis shows wrong: the proof may
      // have stopped at the first rank it refuted.
      const failingRanks = [...new Set([...r.failingRanks, ...witness.map((m) => m.rank), ...d.ranks])].sort((a, b) => a - b);
      reports.push({ ...base, failingRanks, status: 'not_equivalent', reason: `the two sides differ: ${r.reason ?? ''}`, witness: witness.slice(0, 4), diagnosis: d.text, diagnosisRule: d.rule, diagnosisRanks: d.ranks });
    } else {
      const why = numeric.evaluated ? `no numeric witness at seed ${seed}` : `no numeric evaluation (${numeric.reason ?? ''})`;
      reports.push({ ...base, failingRanks: [], status: 'unknown', reason: `normal forms differ but ${why}; the engine may lack an identity the plan relies on: ${r.reason ?? ''}` });
    }
  });

  const failing = reports.filter((r) => r.status === 'not_equivalent');
  const unknown = reports.filter((r) => r.status === 'unknown');
  let verdict: Verdict;
  let summary: string;
  if (failing.length > 0) {
    const f = failing[0] as StageReport;
    verdict = 'not_equivalent';
    summary = `stage ${f.index} (${f.logical}${f.op ? `, op '${f.op.id}'` : ''}) is the first failing stage and the likely root cause${failing.length > 1 ? `; ${failing.length - 1} later stage(s) also fail: ${failing.slice(1).map((x) => x.logical).join(', ')}` : ''}`;
  } else if (unknown.length > 0) {
    verdict = 'unknown';
    summary = `${unknown.length} of ${reports.length} stage(s) undecided; first: stage ${(unknown[0] as StageReport).index} (${(unknown[0] as StageReport).logical}): ${(unknown[0] as StageReport).reason ?? ''}`;
  } else if (numeric.mismatches.length > 0) {
    // Every stage proved yet the numbers differ: never claim "verified" against evidence.
    verdict = 'unknown';
    summary = `internal inconsistency: all stages proved, but numeric evaluation differs on ${numeric.failingTensors.join(', ')} (please report this plan)`;
  } else {
    verdict = 'verified';
    summary = `all ${reports.length} stages proved equivalent in exact arithmetic; every contract output is held complete`;
  }
  return {
    file: plan.file,
    name: plan.name,
    verdict,
    summary,
    stages: reports,
    numeric: { evaluated: numeric.evaluated, seed, claimsChecked: numeric.claimsChecked, mismatches: numeric.mismatches.length, ...(numeric.reason === undefined ? {} : { reason: numeric.reason }) },
    approximations: [],
    ms: performance.now() - t0,
    ...(plan.specialized === undefined ? {} : { specialized: plan.specialized }),
  };
}

/** Names the likely cause from the witness (stages/witness/diagnose.ts: one rule per cause). */
export function diagnoseWitness(w: readonly Mismatch[], residual: string, values?: TensorValues): Diagnosis {
  return diagnose({ witness: w, residual, ...(values === undefined ? {} : { values }) });
}
