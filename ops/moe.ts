/**
 * Mixture of experts: top-k routing and the token permutation of dispatch and combine.
 *
 * Routing choices are integer tensors. Symbolically top-k is an uninterpreted choice (the same
 * scores always choose the same experts), and dispatch places slot (token i, choice j) at
 * position p in expert e's buffer where p counts the earlier slots routed to e: exactly the
 * dropless permutation (tokens sorted by expert, stable in token order), written with
 * `alg.test`, so it holds for every routing.
 *
 * `layout: "token"` (on dispatch, gather and combine alike) keeps every slot at its own row
 * instead: slot (token i, choice j) is row i*k + j of the buffer of the expert it is routed
 * to, zero in the others. The same layer in a layout that does not depend on the routing:
 * a rank's tokens hold a fixed block of buffer rows, and the buffers are linear in the
 * routing choices.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { batchDim, dimLabels, fixedDim } from './dims.js';
import { type GradRef, one } from './grad.js';
import { type Attrs, type OpDef, attrNum, attrObject, fixed, normDim, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

/**
 * sel(s, e, c): 1 when slot s (row-major over [N, k]) is routed to expert e at buffer position
 * c, else 0. Concrete routings index directly; symbolic ones count with tests.
 */
function placement<S>(alg: Algebra<S>, idx: Dense<S>, E: number, layout: Layout): (s: number, e: number, c: number) => S {
  const n = idx.data.length;
  const known = idx.data.map((x) => alg.known(x));
  if (layout === 'token') {
    for (const x of idx.data) alg.require(alg.test(x, (v) => Number.isInteger(v) && v >= 0 && v < E), `moe routing: expert within [0, ${E})`);
    const hit = new Map<number, S>();
    return (s, e, c) => {
      if (c !== s) return alg.zero;
      const key = s * E + e;
      let v = hit.get(key);
      if (v === undefined) hit.set(key, (v = alg.test(idx.data[s] as S, (u) => u === e)));
      return v;
    };
  }
  if (known.every((x) => x !== undefined)) {
    const pos = new Array<number>(n);
    const count = new Array<number>(E).fill(0);
    known.forEach((e, s) => {
      if (e === undefined || !Number.isInteger(e) || e < 0 || e >= E) {
        alg.require(alg.zero, `moe routing: expert ${String(e)} is not an integer in [0, ${E})`);
        pos[s] = -1;
        return;
      }
      pos[s] = count[e] as number;
      count[e] = (count[e] as number) + 1;
    });
    return (s, e, c) => (known[s] === e && pos[s] === c ? alg.one : alg.zero);
  }
  for (const x of idx.data) alg.require(alg.test(x, (v) => Number.isInteger(v) && v >= 0 && v < E), `moe routing: expert within [0, ${E})`);
  // pos1[s][e] = 1 + (earlier slots routed to e) when slot s is routed to e, else 0.
  const pos1: S[][] = Array.from({ length: n }, () => []);
  for (let e = 0; e < E; e++) {
    let count = alg.zero;
    for (let s = 0; s < n; s++) {
      const hit = alg.test(idx.data[s] as S, (v) => v === e);
      (pos1[s] as S[])[e] = alg.mul(hit, alg.add(count, alg.one));
      count = alg.add(count, hit);
    }
  }
  const memo = new Map<number, S>();
  return (s, e, c) => {
    const key = (s * E + e) * n + c;
    let v = memo.get(key);
    if (v === undefined) memo.set(key, (v = alg.test((pos1[s] as S[])[e] as S, (p) => p === c + 1)));
    return v;
  };
}

type Layout = 'packed' | 'token';
const layoutOf = (at: Attrs): Layout => (at['layout'] === 'token' ? 'token' : 'packed');
/** The layout attribute to pass on (none for the default, packed). */
const layoutAttr = (at: Attrs): Attrs => (layoutOf(at) === 'token' ? { layout: 'token' } : {});
const layoutSchema = { enum: ['packed', 'token'] };

