/**
 * The lowering machinery the ATen rule tables share (plans/import/aten.ts and the tables it
 * merges): the Lowerer (named values, views and in-place writes, planproof ops emitted through
 * their own shape rules) and the helpers rules are written with.
 */
import { registry } from '../../ops/registry.js';
import { strides } from '../../ops/dense.js';
import { ShapeError, type AttrValue, type Attrs, type Shape } from '../../ops/types.js';
import type { RawParallelOp } from '../raw.js';
import type { PlanGuard } from '../model.js';
import { ImportError, type FxArg, type FxGraph, type FxNode } from './fxtext.js';

export interface TensorVal {
  readonly kind: 'tensor';
  readonly id: string;
  readonly shape: Shape;
  readonly dtype: string;
}
/**
 * A value only some ATen ops may read: LayerNorm's saved mean and rstd, NLL's total weight and
 * its gradient before the log-softmax backward. Anything else reading it is an error.
 */
export interface OpaqueVal {
  readonly kind: 'opaque';
  readonly what: string;
  readonly data: Readonly<Record<string, string | number>>;
  readonly tensors?: Readonly<Record<string, TensorVal>>;
  /**
   * The value as ordinary ops, for a reader other than the matching backward op (label
   * smoothing adds to NLL's gradient before the log-softmax backward); emitted on first use.
   */
  readonly materialize?: () => TensorVal;
}
export type Val = TensorVal | OpaqueVal | { readonly kind: 'none' } | { readonly kind: 'list'; readonly items: readonly Val[] };

/** A collective call as found; its group is resolved once every rank is read. */
export interface CollectiveCall {
  readonly op: RawParallelOp;
  /** The group name the call passes, or `ranks:0,1` for the legacy explicit rank list. */
  readonly group: string;
  readonly groupSize?: number;
  readonly ranks?: readonly number[];
  readonly line: number;
}

/** A tensor the importer adds as an input: a dropout mask, or a constant. */
export interface ExtraInput {
  readonly id: string;
  readonly shape: Shape;
  readonly dtype: string;
  /** Constants: the integer every element holds. */
  readonly constant?: number;
  /** A value no other value determines (what dist.reduce leaves on a rank other than dst): a free input of the plan. */
  readonly unspecified?: true;
  readonly line: number;
}

/** What a program's graphs are lowered with, besides the rule tables (docs/import.md). */
export interface LowerOptions {
  /** Values of module-attribute tensors (`self._tensor_constant0`), from the relations' "constants". */
  readonly constants?: Readonly<Record<string, ConstValue>>;
  /** Rules for ops outside ATen (custom namespaces), built from op maps (plans/import/opmap.ts). */
  readonly extraRules?: Readonly<Record<string, Rule>>;
  /**
   * Intermediate nodes the relations state lineage for as assumptions: each becomes an input
   * of the program (its annotated type), and what computed it is not lowered for it.
   */
  readonly cuts?: ReadonlySet<string>;
  /** Graph inputs the relations give integer `values` (a float loss mask of 0/1, for instance): casting them to an integer type is exact. */
  readonly integral?: ReadonlySet<string>;
}

/** A constant's value: a number, or nested lists of numbers. */
export type ConstValue = number | readonly ConstValue[];

/** A returned value: a tensor, None (undefined), or a value only a backward op may read. */
export type Returned = TensorVal | OpaqueVal | undefined;

export interface Lowered {
  readonly file: string;
  readonly ops: RawParallelOp[];
  readonly tensors: Map<string, TensorVal>;
  readonly inputs: readonly TensorVal[];
  /** The return values of every graph in order; undefined where a graph returns None. */
  readonly outputs: readonly Returned[];
  /** Every node's value by name (`g<k>:` before the names of the k-th graph, k >= 1), for relations on intermediate nodes. */
  readonly named: ReadonlyMap<string, Val>;
  /** The graph-qualified names of the nodes that became inputs (LowerOptions.cuts). */
  readonly cutInputs: readonly TensorVal[];
  readonly extra: readonly ExtraInput[];
  readonly collectives: readonly CollectiveCall[];
  /** Values read into Python (`aten._local_scalar_dense`): where, and what was read. */
  readonly reads: readonly string[];
  /** What a witness must reproduce of those reads (`planproof.guard`, docs/capture.md "Guards"). */
  readonly guards: readonly ImportGuard[];
  /** ATen ops seen, for statistics. */
  readonly atenOps: number;
  /** Calls seen per target (`aten.mm.default`, `apex.fused_layer_norm_affine_fwd.default`), for the import summary. */
  readonly byTarget: ReadonlyMap<string, number>;
}

/**
 * A condition the trace depends on (`planproof.guard`, written by the capture after a value
 * read into Python), in the program being lowered: a plan guard without its program.
 */
export type ImportGuard = Omit<PlanGuard, 'program'>;

/** Complex dtypes (their values are pairs of reals, plans/import/aten-complex.ts). */
const COMPLEX = /^complex/;

/** ATen reduce-op names of the functional collectives to planproof's. */
export const REDUCE: Record<string, string> = { sum: 'sum', avg: 'avg', max: 'max', min: 'min' };

