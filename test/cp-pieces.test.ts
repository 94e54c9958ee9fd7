/**
 * Piecewise-affine claims per template (issue 37): under SP with tp 8 and zig-zag CP a rank's
 * sequence shard is chunk r for tp 0-3 and chunk 2cp-1-r for tp 4-7, so the programs are cut
 * into two pieces along tp and each piece is proved as its own template
 * (stages/engines/tensorlevel/pieces.ts; docs/engine.md, "Tensor level per template").
 */
import { strict as assert } from 'node:assert';
import { generatePlan, ADAMW } from '../plans/gen/plan.js';
import { bugById } from '../plans/gen/bugs.js';
import { loadPlanObject } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import { verifyPlan } from '../stages/verify.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { partProver } from '../stages/shrink/part.js';
import { stripeChunk, stripeRange } from '../stages/engines/tensorlevel/stripes.js';
import { Sym } from '../stages/engines/tensorlevel/sym.js';
import { FULL } from './optional.js';

/** A llama of tiny widths, dp1 tp8 cp2 under SP and zig-zag CP (ring attention), seq 32. */
function tp8Plan(bug?: string): RawPlan {
  const tp = 8;
  const par = { dp: 1, tp, micro: 1, sp: true, cp: 2 };
  const raw = generatePlan({ model: { family: 'llama', layers: 1, hidden: 4 * tp, heads: tp, kvHeads: tp, seq: 32, vocab: 2 * tp, batch: 1, ffn: 2 * tp }, par, optimizer: ADAMW });
  if (bug !== undefined) {
    const b = bugById(bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, { ...par, family: 'llama' });
  }
  return raw as unknown as RawPlan;
}

/** Edits every program's ops (the plan has one program per cp coordinate). */
function edited(edit: (ops: RawPlan['parallel']['programs'][number]['ops']) => void): () => RawPlan {
  return () => {
    const raw = tp8Plan();
    for (const p of raw.parallel.programs) edit(p.ops);
    return raw;
  };
}
const sliceOf = (ops: RawPlan['parallel']['programs'][number]['ops'], id: string) => {
  const o = ops.find((x) => x.id === id);
  assert.ok(o !== undefined, id);
  return o;
};
/** The cos table's zig-zag chunks taken in the wrong order (chunk 2cp-1-r first, then r). */
const ropeSwapped = edited((ops) => {
  const [a, b] = [sliceOf(ops, 'l0/cp/slice'), sliceOf(ops, 'l0/cp/slice#1')];
  [a.attrs, b.attrs] = [b.attrs, a.attrs];
});
/** The sin table's second chunk right at tp 0 (each program's base rank) and one chunk early elsewhere. */
const ropeRightAtBase = edited((ops) => {
  sliceOf(ops, 'l0/cp/slice#3').attrs = { dim: 0, start: { expr: '-8*cp + 24 - 8*min(tp, 1)' }, end: { expr: '-8*cp + 32 - 8*min(tp, 1)' } };
});

describe('per template: attributes fixed on the frame, the rope tables under zig-zag CP (issue 37)', () => {
  it('derives the slices at tensor level per template, refutes chunks in the wrong order, never proves a slice reading tp', () => {
    // Programs are per cp coordinate, so `8*cp` is one number on each: the rope stages are at tensor level.
    const ok = verifyPerTemplate(loadPlanObject('ok.json', tp8Plan()));
    assert.equal(ok.verdict, 'verified', ok.stages.filter((s) => s.status !== 'proved').map((s) => `${s.logical}: ${s.reason ?? ''}`).join('\n'));
    const rope = ok.stages.filter((s) => /^l0\/rope/.test(s.logical));
    assert.equal(rope.length, 2);
    for (const s of rope) assert.equal(s.decidedBy, 'tensor', s.logical);
    // The chunks swapped: refuted per template with a witness on one rank's part.
    const w = verifyPerTemplate(loadPlanObject('swap.json', ropeSwapped()), { witness: { raw: ropeSwapped, provePart: partProver() } });
    assert.equal(w.verdict, 'not_equivalent');
    const s = w.stages.find((x) => x.status === 'not_equivalent');
    assert.ok(s !== undefined && /^l0\/rope/.test(s.logical) && (s.witness ?? []).length > 0, s?.logical);
    // Right at every program's base rank, wrong at tp > 0: the expression reads tp, which the
    // frame varies, so it is not derived at the base for every rank.
    const b = verifyPerTemplate(loadPlanObject('base.json', ropeRightAtBase()));
    assert.notEqual(b.verdict, 'verified');
    assert.ok(b.stages.some((x) => /^l0\/rope/.test(x.logical) && x.status !== 'proved'));
  });

  it(`the twin right only at the base rank is not equivalent rank by rank${FULL}`, () => {
    const r = verifyPlan(loadPlanObject('base.json', ropeRightAtBase()));
    assert.equal(r.verdict, 'not_equivalent');
    assert.ok(r.stages.some((s) => s.status === 'not_equivalent' && /^l0\/rope/.test(s.logical)));
  }).timeout(600_000);
});

