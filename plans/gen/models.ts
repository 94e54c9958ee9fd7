/**
 * Model families, written once against Net (see net.ts): an MLP and a GPT-2 style
 * transformer (LayerNorm, learned positions, causal multi-head attention, GELU MLP, tied
 * embedding / LM head, cross-entropy). Under tensor parallelism the layers are Megatron's:
 * column- and row-parallel linears, heads split across ranks, vocab-parallel embedding and
 * cross-entropy.
 */
import type { GradRef } from '../../ops/grad.js';
import type { Net } from './net.js';

export interface ModelConfig {
  readonly family: 'mlp' | 'gpt2' | 'llama';
  readonly layers: number;
  readonly hidden: number;
  /** Attention heads (gpt2). */
  readonly heads: number;
  /** Tokens per sample (gpt2). */
  readonly seq: number;
  readonly vocab: number;
  /** Global batch (samples per iteration). */
  readonly batch: number;
  /** MLP inner width (default 4 * hidden). */
  readonly ffn?: number;
  /** Key/value heads (llama, grouped-query attention; default: heads). */
  readonly kvHeads?: number;
}

export interface Model {
  /** Parameters in a fixed order, with their logical shapes and tp-shard dims. */
  params(net: Net): Map<string, GradRef>;
  /** One forward pass of this build's rows; returns the loss (a partial of the global mean). */
  forward(net: Net, p: Map<string, GradRef>): GradRef;
}

const ffn = (c: ModelConfig): number => c.ffn ?? 4 * c.hidden;

function get(p: Map<string, GradRef>, k: string): GradRef {
  const r = p.get(k);
  if (r === undefined) throw new Error(`no parameter '${k}'`);
  return r;
}

/**
 * The mean loss over the global batch: logically one op; in a data-parallel micro-batch build,
 * this build's sum divided by the global count, so that it is an addend of the global mean.
 */
function meanLoss(net: Net, sumOrMean: (reduction: 'sum' | 'mean', out?: string) => GradRef, globalCount: number): GradRef {
  if (net.logical) return sumOrMean('mean', net.g.scopedName('loss'));
  return net.op('scale', [sumOrMean('sum')], { factor: `1/${globalCount}` }, net.g.scopedName('loss'));
}

export function mlp(c: ModelConfig): Model {
  const F = ffn(c);
  return {
    params(net) {
      const p = new Map<string, GradRef>();
      for (let l = 0; l < c.layers; l++) {
        p.set(`l${l}.fc1.w`, net.param(`l${l}.fc1.w`, [F, c.hidden], 0));
        p.set(`l${l}.fc1.b`, net.param(`l${l}.fc1.b`, [F], 0));
        p.set(`l${l}.fc2.w`, net.param(`l${l}.fc2.w`, [c.hidden, F], 1));
      }
      return p;
    },
    forward(net, p) {
      let h = net.data('x', [c.batch, c.hidden]);
      const y = net.data('y', [c.batch, c.hidden]);
      for (let l = 0; l < c.layers; l++) {
        h = net.g.scope(`l${l}`, () => {
          const a = net.op('gelu', [net.op('linear', [net.copyToTp(h), get(p, `l${l}.fc1.w`), get(p, `l${l}.fc1.b`)])]);
          const o = net.reduceFromTp(net.op('linear', [a, get(p, `l${l}.fc2.w`)]));
          return net.op('add', [h, o]);
        });
      }
      return meanLoss(net, (reduction, out) => net.op('mse_loss', [h, y], { reduction }, out), c.batch * c.hidden);
    },
  };
}

