/**
 * Per-stage reduction inside the inference rounds (stages/infer/reduced.ts): a hint stage the
 * normal form finds too large at full shapes is extracted, reduced and proved on its own; only
 * a proof is taken for a user stage, and a hint stage that does not hold is never proved.
 * Megatron's vocab-parallel embedding (test/fixtures/megatron-fx) is the stage: every element
 * of it is a sum over the vocabulary ids, so it grows with hidden x tokens x vocabulary.
 */
import { strict as assert } from 'node:assert';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { loadPlanObject } from '../lineage/load.js';
import { inferClaims } from '../stages/infer/infer.js';
import { hintOf, isHint, loadHinted, withHints } from '../stages/infer/hints.js';
import { decompose, Prover, type Stage, type StageResult } from '../stages/decompose/prove.js';
import { logicalOrder } from '../sdfg/execute.js';
import { newReducedRounds, proveTooLargeReduced } from '../stages/infer/reduced.js';
import { prepareStage, proveStage } from '../stages/shrink/stage-reduce.js';
import type { RawPlan } from '../plans/raw.js';

async function hintedStages(config: string): Promise<{ plan: ReturnType<typeof loadPlanObject>; obj: Record<string, unknown>; stages: Stage[]; hint: (s: Stage) => boolean }> {
  const d = mkdtempSync(join(tmpdir(), 'pp-ired-'));
  cpSync(join('test/fixtures/megatron-fx', config), d, { recursive: true });
  const out = join(d, 'plan.json');
  const r = await runCli(['import-graphs', '--dir', d, '-o', out]);
  assert.equal(r.code, 0, r.stderr);
  const raw = JSON.parse(readFileSync(out, 'utf8')) as Record<string, unknown>;
  const hints = inferClaims(loadPlanObject(out, raw), 1).claims.map(hintOf);
  const obj = withHints(raw, hints);
  const plan = loadHinted(out, obj, hints);
  assert.ok(plan !== undefined);
  const hinted = isHint(plan);
  return { plan, obj, stages: decompose(plan, logicalOrder(plan)), hint: (s) => s.obligations.every((o) => hinted(o.rank, o.tensor)) };
}

const tooLarge = (s: Stage): StageResult => ({ stage: s, status: 'unknown', reason: 'the stage is too large for the exact normal form (more than 1000000 monomial products)', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 });

describe('inference rounds: too-large stages reduced on their own (stages/infer/reduced.ts)', function () {
  this.timeout(300_000);

  it("proves the vocab-parallel embedding's hint stage at reduced shapes; a hint that does not hold there is never proved", async () => {
    const { plan, obj, stages, hint } = await hintedStages('gpt_tp2_l1_fwbw');
    const name = (s: Stage): string => plan.logical.tensors.name(s.logical);
    const emb = stages.find((s) => name(s) === 'embedding' && hint(s));
    // In this round's hints the embedding gradient's stage differs in place (its input's hint is
    // replaced in a later round): the reduced copy must not prove it either.
    const edb = stages.find((s) => name(s) === 'g1:embedding_dense_backward_1' && hint(s));
    assert.ok(emb !== undefined && edb !== undefined);
    assert.equal(new Prover(plan).prove(edb, false).status, 'differs');
    const state = newReducedRounds();
    const out = proveTooLargeReduced(plan, obj as unknown as RawPlan, [tooLarge(emb), tooLarge(edb)], 1, performance.now() + 120_000, state, hint);
    assert.equal(out[0]?.status, 'proved');
    assert.equal(out[0]?.decidedBy, 'per-stage');
    assert.equal(out[1]?.status, 'differs');
    assert.match(out[1]?.reason ?? '', /^at reduced shapes/);
    assert.deepEqual([state.tried, state.proved], [2, 1]);
    // The same stage is not tried twice, and a user stage that is not proved keeps its answer.
    const again = proveTooLargeReduced(plan, obj as unknown as RawPlan, [tooLarge(edb)], 1, performance.now() + 120_000, state, () => false);
    assert.equal(again[0]?.status, 'unknown');
    assert.equal(state.tried, 2);
    // Nothing is tried past the rounds' end.
    const late = proveTooLargeReduced(plan, obj as unknown as RawPlan, [tooLarge(emb)], 1, performance.now() - 1, newReducedRounds(), hint);
    assert.equal(late[0]?.status, 'unknown');
  });

  it("extracts a stage that assumes another output of its own multi-output op (apex LayerNorm backward's weight and bias gradients, all-reduced in one buffer); the twin without that all-reduce still differs extracted", async () => {
    for (const [config, want] of [['gpt_tp2_l1_fwbw', 'proved'], ['gpt_tp2_l1_fwbw.bug_sp_ln_grad', 'differs']] as const) {
      const { plan, obj, stages, hint } = await hintedStages(config);
      const name = (s: Stage): string => plan.logical.tensors.name(s.logical);
      // The hint stage of the weight gradient reads the bias gradient's claim (Megatron's
      // coalesced buffer): before, its extraction was refused ("a contract input but produced by").
      const w = stages.find((s) => name(s) === 'g1:fused_layer_norm_affine_bwd__r.1' && hint(s));
      assert.ok(w !== undefined);
      const pw = prepareStage(plan, obj as unknown as RawPlan, w);
      assert.notEqual(pw.info.mode, 'in-place', pw.info.reason);
      assert.equal(proveStage(pw, 1).result.status, 'proved');
      // The user stage of the same gradient: proved on the correct config, differs on the twin,
      // extracted and reduced as in place.
      const u = stages.find((s) => name(s) === 'grad.decoder.final_layernorm.weight');
      assert.ok(u !== undefined);
      const pu = prepareStage(plan, obj as unknown as RawPlan, u);
      assert.equal(pu.info.mode, 'reduced');
      assert.equal(proveStage(pu, 1).result.status, want, config);
      assert.equal(new Prover(plan).prove(u, false).status, want, config);
    }
  });
});
