/**
 * Named generator configurations. Small ones for tests; TrainVerify's demo and its Llama
 * configurations L1-L3 at their published dimensions (trainverify-notes.md). D1-D3 need the
 * MoE family, which the generator does not have yet (docs/bugs.md, "Not yet generated").
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
  demo: {
    model: { family: 'llama', layers: 32, hidden: 4096, heads: 32, kvHeads: 8, seq: 128, vocab: 128256, batch: 8, ffn: 14336 },
    par: { dp: 2, tp: 2, micro: 2, pp: 2 },
    about: "TrainVerify's demo plan: Llama, 32 layers, dp2 tp2 pp2, 2 micro-batches (generation scale)",
  },
  L1: {
    model: { family: 'llama', layers: 32, hidden: 4096, heads: 32, kvHeads: 8, seq: 128, vocab: 128256, batch: 512, ffn: 14336 },
    par: { dp: 512, tp: 1, micro: 1 },
    about: 'TrainVerify L1: Llama3-8B, 32 layers, 32 heads, hidden 4096, seq 128, gbs 512; dp512 (512 GPUs)',
  },
  L2: {
    model: { family: 'llama', layers: 80, hidden: 4096, heads: 64, kvHeads: 8, seq: 128, vocab: 128256, batch: 512, ffn: 14336 },
    par: { dp: 16, tp: 8, micro: 32, pp: 4 },
    about: 'TrainVerify L2: "70B" as configured, 80 layers, 64 heads, hidden 4096, gbs 512; dp16 tp8 pp4, 32 micro-batches (512 GPUs); seq 128 assumed',
  },
  L3: {
    model: { family: 'llama', layers: 126, hidden: 1024, heads: 128, kvHeads: 8, seq: 128, vocab: 128256, batch: 2048, ffn: 3584 },
    par: { dp: 64, tp: 8, micro: 16, pp: 16 },
    about: 'TrainVerify L3: "405B" as configured, 126 layers, 128 heads, hidden 1024, gbs 2048; dp64 tp8 pp16, 16 micro-batches (8192 GPUs); seq 128 and ffn 3.5x hidden assumed',
  },
  'gpt2-small-shape': {
    model: { family: 'gpt2', layers: 12, hidden: 768, heads: 12, seq: 1024, vocab: 50304, batch: 512, ffn: 3072 },
    par: { dp: 8, tp: 4, micro: 4 },
    about: 'GPT-2 small dimensions (12 layers, hidden 768, vocab 50304), dp8 tp4, 4 micro-batches: generation scale, not a proof size',
  },
};
