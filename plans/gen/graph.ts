/**
 * One side of a generated plan (the logical graph, or one SPMD rank program) as it is built:
 * tensors in SSA with shapes from the op registry's shape rules, a tape for reverse-mode
 * differentiation through the ops' own backward rules, and per-tensor provenance that the
 * strategy turns into lineage.
 *
 * Names are deterministic: `scope/op#k`, counted per scope over regular ops only, so the
 * logical build and the parallel build of the same model code name corresponding tensors
 * alike (communication and other parallel-only ops use their own counters).
 */
import type { GradBuilder, GradRef } from '../../ops/grad.js';
import { registry } from '../../ops/registry.js';
import type { RawInt, RawParallelOp } from '../raw.js';
import type { Attrs, Shape } from '../../ops/types.js';

/** Mesh axes a value varies across (sharded or partial); 'mb' is the micro-batch index. */
export interface Provenance {
  /** Mesh axes (by name) the value differs across ranks on. */
  readonly varies: ReadonlySet<string>;
  /** Micro-batches whose data the value depends on (empty: none). */
  readonly mbs: ReadonlySet<number>;
  /** Holds the batch dim at 0 (a per-sample activation). */
  readonly batch: boolean;
}

export interface GenTensor {
  readonly name: string;
  readonly shape: Shape;
  prov: Provenance;
  dtype?: string;
  role?: 'input' | 'param' | 'optimizer_state';
  /** Integer inputs: range(lo, hi). */
  values?: [number, number];
  /** Explicit lineage target (logical tensor name); default: the tensor's own name. */
  logical?: string;
  /** No lineage (an intermediate whose relation is not a plain slice or partial sum). */
  noLineage?: boolean;
  /** Removed with the dead op that produced it (not written). */
  dropped?: boolean;
  /** Per dim: which split it carries (the batch rows, or the tp shard), when known. */
  tags?: (DimTag | undefined)[];
}

/**
 * A split a dim carries; `rows*cp:k` is batch rows outer with zig-zag chunks of k tokens
 * inner, `rows*tp:k` the same with a tp block of k (SP tokens flattened, as the MoE layer
 * does); `slots` the routing slots of MoE expert buffers, `xslots` the same after an expert-
 * parallel all-to-all (every dp rank's slots, in exchange order); `cp*tp` is the rank's zig-zag chunk pair split further over tp (sequence parallelism
 * under context parallelism).
 */
export type DimTag = 'rows' | 'tp' | 'dp' | 'cp' | 'cp*tp' | 'slots' | 'xslots' | `rows*cp:${number}` | `rows*tp:${number}`;

type TapeEntry = { scopes: string[]; gradLogical?: Map<number, string> } & (
  | { kind: 'op'; name: string; inputs: GradRef[]; outputs: GradRef[]; attrs: Attrs }
  | { kind: 'custom'; inputs: GradRef[]; outputs: GradRef[]; backward: (grads: GradRef[]) => (GradRef | undefined)[] }
);

export class GenGraph implements GradBuilder {
  readonly tensors: GenTensor[] = [];
  /** Every tensor's name: leaf's twice-declared check was a scan of all tensors per leaf (L2's optimizer state: 40 s of gen). */
  private readonly names = new Set<string>();
  /** The ops as the plan file writes them: the loader's type (plans/raw.ts). */
  readonly ops: RawParallelOp[] = [];
  private readonly tape: TapeEntry[] = [];
  private readonly counters = new Map<string, number>();
  private scopes: string[] = [];
  /** Provenance given to ops' outputs beyond their inputs' (e.g. the current micro-batch). */
  private recording = true;

  constructor(readonly label: string) {}

  shape(r: GradRef): Shape {
    return this.t(r).shape;
  }

  t(r: GradRef): GenTensor {
    const x = this.tensors[r];
    if (x === undefined) throw new Error(`${this.label}: no tensor ${r}`);
    return x;
  }

