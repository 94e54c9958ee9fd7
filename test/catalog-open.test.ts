/**
 * Catalog bugs left open at scale (issue 37), at small width: replicas that disagree
 * (stages/shrink/replicas.ts, docs/engine.md "Replicas that disagree"). D3's clip-local-norm and
 * dp-wrong-group leave a rank's clipped gradient with the whole model on its part's logical
 * side; two ranks holding the same gradient elements that compute different values refute the
 * stage with no logical side at all. Each bug is refuted with a checked witness (two ranks'
 * concrete values, apart on two draws), and its correct twin never is.
 */
import { strict as assert } from 'node:assert';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import { loadPartObject, loadPlanObject } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import type { Program } from '../plans/model.js';
import { verifyPlan } from '../stages/verify.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { replicaWitness } from '../stages/shrink/replicas.js';
import type { ProvePart } from '../stages/decompose/prove.js';
import { deepCut, provePartDeep } from '../stages/shrink/deepen.js';
import { boxPart } from '../stages/shrink/box.js';
import { provePart } from '../stages/shrink/part.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
// D3's structure at small width: MoE, pipeline 2, dp 4 (experts split over it), tp 2.
const CTX: BugContext = { dp: 4, tp: 2, micro: 1, pp: 2, ep: true, family: 'moe' };

function make(bug?: string): RawPlan {
  const p = PRESETS['moe-tiny'];
  assert.ok(p !== undefined);
  const raw = generatePlan({ model: { ...p.model, layers: 2, experts: 4, batch: 4 }, par: { ...p.par, ...CTX }, optimizer: OPT }) as unknown as RawPlan;
  if (bug !== undefined) {
    const b = BUGS.find((x) => x.id === bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, CTX);
  }
  return raw;
}

/** Replicas alone as the witness search's prover: what refutes is this rule, not a part. */
const replicasOnly: ProvePart = (plan, raw, stage, rank, tensor, seed) => replicaWitness(plan, raw, stage, rank, tensor, seed);

/** Every clipped gradient's obligation on its program's lowest rank, tried by replicas. */
function clipTries(raw: RawPlan): { name: string; r: ReturnType<typeof replicaWitness> }[] {
  const plan = loadPlanObject('p.json', structuredClone(raw));
  const out: { name: string; r: ReturnType<typeof replicaWitness> }[] = [];
  for (let l = 0; l < plan.logical.tensors.size; l++) {
    const name = plan.logical.tensors.name(l);
    if (!/^clip(\.\d+)?$/.test(name)) continue;
    plan.programs.forEach((prog: Program) => {
      for (let t = 0; t < prog.tensors.size; t++) {
        if (prog.lineage[t]?.logical !== l) continue;
        out.push({ name, r: replicaWitness(plan, raw, { index: 0, logical: l, obligations: [] }, prog.ranks[0] as number, t, 1) });
      }
    });
  }
  return out;
}

