/** Optimizer steps. */
import { type OpDef, attrObject, fixed, sameShape, scalarSchema, ShapeError, type Shape, shapeStr } from './types.js';

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
  },
];
