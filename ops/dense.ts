/** Index arithmetic for dense row-major tensors, shared by the op rules. */
import type { Dense } from './algebra.js';
import type { Shape } from './types.js';
import { numel } from './types.js';

export function strides(shape: Shape): number[] {
  const s = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= shape[i] as number;
  }
  return s;
}

/** Calls f(flatIndex, coords) for every element in row-major order. */
function forEachIndex(shape: Shape, f: (flat: number, idx: readonly number[]) => void): void {
  const n = numel(shape);
  const idx = new Array<number>(shape.length).fill(0);
  for (let flat = 0; flat < n; flat++) {
    f(flat, idx);
    for (let d = shape.length - 1; d >= 0; d--) {
      idx[d] = (idx[d] as number) + 1;
      if ((idx[d] as number) < (shape[d] as number)) break;
      idx[d] = 0;
    }
  }
}

/** Builds a tensor of `shape` from a function of the coordinates. */
export function generate<S>(shape: Shape, f: (idx: readonly number[]) => S): Dense<S> {
  const data: S[] = new Array<S>(numel(shape));
  forEachIndex(shape, (flat, idx) => (data[flat] = f(idx)));
  return { shape, data };
}

/** Reads x at output coordinates `idx` of a broadcast result (PyTorch broadcasting). */
export function broadcastReader<S>(x: Dense<S>, outRank: number): (idx: readonly number[]) => S {
  const st = strides(x.shape);
  const off = outRank - x.shape.length;
  return (idx) => {
    let flat = 0;
    for (let d = 0; d < x.shape.length; d++) if ((x.shape[d] as number) !== 1) flat += (idx[d + off] as number) * (st[d] as number);
    return x.data[flat] as S;
  };
}

export function at<S>(x: Dense<S>, idx: readonly number[]): S {
  let flat = 0;
  let acc = 1;
  for (let d = x.shape.length - 1; d >= 0; d--) {
    flat += (idx[d] as number) * acc;
    acc *= x.shape[d] as number;
  }
  return x.data[flat] as S;
}

/** Sub-tensor: along `dim`, indices [start, end). */
export function narrow<S>(x: Dense<S>, dim: number, start: number, end: number): Dense<S> {
  const shape = [...x.shape];
  shape[dim] = end - start;
  return generate(shape, (idx) => {
    const src = [...idx];
    src[dim] = (src[dim] as number) + start;
    return at(x, src);
  });
}

/** Concatenation along `dim`. */
export function cat<S>(xs: readonly Dense<S>[], dim: number): Dense<S> {
  const first = xs[0] as Dense<S>;
  const shape = [...first.shape];
  shape[dim] = xs.reduce((p, x) => p + (x.shape[dim] as number), 0);
  const offsets: number[] = [];
  let o = 0;
  for (const x of xs) {
    offsets.push(o);
    o += x.shape[dim] as number;
  }
  return generate(shape, (idx) => {
    const i = idx[dim] as number;
    let k = xs.length - 1;
    while ((offsets[k] as number) > i) k--;
    const src = [...idx];
    src[dim] = i - (offsets[k] as number);
    return at(xs[k] as Dense<S>, src);
  });
}

/** Reduces `dims` with `combine` (over the list of values of each output element). */
export function reduceDims<S>(x: Dense<S>, dims: readonly number[], keepdim: boolean, combine: (vals: S[]) => S): Dense<S> {
  const set = new Set(dims);
  const outShapeKeep = x.shape.map((s, d) => (set.has(d) ? 1 : s));
  const groups: S[][] = Array.from({ length: numel(outShapeKeep) }, () => []);
  const ost = strides(outShapeKeep);
  forEachIndex(x.shape, (flat, idx) => {
    let o = 0;
    for (let d = 0; d < idx.length; d++) if (!set.has(d)) o += (idx[d] as number) * (ost[d] as number);
    (groups[o] as S[]).push(x.data[flat] as S);
  });
  const shape = keepdim ? outShapeKeep : x.shape.filter((_, d) => !set.has(d));
  return { shape, data: groups.map(combine) };
}

/** The i-th input (present by the arity check). */
export function arg<S>(ins: readonly Dense<S>[], i: number): Dense<S> {
  const x = ins[i];
  if (x === undefined) throw new Error(`missing input ${i}`);
  return x;
}

/** Element-wise combination of same-shape tensors. */
export function zipWith<S>(xs: readonly Dense<S>[], f: (vals: S[]) => S): Dense<S> {
  const first = xs[0] as Dense<S>;
  return { shape: first.shape, data: first.data.map((_, i) => f(xs.map((x) => x.data[i] as S))) };
}
