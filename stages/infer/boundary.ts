/**
 * Verification with inferred boundaries (issue 18). A plan may state lineage only at its
 * boundary (contract inputs, parameters, outputs). Cut points are inferred (stages/infer/infer.ts)
 * and written into the plan as claims marked `"inferred": true`; claims so marked in the file
 * (from `planproof infer-lineage`) are treated the same way. Such a claim is a hint:
 *  - it is an obligation of its stage like any claim, and a later stage assumes it only if the
 *    final decomposition proves it;
 *  - a hint whose stage does not prove (a difference, unknown, too large) is replaced by its
 *    next candidate, or dropped; the plan is decomposed again, so stages merge across it;
 *  - a hint is never a witness: the numeric comparison skips it, and the verdict counts only
 *    stages of user claims and the contract.
 * The loop ends when every remaining hint is proved; hints only ever get removed or replaced
 * by another candidate (each tried once), so it terminates. docs/engine.md ("Inferred
 * boundaries") gives the soundness argument.
 */
import { type LoadedPlan, loadPlanObject } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { logicalOrder } from '../../sdfg/execute.js';
import type { LineageNF } from '../../lineage/model.js';
import { numericCheck, type NumericReport } from '../witness/numeric.js';
import { decompose, Prover, StageBuilder, type Stage, type StageResult } from '../decompose/prove.js';
import { DEFAULT_TERM_BUDGET } from '../../sdfg/terms.js';
import { newPool, notStarted, proveInPool, stoppedBy } from '../engines/pool.js';
import type { Piscina } from 'piscina';
import { proveTensorLevel } from '../engines/tensorlevel/prover.js';
import { groupStages } from '../cache/canon.js';
import { certifiedReason, certifyWitness, type CertifyResult } from '../engines/interval.js';
import { inferClaims, unclaimedCount } from './infer.js';
import { structuralClaims } from './infer-struct.js';
import { assemble, engineError, witnessedStages } from '../verify.js';
import { witnessSearch } from '../portfolio.js';
import type { Engine, VerifyReport } from '../report.js';
import { type Json, type Hint, hintOf, fileHints, withHints, hintsKey, isHint, splitHints, groupOf, loadHinted } from './hints.js';
import { type Span, localize } from './localize.js';
import { newReducedRounds, proveTooLargeReduced } from './reduced.js';

export interface BoundaryOptions {
  readonly seed?: number;
  /** Worker threads; 0 proves in this thread. */
  readonly jobs: number;
  readonly deadlineMs: number;
  /** Infer cut points for tensors without lineage (default true); false uses only the file's hints. */
  readonly infer?: boolean;
  /** The Z3 portfolio for stages the normal form leaves open or gives up on (default true). */
  readonly portfolio?: boolean;
  readonly onStage?: (done: number, total: number) => void;
  /** Work budget of the normal form (in this thread, and in workers when set); tests set it low to exercise the portfolio. */
  readonly budget?: number;
  /** Wall-clock limit of the inference rounds (default TIME_LIMIT_MS): past it, open stages are "unknown". */
  readonly timeLimitMs?: number;
  /**
   * Which limit timeLimitMs is, as the reasons of the stages it stops say it (default: the
   * rounds' own limit); the CLI says when it is the run's --time-limit instead.
   */
  readonly timeLimitWhy?: string;
  /** Tensor-level proofs before the normal form (default true). */
  readonly tensorLevel?: boolean;
  /** Each distinct stage (canonical form) proved once (default true). */
  readonly dedup?: boolean;
  /**
   * Round 0 (default true): the plan as written, by tensor-level proofs alone; when they prove
   * every stage no hint is inferred. Tests of the inference rounds turn it off.
   */
  readonly direct?: boolean;
  /** false: stages the rounds leave open stay open, not proved again on the plan as written (tests). */
  readonly asWritten?: boolean;
}

export interface BoundaryReport extends VerifyReport {
  readonly boundary: {
    /** Parallel tensors some op produces that carry no lineage in the file. */
    readonly unclaimed: number;
    readonly inferred: number;
    /** Hints proved and kept as stage boundaries. */
    readonly kept: number;
    /** Hints that did not prove (stages merged across them). */
    readonly dropped: number;
    /** Hints replaced by another candidate. */
    readonly replaced: number;
    readonly rounds: number;
    readonly inferMs: number;
    readonly skipped?: string;
    readonly span?: Span;
    /** The rounds stopped at the time limit (open stages are "unknown"). */
    readonly timedOut?: boolean;
    /** Stages proved again on the plan as written, after the rounds left stages open with no witness (asWritten). */
    readonly asWritten?: number;
  };
}

/** Default time limit of `verify --infer`'s rounds. */
export const TIME_LIMIT_MS = 120_000;

/** The rounds' own limit as a stage's reason names it. */
export function roundsLimitWhy(ms: number): string {
  return `verify --infer's own limit of ${ms / 1000} s on its inference rounds (not --time-limit)`;
}

/**
 * The limit of verify --infer's rounds: their own (TIME_LIMIT_MS), or a shorter --time-limit;
 * with the words a stage it stops gives, so that a stage stopped by the rounds' limit never
 * reads as stopped by a --time-limit of 1800 s.
 */
export function roundsLimit(timeLimitS: number | undefined, ownMs: number = TIME_LIMIT_MS): { ms: number; why: string } {
  if (timeLimitS !== undefined && timeLimitS * 1000 <= ownMs) return { ms: timeLimitS * 1000, why: `the run's time limit of ${timeLimitS} s (--time-limit)` };
  return { ms: ownMs, why: `${roundsLimitWhy(ownMs)}; --infer-time-limit raises it` };
}
/** Seeds tried after the numeric run's for a certified witness, and the time they may take in all. */
const CERTIFY_MORE_SEEDS = 4;
const CERTIFY_MORE_MS = 10_000;
/** Deadline of a user stage before a certified refutation (the verdict is settled; it only confirms which stage fails first). */
const SETTLED_DEADLINE_MS = 2_000;
/** An alternative lineage that holds the whole value on each rank (a slice or a scaled block), not one addend of it. */
const complete = (l: Record<string, unknown>): boolean => ((l['value'] as { of?: unknown } | undefined)?.of ?? 1) === 1;
/** Hint rounds after a certified refutation (they only pick the stage named first; downstream of a bug they merged until 120 s). */
const SETTLED_ROUNDS_MS = 20_000;
/** Deadline of a hint stage (a hint is meant to cut a short stage). */
const HINT_DEADLINE_MS = 10_000;
const SETTLED_WHY = `the plan is already refuted by a certified witness, and the hint rounds stop ${SETTLED_ROUNDS_MS / 1000} s after it`;
/** Reasons of a stage that went past its work budget or its deadline (not a difference). */
const PAST_BOUND = /too large for the exact normal form|deadline of [\d.]+ s exceeded/;
/** The normal form's work budget for a hint stage proved in this thread (a tenth of the default). */
const HINT_TERM_BUDGET = Math.floor(DEFAULT_TERM_BUDGET / 10);
/**
 * The one retry of a hint stage past that tenth, in this thread: 4 tenths. minGPT's hints under
 * DDP need between one and four; the full budget let llama_tp's hopeless ones run to their 10 s
 * deadline, four a round (5 s became 98 s).
 */
