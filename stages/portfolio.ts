/**
 * The per-stage portfolio (docs/engine.md, "The pipeline", the second table; issue 36): what the
 * rank-by-rank path does with the stages its proofs (tensor level, the proof cache, the exact
 * normal form in worker threads) leave open or show differing. Each way to decide such a stage is
 * one record of `STAGE_METHODS`, run in order by stages/verify.ts: it says when it applies, what
 * it returns and what it costs, and hands on the stage results and the numeric evidence, changed
 * or not. A stage a record proves is reported with the record's name (`decidedBy`), so a report
 * says which method decided every stage. Adding a method is adding a record here and a row to the
 * docs table (test/pipeline.test.ts checks the rows against the records).
 */
import type { LoadedPlan } from '../lineage/load.js';
import { logicalOrder } from '../sdfg/execute.js';
import { numericCheck, type InputDraw, type Mismatch, type NumericReport } from './witness/numeric.js';
import { certifiedMismatch, certifiedReason, certifyWitness, type Certified } from './engines/interval.js';
import { constantCount, provedConstants } from './engines/constants.js';
import { Prover, StageBuilder, type DecidedBy, type Stage, type StageResult } from './decompose/prove.js';
import { newPool, proveInPool, timeLeft, type PoolOptions, type TimeLimit } from './engines/pool.js';
import type { Engine } from './report.js';

/** The stage results (one per stage, in decomposition order) and the numeric evidence, as a record hands them on. */
export interface StageOutcome {
  readonly results: StageResult[];
  readonly numeric: NumericReport;
}

/**
 * Second chance for undecided stages: new results (same order) and the numeric evidence with
 * their witnesses added. Passed in (stages/shrink/stage-reduce.ts perStageFallback) rather than
 * imported: stage-reduce.ts builds its reports with stages/verify.ts.
 */
export type StageFallback = (plan: LoadedPlan, results: readonly StageResult[], numeric: NumericReport, limit?: TimeLimit) => StageOutcome;

/** What every record reads: the run it is part of, and the outcome so far. */
export interface StageContext extends StageOutcome {
  readonly plan: LoadedPlan;
  /** The plan's compact JSON: what workers load (Z3 runs in one). */
  readonly text: string;
  readonly engine: Engine;
  /** A shard of a sharded run: what follows the proofs is the merge's. */
  readonly sharded: boolean;
  /** A merge (`planproof merge`): the parts proved the stages. */
  readonly merge: boolean;
  /** A stage's deadline (ms). */
  readonly deadlineMs: number;
  readonly limit?: TimeLimit;
  /** A worker module instead of stages/engines/worker.js (tests inject faults with it). */
  readonly worker?: PoolOptions['worker'];
  /** Per-stage reduction for stages too large in the whole plan (the pipeline's hook). */
  readonly fallback?: StageFallback;
}

/** One way to decide a stage the proofs leave open: a record of the portfolio. */
export interface StageMethod {
  readonly name: StageMethodName;
  /** When it applies, in words. */
  readonly applies: string;
  /** What it returns: proved, refuted with a witness, or open with the reason. */
  readonly returns: string;
  /** What it costs, at most. */
  readonly cost: string;
  /** The section of docs/engine.md that argues it sound. */
  readonly soundness: string;
  /** The entry of VerifyReport.phases its time is counted in. */
  readonly phase: string;
  /** What a stage it proves is reported as decided by (its name); undefined: it never proves one. */
  readonly proves?: DecidedBy;
  /** The outcome, or undefined when it does not apply (nothing changes). */
  run(x: StageContext): Promise<StageOutcome | undefined>;
  /**
   * The same in one thread, for verifyPlan (the library's synchronous path); undefined: verifyPlan
   * does not run it (it needs a worker thread or the pipeline's hook).
   */
  readonly inThread?: (x: StageContext) => StageOutcome | undefined;
}

type StageMethodName = 'open-stage-witness' | 'witness-search' | 'constants' | 'z3' | 'per-stage';

/** Extra seeds tried when a stage differs in normal form but the first run shows no difference. */
const WITNESS_RETRIES = 4;

/** What constantsFallback spends on finding the constants and on one stage (verifyPlan's stage deadline for it too); on everything; and how many open stages it takes. */
export const CONSTANTS_MS = 10_000;
const CONSTANTS_TOTAL_MS = 30_000;
const CONSTANTS_MAX_STAGES = 64;

/** A record that runs in one thread, so verifyPlan runs it too. */
function inThread(m: Omit<StageMethod, 'run' | 'inThread'> & { readonly inThread: (x: StageContext) => StageOutcome | undefined }): StageMethod {
  return { ...m, run: (x) => Promise.resolve(m.inThread(x)) };
}

