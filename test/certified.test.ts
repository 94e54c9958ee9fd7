/**
 * Certified witnesses for differences under the numeric tolerance: an optimizer eps of 1.1e-8
 * on the ranks against 1e-8 in the logical step changes the update by about 1e-13, which no
 * draw shows above the tolerance; the exact engine finds the difference and interval arithmetic
 * (stages/engines/interval.ts) separates the two sides, so the plan is NOT EQUIVALENT with a witness,
 * on the whole-plan path and per stage. Its twins: the same change on both sides verifies, and
 * a change too small for the intervals to separate stays "unknown", never a refutation.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { FULL } from './optional.js';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import { numericCheck } from '../stages/witness/numeric.js';
import { decompose, type StageResult } from '../stages/decompose/prove.js';
import { openStageWitness } from '../stages/portfolio.js';
import { logicalOrder } from '../sdfg/execute.js';

interface RawOp {
  id: string;
  inputs: string[];
  attrs?: Record<string, unknown>;
}
interface Raw {
  logical: { ops: RawOp[] };
  parallel: { programs: { ops: RawOp[] }[] };
}
interface Witness {
  parallel: number;
  expected: number;
  certified?: { parallel: [number, number]; logical: [number, number] };
}
interface Report {
  verdict: string;
  stages: { logical: string; status: string; reason?: string; witness?: Witness[] }[];
}

describe('certified witnesses under the numeric tolerance', function () {
  this.timeout(300_000);
  let dir: string;
  let base: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-certified-'));
    const f = join(dir, 'base.json');
    const g = await runCli(['gen', '--preset', 'llama-tiny', '--out', f]);
    assert.equal(g.code, 0, g.stderr);
    base = readFileSync(f, 'utf8');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** The plan with adam eps of `l0.attn.k` set to `v` on the ranks (and in the logical step when `both`). */
  function plan(v: string, both = false): string {
    const raw = JSON.parse(base) as Raw;
    const lists = [...(both ? [raw.logical.ops] : []), ...raw.parallel.programs.map((p) => p.ops)];
    let n = 0;
    for (const ops of lists)
      for (const o of ops)
        if (o.id === 'l0.attn.k.new' && o.attrs !== undefined) {
          o.attrs['eps'] = v;
          n++;
        }
    assert.ok(n > 0);
    const f = join(dir, `p-${v.replace('/', '_')}-${both}.json`);
    writeFileSync(f, JSON.stringify(raw));
    return f;
  }

  for (const mode of [[], ['--per-stage']]) {
    it(`refutes eps 1.1e-8 against 1e-8 with a certified witness${mode.length > 0 ? ` per stage${FULL}` : ''}`, async () => {
      const r = await runCli(['verify', plan('11/1000000000'), '--no-cache', '--json', ...mode]);
      assert.equal(r.code, 1, r.stdout.slice(-2000));
      const rep = JSON.parse(r.stdout) as Report;
      const s = rep.stages.find((x) => x.status === 'not_equivalent');
      assert.equal(s?.logical, 'l0.attn.k.new');
      const w = s?.witness?.[0];
      assert.ok(w?.certified !== undefined, 'the witness is certified');
      const [pl, ph] = w.certified.parallel;
      const [ll, lh] = w.certified.logical;
      assert.ok(ph < ll || lh < pl, 'the two enclosures are disjoint');
      // Under the tolerance: the midpoints agree to about 1e-12.
      assert.ok(Math.abs(w.parallel - w.expected) < 1e-9);
    });
  }

  it('verifies the same change made on both sides', async () => {
    const r = await runCli(['verify', plan('11/1000000000', true), '--no-cache']);
    assert.equal(r.code, 0, r.stdout.slice(-2000));
  });

  it('a one-sided edit inside a stage past the normal form is refuted by a certified witness; stages after it get a brief deadline, the open ones in one line @full', async () => {
    // llama with zig-zag CP (keys and values all-gathered): the silu gradient reads the SwiGLU
    // output instead of the gate's linear. The stage is past the normal form at full shapes
    // (the edit ties dims shape reduction needs); it took 170 s before the certificate.
    const f = join(dir, 'cp.json');
    const g = await runCli(['gen', '--preset', 'llama-tiny', '--dp', '1', '--tp', '1', '--micro', '1', '--cp', '2', '--seq', '4', '--cp-comm', 'allgather', '--out', f]);
    assert.equal(g.code, 0, g.stderr);
    const raw = JSON.parse(readFileSync(f, 'utf8')) as Raw;
    let n = 0;
    for (const o of raw.parallel.programs.flatMap((p) => p.ops))
      if (o.id === 'grad/l0/silu_backward') {
        o.inputs[1] = 'l0/swiglu';
        n++;
      }
    assert.equal(n, 1);
    const m = join(dir, 'cp-silu-input.json');
    writeFileSync(m, JSON.stringify(raw));
    const r = await runCli(['verify', m, '--no-cache', '--json']);
    assert.equal(r.code, 1, r.stdout.slice(-2000));
    const rep = JSON.parse(r.stdout) as Report;
    const i = rep.stages.findIndex((x) => x.status === 'not_equivalent');
    const s = rep.stages[i];
    assert.equal(s?.logical, 'grad/l0/silu_backward');
    assert.match(s?.reason ?? '', /certified witness \(interval arithmetic at seed 1, no normal form\)/);
    assert.ok((s?.witness?.length ?? 0) > 0, 'the numeric witness is shown');
    // Before it: proved (the first failing stage is named honestly); after it: proved or left open.
    assert.ok(rep.stages.slice(0, i).every((x) => x.status === 'proved'));
    const open = rep.stages.slice(i + 1).filter((x) => x.status !== 'proved');
    assert.ok(open.every((x) => x.status === 'unknown' && /^left open: the plan is already refuted at stage \d+ \(a certified witness\)/.test(x.reason ?? '')));
    // The text report collapses them into one line. (How many later stages prove within their
    // 2 s varies between runs; a deadline of 0.2 s leaves some open in every run.)
    const t = await runCli(['verify', m, '--no-cache', '--deadline', '0.2']);
    assert.equal(t.code, 1, t.stdout.slice(-2000));
    assert.match(t.stdout, /\.\.\. \d+ later stage\(s\) left open: the plan is already refuted/);
    assert.doesNotMatch(t.stdout, /why unknown: left open/);
  });

  it('leaves a change too small to separate unknown, never refuted without a witness @full', async () => {
    const r = await runCli(['verify', plan('100000001/10000000000000000'), '--no-cache', '--json']);
    assert.equal(r.code, 3, r.stdout.slice(-2000));
    const rep = JSON.parse(r.stdout) as Report;
    assert.equal(rep.verdict, 'unknown');
    assert.ok(rep.stages.every((x) => x.status !== 'not_equivalent'));
  });
});

