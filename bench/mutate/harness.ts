/**
 * The mutation harness (issue 13): plans from the generators (every family and strategy) and
 * the examples, mutated once each or rewritten without changing what they compute, verified
 * by the CLI in process, and every verdict classified against the ground truth (truth.ts).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { VerifyRequest, VerifyResponse } from './verify-worker.js';
import { PlanError } from '../../plans/errors.js';
import { generatePlan, type OptimizerConfig } from '../../plans/gen/plan.js';
import { PRESETS } from '../../plans/gen/presets.js';
import type { ModelConfig } from '../../plans/gen/models.js';
import type { Parallelism } from '../../plans/gen/net.js';
import { loadPlanObject, type LoadedPlan } from '../../lineage/load.js';
import { groundTruth, TRUTH_SEEDS, type Truth } from './truth.js';
import { MUTATION_KINDS, REWRITE_KINDS, Rng, mutate, rewrite, type Json, type MutationKind, type RewriteKind } from './mutations.js';

export type Outcome = 'false-pass' | 'false-alarm' | 'unknown' | 'rejected' | 'right' | 'undetermined' | 'error' | 'timeout';
export const OUTCOMES: readonly Outcome[] = ['right', 'rejected', 'unknown', 'undetermined', 'false-pass', 'false-alarm', 'error', 'timeout'];

export interface Source {
  readonly name: string;
  readonly family: string;
  readonly plan: Json;
  readonly loaded: LoadedPlan;
  /** Relative draw weight (slow sources are drawn less). */
  readonly weight: number;
}

/** Optimizer constants under which optimizer mutations show numerically (as in test/gen.test.ts). */
export const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };

/** 'tiny': the examples and four MLP strategies without clipping (npm test); 'small': every MLP strategy; 'full': every family. */
export type SourceSet = 'full' | 'small' | 'tiny';

const NO_CLIP: OptimizerConfig = { lr: OPT.lr, beta1: OPT.beta1, beta2: OPT.beta2, eps: OPT.eps, weightDecay: OPT.weightDecay };

const preset = (n: string): ModelConfig => (PRESETS[n] as { model: ModelConfig }).model;

interface Config {
  readonly model: ModelConfig;
  readonly par: Parallelism;
}

export function configName(c: Config): string {
  const { model: m, par: p } = c;
  return `${m.family}${m.layers > 1 ? `-${m.layers}l` : ''} dp${p.dp} tp${p.tp} mb${p.micro}${p.sp === true ? ' sp' : ''}${(p.zero ?? 0) > 0 ? ` z${p.zero ?? 0}` : ''}${(p.pp ?? 1) > 1 ? ` pp${p.pp ?? 1}` : ''}${(p.virtual ?? 1) > 1 ? ` v${p.virtual ?? 1}` : ''}${(p.cp ?? 1) > 1 ? ` cp${p.cp ?? 1}${p.cpComm === 'allgather' ? '-ag' : ''}` : ''}${p.ep === true ? ' ep' : ''}${p.recompute === true ? ' rc' : ''}`;
}

/**
 * The strategy matrix of the sources: each family under each strategy the generators
 * support, at tiny sizes (the harness verifies thousands of them).
 */
