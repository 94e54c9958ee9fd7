/** Non-linear element-wise functions and their backward ops, in exact real semantics. */
import type { Algebra, Dense } from './algebra.js';
import { arg, zipWith } from './dense.js';
import { sameShapeSig } from './dims.js';
import { type BackwardRule, type GradRef, NO_BACKWARD, one } from './grad.js';
import { type Attrs, type OpDef, attrObject, fixed, noAttrs, sameShape, ShapeError, type Shape, shapeStr, withZeroTails, ZERO_ALWAYS } from './types.js';

const geluAttrs = attrObject({ approximate: { enum: ['none', 'tanh'] } });
/** The tanh approximation's cubic coefficient, as PyTorch writes it (0.044715). */
const GELU_K = '44715/1000000';

type Unary = <S>(alg: Algebra<S>, x: S, attrs: Attrs) => S;
type Backward = <S>(alg: Algebra<S>, g: S, saved: S, attrs: Attrs) => S;

const half = <S>(alg: Algebra<S>): S => alg.constant('1/2');

/** u = sqrt(2/pi) (x + 0.044715 x^3), the tanh-approximation's inner argument. */
function geluTanhInner<S>(alg: Algebra<S>, x: S): S {
  const c = alg.fn('sqrt_2_over_pi', alg.zero);
  const x3 = alg.mul(alg.mul(x, x), x);
  return alg.mul(c, alg.add(x, alg.mul(alg.constant(GELU_K), x3)));
}

function gelu<S>(alg: Algebra<S>, x: S, attrs: Attrs): S {
  if (attrs['approximate'] === 'tanh') {
    const t = alg.fn('tanh', geluTanhInner(alg, x));
    return alg.mul(alg.mul(half(alg), x), alg.add(alg.one, t));
  }
  return alg.mul(x, alg.fn('Phi', x));
}

function geluGrad<S>(alg: Algebra<S>, g: S, x: S, attrs: Attrs): S {
  if (attrs['approximate'] === 'tanh') {
    const t = alg.fn('tanh', geluTanhInner(alg, x));
    const c = alg.fn('sqrt_2_over_pi', alg.zero);
    const du = alg.mul(c, alg.add(alg.one, alg.mul(alg.constant(`${3 * 44715}/1000000`), alg.mul(x, x))));
    const d = alg.add(alg.mul(half(alg), alg.add(alg.one, t)), alg.mul(alg.mul(alg.mul(half(alg), x), alg.sub(alg.one, alg.mul(t, t))), du));
    return alg.mul(g, d);
  }
  return alg.mul(g, alg.add(alg.fn('Phi', x), alg.mul(x, alg.fn('phi', x))));
}

function fwd(name: string, doc: string, f: Unary, backward: BackwardRule, attrSchema: object = noAttrs()): OpDef {
  return {
    name,
    family: 'activation',
    doc,
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema,
    shape: ([a]) => [a as Shape],
    apply: (alg, ins, at) => {
      const x = arg(ins, 0);
      return [{ shape: x.shape, data: x.data.map((v) => f(alg, v, at)) }];
    },
    backward,
    dims: ([a]) => sameShapeSig(a as Shape, 1, 1),
  };
}

