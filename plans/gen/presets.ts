/**
 * Named generator configurations. Small ones for tests and examples; TrainVerify's large
 * configurations (L1-L3, D1-D3) need the Llama and MoE families and pipeline parallelism,
 * which the generator does not have yet (see docs/bugs.md, "Not yet generated").
 */
import type { ModelConfig } from './models.js';
import type { Parallelism } from './net.js';

export interface Preset {
  readonly model: ModelConfig;
  readonly par: Parallelism;
  readonly about: string;
}

export const PRESETS: Readonly<Record<string, Preset>> = {
  'mlp-tiny': {
    model: { family: 'mlp', layers: 1, hidden: 2, heads: 1, seq: 1, vocab: 1, batch: 4, ffn: 4 },
    par: { dp: 2, tp: 2, micro: 2 },
    about: 'one-layer MLP, dp2 tp2, 2 micro-batches (tests)',
  },
  'gpt2-tiny': {
    model: { family: 'gpt2', layers: 1, hidden: 4, heads: 2, seq: 2, vocab: 4, batch: 4, ffn: 4 },
    par: { dp: 2, tp: 2, micro: 2 },
    about: 'one-layer GPT-2 (vocab 4, 2 heads), dp2 tp2, 2 micro-batches (tests)',
  },
  'llama-tiny': {
    model: { family: 'llama', layers: 1, hidden: 8, heads: 4, kvHeads: 2, seq: 2, vocab: 4, batch: 4, ffn: 4 },
    par: { dp: 2, tp: 2, micro: 2 },
    about: 'one-layer Llama (RMSNorm, RoPE, 4 query / 2 kv heads, SwiGLU), dp2 tp2, 2 micro-batches (tests)',
  },
  'llama-tiny-sp': {
    model: { family: 'llama', layers: 1, hidden: 8, heads: 4, kvHeads: 2, seq: 2, vocab: 4, batch: 4, ffn: 4 },
    par: { dp: 2, tp: 2, micro: 2, sp: true },
    about: 'llama-tiny with Megatron sequence parallelism (tests)',
  },
  'llama3-8b-shape': {
    model: { family: 'llama', layers: 32, hidden: 4096, heads: 32, kvHeads: 8, seq: 128, vocab: 128256, batch: 512, ffn: 14336 },
    par: { dp: 64, tp: 8, micro: 1 },
    about: 'Llama-3 8B dimensions (TrainVerify L1 model, seq 128, gbs 512), dp64 tp8 (512 ranks): generation scale, not a proof size',
  },
  'gpt2-small-shape': {
    model: { family: 'gpt2', layers: 12, hidden: 768, heads: 12, seq: 1024, vocab: 50304, batch: 512, ffn: 3072 },
    par: { dp: 8, tp: 4, micro: 4 },
    about: 'GPT-2 small dimensions (12 layers, hidden 768, vocab 50304), dp8 tp4, 4 micro-batches: generation scale, not a proof size',
  },
};
