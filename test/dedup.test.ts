/**
 * Stage deduplication and the proof cache: proving each distinct canonical stage once gives
 * the same per-stage answers as proving every stage; a hash hit is confirmed on the full
 * form; the cache serves only entries that check out, and a tampered entry is re-proved.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import { loadPlanText, type LoadedPlan } from '../lineage/load.js';
import { logicalOrder } from '../sdfg/execute.js';
import { decompose } from '../stages/decompose/prove.js';
import { groupStages, StageCanonizer } from '../stages/cache/canon.js';
import { ProofCache } from '../stages/cache/cache.js';
import { verifyPlanInPool } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';
import { synthPlan } from '../bench/synth.js';
import { EXAMPLES } from './helpers.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
const LLAMA = (PRESETS['llama-tiny'] as { model: ModelConfig }).model;

// Deduplication and the cache serve the element engines: tensor-level proofs (which would take
// most of these stages first) are off unless a test turns them on.
const run = (plan: LoadedPlan, text: string, extra: { dedup?: boolean; cache?: ProofCache; tensorLevel?: boolean } = {}): Promise<VerifyReport> => verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 60_000, tensorLevel: false, ...extra });
const statuses = (r: VerifyReport): string[] => r.stages.map((s) => `${s.logical}:${s.status}`);
const fromRaw = (raw: unknown): { plan: LoadedPlan; text: string } => {
  const text = JSON.stringify(raw);
  return { plan: loadPlanText('gen.json', text), text };
};

describe('stage deduplication', function () {
  this.timeout(300_000);

  it('proves the 10 identical layers of a synthetic MLP once each kind of stage, with the same answers', async () => {
    const { plan, text } = fromRaw(synthPlan({ layers: 10, ranks: 2, spelling: 'template', width: 2, batchPerRank: 1, gradLineage: true }));
    const all = await run(plan, text, { dedup: false });
    const dd = await run(plan, text);
    assert.equal(dd.verdict, 'verified');
    assert.deepEqual(statuses(dd), statuses(all));
    const p = dd.proofs;
    assert.ok(p !== undefined && p.stages === dd.stages.length && p.distinct < p.stages / 3, JSON.stringify(p));
    // With tensor-level proofs first, the same verdicts; only the stages they leave are grouped.
    const tl = await run(plan, text, { tensorLevel: true });
    assert.deepEqual(statuses(tl), statuses(all));
    assert.ok((tl.proofs?.tensorLevel ?? 0) > 0 && tl.stages.some((x) => x.decidedBy === 'tensor'), tl.summary);
    assert.match(tl.summary, /proved at tensor level; the other \d+ in \d+ distinct proofs/);
    assert.match(dd.summary, new RegExp(`${p.stages} stages, ${p.distinct} distinct proofs`));
    // Every stage has its own line; a covered one names a proved stage with an equal form.
    const stages = decompose(plan, logicalOrder(plan));
    const canon = new StageCanonizer(plan);
    let covered = 0;
    dd.stages.forEach((s, i) => {
      if (s.coveredBy === undefined) return;
      covered++;
      const by = dd.stages[s.coveredBy - 1];
      assert.equal(by?.status, 'proved');
      assert.equal(by?.coveredBy, undefined);
      const mine = canon.form(stages[i] as never).text;
      assert.ok(mine !== undefined);
      assert.equal(mine, canon.form(stages[s.coveredBy - 1] as never).text);
    });
    assert.equal(covered, p.stages - p.distinct);
  });

  it('gives the same per-stage answers with and without deduplication on every example and on catalog bugs @full', async () => {
    const files = readdirSync(EXAMPLES).filter((f) => f.endsWith('.json') && f !== 'manifest.json').map((f) => `${EXAMPLES}${f}`);
    files.push(...readdirSync(`${EXAMPLES}buggy`).filter((f) => f.endsWith('.json')).map((f) => `${EXAMPLES}buggy/${f}`));
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      const plan = loadPlanText(f, text);
      const [a, b] = [await run(plan, text, { dedup: false }), await run(plan, text)];
      assert.equal(b.verdict, a.verdict, f);
      assert.deepEqual(statuses(b), statuses(a), f);
    }
    // A two-layer llama, dp2 tp2, 2 micro-batches, and bugs injected into it.
    const model = { ...LLAMA, layers: 2 };
    const ctx = { dp: 2, tp: 2, micro: 2, family: 'llama' as const };
    const some = BUGS.filter((b) => b.kind !== 'consistency' && b.applies(ctx)).slice(0, 2);
    assert.ok(some.length >= 2);
    for (const bug of [undefined, ...some]) {
      const raw = generatePlan({ model, par: { ...ctx, pp: 1 }, optimizer: OPT });
      bug?.inject(raw, ctx);
      const { plan, text } = fromRaw(raw);
      const [a, b] = [await run(plan, text, { dedup: false }), await run(plan, text)];
      assert.equal(b.verdict, a.verdict, bug?.id ?? 'correct');
      assert.equal(b.verdict, bug === undefined ? 'verified' : 'not_equivalent', bug?.id ?? 'correct');
      assert.deepEqual(statuses(b), statuses(a), bug?.id ?? 'correct');
      assert.ok((b.proofs?.distinct ?? 0) < b.stages.length, `${bug?.id ?? 'correct'}: no stage deduplicated`);
    }
  });

  it('confirms a hash hit on the full form: with every hash equal, the classes are the same', () => {
    const { plan } = fromRaw(synthPlan({ layers: 3, ranks: 2, spelling: 'template', width: 2, batchPerRank: 1, gradLineage: true }));
    const stages = decompose(plan, logicalOrder(plan));
    const real = groupStages(plan, stages).map((c) => c.members.join(','));
    const colliding = groupStages(plan, stages, () => 'same').map((c) => c.members.join(','));
    assert.deepEqual(colliding, real);
    assert.ok(real.length > 1 && real.length < stages.length);
  });
});

describe('proof cache', function () {
  this.timeout(300_000);
  let dir = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-cache-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const entries = (): string[] => readdirSync(dir).flatMap((d) => readdirSync(join(dir, d)).map((f) => join(dir, d, f)));

  it('serves a warm run from the cache, and re-proves only the stages a changed layer touches @full', async () => {
    const raw = generatePlan({ model: { ...LLAMA, layers: 3 }, par: { dp: 2, tp: 1, micro: 1, pp: 1 }, optimizer: OPT });
    const { plan, text } = fromRaw(raw);
    const cold = await run(plan, text, { cache: new ProofCache(dir) });
    assert.equal(cold.verdict, 'verified');
    assert.equal(cold.proofs?.cached, 0);
    assert.equal(entries().length, cold.proofs?.distinct);
    const warm = await run(plan, text, { cache: new ProofCache(dir) });
    assert.equal(warm.verdict, 'verified');
    assert.equal(warm.proofs?.run, 0);
    assert.ok(warm.stages.every((s) => s.cached === true));
    // One layer's epsilon changes, in the logical graph and on every rank alike: still correct.
    const changed = JSON.parse(text) as { logical: { ops: { id: string; attrs?: Record<string, unknown> }[] }; parallel: { programs: { ops: { id: string; attrs?: Record<string, unknown> }[] }[] } };
    const eps = (o: { id: string; attrs?: Record<string, unknown> }): void => {
      if (/(^|\/)l1\/rms_norm$/.test(o.id) && o.attrs !== undefined) o.attrs['eps'] = '1/1000';
    };
    changed.logical.ops.forEach(eps);
    changed.parallel.programs.forEach((p) => p.ops.forEach(eps));
    const c2 = fromRaw(changed);
    const again = await run(c2.plan, c2.text, { cache: new ProofCache(dir) });
    assert.equal(again.verdict, 'verified');
    const run2 = again.proofs?.run ?? 0;
    assert.ok(run2 > 0 && run2 <= (cold.proofs?.run ?? 0) / 3, `re-proved ${run2} of ${cold.proofs?.run ?? 0}`);
  });

  it('ignores corrupt, truncated and foreign entries and proves those stages again', async () => {
    const text = readFileSync(`${EXAMPLES}mlp-dp2tp2.json`, 'utf8');
    const plan = loadPlanText('mlp-dp2tp2.json', text);
    const cold = await run(plan, text, { cache: new ProofCache(dir) });
    const files = entries();
    assert.ok(files.length >= 4);
    const [a, b, c, d] = files as [string, string, string, string];
    writeFileSync(a, readFileSync(a, 'utf8').slice(0, 40)); // truncated
    const eb = JSON.parse(readFileSync(b, 'utf8')) as Record<string, string>;
    writeFileSync(b, JSON.stringify({ ...eb, engine: 'another-engine' })); // foreign engine
    const ec = JSON.parse(readFileSync(c, 'utf8')) as Record<string, string>;
    writeFileSync(c, JSON.stringify({ ...ec, form: `${ec['form'] ?? ''}\nO0.0=tampered` })); // another form
    const ed = JSON.parse(readFileSync(d, 'utf8')) as Record<string, string>;
    writeFileSync(d, JSON.stringify({ ...ed, status: 'differs' })); // not a proof
    const cache = new ProofCache(dir);
    const warm = await run(plan, text, { cache });
    assert.equal(warm.verdict, cold.verdict);
    assert.equal(cache.stats.rejected, 4);
    assert.equal(warm.proofs?.run, 4);
    assert.equal(warm.proofs?.cached, (cold.proofs?.distinct ?? 0) - 4);
    // the re-proved entries were written again and are trusted next time
    const third = await run(plan, text, { cache: new ProofCache(dir) });
    assert.equal(third.proofs?.run, 0);
  });
});