export function strategyMatrix(set: SourceSet): Config[] {
  const MLP = preset('mlp-tiny');
  const GPT2 = preset('gpt2-tiny');
  const LLAMA = preset('llama-tiny');
  const MOE = preset('moe-tiny');
  const P = (dp: number, tp: number, micro: number, extra: Partial<Parallelism> = {}): Parallelism => ({ dp, tp, micro, ...extra });
  const mlp: Config[] = [
    { model: MLP, par: P(1, 1, 1) },
    { model: MLP, par: P(2, 1, 1) },
    { model: MLP, par: P(1, 2, 1) },
    { model: MLP, par: P(1, 1, 2) },
    { model: MLP, par: P(2, 2, 2) },
    { model: MLP, par: P(2, 1, 2, { zero: 1 }) },
    { model: MLP, par: P(2, 1, 2, { zero: 2 }) },
    { model: MLP, par: P(2, 1, 1, { zero: 3 }) },
    { model: { ...MLP, layers: 2 }, par: P(1, 1, 2, { pp: 2 }) },
    { model: { ...MLP, layers: 2 }, par: P(2, 1, 2, { pp: 2, schedule: 'gpipe' }) },
    { model: { ...MLP, layers: 4 }, par: P(1, 1, 2, { pp: 2, virtual: 2 }) },
    { model: MLP, par: P(1, 2, 1, { recompute: true }) },
  ];
  if (set === 'tiny') return [mlp[0], mlp[1], mlp[2], mlp[8]] as Config[];
  if (set === 'small') return mlp;
  const LLAMA_CP = { ...LLAMA, seq: 4, batch: 1 };
  return [
    ...mlp,
    { model: GPT2, par: P(1, 1, 1) },
    { model: GPT2, par: P(2, 1, 1) },
    { model: GPT2, par: P(1, 2, 1) },
    { model: GPT2, par: P(2, 2, 2) },
    { model: GPT2, par: P(1, 2, 1, { sp: true }) },
    { model: GPT2, par: P(2, 1, 1, { zero: 1 }) },
    { model: { ...GPT2, layers: 2 }, par: P(1, 1, 2, { pp: 2 }) },
    { model: { ...GPT2, seq: 4, batch: 2 }, par: P(1, 1, 1, { cp: 2 }) },
    { model: LLAMA, par: P(1, 1, 1) },
    { model: LLAMA, par: P(1, 2, 1) },
    { model: LLAMA, par: P(1, 2, 1, { sp: true }) },
    { model: LLAMA, par: P(2, 1, 1, { zero: 3 }) },
    { model: LLAMA, par: P(1, 2, 1, { recompute: true }) },
    { model: LLAMA_CP, par: P(1, 1, 1, { cp: 2 }) },
    { model: LLAMA_CP, par: P(1, 1, 1, { cp: 2, cpComm: 'allgather' }) },
    { model: MOE, par: P(1, 1, 1) },
    { model: MOE, par: P(2, 1, 1, { ep: true }) },
  ];
}

const EXAMPLES = fileURLToPath(new URL('../../../examples', import.meta.url));
const EXAMPLE_FILES = ['mlp-dp2.json', 'mlp-tp2.json', 'mlp-dp2tp2.json', 'mlp-dp2-explicit.json', 'mlp-tp2-explicit.json', 'mlp-dp2-global-mean.json'];

/** Sources: the examples and the strategy matrix (weights: MoE, whose proofs take seconds, drawn less). */
export function buildSources(set: SourceSet): Source[] {
  const out: Source[] = [];
  for (const f of EXAMPLE_FILES) {
    const plan = JSON.parse(readFileSync(join(EXAMPLES, f), 'utf8')) as Json;
    out.push({ name: `example ${f.replace('.json', '')}`, family: 'example', plan, loaded: loadPlanObject(f, plan), weight: 1 });
  }
  for (const c of strategyMatrix(set)) {
    // Without clipping in the test slice: its square roots make the slowest stages.
    const plan = generatePlan({ model: c.model, par: c.par, optimizer: set === 'tiny' ? NO_CLIP : OPT });
    out.push({ name: configName(c), family: c.model.family, plan, loaded: loadPlanObject('gen.json', plan), weight: c.model.family === 'moe' ? 0.1 : 1 });
  }
  return out;
}

export interface Verdict {
  readonly code: number;
  readonly verdict: string;
  readonly ms: number;
  readonly reasons: string[];
  readonly stdout: string;
  readonly stderr: string;
  readonly threw?: string;
  /** The seed of the inputs the report's witness was drawn at (`numeric.seed`), when it names one. */
  readonly witnessSeed?: number;
}

/**
 * Bounds on one verification: thousands of mutants on a shared 2-core machine. A stage left
 * open by the normal form gets Z3 for at most 2 s, a run at most 5 s; what is not decided is
 * "unknown", which the tables count (a bound never turns into a verdict).
 */
export const VERIFY_FLAGS: readonly string[] = ['--deadline', '2', '--time-limit', '5'];

const WORKER = new URL('./verify-worker.js', import.meta.url);
let worker: Worker | undefined;

/** Wall-clock bound on one verification (a case past it is a 'timeout', a defect to look at). */
export const CASE_TIMEOUT_MS = 60_000;

