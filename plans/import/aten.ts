/**
 * ATen to planproof ops: lowers one parsed graph (plans/import/fxtext.ts) to planproof ops over
 * named tensors. Each ATen overload has one rule below; an op without a rule is an error naming
 * the op, the file and line (never dropped). docs/import.md lists the mapping and why each
 * rule computes what the ATen op computes in exact real arithmetic.
 */
import { registry } from '../../ops/registry.js';
import { strides } from '../../ops/dense.js';
import { ShapeError, type AttrValue, type Attrs, type Shape } from '../../ops/types.js';
import type { RawParallelOp } from '../raw.js';
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
interface OpaqueVal {
  readonly kind: 'opaque';
  readonly what: string;
  readonly data: Readonly<Record<string, string | number>>;
  readonly tensors?: Readonly<Record<string, TensorVal>>;
}
type Val = TensorVal | OpaqueVal | { readonly kind: 'none' } | { readonly kind: 'list'; readonly items: readonly Val[] };

/** A collective call as found; its group is resolved once every rank is read. */
interface CollectiveCall {
  readonly op: RawParallelOp;
  /** The group name the call passes, or `ranks:0,1` for the legacy explicit rank list. */
  readonly group: string;
  readonly groupSize?: number;
  readonly ranks?: readonly number[];
  readonly line: number;
}

/** A tensor the importer adds as an input: a dropout mask, or a constant. */
interface ExtraInput {
  readonly id: string;
  readonly shape: Shape;
  readonly dtype: string;
  /** Constants: the integer every element holds. */
  readonly constant?: number;
  readonly line: number;
}

export interface Lowered {
  readonly file: string;
  readonly ops: RawParallelOp[];
  readonly tensors: Map<string, TensorVal>;
  readonly inputs: readonly TensorVal[];
  /** The return values of every graph in order; undefined where a graph returns None. */
  readonly outputs: readonly (TensorVal | undefined)[];
  readonly extra: readonly ExtraInput[];
  readonly collectives: readonly CollectiveCall[];
  /** ATen ops seen, for statistics. */
  readonly atenOps: number;
}

/** ATen reduce-op names of the functional collectives to planproof's. */
const REDUCE: Record<string, string> = { sum: 'sum', avg: 'avg', max: 'max', min: 'min' };

class Lowerer {
  readonly ops: RawParallelOp[] = [];
  readonly tensors = new Map<string, TensorVal>();
  readonly extra: ExtraInput[] = [];
  readonly collectives: CollectiveCall[] = [];
  private readonly vals = new Map<string, Val>();
  /** Storage root of each name (views share their input's root), for in-place soundness. */
  private readonly root = new Map<string, string>();
  /** Names whose storage was written in place through another name: reading them is refused. */
  private readonly stale = new Map<string, number>();
  private node: FxNode | undefined;
  private fresh = 0;
  /** The graph being lowered, and its tensor-name prefix (empty for the first graph of a rank). */
  g: FxGraph;
  private prefix = '';

  constructor(readonly graphs: readonly FxGraph[]) {
    if (graphs.length === 0) throw new Error('no graph');
    this.g = graphs[0] as FxGraph;
  }

  fail(why: string): never {
    throw new ImportError(this.g.file, this.node?.line ?? 0, why);
  }

