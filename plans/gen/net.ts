/**
 * Model code is written once against `Net` and built twice: as the logical (single-device)
 * graph, and as the SPMD program of one rank under a parallelization. Net hides the
 * difference: parameters are full or sharded, Megatron's tensor-parallel regions are
 * identities or communication, the batch is global or a micro-batch of a data-parallel shard.
 */
import type { GradRef } from '../../ops/grad.js';
import type { Attrs, AttrValue, Shape } from '../../ops/types.js';
import { GenGraph, REPLICATED, type Provenance } from './graph.js';

export interface Parallelism {
  readonly dp: number;
  readonly tp: number;
  /** Micro-batches per iteration (gradient accumulation). */
  readonly micro: number;
  /**
   * Megatron sequence parallelism (with tp > 1): between the tensor-parallel regions the
   * activations are split along the sequence over tp; regions start with an all-gather and
   * end with a reduce-scatter.
   */
  readonly sp?: boolean;
  /**
   * ZeRO stage with dp > 1: 1 reduce-scatters the accumulated gradients and shards the
   * optimizer state and step, then all-gathers the parameters; 2 reduce-scatters every
   * micro-batch's gradient and accumulates shards. 0: all-reduce (default).
   */
  readonly zero?: 0 | 1 | 2 | 3;
  /**
   * Expert parallelism (MoE): experts split across the data-parallel ranks; each rank's
   * routed token slots travel to the experts' ranks and back by all-to-all.
   */
  readonly ep?: boolean;
  /** Context parallelism (llama): the sequence split in load-balanced zig-zag chunks. */
  readonly cp?: number;
  /**
   * How CP attention reaches the other ranks' keys and values: 'ring' (default) passes them
   * around the CP ring by send / recv and merges the blocks by online softmax, and in the
   * backward passes the keys' gradient accumulators around the ring back to their owners
   * (TransformerEngine's ring attention); 'allgather' all-gathers them (Llama-3 style).
   */
  readonly cpComm?: 'ring' | 'allgather';
  /**
   * Full activation recomputation (Megatron's `--recompute-granularity full`): each layer's
   * forward is run again from its saved input in the backward, and the backward goes through
   * the recomputed values.
   */
  readonly recompute?: boolean;
  /** Pipeline stages (layers split evenly; activations and gradients by send / recv). */
  readonly pp?: number;
  /** Interleaved pipeline: layer chunks per stage (Megatron's virtual pipeline stages). */
  readonly virtual?: number;
  /** Pipeline schedule: the order of each stage's forward and backward micro-batch passes. */
  readonly schedule?: 'gpipe' | '1f1b';
}

/** A value that depends on the rank's tensor-parallel coordinate: `k * tp + c` (k, c integers). */
export interface TpAffine {
  readonly k: number;
  readonly c: number;
}

export class Net {
  /** The micro-batch being built (parallel side), or -1 (logical: the whole batch). */
  mb = -1;
  /**
   * Ring CP: the CP coordinate this program is built for. The ring's causal blocks differ by
   * rank (which key chunks a rank's queries see at each step), so each CP rank gets its own
   * program, as each runs its own branch in TransformerEngine.
   */
  cpRank: number | undefined;
  constructor(
    readonly g: GenGraph,
    /** undefined: the logical graph. */
    readonly par: Parallelism | undefined,
  ) {}

  get logical(): boolean {
    return this.par === undefined;
  }

  get tp(): number {
    return this.par?.tp ?? 1;
  }

  /** Rows of the batch this build holds, of `global` rows. */
  rows(global: number): number {
    if (this.par === undefined) return global;
    const n = this.par.dp * this.par.micro;
    if (global % n !== 0) throw new Error(`global batch ${global} is not divisible by dp*micro = ${n}`);
    return global / n;
  }

  sizes(): Record<string, number> {
    return { dp: this.par?.dp ?? 1, tp: this.par?.tp ?? 1, pp: this.par?.pp ?? 1, cp: this.par?.cp ?? 1 };
  }

  get ep(): number {
    return this.par?.ep === true ? this.par.dp : 1;
  }