export class Lowerer {
  readonly ops: RawParallelOp[] = [];
  readonly tensors = new Map<string, TensorVal>();
  readonly extra: ExtraInput[] = [];
  readonly collectives: CollectiveCall[] = [];
  readonly reads: string[] = [];
  readonly guards: ImportGuard[] = [];
  private readonly vals = new Map<string, Val>();
  /** Storage root of each name (views share their input's root), for in-place soundness. */
  private readonly root = new Map<string, string>();
  /** Names whose storage was written in place through another name: reading them is refused. */
  private readonly stale = new Map<string, number>();
  /**
   * Names inside one piece of a split (split, chunk, unsafe_split, unbind: `list#i`), and the
   * views of them: pieces of one split are disjoint, so a write through one leaves the others
   * readable (an LSTM cell's `sigmoid_` on each gate of `unsafe_split`). The split's input and
   * any other view of its storage still go stale.
   */
  private readonly piece = new Map<string, string>();
  /** Lists whose items are disjoint pieces of their input. */
  readonly splitLists = new Set<string>();
  /** Views that are one region of a named tensor (slice with step 1, select): a write through them is written into it. */
  private readonly region = new Map<string, { parent: string; dim: number; start: number; end: number; keep: Shape }>();
  /**
   * Tuple results whose items are fresh tensors (the ATen schema gives their returns no alias
   * annotation: `native_batch_norm(...) -> (Tensor, Tensor, Tensor)`): each item is its own
   * storage, so a write in place through one (ResNet's `out += identity` on BatchNorm's output)
   * leaves the others (its saved mean and invstd, read by the backward) readable.
   */
  readonly freshLists = new Set<string>();
  /** Tensor ids (with why) that may not leave the graph: dense forms of data-dependent sizes (dynsize.ts); returned or named, they are opaque. */
  readonly confined = new Map<string, string>();
  private node: FxNode | undefined;
  private fresh = 0;
  /** The graph being lowered, and its tensor-name prefix (empty for the first graph of a rank). */
  g: FxGraph;
  private prefix = '';

  constructor(
    readonly graphs: readonly FxGraph[],
    private readonly rules: Readonly<Record<string, Rule>>,
    readonly opts: LowerOptions = {},
  ) {
    if (graphs.length === 0) throw new Error('no graph');
    this.g = graphs[0] as FxGraph;
  }

  fail(why: string): never {
    // The user's own line (a `# File:` comment of the graph) first: the graph file may be a temporary.
    const loc = this.node?.loc;
    throw new ImportError(this.g.file, this.node?.line ?? 0, loc === undefined ? why : `${why}\n  at ${loc}`);
  }

  private define(name: string, v: Val, viewOf?: string): void {
    this.vals.set(name, v);
    this.stale.delete(name);
    this.root.set(name, viewOf === undefined ? name : (this.root.get(viewOf) ?? viewOf));
    const tag = viewOf === undefined ? undefined : this.piece.get(viewOf);
    if (tag === undefined) this.piece.delete(name);
    else this.piece.set(name, tag);
  }

  /** Item i of a split's list, bound as a view inside piece i. */
  bindPiece(n: FxNode, item: Val, list: string, i: number): Val {
    const v = this.bind(n, item, list);
    this.piece.set(n.name, `${list}#${i}`);
    return v;
  }

  /** Tensors whose values are integers by construction (integer inputs, relations' `values`, sums and products of them). */
  private readonly integral = new Set<string>();
  isIntegral(t: TensorVal): boolean {
    return INTEGER.has(t.dtype) || this.integral.has(t.id) || this.opts.integral?.has(t.id) === true;
  }

  addTensor(id: string, shape: Shape, dtype: string): TensorVal {
    if (this.tensors.has(id)) this.fail(`tensor name '${id}' defined twice`);
    const t: TensorVal = { kind: 'tensor', id, shape, dtype };
    this.tensors.set(id, t);
    return t;
  }

  /** Emits one planproof op; shapes come from the op's own shape rule. */
  /** `groupSize`: a collective's group size, which its output shape may depend on (all_gather multiplies its dim by it). */
  emit(op: string, inputs: readonly TensorVal[], attrs: Record<string, AttrValue>, outIds: readonly string[], dtype: string, groupSize?: number): TensorVal[] {
    const id = registry.id(op);
    if (id < 0) this.fail(`internal: no planproof op '${op}'`);
    const def = registry.get(id);
    const why = registry.checkAttrs(id, attrs);
    if (why !== undefined) this.fail(`${op}: ${why}`);
    let shapes: Shape[];
    try {
      const coll = def.collective;
      shapes =
        groupSize !== undefined && coll !== undefined && coll.pattern === 'symmetric' && inputs.length === 1
          ? [coll.outShape((inputs[0] as TensorVal).shape, attrs as Attrs, groupSize)]
          : def.shape(
              inputs.map((t) => t.shape),
              attrs as Attrs,
            );
    } catch (e) {
      if (e instanceof ShapeError) this.fail(`${op} (from ${this.node?.target ?? '?'}): ${e.message}`);
      throw e;
    }
    const outs = outIds.map((o, k) => this.addTensor(o, shapes[k] ?? this.fail(`${op}: fewer outputs than expected`), boolSafe(op, def.movesValues === true, inputs, dtype)));
    // (an average of integers is not one: avg reductions are left out, as are non-integer scales)
    if (INTEGRAL_OPS.has(op) && inputs.every((t) => this.isIntegral(t)) && (op !== 'scale' || Number.isInteger(attrs['factor'])) && attrs['reduce'] !== 'avg') for (const t of outs) this.integral.add(t.id);
    const n = this.node;
    const opId = `${outIds[0] ?? 'op'}.op`;
    const raw: RawParallelOp = { id: opId, op, inputs: inputs.map((t) => t.id), outputs: [...outIds], ...(Object.keys(attrs).length > 0 ? { attrs } : {}), ...(n === undefined ? {} : { loc: this.locOf(n) }) };
    this.ops.push(raw);
    return outs;
  }

