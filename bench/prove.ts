/**
 * Proving benchmark: how fast does verifyPlan prove stages, and how much memory does it take?
 *
 *   npm run bench:prove           (= npm run build && node --expose-gc dist/bench/prove.js)
 *   node --expose-gc dist/bench/prove.js [--runs N] [--only name,name] [--json out.json]
 *
 * Cases: every plan in examples/manifest.json (correct and buggy, each checked against its
 * expected verdict and first failing stage), and synthetic plans from bench/synth.ts: a
 * data-parallel residual MLP with small tensors (batch 4, hidden 4) and lineage on every
 * tensor the backward pass computes, sized to about 64 and about 256 stages, then the
 * 64-stage plan with a wider mesh, wider tensors and a larger batch. A last series leaves the
 * backward intermediates without lineage (as bench/load.ts's plans do) and grows the depth:
 * without lineage to cut at, a weight-gradient stage spans the whole gradient chain.
 *
 * Each case runs in a fresh child process (clean memory numbers). The child warms up on
 * examples/mlp-dp2.json (module load, schema compilation, JIT), then loads the plan N times
 * (default 3) and runs verifyPlan(plan, {seed: 1}) N times, then numericCheck alone N times
 * to measure the share of the numeric run in verifyPlan. Reported: stages
 * (report.stages.length), verdict, median load and verify wall time, stages per second
 * (stages / median verify seconds), the share of verify time spent in stage proofs (sum of
 * the stages' own ms) and in the numeric run, the slowest stage, peak RSS
 * (resourceUsage().maxRSS, including the child's warmed-up baseline) and the heap in use
 * after a full GC with the plan and its last report still held.
 *
 * A case whose verdict (or first failing stage) differs from what is expected is printed with
 * a loud WARNING and the process exits 1.
 */
import { parseBenchArgs } from './args.js';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadPlan } from '../lineage/load.js';
import { numel } from '../ops/types.js';
import { numericCheck } from '../stages/witness/numeric.js';
import { verifyPlan } from '../stages/verify.js';
import { type Verdict, type VerifyReport } from '../stages/report.js';
import { synthPlan, type SynthOptions } from './synth.js';

type Series = 'stages' | 'ranks' | 'hidden' | 'batch' | 'no-grad-lineage';

interface Case {
  readonly name: string;
  /** Short description for the table. */
  readonly plan: string;
  readonly expect: Verdict;
  /** Logical tensor of the first failing stage (buggy examples). */
  readonly firstFailing?: string;
  /** A file under examples/, or a synthetic plan. */
  readonly example?: string;
  readonly synth?: SynthOptions;
  readonly series?: Series[];
  /** Runs override (slow cases). */
  readonly runs?: number;
  /** A known limit: the case is expected to fail this way (matched against the error). */
  readonly mayFail?: RegExp;
}

/** What the child process reports. */
interface ChildResult {
  readonly stages: number;
  readonly verdict: Verdict;
  readonly summary: string;
  readonly firstFailing?: string;
  readonly ranks: number;
  readonly logicalElements: number;
  readonly loadMs: number[];
  readonly verifyMs: number[];
  /** Sum of the stages' own proof times, per verify run. */
  readonly stageMs: number[];
  readonly numericMs: number[];
  readonly slowest: { logical: string; ms: number };
  readonly heapAfterGc: number;
  readonly baseHeap: number;
  readonly maxRss: number;
  readonly baseRss: number;
  readonly error?: string;
}

interface Row extends Case {
  readonly result: ChildResult;
  /** Why the result is not what was expected, if it is not. */
  readonly problem?: string;
}

const root = fileURLToPath(new URL('../..', import.meta.url));

/** Synthetic plans: batch 4, hidden 4 over dp=2 unless a case says otherwise. */
function synth(layers: number, extra: Partial<SynthOptions> = {}): SynthOptions {
  return { layers, ranks: 2, spelling: 'template', width: 4, batchPerRank: 2, gradLineage: true, ...extra };
}

function describe(o: SynthOptions): string {
  const b = (o.batchPerRank ?? 2) * o.ranks;
  return `synthetic, ${o.layers} layer${o.layers === 1 ? '' : 's'}, ${o.spelling}, batch ${b}, hidden ${o.width ?? 8}${o.gradLineage === true ? '' : ', **no lineage on d_h, d_in, d_a**'}`;
}

interface ManifestEntry {
  readonly file: string;
  readonly expect: Verdict;
  readonly bug: string | null;
  readonly firstFailing?: { logicalTensor: string };
}