/** backward(grad_out, saved) -> grad_in, all the same shape. */
function bwd(name: string, doc: string, f: Backward, attrSchema: object = noAttrs()): OpDef {
  return {
    name,
    family: 'activation',
    // grad_out times a function of x.
    linearIn: () => [0],
    doc,
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema,
    shape: ([g, x]) => {
      if (!sameShape(g as Shape, x as Shape)) throw new ShapeError(`grad ${shapeStr(g as Shape)} and saved tensor ${shapeStr(x as Shape)} differ`);
      return [g as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [zipWith([arg(ins, 0), arg(ins, 1)], ([g, s]) => f(alg, g as S, s as S, at))],
    backward: NO_BACKWARD,
    dims: ([g]) => sameShapeSig(g as Shape, 2, 1),
  };
}

export const ops: OpDef[] = withZeroTails([
  fwd('exp', 'torch.exp(a)', (alg, x) => alg.exp(x), (b, { outputs: [o], grads: [g] }) => [one(b, 'mul', [g as GradRef, o as GradRef])]),
  // (An optimizer's sqrt of its second moment, AdamW as torch.optim writes it.)
  { ...fwd('sqrt', 'torch.sqrt(a) (a >= 0)', (alg, x) => alg.fn('sqrt', x), (b, { outputs: [o], grads: [g] }) => [one(b, 'div', [g as GradRef, one(b, 'scale', [o as GradRef], { factor: 2 })])]), inputDomains: { needs: ['nonneg'] } },
  { ...fwd('log', 'torch.log(a) (natural log; a > 0)', (alg, x) => alg.fn('log', x), (b, { inputs: [x], grads: [g] }) => [one(b, 'div', [g as GradRef, x as GradRef])]), inputDomains: { needs: ['positive'] } },
  fwd('tanh', 'torch.tanh(a)', (alg, x) => alg.fn('tanh', x), (b, { outputs: [o], grads: [g] }) => [one(b, 'tanh_backward', [g as GradRef, o as GradRef])]),
  fwd('sigmoid', 'torch.sigmoid(a)', (alg, x) => alg.fn('sigmoid', x), (b, { outputs: [o], grads: [g] }) => [one(b, 'sigmoid_backward', [g as GradRef, o as GradRef])]),
  fwd('silu', 'torch.nn.functional.silu(a) = a * sigmoid(a)', (alg, x) => alg.mul(x, alg.fn('sigmoid', x)), (b, { inputs: [x], grads: [g] }) => [one(b, 'silu_backward', [g as GradRef, x as GradRef])]),
  fwd('gelu', 'torch.nn.functional.gelu(a, approximate): x * Phi(x), or the tanh form', gelu, (b, { inputs: [x], grads: [g], attrs }) => [one(b, 'gelu_backward', [g as GradRef, x as GradRef], attrs)], geluAttrs),
  bwd('gelu_backward', 'grad of gelu: (grad_out, x) -> grad_out * (Phi(x) + x phi(x)), or the tanh form\'s derivative', geluGrad, geluAttrs),
  bwd('silu_backward', 'grad of silu: (grad_out, x) -> grad_out * s * (1 + x (1 - s)), s = sigmoid(x)', (alg, g, x) => {
    const s = alg.fn('sigmoid', x);
    return alg.mul(g, alg.mul(s, alg.add(alg.one, alg.mul(x, alg.sub(alg.one, s)))));
  }),
  bwd('tanh_backward', 'grad of tanh: (grad_out, y) -> grad_out * (1 - y^2), y = tanh(x)', (alg, g, y) => alg.mul(g, alg.sub(alg.one, alg.mul(y, y)))),
  bwd('sigmoid_backward', 'grad of sigmoid: (grad_out, y) -> grad_out * y * (1 - y), y = sigmoid(x)', (alg, g, y) => alg.mul(g, alg.mul(y, alg.sub(alg.one, y)))),
  {
    name: 'swiglu',
    family: 'activation',
    doc: 'SwiGLU gate: silu(gate) * up (the Llama MLP: down(silu(x W_gate) * x W_up))',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => {
      if (!sameShape(a as Shape, b as Shape)) throw new ShapeError(`gate ${shapeStr(a as Shape)} and up ${shapeStr(b as Shape)} differ`);
      return [a as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [zipWith([arg(ins, 0), arg(ins, 1)], ([a, b]) => alg.mul(alg.mul(a as S, alg.fn('sigmoid', a as S)), b as S))],
    backward: (b, { inputs: [gate, up], grads: [g] }) => [
      one(b, 'silu_backward', [one(b, 'mul', [g as GradRef, up as GradRef]), gate as GradRef]),
      one(b, 'mul', [g as GradRef, one(b, 'silu', [gate as GradRef])]),
    ],
    dims: ([a]) => sameShapeSig(a as Shape, 2, 1),
  },
],
// Zero extension (OpDef.zeroTails): f(0) = 0 for these, not for exp, log or sigmoid (swiglu is silu(gate) * up: zero when either is).
{ tanh: ZERO_ALWAYS, sqrt: ZERO_ALWAYS, silu: ZERO_ALWAYS, gelu: ZERO_ALWAYS, swiglu: ZERO_ALWAYS });