function inWorker(args: readonly string[], timeoutMs: number): Promise<VerifyResponse | 'timeout'> {
  const w = (worker ??= new Worker(WORKER));
  return new Promise((resolve) => {
    const done = (r: VerifyResponse | 'timeout'): void => {
      clearTimeout(timer);
      w.off('message', onMessage);
      w.off('error', onError);
      resolve(r);
    };
    const onMessage = (m: VerifyResponse): void => done(m);
    // The worker died (a Z3 abort, say): what the CLI would have done is crash with exit 4 or worse.
    const onError = (e: Error): void => {
      worker = undefined;
      done({ code: 4, stdout: '', stderr: '', threw: `the verifying thread died: ${e.message}` });
    };
    const timer = setTimeout(() => {
      worker = undefined;
      void w.terminate();
      done('timeout');
    }, timeoutMs);
    w.on('message', onMessage);
    w.on('error', onError);
    w.postMessage({ args } satisfies VerifyRequest);
  });
}

/** Ends the verifying thread (at the end of a run). */
export async function stopVerifier(): Promise<void> {
  const w = worker;
  worker = undefined;
  await w?.terminate();
}

/**
 * `planproof verify --json`: the CLI's own main (argument handling, loading, exit code) in a
 * worker thread of this process, stopped after `timeoutMs`.
 */
export async function verifyCli(plan: Json, dir: string, flags: readonly string[] = VERIFY_FLAGS, timeoutMs = CASE_TIMEOUT_MS): Promise<Verdict> {
  const file = join(dir, 'candidate.json');
  writeFileSync(file, JSON.stringify(plan));
  const t0 = performance.now();
  const r = await inWorker(['verify', file, '--json', '--no-cache', ...(flags.includes('--jobs') ? [] : ['--jobs', '0']), ...flags], timeoutMs);
  const ms = performance.now() - t0;
  if (r === 'timeout') return { code: -1, verdict: 'timeout', ms, reasons: [], stdout: '', stderr: '' };
  let verdict: string;
  let witnessSeed: number | undefined;
  const reasons: string[] = [];
  try {
    const j = JSON.parse(r.stdout) as { verdict?: string; stages?: { status?: string; reason?: string }[]; numeric?: { seed?: unknown } };
    verdict = j.verdict ?? 'none';
    for (const s of j.stages ?? []) if (s.status === 'unknown' && s.reason !== undefined) reasons.push(s.reason);
    if (typeof j.numeric?.seed === 'number' && Number.isSafeInteger(j.numeric.seed)) witnessSeed = j.numeric.seed;
  } catch {
    verdict = 'unparsable';
  }
  return { code: r.code, verdict, ms, reasons, stdout: r.stdout, stderr: r.stderr, ...(r.threw === undefined ? {} : { threw: r.threw }), ...(witnessSeed === undefined ? {} : { witnessSeed }) };
}

/**
 * The ground truth of a plan: both graphs in Float64 on the truth seeds, and on `extraSeed`
 * too when given (the inputs a "not equivalent" report names: the harness evaluates them
 * itself, so a refutation the three truth seeds miss, an id that reaches an out-of-range
 * lookup on one draw of a four-token vocabulary, is not counted as a false alarm).
 */
export function truthOf(plan: Json, extraSeed?: number): Truth | 'unloadable' {
  try {
    return groundTruth(loadPlanObject('truth.json', plan), extraSeed === undefined ? TRUTH_SEEDS : [...TRUTH_SEEDS, extraSeed]);
  } catch (e) {
    if (e instanceof PlanError) return 'unloadable';
    return { kind: 'undetermined', why: `load failed: ${e instanceof Error ? e.message : String(e)}`, maxDev: 0 };
  }
}

/** A verdict against the ground truth. */
export function classify(code: number, truth: Truth | 'unloadable'): Outcome {
  if (code === -1) return 'timeout';
  if (code === 2) return 'rejected';
  if (code === 3) return 'unknown';
  if (code !== 0 && code !== 1) return 'error';
  if (truth === 'unloadable' || truth.kind === 'undetermined') return 'undetermined';
  if (code === 0) return truth.kind === 'wrong' ? 'false-pass' : 'right';
  return truth.kind === 'correct' ? 'false-alarm' : 'right';
}

export interface CaseResult {
  readonly kind: string;
  readonly source: string;
  readonly family: string;
  readonly what: string;
  readonly outcome: Outcome;
  readonly verdict: string;
  readonly truth: string;
  readonly ms: number;
  readonly reasons: string[];
  readonly maxDev: number;
}

/** Shortens an unknown-stage reason to a stable class (numbers and names dropped). */
export function reasonClass(r: string): string {
  return r
    .replace(/'[^']*'/g, "'…'")
    .replace(/\d+(\.\d+)?/g, 'N')
    .slice(0, 90);
}