export function gpt2(c: ModelConfig): Model {
  const H = c.hidden;
  const hd = H / c.heads;
  if (!Number.isInteger(hd)) throw new Error(`hidden ${H} is not divisible by heads ${c.heads}`);
  return {
    params(net) {
      const p = new Map<string, GradRef>();
      const add = (k: string, shape: number[], shard?: number): void => void p.set(k, net.param(k, shape, shard));
      add('wte', [c.vocab, H], 0);
      add('wpe', [c.seq, H]);
      for (let l = 0; l < c.layers; l++) {
        for (const n of ['ln1', 'ln2']) {
          add(`l${l}.${n}.w`, [H]);
          add(`l${l}.${n}.b`, [H]);
        }
        for (const n of ['q', 'k', 'v']) add(`l${l}.attn.${n}`, [H, H], 0);
        add(`l${l}.attn.o`, [H, H], 1);
        add(`l${l}.fc1.w`, [ffn(c), H], 0);
        add(`l${l}.fc1.b`, [ffn(c)], 0);
        add(`l${l}.fc2.w`, [H, ffn(c)], 1);
      }
      add('lnf.w', [H]);
      add('lnf.b', [H]);
      return p;
    },
    forward(net, p) {
      const B = net.rows(c.batch);
      const S = c.seq;
      const ids = net.data('ids', [c.batch, S], { dtype: 'int64', values: [0, c.vocab] });
      const labels = net.data('labels', [c.batch, S], { dtype: 'int64', values: [0, c.vocab] });
      const wte = get(p, 'wte');
      let h = net.op('add', [vocabEmbedding(net, ids, wte, c.vocab), net.seqChunk(get(p, 'wpe'), 0)]);
      const hl = (H / net.tp) | 0;
      const nh = c.heads / net.tp;
      if (!Number.isInteger(nh)) throw new Error(`heads ${c.heads} are not divisible by tp = ${net.tp}`);
      for (let l = 0; l < c.layers; l++) {
        h = net.g.scope(`l${l}`, () => {
          const ln = (x: GradRef, n: string): GradRef => net.op('layer_norm', [x, get(p, `l${l}.${n}.w`), get(p, `l${l}.${n}.b`)], { eps: '1/100000' });
          const a = net.enterTp(ln(h, 'ln1'));
          const heads = (n: string): GradRef => net.op('transpose', [net.op('reshape', [net.op('linear', [a, get(p, `l${l}.attn.${n}`)])], { shape: [B, S, nh, hd] })], { dim0: 1, dim1: 2 });
          const o = net.op('attention', [heads('q'), heads('k'), heads('v')], { causal: true });
          const merged = net.op('reshape', [net.op('transpose', [o], { dim0: 1, dim1: 2 })], { shape: [B, S, hl] });
          const h1 = net.op('add', [h, net.leaveTp(net.op('linear', [merged, get(p, `l${l}.attn.o`)]))]);
          const b = net.enterTp(ln(h1, 'ln2'));
          const f = net.op('gelu', [net.op('linear', [b, get(p, `l${l}.fc1.w`), get(p, `l${l}.fc1.b`)])]);
          return net.op('add', [h1, net.leaveTp(net.op('linear', [f, get(p, `l${l}.fc2.w`)]))]);
        });
      }
      const hf = net.enterTp(net.op('layer_norm', [h, get(p, 'lnf.w'), get(p, 'lnf.b')], { eps: '1/100000' }));
      // Tied LM head: logits against the (vocab-parallel) embedding table.
      const logits = net.op('matmul', [hf, net.op('transpose', [wte], { dim0: 0, dim1: 1 })]);
      const flat = net.op('reshape', [logits], { shape: [B * S, (c.vocab / net.tp) | 0] });
      const lab = net.op('reshape', [labels], { shape: [B * S] });
      return meanLoss(net, (reduction, out) => vocabCrossEntropy(net, flat, lab, c.vocab, reduction, out), c.batch * S);
    },
  };
}

/** Megatron's VocabParallelEmbedding (a plain embedding without tp). */
function vocabEmbedding(net: Net, ids: GradRef, w: GradRef, V: number): GradRef {
  if (net.tp === 1) return net.op('embedding', [ids, w], {}, net.g.scopedName('emb'));
  const VL = V / net.tp;
  const rows = net.g.scope('vp_emb', () => {
    const range = { start: { k: VL, c: 0 }, end: { k: VL, c: VL } };
    const mask = net.opTp('vocab_mask', [ids], {}, range);
    const local = net.opTp('vocab_local_ids', [ids], {}, range);
    const r = net.op('embedding', [local, w]);
    const shape = net.g.shape(mask);
    const m = net.op('reshape', [mask], { shape: [...shape, 1] });
    return net.op('where', [m, net.op('scale', [r], { factor: 0 }), r]);
  });
  net.g.t(rows).logical = 'emb';
  const out = net.leaveTp(rows);
  net.g.t(out).logical = 'emb';
  return out;
}

/**
 * Cross-entropy over [N, V] logits; under tp, Megatron's vocab-parallel form: all-reduce of
 * the row max (detached: the shift cancels), of the target logit and of the sum of exp.
 */
function vocabCrossEntropy(net: Net, logits: GradRef, labels: GradRef, V: number, reduction: 'sum' | 'mean', out?: string): GradRef {
  if (net.tp === 1) return net.op('cross_entropy', [logits, labels], { reduction }, out);
  if (reduction !== 'sum') throw new Error('vocab-parallel cross-entropy is built as a sum of per-token losses');
  const VL = V / net.tp;
  return net.g.scope('vp_ce', () => {
    const m = net.g.collective('all_reduce', net.detached('amax', [logits], { dims: [1], keepdim: true }), { reduce: 'max' }, ['tp'], net.sizes());
    const sh = net.op('sub', [logits, m]);
    const range = { start: { k: VL, c: 0 }, end: { k: VL, c: VL } };
    const mask = net.opTp('vocab_mask', [labels], {}, range);
    const local = net.opTp('vocab_local_ids', [labels], {}, range);
    const n = net.g.shape(labels)[0] as number;
    const pick = net.op('reshape', [net.op('gather', [sh, net.op('reshape', [local], { shape: [n, 1] })])], { shape: [n] });
    const pred = net.reduceFromTp(net.op('where', [mask, net.op('scale', [pick], { factor: 0 }), pick]));
    const s = net.reduceFromTp(net.op('sum', [net.op('exp', [sh])], { dims: [1] }));
    return net.op('sum', [net.op('sub', [net.op('log', [s]), pred])]);
  });
}

