/** Optimizer steps. */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { NO_BACKWARD } from './grad.js';
import { type Attrs, type OpDef, attrObject, attrScalar, fixed, sameShape, scalarSchema, ShapeError, type Shape, shapeStr } from './types.js';

export const ops: OpDef[] = [
  {
    name: 'sgd_update',
    family: 'optim',
    doc: 'torch.optim.SGD step without momentum: p - lr * (g + weight_decay * p)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ lr: scalarSchema, weight_decay: scalarSchema }, ['lr']),
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
  },
];
