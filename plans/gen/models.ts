/**
 * Model families, written once against Net (see net.ts): an MLP, a GPT-2 style transformer
 * (LayerNorm, learned positions, causal multi-head attention, GELU MLP, tied embedding / LM
 * head, cross-entropy) and a Llama-3 style one. Under tensor parallelism the layers are
 * Megatron's: column- and row-parallel linears, heads split across ranks, vocab-parallel
 * embedding and cross-entropy. A model is three parts (embedding, layer l, head) so that a
 * pipeline stage can build only its own; parameters are declared where first used.
 */
import type { GradRef } from '../../ops/grad.js';
import type { Attrs } from '../../ops/types.js';
import type { Net, TpAffine } from './net.js';

export interface ModelConfig {
  readonly family: 'mlp' | 'gpt2' | 'llama' | 'moe';
  readonly layers: number;
  readonly hidden: number;
  /** Attention heads (gpt2, llama). */
  readonly heads: number;
  /** Tokens per sample (gpt2, llama). */
  readonly seq: number;
  readonly vocab: number;
  /** Global batch (samples per iteration). */
  readonly batch: number;
  /** MLP inner width (default 4 * hidden). */
  readonly ffn?: number;
  /** Key/value heads (llama, grouped-query attention; default: heads). */
  readonly kvHeads?: number;
  /** MoE: routed experts, experts per token, shared experts (dense MLPs of width ffn). */
  readonly experts?: number;
  readonly topk?: number;
  readonly shared?: number;
  /** MoE: routed-expert MLP width (default ffn). */
  readonly expertFfn?: number;
  /**
   * MoE expert buffers: 'packed' (default; the dropless permutation, slots sorted by expert)
   * or 'token' (each slot at its own row; see ops/moe.ts).
   */
  readonly moeLayout?: 'packed' | 'token';
}

interface ParamSpec {
  readonly shape: number[];
  /** Dim split over tp (or over dp for experts, see axis), if any. */
  readonly shard?: number;
  readonly axis?: 'tp' | 'dp';
}

/** Parameters by name, declared in a build when first used (a pipeline stage declares its own). */
export class Params {
  private readonly refs = new Map<string, GradRef>();
  constructor(
    private readonly net: Net,
    private readonly specs: ReadonlyMap<string, ParamSpec>,
  ) {}
  get(name: string): GradRef {
    let r = this.refs.get(name);
    if (r === undefined) {
      const sp = this.specs.get(name);
      if (sp === undefined) throw new Error(`no parameter '${name}'`);
      r = this.net.param(name, sp.shape, sp.shard, 'param', sp.axis ?? 'tp');
      this.refs.set(name, r);
    }
    return r;
  }
  /** Declared parameters, in order of first use. */
  declared(): Map<string, GradRef> {
    return new Map(this.refs);
  }
}

export interface Model {
  readonly layers: number;
  readonly specs: ReadonlyMap<string, ParamSpec>;
  /** Parameters used by both the first and the last part (a tied embedding / LM head). */
  readonly tied: readonly string[];
  /** Data in, hidden states out (this build's rows). */
  embed(net: Net, p: Params): GradRef;
  layer(net: Net, p: Params, l: number, h: GradRef): GradRef;
  /** Hidden states in, the loss out (a partial of the global mean on the parallel side). */
  head(net: Net, p: Params, h: GradRef): GradRef;
}

const ffn = (c: ModelConfig): number => c.ffn ?? 4 * c.hidden;

/**
 * The mean loss over the global batch: logically one op; in a data-parallel micro-batch build,
 * this build's sum divided by the global count, so that it is an addend of the global mean.
 */
function meanLoss(net: Net, sumOrMean: (reduction: 'sum' | 'mean', out?: string) => GradRef, globalCount: number): GradRef {
  if (net.logical) return sumOrMean('mean', net.g.scopedName('loss'));
  return net.op('scale', [sumOrMean('sum')], { factor: `1/${globalCount}` }, net.g.scopedName('loss'));
}