  /** An op's `loc`: the graph file and line, and the user's line when the graph carries it. */
  locOf(n: FxNode): string {
    return `${this.g.file}:${n.line}${n.loc === undefined ? '' : ` (${n.loc})`}`;
  }

  /** A fresh tensor name derived from the node's (no FX name contains '.'). */
  tmp(): string {
    return `${this.prefix}${this.node?.name ?? 'v'}.${++this.fresh}`;
  }

  one(op: string, inputs: readonly TensorVal[], attrs: Record<string, AttrValue> = {}, out?: string, dtype?: string): TensorVal {
    return this.emit(op, inputs, attrs, [out ?? this.tmp()], dtype ?? inputs[0]?.dtype ?? 'float32')[0] as TensorVal;
  }

  /** A scalar constant (an integer input whose only value is `c`, scaled when `c` is not an integer). */
  constant(c: number): TensorVal {
    if (!Number.isFinite(c)) this.fail(`constant ${c} is not a finite number`);
    // Integers are an integer input; anything else (a fraction, torch.finfo's min) scales 1.
    const k = Number.isInteger(c) && Math.abs(c) <= 2 ** 31 ? c : 1;
    const id = `const.${k < 0 ? 'm' + -k : k}`;
    let t = this.tensors.get(id);
    if (t === undefined) {
      t = this.addTensor(id, [], 'int64');
      this.extra.push({ id, shape: [], dtype: 'int64', constant: k, line: this.node?.line ?? 0 });
    }
    return k === c ? t : this.one('scale', [t], { factor: c }, undefined, 'float32');
  }

  /** A constant tensor of x's shape. */
  constantLike(x: TensorVal, c: number): TensorVal {
    return this.one('expand', [this.constant(c)], { shape: [...x.shape] }, undefined, x.dtype);
  }

  // ---- arguments

  val(a: FxArg | undefined, what: string): Val {
    if (a === undefined) this.fail(`missing argument ${what}`);
    if (a.kind === 'none') return { kind: 'none' };
    if (a.kind === 'list') return { kind: 'list', items: a.items.map((x, i) => this.val(x, `${what}[${i}]`)) };
    if (a.kind !== 'name') this.fail(`argument ${what}: expected a tensor, got a constant`);
    const st = this.stale.get(a.name);
    if (st !== undefined) this.fail(`'${a.name}' is read after its storage was written in place at line ${st}: aliasing through in-place ops is not supported`);
    const v = this.vals.get(a.name);
    if (v === undefined) this.fail(`'${a.name}' is not defined before line ${this.node?.line ?? 0}`);
    return v;
  }
  /**
   * Runs `f` with `name` bound to `v`, then restores what it held: lowers a rule on one part of
   * a value that is not a tensor (the finite part and the mask of an -inf tensor, aten-neginf.ts).
   */
  withValue<T>(name: string, v: Val, f: () => T): T {
    const before = this.vals.get(name);
    this.vals.set(name, v);
    try {
      return f();
    } finally {
      if (before === undefined) this.vals.delete(name);
      else this.vals.set(name, before);
    }
  }
  /** The value a name holds, without `val`'s checks (aten-empty.ts looks for empty tensors among a node's arguments). */
  peek(name: string): Val | undefined {
    return this.vals.get(name);
  }
  private readonly materialized = new WeakMap<OpaqueVal, TensorVal>();
  tensor(a: FxArg | undefined, what: string): TensorVal {
    const v = this.val(a, what);
    if (v.kind === 'opaque' && v.materialize !== undefined) {
      let t = this.materialized.get(v);
      if (t === undefined) this.materialized.set(v, (t = v.materialize()));
      return t;
    }
    if (v.kind !== 'tensor') this.fail(`argument ${what}: expected a tensor${v.kind === 'opaque' ? `, got ${v.what}, which only its matching backward op may read` : ''}`);
    return v;
  }
  optTensor(a: FxArg | undefined, what: string): TensorVal | undefined {
    return a === undefined || a.kind === 'none' ? undefined : this.tensor(a, what);
  }
  num(a: FxArg | undefined, what: string, dflt?: number): number {
    if (a === undefined && dflt !== undefined) return dflt;
    if (a?.kind === 'num') return a.value;
    if (a?.kind === 'bool') return a.value ? 1 : 0;
    return this.fail(`argument ${what}: expected a number`);
  }
  int(a: FxArg | undefined, what: string, dflt?: number): number {
    const v = this.num(a, what, dflt);
    if (!Number.isInteger(v)) this.fail(`argument ${what}: expected an integer`);
    return v;
  }
  ints(a: FxArg | undefined, what: string): number[] {
    if (a?.kind === 'num') return [this.int(a, what)];
    if (a?.kind !== 'list') return this.fail(`argument ${what}: expected a list of integers`);
    return a.items.map((x, i) => this.int(x, `${what}[${i}]`));
  }
  bool(a: FxArg | undefined, what: string, dflt: boolean): boolean {
    if (a === undefined || a.kind === 'none') return dflt;
    if (a.kind === 'bool') return a.value;
    return this.fail(`argument ${what}: expected True or False`);
  }
  str(a: FxArg | undefined, what: string, dflt?: string): string {
    if (a === undefined && dflt !== undefined) return dflt;
    if (a?.kind === 'str') return a.value;
    return this.fail(`argument ${what}: expected a string`);
  }
  /** Positional or keyword argument `k` / `name`. */
  arg(n: FxNode, k: number, name: string): FxArg | undefined {
    return n.args[k] ?? n.kwargs[name];
  }

  /** A tensor or a Python scalar operand of an element-wise op. */
  operand(a: FxArg | undefined, what: string): TensorVal {
    if (a?.kind === 'num') return this.constant(a.value);
    return this.tensor(a, what);
  }

