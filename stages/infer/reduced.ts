/**
 * Per-stage reduction inside the inference rounds (stages/infer/boundary.ts).
 *
 * A stage of a hinted plan that the normal form finds too large at full shapes (Megatron's
 * vocab-parallel embedding at hidden 32 and vocabulary 128: every element a sum over the ids)
 * is extracted and reduced on its own (stages/shrink/stage-reduce.ts prepareStage), exactly as
 * verify's per-stage fallback does for a plan without hints, and proved there in this thread.
 * A proof is taken; so is a difference of a hint stage (it only steers which hint comes next);
 * anything else keeps the full-shape answer. The argument is docs/engine.md
 * "Per-stage reduction": the extracted plan is loaded with every check and must have the
 * stage's obligations and inputs, and a proof at reduced shapes is a proof at full shapes by
 * the lane argument. Hint claims are lineage like any other in the extracted plan.
 */

import type { LoadedPlan } from '../../lineage/load.js';
import type { RawPlan } from '../../plans/raw.js';
import type { Stage, StageResult } from '../decompose/prove.js';
import { prepareStage, proveStage } from '../shrink/stage-reduce.js';

/** Why a stage may shrink: the normal form's budget, the size bound or the stage deadline (as verify's fallback). */
const TOO_LARGE = /too large|deadline of/;

/** Work per reduced stage: a reduced stage is meant to be small, and the rounds are bounded. */
const REDUCED_DEADLINE_MS = 10_000;

/** How many reduced attempts one verify makes at most (each extraction loads a plan). */
export const REDUCED_ATTEMPTS = 400;

export interface ReducedRounds {
  /** Attempts made so far (all rounds), and how many proved. */
  tried: number;
  proved: number;
  /**
   * Stages already tried and not proved on `plan` (the round's plan with its hints): a later
   * round on the same plan does not try them again; a round whose hints changed (another plan:
   * the stage's assumed inputs may differ) does.
   */
  failed: Set<string>;
  plan?: LoadedPlan;
}

export const newReducedRounds = (): ReducedRounds => ({ tried: 0, proved: 0, failed: new Set() });

/**
 * `results[j]` is the full-shape answer for `todo[j]`. Each one unknown because it is too large
 * is tried once more, extracted and reduced, before `stopAt`, within the run's work `budget`
 * when one is given; a proof replaces it.
 */
export function proveTooLargeReduced(plan: LoadedPlan, raw: RawPlan | Record<string, unknown>, results: readonly StageResult[], seed: number, stopAt: number, state: ReducedRounds, hintStage: (s: Stage) => boolean, budget?: number): StageResult[] {
  const out = [...results];
  if (state.plan !== plan) {
    state.plan = plan;
    state.failed = new Set();
  }
  for (const [j, r] of results.entries()) {
    if (r.status !== 'unknown' || !TOO_LARGE.test(r.reason ?? '')) continue;
    if (state.tried >= REDUCED_ATTEMPTS || performance.now() >= stopAt) break;
    // (Keyed by the logical tensor and obligations, on this round's plan.)
    const key = `${r.stage.logical}|${r.stage.obligations.map((o) => `${o.rank}:${o.tensor}`).join(',')}`;
    if (state.failed.has(key)) continue;
    state.tried++;
    const t0 = performance.now();
    let res: StageResult;
    try {
      // (The hinted plan's object is a raw plan: withHints only adds claims to one.)
      const p = prepareStage(plan, raw as RawPlan, r.stage);
      // Nothing shrank: the same stage at the same shapes, already too large.
      if (p.info.mode !== 'reduced') {
        if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`  not reduced ${plan.logical.tensors.name(r.stage.logical)}: ${p.info.reason ?? ''}\n`);
        state.failed.add(key);
        continue;
      }
      const at = Math.min(stopAt, t0 + REDUCED_DEADLINE_MS);
      res = proveStage(p, seed, budget, { at, reason: 'the reduced stage was stopped at its deadline' }).result;
    } catch (e) {
      if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`  reduction failed ${plan.logical.tensors.name(r.stage.logical)}: ${String(e).slice(0, 200)}\n`);
      // An extraction or reduction that does not check out proves nothing: the answer stays.
      state.failed.add(key);
      continue;
    }
    if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`  reduced ${plan.logical.tensors.name(r.stage.logical)}: ${res.status} ${((performance.now() - t0) / 1000).toFixed(1)} s ${(res.reason ?? '').slice(0, 100)}\n`);
    if (res.status === 'proved') {
      state.proved++;
      out[j] = { stage: r.stage, status: 'proved', failingRanks: [], logicalOps: res.logicalOps, parallelOps: res.parallelOps, terms: res.terms, ms: r.ms + (performance.now() - t0), decidedBy: 'per-stage' };
    } else {
      state.failed.add(key);
      // A hint stage that differs at reduced shapes does not hold as stated there either: the
      // rounds then split it or try the next candidate, as they do for a hint that differs at
      // full shapes (a merged stage of two ranks' copies, split per decomposition, then proved).
      // A hint is never a witness and never a verdict, so this only chooses the next hint.
      if (res.status === 'differs' && hintStage(r.stage)) out[j] = { ...r, status: 'differs', reason: `at reduced shapes: ${res.reason ?? ''}` };
    }
  }
  return out;
}
