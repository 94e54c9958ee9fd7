/** Matrix products with torch.matmul / F.linear shape semantics. */
import type { Algebra, Dense } from './algebra.js';
import { arg, at, generate } from './dense.js';
import { batchDim, broadcastLabels, contractedDim, dimLabels } from './dims.js';
import { type GradBuilder, type GradRef, one, unbroadcast } from './grad.js';
import { type DimLabel, type DimSig, type OpDef, broadcastShapes, fixed, noAttrs, ShapeError, type Shape, shapeStr, withZeroTails, ZERO_ALWAYS } from './types.js';

/** torch.matmul values: 1-D operands are promoted and the promoted dims dropped again. */
function matmulApply<S>(alg: Algebra<S>, a: Dense<S>, b: Dense<S>): Dense<S> {
  const a2: Dense<S> = a.shape.length === 1 ? { shape: [1, a.shape[0] as number], data: a.data } : a;
  const b2: Dense<S> = b.shape.length === 1 ? { shape: [b.shape[0] as number, 1], data: b.data } : b;
  const ra = a2.shape.length;
  const rb = b2.shape.length;
  const m = a2.shape[ra - 2] as number;
  const k = a2.shape[ra - 1] as number;
  const n = b2.shape[rb - 1] as number;
  const batch = broadcastShapes(a2.shape.slice(0, -2), b2.shape.slice(0, -2));
  const bidx = (x: Dense<S>, idx: readonly number[]): number[] => {
    const xb = x.shape.length - 2;
    const off = batch.length - xb;
    return Array.from({ length: xb }, (_, d) => ((x.shape[d] as number) === 1 ? 0 : (idx[d + off] as number)));
  };
  const full = generate([...batch, m, n], (idx) => {
    const i = idx[batch.length] as number;
    const j = idx[batch.length + 1] as number;
    const pa = bidx(a2, idx);
    const pb = bidx(b2, idx);
    const terms: S[] = [];
    for (let kk = 0; kk < k; kk++) terms.push(alg.mul(at(a2, [...pa, i, kk]), at(b2, [...pb, kk, j])));
    return alg.sum(terms);
  });
  return { shape: matmulShape(a.shape, b.shape), data: full.data };
}

function matmulShape(a: Shape, b: Shape): Shape {
  if (a.length === 0 || b.length === 0) throw new ShapeError('matmul operands must have at least one dim');
  const a2 = a.length === 1 ? [1, a[0] as number] : a;
  const b2 = b.length === 1 ? [b[0] as number, 1] : b;
  const k1 = a2[a2.length - 1] as number;
  const k2 = b2[b2.length - 2] as number;
  if (k1 !== k2) throw new ShapeError(`matmul contracted dims differ: ${shapeStr(a)} @ ${shapeStr(b)}`);
  const batch = broadcastShapes(a2.slice(0, -2), b2.slice(0, -2));
  const out = [...batch];
  if (a.length > 1) out.push(a2[a2.length - 2] as number);
  if (b.length > 1) out.push(b2[b2.length - 1] as number);
  return out;
}

/** Rows m and columns n are SIMD, k is contracted; batch dims broadcast as element-wise ops do. */
function matmulDims(a: Shape, b: Shape): DimSig {
  const K = contractedDim('k');
  const M = batchDim('m');
  const N = batchDim('n');
  const lead = broadcastLabels([a.length === 1 ? [] : a.slice(0, -2), b.length === 1 ? [] : b.slice(0, -2)]);
  const [la, lb] = lead.inputs as [DimLabel[], DimLabel[]];
  const out = [...lead.out];
  if (a.length > 1) out.push(M);
  if (b.length > 1) out.push(N);
  return { inputs: [a.length === 1 ? [K] : [...la, M, K], b.length === 1 ? [K] : [...lb, K, N]], outputs: [out], sums: ['k'] };
}

