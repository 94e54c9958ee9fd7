/**
 * Issue 32, item 1: no verdict from a forged cache. Someone who can write the cache directory
 * (a CI cache shared between branches) but not read the key kept outside it
 * (stages/cache/cache-files.ts) tries the ways the issue found and a few more: a correct plan's
 * answer copied over a buggy plan's entry under the buggy plan's key, an answer edited to
 * "verified" with its digest recomputed (and with a seal made under another key), entries
 * swapped between plans, and forged proofs of every stage of a buggy plan. Every time, the
 * verdict printed is the one the plan earns.
 */
import { strict as assert } from 'node:assert';
import { createHash, createHmac } from 'node:crypto';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { answerKey, answerPath } from '../cli/answers.js';
import { loadPlanText } from '../lineage/load.js';
import { ProofCache } from '../stages/cache/cache.js';
import { cacheKey } from '../stages/cache/cache-files.js';
import { verifyPlanInPool } from '../stages/verify.js';
import { EXAMPLES, filesUnder, runCli } from './helpers.js';

const GOOD = `${EXAMPLES}mlp-tp2.json`;
const BUGGY = `${EXAMPLES}buggy/mlp-tp2-wrong-half.json`;
const KEPT = /^cache {7}answer kept from /m;

interface Entry {
  format: string;
  key: { build: string; plan: string; options: string };
  answer: { verdict: string; code: number; stdout: string[]; stderr: string[]; junit: string; at: string; seconds: number };
  mac: string;
}

/** The answer entry a run keeps for `plan` (path as given) under `cache`. */
async function keptEntry(cache: string, plan: string): Promise<{ file: string; entry: Entry }> {
  const before = new Set(filesUnder(cache, 'answers'));
  await runCli(['verify', plan, '--cache', cache]);
  const file = filesUnder(cache, 'answers').find((f) => !before.has(f));
  assert.ok(file !== undefined, `no answer kept for ${plan}`);
  return { file, entry: JSON.parse(readFileSync(file, 'utf8')) as Entry };
}

/** Runs `fn` with PLANPROOF_CACHE_KEY set to `key` (an attacker's own key, or this machine's). */
async function withKey<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const was = process.env['PLANPROOF_CACHE_KEY'];
  process.env['PLANPROOF_CACHE_KEY'] = key;
  try {
    return await fn();
  } finally {
    if (was === undefined) delete process.env['PLANPROOF_CACHE_KEY'];
    else process.env['PLANPROOF_CACHE_KEY'] = was;
  }
}

