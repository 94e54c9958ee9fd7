/**
 * gen writes plans in pieces (plans/gen/write.ts) with the bytes JSON.stringify(plan, null, 1)
 * gave as one string: the format stays the same, and the golden hashes (gen-golden.test.ts)
 * still describe the files gen writes.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generatePlan, type GenOptions } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';
import { stringifyChunks, writeJsonFile } from '../plans/gen/write.js';
import { main } from '../cli/app.js';
import { runCli } from './helpers.js';

const pieces = (v: unknown): string[] => {
  const out: string[] = [];
  stringifyChunks(v, (s) => out.push(s));
  return out;
};
const sha = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');

describe('gen: plans written in pieces', () => {
  it('gives the bytes of JSON.stringify(v, null, 1) on what JSON.stringify treats specially', () => {
    const long = Array.from({ length: 100 }, (_, i) => (i % 7 === 0 ? undefined : i % 5 === 0 ? { a: [i, 'x\ny'], b: undefined } : i));
    const deep = { a: { b: { c: { d: { e: { f: { g: [1, [2, { h: long }]] } } } } } } };
    const cases: unknown[] = [
      null,
      3,
      'a "quoted"\nline',
      [],
      {},
      { a: undefined, f: () => 1 },
      [undefined, () => 1, Symbol('s'), null],
      { when: new Date(0), boxed: [new Number(2), new String('s'), new Boolean(false)], neg: -0, big: 1e21, small: 1e-7, nan: NaN },
      { '': 1, 'k"ey\u2028': { x: [] }, 2: 'numeric keys first', '\u00e9': '\ud83d\ude00' },
      long,
      deep,
      [deep, [long, [[long]]]],
      { toJSON: () => ({ replaced: [1, 2] }) },
    ];
    for (const v of cases) assert.equal(pieces(v).join(''), JSON.stringify(v, null, 1), JSON.stringify(v));
    // Without whitespace: JSON.stringify(v)'s bytes.
    for (const v of cases) {
      const out: string[] = [];
      stringifyChunks(v, (s) => out.push(s), 0);
      assert.equal(out.join(''), JSON.stringify(v), JSON.stringify(v));
    }
  });

  it('gives the bytes of JSON.stringify(plan, null, 1) on generated plans, in bounded pieces', () => {
    for (const p of ['gpt2-tiny', 'llama-tiny-sp', 'moe-tiny']) {
      const plan = generatePlan(PRESETS[p] as GenOptions);
      const got = pieces(plan);
      assert.equal(got.join(''), JSON.stringify(plan, null, 1), p);
      // Pieces near the chunk size (1 Mi characters) and no larger than one op or tensor past it.
      for (const s of got) assert.ok(s.length < (1 << 20) + 100_000, `${p}: a piece of ${s.length} characters`);
    }
    // A plan larger than one piece: several pieces, the same text.
    const plan = generatePlan({ ...(PRESETS['gpt2-tiny'] as GenOptions), model: { ...(PRESETS['gpt2-tiny'] as GenOptions).model, layers: 16 } });
    const got = pieces(plan);
    assert.ok(got.length > 1, `${got.length} piece(s)`);
    assert.equal(got.join(''), JSON.stringify(plan, null, 1));
  });

  it('writeJsonFile writes the text and a newline, and returns its bytes', () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-write-'));
    try {
      const v = { name: 'caf\u00e9', xs: Array.from({ length: 200 }, (_, i) => ({ i })) };
      const f = join(dir, 'v.json');
      const n = writeJsonFile(f, v);
      const b = readFileSync(f);
      assert.equal(b.toString('utf8'), JSON.stringify(v, null, 1) + '\n');
      assert.equal(n, b.length);
      // Past its bound the indented text is replaced by the value without whitespace, from the start.
      const g = join(dir, 'w.json');
      const big = generatePlan(PRESETS['llama-tiny-sp'] as GenOptions);
      const m = writeJsonFile(g, big, 4096);
      const c = readFileSync(g);
      assert.equal(c.toString('utf8'), JSON.stringify(big) + '\n');
      assert.equal(m, c.length);
      assert.ok(m < JSON.stringify(big, null, 1).length, 'smaller than the indented text');
      // Under its bound, indented as before.
      assert.equal(writeJsonFile(g, v, 1 << 30), n);
      assert.equal(readFileSync(g).toString('utf8'), JSON.stringify(v, null, 1) + '\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('planproof gen -o and to stdout (in pieces or as one string) write the same bytes as before', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-gen-'));
    try {
      const want = JSON.stringify(generatePlan(PRESETS['llama-tiny-sp'] as GenOptions), null, 1) + '\n';
      const f = join(dir, 'p.json');
      const r = await runCli(['gen', '--preset', 'llama-tiny-sp', '-o', f, '--json']);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(sha(readFileSync(f)), sha(want));
      assert.equal((JSON.parse(r.stderr) as { bytes: number }).bytes, Buffer.byteLength(want));
      const s = await runCli(['gen', '--preset', 'llama-tiny-sp']);
      assert.equal(s.stdout, want);
      let streamed = '';
      const code = await main(['gen', '--preset', 'llama-tiny-sp'], { log: () => assert.fail('log'), err: () => undefined, write: (x) => (streamed += x) });
      assert.equal(code, 0);
      assert.equal(streamed, want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
