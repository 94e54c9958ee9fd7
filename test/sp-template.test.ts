/**
 * Sequence-parallel norm-weight gradients per template (issue 37): under SP a RMSNorm weight
 * gradient is a sum of dp x tp x micro addends, each a product of a micro-batch row block and a
 * sequence shard (docs/engine.md, "Tensor level per template", grids of products). Past 64 such
 * rectangles they were never united ("do not add up to the whole value"); and a part whose
 * micro-batch addends form a group larger than a part takes is cut there even when its start is
 * itself an addend (docs/engine.md, "Witnesses per template").
 */
import { strict as assert } from 'node:assert';
import { generatePlan, ADAMW } from '../plans/gen/plan.js';
import { bugById } from '../plans/gen/bugs.js';
import { loadPlanObject } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import { verifyPlan } from '../stages/verify.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { partProver } from '../stages/shrink/part.js';
import { coversAll, unionParts, PRODUCT, type Part } from '../stages/engines/tensorlevel/relations.js';

/** A llama of tiny widths under SP: dp x tp ranks, `micro` micro-batches. */
function spPlan(dp: number, tp: number, micro: number, bug?: string): RawPlan {
  const raw = generatePlan({ model: { family: 'llama', layers: 1, hidden: 4 * tp, heads: tp, kvHeads: tp, seq: 2, vocab: 2 * tp, batch: dp * micro, ffn: 2 * tp }, par: { dp, tp, micro, sp: true }, optimizer: ADAMW });
  if (bug !== undefined) {
    const b = bugById(bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, { dp, tp, micro, sp: true, family: 'llama' });
  }
  return raw as unknown as RawPlan;
}

const NORM = /rms_norm_backward/;

describe('SP gradients summed along two labels, per template (issue 37)', () => {
  it('unites a grid of product addends past 64, refusing overlaps and gaps', () => {
    const key = `${PRODUCT}sum|x`;
    const cell = (i: number, j: number): Part => ({ key, comps: [{ kind: 'range', cover: [i, i + 1], total: 64 }, { kind: 'range', cover: [j, j + 1], total: 2 }] });
    const all: Part[] = [];
    for (let i = 0; i < 64; i++) for (let j = 0; j < 2; j++) all.push(cell(i, j));
    const u = unionParts(all);
    assert.ok(u !== undefined && coversAll(u));
    // A cell twice: overlapping, not a union.
    assert.equal(unionParts([...all, cell(5, 1)]), undefined);
    // A cell missing: row 7 is shorter than the others, so the cells are not one rectangle.
    assert.equal(unionParts(all.filter((p) => !(p.comps[0]?.cover[0] === 7 && p.comps[1]?.cover[0] === 1))), undefined);
    // Rows that overlap: [0, 2) and [1, 2) along the first component.
    assert.equal(unionParts([...all.slice(2), { key, comps: [{ kind: 'range', cover: [0, 2], total: 64 }, { kind: 'range', cover: [0, 2], total: 2 }] }]), undefined);
  });

  it('proves dp32 tp2 SP per template (128 addends per norm gradient), as rank by rank', () => {
    const plan = loadPlanObject('sp.json', spPlan(32, 2, 2));
    const r = verifyPlan(plan, { maxStageEntries: 1 });
    assert.equal(r.verdict, 'verified', r.stages.find((s) => s.status !== 'proved')?.reason);
    assert.ok(r.stages.some((s) => NORM.test(s.logical)));
  });

  it('refutes the twin whose norm gradient is never all-reduced over tp, with a witness', () => {
    const make = (): RawPlan => spPlan(32, 2, 2, 'sp-norm-grad-not-reduced');
    const r = verifyPerTemplate(loadPlanObject('bug.json', make()), { witness: { raw: make, provePart: partProver() } });
    assert.equal(r.verdict, 'not_equivalent');
    const s = r.stages.find((x) => x.status === 'not_equivalent');
    assert.ok(s !== undefined && NORM.test(s.logical), s?.logical);
    assert.ok((s.witness ?? []).length > 0);
  });

  it('injects sp-norm-grad-not-reduced where pipelined accumulators are numbered apart (accum.<norm>#k)', () => {
    const raw = generatePlan({ model: { family: 'llama', layers: 2, hidden: 8, heads: 2, kvHeads: 2, seq: 2, vocab: 4, batch: 8, ffn: 4 }, par: { dp: 2, tp: 2, micro: 4, pp: 2, sp: true }, optimizer: ADAMW });
    const tpNorm = (): number => (raw.parallel.programs[0]?.ops ?? []).filter((o) => o.op === 'all_reduce' && /^accum\.l0\.attn_norm#[0-9]+$/.test(o.inputs[0] ?? '')).length;
    assert.equal(tpNorm(), 1);
    bugById('sp-norm-grad-not-reduced')?.inject(raw, { dp: 2, tp: 2, micro: 4, pp: 2, sp: true, family: 'llama' });
    assert.equal(tpNorm(), 0);
  });

  it('cuts micro-batch addends past the holder bound when the start is itself an addend', () => {
    // dp4 tp2 micro2: the start (a tp addend) has 8 holders, its micro-batch addends 16; a part
    // of at most 8 holders refutes by assuming the 16 as claimed, and proves nothing wrong.
    const make = (): RawPlan => spPlan(4, 2, 2, 'sp-norm-grad-not-reduced');
    const prove = partProver({ maxHolders: 8 });
    const bad = verifyPerTemplate(loadPlanObject('bug.json', make()), { witness: { raw: make, provePart: prove } });
    assert.equal(bad.verdict, 'not_equivalent');
    const s = bad.stages.find((x) => x.status === 'not_equivalent');
    assert.match(s?.reason ?? '', /assumed as claimed/);
    const okMake = (): RawPlan => spPlan(4, 2, 2);
    assert.equal(verifyPerTemplate(loadPlanObject('ok.json', okMake()), { witness: { raw: okMake, provePart: prove } }).verdict, 'verified');
  });
});