/** The records, in the order they run. */
export const STAGE_METHODS: readonly StageMethod[] = [
  {
    name: 'open-stage-witness',
    applies: 'stages the proofs leave open (too large, not reducible, past a deadline) while the first draw shows every claim agreeing; not in shards or merges',
    returns: 'the earliest such stage refuted with a certified witness at another uniform draw (whose numeric report then stands), or nothing changed',
    cost: `at most ${WITNESS_RETRIES} more numeric runs and interval certificates, within --time-limit`,
    soundness: 'docs/engine.md#witnesses-stageswitnessnumericts',
    phase: 'witnessSearch',
    async run(x) {
      if (x.sharded || x.merge) return undefined;
      return openStageWitness(x.plan, x.results, x.numeric, x.limit);
    },
  },
  inThread({
    name: 'witness-search',
    applies: 'stages whose normal forms differ with no witness at the first draw; not in shards',
    returns: 'the numeric report of the draw that witnesses most (more uniform seeds, then log-scale magnitudes), else an interval certificate at the first draw; a stage with a witness is refuted, one without stays open',
    cost: `at most ${2 * WITNESS_RETRIES} more numeric runs and one interval evaluation, within --time-limit`,
    soundness: 'docs/engine.md#witnesses-stageswitnessnumericts',
    phase: 'witnessSearch',
    inThread(x) {
      if (x.sharded) return undefined;
      return { results: x.results, numeric: witnessSearch(x.plan, x.results, x.numeric, undefined, x.limit) };
    },
  }),
  inThread({
    name: 'constants',
    applies: 'the normal engine, not in shards, the plan not refuted: open stages with no witness (a difference, a side condition, too large) with an input holding a constant of the logical graph',
    returns: 'proved with the constant elements substituted for its input symbols, or the stage keeps its result',
    cost: `${CONSTANTS_MS / 1000} s to find the constants and at most that per stage, ${CONSTANTS_TOTAL_MS / 1000} s and ${CONSTANTS_MAX_STAGES} stages in all, within --time-limit`,
    soundness: 'docs/engine.md#constant-elements-stagesenginesconstantsts',
    phase: 'constants',
    proves: 'constants',
    inThread(x) {
      if (x.engine !== 'normal' || x.sharded) return undefined;
      return { results: constantsFallback(x.plan, x.results, x.numeric, x.deadlineMs, x.limit), numeric: x.numeric };
    },
  }),
  {
    name: 'z3',
    applies: 'the normal engine, not in shards: a difference with no witness, a side condition or a stage too large for the normal form, before any stage refuted with a witness',
    returns: 'proved (unsat), or the stage stays open (stages after a refuted one say they were not sent)',
    cost: 'per stage its deadline less what the normal form spent (at least 1 s), in one worker thread, within --time-limit',
    soundness: 'docs/engine.md#the-layered-decision',
    phase: 'z3Fallback',
    proves: 'z3',
    async run(x) {
      if (x.engine !== 'normal' || x.sharded) return undefined;
      return { results: await z3Fallback(x.plan, x.text, x.results, x.numeric, x.deadlineMs, x.limit, x.worker), numeric: x.numeric };
    },
  },
  {
    name: 'per-stage',
    applies: 'the normal engine, not in shards, shape reduction on: stages too large or past their deadline in the whole plan, before any stage refuted with a witness',
    returns: "the stage's answer on its own extracted and reduced copy: proved, refuted with a witness (or one at a prefix or zero-extension cut), or open with the reason",
    cost: 'one extraction, reduction and proof per stage in this thread, 300 s in all (stages/shrink/stage-reduce.ts FALLBACK_BUDGET_MS), within --time-limit',
    soundness: 'docs/engine.md#sound-per-stage',
    phase: 'perStageFallback',
    proves: 'per-stage',
    async run(x) {
      if (x.engine !== 'normal' || x.sharded || x.fallback === undefined) return undefined;
      return x.fallback(x.plan, x.results, x.numeric, x.limit);
    },
  },
];

/** The outcome with the stages `m` proved marked as decided by it. */
function decided(m: StageMethod, before: readonly StageResult[], got: StageOutcome): StageOutcome {
  const by = m.proves;
  if (by === undefined) return got;
  return { results: got.results.map((r, i) => (r.status === 'proved' && before[i]?.status !== 'proved' ? { ...r, decidedBy: by } : r)), numeric: got.numeric };
}

