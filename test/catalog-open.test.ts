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
import { loadPlanObject } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import type { Program } from '../plans/model.js';
import { verifyPlan } from '../stages/verify.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { replicaWitness } from '../stages/shrink/replicas.js';
import type { ProvePart } from '../stages/decompose/prove.js';

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
