/**
 * The cost of the report files (issue 16): `planproof verify` of one generated plan without
 * report files, with --junit, and with --html, end to end in this process (median of --runs),
 * and the writers alone on the same report (junitXml, htmlReport: Graphviz WebAssembly
 * layout of every failing or unknown stage).
 * Run: npm run build && node dist/bench/reports.js [--runs 3]
 */
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '../cli/app.js';
import { junitXml } from '../cli/junit.js';
import { htmlReport } from '../cli/html.js';
import { loadPlan } from '../lineage/load.js';
import { verifyPlanInPool } from '../stages/verify.js';
import { readFileSync } from 'node:fs';
import { parseBenchArgs } from './args.js';

const args = parseBenchArgs(process.argv.slice(2), 'reports');
const dir = mkdtempSync(join(tmpdir(), 'planproof-bench-reports-'));
const quiet = { log: (): void => undefined, err: (s: string): void => void process.stderr.write(s + '\n') };
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] as number;

for (const [name, gen] of [
  ['gpt2-tiny (verified)', ['--preset', 'gpt2-tiny']],
  ['gpt2-tiny + dp-grad-allreduce-avg (not equivalent)', ['--preset', 'gpt2-tiny', '--inject', 'dp-grad-allreduce-avg']],
] as const) {
  const plan = join(dir, `${name.replace(/[^a-z0-9]+/g, '-')}.json`);
  if ((await main(['gen', ...gen, '-o', plan], quiet)) !== 0) throw new Error('gen failed');
  const base = ['verify', plan, '--no-cache'];
  const cases: [string, string[]][] = [
    ['verify', base],
    ['verify --junit', [...base, '--junit', join(dir, 'r.xml')]],
    ['verify --html', [...base, '--html', join(dir, 'r.html')]],
  ];
  // Interleaved: each round runs the three, so machine load hits them alike.
  const times = new Map<string, number[]>(cases.map(([k]) => [k, []]));
  let code = -1;
  for (let i = 0; i < args.runs; i++) {
    for (const [k, argv] of cases) {
      const t0 = performance.now();
      code = await main(argv, quiet);
      times.get(k)?.push(performance.now() - t0);
    }
  }
  const l = loadPlan(plan);
  const report = await verifyPlanInPool(l, readFileSync(plan, 'utf8'), { jobs: 2, deadlineMs: 60_000 });
  const tj = performance.now();
  const xml = junitXml(report);
  const junitMs = performance.now() - tj;
  const th = performance.now();
  const html = await htmlReport(report, l);
  const htmlMs = performance.now() - th;
  const open = report.stages.filter((s) => s.status !== 'proved').length;
  process.stdout.write(`\n${name}: ${report.stages.length} stages, ${open} failing or unknown, exit ${code}\n`);
  for (const [k, xs] of times) process.stdout.write(`  ${k.padEnd(16)} median ${(median(xs) / 1000).toFixed(2)} s  (runs: ${xs.map((x) => (x / 1000).toFixed(2)).join(', ')})\n`);
  process.stdout.write(`  junitXml alone  ${junitMs.toFixed(1)} ms, ${xml.length} bytes\n`);
  process.stdout.write(`  htmlReport alone ${htmlMs.toFixed(1)} ms, ${html.length} bytes (file ${statSync(join(dir, 'r.html')).size} bytes)\n`);
}
