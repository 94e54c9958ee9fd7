/** Element-wise arithmetic with PyTorch broadcasting. */
import { type OpDef, attrObject, broadcastShapes, fixed, noAttrs, scalarSchema, type Shape } from './types.js';

function binary(name: string, doc: string): OpDef {
  return {
    name,
    family: 'elementwise',
    doc,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [broadcastShapes(a as Shape, b as Shape)],
  };
}

function unary(name: string, doc: string, attrSchema: object = noAttrs()): OpDef {
  return { name, family: 'elementwise', doc, inputs: fixed(1), outputs: fixed(1), attrSchema, shape: ([a]) => [a as Shape] };
}

export const ops: OpDef[] = [
  binary('add', 'torch.add(a, b)'),
  binary('sub', 'torch.sub(a, b)'),
  binary('mul', 'torch.mul(a, b)'),
  binary('div', 'torch.div(a, b) (true division)'),
  unary('neg', 'torch.neg(a)'),
  unary('identity', 'a (a copy; also what a cast is in exact arithmetic)'),
  unary('scale', 'a * factor, factor a constant (number or rational string "p/q")', attrObject({ factor: scalarSchema }, ['factor'])),
];