function specMap(add: (f: (k: string, shape: number[], shard?: number, axis?: 'tp' | 'dp') => void) => void): Map<string, ParamSpec> {
  const m = new Map<string, ParamSpec>();
  add((k, shape, shard, axis) => m.set(k, shard === undefined ? { shape } : axis === undefined ? { shape, shard } : { shape, shard, axis }));
  return m;
}

function mlp(c: ModelConfig): Model {
  const F = ffn(c);
  return {
    layers: c.layers,
    tied: [],
    specs: specMap((add) => {
      for (let l = 0; l < c.layers; l++) {
        add(`l${l}.fc1.w`, [F, c.hidden], 0);
        add(`l${l}.fc1.b`, [F], 0);
        add(`l${l}.fc2.w`, [c.hidden, F], 1);
      }
    }),
    embed: (net) => net.data('x', [c.batch, c.hidden]),
    layer: (net, p, l, h) =>
      net.g.scope(`l${l}`, () => {
        const a = net.op('gelu', [net.op('linear', [net.copyToTp(h), p.get(`l${l}.fc1.w`), p.get(`l${l}.fc1.b`)])]);
        const o = net.reduceFromTp(net.op('linear', [a, p.get(`l${l}.fc2.w`)]));
        return net.op('add', [h, o]);
      }),
    head: (net, _p, h) =>
      net.g.scope('head', () => {
        const y = net.data('y', [c.batch, c.hidden]);
        return meanLoss(net, (reduction, out) => net.op('mse_loss', [h, y], { reduction }, out), c.batch * c.hidden);
      }),
  };
}

function gpt2(c: ModelConfig): Model {
  const H = c.hidden;
  const hd = H / c.heads;
  if (!Number.isInteger(hd)) throw new Error(`hidden ${H} is not divisible by heads ${c.heads}`);
  return {
    layers: c.layers,
    tied: ['wte'],
    specs: specMap((add) => {
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
    }),
    embed: (net, p) =>
      net.g.scope('embed', () => {
        const ids = net.data('ids', [c.batch, c.seq], { dtype: 'int64', values: [0, c.vocab] }, 1);
        // Learned positions: this rank's zig-zag rows under CP, its SP piece of them under SP.
        return net.op('add', [vocabEmbedding(net, ids, p.get('wte'), c.vocab), net.seqChunk(net.zigzag(p.get('wpe'), 0), 0)]);
      }),
    layer: (net, p, l, h) => {
      const B = net.rows(c.batch);
      const S = c.seq / net.cp;
      const hl = (H / net.tp) | 0;
      const nh = c.heads / net.tp;
      if (!Number.isInteger(nh)) throw new Error(`heads ${c.heads} are not divisible by tp = ${net.tp}`);
      return net.g.scope(`l${l}`, () => {
        const ln = (x: GradRef, n: string): GradRef => net.op('layer_norm', [x, p.get(`l${l}.${n}.w`), p.get(`l${l}.${n}.b`)], { eps: '1/100000' });
        const a = net.enterTp(ln(h, 'ln1'));
        const heads = (n: string): GradRef => net.op('transpose', [net.op('reshape', [net.op('linear', [a, p.get(`l${l}.attn.${n}`)])], { shape: [B, S, nh, hd] })], { dim0: 1, dim1: 2 });
        const o = causalAttention(net, heads('q'), heads('k'), heads('v'), c.seq);
        const merged = net.op('reshape', [net.op('transpose', [o], { dim0: 1, dim1: 2 })], { shape: [B, S, hl] });
        const h1 = net.op('add', [h, net.leaveTp(net.op('linear', [merged, p.get(`l${l}.attn.o`)]))]);
        const b = net.enterTp(ln(h1, 'ln2'));
        const f = net.op('gelu', [net.op('linear', [b, p.get(`l${l}.fc1.w`), p.get(`l${l}.fc1.b`)])]);
        return net.op('add', [h1, net.leaveTp(net.op('linear', [f, p.get(`l${l}.fc2.w`)]))]);
      });
    },
    head: (net, p, h) =>
      net.g.scope('head', () => {
        const B = net.rows(c.batch);
        const S = c.seq / net.cp;
        const labels = net.data('labels', [c.batch, c.seq], { dtype: 'int64', values: [0, c.vocab] }, 1);
        const hf = net.enterTp(net.op('layer_norm', [h, p.get('lnf.w'), p.get('lnf.b')], { eps: '1/100000' }));
        // Tied LM head: logits against the (vocab-parallel) embedding table.
        const logits = net.op('matmul', [hf, net.op('transpose', [p.get('wte')], { dim0: 0, dim1: 1 })]);
        const flat = net.op('reshape', [logits], { shape: [B * S, (c.vocab / net.tp) | 0] });
        const lab = net.op('reshape', [labels], { shape: [B * S] });
        return meanLoss(net, (reduction, out) => vocabCrossEntropy(net, flat, lab, c.vocab, reduction, out), c.batch * c.seq);
      }),
  };
}

