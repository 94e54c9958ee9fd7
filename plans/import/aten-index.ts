/**
 * ATen rules for indexing and selection as Megatron-style graphs print them (docs/import.md):
 * advanced indexing `index.Tensor` (the vocab-parallel embedding `weight[ids]`, the
 * cross-entropy's `logits[arange(n), target]`), `slice_scatter`, `max.dim` / `argmax`
 * (the cross-entropy's row max, top-1 routing) and `chunk`. Each lowers to planproof ops whose
 * real-number semantics is the ATen op's: ids stay exact integers, a choice is the registry's
 * `topk` (uninterpreted but the same on both sides for the same scores).
 */
import type { AttrValue } from '../../ops/types.js';
import type { FxNode } from './fxtext.js';
import { maskIndices, putDistinct } from './aten-mask.js';
import { splitPieces, type Lowerer, type OpaqueVal, type Rule, type TensorVal, type Val } from './lower.js';

const prod = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
const same = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((d, i) => d === b[i]);

/** Is t the positions 0, 1, ..., len-1 (an `arange(len)` the lowering emitted as iota from the constant 0)? */
export function isPositions(l: Lowerer, t: TensorVal, len: number): boolean {
  if (!same(t.shape, [len])) return false;
  for (let i = l.ops.length - 1; i >= 0; i--) {
    const op = l.ops[i];
    if (op?.outputs[0] !== t.id) continue;
    const a = (op.attrs ?? {}) as Record<string, AttrValue>;
    return op.op === 'iota' && a['step'] === 1 && a['dim'] === 0 && op.inputs[0] === 'const.0';
  }
  return false;
}

/**
 * x[i0, ..., ik-1] (advanced indexing): k integer index tensors on consecutive dims after
 * leading Nones (`x[None, ids]`, `x[:, ids]`); a boolean mask stands for its positions'
 * integer indices, one per mask dim (aten-mask.ts: recorded by the capture, used only where
 * the mask is a function of routing choices and constants).
 */
function indexTensor(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const list = n.args[1];
  if (list?.kind !== 'list' || list.items.length === 0) return l.fail(`${n.target}: expected a list of index tensors`);
  let lead = 0;
  while (list.items[lead]?.kind === 'none') lead++;
  const idx: TensorVal[] = [];
  for (const [i, a] of list.items.entries()) {
    if (i < lead) continue;
    if (a.kind === 'none') l.fail(`${n.target}: an index list with None between or after index tensors is not supported; only leading ones (x[:, ids])`);
    const t = l.tensor(a, `indices[${i}]`);
    if (t.dtype === 'bool' || t.dtype === 'uint8') idx.push(...maskIndices(l, n, t, `indices[${i}]`));
    else idx.push(t);
  }
  if (idx.length === 0) l.fail(`${n.target}: no index tensor`);
  if (lead + idx.length > x.shape.length) l.fail(`${n.target}: ${lead + idx.length} indices for a ${x.shape.length}-dim tensor`);
  const out = l.out(n);
  if (lead === 0) return l.bind(n, indexLeading(l, x, idx, out));
  // x[:, ids]: the indexed dims moved to the front, indexed, and the result's index dims put back after the leading ones.
  const k = idx.length;
  const dims = x.shape.map((_, i) => i);
  const front = [...dims.slice(lead, lead + k), ...dims.slice(0, lead), ...dims.slice(lead + k)];
  const r = indexLeading(l, l.one('permute', [x], { dims: front }), idx, l.tmp());
  const b = r.shape.length - (x.shape.length - k);
  const rd = r.shape.map((_, i) => i);
  return l.bind(n, l.one('permute', [r], { dims: [...rd.slice(b, b + lead), ...rd.slice(0, b), ...rd.slice(b + lead)] }, out));
}

