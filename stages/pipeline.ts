/**
 * The one verify pipeline (docs/engine.md, "The pipeline"): what `planproof verify` and a library
 * caller run on a loaded plan. The ways to decide a plan are records of one table, `ROUTES`, tried
 * in order: each says when it applies, what it answers and what it costs, and either decides the
 * plan or passes it on to the next record. The last record always decides: stages rank by rank
 * (shape reduction first, then stages/verify.ts's portfolio per stage: tensor level, the exact
 * normal form in worker threads, Z3, per-stage reduction, witnesses). The command line parses
 * options and prints what the record that decided returned; it decides nothing itself.
 */
import { availableParallelism } from 'node:os';
import type { LoadedPlan } from '../lineage/load.js';
import type { PlanIssue } from '../plans/errors.js';
import { stageEntries, stageWorkTooLarge } from '../plans/loader.js';
import type { RawPlan } from '../plans/raw.js';
import type { StageResult } from './decompose/prove.js';
import { PER_TEMPLATE_FIRST, verifiedPerTemplate, verifyPerTemplate } from './decompose/template-verify.js';
import { shutdownZ3 } from './engines/z3.js';
import { provePartOrReplicas as provePart } from './shrink/replicas.js';
import { REDUCTION_NOT_NEEDED, verifyReduced, type ReducedVerifyReport } from './shrink/reduced-verify.js';
import { perStageFallback, verifyPerStage, type FallbackInfo } from './shrink/stage-reduce.js';
import { roundsLimit, verifyBoundary, wantsInference, type BoundaryReport } from './infer/boundary.js';
import { ProofCache } from './cache/cache.js';
import { TimeLimitReached } from './clock.js';
import { verifyPlanInPool, type ShardResult, type TimeLimit } from './verify.js';
import type { Engine, VerifyReport } from './report.js';
import { confirmGuardedPinned } from './witness/guards.js';

/** Witness search per template before the rank-by-rank path (plans past PER_TEMPLATE_FIRST entries). */
const PER_TEMPLATE_WITNESS_MS = 60_000;

/** A progress display the caller owns (the CLI's bar): stages decided out of all. */
interface Progress {
  update(done: number, total: number): void;
  stop(): void;
}

/** What a verify run is asked: the CLI's options once parsed, or a library caller's. */
export interface PipelineOptions {
  readonly engine?: Engine;
  readonly seed?: number;
  /** Worker threads (0: this thread); default as the CLI's --jobs. */
  readonly jobs?: number;
  /** A stage's deadline (seconds). */
  readonly deadline?: number;
  /** The whole run's time limit (--time-limit), counted from wherever the caller started it. */
  readonly timeLimit?: TimeLimit;
  /** Seconds the inference rounds may take (--infer-time-limit). */
  readonly inferTimeLimit?: number;
  /** Tensor-level proofs first (default true; --no-tensor-level). */
  readonly tensorLevel?: boolean;
  /** Most ranks a plan may have for work that is still per rank (--max-ranks); undefined: no bound. */
  readonly maxRanks?: number;
  /** --infer (true), --no-infer (false), or decided by the plan (undefined). */
  readonly infer?: boolean;
  /** --per-stage: every stage extracted and reduced on its own, in this thread. */
  readonly perStage?: boolean;
  /** Shape reduction (default true; --no-reduce). */
  readonly reduce?: boolean;
  /** Where reduced plans are written (--emit-reduced). */
  readonly emitDir?: string;
  /** The proof cache's directory (undefined: no cache). */
  readonly cacheDir?: string;
  /** One shard of a sharded run (cli/shard.ts): its stages' results go to `record`. */
  readonly shard?: { readonly index: number; readonly count: number; readonly record: (r: StageResult) => void };
  /** A merge: the stages the parts proved. */
  readonly proved?: ReadonlyMap<number, ShardResult>;
  /** Progress of the routes that report it (per template, inference rounds). */
  readonly onStage?: (done: number, total: number) => void;
  /** A progress display for the rank-by-rank proof in the worker pool, made when it starts. */
  readonly poolProgress?: () => Progress | undefined;
}

/** The shape reduction section of a report (ReducedVerifyReport's). */
type ReductionReport = ReducedVerifyReport['reduction'];

/** What the record that decided the plan returned; `route` names the record. */
export type PipelineResult =
  | { readonly route: 'per-template'; readonly report: VerifyReport; readonly reduction: ReductionReport }
  | { readonly route: 'per-template-first'; readonly report: VerifyReport; readonly reduction: ReductionReport }
  | { readonly route: 'max-ranks'; readonly refused: PlanIssue }
  | { readonly route: 'inferred-boundaries'; readonly report: BoundaryReport }
  | { readonly route: 'per-stage'; readonly report: ReturnType<typeof verifyPerStage> }
  | { readonly route: 'rank-by-rank'; readonly report: ReducedVerifyReport; readonly fallback: readonly FallbackInfo[]; readonly reduceMs: number };

