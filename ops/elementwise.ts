/** Element-wise arithmetic with PyTorch broadcasting. */
import type { Algebra, Dense } from './algebra.js';
import { arg, broadcastReader, generate } from './dense.js';
import { type Attrs, type OpDef, attrObject, attrScalar, broadcastShapes, fixed, noAttrs, scalarSchema, type Shape } from './types.js';

type Binary = <S>(alg: Algebra<S>, a: S, b: S) => S;

export function applyBinary<S>(alg: Algebra<S>, a: Dense<S>, b: Dense<S>, f: Binary): Dense<S> {
  const shape = broadcastShapes(a.shape, b.shape);
  const ra = broadcastReader(a, shape.length);
  const rb = broadcastReader(b, shape.length);
  return generate(shape, (idx) => f(alg, ra(idx), rb(idx)));
}

export function mapDense<S>(x: Dense<S>, f: (v: S) => S): Dense<S> {
  return { shape: x.shape, data: x.data.map(f) };
}

function binary(name: string, doc: string, f: Binary): OpDef {
  return {
    name,
    family: 'elementwise',
    doc,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [broadcastShapes(a as Shape, b as Shape)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [applyBinary(alg, arg(ins, 0), arg(ins, 1), f)],
  };
}

export const ops: OpDef[] = [
  binary('add', 'torch.add(a, b)', (alg, a, b) => alg.add(a, b)),
  binary('sub', 'torch.sub(a, b)', (alg, a, b) => alg.sub(a, b)),
  binary('mul', 'torch.mul(a, b)', (alg, a, b) => alg.mul(a, b)),
  binary('div', 'torch.div(a, b) (true division)', (alg, a, b) => alg.div(a, b)),
  {
    name: 'neg',
    family: 'elementwise',
    doc: 'torch.neg(a)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a]) => [a as Shape],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [mapDense(arg(ins, 0), (v) => alg.neg(v))],
  },
  {
    name: 'identity',
    family: 'elementwise',
    doc: 'a (a copy; also what a cast is in exact arithmetic)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a]) => [a as Shape],
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [arg(ins, 0)],
  },
  {
    name: 'scale',
    family: 'elementwise',
    doc: 'a * factor, factor a constant (number or rational string "p/q")',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ factor: scalarSchema }, ['factor']),
    shape: ([a]) => [a as Shape],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const k = alg.constant(attrScalar(at, 'factor'));
      return [mapDense(arg(ins, 0), (v) => alg.mul(v, k))];
    },
  },
];
