/**
 * The --json report follows its published schema (cli/report-v1.schema.json, exported as
 * planproof/schema/report-v1.schema.json): real reports of every verdict, an invalid plan and a
 * usage error are validated with ajv, and the schema refuses what the report must never say
 * (issue 35: failing ranks on an undecided stage, a not_equivalent verdict without its first
 * failing stage).
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { REPORT_SCHEMA_VERSION } from '../cli/report-json.js';
import { EXAMPLES, ROOT, runCli } from './helpers.js';
import { FULL } from './optional.js';

const schema = JSON.parse(readFileSync(`${ROOT}cli/report-v1.schema.json`, 'utf8')) as object;
const validate = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true }).compile(schema);

type Json = Record<string, unknown>;

/** The output parsed and checked against the schema (the errors in the message). */
function valid(stdout: string): Json {
  const j = JSON.parse(stdout) as Json;
  assert.ok(validate(j), JSON.stringify(validate.errors, null, 1));
  assert.equal(j['schemaVersion'], REPORT_SCHEMA_VERSION);
  return j;
}

interface Stage {
  status: string;
  failingRanks: number[];
}

describe('the --json report and its schema', function () {
  this.timeout(300_000);
  let dir = '';
  before(() => (dir = mkdtempSync(join(tmpdir(), 'planproof-schema-'))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('verified: valid, no firstFailing', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--json', '--no-cache']);
    assert.equal(r.code, 0);
    const j = valid(r.stdout);
    assert.equal(j['verdict'], 'verified');
    assert.equal(j['firstFailing'], undefined);
  });

  it('not_equivalent: valid, with firstFailing naming the stage, tensor, op, ranks and cause', async () => {
    const r = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--json', '--no-cache']);
    assert.equal(r.code, 1);
    const j = valid(r.stdout);
    const f = j['firstFailing'] as { stage: number; tensor: string; op: { id: string; kind: string }; ranks: number[]; cause: string };
    assert.deepEqual({ stage: f.stage, tensor: f.tensor, op: [f.op.id, f.op.kind] }, { stage: 13, tensor: 'g_w1', op: ['fc1_bwd_w', 'matmul'] });
    const s = (j['stages'] as (Stage & { index: number; diagnosis?: string })[]).find((x) => x.status === 'not_equivalent');
    assert.ok(s !== undefined);
    assert.equal(f.stage, s.index);
    assert.deepEqual(f.ranks, s.failingRanks);
    assert.equal(f.cause, s.diagnosis);
    assert.match(f.cause, /'g_w1_sum' \(all_reduce over ranks 0, 1\) reduces with 'avg' where 'sum' is due/);
    assert.equal((s as { diagnosisRule?: string }).diagnosisRule, 'reduce-kind');
    // Right after the verdict, for a reader of the raw text.
    assert.deepEqual(Object.keys(j).slice(0, 6), ['schemaVersion', 'file', 'name', 'verdict', 'summary', 'firstFailing']);
  });

  it('undecided stages after a refutation: valid, and none names failing ranks (issue 35)', async () => {
    // mlp-dp2 with the lineage of h and a swapped: refuted at h; later stages differ in normal
    // form without a witness and stay unknown (the JSON gave them the proof's failing ranks).
    const p = JSON.parse(readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8')) as { parallel: { programs: { tensors: { id: string; lineage?: unknown }[] }[] } };
    const ts = p.parallel.programs[0]?.tensors ?? [];
    const h = ts.find((t) => t.id === 'h');
    const a = ts.find((t) => t.id === 'a');
    assert.ok(h !== undefined && a !== undefined);
    [h.lineage, a.lineage] = [a.lineage, h.lineage];
    const f = join(dir, 'swap.json');
    writeFileSync(f, JSON.stringify(p));
    const r = await runCli(['verify', f, '--json', '--jobs', '0', '--no-cache']);
    assert.equal(r.code, 1);
    const j = valid(r.stdout);
    const unknown = (j['stages'] as Stage[]).filter((s) => s.status === 'unknown');
    assert.ok(unknown.length > 0);
    assert.ok(unknown.every((s) => s.failingRanks.length === 0), JSON.stringify(unknown.slice(0, 2)));
    assert.equal((j['firstFailing'] as { tensor: string }).tensor, 'h');
    // Stopped at the time limit before any stage: unknown, valid.
    const t = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--json', '--no-cache', '--time-limit', '0.0001']);
    assert.equal(t.code, 3);
    assert.equal(valid(t.stdout)['verdict'], 'unknown');
  });

  it(`unknown with undecided stages: valid, none names failing ranks${FULL}`, async () => {
    // gpt2-tiny at full shapes in this thread: a 1 ms stage deadline stops its larger stages.
    const plan = join(dir, 'g2.json');
    assert.equal((await runCli(['gen', '--preset', 'gpt2-tiny', '-o', plan])).code, 0);
    const r = await runCli(['verify', plan, '--json', '--no-cache', '--no-tensor-level', '--no-reduce', '--jobs', '0', '--deadline', '0.001']);
    assert.equal(r.code, 3);
    const j = valid(r.stdout);
    const unknown = (j['stages'] as Stage[]).filter((s) => s.status === 'unknown');
    assert.ok(unknown.length > 0 && unknown.every((s) => s.failingRanks.length === 0));
  });

  it('an invalid plan and a usage error: valid', async () => {
    const plan = join(dir, 'invalid.json');
    writeFileSync(plan, JSON.stringify({ format: 'planproof/v1' }));
    const inv = await runCli(['verify', plan, '--json']);
    assert.equal(inv.code, 2);
    assert.equal(valid(inv.stdout)['verdict'], 'invalid');
    const use = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--seed', 'abc', '--json']);
    assert.equal(use.code, 4);
    assert.equal(valid(use.stdout)['verdict'], 'usage_error');
  });

  it('the other paths: inferred cut points, per stage, demo, a kept answer', async () => {
    const infer = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--infer', '--json', '--no-cache']);
    assert.equal(infer.code, 1);
    assert.ok(valid(infer.stdout)['boundary'] !== undefined);
    const perStage = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--per-stage', '--json', '--no-cache']);
    assert.equal(perStage.code, 0);
    assert.ok(valid(perStage.stdout)['stageReduction'] !== undefined);
    const demo = await runCli(['demo', '--json']);
    assert.equal(valid(demo.stdout)['demo'], true);
    const cache = join(dir, 'cache');
    const plan = join(dir, 'p.json');
    writeFileSync(plan, readFileSync(`${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`));
    await runCli(['verify', plan, '--json', '--cache', cache]);
    const kept = await runCli(['verify', plan, '--json', '--cache', cache]);
    assert.equal(kept.code, 1);
    const k = valid(kept.stdout);
    assert.ok(k['answerCache'] !== undefined && k['firstFailing'] !== undefined);
  });

  it('refuses what a report must never say: failing ranks on an undecided stage, a refutation without its first failing stage', async () => {
    const r = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--json', '--no-cache']);
    const j = valid(r.stdout);
    const stages = j['stages'] as Stage[];
    const undecided = { ...j, verdict: 'unknown', firstFailing: undefined, stages: stages.map((s) => (s.status === 'not_equivalent' ? { ...s, status: 'unknown' } : s)) };
    assert.equal(validate(JSON.parse(JSON.stringify(undecided))), false, 'failingRanks on an unknown stage');
    assert.equal(validate(JSON.parse(JSON.stringify({ ...j, firstFailing: undefined }))), false, 'not_equivalent without firstFailing');
    assert.equal(validate({ ...j, schemaVersion: 2 }), false, 'another schema version');
    assert.equal(validate({ ...j, surprise: 1 }), false, 'a field the schema does not describe');
  });
});
