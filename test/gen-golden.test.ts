/**
 * Generated plans stay byte for byte what they were: a refactor of the generators (issue 14
 * split `build` into phases) must not change one op, name or claim. A few small plans
 * covering every phase (accumulation, ZeRO 1-3, tied gradients under a pipeline, interleaved
 * chunks, SP, ring CP, recomputation, MoE, no clipping, an injected bug) are hashed. When a
 * generator change is meant to change plans, the failure prints the new hash to put here.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { generatePlan, type GenOptions } from '../plans/gen/plan.js';
import { bugById } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';

const model = (p: string): ModelConfig => (PRESETS[p] as { model: ModelConfig }).model;
const NO_CLIP = { lr: '1/1000', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100' };

/** Each case: its options, an optional bug to inject, and the sha256 of the plan as the CLI writes it. */
const CASES: [string, GenOptions, string | undefined, string][] = [
  ['mlp-tiny', PRESETS['mlp-tiny'] as GenOptions, undefined, '6544d126937e36b2c235ccaa5d2aa4ad6cb32deaf3c98e66b5473e3172938835'],
  ['gpt2-tiny', PRESETS['gpt2-tiny'] as GenOptions, undefined, '08a780b0d742ee10c581fdb6c89e515e6d00447f13d6424cf772658ff74b4096'],
  ['llama-tiny-sp', PRESETS['llama-tiny-sp'] as GenOptions, undefined, 'b4e397461e501d8a9f3d799058546c19146f25fe05cceb81bc30ee33741004ae'],
  ['moe-tiny', PRESETS['moe-tiny'] as GenOptions, undefined, '5ed0aa405a789514e0f6c567ff5a7e5e7c4e5773145076c70192eb21b819c0d1'],
  ['gpt2 pp2 virtual2 sp zero1', { model: { ...model('gpt2-tiny'), layers: 4 }, par: { dp: 2, tp: 2, micro: 2, sp: true, zero: 1, pp: 2, virtual: 2 } }, undefined, '0796850b8ecd43439ef70db816ed6954795e4bc8ea99f9c174018dbeb3aacb2c'],
  ['gpt2 pp2 gpipe zero2 no clip', { model: { ...model('gpt2-tiny'), layers: 2 }, par: { dp: 2, tp: 2, micro: 2, zero: 2, pp: 2, schedule: 'gpipe' }, optimizer: NO_CLIP }, undefined, '2314c4441702469535eecb306b7b683b61b6e36d5871fdcd9b87ddcee94bab5c'],
  ['llama zero1 recompute', { model: model('llama-tiny'), par: { dp: 2, tp: 2, micro: 2, zero: 1, recompute: true } }, undefined, '66bceab6dad1717fa93fa0e85bde03b95c3a471961cd2b1dd16d0a76e10d95fa'],
  ['llama zero3', { model: model('llama-tiny'), par: { dp: 2, tp: 2, micro: 2, zero: 3 } }, undefined, '21013e6bf03b71138648969c2164a4e51c43a3682ea8c648de6c7657ba12b4e4'],
  ['llama ring cp2 tp2 sp', { model: { ...model('llama-tiny'), seq: 4, batch: 1 }, par: { dp: 1, tp: 2, micro: 1, sp: true, cp: 2 } }, undefined, '5f871737a0b5fa27a409552a0fba4f3cf9987656aee5c9bf3d66b5f5ce5b9379'],
  ['gpt2-tiny + tp-forward-allreduce-dropped', PRESETS['gpt2-tiny'] as GenOptions, 'tp-forward-allreduce-dropped', '90048bc2cfffb2a1fc53a08cdc86cc1ec5d4270164bdec31f2f1c938b5238d6b'],
];

describe('plan generators: output is byte-stable (golden hashes)', () => {
  for (const [name, opts, bug, want] of CASES) {
    it(name, () => {
      const plan = generatePlan(opts);
      if (bug !== undefined) {
        const b = bugById(bug);
        assert.ok(b !== undefined, bug);
        b.inject(plan, { ...opts.par, family: opts.model.family });
      }
      const got = createHash('sha256').update(JSON.stringify(plan, null, 1)).digest('hex');
      assert.equal(got, want, `${name}: the generated plan changed; if that is meant, its new hash is ${got}`);
    });
  }
});