/** Runs the records in order (verifyPlanInPool); `lap` counts each record's time in its phase. */
export async function runStageMethods(x: StageContext, lap: (phase: string) => void): Promise<StageOutcome> {
  let cur = x;
  for (const m of STAGE_METHODS) {
    const got = await m.run(cur);
    if (got !== undefined) cur = { ...cur, ...decided(m, cur.results, got) };
    lap(m.phase);
  }
  return { results: cur.results, numeric: cur.numeric };
}

/** The records verifyPlan runs (those with an in-thread form), in the same order. */
export function runStageMethodsInThread(x: StageContext): StageOutcome {
  let cur = x;
  for (const m of STAGE_METHODS) {
    const got = m.inThread?.(cur);
    if (got !== undefined) cur = { ...cur, ...decided(m, cur.results, got) };
  }
  return { results: cur.results, numeric: cur.numeric };
}

/**
 * The draws a witness search tries after the first (seed `seed`, uniform): more uniform seeds,
 * then magnitudes over many decades (stages/witness/numeric.ts 'log': a changed epsilon shows only where
 * a value is as small as it). Deterministic in the seed, so --seed reproduces a witness.
 */
export function retryDraws(seed: number): { seed: number; draw: InputDraw }[] {
  const uniform = Array.from({ length: WITNESS_RETRIES }, (_, k) => ({ seed: seed + k + 1, draw: 'uniform' as const }));
  const log = Array.from({ length: WITNESS_RETRIES }, (_, k) => ({ seed: seed + k, draw: 'log' as const }));
  return [...uniform, ...log];
}

/**
 * A normal-form difference with no witness at the first seed: draw again (a few seeds) before
 * calling the stage open. Random ids or routings can coincide (both ranks route alike), which
 * hides a real difference. The report keeps the seed that witnessed the most, so --seed
 * reproduces it.
 */
export function witnessSearch(plan: LoadedPlan, results: readonly StageResult[], first: NumericReport, skip?: (rank: number, tensor: number) => boolean, limit?: TimeLimit): NumericReport {
  if (!first.evaluated) return first;
  const open = (n: NumericReport): number => results.filter((r) => r.status === 'differs' && !n.failingTensors.includes(plan.logical.tensors.name(r.stage.logical))).length;
  let best = first;
  for (const d of retryDraws(first.seed)) {
    if (open(best) === 0 || timeLeft(limit) <= 0) break;
    const n = numericCheck(plan, d.seed, skip, d.draw);
    if (open(n) < open(best) && best.failingTensors.every((t) => n.failingTensors.includes(t))) best = n;
  }
  // No draw shows it above the witness tolerance (an eps of 1.1e-8 against 1e-8): interval
  // arithmetic on the first draw may still separate the two sides, which is a witness in exact
  // arithmetic (stages/engines/interval.ts). Only when no retry witnessed more, so one draw explains
  // every witness of the report.
  if (best === first && open(first) > 0 && timeLeft(limit) > 0) {
    const targets = [...new Set(results.filter((r) => r.status === 'differs' && !first.failingTensors.includes(plan.logical.tensors.name(r.stage.logical))).map((r) => r.stage.logical))];
    const c = certifyWitness(plan, first.seed, targets, skip === undefined ? () => true : (r, t) => !skip(r, t));
    if ('certified' in c && c.logical !== undefined) return withCertified(plan, first, c.logical, c.certified);
  }
  return best;
}

/**
 * Stages the engines leave open (too large, not reducible, past a deadline) while the first
 * draw shows every claim agreeing: other uniform draws may show one differing (a routing that
 * sends no token to an expert at one seed makes two gradient pieces both zero), and interval
 * arithmetic at that draw certifies it (earlyCertificate's argument). The stage is then
 * refuted, and the numeric report is that draw's, so --seed reproduces the witness. Before
 * the Z3 and per-stage fallbacks, which a one-sided MoE edit kept busy for 78 s to no verdict.
 */
export function openStageWitness(plan: LoadedPlan, results: readonly StageResult[], first: NumericReport, limit?: TimeLimit): StageOutcome | undefined {
  if (!first.evaluated || first.failingTensors.length > 0) return undefined;
  const open = results.filter((r) => r.status === 'unknown' && /too large|not reducible|deadline|stopped/.test(r.reason ?? ''));
  if (open.length === 0) return undefined;
  const names = new Set(open.map((r) => plan.logical.tensors.name(r.stage.logical)));
  for (const d of retryDraws(first.seed)) {
    if (d.draw !== 'uniform' || timeLeft(limit) <= 0) continue;
    const n = numericCheck(plan, d.seed, undefined, 'uniform');
    const hit = open.filter((r) => n.failingTensors.includes(plan.logical.tensors.name(r.stage.logical)));
    if (hit.length === 0 || !n.failingTensors.every((t) => names.has(t))) continue;
    const stages = hit.map((r) => r.stage);
    const cert = earlyCertificate(plan, stages, n);
    if (cert === undefined) continue;
    const out = results.map((r) => (r.stage.index === cert.stage ? { ...cert.result, stage: r.stage } : r));
    return { results: out, numeric: cert.numeric };
  }
  return undefined;
}