function defaultCases(): Case[] {
  const manifest = JSON.parse(readFileSync(join(root, 'examples/manifest.json'), 'utf8')) as ManifestEntry[];
  const examples: Case[] = manifest.map((m) => ({
    name: m.file.replace(/\.json$/, ''),
    plan: m.bug === null ? 'example' : 'example, seeded bug',
    expect: m.expect,
    example: m.file,
    ...(m.firstFailing === undefined ? {} : { firstFailing: m.firstFailing.logicalTensor }),
  }));
  // 10 stages per layer minus one (layer 1 has no input gradient): 7 layers -> 69, 26 -> 259.
  const s = (name: string, o: SynthOptions, series: Series[], runs?: number, mayFail?: RegExp): Case => ({
    name,
    plan: describe(o),
    expect: 'verified',
    synth: o,
    series,
    ...(runs === undefined ? {} : { runs }),
    ...(mayFail === undefined ? {} : { mayFail }),
  });
  return [
    ...examples,
    s('synth-64', synth(7), ['stages', 'ranks', 'hidden', 'batch']),
    s('synth-64-explicit', synth(7, { spelling: 'explicit' }), []),
    s('synth-256', synth(26), ['stages']),
    s('synth-64-dp4', synth(7, { ranks: 4, batchPerRank: 1 }), ['ranks']),
    s('synth-64-dp8', synth(7, { ranks: 8, batchPerRank: 1, width: 4 }), ['ranks']),
    s('synth-64-hidden8', synth(7, { width: 8 }), ['hidden']),
    s('synth-64-hidden16', synth(7, { width: 16 }), ['hidden']),
    s('synth-64-batch16', synth(7, { batchPerRank: 8 }), ['batch']),
    ...[1, 2, 3].map((l) => s(`no-grad-lineage-${l}l`, synth(l, { gradLineage: false }), ['no-grad-lineage'])),
    // From 4 layers the weight-gradient stages exceed the normal form's per-stage budget
    // (sdfg/terms.ts DEFAULT_TERM_BUDGET): the honest answer is "unknown (stage too large)".
    ...[4, 5].map((l) => ({ ...s(`no-grad-lineage-${l}l`, synth(l, { gradLineage: false }), ['no-grad-lineage'], 1), expect: 'unknown' as Verdict })),
  ];
}

// ---------------------------------------------------------------------------------------------
// Child: load and verify one file, measure.

function gc(): void {
  if (globalThis.gc === undefined) throw new Error('run with node --expose-gc');
  globalThis.gc();
  globalThis.gc();
}

function child(file: string, runs: number): ChildResult {
  // Warm-up: module loading, schema compilation and JIT of the small paths are not plan cost.
  const warm = loadPlan(join(root, 'examples/mlp-dp2.json'));
  for (let i = 0; i < 2; i++) verifyPlan(warm, { seed: 1 });
  gc();
  const base = process.memoryUsage();
  const loadMs: number[] = [];
  const verifyMs: number[] = [];
  const stageMs: number[] = [];
  const numericMs: number[] = [];
  try {
    let plan = loadPlan(file);
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      plan = loadPlan(file);
      loadMs.push(performance.now() - t0);
    }
    gc();
    let report: VerifyReport | undefined;
    for (let i = 0; i < runs; i++) {
      report = undefined;
      gc();
      const t0 = performance.now();
      report = verifyPlan(plan, { seed: 1 });
      verifyMs.push(performance.now() - t0);
      stageMs.push(report.stages.reduce((s, x) => s + x.ms, 0));
    }
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      numericCheck(plan, 1);
      numericMs.push(performance.now() - t0);
    }
    if (report === undefined) throw new Error('no verify run');
    gc();
    // `plan` and `report` are still referenced: this is what a finished verification holds.
    const heapAfterGc = process.memoryUsage().heapUsed;
    const slow = report.stages.reduce((a, b) => (b.ms > a.ms ? b : a), report.stages[0] ?? { logical: '-', ms: 0 });
    const failing = report.stages.find((s) => s.status === 'not_equivalent');
    return {
      stages: report.stages.length,
      verdict: report.verdict,
      summary: report.summary,
      ...(failing === undefined ? {} : { firstFailing: failing.logical }),
      ranks: plan.mesh.size,
      logicalElements: plan.logical.shapes.reduce((s, sh) => s + numel(sh), 0),
      loadMs,
      verifyMs,
      stageMs,
      numericMs,
      slowest: { logical: slow.logical, ms: slow.ms },
      heapAfterGc,
      baseHeap: base.heapUsed,
      maxRss: process.resourceUsage().maxRSS * 1024,
      baseRss: base.rss,
    };
  } catch (e) {
    const msg = e instanceof Error ? `${e.name}: ${e.message.split('\n')[0] ?? ''}` : String(e);
    return failed(msg, process.resourceUsage().maxRSS * 1024);
  }
}

