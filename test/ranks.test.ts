/**
 * Issue 32, items 2 and 3: on plans of a million ranks written per template, verify's cost is
 * bounded by the plan as written. A 1 KB plan of 2^20 ranks proved per template is VERIFIED in
 * seconds, an all-reduce over all of them included (one symbolic sum); what is still per rank
 * is refused past --max-ranks (exit 2), quickly; an invalid plan
 * of 2^20 ranks is refused within seconds, not after one issue per rank; and a group of 2^20
 * members no longer overflows the stack in the collective matcher (Math.max of a spread).
 * Real processes: the time and memory bound is what is tested. And item 5: --time-limit bounds
 * the whole run, start-up, loading and the per-template work included.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPlanText } from '../lineage/load.js';
import { logicalOrder } from '../sdfg/execute.js';
import { checkRunClock, setRunClock, TimeLimitReached } from '../stages/clock.js';
import { decompose } from '../stages/decompose/prove.js';
import { proveTensorLevel } from '../stages/engines/tensorlevel/prover.js';
import { verifiedPerTemplate } from '../stages/decompose/template-verify.js';
import { verifyPlan } from '../stages/verify.js';
import { EXAMPLES, ROOT, runCli } from './helpers.js';

const BIN = join(ROOT, 'dist', 'cli', 'main.js');
const N = 1 << 20;

/** x[n] -> y = -x (sharded over every axis), and with `sum`, s = sum(y) all-reduced over every axis. */
function plan(axes: [string, number][], sum: boolean): object {
  const n = axes.reduce((p, [, s]) => p * s, 1);
  const shard = axes.map(() => 'S(0)');
  const tensors: object[] = [
    { id: 'x', shape: [1], lineage: { logical: 'x', placements: shard } },
    { id: 'y', shape: [1], lineage: { logical: 'y', placements: shard } },
  ];
  const ops: object[] = [{ id: 'neg', op: 'neg', inputs: ['x'], outputs: ['y'] }];
  const lt: object[] = [
    { id: 'x', shape: [n], role: 'input', dtype: 'float32' },
    { id: 'y', shape: [n], role: 'output', dtype: 'float32' },
  ];
  const lops: object[] = [{ id: 'neg', op: 'neg', inputs: ['x'], outputs: ['y'] }];
  const outputs = ['y'];
  if (sum) {
    lt.push({ id: 's', shape: [], role: 'output', dtype: 'float32' });
    lops.push({ id: 'sum', op: 'sum', inputs: ['y'], outputs: ['s'] });
    tensors.push({ id: 's_part', shape: [], lineage: { logical: 's', placements: axes.map(() => 'P(sum)') } }, { id: 's', shape: [], lineage: { logical: 's', placements: axes.map(() => 'R') } });
    ops.push({ id: 'sum', op: 'sum', inputs: ['y'], outputs: ['s_part'] }, { id: 'ar', op: 'all_reduce', inputs: ['s_part'], outputs: ['s'], attrs: { reduce: 'sum' }, group: { axes: axes.map(([a]) => a) } });
    outputs.push('s');
  }
  return {
    format: 'planproof/v1',
    name: 'ranks',
    mesh: { axes: axes.map(([name, size]) => ({ name, size })) },
    logical: { tensors: lt, ops: lops },
    parallel: { programs: [{ name: 'all', ranks: 'all', tensors, ops }] },
    contract: { inputs: ['x'], outputs },
  };
}

type OpJ = { id: string; op: string; inputs: string[]; attrs?: object; group?: object };
type PlanJ = { parallel: { programs: { ops: OpJ[] }[] } };
const opsOf = (p: PlanJ): OpJ[] => (p.parallel.programs[0] as { ops: OpJ[] }).ops;
const arOf = (p: PlanJ): OpJ => opsOf(p).find((o) => o.op === 'all_reduce') as OpJ;

const dir = mkdtempSync(join(tmpdir(), 'planproof-ranks-'));
function file(name: string, p: object): string {
  const f = join(dir, name);
  writeFileSync(f, JSON.stringify(p));
  return f;
}