export type RouteName = PipelineResult['route'];

/** What every record reads: the plan, its compact text (workers re-load it), its file name, the options. */
interface PipelineInput {
  readonly file: string;
  readonly plan: LoadedPlan;
  readonly text: string;
  readonly opts: PipelineOptions;
}

/** One way to decide a plan: a record of the pipeline's table (docs/engine.md's first table is this one). */
export interface Route {
  readonly name: RouteName;
  /** When it applies, in words. */
  readonly when: string;
  /** What it answers. */
  readonly returns: string;
  /** What it costs. */
  readonly cost: string;
  /** The section of docs/engine.md that argues it sound. */
  readonly soundness: string;
  /** The answer, or undefined to pass the plan on to the next record. */
  run(x: PipelineInput): Promise<PipelineResult | undefined>;
}

const jobsOf = (o: PipelineOptions): number => o.jobs ?? Math.min(2, availableParallelism());
/** The parsed plan, read from the input's text only when a witness asks for it. */
const rawOf = (x: PipelineInput) => (): RawPlan => JSON.parse(x.text) as RawPlan;
const engineOf = (o: PipelineOptions): Engine => o.engine ?? 'normal';
const onStageOf = (o: PipelineOptions): { onStage?: (done: number, total: number) => void } => (o.onStage === undefined ? {} : { onStage: o.onStage });

/** Plans with claims marked inferred in the file (from `planproof infer-lineage`). */
const hasFileHints = (plan: LoadedPlan): boolean => plan.programs.some((p) => (p.inferred?.size ?? 0) > 0);

/** Inference without --infer: lineage missing inside a stage tensor-level proofs leave open (wantsInference). */
function autoInfer(x: PipelineInput): boolean {
  const o = x.opts;
  return o.infer === undefined && engineOf(o) === 'normal' && o.perStage !== true && o.emitDir === undefined && o.tensorLevel !== false && o.shard === undefined && o.proved === undefined && wantsInference(x.plan);
}

/** The plan is large per rank and the run may try tensor level per template before anything per rank. */
const perTemplateFirst = (plan: LoadedPlan, o: PipelineOptions): boolean => engineOf(o) === 'normal' && o.infer !== true && o.perStage !== true && o.emitDir === undefined && o.tensorLevel !== false && stageEntries(plan) > PER_TEMPLATE_FIRST;

