/**
 * Writes a whole training iteration as a plan: forward, backward (the ops' own backward
 * rules), gradient accumulation over micro-batches, the data-parallel gradient all-reduce,
 * global-norm clipping and the AdamW step; logically on one device, and as one SPMD program
 * over a (dp, tp) mesh.
 *
 * Lineage is derived, not guessed: every parallel tensor named like a logical tensor claims
 * the slice its provenance implies. A dim smaller than its logical size by the dp (times
 * micro-batch) factor is the rank's rows; by the tp factor, the rank's shard; a value that
 * varies across an axis at full size is an addend (chunk) over that axis. The verifier then
 * checks every claim, so a wrong derivation shows up as a refuted correct plan.
 */
import type { GradRef } from '../../ops/grad.js';
import type { RawDimIndex, RawLineage, RawLogicalTensor, RawParallelTensor, RawPlan, RawProgram, RawRange } from '../raw.js';
import { GenGraph, type GenTensor } from './graph.js';
import { buildModel, Params, type Model, type ModelConfig } from './models.js';
import { Net, type Parallelism } from './net.js';

export interface OptimizerConfig {
  readonly lr: string;
  readonly beta1: string;
  readonly beta2: string;
  readonly eps: string;
  readonly weightDecay: string;
  /** Global-norm clipping threshold; undefined: no clipping. */
  readonly maxNorm?: string;
}