/** Weighted draw of a source. */
function drawSource(sources: readonly Source[], rng: Rng): Source {
  const total = sources.reduce((a, s) => a + s.weight, 0);
  let x = rng.next() * total;
  for (const s of sources) if ((x -= s.weight) < 0) return s;
  return sources[sources.length - 1] as Source;
}

export interface RunOptions {
  readonly seed: number;
  readonly mutants: number;
  readonly correct: number;
  readonly sources: readonly Source[];
  /** Scratch directory for the candidate file. */
  readonly dir: string;
  /** Where false passes, false alarms and errors are saved (none when undefined). */
  readonly saveDir?: string;
  readonly onCase?: (r: CaseResult, i: number) => void;
  /** Random correct plans (fresh generator configurations) among the correct cases. */
  readonly randomPlans?: boolean;
  /** Stop drawing after this many milliseconds (a budget on a shared machine). */
  readonly budgetMs?: number;
  /** Verify flags in place of VERIFY_FLAGS (the test slice bounds the run tighter). */
  readonly flags?: readonly string[];
  /** In place of CASE_TIMEOUT_MS. */
  readonly timeoutMs?: number;
  /** Mutation kinds drawn (all when undefined). */
  readonly kinds?: readonly MutationKind[];
}

async function runOne(kind: string, source: Source, family: string, plan: Json, what: string, opts: RunOptions, saved: { n: number }): Promise<CaseResult> {
  const v = await verifyCli(plan, opts.dir, opts.flags, opts.timeoutMs);
  // Truth only where a verdict needs it (a rejected plan has none to judge).
  const truth: Truth | 'unloadable' = v.code === 0 || v.code === 1 ? truthOf(plan, v.code === 1 ? v.witnessSeed : undefined) : 'unloadable';
  const outcome = classify(v.code, truth);
  const r: CaseResult = {
    kind,
    source: source.name,
    family,
    what,
    outcome,
    verdict: v.verdict,
    truth: truth === 'unloadable' ? 'unloadable' : truth.kind === 'wrong' ? `wrong (${truth.where})` : truth.kind === 'undetermined' ? `undetermined (${truth.why})` : 'correct',
    ms: v.ms,
    reasons: v.code === 3 ? v.reasons.map(reasonClass) : [],
    maxDev: truth === 'unloadable' ? 0 : truth.maxDev,
  };
  if (opts.saveDir !== undefined && (outcome === 'false-pass' || outcome === 'false-alarm' || outcome === 'error' || outcome === 'timeout' || outcome === 'unknown')) {
    mkdirSync(opts.saveDir, { recursive: true });
    const f = join(opts.saveDir, `${outcome}-${saved.n++}-${kind}.json`);
    writeFileSync(f, JSON.stringify({ ...plan, 'x-mutant': { kind, source: source.name, what, verdict: v.verdict, truth: r.truth, stderr: v.stderr, threw: v.threw } }, null, 1));
  }
  return r;
}

/** A random generator configuration (families, sizes and strategy compositions), or undefined when the generator refuses it. */
export function randomConfig(rng: Rng): Config {
  const family = rng.pick(['mlp', 'mlp', 'gpt2', 'llama'] as const) as 'mlp' | 'gpt2' | 'llama';
  const dp = rng.pick([1, 2]) as number;
  const tp = rng.pick([1, 2]) as number;
  const micro = rng.pick([1, 2]) as number;
  const pp = family === 'mlp' && rng.next() < 0.3 ? 2 : 1;
  const cp = family !== 'mlp' && pp === 1 && rng.next() < 0.2 ? 2 : 1;
  const layers = pp > 1 ? 2 : rng.pick([1, 1, 2]) as number;
  const base = family === 'mlp' ? preset('mlp-tiny') : family === 'gpt2' ? preset('gpt2-tiny') : preset('llama-tiny');
  const hidden = family === 'mlp' ? (rng.pick([2, 4]) as number) : base.hidden;
  const model: ModelConfig = { ...base, layers, hidden, ffn: family === 'mlp' ? (rng.pick([2, 4]) as number) : base.ffn ?? 4, batch: cp > 1 ? 2 * dp : (rng.pick([4, 8]) as number), ...(cp > 1 ? { seq: 4 } : {}) };
  const par: Parallelism = {
    dp,
    tp,
    micro: cp > 1 ? 1 : micro,
    sp: tp > 1 && family !== 'mlp' && rng.next() < 0.4,
    zero: dp > 1 ? (rng.pick([0, 0, 1, 2, 3]) as 0 | 1 | 2 | 3) : 0,
    pp,
    cp,
    ...(cp > 1 ? { cpComm: rng.pick(['ring', 'allgather'] as const) as 'ring' | 'allgather' } : {}),
    recompute: rng.next() < 0.15,
  };
  return { model, par };
}