/** verify as a process under a wall-clock bound; its time and peak RSS (KB, from /proc via time). */
function timed(args: string[], ms: number): { status: number | null; stdout: string; stderr: string; ms: number } {
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [BIN, 'verify', ...args, '--no-cache'], { encoding: 'utf8', timeout: ms, killSignal: 'SIGKILL' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, ms: Date.now() - t0 };
}

describe('plans of a million ranks (issue 32)', function () {
  this.timeout(120_000);

  it('a 2^20-rank plan proved per template is VERIFIED within 10 s (it was killed at 120 s, 3.6 GB)', () => {
    const f = file('nocoll.json', plan([['dp', N]], false));
    assert.ok(readFileSync(f).length < 2048);
    const r = timed([f], 10_000);
    assert.equal(r.status, 0, `${r.ms} ms\n${r.stdout}${r.stderr}`);
    assert.match(r.stdout, /VERIFIED/);
  });

  it('its buggy twin (identity where neg is due) is NOT EQUIVALENT, refuted on one rank\'s part @full', () => {
    const p = plan([['dp', N]], false) as { parallel: { programs: { ops: object[]; tensors: object[] }[] } };
    const prog = p.parallel.programs[0] as { ops: object[]; tensors: object[] };
    prog.ops = [{ id: 'neg', op: 'identity', inputs: ['x'], outputs: ['y'] }];
    const r = timed([file('nocoll-bug.json', p)], 60_000);
    assert.equal(r.status, 1, r.stdout);
    assert.match(r.stdout, /NOT EQUIVALENT: stage 1 \(y, op 'neg'\)/);
  });

  const AXES8: [string, number][] = [...Array.from({ length: 7 }, (_, i): [string, number] => [`a${i}`, 2]), ['dp', 1 << 12]];

  it('a 2^20-rank all-reduce and an 8-axis mesh of 2^19 ranks are VERIFIED within 10 s: the group is one symbolic sum (was a stack overflow, exit 4)', () => {
    for (const [name, axes] of [['ar.json', [['dp', N]]], ['axes8.json', AXES8]] as [string, [string, number][]][]) {
      const r = timed([file(name, plan(axes, true))], 10_000);
      assert.equal(r.status, 0, `${name}: ${r.ms} ms\n${r.stdout}${r.stderr}`);
      assert.match(r.stdout, /VERIFIED: all 2 stages proved/);
    }
  });

  it('their buggy twins are never VERIFIED: what the symbolic sum does not take is per rank, refused past --max-ranks (exit 2) within 10 s @full', () => {
    const twins: [string, (p: PlanJ) => void, [string, number][]][] = [
      ['ar-avg.json', (p) => void ((arOf(p).attrs as Record<string, unknown>)['reduce'] = 'avg'), [['dp', N]]],
      ['ar-x.json', (p) => void (opsOf(p).find((o) => o.id === 'sum') as OpJ).inputs.splice(0, 1, 'x'), [['dp', N]]],
      ['axes8-sub.json', (p) => void ((arOf(p).group as { axes: string[] }).axes.splice(0, 1)), AXES8],
    ];
    for (const [name, edit, axes] of twins) {
      const p = plan(axes, true) as PlanJ;
      edit(p);
      const r = timed([file(name, p)], 10_000);
      assert.equal(r.status, 2, `${name}: ${r.ms} ms\n${r.stdout}${r.stderr}`);
      assert.match(r.stderr, /\$\.mesh: .* ranks.*--max-ranks 65,536/);
      assert.doesNotMatch(r.stdout + r.stderr, /VERIFIED|internal error|Maximum call stack/);
    }
  });

  it('at 2^13 ranks (past 4,096 members, still rank by rank) the symbolic sum agrees with the rank-by-rank proof on the plan and its twins @full', () => {
    const axes7: [string, number][] = [...Array.from({ length: 7 }, (_, i): [string, number] => [`a${i}`, 2]), ['dp', 64]];
    const cases: [string, (p: PlanJ) => void, [string, number][], boolean][] = [
      ['correct', () => undefined, [['dp', 1 << 13]], true],
      ['correct, 8 axes', () => undefined, axes7, true],
      ['avg', (p) => void ((arOf(p).attrs as Record<string, unknown>)['reduce'] = 'avg'), [['dp', 1 << 13]], false],
      ['sum of x', (p) => void (opsOf(p).find((o) => o.id === 'sum') as OpJ).inputs.splice(0, 1, 'x'), [['dp', 1 << 13]], false],
      ['group of 7 of 8 axes', (p) => void ((arOf(p).group as { axes: string[] }).axes.splice(0, 1)), axes7, false],
    ];
    for (const [what, edit, axes, ok] of cases) {
      const p = plan(axes, true) as PlanJ;
      edit(p);
      const lp = loadPlanText(`${what}.json`, JSON.stringify(p));
      const perRank = verifyPlan(lp);
      const perTemplate = verifiedPerTemplate(lp, { seed: 1 });
      assert.equal(perRank.verdict, ok ? 'verified' : 'not_equivalent', `${what}: ${perRank.summary}`);
      assert.equal(perTemplate?.verdict, ok ? 'verified' : undefined, what);
    }
  }).timeout(300_000);

  it('the same all-reduce at 2^12 ranks verifies, and --max-ranks is checked before any work', async () => {
    const small = file('ar12.json', plan([['dp', 1 << 12]], true));
    assert.equal((await runCli(['verify', small, '--no-cache'])).code, 0);
    const bad = await runCli(['verify', small, '--max-ranks', '0']);
    assert.equal(bad.code, 4);
    assert.match(bad.stderr + bad.stdout, /--max-ranks must be a positive integer/);
    const low = await runCli(['verify', small, '--no-cache', '--max-ranks', '1000']);
    assert.equal(low.code, 2);
  });

  it('an invalid mlp-tp2 with tp = 2^20 exits 2 within 5 s (it was not rejected within 120 s)', () => {
    const p = JSON.parse(readFileSync(`${EXAMPLES}mlp-tp2.json`, 'utf8')) as { mesh: { axes: { name: string; size: number }[] } };
    for (const a of p.mesh.axes) if (a.name === 'tp') a.size = N;
    const r = timed([file('tp2p20.json', p)], 5_000);
    assert.equal(r.status, 2, `${r.ms} ms\n${r.stderr}`);
    assert.match(r.stderr, /checking stopped there/);
  });
});