/**
 * Llama-3 style: RMSNorm, rotary embedding with separate cos / sin tables (inputs, as real
 * code precomputes them), grouped-query attention, SwiGLU MLP, untied LM head. Under tp the
 * query and key/value heads are split across ranks (kv heads must divide by tp).
 */
export function llama(c: ModelConfig): Model {
  const H = c.hidden;
  const hd = H / c.heads;
  const kvh = c.kvHeads ?? c.heads;
  if (!Number.isInteger(hd) || hd % 2 !== 0) throw new Error(`hidden ${H} / heads ${c.heads} must be an even head dim`);
  if (c.heads % kvh !== 0) throw new Error(`heads ${c.heads} are not a multiple of kv heads ${kvh}`);
  return {
    params(net) {
      const p = new Map<string, GradRef>();
      const add = (k: string, shape: number[], shard?: number): void => void p.set(k, net.param(k, shape, shard));
      add('embed', [c.vocab, H], 0);
      for (let l = 0; l < c.layers; l++) {
        add(`l${l}.attn_norm`, [H]);
        add(`l${l}.attn.q`, [H, H], 0);
        add(`l${l}.attn.k`, [kvh * hd, H], 0);
        add(`l${l}.attn.v`, [kvh * hd, H], 0);
        add(`l${l}.attn.o`, [H, H], 1);
        add(`l${l}.mlp_norm`, [H]);
        add(`l${l}.mlp.gate`, [ffn(c), H], 0);
        add(`l${l}.mlp.up`, [ffn(c), H], 0);
        add(`l${l}.mlp.down`, [H, ffn(c)], 1);
      }
      add('norm', [H]);
      add('lm_head', [c.vocab, H], 0);
      return p;
    },
    forward(net, p) {
      const B = net.rows(c.batch);
      const S = c.seq;
      const nh = c.heads / net.tp;
      const nkv = kvh / net.tp;
      if (!Number.isInteger(nkv)) throw new Error(`kv heads ${kvh} are not divisible by tp = ${net.tp}`);
      const ids = net.data('ids', [c.batch, S], { dtype: 'int64', values: [0, c.vocab] });
      const labels = net.data('labels', [c.batch, S], { dtype: 'int64', values: [0, c.vocab] });
      const cos = net.table('rope_cos', [S, hd]);
      const sin = net.table('rope_sin', [S, hd]);
      let h = vocabEmbedding(net, ids, get(p, 'embed'), c.vocab);
      for (let l = 0; l < c.layers; l++) {
        h = net.g.scope(`l${l}`, () => {
          const norm = (x: GradRef, w: string): GradRef => net.op('rms_norm', [x, get(p, `l${l}.${w}`)], { eps: '1/100000' });
          const a = net.enterTp(norm(h, 'attn_norm'));
          const heads = (n: string, count: number, rope: boolean): GradRef => {
            const x = net.op('transpose', [net.op('reshape', [net.op('linear', [a, get(p, `l${l}.attn.${n}`)])], { shape: [B, S, count, hd] })], { dim0: 1, dim1: 2 });
            return rope ? net.op('rope', [x, cos, sin]) : x;
          };
          const o = net.op('attention', [heads('q', nh, true), heads('k', nkv, true), heads('v', nkv, false)], { causal: true });
          const merged = net.op('reshape', [net.op('transpose', [o], { dim0: 1, dim1: 2 })], { shape: [B, S, nh * hd] });
          const h1 = net.op('add', [h, net.leaveTp(net.op('linear', [merged, get(p, `l${l}.attn.o`)]))]);
          const b = net.enterTp(norm(h1, 'mlp_norm'));
          const gated = net.op('swiglu', [net.op('linear', [b, get(p, `l${l}.mlp.gate`)]), net.op('linear', [b, get(p, `l${l}.mlp.up`)])]);
          return net.op('add', [h1, net.leaveTp(net.op('linear', [gated, get(p, `l${l}.mlp.down`)]))]);
        });
      }
      const hf = net.enterTp(net.op('rms_norm', [h, get(p, 'norm')], { eps: '1/100000' }));
      const logits = net.op('linear', [hf, get(p, 'lm_head')]);
      const flat = net.op('reshape', [logits], { shape: [B * S, (c.vocab / net.tp) | 0] });
      const lab = net.op('reshape', [labels], { shape: [B * S] });
      return meanLoss(net, (reduction, out) => vocabCrossEntropy(net, flat, lab, c.vocab, reduction, out), c.batch * S);
    },
  };
}

export function buildModel(c: ModelConfig): Model {
  return c.family === 'mlp' ? mlp(c) : c.family === 'gpt2' ? gpt2(c) : llama(c);
}
