/** Non-linear element-wise functions and their backward ops. */
import { type OpDef, attrObject, fixed, noAttrs, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

const geluAttrs = attrObject({ approximate: { enum: ['none', 'tanh'] } });

function fwd(name: string, doc: string, attrSchema: object = noAttrs()): OpDef {
  return { name, family: 'activation', doc, inputs: fixed(1), outputs: fixed(1), attrSchema, shape: ([a]) => [a as Shape] };
}

/** backward(grad_out, saved) -> grad_in, all the same shape. */
function bwd(name: string, doc: string, attrSchema: object = noAttrs()): OpDef {
  return {
    name,
    family: 'activation',
    doc,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema,
    shape: ([g, x]) => {
      if (!sameShape(g as Shape, x as Shape)) throw new ShapeError(`grad ${shapeStr(g as Shape)} and saved tensor ${shapeStr(x as Shape)} differ`);
      return [g as Shape];
    },
  };
}

export const ops: OpDef[] = [
  fwd('exp', 'torch.exp(a)'),
  fwd('tanh', 'torch.tanh(a)'),
  fwd('sigmoid', 'torch.sigmoid(a)'),
  fwd('silu', 'torch.nn.functional.silu(a) = a * sigmoid(a)'),
  fwd('gelu', 'torch.nn.functional.gelu(a, approximate)', geluAttrs),
  bwd('gelu_backward', 'grad of gelu: (grad_out, x) -> grad_x', geluAttrs),
  bwd('silu_backward', 'grad of silu: (grad_out, x) -> grad_x'),
  bwd('tanh_backward', 'grad of tanh: (grad_out, y) -> grad_out * (1 - y^2), y = tanh(x)'),
  bwd('sigmoid_backward', 'grad of sigmoid: (grad_out, y) -> grad_out * y * (1 - y), y = sigmoid(x)'),
];