  /**
   * A parameter, split along `shard` over tp (Megatron column / row / vocab parallel), or
   * over dp when `axis` is 'dp' and expert parallelism is on (the expert dim).
   */
  param(name: string, shape: Shape, shard?: number, role: 'param' | 'optimizer_state' = 'param', axis: 'tp' | 'dp' = 'tp'): GradRef {
    const local = [...shape];
    let prov: Provenance = REPLICATED;
    const n = axis === 'tp' ? this.tp : this.ep;
    if (shard !== undefined && n > 1) {
      if ((shape[shard] as number) % n !== 0) throw new Error(`${name}: dim ${shard} of [${shape.join(', ')}] is not divisible by ${axis} = ${n}`);
      local[shard] = (shape[shard] as number) / n;
      prov = { varies: new Set([axis]), mbs: new Set(), batch: false };
    }
    const tags = shard !== undefined && n > 1 ? shape.map((_, d) => (d === shard ? axis : undefined)) : undefined;
    // ZeRO-3: the rank holds a dp block of the parameter and all-gathers it where it is used;
    // the gradient comes back reduce-scattered to the block.
    const dp = this.par?.dp ?? 1;
    const zd = this.par?.zero === 3 && dp > 1 && role === 'param' ? local.findIndex((s, d) => tags?.[d] === undefined && s % dp === 0) : -1;
    if (zd < 0 || prov.varies.has('dp')) return this.g.leaf(name, local, prov, { role, ...(tags === undefined ? {} : { tags }) });
    const block = [...local];
    block[zd] = (local[zd] as number) / dp;
    const leafTags = (tags ?? local.map(() => undefined)).map((t, d) => (d === zd ? ('dp' as const) : t));
    const leaf = this.g.leaf(name, block, { ...prov, varies: new Set([...prov.varies, 'dp']) }, { role, tags: leafTags });
    const full = this.g.collective('all_gather', leaf, { dim: zd }, ['dp'], this.sizes());
    this.g.t(full).logical = name;
    this.g.custom([leaf], [full], ([gy]) => [this.g.collective('reduce_scatter', gy as GradRef, { dim: zd, reduce: 'sum' }, ['dp'], this.sizes())]);
    this.zero3.set(full, leaf);
    return full;
  }

  /** ZeRO-3: the gathered parameter -> the rank's block (the leaf the optimizer updates). */
  readonly zero3 = new Map<GradRef, GradRef>();

  /** All-to-all over dp (expert parallelism), with the swapped all-to-all as its adjoint. */
  allToAllDp(x: GradRef, split: number, concat: number): GradRef {
    if (this.ep === 1) return x;
    // Slots received from every dp rank are in exchange order ('xslots', never a logical
    // layout); sent back, each rank has its own tokens' slots again ('slots'). In the token
    // layout with one micro-batch, rank r's slots are the r-th block of rows: received from
    // every rank they are all the slots of the rank's experts, in logical order.
    const rowsBlocks = (this.par?.micro ?? 1) === 1;
    const swap = (t: GradRef, s: number, c: number): GradRef => {
      const tags = this.g.t(t).tags ?? this.g.shape(t).map(() => undefined);
      const out = this.g.collective('all_to_all', t, { split_dim: s, concat_dim: c }, ['dp'], this.sizes());
      // A merged rows*tp (rows*cp) tag on a tensor that does not vary over tp (cp) is plain rows.
      const tc = tags[c];
      const plainRows = tc === 'rows' || (tc !== undefined && ((tc.startsWith('rows*tp:') && !this.g.t(t).prov.varies.has('tp')) || (tc.startsWith('rows*cp:') && !this.g.t(t).prov.varies.has('cp'))));
      const gather = rowsBlocks && plainRows;
      const scatter = rowsBlocks && tags[c] === 'dp' && tags[s] === undefined;
      this.g.t(out).tags = tags.map((tg, d) => {
        if (gather) return d === s ? 'dp' : d === c ? undefined : tg;
        if (scatter) return d === s ? 'rows' : d === c ? undefined : tg;
        return d === c && tg !== undefined && tg !== 'dp' ? 'xslots' : d === s && tg === 'xslots' ? 'slots' : d === s || d === c ? undefined : tg;
      });
      return out;
    };
    const y = swap(x, split, concat);
    this.g.custom([x], [y], ([gy]) => [swap(gy as GradRef, concat, split)]);
    return y;
  }

  /**
   * A data input with the batch in dim 0 (this build's rows of it); with `seqDim` under
   * context parallelism, this rank's zig-zag chunks of the sequence.
   */
  data(name: string, shape: Shape, extra: { dtype?: string; values?: [number, number] } = {}, seqDim?: number): GradRef {
    const local = [this.rows(shape[0] as number), ...shape.slice(1)];
    const cpd = seqDim !== undefined && this.cp > 1 ? seqDim : -1;
    if (cpd >= 0) local[cpd] = (local[cpd] as number) / this.cp;
    const varies = new Set<string>([...(this.par !== undefined && this.par.dp > 1 ? ['dp'] : []), ...(cpd >= 0 ? ['cp'] : [])]);
    const mbs = new Set<number>(this.mb >= 0 ? [this.mb] : []);
    const n = this.mb >= 0 ? `${name}@mb${this.mb}` : name;
    return this.g.leaf(n, local, { varies, mbs, batch: true }, { role: 'input', logical: name, tags: shape.map((_, d) => (d === 0 ? ('rows' as const) : d === cpd ? ('cp' as const) : undefined)), ...(extra.dtype === undefined ? {} : { dtype: extra.dtype }), ...(extra.values === undefined ? {} : { values: extra.values }) });
  }