/** Megatron's VocabParallelEmbedding (a plain embedding without tp). */
function vocabEmbedding(net: Net, ids: GradRef, w: GradRef, V: number): GradRef {
  if (net.tp === 1) return net.op('embedding', [ids, w], {}, net.g.scopedName('emb'));
  const VL = V / net.tp;
  // The table's gradient from this lookup is the rank's vocab shard of the logical one.
  const gname = `grad/${net.g.logicalScope()}/embedding_backward`;
  const rows = net.g.scope('vp_emb', () => {
    const range = { start: { k: VL, c: 0 }, end: { k: VL, c: VL } };
    const mask = net.opTp('vocab_mask', [ids], {}, range);
    const local = net.opTp('vocab_local_ids', [ids], {}, range);
    const r = net.op('embedding', [local, w]);
    net.g.claimInputGrad(r, 1, gname);
    const shape = net.g.shape(mask);
    const m = net.op('reshape', [mask], { shape: [...shape, 1] });
    return net.op('where', [m, net.op('scale', [r], { factor: 0 }), r]);
  });
  // The logical embedding output is named 'emb' in this scope (without a micro-batch prefix).
  net.g.t(rows).logical = net.g.scopedName('emb').replace(/^mb[0-9]+\//, '');
  const out = net.leaveTp(rows);
  net.g.t(out).logical = net.g.t(rows).logical;
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
  // The logits' gradient is the rank's vocab shard of the logical cross_entropy_backward.
  net.g.gradClaims.set(logits, `grad/${net.g.logicalScope()}/cross_entropy_backward`);
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
function llama(c: ModelConfig, moe?: (net: Net, p: Params, l: number, x: GradRef) => GradRef, moeSpecs?: (add: (k: string, shape: number[], shard?: number, axis?: 'tp' | 'dp') => void) => void): Model {
  const H = c.hidden;
  const hd = H / c.heads;
  const kvh = c.kvHeads ?? c.heads;
  if (!Number.isInteger(hd) || hd % 2 !== 0) throw new Error(`hidden ${H} / heads ${c.heads} must be an even head dim`);
  if (c.heads % kvh !== 0) throw new Error(`heads ${c.heads} are not a multiple of kv heads ${kvh}`);
  return {
    layers: c.layers,
    tied: [],
    specs: specMap((add) => {
      add('embed', [c.vocab, H], 0);
      for (let l = 0; l < c.layers; l++) {
        add(`l${l}.attn_norm`, [H]);
        add(`l${l}.attn.q`, [H, H], 0);
        add(`l${l}.attn.k`, [kvh * hd, H], 0);
        add(`l${l}.attn.v`, [kvh * hd, H], 0);
        add(`l${l}.attn.o`, [H, H], 1);
        add(`l${l}.mlp_norm`, [H]);
        if (moe === undefined) {
          add(`l${l}.mlp.gate`, [ffn(c), H], 0);
          add(`l${l}.mlp.up`, [ffn(c), H], 0);
          add(`l${l}.mlp.down`, [H, ffn(c)], 1);
        }
      }
      moeSpecs?.(add);
      add('norm', [H]);
      add('lm_head', [c.vocab, H], 0);
    }),
    embed: (net, p) =>
      net.g.scope('embed', () => {
        const ids = net.data('ids', [c.batch, c.seq], { dtype: 'int64', values: [0, c.vocab] }, 1);
        return vocabEmbedding(net, ids, p.get('embed'), c.vocab);
      }),
    layer: (net, p, l, h) => {
      const B = net.rows(c.batch);
      // This rank's tokens of each sequence (its zig-zag chunks under context parallelism).
      const S = c.seq / net.cp;
      const nh = c.heads / net.tp;
      const nkv = kvh / net.tp;
      if (!Number.isInteger(nkv) || !Number.isInteger(nh)) throw new Error(`kv heads ${kvh} are not divisible by tp = ${net.tp}`);
      return net.g.scope(`l${l}`, () => {
        const cos = net.zigzag(net.table('rope_cos', [c.seq, hd]), 0);
        const sin = net.zigzag(net.table('rope_sin', [c.seq, hd]), 0);
        const norm = (x: GradRef, w: string): GradRef => net.op('rms_norm', [x, p.get(`l${l}.${w}`)], { eps: '1/100000' });
        const a = net.enterTp(norm(h, 'attn_norm'));
        const heads = (n: string, count: number, rope: boolean): GradRef => {
          const x = net.op('transpose', [net.op('reshape', [net.op('linear', [a, p.get(`l${l}.attn.${n}`)])], { shape: [B, S, count, hd] })], { dim0: 1, dim1: 2 });
          return rope ? net.op('rope', [x, cos, sin]) : x;
        };
        const o = causalAttention(net, heads('q', nh, true), heads('k', nkv, true), heads('v', nkv, false), c.seq);
        const merged = net.op('reshape', [net.op('transpose', [o], { dim0: 1, dim1: 2 })], { shape: [B, S, nh * hd] });
        const h1 = net.op('add', [h, net.leaveTp(net.op('linear', [merged, p.get(`l${l}.attn.o`)]))]);
        if (moe !== undefined) return net.op('add', [h1, moe(net, p, l, norm(h1, 'mlp_norm'))]);
        const b = net.enterTp(norm(h1, 'mlp_norm'));
        const gated = net.op('swiglu', [net.op('linear', [b, p.get(`l${l}.mlp.gate`)]), net.op('linear', [b, p.get(`l${l}.mlp.up`)])]);
        return net.op('add', [h1, net.leaveTp(net.op('linear', [gated, p.get(`l${l}.mlp.down`)]))]);
      });
    },
    head: (net, p, h) =>
      net.g.scope('head', () => {
        const B = net.rows(c.batch);
        const S = c.seq / net.cp;
        const labels = net.data('labels', [c.batch, c.seq], { dtype: 'int64', values: [0, c.vocab] }, 1);
        const hf = net.enterTp(net.op('rms_norm', [h, p.get('norm')], { eps: '1/100000' }));
        const logits = net.op('linear', [hf, p.get('lm_head')]);
        const flat = net.op('reshape', [logits], { shape: [B * S, (c.vocab / net.tp) | 0] });
        const lab = net.op('reshape', [labels], { shape: [B * S] });
        return meanLoss(net, (reduction, out) => vocabCrossEntropy(net, flat, lab, c.vocab, reduction, out), c.batch * c.seq);
      }),
  };
}

/**
 * DeepSeek-style mixture of experts on the Llama block: a softmax router over the experts, top-k
 * routing with the gates as weights, dropless dispatch and combine, routed experts with a
 * SiLU MLP, and shared experts (a dense SwiGLU MLP) added to the routed output. Under expert
 * parallelism the experts are split across the data-parallel ranks and the routed slots go
 * to them and back by all-to-all. Experts are not split over tp: every tp rank computes the
 * MoE layer alike (the router and experts see the full hidden states).
 */
function moe(c: ModelConfig): Model {
  const H = c.hidden;
  const E = c.experts ?? 4;
  const k = c.topk ?? 1;
  const F = c.expertFfn ?? ffn(c);
  const shared = c.shared ?? 1;
  const layout: Attrs = c.moeLayout === 'token' ? { layout: 'token' } : {};
  const layer = (net: Net, p: Params, l: number, x: GradRef): GradRef =>
    net.g.scope('moe', () => {
      const [B, S] = net.g.shape(x) as [number, number, number];
      const tokens = net.op('reshape', [x], { shape: [B * S, H] });
      const scores = net.op('softmax', [net.op('linear', [tokens, p.get(`l${l}.router`)])], { dim: -1 });
      const [gates, idx] = net.g.op('topk', [scores], { k }) as [GradRef, GradRef];
      // Expert buffers of a subset of the tokens claim nothing in the packed layout (slot
      // positions count that subset's routing); in the token layout they are row blocks.
      const out = net.g.scope('experts', () => {
        const buf = net.allToAllDp(net.op('moe_dispatch', [tokens, idx], { experts: E, ...layout }), 0, 1);
        const hidden = net.op('silu', [net.op('matmul', [buf, p.get(`l${l}.experts.w1`)])]);
        return net.allToAllDp(net.op('matmul', [hidden, p.get(`l${l}.experts.w2`)]), 1, 0);
      });
      let y = net.op('moe_combine', [out, idx, gates], layout);
      for (let sidx = 0; sidx < shared; sidx++) {
        const w = (n: string): GradRef => p.get(`l${l}.shared${sidx}.${n}`);
        y = net.op('add', [y, net.op('linear', [net.op('swiglu', [net.op('linear', [tokens, w('gate')]), net.op('linear', [tokens, w('up')])]), w('down')])]);
      }
      return net.op('reshape', [y], { shape: [B, S, H] });
    });
  return llama(c, layer, (add) => {
    for (let l = 0; l < c.layers; l++) {
      add(`l${l}.router`, [E, H]);
      add(`l${l}.experts.w1`, [E, H, F], 0, 'dp');
      add(`l${l}.experts.w2`, [E, F, H], 0, 'dp');
      for (let sidx = 0; sidx < shared; sidx++) {
        add(`l${l}.shared${sidx}.gate`, [ffn(c), H]);
        add(`l${l}.shared${sidx}.up`, [ffn(c), H]);
        add(`l${l}.shared${sidx}.down`, [H, ffn(c)]);
      }
    }
  });
}

/**
 * Causal attention of this rank's queries over the whole sequence's keys. Under context
 * parallelism the queries are two zig-zag chunks (r and 2 cp - 1 - r): with all-gathered
 * keys and values each attends with its own position offset; otherwise by ring attention.
 */
function causalAttention(net: Net, q: GradRef, kLocal: GradRef, vLocal: GradRef, seq: number): GradRef {
  if (net.cp === 1) return net.op('attention', [q, kLocal, vLocal], { causal: true });
  if (net.cpRing) return ringAttention(net, q, kLocal, vLocal, seq);
  const k = net.gatherSeq(kLocal, 2);
  const v = net.gatherSeq(vLocal, 2);
  const chunk = seq / (2 * net.cp);
  const g = net.g;
  const offsets = [{ k: chunk, c: 0 }, { k: -chunk, c: seq - chunk }];
  // Forward and backward are spelled here (a custom tape entry), so that the gradients of
  // q, k and v claim what the logical attention_backward computes: dq this rank's chunks,
  // dk and dv its queries' addends of the whole sequence's.
  // The logical attention's name in this scope: the gathered output claims it.
  const aname = g.scopedName('attention').replace(/^mb[0-9]+\//, '');
  const fwd = g.untaped(() =>
    g.scope('cp', () => {
      const qs = g.op('split', [q], { dim: 2, sizes: [chunk, chunk] });
      const os = qs.map((qc, i) => net.opAt('cp', net.cp, 'attention', [qc, k, v], { causal: true }, { q_offset: offsets[i] as TpAffine }));
      return { qs, os, out: net.op('concat', os, { dim: 2 }) };
    }),
  );
  g.t(fwd.out).tags = g.t(q).tags?.slice();
  g.t(fwd.out).logical = aname;
  g.custom([q, k, v], [fwd.out], ([go]) => {
    const lname = g.scopedName('attention_backward');
    return g.scope('cp', () => {
      const gs = g.op('split', [go as GradRef], { dim: 2, sizes: [chunk, chunk] });
      // The saved output is read back from the claimed whole, not recomputed per chunk.
      const os = g.op('split', [fwd.out], { dim: 2, sizes: [chunk, chunk] });
      const parts = gs.map((gc, i) => net.opAtAll('cp', net.cp, 'attention_backward', [gc, fwd.qs[i] as GradRef, k, v, os[i] as GradRef], { causal: true }, { q_offset: offsets[i] as TpAffine }));
      const dq = net.op('concat', parts.map((p) => p[0] as GradRef), { dim: 2 });
      const dk = net.op('add', parts.map((p) => p[1] as GradRef));
      const dv = net.op('add', parts.map((p) => p[2] as GradRef));
      g.t(dq).tags = g.t(q).tags?.slice();
      [dq, dk, dv].forEach((x, i) => (g.t(x).logical = (i === 0 ? lname : `${lname}.${i}`).replace(/^mb[0-9]+\//, '')));
      return [dq, dk, dv];
    });
  });
  return fwd.out;
}

/**
 * Ring attention with load-balanced zig-zag chunks (TransformerEngine's context-parallel
 * attention, causal). Rank r holds query, key and value chunks r and 2 cp - 1 - r. At step t
 * it holds the keys and values of rank s = r - t (mod cp), received from its predecessor and
 * passed on to its successor. A query chunk attends a key chunk with a lower index fully, its
 * own index causally, a higher one not at all; each visible block gives a partial (o, m, l)
 * and the partials of a query chunk merge by online softmax. Backward, the keys and values go
 * around the ring again with their gradient accumulators: each rank adds its queries' share
 * (`attention_partial_backward` from the combined output and statistics) and passes the
 * accumulator on, so after cp hops it is back at the owner, complete.
 */
function ringAttention(net: Net, q: GradRef, k: GradRef, v: GradRef, seq: number): GradRef {
  const g = net.g;
  const cp = net.cp;
  const r = net.cpRank;
  if (r === undefined) throw new Error('ring attention needs the program\'s CP rank');
  const chunk = seq / (2 * cp);
  const own = [r, 2 * cp - 1 - r];
  const next = { shift: { cp: ((r + 1) % cp) - r } };
  const prev = { shift: { cp: ((r + cp - 1) % cp) - r } };
  // Values in flight on the ring have no logical counterpart of their own.
  const recvLike = (like: GradRef): GradRef => {
    const x = g.recv(g.shape(like), prev, g.t(like).prov, undefined, '');
    g.t(x).noLineage = true;
    return x;
  };
  const halves = (x: GradRef): GradRef[] => g.op('split', [x], { dim: 2, sizes: [chunk, chunk] });
  // The key chunks visiting at step t, and which query chunk sees which of them how.
  const visits = (t: number): { kc: number[]; pairs: { qi: number; kj: number; causal: boolean }[] } => {
    const s = (r - t + cp) % cp;
    const kc = [s, 2 * cp - 1 - s];
    const pairs: { qi: number; kj: number; causal: boolean }[] = [];
    for (const qi of [0, 1]) for (const kj of [0, 1]) if ((kc[kj] as number) <= (own[qi] as number)) pairs.push({ qi, kj, causal: kc[kj] === own[qi] });
    return { kc, pairs };
  };
  const aname = g.scopedName('attention').replace(/^mb[0-9]+\//, '');
  const fwd = g.untaped(() =>
    g.scope('cp', () => {
      const qs = halves(q);
      const state: (GradRef[] | undefined)[] = [undefined, undefined];
      let kc = k;
      let vc = v;
      for (let t = 0; t < cp; t++) {
        if (t > 0) [kc, vc] = [recvLike(k), recvLike(v)];
        if (t < cp - 1) [kc, vc].forEach((x) => g.send(x, next));
        const [ks, vs] = [halves(kc), halves(vc)];
        for (const { qi, kj, causal } of visits(t).pairs) {
          const part = g.op('attention_partial', [qs[qi] as GradRef, ks[kj] as GradRef, vs[kj] as GradRef], causal ? { causal: true } : {});
          const prevState = state[qi];
          state[qi] = prevState === undefined ? part : g.op('attention_combine', [...prevState, ...part]);
        }
      }
      const fin = state.map((x) => {
        if (x === undefined) throw new Error('ring attention: a query chunk saw no key');
        return x;
      });
      return { qs, fin, out: net.op('concat', fin.map((x) => x[0] as GradRef), { dim: 2 }) };
    }),
  );
  g.t(fwd.out).tags = g.t(q).tags?.slice();
  g.t(fwd.out).logical = aname;
  g.custom([q, k, v], [fwd.out], ([go]) => {
    const lname = g.scopedName('attention_backward').replace(/^mb[0-9]+\//, '');
    return g.scope('cp', () => {
      const gs = halves(go as GradRef);
      // The saved output is read back from the claimed whole (its stage input), not from the
      // forward's partials; the row statistics come from the forward.
      const os = halves(fwd.out);
      const dq: (GradRef | undefined)[] = [undefined, undefined];
      const plus = (a: GradRef | undefined, b: GradRef): GradRef => (a === undefined ? b : g.one('add', [a, b]));
      let kc = k;
      let vc = v;
      let acc: GradRef[] = [];
      for (let t = 0; t < cp; t++) {
        if (t > 0) {
          [kc, vc] = [recvLike(k), recvLike(v)];
          acc = [recvLike(k), recvLike(v)];
        }
        if (t < cp - 1) [kc, vc].forEach((x) => g.send(x, next));
        const [ks, vs] = [halves(kc), halves(vc)];
        // This step's share of the visiting chunks' dk and dv, per chunk.
        const share: (GradRef | undefined)[][] = [
          [undefined, undefined],
          [undefined, undefined],
        ];
        for (const { qi, kj, causal } of visits(t).pairs) {
          const st = fwd.fin[qi] as GradRef[];
          const [a, b, c] = g.op('attention_partial_backward', [gs[qi] as GradRef, fwd.qs[qi] as GradRef, ks[kj] as GradRef, vs[kj] as GradRef, os[qi] as GradRef, st[1] as GradRef, st[2] as GradRef], causal ? { causal: true } : {}) as [GradRef, GradRef, GradRef];
          dq[qi] = plus(dq[qi], a);
          (share[0] as (GradRef | undefined)[])[kj] = plus(share[0]?.[kj], b);
          (share[1] as (GradRef | undefined)[])[kj] = plus(share[1]?.[kj], c);
        }
        acc = [0, 1].map((w) => {
          const mine = share[w] as (GradRef | undefined)[];
          if (t === 0) {
            // A rank's own chunks: every one is seen by its own queries.
            if (mine[0] === undefined || mine[1] === undefined) throw new Error('ring attention: own key chunk unseen');
            return net.op('concat', [mine[0], mine[1]], { dim: 2 });
          }
          const parts = halves(acc[w] as GradRef);
          return net.op('concat', parts.map((x, j) => (mine[j] === undefined ? x : g.one('add', [x, mine[j] as GradRef]))), { dim: 2 });
        });
        acc.forEach((x) => g.send(x, next));
      }
      // After cp hops the accumulators of this rank's own chunks are back, complete.
      const [dk, dv] = [k, v].map((like, i) => g.recv(g.shape(like), prev, g.t(like).prov, g.t(like).tags, `${lname}.${i + 1}`));
      const dqAll = net.op('concat', dq.map((x) => x as GradRef), { dim: 2 });
      g.t(dqAll).tags = g.t(q).tags?.slice();
      g.t(dqAll).logical = lname;
      return [dqAll, dk as GradRef, dv as GradRef];
    });
  });
  return fwd.out;
}

export function buildModel(c: ModelConfig): Model {
  return c.family === 'mlp' ? mlp(c) : c.family === 'gpt2' ? gpt2(c) : c.family === 'moe' ? moe(c) : llama(c);
}
