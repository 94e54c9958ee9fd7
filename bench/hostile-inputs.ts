/**
 * Writes the hostile inputs of issue 13 (defects 3 and 4) into a directory, for timing the CLI
 * on them (docs/benchmarks.md, "Hostile inputs"):
 *  - padded.json: examples/mlp-dp2.json with 200 MiB of spaces after its first brace;
 *  - dead-1m.json: mlp-dp2 with 10^6 dead ops (each a gelu of x into its own tensor);
 *  - swapped.json: mlp-dp2 with the lineage of h and a swapped (refuted at stage 1).
 * Usage: node dist/bench/hostile-inputs.js DIR
 */
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

interface Tensor {
  id: string;
  shape: number[];
  lineage?: unknown;
}
interface Plan {
  parallel: { programs: { tensors: Tensor[]; ops: unknown[] }[] };
}

const dir = process.argv[2];
if (dir === undefined) {
  process.stderr.write('usage: node dist/bench/hostile-inputs.js DIR\n');
  process.exit(4);
}
mkdirSync(dir, { recursive: true });
const text = readFileSync(fileURLToPath(new URL('../../examples/mlp-dp2.json', import.meta.url)), 'utf8');

// Padded: written in 1 MiB chunks, never held whole.
const fd = openSync(join(dir, 'padded.json'), 'w');
const brace = text.indexOf('{') + 1;
writeSync(fd, text.slice(0, brace));
const spaces = Buffer.alloc(1 << 20, 0x20);
for (let i = 0; i < 200; i++) writeSync(fd, spaces);
writeSync(fd, text.slice(brace));
closeSync(fd);

const dead = JSON.parse(text) as Plan;
const prog = dead.parallel.programs[0];
if (prog === undefined) throw new Error('mlp-dp2 has no program');
for (let i = 0; i < 1_000_000; i++) {
  prog.tensors.push({ id: `dead${i}`, shape: [2, 3] });
  prog.ops.push({ id: `deadop${i}`, op: 'gelu', inputs: ['x'], outputs: [`dead${i}`], attrs: { approximate: 'none' } });
}
writeFileSync(join(dir, 'dead-1m.json'), JSON.stringify(dead));

const swapped = JSON.parse(text) as Plan;
const ts = swapped.parallel.programs[0]?.tensors ?? [];
const h = ts.find((t) => t.id === 'h');
const a = ts.find((t) => t.id === 'a');
if (h === undefined || a === undefined) throw new Error('mlp-dp2 has no h or a');
[h.lineage, a.lineage] = [a.lineage, h.lineage];
writeFileSync(join(dir, 'swapped.json'), JSON.stringify(swapped, null, 1));
process.stdout.write(`wrote padded.json, dead-1m.json, swapped.json to ${dir}\n`);
