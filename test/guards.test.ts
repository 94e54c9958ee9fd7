/**
 * Witnesses of specialized plans (stages/witness/guards.ts, docs/engine.md "Witnesses of
 * specialized plans"): on a captured plan whose program read values into Python, "NOT
 * EQUIVALENT" needs a whole-plan draw that keeps every read. examples/torch/aux_flag_ddp.py
 * branches on `has_aux.any()`: rank 1 read False and skipped the auxiliary head. Its correct
 * program was refuted at a draw where rank 1's rows carry a label; now it is VERIFIED on the
 * inputs where the reads come out as in the run (stages/witness/pins.ts: rows 2-3 of has_aux
 * are 0 there), and its twin is refuted by a whole-plan witness. Edited plans show each check can fail.
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

const verify = (plan: string): Promise<{ code: number; stdout: string; stderr: string }> => runCli(['verify', '--infer', '--jobs', '0', '--no-answer-cache', plan]);

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

  it('the correct program whose rank 1 skips the branch is VERIFIED on the inputs where the reads come out as in the run (the elements they imply held), never NOT EQUIVALENT', async () => {
    const { plan } = await imported('aux_flag_ddp');
    const v = await verify(plan);
    assert.equal(v.code, 0, v.stdout);
    // rank 1 read has_aux[2:4].any() as 0: on every such input both elements are 0, and only that is assumed.
    assert.match(v.stdout, /VERIFIED \(for the values the program read into Python\): .*proved for the inputs where the values read into Python come out as in the captured run, on which has_aux\[2\] = 0, has_aux\[3\] = 0 \(implied by the reads at \S*aux_flag_ddp\.py:\d+/);
    assert.match(v.stdout, /specialized: inputs held at the values the reads imply: has_aux\[2\] = 0, has_aux\[3\] = 0 \(x-planproof-pins\)/);
  });

  it('the library verifies it the same way, in this thread', async () => {
    const { plan } = await imported('aux_flag_ddp');
    const lib = (await import('../index.js')) as typeof import('../index.js');
    const r = lib.verifyPlan(lib.loadPlan(plan));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.match(r.summary, /on which has_aux\[2\] = 0, has_aux\[3\] = 0/);
  });

  it('without the pins the same program is UNKNOWN naming the read: a proof for every input fails, and no witness keeps the reads', async () => {
    const { dir, raw } = await imported('aux_flag_ddp');
    // A rank-1 guard recording a value no categorical input decides (a count read as 0 or 1: any value of rows 2-3)
    // pins nothing: the plan is verified as before, for every input.
    const guards = raw['x-planproof-guards'] as Json[];
    const g = guards.find((x) => x['program'] === 1 && x['cmp'] === 'eq') ?? assert.fail('no rank-1 guard');
    g['values'] = [1];
    const plan = join(dir, 'no-pins.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    // Rank 1's graph skips the branch its (edited) read says it took: never VERIFIED.
    assert.notEqual(v.code, 0, v.stdout);
    assert.doesNotMatch(v.stdout, /x-planproof-pins/);
  });

  it('x-planproof-pins is checked: malformed is exit 2 naming its JSON path; a pin that does not fit the plan (a value outside the declared values, another shape) is not applied', async () => {
    const { dir, raw } = await imported('aux_flag_ddp');
    const plan = join(dir, 'pins.json');
    raw['x-planproof-pins'] = { has_aux: [[2, 0]] };
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 2, v.stdout);
    assert.match(v.stdout + v.stderr, /\$\.x-planproof-pins\.has_aux: must be \{ "shape"/);
    // A pin the reads do not imply (has_aux[3] = 1 contradicts rank 1's read; has_aux[0] = 1 is
    // not forced: rank 0 read any() of rows 0-1 as 1) is refused, naming it: it would narrow the
    // verdict to inputs the program may never run on.
    for (const [el, v] of [[3, 1], [0, 1]]) {
      raw['x-planproof-pins'] = { has_aux: { shape: [4], at: [[el, v]] } };
      writeFileSync(plan, JSON.stringify(raw));
      const u = await verify(plan);
      assert.equal(u.code, 2, u.stdout);
      assert.match(u.stdout + u.stderr, new RegExp(`\\$\\.x-planproof-pins\\.has_aux: has_aux\\[${el}\\] = ${v} is not implied by the values the program read into Python`));
    }
    // Written with another shape or a value outside {0, 1} a pin does not fit and is dropped; one
    // the reads imply is applied: either way the pins applied are the implied ones.
    for (const pin of [{ shape: [2, 2], at: [[3, 1]] }, { shape: [4], at: [[3, 0.5]] }, { shape: [4], at: [[3, 0]] }]) {
      raw['x-planproof-pins'] = { has_aux: pin };
      writeFileSync(plan, JSON.stringify(raw));
      const w = await verify(plan);
      assert.equal(w.code, 0, w.stdout);
      assert.match(w.stdout, /specialized: inputs held at the values the reads imply: has_aux\[2\] = 0, has_aux\[3\] = 0 \(x-planproof-pins\)/);
    }
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
