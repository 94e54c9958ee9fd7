/**
 * Issue 15 benchmark: capture overhead and plan size per captured op.
 *
 *   node dist/bench/capture.js [--reps 21] [--python /usr/bin/python3]
 *
 * For each example under examples/torch/ (2 gloo processes): the median step time untraced
 * and traced (tools/capture/planproof_capture.py --bench), the ATen ops per rank, the
 * overhead per op, and the imported plan's size in bytes per ATen op. Prints markdown rows.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkRelations, importGraphs } from '../plans/import/plan.js';

const arg = (k: string, d: string): string => {
  const i = process.argv.indexOf(`--${k}`);
  return i < 0 ? d : (process.argv[i + 1] ?? d);
};
const reps = Number(arg('reps', '21'));
const python = arg('python', '/usr/bin/python3');
const root = fileURLToPath(new URL('../..', import.meta.url));
const tool = join(root, 'tools/capture/planproof_capture.py');

interface Stats {
  seconds: number;
  rank_ops: number[];
  plain_ms: number[];
  traced_ms: number[];
}

console.log('| example | ATen ops per rank | step untraced (ms, median) | step traced (ms, median) | overhead per op (µs) | capture wall (s) | plan bytes | bytes per ATen op |');
console.log('|---|---|---|---|---|---|---|---|');
for (const [script, axis] of [['tp_mlp.py', 'tp'], ['ddp_mlp.py', 'dp'], ['ops_mix.py', 'dp'], ['adamw_mlp.py', 'dp'], ['gpt_block_sp.py', 'tp'], ['dtensor_mlp.py', 'tp']] as const) {
  const dir = mkdtempSync(join(tmpdir(), 'pp-bench-cap-'));
  const r = spawnSync(python, [tool, '--nproc', '2', '--axis', axis, '--bench', String(reps), '--out', dir, join(root, 'examples/torch', script)], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`capture of ${script} failed:\n${r.stderr}`);
  const s = JSON.parse(readFileSync(join(dir, 'capture-stats.json'), 'utf8')) as Stats;
  const read = (f: string): { name: string; text: string } => ({ name: f, text: readFileSync(join(dir, f), 'utf8') });
  const relations = checkRelations('relations.json', JSON.parse(readFileSync(join(dir, 'relations.json'), 'utf8')));
  const { plan, stats } = importGraphs({ logical: read('logical.py'), ranks: [read('rank0.py'), read('rank1.py')], relations, relationsFile: 'relations.json' });
  const bytes = Buffer.byteLength(JSON.stringify(plan, null, 1));
  const ops = Math.max(...s.rank_ops);
  const plain = Math.max(...s.plain_ms);
  const traced = Math.max(...s.traced_ms);
  console.log(`| ${script} | ${s.rank_ops.join(', ')} | ${plain.toFixed(2)} | ${traced.toFixed(2)} | ${(((traced - plain) / ops) * 1000).toFixed(1)} | ${s.seconds.toFixed(1)} | ${bytes} | ${(bytes / stats.atenOps).toFixed(0)} |`);
}