  /** A replicated input table (rotary cos / sin), declared once per build. */
  table(name: string, shape: Shape): GradRef {
    const have = this.g.tensors.findIndex((t) => t.name === name);
    if (have >= 0) return have;
    return this.g.leaf(name, shape, REPLICATED, { role: 'input' });
  }

  op(name: string, inputs: readonly GradRef[], attrs: Attrs = {}, outName?: string): GradRef {
    return this.g.one(name, inputs, attrs, outName);
  }

  /** A value used without its gradient (a softmax shift that cancels): not on the tape. */
  detached(name: string, inputs: readonly GradRef[], attrs: Attrs = {}): GradRef {
    return this.g.untaped(() => this.g.one(name, inputs, attrs));
  }

  /**
   * An op whose attributes depend on the tensor-parallel coordinate: `tpAttrs` gives each
   * such attribute as k * tp + c. The shape rule sees rank 0's values.
   */
  opTp(name: string, inputs: readonly GradRef[], attrs: Attrs, tpAttrs: Record<string, TpAffine>): GradRef {
    return this.opAt('tp', this.tp, name, inputs, attrs, tpAttrs);
  }

  /** As opTp, for the coordinate on any mesh axis of size n. */
  opAt(axis: string, n: number, name: string, inputs: readonly GradRef[], attrs: Attrs, affine: Record<string, TpAffine>): GradRef {
    return this.opAtAll(axis, n, name, inputs, attrs, affine)[0] as GradRef;
  }

  /** opAt for ops with several outputs. */
  opAtAll(axis: string, n: number, name: string, inputs: readonly GradRef[], attrs: Attrs, affine: Record<string, TpAffine>): GradRef[] {
    const at0: Record<string, AttrValue> = { ...attrs };
    for (const [k, v] of Object.entries(affine)) at0[k] = v.c;
    const outs = this.g.op(name, inputs, at0);
    if (n > 1) {
      // Attributes that depend on the rank make the values vary across the axis.
      for (const out of outs) {
        const t = this.g.t(out);
        t.prov = { ...t.prov, varies: new Set([...t.prov.varies, axis]) };
      }
      const op = this.g.ops[this.g.ops.length - 1];
      if (op !== undefined) {
        const emitted: Record<string, AttrValue> = { ...attrs };
        for (const [k, v] of Object.entries(affine)) emitted[k] = { expr: `${v.k}*${axis} + ${v.c}` };
        op.attrs = emitted;
      }
    }
    return outs;
  }

  get cp(): number {
    return this.par?.cp ?? 1;
  }

  /** Ring attention (one program per CP rank). */
  get cpRing(): boolean {
    return this.cp > 1 && this.par?.cpComm !== 'allgather';
  }

  /**
   * Context parallelism with load balancing: the sequence is cut into 2 cp chunks and rank r
   * holds chunks r and 2 cp - 1 - r (so causal work is even). `x` is a full, replicated
   * table along `dim` (rotary cos / sin); returns this rank's two chunks, in that order.
   */
  zigzag(x: GradRef, dim: number): GradRef {
    if (this.cp === 1) return x;
    const S = this.g.shape(x)[dim] as number;
    const c = S / (2 * this.cp);
    if (!Number.isInteger(c)) throw new Error(`sequence ${S} is not divisible by 2*cp = ${2 * this.cp}`);
    // Its own scope: parallel-only ops must not shift the names the logical build shares.
    const y = this.g.untaped(() =>
      this.g.scope('cp', () => {
        const a = this.opAt('cp', this.cp, 'slice', [x], { dim }, { start: { k: c, c: 0 }, end: { k: c, c } });
        const b = this.opAt('cp', this.cp, 'slice', [x], { dim }, { start: { k: -c, c: S - c }, end: { k: -c, c: S } });
        return this.op('concat', [a, b], { dim });
      }),
    );
    // The gradient (of a learned position table) goes back into place; the pads depend on
    // the rank, so the backward is spelled here. It is a cp addend, reduced with the rest.
    this.g.custom([x], [y], ([gy]) =>
      this.g.scope('cp', () => {
        const [ga, gb] = this.g.op('split', [gy as GradRef], { dim, sizes: [c, c] }) as [GradRef, GradRef];
        const pa = this.opAt('cp', this.cp, 'pad', [ga], { dim }, { before: { k: c, c: 0 }, after: { k: -c, c: S - c } });
        const pb = this.opAt('cp', this.cp, 'pad', [gb], { dim }, { before: { k: -c, c: S - c }, after: { k: c, c: 0 } });
        return [this.op('add', [pa, pb])];
      }),
    );
    const t = this.g.t(y);
    t.tags = this.g.shape(y).map((_, d) => (d === dim ? 'cp' : undefined));
    return y;
  }

