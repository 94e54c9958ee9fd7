/**
 * Issue 35, deliver 4: the progress bar of gen, capture and import-graphs on a terminal (read in
 * tmux as it moves), none with --json or when stderr is not a terminal, and gen's one-line
 * summary. verify's bar: test/reports.test.ts.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './helpers.js';
import { FULL, needs, TOOLS } from './optional.js';
import { watchPane } from './tmux.js';

const CLI = join(ROOT, 'dist', 'cli', 'main.js');
/** The megatron import fixture with the most graphs and ops (5 graphs, 1,215 ATen ops). */
const IMPORT_DIR = join(ROOT, 'test', 'fixtures', 'megatron-fx', 'gpt_tp4_l2');
/** gen's summary line (cli/gen.ts). */
const SUMMARY = /planproof: gen: wrote \S+ \([0-9.]+ [kM]B\): \S+, \d+ ranks \([a-z]+ \d+(, [a-z]+ \d+)*\), \d+ programs?, \d+ logical ops, \d+ program ops, in [0-9.]+ s/;

/** (value, total, what) of every `label [bar] v/t steps | time | what` seen on the screens. */
function bars(label: string, screens: readonly string[]): { v: number; t: number; what: string }[] {
  const re = new RegExp(`${label} \\[[█░]+\\] (\\d+)/(\\d+) steps \\| (?:ETA \\S+|\\S+) \\| ([^\\n]*)`, 'g');
  return screens.flatMap((s) => [...s.matchAll(re)].map((m) => ({ v: Number(m[1]), t: Number(m[2]), what: (m[3] ?? '').trim() })));
}

/** The bar moved (at least two values, one partial) and ended full. */
function movedToEnd(label: string, screens: readonly string[]): { v: number; t: number; what: string }[] {
  const seen = bars(label, screens);
  assert.ok(seen.length > 0, `no ${label} bar on the terminal:\n${screens.join('\n---\n')}`);
  const values = [...new Set(seen.map((b) => b.v))];
  assert.ok(values.length >= 2, `the bar did not move: ${values.join(', ')}`);
  const last = seen[seen.length - 1] as { v: number; t: number };
  assert.ok(values.some((v) => v > 0 && v < last.t), `the bar never showed a partial count: ${values.join(', ')}`);
  assert.equal(last.v, last.t, 'the bar ends full');
  return seen;
}

