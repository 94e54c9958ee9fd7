/**
 * Random samples drawn inside the traced step (issue 33): `torch.randn_like` / `torch.rand_like`
 * / `torch.randn` / `torch.rand`, as a VAE's reparameterization draws its noise
 * (`eps = torch.randn_like(std)`). A sample is an input of the plan (`<node>.sample`), like a
 * dropout mask (aten.ts `bernoulli_`): the plan is proved for every value of it, and with
 * "dropout": "auto" the ranks' samples are paired by order with the logical run's, each rank's
 * the slice its shape gives (plans/import/plan.ts), so the claim is that the distributed program
 * computes what the single device computes when each rank draws its part of the single device's
 * noise. Which numbers a generator produces is never read: nothing here depends on the seed.
 * The in-place samplers (`exponential_`, `normal_`, `uniform_`) fill their tensor with such an input.
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, Rule, TensorVal, Val } from './lower.js';

/** A fresh plan input of the given shape for the sample the node draws. */
function sampleTensor(l: Lowerer, n: FxNode, shape: readonly number[]): TensorVal {
  const dtype = n.type?.dtype ?? 'float32';
  if (!dtype.startsWith('float') && dtype !== 'bfloat16') l.fail(`${n.target}: a sample of dtype ${dtype} is not supported (floating samples only)`);
  const id = `${l.out(n)}.sample`;
  const t = l.addTensor(id, [...shape], dtype);
  l.extra.push({ id, shape: [...shape], dtype, line: n.line });
  return t;
}

const sample = (l: Lowerer, n: FxNode, shape: readonly number[]): Val => l.bind(n, sampleTensor(l, n, shape));

/**
 * An in-place sampler (`torch.empty_like(x).exponential_()` in `F.gumbel_softmax`,
 * `w.normal_()`, `u.uniform_()`): the tensor it fills, or the uninitialized memory it writes,
 * now holds a fresh sample input, as bernoulli_ fills a dropout mask (aten.ts).
 */
function sampleInPlace(l: Lowerer, n: FxNode): Val {
  const d = l.val(n.args[0], 'self');
  const shape = d.kind === 'tensor' ? d.shape : d.kind === 'opaque' && d.what === 'uninitialized memory' ? (JSON.parse(String(d.data['shape'])) as number[]) : l.fail(`${n.target} on something that is not a tensor`);
  const t = sampleTensor(l, n, shape);
  l.write(n.args[0], t);
  return l.bind(n, t);
}

export const SAMPLE_RULES: Record<string, Rule> = {
  'aten.exponential_': sampleInPlace,
  'aten.normal_': sampleInPlace,
  'aten.uniform_': sampleInPlace,
  'aten.randn_like': (l, n) => sample(l, n, l.tensor(n.args[0], 'self').shape),
  'aten.rand_like': (l, n) => sample(l, n, l.tensor(n.args[0], 'self').shape),
  'aten.randn': (l, n) => sample(l, n, l.ints(n.args[0], 'size')),
  'aten.rand': (l, n) => sample(l, n, l.ints(n.args[0], 'size')),
};