describe('piecewise-affine claims per template: programs cut into pieces (issue 37)', () => {
  it('reduce-scatters a striped region per piece only when every window of the piece lies in one stripe', () => {
    // Local positions [0, 16) are logical [0, 8) then [24, 32); 8 members, 2 positions each.
    const rg = stripeRange([[0, 8], [24, 32]]);
    assert.ok(typeof rg !== 'string');
    const me = Sym.of(0, [0, 0, 1]);
    // Members 0-3 (base 0): stripe 0, positions 2 me on.
    assert.deepEqual(stripeChunk(rg, 8, me, { lo: 0, hi: 3 }), [Sym.of(0, [0, 0, 2]), Sym.of(2, [0, 0, 2])]);
    // Members 4-7 (a piece whose base is member 4: me = 4 + (tp - 4)): stripe 1, 24 + 2 (me - 4).
    const me4 = Sym.of(4, [0, 0, 1]);
    assert.deepEqual(stripeChunk(rg, 8, me4, { lo: 4, hi: 7 }), [Sym.of(24, [0, 0, 2]), Sym.of(26, [0, 0, 2])]);
    // A box whose members straddle the two stripes is no affine chunk: refused.
    assert.equal(typeof stripeChunk(rg, 8, me, { lo: 0, hi: 7 }), 'string');
    assert.equal(typeof stripeChunk(rg, 8, me, { lo: 2, hi: 5 }), 'string');
  });

  it(`proves dp1 tp8 cp2 SP per template, every stage at tensor level${FULL}`, () => {
    const r = verifyPlan(loadPlanObject('tp8.json', tp8Plan()), { maxStageEntries: 1 });
    assert.equal(r.verdict, 'verified', r.stages.filter((s) => s.status !== 'proved').map((s) => `${s.logical}: ${s.reason ?? ''}`).join('\n'));
    assert.equal(r.stages.length, 160);
    // The 17 stages the cut opens (a tp-sharded sequence under zig-zag CP) are at tensor level;
    // rope's six stay with the normal-form engine, as at tp 2 (its tables have no tensor rule).
    for (const s of r.stages.filter((x) => /^(embed\/emb|l0\/(rms_norm|add)(#1)?|head\/rms_norm|grad\/.*(reduce|acc\[|rms_norm_backward.*\.1|embedding_backward))/.test(x.logical))) assert.equal(s.decidedBy, 'tensor', s.logical);
    for (const s of r.stages) assert.ok(s.decidedBy === 'tensor' || /rope|^grad\/l0\/mul#[2367]$/.test(s.logical), `${s.logical}: ${s.decidedBy ?? ''}`);
  });

  it(`never proves a cp bug twin at tp 8, refutes cp-grad-not-reduced with a witness, and proves per template nothing refuted rank by rank${FULL}`, () => {
    for (const bug of ['cp-grad-not-reduced', 'cp-loss-scaled-by-cp', 'cp-ring-future-block-attended']) {
      const raw = tp8Plan(bug);
      const tpl = verifyPerTemplate(loadPlanObject('t.json', raw));
      assert.notEqual(tpl.verdict, 'verified', bug);
      const element = verifyPlan(loadPlanObject('e.json', raw), { tensorLevel: false });
      assert.equal(element.verdict, 'not_equivalent', bug);
      const status = new Map(element.stages.map((s) => [s.logical, s.status]));
      for (const s of tpl.stages) if (s.status === 'proved') assert.notEqual(status.get(s.logical), 'not_equivalent', `${bug}: '${s.logical}' proved per template`);
      assert.ok(tpl.stages.some((s) => s.status !== 'proved' && status.get(s.logical) === 'not_equivalent'), bug);
    }
    const make = (): RawPlan => tp8Plan('cp-grad-not-reduced');
    const w = verifyPerTemplate(loadPlanObject('bug.json', make()), { witness: { raw: make, provePart: partProver() } });
    assert.equal(w.verdict, 'not_equivalent');
    const s = w.stages.find((x) => x.status === 'not_equivalent');
    assert.ok(s !== undefined && /^grad\//.test(s.logical) && (s.witness ?? []).length > 0, s?.logical);
  }).timeout(1_800_000);
});