describe('the run\'s time limit bounds the whole run (issue 32)', function () {
  this.timeout(120_000);

  it('verify --time-limit 1 of the demo preset ends within 2 s, UNKNOWN (it ran 3.6 s to VERIFIED) @full', async () => {
    const f = join(dir, 'demo.json');
    assert.equal((await runCli(['gen', '--preset', 'demo', '-o', f])).code, 0);
    for (const limit of ['1', '0.5']) {
      const r = timed([f, '--time-limit', limit], 10_000);
      assert.ok(r.ms < 2000, `--time-limit ${limit}: ${r.ms} ms`);
      assert.equal(r.status, 3, r.stdout);
      assert.match(r.stdout, new RegExp(`UNKNOWN: stopped at the time limit \\(--time-limit ${limit}\\)`));
    }
    // Without a binding limit the same plan is verified: the limit, not the plan, decided.
    const full = timed([f], 60_000);
    assert.equal(full.status, 0, full.stdout);
  });

  it('past the clock the engine\'s loops throw, and per-stage error handlers pass it on', () => {
    const text = readFileSync(`${EXAMPLES}mlp-dp2tp2.json`, 'utf8');
    const p = loadPlanText('t.json', text);
    setRunClock({ endAt: performance.now() - 1, seconds: 1 });
    try {
      assert.throws(() => checkRunClock(), TimeLimitReached);
      // Loading is part of the run: the loader's phases check the same clock.
      assert.throws(() => loadPlanText('t.json', text), TimeLimitReached);
      assert.throws(() => proveTensorLevel(p, decompose(p, logicalOrder(p))), TimeLimitReached);
    } finally {
      setRunClock(undefined);
    }
    checkRunClock();
    assert.ok(proveTensorLevel(p, decompose(p, logicalOrder(p))).proved.size > 0);
  });
});