/** The records, in the order the pipeline tries them. */
export const ROUTES: readonly Route[] = [
  {
    name: 'per-template',
    when: 'the plan is past the per-rank stage bound (plans/loader.ts stageWorkTooLarge)',
    returns: 'verified when tensor level per template proves every stage; not equivalent with a witness on one rank\'s part; otherwise unknown with the reason',
    cost: 'one derivation per program template and stage, whatever the rank count; witnesses on a few ranks\' parts',
    soundness: 'docs/engine.md#sound-per-template',
    async run(x) {
      if (stageWorkTooLarge(x.plan) === undefined) return undefined;
      const report = verifyPerTemplate(x.plan, { seed: x.opts.seed ?? 1, ...onStageOf(x.opts), witness: { raw: rawOf(x), provePart } });
      return { route: 'per-template', report, reduction: { ran: false, reason: 'not tried: the plan is past the per-rank stage bound; its stages are sized at full shapes', reduced: [], kept: [] } };
    },
  },
  {
    name: 'per-template-first',
    when: `large per rank (past ${PER_TEMPLATE_FIRST.toLocaleString('en-US')} stage entries), the normal engine, tensor level on, no --infer, --per-stage or --emit-reduced`,
    returns: 'verified when every stage is proved at tensor level per template, not equivalent with a witness on one rank\'s part; anything else passes the plan on',
    cost: 'one derivation per program template and stage; a witness search of at most 60 s',
    soundness: 'docs/engine.md#sound-per-template-first',
    async run(x) {
      if (!perTemplateFirst(x.plan, x.opts)) return undefined;
      const seed = x.opts.seed ?? 1;
      let r: VerifyReport | undefined;
      try {
        r = verifiedPerTemplate(x.plan, { seed, ...onStageOf(x.opts) });
      } catch (e) {
        if (e instanceof TimeLimitReached) throw e;
        r = undefined; // the rank-by-rank path decides, and reports any engine error itself
      }
      // Not all proved: a witness on one rank's part of an open stage (stages/shrink/part.ts)
      // refutes the plan without building its stages rank by rank; anything else goes on.
      if (r === undefined) {
        try {
          const w = verifyPerTemplate(x.plan, { seed, witness: { raw: rawOf(x), provePart }, witnessMs: PER_TEMPLATE_WITNESS_MS });
          if (w.verdict === 'not_equivalent') r = w;
        } catch (e) {
          if (e instanceof TimeLimitReached) throw e;
          r = undefined;
        }
      }
      return r === undefined ? undefined : { route: 'per-template-first', report: r, reduction: { ran: false, reason: REDUCTION_NOT_NEEDED, reduced: [], kept: [] } };
    },
  },
  {
    name: 'max-ranks',
    when: 'more ranks than --max-ranks and not decided per template',
    returns: 'a refusal (exit 2): what is left is per rank, at a cost the plan as written does not bound',
    cost: 'none',
    soundness: 'docs/engine.md#sound-max-ranks',
    async run(x) {
      const maxRanks = x.opts.maxRanks;
      if (maxRanks === undefined || x.plan.mesh.size <= maxRanks) return undefined;
      return { route: 'max-ranks', refused: { path: '$.mesh', message: `${x.plan.mesh.size.toLocaleString('en-US')} ranks, and the plan is not decided per template: what is left is per rank, bounded by --max-ranks ${maxRanks.toLocaleString('en-US')} (raise it to verify rank by rank)` } };
    },
  },
  {
    name: 'inferred-boundaries',
    when: 'the normal engine and not --no-infer, with --infer, with claims marked inferred in the file, or with lineage missing inside a stage tensor level leaves open (wantsInference)',
    returns: 'the verdict of the plan cut at proved hints (inferred claims are proved before anything assumes them), with the span of the first failure',
    cost: 'rounds within --infer-time-limit (120 s by default) or --time-limit',
    soundness: 'docs/engine.md#sound-inferred-boundaries',
    async run(x) {
      const o = x.opts;
      const auto = autoInfer(x);
      const fileHints = hasFileHints(x.plan);
      if (!(engineOf(o) === 'normal' && o.infer !== false && (o.infer === true || auto || fileHints))) return undefined;
      const limit = roundsLimit(o.timeLimit?.seconds, o.inferTimeLimit === undefined ? undefined : o.inferTimeLimit * 1000);
      // wantsInference has just seen tensor level leave a stage of this very plan open: round 0
      // would repeat that derivation to the same end (with hints in the file, the plan round 0
      // proves is another one, so it runs).
      const report = await verifyBoundary(x.file, JSON.parse(x.text) as Record<string, unknown>, { seed: o.seed ?? 1, jobs: jobsOf(o), deadlineMs: (o.deadline ?? 60) * 1000, infer: o.infer === true || auto, timeLimitMs: limit.ms, timeLimitWhy: limit.why, ...(auto && !fileHints ? { direct: false } : {}), ...onStageOf(o) });
      await shutdownZ3();
      return { route: 'inferred-boundaries', report };
    },
  },
  {
    name: 'per-stage',
    when: '--per-stage',
    returns: 'the verdict with every stage extracted as a plan of its own and reduced on its own',
    cost: 'one extraction, reduction and proof per distinct stage, in this thread',
    soundness: 'docs/engine.md#sound-per-stage',
    async run(x) {
      if (x.opts.perStage !== true) return undefined;
      const report = verifyPerStage(x.plan, JSON.parse(x.text) as RawPlan, { seed: x.opts.seed ?? 1, reduce: x.opts.reduce !== false, ...(x.opts.emitDir === undefined ? {} : { emitDir: x.opts.emitDir }) });
      return { route: 'per-stage', report };
    },
  },
  {
    name: 'rank-by-rank',
    when: 'always (the last record)',
    returns: 'verified only from exact proofs of every stage and an agreeing numeric run; not equivalent only with a witness; otherwise unknown with the reason',
    cost: 'shape reduction first; then per distinct stage, tensor level, the normal form within --deadline in worker threads, Z3 and per-stage reduction for stages left open, all within --time-limit',
    soundness: 'docs/engine.md#sound-rank-by-rank',
    async run(x) {
      const o = x.opts;
      const fallback: FallbackInfo[] = [];
      // Phases: the shape reduction here, the rest from the proof (VerifyReport.phases).
      const tReduce = performance.now();
      let reduceMs = 0;
      const report = await verifyReduced(x.plan, x.text, { reduce: o.reduce !== false, tensorLevel: o.tensorLevel !== false, ...(o.emitDir === undefined ? {} : { emitDir: o.emitDir }), ...(o.cacheDir === undefined ? {} : { cacheDir: o.cacheDir }) }, (plan, text) => {
        reduceMs = Math.round(performance.now() - tReduce);
        return proveRankByRank(plan, text, o, o.reduce !== false ? fallback : undefined);
      });
      return { route: 'rank-by-rank', report, fallback, reduceMs };
    },
  },
];