  private define(name: string, v: Val, viewOf?: string): void {
    this.vals.set(name, v);
    this.stale.delete(name);
    this.root.set(name, viewOf === undefined ? name : (this.root.get(viewOf) ?? viewOf));
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
    const outs = outIds.map((o, k) => this.addTensor(o, shapes[k] ?? this.fail(`${op}: fewer outputs than expected`), dtype));
    const n = this.node;
    const opId = `${outIds[0] ?? 'op'}.op`;
    const raw: RawParallelOp = { id: opId, op, inputs: inputs.map((t) => t.id), outputs: [...outIds], ...(Object.keys(attrs).length > 0 ? { attrs } : {}), ...(n === undefined ? {} : { loc: `${this.g.file}:${n.line}${n.loc === undefined ? '' : ` (${n.loc})`}` }) };
    this.ops.push(raw);
    return outs;
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
    const k = Number.isInteger(c) ? c : 1;
    if (Math.abs(k) > 2 ** 31) this.fail(`constant ${c} is too large`);
    const id = `const.${k < 0 ? 'm' + -k : k}`;
    let t = this.tensors.get(id);
    if (t === undefined) {
      t = this.addTensor(id, [], 'int64');
      this.extra.push({ id, shape: [], dtype: 'int64', constant: k, line: this.node?.line ?? 0 });
    }
    return Number.isInteger(c) ? t : this.one('scale', [t], { factor: c }, undefined, 'float32');
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
  tensor(a: FxArg | undefined, what: string): TensorVal {
    const v = this.val(a, what);
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
    const outputs: (TensorVal | undefined)[] = [];
    const returned = new Map<string, TensorVal>();
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
          if (prev.shape.length !== p.type.shape.length || prev.shape.some((d, i) => d !== p.type?.shape[i])) throw new ImportError(g.file, p.line, `input '${p.name}' is [${p.type.shape.join(', ')}] but the earlier graph returned it as [${prev.shape.join(', ')}]`);
          this.define(p.name, prev);
          continue;
        }
        const t = this.addTensor(p.name, p.type.shape, p.type.dtype);
        this.define(p.name, t);
        inputs.push(t);
      }
      for (const n of g.nodes) {
        this.node = n;
        this.fresh = 0;
        aten++;
        const v = this.lower(n);
        if (v.kind === 'tensor' && n.type !== undefined && (v.shape.length !== n.type.shape.length || v.shape.some((d, i) => d !== n.type?.shape[i]))) {
          this.fail(`${n.target}: the graph says ${n.name} has shape [${n.type.shape.join(', ')}], the mapped op gives [${v.shape.join(', ')}]`);
        }
      }
      this.node = { name: 'return', target: 'return', args: [], kwargs: {}, line: g.returnLine };
      g.outputs.forEach((o, k) => {
        // AOTAutograd's backward returns None for inputs that need no gradient.
        if (o.kind === 'none') {
          outputs.push(undefined);
          return;
        }
        const t = this.tensor(o, `return value ${k}`);
        outputs.push(t);
        if (o.kind === 'name') returned.set(o.name, t);
      });
    });
    const files = this.graphs.map((g) => g.file).join(', ');
    return { file: files, ops: this.ops, tensors: this.tensors, inputs, outputs, extra: this.extra, collectives: this.collectives, atenOps: aten };
  }

  private lower(n: FxNode): Val {
    const rule = RULES[n.target] ?? RULES[n.target.slice(0, n.target.lastIndexOf('.'))];
    if (rule === undefined) this.fail(`unsupported ATen op '${n.target}' (docs/import.md lists the supported ops)`);
    const v = rule(this, n);
    if (v.kind === 'tensor') this.strides.set(n.name, stridesOf(this, n, v.shape));
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

  /** Binds a node's result to its name (views share the storage root of `viewOf`). */
  bind(n: FxNode, v: Val, viewOf?: string): Val {
    this.define(n.name, v, viewOf);
    return v;
  }

  /** An in-place write to `target`: its name now holds `v`; other names of its storage go stale. */
  write(target: FxArg | undefined, v: TensorVal): void {
    if (target?.kind !== 'name') this.fail('in-place op on something that is not a named tensor');
    const r = this.root.get(target.name) ?? target.name;
    for (const [name, rt] of this.root) if (rt === r && name !== target.name && !this.stale.has(name)) this.stale.set(name, this.node?.line ?? 0);
    this.define(target.name, v);
  }

  /** Output of a node's single result: named after the node (prefixed in the second and later graph of a rank). */
  out(n: FxNode): string {
    return this.prefix + n.name;
  }
}

type Rule = (l: Lowerer, n: FxNode) => Val;


/**
 * The strides of `x` (shape, strides) viewed as `size`, or undefined when no view exists: the
 * algorithm of ATen's computeStride (TensorUtils.cpp), chunk by chunk of contiguous dims.
 */
function viewStrides(shape: readonly number[], strides: readonly number[], size: readonly number[]): number[] | undefined {
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
const sameStrides = (shape: readonly number[], a: readonly number[], b: readonly number[]): boolean => shape.every((d, i) => d === 1 || a[i] === b[i]);

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
    case 'aten.view':
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
    case 'aten.clone': {
      const mf = n.kwargs['memory_format'];
      return mf !== undefined && JSON.stringify(mf).includes('contiguous_format') ? strides(shape) : inp();
    }
    case 'aten.slice':
    case 'aten.split':
    case 'aten.split_with_sizes':
    case 'aten.unsqueeze':
    case 'aten.squeeze':
    case 'getitem':
    case 'aten.copy_':
      return undefined;
    default:
      return strides(shape);
  }
}

/** Same storage (a view or a no-op): the node's name aliases its input. */
const view = (l: Lowerer, n: FxNode, t: TensorVal): Val => l.bind(n, t, (n.args[0] as { name?: string }).name);

function reshape(l: Lowerer, n: FxNode, shape: readonly number[]): Val {
  const x = l.tensor(n.args[0], 'self');
  const total = x.shape.reduce((a, b) => a * b, 1);
  const neg = shape.filter((d) => d === -1).length;
  if (neg > 1) l.fail('more than one -1 in a view shape');
  const known = shape.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
  const tgt = shape.map((d) => (d === -1 ? (known === 0 ? 0 : total / known) : d));
  if (tgt.some((d) => !Number.isInteger(d) || d < 0) || tgt.reduce((a, b) => a * b, 1) !== total) l.fail(`cannot view [${x.shape.join(', ')}] as [${shape.join(', ')}]`);
  if (tgt.length === x.shape.length && tgt.every((d, i) => d === x.shape[i])) return view(l, n, x);
  return l.bind(n, l.one('reshape', [x], { shape: tgt }, l.out(n)), (n.args[0] as { name?: string }).name);
}

