/**
 * Activations of GAN code (issue 33): `nn.LeakyReLU(0.2, inplace=True)` (the DCGAN tutorial's),
 * forward, in place and backward (`hardtanh` / `nn.ReLU6` and `elu` are not here yet: exit 2).
 * Each rule lowers to planproof ops whose exact real meaning is the ATen kernel's value
 * (docs/import.md):
 *
 *   leaky_relu(x; s)          = max(x, 0) + s·min(x, 0)      (kernel: x > 0 ? x : x·s)
 *   leaky_relu_backward(g, x) = g·(s + (1 − s)·[x > 0])      (kernel: x > 0 ? g : g·s; x may be
 *                               the output when the forward ran in place: same sign for s ≥ 0)
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, Rule, TensorVal, Val } from './lower.js';

function leaky(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  const x = l.tensor(n.args[0], 'self');
  const s = l.num(l.arg(n, 1, 'negative_slope'), 'negative_slope', 0.01);
  const y = l.one('add', [l.one('maximum', [x, l.constant(0)]), l.one('scale', [l.one('minimum', [x, l.constant(0)])], { factor: s })], {}, l.out(n));
  if (inPlace) l.write(n.args[0], y);
  return l.bind(n, y);
}

function gt(l: Lowerer, x: TensorVal, c: number): TensorVal {
  return l.one('compare', [x, l.constant(c)], { rel: 'gt' }, undefined, 'bool');
}

export const ACT_RULES: Record<string, Rule> = {
  'aten.leaky_relu': (l, n) => leaky(l, n, false),
  'aten.leaky_relu_': (l, n) => leaky(l, n, true),
  'aten.leaky_relu_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const s = l.num(n.args[2], 'negative_slope');
    // (with self_is_result, x is the output: for s ≥ 0 it is positive exactly where the input was)
    if (s < 0 && n.args[3] !== undefined && l.bool(n.args[3], 'self_is_result', false)) l.fail(`${n.target}: a negative slope with the output saved is not supported`);
    const factor = l.one('add', [l.constant(s), l.one('scale', [gt(l, x, 0)], { factor: 1 - s }, undefined, g.dtype)], {}, undefined, g.dtype);
    return l.bind(n, l.one('mul', [g, factor], {}, l.out(n), g.dtype));
  },
};