describe('forged caches never give a verdict (issue 32)', function () {
  this.timeout(120_000);
  let dir: string;
  let cache: string;
  let good: string;
  let buggy: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-forge-'));
    cache = join(dir, 'cache');
    good = join(dir, 'good.json');
    buggy = join(dir, 'buggy.json');
    copyFileSync(GOOD, good);
    copyFileSync(BUGGY, buggy);
  });

  it('the plans: the correct one is VERIFIED, its buggy twin NOT EQUIVALENT (no cache)', async () => {
    assert.equal((await runCli(['verify', good, '--no-cache'])).code, 0);
    assert.equal((await runCli(['verify', buggy, '--no-cache'])).code, 1);
  });

  it("a correct plan's answer copied over the buggy plan's entry, under the buggy plan's key", async () => {
    const g = await keptEntry(cache, good);
    const b = await keptEntry(cache, buggy);
    writeFileSync(b.file, JSON.stringify({ ...g.entry, key: b.entry.key }));
    const r = await runCli(['verify', buggy, '--cache', cache]);
    assert.equal(r.code, 1, r.stdout);
    assert.doesNotMatch(r.stdout, KEPT);
    assert.match(r.stdout, /NOT EQUIVALENT/);
  });

  it('an answer edited to VERIFIED, its digest recomputed the old way and sealed with other keys', async () => {
    const b = await keptEntry(cache, buggy);
    const answer = { ...b.entry.answer, verdict: 'verified', code: 0, stdout: b.entry.answer.stdout.map((s) => s.replace(/NOT EQUIVALENT.*/g, 'VERIFIED')) };
    const body = JSON.stringify(['planproof-answer/2', b.entry.key.build, b.entry.key.plan, b.entry.key.options, answer]);
    const forgeries = [
      { ...b.entry, answer, check: createHash('sha256').update(JSON.stringify(answer)).digest('hex') },
      { ...b.entry, answer, mac: createHash('sha256').update(body).digest('hex') },
      { ...b.entry, answer, mac: createHmac('sha256', '').update(body).digest('hex') },
      { ...b.entry, answer, mac: createHmac('sha256', 'a'.repeat(64)).update(body).digest('hex') },
      // The seal of the answer it replaces: it covers the answer, so an edited one is a miss.
      { ...b.entry, answer },
    ];
    for (const [i, f] of forgeries.entries()) {
      writeFileSync(b.file, JSON.stringify(f));
      const r = await runCli(['verify', buggy, '--cache', cache]);
      assert.equal(r.code, 1, `forgery ${i}: ${r.stdout}`);
      assert.doesNotMatch(r.stdout, KEPT, `forgery ${i}`);
    }
  });

  it('entries swapped between the two plans: each plan gets its own verdict', async () => {
    const g = await keptEntry(cache, good);
    const b = await keptEntry(cache, buggy);
    const gText = readFileSync(g.file, 'utf8');
    writeFileSync(g.file, readFileSync(b.file, 'utf8'));
    writeFileSync(b.file, gText);
    const rb = await runCli(['verify', buggy, '--cache', cache]);
    assert.equal(rb.code, 1, rb.stdout);
    assert.doesNotMatch(rb.stdout, KEPT);
    const rg = await runCli(['verify', good, '--cache', cache]);
    assert.equal(rg.code, 0, rg.stdout);
    assert.doesNotMatch(rg.stdout, KEPT);
  });

  it("an answer honestly kept on another machine (another key) is not this machine's answer", async () => {
    // The attacker runs the correct plan with their own key and renames its entry to the buggy
    // plan's bytes: a valid seal, but not under this machine's key.
    const theirs = join(dir, 'theirs');
    const g = await withKey('k'.repeat(40), () => keptEntry(theirs, good));
    const key = answerKey(readFileSync(buggy), JSON.parse(g.entry.key.options) as Record<string, unknown>);
    const options = g.entry.key.options.replace(good, buggy);
    assert.notEqual(options, g.entry.key.options);
    const forged = answerPath(cache, { ...key, options });
    mkdirSync(dirname(forged), { recursive: true });
    writeFileSync(forged, JSON.stringify({ ...g.entry, key: { ...g.entry.key, plan: key.plan, options } }));
    const r = await runCli(['verify', buggy, '--cache', cache]);
    assert.equal(r.code, 1, r.stdout);
    assert.doesNotMatch(r.stdout, KEPT);
  });

  it('forged proofs of every stage of the buggy plan (by the old format and under another key) prove nothing', async () => {
    const text = readFileSync(buggy, 'utf8');
    const plan = loadPlanText(buggy, text);
    // Every (hash, form) the run looks up: the attacker can compute them, having the plan.
    const forms: [string, string][] = [];
    class Recorder extends ProofCache {
      override lookup(hash: string, form: string): undefined {
        forms.push([hash, form]);
        return undefined;
      }
    }
    const honest = await verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 60_000, tensorLevel: false, cache: new Recorder(join(dir, 'rec')) });
    assert.equal(honest.verdict, 'not_equivalent');
    assert.ok(forms.length >= 2);
    // Under their own key, the attacker stores a proof of every form (the failing one too).
    const theirs = join(dir, 'theirs');
    await withKey('z'.repeat(40), async () => {
      const c = new ProofCache(theirs);
      assert.ok(Buffer.isBuffer(cacheKey(theirs)));
      for (const [h, f] of forms) c.store(h, f);
    });
    // The same entries with the seal dropped and an old-style digest instead.
    const unsealed = join(dir, 'unsealed');
    for (const f of filesUnder(theirs, '.')) {
      const e = JSON.parse(readFileSync(f, 'utf8')) as Record<string, unknown>;
      const out = join(unsealed, f.slice(theirs.length));
      mkdirSync(dirname(out), { recursive: true });
      writeFileSync(out, JSON.stringify({ ...e, mac: undefined, check: createHash('sha256').update(String(e['form'])).digest('hex') }));
    }
    for (const forged of [theirs, unsealed]) {
      const mine = join(dir, `mine-${forged === theirs ? 'a' : 'b'}`);
      cpSync(forged, mine, { recursive: true });
      const cache = new ProofCache(mine);
      const r = await verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 60_000, tensorLevel: false, cache });
      assert.equal(r.verdict, 'not_equivalent', forged);
      assert.equal(cache.stats.hits, 0, forged);
      assert.equal(cache.stats.rejected, forms.length, forged);
      // And through the CLI, the answer cache off: the verdict the plan earns.
      const c = await runCli(['verify', buggy, '--cache', mine, '--no-answer-cache']);
      assert.equal(c.code, 1, c.stdout);
    }
    // The honest cache of this machine is used: proofs it kept are hits on a second run.
    const own = join(dir, 'own');
    await verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 60_000, tensorLevel: false, cache: new ProofCache(own) });
    const warm = new ProofCache(own);
    await verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 60_000, tensorLevel: false, cache: warm });
    assert.ok(warm.stats.hits > 0);
  });

  it('a key file inside the cache directory is refused: nothing is trusted or kept', async () => {
    const was = process.env['PLANPROOF_CACHE_KEY_FILE'];
    const inside = join(dir, 'inside');
    process.env['PLANPROOF_CACHE_KEY_FILE'] = join(inside, 'cache-key');
    try {
      const k = cacheKey(inside);
      assert.equal(typeof k, 'string');
      assert.match(String(k), /inside the cache directory/);
      const r = await runCli(['verify', good, '--cache', inside]);
      assert.equal(r.code, 0);
      assert.equal(filesUnder(inside, 'answers').length, 0);
    } finally {
      process.env['PLANPROOF_CACHE_KEY_FILE'] = was;
    }
  });

  it('the key is created on first use, owner-only, outside the cache directory, and reused', () => {
    const was = process.env['PLANPROOF_CACHE_KEY_FILE'];
    const file = join(dir, 'config', 'planproof', 'cache-key');
    process.env['PLANPROOF_CACHE_KEY_FILE'] = file;
    try {
      const k = cacheKey(join(dir, 'c1'));
      assert.ok(Buffer.isBuffer(k));
      assert.match(readFileSync(file, 'utf8'), /^[0-9a-f]{64}\n$/);
      assert.deepEqual(cacheKey(join(dir, 'c2')), k);
    } finally {
      process.env['PLANPROOF_CACHE_KEY_FILE'] = was;
    }
  });
});
