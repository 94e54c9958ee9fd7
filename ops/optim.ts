/** Optimizer steps. */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { dimLabels, sameShapeSig } from './dims.js';
import { NO_BACKWARD } from './grad.js';
import { type Attrs, type OpDef, attrNum, attrObject, attrScalar, fixed, sameShape, scalarSchema, ShapeError, type Shape, shapeStr, withZeroTails, ZERO_ALWAYS } from './types.js';
import { qParse } from './rational.js';

export const ops: OpDef[] = withZeroTails([
  {
    name: 'sgd_update',
    family: 'optim',
    doc: 'torch.optim.SGD step without momentum: p - lr * (g + weight_decay * p)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ lr: scalarSchema, weight_decay: scalarSchema }, ['lr']),
    valueAttrs: ['lr', 'weight_decay'],
    shape: ([p, g]) => {
      if (!sameShape(p as Shape, g as Shape)) throw new ShapeError(`parameter ${shapeStr(p as Shape)} and gradient ${shapeStr(g as Shape)} differ`);
      return [p as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const p = arg(ins, 0);
      const g = arg(ins, 1);
      const lr = alg.constant(attrScalar(at, 'lr'));
      const wd = at['weight_decay'] === undefined ? undefined : alg.constant(attrScalar(at, 'weight_decay'));
      return [
        {
          shape: p.shape,
          data: p.data.map((v, i) => {
            const grad = wd === undefined ? (g.data[i] as S) : alg.add(g.data[i] as S, alg.mul(wd, v));
            return alg.sub(v, alg.mul(lr, grad));
          }),
        },
      ];
    },
    backward: NO_BACKWARD,
    dims: ([p]) => sameShapeSig(p as Shape, 2, 1),
  },
  {
    name: 'sgd_momentum_update',
    family: 'optim',
    doc: 'torch.optim.SGD step with momentum: (p, g, buf) -> (p\', buf\'); d = g + wd p; buf\' = m buf + (1 - dampening) d (first_step: buf\' = d); p\' = p - lr (nesterov ? d + m buf\' : buf\')',
    inputs: fixed(3),
    outputs: fixed(2),
    attrSchema: attrObject({ lr: scalarSchema, momentum: scalarSchema, dampening: scalarSchema, weight_decay: scalarSchema, nesterov: { type: 'boolean' }, first_step: { type: 'boolean' } }, ['lr', 'momentum']),
    valueAttrs: ['lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'first_step'],
    shape: ([p, g, b]) => {
      if (!sameShape(p as Shape, g as Shape) || !sameShape(p as Shape, b as Shape)) throw new ShapeError(`parameter ${shapeStr(p as Shape)}, gradient ${shapeStr(g as Shape)} and buffer ${shapeStr(b as Shape)} differ`);
      return [p as Shape, p as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const [p, g, buf] = [arg(ins, 0), arg(ins, 1), arg(ins, 2)];
      const lr = alg.constant(attrScalar(at, 'lr'));
      const m = alg.constant(attrScalar(at, 'momentum'));
      const keep = alg.constant(qString(1, attrScalar(at, 'dampening', 0)));
      const wd = at['weight_decay'] === undefined ? undefined : alg.constant(attrScalar(at, 'weight_decay'));
      const pn: S[] = [];
      const bn: S[] = [];
      p.data.forEach((pv, i) => {
        const d = wd === undefined ? (g.data[i] as S) : alg.add(g.data[i] as S, alg.mul(wd, pv));
        const b = at['first_step'] === true ? d : alg.add(alg.mul(m, buf.data[i] as S), alg.mul(keep, d));
        const step = at['nesterov'] === true ? alg.add(d, alg.mul(m, b)) : b;
        pn.push(alg.sub(pv, alg.mul(lr, step)));
        bn.push(b);
      });
      return [
        { shape: p.shape, data: pn },
        { shape: p.shape, data: bn },
      ];
    },
    backward: NO_BACKWARD,
    dims: ([p]) => sameShapeSig(p as Shape, 3, 2),
  },
  {
    name: 'adam_update',
    family: 'optim',
    // The second moment: a running mean of squares.
    inputDomains: { needs: [undefined, undefined, undefined, 'nonneg'] },
    doc: 'torch.optim.Adam / AdamW (decoupled_weight_decay) step `step` (1-based): (p, g, m, v) -> (p\', m\', v\'); p\' = p - lr/(1 - b1^t) m\' / (sqrt(v\')/sqrt(1 - b2^t) + eps)',
    inputs: fixed(4),
    outputs: fixed(3),
    attrSchema: attrObject(
      { lr: scalarSchema, beta1: scalarSchema, beta2: scalarSchema, eps: scalarSchema, weight_decay: scalarSchema, step: { type: 'integer', minimum: 1 }, decoupled_weight_decay: { type: 'boolean' } },
      ['lr', 'beta1', 'beta2', 'eps', 'step'],
    ),
    valueAttrs: ['lr', 'beta1', 'beta2', 'eps', 'weight_decay', 'step', 'decoupled_weight_decay'],
    shape: ([p, g, m, v]) => {
      for (const [x, what] of [
        [g, 'gradient'],
        [m, 'first moment'],
        [v, 'second moment'],
      ] as const) {
        if (!sameShape(p as Shape, x as Shape)) throw new ShapeError(`parameter ${shapeStr(p as Shape)} and ${what} ${shapeStr(x as Shape)} differ`);
      }
      return [p as Shape, p as Shape, p as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const [p, g, m, v] = [arg(ins, 0), arg(ins, 1), arg(ins, 2), arg(ins, 3)];
      const t = attrNum(at, 'step');
      const b1 = attrScalar(at, 'beta1');
      const b2 = attrScalar(at, 'beta2');
      const lrS = attrScalar(at, 'lr');
      const wdS = at['weight_decay'] === undefined ? undefined : attrScalar(at, 'weight_decay');
      const decoupled = at['decoupled_weight_decay'] === true;
      // Exact rational constants: bias corrections and the decoupled decay factor.
      const bc1 = qString(1, powQ(b1, t));
      const bc2 = qString(1, powQ(b2, t));
      const stepSize = alg.div(alg.constant(lrS), alg.constant(bc1));
      const sqrtBc2 = alg.fn('sqrt', alg.constant(bc2));
      const eps = alg.constant(attrScalar(at, 'eps'));
      const B1 = alg.constant(b1);
      const B2 = alg.constant(b2);
      const oneMinusB1 = alg.constant(qString(1, b1));
      const oneMinusB2 = alg.constant(qString(1, b2));
      const out: [S[], S[], S[]] = [[], [], []];
      p.data.forEach((pv, i) => {
        let grad = g.data[i] as S;
        let base = pv;
        if (wdS !== undefined && !decoupled) grad = alg.add(grad, alg.mul(alg.constant(wdS), pv));
        if (wdS !== undefined && decoupled) base = alg.mul(pv, alg.constant(qString(1, mulQ(lrS, wdS))));
        const mn = alg.add(alg.mul(B1, m.data[i] as S), alg.mul(oneMinusB1, grad));
        const vn = alg.add(alg.mul(B2, v.data[i] as S), alg.mul(oneMinusB2, alg.mul(grad, grad)));
        const denom = alg.add(alg.div(alg.fn('sqrt', vn), sqrtBc2), eps);
        out[0].push(alg.sub(base, alg.mul(stepSize, alg.div(mn, denom))));
        out[1].push(mn);
        out[2].push(vn);
      });
      return out.map((data) => ({ shape: p.shape, data }));
    },
    backward: NO_BACKWARD,
    dims: ([p]) => sameShapeSig(p as Shape, 4, 3),
  },
  {
    name: 'clip_coef',
    family: 'optim',
    doc: 'global-norm clipping factor as clip_grad_norm_ computes it: min(1, max_norm / (sqrt(total_sq) + eps)), eps = 1e-6; total_sq = sum of squares of every gradient (over all shards)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ max_norm: scalarSchema, eps: scalarSchema }, ['max_norm']),
    shape: ([s]) => {
      if ((s as Shape).length !== 0) throw new ShapeError(`total squared norm must be a scalar, got ${shapeStr(s as Shape)}`);
      return [[]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [
      { shape: [], data: [clipFactor(alg, arg(ins, 0).data[0] as S, at)] },
    ],
    backward: NO_BACKWARD,
    dims: () => ({ inputs: [[]], outputs: [[]] }),
  },
  {
    name: 'clip_grad_norm',
    family: 'optim',
    doc: 'torch.nn.utils.clip_grad_norm_(grads, max_norm): every gradient times min(1, max_norm / (global 2-norm + 1e-6))',
    inputs: { min: 1, max: Infinity },
    outputs: { min: 1, max: Infinity },
    attrSchema: attrObject({ max_norm: scalarSchema, eps: scalarSchema }, ['max_norm']),
    shape: (ins) => ins.map((s) => s),
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const total = alg.sum(ins.flatMap((x) => x.data.map((v) => alg.mul(v, v))));
      const c = clipFactor(alg, total, at);
      return ins.map((x) => ({ shape: x.shape, data: x.data.map((v) => alg.mul(v, c)) }));
    },
    backward: NO_BACKWARD,
    // As ranks spell it: grad_i * clip_coef(sum_j sum(grad_j * grad_j)).
    decompose: (n, at) => {
      const coef = { op: 'clip_coef', attrs: { ...at }, args: [{ sum: Array.from({ length: n }, (_, j) => ({ op: 'sum', attrs: {}, args: [{ op: 'mul', attrs: {}, args: [{ input: j }, { input: j }] }] })) }] };
      return Array.from({ length: n }, (_, i) => ({ op: 'mul', attrs: {}, args: [{ input: i }, coef] }));
    },
    // Not SIMD: every element scales by a factor of the global norm of all of them.
    dims: (ins) => {
      const l = ins.map((s, k) => dimLabels(s, `t${k}.d`, 'contracted'));
      return { inputs: l, outputs: l };
    },
  },
],
// Zero extension (OpDef.zeroTails): clipping scales each gradient by a factor of the sum of squares, which zeros leave alone.
{ clip_grad_norm: ZERO_ALWAYS });

function clipFactor<S>(alg: Algebra<S>, totalSq: S, at: Attrs): S {
  const eps = alg.constant(attrScalar(at, 'eps', '1/1000000'));
  return alg.min([alg.one, alg.div(alg.constant(attrScalar(at, 'max_norm')), alg.add(alg.fn('sqrt', totalSq), eps))]);
}

/** a - b as an exact rational string. */
function qString(a: number | string, b: number | string): string {
  const x = qParse(a);
  const y = qParse(b);
  const n = x.n * y.d - y.n * x.d;
  return `${n}/${x.d * y.d}`;
}

function powQ(a: number | string, k: number): string {
  const x = qParse(a);
  return `${x.n ** BigInt(k)}/${x.d ** BigInt(k)}`;
}

function mulQ(a: number | string, b: number | string): string {
  const x = qParse(a);
  const y = qParse(b);
  return `${x.n * y.n}/${x.d * y.d}`;
}
