/**
 * Comparisons and the element-wise lattice ops: `compare` (torch.gt/ge/lt/le/eq/ne, a 0/1
 * result), `maximum` and `minimum` (also clamp, ReLU). All rest on Algebra.gt0 ([x > 0]):
 * exact for integer values (ids, positions: case analysis) and constants, an uninterpreted
 * 0/1 atom of the difference's normal form otherwise, so a comparison of equal normal forms
 * is the same value on both sides of a proof.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg, broadcastReader, generate } from './dense.js';
import { batchDim, broadcastSig, fixedDim, shapeAttrAtLanes } from './dims.js';
import { type GradRef, one, unbroadcast } from './grad.js';
import { attrInts, attrNum, attrObject, type Attrs, attrScalar, broadcastShapes, fixed, noAttrs, type OpDef, scalarSchema, ShapeError, type Shape, withZeroTails } from './types.js';

export const RELATIONS = ['gt', 'ge', 'lt', 'le', 'eq', 'ne'] as const;
export type Relation = (typeof RELATIONS)[number];

/** [a rel b] as 0/1, from gt0 of the differences. */
export function relate<S>(alg: Algebra<S>, rel: Relation, a: S, b: S): S {
  const gt = (x: S, y: S): S => alg.gt0(alg.sub(x, y));
  switch (rel) {
    case 'gt':
      return gt(a, b);
    case 'lt':
      return gt(b, a);
    case 'ge':
      return alg.sub(alg.one, gt(b, a));
    case 'le':
      return alg.sub(alg.one, gt(a, b));
    case 'eq':
      return alg.sub(alg.sub(alg.one, gt(a, b)), gt(b, a));
    case 'ne':
      return alg.add(gt(a, b), gt(b, a));
  }
}

function binaryMap<S>(a: Dense<S>, b: Dense<S>, f: (x: S, y: S) => S): Dense<S> {
  const shape = broadcastShapes(a.shape, b.shape);
  const ra = broadcastReader(a, shape.length);
  const rb = broadcastReader(b, shape.length);
  return generate(shape, (idx) => f(ra(idx), rb(idx)));
}

const relOf = (at: Attrs): Relation => at['rel'] as Relation;