  // ---- the graph

  /**
   * Lowers the graphs of one program in order (AOTAutograd's forward then backward): an input
   * of a later graph named like a value an earlier graph returned is that value (AOTAutograd
   * names the saved tensors after the forward's nodes); any other input is a program input.
   */
  run(): Lowered {
    const inputs: TensorVal[] = [];
    const outputs: Returned[] = [];
    const named = new Map<string, Val>();
    const cutInputs: TensorVal[] = [];
    const byTarget = new Map<string, number>();
    const returned = new Map<string, TensorVal | OpaqueVal>();
    let aten = 0;
    this.graphs.forEach((g, gi) => {
      this.g = g;
      this.prefix = gi === 0 ? '' : `g${gi}:`;
      this.vals.clear();
      this.root.clear();
      this.stale.clear();
      // (FX names repeat across a rank's graphs: a later graph's input is not an earlier node.)
      this.strides.clear();
      this.node = undefined;
      for (const p of g.inputs) {
        if (p.type === undefined) throw new ImportError(g.file, p.line, `input '${p.name}' has no type annotation (expected e.g. "f32[4, 8]")`);
        const prev = returned.get(p.name);
        if (prev !== undefined) {
          if (prev.kind === 'tensor' && (prev.shape.length !== p.type.shape.length || prev.shape.some((d, i) => d !== p.type?.shape[i]))) throw new ImportError(g.file, p.line, `input '${p.name}' is [${p.type.shape.join(', ')}] but the earlier graph returned it as [${prev.shape.join(', ')}]`);
          this.define(p.name, prev);
          continue;
        }
        // (a complex input would be a tensor of complex values no op here reads: its pairs are, docs/import.md)
        if (COMPLEX.test(p.type.dtype)) throw new ImportError(g.file, p.line, `input '${p.name}' is ${p.type.dtype}: complex graph inputs are not supported; pass torch.view_as_real of it (a real tensor of (re, im) pairs) and view_as_complex it in the graph`);
        const t = this.addTensor(p.name, p.type.shape, p.type.dtype);
        this.define(p.name, t);
        inputs.push(t);
      }
      for (const n of g.nodes) {
        this.node = n;
        this.fresh = 0;
        aten++;
        byTarget.set(n.target, (byTarget.get(n.target) ?? 0) + 1);
        const qualified = this.prefix + n.name;
        if (this.opts.cuts?.has(qualified) === true) {
          // An assumption on an intermediate node: from here on it is an input.
          if (n.type === undefined) this.fail(`'${n.name}' is named in the relations' "inputs" but has no type annotation`);
          if (n.type.dyn !== undefined || n.type.sym !== undefined) this.fail(`'${n.name}' is named in the relations' "inputs" but its size depends on the data (${n.type.sym ?? (n.type.dyn ?? []).filter((u) => u !== undefined).join(', ')}): state the assumption on a node of static shape (the dense tensor an index_put writes, docs/import.md, "Data-dependent sizes")`);
          const t = this.addTensor(qualified, n.type.shape, n.type.dtype);
          this.define(n.name, t);
          named.set(qualified, t);
          cutInputs.push(t);
          continue;
        }
        const v = this.lower(n);
        named.set(qualified, this.unconfined(v));
        this.checkAnnotation(n, v);
      }
      this.node = { name: 'return', target: 'return', args: [], kwargs: {}, line: g.returnLine };
      g.outputs.forEach((o, k) => {
        // AOTAutograd's backward returns None for inputs that need no gradient.
        if (o.kind === 'none') {
          outputs.push(undefined);
          return;
        }
        // Saved LayerNorm statistics and the like are returned for the backward: kept as they
        // are (a relation that names one as an output is refused then, by importGraphs).
        const v = o.kind === 'name' ? this.val(o, `return value ${k}`) : undefined;
        if (v?.kind === 'opaque' && v.materialize === undefined) {
          outputs.push(v);
          if (o.kind === 'name') returned.set(o.name, v); // the backward graph takes it as its input
          return;
        }
        const t = this.unconfined(this.tensor(o, `return value ${k}`));
        outputs.push(t);
        if (o.kind === 'name') returned.set(o.name, t);
      });
    });
    const files = this.graphs.map((g) => g.file).join(', ');
    return { file: files, ops: this.ops, tensors: this.tensors, inputs, outputs, named, cutInputs, extra: this.extra, collectives: this.collectives, reads: this.reads, guards: this.guards, atenOps: aten, byTarget };
  }

  private unconfined<V extends Val>(v: V): V | OpaqueVal {
    const why = v.kind === 'tensor' ? this.confined.get(v.id) : undefined;
    return why === undefined ? v : { kind: 'opaque', what: why, data: {} };
  }

  private checkAnnotation(n: FxNode, v: Val): void {
    // A data-dependent size (`u0`) or a Sym: plans/import/dynsize.ts checks the dense shape itself.
    if (n.type?.dyn !== undefined || n.type?.sym !== undefined) return;
    // A complex result is a complex value (plans/import/aten-complex.ts), never a real tensor of that shape.
    if (v.kind === 'tensor' && n.type !== undefined && COMPLEX.test(n.type.dtype)) this.fail(`${n.target} with a complex (${n.type.dtype}) result: not supported (docs/import.md, "Complex tensors", lists the ops read on complex values)`);
    if (v.kind === 'tensor' && n.type !== undefined && (v.shape.length !== n.type.shape.length || v.shape.some((d, i) => d !== n.type?.shape[i]))) {
      this.fail(`${n.target}: the graph says ${n.name} has shape [${n.type.shape.join(', ')}], the mapped op gives [${v.shape.join(', ')}]`);
    }
  }

