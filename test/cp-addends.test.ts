/**
 * Weight gradients under CP, rank by rank (issue 37, "the medium plan"): each claimed addend
 * (one micro-batch of one dp replica on one cp rank) derives as a product part, batch rows x
 * zig-zag sequence chunks. Together they tile a grid that no order of pairwise merges builds
 * one rectangle at a time, so the rank-by-rank tensor level left these stages to the normal
 * form ("the claimed addends overlap"), which gives up at the medium plan's sizes. They are
 * united at once now, as per template (stages/engines/tensorlevel/prover.ts).
 */
import { strict as assert } from 'node:assert';
import { generatePlan, ADAMW } from '../plans/gen/plan.js';
import { bugById } from '../plans/gen/bugs.js';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { FULL } from './optional.js';

/** The grid: micro-batch rows x zig-zag chunks, from dp 2 cp 2 or micro 2 cp 2 (4 or 2 ranks). */
function cpPlan(par: { dp: number; micro: number }, bug?: string): unknown {
  const p = { ...par, tp: 1, pp: 1, cp: 2 };
  const raw = generatePlan({ model: { family: 'llama', layers: 1, hidden: 16, heads: 2, kvHeads: 2, seq: 8, vocab: 16, batch: 2, ffn: 16 }, par: p, optimizer: ADAMW });
  if (bug !== undefined) {
    const b = bugById(bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, { ...p, family: 'llama' });
  }
  return raw;
}

/** The gradient stages summed over the grid: the embedding's and the RMSNorm weights'. */
const gridStage = (logical: string): boolean => logical === 'grad/embed/embedding_backward' || /^grad\/.*rms_norm_backward(#\d+)?\.1$/.test(logical);

describe('CP weight gradients at tensor level rank by rank (issue 37)', () => {
  for (const par of [{ dp: 2, micro: 1 }, { dp: 1, micro: 2 }]) {
    it(`dp ${par.dp} micro ${par.micro} cp 2: the gradients summed over batch rows and sequence chunks are proved at tensor level`, () => {
      const r = verifyPlan(loadPlanObject('ok.json', cpPlan(par)));
      assert.equal(r.verdict, 'verified');
      const grid = r.stages.filter((s) => gridStage(s.logical));
      assert.equal(grid.length, 4, grid.map((s) => s.logical).join(', '));
      for (const s of grid) assert.equal(s.decidedBy, 'tensor', `${s.logical}: ${s.decidedBy ?? s.reason ?? ''}`);
    });
  }

  // The twins: the gradient of a grid's cells lost or counted twice is never proved, and is refuted.
  for (const bug of ['cp-grad-not-reduced', 'accumulation-reset']) {
    // One twin in the fast suite (about 2 s), the other with @full.
    it(`${bug} (dp 1 micro 2 cp 2) is NOT EQUIVALENT at the embedding gradient, with a witness${bug === 'accumulation-reset' ? '' : FULL}`, () => {
      const r = verifyPlan(loadPlanObject('bug.json', cpPlan({ dp: 1, micro: 2 }, bug)));
      assert.equal(r.verdict, 'not_equivalent');
      const s = r.stages.find((x) => x.logical === 'grad/embed/embedding_backward');
      assert.ok(s !== undefined);
      assert.equal(s.status, 'not_equivalent');
      assert.ok((s.witness ?? []).length > 0);
    });
  }
});