/**
 * A certified refutation before any stage proof. The numeric run shows claims differing in
 * Float64, which alone is no witness (rounding); interval arithmetic on the same inputs
 * (stages/engines/interval.ts) that separates the two sides is one in exact arithmetic. A stage whose
 * claim is refuted so needs no normal form: a one-sided edit inside a stage too large for it
 * (a llama cp2 gradient) spent 90 s in per-stage reduction to find what the numbers showed in
 * 0.7 s. The earliest certified stage in the decomposition's order is settled "differs".
 */
export function earlyCertificate(plan: LoadedPlan, stages: readonly Stage[], first: NumericReport): { stage: number; result: StageResult; numeric: NumericReport } | undefined {
  if (!first.evaluated || first.failingTensors.length === 0) return undefined;
  const failing = new Set(first.failingTensors);
  const targets = stages.filter((s) => failing.has(plan.logical.tensors.name(s.logical))).map((s) => s.logical);
  const t0 = performance.now();
  const c = certifyWitness(plan, first.seed, [...new Set(targets)], () => true);
  if (!('certified' in c) || c.logical === undefined) return undefined;
  const st = stages.find((s) => s.logical === c.logical) as Stage;
  const w = c.certified;
  const reason = certifiedReason(plan.logical.tensors.name(c.logical), w);
  return {
    stage: st.index,
    result: { stage: st, status: 'differs', reason, failingRanks: [w.rank], logicalOps: 0, parallelOps: 0, terms: 0, ms: performance.now() - t0 },
    numeric: withCertified(plan, first, c.logical, w),
  };
}

/** The numeric report with a certified witness of logical tensor `logical` among its mismatches. */
function withCertified(plan: LoadedPlan, n: NumericReport, logical: number, w: Certified): NumericReport {
  const prod = plan.logical.producer[logical] as number;
  const m = certifiedMismatch(plan, logical, w, prod < 0 ? -1 : logicalOrder(plan).indexOf(prod));
  // The certified claim may be one the float run already counted: it replaces that entry, so
  // the count is the same whichever path (single run, shards and merge) reports it.
  const same = (x: Mismatch): boolean => x.logical === m.logical && x.rank === m.rank && x.tensor === m.tensor && x.element.join() === m.element.join();
  const mismatches = [...n.mismatches.filter((x) => !same(x)), m].sort((a, b) => a.order - b.order || a.rank - b.rank);
  return { ...n, mismatches, failingTensors: [...new Set(mismatches.map((x) => x.logical))] };
}

/** The stages constantsFallback takes up: open ones the normal form could decide with more facts. */
const CONSTANTS_OPEN = /no numeric witness|side condition|too large for the exact normal form/;

/**
 * Stages left open with no witness, proved again with the plan's constant elements for their
 * input symbols (stages/engines/constants.ts): a gradient that is exactly 0 at these shapes
 * (one key per query) makes an edit behind it change nothing, which a stage that assumes its
 * inputs arbitrary cannot see. Only a proof is taken from it; a stage it does not prove keeps
 * its result. Never in a shard (the merge runs it, so a merge reports what a single run does),
 * and its proofs never reach the proof cache (they rest on facts outside the stage; the cache
 * is written before this runs, stages/cache/dedup.ts).
 */
