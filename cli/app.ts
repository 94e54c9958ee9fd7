/**
 * planproof's commands (the executable is cli/main.ts, which imports this only where it runs them). Exit codes: 0 verified, 1 not equivalent, 2 invalid plan,
 * 3 unknown, 4 usage or internal error. Never prints a stack trace unless PLANPROOF_DEBUG=1.
 */
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { ExitCode, PlanError, formatIssue, type PlanIssue } from '../plans/errors.js';
import { unimpliedPin } from '../stages/witness/pins.js';
import { defaultLimits, setDefaultLimits } from '../plans/loader.js';
import { DEFAULT_MAX_RANKS, engineOptionError, limitOptionError, limitsFrom, type LimitFlags } from './limits.js';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import { parsePlanJson, readPlanText, STDIN_NAME } from '../plans/json.js';
import { formatSummary, summarize } from './summary.js';
import { MergeError, type ShardResult, type TimeLimit } from '../stages/verify.js';
import { notShardable, proveRankByRank, verifyPipeline, type PipelineOptions, type PipelineResult } from '../stages/pipeline.js';
import type { StageResult } from '../stages/decompose/prove.js';
import { formatReport, type VerifyReport } from '../stages/report.js';
import { formatReductionReport, type ReduceOptions } from '../stages/shrink/reduced-verify.js';
import { formatFallback, formatPerStage } from '../stages/shrink/stage-reduce.js';
import type { RawPlan } from '../plans/raw.js';
import { defaultCacheDir } from '../stages/cache/cache.js';
import { writeFileSync } from 'node:fs';
import { inferLineage, printInferred } from './boundary.js';
import { junitInvalid, junitXml } from './junit.js';
import { htmlInvalid, htmlReport } from './html.js';
import { parseShard, partOf, planDigest, readParts } from './shard.js';
import { stageBar } from './progress.js';
import { compactTextOf } from './plantext.js';
import { explain } from './explain.js';
import { importCommand } from './import.js';
import { captureCommand } from './capture.js';
import { answerKey, jsonReport, lookupAnswer, replayAnswer, storeAnswer, type Answer, type AnswerKey } from './answers.js';
import { deltaAnswer, skeletonOf, storeArgvMemo, storeDelta } from './delta.js';
import { registry } from '../ops/registry.js';
import { attrRelianceOf } from '../stages/decompose/template-verify.js';
import { checkRunClock, setRunClock, TimeLimitReached, timeUpReport } from '../stages/clock.js';
import { STARTED_AT_ENV } from './heap.js';
import { invalidJson, reportJson, usageJson } from './report-json.js';
import { COMMAND_OPTION_NAMES, COMMAND_OPTIONS, JSON_OPTION } from './options.js';
import { gen, genConfig, type GenArgs } from './gen.js';
import { numberOptionError, usageMessage } from './usage.js';

const DEMO_PLAN = fileURLToPath(new URL('../../examples/mlp-tp2.json', import.meta.url));

const verdictCode = { verified: ExitCode.verified, not_equivalent: ExitCode.notEquivalent, unknown: ExitCode.unknown } as const;

interface Out {
  log(s: string): void;
  err(s: string): void;
  /** Text as is, in pieces (gen streams a plan to stdout with it). */
  write?(s: string): void;
}

const stdio: Out = { log: (s) => process.stdout.write(s + '\n'), err: (s) => process.stderr.write(s + '\n'), write: (s) => process.stdout.write(s) };

interface Loaded {
  plan: LoadedPlan;
  /**
   * The parsed plan re-serialized without whitespace: what later phases and proof workers read,
   * never the file's raw text. Built on first read (cli/plantext.ts): most large runs never read it.
   */
  readonly text: string;
  /** The same, as the function that builds it (verifyPipeline asks only when a record reads it). */
  readonly textOf: () => string;
}

/**
 * Reads, parses and loads a plan (reporting a PlanError on `out`); exported for tests. `read`
 * is the file's text when the caller has read it already (the answer cache hashes exactly the
 * text that is verified, even if the file changes meanwhile).
 */