const HINT_RETRY_BUDGET = Math.floor((DEFAULT_TERM_BUDGET * 4) / 10);
/** ... within 2 s each, and for at most 4 stages a run: a bounded cost where the retry cannot help. */
const HINT_RETRY_DEADLINE_MS = 2_000;
const HINT_RETRY_STAGES = 4;

/** Verifies a plan object, inferring cut points where it has no lineage. */
export async function verifyBoundary(file: string, raw: Json, opts: BoundaryOptions): Promise<BoundaryReport> {
  const t0 = performance.now();
  const seed = opts.seed ?? 1;
  const hints = fileHints(raw);
  // The plan as its author wrote it, without hints: a hint the loader would reject (a partial
  // group left incomplete) is dropped like one that does not prove (loadHinted).
  // (A plan without marked claims is loaded as it is: the copy costs as much as a tiny plan's proof.)
  const baseRaw = hints.length === 0 ? raw : withHints(raw, []);
  const base = loadPlanObject(file, baseRaw);
  // Round 0: tensor-level proofs of the plan as written derive relations through tensors
  // without lineage. When they prove every stage and the numbers show no difference, the plan
  // is verified exactly as `verify` proves it without inference, and no hint is needed.
  if (opts.infer !== false && opts.tensorLevel !== false && opts.direct !== false) {
    const direct = provedWithoutHints(base, seed, t0);
    if (direct !== undefined) return { ...direct, ms: performance.now() - t0, boundary: { unclaimed: unclaimedCount(base), inferred: 0, kept: 0, dropped: 0, replaced: 0, rounds: 0, inferMs: 0, skipped: NO_HINTS_NEEDED } };
  }
  let unclaimed = 0;
  let skipped: string | undefined;
  // The last plan loaded with hints, and which hints: a round whose hints did not change (a
  // split, the user round after the hint rounds) reuses it instead of loading it again.
  let preloaded: { key: string; plan: LoadedPlan; obj: Json } | undefined;
  const ti = performance.now();
  if (opts.infer !== false) {
    const inf = inferClaims(base, seed);
    unclaimed = inf.unclaimed;
    skipped = inf.skipped;
    for (const c of inf.claims) hints.push(hintOf(c));
    // Tensors whose values say nothing (all integers) get candidates derived from the claims
    // they are computed from: without one, a stage that reads such a tensor reaches back
    // through everything that computes it (attention's zero q/k gradients at seq 1 pulled the
    // whole attention backward into every clip stage of moe-tiny).
    if (inf.integer.length > 0) {
      // (A hint the loader rejects is dropped, and the rest loaded again.)
      let o = withHints(raw, hints);
      let hinted = loadHinted(file, o, hints);
      if (hinted === undefined) hinted = loadHinted(file, (o = withHints(raw, hints)), hints);
      const more = hinted === undefined ? [] : structuralClaims(hinted, inf.integer);
      for (const c of more) hints.push(hintOf(c));
      // Nothing derived: the first round reuses this load.
      if (hinted !== undefined && more.length === 0) preloaded = { key: hintsKey(hints), plan: hinted, obj: o };
    }
  }
  const inferMs = performance.now() - ti;
  const inferredCount = hints.length;

  const limitMs = opts.timeLimitMs ?? TIME_LIMIT_MS;
  const limitWhy = opts.timeLimitWhy ?? roundsLimitWhy(limitMs);
  const cache = new Map<string, StageResult>();
  // Logical tensors whose hints are proved one decomposition at a time (after a joint stage failed).
  const split = new Set<number>();
  // Logical tensors whose hint stage went past its work budget: one stage per rank (below).
  const splitRanks = new Set<number>();
  // Logical tensors whose hint stages, already split per rank, went past a tenth of the budget
  // in this thread: proved once more at the full budget before they are dropped.
  const fullBudget = new Set<number>();
  let retried = 0;
  let weakened = false;
  let searched = false;
  let timedOut = false;
  let settled = false;
  let certifiedEarly = false;
  // When the hint rounds end (moved earlier once a certified witness settles the verdict).
  let roundsEnd = Infinity;
  const certMemo = new Map<string, CertifyResult & { logical?: number }>();
  const reducedRounds = newReducedRounds();
  let dropped = 0;
  let replaced = 0;
  let rounds = 0;
  let plan = base;
  let results!: StageResult[];
  let builder = new StageBuilder(plan);
  // Stages proved again on the plan as written, and hints that stopped counting (asWritten).
  let asWrittenStages = 0;
  let uncounted = 0;
  let keyMemo: { plan: LoadedPlan; text: WeakMap<LineageNF, string>; byStage: Map<string, string> } | undefined;
  // Computed in the first round, on the plan with its hints (it never compares hints).
  let numeric!: NumericReport;
  let numericDone = false;
  let obj!: Json;
  // One pool for every round (workers are costly to start; each reloads a changed plan),
  // started only when a stage needs it: tensor level often proves a round by itself. A small
  // plan's rounds are proved in this thread: starting workers and reloading each round's plan
  // in each cost seconds, more than its stages (stripped mlp dp2: 3.5 s with workers, 0.4 s
  // without). In this thread a stage is bounded by the normal form's work budget, not by a
  // deadline, and the time limit is checked before each stage.
  let pool: Piscina | undefined;
  const inThread = opts.jobs === 0 || logicalElements(base) <= SMALL_PLAN_ELEMENTS;
  const poolOf = inThread ? undefined : (): Piscina => (pool ??= newPool(opts.jobs));
  try {
    for (;;) {
      rounds++;
      const key = hintsKey(hints);
      if (preloaded?.key !== key) {
        obj = withHints(raw, hints);
        const held = hints.length;
        const tl = performance.now();
        const loaded = loadHinted(file, obj, hints);
        if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`load ${(performance.now() - tl).toFixed(0)} ms\n`);
        if (loaded === undefined) {
          dropped += held - hints.length;
          continue;
        }
        plan = loaded;
        builder = new StageBuilder(plan);
        preloaded = { key, plan, obj };
      } else if (plan !== preloaded.plan) {
        plan = preloaded.plan;
        obj = preloaded.obj;
        builder = new StageBuilder(plan);
      }
      const hinted = isHint(plan);
      const stages = splitHints(decompose(plan, logicalOrder(plan)), hinted, split, splitRanks);
      // The numeric run never compares hints: a hint that does not hold is dropped, not a witness.
      if (!numericDone) {
        numeric = numericCheck(plan, seed, hinted);
        numericDone = true;
        // A certified witness needs no hint (interval arithmetic over both whole graphs), so it
        // is tried before the hint rounds: when it refutes the plan, the verdict is settled and
        // the hint stages only serve the confirmation of which user stage fails first, so none
        // gets more than a hint's share of the work (a tenth of the budget, also in workers; no
        // rooted stage with a user stage's budget). ddp_cnn --bn spent 66 s of 70 on three
        // rooted hint stages past the budget, split per rank, one round each, before the user
        // round certified. Their deadline stays the hint's: a shorter one (the settled 2 s)
        // dropped a hint that proves in 2 to 3 s under load (the log-softmax gradient of
        // ddp_cnn --rows strided --batch 32), and every stage after it merged, one round each.
        // The user round certifies again on its own decomposition (stage indices change as
        // hints are dropped); the interval run is memoized (`certMemo`).
        certifiedEarly = certify(plan, stages, numeric, hinted, certMemo) !== undefined;
        if (certifiedEarly) roundsEnd = performance.now() + SETTLED_ROUNDS_MS;
      }
      const witnessed = witnessedStages(plan, stages, numeric);
      // A stage is unchanged when its obligations and the boundaries it starts from are.
      // (Memoized per loaded plan, whose lineage objects are shared: the keys took 0.3 s of
      // a 3.9 s run on gpt2 cp2.)
      if (keyMemo?.plan !== plan) keyMemo = { plan, text: new WeakMap(), byStage: new Map() };
      const memo = keyMemo;
      const nfText = (nf: LineageNF): string => {
        let t = memo.text.get(nf);
        if (t === undefined) memo.text.set(nf, (t = JSON.stringify(nf)));
        return t;
      };
      // (A stage given the full budget is a new attempt: its key says so.)
      const keys = stages.map((s) => {
        const k = stageKey(s);
        return fullBudget.has(s.logical) ? `${k}|full` : k;
      });
      function stageKey(s: Stage): string {
        const own = `${s.logical}|${s.obligations.map((o) => `${o.rank}:${o.tensor}=${nfText(o.nf)}`).join(',')}`;
        let k = memo.byStage.get(own);
        if (k !== undefined) return k;
        const c = builder.closure(s);
        // The relations matter, not only which tensors: a hint replaced by another candidate
        // changes what its consumers assume, and a proof under the old relation proves nothing
        // under the new one.
        k = `${own}|${[...c.inputs.entries()].map(([x, nf]) => `${x}=${nfText(nf)}`).sort().join(',')}`;
        memo.byStage.set(own, k);
        return k;
      }
      // Stages of hints first, until every hint proves; then the user's claims, once.
      const hintStage = (s: Stage): boolean => s.obligations.every((o) => hinted(o.rank, o.tensor));
      const todo = stages.filter((s, i) => !cache.has(keys[i] as string) && hintStage(s));
      if (todo.length === 0) {
        // The user's claims. When the numbers already show one failing, a certified witness
        // (stages/engines/interval.ts) settles the verdict whatever the stage's size: that stage is
        // refuted without a normal form, and the stages after it are not attempted (the
        // stages downstream of a bug get no hints that hold, so they are the plan's largest).
        const cert = certify(plan, stages, numeric, hinted, certMemo);
        settled = cert !== undefined;
        for (const [i, s] of stages.entries()) {
          const k = keys[i] as string;
          if (cache.has(k)) continue;
          if (cert !== undefined && s.index === cert.stage) cache.set(k, cert.result(s));
          else if (cert !== undefined && s.index > cert.stage) cache.set(k, notAttempted(s, cert.stage));
          else todo.push(s);
        }
      }
      const tr = performance.now();
      // A hint stage is meant to be short: one past HINT_DEADLINE_MS is dropped like one that
      // does not prove (its consumers merge across it) instead of holding the round up.
      // So are the user stages before a certified refutation: the verdict is settled, they
      // only confirm that the refuted stage is the first failing one.
      const isHintRound = todo.every(hintStage);
      // The time limit holds inside a round too: no stage starts past it and a running one is
      // stopped at it (a round of hint stages up to their deadline each ran 80 s past it).
      const stop = isHintRound && roundsEnd < t0 + limitMs ? { stopAt: roundsEnd, stopWhy: SETTLED_WHY } : { stopAt: t0 + limitMs, stopWhy: limitWhy };
      // In this thread a hint stage is bounded by a tenth of the normal form's budget: a hint is
      // meant to cut a short stage, and one that needs more is dropped like one past its deadline.
      const hintBudget = isHintRound && (inThread || certifiedEarly) && opts.budget === undefined ? { budget: HINT_TERM_BUDGET } : {};
      // Except a hint stage that starts from user claims only (contract inputs, parameters):
      // dropping its hint cannot cut anything shorter, since every stage that assumes it would
      // reach back through the same ops to the same claims. It gets the budget and deadline of
      // a user stage (Megatron's vocab-parallel embedding over 32 ids needs more than a tenth;
      // dropped, every stage after it merged up to the loss, past the normal form's bound).
      const rooted = isHintRound && !settled && !certifiedEarly ? rootedHintStages(todo, builder, hinted) : new Set<number>();
      // A hint that the tenth could not prove even per rank is tried once more with a larger
      // budget (HINT_RETRY_*) before it is dropped, so that --jobs 0 keeps the hints the pool
      // keeps (a minGPT block's log-softmax gradient under DDP: dropped here, its consumers
      // merged past the normal form's bound; kept by the pool, the plan verified).
      // (It keeps the hint deadline: a stage that needs more is dropped, as in the pool.)
      const full = new Set(isHintRound && !settled && !certifiedEarly && inThread ? todo.filter((s) => fullBudget.has(s.logical) && !rooted.has(s.index)).map((s) => s.index) : []);
      retried += full.size;
      const text = JSON.stringify(obj);
      const short = todo.filter((s) => !rooted.has(s.index) && !full.has(s.index));
      const long = todo.filter((s) => rooted.has(s.index));
      const fullStages = todo.filter((s) => full.has(s.index));
      const proveShort = proveStages(plan, file, text, short, witnessed, isHintRound || settled ? { ...opts, ...hintBudget, ...stop, deadlineMs: Math.min(opts.deadlineMs, settled ? SETTLED_DEADLINE_MS : HINT_DEADLINE_MS) } : { ...opts, ...stop }, poolOf);
      const byIndex = new Map<number, StageResult>();
      (await proveShort).forEach((r, j) => byIndex.set((short[j] as Stage).index, r));
      (await proveStages(plan, file, text, long, witnessed, { ...opts, ...stop }, poolOf)).forEach((r, j) => byIndex.set((long[j] as Stage).index, r));
      if (fullStages.length > 0) (await proveStages(plan, file, text, fullStages, witnessed, { ...opts, ...stop, budget: HINT_RETRY_BUDGET, deadlineMs: Math.min(opts.deadlineMs, HINT_RETRY_DEADLINE_MS) }, poolOf)).forEach((r, j) => byIndex.set((fullStages[j] as Stage).index, r));
      // Too large at full shapes: extracted and reduced on its own (stages/infer/reduced.ts).
      const fresh = proveTooLargeReduced(plan, obj, todo.map((s) => byIndex.get(s.index) as StageResult), seed, stop.stopAt, reducedRounds, hintStage, opts.budget);
      if (process.env['PLANPROOF_TRACE'] === '1') {
        process.stderr.write(`round ${rounds}: ${todo.length} stage(s) in ${((performance.now() - tr) / 1000).toFixed(1)} s (sum ${(fresh.reduce((a, r) => a + r.ms, 0) / 1000).toFixed(2)} s, max ${(Math.max(0, ...fresh.map((r) => r.ms)) / 1000).toFixed(2)}, tl ${fresh.filter((r) => r.decidedBy === 'tensor').length}); hints ${hints.length}; t ${((performance.now() - t0) / 1000).toFixed(1)}\n`);
        fresh.forEach((r) => {
          if (r.ms > 40 || r.status !== 'proved') process.stderr.write(`  ${r.status} ${(r.ms / 1000).toFixed(1)} s ${plan.logical.tensors.name(r.stage.logical)} [${[...new Set(r.stage.obligations.map((o) => (plan.programs[plan.rankProgram[o.rank] as number] as Program).tensors.name(o.tensor)))].slice(0, 3).join(', ')}] ${hinted(r.stage.obligations[0]?.rank ?? 0, r.stage.obligations[0]?.tensor ?? 0) ? 'hint' : 'user'} ${(r.reason ?? '').slice(0, Number(process.env['TRACE_LEN'] ?? 120))}\n`);
        });
      }
      todo.forEach((s, j) => cache.set(keys[s.index] as string, fresh[j] as StageResult));
      results = stages.flatMap((s, i) => {
        const r = cache.get(keys[i] as string);
        return r === undefined ? [] : [{ ...r, stage: s }];
      });
      const pending = stages.some((_, i) => !cache.has(keys[i] as string));
      // Past the time limit no round starts: what is left open is "unknown" (below), never
      // taken as proved.
      const settledOut = isHintRound && performance.now() >= roundsEnd;
      if (performance.now() - t0 >= limitMs || settledOut) {
        timedOut = true;
        const why = performance.now() - t0 >= limitMs ? `${limitWhy} was reached with hints still being proved` : SETTLED_WHY;
        results = stages.map((s, i) => cache.get(keys[i] as string) ?? { stage: s, status: 'unknown', reason: `not attempted: ${why}`, failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 });
        results = results.map((r, i) => ({ ...r, stage: stages[i] as Stage }));
        // A certified witness needs no hint and no stage proof: it still settles a refuted plan.
        const cert = certify(plan, stages, numeric, hinted, certMemo);
        if (cert !== undefined) results[cert.stage] = cert.result(stages[cert.stage] as Stage);
        break;
      }

      // Hints whose obligations did not prove: next candidate, or dropped. A joint stage of
      // several hinted tensors is first split, so that the failing one names itself.
      // A user stage that differs in normal form with no witness at this seed: other seeds
      // are drawn now, before hints are weakened for it (categorical routing can hide a real
      // difference at one seed; weakening merged stages until Z3 spent minutes on them).
      if (!searched && !isHintRound && results.some((r) => r.status === 'differs' && !hintStage(r.stage) && !numeric.failingTensors.includes(plan.logical.tensors.name(r.stage.logical)))) {
        searched = true;
        numeric = witnessSearch(plan, results, numeric, hinted);
      }
      const bad = new Set<string>();
      let splitMore = false;
      // Hinted tensors whose stage did not prove in this decomposition. A failing stage that
      // assumes one of them failed perhaps only because of it (an addend hint that does not hold
      // leaves its consumer's input a free symbol): it is not blamed now, and is proved again
      // once the hint it assumes is replaced or dropped. The stage that fails first in dataflow
      // order assumes no failed hint, so every round still removes or replaces one.
      const failedHint = new Set<string>();
      for (const r of results) if (r.status !== 'proved' && hintStage(r.stage)) for (const o of r.stage.obligations) failedHint.add(`${o.rank}:${o.tensor}`);
      // (Its own obligations do not count: one of them may be an input of another.)
      const assumesFailed = (s: Stage): boolean => {
        const own = new Set(s.obligations.map((o) => `${o.rank}:${o.tensor}`));
        return [...builder.closure(s).inputs.keys()].some((k) => failedHint.has(k) && !own.has(k));
      };
      // Stages of one logical tensor span every rank, so two failing hint stages can assume
      // each other's hints (ring attention: rank 0's chunk from rank 1's and back). When every
      // failing hint stage assumes a failed hint, none would be blamed and the loop would end
      // with them open: then they are all blamed (dropping a hint is always sound).
      const blameAll = !results.some((r) => r.status !== 'proved' && hintStage(r.stage) && !assumesFailed(r.stage));
      const hadFullBudget = new Set(fullBudget);
      for (const r of results) {
        if (r.status === 'proved') continue;
        if (hintStage(r.stage) && !blameAll && assumesFailed(r.stage)) continue;
        if (!split.has(r.stage.logical) && hintStage(r.stage) && new Set(r.stage.obligations.map((o) => groupOf(o))).size > 1) {
          split.add(r.stage.logical);
          splitMore = true;
          continue;
        }
        // A hint stage past its work budget holds every rank's copy of the tensor, and when the
        // ranks compute different rows each copy is its own work (the memo shares nothing): one
        // stage per rank then, each within the budget (and proved once when the copies have
        // one canonical form, stages/cache/dedup.ts). The logits-gradient hint of a two-rank
        // data-parallel GPT block (additive_mask_dp) proves per rank in 2 s but needs just over
        // the budget for both; dropped, every stage after it merged past the normal form's
        // reach and the plan ended UNKNOWN at the inference's 120 s. (A budget per rank instead
        // let failing tensor-parallel hint stages run to their 10 s deadline: llama_tp-neginf
        // went from 6 s to 58 s.)
        if (!splitRanks.has(r.stage.logical) && hintStage(r.stage) && r.status === 'unknown' && /too large for the exact normal form/.test(r.reason ?? '') && new Set(r.stage.obligations.map((o) => o.rank)).size > 1) {
          splitRanks.add(r.stage.logical);
          splitMore = true;
          continue;
        }
        // (Every rank's stage of that tensor: the set is read as it was before this round.)
        if (inThread && !certifiedEarly && retried < HINT_RETRY_STAGES && opts.budget === undefined && !hadFullBudget.has(r.stage.logical) && hintStage(r.stage) && r.status === 'unknown' && /too large for the exact normal form/.test(r.reason ?? '')) {
          fullBudget.add(r.stage.logical);
          splitMore = true;
          continue;
        }
        // A hint stage that assumes partial hints (addends) may fail only because they are
        // too weak: an addend is a free symbol, so a mask that zeroes it on some tokens is lost
        // (the in-vocabulary half of a vocab-parallel embedding gradient is an addend of the
        // gradient, but the embedding backward that consumes it needs the mask). Those inputs
        // are replaced by their next complete alternative (a scaled block: top-2 of 2 experts
        // makes each rank's expert gradient an addend of the loss gradient, the gate
        // probabilities summing to 1, but its consumers need the rank's own block) or dropped;
        // the stage is blamed only without them.
        if (hintStage(r.stage)) {
          const weak = [...builder.closure(r.stage).inputs.entries()].filter(([k, nf]) => nf.value.n > 1 && hinted(...(k.split(':').map(Number) as [number, number])));
          for (const [k] of weak) {
            const [rk, t] = k.split(':').map(Number) as [number, number];
            const name = (plan.programs[plan.rankProgram[rk] as number] as Program).tensors.name(t);
            const h = hints.find((x) => x.program === plan.rankProgram[rk] && x.tensor === name);
            if (h !== undefined) h.alternatives.splice(0, h.alternatives.length, ...h.alternatives.filter(complete));
            bad.add(`${plan.rankProgram[rk]}|${name}`);
          }
          if (weak.length > 0) continue;
        }
        const ranks = new Set(r.failingRanks);
        // A hint stage past its work budget or its deadline is dropped with its alternatives:
        // they are other logical tensors holding the same values (views of one another, as
        // index_put / view / view / all_reduce of a vocab-parallel cross-entropy), so each
        // alternative's stage runs the same parallel ops from the same boundaries and went past
        // the same bound, one round each (GPT tp2 1-layer: 54 replacements, 55 rounds, now 27;
        // docs/engine.md). Dropping a hint is always sound; a "differs" still tries the alternatives.
        const tooLong = r.status === 'unknown' && PAST_BOUND.test(r.reason ?? '');
        for (const o of r.stage.obligations) {
          if (!hinted(o.rank, o.tensor)) continue;
          if (ranks.size > 0 && !ranks.has(o.rank) && r.status === 'differs') continue;
          const name = (plan.programs[plan.rankProgram[o.rank] as number] as Program).tensors.name(o.tensor);
          if (tooLong) {
            const h = hints.find((x) => x.program === plan.rankProgram[o.rank] && x.tensor === name);
            if (h !== undefined) h.alternatives.length = 0;
          }
          bad.add(`${plan.rankProgram[o.rank]}|${name}`);
        }
      }
      // A user stage left open with no witness may be weakened by a hint it assumes (a second
      // addend decomposition of one tensor, say): its inferred inputs are dropped, in one round.
      // Only when nothing is refuted: with a witness the verdict is "not equivalent" anyway, and
      // open stages after it are its echoes.
      if (bad.size === 0 && !pending && !splitMore && !weakened && numeric.failingTensors.length === 0) {
        weakened = true;
        const failing = new Set(numeric.failingTensors);
        for (const r of results) {
          if (r.status === 'proved' || failing.has(plan.logical.tensors.name(r.stage.logical))) continue;
          for (const key of builder.closure(r.stage).inputs.keys()) {
            const [rk, t] = key.split(':').map(Number) as [number, number];
            if (!hinted(rk, t)) continue;
            const h = hints.find((x) => x.program === plan.rankProgram[rk] && x.tensor === (plan.programs[plan.rankProgram[rk] as number] as Program).tensors.name(t));
            if (h !== undefined) h.alternatives.length = 0;
            bad.add(`${plan.rankProgram[rk]}|${(plan.programs[plan.rankProgram[rk] as number] as Program).tensors.name(t)}`);
          }
        }
      }
      if (bad.size === 0 && !pending && !splitMore) break;
      const before = hints.length + replaced;
      for (let i = hints.length - 1; i >= 0; i--) {
        const h = hints[i] as Hint;
        if (!bad.has(`${h.program}|${h.tensor}`)) continue;
        const next = h.alternatives.shift();
        if (next === undefined) {
          hints.splice(i, 1);
          dropped++;
        } else {
          h.lineage = next;
          replaced++;
        }
      }
      // Nothing removed, replaced, split or left to prove: another round would repeat this one.
      if (!pending && !splitMore && hints.length + replaced === before) break;
    }
    // Hints must never cost a proof the plan has without them: stages the rounds leave open,
    // with no witness, are proved as the plan's author wrote them (docs/engine.md, "The plan
    // as written"). The full-lineage gpt2 cp2 plan ended "unknown" after 65 s with hints inside
    // its ring attention backward; with this, it verifies in about 4 s.
    // (Not when the plan has no hints at all: its stages are already those as written.)
    if (opts.asWritten !== false && !timedOut && !settled && numeric.failingTensors.length === 0 && plan.programs.some((p) => (p.inferred?.size ?? 0) > 0) && results.some((r) => r.status !== 'proved')) {
      const w = await asWritten(base, baseRaw, results, builder, isHint(plan), (b, text, todo) => proveStages(b, file, text, todo, new Set(), { ...opts, stopAt: t0 + limitMs, stopWhy: limitWhy }, poolOf));
      results = w.results;
      asWrittenStages = w.stages;
      uncounted = w.unproven;
    }
  } finally {
    await pool?.destroy();
  }
  const hinted = isHint(plan);
  numeric = witnessSearch(plan, results, numeric, hinted);
  // Z3 works within the same time limit (a deadline per open stage ran minutes past it: 22
  // open stages of a refuted MoE plan, 60 s each); past it, nothing is started.
  if (opts.portfolio !== false && !timedOut) results = await portfolio(plan, file, JSON.stringify(obj), results, numeric, opts, { stopAt: t0 + limitMs, stopWhy: limitWhy });
  const report = assemble(plan, results, numeric, numeric.seed, t0);
  const span = localize(plan, builder, report, results, hinted, numeric.seed);
  return {
    ...report,
    ms: performance.now() - t0,
    boundary: { unclaimed, inferred: inferredCount, kept: hints.length - uncounted, dropped: dropped + uncounted, replaced, rounds, inferMs, ...(asWrittenStages > 0 ? { asWritten: asWrittenStages } : {}), ...(skipped === undefined ? {} : { skipped }), ...(span === undefined ? {} : { span }), ...(timedOut ? { timedOut } : {}) },
  };
}

