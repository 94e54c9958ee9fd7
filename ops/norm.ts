/**
 * Normalization over the trailing `normalized_dims` dims, with its rsqrt/variance structure
 * kept explicit: r = rsqrt(var + eps) is an uninterpreted positive function of the (exact)
 * biased variance, so a plan that computes the statistics in pieces (sequence-parallel
 * partial sums, for instance) must reach the same variance term to be proved.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { dimLabels } from './dims.js';
import { type GradRef, NO_BACKWARD } from './grad.js';
import { type Attrs, type DimLabel, type OpDef, attrNum, attrObject, attrScalar, numel, sameShape, scalarSchema, ShapeError, type Shape, shapeStr } from './types.js';

const normAttrs = attrObject({ normalized_dims: { type: 'integer', minimum: 1, maximum: 16 }, eps: scalarSchema }, ['eps']);

function trailing(x: Shape, attrs: Attrs): number {
  const k = attrNum(attrs, 'normalized_dims', 1);
  if (k > x.length) throw new ShapeError(`normalized_dims ${k} exceeds the rank of ${shapeStr(x)}`);
  return numel(x.slice(x.length - k));
}

function checkAffine(x: Shape, w: Shape | undefined, attrs: Attrs, what: string): void {
  if (w === undefined) return;
  const k = attrNum(attrs, 'normalized_dims', 1);
  if (!sameShape(w, x.slice(x.length - k))) throw new ShapeError(`${what} ${shapeStr(w)} must have the normalized shape ${shapeStr(x.slice(x.length - k))}`);
}

/** Row-wise statistics: the fibers of the trailing n elements. */
function rows<S>(x: Dense<S>, n: number): S[][] {
  const out: S[][] = [];
  for (let i = 0; i < x.data.length; i += n) out.push(x.data.slice(i, i + n) as S[]);
  return out;
}

function mean<S>(alg: Algebra<S>, xs: readonly S[]): S {
  return alg.mul(alg.sum(xs), alg.constant(`1/${xs.length}`));
}

interface Stats<S> {
  xhat: S[];
  r: S;
}

function layerStats<S>(alg: Algebra<S>, row: S[], eps: S): Stats<S> {
  const mu = mean(alg, row);
  const c = row.map((v) => alg.sub(v, mu));
  const variance = mean(alg, c.map((v) => alg.mul(v, v)));
  const r = alg.fn('rsqrt', alg.add(variance, eps));
  return { xhat: c.map((v) => alg.mul(v, r)), r };
}

function rmsStats<S>(alg: Algebra<S>, row: S[], eps: S): Stats<S> {
  const r = alg.fn('rsqrt', alg.add(mean(alg, row.map((v) => alg.mul(v, v))), eps));
  return { xhat: row.map((v) => alg.mul(v, r)), r };
}

function normForward(kind: 'layer' | 'rms') {
  return <S>(alg: Algebra<S>, ins: readonly Dense<S>[], attrs: Attrs): Dense<S>[] => {
    const x = arg(ins, 0);
    const w = ins[1];
    const b = kind === 'layer' ? ins[2] : undefined;
    const n = trailing(x.shape, attrs);
    const eps = alg.constant(attrScalar(attrs, 'eps'));
    const data: S[] = [];
    for (const row of rows(x, n)) {
      const { xhat } = (kind === 'layer' ? layerStats : rmsStats)(alg, row, eps);
      xhat.forEach((v, j) => {
        let y = w === undefined ? v : alg.mul(v, w.data[j] as S);
        if (b !== undefined) y = alg.add(y, b.data[j] as S);
        data.push(y);
      });
    }
    return [{ shape: x.shape, data }];
  };
}

/**
 * (grad_out, x[, weight]) -> grad_x[, grad_weight, grad_bias (layer norm only)].
 * With gh = grad_out * weight:
 *   layer: grad_x = r (gh - mean(gh) - xhat mean(gh xhat)),  rms: grad_x = r (gh - xhat mean(gh xhat));
 *   grad_weight = sum over rows of grad_out xhat; grad_bias = sum over rows of grad_out.
 */
function normBackward(kind: 'layer' | 'rms') {
  return <S>(alg: Algebra<S>, ins: readonly Dense<S>[], attrs: Attrs, want?: readonly boolean[]): Dense<S>[] => {
    const g = arg(ins, 0);
    const x = arg(ins, 1);
    const w = ins[2];
    const n = trailing(x.shape, attrs);
    const eps = alg.constant(attrScalar(attrs, 'eps'));
    // grad_x multiplies xhat by a sum over the row of gh·xhat: per element, the product of two
    // sums over the row, by far the dearest output symbolically. Left out (empty) when unread.
    const wantGx = want?.[0] !== false;
    const gx: S[] = [];
    const gwAcc: S[][] = Array.from({ length: n }, () => []);
    const gbAcc: S[][] = Array.from({ length: n }, () => []);
    const grows = rows(g, n);
    rows(x, n).forEach((row, i) => {
      const { xhat, r } = (kind === 'layer' ? layerStats : rmsStats)(alg, row, eps);
      const go = grows[i] as S[];
      if (wantGx) {
        const gh = go.map((v, j) => (w === undefined ? v : alg.mul(v, w.data[j] as S)));
        const m2 = mean(alg, gh.map((v, j) => alg.mul(v, xhat[j] as S)));
        const m1 = kind === 'layer' ? mean(alg, gh) : undefined;
        gh.forEach((v, j) => {
          let t = alg.sub(v, alg.mul(xhat[j] as S, m2));
          if (m1 !== undefined) t = alg.sub(t, m1);
          gx.push(alg.mul(r, t));
        });
      }
      if (w === undefined) return;
      go.forEach((v, j) => {
        (gwAcc[j] as S[]).push(alg.mul(v, xhat[j] as S));
        (gbAcc[j] as S[]).push(go[j] as S);
      });
    });
    const out: Dense<S>[] = [{ shape: x.shape, data: gx }];
    if (w !== undefined) {
      out.push({ shape: w.shape, data: gwAcc.map((l) => alg.sum(l)) });
      if (kind === 'layer') out.push({ shape: w.shape, data: gbAcc.map((l) => alg.sum(l)) });
    }
    return out;
  };
}

