/**
 * Plan loading benchmark: is loadPlan linear in plan size?
 *
 *   npm run bench:load            (= npm run build && node --expose-gc dist/bench/load.js)
 *   node --expose-gc dist/bench/load.js [--runs N] [--only name,name] [--json out.json]
 *
 * For each case a synthetic valid plan (bench/synth.ts) is written to a temp file; a fresh
 * child process (so memory numbers are clean) warms the loader up on examples/mlp-dp2.json,
 * then loads the file N times (default 3). Reported per case: ops as written in the file
 * (logical ops + parallel ops of every program), file size, median wall time of loadPlan
 * (read + parse + every check), time per op and its ratio to the smallest case, heap still
 * held by the loaded plan after a full GC, and the process's peak RSS (resourceUsage().maxRSS)
 * after the first load. A case whose load throws is reported with the error instead.
 *
 * Two series are summarised as scaling exponents k (time ~ size^k, 1 = linear):
 *  - 'size': explicit per-rank plans over 2 ranks, ~10k to ~300k ops in the file;
 *  - 'ranks': one SPMD template (fixed file) over 2 to 1024 ranks, against the ops the
 *    loader checks on all ranks (logical ops + ranks x program ops);
 *  - 'dp': the same 2-layer template over dp 2 to 8192 (51 loads each), against its dp-2 time:
 *    loading per template must not grow with the ranks.
 * The whole run takes about 2-4 minutes on a quiet 2-core machine.
 */
import { parseBenchArgs } from './args.js';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parsePlanJson, readPlanText } from '../plans/json.js';
import { loadPlan } from '../lineage/load.js';
import { countOps, layersForOps, synthPlan, type Spelling } from './synth.js';

interface Case {
  readonly name: string;
  readonly spelling: Spelling;
  readonly ranks: number;
  readonly layers: number;
  /** Shown next to the name in the table. */
  readonly note?: string;
  /** 'size': explicit plans of growing size; 'ranks'/'dp': one template over growing meshes. */
  readonly series?: 'size' | 'ranks' | 'dp';
  /** Loads per case (default: --runs); small plans take more for a stable median. */
  readonly runs?: number;
}

/** What the child process reports. */
interface ChildResult {
  readonly runsMs: number[];
  readonly parseMs: number;
  readonly heapRetained: number;
  readonly heapAfterLoad: number;
  readonly rssAfterLoad: number;
  readonly maxRss: number;
  readonly baseRss: number;
  readonly error?: string;
}

interface Row extends Case {
  /** Ops as written in the file: logical + every program's ops. */
  readonly ops: number;
  readonly logicalOps: number;
  /** Logical ops + program ops summed over the ranks that run them. */
  readonly expandedOps: number;
  readonly bytes: number;
  readonly result: ChildResult;
}

const HEADLINE_OPS = 100_000;
const SWEEP_LAYERS = 100;

function defaultCases(): Case[] {
  const explicit = (ops: number, ranks: number, note?: string, series?: 'size'): Case => ({
    name: `explicit-${ops / 1000}k${ranks === 2 ? '' : `-dp${ranks}`}`,
    spelling: 'explicit',
    ranks,
    layers: layersForOps(ops, ranks),
    ...(note === undefined ? {} : { note }),
    ...(series === undefined ? {} : { series }),
  });
  const headline = layersForOps(HEADLINE_OPS, 2);
  const template = (ranks: number, layers: number, note?: string, series?: 'ranks' | 'dp'): Case => ({
    name: `template-dp${ranks}-${layers}l`,
    spelling: 'template',
    ranks,
    layers,
    ...(note === undefined ? {} : { note }),
    ...(series === undefined ? {} : { series }),
  });
  return [
    explicit(10_000, 2, undefined, 'size'),
    explicit(30_000, 2, undefined, 'size'),
    explicit(HEADLINE_OPS, 2, 'headline', 'size'),
    explicit(300_000, 2, 'deep chain', 'size'),
    explicit(300_000, 8, 'wide: same depth as 100k'),
    template(2, headline, 'logical graph of the 100k case'),
    template(64, headline),
    template(2, SWEEP_LAYERS, 'ranks sweep', 'ranks'),
    template(64, SWEEP_LAYERS, 'ranks sweep', 'ranks'),
    template(256, SWEEP_LAYERS, 'ranks sweep', 'ranks'),
    template(1024, SWEEP_LAYERS, 'ranks sweep', 'ranks'),
    ...[2, 64, 1024, 8192].map((dp) => ({ ...template(dp, 2, 'dp sweep', 'dp'), runs: 51 })),
  ];
}

// ---------------------------------------------------------------------------------------------
// Child: load one file, measure.

function gc(): void {
  if (globalThis.gc === undefined) throw new Error('run with node --expose-gc');
  globalThis.gc();
  globalThis.gc();
}