describe('catalog bugs open at scale, at small width: replicas that disagree', () => {
  for (const bug of ['clip-local-norm', 'dp-wrong-group']) {
    it(`${bug}: a clipped gradient's replicas disagree on two draws, with no logical side; the correct twin's agree`, () => {
      const bad = clipTries(make(bug));
      const refuted = bad.filter((x) => !('why' in x.r) && x.r.result.status === 'differs');
      assert.ok(refuted.length > 0, `${bug}: ${bad.map((x) => ('why' in x.r ? x.r.why : x.r.result.status)).join(' | ').slice(0, 400)}`);
      for (const { name, r } of refuted) {
        assert.ok(!('why' in r));
        // The witness: two ranks' values of one element, apart beyond the tolerance.
        const w = r.witness[0];
        assert.ok(w !== undefined && w.kind === 'replica' && w.logical === name, `${name}: a replica witness`);
        assert.ok(Math.abs(w.parallel - w.expected) > 1e-6 * Math.max(1, Math.abs(w.expected)), `${name}: ${w.parallel} vs ${w.expected}`);
        assert.equal(r.result.failingRanks.length, 2);
        // Nothing of the model on the logical side: one copy of the stage's free tensor.
        assert.deepEqual(r.raw.logical.ops.map((o) => o.op), ['identity'], `${name}: logical side`);
        assert.match(r.result.reason ?? '', /replicas disagree on two draws/);
      }
      // The correct twin: every replica pair agrees, so nothing is refuted.
      const ok = clipTries(make());
      assert.ok(ok.length === bad.length && ok.length > 0);
      for (const { name, r } of ok) assert.ok('why' in r || r.result.status !== 'differs', `${name}: the correct plan refuted`);
      assert.ok(ok.some((x) => 'why' in x.r && /agree/.test(x.r.why)), 'the correct twin has replicas that were compared');
    }).timeout(300_000);
  }

  it('per template with replicas alone: both bugs NOT EQUIVALENT with a witness, the correct plan not refuted @full', () => {
    for (const bug of ['clip-local-norm', 'dp-wrong-group']) {
      const r = verifyPerTemplate(loadPlanObject('p.json', make(bug)), { witness: { raw: () => make(bug), provePart: replicasOnly } });
      assert.equal(r.verdict, 'not_equivalent', `${bug}: ${r.summary}`);
      const st = r.stages.find((s) => s.status === 'not_equivalent');
      assert.ok(st !== undefined && (st.witness?.length ?? 0) > 0 && st.witness?.[0]?.kind === 'replica', `${bug}: a replica witness`);
    }
    // The reference, rank by rank with its whole-plan numeric run, refutes the plan too.
    assert.equal(verifyPlan(loadPlanObject('ref.json', make('clip-local-norm'))).verdict, 'not_equivalent', 'the reference');
    const ok = verifyPerTemplate(loadPlanObject('p.json', make()), { witness: { raw: () => make(), provePart: replicasOnly } });
    assert.notEqual(ok.verdict, 'not_equivalent', ok.summary);
  }).timeout(1_800_000);

  it('an obligation no other rank of its program holds complete (a shard, an addend) is not compared, and refutes nothing', () => {
    // A tp shard or a dp-partial gradient before its all-reduce has no complete replica on
    // another rank: replicas say why and refute nothing.
    const raw = make('clip-local-norm');
    const plan = loadPlanObject('p.json', structuredClone(raw));
    const prog = plan.programs[0] as Program;
    let tried = 0;
    for (let t = 0; t < prog.tensors.size && tried < 3; t++) {
      const spec = prog.lineage[t];
      if (spec === undefined) continue;
      const r0 = prog.ranks[0] as number;
      const r = replicaWitness(plan, raw, { index: 0, logical: spec.logical, obligations: [] }, r0, t, 1);
      if ('why' in r && /no other rank holds a complete replica/.test(r.why)) tried++;
    }
    assert.ok(tried > 0, 'some obligation has no complete replica on another rank');
  }).timeout(300_000);
});

// L1's structure at small width: llama, data parallel only, one micro-batch, two layers.
const L1CTX: BugContext = { dp: 4, tp: 1, micro: 1, family: 'llama' };

function makeL1(bug?: string): RawPlan {
  const p = PRESETS['llama-tiny'];
  assert.ok(p !== undefined);
  const raw = generatePlan({ model: { ...p.model, layers: 2, batch: 4 }, par: { dp: 4, tp: 1, micro: 1 }, optimizer: OPT }) as unknown as RawPlan;
  if (bug !== undefined) {
    const b = BUGS.find((x) => x.id === bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, L1CTX);
  }
  return raw;
}

/** The obligation of logical tensor `name` on program 0's lowest rank. */
function obligation(raw: RawPlan, name: string): { plan: ReturnType<typeof loadPlanObject>; logical: number; rank: number; tensor: number } {
  const plan = loadPlanObject('p.json', structuredClone(raw));
  const logical = plan.logical.tensors.id(name);
  assert.ok(logical >= 0, name);
  const prog = plan.programs[0] as Program;
  for (let t = 0; t < prog.tensors.size; t++) {
    if (prog.lineage[t]?.logical !== logical) continue;
    return { plan, logical, rank: prog.ranks[0] as number, tensor: t };
  }
  throw new Error(`no obligation of ${name}`);
}