  /** Lowers a node of an op map's body (plans/import/opmap.ts), inlined in the graph being lowered. */
  lowerInlined(b: FxNode): void {
    const outer = this.node;
    this.node = b;
    try {
      this.checkAnnotation(b, this.lower(b));
    } finally {
      this.node = outer;
    }
  }

  private lower(n: FxNode): Val {
    const base = n.target.slice(0, n.target.lastIndexOf('.'));
    const rule = this.rules[n.target] ?? this.rules[base] ?? this.opts.extraRules?.[n.target] ?? this.opts.extraRules?.[base];
    if (rule === undefined) {
      if (n.target.startsWith('aten.')) this.fail(`unsupported ATen op '${n.target}' (docs/import.md lists the supported ops)`);
      this.fail(`unsupported op '${n.target}' outside ATen: map it to ATen ops in an op map (--op-map, or "opMap" in the relations; docs/import.md, "Op maps")`);
    }
    const v = rule(this, n);
    if (v.kind === 'tensor') this.strides.set(n.name, stridesOf(this, n, v.shape));
    // The pieces of a split are views with their input's strides (only the offset moves):
    // recorded on the list, read by each getitem.
    else if (v.kind === 'list' && /^aten\.(unsafe_)?split(_with_sizes)?\./.test(n.target)) this.strides.set(n.name, this.stridesAt(n.args[0]));
    if (v.kind === 'list' && /^aten\.((unsafe_)?split(_with_sizes)?|unsafe_chunk|chunk|unbind)\./.test(n.target)) this.splitLists.add(n.name);
    else if (v.kind === 'list' && FRESH_TUPLES.test(n.target)) this.freshLists.add(n.name);
    else if (v.kind === 'list' && n.target === 'aten.unbind.int') {
      const st = this.stridesAt(n.args[0]);
      const x = this.val(n.args[0], 'self');
      const d = x.kind === 'tensor' ? ((this.int(this.arg(n, 1, 'dim'), 'dim', 0) % x.shape.length) + x.shape.length) % x.shape.length : -1;
      this.strides.set(n.name, st?.filter((_, k) => k !== d));
    }
    return v;
  }

  /**
   * Memory strides of the tensor an FX name holds, as far as the ops that made it say
   * (`stridesOf`); undefined when unknown. Only `_reshape_alias` reads them: autograd's
   * reshape of a transposed tensor is a `_reshape_alias` with the tensor's own strides, the
   * identity.
   */
  readonly strides = new Map<string, readonly number[] | undefined>();
  stridesAt(a: FxArg | undefined): readonly number[] | undefined {
    if (a?.kind !== 'name') return undefined;
    if (this.strides.has(a.name)) return this.strides.get(a.name);
    // A graph input: contiguous, as the tracer and AOTAutograd pass them.
    const v = this.vals.get(a.name);
    return v?.kind === 'tensor' ? strides(v.shape) : undefined;
  }

  /** The storage root of a name (itself unless it is a view). */
  rootOf(name: string): string {
    return this.root.get(name) ?? name;
  }

  /** Binds a node's result to its name (views share the storage root of `viewOf`). */
  bind(n: FxNode, v: Val, viewOf?: string): Val {
    this.define(n.name, v, viewOf);
    return v;
  }

  /**
   * Every name bound to the tensor `from` (alone or in a list) holds `to` from now on: a value
   * equal to it wherever the plan makes its claim (a pinned routing's scores, aten-sort.ts), so
   * ops lowered after the pin read it as the ops before it were rewritten to.
   */
  redirect(from: string, to: TensorVal): void {
    const swap = (v: Val): Val => (v.kind === 'tensor' && v.id === from ? to : v.kind === 'list' && v.items.some((i) => i.kind === 'tensor' && i.id === from) ? { kind: 'list', items: v.items.map(swap) } : v);
    for (const [name, v] of this.vals) {
      const w = swap(v);
      if (w !== v) this.vals.set(name, w);
    }
  }

  /**
   * Binds `n` as the region [start, end) along `dim` of the tensor named `parent` (`keep`: that
   * region's shape before a select drops the dim): a view, and a later write through it is
   * written into `parent` (`write`).
   */
  bindRegion(n: FxNode, v: TensorVal, parent: string, dim: number, start: number, end: number, keep: Shape): Val {
    this.bind(n, v, parent);
    this.region.set(n.name, { parent, dim, start, end, keep });
    return v;
  }