export function loadWithText(path: string, json: boolean, out: Out, onInvalid?: (file: string, e: PlanError) => void, read?: string): Loaded | number {
  const file = path === '-' ? STDIN_NAME : path;
  try {
    // Within the limits set from the command line (setDefaultLimits in main).
    const parsed = parseSource(file, read);
    const plan = loadPlanObject(file, parsed.raw);
    const pin = unimpliedPin(plan);
    if (pin !== undefined) throw new PlanError(file, [pin]);
    // Serialized after the load (which bounds the nesting JSON.stringify recurses on): when
    // first read, or now for standard input, which cannot be read again.
    let textOf = parsed.textOf;
    if (textOf === undefined) {
      const text = JSON.stringify(parsed.raw);
      textOf = () => text;
    }
    return {
      plan,
      textOf,
      get text(): string {
        return textOf();
      },
    };
  } catch (e) {
    if (!(e instanceof PlanError)) throw e;
    onInvalid?.(file, e);
    return invalidPlan(file, e.issues, json, out);
  }
}

/**
 * The parsed plan and how to get its compact text later. The file's text lives only in this
 * frame: held through the load it would add its size (271 MB at 405B) to the load's peak.
 */
function parseSource(file: string, read: string | undefined): { raw: unknown; textOf: (() => string) | undefined } {
  const source = read ?? readPlanText(file, defaultLimits().bytes);
  const textOf = compactTextOf(file, source, read !== undefined, defaultLimits().bytes);
  return { raw: parsePlanJson(file, source), textOf };
}

/** An invalid plan's issues, as JSON or on stderr; exit 2. */
function invalidPlan(file: string, issues: readonly PlanIssue[], json: boolean, out: Out): number {
  if (json) out.log(invalidJson(file, issues));
  else {
    out.err(`planproof: invalid plan ${file}`);
    for (const i of issues) out.err(`  ${formatIssue(file, i)}`);
  }
  return ExitCode.invalidPlan;
}

function load(file: string, json: boolean, out: Out): LoadedPlan | number {
  const l = loadWithText(file, json, out);
  return typeof l === 'number' ? l : l.plan;
}

interface EngineOptions {
  engine: 'normal' | 'z3';
  seed: number;
  jobs: number;
  deadline: number;
  /** The whole run's time limit in seconds (--time-limit). */
  timeLimit?: number;
  /** Seconds the inference rounds may take (--infer-time-limit). */
  inferTimeLimit?: number;
  /** Tensor-level proofs first (default; --no-tensor-level turns them off). */
  tensorLevel?: boolean;
  /** A progress bar on stderr when it is a terminal (off with --json). */
  progress?: boolean;
  /** Most ranks a plan may have for work that is still per rank (--max-ranks). */
  maxRanks?: number;
}

function inspect(file: string, json: boolean, out: Out): number {
  const plan = load(file, json, out);
  if (typeof plan === 'number') return plan;
  const s = summarize(plan);
  out.log(json ? JSON.stringify(s, null, 2) : formatSummary(s));
  return 0;
}

/** --cache DIR, the default directory, or off with --no-cache (yargs gives false). */
function cacheOption(v: unknown): { cacheDir?: string } {
  if (v === false || v === 'false') return {};
  return { cacheDir: typeof v === 'string' && v !== '' ? v : defaultCacheDir() };
}

/** The run's time limit: from the executable's start (PLANPROOF_STARTED_AT, cli/main.ts), else from the call. */
function timeLimitFrom(eng: EngineOptions): TimeLimit | undefined {
  if (eng.timeLimit === undefined) return undefined;
  const started = Number(process.env[STARTED_AT_ENV]);
  const elapsed = Number.isFinite(started) && started > 0 ? Math.max(0, Date.now() - started) : 0;
  return { endAt: performance.now() - elapsed + eng.timeLimit * 1000, seconds: eng.timeLimit };
}

/** The pipeline's options (stages/pipeline.ts) from the engine options of a command line. */
function pipelineOptions(eng: EngineOptions, limit: TimeLimit | undefined = timeLimitFrom(eng)): PipelineOptions {
  // The bar (cli/progress.ts) only on a terminal and never with --json.
  return { engine: eng.engine, seed: eng.seed, jobs: eng.jobs, deadline: eng.deadline, tensorLevel: eng.tensorLevel !== false, ...(limit === undefined ? {} : { timeLimit: limit }), ...(eng.inferTimeLimit === undefined ? {} : { inferTimeLimit: eng.inferTimeLimit }), poolProgress: () => stageBar(eng.progress === true) };
}

/** Report files a verify run writes besides its stdout report (--junit, --html). */
export interface ReportFiles {
  readonly junit?: string;
  readonly html?: string;
  /** Called with the finished run's report and plan (the answer cache keeps it). */
  readonly onReport?: (r: VerifyReport, plan: LoadedPlan) => void;
}

/**
 * Writes the report files of a finished run and returns its exit code. A file that cannot be
 * written is a usage error (exit 4), so CI never reads a missing report as a pass.
 */