describe('catalog bugs open at scale, at small width: parts of a coarser cut', () => {
  // fanout-duplicate-grad at L1: every rank adds the up-projection's input gradient twice; the
  // gate branch's gradient is read by no parallel op, so the part's logical side recomputed it
  // from the model's inputs. The deeper part stops at the MLP norm's output and the MLP's
  // output gradient instead, on both sides.
  const STAGE = 'grad/l1/acc[l1/rms_norm#1]';

  it('fanout-duplicate-grad: the part cut at earlier claims differs with a checked witness, from one MLP on both sides; the correct twin does not', () => {
    const bad = makeL1('fanout-duplicate-grad');
    const o = obligation(bad, STAGE);
    const cut = deepCut(o.plan, o.logical, o.rank, o.tensor);
    assert.ok(typeof cut !== 'string', String(cut));
    const stops = [...cut.stops].map((l) => o.plan.logical.tensors.name(l)).sort();
    // The MLP's input (its norm's output) and the gradient of its hidden activation: no attention, no loss.
    assert.deepEqual(stops, ['grad/l1/matmul', 'l1/rms_norm#1'], stops.join(', '));
    const r = provePartDeep(o.plan, bad, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok(!('why' in r), 'why' in r ? r.why : '');
    assert.equal(r.result.status, 'differs', r.result.reason);
    const w = r.witness[0];
    assert.ok(w !== undefined && w.logical === STAGE, 'a witness on the stage\'s tensor');
    assert.ok(Math.abs(w.parallel - w.expected) > 1e-6 * Math.max(1, Math.abs(w.expected)), `${w.parallel} vs ${w.expected}`);
    // Both sides of one MLP: the logical side holds no op of the model outside it.
    const ops = r.raw.logical.ops.map((x) => x.op);
    for (const no of ['attention', 'cross_entropy', 'rms_norm', 'embedding']) assert.ok(!ops.includes(no), `${no} on the logical side: ${ops.join(', ')}`);
    assert.match(r.result.reason ?? '', /cut at earlier claims/);
    // The correct twin reads both branches: its own part is already the cut (nothing to go
    // through), and it is never refuted.
    const good = makeL1();
    const g = obligation(good, STAGE);
    const rg = provePartDeep(g.plan, good, { index: 0, logical: g.logical, obligations: [] }, g.rank, g.tensor, 1);
    if ('why' in rg) assert.match(rg.why, /the cut found is the part's own/);
    else assert.ok(rg.result.status !== 'differs' && rg.witness.length === 0, rg.result.reason);
    // Its part as written (stages/shrink/part.ts) proves nothing about the plan, but is not refuted either.
    const pg = provePart(g.plan, good, { index: 0, logical: g.logical, obligations: [] }, g.rank, g.tensor, 1);
    assert.ok('why' in pg || pg.result.status !== 'differs', 'why' in pg ? pg.why : pg.result.reason);
  }).timeout(300_000);

  it('the logical side is boxed to the rows the part holds, and only along dims every op is SIMD along', () => {
    const bad = makeL1('fanout-duplicate-grad');
    const o = obligation(bad, STAGE);
    const r = provePartDeep(o.plan, bad, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok(!('why' in r), 'why' in r ? r.why : '');
    // One rank of 4 holds one row of the batch of 4: the logical batch dim is 1 in the part.
    const part = loadPartObject('part.json', structuredClone(r.raw));
    const t = part.logical.tensors.id(STAGE);
    assert.equal((part.logical.shapes[t] ?? [])[0], 1);
    // A logical side with a mean over rows (cross-entropy's) keeps its rows: nothing is boxed there.
    const loss = makeL1();
    const lo = obligation(loss, 'head/loss');
    const lp = provePart(lo.plan, loss, { index: 0, logical: lo.logical, obligations: [] }, lo.rank, lo.tensor, 1);
    assert.ok(!('why' in lp), 'why' in lp ? lp.why : '');
    const boxed = boxPart(lp.raw);
    assert.ok(boxed === undefined || boxed.logical.tensors.every((x) => x.id !== 'head/reshape' || x.shape[0] === (lp.raw.logical.tensors.find((y) => y.id === 'head/reshape')?.shape[0] ?? -1)), 'the rows a mean reads are not boxed');
  }).timeout(300_000);

  it('two equal branches: a correct plan reading one of them twice is not refuted by a part of a coarser cut; a plan adding a wrong branch is', () => {
    // u = x w and v = x w are equal in every run; the ranks add u twice (correct), or u and a
    // third product x w' (a bug). A stop at u with v computed from x would draw u apart from x w.
    const plan = (bug: boolean): RawPlan => {
      const T = (id: string, shape: number[], role: 'input' | 'param' | 'activation' | 'output'): RawPlan['logical']['tensors'][number] => ({ id, shape, role, dtype: 'float32' });
      const rows = (r: number): [number, number] => [2 * r, 2 * r + 2];
      const prog = (r: number): RawPlan['parallel']['programs'][number] => ({
        name: `rank ${r}`,
        ranks: [r],
        tensors: [
          { id: 'x', shape: [2, 3], lineage: { logical: 'x', index: [rows(r), '*'] } },
          { id: 'w', shape: [3, 2], lineage: { logical: 'w' } },
          { id: 'w2', shape: [3, 2], lineage: { logical: 'w2' } },
          { id: 'u', shape: [2, 2], lineage: { logical: 'u', index: [rows(r), '*'] } },
          { id: 'z', shape: [2, 2], lineage: { logical: 'z', index: [rows(r), '*'] } },
          { id: 'out', shape: [2, 2], lineage: { logical: 'out', index: [rows(r), '*'] } },
        ],
        ops: [
          { id: 'mu', op: 'matmul', inputs: ['x', 'w'], outputs: ['u'] },
          { id: 'mz', op: 'matmul', inputs: ['x', 'w2'], outputs: ['z'] },
          { id: 'add', op: 'add', inputs: ['u', bug ? 'z' : 'u'], outputs: ['out'] },
        ],
      });
      return {
        format: 'planproof/v1',
        name: 'equal-branches',
        mesh: { axes: [{ name: 'dp', size: 2 }] },
        logical: {
          tensors: [T('x', [4, 3], 'input'), T('w', [3, 2], 'param'), T('w2', [3, 2], 'param'), T('u', [4, 2], 'activation'), T('v', [4, 2], 'activation'), T('z', [4, 2], 'activation'), T('out', [4, 2], 'output')],
          ops: [
            { id: 'mu', op: 'matmul', inputs: ['x', 'w'], outputs: ['u'] },
            { id: 'mv', op: 'matmul', inputs: ['x', 'w'], outputs: ['v'] },
            { id: 'mz', op: 'matmul', inputs: ['x', 'w2'], outputs: ['z'] },
            { id: 'add', op: 'add', inputs: ['u', 'v'], outputs: ['out'] },
          ],
        },
        parallel: { programs: [prog(0), prog(1)] },
        contract: { inputs: ['x', 'w', 'w2'], outputs: ['out', 'z'] },
      } as RawPlan;
    };
    const ok = plan(false);
    const o = obligation(ok, 'out');
    const cut = deepCut(o.plan, o.logical, o.rank, o.tensor);
    assert.ok(typeof cut !== 'string' && cut.pass.has(o.plan.logical.tensors.id('u')) && cut.stops.size === 0, 'the walk goes through u, to x and w');
    const r = provePartDeep(o.plan, ok, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok(!('why' in r), 'why' in r ? r.why : '');
    assert.notEqual(r.result.status, 'differs', r.result.reason);
    assert.equal(verifyPlan(loadPlanObject('ok.json', structuredClone(ok))).verdict, 'verified', 'the correct plan verifies rank by rank');
    const bad = plan(true);
    const b = obligation(bad, 'out');
    const rb = provePartDeep(b.plan, bad, { index: 0, logical: b.logical, obligations: [] }, b.rank, b.tensor, 1);
    assert.ok(!('why' in rb), 'why' in rb ? rb.why : '');
    assert.equal(rb.result.status, 'differs', rb.result.reason);
    assert.ok(rb.witness.length > 0 && Math.abs((rb.witness[0]?.parallel ?? 0) - (rb.witness[0]?.expected ?? 0)) > 1e-6, 'a checked witness');
    assert.equal(verifyPlan(loadPlanObject('bad.json', structuredClone(bad))).verdict, 'not_equivalent', 'the bug is one rank by rank too');
  });

  it('per template: fanout-duplicate-grad at L1\'s structure is NOT EQUIVALENT, the correct plan VERIFIED @full', () => {
    const bad = makeL1('fanout-duplicate-grad');
    const r = verifyPerTemplate(loadPlanObject('p.json', structuredClone(bad)), { witness: { raw: () => bad, provePart: provePartDeep } });
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const good = makeL1();
    const ok = verifyPerTemplate(loadPlanObject('p.json', structuredClone(good)), { witness: { raw: () => good, provePart: provePartDeep } });
    assert.equal(ok.verdict, 'verified', ok.summary);
  }).timeout(1_800_000);
});