function child(file: string, runs: number): ChildResult {
  const example = fileURLToPath(new URL('../../examples/mlp-dp2.json', import.meta.url));
  // Warm-up: module loading, schema compilation and JIT of the small paths are not plan cost.
  for (let i = 0; i < 3; i++) loadPlan(example);
  // Small plans: one untimed load of the file itself, so its own code paths are compiled
  // (a 2-layer plan loads in about 2 ms, less than the JIT takes to warm up).
  if (statSync(file).size < 1024 * 1024) loadPlan(file);
  gc();
  const base = process.memoryUsage();
  const runsMs: number[] = [];
  let heapRetained = 0;
  let heapAfterLoad = 0;
  let rssAfterLoad = 0;
  let maxRss = 0;
  try {
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      let plan: ReturnType<typeof loadPlan> | undefined = loadPlan(file);
      runsMs.push(performance.now() - t0);
      if (i === 0) {
        const m = process.memoryUsage();
        heapAfterLoad = m.heapUsed - base.heapUsed;
        rssAfterLoad = m.rss;
        maxRss = process.resourceUsage().maxRSS * 1024;
        gc();
        // `plan` is still referenced here: what survives a full GC is the loaded plan.
        heapRetained = process.memoryUsage().heapUsed - base.heapUsed;
        if (plan.programs.length === 0) throw new Error('no programs');
      }
      plan = undefined;
      gc();
    }
    // Parse share, measured separately so it does not disturb the runs above.
    const t0 = performance.now();
    parsePlanJson(file, readPlanText(file));
    const parseMs = performance.now() - t0;
    return { runsMs, parseMs, heapRetained, heapAfterLoad, rssAfterLoad, maxRss, baseRss: base.rss };
  } catch (e) {
    const msg = e instanceof Error ? `${e.name}: ${e.message.split('\n')[0] ?? ''}` : String(e);
    const frames = e instanceof Error ? (e.stack ?? '').split('\n').slice(1, 4) : [];
    const where = frames.map((f) => f.trim().replace(/\(?file:\/\/\S*?\/(node_modules|dist)\//, '($1/')).join(' | ');
    return { runsMs, parseMs: 0, heapRetained, heapAfterLoad, rssAfterLoad, maxRss: process.resourceUsage().maxRSS * 1024, baseRss: base.rss, error: `${msg} [${where}]` };
  }
}

// ---------------------------------------------------------------------------------------------
// Parent: generate, spawn, tabulate.

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

const mb = (n: number): string => (n / (1024 * 1024)).toFixed(1);

function runCase(c: Case, dir: string, runs: number): Row {
  const plan = synthPlan({ layers: c.layers, ranks: c.ranks, spelling: c.spelling });
  const count = countOps(plan);
  const file = join(dir, `${c.name}.json`);
  writeFileSync(file, JSON.stringify(plan));
  const bytes = statSync(file).size;
  const self = fileURLToPath(import.meta.url);
  const out = spawnSync(process.execPath, ['--expose-gc', self, '--child', file, String(c.runs ?? runs)], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: 240_000 });
  rmSync(file, { force: true });
  let result: ChildResult;
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  if (out.status === 0 && line !== undefined) result = JSON.parse(line) as ChildResult;
  else {
    const why = out.error?.message ?? `exit ${String(out.status ?? out.signal)}: ${out.stderr.split('\n').filter((l) => /Error|error/.test(l))[0] ?? out.stderr.slice(0, 200)}`;
    result = { runsMs: [], parseMs: 0, heapRetained: 0, heapAfterLoad: 0, rssAfterLoad: 0, maxRss: 0, baseRss: 0, error: why };
  }
  const programOps = plan.parallel.programs.reduce((n, p) => n + p.ops.length * (p.ranks === 'all' ? c.ranks : Array.isArray(p.ranks) ? p.ranks.length : 0), 0);
  return { ...c, ops: count.total, logicalOps: count.logical, expandedOps: count.logical + programOps, bytes, result };
}

const fmt = (n: number): string => n.toLocaleString('en-US');
const ok = (r: Row): boolean => r.result.error === undefined && r.result.runsMs.length > 0;
const ms = (r: Row): number => median(r.result.runsMs);
const perOp = (r: Row): number => (ms(r) * 1000) / r.ops;

function table(rows: readonly Row[]): string {
  const ref = rows.find((r) => ok(r) && r.series === 'size');
  const lines = [
    '| case | spelling | ranks | layers | ops in file (logical + parallel) | ops on all ranks | file MB | load ms (median) | runs ms | read+parse ms | µs/op in file | µs/op vs first | heap retained MB | peak RSS MB |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of rows) {
    const head = `| ${r.name}${r.note === undefined ? '' : ` (${r.note})`} | ${r.spelling} | ${r.ranks} | ${r.layers} | ${fmt(r.ops)} (${fmt(r.logicalOps)} + ${fmt(r.ops - r.logicalOps)}) | ${fmt(r.expandedOps)} | ${mb(r.bytes)} |`;
    if (!ok(r)) {
      lines.push(`${head} **failed**: ${(r.result.error ?? 'no result').replace(/\|/g, '\\|')} | | | | | | ${r.result.maxRss > 0 ? mb(r.result.maxRss) : ''} |`);
      continue;
    }
    const ratio = ref === undefined ? '' : `${(perOp(r) / perOp(ref)).toFixed(2)}x`;
    const shown = r.result.runsMs.length > 5 ? `${r.result.runsMs.length} runs, min ${Math.min(...r.result.runsMs).toFixed(1)}, max ${Math.max(...r.result.runsMs).toFixed(1)}` : r.result.runsMs.map((x) => x.toFixed(0)).join(' / ');
    lines.push(
      `${head} ${ms(r) < 20 ? ms(r).toFixed(1) : ms(r).toFixed(0)} | ${shown} | ${r.result.parseMs.toFixed(0)} | ${perOp(r).toFixed(1)} | ${ratio} | ${mb(r.result.heapRetained)} | ${mb(r.result.maxRss)} |`,
    );
  }
  return lines.join('\n');
}

/** Growth between consecutive rows of a series: time ratio and exponent k in time ~ size^k. */
function scaling(rows: readonly Row[]): string {
  const out: string[] = [];
  const pairs = (series: 'size' | 'ranks' | 'dp'): [Row, Row][] => {
    const rs = rows.filter((r) => r.series === series && ok(r));
    return rs.slice(1).map((r, i) => [rs[i] as Row, r]);
  };
  for (const [a, b] of pairs('size')) {
    const n = b.ops / a.ops;
    const t = ms(b) / ms(a);
    out.push(`- ${a.name} -> ${b.name}: ops x${n.toFixed(2)}, load time x${t.toFixed(2)}, exponent ${(Math.log(t) / Math.log(n)).toFixed(2)} (time ~ ops^k; 1 = linear)`);
  }
  for (const [a, b] of pairs('ranks')) {
    const n = b.expandedOps / a.expandedOps;
    const t = ms(b) / ms(a);
    out.push(
      `- ${a.name} -> ${b.name}: same file size, ops on all ranks x${n.toFixed(2)}, load time x${t.toFixed(2)}, exponent ${(Math.log(t) / Math.log(n)).toFixed(2)} (time ~ (ranks x program ops)^k); ${((ms(b) * 1000) / b.expandedOps).toFixed(2)} µs per op on all ranks`,
    );
  }
  const dp = rows.filter((r) => r.series === 'dp' && ok(r));
  const dp2 = dp[0];
  for (const r of dp.slice(1)) {
    if (dp2 !== undefined) out.push(`- ${dp2.name} -> ${r.name}: file x${(r.bytes / dp2.bytes).toFixed(2)}, ranks x${r.ranks / dp2.ranks}, load time x${(ms(r) / ms(dp2)).toFixed(2)} (${ms(dp2).toFixed(1)} -> ${ms(r).toFixed(1)} ms)`);
  }
  const failed = rows.filter((r) => r.series !== undefined && !ok(r)).map((r) => r.name);
  if (failed.length > 0) out.push(`- not loaded: ${failed.join(', ')}`);
  return out.join('\n');
}

function parent(argv: string[]): void {
  const { runs, only, json } = parseBenchArgs(argv, 'load.js');
  const cases = defaultCases().filter((c) => only === undefined || only.has(c.name));
  const dir = mkdtempSync(join(tmpdir(), 'planproof-bench-'));
  const rows: Row[] = [];
  const t0 = performance.now();
  const load0 = loadavg();
  try {
    for (const c of cases) {
      process.stderr.write(`${c.name}: ${c.spelling}, ${c.ranks} ranks, ${c.layers} layers ... `);
      const row = runCase(c, dir, runs);
      rows.push(row);
      process.stderr.write(row.result.error === undefined ? `${median(row.result.runsMs).toFixed(0)} ms\n` : `failed: ${row.result.error}\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`Plan loading: loadPlan(file) wall time, median of ${runs} runs, each case in a fresh \`node --expose-gc\` process (${process.version}).`);
  console.log('');
  console.log(table(rows));
  console.log('');
  console.log('Scaling:');
  console.log('');
  console.log(scaling(rows));
  console.log('');
  const bases = rows.filter(ok).map((r) => r.result.baseRss);
  if (bases.length > 0) console.log(`Baseline RSS of a warmed-up child before loading: median ${mb(median(bases))} MB (included in peak RSS).`);
  console.log(`Load average (1, 5, 15 min) at start: ${load0.map((x) => x.toFixed(2)).join(', ')}; at end: ${loadavg().map((x) => x.toFixed(2)).join(', ')} (${cpus().length} CPUs).`);
  console.log(`Total benchmark time ${((performance.now() - t0) / 1000).toFixed(0)} s.`);
  if (json !== undefined) writeFileSync(json, JSON.stringify(rows, null, 1));
}

const args = process.argv.slice(2);
if (args[0] === '--child') {
  const file = args[1];
  if (file === undefined) throw new Error('--child needs a file');
  const res = child(file, Number(args[2] ?? '3'));
  console.log(JSON.stringify(res));
} else {
  parent(args);
}
