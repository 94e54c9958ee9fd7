/**
 * Integer-indexed ops: embedding lookup, gather along the last dim, their backward scatters,
 * and the masks of Megatron's vocab-parallel embedding and cross-entropy.
 *
 * Ids stay symbolic: every lookup is written with `alg.test`, so symbolically a row is
 * sum_v [id = v] · W[v], exact for every possible id, and numerically it is a direct read.
 * An id outside the table is a PyTorch error: numerically the row is NaN, symbolically the op
 * requires the id to be in range (an obligation of the stage).
 */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { batchDim, contractedDim, dimLabels, fixedDim } from './dims.js';
import { type GradRef, NO_BACKWARD, one } from './grad.js';
import { type Attrs, type OpDef, attrNum, attrObject, fixed, noAttrs, numel, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

/** The row index of `id` in a table of n rows: one-hot weights, or the row itself when known. */
function lookup<S>(alg: Algebra<S>, id: S, n: number, what: string): { row: number } | { weights: S[] } | { nan: true } {
  const k = alg.known(id);
  if (k !== undefined) {
    if (Number.isInteger(k) && k >= 0 && k < n) return { row: k };
    alg.require(alg.zero, `${what}: index ${k} is not an integer in [0, ${n})`);
    return { nan: true };
  }
  alg.require(
    alg.test(id, (v) => Number.isInteger(v) && v >= 0 && v < n),
    `${what}: index within [0, ${n})`,
  );
  return { weights: Array.from({ length: n }, (_, v) => alg.test(id, (x) => x === v)) };
}

/** sum_v w[v] · rows[v][d], or the known row, for d < width. */
function readRow<S>(alg: Algebra<S>, l: ReturnType<typeof lookup<S>>, width: number, at: (row: number, d: number) => S): S[] {
  if ('row' in l) return Array.from({ length: width }, (_, d) => at(l.row, d));
  if ('nan' in l) return Array.from({ length: width }, () => (alg.exact ? alg.zero : alg.constant(Number.NaN)));
  return Array.from({ length: width }, (_, d) => alg.sum(l.weights.map((w, v) => alg.mul(w, at(v, d)))));
}

/** Adds g[d] into acc[row][d] for the looked-up row. */
function scatterRow<S>(alg: Algebra<S>, l: ReturnType<typeof lookup<S>>, g: readonly S[], acc: S[][][]): void {
  if ('nan' in l) return;
  if ('row' in l) {
    g.forEach((x, d) => (acc[l.row] as S[][])[d]?.push(x));
    return;
  }
  l.weights.forEach((w, v) => g.forEach((x, d) => (acc[v] as S[][])[d]?.push(alg.mul(w, x))));
}

const rangeAttrs = attrObject({ start: { type: 'integer' }, end: { type: 'integer' } }, ['start', 'end']);

function range(at: Attrs): [number, number] {
  const s = attrNum(at, 'start');
  const e = attrNum(at, 'end');
  if (e <= s) throw new ShapeError(`vocab range [${s}, ${e}) is empty`);
  return [s, e];
}

/**
 * An element-wise op on ids of the rank's vocab range [start, end) (Megatron's vocab-parallel
 * masking). Ids get no gradient. start and end are positions on the vocab axis: it cannot
 * shrink; `localIds` outputs are positions on the local vocab axis.
 */
function vocabOp(name: string, doc: string, f: <S>(alg: Algebra<S>, id: S, start: number, end: number) => S, localIds: boolean): OpDef {
  return {
    name,
    family: 'indexing',
    doc,
    vocabRange: localIds ? 'local' : 'outside',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: rangeAttrs,
    shape: ([ids], at) => {
      range(at);
      return [ids as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const [s, e] = range(at);
      const ids = arg(ins, 0);
      return [{ shape: ids.shape, data: ids.data.map((id) => f(alg, id, s, e)) }];
    },
    backward: (_b, _c) => [undefined],
    dims: ([ids]) => {
      const i = dimLabels(ids as Shape, 'i', 'batch');
      return { inputs: [i], outputs: [i], inputValues: { 0: fixedDim('vocab') }, ...(localIds ? { outputValues: { 0: fixedDim('local_vocab') } } : {}) };
    },
  };
}

export const ops: OpDef[] = [
  {
    name: 'embedding',
    family: 'indexing',
    linearIn: () => [1],
    lookup: { index: 0, table: 1, dim: 'first', out: 'append' },
    doc: 'torch.nn.functional.embedding(ids, weight): (ids [...], weight [V, D]) -> [..., D]; ids outside [0, V) are an error (PyTorch raises)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([ids, w]) => {
      if ((w as Shape).length !== 2) throw new ShapeError(`weight must be [V, D], got ${shapeStr(w as Shape)}`);
      return [[...(ids as Shape), (w as Shape)[1] as number]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const ids = arg(ins, 0);
      const w = arg(ins, 1);
      const [V, D] = w.shape as [number, number];
      const data: S[] = [];
      for (const id of ids.data) data.push(...readRow(alg, lookup(alg, id, V, 'embedding'), D, (r, d) => w.data[r * D + d] as S));
      return [{ shape: [...ids.shape, D], data }];
    },
    // Ids and features are SIMD; the vocab dim is looked up across (ids index it).
    dims: ([ids]) => {
      const i = dimLabels(ids as Shape, 'i', 'batch');
      const V = contractedDim('vocab');
      const D = batchDim('dim');
      return { inputs: [i, [V, D]], outputs: [[...i, D]], inputValues: { 0: V } };
    },
    // Ids < n read only the first n table rows.
    prefixAttrs: (at) => at,
    backward: (b, { inputs: [ids, w], grads: [g] }) => [undefined, one(b, 'embedding_backward', [g as GradRef, ids as GradRef], { num_embeddings: b.shape(w as GradRef)[0] as number })],
  },
  {
    name: 'embedding_backward',
    family: 'indexing',
    linearIn: () => [0],
    scatter: { grad: 0, index: 1, size: 'num_embeddings', dim: 'first' },
    doc: 'grad of embedding: (grad_out [..., D], ids [...]) -> grad_weight [V, D], row v = sum of grad_out rows whose id is v (index_add)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ num_embeddings: { type: 'integer', minimum: 1 } }, ['num_embeddings']),
    shape: ([g, ids], at) => {
      const gs = g as Shape;
      if (!sameShape(gs.slice(0, -1), ids as Shape)) throw new ShapeError(`grad ${shapeStr(gs)} must be ids ${shapeStr(ids as Shape)} plus one dim`);
      return [[attrNum(at, 'num_embeddings'), gs[gs.length - 1] as number]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const g = arg(ins, 0);
      const ids = arg(ins, 1);
      const V = attrNum(at, 'num_embeddings');
      const D = g.shape[g.shape.length - 1] as number;
      const acc: S[][][] = Array.from({ length: V }, () => Array.from({ length: D }, () => []));
      ids.data.forEach((id, i) => scatterRow(alg, lookup(alg, id, V, 'embedding_backward'), g.data.slice(i * D, (i + 1) * D), acc));
      return [{ shape: [V, D], data: acc.flatMap((row) => row.map((xs) => alg.sum(xs))) }];
    },
    backward: NO_BACKWARD,
    // Rows of grad_out are summed into table rows: the id dims are contracted; the table size
    // is the num_embeddings attribute.
    dims: ([, ids]) => {
      const i = dimLabels(ids as Shape, 'i', 'contracted');
      const V = fixedDim('vocab');
      const D = batchDim('dim');
      // A plain sum over the id positions: each row adds grad_out's row into one table row.
      return { inputs: [[...i, D], i], outputs: [[V, D]], inputValues: { 1: V }, sums: i.map((l) => l.label) };
    },
    // Ids < n write only the first n rows: those rows are the op with num_embeddings n.
    prefixAttrs: (at, n) => ({ ...at, num_embeddings: n }),
  },
  {
    name: 'gather',
    family: 'indexing',
    lookup: { index: 1, table: 0, dim: 'last', out: 'aligned' },
    doc: 'torch.gather(x, -1, idx): (x [..., C], idx [..., m]) -> [..., m], out[..., j] = x[..., idx[..., j]] (leading dims equal)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([x, idx]) => {
      const xs = x as Shape;
      const is = idx as Shape;
      if (xs.length === 0 || !sameShape(xs.slice(0, -1), is.slice(0, -1)) || is.length !== xs.length) throw new ShapeError(`index ${shapeStr(is)} must match input ${shapeStr(xs)} except in the last dim`);
      return [is];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const x = arg(ins, 0);
      const idx = arg(ins, 1);
      const C = x.shape[x.shape.length - 1] as number;
      const m = idx.shape[idx.shape.length - 1] as number;
      const data = idx.data.map((id, f) => {
        const base = Math.floor(f / m) * C;
        return readRow(alg, lookup(alg, id, C, 'gather'), 1, (r) => x.data[base + r] as S)[0] as S;
      });
      return [{ shape: idx.shape, data }];
    },
    dims: ([x]) => {
      const lead = dimLabels((x as Shape).slice(0, -1), 'l', 'batch');
      const C = contractedDim('c');
      const m = batchDim('m');
      return { inputs: [[...lead, C], [...lead, m]], outputs: [[...lead, m]], inputValues: { 1: C } };
    },
    backward: (b, { inputs: [x, idx], grads: [g] }) => {
      const xs = b.shape(x as GradRef);
      return [one(b, 'gather_backward', [g as GradRef, idx as GradRef], { size: xs[xs.length - 1] as number }), undefined];
    },
  },
  {
    name: 'gather_backward',
    family: 'indexing',
    scatter: { grad: 0, index: 1, size: 'size', dim: 'last' },
    linearIn: () => [0],
    doc: 'grad of gather along the last dim: (grad [..., m], idx [..., m]) -> [..., size], zeros with grad scatter-added at idx (torch.zeros(...).scatter_add_(-1, idx, grad))',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ size: { type: 'integer', minimum: 1 } }, ['size']),
    shape: ([g, idx], at) => {
      if (!sameShape(g as Shape, idx as Shape) || (g as Shape).length === 0) throw new ShapeError(`grad ${shapeStr(g as Shape)} and index ${shapeStr(idx as Shape)} must have the same (non-scalar) shape`);
      return [[...(g as Shape).slice(0, -1), attrNum(at, 'size')]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const g = arg(ins, 0);
      const idx = arg(ins, 1);
      const C = attrNum(at, 'size');
      const m = g.shape[g.shape.length - 1] as number;
      const rows = numel(g.shape) / m;
      const data: S[] = [];
      for (let r = 0; r < rows; r++) {
        const acc: S[][][] = Array.from({ length: C }, () => [[]]);
        for (let j = 0; j < m; j++) scatterRow(alg, lookup(alg, idx.data[r * m + j] as S, C, 'gather_backward'), [g.data[r * m + j] as S], acc);
        for (let c = 0; c < C; c++) data.push(alg.sum((acc[c] as S[][])[0] as S[]));
      }
      return [{ shape: [...g.shape.slice(0, -1), C], data }];
    },
    backward: NO_BACKWARD,
    // Scatter-add sums over the m index columns; the output size is the `size` attribute.
    dims: ([g]) => {
      const lead = dimLabels((g as Shape).slice(0, -1), 'l', 'batch');
      const m = contractedDim('m');
      const C = fixedDim('c');
      return { inputs: [[...lead, m], [...lead, m]], outputs: [[...lead, C]], inputValues: { 1: C } };
    },
  },
  vocabOp(
    'vocab_mask',
    "Megatron's vocab-parallel input mask: 1 where id < start or id >= end (the rank does not own the id), else 0; (input < start) | (input >= end) as a float",
    (alg, id, s, e) => alg.test(id, (v) => v < s || v >= e),
    false,
  ),
  vocabOp(
    'vocab_local_ids',
    "Megatron's vocab-parallel masked input: id - start where start <= id < end, else 0 (masked_input[input_mask] = 0)",
    (alg, id, s, e) => alg.mul(alg.test(id, (v) => v >= s && v < e), alg.sub(id, alg.constant(s))),
    true,
  ),
];
