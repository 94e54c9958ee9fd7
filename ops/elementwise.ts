/** Element-wise arithmetic with PyTorch broadcasting. */
import type { Algebra, Dense } from './algebra.js';
import { arg, broadcastReader, generate } from './dense.js';
import { broadcastSig, sameShapeSig } from './dims.js';
import { type BackwardRule, type GradRef, one, unbroadcast } from './grad.js';
import { type Attrs, type OpDef, attrObject, attrScalar, broadcastShapes, fixed, noAttrs, scalarSchema, type Shape, withZeroTails, ZERO_ALWAYS, ZERO_IF_ALL_CARRY } from './types.js';
import { qParse } from './rational.js';

type Binary = <S>(alg: Algebra<S>, a: S, b: S) => S;

function applyBinary<S>(alg: Algebra<S>, a: Dense<S>, b: Dense<S>, f: Binary): Dense<S> {
  const shape = broadcastShapes(a.shape, b.shape);
  const ra = broadcastReader(a, shape.length);
  const rb = broadcastReader(b, shape.length);
  return generate(shape, (idx) => f(alg, ra(idx), rb(idx)));
}

function mapDense<S>(x: Dense<S>, f: (v: S) => S): Dense<S> {
  return { shape: x.shape, data: x.data.map(f) };
}

function binary(name: string, doc: string, f: Binary, backward: BackwardRule, linearIn?: readonly number[], keeps?: 'sum' | 'product'): OpDef {
  return {
    name,
    family: 'elementwise',
    ...(linearIn === undefined ? {} : { linearIn: () => linearIn }),
    ...(keeps === undefined ? {} : { inputDomains: { keeps } }),
    doc,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [broadcastShapes(a as Shape, b as Shape)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [applyBinary(alg, arg(ins, 0), arg(ins, 1), f)],
    backward,
    dims: (ins) => broadcastSig(ins),
  };
}

export const ops: OpDef[] = withZeroTails([
  {
    name: 'where',
    family: 'elementwise',
    inputDomains: { needs: ['mask'] },
    doc: 'torch.where(cond, a, b): a where cond is nonzero, else b (broadcasting); the unselected value never propagates',
    inputs: fixed(3),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([c, a, b]) => [broadcastShapes(c as Shape, broadcastShapes(a as Shape, b as Shape))],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const [c, a, b] = [arg(ins, 0), arg(ins, 1), arg(ins, 2)];
      const shape = broadcastShapes(c.shape, broadcastShapes(a.shape, b.shape));
      const [rc, ra, rb] = [broadcastReader(c, shape.length), broadcastReader(a, shape.length), broadcastReader(b, shape.length)];
      return [
        generate(shape, (idx) => {
          const cv = rc(idx);
          const k = alg.known(cv);
          if (k !== undefined) return k !== 0 ? ra(idx) : rb(idx);
          const t = alg.test(cv, (v) => v !== 0);
          return alg.add(alg.mul(t, ra(idx)), alg.mul(alg.sub(alg.one, t), rb(idx)));
        }),
      ];
    },
    backward: (b, { inputs: [c, x, y], grads: [g] }) => {
      const gx = one(b, 'where', [c as GradRef, g as GradRef, one(b, 'scale', [g as GradRef], { factor: 0 })]);
      return [undefined, unbroadcast(b, gx, b.shape(x as GradRef)), unbroadcast(b, one(b, 'sub', [g as GradRef, gx]), b.shape(y as GradRef))];
    },
    // cond is 0/1, not a position: its values need no axis.
    dims: (ins) => broadcastSig(ins),
  },
  binary('add', 'torch.add(a, b)', (alg, a, b) => alg.add(a, b), (b, { inputs: [x, y], grads: [g] }) => [unbroadcast(b, g as GradRef, b.shape(x as GradRef)), unbroadcast(b, g as GradRef, b.shape(y as GradRef))], undefined, 'sum'),
  binary('sub', 'torch.sub(a, b)', (alg, a, b) => alg.sub(a, b), (b, { inputs: [x, y], grads: [g] }) => [unbroadcast(b, g as GradRef, b.shape(x as GradRef)), unbroadcast(b, one(b, 'neg', [g as GradRef]), b.shape(y as GradRef))]),
  binary('mul', 'torch.mul(a, b)', (alg, a, b) => alg.mul(a, b), (b, { inputs: [x, y], grads: [g] }) => [
    unbroadcast(b, one(b, 'mul', [g as GradRef, y as GradRef]), b.shape(x as GradRef)),
    unbroadcast(b, one(b, 'mul', [g as GradRef, x as GradRef]), b.shape(y as GradRef)),
  ], [0, 1], 'product'),
  binary('div', 'torch.div(a, b) (true division)', (alg, a, b) => alg.div(a, b), (b, { inputs: [x, y], outputs: [o], grads: [g] }) => [
    unbroadcast(b, one(b, 'div', [g as GradRef, y as GradRef]), b.shape(x as GradRef)),
    // d(x/y)/dy = -x/y^2 = -out/y
    unbroadcast(b, one(b, 'neg', [one(b, 'div', [one(b, 'mul', [g as GradRef, o as GradRef]), y as GradRef])]), b.shape(y as GradRef)),
  ], [0]),
  {
    name: 'neg',
    family: 'elementwise',
    linearIn: () => [0],
    doc: 'torch.neg(a)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a]) => [a as Shape],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [mapDense(arg(ins, 0), (v) => alg.neg(v))],
    backward: (b, { grads: [g] }) => [one(b, 'neg', [g as GradRef])],
    dims: ([a]) => sameShapeSig(a as Shape, 1, 1),
  },
  {
    name: 'identity',
    family: 'elementwise',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    linearIn: () => [0],
    doc: 'a (a copy; also what a cast is in exact arithmetic)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a]) => [a as Shape],
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [arg(ins, 0)],
    backward: (b, { grads: [g] }) => [one(b, 'identity', [g as GradRef])],
    dims: ([a]) => sameShapeSig(a as Shape, 1, 1),
  },
  {
    name: 'scale',
    family: 'elementwise',
    linearIn: () => [0],
    doc: 'a * factor, factor a constant (number or rational string "p/q")',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ factor: scalarSchema }, ['factor']),
    // A factor >= 0 keeps a sign (Adam's beta2 * v).
    inputDomains: { keeps: (at) => qParse(attrScalar(at, 'factor')).n >= 0n },
    shape: ([a]) => [a as Shape],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const k = alg.constant(attrScalar(at, 'factor'));
      return [mapDense(arg(ins, 0), (v) => alg.mul(v, k))];
    },
    backward: (b, { grads: [g], attrs }) => [one(b, 'scale', [g as GradRef], { factor: attrs['factor'] ?? 1 })],
    dims: ([a]) => sameShapeSig(a as Shape, 1, 1),
  },
],
// Zero extension (OpDef.zeroTails): products and moves keep zeros; a sum does when no operand is broadcast along the class.
{ add: ZERO_IF_ALL_CARRY, sub: ZERO_IF_ALL_CARRY, mul: ZERO_ALWAYS, neg: ZERO_ALWAYS, identity: ZERO_ALWAYS, scale: ZERO_ALWAYS,
  // 0 / b = 0 for b not in the class; 0 / 0 is not.
  div: (c) => c[0] === true && c[1] !== true });