async function finish(r: VerifyReport, l: Loaded, files: ReportFiles, out: Out): Promise<number> {
  files.onReport?.(r, l.plan);
  try {
    if (files.junit !== undefined) writeFileSync(files.junit, junitXml(r));
    if (files.html !== undefined) writeFileSync(files.html, await htmlReport(r, l.plan));
  } catch (e) {
    out.err(`planproof: cannot write the report: ${e instanceof Error ? e.message : String(e)}`);
    return ExitCode.usage;
  }
  return verdictCode[r.verdict];
}

/**
 * A sharded run or a merge (cli/shard.ts): `shard` proves one shard's stages and writes a
 * part instead of a report; `proved` (with the plan digest the parts were proved on) merges.
 */
interface ShardRun {
  readonly shard?: { index: number; count: number };
  readonly merge?: { proved: ReadonlyMap<number, ShardResult>; sha256: string };
}

/** The answer cache of a verify run (cli/answers.ts): where, and the options its key holds. */
interface AnswerMemo {
  readonly dir: string;
  readonly options: Record<string, unknown>;
  /** False with --no-answer-cache: verify again (and keep the new answer). */
  readonly reuse: boolean;
  /** The command line as given, and what the executable's fast path needs of it (cli/delta.ts). */
  readonly argv: readonly string[];
  readonly junit?: string;
  readonly maxBytes: number;
}

/**
 * After a run with the answer cache: what this command line parsed to (so the next identical
 * one is answered before yargs loads), and for a VERIFIED answer reached at tensor level per
 * template, the attribute equalities it relied on (incremental re-verification, cli/delta.ts).
 */
function keepForFastPath(memo: AnswerMemo, json: boolean, text: string, key: AnswerKey, answer: Answer | undefined, r: VerifyReport | undefined, plan: LoadedPlan | undefined): void {
  if (!memo.reuse) return;
  const kinds = registry.valueKinds();
  storeArgvMemo(memo.dir, memo.argv, { options: memo.options, json, ...(memo.junit === undefined ? {} : { junit: memo.junit }), maxBytes: memo.maxBytes, kinds });
  const rel = r === undefined ? undefined : attrRelianceOf(r);
  if (rel === undefined || plan === undefined || answer?.verdict !== 'verified') return;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return;
  }
  // The proofs name ops by the loader's indices; the skeleton by the file's: they must agree.
  if (!sameOpOrder(raw as RawPlan, plan)) return;
  const skel = skeletonOf(raw, kinds);
  if (typeof skel === 'string' || skel.ops.size !== rel.refs.length || rel.refs.some((x) => !skel.ops.has(x))) return;
  storeDelta(memo.dir, { build: key.build, options: key.options, skeleton: skel.digest }, { refs: rel.refs, values: rel.refs.map((x) => skel.ops.get(x)?.values ?? ''), classes: rel.classes, answer });
}

/** Whether the loaded plan's ops are the file's, in the file's order (logical and per program). */
function sameOpOrder(raw: RawPlan, plan: LoadedPlan): boolean {
  const ids = (xs: readonly { id: string }[]): string => xs.map((o) => o.id).join('\n');
  const lg = plan.logical.ops;
  if (ids(raw.logical.ops) !== Array.from({ length: lg.size }, (_, i) => lg.ids.name(i)).join('\n')) return false;
  if (raw.parallel.programs.length !== plan.programs.length) return false;
  return plan.programs.every((p, pi) => ids((raw.parallel.programs[pi] as RawPlan['parallel']['programs'][number]).ops) === Array.from({ length: p.ops.size }, (_, i) => p.ops.ids.name(i)).join('\n'));
}

/**
 * `verify` with the answer cache: a kept answer for these plan bytes, options and build is
 * printed as is; otherwise the plan is verified and a VERIFIED or NOT EQUIVALENT answer kept.
 */