/** x[i0, ..., ik-1] with k integer index tensors on the leading dims. */
function indexLeading(l: Lowerer, x: TensorVal, idx: readonly TensorVal[], out: string): TensorVal {
  const k = idx.length;
  const rest = x.shape.slice(k);
  if (k === 1) {
    // weight[ids]: an embedding lookup of the rows (the trailing dims flattened into one).
    const ids = idx[0] as TensorVal;
    const w = rest.length === 1 ? x : l.one('reshape', [x], { shape: [x.shape[0] as number, prod(rest)] });
    const e = l.one('embedding', [ids, w], {}, rest.length === 1 ? out : undefined, x.dtype);
    return rest.length === 1 ? e : l.one('reshape', [e], { shape: [...ids.shape, ...rest] }, out);
  }
  const [i0, i1] = idx as [TensorVal, TensorVal];
  if (k === 2 && rest.length === 0 && i1.shape.length === 1 && isPositions(l, i0, x.shape[0] as number) && i1.shape[0] === x.shape[0]) {
    // logits[arange(n), target]: one element per row, a gather along the last dim.
    const g = l.one('gather', [x, l.one('reshape', [i1], { shape: [i1.shape[0] as number, 1] }, undefined, i1.dtype)]);
    return l.one('reshape', [g], { shape: [i1.shape[0] as number] }, out);
  }
  // In general: one flat index over the indexed dims, i0 * (s1 * ... ) + i1 * (...) + ...,
  // exact integer arithmetic, then an embedding lookup of the flattened rows.
  let flat: TensorVal | undefined;
  let stride = 1;
  for (let j = k - 1; j >= 0; j--) {
    const t = idx[j] as TensorVal;
    const term = stride === 1 ? t : l.one('scale', [t], { factor: stride }, undefined, t.dtype);
    flat = flat === undefined ? term : l.one('add', [term, flat], {}, undefined, t.dtype);
    stride *= x.shape[j] as number;
  }
  const f = flat as TensorVal;
  const w = l.one('reshape', [x], { shape: [stride, Math.max(1, prod(rest))] });
  const e = l.one('embedding', [f, w], {}, undefined, x.dtype);
  return l.one('reshape', [e], { shape: [...f.shape, ...rest] }, out);
}

/** slice_scatter(self, src, dim, start, end, step 1): self with src written over the slice. */
function sliceScatter(l: Lowerer, n: FxNode): Val {
  const x = l.tensor(n.args[0], 'self');
  const src = l.tensor(n.args[1], 'src');
  let d = l.int(l.arg(n, 2, 'dim'), 'dim', 0);
  if (d < 0) d += x.shape.length;
  const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
  const clamp = (v: number): number => Math.max(0, Math.min(size, v < 0 ? v + size : v));
  const s = l.arg(n, 3, 'start');
  const e = l.arg(n, 4, 'end');
  const start = clamp(s === undefined || s.kind === 'none' ? 0 : l.num(s, 'start'));
  const end = clamp(e === undefined || e.kind === 'none' ? size : l.num(e, 'end'));
  if (l.int(l.arg(n, 5, 'step'), 'step', 1) !== 1) l.fail(`${n.target}: only step 1 is supported`);
  if (src.shape[d] !== end - start) l.fail(`${n.target}: src has ${src.shape[d]} along dim ${d}, the slice ${end - start}`);
  // The whole dim: the result is src (Megatron's `output_parallel[input_mask, :] = 0.0`).
  if (start === 0 && end === size) return l.bind(n, same(src.shape, x.shape) ? src : l.fail(`${n.target}: src [${src.shape.join(', ')}] is not the tensor's shape [${x.shape.join(', ')}]`));
  const parts: TensorVal[] = [];
  if (start > 0) parts.push(l.one('slice', [x], { dim: d, start: 0, end: start }));
  parts.push(src);
  if (end < size) parts.push(l.one('slice', [x], { dim: d, start: end, end: size }));
  return l.bind(n, l.one('concat', parts, { dim: d }, l.out(n)));
}

/** The index of the row maximum along the last dim: topk(x, 1)'s choice (lowered on first use). */
function argmaxLast(l: Lowerer, n: FxNode, x: TensorVal, keepdim: boolean, dim: number): OpaqueVal {
  return {
    kind: 'opaque',
    what: 'the index of the maximum',
    data: { x: x.id },
    materialize: () => {
      if (dim !== x.shape.length - 1) l.fail(`${n.target}: the index of the maximum along dim ${dim} is supported only along the last dim`);
      const [, ix] = l.emit('topk', [x], { k: 1 }, [l.tmp(), `${l.out(n)}.indices`], 'int64') as [TensorVal, TensorVal];
      return keepdim ? ix : l.one('reshape', [ix], { shape: x.shape.slice(0, -1) }, undefined, 'int64');
    },
  };
}

/**
 * x[i0, ...] = v (or += v with accumulate) with integer indices: `index_put` as autograd and
 * Megatron's cross-entropy backward write it. Two forms are exact here:
 * - one index on dim 0 with accumulate (index.Tensor's backward): x + embedding_backward(v, ids);
 * - x[arange(n), ids] on a 2-D x (one element per row): where(col == ids, v, x), or x + that
 *   update with accumulate.
 */