  /** An in-place write to `target`: its name now holds `v`; other names of its storage go stale. */
  write(target: FxArg | undefined, v: TensorVal, done = new Set<string>()): void {
    if (target?.kind !== 'name') this.fail('in-place op on something that is not a named tensor');
    // A region of a tensor still readable: that tensor becomes itself with the region replaced
    // by v (exact: the elements outside it are unchanged), written the same way in turn, so the
    // root and the views on the way hold the new values (pad_sequence's `out[i, :n].copy_(t)`).
    const reg = this.region.get(target.name);
    const p = reg === undefined || this.stale.has(reg.parent) ? undefined : this.vals.get(reg.parent);
    if (reg !== undefined && p?.kind === 'tensor') {
      const size = p.shape[reg.dim] as number;
      const piece = this.one('reshape', [v], { shape: [...reg.keep] }, undefined, p.dtype);
      const parts = [
        ...(reg.start > 0 ? [this.one('slice', [p], { dim: reg.dim, start: 0, end: reg.start }, undefined, p.dtype)] : []),
        piece,
        ...(reg.end < size ? [this.one('slice', [p], { dim: reg.dim, start: reg.end, end: size }, undefined, p.dtype)] : []),
      ];
      this.write({ kind: 'name', name: reg.parent }, parts.length === 1 ? piece : this.one('concat', parts, { dim: reg.dim }, undefined, p.dtype), done);
    }
    done.add(target.name);
    const r = this.root.get(target.name) ?? target.name;
    const before = this.vals.get(target.name);
    const tag = this.piece.get(target.name);
    const list = tag?.slice(0, tag.lastIndexOf('#'));
    for (const [name, rt] of this.root) {
      // (the tensors written into above hold their new values)
      if (rt !== r || done.has(name) || this.stale.has(name)) continue;
      // Another piece of the same split (or a view inside one): disjoint storage, untouched.
      const other = this.piece.get(name);
      if (tag !== undefined && other !== undefined && other !== tag && other.slice(0, other.lastIndexOf('#')) === list) continue;
      // A name holding the very value the target held (detach, alias, a same-shape view) sees
      // every element written: it holds the new value. Any other view of the storage goes stale.
      if (before !== undefined && this.vals.get(name) === before) this.vals.set(name, v);
      else this.stale.set(name, this.node?.line ?? 0);
    }
    this.define(target.name, v, target.name === r ? undefined : r);
    if (tag !== undefined) this.piece.set(target.name, tag);
  }

  /** Output of a node's single result: named after the node (prefixed in the second and later graph of a rank). */
  out(n: FxNode): string {
    return this.prefix + n.name;
  }
}

export type Rule = (l: Lowerer, n: FxNode) => Val;


/**
 * The strides of `x` (shape, strides) viewed as `size`, or undefined when no view exists: the
 * algorithm of ATen's computeStride (TensorUtils.cpp), chunk by chunk of contiguous dims.
 */
export function viewStrides(shape: readonly number[], strides: readonly number[], size: readonly number[]): number[] | undefined {
  if (shape.some((d) => d === 0)) return undefined;
  const out = new Array<number>(size.length).fill(0);
  let viewD = size.length - 1;
  let chunkBase = strides[strides.length - 1] ?? 1;
  let tensorNumel = 1;
  let viewNumel = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    tensorNumel *= shape[d] as number;
    if (d === 0 || (shape[d - 1] !== 1 && strides[d - 1] !== tensorNumel * chunkBase)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || size[viewD] === 1)) {
        out[viewD] = viewNumel * chunkBase;
        viewNumel *= size[viewD] as number;
        viewD--;
      }
      if (viewNumel !== tensorNumel) return undefined;
      if (d > 0) {
        chunkBase = strides[d - 1] as number;
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  return viewD === -1 ? out : undefined;
}

/** Equal strides on every dim of more than one element (a dim of size 1 has any stride). */
export const sameStrides = (shape: readonly number[], a: readonly number[], b: readonly number[]): boolean => shape.every((d, i) => d === 1 || a[i] === b[i]);

/**
 * The strides of a node's tensor result: a view op's follow from its input's (transpose,
 * permute, expand, `t`, a reshape of row-major memory, `_reshape_alias`'s own, detach and
 * alias keep them); any other op writes fresh row-major memory, except the views whose
 * strides this does not model (slices, splits, squeezes, clones of strided memory): unknown.
 */