export const ops: OpDef[] = withZeroTails([
  {
    name: 'matmul',
    family: 'matmul',
    linearIn: () => [0, 1],
    doc: 'torch.matmul(a, b)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [matmulShape(a as Shape, b as Shape)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [matmulApply(alg, arg(ins, 0), arg(ins, 1))],
    backward: (b, { inputs: [a, c], grads: [g] }) => matmulGrad(b, a as GradRef, c as GradRef, g as GradRef),
    dims: ([a, b]) => matmulDims(a as Shape, b as Shape),
  },
  {
    name: 'linear',
    family: 'matmul',
    // With a bias the op is affine, not linear, in x and w.
    linearIn: (n: number) => (n === 2 ? [0, 1] : []),
    doc: 'torch.nn.functional.linear(x, w, b?) = x @ w.T (+ b)',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([x, w, b]) => {
      const xs = x as Shape;
      const ws = w as Shape;
      if (ws.length !== 2) throw new ShapeError(`linear weight must be 2-D, got ${shapeStr(ws)}`);
      if (xs.length === 0 || xs[xs.length - 1] !== ws[1]) throw new ShapeError(`linear input ${shapeStr(xs)} does not match weight ${shapeStr(ws)}`);
      if (b !== undefined && (b.length !== 1 || b[0] !== ws[0])) throw new ShapeError(`linear bias ${shapeStr(b)} does not match weight ${shapeStr(ws)}`);
      return [[...xs.slice(0, -1), ws[0] as number]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const x = arg(ins, 0);
      const w = arg(ins, 1);
      const b = ins[2];
      const [o, i] = w.shape as [number, number];
      const wt = generate([i, o], (idx) => at(w, [idx[1] as number, idx[0] as number]));
      const y = matmulApply(alg, x, wt);
      if (b === undefined) return [y];
      return [{ shape: y.shape, data: y.data.map((v, f) => alg.add(v, b.data[f % o] as S)) }];
    },
    backward: (b, { inputs, grads: [g] }) => {
      const [x, w] = inputs as [GradRef, GradRef];
      const [o, i] = b.shape(w) as [number, number];
      const g2 = one(b, 'reshape', [g as GradRef], { shape: [-1, o] });
      const x2 = one(b, 'reshape', [x], { shape: [-1, i] });
      const gx = one(b, 'matmul', [g as GradRef, w]);
      const gw = one(b, 'matmul', [one(b, 'transpose', [g2], { dim0: 0, dim1: 1 }), x2]);
      const lead = b.shape(g as GradRef).length - 1;
      const gb = inputs.length > 2 ? (lead === 0 ? (g as GradRef) : one(b, 'sum', [g as GradRef], { dims: Array.from({ length: lead }, (_, d) => d) })) : undefined;
      return [gx, gw, gb];
    },
    // Output features are SIMD (row o of the weight, entry o of the bias); input features are contracted.
    dims: ([x, , b]) => {
      const lead = dimLabels((x as Shape).slice(0, -1), 'x', 'batch');
      const I = contractedDim('in');
      const O = batchDim('out');
      // Without a bias the output is a plain sum over the input features; a bias would be added once per addend.
      return { inputs: [[...lead, I], [O, I], ...(b === undefined ? [] : [[O]])], outputs: [[...lead, O]], ...(b === undefined ? { sums: ['in'] } : {}) };
    },
  },
],
// Zero extension (OpDef.zeroTails): a zero row, column or contracted position adds nothing.
{ matmul: ZERO_ALWAYS,
  // x @ w.T + b: a row of x that is zero gives b, not 0, when there is a bias.
  linear: (c) => c.length < 3 || !(c[0] === true && c[1] !== true) });

/** Gradients of torch.matmul for every operand-rank combination. */
function matmulGrad(b: GradBuilder, a: GradRef, c: GradRef, g: GradRef): GradRef[] {
  const ra = b.shape(a).length;
  const rc = b.shape(c).length;
  const tr = (x: GradRef): GradRef => one(b, 'transpose', [x], { dim0: -1, dim1: -2 });
  if (ra === 1 && rc === 1) return [one(b, 'mul', [g, c]), one(b, 'mul', [g, a])];
  if (ra === 1 && rc === 2) {
    // [k] @ [k, n] -> [n]
    const ga = one(b, 'matmul', [c, g]);
    const gc = one(b, 'matmul', [one(b, 'reshape', [a], { shape: [-1, 1] }), one(b, 'reshape', [g], { shape: [1, -1] })]);
    return [ga, gc];
  }
  if (ra === 2 && rc === 1) {
    // [m, k] @ [k] -> [m]
    const ga = one(b, 'matmul', [one(b, 'reshape', [g], { shape: [-1, 1] }), one(b, 'reshape', [c], { shape: [1, -1] })]);
    return [ga, one(b, 'matmul', [tr(a), g])];
  }
  if (ra < 2 || rc < 2) throw new Error('matmul backward: batched 1-D operands are not supported');
  return [unbroadcast(b, one(b, 'matmul', [g, tr(c)]), b.shape(a)), unbroadcast(b, one(b, 'matmul', [tr(a), g]), b.shape(c))];
}
