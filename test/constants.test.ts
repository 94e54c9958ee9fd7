/**
 * Constant elements (stages/engines/constants.ts): a stage whose claim holds only because one of
 * its inputs is identically a constant (a gradient that is exactly 0 at these shapes) is proved
 * with the constant substituted; a twin where the constant is not 0 (or not constant at all) is
 * refuted with a witness; values constant only at the drawn inputs are never taken as constants.
 */
import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan, verifyPlanInPool } from '../stages/verify.js';
import { formatReport } from '../stages/report.js';
import { provedConstants } from '../stages/engines/constants.js';
import { runCli } from './helpers.js';

/**
 * Logical: z = f(x) by `zOps`, y = z * w. Parallel (one rank): the same z, then y = z * `yReads`
 * (`w` is right; `x` and `v` are edits that only matter where z is not 0). With `v` (an input
 * y alone reads, logically y = z * (w + 0 * v)), z is no function of y's stage's other
 * inputs: only the constant elements say it is 0 (with `x`, the stage's retry computes z
 * from x, docs/engine.md "Inputs defined by their logical ops").
 */
function plan(zOps: object[], zTensors: object[], yReads: 'w' | 'x' | 'v'): unknown {
  const v = yReads === 'v';
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'dp', size: 1 }] },
    logical: {
      tensors: [{ id: 'x', shape: [3], role: 'input' }, { id: 'w', shape: [3], role: 'param' }, ...(v ? [{ id: 'v', shape: [3], role: 'param' }, { id: 'v0', shape: [3], role: 'activation' }, { id: 'wv', shape: [3], role: 'activation' }] : []), ...zTensors.map((t) => ({ ...t, role: 'activation' })), { id: 'z', shape: [3], role: 'activation' }, { id: 'y', shape: [3], role: 'output' }],
      ops: [...zOps, ...(v ? [{ id: 'v0', op: 'scale', inputs: ['v'], outputs: ['v0'], attrs: { factor: 0 } }, { id: 'wv', op: 'add', inputs: ['w', 'v0'], outputs: ['wv'] }] : []), { id: 'y', op: 'mul', inputs: ['z', v ? 'wv' : 'w'], outputs: ['y'] }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [3], lineage: { logical: 'x' } },
            { id: 'w', shape: [3], lineage: { logical: 'w' } },
            ...(v ? [{ id: 'v', shape: [3], lineage: { logical: 'v' } }] : []),
            ...zTensors,
            { id: 'z', shape: [3], lineage: { logical: 'z' } },
            { id: 'y', shape: [3], lineage: { logical: 'y' } },
          ],
          ops: [...zOps, { id: 'y', op: 'mul', inputs: ['z', yReads], outputs: ['y'] }],
        },
      ],
    },
    contract: { inputs: v ? ['x', 'w', 'v'] : ['x', 'w'], outputs: ['y'] },
  };
}

const T = [{ id: 'a', shape: [3] }, { id: 'b', shape: [3] }];
/** z = 2x - (x + x): 0 at every input, but only across two ops (a region, not one op). */
const ZERO = [
  { id: 'a', op: 'scale', inputs: ['x'], outputs: ['a'], attrs: { factor: 2 } },
  { id: 'b', op: 'add', inputs: ['x', 'x'], outputs: ['b'] },
  { id: 'z', op: 'sub', inputs: ['a', 'b'], outputs: ['z'] },
];
/** z = exp(2x - (x + x)) = 1 at every input. */
const ONE = [...ZERO.slice(0, 2), { id: 'd', op: 'sub', inputs: ['a', 'b'], outputs: ['d'] }, { id: 'z', op: 'exp', inputs: ['d'], outputs: ['z'] }];
/** z = 2x - x = x: not constant. */
const NOT = [ZERO[0] as object, { id: 'b', op: 'identity', inputs: ['x'], outputs: ['b'] }, ZERO[2] as object];
/** z = x / x: 1 wherever defined, but the division by x is not provably nonzero. */
const DIV = [{ id: 'z', op: 'div', inputs: ['x', 'x'], outputs: ['z'] }];
/** z = max(x, 5): 5 at every input the witness draws (in [-1, 1]), not at every input. */
const MAXC = [
  { id: 'f', op: 'scale', inputs: ['x'], outputs: ['a'], attrs: { factor: 0 } },
  { id: 'g', op: 'add', inputs: ['a', 'x'], outputs: ['b'] },
  { id: 'five', op: 'exp', inputs: ['a'], outputs: ['c'] },
  { id: 'z', op: 'maximum', inputs: ['b', 'c'], outputs: ['z'] },
];

