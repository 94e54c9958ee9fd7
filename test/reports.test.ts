/**
 * Issue 16's report files: JUnit XML validated against a JUnit schema (xmllint, Debian's
 * libxml2-utils, which .ci/run installs).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { junitXml } from '../cli/junit.js';
import type { VerifyReport } from '../stages/report.js';
import { EXAMPLES, FIXTURES, runCli } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'planproof-reports-'));

/** xmllint's verdict on `file` against the JUnit schema: ok, and its messages. */
function validate(file: string): { ok: boolean; msg: string } {
  const r = spawnSync('xmllint', ['--noout', '--schema', `${FIXTURES}junit.xsd`, file], { encoding: 'utf8' });
  assert.equal(r.error, undefined, 'xmllint must be installed (apt-get install libxml2-utils; .ci/run does)');
  return { ok: r.status === 0, msg: `${r.stdout}${r.stderr}` };
}

describe('JUnit XML report (--junit)', function () {
  this.timeout(300_000);

  it('the buggy example: a valid document whose failing stage carries the witness and diagnosis', async () => {
    const f = join(dir, 'buggy.xml');
    const r = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--junit', f, '--no-cache']);
    assert.equal(r.code, 1);
    const v = validate(f);
    assert.ok(v.ok, v.msg);
    const xml = readFileSync(f, 'utf8');
    assert.equal((xml.match(/<testsuite /g) ?? []).length, 1);
    assert.equal((xml.match(/<testcase /g) ?? []).length, 14);
    assert.match(xml, /<testsuite name="mlp-dp2-loss-scale-twice" tests="14" failures="1" errors="0" skipped="0"/);
    // The failing testcase: classname is the logical op, name the tensor and ranks.
    const m = /<testcase classname="fc1_bwd_w \(matmul\)" name="#13 g_w1 on ranks 0,1"[^>]*>\s*<failure type="not_equivalent" message="([^"]*)">([^<]*)<\/failure>/.exec(xml);
    assert.ok(m, xml);
    assert.match(m[1] ?? '', /0\.5 x logical: a scaling bug/);
    assert.match(m[2] ?? '', /witness: rank 0 &apos;g_w1&apos; holds 0\.00895788\d* where logical g_w1\[0, 0\]/);
    assert.match(m[2] ?? '', /parallel - logical = -1\/2\*/);
    // Proved stages pass: no outcome element.
    assert.match(xml, /<testcase classname="fc1 \(matmul\)" name="#1 h on ranks 0,1" time="[0-9.]+"\/>/);
  });

  it('a verified example: every stage a passing testcase, and the file is valid', async () => {
    const f = join(dir, 'ok.xml');
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2tp2.json`, '--junit', f, '--no-cache']);
    assert.equal(r.code, 0);
    assert.ok(validate(f).ok);
    const xml = readFileSync(f, 'utf8');
    assert.match(xml, /failures="0" errors="0" skipped="0"/);
    assert.doesNotMatch(xml, /<failure|<skipped/);
  });

  it('unknown stages are <skipped> with the reason; special characters are escaped; a plan-level unknown is not a green suite', () => {
    const base: VerifyReport = {
      file: 'p.json',
      name: 'p <&> "q"',
      verdict: 'unknown',
      summary: '1 of 2 stage(s) undecided',
      stages: [
        { index: 1, logical: 'a', op: { id: 'mm', kind: 'matmul' }, ranks: [0, 1], status: 'proved', failingRanks: [], logicalOps: 1, parallelOps: 2, ms: 3 },
        { index: 2, logical: 'b<1>', ranks: [0, 1, 2, 3], status: 'unknown', reason: 'side condition not discharged: x & y != 0\u0001', failingRanks: [1], logicalOps: 1, parallelOps: 2, ms: 4 },
      ],
      numeric: { evaluated: true, seed: 1, claimsChecked: 2, mismatches: 0 },
      approximations: [],
      ms: 10,
    };
    const f = join(dir, 'unknown.xml');
    writeFileSync(f, junitXml(base));
    assert.ok(validate(f).ok, validate(f).msg);
    const xml = readFileSync(f, 'utf8');
    assert.match(xml, /<testcase classname="\(contract input\)" name="#2 b&lt;1&gt; on ranks 0-3"[^>]*>\s*<skipped message="unknown: side condition not discharged: x &amp; y != 0">/);
    assert.match(xml, /skipped="1"/);
    // Every stage proved yet the verdict is not "verified" (numeric evidence against it).
    const odd: VerifyReport = { ...base, stages: [base.stages[0] as VerifyReport['stages'][number]], summary: 'internal inconsistency' };
    writeFileSync(f, junitXml(odd));
    assert.ok(validate(f).ok);
    assert.match(readFileSync(f, 'utf8'), /tests="2" failures="0" errors="0" skipped="1"[\s\S]*name="plan verdict"[\s\S]*<skipped message="unknown: internal inconsistency"/);
  });

  it('the schema check can fail: a testsuite without its counts, or a testcase with two outcomes, is refused', () => {
    const f = join(dir, 'bad.xml');
    writeFileSync(f, '<testsuites><testsuite name="x"><testcase classname="c" name="n"/></testsuite></testsuites>');
    assert.equal(validate(f).ok, false);
    writeFileSync(f, '<testsuites><testsuite name="x" tests="1" failures="1" errors="0"><testcase classname="c" name="n"><failure/><skipped/></testcase></testsuite></testsuites>');
    assert.equal(validate(f).ok, false);
  });
});