describe('open stages with no witness at the first draw: other draws, certified (openStageWitness)', () => {
  // y = max(x - 1/2, 0) on one element; the ranks double it. At seed 1 x < 1/2, so both sides
  // are 0 and every claim agrees; a later uniform draw has x > 1/2.
  function gated(bug: boolean): LoadedPlan {
    const pre = [{ id: 'h', op: 'scale', inputs: ['one'], outputs: ['h'], attrs: { factor: '1/2' } }, { id: 'd', op: 'sub', inputs: ['x', 'h'], outputs: ['d'] }];
    const c = (id: string, v: number): object => ({ id, shape: [], role: 'input', dtype: 'int64', values: { range: [v, v + 1] } });
    const plan = {
      format: 'planproof/v1',
      name: 'gated',
      mesh: { axes: [{ name: 'dp', size: 1 }] },
      logical: {
        tensors: [{ id: 'x', shape: [1], role: 'input' }, c('z', 0), c('one', 1), { id: 'h', shape: [], role: 'activation' }, { id: 'd', shape: [1], role: 'activation' }, { id: 'y', shape: [1], role: 'output' }],
        ops: [...pre, { id: 'r', op: 'maximum', inputs: ['d', 'z'], outputs: ['y'] }],
      },
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [{ id: 'x', shape: [1], lineage: { logical: 'x' } }, { id: 'z', shape: [], lineage: { logical: 'z' } }, { id: 'one', shape: [], lineage: { logical: 'one' } }, { id: 'h', shape: [] }, { id: 'd', shape: [1] }, { id: 'r0', shape: [1] }, { id: 'y', shape: [1], lineage: { logical: 'y' } }],
            ops: [...pre, { id: 'r', op: 'maximum', inputs: ['d', 'z'], outputs: ['r0'] }, { id: 's', op: 'scale', inputs: ['r0'], outputs: ['y'], attrs: { factor: bug ? 2 : 1 } }],
          },
        ],
      },
      contract: { inputs: ['x', 'z', 'one'], outputs: ['y'] },
    };
    return loadPlanObject('gated.json', plan);
  }
  const openResults = (p: LoadedPlan): StageResult[] => decompose(p, logicalOrder(p)).map((s) => ({ stage: s, status: 'unknown', reason: 'the stage is too large for the exact normal form', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 }));

  it('refutes the open stage at the draw that shows it, with a certificate, and reports that draw', () => {
    const p = gated(true);
    const first = numericCheck(p, 1);
    assert.deepEqual(first.failingTensors, [], 'seed 1 shows nothing');
    const f = openStageWitness(p, openResults(p), first);
    assert.ok(f !== undefined);
    const r = f.results.find((x) => x.status === 'differs');
    assert.match(r?.reason ?? '', /^certified witness \(interval arithmetic at seed (\d+), no normal form\)/);
    assert.notEqual(f.numeric.seed, 1);
    assert.ok(f.numeric.failingTensors.includes('y'));
  });

  it('its twin (no doubling) stays open: no draw differs, nothing is refuted', () => {
    const p = gated(false);
    assert.equal(openStageWitness(p, openResults(p), numericCheck(p, 1)), undefined);
  });
});
