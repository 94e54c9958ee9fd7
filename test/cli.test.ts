import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { EXAMPLES, ROOT, runCli } from './helpers.js';

describe('cli', () => {
  it('verify loads a valid plan but says nothing was proved and exits 3', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`]);
    assert.equal(r.code, 3);
    assert.match(r.stdout, /UNKNOWN: nothing was proved/);
    assert.doesNotMatch(r.stdout, /verified/i);
  });
  it('verify --json reports verdict unknown', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-tp2.json`, '--json']);
    assert.equal(r.code, 3);
    const j = JSON.parse(r.stdout) as { verdict: string; reason: string };
    assert.equal(j.verdict, 'unknown');
    assert.match(j.reason, /no equivalence proof/);
  });
  it('inspect summarizes mesh, ops, collectives and lineage', async () => {
    const r = await runCli(['inspect', `${EXAMPLES}mlp-dp2.json`, '--json']);
    assert.equal(r.code, 0);
    const s = JSON.parse(r.stdout) as { mesh: { ranks: number }; collectives: { op: string; over: string; instances: number }[]; lineage: { logical: string; coverage: string; partials: boolean }[]; parallel: { ops: number } };
    assert.equal(s.mesh.ranks, 2);
    assert.deepEqual(s.collectives, [{ op: 'all_reduce', over: 'dp', groupSize: 2, instances: 3 }]);
    assert.equal(s.parallel.ops, 2 * 14);
    assert.deepEqual(s.lineage.find((l) => l.logical === 'g_w1'), { logical: 'g_w1', role: 'grad', claims: 3, holders: 4, coverage: 'complete', partials: true });
    assert.equal(s.lineage.find((l) => l.logical === 'x')?.coverage, 'complete');
  });
  it('demo loads the embedded example and exits 0', async () => {
    const r = await runCli(['demo']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /mlp-tp2/);
    assert.match(r.stdout, /Nothing was proved/);
  });
  it('usage errors exit 4, never 1 (1 means not equivalent)', async () => {
    assert.equal((await runCli(['frobnicate'])).code, 4);
    assert.equal((await runCli(['verify'])).code, 4);
    assert.equal((await runCli([])).code, 4);
  });
  it('the installed bin runs as a process with the documented exit codes', () => {
    const bin = `${ROOT}dist/cli/main.js`;
    const ok = spawnSync(process.execPath, [bin, 'verify', `${EXAMPLES}mlp-dp2.json`], { encoding: 'utf8' });
    assert.equal(ok.status, 3);
    const missing = spawnSync(process.execPath, [bin, 'inspect', '/nonexistent/plan.json'], { encoding: 'utf8' });
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /\/nonexistent\/plan\.json: cannot read plan file \(ENOENT\)/);
    assert.doesNotMatch(missing.stderr, /at .*\.js:\d+/);
  });
});