/**
 * Stages left open after the rounds, proved again on the plan as written (without hints).
 * Sound by substitution, as every stage: a stage of the plan as written assumes only user
 * claims, each proved by its own stage. What changes is which proofs count. A hint whose
 * stage is open is not established, so neither is any stage that assumed it, nor the hints
 * that stage proved (a fixpoint over the closures, stage by stage): those stages are tainted.
 * For every logical tensor with a tainted stage, its stages of the plan as written replace
 * the tainted ones when all of them prove (its untainted hint stages stay). A tainted hint
 * stage of a logical tensor without user claims has no such stage; nothing that counts
 * assumes it any more, and it leaves the report. When a tensor's stages as written do not all
 * prove, its hinted stages stay, and any tainted one that had proved becomes "unknown" (it
 * assumed what is not established). docs/engine.md, "The plan as written".
 */
async function asWritten(base: LoadedPlan, baseRaw: Json, results: StageResult[], builder: StageBuilder, hinted: (r: number, t: number) => boolean, prove: (plan: LoadedPlan, text: string, todo: readonly Stage[]) => Promise<StageResult[]>): Promise<{ results: StageResult[]; stages: number; unproven: number }> {
  const key = (r: number, t: number): string => `${r}:${t}`;
  // Stages whose proof does not count (open, or assuming a hint that is not established), by
  // index, and the hints they were to establish. Per stage, not per logical tensor: a proved
  // hint stage of a tensor that also has an open stage can itself assume an open hint.
  const unproven = new Set<string>();
  const tainted = new Set<number>();
  const taint = (i: number): void => {
    tainted.add(i);
    for (const o of (results[i] as StageResult).stage.obligations) if (hinted(o.rank, o.tensor)) unproven.add(key(o.rank, o.tensor));
  };
  results.forEach((r, i) => {
    if (r.status !== 'proved') taint(i);
  });
  for (let changed = true; changed; ) {
    changed = false;
    results.forEach((r, i) => {
      if (tainted.has(i)) return;
      if ([...builder.closure(r.stage).inputs.keys()].some((k) => unproven.has(k))) {
        taint(i);
        changed = true;
      }
    });
  }
  const bad = new Set([...tainted].map((i) => (results[i] as StageResult).stage.logical));
  const written = decompose(base, logicalOrder(base)).filter((s) => bad.has(s.logical));
  const text = JSON.stringify(baseRaw);
  const fresh = await prove(base, text, written);
  const byLogical = new Map<number, StageResult[]>();
  fresh.forEach((r, i) => {
    const L = (written[i] as Stage).logical;
    const l = byLogical.get(L) ?? [];
    l.push({ ...r, stage: written[i] as Stage });
    byLogical.set(L, l);
  });
  const out: StageResult[] = [];
  const emitted = new Set<number>();
  results.forEach((r, i) => {
    const L = r.stage.logical;
    if (!bad.has(L)) {
      out.push(r);
      return;
    }
    const hintsIn = r.stage.obligations.some((o) => hinted(o.rank, o.tensor));
    const mine = byLogical.get(L);
    if (mine !== undefined && mine.every((x) => x.status === 'proved')) {
      if (!emitted.has(L)) out.push(...mine);
      emitted.add(L);
      // A hint stage of L that proved from established claims stays: others may assume it.
      if (!tainted.has(i) && hintsIn) out.push(r);
      return;
    }
    // No user claim of L: a tainted hint stage leaves the report (nothing that counts assumes it).
    if (mine === undefined && !r.stage.obligations.some((o) => !hinted(o.rank, o.tensor))) {
      if (!tainted.has(i)) out.push(r);
      return;
    }
    out.push(tainted.has(i) && r.status === 'proved' ? { ...r, status: 'unknown', reason: 'assumes a hint whose own stage did not prove' } : r);
  });
  // Hint tensors no longer counted as cut points (one per program and tensor).
  const names = new Set([...unproven].map((k) => {
    const [r, t] = k.split(':').map(Number) as [number, number];
    return `${base.rankProgram[r]}|${t}`;
  }));
  return { results: out, stages: written.length, unproven: names.size };
}