async function verify(file: string, json: boolean, eng: EngineOptions, verbose: boolean, out: Out, infer?: boolean, red: ReduceOptions = { reduce: true }, perStage = false, files: ReportFiles = {}, sh: ShardRun = {}, memo?: AnswerMemo): Promise<number> {
  if (memo === undefined) return verifyFresh(file, json, eng, verbose, out, infer, red, perStage, files, sh);
  const t0 = performance.now();
  let text: string | undefined;
  try {
    text = readPlanText(file, defaultLimits().bytes);
  } catch {
    text = undefined; // unreadable or too large: the run below says so
  }
  const key = text === undefined ? undefined : answerKey(text, memo.options);
  const kept = key === undefined || !memo.reuse ? undefined : lookupAnswer(memo.dir, key);
  if (kept !== undefined) {
    // With --json, the kept stdout is one JSON report, which says where it came from.
    const code = replayAnswer(kept, json, files.junit, out);
    if (code !== undefined) {
      if (text !== undefined && key !== undefined) keepForFastPath(memo, json, text, key, kept, undefined, undefined);
      return code;
    }
  }
  // A plan edited only in value-only attributes (cli/delta.ts; the executable's fast path tries
  // this first, except for plans too large to parse before the heap child starts).
  if (memo.reuse && text !== undefined && key !== undefined) {
    const code = deltaAnswer(memo.dir, text, key, { json, ...(files.junit === undefined ? {} : { junit: files.junit }), kinds: registry.valueKinds() }, out, t0);
    if (code !== undefined) {
      keepForFastPath(memo, json, text, key, undefined, undefined, undefined);
      return code;
    }
  }
  const stdout: string[] = [];
  const stderr: string[] = [];
  const rec: Out = { log: (s) => (stdout.push(s), out.log(s)), err: (s) => (stderr.push(s), out.err(s)) };
  let report: VerifyReport | undefined;
  let loaded: LoadedPlan | undefined;
  // The text hashed is the text verified.
  const code = await verifyFresh(file, json, eng, verbose, rec, infer, red, perStage, { ...files, onReport: (r, p) => void ((report = r), (loaded = p)) }, sh, text);
  const r = report as VerifyReport | undefined;
  if (key !== undefined && text !== undefined && r !== undefined && r.verdict !== 'unknown' && code === verdictCode[r.verdict] && (!json || jsonReport(stdout) !== undefined)) {
    const answer: Answer = { verdict: r.verdict, code: r.verdict === 'verified' ? 0 : 1, stdout, stderr, junit: junitXml(r), at: new Date().toISOString(), seconds: (performance.now() - t0) / 1000 };
    if (storeAnswer(memo.dir, key, answer)) keepForFastPath(memo, json, text, key, answer, r, loaded);
  }
  return code;
}

async function verifyFresh(file: string, json: boolean, eng: EngineOptions, verbose: boolean, out: Out, infer?: boolean, red: ReduceOptions = { reduce: true }, perStage = false, files: ReportFiles = {}, sh: ShardRun = {}, read?: string): Promise<number> {
  // The time limit counts from here: loading is part of the run.
  const limit = timeLimitFrom(eng);
  const tLoad = performance.now();
  let l: Loaded | number | undefined;
  let loadMs = 0;
  setRunClock(limit); // past it the loader's and the engine's loops throw (plans/clock.ts): "unknown", never partial
  try {
    checkRunClock();
    l = loadWithText(file, json, out, (f, e) => {
      // The report files still say why nothing was proved.
      try {
        if (files.junit !== undefined) writeFileSync(files.junit, junitInvalid(f, e.issues));
        if (files.html !== undefined) writeFileSync(files.html, htmlInvalid(f, e.issues));
      } catch (w) {
        out.err(`planproof: cannot write the report: ${w instanceof Error ? w.message : String(w)}`);
      }
    }, read);
    if (typeof l === 'number') return l;
    loadMs = Math.round(performance.now() - tLoad);
    return await proveLoadedPlan(file, l, loadMs, limit, json, eng, verbose, out, infer, red, perStage, files, sh);
  } catch (e) {
    if (!(e instanceof TimeLimitReached)) throw e;
    const loaded = typeof l === 'object' ? l : undefined;
    if (loaded === undefined) loadMs = Math.round(performance.now() - tLoad);
    const r = timeUpReport(file, loaded?.plan.name ?? '(not loaded: the limit came first)', e.seconds, performance.now() - ((limit?.endAt ?? 0) - e.seconds * 1000), eng.seed, loadMs);
    out.log(json ? reportJson(r) : formatReport(r, verbose));
    if (loaded !== undefined) return finish(r, loaded, files, out);
    if (files.junit !== undefined) writeFileSync(files.junit, junitXml(r)); // no plan to draw for --html
    return verdictCode.unknown;
  } finally {
    setRunClock(undefined);
  }
}

