/**
 * Issue 16's reports: JUnit XML validated against a JUnit schema (xmllint, Debian's
 * libxml2-utils), `planproof explain`, and the HTML report in headless Debian chromium
 * (playwright-core). Each test that needs one of these packages skips, naming it, where it is
 * absent (test/optional.ts; under CI=true it fails).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launchChromium } from '../bench/browser.js';
import { junitXml } from '../cli/junit.js';
import type { VerifyReport } from '../stages/report.js';
import { EXAMPLES, FIXTURES, ROOT, runCli } from './helpers.js';
import { needs, TOOLS } from './optional.js';
import { watchPane } from './tmux.js';

const dir = mkdtempSync(join(tmpdir(), 'planproof-reports-'));

/** xmllint's verdict on `file` against the JUnit schema: ok, and its messages. */
function validate(file: string): { ok: boolean; msg: string } {
  const r = spawnSync('xmllint', ['--noout', '--schema', `${FIXTURES}junit.xsd`, file], { encoding: 'utf8' });
  assert.equal(r.error, undefined, 'xmllint must be installed (bash tools/install-optional.sh)');
  return { ok: r.status === 0, msg: `${r.stdout}${r.stderr}` };
}

describe('JUnit XML report (--junit)', function () {
  this.timeout(300_000);

  it('the buggy example: a valid document whose failing stage carries the witness and diagnosis', async function () {
    needs(this, TOOLS.xmllint);
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
    const m = /<testcase classname="fc1_bwd_w \(matmul\)" name="g_w1 on ranks 0,1"[^>]*>\s*<failure type="not_equivalent" message="([^"]*)">([^<]*)<\/failure>/.exec(xml);
    assert.ok(m, xml);
    assert.match(m[1] ?? '', /reduces with &apos;avg&apos; where &apos;sum&apos; is due/);
    assert.match(m[2] ?? '', /witness: rank 0 &apos;g_w1&apos; holds 0\.00895788\d* where logical g_w1\[0, 0\]/);
    assert.match(m[2] ?? '', /parallel - logical = -1\/2\*/);
    // Proved stages pass: no outcome element.
    assert.match(xml, /<testcase classname="fc1 \(matmul\)" name="h on ranks 0,1" time="[0-9.]+"\/>/);
  });

  it('testcase names are the tensor and ranks (the op is the classname), never the stage number: the same across runs with --jobs 0 and 2 (issue 35)', async () => {
    const names = async (jobs: string): Promise<string[]> => {
      const f = join(dir, `jobs${jobs}.xml`);
      assert.equal((await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--junit', f, '--no-cache', '--jobs', jobs, '--no-tensor-level'])).code, 1);
      return [...readFileSync(f, 'utf8').matchAll(/<testcase classname="([^"]*)" name="([^"]*)"/g)].map((m) => `${m[1] ?? ''} / ${m[2] ?? ''}`);
    };
    const a = await names('0');
    const b = await names('2');
    assert.equal(a.length, 14);
    assert.deepEqual(b, a);
    assert.ok(a.includes('fc1_bwd_w (matmul) / g_w1 on ranks 0,1'), a.join('\n'));
    assert.ok(a.every((n) => !/#\d/.test(n)), 'no stage number in a name');
    assert.equal(new Set(a).size, a.length, 'names are unique in the suite');
    // Two stages of one tensor and op on the same ranks are told apart by their order.
    const twin: VerifyReport = {
      file: 'p.json', name: 'p', verdict: 'verified', summary: '', numeric: { evaluated: true, seed: 1, claimsChecked: 0, mismatches: 0 }, approximations: [], ms: 1,
      stages: [1, 2].map((index) => ({ index, logical: 'a', op: { id: 'mm', kind: 'matmul' }, ranks: [0, 1], status: 'proved' as const, failingRanks: [], logicalOps: 1, parallelOps: 2, ms: 1 })),
    };
    assert.deepEqual([...junitXml(twin).matchAll(/ name="(a on [^"]*)"/g)].map((m) => m[1]), ['a on ranks 0,1', 'a on ranks 0,1 (2)']);
  });

  it('a verified example: every stage a passing testcase, and the file is valid', async function () {
    needs(this, TOOLS.xmllint);
    const f = join(dir, 'ok.xml');
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2tp2.json`, '--junit', f, '--no-cache']);
    assert.equal(r.code, 0);
    assert.ok(validate(f).ok);
    const xml = readFileSync(f, 'utf8');
    assert.match(xml, /failures="0" errors="0" skipped="0"/);
    assert.doesNotMatch(xml, /<failure|<skipped/);
  });

  it('unknown stages are <skipped> with the reason; special characters are escaped; a plan-level unknown is not a green suite', function () {
    needs(this, TOOLS.xmllint);
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
    assert.match(xml, /<testcase classname="\(contract input\)" name="b&lt;1&gt; on ranks 0-3"[^>]*>\s*<skipped message="unknown: side condition not discharged: x &amp; y != 0">/);
    assert.match(xml, /skipped="1"/);
    // Every stage proved yet the verdict is not "verified" (numeric evidence against it).
    const odd: VerifyReport = { ...base, stages: [base.stages[0] as VerifyReport['stages'][number]], summary: 'internal inconsistency' };
    writeFileSync(f, junitXml(odd));
    assert.ok(validate(f).ok);
    assert.match(readFileSync(f, 'utf8'), /tests="2" failures="0" errors="0" skipped="1"[\s\S]*name="plan verdict"[\s\S]*<skipped message="unknown: internal inconsistency"/);
  });

  it('an invalid plan: exit 2, and the JUnit file (valid) and HTML page say why', async function () {
    needs(this, TOOLS.xmllint);
    const plan = join(dir, 'invalid.json');
    writeFileSync(plan, JSON.stringify({ format: 'planproof/v1' }));
    const xmlFile = join(dir, 'invalid.xml');
    const htmlFile = join(dir, 'invalid.html');
    const r = await runCli(['verify', plan, '--junit', xmlFile, '--html', htmlFile]);
    assert.equal(r.code, 2);
    const v = validate(xmlFile);
    assert.ok(v.ok, v.msg);
    const xml = readFileSync(xmlFile, 'utf8');
    assert.match(xml, /errors="1"[\s\S]*<testcase classname="planproof" name="load"[^>]*>\s*<error type="invalid_plan" message="[^"]*invalid\.json: /);
    assert.match(readFileSync(htmlFile, 'utf8'), /<b>INVALID PLAN<\/b>/);
  });

  it('a JUnit reader reads it: junitparser (a parser CI report tools build on) sees the suite, the failure, the skips and the error', async function () {
    needs(this, TOOLS.junitparser);
    // Debian's python3-junitparser (.ci/run installs it): counts and outcomes as a CI system reads them.
    const read = (file: string): { suites: { name: string; tests: number; failures: number; errors: number; skipped: number; results: [string, string, string][] }[] } => {
      const py = [
        'import json, sys',
        'from junitparser import JUnitXml',
        'x = JUnitXml.fromfile(sys.argv[1])',
        'print(json.dumps({"suites": [{"name": s.name, "tests": s.tests, "failures": s.failures, "errors": s.errors, "skipped": s.skipped,',
        '  "results": [[c.name, type(c.result[0]).__name__, c.result[0].message or ""] for c in s if c.result]} for s in x]}))',
      ].join('\n');
      const r = spawnSync('/usr/bin/python3', ['-c', py, file], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      return JSON.parse(r.stdout) as ReturnType<typeof read>;
    };
    const buggy = join(dir, 'read-buggy.xml');
    assert.equal((await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--junit', buggy, '--no-cache'])).code, 1);
    const b = read(buggy);
    assert.equal(b.suites.length, 1);
    assert.deepEqual({ ...b.suites[0], results: undefined }, { name: 'mlp-dp2-loss-scale-twice', tests: 14, failures: 1, errors: 0, skipped: 0, results: undefined });
    assert.deepEqual(b.suites[0]?.results.map(([n, k]) => [n, k]), [['g_w1 on ranks 0,1', 'Failure']]);
    assert.match(b.suites[0]?.results[0]?.[2] ?? '', /reduces with 'avg' where 'sum' is due/);
    // Unknown stages are skips, an invalid plan an error.
    const unknown = join(dir, 'read-unknown.xml');
    writeFileSync(
      unknown,
      junitXml({
        file: 'p.json', name: 'p', verdict: 'unknown', summary: '1 of 2 stage(s) undecided',
        stages: [
          { index: 1, logical: 'a', ranks: [0], status: 'proved', failingRanks: [], logicalOps: 1, parallelOps: 1, ms: 1 },
          { index: 2, logical: 'b', ranks: [0], status: 'unknown', reason: 'too large', failingRanks: [0], logicalOps: 1, parallelOps: 1, ms: 1 },
        ],
        numeric: { evaluated: true, seed: 1, claimsChecked: 2, mismatches: 0 }, approximations: [], ms: 2,
      }),
    );
    const u = read(unknown).suites[0];
    assert.equal(u?.skipped, 1);
    assert.deepEqual(u?.results, [['b on ranks 0', 'Skipped', 'unknown: too large']]);
    const plan = join(dir, 'read-invalid.json');
    writeFileSync(plan, JSON.stringify({ format: 'planproof/v1' }));
    const inv = join(dir, 'read-invalid.xml');
    assert.equal((await runCli(['verify', plan, '--junit', inv])).code, 2);
    const e = read(inv).suites[0];
    assert.equal(e?.errors, 1);
    assert.equal(e?.results[0]?.[1], 'Error');
  });

  it('the schema check can fail: a testsuite without its counts, or a testcase with two outcomes, is refused', function () {
    needs(this, TOOLS.xmllint);
    const f = join(dir, 'bad.xml');
    writeFileSync(f, '<testsuites><testsuite name="x"><testcase classname="c" name="n"/></testsuite></testsuites>');
    assert.equal(validate(f).ok, false);
    writeFileSync(f, '<testsuites><testsuite name="x" tests="1" failures="1" errors="0"><testcase classname="c" name="n"><failure/><skipped/></testcase></testsuite></testsuites>');
    assert.equal(validate(f).ok, false);
  });
});

describe('planproof explain PLAN STAGE', function () {
  this.timeout(300_000);
  const buggy = `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`;

  it('a failing stage by index: ops side by side, relations, the first differing elements with terms, the witness', async () => {
    const r = await runCli(['explain', buggy, '13']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^stage 13 of 14: g_w1/);
    // The logical matmul and the parallel matmul + all-reduce on the same line block.
    assert.match(r.stdout, /matmul {2}fc1_bwd_w {2}g_w1 {4}x_t, d_h {2}\| {2}0 {5}matmul/);
    assert.match(r.stdout, /all_reduce\(reduce: avg\) {2}g_w1_sum {3}g_w1 {7}g_w1_part \(group dp \[0,1\]\)/);
    assert.match(r.stdout, /assumed input relations \(4; logical inputs: d_h, x_t\):\n {2}rank 0 'd_h' = d_h\[0:2, 0:4\] complete/);
    assert.match(r.stdout, /output relations to prove \(4\):[\s\S]*rank 1 'g_w1_part' = g_w1\[0:3, 0:4\] addend 1 of 2/);
    assert.match(r.stdout, /parallel {11}= 1\/2\*\(1\*d_h\[0\]\*x_t\[0\]/);
    assert.match(r.stdout, /logical {12}= 1\*\(1\*d_h\[0\]\*x_t\[0\]/);
    assert.match(r.stdout, /numeric witness[\s\S]*rank 0 'g_w1' holds 0\.0089578857 where logical g_w1\[0, 0\] = 0\.017915771/);
  });

  it('a stage by its logical tensor name is the same stage; a proved stage shows no differences', async () => {
    const byName = await runCli(['explain', buggy, 'g_w1']);
    const byIndex = await runCli(['explain', buggy, '13']);
    assert.equal(byName.stdout, byIndex.stdout);
    const ok = await runCli(['explain', buggy, 'h', '--json']);
    assert.equal(ok.code, 0);
    const j = JSON.parse(ok.stdout) as { status: string; differences: unknown[]; view: { index: number; logicalOps: { id: string }[] } };
    assert.equal(j.status, 'proved');
    assert.deepEqual(j.differences, []);
    assert.equal(j.view.index, 1);
    assert.deepEqual(j.view.logicalOps.map((o) => o.id), ['fc1']);
  });

  it('a stage that is not there: a clear error and exit 2', async () => {
    for (const [key, re] of [['99', /no stage 99: the plan has 14 stage\(s\), numbered 1 to 14/], ['0', /no stage 0/], ['nonesuch', /no stage named 'nonesuch'/], ['x', /logical tensor 'x' has no stage/]] as const) {
      const r = await runCli(['explain', buggy, key]);
      assert.equal(r.code, 2, key);
      assert.match(r.stderr, re);
      assert.equal(r.stdout, '');
    }
  });

  it('--dot writes a graph Graphviz lays out, the failing tensor highlighted', async () => {
    const f = join(dir, 'stage.dot');
    const r = await runCli(['explain', buggy, '13', '--dot', f]);
    assert.equal(r.code, 0);
    const dot = readFileSync(f, 'utf8');
    assert.match(dot, /subgraph cluster_logical/);
    assert.match(dot, /"cluster_rank_1"/);
    assert.match(dot, /"C:g_w1_sum" \[label="g_w1_sum\\nall_reduce\\nreduce: avg\\ngroup dp \[0,1\]"/);
    assert.match(dot, /"L:t:g_w1" \[label="g_w1", shape=ellipse, color="#c62828"/);
    const { Graphviz } = await import('@hpcc-js/wasm-graphviz');
    const svg = (await Graphviz.load()).dot(dot);
    assert.match(svg, /<svg/);
    assert.match(svg, /g_w1_sum/);
    // --dot alone: the graph on stdout.
    const s = await runCli(['explain', buggy, '13', '--dot']);
    assert.match(s.stdout, /^digraph "stage 13: g_w1" \{/);
  });
});

describe('HTML report (--html) in headless chromium', function () {
  this.timeout(300_000);
  let b: Awaited<ReturnType<typeof launchChromium>> | undefined;
  after(async () => {
    await b?.close();
  });

  it('the buggy example: loads without console errors, the failing stage drawn, the table filters and sorts', async function () {
    needs(this, TOOLS.chromium);
    const f = join(dir, 'buggy.html');
    const r = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, '--html', f, '--no-cache']);
    assert.equal(r.code, 1);
    const html = readFileSync(f, 'utf8');
    // Self-contained: nothing fetched (no src/href to another resource; links are in-page anchors).
    assert.doesNotMatch(html, /\b(src|href)="(?!#)/);
    assert.doesNotMatch(html, /https?:\/\/(?!www\.w3\.org\/)/);
    b = await launchChromium();
    const page = await b.ctx.newPage();
    const errors: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (q) => {
      if (!q.url().startsWith('file:')) errors.push(`network request: ${q.url()}`);
    });
    await page.goto(pathToFileURL(f).href);
    assert.match((await page.textContent('#verdict')) ?? '', /NOT EQUIVALENT: stage 13 \(g_w1/);
    // The failing stage's drawing: an SVG with both sides and the collective, the tensor highlighted.
    const svgText = (await page.textContent('#stage-13 .graph svg')) ?? '';
    for (const t of ['logical (one device)', 'rank 0', 'rank 1', 'g_w1_sum', 'all_reduce', 'fc1_bwd_w']) assert.ok(svgText.includes(t), t);
    assert.ok((await page.locator('#stage-13 .graph svg [stroke="#c62828"]').count()) > 0, 'the failing tensor is drawn red');
    // The bug itself on the all-reduce (issue 35): its reduce op and group; red only on the
    // failing g_w1 (logical and both ranks), not on the correct addends g_w1_part.
    for (const t of ['reduce: avg', 'group dp [0,1]']) assert.ok(svgText.includes(t), t);
    const red = await page.locator('#stage-13 .graph svg g.node.failing title').allTextContents();
    assert.deepEqual(red.sort(), ['L:t:g_w1', 'R0:t:g_w1', 'R1:t:g_w1']);
    assert.match((await page.textContent('#stage-13 table.witness')) ?? '', /0\.0089578857/);
    assert.match((await page.textContent('#stage-13 .diagnosis')) ?? '', /reduces with 'avg' where 'sum' is due/);
    assert.match((await page.textContent('#stage-13 pre.reason')) ?? '', /parallel - logical = -1\/2\*/);
    const visible = async (): Promise<string[]> => page.locator('#stages tbody tr:visible td:first-child').allTextContents();
    assert.equal((await visible()).length, 14);
    // Filter by status: proved off leaves the failing stage.
    await page.uncheck('input[name=status][value=proved]');
    assert.deepEqual(await visible(), ['13']);
    assert.equal(await page.textContent('#shown'), '1');
    await page.check('input[name=status][value=proved]');
    await page.fill('#filter-text', 'gelu');
    assert.deepEqual(await visible(), ['4', '11']);
    await page.fill('#filter-text', '');
    // Sort: the # column, descending on the second click.
    await page.click('#stages th:first-child');
    await page.click('#stages th:first-child');
    assert.equal((await visible())[0], '14');
    assert.deepEqual(errors, []);
  });

  it('a verified plan: no failing section, nothing drawn', async () => {
    const f = join(dir, 'ok.html');
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--html', f, '--no-cache']);
    assert.equal(r.code, 0);
    const html = readFileSync(f, 'utf8');
    assert.match(html, /<b>VERIFIED<\/b>/);
    assert.doesNotMatch(html, /<svg/);
  });
});

describe('progress bar on a terminal (tmux)', function () {
  this.timeout(300_000);
  const cli = join(ROOT, 'dist', 'cli', 'main.js');
  let plan = '';
  before(async function () {
    needs(this, TOOLS.tmux);
    // A generated plan of over 100 stages, proved element by element (no tensor level) on one worker.
    plan = join(dir, 'mlp4.json');
    assert.equal((await runCli(['gen', '--preset', 'mlp-tiny', '--layers', '4', '-o', plan])).code, 0);
  });

  const watch = watchPane;

  const env = `PLANPROOF_CACHE_DIR=${join(dir, 'cache')}`;
  const run = `${env} ${process.execPath} ${cli} verify`;

  it('a 100-stage plan on a TTY: the bar moves (stages decided / total, rate, ETA) to the end', async () => {
    await barMoves('tty', run);
  });

  it('the same under the large-plan heap supervisor (cli/heap.ts), whose child writes to a pipe @full', async () => {
    await barMoves('sup', `PLANPROOF_SUPERVISE_BYTES=0 ${run}`);
  });

  async function barMoves(name: string, cmd: string): Promise<void> {
    const screens = await watch(name, `${cmd} ${plan} --no-cache --no-tensor-level --jobs 1 > ${join(dir, `${name}.out`)}`);
    const seen = screens.flatMap((s) => [...s.matchAll(/proving stages \[[█░]+\] (\d+)\/(\d+) stages \| [0-9.]+ stages\/s \| ETA \S+/g)].map((m) => [Number(m[1]), Number(m[2])] as const));
    assert.ok(seen.length > 0, `no bar on the terminal:\n${screens.join('\n---\n')}`);
    const total = seen[0]?.[1] ?? 0;
    assert.ok(total >= 100, `${total} stages`);
    const values = [...new Set(seen.map(([v]) => v))];
    assert.ok(values.some((v) => v > 0 && v < total), `the bar never showed a partial count: ${values.join(', ')}`);
    assert.ok(values.length >= 2, `the bar did not move: ${values.join(', ')}`);
    assert.equal(seen[seen.length - 1]?.[0], total);
    assert.match(screens[screens.length - 1] ?? '', /DONE 0/);
    assert.match(readFileSync(join(dir, `${name}.out`), 'utf8'), /verdict {5}VERIFIED/);
  }

  /** The bar's (value, total) pairs seen on the screens. */
  const bars = (screens: string[]): (readonly [number, number])[] => screens.flatMap((s) => [...s.matchAll(/proving stages \[[█░]+\] (\d+)\/(\d+) stages \| [0-9.]+ stages\/s \| ETA \S+/g)].map((m) => [Number(m[1]), Number(m[2])] as const));

  it('the bar moves on a per-template L2 verify (proved in this thread at tensor level per template; watched until it has moved) @full', async () => {
    const l2 = join(dir, 'L2.json');
    assert.equal((await runCli(['gen', '--preset', 'L2', '-o', l2])).code, 0);
    const moved = (screens: string[]): boolean => new Set(bars(screens).map(([v]) => v)).size >= 3;
    const screens = await watch('tmpl', `${run} ${l2} --no-cache > ${join(dir, 'tmpl.out')}`, moved);
    const seen = bars(screens);
    const values = [...new Set(seen.map(([v]) => v))];
    assert.ok(values.length >= 3, `the bar did not move: ${values.join(', ')}`);
    assert.ok((seen[0]?.[1] ?? 0) > 10_000, `L2 has over 10,000 stages: ${seen[0]?.[1] ?? 0}`);
  }).timeout(600_000);

  it('the bar moves on verify --infer (a captured MoE plan with lineage only at its boundary)', async () => {
    const p = join(dir, 'moe.json');
    const imp = await runCli(['import-graphs', '--dir', join(ROOT, 'test', 'fixtures', 'capture', 'moe_top1'), '-o', p]);
    assert.equal(imp.code, 0, imp.stderr);
    const screens = await watch('infer', `${run} ${p} --infer --no-cache --jobs 1 > ${join(dir, 'infer.out')}`);
    const values = [...new Set(bars(screens).map(([v]) => v))];
    assert.ok(values.length >= 2, `the bar did not move: ${values.join(', ')}`);
    assert.match(readFileSync(join(dir, 'infer.out'), 'utf8'), /verdict {5}VERIFIED/);
  });

  it('no bar with --json on a TTY, nor when stderr is a pipe @full', async () => {
    const screens = await watch('json', `${run} ${plan} --no-cache --no-tensor-level --jobs 1 --json > ${join(dir, 'json.out')}`);
    assert.match(screens[screens.length - 1] ?? '', /DONE 0/);
    assert.ok(screens.every((s) => !s.includes('proving stages')), screens.join('\n---\n'));
    const piped = spawnSync(process.execPath, [cli, 'verify', plan, '--no-cache', '--no-tensor-level', '--jobs', '1'], { encoding: 'utf8', env: { ...process.env, PLANPROOF_CACHE_DIR: join(dir, 'cache') } });
    assert.equal(piped.status, 0);
    assert.equal(piped.stderr, '');
    assert.doesNotMatch(piped.stdout, /proving stages|\r/);
  });
});
