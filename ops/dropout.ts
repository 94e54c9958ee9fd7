/** Dropout with its mask as an input (the plan carries the sampled mask; no randomness here). */
import type { Algebra, Dense } from './algebra.js';
import { arg, zipWith } from './dense.js';
import { sameShapeSig } from './dims.js';
import { type GradRef, one } from './grad.js';
import { type Attrs, type OpDef, attrObject, attrScalar, fixed, sameShape, scalarSchema, ShapeError, type Shape, shapeStr } from './types.js';
import { qParse } from './rational.js';

/** 1 / (1 - p) as an exact rational string. */
function keepScale(p: number | string): string {
  const q = qParse(p);
  if (q.n < 0n || q.n >= q.d) throw new ShapeError(`dropout probability ${String(p)} is not in [0, 1)`);
  return `${q.d}/${q.d - q.n}`;
}

export const ops: OpDef[] = [
  {
    name: 'dropout',
    family: 'dropout',
    inputDomains: { needs: [undefined, 'mask'] },
    doc: 'torch.nn.functional.dropout(x, p, training=True) with its sampled mask given: x * mask / (1 - p), mask in {0, 1}',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: attrObject({ p: scalarSchema }, ['p']),
    shape: ([x, m], at) => {
      if (!sameShape(x as Shape, m as Shape)) throw new ShapeError(`input ${shapeStr(x as Shape)} and mask ${shapeStr(m as Shape)} differ`);
      keepScale(attrScalar(at, 'p'));
      return [x as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const k = alg.constant(keepScale(attrScalar(at, 'p')));
      return [zipWith([arg(ins, 0), arg(ins, 1)], ([x, m]) => alg.mul(alg.mul(x as S, m as S), k))];
    },
    // The mask is an input, not a parameter: it gets no gradient.
    backward: (b, { inputs: [, mask], grads: [g], attrs }) => [one(b, 'scale', [one(b, 'mul', [g as GradRef, mask as GradRef])], { factor: keepScale(attrScalar(attrs, 'p')) }), undefined],
    dims: ([x]) => sameShapeSig(x as Shape, 2, 1),
  },
];