/** verifyFresh once the plan is loaded: the paths a plan can take, in order. */
async function proveLoadedPlan(file: string, l: Loaded, loadMs: number, limit: TimeLimit | undefined, json: boolean, eng: EngineOptions, verbose: boolean, out: Out, infer: boolean | undefined, red: ReduceOptions, perStage: boolean, files: ReportFiles, sh: ShardRun): Promise<number> {
  if (sh.shard !== undefined || sh.merge !== undefined) {
    const why = notShardable(l.plan, { engine: eng.engine, tensorLevel: eng.tensorLevel !== false, perStage, ...(infer === undefined ? {} : { infer }) });
    if (why !== undefined) {
      out.err(`planproof: --shard: ${why}; verify it without --shard`);
      return ExitCode.usage;
    }
    if (sh.merge !== undefined && planDigest(l.text) !== sh.merge.sha256) {
      out.err(`planproof: merge: ${file} is not the plan the parts proved (its content changed since)`);
      return ExitCode.usage;
    }
  }
  // Which way the plan is proved is the pipeline's decision (stages/pipeline.ts ROUTES).
  // One bar (cli/progress.ts) on every path: stages decided out of all, on a terminal only.
  const bar = stageBar(eng.progress === true);
  const onStage = bar === undefined ? {} : { onStage: (done: number, total: number): void => bar.update(done, total) };
  try {
    return await proveOnPaths(file, l, loadMs, limit, json, eng, verbose, out, infer, red, perStage, files, sh, onStage);
  } finally {
    bar?.stop();
  }
}

type OnStage = { onStage?: (done: number, total: number) => void };

/**
 * proveLoadedPlan's run of the pipeline (stages/pipeline.ts), with the progress callback of its
 * bar: the record that decided the plan says what to print.
 */
async function proveOnPaths(file: string, l: Loaded, loadMs: number, limit: TimeLimit | undefined, json: boolean, eng: EngineOptions, verbose: boolean, out: Out, infer: boolean | undefined, red: ReduceOptions, perStage: boolean, files: ReportFiles, sh: ShardRun, onStage: OnStage): Promise<number> {
  const recorded: StageResult[] = [];
  const opts: PipelineOptions = {
    ...pipelineOptions(eng, limit),
    ...(infer === undefined ? {} : { infer }),
    perStage,
    reduce: red.reduce,
    ...(red.emitDir === undefined ? {} : { emitDir: red.emitDir }),
    ...(red.cacheDir === undefined ? {} : { cacheDir: red.cacheDir }),
    maxRanks: eng.maxRanks ?? DEFAULT_MAX_RANKS,
    ...(sh.shard === undefined ? {} : { shard: { ...sh.shard, record: (x: StageResult) => void recorded.push(x) } }),
    ...(sh.merge === undefined ? {} : { proved: sh.merge.proved }),
    ...onStage,
  };
  let p: PipelineResult;
  try {
    p = await verifyPipeline(file, l.plan, l.textOf, opts);
  } catch (e) {
    if (!(e instanceof MergeError)) throw e;
    out.err(`planproof: merge: ${e.message}`);
    return ExitCode.usage;
  }
  switch (p.route) {
    case 'per-template':
      out.log(json ? reportJson(p.report, { reduction: p.reduction, route: p.route }) : `${formatReport(p.report, verbose)}\nshape reduction: ${p.reduction.reason ?? ''}`);
      return finish(p.report, l, files, out);
    case 'per-template-first':
      out.log(json ? reportJson(p.report, { reduction: p.reduction, route: p.route }) : `${formatReport(p.report, verbose)}\nshape reduction ${p.reduction.reason ?? ''}`);
      return finish(p.report, l, files, out);
    case 'max-ranks':
      return invalidPlan(file, [p.refused], json, out);
    case 'inferred-boundaries':
      printInferred(p.report, json, verbose, out, p.route);
      return finish(p.report, l, files, out);
    case 'per-stage':
      out.log(json ? reportJson(p.report, { route: p.route }) : `${formatReport(p.report, verbose)}\n${formatPerStage(p.report.stageReduction, verbose)}`);
      return finish(p.report, l, files, out);
    case 'rank-by-rank': {
      if (sh.shard !== undefined) {
        // A part, not a report: the merge gives the verdict.
        out.log(JSON.stringify(partOf(sh.shard, file, l.text, { seed: eng.seed, engine: eng.engine, deadline: eng.deadline, ...(eng.timeLimit === undefined ? {} : { timeLimit: eng.timeLimit }), tensorLevel: eng.tensorLevel !== false, reduce: red.reduce }, recorded)));
        return 0;
      }
      // Phases: loading here, the shape reduction from the pipeline, the rest from the proof (VerifyReport.phases).
      const report = { ...p.report, phases: { load: loadMs, reduction: p.reduceMs, ...p.report.phases } };
      out.log(json ? reportJson(report, { perStageFallback: [...p.fallback], route: p.route }) : `${formatReport(report, verbose)}\n${formatReductionReport(report.reduction, verbose)}${formatFallback(p.fallback)}`);
      return finish(report, l, files, out);
    }
  }
}