  name(r: GradRef): string {
    return this.t(r).name;
  }

  /** The logical tensor x stands for: its explicit claim, else its name without a micro-batch prefix. */
  logicalName(x: GradRef): string {
    const t = this.t(x);
    return t.logical ?? t.name.replace(/^mb[0-9]+\//, '');
  }

  /**
   * Gradients that claim a logical tensor by name: when the reverse pass reaches the producer
   * of a key, the key's (complete) gradient claims the name. Parallel-only forward code (a
   * vocab-parallel loss or embedding) uses this to claim what the logical op's backward makes.
   */
  readonly gradClaims = new Map<GradRef, string>();

  /** The gradient that the op producing `out` gives its input `k` claims the logical tensor `name`. */
  claimInputGrad(out: GradRef, k: number, name: string): void {
    // The producer is among the newest entries: search from the end, without copying.
    for (let i = this.tape.length - 1; i >= 0; i--) {
      const e = this.tape[i] as TapeEntry;
      if (!e.outputs.includes(out)) continue;
      (e.gradLogical ??= new Map()).set(k, name);
      return;
    }
    throw new Error(`${this.label}: '${this.name(out)}' is not on the tape`);
  }

  /** The current scope path without the micro-batch prefix (the logical build's scope). */
  logicalScope(): string {
    return this.scopes.filter((x, i) => !(i === 0 && /^mb[0-9]+$/.test(x))).join('/');
  }

  /** Runs f with names under `scope` (joined with '/'). */
  scope<T>(scope: string, f: () => T): T {
    this.scopes.push(scope);
    try {
      return f();
    } finally {
      this.scopes.pop();
    }
  }

  /** A fresh name under the current scope (parallel-only ops use bases the model never uses). */
  scopedName(base: string): string {
    return this.fresh(base);
  }

  private fresh(base: string): string {
    const s = [...this.scopes, base].join('/');
    const k = this.counters.get(s) ?? 0;
    this.counters.set(s, k + 1);
    return k === 0 ? s : `${s}#${k}`;
  }

  /** A tensor with no producer (an input, a parameter, optimizer state). */
  leaf(name: string, shape: Shape, prov: Provenance, extra: Partial<GenTensor> = {}): GradRef {
    if (this.names.has(name)) throw new Error(`${this.label}: tensor '${name}' declared twice`);
    this.names.add(name);
    this.tensors.push({ name, shape, prov, ...extra });
    return this.tensors.length - 1;
  }

  private add(name: string, shape: Shape, prov: Provenance): GradRef {
    this.names.add(name);
    this.tensors.push({ name, shape, prov });
    return this.tensors.length - 1;
  }

  /** Emits a regular op (recorded on the tape); output shapes from the registry. */
  op(name: string, inputs: readonly GradRef[], attrs: Attrs = {}, outName?: string): GradRef[] {
    const id = registry.id(name);
    if (id < 0) throw new Error(`${this.label}: unknown op '${name}'`);
    const bad = registry.checkAttrs(id, attrs);
    if (bad !== undefined) throw new Error(`${this.label}: op '${name}' ${bad} (${JSON.stringify(attrs)})`);
    const def = registry.get(id);
    const inShapes = inputs.map((r) => this.shape(r));
    const shapes = def.shape(inShapes, attrs);
    const prov = merge(inputs.map((r) => this.t(r).prov));
    const base = outName ?? this.fresh(name);
    const outs = shapes.map((s, k) => this.add(k === 0 ? base : `${base}.${k}`, s, prov));
    // Carry dim tags along the op's dim signature: a label shared by an input dim and an
    // output dim is the same index (SIMD), so the split moves with it.
    const sig = def.dims(inShapes, attrs);
    const byLabel = new Map<string, DimTag>();
    inputs.forEach((r, i) => this.t(r).tags?.forEach((tag, d) => {
      const l = sig.inputs[i]?.[d];
      // A label shared by an input and an output dim is the same index (same size); 'fixed'
      // only forbids shrinking it. Reshape's labels are all distinct (see reshapeTags).
      if (tag !== undefined && l !== undefined) byLabel.set(l.label, tag);
    }));
    outs.forEach((o, k) => {
      // MoE slot buffers are laid out by the routing choices of the rank's own tokens: a
      // 'slots' dim has no logical counterpart unless the rank holds every token.
      const tags = (sig.outputs[k] ?? []).map((l) => byLabel.get(l.label) ?? (l.label === 'slots' ? slotTag(name, attrs, this.t(inputs[0] as GradRef), this.shape(inputs[1] as GradRef)) : undefined));
      if (name === 'reshape') reshapeTags(this.t(inputs[0] as GradRef), shapes[0] as Shape).forEach((tag, d) => (tags[d] ??= tag));
      if (tags.some((x) => x !== undefined)) this.t(o).tags = tags;
    });
    this.ops.push({ id: base, op: name, inputs: inputs.map((r) => this.name(r)), outputs: outs.map((r) => this.name(r)), ...(Object.keys(attrs).length > 0 ? { attrs } : {}) });
    if (this.recording) this.tape.push({ kind: 'op', name, inputs: [...inputs], outputs: outs, attrs, scopes: [...this.scopes] });
    return outs;
  }

  one(name: string, inputs: readonly GradRef[], attrs: Attrs = {}, outName?: string): GradRef {
    return this.op(name, inputs, attrs, outName)[0] as GradRef;
  }

  /**
   * A collective over mesh axes (not on the tape). Provenance: all_reduce and all_gather make
   * the value the same on every member; reduce_scatter and all_to_all keep it varying.
   */
  collective(name: string, input: GradRef, attrs: Attrs, axes: string[], sizes: Record<string, number>, ranks?: RawInt[]): GradRef {
    const id = registry.id(name);
    const rule = registry.get(id).collective;
    if (rule === undefined) throw new Error(`'${name}' is not a collective`);
    const groupSize = ranks !== undefined ? ranks.length : axes.reduce((p, a) => p * (sizes[a] ?? 1), 1);
    const shape = rule.outShape(this.shape(input), attrs, groupSize);
    const p = this.t(input).prov;
    const varies = new Set(p.varies);
    if (name === 'all_reduce' || name === 'all_gather') for (const a of axes) varies.delete(a);
    const base = this.fresh(name);
    const out = this.add(base, shape, { varies, mbs: p.mbs, batch: p.batch });
    // Tags follow the data: an all-gather completes its dim, a reduce-scatter splits it over
    // the group's (single) axis.
    const tags = [...(this.t(input).tags ?? shape.map(() => undefined))];
    const d = typeof attrs['dim'] === 'number' ? (attrs['dim'] < 0 ? attrs['dim'] + shape.length : attrs['dim']) : -1;
    const overTp = axes.length === 1 && axes[0] === 'tp';
    if (name === 'all_gather' && d >= 0) tags[d] = tags[d] === 'cp*tp' && overTp ? 'cp' : undefined;
    if (name === 'reduce_scatter' && d >= 0 && axes.length === 1) tags[d] = tags[d] === 'cp' && overTp ? 'cp*tp' : (axes[0] as DimTag);
    if (name === 'all_reduce' || name === 'all_gather' || name === 'reduce_scatter') this.t(out).tags = tags;
    this.ops.push({ id: base, op: name, inputs: [this.name(input)], outputs: [base], attrs, group: ranks ?? { axes } });
    return out;
  }

  /** A receive from a peer (pipeline): a new tensor laid out as `prov`/`tags` say; `logical` names its logical counterpart. */
  recv(shape: Shape, peer: { shift: Record<string, number> }, prov: Provenance, tags: (DimTag | undefined)[] | undefined, logical: string): GradRef {
    const base = this.fresh('recv');
    const r = this.add(base, shape, prov);
    const t = this.t(r);
    if (tags !== undefined) t.tags = [...tags];
    if (logical !== '') t.logical = logical;
    this.ops.push({ id: base, op: 'recv', inputs: [], outputs: [base], peer });
    return r;
  }

  send(x: GradRef, peer: { shift: Record<string, number> }): void {
    this.ops.push({ id: this.fresh('send'), op: 'send', inputs: [this.name(x)], outputs: [], peer });
  }

  /** An identity-like region boundary with its own adjoint (Megatron's f / g conjugates). */
  custom(inputs: GradRef[], outputs: GradRef[], backward: (grads: GradRef[]) => (GradRef | undefined)[]): void {
    this.tape.push({ kind: 'custom', inputs, outputs, backward, scopes: [...this.scopes] });
  }

  /** Emits ops without recording them (backward ops, optimizer steps). */
  untaped<T>(f: () => T): T {
    const prev = this.recording;
    this.recording = false;
    try {
      return f();
    } finally {
      this.recording = prev;
    }
  }

  /**
   * Reverse-mode differentiation of `loss` (seeded with `seed`) through the tape, using each
   * op's backward rule. Returns the gradient of each requested tensor (undefined: no path).
   * Fan-out gradients are summed in reverse tape order, identically in every build.
   */
  backward(loss: GradRef, seed: GradRef, wrt: readonly GradRef[]): (GradRef | undefined)[] {
    return this.reverse(this.tape, new Map<GradRef, GradRef>([[loss, seed]]), wrt, [...this.scopes], (s) => s);
  }

  /**
   * Activation recomputation (Megatron's full recompute of a layer): `f` runs in the forward
   * as usual, but its tape entries are replaced by one whose backward runs `f` again (in a
   * 'recompute' scope, so the recomputed values are new tensors, named apart) and
   * differentiates through the recomputed graph. The backward ops are named as without
   * recomputation, so their lineage is the same.
   */
  recompute(f: () => GradRef): GradRef {
    const start = this.tape.length;
    const out = f();
    const seg = this.tape.splice(start);
    const made = new Set(seg.flatMap((e) => e.outputs));
    const ext = [...new Set(seg.flatMap((e) => e.inputs).filter((x) => !made.has(x)))];
    this.tape.push({
      kind: 'custom',
      inputs: ext,
      outputs: [out],
      scopes: [...this.scopes],
      backward: ([gy]) => {
        const outer = [...this.scopes];
        const mark = this.tape.length;
        const prev = this.recording;
        this.recording = true;
        let y: GradRef;
        try {
          y = this.scope('recompute', f);
        } finally {
          this.recording = prev;
        }
        const again = this.tape.splice(mark);
        // The same code on the same inputs: entry by entry, the recomputed values are the
        // forward's, and claim what those claim (so stages are cut at the same places).
        if (again.length !== seg.length) throw new Error(`${this.label}: recomputation emitted ${again.length} tape entries, the forward ${seg.length}`);
        again.forEach((e, i) =>
          e.outputs.forEach((o, k) => {
            const orig = (seg[i] as TapeEntry).outputs[k];
            if (orig === undefined) throw new Error(`${this.label}: recomputation diverged from the forward`);
            const [t, u] = [this.t(o), this.t(orig)];
            t.logical = this.logicalName(orig);
            if (u.tags !== undefined) t.tags = [...u.tags];
            if (u.noLineage === true) t.noLineage = true;
          }),
        );
        const at = outer.length;
        const base = outer.slice(0, -1).filter((x) => x !== 'grad');
        return this.reverse(again, new Map([[y, gy as GradRef]]), ext, base, (sc) => [...sc.slice(0, at - 1).filter((x) => x !== 'grad'), ...sc.slice(at + 1)]);
      },
    });
    return out;
  }

  /**
   * Reverse-mode over `tape` from `grads` (tensor -> its gradient) to `wrt`. Backward ops are
   * named in 'grad/' plus their forward op's scope (`scopeOf` maps an entry's recorded scopes
   * to the forward scopes to name after), relative to `outer`.
   */
  private reverse(tape: readonly TapeEntry[], grads: Map<GradRef, GradRef>, wrt: readonly GradRef[], outer: string[], scopeOf: (s: string[]) => string[]): (GradRef | undefined)[] {
    const need = this.needed(wrt, tape);
    // Backward ops are named in 'grad/' plus their forward op's scope, so parallel-only
    // forward code (a vocab-parallel loss) has parallel-only gradient names too.
    const saved = this.scopes;
    return this.untaped(() => {
      try {
        for (let i = tape.length - 1; i >= 0; i--) {
          const e = tape[i] as TapeEntry;
          if (!e.outputs.some((o) => grads.has(o))) continue;
          if (!e.inputs.some((x) => need.has(x))) continue;
          for (const o of e.outputs) {
            const name = this.gradClaims.get(o);
            const gr = grads.get(o);
            if (name !== undefined && gr !== undefined) this.claimGrad(gr, name, o);
          }
          const sc = scopeOf(e.scopes);
          const rel = sc.slice(0, outer.length).every((x, k) => x === outer[k]) ? sc.slice(outer.length) : sc;
          this.scopes = [...outer, 'grad', ...rel];
          const gs = e.outputs.map((o) => grads.get(o) ?? this.one('scale', [o], { factor: 0 }));
          let gin: (GradRef | undefined)[];
          if (e.kind === 'custom') gin = e.backward(gs);
          else {
            const rule = registry.get(registry.id(e.name)).backward;
            if (rule === 'none') throw new Error(`${this.label}: no backward rule for '${e.name}' on the path to the loss`);
            gin = rule(this, { inputs: e.inputs, outputs: e.outputs, grads: gs, attrs: e.attrs });
          }
          e.inputs.forEach((x, k) => {
            const g = gin[k];
            if (g === undefined || !need.has(x)) return;
            const claim = e.gradLogical?.get(k);
            if (claim !== undefined) this.claimGrad(g, claim, x);
            const prev = grads.get(x);
            // Named after the tensor whose gradient accumulates, so both builds agree.
            grads.set(x, prev === undefined ? g : this.one('add', [prev, g], {}, this.fresh(`acc[${this.logicalName(x)}]`)));
          });
        }
        return wrt.map((w) => grads.get(w));
      } finally {
        this.scopes = saved;
      }
    });
  }

  /** A gradient claims the logical tensor `name` (unless it claims one already), laid out like `like`. */
  private claimGrad(g: GradRef, name: string, like: GradRef): void {
    const t = this.t(g);
    if (t.logical !== undefined) return;
    t.logical = name;
    const tags = this.t(like).tags;
    if (tags !== undefined) t.tags = [...tags];
  }

  /** Tensors from which some `wrt` tensor is reachable forward... i.e. on a path to them. */
  private needed(wrt: readonly GradRef[], tape: readonly TapeEntry[]): Set<GradRef> {
    // A tape input needs a gradient when it is a wrt tensor or depends on one.
    const dep = new Set<GradRef>(wrt);
    for (const e of tape) if (e.inputs.some((x) => dep.has(x))) for (const o of e.outputs) dep.add(o);
    return dep;
  }
}

/**
 * The split of a dispatch buffer's slot dim. In the token layout slot (i, j) is row i*k + j,
 * so the slots are the tokens' split with k rows per token; in the packed layout (or with
 * tokens whose split is not known) they are 'slots': a layout of the rank's own tokens only.
 */
function slotTag(op: string, attrs: Attrs, tokens: GenTensor, idx: Shape): DimTag {
  const t = tokens.tags?.[0];
  if (op !== 'moe_dispatch' || attrs['layout'] !== 'token' || t === undefined) return 'slots';
  const k = idx[1] as number;
  if (t === 'rows') return 'rows';
  const m = /^(rows\*(?:tp|cp)):([0-9]+)$/.exec(t);
  return m === null ? 'slots' : (`${m[1] as string}:${Number(m[2]) * k}` as DimTag);
}

/**
 * A reshape keeps a split when the dim stays outermost of its group: an output dim starting
 * where the tagged input dim starts (same row-major prefix product) and merging it with inner
 * dims, or splitting off its outer part, holds the same contiguous blocks.
 */
function reshapeTags(x: GenTensor, out: Shape): (DimTag | undefined)[] {
  const tags: (DimTag | undefined)[] = out.map(() => undefined);
  if (x.tags === undefined) return tags;
  const pre = (s: Shape): number[] => s.map((_, i) => s.slice(0, i).reduce((p, v) => p * v, 1));
  const pi = pre(x.shape);
  const po = pre(out);
  // Rows and sequence chunks (zig-zag under CP, or a tp block under SP) merged into one dim,
  // or split back out of it.
  const xt = x.tags;
  for (let i = 0; i + 1 < x.shape.length; i++) {
    const inner = xt[i + 1];
    if (xt[i] !== 'rows' || (inner !== 'cp' && inner !== 'tp')) continue;
    // Both dims kept apart (a size-1 row dim makes a merge look possible): no merge.
    const j0 = po.findIndex((p, jj) => p === pi[i] && out[jj] === x.shape[i]);
    const j1 = po.findIndex((p, jj) => jj > j0 && p === pi[i + 1] && out[jj] === x.shape[i + 1]);
    if (j0 >= 0 && j1 >= 0) continue;
    const j = po.findIndex((p, jj) => p === pi[i] && out[jj] === (x.shape[i] as number) * (x.shape[i + 1] as number));
    if (j >= 0) return out.map((_, d) => (d === j ? (`rows*${inner}:${x.shape[i + 1] as number}` as DimTag) : undefined));
  }
  const m = xt.findIndex((tg) => tg !== undefined && (tg.startsWith('rows*cp:') || tg.startsWith('rows*tp:')));
  if (m >= 0) {
    const [kind, kk] = (xt[m] as string).split(':') as [string, string];
    const k = Number(kk);
    const j = po.findIndex((p, jj) => p === pi[m] && out[jj + 1] === k && (out[jj] as number) * k === x.shape[m]);
    // A block of one token split off ([n] -> [n, 1]) may be rows and sequence or tokens and
    // a unit dim: the merged tag stays and the claim decides by the logical shape.
    if (j >= 0 && k === 1) return out.map((_, d) => (d === j ? (xt[m] as DimTag) : undefined));
    if (j >= 0) return out.map((_, d) => (d === j ? 'rows' : d === j + 1 ? (kind === 'rows*cp' ? 'cp' : 'tp') : undefined));
  }
  x.tags.forEach((tag, i) => {
    if (tag === undefined) return;
    const a = x.shape[i] as number;
    // The outermost output dim starting there carries the blocks (it may be a size-1 head dim).
    // Outermost first (a split's outer part carries the blocks, even at size 1); size-1 dims
    // share prefix products with their neighbours, so a dim already tagged is skipped.
    const j = po.findIndex((p, jj) => p === pi[i] && tags[jj] === undefined && ((out[jj] as number) % a === 0 || a % (out[jj] as number) === 0));
    if (j >= 0) tags[j] = tag;
  });
  return tags;
}

function merge(ps: readonly Provenance[]): Provenance {
  const varies = new Set<string>();
  const mbs = new Set<number>();
  let batch = false;
  for (const p of ps) {
    for (const a of p.varies) varies.add(a);
    for (const m of p.mbs) mbs.add(m);
    batch ||= p.batch;
  }
  return { varies, mbs, batch };
}

export const REPLICATED: Provenance = { varies: new Set(), mbs: new Set(), batch: false };
