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
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parsePlanJson, readPlanText } from '../plans/json.js';
import { loadPlan } from '../plans/loader.js';
import { countOps, layersForOps, synthPlan, type Spelling } from './synth.js';

interface Case {
  readonly name: string;
  readonly spelling: Spelling;
  readonly ranks: number;
  readonly layers: number;
  /** Shown next to the name in the table. */
  readonly note?: string;
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
  readonly ops: number;
  readonly logicalOps: number;
  readonly programOps: number;
  readonly bytes: number;
  readonly result: ChildResult;
}

const HEADLINE_OPS = 100_000;

function defaultCases(): Case[] {
  const explicit = (ops: number, ranks = 2, note?: string): Case => ({
    name: `explicit-${ops / 1000}k${ranks === 2 ? '' : `-dp${ranks}`}`,
    spelling: 'explicit',
    ranks,
    layers: layersForOps(ops, ranks),
    ...(note === undefined ? {} : { note }),
  });
  const headlineLayers = layersForOps(HEADLINE_OPS, 2);
  const small = layersForOps(10_000, 2);
  return [
    explicit(10_000),
    explicit(30_000),
    explicit(HEADLINE_OPS, 2, 'headline'),
    explicit(300_000, 2, 'deep chain'),
    explicit(300_000, 8, 'wide: same depth as 100k'),
    { name: `template-dp2-${headlineLayers}l`, spelling: 'template', ranks: 2, layers: headlineLayers, note: 'logical graph of the 100k case' },
    { name: `template-dp64-${headlineLayers}l`, spelling: 'template', ranks: 64, layers: headlineLayers },
    { name: `template-dp2-${small}l`, spelling: 'template', ranks: 2, layers: small, note: 'logical graph of the 10k case' },
    { name: `template-dp64-${small}l`, spelling: 'template', ranks: 64, layers: small },
    { name: `template-dp512-${small}l`, spelling: 'template', ranks: 512, layers: small },
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
    const where = e instanceof Error ? (e.stack ?? '').split('\n').slice(1, 4).map((s) => s.trim()).join(' | ') : '';
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
  const out = spawnSync(process.execPath, ['--expose-gc', self, '--child', file, String(runs)], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: 240_000 });
  rmSync(file, { force: true });
  let result: ChildResult;
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  if (out.status === 0 && line !== undefined) result = JSON.parse(line) as ChildResult;
  else {
    const why = out.error?.message ?? `exit ${String(out.status ?? out.signal)}: ${out.stderr.split('\n').filter((l) => /Error|error/.test(l))[0] ?? out.stderr.slice(0, 200)}`;
    result = { runsMs: [], parseMs: 0, heapRetained: 0, heapAfterLoad: 0, rssAfterLoad: 0, maxRss: 0, baseRss: 0, error: why };
  }
  const programOps = plan.parallel.programs[0]?.ops.length ?? 0;
  return { ...c, ops: count.total, logicalOps: count.logical, programOps, bytes, result };
}

function table(rows: readonly Row[]): string {
  const ref = rows.find((r) => r.result.error === undefined && r.spelling === 'explicit');
  const perOp = (r: Row): number => (median(r.result.runsMs) * 1000) / r.ops;
  const lines = [
    '| case | spelling | ranks | layers | ops in file (logical + parallel) | file MB | load ms (median) | runs ms | of which read+parse ms | µs/op | µs/op vs first | heap retained MB | peak RSS MB |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of rows) {
    const head = `| ${r.name}${r.note === undefined ? '' : ` (${r.note})`} | ${r.spelling} | ${r.ranks} | ${r.layers} | ${r.ops.toLocaleString('en-US')} (${r.logicalOps.toLocaleString('en-US')} + ${(r.ops - r.logicalOps).toLocaleString('en-US')}) | ${mb(r.bytes)} |`;
    if (r.result.error !== undefined) {
      lines.push(`${head} **failed**: ${r.result.error.replace(/\|/g, '\\|')} | | | | | | ${r.result.maxRss > 0 ? mb(r.result.maxRss) : ''} |`);
      continue;
    }
    const ratio = ref === undefined ? '' : `${(perOp(r) / perOp(ref)).toFixed(2)}x`;
    lines.push(
      `${head} ${median(r.result.runsMs).toFixed(0)} | ${r.result.runsMs.map((x) => x.toFixed(0)).join(' / ')} | ${r.result.parseMs.toFixed(0)} | ${perOp(r).toFixed(1)} | ${ratio} | ${mb(r.result.heapRetained)} | ${mb(r.result.maxRss)} |`,
    );
  }
  return lines.join('\n');
}

function parseArgs(argv: string[]): { runs: number; only?: Set<string>; json?: string } {
  let runs = 3;
  let only: Set<string> | undefined;
  let json: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--runs' && v !== undefined) {
      runs = Math.max(1, Number(v));
      i++;
    } else if (a === '--only' && v !== undefined) {
      only = new Set(v.split(','));
      i++;
    } else if (a === '--json' && v !== undefined) {
      json = v;
      i++;
    } else throw new Error(`unknown argument ${a ?? ''}; usage: load.js [--runs N] [--only name,...] [--json out.json]`);
  }
  return { runs, ...(only === undefined ? {} : { only }), ...(json === undefined ? {} : { json }) };
}

function parent(argv: string[]): void {
  const { runs, only, json } = parseArgs(argv);
  const cases = defaultCases().filter((c) => only === undefined || only.has(c.name));
  const dir = mkdtempSync(join(tmpdir(), 'planproof-bench-'));
  const rows: Row[] = [];
  const t0 = performance.now();
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