describe('progress bars of gen, capture and import-graphs (issue 35, deliver 4)', function () {
  this.timeout(300_000);
  let dir = '';
  // The bars appear after 0.5 s of work; at 0 here, a fast machine's short run still shows one.
  // Each step is held 150 ms (PLANPROOF_BAR_PACE_MS) so the pane, sampled every 40 ms, sees a
  // partial count however fast the import is (CI once saw only 0 and 13).
  const run = `PLANPROOF_BAR_DELAY_MS=0 PLANPROOF_BAR_PACE_MS=150 ${process.execPath} ${CLI}`;
  before(function () {
    dir = mkdtempSync(join(tmpdir(), 'planproof-progress-'));
  });
  after(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  describe('on a terminal (tmux)', function () {
    before(function () {
      needs(this, TOOLS.tmux);
    });

    it('gen: the bar moves through the sides, programs and the write, then the summary line', async () => {
      const out = join(dir, 'demo.json');
      const screens = await watchPane('gen', `${run} gen --preset demo -o ${out}`);
      const seen = movedToEnd('generating', screens);
      const whats = seen.map((b) => b.what);
      assert.ok(whats.some((w) => /^logical graph: (forward|backward) of micro-batch 0/.test(w)), whats.join('\n'));
      assert.ok(whats.some((w) => /^program stage\d \(\d of \d\): /.test(w)), whats.join('\n'));
      assert.equal(whats[whats.length - 1], `wrote ${out}`);
      const last = screens[screens.length - 1] ?? '';
      assert.match(last.replace(/\n/g, ''), SUMMARY);
      assert.match(last, /DONE 0/);
      assert.equal((JSON.parse(readFileSync(out, 'utf8')) as { format: string }).format, 'planproof/v1');
    });

    it('gen --preset L2 (its slowest preset): the bar moves, without the test delay override @full', async () => {
      const moved = (s: string[]): boolean => new Set(bars('generating', s).map((b) => b.v)).size >= 3;
      const screens = await watchPane('genl2', `${process.execPath} ${CLI} gen --preset L2 -o ${join(dir, 'L2.json')}`, moved);
      const seen = bars('generating', screens);
      assert.ok(new Set(seen.map((b) => b.v)).size >= 3, seen.map((b) => b.v).join(', '));
      assert.ok((seen[0]?.t ?? 0) > 200, `L2: its 4 programs' 64 passes each: ${seen[0]?.t ?? 0} steps`);
    });

    it('import-graphs: files parsed, programs lowered, then checked and written', async () => {
      const out = join(dir, 'imported.json');
      const screens = await watchPane('import', `${run} import-graphs --dir ${IMPORT_DIR} -o ${out}`);
      const seen = movedToEnd('importing', screens);
      // 5 files, 5 programs, assembled, checked, written.
      assert.equal(seen[0]?.t, 13);
      const whats = seen.map((b) => b.what);
      assert.ok(whats.some((w) => /^(parsing \S+\.py|lowering (the logical|rank \d's) program)$/.test(w)), whats.join('\n'));
      assert.match((screens[screens.length - 1] ?? '').replace(/\n/g, ''), /planproof: imported 1215 ATen ops from 5 graphs .*DONE 0/);
    });

    it('capture: the 1-process run, the ranks of the 2-process run, then the import, on one bar @full', async function () {
      needs(this, TOOLS.torch);
      const out = join(dir, 'tp.json');
      const screens = await watchPane('capture', `${run} capture --nproc 2 --out ${out} -- ${join(ROOT, 'examples', 'torch', 'tp_mlp.py')}`);
      const seen = movedToEnd('capturing', screens);
      const whats = seen.map((b) => b.what);
      assert.ok(whats.includes('spawning and tracing the 1-process run'), whats.join('\n'));
      assert.ok(whats.some((w) => /^spawning and tracing the 2-process run: [01] of 2 ranks traced$/.test(w)), whats.join('\n'));
      assert.ok(whats.some((w) => /^(parsing|lowering) /.test(w)), whats.join('\n'));
      const last = (screens[screens.length - 1] ?? '').replace(/\n/g, '');
      assert.match(last, /planproof: captured .*tp_mlp\.py on 1 and 2 process\(es\).*planproof: imported .*DONE 0/);
    });

    it('no bar with --json on a terminal', async () => {
      const screens = await watchPane('genjson', `${run} gen --preset demo --json -o ${join(dir, 'j.json')}`);
      assert.match(screens[screens.length - 1] ?? '', /DONE 0/);
      assert.ok(screens.every((s) => !s.includes('generating [')), screens.join('\n---\n'));
      // The summary is one JSON object instead.
      assert.match((screens[screens.length - 1] ?? '').replace(/\n/g, ''), /\{"out":"[^"]+j\.json","name":"[^"]+","ranks":\d+/);
    });
  });

  describe('stderr not a terminal', function () {
    const piped = (args: string[]): { status: number | null; stderr: string } =>
      spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, PLANPROOF_BAR_DELAY_MS: '0' } });
    const noBar = (label: string, stderr: string): void => {
      assert.ok(!stderr.includes('\r') && !stderr.includes('\u001b['), 'no carriage return or escape sequence');
      assert.ok(!stderr.includes(`${label} [`), stderr);
    };

    it('gen prints its summary line and no bar', () => {
      const r = piped(['gen', '--preset', 'demo', '-o', join(dir, 'p.json')]);
      assert.equal(r.status, 0, r.stderr);
      noBar('generating', r.stderr);
      assert.equal(r.stderr.split('\n').filter((l) => l !== '').length, 1, r.stderr);
      assert.match(r.stderr, SUMMARY);
    });

    it('import-graphs prints its summary and no bar', () => {
      const r = piped(['import-graphs', '--dir', IMPORT_DIR, '-o', join(dir, 'p-import.json')]);
      assert.equal(r.status, 0, r.stderr);
      noBar('importing', r.stderr);
      assert.match(r.stderr, /^planproof: imported 1215 ATen ops/);
    });

    it(`capture prints its lines and no bar${FULL}`, function () {
      needs(this, TOOLS.torch);
      const r = piped(['capture', '--nproc', '2', '--out', join(dir, 'p-tp.json'), '--', join(ROOT, 'examples', 'torch', 'tp_mlp.py')]);
      assert.equal(r.status, 0, r.stderr);
      noBar('capturing', r.stderr);
      assert.match(r.stderr, /^planproof: captured .*\nplanproof: imported /);
    });
  });
});
