/**
 * Piecewise activations (issue 33): `nn.LeakyReLU(0.2, inplace=True)` (the DCGAN tutorial's),
 * `nn.Hardtanh` / `nn.ReLU6` (MobileNet's) and `nn.ELU`, forward, in place and backward. Each
 * rule lowers to planproof ops whose exact real meaning is the ATen kernel's value
 * (docs/import.md):
 *
 *   leaky_relu(x; s)          = max(x, 0) + s·min(x, 0)      (kernel: x > 0 ? x : x·s)
 *   leaky_relu_backward(g, x) = g·(s + (1 − s)·[x > 0])      (kernel: x > 0 ? g : g·s; x may be
 *                               the output when the forward ran in place: same sign for s ≥ 0)
 *   hardtanh(x; lo, hi)       = min(max(x, lo), hi)
 *   hardtanh_backward(g, x)   = g·[x > lo]·[x < hi]          (kernel: x <= lo || x >= hi ? 0 : g)
 *   elu(x; a, s, i)           = s·max(x, 0) + a·s·(exp(i·min(x, 0)) − 1)
 *                               (kernel: x > 0 ? s·x : a·s·(exp(i·x) − 1))
 *   elu_backward(g, x)        = g·(s·[x > 0] + a·s·i·exp(i·min(x, 0))·[x <= 0])
 *   elu_backward(g, y), y the output (is_result)
 *                             = g·(s·[y > 0] + i·(min(y, 0) + a·s)·[y <= 0])
 *                               (kernel: y <= 0 ? g·i·(y + a·s) : g·s; y > 0 exactly where x > 0
 *                               for a > 0, refused otherwise)
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

/** [x rel c] as a boolean tensor. */
function cmp(l: Lowerer, x: TensorVal, rel: 'gt' | 'lt' | 'le', c: number): TensorVal {
  return l.one('compare', [x, l.constant(c)], { rel }, undefined, 'bool');
}

function hardtanh(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  const x = l.tensor(n.args[0], 'self');
  const lo = l.num(l.arg(n, 1, 'min_val'), 'min_val', -1);
  const hi = l.num(l.arg(n, 2, 'max_val'), 'max_val', 1);
  if (!(lo <= hi)) l.fail(`${n.target}: min_val ${lo} above max_val ${hi}`);
  const y = l.one('minimum', [l.one('maximum', [x, l.constant(lo)], {}, undefined, x.dtype), l.constant(hi)], {}, l.out(n), x.dtype);
  if (inPlace) l.write(n.args[0], y);
  return l.bind(n, y);
}

/** ELU's alpha, scale and input_scale (positions 1-3 of elu and of elu_backward after grad). */
function eluCoefs(l: Lowerer, n: FxNode, first: number): { a: number; s: number; i: number } {
  return { a: l.num(l.arg(n, first, 'alpha'), 'alpha', 1), s: l.num(l.arg(n, first + 1, 'scale'), 'scale', 1), i: l.num(l.arg(n, first + 2, 'input_scale'), 'input_scale', 1) };
}

function elu(l: Lowerer, n: FxNode, inPlace: boolean): Val {
  const x = l.tensor(n.args[0], 'self');
  const { a, s, i } = eluCoefs(l, n, 1);
  const neg = l.one('exp', [l.one('scale', [l.one('minimum', [x, l.constant(0)], {}, undefined, x.dtype)], { factor: i })], {}, undefined, x.dtype);
  const y = l.one('add', [l.one('scale', [l.one('maximum', [x, l.constant(0)], {}, undefined, x.dtype)], { factor: s }), l.one('scale', [l.one('add', [neg, l.constant(-1)], {}, undefined, x.dtype)], { factor: a * s })], {}, l.out(n), x.dtype);
  if (inPlace) l.write(n.args[0], y);
  return l.bind(n, y);
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
    const factor = l.one('add', [l.constant(s), l.one('scale', [cmp(l, x, 'gt', 0)], { factor: 1 - s }, undefined, g.dtype)], {}, undefined, g.dtype);
    return l.bind(n, l.one('mul', [g, factor], {}, l.out(n), g.dtype));
  },
  'aten.hardtanh': (l, n) => hardtanh(l, n, false),
  'aten.hardtanh_': (l, n) => hardtanh(l, n, true),
  'aten.hardtanh_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const lo = l.num(n.args[2], 'min_val');
    const hi = l.num(n.args[3], 'max_val');
    const inside = l.one('mul', [cmp(l, x, 'gt', lo), cmp(l, x, 'lt', hi)], {}, undefined, 'bool');
    return l.bind(n, l.one('mul', [g, inside], {}, l.out(n), g.dtype));
  },
  'aten.elu': (l, n) => elu(l, n, false),
  'aten.elu_': (l, n) => elu(l, n, true),
  'aten.elu_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const { a, s, i } = eluCoefs(l, n, 1);
    const isResult = l.bool(n.args[4], 'is_result', false);
    const x = l.tensor(n.args[5], 'self_or_result');
    const pos = l.one('scale', [cmp(l, x, 'gt', 0)], { factor: s }, undefined, g.dtype);
    const minX = l.one('minimum', [x, l.constant(0)], {}, undefined, x.dtype);
    let negSlope: TensorVal;
    if (isResult) {
      // y <= 0 exactly where x <= 0 only for a > 0 (then y = a·s·(exp(i·x) − 1) has x's sign, s > 0 assumed by torch).
      if (!(a > 0 && s > 0)) l.fail(`${n.target}: the output saved (in-place ELU) with alpha ${a} or scale ${s} not positive is not supported`);
      negSlope = l.one('scale', [l.one('add', [minX, l.constant(a * s)], {}, undefined, x.dtype)], { factor: i });
    } else {
      negSlope = l.one('scale', [l.one('exp', [l.one('scale', [minX], { factor: i })], {}, undefined, x.dtype)], { factor: a * s * i });
    }
    const neg = l.one('mul', [negSlope, cmp(l, x, 'le', 0)], {}, undefined, g.dtype);
    return l.bind(n, l.one('mul', [g, l.one('add', [pos, neg], {}, undefined, g.dtype)], {}, l.out(n), g.dtype));
  },
};