describe('constant elements: stages whose input is identically a constant', () => {
  it('y = z * v for y = z * w, where z = 2x - (x + x) = 0: VERIFIED only with the constant; the stage alone cannot see it', () => {
    const p = loadPlanObject('zero.json', plan(ZERO, T, 'v'));
    const c = provedConstants(p);
    const z = p.logical.tensors.id('z');
    assert.deepEqual([...(c.get(z) ?? new Map()).entries()], [[0, '0/1'], [1, '0/1'], [2, '0/1']]);
    const r = verifyPlan(p);
    assert.equal(r.verdict, 'verified', r.summary);
    // Reading x instead, z is a function of the stage's other input: its normal form proves it.
    const rx = verifyPlan(loadPlanObject('zero-x.json', plan(ZERO, T, 'x')));
    assert.equal(rx.verdict, 'verified', rx.summary);
    assert.equal(rx.stages.find((s) => s.logical === 'y')?.decidedBy, 'normal');
  });

  it('the report names the record that proved y (`constants`), in verifyPlan and in the pool path alike', async () => {
    const raw = plan(ZERO, T, 'v');
    const p = loadPlanObject('zero.json', raw);
    const lib = verifyPlan(p);
    const pool = await verifyPlanInPool(p, JSON.stringify(raw), { jobs: 0, deadlineMs: 10_000 });
    for (const r of [lib, pool]) {
      assert.equal(r.verdict, 'verified', r.summary);
      assert.equal(r.stages.find((s) => s.logical === 'y')?.decidedBy, 'constants');
      assert.match(formatReport(r), /y .*proved \(with the plan's constants\)/);
    }
    assert.deepEqual(pool.stages.map((s) => [s.logical, s.decidedBy]), lib.stages.map((s) => [s.logical, s.decidedBy]));
  });

  it('its twin with z = exp(0) = 1 is NOT EQUIVALENT with a witness (the constant is 1, so reading x for w matters)', () => {
    const r = verifyPlan(loadPlanObject('one.json', plan(ONE, [...T, { id: 'd', shape: [3] }], 'x')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    assert.ok(r.numeric.mismatches > 0);
  });

  it('its twin with z = 2x - x (not constant) is NOT EQUIVALENT with a witness', () => {
    const r = verifyPlan(loadPlanObject('not.json', plan(NOT, T, 'x')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
  });

  it('x / x is no constant (the division by x is not provably nonzero): the edit stays UNKNOWN, never VERIFIED', () => {
    const p = loadPlanObject('div.json', plan(DIV, [], 'x'));
    assert.equal(provedConstants(p).get(p.logical.tensors.id('z')), undefined);
    // z = 1 where defined, so y = x vs y = w differ: refuted.
    assert.equal(verifyPlan(p).verdict, 'not_equivalent');
  });

  it('max(x, e^0 * 5)-like values constant only at the drawn inputs are not constants', () => {
    // b = x, c = exp(0) = 1, z = max(x, 1): 1 at every draw in [-1, 1], x past 1.
    const p = loadPlanObject('maxc.json', plan(MAXC, [...T, { id: 'c', shape: [3] }], 'w'));
    const c = provedConstants(p);
    assert.ok(c.get(p.logical.tensors.id('c'))?.size === 3, 'exp(0 * x) is the constant 1');
    assert.equal(c.get(p.logical.tensors.id('z')), undefined, 'max(x, 1) is not a constant');
    // With the edit it would be UNKNOWN (no witness in [-1, 1]) and never VERIFIED.
    const edited = verifyPlan(loadPlanObject('maxc-x.json', plan(MAXC, [...T, { id: 'c', shape: [3] }], 'x')));
    assert.notEqual(edited.verdict, 'verified', edited.summary);
  });

  it('a generated MoE plan at seq 1 with an edit behind the gradient of k (exactly 0 there) is VERIFIED; the same edit at seq 2 is NOT EQUIVALENT @full', async () => {
    const ok = await runCli(['verify', '--no-cache', 'test/fixtures/constants/moe-seq1-edit.json']);
    assert.equal(ok.code, 0, ok.stdout);
    assert.match(ok.stdout, /VERIFIED/);
    const bad = await runCli(['verify', '--no-cache', 'test/fixtures/constants/moe-seq2-edit.json']);
    assert.equal(bad.code, 1, bad.stdout);
    assert.match(bad.stdout, /NOT EQUIVALENT: stage \d+ \(grad\/l0\/mul#1/);
  });
});