/** Row of the expert output for every routing slot: [N, k, F]. */
function gatherRows<S>(alg: Algebra<S>, y: Dense<S>, idx: Dense<S>, layout: Layout): Dense<S> {
  const [E, n, F] = y.shape as [number, number, number];
  const sel = placement(alg, idx, E, layout);
  const data: S[] = [];
  for (let s = 0; s < n; s++) {
    const coef: { q: S; e: number; c: number }[] = [];
    for (let e = 0; e < E; e++) {
      for (let c = 0; c < n; c++) {
        const q = sel(s, e, c);
        if (alg.known(q) !== 0) coef.push({ q, e, c });
      }
    }
    for (let f = 0; f < F; f++) data.push(alg.sum(coef.map(({ q, e, c }) => alg.mul(q, y.data[(e * n + c) * F + f] as S))));
  }
  return { shape: [idx.shape[0] as number, idx.shape[1] as number, F], data };
}

function routeShape(x: Shape, idx: Shape, w: Shape | undefined): [number, number, number] {
  if (x.length !== 2) throw new ShapeError(`tokens must be [N, D], got ${shapeStr(x)}`);
  if (idx.length !== 2 || idx[0] !== x[0]) throw new ShapeError(`routing indices must be [${x[0]}, k], got ${shapeStr(idx)}`);
  if (w !== undefined && !sameShape(w, idx)) throw new ShapeError(`routing weights ${shapeStr(w)} must match indices ${shapeStr(idx)}`);
  return [x[0] as number, idx[1] as number, x[1] as number];
}

/**
 * Routing ops: a buffer position counts earlier slots routed to the same expert, across
 * tokens, and buffers have N*k rows, so tokens N, choices k, experts E and buffer rows are
 * fixed; only the feature dim is SIMD. Routing choices index the experts.
 */
const E = fixedDim('experts');
const N = fixedDim('n');
const K = fixedDim('k');
const SLOTS = fixedDim('slots');

const expertsAttr = attrObject({ experts: { type: 'integer', minimum: 1 }, layout: layoutSchema }, ['experts']);