function stridesOf(l: Lowerer, n: FxNode, shape: readonly number[]): readonly number[] | undefined {
  const t = n.target.replace(/\.(default|int|Tensor|dim|dims)$/, '');
  const inp = (): readonly number[] | undefined => l.stridesAt(n.args[0]);
  const swap = (st: readonly number[] | undefined, a: number, b: number): number[] | undefined => {
    if (st === undefined) return undefined;
    const r = [...st];
    const k = st.length;
    const i = ((a % k) + k) % k;
    const j = ((b % k) + k) % k;
    [r[i], r[j]] = [r[j] as number, r[i] as number];
    return r;
  };
  switch (t) {
    case 'aten.transpose':
      return swap(inp(), l.int(n.args[1], 'dim0'), l.int(n.args[2], 'dim1'));
    case 'aten.t': {
      const st = inp();
      return st === undefined || st.length < 2 ? st : swap(st, 0, 1);
    }
    case 'aten.permute': {
      const st = inp();
      return st === undefined ? undefined : l.ints(n.args[1], 'dims').map((d) => st[((d % st.length) + st.length) % st.length] as number);
    }
    case 'aten.expand': {
      const st = inp();
      const x = l.val(n.args[0], 'self');
      if (st === undefined || x.kind !== 'tensor') return undefined;
      const off = shape.length - x.shape.length;
      return shape.map((d, i) => (i < off || (x.shape[i - off] === 1 && d !== 1) ? 0 : (st[i - off] as number)));
    }
    case 'aten._reshape_alias':
      return l.ints(n.args[2], 'stride');
    case 'aten.view': {
      // ATen's computeStride (viewStrides): a view of a strided tensor, such as a split
      // piece's heads (`q.view(B, T, H, d)` of a fused QKV's piece, then permuted and
      // reshaped as GPT-2's `_upcast_and_reordered_attn` does), has strides of its own.
      const x = l.val(n.args[0], 'self');
      const st = inp();
      return x.kind === 'tensor' && st !== undefined ? viewStrides(x.shape, st, shape) : undefined;
    }
    case 'aten._unsafe_view':
    case 'aten.reshape':
    case 'aten.view_copy': {
      const x = l.val(n.args[0], 'self');
      const st = inp();
      return x.kind === 'tensor' && st !== undefined && sameStrides(x.shape, st, strides(x.shape)) ? strides(shape) : undefined;
    }
    case 'aten.detach':
    case 'aten.alias':
      return inp();
    case 'aten.view_as_real': {
      // The pairs of a complex value: their strides where its rule knew them (aten-complex.ts).
      const c = l.val(n.args[0], 'self');
      const st = c.kind === 'opaque' ? c.data['pairStrides'] : undefined;
      return typeof st === 'string' ? (JSON.parse(st) as number[]) : undefined;
    }
    case 'aten.clone': {
      const mf = n.kwargs['memory_format'];
      return mf !== undefined && JSON.stringify(mf).includes('contiguous_format') ? strides(shape) : inp();
    }
    case 'aten.slice':
      // A narrow keeps its input's strides (step 1; the importer refuses or rewrites others).
      return l.int(n.args[4], 'step', 1) === 1 ? inp() : undefined;
    case 'getitem':
      // A split piece (the list's recorded strides); any other tuple element: unknown.
      return l.strides.has((n.args[0] as { name?: string }).name ?? '') ? inp() : undefined;
    case 'aten.unsqueeze': {
      // ATen's inferUnsqueezeGeometry: the new dim's stride is sizes[d] * strides[d] (1 at the end).
      // (repeat_kv's `x[:, :, :, None, :].expand(...).reshape(...)` is a view through it.)
      const st = inp();
      const x = l.val(n.args[0], 'self');
      if (st === undefined || x.kind !== 'tensor') return undefined;
      let d = l.int(n.args[1], 'dim');
      if (d < 0) d += x.shape.length + 1;
      const s = d >= x.shape.length ? 1 : (x.shape[d] as number) * (st[d] as number);
      return [...st.slice(0, d), s, ...st.slice(d)];
    }
    case 'aten.squeeze': {
      // The strides of the dims kept.
      const st = inp();
      const x = l.val(n.args[0], 'self');
      if (st === undefined || x.kind !== 'tensor') return undefined;
      const dims = n.args[1] === undefined ? x.shape.map((_, i) => i) : l.ints(n.args[1], 'dim').map((d) => (d < 0 ? d + x.shape.length : d));
      const kept = st.filter((_, i) => !(x.shape[i] === 1 && dims.includes(i)));
      return kept.length === shape.length ? kept : undefined;
    }
    case 'aten.split':
    case 'aten.split_with_sizes':
    case 'aten.copy_':
      return undefined;
    default:
      return strides(shape);
  }
}

/**
 * Multi-output ATen ops whose returns are all fresh tensors (checked on torch 1.13's schemas:
 * no alias annotation on any return). Any other tuple's items conservatively share a root.
 */
const FRESH_TUPLES = /^aten\.(native_batch_norm|native_batch_norm_backward|native_layer_norm|native_layer_norm_backward|native_group_norm|native_group_norm_backward|native_dropout|max_pool2d_with_indices|adaptive_max_pool2d|convolution_backward|topk|sort|max|min|var_mean|std_mean|aminmax|kthvalue|mode|median|cummax|cummin)\.(default|dim|stable|correction)$/;

/** Same storage (a view or a no-op): the node's name aliases its input. */
export const view = (l: Lowerer, n: FxNode, t: TensorVal): Val => l.bind(n, t, (n.args[0] as { name?: string }).name);

export function reshape(l: Lowerer, n: FxNode, shape: readonly number[]): Val {
  const src = l.val(n.args[0], 'self');
  // A view of uninitialized memory is uninitialized memory of the view's shape (vLLM views its
  // attention kernel's output buffer before the kernel writes it whole): nothing reads it.
  const unset = src.kind === 'opaque' && src.what === 'uninitialized memory' ? (JSON.parse(String(src.data['shape'])) as number[]) : undefined;
  const total = (unset ?? l.tensor(n.args[0], 'self').shape).reduce((a, b) => a * b, 1);
  const neg = shape.filter((d) => d === -1).length;
  if (neg > 1) l.fail('more than one -1 in a view shape');
  const known = shape.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
  const tgt = shape.map((d) => (d === -1 ? (known === 0 ? 0 : total / known) : d));
  if (tgt.some((d) => !Number.isInteger(d) || d < 0) || tgt.reduce((a, b) => a * b, 1) !== total) l.fail(`cannot view [${(unset ?? l.tensor(n.args[0], 'self').shape).join(', ')}] as [${shape.join(', ')}]`);
  if (unset !== undefined) return l.bind(n, uninitialized(l, n, tgt));
  const x = l.tensor(n.args[0], 'self');
  if (tgt.length === x.shape.length && tgt.every((d, i) => d === x.shape[i])) return view(l, n, x);
  return l.bind(n, l.one('reshape', [x], { shape: tgt }, l.out(n)), (n.args[0] as { name?: string }).name);
}

/** Element-wise binary op with PyTorch's scalar forms and `alpha` (add, sub). */
export function binary(op: 'add' | 'sub' | 'mul' | 'div', inPlace: boolean): Rule {
  return (l, n) => {
    const a = l.operand(n.args[0], 'self');
    let b = l.operand(n.args[1], 'other');
    const alpha = n.kwargs['alpha'];
    if (alpha !== undefined && (op === 'add' || op === 'sub')) {
      const k = l.num(alpha, 'alpha');
      if (k !== 1) b = l.one('scale', [b], { factor: k });
    }
    if (n.kwargs['rounding_mode'] !== undefined && n.kwargs['rounding_mode'].kind !== 'none') l.fail(`${n.target}: rounding_mode is not supported`);
    // x * c and x / c with a Python scalar are a scale: no constant input needed.
    const bArg = n.args[1];
    let r: TensorVal;
    if ((op === 'mul' || op === 'div') && bArg?.kind === 'num') r = scaleBy(l, a, op, bArg.value, inPlace ? undefined : l.out(n));
    else r = l.one(op, [a, b], {}, inPlace ? undefined : l.out(n), a.dtype);
    if (inPlace) {
      l.write(n.args[0], r);
      return l.bind(n, r);
    }
    return l.bind(n, r);
  };
}