/** Element-wise binary op with PyTorch's scalar forms and `alpha` (add, sub). */
function binary(op: 'add' | 'sub' | 'mul' | 'div', inPlace: boolean): Rule {
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
function scaleBy(l: Lowerer, x: TensorVal, op: 'mul' | 'div', c: number, out: string | undefined): TensorVal {
  if (op === 'mul') return l.one('scale', [x], { factor: c }, out);
  if (c === 0) l.fail('division by the constant 0');
  if (Number.isInteger(c) && Math.abs(c) < 2 ** 31) return l.one('scale', [x], { factor: c === 1 ? 1 : `${c < 0 ? '-' : ''}1/${Math.abs(c)}` }, out);
  return l.one('div', [x, l.constant(c)], {}, out, x.dtype);
}

function unary(op: string): Rule {
  return (l, n) => l.bind(n, l.one(op, [l.tensor(n.args[0], 'self')], {}, l.out(n)));
}

/** self + value * (tensor1 op tensor2): addcmul and addcdiv (Adam's second moment and update). */
function addc(op: 'mul' | 'div', inPlace: boolean): Rule {
  return (l, n) => {
    const self = l.tensor(n.args[0], 'self');
    const t1 = l.tensor(n.args[1], 'tensor1');
    const t2 = l.tensor(n.args[2], 'tensor2');
    const value = l.num(n.kwargs['value'] ?? n.args[3], 'value', 1);
    let p = l.one(op, [t1, t2]);
    if (value !== 1) p = l.one('scale', [p], { factor: value });
    const r = l.one('add', [self, p], {}, inPlace ? undefined : l.out(n), self.dtype);
    if (inPlace) l.write(n.args[0], r);
    return l.bind(n, r);
  };
}

/** matmul of (a, b) plus beta * bias (addmm, baddbmm). */
function addmm(l: Lowerer, n: FxNode): Val {
  const bias = l.tensor(n.args[0], 'self');
  const a = l.tensor(n.args[1], 'mat1');
  const b = l.tensor(n.args[2], 'mat2');
  const beta = l.num(n.kwargs['beta'], 'beta', 1);
  const alpha = l.num(n.kwargs['alpha'], 'alpha', 1);
  let p = l.one('matmul', [a, b]);
  if (alpha !== 1) p = l.one('scale', [p], { factor: alpha });
  if (beta === 0) return l.bind(n, l.one('identity', [p], {}, l.out(n)));
  const c = beta === 1 ? bias : l.one('scale', [bias], { factor: beta });
  return l.bind(n, l.one('add', [p, c], {}, l.out(n)));
}

/** Group of a functional collective: its name (torch >= 2.3) or the legacy explicit rank list. */
function collective(l: Lowerer, n: FxNode, op: string, input: TensorVal, attrs: Record<string, AttrValue>, groupArg: FxArg | undefined, sizeArg: FxArg | undefined, legacyRanks: FxArg | undefined): TensorVal {
  // The group size shapes all_gather's and reduce_scatter's output (before: taken as 1, so a
  // gathered tensor's annotated shape never matched).
  const size = legacyRanks !== undefined ? l.ints(legacyRanks, 'ranks').length : sizeArg !== undefined ? l.int(sizeArg, 'group_size') : undefined;
  const out = l.emit(op, [input], attrs, [l.out(n)], input.dtype, size)[0] as TensorVal;
  const raw = l.ops[l.ops.length - 1] as RawParallelOp;
  if (legacyRanks !== undefined) {
    const ranks = l.ints(legacyRanks, 'ranks');
    l.collectives.push({ op: raw, group: `ranks:${ranks.join(',')}`, ranks, groupSize: ranks.length, line: n.line });
  } else {
    const group = groupArg?.kind === 'str' ? groupArg.value : groupArg?.kind === 'num' ? groupArg.text : l.fail(`${n.target}: expected the group name`);
    l.collectives.push({ op: raw, group, ...(sizeArg === undefined ? {} : { groupSize: l.int(sizeArg, 'group_size') }), line: n.line });
  }
  return out;
}

function reduceOp(l: Lowerer, a: FxArg | undefined): string {
  const r = REDUCE[l.str(a, 'reduce_op').toLowerCase()];
  return r ?? l.fail(`reduce op '${l.str(a, 'reduce_op')}' is not supported (sum, avg, max, min)`);
}

/** Functional collectives: `_c10d_functional` (group name) and the legacy `c10d_functional` (tag, ranks, group size). */
function collectiveRules(ns: '_c10d_functional' | 'c10d_functional'): Record<string, Rule> {
  const legacy = ns === 'c10d_functional';
  return {
    [`${ns}.all_reduce`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, collective(l, n, 'all_reduce', x, { reduce: reduceOp(l, n.args[1]) }, n.args[2], undefined, legacy ? n.args[3] : undefined));
    },
    [`${ns}.all_reduce_`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      const r = collective(l, n, 'all_reduce', x, { reduce: reduceOp(l, n.args[1]) }, n.args[2], undefined, legacy ? n.args[3] : undefined);
      l.write(n.args[0], r);
      return l.bind(n, r);
    },
    [`${ns}.all_gather_into_tensor`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, legacy ? collective(l, n, 'all_gather', x, { dim: 0 }, undefined, undefined, n.args[2]) : collective(l, n, 'all_gather', x, { dim: 0 }, n.args[2], n.args[1], undefined));
    },
    [`${ns}.reduce_scatter_tensor`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      const attrs = { dim: 0, reduce: reduceOp(l, n.args[1]) };
      return l.bind(n, legacy ? collective(l, n, 'reduce_scatter', x, attrs, undefined, undefined, n.args[3]) : collective(l, n, 'reduce_scatter', x, attrs, n.args[3], n.args[2], undefined));
    },
    [`${ns}.all_to_all_single`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      for (const k of [1, 2]) {
        const s = n.args[k];
        if (s !== undefined && s.kind !== 'none' && new Set(l.ints(s, 'split_sizes')).size > 1) l.fail(`${n.target}: uneven split sizes are not supported`);
      }
      return l.bind(n, legacy ? collective(l, n, 'all_to_all', x, { split_dim: 0, concat_dim: 0 }, undefined, undefined, n.args[4]) : collective(l, n, 'all_to_all', x, { split_dim: 0, concat_dim: 0 }, n.args[3], undefined, undefined));
    },
    [`${ns}.broadcast`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, collective(l, n, 'broadcast', x, { src: l.int(n.args[1], 'src') }, n.args[2], undefined, legacy ? n.args[3] : undefined));
    },
    [`${ns}.wait_tensor`]: (l, n) => view(l, n, l.tensor(n.args[0], 'tensor')),
  };
}