export const ops: OpDef[] = [
  {
    name: 'topk',
    family: 'moe',
    positionsOut: { output: 1, input: 0, dim: -1 },
    doc: 'torch.topk(x, k, dim=-1) -> (values [..., k], indices [..., k]), largest first (inputs with ties are outside the golden cases: PyTorch leaves their order unspecified)',
    inputs: fixed(1),
    outputs: fixed(2),
    attrSchema: attrObject({ k: { type: 'integer', minimum: 1 } }, ['k']),
    shape: ([x], at) => {
      const xs = x as Shape;
      normDim(-1, xs.length);
      const k = attrNum(at, 'k');
      if (xs.length === 0 || k > (xs[xs.length - 1] as number)) throw new ShapeError(`k = ${k} exceeds the last dim of ${shapeStr(xs)}`);
      const out = [...xs.slice(0, -1), k];
      return [out, out];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const k = attrNum(at, 'k');
      const C = x.shape[x.shape.length - 1] as number;
      const vals: S[] = [];
      const idx: S[] = [];
      for (let r = 0; r < x.data.length / C; r++) {
        const row = x.data.slice(r * C, (r + 1) * C) as S[];
        for (const choice of alg.topk(row, k)) {
          idx.push(choice);
          const kc = alg.known(choice);
          vals.push(kc !== undefined ? (row[kc] as S) : alg.sum(row.map((v, c) => alg.mul(alg.test(choice, (u) => u === c), v))));
        }
      }
      const shape = [...x.shape.slice(0, -1), k];
      return [
        { shape, data: vals },
        { shape, data: idx },
      ];
    },
    backward: (b, { inputs: [x], outputs: [, idx], grads: [g] }) => {
      const xs = b.shape(x as GradRef);
      return [one(b, 'gather_backward', [g as GradRef, idx as GradRef], { size: xs[xs.length - 1] as number })];
    },
    // Rows are SIMD; the scores are compared across (contracted), but must keep more than k
    // entries: only k = 1 lets them shrink to 2. k is an attribute.
    dims: ([x], at) => {
      const lead = dimLabels((x as Shape).slice(0, -1), 'l', 'batch');
      const C = { label: 'c', role: attrNum(at, 'k') === 1 ? 'contracted' : 'fixed' } as const;
      const out = [...lead, fixedDim('k')];
      return { inputs: [[...lead, C]], outputs: [out, out], outputValues: { 1: C } };
    },
  },
  {
    name: 'moe_dispatch',
    family: 'moe',
    doc: 'dropless MoE dispatch: (x [N, D], indices [N, k][, weights [N, k]]) -> buffers [E, N*k, D]; expert e gets the rows of the slots routed to it in token order (weighted when weights are given), zero rows after them; with layout "token", slot (i, j) stays at row i*k + j of its expert\'s buffer, zero in the others',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: expertsAttr,
    routing: (at) => (layoutOf(at) === 'packed' ? 'dispatch' : undefined),
    shape: ([x, idx, w], at) => {
      const [N, k, D] = routeShape(x as Shape, idx as Shape, w);
      return [[attrNum(at, 'experts'), N * k, D]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const idx = arg(ins, 1);
      const w = ins[2];
      const E = attrNum(at, 'experts');
      const [N, k, D] = routeShape(x.shape, idx.shape, w?.shape);
      const n = N * k;
      const sel = placement(alg, idx, E, layoutOf(at));
      const data: S[] = [];
      for (let e = 0; e < E; e++) {
        for (let c = 0; c < n; c++) {
          const coef: S[] = [];
          for (let s = 0; s < n; s++) {
            const p = sel(s, e, c);
            coef.push(w === undefined ? p : alg.mul(p, w.data[s] as S));
          }
          for (let d = 0; d < D; d++) data.push(alg.sum(coef.map((q, s) => alg.mul(q, x.data[Math.floor(s / k) * D + d] as S))));
        }
      }
      return [{ shape: [E, n, D], data }];
    },
    backward: (b, { inputs: [x, idx, w], grads: [g], attrs }) => {
      const gx = one(b, 'moe_combine', w === undefined ? [g as GradRef, idx as GradRef] : [g as GradRef, idx as GradRef, w], layoutAttr(attrs));
      if (w === undefined) return [gx, undefined];
      // d/dw[s] = <g at slot s's buffer row, x[token(s)]>
      const [N, D] = b.shape(x as GradRef) as [number, number];
      const rows = one(b, 'moe_gather', [g as GradRef, idx as GradRef], layoutAttr(attrs));
      return [gx, undefined, one(b, 'sum', [one(b, 'mul', [rows, one(b, 'reshape', [x as GradRef], { shape: [N, 1, D] })])], { dims: [2] })];
    },
    dims: (ins) => {
      const D = batchDim('f');
      return { inputs: [[N, D], [N, K], ...(ins.length > 2 ? [[N, K]] : [])], outputs: [[E, SLOTS, D]], inputValues: { 1: E } };
    },
  },
  {
    name: 'moe_gather',
    family: 'moe',
    doc: 'the expert output row of every routing slot: (y [E, N*k, F], indices [N, k]) -> [N, k, F], slot (i, j) reads y[e, p] where dispatch (of the same layout) placed it',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ layout: layoutSchema }),
    routing: (at) => (layoutOf(at) === 'packed' ? 'gather' : undefined),
    shape: ([y, idx]) => {
      const ys = y as Shape;
      const is = idx as Shape;
      if (ys.length !== 3 || is.length !== 2 || ys[1] !== (is[0] as number) * (is[1] as number)) throw new ShapeError(`expert outputs ${shapeStr(ys)} must be [E, N*k, F] for indices ${shapeStr(is)}`);
      return [[is[0] as number, is[1] as number, ys[2] as number]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [gatherRows(alg, arg(ins, 0), arg(ins, 1), layoutOf(at))],
    backward: (b, { inputs: [y, idx], grads: [g], attrs }) => {
      const [E, , F] = b.shape(y as GradRef) as [number, number, number];
      const [N, k] = b.shape(idx as GradRef) as [number, number];
      // The adjoint of reading slot rows is dispatching them back: rows of g as k "tokens" each.
      const flat = one(b, 'reshape', [g as GradRef], { shape: [N * k, F] });
      return [one(b, 'moe_dispatch', [flat, one(b, 'reshape', [idx as GradRef], { shape: [N * k, 1] })], { experts: E, ...layoutAttr(attrs) }), undefined];
    },
    dims: () => {
      const F = batchDim('f');
      return { inputs: [[E, SLOTS, F], [N, K]], outputs: [[N, K, F]], inputValues: { 1: E } };
    },
  },
  {
    name: 'moe_combine',
    family: 'moe',
    doc: 'dropless MoE combine: (y [E, N*k, F], indices [N, k][, weights [N, k]]) -> [N, F], out[i] = sum_j weights[i, j] * y[e_ij, p_ij] (weights 1 when absent; p_ij where dispatch of the same layout placed the slot)',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: attrObject({ layout: layoutSchema }),
    routing: (at) => (layoutOf(at) === 'packed' ? 'combine' : undefined),
    shape: ([y, idx, w]) => {
      const ys = y as Shape;
      const is = idx as Shape;
      if (ys.length !== 3 || is.length !== 2 || ys[1] !== (is[0] as number) * (is[1] as number)) throw new ShapeError(`expert outputs ${shapeStr(ys)} must be [E, N*k, F] for indices ${shapeStr(is)}`);
      if (w !== undefined && !sameShape(w, is)) throw new ShapeError(`routing weights ${shapeStr(w)} must match indices ${shapeStr(is)}`);
      return [[is[0] as number, ys[2] as number]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const rows = gatherRows(alg, arg(ins, 0), arg(ins, 1), layoutOf(at));
      const w = ins[2];
      const [N, k, F] = rows.shape as [number, number, number];
      const data: S[] = [];
      for (let i = 0; i < N; i++) {
        for (let f = 0; f < F; f++) {
          const xs: S[] = [];
          for (let j = 0; j < k; j++) {
            const v = rows.data[(i * k + j) * F + f] as S;
            xs.push(w === undefined ? v : alg.mul(w.data[i * k + j] as S, v));
          }
          data.push(alg.sum(xs));
        }
      }
      return [{ shape: [N, F], data }];
    },
    backward: (b, { inputs: [y, idx, w], grads: [g], attrs }) => {
      const E = b.shape(y as GradRef)[0] as number;
      const gy = one(b, 'moe_dispatch', w === undefined ? [g as GradRef, idx as GradRef] : [g as GradRef, idx as GradRef, w], { experts: E, ...layoutAttr(attrs) });
      if (w === undefined) return [gy, undefined];
      const [N, F] = b.shape(g as GradRef) as [number, number];
      const rows = one(b, 'moe_gather', [y as GradRef, idx as GradRef], layoutAttr(attrs));
      return [gy, undefined, one(b, 'sum', [one(b, 'mul', [rows, one(b, 'reshape', [g as GradRef], { shape: [N, 1, F] })])], { dims: [2] })];
    },
    dims: (ins) => {
      const F = batchDim('f');
      return { inputs: [[E, SLOTS, F], [N, K], ...(ins.length > 2 ? [[N, K]] : [])], outputs: [[N, F]], inputValues: { 1: E } };
    },
  },
];