/**
 * x * c or x / c for a Python scalar c, exactly: a multiplication is a scale by c's value; a
 * division by an integer is a scale by the exact rational 1/c; by another value, a division by
 * that value (1 / c rounded to a double would not be the same real number).
 */
export function scaleBy(l: Lowerer, x: TensorVal, op: 'mul' | 'div', c: number, out: string | undefined): TensorVal {
  if (op === 'mul') return l.one('scale', [x], { factor: c }, out);
  if (c === 0) l.fail('division by the constant 0');
  if (Number.isInteger(c) && Math.abs(c) < 2 ** 31) return l.one('scale', [x], { factor: c === 1 ? 1 : `${c < 0 ? '-' : ''}1/${Math.abs(c)}` }, out);
  return l.one('div', [x, l.constant(c)], {}, out, x.dtype);
}

export function unary(op: string, inPlace = false): Rule {
  if (!inPlace) return (l, n) => l.bind(n, l.one(op, [l.tensor(n.args[0], 'self')], {}, l.out(n)));
  // `x.sigmoid_()` (LSTM's gates, nn.SiLU(inplace=True)): the written tensor's name holds the result.
  return (l, n) => {
    const r = l.one(op, [l.tensor(n.args[0], 'self')], {});
    l.write(n.args[0], r);
    return l.bind(n, r);
  };
}

/** A constant tensor: the scalar constant expanded (`ones_like`, `full`, `zeros`, ...). */
export function filled(l: Lowerer, n: FxNode, value: number, shape: readonly number[]): Val {
  const dtype = n.type?.dtype ?? 'float32';
  // A boolean fill (`torch.ones(T, T, dtype=torch.bool)`) stays boolean: the constant is an
  // integer input, so its truth value is taken first (else logical ops would see an int64).
  const c = dtype === 'bool' ? l.one('compare', [l.constant(value), l.constant(0)], { rel: 'ne' }, undefined, 'bool') : l.constant(value);
  return l.bind(n, l.one('expand', [c], { shape: [...shape] }, l.out(n), dtype));
}

const INTEGER = new Set(['int64', 'int32', 'int16', 'int8', 'uint8', 'bool']);

/** A float value stored in an integer (or bool) tensor is truncated: not an exact identity. */
/** A cast of `x` to `to`: refused when it truncates, that is to an integer type from values not known to be integers. */
export function refuseTruncation(l: Lowerer, x: TensorVal, to: string): void {
  if (INTEGER.has(to) && !l.isIntegral(x)) l.fail(`a cast from ${x.dtype} to ${to} truncates values not known to be integers; it is not supported (give the input its integer "values" in the relations when they are: a count of a 0/1 mask, for instance)`);
}

/** Ops whose result is an integer when every input is (scale: by an integer factor). */
/**
 * A bool tensor's values are {0, 1}, and the loader gives it that domain: an op is given the
 * dtype bool only when its result cannot leave {0, 1}. A sum or a sum of masks counts (the
 * number of valid targets in a loss), an all-reduce sums, a product with a float is a float:
 * declared bool they would be categorical over {0, 1} at a cut, a proof covering only counts 0
 * and 1. Those become int64 (no domain unless one is computed).
 */
function boolSafe(op: string, moves: boolean, inputs: readonly TensorVal[], dtype: string): string {
  if (dtype !== 'bool' || op === 'compare') return dtype;
  const allBool = (ts: readonly (TensorVal | undefined)[]): boolean => ts.every((t) => t !== undefined && t.dtype === 'bool');
  if (op === 'where') return allBool([inputs[1], inputs[2]]) ? dtype : 'int64';
  if (moves || op === 'mul' || op === 'maximum' || op === 'minimum' || op === 'amax') return allBool(inputs) ? dtype : 'int64';
  return 'int64';
}

const INTEGRAL_OPS = new Set(['add', 'sub', 'mul', 'neg', 'sum', 'identity', 'reshape', 'transpose', 'permute', 'expand', 'slice', 'concat', 'split', 'pad', 'where', 'maximum', 'minimum', 'amax', 'scale', 'all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'all_to_all', 'compare', 'iota']);

export function uninitialized(l: Lowerer, n: FxNode, shape: readonly number[]): OpaqueVal {
  return { kind: 'opaque', what: 'uninitialized memory', data: { shape: JSON.stringify(shape), dtype: n.type?.dtype ?? 'float32' } };
}

export function likeShape(l: Lowerer, n: FxNode): Shape {
  return l.tensor(n.args[0], 'self').shape;
}

/** x split along d into pieces of k, the last smaller (split.Tensor, and chunk's pieces): views of x. */
export function splitPieces(l: Lowerer, n: FxNode, x: TensorVal, d: number, size: number, k: number): Val {
  const sizes: number[] = [];
  for (let at = 0; at < size; at += k) sizes.push(Math.min(k, size - at));
  if (sizes.length <= 1) return l.bind(n, { kind: 'list', items: [x] }, (n.args[0] as { name?: string }).name);
  const outs = l.emit('split', [x], { dim: d, sizes }, sizes.map((_, i) => `${l.out(n)}.${i}`), x.dtype);
  return l.bind(n, { kind: 'list', items: outs }, (n.args[0] as { name?: string }).name);
}
