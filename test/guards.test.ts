/**
 * Witnesses of specialized plans (stages/witness/guards.ts, docs/engine.md "Witnesses of
 * specialized plans"): on a captured plan whose program read values into Python, "NOT
 * EQUIVALENT" needs a whole-plan draw that keeps every read. examples/torch/aux_flag_ddp.py
 * branches on `has_aux.any()`: rank 1 read False and skipped the auxiliary head. Its correct
 * program was refuted at a draw where rank 1's rows carry a label; now it is UNKNOWN naming the
 * read, and its twin is refuted by a whole-plan witness. Edited plans show each check can fail.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FIXTURES, runCli } from './helpers.js';

type Json = Record<string, unknown>;

async function imported(name: string): Promise<{ dir: string; plan: string; raw: Json }> {
  const dir = mkdtempSync(join(tmpdir(), 'pp-guards-'));
  const plan = join(dir, `${name}.json`);
  const imp = await runCli(['import-graphs', '--dir', `${FIXTURES}capture/${name}`, '-o', plan]);
  assert.equal(imp.code, 0, imp.stderr);
  return { dir, plan, raw: JSON.parse(readFileSync(plan, 'utf8')) as Json };
}

const verify = (plan: string): Promise<{ code: number; stdout: string }> => runCli(['verify', '--infer', '--jobs', '0', '--no-answer-cache', plan]);

describe('witnesses of specialized plans keep every value read into Python', function () {
  this.timeout(300_000);

  it('the capture records a guard per read: the value read, on every program', async () => {
    const { raw } = await imported('aux_flag_ddp');
    const guards = raw['x-planproof-guards'] as Json[];
    // One `has_aux.any()` per program: True on the single device and rank 0, False on rank 1.
    const any = guards.filter((g) => /aux_flag_ddp\.py:\d+/.test(String(g['where'])) && g['cmp'] === 'eq');
    assert.deepEqual(
      any.map((g) => [g['program'], g['values']]),
      [
        ['logical', [1]],
        [0, [1]],
        [1, [0]],
      ],
    );
  });

  it('the correct program whose rank 1 skips the branch is UNKNOWN naming the read, never NOT EQUIVALENT', async () => {
    const { plan } = await imported('aux_flag_ddp');
    const v = await verify(plan);
    assert.equal(v.code, 3, v.stdout);
    assert.doesNotMatch(v.stdout, /NOT EQUIVALENT/);
    assert.match(v.stdout, /no whole-plan draw both keeps every read and separates an output \(\d+ of \d+ draws keep every read and separate no output; the others: the value read into Python at \S*aux_flag_ddp\.py:\d+ \(\d\) is \d at these inputs\)/);
  });

  it('its twin (divided by the rank count of labelled rows) is NOT EQUIVALENT by a whole-plan witness that keeps every read', async () => {
    const { plan } = await imported('aux_flag_ddp-bug');
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /NOT EQUIVALENT \(for the values the program read into Python\)[\s\S]*a whole-plan witness keeps every value the program read into Python: with the captured run's values of has_aux \(the inputs the reads depend on\), certified witness \(interval arithmetic at seed \d+/);
  });

  it('without the run values, a random draw that keeps all three reads refutes it too', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    assert.ok(raw['x-planproof-run-inputs'] !== undefined);
    delete raw['x-planproof-run-inputs'];
    const plan = join(dir, 'drawn.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /a whole-plan witness keeps every value the program read into Python: certified witness \(interval arithmetic at seed \d+/);
  });

  it('the twin with a guard no draw keeps (a read value edited) is never refuted', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    const guards = raw['x-planproof-guards'] as Json[];
    const g = guards.find((x) => x['program'] === 1 && x['cmp'] === 'eq') ?? assert.fail('no rank-1 guard');
    g['values'] = [7];
    const plan = join(dir, 'edited.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 3, v.stdout);
    assert.match(v.stdout, /\(each of \d+ draws: the value read into Python at \S*aux_flag_ddp\.py:\d+ \(7\) is 0 at these inputs\)/);
  });

  it('a plan that lists a read but records no guard for it is never refuted', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    delete raw['x-planproof-guards'];
    const plan = join(dir, 'legacy.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 3, v.stdout);
    assert.match(v.stdout, /read into Python, and the plan records no guard for it \(x-planproof-guards\)/);
    // Without the read listed either, the plan is an ordinary plan: its stage witness refutes.
    delete raw['x-planproof-specialized'];
    writeFileSync(plan, JSON.stringify(raw));
    const w = await verify(plan);
    assert.equal(w.code, 1, w.stdout);
  });

  it('a comparison guard (megatron_clip: clip_coeff < 1.0) is kept at the run values: its twin stays refuted', async () => {
    const { plan, raw } = await imported('megatron_clip-bug');
    const guards = raw['x-planproof-guards'] as Json[];
    assert.ok(guards.some((g) => g['cmp'] === 'lt' && g['otherValue'] === 1 && typeof g['outcome'] === 'boolean'), JSON.stringify(guards));
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /a whole-plan witness keeps every value the program read into Python/);
  });

  it("AdamW's step counter (an input, incremented, then read) is kept at the run values: the twin stays refuted", async () => {
    const { plan } = await imported('adamw_mlp-bug');
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /with the captured run's values of (w[12]_step, )*w[12]_step \(the inputs the reads depend on\)/);
  });
});