/** Why a boundary report has no hints when round 0 proved the plan. */
export const NO_HINTS_NEEDED = 'no inference needed: tensor-level proofs derive every stage through the tensors without lineage';

/**
 * The plan as written, proved by tensor-level relations alone (no normal form, no hint): the
 * report when every stage is proved and the numeric run compares no claim as differing,
 * otherwise undefined (the rounds decide). The same derivations `verify` runs first on every
 * plan, so a "verified" here is one `verify` without inference would print too.
 */
function provedWithoutHints(plan: LoadedPlan, seed: number, t0: number): VerifyReport | undefined {
  const stages = decompose(plan, logicalOrder(plan));
  const tl = proveTensorLevel(plan, stages, true);
  if (tl.proved.size !== stages.length) return undefined;
  // Second evidence, as in verify: a difference in the numbers leaves the verdict to the rounds.
  const numeric = numericCheck(plan, seed);
  if (numeric.failingTensors.length > 0 || witnessedStages(plan, stages, numeric).size > 0) return undefined;
  return assemble(plan, stages.map((s) => tl.proved.get(s.index) as StageResult), numeric, numeric.seed, t0);
}

/**
 * Parallel ops per rank past which a stage left open by tensor-level proofs is a merged span
 * (lineage missing inside it) rather than a short stage the normal form proves at once: the
 * hand-written examples' open stages run 1 to 5 ops per rank, stripped llama cp2's hundreds
 * (stripped llama-tiny-sp's 369 before products of decompositions proved it whole).
 */