  /**
   * Keys / values of the whole sequence under context parallelism: all-gathered along the
   * sequence dim (Llama-3 style CP), then put back in sequence order (the gather holds rank
   * r's chunks r and 2 cp - 1 - r at slots 2r and 2r + 1).
   */
  gatherSeq(x: GradRef, dim: number): GradRef {
    if (this.cp === 1) return x;
    return this.g.scope('cp', () => {
      const y = this.g.collective('all_gather', x, { dim }, ['cp'], this.sizes());
      this.g.custom([x], [y], ([gy]) => [this.g.collective('reduce_scatter', gy as GradRef, { dim, reduce: 'sum' }, ['cp'], this.sizes())]);
      const n = 2 * this.cp;
      const c = (this.g.shape(y)[dim] as number) / n;
      const parts = this.g.op('split', [y], { dim, sizes: Array.from({ length: n }, () => c) });
      // Slot 2r holds chunk r, slot 2r + 1 chunk n - 1 - r.
      const order = Array.from({ length: n }, (_, chunk) => (chunk < this.cp ? 2 * chunk : 2 * (n - 1 - chunk) + 1));
      return this.op('concat', order.map((s) => parts[s] as GradRef), { dim });
    });
  }

  get sp(): boolean {
    return this.tp > 1 && this.par?.sp === true;
  }

  /** Enters a tensor-parallel region: Megatron's f, or under SP the sequence all-gather. */
  enterTp(x: GradRef, seqDim = 1): GradRef {
    if (!this.sp) return this.copyToTp(x);
    const y = this.g.collective('all_gather', x, { dim: seqDim }, ['tp'], this.sizes());
    this.g.t(y).logical = this.g.logicalName(x);
    this.g.custom([x], [y], ([gy]) => [this.claimAs(this.g.collective('reduce_scatter', gy as GradRef, { dim: seqDim, reduce: 'sum' }, ['tp'], this.sizes()), gy as GradRef)]);
    return y;
  }

  /** Leaves a tensor-parallel region: Megatron's g, or under SP the sequence reduce-scatter. */
  leaveTp(x: GradRef, seqDim = 1): GradRef {
    if (!this.sp) return this.reduceFromTp(x);
    const y = this.g.collective('reduce_scatter', x, { dim: seqDim, reduce: 'sum' }, ['tp'], this.sizes());
    this.g.custom([x], [y], ([gy]) => [this.g.collective('all_gather', gy as GradRef, { dim: seqDim }, ['tp'], this.sizes())]);
    return y;
  }

  /** Rows [tp * n, tp * n + n) of a replicated table along `dim` under SP (this rank's sequence chunk). */
  seqChunk(x: GradRef, dim: number): GradRef {
    if (!this.sp) return x;
    const S = this.g.shape(x)[dim] as number;
    const n = S / this.tp;
    // The backward (a pad back into place) depends on the rank too, so it is spelled here.
    const y = this.g.untaped(() => this.opTp('slice', [x], { dim }, { start: { k: n, c: 0 }, end: { k: n, c: n } }));
    this.g.custom([x], [y], ([gy]) => [this.opTp('pad', [gy as GradRef], { dim }, { before: { k: n, c: 0 }, after: { k: -n, c: S - n } })]);
    // Under CP, x is the rank's zig-zag pair: the slice is a tp piece of it.
    if (this.g.t(x).tags?.[dim] === 'cp') this.g.t(y).tags = this.g.shape(y).map((_, d) => (d === dim ? 'cp*tp' : undefined));
    return y;
  }

  /** Megatron's f: identity forward, all-reduce of the gradient over tp backward. */
  copyToTp(x: GradRef): GradRef {
    if (this.tp === 1) return x;
    const y = this.g.untaped(() => this.g.one('identity', [x], {}, this.g.scopedName('tp_copy')));
    // The copy is the same value: it claims x's logical tensor, and so do its gradients.
    this.g.t(y).logical = this.g.logicalName(x);
    this.g.custom([x], [y], ([gy]) => [this.claimAs(this.g.collective('all_reduce', gy as GradRef, { reduce: 'sum' }, ['tp'], this.sizes()), gy as GradRef)]);
    return y;
  }

  /** The reduced gradient claims what its partial input claims (now complete, or sharded). */
  private claimAs(y: GradRef, from: GradRef): GradRef {
    this.g.t(y).logical = this.g.logicalName(from);
    return y;
  }

  /** Megatron's g: all-reduce over tp forward, identity backward. */
  reduceFromTp(x: GradRef): GradRef {
    if (this.tp === 1) return x;
    const y = this.g.collective('all_reduce', x, { reduce: 'sum' }, ['tp'], this.sizes());
    this.g.custom([x], [y], ([gy]) => [gy]);
    return y;
  }
}

export type { Shape };
