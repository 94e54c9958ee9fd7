/**
 * The answer cache (cli/answers.ts): a VERIFIED or NOT EQUIVALENT run is printed again for the
 * same plan bytes, options and build; anything that differs, any tampered entry, and any
 * "unknown" run verifies again.
 */
import { strict as assert } from 'node:assert';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { answerKey, answerPath, buildDigest, lookupAnswer, storeAnswer, treeDigest, type Answer } from '../cli/answers.js';
import { EXAMPLES, filesUnder, ROOT, runCli } from './helpers.js';

const CACHE_LINE = /^cache {7}answer kept from /m;

/** Every answer entry under a cache directory. */
const entries = (dir: string): string[] => filesUnder(dir, 'answers');

describe('answer cache', function () {
  this.timeout(300_000);
  let dir: string;
  let cache: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-answers-'));
    cache = join(dir, 'cache');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  for (const [name, file, code] of [
    ['a verified plan', 'mlp-dp2.json', 0],
    ['a plan with a bug', 'buggy/mlp-dp2-loss-scale-twice.json', 1],
  ] as const) {
    it(`prints ${name}'s answer again, with its exit code and JUnit file, and says so`, async () => {
      const plan = join(dir, 'p.json');
      copyFileSync(`${EXAMPLES}${file}`, plan);
      const j1 = join(dir, 'a.xml');
      const j2 = join(dir, 'b.xml');
      const first = await runCli(['verify', plan, '--cache', cache, '--junit', j1]);
      assert.equal(first.code, code, first.stderr);
      assert.doesNotMatch(first.stdout, CACHE_LINE);
      assert.equal(entries(cache).length, 1);
      const again = await runCli(['verify', plan, '--cache', cache, '--junit', j2]);
      assert.equal(again.code, code);
      assert.match(again.stdout, CACHE_LINE);
      assert.equal(again.stdout.replace(/^cache .*\n/m, ''), first.stdout);
      assert.equal(readFileSync(j2, 'utf8'), readFileSync(j1, 'utf8'));
      // --json is another option set: verified once, then kept; the kept JSON says where it came from.
      const j = await runCli(['verify', plan, '--cache', cache, '--json']);
      const jAgain = await runCli(['verify', plan, '--cache', cache, '--json']);
      assert.equal((JSON.parse(j.stdout) as { answerCache?: unknown }).answerCache, undefined);
      const kept = JSON.parse(jAgain.stdout) as { verdict: string; answerCache?: { at: string } };
      assert.equal(kept.verdict, code === 0 ? 'verified' : 'not_equivalent');
      assert.equal(typeof kept.answerCache?.at, 'string');
      assert.equal(jAgain.code, code);
    });
  }

  it('the kept answer names the option that verifies again, the one the README names, and it does (issue 35)', async () => {
    const plan = join(dir, 'p.json');
    copyFileSync(`${EXAMPLES}mlp-dp2.json`, plan);
    assert.equal((await runCli(['verify', plan, '--cache', cache])).code, 0);
    const again = await runCli(['verify', plan, '--cache', cache]);
    const flag = /^cache {7}answer kept from .*; (--[\w-]+) verifies again$/m.exec(again.stdout)?.[1];
    assert.equal(flag, '--no-answer-cache', again.stdout);
    assert.ok(readFileSync(`${ROOT}README.md`, 'utf8').includes(`(\`${flag}\` verifies again)`), 'the README names the same option');
    const fresh = await runCli(['verify', plan, '--cache', cache, flag]);
    assert.equal(fresh.code, 0);
    assert.doesNotMatch(fresh.stdout, CACHE_LINE);
    await runCli(['verify', plan, '--cache', cache, '--json']);
    const note = (JSON.parse((await runCli(['verify', plan, '--cache', cache, '--json'])).stdout) as { answerCache?: { note: string } }).answerCache?.note;
    assert.match(note ?? '', /; --no-answer-cache verifies again$/);
  });

  it('verifies again when a byte of the plan, an option or the cache setting differs', async () => {
    const plan = join(dir, 'p.json');
    copyFileSync(`${EXAMPLES}mlp-dp2.json`, plan);
    assert.equal((await runCli(['verify', plan, '--cache', cache])).code, 0);
    // One byte more (whitespace: the same plan, other bytes).
    writeFileSync(plan, `${readFileSync(plan, 'utf8')} `);
    const spaced = await runCli(['verify', plan, '--cache', cache]);
    assert.equal(spaced.code, 0);
    assert.doesNotMatch(spaced.stdout, CACHE_LINE);
    for (const extra of [['--seed', '2'], ['--no-tensor-level'], ['--verbose'], ['--max-ops', '100000'], ['--no-answer-cache']]) {
      const r = await runCli(['verify', plan, '--cache', cache, ...extra]);
      assert.equal(r.code, 0, extra.join(' '));
      assert.doesNotMatch(r.stdout, CACHE_LINE, extra.join(' '));
    }
    // A plan changed into a bug under the same name: its own answer, never the old one.
    writeFileSync(plan, readFileSync(`${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`));
    const bug = await runCli(['verify', plan, '--cache', cache]);
    assert.equal(bug.code, 1);
    assert.doesNotMatch(bug.stdout, CACHE_LINE);
    // --no-cache reads and writes no answer.
    const before = entries(cache).length;
    const off = await runCli(['verify', plan, '--no-cache']);
    assert.doesNotMatch(off.stdout, CACHE_LINE);
    assert.equal(entries(cache).length, before);
  });

  it('never keeps an unknown run', async () => {
    const plan = join(dir, 'p.json');
    copyFileSync(`${EXAMPLES}mlp-dp2.json`, plan);
    const r = await runCli(['verify', plan, '--cache', cache, '--no-tensor-level', '--time-limit', '0.001']);
    assert.equal(r.code, 3, r.stdout);
    assert.equal(entries(cache).length, 0);
  });

  it('ignores a truncated, corrupt, altered or foreign entry and verifies again', async () => {
    const plan = join(dir, 'p.json');
    copyFileSync(`${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, plan);
    const first = await runCli(['verify', plan, '--cache', cache]);
    assert.equal(first.code, 1);
    const [file] = entries(cache);
    assert.ok(file !== undefined);
    const good = readFileSync(file, 'utf8');
    const entry = JSON.parse(good) as { key: { build: string; plan: string }; answer: { verdict: string; code: number; stdout: string[] }; mac: string };
    const tampered: [string, string][] = [
      ['truncated', good.slice(0, good.length >> 1)],
      ['not JSON', 'not json'],
      // The bug's answer rewritten to read as verified, its seal left as it was.
      ['altered answer', JSON.stringify({ ...entry, answer: { ...entry.answer, verdict: 'verified', code: 0, stdout: entry.answer.stdout.map((s) => s.replace(/NOT EQUIVALENT/g, 'VERIFIED')) } })],
      ['another build', JSON.stringify({ ...entry, key: { ...entry.key, build: '0'.repeat(64) } })],
      ['another plan', JSON.stringify({ ...entry, key: { ...entry.key, plan: '0'.repeat(64) } })],
      ['another format', JSON.stringify({ ...entry, format: 'planproof-answer/0' })],
    ];
    for (const [what, text] of tampered) {
      writeFileSync(file, text);
      const r = await runCli(['verify', plan, '--cache', cache]);
      assert.equal(r.code, 1, what);
      assert.doesNotMatch(r.stdout, CACHE_LINE, what);
      assert.match(r.stdout, /NOT EQUIVALENT/, what);
      // The run kept its own answer again, which the next run uses.
      const kept = JSON.parse(readFileSync(file, 'utf8')) as typeof entry;
      assert.equal(kept.answer.verdict, 'not_equivalent', what);
    }
    const last = await runCli(['verify', plan, '--cache', cache]);
    assert.match(last.stdout, CACHE_LINE);
  });

  it('an answer whose exit code is not its verdict is not used, even with a valid seal', () => {
    const key = answerKey('{"plan":1}', { a: 1 });
    const file = answerPath(cache, key);
    const answer = { verdict: 'verified', code: 1, stdout: ['verdict     VERIFIED'], stderr: [], junit: '', at: 'now', seconds: 1 };
    rmSync(cache, { recursive: true, force: true });
    // Sealed as this machine would seal it: only the pairing of code and verdict is off.
    assert.ok(storeAnswer(cache, key, answer as unknown as Answer));
    assert.ok(existsSync(file));
    assert.equal(lookupAnswer(cache, key), undefined);
    const ok = { ...answer, code: 0 } as Answer;
    assert.ok(storeAnswer(cache, key, ok));
    assert.deepEqual(lookupAnswer(cache, key), ok);
    // Options are compared as canonical JSON: key order does not matter, values do.
    assert.deepEqual(answerKey('{"plan":1}', { b: 2, a: 1 }).options, answerKey('{"plan":1}', { a: 1, b: 2 }).options);
    assert.notDeepEqual(answerKey('{"plan":1}', { a: 2 }), key);
    assert.match(buildDigest(), /^[0-9a-f]{64}$/);
  });

  it('the build digest changes with any compiled module, nested or not, the schema or a validator, and not with tests', () => {
    const root = join(dir, 'pkg');
    const dist = join(root, 'dist');
    const files: Record<string, string> = {
      'dist/cli/app.js': 'a',
      'dist/stages/deep/x.js': 'b',
      'dist/index.js': 'c',
      'dist/test/t.test.js': 'test',
      'dist/bench/b.js': 'bench',
      'plans/plan-v1.schema.json': '{}',
      'plans/plan-v1.validate.cjs': 'v',
      'ops/attr.validate.cjs': 'w',
    };
    for (const [f, t] of Object.entries(files)) writeEntry(join(root, f), t);
    const base = treeDigest(dist, root);
    assert.equal(treeDigest(dist, root), base);
    for (const [f, t] of Object.entries(files)) {
      writeFileSync(join(root, f), `${t} `);
      const changed = treeDigest(dist, root) !== base;
      writeFileSync(join(root, f), t);
      assert.equal(changed, !f.startsWith('dist/test/') && !f.startsWith('dist/bench/'), f);
    }
    // A module added is another build too.
    writeEntry(join(dist, 'plans/new.js'), 'n');
    assert.notEqual(treeDigest(dist, root), base);
  });
});

/** Writes a file (an answer entry as the cache would, or text as is), making its directory. */
function writeEntry(file: string, e: unknown): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, typeof e === 'string' ? e : JSON.stringify(e));
}
