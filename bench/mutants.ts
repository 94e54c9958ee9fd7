/**
 * Issue 13 benchmark: the mutation harness, correct plans and rewrites, and loader fuzzing.
 *
 *   npm run bench:mutants -- --seed 1 --mutants 10000 --correct 1000 --fuzz 2000 [--set full|small] [--out DIR] [--budget-min M]
 *
 * Prints markdown tables (outcome per mutation kind, per strategy, unknown reasons per kind;
 * fuzz outcomes) and exits 1 when a false pass, a false alarm, an internal error or a fuzz
 * failure appears. False passes and false alarms are saved as plan files in --out.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { buildSources, runHarness, stopVerifier, table, tally, type CaseResult } from './mutate/harness.js';
import { fuzzSources, runFuzz, type FuzzResult } from './mutate/fuzz.js';
import { MUTATION_KINDS, type MutationKind } from './mutate/mutations.js';
import { shutdownZ3 } from '../stages/engines/z3.js';

const a = yargs(hideBin(process.argv))
  .scriptName('bench:mutants')
  .option('seed', { type: 'number', default: 1 })
  .option('mutants', { type: 'number', default: 10000 })
  .option('correct', { type: 'number', default: 1000 })
  .option('fuzz', { type: 'number', default: 2000 })
  .option('set', { choices: ['full', 'small', 'tiny'] as const, default: 'full' as const })
  .option('out', { type: 'string', default: 'bench-mutants-out', describe: 'directory for false passes, false alarms and errors' })
  .option('verify-deadline', { type: 'number', default: 2, describe: 'verify --deadline of each case (s)' })
  .option('verify-time-limit', { type: 'number', default: 5, describe: 'verify --time-limit of each case (s)' })
  .option('case-timeout', { type: 'number', default: 60, describe: 'seconds after which a case is stopped and counted as a timeout' })
  .option('kinds', { type: 'string', describe: `mutation kinds drawn, comma-separated (default all: ${MUTATION_KINDS.join(', ')})` })
  .option('families', { type: 'string', describe: 'source families drawn, comma-separated (example, mlp, gpt2, llama, moe; default all)' })
  .option('budget-min', { type: 'number', describe: 'stop drawing mutants / correct cases after this many minutes (each)' })
  .strict()
  .parseSync();

const dir = mkdtempSync(join(tmpdir(), 'planproof-mutants-'));
const t0 = performance.now();
const started = new Date().toISOString();
const kinds = a.kinds === undefined ? undefined : a.kinds.split(',').map((k) => k.trim());
for (const k of kinds ?? []) if (!(MUTATION_KINDS as readonly string[]).includes(k)) throw new Error(`--kinds: unknown mutation kind '${k}' (${MUTATION_KINDS.join(', ')})`);
const families = a.families === undefined ? undefined : new Set(a.families.split(',').map((k) => k.trim()));
// Under --families every source is drawn alike (the full run draws slow MoE less).
const sources = buildSources(a.set).filter((s) => families === undefined || families.has(s.family)).map((s) => (families === undefined ? s : { ...s, weight: 1 }));
if (sources.length === 0) throw new Error(`--families ${a.families ?? ''}: no source of those families in set '${a.set}'`);
console.log(`# bench:mutants seed ${a.seed}, ${sources.length} sources (${a.set}), started ${started}`);
let last = performance.now();
const progress = (label: string) => (r: CaseResult, i: number): void => {
  if (performance.now() - last > 30000) {
    last = performance.now();
    process.stderr.write(`${label} ${i} (${((performance.now() - t0) / 1000).toFixed(0)} s) last: ${r.kind} ${r.outcome}\n`);
  }
};
const sec = (ms: number): string => (ms / 1000).toFixed(1);
/** Time per outcome: where the run's time went. */
function timing(rs: readonly CaseResult[]): string {
  const by = new Map<string, number[]>();
  for (const r of rs) by.set(r.outcome, [...(by.get(r.outcome) ?? []), r.ms]);
  const rows = [...by].map(([o, ms]) => {
    const s = [...ms].sort((x, y) => x - y);
    return `| ${o} | ${s.length} | ${sec(s.reduce((x, y) => x + y, 0))} | ${Math.round(s[Math.floor(s.length / 2)] ?? 0)} | ${Math.round(s[Math.floor(s.length * 0.9)] ?? 0)} | ${Math.round(s[s.length - 1] ?? 0)} |`;
  });
  return ['| outcome | cases | verify s (total) | median ms | p90 ms | max ms |', '|---|--:|--:|--:|--:|--:|', ...rows].join('\n');
}
let fz: FuzzResult | undefined;
if (a.fuzz > 0) {
  // First, in a fresh process: the peak resident size is the fuzzing's, not the harness's.
  fz = await runFuzz({ seed: a.seed, runs: a.fuzz, sources: fuzzSources(), dir, saveDir: a.out });
  console.log(`\n## Loader fuzzing: ${fz.cases} plans, ${sec(fz.ms)} s\n`);
  console.log('| exit | count |\n|---|--:|');
  for (const [c, n] of [...fz.byExit].sort()) console.log(`| ${c} | ${n} |`);
  console.log(`\nBy corruption: ${[...fz.byKind].sort().map(([k, n]) => `${k} ${n}`).join(', ')}.`);
  console.log(`Slowest case ${sec(fz.maxMs)} s; peak resident memory of the whole run ${(fz.peakRss / 2 ** 20).toFixed(0)} MiB.`);
  console.log(`Failures: ${fz.failures.length}${fz.failures.length > 0 ? `: ${fz.failures.slice(0, 10).join('; ')}` : ''}`);
}
const budgetMs = a['budget-min'] === undefined ? undefined : a['budget-min'] * 60000;
const bounds = { flags: ['--deadline', String(a['verify-deadline']), '--time-limit', String(a['verify-time-limit'])], timeoutMs: a['case-timeout'] * 1000 };
console.log(`Each case: planproof verify --json --jobs 0 --no-cache ${bounds.flags.join(' ')}, stopped after ${a['case-timeout']} s.`);
const mut = await runHarness({ ...(kinds === undefined ? {} : { kinds: kinds as MutationKind[] }), seed: a.seed, mutants: a.mutants, correct: 0, sources, dir, saveDir: a.out, ...bounds, onCase: progress('mutant'), ...(budgetMs === undefined ? {} : { budgetMs }) });
const cor = await runHarness({ seed: a.seed + 1_000_003, mutants: 0, correct: a.correct, sources, dir, saveDir: a.out, ...bounds, onCase: progress('correct'), ...(budgetMs === undefined ? {} : { budgetMs }) });