/** torch.maximum / minimum: the gradient goes to the larger (smaller) input, halved on ties. */
function lattice(name: 'maximum' | 'minimum'): OpDef {
  const pick = name === 'maximum' ? 'gt' : 'lt';
  return {
    name,
    family: 'compare',
    doc: `torch.${name}(a, b) (broadcasting; clamp and ReLU are ${name} with a constant)`,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [broadcastShapes(a as Shape, b as Shape)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [binaryMap(arg(ins, 0), arg(ins, 1), (x, y) => (name === 'maximum' ? alg.max([x, y]) : alg.min([x, y])))],
    backward: (b, { inputs: [x, y], grads: [g] }) => {
      // PyTorch: grad where this input wins, grad / 2 on ties.
      const wins = (p: GradRef, q: GradRef): GradRef => one(b, 'add', [one(b, 'compare', [p, q], { rel: pick }), one(b, 'scale', [one(b, 'compare', [p, q], { rel: 'eq' })], { factor: '1/2' })]);
      return [
        unbroadcast(b, one(b, 'mul', [g as GradRef, wins(x as GradRef, y as GradRef)]), b.shape(x as GradRef)),
        unbroadcast(b, one(b, 'mul', [g as GradRef, wins(y as GradRef, x as GradRef)]), b.shape(y as GradRef)),
      ];
    },
    dims: (ins) => broadcastSig(ins),
  };
}

export const ops: OpDef[] = withZeroTails(
  [
    {
      name: 'compare',
      family: 'compare',
      doc: 'torch.gt/ge/lt/le/eq/ne(a, b) as 0/1 (broadcasting; a boolean tensor is its 0/1 values)',
      inputs: fixed(2),
      outputs: fixed(1),
      attrSchema: attrObject({ rel: { enum: [...RELATIONS] } }, ['rel']),
      shape: ([a, b]) => [broadcastShapes(a as Shape, b as Shape)],
      apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [binaryMap(arg(ins, 0), arg(ins, 1), (x, y) => relate(alg, relOf(at), x, y))],
      // Piecewise constant: no gradient flows through a comparison.
      backward: () => [undefined, undefined],
      dims: (ins) => broadcastSig(ins),
    },
    lattice('maximum'),
    lattice('minimum'),
    {
      name: 'assert_mask',
      family: 'compare',
      doc: 'x, where every element of mask (broadcast to x) must be nonzero: masked_select / masked_scatter whose traced size shows a full mask; each element is a proof obligation',
      inputs: fixed(2),
      outputs: fixed(1),
      attrSchema: noAttrs(),
      shape: ([x, m]) => {
        const s = broadcastShapes(x as Shape, m as Shape);
        if (s.length !== (x as Shape).length || s.some((d, i) => d !== (x as Shape)[i])) throw new ShapeError('assert_mask: the mask must broadcast to the input');
        return [x as Shape];
      },
      apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
        const x = arg(ins, 0);
        const rm = broadcastReader(arg(ins, 1), x.shape.length);
        const rx = broadcastReader(x, x.shape.length);
        return [
          generate(x.shape, (idx) => {
            alg.require(alg.test(rm(idx), (v) => v !== 0), 'masked_select / masked_scatter: the mask is full (the traced size)');
            return rx(idx);
          }),
        ];
      },
      backward: (b, { inputs: [, m], grads: [g] }) => [one(b, 'assert_mask', [g as GradRef, m as GradRef]), undefined],
      dims: (ins) => broadcastSig(ins),
    },
    {
      name: 'iota',
      family: 'compare',
      doc: 'positions: start + i * step at index i along `dim` of a tensor of `shape` (torch.arange, and the index grids masks are compared from); start is a scalar input',
      inputs: fixed(1),
      outputs: fixed(1),
      attrSchema: attrObject({ shape: { type: 'array', items: { type: 'integer', minimum: 1 }, maxItems: 8 }, dim: { type: 'integer', minimum: 0 }, step: scalarSchema }, ['shape', 'dim', 'step']),
      shape: ([s], at) => {
        if ((s as Shape).length !== 0) throw new ShapeError('iota: start must be a scalar');
        const shape = attrInts(at, 'shape') ?? [];
        if (attrNum(at, 'dim') >= shape.length) throw new ShapeError(`iota: dim ${attrNum(at, 'dim')} out of range for ${shape.length} dims`);
        return [shape];
      },
      apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
        const start = arg(ins, 0).data[0] as S;
        const step = alg.constant(attrScalar(at, 'step'));
        const d = attrNum(at, 'dim');
        return [generate(attrInts(at, 'shape') ?? [], (idx) => alg.add(start, alg.mul(alg.constant(idx[d] as number), step)))];
      },
      backward: () => [undefined],
      // Values are positions: no dim may be shrunk.
      dims: (_ins, at) => ({ inputs: [[]], outputs: [(attrInts(at, 'shape') ?? []).map((_, i) => fixedDim(`o${i}`))] }),
      // Lanes: a value reads only its index along `dim`, so every other dim is SIMD (each of
      // its elements holds the same value) and divides with its spelled size; `dim` stays fixed.
      lanes: (_ins, at) => ({ inputs: [[]], outputs: [(attrInts(at, 'shape') ?? []).map((_, i) => (i === attrNum(at, 'dim') ? fixedDim(`o${i}`) : batchDim(`o${i}`)))] }),
      laneAttrs: shapeAttrAtLanes,
    },
  ],
  // max(0, 0) = 0 = min(0, 0) where both inputs carry the class (not against a broadcast
  // operand); a comparison of zeros is not 0 (ge, le, eq), so it has no rule.
  { maximum: (c) => c.every((x) => x), minimum: (c) => c.every((x) => x) },
);
