import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXAMPLES, ROOT, runCli } from './helpers.js';

describe('cli', () => {
  it('verify proves a correct plan and exits 0', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`]);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /VERIFIED: all 11 stages proved equivalent/);
  });
  it('verify --json reports the verdict, the stages and the numeric run', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-tp2.json`, '--json']);
    assert.equal(r.code, 0);
    const j = JSON.parse(r.stdout) as { verdict: string; stages: { status: string }[]; numeric: { evaluated: boolean; mismatches: number } };
    assert.equal(j.verdict, 'verified');
    assert.equal(j.stages.length, 14);
    assert.ok(j.stages.every((s) => s.status === 'proved'));
    assert.deepEqual([j.numeric.evaluated, j.numeric.mismatches], [true, 0]);
  });
  it('verify refutes a buggy plan with witness values and exits 1', async () => {
    const r = await runCli(['verify', `${EXAMPLES}buggy/mlp-dp2-missing-grad-allreduce.json`]);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /w1_new +sgd_w1 \(sgd_update\) +0,1 +NOT EQUIVALENT/);
    assert.match(r.stdout, /witness: rank 0 'w1_new' holds -?[0-9.]+ where logical w1_new\[0, 0\] = -?[0-9.]+/);
    // (stages/witness/diagnose.ts: the avg over the ranks is the logical value, so that all-reduce is missing)
    assert.match(r.stdout, /rank\(s\) 0, 1 each hold their own partial value of 'w1_new': the avg over ranks 0, 1 is the logical value, so an all-reduce \(avg\) over those ranks is missing/);
    assert.match(r.stdout, /NOT EQUIVALENT: stage 11 \(w1_new, op 'sgd_w1'\) is the first failing stage/);
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
  it('demo verifies the embedded example and exits 0', async () => {
    const r = await runCli(['demo']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /mlp-tp2/);
    assert.match(r.stdout, /VERIFIED: all 14 stages proved/);
  });
  it('usage errors exit 4, never 1 (1 means not equivalent)', async () => {
    assert.equal((await runCli(['frobnicate'])).code, 4);
    assert.equal((await runCli(['verify'])).code, 4);
    assert.equal((await runCli([])).code, 4);
  });
  it('refuses a bad command line before any work: nothing but the usage error on stdout (issue 13, defect 1)', async () => {
    // Before the fix, the whole proof ran and a complete "verified" report reached stdout
    // before the exit 4 for the unknown option.
    for (const extra of [['--bogus'], ['--engine', 'foo'], ['--seed', 'abc'], ['--jobs', '-1'], ['--jobs', '1.5'], ['--deadline', '0']]) {
      const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, ...extra, '--json']);
      assert.equal(r.code, 4, extra.join(' '));
      const j = JSON.parse(r.stdout) as { verdict: string; error: string };
      assert.equal(j.verdict, 'usage_error', extra.join(' '));
      assert.doesNotMatch(r.stdout, /verified|stages/);
      const t = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, ...extra]);
      assert.equal(t.code, 4);
      assert.equal(t.stdout, '', extra.join(' '));
      assert.match(t.stderr, /planproof: .*(Unknown argument|Invalid values|must be)/);
    }
    // gen with an unknown option writes no plan to stdout.
    const g = await runCli(['gen', '--outfile', '/tmp/never-written.json']);
    assert.equal(g.code, 4);
    assert.equal(g.stdout, '');
  });
  it('gen -o is --out: the plan goes to the file, nothing to stdout (issue 13, defect 6)', async () => {
    const { mkdtempSync, readFileSync: read } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const f = `${mkdtempSync(`${tmpdir()}/pp-`)}/g.json`;
    const g = await runCli(['gen', '--preset', 'mlp-tiny', '-o', f]);
    assert.equal(g.code, 0, g.stderr);
    assert.equal(g.stdout, '');
    assert.equal((JSON.parse(read(f, 'utf8')) as { format: string }).format, 'planproof/v1');
  });
  it('input-size limits are exit-2 errors naming the JSON path and the flag that raises them (issue 13, defect 4)', async () => {
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const plan = `${EXAMPLES}mlp-dp2.json`;
    const cases: [string[], RegExp][] = [
      [['--max-ops', '30'], /\$\.parallel\.programs: the plan has 31 ops as written; the limit is 30 \(--max-ops raises it/],
      [['--max-claims', '17'], /\$\.parallel\.programs: the plan has 18 lineage claims as written; the limit is 17 \(--max-claims raises it/],
      [['--max-depth', '4'], /\$\.parallel\.programs\[0\]\.\w+(\[\d+\])?\S*: nested deeper than 4 levels \(the limit; --max-depth raises it\)/],
      [['--max-file-mb', '0.01'], /plan file is 11860 bytes; the limit is 10485 bytes \(--max-file-mb raises it/],
    ];
    for (const [flags, re] of cases) {
      const r = await runCli(['inspect', plan, ...flags]);
      assert.equal(r.code, 2, flags.join(' '));
      assert.match(r.stderr, re);
      const j = await runCli(['verify', plan, ...flags, '--json']);
      assert.equal(j.code, 2);
      assert.equal((JSON.parse(j.stdout) as { verdict: string }).verdict, 'invalid');
    }
    // At the limit the plan loads; limits are per run (the next run has the defaults again).
    assert.equal((await runCli(['inspect', plan, '--max-ops', '31', '--max-claims', '18', '--max-depth', '8'])).code, 0);
    assert.equal((await runCli(['inspect', plan])).code, 0);
    // A small plan padded past the file limit is refused before it is parsed; the flag raises it.
    const padded = `${mkdtempSync(`${tmpdir()}/pp-`)}/padded.json`;
    writeFileSync(padded, `{${' '.repeat(2 << 20)}${readFileSync(plan, 'utf8').slice(1)}`);
    const big = await runCli(['inspect', padded, '--max-file-mb', '1']);
    assert.equal(big.code, 2);
    assert.match(big.stderr, /the limit is 1 MiB \(--max-file-mb raises it/);
    assert.equal((await runCli(['inspect', padded, '--max-file-mb', '3'])).code, 0);
    // Bad limit values are usage errors, refused before any work.
    for (const bad of [['--max-ops', '0'], ['--max-claims', '1.5'], ['--max-depth', '100000'], ['--max-file-mb', 'abc']]) {
      const u = await runCli(['verify', plan, ...bad, '--json']);
      assert.equal(u.code, 4, bad.join(' '));
      assert.equal((JSON.parse(u.stdout) as { verdict: string }).verdict, 'usage_error');
    }
  });
  it('a rational attribute with a zero denominator is an invalid plan naming its JSON path (issue 13, defect 2)', async () => {
    const { readFileSync, writeFileSync, mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const f = `${mkdtempSync(`${tmpdir()}/pp-`)}/lr0.json`;
    writeFileSync(f, readFileSync(`${EXAMPLES}mlp-dp2-explicit.json`, 'utf8').replace(/"lr": "1\/10"/g, '"lr": "1/0"'));
    const r = await runCli(['verify', f]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /\$\.logical\.ops\[12\] op 'sgd_w1' \(sgd_update\): attrs\.lr must be a number or an exact rational string/);
    assert.doesNotMatch(r.stderr, /internal error/);
  });
  it('a gradient averaged where a sum was due is diagnosed as the all-reduce\'s wrong reduce op, not a missing reduction (issue 13, defect 5; issue 35)', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const f = `${mkdtempSync(`${tmpdir()}/pp-`)}/avg.json`;
    assert.equal((await runCli(['gen', '--preset', 'gpt2-tiny', '--inject', 'dp-grad-allreduce-avg', '--out', f])).code, 0);
    const r = await runCli(['verify', f, '--json', '--jobs', '0']);
    assert.equal(r.code, 1);
    const j = JSON.parse(r.stdout) as { stages: { status: string; diagnosis?: string }[] };
    const first = j.stages.find((s) => s.status === 'not_equivalent');
    assert.match(first?.diagnosis ?? '', /\(all_reduce over ranks [0-9, ]+\) reduces with 'avg' where 'sum' is due/);
  }).timeout(120_000);
  it('report columns stay aligned when an op label is long (issue 13, defect 6)', async () => {
    const { readFileSync, writeFileSync, mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const f = `${mkdtempSync(`${tmpdir()}/pp-`)}/long.json`;
    const long = 'fc1_with_a_very_long_name_from_an_exporter_of_some_framework';
    writeFileSync(f, readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8').replace(/"fc1"/g, `"${long}"`));
    const r = await runCli(['verify', f, '--verbose']);
    assert.equal(r.code, 0, r.stderr);
    const rows = r.stdout.split('\n').filter((l) => /^ +\d+ \S+ +\S.* (proved|NOT EQUIVALENT|unknown)( \(.*\))*$/.test(l));
    assert.ok(rows.length >= 11);
    const col = (l: string): number => l.search(/ (proved|NOT EQUIVALENT|unknown)( \(.*\))*$/);
    assert.ok(rows.some((l) => l.includes('…')), 'the long label is cut');
    assert.equal(new Set(rows.map(col)).size, 1, rows.join('\n'));
  });
  it('reads a plan from standard input with -, and a UTF-8 byte order mark is accepted (issue 13, defect 6) @full', async () => {
    const bin = `${ROOT}dist/cli/main.js`;
    const text = readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8');
    const ok = spawnSync(process.execPath, [bin, 'inspect', '-'], { input: `\ufeff${text}`, encoding: 'utf8' });
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /mlp-dp2 +\(<stdin>\)/);
    const bad = spawnSync(process.execPath, [bin, 'inspect', '-'], { input: '{"format": 1}', encoding: 'utf8' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /<stdin>: \$\.format: unsupported plan format/);
  });
  it('gen --list-bugs --json prints the catalog as JSON (issue 13, defect 6)', async () => {
    const r = await runCli(['gen', '--list-bugs', '--json']);
    assert.equal(r.code, 0);
    const j = JSON.parse(r.stdout) as { id: string; kind: string; title: string }[];
    assert.ok(j.length >= 30 && j.every((b) => b.id.length > 0 && b.kind.length > 0 && b.title.length > 0));
  });
  it('a refuted plan does not spend a Z3 deadline on each later open stage (issue 13, defect 3)', async () => {
    // mlp-dp2 with the lineage of h and a swapped: refuted at stage 1; three later stages
    // differ without a witness and each went to Z3 for up to the 60 s deadline (85 s in all).
    const { writeFileSync, mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const p = JSON.parse(readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8')) as { parallel: { programs: { tensors: { id: string; lineage?: unknown }[] }[] } };
    const ts = p.parallel.programs[0]?.tensors ?? [];
    const h = ts.find((t) => t.id === 'h');
    const a = ts.find((t) => t.id === 'a');
    assert.ok(h !== undefined && a !== undefined);
    [h.lineage, a.lineage] = [a.lineage, h.lineage];
    const f = `${mkdtempSync(`${tmpdir()}/pp-`)}/swap.json`;
    writeFileSync(f, JSON.stringify(p));
    const r = await runCli(['verify', f, '--json', '--jobs', '0']);
    assert.equal(r.code, 1);
    const j = JSON.parse(r.stdout) as { stages: { index: number; logical: string; status: string; reason?: string }[] };
    assert.equal(j.stages.find((s) => s.status === 'not_equivalent')?.logical, 'h');
    const skipped = j.stages.filter((s) => /not sent to Z3: the plan is already refuted/.test(s.reason ?? ''));
    assert.ok(skipped.length > 0 && skipped.every((s) => s.status === 'unknown' && s.index > 1));
  }).timeout(60_000);
  it('verify says where the time went: phase timings in --json and a time line in the text (issue 13, defect 3)', async () => {
    const r = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--json', '--no-cache']);
    assert.equal(r.code, 0);
    const j = JSON.parse(r.stdout) as { ms: number; phases: Record<string, number>; timeLimit: { seconds: number; reached: boolean } };
    for (const k of ['load', 'reduction', 'decompose', 'numeric', 'tensorLevel', 'stages', 'witnessSearch', 'z3Fallback', 'perStageFallback']) assert.ok(Number.isInteger(j.phases[k]), `phase ${k}: ${JSON.stringify(j.phases)}`);
    const inProof = Object.entries(j.phases).filter(([k]) => k !== 'load' && k !== 'reduction').reduce((n, [, ms]) => n + ms, 0);
    // (20 ms, or 2% of a run slowed by a loaded machine: the gaps between phases are not phases)
    assert.ok(Math.abs(inProof - j.ms) <= Math.max(20, 0.02 * j.ms), `phases ${inProof} ms against ${j.ms} ms in all`);
    assert.deepEqual(j.timeLimit, { seconds: 1800, reached: false });
    const t = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--no-cache']);
    assert.match(t.stdout, /\ntime {8}(load|stages|numeric|reduction|\w+) \d+\.\d\d s|\ntime {8}every phase under 10 ms/);
    for (const bad of ['0', 'abc', '-5']) {
      const u = await runCli(['verify', `${EXAMPLES}mlp-dp2.json`, '--time-limit', bad, '--json']);
      assert.equal(u.code, 4);
      assert.match((JSON.parse(u.stdout) as { error: string }).error, /--time-limit must be a number of seconds/);
    }
  });
  it('the installed bin runs as a process with the documented exit codes', () => {
    const bin = `${ROOT}dist/cli/main.js`;
    const ok = spawnSync(process.execPath, [bin, 'verify', `${EXAMPLES}mlp-dp2.json`], { encoding: 'utf8' });
    assert.equal(ok.status, 0);
    const bad = spawnSync(process.execPath, [bin, 'verify', `${EXAMPLES}buggy/mlp-dp2-divergent-replica.json`], { encoding: 'utf8' });
    assert.equal(bad.status, 1);
    const missing = spawnSync(process.execPath, [bin, 'inspect', '/nonexistent/plan.json'], { encoding: 'utf8' });
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /\/nonexistent\/plan\.json: cannot read plan file \(ENOENT\)/);
    assert.doesNotMatch(missing.stderr, /at .*\.js:\d+/);
  });
  it('a large plan runs with a larger heap; running out of it is exit 4 without V8\'s trace (L3 clip-one-rank ended SIGABRT at 4 GB) @full', () => {
    const bin = `${ROOT}dist/cli/main.js`;
    const plan = join(mkdtempSync(join(tmpdir(), 'pp-heap-')), 'l1.json');
    assert.equal(spawnSync(process.execPath, [bin, 'gen', '--preset', 'L1', '-o', plan], { encoding: 'utf8' }).status, 0);
    // Supervised (as every plan file from 1 MiB on is): the child's output and code pass through.
    const direct = spawnSync(process.execPath, [bin, 'verify', `${EXAMPLES}mlp-dp2.json`, '--json'], { encoding: 'utf8' });
    const sup = spawnSync(process.execPath, [bin, 'verify', `${EXAMPLES}mlp-dp2.json`, '--json'], { encoding: 'utf8', env: { ...process.env, PLANPROOF_SUPERVISE_BYTES: '0', PLANPROOF_HEAP_MB: '2048' } });
    assert.equal(sup.status, direct.status);
    assert.equal((JSON.parse(sup.stdout) as { verdict: string }).verdict, (JSON.parse(direct.stdout) as { verdict: string }).verdict);
    // A heap too small for L1: the child dies of V8's out-of-memory abort.
    const oom = spawnSync(process.execPath, [bin, 'verify', plan, '--json'], { encoding: 'utf8', env: { ...process.env, PLANPROOF_SUPERVISE_BYTES: '0', PLANPROOF_HEAP_MB: '30' } });
    assert.equal(oom.status, 4, oom.stderr);
    assert.equal(oom.stdout, '');
    assert.match(oom.stderr, /internal error: the run stopped out of memory \(its heap is 30 MiB\) before a verdict/);
    assert.doesNotMatch(oom.stderr, /FATAL ERROR|Last few GCs|Native stack/);
  }).timeout(120_000);
  it('a process that stops before its verdict exits 4, never 0 or 1 (a fatal error in Z3\'s WebAssembly read as "not equivalent": issue 13)', () => {
    const bin = `${ROOT}dist/cli/main.js`;
    // Stand-ins for a module that ends the process mid-run, fired when the report is about to
    // be written (before main has returned its code): an exit with code 0 (would read
    // "verified") and an uncaught throw (exit 1: would read "not equivalent").
    for (const [hook, shown] of [
      ['process.stdout.write = () => process.exit(0);', /stopped before a verdict \(exit code 0\)/],
      ['process.stdout.write = () => { process.nextTick(() => { throw new Error("simulated abort"); }); return true; };', /internal error: simulated abort/],
    ] as const) {
      const r = spawnSync(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(hook)}`, bin, 'verify', `${EXAMPLES}mlp-dp2.json`], { encoding: 'utf8' });
      assert.equal(r.status, 4, r.stderr);
      assert.match(r.stderr, shown);
      assert.doesNotMatch(r.stderr, /at .*\.js:\d+/);
    }
  });
});