function failed(error: string, maxRss = 0): ChildResult {
  return { stages: 0, verdict: 'unknown', summary: '', ranks: 0, logicalElements: 0, loadMs: [], verifyMs: [], stageMs: [], numericMs: [], slowest: { logical: '-', ms: 0 }, heapAfterGc: 0, baseHeap: 0, maxRss, baseRss: 0, error };
}

// ---------------------------------------------------------------------------------------------
// Parent: generate, spawn, check, tabulate.

function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

const mb = (n: number): string => (n / (1024 * 1024)).toFixed(1);
const fmt = (n: number): string => n.toLocaleString('en-US');
const ok = (r: Row): boolean => r.result.error === undefined && r.result.verifyMs.length > 0;
const vms = (r: Row): number => median(r.result.verifyMs);
const rate = (x: number): string => (x >= 10 ? fmt(Math.round(x)) : x.toFixed(2));
const pct = (x: number): string => `${(100 * x).toFixed(0)}%`;

function runCase(c: Case, dir: string, runs: number): Row {
  let file: string;
  if (c.example !== undefined) file = join(root, 'examples', c.example);
  else {
    file = join(dir, `${c.name}.json`);
    writeFileSync(file, JSON.stringify(synthPlan(c.synth as SynthOptions)));
  }
  const self = fileURLToPath(import.meta.url);
  const out = spawnSync(process.execPath, ['--expose-gc', self, '--child', file, String(c.runs ?? runs)], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 900_000 });
  if (c.example === undefined) rmSync(file, { force: true });
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  let result: ChildResult;
  if (out.status === 0 && line !== undefined) result = JSON.parse(line) as ChildResult;
  else {
    const why = out.error?.message ?? `exit ${String(out.status ?? out.signal)}: ${out.stderr.split('\n').filter((l) => /error|out of memory/i.test(l))[0] ?? out.stderr.slice(0, 200)}`;
    result = failed(why);
  }
  return { ...c, result, ...check(c, result) };
}

/** A wrong verdict is the worst outcome this tool can have: never let it pass quietly. */
function check(c: Case, r: ChildResult): { problem?: string } {
  if (r.error !== undefined) return c.mayFail?.test(r.error) === true ? {} : { problem: `failed to run: ${r.error}` };
  if (r.verdict !== c.expect) return { problem: `verdict '${r.verdict}', expected '${c.expect}' (${r.summary})` };
  if (c.firstFailing !== undefined && r.firstFailing !== c.firstFailing) return { problem: `first failing stage '${r.firstFailing ?? 'none'}', expected '${c.firstFailing}'` };
  return {};
}

function table(rows: readonly Row[]): string {
  const lines = [
    '| case | plan | ranks | logical elements | stages | verdict | load ms | verify ms (median) | verify runs ms | stages/s | proof share | numeric share | slowest stage (ms) | peak RSS MB | heap after GC MB |',
    '|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|---|--:|--:|',
  ];
  for (const r of rows) {
    const x = r.result;
    if (!ok(r)) {
      lines.push(`| ${r.name} | ${r.plan} | | | | **failed**${r.mayFail !== undefined && r.problem === undefined ? ' (known limit)' : ''}: ${(x.error ?? 'no result').replace(/\|/g, '\\|')} | | | | | | | | ${x.maxRss > 0 ? mb(x.maxRss) : ''} | |`);
      continue;
    }
    const v = vms(r);
    const verdict = r.problem === undefined ? (x.verdict === 'not_equivalent' ? `not_equivalent (first: ${x.firstFailing ?? '?'})` : x.verdict) : `**${x.verdict} (WRONG: expected ${r.expect})**`;
    lines.push(
      `| ${r.name} | ${r.plan} | ${x.ranks} | ${fmt(x.logicalElements)} | ${x.stages} | ${verdict} | ${median(x.loadMs).toFixed(1)} | ${v.toFixed(0)} | ${x.verifyMs.map((t) => t.toFixed(0)).join(' / ')} | ${rate(x.stages / (v / 1000))} | ${pct(median(x.stageMs) / v)} | ${pct(median(x.numericMs) / v)} | ${x.slowest.logical} (${x.slowest.ms.toFixed(0)}) | ${mb(x.maxRss)} | ${mb(x.heapAfterGc)} |`,
    );
  }
  return lines.join('\n');
}

