/** Losses and their backward ops. */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { type GradRef, NO_BACKWARD, one } from './grad.js';
import { type Attrs, type OpDef, attrObject, fixed, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

const reduction = attrObject({ reduction: { enum: ['mean', 'sum'] } });

export const ops: OpDef[] = [
  {
    name: 'mse_loss',
    family: 'loss',
    doc: "torch.nn.functional.mse_loss(pred, target, reduction='mean'|'sum') -> scalar",
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: reduction,
    shape: ([p, t]) => {
      if (!sameShape(p as Shape, t as Shape)) throw new ShapeError(`prediction ${shapeStr(p as Shape)} and target ${shapeStr(t as Shape)} differ`);
      return [[]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const p = arg(ins, 0);
      const t = arg(ins, 1);
      const sq = p.data.map((v, i) => {
        const d = alg.sub(v, t.data[i] as S);
        return alg.mul(d, d);
      });
      const s = alg.sum(sq);
      return [{ shape: [], data: [at['reduction'] === 'sum' ? s : alg.mul(s, alg.constant(`1/${p.data.length}`))] }];
    },
    backward: (b, { inputs: [p, t], grads: [g], attrs }) => {
      const gp = one(b, 'mse_loss_backward', [p as GradRef, t as GradRef, g as GradRef], attrs);
      return [gp, one(b, 'neg', [gp])];
    },
  },
  {
    name: 'mse_loss_backward',
    family: 'loss',
    doc: 'grad of mse_loss: (pred, target[, grad_loss []]) -> grad_pred = grad_loss * 2 (pred - target) / N (N = numel for mean, 1 for sum; grad_loss defaults to 1)',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: reduction,
    shape: ([p, t, g]) => {
      if (g !== undefined && g.length !== 0) throw new ShapeError(`loss gradient must be a scalar, got ${shapeStr(g)}`);
      if (!sameShape(p as Shape, t as Shape)) throw new ShapeError(`prediction ${shapeStr(p as Shape)} and target ${shapeStr(t as Shape)} differ`);
      return [p as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const p = arg(ins, 0);
      const t = arg(ins, 1);
      const g = ins[2];
      let k = alg.constant(at['reduction'] === 'sum' ? 2 : `2/${p.data.length}`);
      if (g !== undefined) k = alg.mul(k, g.data[0] as S);
      return [{ shape: p.shape, data: p.data.map((v, i) => alg.mul(k, alg.sub(v, t.data[i] as S))) }];
    },
    backward: NO_BACKWARD,
  },
];