console.log(`\n## Mutants: ${mut.mutants.length} (${mut.notApplicable} draws had no site for their kind and were redrawn), ${sec(mut.ms)} s\n`);
console.log(table('mutation kind', tally(mut.mutants, (r) => r.kind)));
console.log('');
console.log(table('source (strategy)', tally(mut.mutants, (r) => r.source)));
console.log('\n' + timing(mut.mutants));
console.log('\n### Unknown verdicts: stage reasons by mutation kind\n');
const reasons = new Map<string, Map<string, number>>();
for (const r of mut.mutants.filter((x) => x.outcome === 'unknown')) {
  const m = reasons.get(r.kind) ?? new Map<string, number>();
  reasons.set(r.kind, m);
  for (const why of new Set(r.reasons.length === 0 ? ['(no stage reason)'] : r.reasons)) m.set(why, (m.get(why) ?? 0) + 1);
}
for (const [k, m] of [...reasons].sort()) {
  console.log(`- **${k}**: ${[...m].sort((x, y) => y[1] - x[1]).slice(0, 4).map(([w, n]) => `${n} x ${w}`).join('; ')}`);
}
console.log('\n### Undetermined ground truth (excluded from false pass / false alarm)\n');
for (const r of [...mut.mutants, ...cor.correct].filter((x) => x.outcome === 'undetermined').slice(0, 10)) console.log(`- ${r.kind} on ${r.source}: ${r.what}: verdict ${r.verdict}, truth ${r.truth.slice(0, 160)}`);

console.log(`\n## Correct plans and rewrites: ${cor.correct.length} (${cor.rewritesDiscarded} rewrite draws had no site, ${cor.randomRefused} random configurations refused by the generator), ${sec(cor.ms)} s\n`);
console.log(table('case', tally(cor.correct, (r) => r.kind)));
console.log('\n' + timing(cor.correct));
console.log('');
console.log(table('source (strategy)', tally(cor.correct, (r) => r.source.startsWith('random ') ? `random ${r.family}` : r.source)));
const maxDev = Math.max(0, ...cor.correct.filter((r) => r.truth === 'correct').map((r) => r.maxDev));
console.log(`\nLargest deviation the ground truth saw on a correct plan: ${maxDev.toExponential(2)} (margins: correct below 1e-11, wrong above 1e-9).`);
for (const r of cor.correct.filter((x) => x.outcome !== 'right').slice(0, 20)) console.log(`- ${r.kind} on ${r.source}: ${r.what}: ${r.outcome}, verdict ${r.verdict}, truth ${r.truth.slice(0, 160)}${r.reasons.length > 0 ? `, ${r.reasons[0] ?? ''}` : ''}`);

const bad = [...mut.mutants, ...cor.correct].filter((r) => r.outcome === 'false-pass' || r.outcome === 'false-alarm' || r.outcome === 'error' || r.outcome === 'timeout');
console.log(`\nFalse passes ${bad.filter((r) => r.outcome === 'false-pass').length}, false alarms ${bad.filter((r) => r.outcome === 'false-alarm').length}, errors ${bad.filter((r) => r.outcome === 'error').length}, timeouts ${bad.filter((r) => r.outcome === 'timeout').length}; total ${sec(performance.now() - t0)} s; finished ${new Date().toISOString()}.`);
for (const r of bad.slice(0, 20)) console.log(`- ${r.outcome}: ${r.kind} on ${r.source}: ${r.what}: verdict ${r.verdict}, truth ${r.truth.slice(0, 200)}`);
await shutdownZ3();
await stopVerifier();
if (bad.length > 0 || (fz !== undefined && fz.failures.length > 0)) process.exitCode = 1;