/** Growth along each series against the first row of the series: time ratio and exponent k in time ~ size^k. */
function scaling(rows: readonly Row[]): string {
  const out: string[] = [];
  const series = (s: Series): Row[] => rows.filter((r) => r.series?.includes(s) && ok(r));
  const line = (a: Row, b: Row, what: string, n: number): string => {
    const t = vms(b) / vms(a);
    return `- ${a.name} -> ${b.name}: ${what} x${n.toFixed(2)}, verify time x${t.toFixed(2)}, exponent ${(Math.log(t) / Math.log(n)).toFixed(2)} (time ~ ${what}^k; 1 = linear); ${((vms(b) * 1000) / b.result.stages).toFixed(0)} µs per stage`;
  };
  const from = (s: Series, what: string, size: (r: Row) => number): void => {
    const rs = series(s);
    const a = rs[0];
    if (a === undefined) return;
    for (const b of rs.slice(1)) out.push(line(a, b, what, size(b) / size(a)));
  };
  from('stages', 'stages', (r) => r.result.stages);
  from('ranks', 'ranks', (r) => r.result.ranks);
  from('hidden', 'logical elements', (r) => r.result.logicalElements);
  from('batch', 'logical elements', (r) => r.result.logicalElements);
  const deep = series('no-grad-lineage');
  for (let i = 1; i < deep.length; i++) {
    const a = deep[i - 1] as Row;
    const b = deep[i] as Row;
    out.push(`- ${a.name} -> ${b.name}: one layer deeper, verify time x${(vms(b) / vms(a)).toFixed(2)}; slowest stage ${b.result.slowest.logical} ${b.result.slowest.ms.toFixed(0)} ms (x${(b.result.slowest.ms / Math.max(a.result.slowest.ms, 1e-9)).toFixed(2)}); peak RSS ${mb(b.result.maxRss)} MB`);
  }
  return out.join('\n');
}

function parent(argv: string[]): void {
  const { runs, only, json } = parseBenchArgs(argv, 'prove.js');
  const cases = defaultCases().filter((c) => only === undefined || only.has(c.name));
  const dir = mkdtempSync(join(tmpdir(), 'planproof-bench-prove-'));
  const rows: Row[] = [];
  const t0 = performance.now();
  const load0 = loadavg();
  const started = new Date().toUTCString();
  try {
    for (const c of cases) {
      process.stderr.write(`${c.name}: ${c.plan} ... `);
      const row = runCase(c, dir, runs);
      rows.push(row);
      process.stderr.write(ok(row) ? `${row.result.stages} stages, ${row.result.verdict}, ${vms(row).toFixed(0)} ms\n` : `failed: ${row.result.error ?? ''}\n`);
      if (row.problem !== undefined) process.stderr.write(`\n!!!!!!!! WARNING: ${row.name}: ${row.problem} !!!!!!!!\n\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const cpu = cpus();
  console.log(`Proving: verifyPlan(plan, {seed: 1}) wall time, median of ${runs} runs unless marked, each case in a fresh \`node --expose-gc\` process.`);
  console.log(`Machine: ${cpu.length} CPUs (${cpu[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB RAM, node ${process.version}; started ${started}.`);
  console.log('');
  console.log(table(rows));
  console.log('');
  const single = rows.filter((r) => r.runs !== undefined && ok(r)).map((r) => r.name);
  if (single.length > 0) console.log(`Single run (slow): ${single.join(', ')}.`);
  console.log('');
  console.log('Scaling:');
  console.log('');
  console.log(scaling(rows));
  console.log('');
  const good = rows.filter(ok);
  if (good.length > 0) console.log(`Warmed-up child before the plan: median RSS ${mb(median(good.map((r) => r.result.baseRss)))} MB, heap ${mb(median(good.map((r) => r.result.baseHeap)))} MB (included in peak RSS and heap after GC).`);
  console.log(`Load average (1, 5, 15 min) at start: ${load0.map((x) => x.toFixed(2)).join(', ')}; at end: ${loadavg().map((x) => x.toFixed(2)).join(', ')} (${cpu.length} CPUs).`);
  console.log(`Total benchmark time ${((performance.now() - t0) / 1000).toFixed(0)} s.`);
  const bad = rows.filter((r) => r.problem !== undefined);
  if (bad.length > 0) {
    console.log('');
    for (const r of bad) console.log(`!!!!!!!! WARNING: ${r.name}: ${r.problem ?? ''} !!!!!!!!`);
    process.exitCode = 1;
  } else {
    const limits = rows.filter((r) => !ok(r)).map((r) => r.name);
    console.log(`All verdicts as expected: correct plans verified, buggy plans not_equivalent at the expected first failing stage${limits.length > 0 ? `; failed as expected (known limit): ${limits.join(', ')}` : ''}.`);
  }
  if (json !== undefined) writeFileSync(json, JSON.stringify(rows, null, 1));
}

const args = process.argv.slice(2);
if (args[0] === '--child') {
  const file = args[1];
  if (file === undefined) throw new Error('--child needs a file');
  console.log(JSON.stringify(child(file, Number(args[2] ?? '3'))));
} else {
  parent(args);
}