/** A constant tensor: the scalar constant expanded (`ones_like`, `full`, `zeros`, ...). */
function filled(l: Lowerer, n: FxNode, value: number, shape: readonly number[]): Val {
  const c = l.constant(value);
  return l.bind(n, l.one('expand', [c], { shape: [...shape] }, l.out(n), n.type?.dtype ?? 'float32'));
}

const INTEGER = new Set(['int64', 'int32', 'int16', 'int8', 'uint8', 'bool']);

/** A float value stored in an integer (or bool) tensor is truncated: not an exact identity. */
function refuseTruncation(l: Lowerer, from: string, to: string): void {
  if (INTEGER.has(to) && !INTEGER.has(from)) l.fail(`a cast from ${from} to ${to} truncates; it is not supported`);
}

function uninitialized(l: Lowerer, n: FxNode, shape: readonly number[]): OpaqueVal {
  return { kind: 'opaque', what: 'uninitialized memory', data: { shape: JSON.stringify(shape), dtype: n.type?.dtype ?? 'float32' } };
}

function likeShape(l: Lowerer, n: FxNode): Shape {
  return l.tensor(n.args[0], 'self').shape;
}

function foreach(op: 'add' | 'sub' | 'mul' | 'div', inPlace: boolean): Rule {
  return (l, n) => {
    const a = n.args[0];
    const b = n.args[1];
    if (a?.kind !== 'list') return l.fail(`${n.target}: expected a list of tensors`);
    const alpha = n.kwargs['alpha'] ?? n.args[2];
    const outs: TensorVal[] = a.items.map((x, i) => {
      const t = l.tensor(x, `self[${i}]`);
      const other = b?.kind === 'list' ? b.items[i] : b;
      let r: TensorVal;
      if (other?.kind === 'num' && (op === 'mul' || op === 'div')) r = scaleBy(l, t, op, other.value, undefined);
      else {
        let o = l.operand(other, `other[${i}]`);
        if (alpha !== undefined && (op === 'add' || op === 'sub') && l.num(alpha, 'alpha') !== 1) o = l.one('scale', [o], { factor: l.num(alpha, 'alpha') });
        r = l.one(op, [t, o]);
      }
      if (inPlace) l.write(x, r);
      return r;
    });
    return l.bind(n, inPlace ? { kind: 'none' } : { kind: 'list', items: outs });
  };
}

