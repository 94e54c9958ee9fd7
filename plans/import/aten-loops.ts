/**
 * ATen losses of training loops as people write them besides cross-entropy (issue 33):
 * Huber / SmoothL1, binary cross-entropy on probabilities and with logits (with `pos_weight` and `weight`), and
 * `xlogy` (what `F.kl_div` runs). Each rule lowers to planproof ops whose exact real meaning
 * is the ATen kernel's value (docs/import.md, the ATen ops table):
 *
 *   huber(d; δ)     = ½c² + δ(|d| − |c|),  c = clamp(d, −δ, δ), |d| = max(d, −d)
 *                     (= ½d² for |d| < δ, δ(|d| − ½δ) otherwise, the kernel's two branches)
 *   huber'(d; δ)    = clamp(d, −δ, δ)       smooth_l1(d; β) = huber(d; β)/β, its gradient c/β
 *   bce(x, y; p)    = (1 − y)x + (1 + (p − 1)y)·log(1 + exp(−x))
 *                     (the kernel's max-shifted log-sum-exp is the same real number)
 *   bce_p(x, t)     = (t − 1)·max(log(1 − x), −100) − t·max(log x, −100)   (probabilities x)
 *   bce_p'(x, t)    = (x − t) / max((1 − x)·x, 1e-12)     (the kernel's clamps, as written)
 *   xlogy(x, y)     = x·log y, only where y is a softmax output (y > 0, so x = 0 gives 0 as
 *                     the kernel's special case does); any other y is refused.
 * Written with max/min and the field operations only, so no comparison atom is introduced.
 * torch 1.13 differentiates BCE with logits by its autograd formula (sigmoid, sub, mul), so
 * `binary_cross_entropy_with_logits_backward` (torch 2.x) has no rule yet: no capture here
 * could check one against PyTorch's numbers.
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, Rule, TensorVal, Val } from './lower.js';

type Reduction = 'none' | 'mean' | 'sum';

function reductionOf(l: Lowerer, n: FxNode, k: number): Reduction {
  return (['none', 'mean', 'sum'] as const)[l.int(l.arg(n, k, 'reduction'), 'reduction', 1)] ?? l.fail('bad reduction');
}

/** The loss's reduction of the element-wise values `e`, written into the node. */
function reduce(l: Lowerer, n: FxNode, e: TensorVal, r: Reduction): Val {
  if (r === 'none') return l.bind(n, l.one('identity', [e], {}, l.out(n)));
  return l.bind(n, l.one(r === 'mean' ? 'mean' : 'sum', [e], {}, l.out(n)));
}

/** g·e for the backward of a reduction: g broadcast per element, over numel for 'mean'. */
function reduceBack(l: Lowerer, n: FxNode, g: TensorVal, e: TensorVal, r: Reduction): Val {
  const ge = l.one('mul', [e, g]);
  if (r !== 'mean') return l.bind(n, l.one('identity', [ge], {}, l.out(n)));
  const numel = e.shape.reduce((a, b) => a * b, 1);
  return l.bind(n, l.one('div', [ge, l.constant(numel)], {}, l.out(n)));
}

function clampD(l: Lowerer, d: TensorVal, delta: number): TensorVal {
  return l.one('minimum', [l.one('maximum', [d, l.constant(-delta)]), l.constant(delta)]);
}

/** |x| = max(x, −x): exact, and no comparison atom (also the 1- and inf-norms of aten-training.ts). */
export function absOf(l: Lowerer, x: TensorVal, out?: string): TensorVal {
  return l.one('maximum', [x, l.one('neg', [x])], {}, out);
}

/** huber(d; δ) element-wise, unscaled. */
function huberOf(l: Lowerer, d: TensorVal, delta: number): TensorVal {
  const c = clampD(l, d, delta);
  const quad = l.one('scale', [l.one('mul', [c, c])], { factor: 0.5 });
  const lin = l.one('scale', [l.one('sub', [absOf(l, d), absOf(l, c)])], { factor: delta });
  return l.one('add', [quad, lin]);
}

function positive(l: Lowerer, v: number, what: string): number {
  if (!(v > 0) || !Number.isFinite(v)) l.fail(`${what} = ${v}: only a positive finite ${what} is supported (0 is an L1 loss, whose gradient at 0 is a branch)`);
  return v;
}

function diff(l: Lowerer, n: FxNode, k: number): TensorVal {
  const x = l.tensor(n.args[k], 'self');
  const y = l.tensor(n.args[k + 1], 'target');
  if (x.shape.join() !== y.shape.join()) l.fail(`${n.target}: self [${x.shape.join(', ')}] and target [${y.shape.join(', ')}] must have one shape (broadcast targets are refused)`);
  return l.one('sub', [x, y]);
}

/** log(1 + exp(−x)), the softplus of −x. */
function softplusNeg(l: Lowerer, x: TensorVal): TensorVal {
  return l.one('log', [l.one('add', [l.constant(1), l.one('exp', [l.one('neg', [x])])])]);
}

/** Tensors the lowering made by softmax: strictly positive, so xlogy is x·log y there. */
function isSoftmax(l: Lowerer, id: string): boolean {
  for (let i = l.ops.length - 1; i >= 0; i--) {
    const op = l.ops[i];
    if (op === undefined || !op.outputs.includes(id)) continue;
    if (['identity', 'reshape'].includes(op.op) && op.inputs[0] !== undefined) return isSoftmax(l, op.inputs[0]);
    return op.op === 'softmax';
  }
  return false;
}

