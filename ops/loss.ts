/** Losses and their backward ops. */
import { type OpDef, attrObject, fixed, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

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
  },
];