async function demo(json: boolean, eng: EngineOptions, out: Out): Promise<number> {
  const l = loadWithText(DEMO_PLAN, json, out);
  if (typeof l === 'number') return l;
  const report = await proveRankByRank(l.plan, l.text, pipelineOptions(eng));
  if (json) out.log(reportJson(report, { demo: true }));
  else {
    out.log('planproof demo: the embedded example, a two-layer MLP training iteration (forward, MSE loss,');
    out.log('backward, SGD step) under Megatron tensor parallelism on 2 ranks, checked and proved.\n');
    out.log(formatReport(report, true));
    out.log('\nTry a buggy plan: planproof verify examples/buggy/mlp-dp2-loss-scale-twice.json');
  }
  return verdictCode[report.verdict];
}

/** The commands, in --help's order (their options: cli/options.ts). */
const COMMANDS = Object.keys(COMMAND_OPTIONS);

/** Runs the CLI on `argv` (without node and script); returns the exit code. */
export async function main(argv: string[], out: Out = stdio): Promise<number> {
  // As the executable received it: the fast path (cli/delta.ts) keys what it parsed to by it.
  const rawArgv = [...argv];
  // Handlers only record what to run: nothing runs (and nothing reaches stdout) until the
  // whole command line has been parsed and validated, so a refused command never prints a
  // report a CI step could read as a verdict.
  let run: (() => Promise<number> | number) | undefined;
  // Every failure yargs reports, in order (a mistyped command's "Did you mean" comes first).
  const failures: string[] = [];
  // `capture ... -- script.py args`: what follows '--' is the user's command line, untouched.
  const dd = argv[0] === 'capture' ? argv.indexOf('--') : -1;
  const script = dd >= 0 ? argv.slice(dd + 1) : [];
  if (dd >= 0) argv = argv.slice(0, dd);
  const given = argv;
  // Checked before any work, for every command with the options checked (cli/limits.ts, cli/usage.ts).
  const check = (specs: Readonly<Record<string, object>>) => (a: Record<string, unknown>): string | true =>
    numberOptionError(given, specs, a, (got) => engineOptionError(a, got) ?? limitOptionError(a, got)) ?? shardOptionError(a) ?? true;
  const plan = { type: 'string', demandOption: true, describe: 'plan file (JSON, format planproof/v1; - reads standard input)' } as const;
  // yargs reads a lone '-' as an empty option name; it means standard input here.
  const parser = yargs(argv.map((x) => (x === '-' ? STDIN_NAME : x)))
    .scriptName('planproof')
    .usage('$0 <command> [options]\n\nProves that a distributed training plan computes what the single-device model computes.')
    .options(JSON_OPTION)
    .command(
      'verify <plan>',
      'load and check a plan, then prove it computes what the logical iteration computes (exit 0 verified, 1 not equivalent, 2 invalid, 3 unknown)',
      (y) => y.positional('plan', plan).options(COMMAND_OPTIONS.verify).check(check(COMMAND_OPTIONS.verify)),
      (a) => {
        const file = a.plan;
        const cache = a.shard === undefined ? cacheOption(a.cache) : {};
        // The answer cache (cli/answers.ts) for runs whose whole output is stdout and the JUnit
        // file: not with --html (drawn from the loaded plan), --emit-reduced (files) or a shard.
        const memo: AnswerMemo | undefined =
          cache.cacheDir !== undefined && a.emitReduced === undefined && a.html === undefined && file !== STDIN_NAME
            ? { dir: cache.cacheDir, options: answerOptions(a), reuse: a.answerCache !== false, argv: rawArgv, ...(a.junit === undefined ? {} : { junit: a.junit }), maxBytes: Math.floor(a.maxFileMb * 1024 * 1024) }
            : undefined;
        run = () => verify(file, a.json, { engine: a.engine, seed: a.seed, jobs: a.jobs, deadline: a.deadline, timeLimit: a.timeLimit, inferTimeLimit: a.inferTimeLimit, tensorLevel: a.tensorLevel, progress: !a.json, maxRanks: a.maxRanks }, a.verbose, out, a.infer, { reduce: a.reduce, tensorLevel: a.tensorLevel !== false, ...(a.emitReduced === undefined ? {} : { emitDir: a.emitReduced }), ...cache }, a.perStage, { ...(a.junit === undefined ? {} : { junit: a.junit }), ...(a.html === undefined ? {} : { html: a.html }) }, shardRun(a.shard), memo);
      },
    )
    .command(
      'infer-lineage <plan>',
      'write the plan with inferred lineage claims added for parallel tensors without one, each marked "inferred": true',
      (y) => y.positional('plan', plan).options(COMMAND_OPTIONS['infer-lineage']).check(check(COMMAND_OPTIONS['infer-lineage'])),
      (a) => {
        const file = a.plan;
        run = () => {
          const l = loadWithText(file, a.json, out);
          return typeof l === 'number' ? l : inferLineage(file === '-' || file === STDIN_NAME ? STDIN_NAME : file, l.text, a.out, a.seed, a.json, out);
        };
      },
    )
    .command(
      'merge <parts..>',
      'merge the part files of a sharded run (verify --shard i/n): the verdict, report and exit code a single run gives',
      (y) => y.positional('parts', { type: 'string', array: true, demandOption: true, describe: 'the part files, one per shard' }).options(COMMAND_OPTIONS.merge).check(check(COMMAND_OPTIONS.merge)),
      (a) => {
        const parts = a.parts.map(String);
        run = async () => {
          const m = readParts(parts);
          if (typeof m === 'string') {
            if (a.json) out.log(usageJson(m));
            else out.err(`planproof: merge: ${m}`);
            return ExitCode.usage;
          }
          const o = m.options;
          const files = { ...(a.junit === undefined ? {} : { junit: a.junit }), ...(a.html === undefined ? {} : { html: a.html }) };
          return verify(m.file, a.json, { engine: o.engine, seed: o.seed, jobs: a.jobs, deadline: o.deadline, ...(o.timeLimit === undefined ? {} : { timeLimit: o.timeLimit }), tensorLevel: o.tensorLevel, progress: false }, a.verbose, out, undefined, { reduce: o.reduce, tensorLevel: o.tensorLevel }, false, files, { merge: { proved: m.proved, sha256: m.sha256 } });
        };
      },
    )
    .command(
      'explain <plan> <stage>',
      "show one stage: its logical and parallel ops side by side, assumed input relations, output relations, and the first differing elements with their terms (exit 2 for a stage that is not there)",
      (y) =>
        y
          .positional('plan', plan)
          .positional('stage', { type: 'string', demandOption: true, describe: "the stage: its number in the verify report (1-based) or its logical tensor's name" })
          .options(COMMAND_OPTIONS.explain)
          .check(check(COMMAND_OPTIONS.explain)),
      (a) => {
        const file = a.plan;
        const stage = a.stage;
        run = () => {
          const l = load(file, a.json, out);
          return typeof l === 'number' ? l : explain(l, String(stage), { json: a.json, seed: a.seed, ...(a.dot === undefined ? {} : { dot: a.dot }) }, out);
        };
      },
    )
    .command(
      'inspect <plan>',
      'load and check a plan, then summarize it: mesh, ranks, ops, collectives, lineage coverage',
      (y) => y.positional('plan', plan).options(COMMAND_OPTIONS.inspect).check(check(COMMAND_OPTIONS.inspect)),
      (a) => {
        const file = a.plan;
        run = () => inspect(file, a.json, out);
      },
    )
    .command(
      'import-graphs',
      'write a plan from exported ATen graphs (torch 2.x GraphModule prints): the single-device graph, one per rank, and a relations file for inputs and outputs (docs/import.md)',
      (y) => y.options(COMMAND_OPTIONS['import-graphs']).check(check(COMMAND_OPTIONS['import-graphs'])),
      (a) => {
        run = () => importCommand({ ...(a.dir === undefined ? {} : { dir: a.dir }), ...(a.logical === undefined ? {} : { logical: a.logical }), ...(a.rank === undefined ? {} : { rank: a.rank.map(String) }), ...(a.relations === undefined ? {} : { relations: a.relations }), ...(a.out === undefined ? {} : { out: a.out }), ...(a.name === undefined ? {} : { name: a.name }), ...(a['op-map'] === undefined ? {} : { opMap: a['op-map'].map(String) }), json: a.json }, out);
      },
    )
    .command(
      'capture',
      "run a torch.distributed training step on 1 and N CPU processes (gloo), trace it at the ATen level and write a plan: planproof capture --nproc 2 --out plan.json -- script.py [args] (docs/capture.md)",
      (y) => y.options(COMMAND_OPTIONS.capture).check(check(COMMAND_OPTIONS.capture)),
      (a) => {
        run = () => captureCommand({ nproc: a.nproc, mesh: a.mesh, reference: a.reference, axis: a.axis, python: a.python, script, json: a.json, ...(a.out === undefined ? {} : { out: a.out }), ...(a.keep === undefined ? {} : { keep: a.keep }) }, out);
      },
    )
    .command(
      'demo',
      'verify the embedded example plan (a two-layer MLP training iteration under tensor parallelism)',
      (y) => y.options(COMMAND_OPTIONS.demo).check(check(COMMAND_OPTIONS.demo)),
      (a) => {
        run = () => demo(a.json, { engine: a.engine, seed: a.seed, jobs: a.jobs, deadline: a.deadline, timeLimit: a.timeLimit, progress: !a.json }, out);
      },
    )
    .command(
      'gen',
      'write a generated training-iteration plan (logical graph, SPMD program, lineage), optionally with a catalogued bug injected (docs/generators.md)',
      // Sizes that do not fit together are refused here, before anything is generated.
      (y) => y.options(COMMAND_OPTIONS.gen).epilogue("Sizes not given are the preset's. Sizes that do not fit together are refused before anything is generated, in one message naming the flags.").check((a) => {
        const c = check(COMMAND_OPTIONS.gen)(a);
        const g = c === true && a['listBugs'] !== true ? genConfig(a as GenArgs) : undefined;
        return typeof g === 'string' ? `gen: ${g}` : c;
      }),
      (a) => {
        run = () => gen(a, out);
      },
    )
    .demandCommand(1, `name a command: ${COMMANDS.join(', ')}`)
    .recommendCommands()
    .strict()
    .help()
    .version()
    .exitProcess(false)
    .fail((msg: string | null, err: Error | string | undefined) => {
      // yargs' own validation (strict mode, choices) fails with a YError, a .check with its
      // message string: usage errors. Anything else is a bug and goes on as an internal error.
      if (err !== undefined && typeof err !== 'string' && !(err instanceof Error && (err.name === 'YError' || /Unknown argument|Not enough|Missing required/.test(err.message)))) throw err;
      failures.push(msg ?? (typeof err === 'string' ? err : err?.message) ?? 'usage error');
    })
    .epilogue('Exit codes: 0 verified, 1 not equivalent, 2 invalid plan, 3 unknown, 4 usage or internal error.');
  const parsed = await parser.parseAsync();
  const jsonOut = parsed['json'] === true || argv.includes('--json');
  if (failures.length > 0) {
    const usageError = usageMessage(failures, argv, COMMAND_OPTION_NAMES);
    const cmd = argv.find((x) => COMMANDS.includes(x));
    if (jsonOut) out.log(usageJson(usageError));
    else out.err(`planproof: ${usageError}\nRun 'planproof ${cmd === undefined ? '' : `${cmd} `}--help' for usage.`);
    return ExitCode.usage;
  }
  if (run === undefined) return argv.includes('--help') || argv.includes('--version') || argv.includes('-h') ? 0 : ExitCode.usage;
  // Every load of this run (the plan, reduced and derived plans) and the proof workers use
  // them; restored after, since main also runs in process (tests, library callers).
  const before = defaultLimits();
  setDefaultLimits(limitsFrom(parsed as LimitFlags));
  try {
    return await run();
  } finally {
    setDefaultLimits(before);
  }
}

/**
 * The options an answer is kept under: every option of the command line (so one added later is
 * in the key by itself), except where the cache and the JUnit file go, which change no answer.
 */
function answerOptions(a: Record<string, unknown>): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(a)) if (!['_', '$0', 'cache', 'junit', 'answer-cache', 'answerCache'].includes(k)) o[k] = v;
  return o;
}

/** --shard i/n, checked before any work; a part is not a report, so no report files with it. */
function shardOptionError(a: { readonly [k: string]: unknown }): string | undefined {
  if (a['shard'] === undefined) return undefined;
  const s = parseShard(a['shard']);
  if (typeof s === 'string') return s;
  if (a['junit'] !== undefined || a['html'] !== undefined) return '--junit and --html go with planproof merge when a run is sharded: a shard writes a part, not a report';
  if (a['perStage'] === true || a['infer'] === true) return '--shard does not apply with --per-stage or --infer';
  return undefined;
}

/** The shard of a verify command line (validated by shardOptionError). */
function shardRun(v: string | undefined): ShardRun {
  const s = v === undefined ? undefined : parseShard(v);
  return s === undefined || typeof s === 'string' ? {} : { shard: s };
}