const RULES: Record<string, Rule> = {
  // ---- no-ops: the same value (views share storage; copies in exact arithmetic are identities)
  'aten.alias': (l, n) => view(l, n, l.tensor(n.args[0], 'self')),
  // (Detaching uninitialized memory keeps it uninitialized: an autograd Function's forward
  // detaches the buffers it allocates for a list all_gather.)
  'aten.detach': (l, n) => {
    const v = l.val(n.args[0], 'self');
    return v.kind === 'opaque' && v.what === 'uninitialized memory' ? l.bind(n, v) : view(l, n, l.tensor(n.args[0], 'self'));
  },
  'aten.clone': (l, n) => l.bind(n, l.tensor(n.args[0], 'self')),
  'aten.lift_fresh_copy': (l, n) => l.bind(n, l.tensor(n.args[0], 'self')),
  'aten._to_copy': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const to = n.type?.dtype ?? x.dtype;
    // A cast between floating types, or from integers to floats, keeps the exact value
    // (docs/engine.md: values are exact reals whatever the dtype); one to an integer type
    // truncates, which no op here computes.
    refuseTruncation(l, x.dtype, to);
    return l.bind(n, x.dtype === to ? x : l.one('identity', [x], {}, l.out(n), to));
  },
  'aten.copy': (l, n) => {
    const dst = l.tensor(n.args[0], 'self');
    const src = l.tensor(n.args[1], 'src');
    refuseTruncation(l, src.dtype, dst.dtype);
    return l.bind(n, src.shape.length === dst.shape.length && src.shape.every((d, i) => d === dst.shape[i]) ? src : l.one('expand', [src], { shape: [...dst.shape] }, l.out(n)));
  },
  'aten.copy_': (l, n) => {
    const d = l.val(n.args[0], 'self');
    // Uninitialized memory (new_empty_strided, as autograd allocates .grad) written whole by copy_.
    const dst = d.kind === 'opaque' && d.what === 'uninitialized memory' ? { kind: 'tensor' as const, id: '', shape: JSON.parse(String(d.data['shape'])) as number[], dtype: String(d.data['dtype']) } : l.tensor(n.args[0], 'self');
    const src = l.tensor(n.args[1], 'src');
    refuseTruncation(l, src.dtype, dst.dtype);
    const v = src.shape.length === dst.shape.length && src.shape.every((d, i) => d === dst.shape[i]) ? src : l.one('expand', [src], { shape: [...dst.shape] });
    l.write(n.args[0], v);
    return l.bind(n, v);
  },
  getitem: (l, n) => {
    const v = l.val(n.args[0], 'tuple');
    const i = l.int(n.args[1], 'index');
    if (v.kind !== 'list') return l.fail('indexing a value that is not a tuple');
    const item = v.items[i] ?? l.fail(`index ${i} out of range`);
    // Items share the tuple's storage root: split pieces are views of the split input (and an
    // in-place write through one item conservatively makes the others unreadable).
    return l.bind(n, item, (n.args[0] as { name?: string }).name);
  },
  getattr: (l, n) => l.fail(`module attribute 'self.${(n.args[0] as { value?: string }).value ?? '?'}' (a constant tensor) is not supported: pass it as a graph input`),

  // ---- layout
  'aten.view': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  'aten._unsafe_view': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  'aten.reshape': (l, n) => reshape(l, n, l.ints(n.args[1], 'shape')),
  'aten.view_copy': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  // torch 1.13's reshape of a contiguous tensor: a view with explicit (contiguous) strides.
  'aten._reshape_alias': (l, n) => {
    const size = l.ints(n.args[1], 'size');
    const stride = l.ints(n.args[2], 'stride');
    // The strides torch computes to view the input as `size` (autograd's reshape of a
    // transposed tensor): then it is that view, whose values are the row-major reshape.
    const x = l.tensor(n.args[0], 'self');
    const st = l.stridesAt(n.args[0]);
    if (st !== undefined) {
      const viewed = viewStrides(x.shape, st, size);
      if (viewed !== undefined && sameStrides(size, stride, viewed)) return reshape(l, n, size);
      l.fail(`_reshape_alias with strides [${stride.join(', ')}] for size [${size.join(', ')}] is not a view of its input (shape [${x.shape.join(', ')}], strides [${st.join(', ')}]): a strided view this mapping does not model`);
    }
    // Input strides unknown (a slice, a split piece): a reshape only with row-major strides.
    // Only row-major strides are a reshape; any other is a strided view this mapping does not model.
    let acc = 1;
    for (let i = size.length - 1; i >= 0; i--) {
      if ((size[i] as number) !== 1 && stride[i] !== acc) l.fail(`_reshape_alias with strides [${stride.join(', ')}] for size [${size.join(', ')}] is not a row-major reshape`);
      acc *= size[i] as number;
    }
    return reshape(l, n, size);
  },
  'aten.unsqueeze': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r = x.shape.length + 1;
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += r;
    if (d < 0 || d >= r) l.fail(`dim ${d} out of range`);
    return reshape(l, n, [...x.shape.slice(0, d), 1, ...x.shape.slice(d)]);
  },
  'aten.squeeze': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const dims = n.args[1] === undefined ? x.shape.map((_, i) => i) : l.ints(n.args[1], 'dim').map((d) => (d < 0 ? d + x.shape.length : d));
    return reshape(l, n, x.shape.filter((s, i) => !(s === 1 && dims.includes(i))));
  },
  'aten.t': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (x.shape.length < 2) return view(l, n, x);
    return l.bind(n, l.one('transpose', [x], { dim0: 0, dim1: 1 }, l.out(n)), (n.args[0] as { name?: string }).name);
  },
  'aten.transpose': (l, n) => l.bind(n, l.one('transpose', [l.tensor(n.args[0], 'self')], { dim0: l.int(n.args[1], 'dim0'), dim1: l.int(n.args[2], 'dim1') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.permute': (l, n) => l.bind(n, l.one('permute', [l.tensor(n.args[0], 'self')], { dims: l.ints(n.args[1], 'dims') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.expand': (l, n) => l.bind(n, l.one('expand', [l.tensor(n.args[0], 'self')], { shape: l.ints(n.args[1], 'size') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.slice': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim', 0);
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    const clamp = (v: number): number => Math.max(0, Math.min(size, v < 0 ? v + size : v));
    const startArg = n.args[2];
    const endArg = n.args[3];
    const start = clamp(startArg === undefined || startArg.kind === 'none' ? 0 : l.num(startArg, 'start'));
    const end = clamp(endArg === undefined || endArg.kind === 'none' ? size : l.num(endArg, 'end'));
    if (l.int(n.args[4], 'step', 1) !== 1) l.fail('slice with a step other than 1 is not supported');
    if (start === 0 && end === size) return view(l, n, x);
    return l.bind(n, l.one('slice', [x], { dim: d, start, end: Math.max(start, end) }, l.out(n)), (n.args[0] as { name?: string }).name);
  },
  'aten.cat': (l, n) => {
    const xs = n.args[0];
    if (xs?.kind !== 'list') return l.fail('expected a list of tensors');
    return l.bind(n, l.one('concat', xs.items.map((x, i) => l.tensor(x, `tensors[${i}]`)), { dim: l.int(n.args[1], 'dim', 0) }, l.out(n)));
  },
  'aten.split': (l, n) => {
    // split.Tensor(self, split_size, dim): pieces of split_size, the last one smaller (torch.chunk's decomposition).
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(l.arg(n, 2, 'dim'), 'dim', 0);
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    if (n.args[1]?.kind === 'list') l.fail('split with a list of sizes: expected split_with_sizes');
    const k = l.int(n.args[1], 'split_size');
    if (k <= 0) l.fail('split_size must be positive');
    const sizes: number[] = [];
    for (let at = 0; at < size; at += k) sizes.push(Math.min(k, size - at));
    if (sizes.length <= 1) return l.bind(n, { kind: 'list', items: [x] }, (n.args[0] as { name?: string }).name);
    const outs = l.emit('split', [x], { dim: d, sizes }, sizes.map((_, i) => `${l.out(n)}.${i}`), x.dtype);
    return l.bind(n, { kind: 'list', items: outs }, (n.args[0] as { name?: string }).name);
  },
  'aten.split_with_sizes': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const sizes = l.ints(n.args[1], 'split_sizes');
    const outs = l.emit('split', [x], { dim: l.int(n.args[2], 'dim', 0), sizes }, sizes.map((_, i) => `${l.out(n)}.${i}`), x.dtype);
    return l.bind(n, { kind: 'list', items: outs }, (n.args[0] as { name?: string }).name);
  },

  // ---- arithmetic
  'aten.add': binary('add', false),
  'aten.sub': binary('sub', false),
  'aten.mul': binary('mul', false),
  'aten.div': binary('div', false),
  'aten.add_': binary('add', true),
  'aten.sub_': binary('sub', true),
  'aten.mul_': binary('mul', true),
  'aten.div_': binary('div', true),
  'aten.neg': unary('neg'),
  'aten.exp': unary('exp'),
  'aten.sqrt': unary('sqrt'),
  'aten.addcmul': addc('mul', false),
  'aten.addcmul_': addc('mul', true),
  'aten.addcdiv': addc('div', false),
  'aten.addcdiv_': addc('div', true),
  'aten.log': unary('log'),
  'aten.tanh': unary('tanh'),
  'aten.sigmoid': unary('sigmoid'),
  'aten.silu': unary('silu'),
  'aten.mm': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'mat2')], {}, l.out(n))),
  'aten.bmm': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'mat2')], {}, l.out(n))),
  'aten.matmul': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'other')], {}, l.out(n))),
  'aten.addmm': addmm,
  // torch.export's ATen dialect keeps these composite ops; each has a registry op of the same meaning.
  'aten.linear': (l, n) => {
    const b = l.optTensor(l.arg(n, 2, 'bias'), 'bias');
    return l.bind(n, l.one('linear', [l.tensor(n.args[0], 'input'), l.tensor(n.args[1], 'weight'), ...(b === undefined ? [] : [b])], {}, l.out(n)));
  },
  'aten.layer_norm': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const w = l.optTensor(l.arg(n, 2, 'weight'), 'weight');
    const b = l.optTensor(l.arg(n, 3, 'bias'), 'bias');
    if (b !== undefined && w === undefined) l.fail('a bias without a weight is not supported');
    return l.bind(n, l.one('layer_norm', [x, ...(w === undefined ? [] : [w]), ...(b === undefined ? [] : [b])], { eps: l.num(l.arg(n, 4, 'eps'), 'eps', 1e-5), normalized_dims: l.ints(n.args[1], 'normalized_shape').length }, l.out(n)));
  },
  'aten.softmax': (l, n) => l.bind(n, l.one('softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n))),
  'aten.log_softmax': (l, n) => l.bind(n, l.one('log_softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n))),
  'aten.cross_entropy_loss': (l, n) => {
    if (l.optTensor(l.arg(n, 2, 'weight'), 'weight') !== undefined) l.fail('cross_entropy with class weights is not supported');
    if (l.num(l.arg(n, 5, 'label_smoothing'), 'label_smoothing', 0) !== 0) l.fail('cross_entropy with label smoothing is not supported');
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 3, 'reduction'), 'reduction', 1)] ?? l.fail('bad reduction');
    return l.bind(n, l.one('cross_entropy', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'target')], { reduction, ignore_index: l.int(l.arg(n, 4, 'ignore_index'), 'ignore_index', -100) }, l.out(n)));
  },
  'aten.baddbmm': addmm,
  'aten.sum': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (n.target.endsWith('.default') || n.args[1] === undefined || n.args[1].kind === 'none') return l.bind(n, l.one('sum', [x], {}, l.out(n)));
    return l.bind(n, l.one('sum', [x], { dims: l.ints(n.args[1], 'dim'), keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) }, l.out(n)));
  },
  'aten.mean': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (n.target.endsWith('.default') || n.args[1] === undefined || n.args[1].kind === 'none') return l.bind(n, l.one('mean', [x], {}, l.out(n)));
    return l.bind(n, l.one('mean', [x], { dims: l.ints(n.args[1], 'dim'), keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) }, l.out(n)));
  },

  // ---- activations, softmax, losses
  'aten.gelu': (l, n) => l.bind(n, l.one('gelu', [l.tensor(n.args[0], 'self')], { approximate: l.str(l.arg(n, 1, 'approximate'), 'approximate', 'none') }, l.out(n))),
  'aten.gelu_backward': (l, n) => l.bind(n, l.one('gelu_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'self')], { approximate: l.str(l.arg(n, 2, 'approximate'), 'approximate', 'none') }, l.out(n))),
  'aten.silu_backward': (l, n) => l.bind(n, l.one('silu_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'self')], {}, l.out(n))),
  'aten.tanh_backward': (l, n) => l.bind(n, l.one('tanh_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], {}, l.out(n))),
  'aten.sigmoid_backward': (l, n) => l.bind(n, l.one('sigmoid_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], {}, l.out(n))),
  'aten._softmax': (l, n) => l.bind(n, l.one('softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n))),
  'aten._softmax_backward_data': (l, n) => l.bind(n, l.one('softmax_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], { dim: l.int(n.args[2], 'dim') }, l.out(n))),
  'aten._log_softmax': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r = l.bind(n, l.one('log_softmax', [x], { dim: l.int(n.args[1], 'dim') }, l.out(n)));
    logSoftmaxOf.set(r as TensorVal, { logits: x, dim: l.int(n.args[1], 'dim') });
    return r;
  },
  'aten._log_softmax_backward_data': (l, n) => {
    const g = l.val(n.args[0], 'grad_output');
    const out = l.tensor(n.args[1], 'output');
    const dim = l.int(n.args[2], 'dim');
    if (g.kind === 'opaque' && g.what === 'the NLL loss gradient') {
      // log_softmax backward of nll_loss backward is the cross-entropy gradient of the logits.
      if (g.data['logsm'] !== out.id) l.fail('the NLL gradient is not of this log-softmax output');
      const { logits: src, grad: gl, target: tgt } = g.tensors as Record<'logits' | 'grad' | 'target', TensorVal>;
      return l.bind(n, l.one('cross_entropy_backward', [gl, src, tgt], { reduction: String(g.data['reduction']), ignore_index: Number(g.data['ignore_index']) }, l.out(n), src.dtype));
    }
    if (g.kind !== 'tensor') return l.fail('argument grad_output: expected a tensor');
    // grad - exp(out) * sum(grad, dim, keepdim): the adjoint of log_softmax.
    const s = l.one('sum', [g], { dims: [dim], keepdim: true });
    const p = l.one('exp', [out]);
    return l.bind(n, l.one('sub', [g, l.one('mul', [p, s])], {}, l.out(n)));
  },
  'aten.nll_loss_forward': (l, n) => {
    const lp = l.tensor(n.args[0], 'self');
    const tgt = l.tensor(n.args[1], 'target');
    if (l.optTensor(n.args[2], 'weight') !== undefined) l.fail('nll_loss with class weights is not supported');
    const src = logSoftmaxOf.get(lp);
    if (src === undefined || lp.shape.length !== 2 || (src.dim !== 1 && src.dim !== -1)) return l.fail('nll_loss_forward is supported on the log_softmax over the classes of [N, C] logits (cross-entropy)');
    const reduction = ['none', 'mean', 'sum'][l.int(n.args[3], 'reduction')] ?? l.fail('bad reduction');
    const ii = l.int(n.args[4], 'ignore_index', -100);
    const loss = l.one('cross_entropy', [src.logits, tgt], { reduction, ignore_index: ii }, `${l.out(n)}.0`, src.logits.dtype);
    return l.bind(n, { kind: 'list', items: [loss, { kind: 'opaque', what: 'the NLL total weight', data: {} }] });
  },
  'aten.nll_loss_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const lp = l.tensor(n.args[1], 'self');
    const tgt = l.tensor(n.args[2], 'target');
    if (l.optTensor(n.args[3], 'weight') !== undefined) l.fail('nll_loss with class weights is not supported');
    const src = logSoftmaxOf.get(lp);
    if (src === undefined) return l.fail('nll_loss_backward is supported only on a log_softmax output (cross-entropy)');
    const reduction = ['none', 'mean', 'sum'][l.int(n.args[4], 'reduction')] ?? l.fail('bad reduction');
    const tw = l.val(n.args[6], 'total_weight');
    if (tw.kind !== 'opaque' || tw.what !== 'the NLL total weight') l.fail('total_weight must come from nll_loss_forward');
    return l.bind(n, { kind: 'opaque', what: 'the NLL loss gradient', data: { logsm: lp.id, reduction, ignore_index: l.int(n.args[5], 'ignore_index', -100) }, tensors: { grad: g, logits: src.logits, target: tgt } });
  },
  'aten.mse_loss': (l, n) => {
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 2, 'reduction'), 'reduction', 1)] ?? l.fail('bad reduction');
    if (reduction === 'none') l.fail("mse_loss with reduction='none' is not supported");
    return l.bind(n, l.one('mse_loss', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'target')], { reduction }, l.out(n)));
  },
  'aten.mse_loss_backward': (l, n) => {
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 3, 'reduction'), 'reduction')] ?? l.fail('bad reduction');
    if (reduction === 'none') l.fail("mse_loss with reduction='none' is not supported");
    const g = l.tensor(n.args[0], 'grad_output');
    if (g.shape.length !== 0) l.fail('mse_loss_backward: expected a scalar grad_output');
    return l.bind(n, l.one('mse_loss_backward', [l.tensor(n.args[1], 'self'), l.tensor(n.args[2], 'target'), g], { reduction }, l.out(n)));
  },
  'aten.native_layer_norm': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const ns = l.ints(n.args[1], 'normalized_shape');
    const w = l.optTensor(n.args[2], 'weight');
    const b = l.optTensor(n.args[3], 'bias');
    const eps = l.num(n.args[4], 'eps');
    const ins = [x, ...(w === undefined ? (b === undefined ? [] : l.fail('a bias without a weight is not supported')) : [w]), ...(b === undefined ? [] : [b])];
    const y = l.one('layer_norm', ins, { eps, normalized_dims: ns.length }, `${l.out(n)}.0`);
    const stat = (what: string): OpaqueVal => ({ kind: 'opaque', what, data: { x: x.id, eps, k: ns.length } });
    return l.bind(n, { kind: 'list', items: [y, stat('the LayerNorm mean'), stat('the LayerNorm rstd')] });
  },
  'aten.native_layer_norm_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_out');
    const x = l.tensor(n.args[1], 'input');
    const ns = l.ints(n.args[2], 'normalized_shape');
    for (const [k, what] of [[3, 'the LayerNorm mean'], [4, 'the LayerNorm rstd']] as const) {
      const s = l.val(n.args[k], k === 3 ? 'mean' : 'rstd');
      if (s.kind !== 'opaque' || s.what !== what || s.data['x'] !== x.id) l.fail(`argument ${k === 3 ? 'mean' : 'rstd'}: expected ${what} of the same input from native_layer_norm`);
    }
    const mean = l.val(n.args[3], 'mean') as OpaqueVal;
    const w = l.optTensor(n.args[5], 'weight');
    const b = l.optTensor(n.args[6], 'bias');
    const mask = n.args[7]?.kind === 'list' ? n.args[7].items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
    const nOut = w === undefined ? 1 : 3;
    const outs = l.emit('layer_norm_backward', [g, x, ...(w === undefined ? [] : [w])], { eps: Number(mean.data['eps']), normalized_dims: ns.length }, Array.from({ length: nOut }, (_, i) => `${l.out(n)}.${i}`), g.dtype);
    const items: Val[] = [0, 1, 2].map((i) => (mask[i] === false || (i === 2 && b === undefined) ? { kind: 'none' } : (outs[i] ?? { kind: 'none' })));
    return l.bind(n, { kind: 'list', items });
  },
  'aten.embedding': (l, n) => {
    const w = l.tensor(n.args[0], 'weight');
    const ids = l.tensor(n.args[1], 'indices');
    return l.bind(n, l.one('embedding', [ids, w], {}, l.out(n), w.dtype));
  },
  'aten.embedding_dense_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const ids = l.tensor(n.args[1], 'indices');
    if (l.int(n.args[3], 'padding_idx', -1) !== -1) l.fail('embedding with padding_idx is not supported');
    if (l.bool(n.args[4], 'scale_grad_by_freq', false)) l.fail('embedding with scale_grad_by_freq is not supported');
    return l.bind(n, l.one('embedding_backward', [g, ids], { num_embeddings: l.int(n.args[2], 'num_weights') }, l.out(n)));
  },
  'aten.native_dropout': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const p = l.num(n.args[1], 'p');
    const train = n.args[2] === undefined || n.args[2].kind === 'none' ? true : l.bool(n.args[2], 'train', true);
    if (!train || p === 0) return l.bind(n, { kind: 'list', items: [x, l.constantLike(x, 1)] });
    // The sampled mask is an input of the plan (its relation is stated like any other input's).
    const maskId = `${l.out(n)}.mask`;
    const mask = l.addTensor(maskId, x.shape, 'bool');
    l.extra.push({ id: maskId, shape: x.shape, dtype: 'bool', line: n.line });
    const y = l.one('dropout', [x, mask], { p }, `${l.out(n)}.0`);
    return l.bind(n, { kind: 'list', items: [y, mask] });
  },
  // torch 1.13's CPU dropout: a buffer filled in place with Bernoulli samples, then scaled and
  // multiplied in. The samples are a plan input (`<node>.mask`, values 0 and 1), as above.
  'aten.bernoulli_': (l, n) => {
    const d = l.val(n.args[0], 'self');
    const shape = d.kind === 'tensor' ? d.shape : d.kind === 'opaque' && d.what === 'uninitialized memory' ? (JSON.parse(String(d.data['shape'])) as number[]) : l.fail('bernoulli_ on something that is not a tensor');
    const maskId = `${l.out(n)}.mask`;
    const mask = l.addTensor(maskId, shape, 'bool');
    l.extra.push({ id: maskId, shape, dtype: 'bool', line: n.line });
    l.write(n.args[0], mask);
    return l.bind(n, mask);
  },
  'aten.native_dropout_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const mask = l.tensor(n.args[1], 'mask');
    const scale = l.num(n.args[2], 'scale');
    return l.bind(n, l.one('scale', [l.one('mul', [g, mask], {}, undefined, g.dtype)], { factor: scale }, l.out(n)));
  },

  // ---- uninitialized memory: only a whole-tensor copy_ may write it, nothing may read it
  'aten.new_empty_strided': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[1], 'size'))),
  'aten.new_empty': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[1], 'size'))),
  'aten.empty_like': (l, n) => l.bind(n, uninitialized(l, n, likeShape(l, n))),
  'aten.empty': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[0], 'size'))),

  // ---- constants
  'aten.ones_like': (l, n) => filled(l, n, 1, likeShape(l, n)),
  'aten.zeros_like': (l, n) => filled(l, n, 0, likeShape(l, n)),
  'aten.full_like': (l, n) => filled(l, n, l.num(n.args[1], 'fill_value'), likeShape(l, n)),
  'aten.ones': (l, n) => filled(l, n, 1, l.ints(n.args[0], 'size')),
  'aten.zeros': (l, n) => filled(l, n, 0, l.ints(n.args[0], 'size')),
  'aten.full': (l, n) => filled(l, n, l.num(n.args[1], 'fill_value'), l.ints(n.args[0], 'size')),
  'aten.scalar_tensor': (l, n) => filled(l, n, l.num(n.args[0], 's'), []),

  // ---- optimizer (torch.optim's foreach implementation)
  'aten._foreach_add': foreach('add', false),
  'aten._foreach_sub': foreach('sub', false),
  'aten._foreach_mul': foreach('mul', false),
  'aten._foreach_div': foreach('div', false),
  'aten._foreach_add_': foreach('add', true),
  'aten._foreach_sub_': foreach('sub', true),
  'aten._foreach_mul_': foreach('mul', true),
  'aten._foreach_div_': foreach('div', true),

  ...collectiveRules('_c10d_functional'),
  ...collectiveRules('c10d_functional'),
};

/** The logits and dim of each log_softmax output (for the cross-entropy pattern). */
const logSoftmaxOf = new WeakMap<TensorVal, { logits: TensorVal; dim: number }>();

/** Lowers the parsed graphs of one program (one graph, or a forward and a backward); ImportError on anything unsupported. */
export function lowerGraph(g: FxGraph | readonly FxGraph[]): Lowered {
  return new Lowerer(Array.isArray(g) ? (g as readonly FxGraph[]) : [g as FxGraph]).run();
}
