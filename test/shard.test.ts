/**
 * Sharded runs (issue 16): `verify --shard i/n` on each shard, then `merge`, gives the verdict
 * section (the --json output less its timings) and exit code of a single run, byte for byte,
 * on every example and on three generated plans whose stages are split between the shards.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verdictSection, type Part } from '../cli/shard.js';
import { EXAMPLES, runCli } from './helpers.js';
import { loadPlan } from '../lineage/load.js';
import { verifyPlanInPool } from '../stages/verify.js';
import { fullUnless } from './optional.js';

const dir = mkdtempSync(join(tmpdir(), 'planproof-shard-'));

/** Runs the n shards of `plan`, writes their parts and returns the part files. */
async function shards(plan: string, n: number, extra: string[] = []): Promise<string[]> {
  const files: string[] = [];
  for (let i = 1; i <= n; i++) {
    const r = await runCli(['verify', plan, '--shard', `${i}/${n}`, ...extra]);
    assert.equal(r.code, 0, r.stderr);
    const f = join(dir, `${plan.replace(/[^A-Za-z0-9]/g, '_')}-${i}of${n}.json`);
    writeFileSync(f, r.stdout);
    files.push(f);
  }
  return files;
}

async function sameAsSingle(plan: string, n: number, extra: string[] = []): Promise<Part[]> {
  const parts = await shards(plan, n, extra);
  const merged = await runCli(['merge', ...parts, '--json']);
  const single = await runCli(['verify', plan, '--no-cache', '--json', ...extra]);
  assert.equal(merged.code, single.code, `${plan}: exit ${merged.code} merged, ${single.code} single\n${merged.stderr}`);
  assert.equal(verdictSection(JSON.parse(merged.stdout)), verdictSection(JSON.parse(single.stdout)), plan);
  // The text report too, less its timing lines.
  const text = (s: string): string => s.replace(/\([0-9.]+ s\)/g, '').replace(/^time .*$/m, '');
  assert.equal(text((await runCli(['merge', ...parts])).stdout), text((await runCli(['verify', plan, '--no-cache', ...extra])).stdout));
  return parts.map((f) => JSON.parse(readFileSync(f, 'utf8')) as Part);
}

describe('sharded runs: verify --shard i/n, then merge', function () {
  this.timeout(900_000);

  const examples = [...readdirSync(EXAMPLES).filter((f) => f.endsWith('.json') && f !== 'manifest.json').map((f) => `${EXAMPLES}${f}`), ...readdirSync(`${EXAMPLES}buggy`).filter((f) => f.endsWith('.json')).map((f) => `${EXAMPLES}buggy/${f}`)];

  it('every example: the merge of 2 shards gives the single run verdict section and exit code @full', async () => {
    assert.ok(examples.length >= 10);
    for (const p of examples) await sameAsSingle(p, 2);
  });

  for (const preset of ['mlp-tiny', 'gpt2-tiny', 'llama-tiny']) {
    it(`generated ${preset}, element by element on 3 shards: same verdict section, the proofs split disjointly${fullUnless(preset === 'mlp-tiny')}`, async () => {
      const plan = join(dir, `${preset}.json`);
      assert.equal((await runCli(['gen', '--preset', preset, '-o', plan])).code, 0);
      const parts = await sameAsSingle(plan, 3, ['--no-tensor-level']);
      const idx = parts.flatMap((p) => p.results.map((r) => r.index));
      assert.equal(new Set(idx).size, idx.length, 'a stage proved in two shards');
      for (const p of parts) assert.ok(p.results.length > 0, `shard ${p.shard.index} proved nothing`);
      const single = JSON.parse((await runCli(['verify', plan, '--no-cache', '--no-tensor-level', '--json'])).stdout) as { proofs: { run: number } };
      assert.equal(idx.length, single.proofs.run);
    });
  }

  it('the comparison can fail: a part whose result was changed merges to another verdict', async () => {
    const plan = `${EXAMPLES}mlp-dp2.json`;
    const parts = await shards(plan, 2, ['--no-tensor-level']);
    const p = JSON.parse(readFileSync(parts[0] as string, 'utf8')) as { results: { status: string; reason?: string }[] };
    const r = p.results[0];
    assert.ok(r !== undefined && r.status === 'proved');
    r.status = 'unknown';
    r.reason = 'changed by the test';
    writeFileSync(parts[0] as string, JSON.stringify(p));
    const merged = await runCli(['merge', ...parts, '--json']);
    const single = await runCli(['verify', plan, '--no-cache', '--no-tensor-level', '--json']);
    assert.equal(merged.code, 3);
    assert.notEqual(verdictSection(JSON.parse(merged.stdout)), verdictSection(JSON.parse(single.stdout)));
  });

  it("a shard's own report (library callers) never claims a proof another shard owes: those stages are unknown", async () => {
    const file = `${EXAMPLES}mlp-dp2.json`;
    const plan = loadPlan(file);
    const recorded: number[] = [];
    const r = await verifyPlanInPool(plan, readFileSync(file, 'utf8'), { jobs: 1, deadlineMs: 60_000, tensorLevel: false, shard: { index: 1, count: 2, record: (x) => void recorded.push(x.stage.index) } });
    assert.ok(recorded.length > 0);
    assert.equal(r.verdict, 'unknown');
    const left = r.stages.filter((s) => s.status === 'unknown');
    assert.ok(left.length > 0 && left.every((s) => /left to another shard/.test(s.reason ?? '')));
    assert.ok(r.stages.some((s) => s.status === 'proved'));
  });

  it('--shard is checked before any work, and merge refuses parts that do not belong together', async () => {
    for (const bad of ['0/3', '4/3', '1/0', 'abc', '1/3/2', '-1/2', '1/5000']) {
      const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--shard', bad]);
      assert.equal(r.code, 4, bad);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /--shard must be i\/n/);
    }
    assert.match((await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--shard', '1/2', '--junit', join(dir, 'x.xml')])).stderr, /--junit and --html go with planproof merge/);
    const a = await shards(`${EXAMPLES}mlp-dp2.json`, 2);
    const b = await shards(`${EXAMPLES}mlp-tp2.json`, 2);
    const c3 = await shards(`${EXAMPLES}mlp-dp2.json`, 3);
    const cases: [string[], RegExp][] = [
      [[a[0] as string], /shard\(s\) 2\/2 missing/],
      [[a[0] as string, a[0] as string], /shard 1\/2 is given twice/],
      [[a[0] as string, b[1] as string], /proved another plan/],
      [[a[0] as string, c3[1] as string], /is shard 2\/3/],
      [[join(dir, 'nonexistent.json')], /cannot read part/],
      [[`${EXAMPLES}mlp-dp2.json`], /is not a planproof part file/],
    ];
    for (const [files, re] of cases) {
      const r = await runCli(['merge', ...files]);
      assert.equal(r.code, 4, files.join(' '));
      assert.match(r.stderr, re);
      assert.equal(r.stdout, '');
    }
    // The plan changed after the shards ran.
    const copy = join(dir, 'changing.json');
    writeFileSync(copy, readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8'));
    const parts = await shards(copy, 2);
    const raw = JSON.parse(readFileSync(copy, 'utf8')) as { name: string };
    raw.name = 'changed';
    writeFileSync(copy, JSON.stringify(raw));
    const r = await runCli(['merge', ...parts]);
    assert.equal(r.code, 4);
    assert.match(r.stderr, /is not the plan the parts proved/);
  });
});