export const ADAMW: OptimizerConfig = { lr: '1/1000', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1' };

export interface GenOptions {
  readonly model: ModelConfig;
  readonly par: Parallelism;
  readonly optimizer?: OptimizerConfig;
  readonly name?: string;
  /**
   * Called before each step: a forward or backward pass of one micro-batch (and chunk) through a
   * side, a side's gradient and optimizer phase, a side's pruning, a program's lineage. An L2 plan
   * takes tens of seconds: the gen command's bar (cli/gen.ts) shows these.
   */
  readonly onProgress?: (done: number, total: number, what: string) => void;
}

interface Built {
  g: GenGraph;
  params: Map<string, GradRef>;
  loss: GradRef | undefined;
  outputs: string[];
  gradNames: Map<string, string>;
  /** Logical build: names of the hidden states after the embedding (index 0) and each layer, and of their gradients. */
  hidden: string[];
  hiddenGrads: (string | undefined)[];
  /** Logical build: parameter names in order (the order of clip_grad_norm's outputs). */
  order: string[];
}

/** What a pipeline stage needs from the logical build. */
interface StageInfo {
  readonly k: number;
  readonly stages: number;
  /** Ring CP: the CP coordinate of this program. */
  readonly cpRank?: number;
  readonly hidden: readonly string[];
  readonly hiddenGrads: readonly (string | undefined)[];
  readonly order: readonly string[];
  readonly schedule: 'gpipe' | '1f1b';
}

/** Layers [from, to) of pipeline stage k (layers split evenly, the remainder to the first stages). */
function stageLayers(layers: number, stages: number, k: number): [number, number] {
  const base = Math.floor(layers / stages);
  const extra = layers % stages;
  const from = k * base + Math.min(k, extra);
  return [from, from + base + (k < extra ? 1 : 0)];
}

/** Forward (F) and backward (B) events of a stage's micro-batches, in schedule order. */
function events(micro: number, stages: number, k: number, schedule: 'gpipe' | '1f1b'): ['F' | 'B', number][] {
  if (schedule === 'gpipe' || stages === 1) return [...Array.from({ length: micro }, (_, m) => ['F', m] as ['F', number]), ...Array.from({ length: micro }, (_, m) => ['B', m] as ['B', number])];
  const warm = Math.min(stages - k - 1, micro);
  const out: ['F' | 'B', number][] = [];
  for (let m = 0; m < warm; m++) out.push(['F', m]);
  for (let m = warm; m < micro; m++) out.push(['F', m], ['B', m - warm]);
  for (let m = micro - warm; m < micro; m++) out.push(['B', m]);
  return out;
}

/** Shape and layout of the hidden states a stage receives (those the embedding produces). */
function shapeOfHidden(model: ModelConfig, par: Parallelism, mb: number): GenTensor {
  const g = new GenGraph('scratch');
  const net = new Net(g, par);
  net.mb = mb;
  const m = buildModel(model);
  const h = m.embed(net, new Params(net, m.specs));
  return g.t(h);
}

/**
 * Builds one side, logical (par undefined) or the SPMD program of one pipeline stage, in
 * phases: the schedule's forward and backward passes (`Side.forward`, `Side.backward`, in
 * `Side.schedule` order) on the tape; then, untaped, each parameter's gradient accumulated
 * over micro-batches and reduced (`Side.gradients`), tied gradients summed between stages
 * (`Side.tieGradients`), the loss reduced (`Side.reduceLoss`), clipping (`clip`) and the
 * AdamW step (`Side.optimizerStep`). The order of the phases is the order of the plan's ops.
 */
function build(model: ModelConfig, par: Parallelism | undefined, opt: OptimizerConfig, logicalGrads?: Map<string, string>, stage?: StageInfo, step?: (what: string) => void): Built {
  const s = new Side(model, par, stage);
  const chunks = (par?.virtual ?? 1) > 1;
  for (const [kind, mb, v] of s.schedule()) {
    step?.(`${kind === 'F' ? 'forward' : 'backward'} of micro-batch ${mb}${chunks ? ` through chunk ${v}` : ''}`);
    if (kind === 'F') s.forward(mb, v);
    else s.backward(mb, v);
  }
  step?.('gradients and optimizer step');
  return s.g.untaped(() => {
    const held = s.held();
    const gradNames = new Map<string, string>();
    const grads = s.tieGradients(held, s.gradients(held, logicalGrads, gradNames), gradNames);
    const loss = s.reduceLoss();
    const order = stage?.order ?? held.names;
    const clipped = opt.maxNorm === undefined ? grads : clip(s.g, par, held.names, held.params, grads, opt.maxNorm, held.zeroDim, order, s.nStages, s.m.tied);
    const outputs = loss === undefined ? [] : [s.g.name(loss)];
    outputs.push(...s.optimizerStep(held, opt, clipped));
    return { g: s.g, params: held.params, loss, outputs, gradNames, hidden: s.hidden, hiddenGrads: s.hiddenGrads, order: held.names };
  });
}

/** A layer chunk of the side: layers [from, to), virtual stage v; whether it embeds and whether it ends in the head. */
interface Segment {
  readonly v: number;
  readonly from: number;
  readonly to: number;
  readonly first: boolean;
  readonly last: boolean;
}

/** The parameters as the rank holds them once the schedule has declared them all. */
interface Held {
  /** By name: the rank's ZeRO-3 blocks, not their gathered copies. */
  readonly params: Map<string, GradRef>;
  readonly names: string[];
  /** Per parameter: the dim ZeRO shards over dp (untouched by tp, divisible by dp), or -1. */
  readonly zeroDim: number[];
}

/** One side under construction: the state its phases share (see `build`). */
class Side {
  readonly g: GenGraph;
  readonly m: Model;
  readonly k: number;
  readonly nStages: number;
  private readonly net: Net;
  private readonly P: Params;
  private readonly segments: Segment[];
  /** Peers of the previous and the next chunk: the neighbouring stage, wrapping around between the last and the first stage for interleaved chunks. */
  private readonly prevPeer: { shift: Record<string, number> };
  private readonly nextPeer: { shift: Record<string, number> };
  private readonly micro: number;
  private readonly sizes: { dp: number; tp: number; pp: number; cp: number };
  /** ZeRO stage in effect (0 without dp). */
  private readonly zero: number;
  private readonly losses: GradRef[] = [];
  /** Per "micro-batch:chunk": each parameter's gradient contribution. */
  private readonly perMicro = new Map<string, Map<string, GradRef>>();
  /** Logical build: names of the hidden states after the embedding (index 0) and each layer, and of their gradients. */
  readonly hidden: string[] = [];
  private readonly hiddenRefs: GradRef[] = [];
  hiddenGrads: (string | undefined)[] = [];
  private seed: GradRef | undefined;
  /** Per "micro-batch:chunk": the input (received or embedded), the output, the loss. */
  private readonly fwd = new Map<string, { input: GradRef | undefined; output: GradRef; loss: GradRef | undefined }>();

  constructor(
    private readonly model: ModelConfig,
    private readonly par: Parallelism | undefined,
    private readonly stage: StageInfo | undefined,
  ) {
    this.g = new GenGraph(par === undefined ? 'logical' : 'parallel');
    this.net = new Net(this.g, par);
    this.net.cpRank = stage?.cpRank;
    this.m = buildModel(model);
    this.P = new Params(this.net, this.m.specs);
    const k = stage?.k ?? 0;
    const nStages = stage?.stages ?? 1;
    this.k = k;
    this.nStages = nStages;
    // Virtual stages (interleaved pipeline): this rank holds chunks v*P + k of P*V layer chunks.
    const V = par?.virtual ?? 1;
    const chunks = nStages * V;
    this.segments = Array.from({ length: par === undefined ? 1 : V }, (_, v) => {
      const c = par === undefined ? 0 : v * nStages + k;
      const [from, to] = par === undefined ? [0, this.m.layers] : stageLayers(this.m.layers, chunks, c);
      return { v, from, to, first: c === 0, last: par === undefined || c === chunks - 1 };
    });
    this.prevPeer = { shift: { pp: k > 0 ? -1 : nStages - 1 } };
    this.nextPeer = { shift: { pp: k < nStages - 1 ? 1 : -(nStages - 1) } };
    this.micro = par?.micro ?? 1;
    this.sizes = { dp: par?.dp ?? 1, tp: par?.tp ?? 1, pp: nStages, cp: par?.cp ?? 1 };
    this.zero = par !== undefined && par.dp > 1 ? (par.zero ?? 0) : 0;
  }

  /** The forward (F) and backward (B) passes as (kind, micro-batch, chunk), in the stage's schedule order. */
  schedule(): ['F' | 'B', number, number][] {
    const { segments, micro } = this;
    return segments.length === 1
      ? events(micro, this.nStages, this.k, this.stage?.schedule ?? 'gpipe').map(([e, mb]) => [e, mb, 0])
      : [
          // Interleaved: each micro-batch through every chunk, then the backwards in reverse.
          ...Array.from({ length: micro }, (_, mb) => segments.map((sg) => ['F', mb, sg.v] as ['F', number, number])).flat(),
          ...Array.from({ length: micro }, (_, mb) => [...segments].reverse().map((sg) => ['B', mb, sg.v] as ['B', number, number])).flat(),
        ];
  }

  private inScope<T>(mb: number, f: () => T): T {
    return this.par === undefined || this.micro === 1 ? f() : this.g.scope(`mb${mb}`, f);
  }

  /** Micro-batch mb through chunk v: embedded or received, the chunk's layers, then the head or a send. */
  forward(mb: number, v: number): void {
    const { g, net, m, P, par } = this;
    const seg = this.segments[v] as Segment;
    net.mb = par === undefined ? -1 : mb;
    this.inScope(mb, () => {
      let input: GradRef | undefined;
      let h: GradRef;
      if (seg.first) {
        h = m.embed(net, P);
        if (par === undefined) {
          this.hidden.push(g.name(h));
          this.hiddenRefs.push(h);
        }
      } else {
        // The previous chunk's hidden states, laid out as this build's own would be.
        const like = shapeOfHidden(this.model, par as Parallelism, mb);
        input = g.recv(like.shape, this.prevPeer, like.prov, like.tags, this.stage?.hidden[seg.from] ?? '');
        h = input;
      }
      for (let l = seg.from; l < seg.to; l++) {
        const x = h;
        // Full activation recomputation: the layer's forward runs again in the backward.
        h = par?.recompute === true ? g.recompute(() => m.layer(net, P, l, x)) : m.layer(net, P, l, x);
        if (par === undefined) {
          this.hidden.push(g.name(h));
          this.hiddenRefs.push(h);
        }
      }
      let loss: GradRef | undefined;
      if (seg.last) {
        loss = m.head(net, P, h);
        this.losses.push(loss);
      } else g.send(h, this.nextPeer);
      this.fwd.set(`${mb}:${v}`, { input, output: h, loss });
    });
  }

  /** The backward of micro-batch mb through chunk v: from the loss or a received gradient, to the parameters (and a send back). */
  backward(mb: number, v: number): void {
    const { g, net, P, par } = this;
    const seg = this.segments[v] as Segment;
    net.mb = par === undefined ? -1 : mb;
    this.inScope(mb, () => {
      const f = this.fwd.get(`${mb}:${v}`);
      if (f === undefined) throw new Error(`micro-batch ${mb}: backward before forward`);
      const declared = P.declared();
      const names = [...declared.keys()];
      // Gradients with respect to the parameters the rank holds (its ZeRO-3 blocks).
      const held = (r: GradRef): GradRef => net.zero3.get(r) ?? r;
      const wrt = [...names.map((n) => held(declared.get(n) as GradRef)), ...(f.input === undefined ? [] : [f.input]), ...(par === undefined ? this.hiddenRefs : [])];
      let gs: (GradRef | undefined)[];
      if (seg.last) {
        this.seed ??= g.leaf('loss_seed', [], { varies: new Set(), mbs: new Set(), batch: false }, { role: 'input' });
        gs = g.backward(f.loss as GradRef, this.seed, wrt);
      } else {
        const like = g.t(f.output);
        const gin = g.recv(like.shape, this.nextPeer, like.prov, like.tags, this.stage?.hiddenGrads[seg.to] ?? '');
        gs = g.backward(f.output, gin, wrt);
      }
      const byName = new Map<string, GradRef>();
      names.forEach((n, i) => {
        const x = gs[i];
        if (x !== undefined) byName.set(n, x);
      });
      this.perMicro.set(`${mb}:${v}`, byName);
      if (f.input !== undefined) {
        const gi = gs[names.length];
        if (gi === undefined) throw new Error(`stage ${this.k}: no gradient for the received hidden states`);
        g.send(gi, this.prevPeer);
      }
      if (par === undefined) this.hiddenGrads = this.hiddenRefs.map((_, i) => {
        const x = gs[names.length + (f.input === undefined ? 0 : 1) + i];
        return x === undefined ? undefined : g.name(x);
      });
    });
  }

  /** The parameters the schedule declared, as the rank holds them, and each one's ZeRO dim. */
  held(): Held {
    const { g, net, zero, sizes } = this;
    const params = new Map([...this.P.declared()].map(([n, r]) => [n, net.zero3.get(r) ?? r]));
    const names = [...params.keys()];
    const zeroDim = names.map((n) => {
      if (zero === 0 || zero === 3) return -1;
      const p = params.get(n) as GradRef;
      // Already a dp shard (experts under EP): its state and step are sharded as it is.
      if (g.t(p).prov.varies.has('dp')) return -1;
      const tags = g.t(p).tags;
      return g.shape(p).findIndex((s, d) => tags?.[d] === undefined && s % sizes.dp === 0);
    });
    return { params, names, zeroDim };
  }

  /** Reduce-scatters x over dp along dim d; the result is laid out like parameter n's dp shard. */
  private rsDp(held: Held, x: GradRef, d: number, n: string): GradRef {
    const { g } = this;
    const y = g.collective('reduce_scatter', x, { dim: d, reduce: 'sum' }, ['dp'], this.sizes);
    const ptags = g.t(held.params.get(n) as GradRef).tags;
    if (ptags !== undefined) g.t(y).tags = ptags.map((t, k) => (k === d ? 'dp' : t));
    return y;
  }

  /**
   * Each parameter's gradient: accumulated over micro-batches, then reduced over every axis
   * it varies on but the parameter does not. Records in `gradNames` the logical gradient's
   * name (the logical build names it; the parallel one points at it).
   */
  gradients(held: Held, logicalGrads: Map<string, string> | undefined, gradNames: Map<string, string>): GradRef[] {
    const { g, par, zero, nStages, m, perMicro, sizes } = this;
    const { params, names, zeroDim } = held;
    return names.map((n, i) => {
      const keyOrder = (a: string): number[] => a.split(':').map(Number);
      let parts = [...perMicro.keys()]
        .sort((a, b) => (keyOrder(a)[0] as number) - (keyOrder(b)[0] as number) || (keyOrder(a)[1] as number) - (keyOrder(b)[1] as number))
        .map((key) => perMicro.get(key)?.get(n))
        .filter((x): x is GradRef => x !== undefined);
      if (parts.length === 0) throw new Error(`parameter '${n}' gets no gradient`);
      const zd = zeroDim[i] as number;
      // ZeRO-2: every micro-batch's gradient is reduce-scattered as it is produced.
      if (zero === 2 && zd >= 0) parts = parts.map((x) => this.rsDp(held, x, zd, n));
      let acc = parts[0] as GradRef;
      for (const x of parts.slice(1)) acc = g.one('add', [acc, x], {}, g.scopedName(`accum.${n}`));
      // The logical build names each parameter's gradient; the parallel one points at it.
      const logical = logicalGrads?.get(n) ?? g.t(parts[0] as GradRef).name;
      gradNames.set(n, logical);
      // A lone part of a tied gradient under a pipeline is one stage's contribution, not the
      // gradient: it keeps its own name.
      if (acc !== parts[0] || nStages === 1 || !m.tied.includes(n)) g.t(acc).logical = logical;
      // A gradient is laid out like its parameter (a tp shard stays on the same dim).
      const ptags = g.t(params.get(n) as GradRef).tags;
      if (zero !== 2 || zd < 0) {
        if (ptags !== undefined) for (const x of [...parts, acc]) g.t(x).tags = [...ptags];
      } else g.t(acc).tags = g.t(parts[0] as GradRef).tags?.slice() ?? g.shape(acc).map((_, k) => (k === zd ? 'dp' : undefined));
      // Reduce over every axis the gradient varies on but the parameter does not: dp always;
      // tp for replicated parameters used on sequence shards (SP LayerNorm, positions).
      const pv = g.t(params.get(n) as GradRef).prov.varies;
      for (const axis of ['tp', 'cp', 'dp']) {
        if (par === undefined || pv.has(axis)) continue;
        if ((axis === 'dp' ? par.dp : axis === 'cp' ? (par.cp ?? 1) : par.tp) === 1) continue;
        if (axis === 'dp' && zero === 2 && zd >= 0) continue;
        if (!g.t(acc).prov.varies.has(axis)) continue;
        const keepTags = g.t(acc).tags;
        acc = axis === 'dp' && zd >= 0 ? this.rsDp(held, acc, zd, n) : g.collective('all_reduce', acc, { reduce: 'sum' }, [axis], sizes);
        g.t(acc).logical = logical;
        if (!(axis === 'dp' && zd >= 0) && keepTags !== undefined) g.t(acc).tags = [...keepTags];
      }
      // A tied parameter's gradient is complete only after the first and last stages add
      // their parts (below): nothing before that claims it. (A part named for its own
      // contribution, the head's or the embedding's, still claims that.)
      if (nStages > 1 && m.tied.includes(n)) {
        for (const x of parts) if (g.logicalName(x) === logical) g.t(x).noLineage = true;
        for (let t = 0; t < g.tensors.length; t++) if (g.t(t).logical === logical) g.t(t).noLineage = true;
      }
      return acc;
    });
  }

  /**
   * Tied parameters (the GPT-2 embedding and LM head) live on the first and the last
   * pipeline stage; their gradients are summed between the two. Returns `grads` with those
   * replaced by the sums.
   */
  tieGradients(held: Held, grads: GradRef[], gradNames: ReadonlyMap<string, string>): GradRef[] {
    const { g, nStages, m, sizes } = this;
    if (nStages > 1) {
      held.names.forEach((n, i) => {
        if (!m.tied.includes(n)) return;
        const x = grads[i] as GradRef;
        const D = sizes.dp;
        const T = sizes.tp;
        const mine = `dp*${T} + tp`;
        const group = [{ expr: mine }, { expr: `${(nStages - 1) * D * T} + ${mine}` }];
        if (g.logicalName(x) === gradNames.get(n)) g.t(x).noLineage = true;
        const y = g.collective('all_reduce', x, { reduce: 'sum' }, [], sizes, group);
        g.t(y).logical = gradNames.get(n) as string;
        g.t(y).noLineage = false;
        g.t(y).tags = g.t(x).tags?.slice();
        grads[i] = y;
      });
    }
    return grads;
  }

  /** The loss: accumulated over micro-batches, then all-reduced over cp and dp where it varies; undefined on a stage without the head. */
  reduceLoss(): GradRef | undefined {
    const { g, par, losses, micro, sizes } = this;
    let loss = losses[0];
    const lossName = loss === undefined ? undefined : g.name(loss).replace(/^mb[0-9]+\//, '');
    if (loss !== undefined && micro > 1) {
      for (const x of losses.slice(1)) loss = g.one('add', [loss, x], {}, g.scopedName('accum.loss'));
      g.t(loss).logical = lossName as string;
    }
    for (const axis of ['cp', 'dp']) {
      if (loss === undefined || par === undefined || !g.t(loss).prov.varies.has(axis)) continue;
      if ((axis === 'dp' ? par.dp : (par.cp ?? 1)) === 1) continue;
      loss = g.collective('all_reduce', loss, { reduce: 'sum' }, [axis], sizes);
      g.t(loss).logical = lossName as string;
    }
    return loss;
  }

  /** The AdamW step of every parameter (ZeRO: on this rank's block, all-gathered after); returns the names of its outputs. */
  optimizerStep(held: Held, opt: OptimizerConfig, clipped: GradRef[]): string[] {
    const { g, sizes } = this;
    const outputs: string[] = [];
    held.names.forEach((n, i) => {
      const p = held.params.get(n) as GradRef;
      const zd = held.zeroDim[i] as number;
      const ptags = g.t(p).tags;
      // ZeRO: this rank's block of the parameter and of its optimizer state.
      let ps = p;
      if (zd >= 0) {
        const k = (g.shape(p)[zd] as number) / sizes.dp;
        ps = g.one('slice', [p], { dim: zd, start: 0, end: k }, g.scopedName(`zero_shard.${n}`));
        const op = g.ops[g.ops.length - 1];
        if (op !== undefined) op.attrs = { dim: zd, start: { expr: `${k}*dp` }, end: { expr: `${k}*dp + ${k}` } };
        const t = g.t(ps);
        t.prov = { ...t.prov, varies: new Set([...t.prov.varies, 'dp']) };
        t.tags = (ptags ?? g.shape(p).map(() => undefined)).map((x, d) => (d === zd ? 'dp' : x));
        t.noLineage = true;
      }
      const state = (k: string): GradRef => g.leaf(`${n}.${k}`, g.shape(ps), g.t(ps).prov, { role: 'optimizer_state', ...(g.t(ps).tags === undefined ? {} : { tags: g.t(ps).tags }) });
      const outs = g.op('adam_update', [ps, clipped[i] as GradRef, state('m'), state('v')], { lr: opt.lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, step: 1, weight_decay: opt.weightDecay, decoupled_weight_decay: true }, `${n}.new`);
      if (zd >= 0) {
        for (const o of outs) g.t(o).tags = g.t(ps).tags?.slice();
        const full = g.collective('all_gather', outs[0] as GradRef, { dim: zd }, ['dp'], sizes);
        g.t(full).logical = `${n}.new`;
        if (ptags !== undefined) g.t(full).tags = [...ptags];
      }
      outputs.push(...outs.map((o) => g.name(o)));
    });
    return outputs;
  }
}

/**
 * Global-norm clipping. Logically clip_grad_norm over all gradients; under tp, each rank sums
 * the squares of its shards (a replicated gradient counts 1/tp on each rank, so once in
 * total), all-reduces the sum over tp, and scales every gradient by clip_coef.
 */
function clip(g: GenGraph, par: Parallelism | undefined, names: string[], params: Map<string, GradRef>, grads: GradRef[], maxNorm: string, zeroDim: number[], order: readonly string[], stages: number, tied: readonly string[]): GradRef[] {
  // Gradients held as dp shards: ZeRO's, and the experts' under expert parallelism.
  const dpShard = names.map((n, i) => (zeroDim[i] as number) >= 0 || g.t(params.get(n) as GradRef).prov.varies.has('dp'));
  const zeroed = dpShard.some((x) => x);
  if (par === undefined || (par.tp === 1 && !zeroed && stages === 1)) {
    const outs = g.op('clip_grad_norm', grads, { max_norm: maxNorm }, 'clip');
    return outs;
  }
  return g.scope('clip_tp', () => {
    // Each rank sums the squares it holds; a value held by r ranks counts 1/r.
    const sq = grads.map((x, i) => {
      const s = g.one('sum', [g.one('mul', [x, x])]);
      let copies = 1;
      if (par.tp > 1 && !g.t(params.get(names[i] as string) as GradRef).prov.varies.has('tp')) copies *= par.tp;
      if (zeroed && par.dp > 1 && !(dpShard[i] as boolean)) copies *= par.dp;
      if (stages > 1 && tied.includes(names[i] as string)) copies *= 2;
      return copies === 1 ? s : g.one('scale', [s], { factor: `1/${copies}` });
    });
    let total = sq[0] as GradRef;
    for (const s of sq.slice(1)) total = g.one('add', [total, s]);
    const axes = [...(stages > 1 ? ['pp'] : []), ...(zeroed && par.dp > 1 ? ['dp'] : []), ...(par.tp > 1 ? ['tp'] : [])];
    total = g.collective('all_reduce', total, { reduce: 'sum' }, axes, { dp: par.dp, tp: par.tp, pp: stages });
    const coef = g.one('clip_coef', [total], { max_norm: maxNorm });
    // Named as clip_grad_norm names its outputs, by the parameter's logical position.
    return grads.map((x, i) => {
      const j = order.indexOf(names[i] as string);
      return g.one('mul', [x, coef], {}, j === 0 ? 'clip' : `clip.${j}`);
    });
  });
}

/** The plan as JSON (the only thing the verifier sees), in the loader's own type (plans/raw.ts). */
export function generatePlan(o: GenOptions): RawPlan {
  const opt = o.optimizer ?? ADAMW;
  const par = o.par;
  const pp = par.pp ?? 1;
  // Ring CP: one program per (pipeline stage, CP rank); otherwise one per stage.
  const ring = (par.cp ?? 1) > 1 && par.cpComm !== 'allgather';
  const cpRanks = ring ? (par.cp ?? 1) : 1;
  const where = Array.from({ length: pp * cpRanks }, (_, i) => ({ k: Math.floor(i / cpRanks), r: i % cpRanks }));
  // Steps (GenOptions.onProgress): a side's passes (2 per micro-batch and chunk; the logical
  // side's one micro-batch) and its optimizer phase, each side's pruning, each program's lineage.
  const total = 3 + where.length * (2 * par.micro * (par.virtual ?? 1) + 1) + (1 + where.length) + where.length;
  let done = 0;
  const stepOf = (side: string) => (what: string): void => {
    o.onProgress?.(done, total, `${side}: ${what}`);
    done++;
  };
  const L = build(o.model, undefined, opt, undefined, undefined, stepOf('logical graph'));
  const layers = buildModel(o.model).layers;
  if (pp * (par.virtual ?? 1) > layers) throw new Error(`pp = ${pp} times ${par.virtual ?? 1} virtual stage(s) exceeds the ${layers} layer(s)`);
  if ((par.virtual ?? 1) > 1 && pp < 2) throw new Error('virtual pipeline stages need pp >= 2');
  const sideName = (i: number): string => {
    const { k, r } = where[i] as { k: number; r: number };
    return where.length === 1 ? 'SPMD program' : `program ${[...(pp > 1 ? [`stage${k}`] : []), ...(ring ? [`cp${r}`] : [])].join('-')} (${i + 1} of ${where.length})`;
  };
  const stages = where.map(({ k, r }, i) =>
    build(o.model, par, opt, L.gradNames, { k, stages: pp, hidden: L.hidden, hiddenGrads: L.hiddenGrads, order: L.order, schedule: par.schedule ?? '1f1b', ...(ring ? { cpRank: r } : {}) }, stepOf(sideName(i))),
  );
  // Backward rules compute every input's gradient; those nobody needs (the rotary tables',
  // say) are dropped from both sides, so plans carry no dead work.
  stepOf('logical graph')('dropping unused ops');
  pruneDead(L.g, new Set(L.outputs));
  const logicalByName = new Map(L.g.tensors.filter((t) => t.dropped !== true).map((t) => [t.name, t]));
  for (const [i, P] of stages.entries()) {
    stepOf(sideName(i))('dropping unused ops');
    pruneDead(P.g, new Set(P.g.tensors.filter((t) => t.noLineage !== true && logicalByName.has(t.logical ?? t.name.replace(/^mb[0-9]+\//, ''))).map((t) => t.name)));
  }
  const produced = new Set(L.g.ops.flatMap((op) => op.outputs));
  // Key order is the file's: id, shape, dtype, then the side's own fields.
  const dtypeOf = (t: GenTensor): { dtype?: string } => (t.dtype === undefined ? {} : { dtype: t.dtype });
  const logicalTensors = L.g.tensors.filter((t) => t.dropped !== true).map((t): RawLogicalTensor => ({
    id: t.name,
    shape: [...t.shape],
    ...dtypeOf(t),
    role: L.outputs.includes(t.name) ? 'output' : produced.has(t.name) ? (t.name.startsWith('grad/') ? 'grad' : 'activation') : (t.role ?? 'input'),
    ...(t.values === undefined ? {} : { values: { range: t.values } }),
  }));
  const slotLayout = new Map<string, string>();
  const program = (P: Built, i: number): RawProgram => {
    const { k, r } = where[i] as { k: number; r: number };
    const sel: Record<string, number> = { ...(pp > 1 ? { pp: k } : {}), ...(ring ? { cp: r } : {}) };
    const name = [...(pp > 1 ? [`stage${k}`] : []), ...(ring ? [`cp${r}`] : [])].join('-');
    return {
    ...(Object.keys(sel).length > 0 ? { name, ranks: { where: sel } } : { ranks: 'all' }),
    tensors: P.g.tensors.filter((t) => t.dropped !== true).map((t): RawParallelTensor => {
      const l = logicalByName.get(t.logical ?? t.name.replace(/^mb[0-9]+\//, ''));
      const lin = t.noLineage === true ? undefined : lineage(t, l, par);
      if (typeof lin === 'string') slotLayout.set((l as GenTensor).name, lin);
      return { id: t.name, shape: [...t.shape], ...dtypeOf(t), ...(lin === undefined || typeof lin === 'string' ? {} : { lineage: lin }) };
    }),
    ops: P.g.ops.map((op) => ({ id: op.id, op: op.op, inputs: op.inputs, outputs: op.outputs, ...(op.attrs === undefined ? {} : { attrs: op.attrs }), ...(op.group === undefined ? {} : { group: op.group }), ...(op.peer === undefined ? {} : { peer: op.peer }) })),
    };
  };
  const contractInputs = L.g.tensors.filter((t) => t.dropped !== true && !produced.has(t.name)).map((t) => t.name);
  const cp = par.cp ?? 1;
  if (cp > 1 && o.model.family === 'mlp') throw new Error('context parallelism needs a sequence model (gpt2, llama, moe)');
  const axes = [...(pp > 1 ? [{ name: 'pp', size: pp }] : []), { name: 'dp', size: par.dp }, ...(cp > 1 ? [{ name: 'cp', size: cp }] : []), { name: 'tp', size: par.tp }];
  const tag = `${par.recompute === true ? '-recompute' : ''}${cp > 1 ? `-cp${cp}${ring ? '' : '-allgather'}` : ''}${par.sp === true ? '-sp' : ''}${(par.zero ?? 0) > 0 ? `-zero${par.zero ?? 0}` : ''}${pp > 1 ? `-pp${pp}` : ''}`;
  const programs = stages.map((P, i) => {
    stepOf(sideName(i))('lineage of each tensor');
    return program(P, i);
  });
  o.onProgress?.(done, total, 'plan assembled');
  // Logical op outputs that no parallel tensor claims, each with the reason (plans carry
  // lineage for every logical op output where a layout can state it).
  const held = new Set<string>();
  for (const pr of programs) for (const t of pr.tensors ?? []) {
    if (t.lineage !== undefined) held.add(t.lineage.logical);
  }
  const unclaimed = L.g.ops.flatMap((op) => op.outputs).filter((n) => !held.has(n) && logicalByName.get(n)?.dropped !== true).map((n) => ({
    logical: n,
    why: slotLayout.get(n) ?? 'no claim derived',
  }));
  return {
    format: 'planproof/v1',
    name: o.name ?? `${o.model.family}-dp${par.dp}-tp${par.tp}${tag}-mb${par.micro}`,
    description: `Generated by planproof gen: ${o.model.family}, ${o.model.layers} layer(s), hidden ${o.model.hidden}, global batch ${o.model.batch}; dp ${par.dp}, tp ${par.tp}${par.sp === true ? ' with sequence parallelism' : ''}${cp > 1 ? `, cp ${cp} (${ring ? 'ring attention' : 'all-gathered keys and values'})` : ''}${pp > 1 ? `, pp ${pp} (${par.schedule ?? '1f1b'})` : ''}${(par.zero ?? 0) > 0 ? `, ZeRO-${par.zero ?? 0}` : ''}${par.recompute === true ? ', full activation recomputation' : ''}, ${par.micro} micro-batch(es); forward, backward, accumulation, gradient reduction, clipping, AdamW.`,
    mesh: { axes },
    logical: { tensors: logicalTensors, ops: L.g.ops.map((op) => ({ id: op.id, op: op.op, inputs: op.inputs, outputs: op.outputs, ...(op.attrs === undefined ? {} : { attrs: op.attrs }) })) },
    parallel: { programs },
    contract: { inputs: contractInputs, outputs: L.outputs },
    ...(unclaimed.length === 0 ? {} : { 'x-planproof-gen': { unclaimed } }),
  };
}

/**
 * Drops local ops whose outputs nobody reads and nobody needs (`keep`), to a fixpoint: a work
 * list of ops whose outputs lost their last reader (a pass over every op per round took L2's
 * gen 6 s). Removal only ever makes more ops removable, so any order reaches the same plan.
 */
function pruneDead(g: GenGraph, keep: ReadonlySet<string>): void {
  const local = (op: string): boolean => op !== 'send' && op !== 'recv' && !['all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all', 'broadcast'].includes(op);
  const ops = g.ops;
  const uses = new Map<string, number>();
  const producers = new Map<string, number[]>();
  ops.forEach((o, i) => {
    for (const x of o.inputs) uses.set(x, (uses.get(x) ?? 0) + 1);
    for (const x of o.outputs) producers.set(x, [...(producers.get(x) ?? []), i]);
  });
  const alive = ops.map(() => true);
  const removable = (i: number): boolean => {
    const o = ops[i] as (typeof ops)[number];
    return alive[i] === true && local(o.op) && o.outputs.length > 0 && o.outputs.every((x) => (uses.get(x) ?? 0) === 0 && !keep.has(x));
  };
  const work = ops.map((_, i) => i).filter(removable);
  const gone = new Set<string>();
  for (let i = work.pop(); i !== undefined; i = work.pop()) {
    if (!removable(i)) continue;
    alive[i] = false;
    const o = ops[i] as (typeof ops)[number];
    for (const x of o.outputs) gone.add(x);
    for (const x of o.inputs) {
      const n = (uses.get(x) ?? 0) - 1;
      uses.set(x, n);
      if (n === 0) work.push(...(producers.get(x) ?? []));
    }
  }
  if (gone.size === 0) return;
  ops.splice(0, ops.length, ...ops.filter((_, i) => alive[i] === true));
  g.tensors.forEach((t) => {
    if (gone.has(t.name)) t.dropped = true;
  });
}

const expr = (s: string): { expr: string } => ({ expr: s });

/** Why a tensor in a rank-local MoE slot layout claims nothing (reported in the plan). */
const SLOT_LAYOUT =
  "MoE expert buffer laid out by a subset of the tokens (packed layout: slot positions count that subset's routing choices; token layout after an expert-parallel exchange under micro-batches, SP or CP: the ranks' rows interleave in the logical order), so no index map states it";

/** The lineage claim of a parallel tensor from its provenance and the two shapes. */
function lineage(t: GenTensor, l: GenTensor | undefined, par: Parallelism): RawLineage | string | undefined {
  if (l === undefined) return undefined;
  const ps = t.shape;
  const ls = l.shape;
  if (ps.length !== ls.length) return undefined;
  const micro = par.micro;
  const mbs = [...t.prov.mbs];
  if (mbs.length > 1 && mbs.length < micro) return undefined;
  // Expert buffers of a subset of the tokens: slot positions count that subset's choices.
  const sd = t.tags?.indexOf('slots') ?? -1;
  if ((sd >= 0 && ps[sd] !== ls[sd]) || t.tags?.includes('xslots') === true) return SLOT_LAYOUT;
  const oneMb = micro > 1 && mbs.length === 1 ? (mbs[0] as number) : undefined;
  const dpVaries = t.prov.varies.has('dp') && par.dp > 1;
  const tpVaries = t.prov.varies.has('tp') && par.tp > 1;
  const index: RawDimIndex[] = ps.map(() => '*');
  const partial: { coord: string; size: number }[] = [];
  const claimed = new Set<number>();
  // Rows of the batch: dp shard, then micro-batch, in dim 0.
  const rowFactor = (dpVaries ? par.dp : 1) * (oneMb !== undefined ? micro : 1);
  // The dim holding the batch rows: tagged through the ops' dim signatures, else dim 0.
  const tagged = (tag: string): number => t.tags?.findIndex((x) => x === tag) ?? -1;
  // A rows*tp dim holding whole sequences (a size-1 sequence dim tagged only because it shares
  // a prefix product with a split neighbour, for instance) is plain rows.
  let mt = t.tags?.findIndex((x) => x !== undefined && x.startsWith('rows*tp:')) ?? -1;
  const rowsOnly = mt >= 0 && (ls[mt] as number) === (ps[mt] as number) * rowFactor;
  const rd = rowsOnly ? mt : tagged('rows');
  if (rowsOnly) mt = -1;
  // A merged dim (batch rows outer, zig-zag sequence chunks inner): for each local row, its
  // two chunks.
  const md = t.tags?.findIndex((x) => x !== undefined && x.startsWith('rows*cp:')) ?? -1;
  let cpDone = false;
  if (md >= 0 && (par.cp ?? 1) > 1 && t.prov.varies.has('cp')) {
    const k = Number((t.tags?.[md] as string).split(':')[1]);
    const cp = par.cp ?? 1;
    const S = k * cp;
    const Bl = (ps[md] as number) / k;
    const c = k / 2;
    if (Number.isInteger(Bl) && k % 2 === 0 && (ls[md] as number) === Bl * rowFactor * S) {
      const base = dpVaries ? `${oneMb !== undefined ? micro * Bl : Bl}*dp + ${(oneMb ?? 0) * Bl}` : `${(oneMb ?? 0) * Bl}`;
      const ranges: RawRange[] = [];
      for (let b = 0; b < Bl; b++) {
        const row = `(${base} + ${b})*${S}`;
        ranges.push([expr(`${row} + ${c}*cp`), expr(`${row} + ${c}*cp + ${c}`)], [expr(`${row} + ${S - c} - ${c}*cp`), expr(`${row} + ${S} - ${c}*cp`)]);
      }
      index[md] = ranges;
      claimed.add(md);
      cpDone = true;
    } else return undefined;
  }
  let tpDone = false;
  let rowsDone = false;
  let oneMbAddend = false;
  if (mt >= 0 && tpVaries) {
    // Rows outer, this rank's tp block of k (of k tp) inner: per local row, one range.
    const k = Number((t.tags?.[mt] as string).split(':')[1]);
    const S = k * par.tp;
    const Bl = (ps[mt] as number) / k;
    const base = dpVaries ? `${oneMb !== undefined ? micro * Bl : Bl}*dp + ${(oneMb ?? 0) * Bl}` : `${(oneMb ?? 0) * Bl}`;
    if (k === 1 && ps[mt + 1] === 1 && ls[mt + 1] === par.tp && ls[mt] === Bl * rowFactor) {
      // [rows, one token] split back out: rows, then the rank's token of the sequence.
      index[mt] = [expr(base), expr(`${base} + ${Bl}`)];
      index[mt + 1] = [expr('tp'), expr('tp + 1')];
      claimed.add(mt + 1);
    } else {
      if (!Number.isInteger(Bl) || (ls[mt] as number) !== Bl * rowFactor * S) return undefined;
      const ranges: RawRange[] = [];
      for (let b = 0; b < Bl; b++) {
        const row = `(${base} + ${b})*${S}`;
        ranges.push([expr(`${row} + ${k}*tp`), expr(`${row} + ${k}*tp + ${k}`)]);
      }
      index[mt] = ranges;
    }
    claimed.add(mt);
    rowsDone = true;
    tpDone = true;
  }
  if (cpDone || rowsDone) {
    // Rows and micro-batch were claimed with the sequence chunks.
  } else if (rowFactor > 1 && rd >= 0 && (ls[rd] ?? 0) === (ps[rd] ?? -1) * rowFactor) {
    const n = ps[rd] as number;
    const base = `${oneMb !== undefined ? micro * n : n}*dp + ${(oneMb ?? 0) * n}`;
    index[rd] = dpVaries ? [expr(base), expr(`${base} + ${n}`)] : [(oneMb ?? 0) * n, (oneMb ?? 0) * n + n];
    claimed.add(rd);
  } else {
    // A micro-batch's addend of a sum (its gradient contribution): chunk mb * dp + dp of
    // micro * dp (the micro-batch index is a constant in this rank's expression).
    if (oneMb !== undefined) {
      partial.push({ coord: `${oneMb}`, size: micro });
      oneMbAddend = true;
    }
    if (dpVaries) partial.push({ coord: 'dp', size: par.dp });
  }
  if (dpVaries && !claimed.has(rd) && tagged('dp') >= 0) {
    // A plain dp shard (ZeRO): the rank's block of that dim.
    const dd = tagged('dp');
    const n = ps[dd] as number;
    if ((ls[dd] as number) === n * par.dp) {
      index[dd] = [expr(`${n}*dp`), expr(`${n}*dp + ${n}`)];
      claimed.add(dd);
      const k = partial.findIndex((x) => x.coord === 'dp');
      if (k >= 0) partial.splice(k, 1);
    }
  }
  const cpVaries = t.prov.varies.has('cp') && (par.cp ?? 1) > 1;
  const st = tagged('cp*tp');
  if (cpVaries && !cpDone && st >= 0 && tpVaries && !claimed.has(st)) {
    // SP under CP: tp rank t holds tokens [t n, t n + n) of the rank's zig-zag pair (chunks r
    // and 2 cp - 1 - r of c tokens each); with tp even each piece lies in one chunk.
    const n = ps[st] as number;
    const S = ls[st] as number;
    const c = (n * par.tp) / 2;
    if (!Number.isInteger(c) || c % n !== 0 || S !== 2 * c * (par.cp ?? 1)) return undefined;
    const h = `((${n}*tp)//${c})`;
    const start = `(1 - ${h})*(${c}*cp + ${n}*tp) + ${h}*(${S - 2 * c} - ${c}*cp + ${n}*tp)`;
    index[st] = [expr(start), expr(`${start} + ${n}`)];
    claimed.add(st);
    cpDone = true;
    tpDone = true;
  }
  if (cpVaries && !cpDone) {
    // This rank's zig-zag chunks r and 2 cp - 1 - r of the sequence dim, in that order.
    const cd = tagged('cp');
    const n = cd >= 0 ? (ps[cd] as number) : 0;
    const cp = par.cp ?? 1;
    if (cd >= 0 && !claimed.has(cd) && (ls[cd] as number) === n * cp && n % 2 === 0) {
      const c = n / 2;
      const S = ls[cd] as number;
      index[cd] = [
        [expr(`${c}*cp`), expr(`${c}*cp + ${c}`)],
        [expr(`${S - c} - ${c}*cp`), expr(`${S} - ${c}*cp`)],
      ];
      claimed.add(cd);
    } else partial.push({ coord: 'cp', size: cp });
  }
  if (tpVaries && !tpDone) {
    const td = tagged('tp');
    const d = td >= 0 && !claimed.has(td) && (ls[td] as number) === (ps[td] as number) * par.tp ? td : ps.findIndex((s, i) => !claimed.has(i) && (ls[i] as number) === s * par.tp);
    if (d >= 0) {
      index[d] = [expr(`${ps[d]}*tp`), expr(`${ps[d]}*tp + ${ps[d]}`)];
      claimed.add(d);
    } else partial.push({ coord: 'tp', size: par.tp });
  }
  for (let i = 0; i < ps.length; i++) if (!claimed.has(i) && ps[i] !== ls[i]) return undefined;
  const out: RawLineage = { logical: l.name, ...(index.some((x) => x !== '*') ? { index } : {}) };
  if (partial.length > 0) {
    let idx = '0';
    let n = 1;
    for (const p of partial) {
      idx = `(${idx})*${p.size} + ${p.coord}`;
      n *= p.size;
    }
    // A micro-batch's addend is one of micro x dp (x cp x tp) parts of the whole batch's
    // contribution: a decomposition of its own, named, since the accumulated gradient's
    // decomposition (dp x tp under SP, say) can have the same count.
    return { ...out, value: oneMbAddend ? { chunk: expr(idx), of: n, split: 'microbatch' } : [expr(idx), n] };
  }
  return out;
}
