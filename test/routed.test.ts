/**
 * Routed MoE buffers at tensor level (stages/engines/tensorlevel/prover.ts, docs/engine.md "Routed buffers"):
 * a packed-layout MoE plan with experts over dp, micro-batches, top-2 routing and pipeline
 * stages verifies rank by rank and per template with every stage decided at tensor level (the
 * element engine leaves its routing stages unknown: the packed buffers depend on every token's
 * choice). Each wrong twin — one op of one micro-batch reading the other micro-batch's
 * routing, gates, tokens or expert outputs — is never verified, on either path.
 */
import { strict as assert } from 'node:assert';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { fullUnless } from './optional.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
const MODEL = { family: 'moe', layers: 2, hidden: 8, heads: 2, kvHeads: 2, seq: 2, vocab: 8, batch: 8, ffn: 4, experts: 4, topk: 2, shared: 1, expertFfn: 2 } as const;
const PAR = { dp: 4, tp: 2, micro: 2, pp: 2, ep: true } as const;

interface RawOp {
  inputs: string[];
  outputs: string[];
}
interface RawPlan {
  parallel: { programs: { ops: RawOp[] }[] };
}
const plan = (par: typeof PAR | typeof SMALL | typeof FLAT = PAR): RawPlan => generatePlan({ model: MODEL, par, optimizer: OPT });
/** The twins without tp (cheaper; the routing is the same). */
const SMALL = { dp: 4, tp: 1, micro: 2, pp: 2, ep: true } as const;

/** The op writing `out` (in every program holding it) reads input `i` renamed: micro-batch 1 -> 0 (or `from` -> `to`). */
function twin(out: string, i: number, from = /^mb1\//, to = 'mb0/', par: typeof PAR | typeof SMALL | typeof FLAT = SMALL): RawPlan {
  const raw = plan(par);
  let n = 0;
  for (const p of raw.parallel.programs) {
    for (const op of p.ops) {
      if (!op.outputs.includes(out)) continue;
      const x = op.inputs[i];
      if (x === undefined || !from.test(x)) throw new Error(`${out}: input ${i} is ${x ?? 'missing'}`);
      op.inputs[i] = x.replace(from, to);
      n++;
    }
  }
  assert.ok(n > 0, `no op writes ${out}`);
  return raw;
}
/** Both layers in one program: a twin may read the other layer's routing. */
const FLAT = { dp: 4, tp: 1, micro: 2, pp: 1, ep: true } as const;

describe('routed MoE buffers at tensor level', () => {
  it('a packed MoE plan (dp4 with experts over dp, tp2, pp2, 2 micro-batches, top-2 of 4 experts) verifies on both paths, every stage at tensor level @full', () => {
    const r = verifyPlan(loadPlanObject('moe.json', plan()));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.ok(r.stages.every((s) => s.decidedBy === 'tensor'), 'every stage at tensor level');
    // Without the routed rules the routing stages stay open (the element engine cannot take them).
    const el = verifyPlan(loadPlanObject('moe.json', plan()), { tensorLevel: false });
    const open = el.stages.filter((s) => s.status !== 'proved').map((s) => s.logical);
    assert.ok(open.some((t) => t.endsWith('moe/moe_combine')) && open.some((t) => t.includes('experts/matmul')), `open without tensor level: ${open.join(', ')}`);
    const t = verifyPerTemplate(loadPlanObject('moe.json', plan()));
    assert.equal(t.verdict, 'verified', t.summary);
    assert.ok(t.stages.every((s) => s.decidedBy === 'tensor'));
  }).timeout(300_000);

  const twins: [string, string, number, RegExp?, string?, (typeof FLAT)?][] = [
    ['combine reads the other micro-batch\'s routing choices', 'mb1/l0/moe/moe_combine', 1],
    ['combine reads the other micro-batch\'s gates', 'mb1/l0/moe/moe_combine', 2],
    ['gather (gates gradient) reads the other micro-batch\'s routing', 'mb1/grad/l0/moe/moe_gather', 1],
    ['the backward dispatch uses the other micro-batch\'s routing', 'mb1/grad/l0/moe/moe_dispatch', 1],
    ['the return all_to_all sends the other micro-batch\'s expert outputs', 'mb1/l0/moe/experts/all_to_all#1', 0],
    ['dispatch sends the other micro-batch\'s tokens', 'mb1/l0/moe/experts/moe_dispatch', 0],
    ['an expert weight gradient contracts the other micro-batch\'s buffer', 'mb1/grad/l0/moe/experts/transpose#3', 0],
    ['the expert activation\'s backward reads the other micro-batch\'s pre-activation', 'mb1/grad/l0/moe/experts/silu_backward', 1],
    ['layer 1 combines with layer 0\'s routing choices', 'mb1/l1/moe/moe_combine', 1, /l1\/moe\/topk\.1$/, 'l0/moe/topk.1', FLAT],
    ['layer 1\'s backward dispatch uses layer 0\'s routing choices and gates', 'mb1/grad/l1/moe/moe_dispatch', 1, /l1\/moe\/topk\.1$/, 'l0/moe/topk.1', FLAT],
  ];
  for (const [what, out, i, from, to, par] of twins) {
    it(`wrong twin, never verified: ${what}${fullUnless(what.startsWith('an expert weight gradient'))}`, () => {
      const make = (): RawPlan => twin(out, i, from, to, par);
      const r = verifyPlan(loadPlanObject('twin.json', make()));
      assert.notEqual(r.verdict, 'verified', r.summary);
      // The numeric run sees the difference: the twin is really wrong.
      assert.ok(r.numeric.mismatches > 0, 'the numeric run shows differing values');
      const t = verifyPerTemplate(loadPlanObject('twin.json', make()));
      assert.notEqual(t.verdict, 'verified', t.summary);
    }).timeout(300_000);
  }
});