export function constantsFallback(plan: LoadedPlan, results: StageResult[], numeric: NumericReport, deadlineMs: number, limit?: TimeLimit): StageResult[] {
  const t0 = performance.now();
  const witnessed = new Set(numeric.failingTensors);
  const name = (r: StageResult): string => plan.logical.tensors.name(r.stage.logical);
  // The candidates come from two Float64 runs of the logical graph: not for a plan the numeric
  // run found too large to evaluate.
  if (!numeric.evaluated) return results;
  // A plan already refuted with a witness keeps its verdict whatever is proved here.
  if (results.some((r) => r.status === 'differs' && witnessed.has(name(r)))) return results;
  const open = results.filter((r) => !witnessed.has(name(r)) && ((r.status === 'unknown' && CONSTANTS_OPEN.test(r.reason ?? '')) || r.status === 'differs')).slice(0, CONSTANTS_MAX_STAGES);
  const left = (): number => Math.min(CONSTANTS_TOTAL_MS - (performance.now() - t0), limit === undefined ? Infinity : timeLeft(limit));
  if (open.length === 0 || left() <= 0) return results;
  // Only the constants of the tensors the open stages take as inputs (and their ancestors).
  const builder = new StageBuilder(plan);
  const inputsOf = new Map(open.map((r) => [r, new Set([...builder.closure(r.stage).inputs.values()].map((nf) => nf.logical))]));
  const targets = new Set([...inputsOf.values()].flatMap((s) => [...s]));
  const constants = provedConstants(plan, Math.min(CONSTANTS_MS, left()), targets);
  if (constantCount(constants) === 0) return results;
  const prover = new Prover(plan);
  const out = results.slice();
  for (const r of open) {
    // A stage none of whose inputs holds a constant would be proved as before.
    if (![...(inputsOf.get(r) ?? [])].some((L) => constants.has(L)) || left() <= 0) continue;
    const p = prover.prove(r.stage, false, { at: performance.now() + Math.min(deadlineMs, CONSTANTS_MS, left()), reason: 'stopped' }, constants);
    if (p.status === 'proved') out[results.indexOf(r)] = { ...p, ms: r.ms + p.ms };
  }
  return out;
}

/**
 * The layered decision: stages the normal form leaves open (a difference with no numeric
 * witness, or a division it cannot show nonzero) go to Z3, which knows max/min as If-terms
 * and nonlinear real arithmetic. A Z3 proof is taken; anything else keeps the first answer.
 */
async function z3Fallback(plan: LoadedPlan, text: string, results: StageResult[], numeric: NumericReport, deadlineMs: number, limit?: TimeLimit, worker?: PoolOptions['worker']): Promise<StageResult[]> {
  const witnessed = new Set(numeric.failingTensors);
  // The portfolio: also a stage the normal form gave up on (its work budget), within the stage deadline.
  // Past a stage refuted with a witness the verdict is settled and that stage is the likely root
  // cause: later open stages stay unknown instead of each spending a Z3 deadline (a tiny
  // refuted plan took 85 s here, issue 13 defect 3). Open stages before it are still decided.
  const refuted = results.findIndex((r) => r.status === 'differs' && witnessed.has(plan.logical.tensors.name(r.stage.logical)));
  const open = results.filter((r, i) => (refuted < 0 || i < refuted) && ((r.status === 'differs' && !witnessed.has(plan.logical.tensors.name(r.stage.logical))) || (r.status === 'unknown' && /side condition|no numeric witness|too large for the exact normal form/.test(r.reason ?? ''))));
  const out = results.map((r, i) =>
    refuted >= 0 && i > refuted && (r.status === 'differs' || r.status === 'unknown') && !witnessed.has(plan.logical.tensors.name(r.stage.logical))
      ? { ...r, reason: `${r.reason ?? 'undecided'} (not sent to Z3: the plan is already refuted at an earlier stage)` }
      : r,
  );
  if (open.length === 0) return out;
  // Z3 runs in a worker thread even when the normal form ran in this one: Z3 (wasm) aborts its
  // process when it runs out of memory (a mutant's stage took the CLI down with exit 4 and no
  // report); in a worker it takes only that stage's attempt with it.
  const pool = newPool(1, undefined, worker);
  try {
    for (const r of open) {
      const i = results.indexOf(r);
      const left = timeLeft(limit);
      if (limit !== undefined && left <= 0) {
        out[i] = { ...r, reason: `${r.reason ?? 'undecided'} (not sent to Z3: the run's time limit of ${limit.seconds} s (--time-limit) was reached)` };
        continue;
      }
      // Within the stage's deadline: what the normal form spent on it is deducted; and within the run's time limit.
      const [z] = await proveInPool(plan.file, text, [r.stage], { jobs: 1, pool, engine: 'z3', deadlineMs: Math.max(1000, deadlineMs - r.ms), ...(limit === undefined ? {} : { timeLimit: limit }) });
      if (z?.status === 'proved') out[i] = { ...r, status: 'proved', failingRanks: [], decidedBy: 'z3', ms: r.ms + z.ms };
      else if (z !== undefined && /the worker proving this stage failed/.test(z.reason ?? '')) out[i] = { ...r, reason: `${r.reason ?? 'undecided'} (Z3 did not decide it: ${z.reason ?? ''})` };
    }
  } finally {
    await pool.destroy();
  }
  return out;
}