export function indexPutInt(l: Lowerer, n: FxNode, x: TensorVal, idx: readonly TensorVal[], v: TensorVal, accumulate: boolean, out: string | undefined): TensorVal {
  if (idx.length === 1 && accumulate) {
    const ids = idx[0] as TensorVal;
    const rest = x.shape.slice(1);
    const rows = prod(rest);
    const g = l.one('reshape', [v.shape.length === ids.shape.length + rest.length ? v : l.one('expand', [v], { shape: [...ids.shape, ...rest] })], { shape: [...ids.shape, rows] });
    const scattered = l.one('embedding_backward', [g, ids], { num_embeddings: x.shape[0] as number });
    return l.one('add', [x, rest.length === 1 ? scattered : l.one('reshape', [scattered], { shape: [...x.shape] })], {}, out, x.dtype);
  }
  const [i0, i1] = idx as [TensorVal, TensorVal];
  if (idx.length === 2 && x.shape.length === 2 && i1.shape.length === 1 && i1.shape[0] === x.shape[0] && isPositions(l, i0, x.shape[0] as number)) {
    const [rows, cols] = x.shape as [number, number];
    const col = l.one('iota', [l.constant(0)], { shape: [rows, cols], dim: 1, step: 1 }, undefined, 'int64');
    const hit = l.one('compare', [col, l.one('reshape', [i1], { shape: [rows, 1] }, undefined, i1.dtype)], { rel: 'eq' }, undefined, 'bool');
    const val = l.one('expand', [v.shape.length === 0 ? v : l.one('reshape', [v], { shape: [rows, 1] })], { shape: [rows, cols] });
    if (!accumulate) return l.one('where', [hit, val, x], {}, out, x.dtype);
    return l.one('add', [x, l.one('where', [hit, val, l.constantLike(x, 0)])], {}, out, x.dtype);
  }
  const distinct = idx.length === 1 && !accumulate ? putDistinct(l, n, x, idx[0] as TensorVal, v, out) : undefined;
  if (distinct !== undefined) return distinct;
  if (accumulate && idx.length <= x.shape.length && idx.every((t) => same(t.shape, (idx[0] as TensorVal).shape))) {
    // x[i0, ..., ik-1] += v (the backward of x[i0, i1] on leading dims): the flat index of each
    // element, i0 * (s1 * ...) + i1 * (...) + ..., exact integers; repeated ones add.
    const k = idx.length;
    let flat: TensorVal | undefined;
    let stride = 1;
    for (let j = k - 1; j >= 0; j--) {
      const t = idx[j] as TensorVal;
      const term = stride === 1 ? t : l.one('scale', [t], { factor: stride }, undefined, t.dtype);
      flat = flat === undefined ? term : l.one('add', [term, flat], {}, undefined, t.dtype);
      stride *= x.shape[j] as number;
    }
    const f = l.one('reshape', [flat as TensorVal], { shape: [prod((idx[0] as TensorVal).shape)] }, undefined, 'int64');
    const rest = x.shape.slice(k);
    const width = Math.max(1, prod(rest));
    const full = [...(idx[0] as TensorVal).shape, ...rest];
    const g = l.one('reshape', [same(v.shape, full) ? v : l.one('expand', [v], { shape: full })], { shape: [f.shape[0] as number, width] });
    const added = l.one('embedding_backward', [g, f], { num_embeddings: stride });
    return l.one('add', [x, l.one('reshape', [added], { shape: [...x.shape] })], {}, out, x.dtype);
  }
  return l.fail(`${n.target}: integer indices other than x[ids] += v, x[i0, i1, ...] += v and x[arange(n), ids] (= or +=) on a 2-D x are not supported`);
}

/**
 * scatter(self, dim, index, src | value) along the last dim: out[..., index[..., j]] = src[..., j]
 * (autograd's backward of max.dim / topk writes the gradient at the chosen positions). Each
 * of the k positions is one where over a column comparison, exact for integer indices; with
 * repeated indices the last write wins, as ATen's CPU kernel does it.
 */
function scatter(l: Lowerer, n: FxNode): Val {
  return scatterLast(l, n, false);
}

/** scatter_add along the last dim: every position adds (gather's backward). */
function scatterAdd(l: Lowerer, n: FxNode): Val {
  return scatterLast(l, n, true);
}

/** In place (F.one_hot's `zeros().scatter_(-1, ids, 1)`): the written tensor's name holds the result. */
function scatterInPlace(accumulate: boolean): Rule {
  return (l, n) => {
    const r = scatterLast(l, n, accumulate);
    l.write(n.args[0], l.tensor({ kind: 'name', name: n.name }, 'result'));
    return r;
  };
}