const AUTO_INFER_OPS_PER_RANK = 32;

/**
 * Whether `verify` without `--infer` should infer cut points: the plan has parallel tensors
 * without lineage and tensor-level proofs leave open a stage that runs more than
 * AUTO_INFER_OPS_PER_RANK ops per rank (the normal form would get the whole merged span).
 * Sound either way: inference only adds hints, each proved before it is used.
 */
export function wantsInference(plan: LoadedPlan): boolean {
  if (unclaimedCount(plan) === 0) return false;
  const stages = decompose(plan, logicalOrder(plan));
  const tl = proveTensorLevel(plan, stages);
  if (tl.open.size === 0) return false;
  const builder = new StageBuilder(plan);
  return stages.some((s) => {
    if (!tl.open.has(s.index)) return false;
    const ops = builder.closure(s).ops;
    const ranks = new Set<string>();
    for (const o of ops) ranks.add(o.slice(0, o.indexOf(':')));
    return ops.size > AUTO_INFER_OPS_PER_RANK * Math.max(1, ranks.size);
  });
}

/** Plans whose logical tensors hold at most this many elements prove their rounds in this thread. */
const SMALL_PLAN_ELEMENTS = 50_000;

function logicalElements(plan: LoadedPlan): number {
  let n = 0;
  for (const s of plan.logical.shapes) n += (s ?? []).reduce((a, b) => a * b, 1);
  return n;
}