/**
 * Stages rank by rank in the worker pool (stages/verify.ts verifyPlanInPool), with the proof
 * cache when a directory is given and, with `fallbackLog`, per-stage reduction for stages too
 * large in the whole plan. `planproof demo` runs this alone.
 */
export async function proveRankByRank(plan: LoadedPlan, text: string, o: PipelineOptions, fallbackLog?: FallbackInfo[]): Promise<VerifyReport> {
  const progress = o.poolProgress?.();
  const onStage = progress === undefined ? undefined : (done: number, total: number): void => progress.update(done, total);
  // Proof cache (stages/cache/cache.ts): on when the caller names a directory.
  const cache = o.cacheDir === undefined ? undefined : new ProofCache(o.cacheDir);
  // Per-stage fallback (stages/shrink/stage-reduce.ts): stages too large in the whole plan are extracted and reduced on their own.
  const fallback = fallbackLog === undefined ? undefined : perStageFallback(() => JSON.parse(text) as RawPlan, o.seed ?? 1, fallbackLog);
  let report: VerifyReport;
  try {
    report = await verifyPlanInPool(plan, text, { engine: engineOf(o), seed: o.seed ?? 1, jobs: jobsOf(o), deadlineMs: (o.deadline ?? 60) * 1000, tensorLevel: o.tensorLevel !== false, ...(o.timeLimit === undefined ? {} : { timeLimit: o.timeLimit }), ...(onStage === undefined ? {} : { onStage }), ...(cache === undefined ? {} : { cache }), ...(fallback === undefined ? {} : { fallback }), ...(o.shard === undefined ? {} : { shard: o.shard }), ...(o.proved === undefined ? {} : { proved: o.proved }) });
  } finally {
    progress?.stop();
  }
  await shutdownZ3();
  return report;
}

/**
 * Verifies a loaded plan: the first record of ROUTES whose answer decides it. `file` names the
 * plan in reports; `text` is its compact JSON (what workers and derived plans load), or a
 * function giving it: then it is asked for only by a record that reads it (a large plan's
 * text is as large as its file, and the per-template records read it only for a witness).
 */
export async function verifyPipeline(file: string, plan: LoadedPlan, text: string | (() => string), opts: PipelineOptions = {}): Promise<PipelineResult> {
  let kept = typeof text === 'string' ? text : undefined;
  const x: PipelineInput = {
    file,
    plan,
    get text(): string {
      return (kept ??= (text as () => string)());
    },
    opts,
  };
  for (const route of ROUTES) {
    const r = await route.run(x);
    // A specialized plan is refuted only by a witness that keeps its reads (stages/witness/guards.ts).
    // On an undecided plan with reads, a second run with the inputs the reads imply held (pins.ts),
    // without the proof cache (its proofs hold on those inputs only).
    if (r !== undefined) {
      if (r.route === 'max-ranks') return r;
      // (The text only for a plan with reads: captured plans are small, and a pinned run's workers load it.)
      const report = await confirmGuardedPinned(plan, (plan.guards?.length ?? 0) > 0 ? x.text : undefined, r.report, async (p, t) => {
        const again = await verifyPipeline(file, p, t ?? (() => x.text), { ...opts, cacheDir: undefined });
        return reportOf(again);
      });
      return { ...r, report } as PipelineResult;
    }
  }
  throw new Error('the rank-by-rank record always decides');
}

/** The verdict report of a pipeline result (undefined for a refusal). */
export function reportOf(r: PipelineResult): VerifyReport | undefined {
  return r.route === 'max-ranks' ? undefined : r.report;
}

/** Why a run cannot be sharded (its stages are not proved rank by rank in the pool), or undefined. */
export function notShardable(plan: LoadedPlan, opts: PipelineOptions): string | undefined {
  if (stageWorkTooLarge(plan) !== undefined) return 'the plan is past the per-rank stage bound and is verified per template';
  if (perTemplateFirst(plan, { ...opts, emitDir: undefined })) return 'the plan is large enough to be verified per template first';
  if (engineOf(opts) === 'normal' && opts.infer !== false && (opts.infer === true || hasFileHints(plan))) return 'plans with inferred cut points (--infer) are verified in rounds';
  if (opts.perStage === true) return '--per-stage proves stage by stage in this thread';
  return undefined;
}