function scatterLast(l: Lowerer, n: FxNode, accumulate: boolean): Val {
  const x = l.tensor(n.args[0], 'self');
  let d = l.int(n.args[1], 'dim');
  if (d < 0) d += x.shape.length;
  if (d !== x.shape.length - 1) l.fail(`${n.target}: only a scatter along the last dim is supported`);
  const index = l.tensor(n.args[2], 'index');
  if (n.kwargs['reduce'] !== undefined && n.kwargs['reduce'].kind !== 'none') l.fail(`${n.target}: a scatter with reduce is not supported`);
  const lead = x.shape.slice(0, -1);
  if (index.shape.length !== x.shape.length || !same(index.shape.slice(0, -1), lead)) l.fail(`${n.target}: index [${index.shape.join(', ')}] must match self [${x.shape.join(', ')}] but in the last dim`);
  const k = index.shape[index.shape.length - 1] as number;
  const cols = x.shape[x.shape.length - 1] as number;
  const srcArg = n.args[3];
  const src = srcArg?.kind === 'num' ? undefined : l.tensor(srcArg, 'src');
  const col = l.one('iota', [l.constant(0)], { shape: [...x.shape], dim: x.shape.length - 1, step: 1 }, undefined, 'int64');
  let out = x;
  for (let j = 0; j < k; j++) {
    const ij = k === 1 ? index : l.one('slice', [index], { dim: index.shape.length - 1, start: j, end: j + 1 }, undefined, index.dtype);
    const hit = l.one('compare', [col, ij], { rel: 'eq' }, undefined, 'bool');
    const v = src === undefined ? l.constantLike(x, l.num(srcArg, 'value')) : l.one('expand', [k === 1 && src.shape[src.shape.length - 1] === 1 ? src : l.one('slice', [src], { dim: src.shape.length - 1, start: j, end: j + 1 })], { shape: [...lead, cols] });
    const name = j === k - 1 ? l.out(n) : undefined;
    out = accumulate ? l.one('add', [out, l.one('where', [hit, v, l.constantLike(x, 0)])], {}, name, x.dtype) : l.one('where', [hit, v, out], {}, name, x.dtype);
  }
  return l.bind(n, out);
}