/** `poolOf` starts (or returns) the rounds' worker pool; undefined proves in this thread. */
/**
 * Indices of the hint stages (of `todo`) whose closure starts at user claims only, none at a
 * hint: a stage as short as dropping its hint could ever make one.
 */
function rootedHintStages(todo: readonly Stage[], builder: StageBuilder, hinted: (r: number, t: number) => boolean): Set<number> {
  const out = new Set<number>();
  for (const s of todo) {
    const inputs = [...builder.closure(s).inputs.keys()].map((k) => k.split(':').map(Number) as [number, number]);
    if (inputs.every(([r, t]) => !hinted(r, t))) out.add(s.index);
  }
  return out;
}

async function proveStages(plan: LoadedPlan, file: string, text: string, todo: readonly Stage[], witnessed: ReadonlySet<number>, opts: BoundaryOptions & { readonly stopAt: number; readonly stopWhy: string }, poolOf: (() => Piscina) | undefined): Promise<StageResult[]> {
  if (todo.length === 0) return [];
  // Tensor-level proofs first (stages/engines/tensorlevel/prover.ts), as in verify: whole-tensor relations
  // cost nothing next to the normal form, and a stage they do not prove goes on to it.
  if (opts.tensorLevel !== false) {
    const tl = proveTensorLevel(plan, todo.filter((s) => !witnessed.has(s.index)));
    if (tl.proved.size > 0) {
      const rest = todo.filter((s) => !tl.proved.has(s.index));
      const fresh = await proveStages(plan, file, text, rest, witnessed, { ...opts, tensorLevel: false }, poolOf);
      const byIndex = new Map(rest.map((s, i) => [s.index, fresh[i] as StageResult]));
      return todo.map((s) => tl.proved.get(s.index) ?? (byIndex.get(s.index) as StageResult));
    }
  }
  // Stage deduplication, as in verify (stages/cache/dedup.ts): stages of one canonical form are
  // proved once (the optimizer and clip stages of each parameter, each rank's copy of a hint).
  // A representative that is not proved covers nothing: its members are proved one by one.
  if (opts.dedup !== false && todo.length > 1) {
    const classes = groupStages(plan, todo);
    if (classes.length < todo.length) {
      const sub = { ...opts, tensorLevel: false, dedup: false };
      const reps = await proveStages(plan, file, text, classes.map((c) => todo[c.rep] as Stage), witnessed, sub, poolOf);
      const out = new Array<StageResult | undefined>(todo.length);
      const again: number[] = [];
      classes.forEach((c, k) => {
        const r = reps[k] as StageResult;
        out[c.rep] = r;
        for (const m of c.members) {
          if (m === c.rep) continue;
          if (r.status === 'proved') out[m] = { ...r, stage: todo[m] as Stage, ms: 0 };
          else again.push(m);
        }
      });
      const more = await proveStages(plan, file, text, again.map((m) => todo[m] as Stage), witnessed, sub, poolOf);
      again.forEach((m, j) => (out[m] = more[j]));
      return out as StageResult[];
    }
  }
  if (poolOf !== undefined && opts.jobs > 0) {
    // Deadlines in CPU time as well (pool.ts `cpuDeadline`): hint stages have 10 s, and a
    // shared machine gave a 1 s stage less than a tenth of a core.
    return proveInPool(file, text, todo, { jobs: opts.jobs, witnessed, custom: true, cpuDeadline: true, deadlineMs: opts.deadlineMs, stopAt: opts.stopAt, stopWhy: opts.stopWhy, engine: 'normal' as Engine, pool: poolOf(), ...(opts.budget === undefined ? {} : { budget: opts.budget }), ...(opts.onStage === undefined ? {} : { onStage: opts.onStage }) });
  }
  const prover = opts.budget === undefined ? new Prover(plan) : new Prover(plan, opts.budget);
  return todo.map((s, i) => {
    let r: StageResult;
    // In this thread no stage starts past the limit, and a running one stops at the clock below.
    if (performance.now() >= opts.stopAt) return { stage: s, status: 'unknown', reason: notStarted(opts.stopWhy), failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
    // The normal form looks at the clock: a stage stops at its deadline or at the rounds' time
    // limit, whichever comes first (a clip stage of a mutant ran 36 s to the budget past a 2 s limit).
    const now = performance.now();
    const stop = now + opts.deadlineMs <= opts.stopAt ? { at: now + opts.deadlineMs, reason: `deadline of ${(opts.deadlineMs / 1000).toFixed(1)} s exceeded; the proof was stopped` } : { at: opts.stopAt, reason: stoppedBy(opts.stopAt - now, 'proof', opts.stopWhy) };
    try {
      r = prover.prove(s, witnessed.has(s.index), stop);
    } catch (e) {
      r = engineError(s, e);
    }
    opts.onStage?.(i + 1, todo.length);
    return r;
  });
}

/**
 * The engine portfolio: stages the normal form leaves open (a difference with no witness, a
 * side condition) or gives up on (its work budget) go to Z3 within the stage deadline. Z3 runs
 * in worker threads even when the normal form ran in this one: Z3 (wasm) aborts its process
 * when it runs out of memory, and a worker takes only its stage with it.
 */
async function portfolio(plan: LoadedPlan, file: string, text: string, results: StageResult[], numeric: NumericReport, opts: BoundaryOptions, stop: { readonly stopAt: number; readonly stopWhy: string }): Promise<StageResult[]> {
  const witnessed = new Set(numeric.failingTensors);
  // As in verify's z3Fallback: past a stage refuted with a witness the verdict is settled and
  // that stage is the likely root cause, so later open stages stay open instead of each
  // spending a Z3 deadline (a stripped MLP with a dropped gradient all-reduce took 65 s here).
  const isOpen = (r: StageResult): boolean => (r.status === 'differs' && !witnessed.has(plan.logical.tensors.name(r.stage.logical))) || (r.status === 'unknown' && /side condition|no numeric witness|too large for the exact normal form/.test(r.reason ?? ''));
  const refuted = results.findIndex((r) => r.status === 'differs' && witnessed.has(plan.logical.tensors.name(r.stage.logical)));
  const open = results.filter((r, i) => (refuted < 0 || i < refuted) && isOpen(r));
  const out = results.map((r, i) => (refuted >= 0 && i > refuted && isOpen(r) ? { ...r, reason: `${r.reason ?? 'undecided'} (not sent to Z3: the plan is already refuted at an earlier stage)` } : r));
  if (open.length === 0) return out;
  // Past a witnessed refutation the verdict is settled: Z3 only checks that no earlier stage
  // fails, so it gets the settled deadline (as the user stages before a certified witness).
  const deadlineMs = refuted >= 0 ? Math.min(opts.deadlineMs, SETTLED_DEADLINE_MS) : opts.deadlineMs;
  const z = await proveInPool(file, text, open.map((r) => r.stage), { jobs: Math.max(1, opts.jobs), deadlineMs, engine: 'z3', custom: true, ...stop });
  open.forEach((r, i) => {
    const zr = z[i];
    if (zr?.status === 'proved') out[results.indexOf(r)] = { ...r, status: 'proved', failingRanks: [], decidedBy: 'z3', ms: r.ms + zr.ms };
  });
  return out;
}

interface Cert {
  /** Index of the refuted stage in the decomposition it was found in. */
  readonly stage: number;
  readonly result: (s: Stage) => StageResult;
}

/**
 * The first user stage, in stage order, whose tensor the numeric run shows failing and whose
 * failure interval arithmetic certifies (stages/engines/interval.ts); undefined when there is none.
 */
function certify(plan: LoadedPlan, stages: readonly Stage[], numeric: NumericReport, hinted: (r: number, t: number) => boolean, memo: Map<string, CertifyResult & { logical?: number }>): Cert | undefined {
  if (numeric.failingTensors.length === 0) return undefined;
  const t0 = performance.now();
  const failing = new Set(numeric.failingTensors);
  const user = stages.filter((s) => failing.has(plan.logical.tensors.name(s.logical)) && s.obligations.some((o) => !hinted(o.rank, o.tensor)));
  if (user.length === 0) return undefined;
  // Memoized by the tensors asked and the seed: hints never change a value (they are claims on
  // tensors ops produce; the inputs' claims are the user's), and the claims compared are the
  // user's, the same in every round's plan.
  const tensors = [...new Set(user.map((s) => s.logical))];
  // The numeric run's seed first, then a few more: interval arithmetic is undecided at a draw
  // where a value the program branches on sits near a step (a ReLU's input near 0), and a
  // certificate at any seed is a witness (it evaluates both whole graphs at that draw).
  let c: CertifyResult & { logical?: number } = { undecided: 'not tried' };
  const tStart = performance.now();
  for (let k = 0; k <= CERTIFY_MORE_SEEDS; k++) {
    // (a run as long as the budget leaves no time for another)
    if (k > 0 && performance.now() - tStart > CERTIFY_MORE_MS) break;
    const seed = numeric.seed + k;
    const key = `${seed}|${tensors.join(',')}`;
    let got = memo.get(key);
    if (got === undefined) memo.set(key, (got = certifyWitness(plan, seed, tensors, (r, t) => !hinted(r, t))));
    c = got;
    if ('certified' in c && c.logical !== undefined) break;
  }
  if (!('certified' in c) || c.logical === undefined) {
    if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`certified witness: none (${'undecided' in c ? c.undecided : ''})\n`);
    return undefined;
  }
  const w = c.certified;
  const stage = (user.find((s) => s.logical === c.logical) as Stage).index;
  const ms = performance.now() - t0;
  const reason = certifiedReason(plan.logical.tensors.name(c.logical), w);
  return { stage, result: (s) => ({ stage: s, status: 'differs', reason, failingRanks: [w.rank], logicalOps: 0, parallelOps: 0, terms: 0, ms }) };
}

function notAttempted(s: Stage, at: number): StageResult {
  return { stage: s, status: 'unknown', reason: `not attempted: the plan is already refuted at stage ${at + 1} (a certified witness)`, failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
}