/**
 * x.zero_() / x.fill_(value): x's shape and dtype (not the node's annotation, which an in-place
 * op may lack), every element the constant, written through x.
 */
function inPlaceFill(l: Lowerer, n: FxNode, value: number): Val {
  const x = l.tensor(n.args[0], 'self');
  const c = x.dtype === 'bool' ? l.one('compare', [l.constant(value), l.constant(0)], { rel: 'ne' }, undefined, 'bool') : l.constant(value);
  const v = l.one('expand', [c], { shape: [...x.shape] }, l.out(n), x.dtype);
  l.write(n.args[0], v);
  return l.bind(n, v);
}

export const LOOPS_RULES: Record<string, Rule> = {
  'aten.huber_loss': (l, n) => {
    const delta = positive(l, l.num(l.arg(n, 3, 'delta'), 'delta', 1), 'delta');
    return reduce(l, n, huberOf(l, diff(l, n, 0), delta), reductionOf(l, n, 2));
  },
  'aten.huber_loss_backward': (l, n) => {
    const delta = positive(l, l.num(l.arg(n, 4, 'delta'), 'delta'), 'delta');
    return reduceBack(l, n, l.tensor(n.args[0], 'grad_output'), clampD(l, diff(l, n, 1), delta), reductionOf(l, n, 3));
  },
  'aten.smooth_l1_loss': (l, n) => {
    const beta = positive(l, l.num(l.arg(n, 3, 'beta'), 'beta', 1), 'beta');
    return reduce(l, n, l.one('div', [huberOf(l, diff(l, n, 0), beta), l.constant(beta)]), reductionOf(l, n, 2));
  },
  'aten.smooth_l1_loss_backward': (l, n) => {
    const beta = positive(l, l.num(l.arg(n, 4, 'beta'), 'beta'), 'beta');
    const c = l.one('div', [clampD(l, diff(l, n, 1), beta), l.constant(beta)]);
    return reduceBack(l, n, l.tensor(n.args[0], 'grad_output'), c, reductionOf(l, n, 3));
  },
  // F.binary_cross_entropy on probabilities (PyTorch's VAE example, sigmoid outputs), as ATen's
  // CPU kernel computes it: (t − 1)·max(log(1 − x), −100) − t·max(log x, −100), times the weight.
  'aten.binary_cross_entropy': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const t = l.tensor(n.args[1], 'target');
    const w = l.optTensor(l.arg(n, 2, 'weight'), 'weight');
    const clampedLog = (v: TensorVal): TensorVal => l.one('maximum', [l.one('log', [v]), l.constant(-100)]);
    const one = l.constant(1);
    let e = l.one('sub', [l.one('mul', [l.one('sub', [t, one]), clampedLog(l.one('sub', [one, x]))]), l.one('mul', [t, clampedLog(x)])]);
    if (w !== undefined) e = l.one('mul', [e, w]);
    return reduce(l, n, e, reductionOf(l, n, 3));
  },
  // Its backward as the kernel: g·(x − t) / max((1 − x)·x, 1e-12), times the weight (over numel for 'mean').
  'aten.binary_cross_entropy_backward': (l, n) => {
    const x = l.tensor(n.args[1], 'self');
    const t = l.tensor(n.args[2], 'target');
    const w = l.optTensor(l.arg(n, 3, 'weight'), 'weight');
    const den = l.one('maximum', [l.one('mul', [l.one('sub', [l.constant(1), x]), x]), l.constant(1e-12)]);
    let e = l.one('div', [l.one('sub', [x, t]), den]);
    if (w !== undefined) e = l.one('mul', [e, w]);
    return reduceBack(l, n, l.tensor(n.args[0], 'grad_output'), e, reductionOf(l, n, 4));
  },
  'aten.binary_cross_entropy_with_logits': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const y = l.tensor(n.args[1], 'target');
    const w = l.optTensor(l.arg(n, 2, 'weight'), 'weight');
    const p = l.optTensor(l.arg(n, 3, 'pos_weight'), 'pos_weight');
    const lw = p === undefined ? l.constant(1) : l.one('add', [l.constant(1), l.one('mul', [l.one('sub', [p, l.constant(1)]), y])]);
    let e = l.one('add', [l.one('mul', [l.one('sub', [l.constant(1), y]), x]), l.one('mul', [lw, softplusNeg(l, x)])]);
    if (w !== undefined) e = l.one('mul', [e, w]);
    return reduce(l, n, e, reductionOf(l, n, 4));
  },
  // optimizer.zero_grad() (torch 1.13's default set_to_none=False) and tensor.fill_(v): the
  // target and every alias of it hold the constant afterwards (Lowerer.write).
  'aten.zero_': (l, n) => inPlaceFill(l, n, 0),
  'aten.fill_': (l, n) => inPlaceFill(l, n, l.num(n.args[1], 'value')),
  'aten.abs': (l, n) => l.bind(n, absOf(l, l.tensor(n.args[0], 'self'), l.out(n))),
  'aten.xlogy': (l, n) => {
    const x = l.operand(n.args[0], 'self');
    const y = l.tensor(n.args[1], 'other');
    // x·log y is the kernel's value where y > 0; a softmax output is, any other y may be 0.
    if (!isSoftmax(l, y.id)) l.fail(`${n.target}: xlogy(x, y) is read only where y is a softmax output (y > 0, so x·log y is its value); write the target as F.softmax(...) (distillation) or give log-probabilities with log_target=True`);
    return l.bind(n, l.one('mul', [x, l.one('log', [y])], {}, l.out(n)));
  },
};