export const INDEX_RULES: Record<string, Rule> = {
  'aten.scatter': scatter,
  'aten.scatter_add': scatterAdd,
  'aten.scatter_': scatterInPlace(false),
  'aten.scatter_add_': scatterInPlace(true),
  'aten.gather': (l, n) => {
    // torch.gather(x, dim, index) along the last dim with index's leading dims x's: the registry's gather.
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.shape.length;
    const index = l.tensor(n.args[2], 'index');
    if (d !== x.shape.length - 1 || index.shape.length !== x.shape.length || !same(index.shape.slice(0, -1), x.shape.slice(0, -1))) l.fail(`${n.target}: only a gather along the last dim with the index's other dims equal to the tensor's is supported`);
    return l.bind(n, l.one('gather', [x, index], {}, l.out(n), x.dtype));
  },
  'aten.topk': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const k = l.int(n.args[1], 'k');
    let d = l.int(l.arg(n, 2, 'dim'), 'dim', -1);
    if (d < 0) d += x.shape.length;
    if (d !== x.shape.length - 1) l.fail(`${n.target}: only topk along the last dim is supported`);
    if (!l.bool(l.arg(n, 3, 'largest'), 'largest', true)) l.fail(`${n.target}: topk with largest=False is not supported`);
    const outs = l.emit('topk', [x], { k }, [`${l.out(n)}.values`, `${l.out(n)}.indices`], x.dtype);
    return l.bind(n, { kind: 'list', items: outs });
  },
  'aten.index.Tensor': indexTensor,
  'aten.slice_scatter': sliceScatter,
  'aten.chunk': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const chunks = l.int(n.args[1], 'chunks');
    let d = l.int(l.arg(n, 2, 'dim'), 'dim', 0);
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    if (chunks <= 0) l.fail('chunks must be positive');
    return splitPieces(l, n, x, d, size, Math.ceil(size / chunks));
  },
  'aten.max.dim': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.shape.length;
    const keepdim = l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false);
    const values = l.one('amax', [x], { dims: [d], keepdim }, `${l.out(n)}.values`);
    return l.bind(n, { kind: 'list', items: [values, argmaxLast(l, n, x, keepdim, d)] });
  },
  'aten.max.default': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    return l.bind(n, l.one('amax', [x], { dims: x.shape.map((_, i) => i), keepdim: false }, l.out(n)));
  },
  'aten.amax': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const dims = (n.args[1] === undefined ? x.shape.map((_, i) => i) : l.ints(n.args[1], 'dim')).map((d) => (d < 0 ? d + x.shape.length : d));
    return l.bind(n, l.one('amax', [x], { dims: dims.length === 0 ? x.shape.map((_, i) => i) : dims, keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) }, l.out(n)));
  },
  // The minimum over dims as a chain of element-wise minimums of slices (min is a lattice
  // operation of the engine, as the MIN reduction of a collective is; an observer's minimum).
  'aten.amin': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const dims = (n.args[1] === undefined ? x.shape.map((_, i) => i) : l.ints(n.args[1], 'dim')).map((d) => (d < 0 ? d + x.shape.length : d));
    return l.bind(n, minOver(l, x, dims.length === 0 ? x.shape.map((_, i) => i) : dims, l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false), l.out(n)));
  },
  'aten.min.default': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    return l.bind(n, minOver(l, x, x.shape.map((_, i) => i), false, l.out(n)));
  },
  // The product over a dim as a chain of multiplications of its slices (exact; small dims).
  'aten.prod.dim_int': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.shape.length;
    return l.bind(n, prodAlong(l, x, d, l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false), l.out(n)));
  },
  'aten.prod.default': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const flat = l.one('reshape', [x], { shape: [x.shape.reduce((a, b) => a * b, 1)] });
    return l.bind(n, prodAlong(l, flat, 0, false, l.out(n)));
  },
  'aten.argmax': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const dArg = l.arg(n, 1, 'dim');
    if (dArg === undefined || dArg.kind === 'none') return l.fail(`${n.target}: argmax over the flattened tensor is not supported; give the dim`);
    let d = l.int(dArg, 'dim');
    if (d < 0) d += x.shape.length;
    const ix = argmaxLast(l, n, x, l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false), d);
    return l.bind(n, l.tensor({ kind: 'name', name: bindTemp(l, n, ix) }, 'argmax'));
  },
  // planproof capture writes it as planproof.positions (aten-mask.ts); another graph's is refused.
  'aten.nonzero': (l, n) => l.fail(`${n.target}: its size depends on the data (which elements are nonzero); data-dependent sizes are not supported (planproof capture records the positions of masks computed from routing choices)`),
  'aten.sym_size': (l, n) => l.fail(`${n.target}: a symbolic size (the graph was traced with dynamic shapes); export it with static shapes`),
};

/** The minimum of x over dims (keepdim or not): element-wise minimums of the slices, dim by dim. */
function minOver(l: Lowerer, x: TensorVal, dims: readonly number[], keepdim: boolean, out: string): TensorVal {
  let acc = x;
  for (const d of dims) {
    const size = acc.shape[d] ?? l.fail(`dim ${d} out of range`);
    if (size > 1024) l.fail(`min over a dim of ${size} elements: at most 1024 are supported`);
    let m: TensorVal | undefined;
    for (let i = 0; i < size; i++) {
      const s = l.one('slice', [acc], { dim: d, start: i, end: i + 1 });
      m = m === undefined ? s : l.one('minimum', [m, s]);
    }
    acc = m as TensorVal;
  }
  return l.one('reshape', [acc], { shape: keepdim ? [...acc.shape] : x.shape.filter((_, i) => !dims.includes(i)) }, out);
}

/** The product of x's slices along d (keepdim or not), each slice one multiplication. */
function prodAlong(l: Lowerer, x: TensorVal, d: number, keepdim: boolean, out: string): TensorVal {
  const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
  if (size > 1024) l.fail(`prod over a dim of ${size} elements: at most 1024 are supported (one multiplication each)`);
  const kept = x.shape.map((s, i) => (i === d ? 1 : s));
  let acc: TensorVal | undefined;
  for (let i = 0; i < size; i++) {
    const s = l.one('slice', [x], { dim: d, start: i, end: i + 1 });
    acc = acc === undefined ? s : l.one('mul', [acc, s]);
  }
  const r = acc ?? l.one('expand', [l.constant(1)], { shape: kept }, undefined, x.dtype);
  return l.one('reshape', [r], { shape: keepdim ? kept : x.shape.filter((_, i) => i !== d) }, out);
}

/** Binds an opaque value under a temporary name so l.tensor materializes it (argmax is used as a tensor at once). */
function bindTemp(l: Lowerer, n: FxNode, v: OpaqueVal): string {
  const name = `${n.name}__argmax`;
  l.bind({ ...n, name }, v);
  return name;
}

