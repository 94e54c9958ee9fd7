/**
 * Named generator configurations. Small ones for tests; TrainVerify's demo, its Llama
 * configurations L1-L3 and its DeepSeek-style D1-D3 at their published dimensions
 * (trainverify-notes.md; what the notes leave open is assumed and said so in `about`).
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
  'moe-tiny': {
    model: { family: 'moe', layers: 1, hidden: 8, heads: 4, kvHeads: 2, seq: 1, vocab: 4, batch: 2, ffn: 4, experts: 2, topk: 1, shared: 1, expertFfn: 2 },
    par: { dp: 2, tp: 1, micro: 1, ep: true },
    about: 'one-layer DeepSeek-style MoE (2 experts, top-1, one shared expert), dp2 with the experts split across it (tests)',
  },
  D1: {
    model: { family: 'moe', layers: 27, hidden: 512, heads: 16, seq: 128, vocab: 129280, batch: 256, ffn: 1408, experts: 64, topk: 6, shared: 2, expertFfn: 1408 },
    par: { dp: 16, tp: 4, micro: 16, pp: 2, ep: true },
    about: 'TrainVerify D1: DeepSeek-V3-16B-like, 27 layers, 16 heads, hidden 512, 64 experts top-6; dp16 tp4 pp2, 16 micro-batches (128 GPUs), experts over dp; seq, vocab, widths, shared experts and gbs assumed',
  },
  D2: {
    model: { family: 'moe', layers: 60, hidden: 512, heads: 128, seq: 128, vocab: 129280, batch: 256, ffn: 1536, experts: 160, topk: 6, shared: 2, expertFfn: 1536 },
    par: { dp: 16, tp: 8, micro: 16, pp: 4, ep: true },
    about: 'TrainVerify D2: 236B-like, 60 layers, 128 heads, hidden 512, 160 experts top-6; dp16 tp8 pp4, 16 micro-batches (512 GPUs), experts over dp; seq, vocab, widths, shared experts and gbs assumed',
  },
  D3: {
    model: { family: 'moe', layers: 61, hidden: 512, heads: 128, seq: 128, vocab: 129280, batch: 512, ffn: 2048, experts: 256, topk: 8, shared: 1, expertFfn: 2048 },
    par: { dp: 32, tp: 8, micro: 16, pp: 8, ep: true },
    about: 'TrainVerify D3: 671B-like, 61 layers, 128 heads, hidden 512, 256 experts top-8; dp32 tp8 pp8, 16 micro-batches (2048 GPUs), experts over dp; seq, vocab, widths, shared experts and gbs assumed',
  },
  'gpt2-small-shape': {
    model: { family: 'gpt2', layers: 12, hidden: 768, heads: 12, seq: 1024, vocab: 50304, batch: 512, ffn: 3072 },
    par: { dp: 8, tp: 4, micro: 4 },
    about: 'GPT-2 small dimensions (12 layers, hidden 768, vocab 50304), dp8 tp4, 4 micro-batches: generation scale, not a proof size',
  },
};
