/** The bug catalog's test configurations, shared by test/gen.test.ts and test/domains.test.ts. */
import { type OptimizerConfig } from '../plans/gen/plan.js';
import { type BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';

export const MLP = (PRESETS['mlp-tiny'] as { model: ModelConfig }).model;
export const GPT2 = (PRESETS['gpt2-tiny'] as { model: ModelConfig }).model;
export const LLAMA = (PRESETS['llama-tiny'] as { model: ModelConfig }).model;
export const MOE = (PRESETS['moe-tiny'] as { model: ModelConfig }).model;
// A large learning rate and a small clipping threshold make every optimizer-side bug visible
// numerically (with max_norm 1 the clip factor is often exactly 1 at random inputs).
export const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };

/** The first configuration that has the bug's place (gpt2, llama, then with SP, ...). */
export function bugConfig(bug: (typeof BUGS)[number]): [BugContext, ModelConfig] {
  for (const [sp, zero, pp] of [[false, 0, 1], [false, 1, 1], [false, 2, 1], [false, 3, 1], [true, 0, 1], [false, 0, 2], [false, 1, 2]] as const) {
    for (const [family, model] of [['gpt2', GPT2], ['llama', LLAMA]] as const) {
      const c: BugContext = { dp: 2, tp: 2, micro: 2, sp, zero, pp, family };
      if (bug.applies(c)) return [c, pp > 1 ? { ...model, layers: 2 } : model];
    }
  }
  const recompute: BugContext = { dp: 2, tp: 2, micro: 2, family: 'llama', recompute: true };
  if (bug.applies(recompute)) return [recompute, LLAMA];
  const dpOnly: BugContext = { dp: 2, tp: 2, micro: 1, family: 'gpt2' };
  if (bug.applies(dpOnly)) return [dpOnly, GPT2];
  const moe: BugContext = { dp: 2, tp: 1, micro: 1, family: 'moe', ep: true };
  if (bug.applies(moe)) return [moe, MOE];
  const moeSp: BugContext = { dp: 1, tp: 2, micro: 1, family: 'moe', sp: true };
  if (bug.applies(moeSp)) return [moeSp, { ...MOE, seq: 2, batch: 1 }];
  for (const cpComm of ['ring', 'allgather'] as const) {
    const cpCtx: BugContext = { dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm };
    if (bug.applies(cpCtx)) return [cpCtx, { ...LLAMA, seq: 4, batch: 1 }];
  }
  const interleaved: BugContext = { dp: 1, tp: 1, micro: 2, family: 'mlp', pp: 2, virtual: 2 };
  if (bug.applies(interleaved)) return [interleaved, { ...MLP, layers: 4 }];
  throw new Error(`no test configuration for ${bug.id}`);
}