export interface RunSummary {
  readonly mutants: CaseResult[];
  readonly correct: CaseResult[];
  readonly mutantAttempts: number;
  readonly notApplicable: number;
  readonly rewritesDiscarded: number;
  readonly randomRefused: number;
  readonly ms: number;
}

/** The harness: `mutants` mutants, then `correct` correct plans and rewrites. Deterministic in `seed`. */
export async function runHarness(opts: RunOptions): Promise<RunSummary> {
  const t0 = performance.now();
  const rng = new Rng(opts.seed);
  const saved = { n: 0 };
  const mutants: CaseResult[] = [];
  let attempts = 0;
  let notApplicable = 0;
  const over = (): boolean => opts.budgetMs !== undefined && performance.now() - t0 > opts.budgetMs;
  while (mutants.length < opts.mutants && !over()) {
    attempts++;
    const src = drawSource(opts.sources, rng);
    const kind = rng.pick(opts.kinds ?? MUTATION_KINDS) as MutationKind;
    const plan = JSON.parse(JSON.stringify(src.plan)) as Json;
    const what = mutate(plan, kind, rng, src.loaded);
    if (what === undefined) {
      notApplicable++;
      continue;
    }
    const r = await runOne(kind, src, src.family, plan, what, opts, saved);
    mutants.push(r);
    opts.onCase?.(r, mutants.length);
  }
  const correct: CaseResult[] = [];
  let discarded = 0;
  let refused = 0;
  while (correct.length < opts.correct && !over()) {
    // One in four: a random configuration from the generators; else a rewrite of a source.
    if (opts.randomPlans !== false && rng.int(4) === 0) {
      const c = randomConfig(rng);
      let plan: Json;
      try {
        plan = generatePlan({ model: c.model, par: c.par, optimizer: OPT });
      } catch {
        refused++;
        continue;
      }
      const src: Source = { name: `random ${configName(c)}`, family: c.model.family, plan, loaded: loadPlanObject('random.json', plan), weight: 1 };
      const r = await runOne('random-plan', src, c.model.family, plan, configName(c), opts, saved);
      correct.push(r);
      opts.onCase?.(r, correct.length);
      continue;
    }
    const src = drawSource(opts.sources, rng);
    const kind = rng.pick(REWRITE_KINDS) as RewriteKind;
    const plan = JSON.parse(JSON.stringify(src.plan)) as Json;
    const what = rewrite(plan, kind, rng, src.loaded);
    if (what === undefined) {
      discarded++;
      continue;
    }
    const r = await runOne(kind, src, src.family, plan, what, opts, saved);
    correct.push(r);
    opts.onCase?.(r, correct.length);
  }
  return { mutants, correct, mutantAttempts: attempts, notApplicable, rewritesDiscarded: discarded, randomRefused: refused, ms: performance.now() - t0 };
}

/** Counts per key and outcome. */
export function tally(rs: readonly CaseResult[], key: (r: CaseResult) => string): Map<string, Record<Outcome, number>> {
  const m = new Map<string, Record<Outcome, number>>();
  for (const r of rs) {
    const k = key(r);
    let row = m.get(k);
    if (row === undefined) m.set(k, (row = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>));
    row[r.outcome]++;
  }
  return m;
}

/** A markdown table of `tally`. */
export function table(title: string, m: Map<string, Record<Outcome, number>>): string {
  const rows = [...m].sort(([a], [b]) => a.localeCompare(b));
  const total = Object.fromEntries(OUTCOMES.map((o) => [o, rows.reduce((s, [, r]) => s + r[o], 0)])) as Record<Outcome, number>;
  const line = (k: string, r: Record<Outcome, number>): string => `| ${k} | ${OUTCOMES.reduce((s, o) => s + r[o], 0)} | ${OUTCOMES.map((o) => r[o]).join(' | ')} |`;
  return [`| ${title} | total | ${OUTCOMES.join(' | ')} |`, `|---|--:|${OUTCOMES.map(() => '--:').join('|')}|`, ...rows.map(([k, r]) => line(k, r)), line('**all**', total)].join('\n');
}