/**
 * Rows (the leading dims) and the normalized trailing dims: the normalized dims are 'fixed'
 * because their element count enters the values as 1/n (the mean and the variance); the rows
 * are SIMD, unless an output sums over them (the weight and bias gradients): then 'contracted'.
 */
function normLabels(x: Shape, attrs: Attrs, rowsSummed: boolean): { x: DimLabel[]; w: DimLabel[] } {
  const k = attrNum(attrs, 'normalized_dims', 1);
  if (k > x.length) throw new ShapeError(`normalized_dims ${k} exceeds the rank of ${shapeStr(x)}`);
  const rows = dimLabels(x.slice(0, x.length - k), 'row', rowsSummed ? 'contracted' : 'batch');
  const w = dimLabels(x.slice(x.length - k), 'norm', 'fixed');
  return { x: [...rows, ...w], w };
}

function norm(kind: 'layer' | 'rms'): OpDef[] {
  const name = kind === 'layer' ? 'layer_norm' : 'rms_norm';
  const maxIn = kind === 'layer' ? 3 : 2;
  return [
    {
      name,
      family: 'norm',
      doc:
        kind === 'layer'
          ? 'torch.nn.functional.layer_norm(x, x.shape[-k:], weight?, bias?, eps): (x - mean) rsqrt(var + eps) w + b, biased variance over the trailing k dims'
          : 'RMSNorm as Llama computes it: x rsqrt(mean(x^2) + eps) w over the trailing k dims',
      inputs: { min: 1, max: maxIn },
      outputs: { min: 1, max: 1 },
      attrSchema: normAttrs,
      valueAttrs: ['eps'],
      shape: ([x, w, b], attrs) => {
        trailing(x as Shape, attrs);
        checkAffine(x as Shape, w, attrs, 'weight');
        checkAffine(x as Shape, b, attrs, 'bias');
        if (b !== undefined && w === undefined) throw new ShapeError('a bias needs a weight');
        return [x as Shape];
      },
      apply: normForward(kind),
      backward: (bld, { inputs, grads: [g], attrs }) => {
        const outs = bld.op(`${name}_backward`, [g as GradRef, ...inputs.slice(0, 2)], attrs);
        return [outs[0], outs[1], outs[2]].slice(0, inputs.length);
      },
      dims: (ins, attrs) => {
        const l = normLabels(ins[0] as Shape, attrs, false);
        return { inputs: [l.x, ...ins.slice(1).map(() => l.w)], outputs: [l.x] };
      },
    },
    {
      name: `${name}_backward`,
      family: 'norm',
      linearIn: () => [0],
      doc: `grad of ${name}: (grad_out, x[, weight]) -> grad_x[, grad_weight${kind === 'layer' ? ', grad_bias' : ''}]`,
      inputs: { min: 2, max: 3 },
      outputs: { min: 1, max: kind === 'layer' ? 3 : 2 },
      attrSchema: normAttrs,
      valueAttrs: ['eps'],
      shape: ([g, x, w], attrs) => {
        if (!sameShape(g as Shape, x as Shape)) throw new ShapeError(`grad ${shapeStr(g as Shape)} and input ${shapeStr(x as Shape)} differ`);
        trailing(x as Shape, attrs);
        checkAffine(x as Shape, w, attrs, 'weight');
        return w === undefined ? [x as Shape] : kind === 'layer' ? [x as Shape, w, w] : [x as Shape, w];
      },
      apply: normBackward(kind),
      backward: NO_BACKWARD,
      dims: (ins, attrs) => {
        const withW = ins.length > 2;
        const l = normLabels(ins[1] as Shape, attrs, withW);
        const nOut = withW ? (kind === 'layer' ? 3 : 2) : 1;
        // The weight (and bias) gradients sum per-row terms over the rows; grad_x is SIMD along them.
        const rows = l.x.filter((d) => d.role === 'contracted').map((d) => d.label);
        return { inputs: [l.x, l.x, ...(withW ? [l.w] : [])], outputs: [l.x, ...Array.from({ length: nOut - 1 }, () => l.w)], ...(withW ? { sums: rows } : {}) };
      },
    },
  ];
}

export const ops: OpDef[] = [...norm('layer'), ...norm('rms')];
