/**
 * Reduction constraints (OpDef.dims) are checked, not trusted:
 * - structurally, for every op: one label per dim of every input and output, equal labels on
 *   equal sizes, one role per label, integer-value axes never 'batch';
 * - semantically, for every sample: every 'batch' label is really SIMD. Restricting the
 *   inputs to index i along that label's dims and re-running the op (Float64) gives exactly
 *   the full outputs restricted the same way (outputs without the label must not change), at
 *   every index, and for all batch labels at once. Collectives are also run as groups of two.
 * - every 'contracted' label fails that same check (so the check can fail, and contracted
 *   labels are not SIMD dims given away).
 */
import { strict as assert } from 'node:assert';
import type { Dense } from '../ops/algebra.js';
import { cat, narrow } from '../ops/dense.js';
import { reshapeRegions } from '../ops/layout.js';
import { registry } from '../ops/registry.js';
import { type Attrs, type DecompExpr, type DimLabel, type DimSig, type OpDef, ShapeError, type Shape } from '../ops/types.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { mulberry32 } from '../stages/witness/numeric.js';

interface Sample {
  op: string;
  shapes: number[][];
  attrs?: Attrs;
  /** Inputs drawn from (1/2, 3/2) (denominators, logs, second moments, positive sums). */
  positive?: number[];
  /** Integer inputs: input index -> the values drawn from. */
  ints?: Record<number, number[]>;
  /** Both the shape rule and dims() must reject this sample with a ShapeError matching it. */
  rejects?: RegExp;
}

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
const adam = { lr: '1/10', beta1: '9/10', beta2: '99/100', eps: '1/1000', step: 2 };

const samples: Sample[] = [
  // elementwise (with broadcasting)
  { op: 'add', shapes: [[2, 3], [3]] },
  { op: 'add', shapes: [[2, 1], [2, 3]] },
  { op: 'sub', shapes: [[2, 1], [1, 3]] },
  { op: 'mul', shapes: [[3], [2, 3]] },
  { op: 'div', shapes: [[2, 3], [2, 1]], positive: [1] },
  { op: 'where', shapes: [[2, 1], [2, 3], [3]], ints: { 0: [0, 1] } },
  { op: 'neg', shapes: [[2, 3]] },
  { op: 'maximum', shapes: [[2, 3], [3]] },
  { op: 'minimum', shapes: [[2, 1], [2, 3]] },
  { op: 'compare', shapes: [[2, 3], [3]], attrs: { rel: 'ge' } },
  { op: 'compare', shapes: [[3], [3]], attrs: { rel: 'eq' }, ints: { 0: [0, 1, 2], 1: [0, 1, 2] } },
  { op: 'iota', shapes: [[]], attrs: { shape: [2, 3], dim: 0, step: '1/2' } },
  { op: 'assert_mask', shapes: [[2, 3], [2, 1]], ints: { 1: [1] } },
  { op: 'identity', shapes: [[3, 2]] },
  { op: 'scale', shapes: [[2, 2]], attrs: { factor: '-1/3' } },
  // activation
  { op: 'exp', shapes: [[2, 3]] },
  { op: 'log', shapes: [[3]], positive: [0] },
  { op: 'sqrt', shapes: [[2, 3]], positive: [0] },
  { op: 'tanh', shapes: [[3]] },
  { op: 'sigmoid', shapes: [[3]] },
  { op: 'silu', shapes: [[2, 2]] },
  { op: 'gelu', shapes: [[4]], attrs: { approximate: 'none' } },
  { op: 'gelu', shapes: [[2, 2]], attrs: { approximate: 'tanh' } },
  { op: 'gelu_backward', shapes: [[2, 3], [2, 3]], attrs: { approximate: 'tanh' } },
  { op: 'silu_backward', shapes: [[2, 3], [2, 3]] },
  { op: 'tanh_backward', shapes: [[3], [3]] },
  { op: 'sigmoid_backward', shapes: [[3], [3]] },
  { op: 'swiglu', shapes: [[2, 3], [2, 3]] },
  { op: 'dropout', shapes: [[2, 3], [2, 3]], attrs: { p: '1/4' }, ints: { 1: [0, 1] } },
  // matmul
  { op: 'matmul', shapes: [[2, 3], [3, 4]] },
  { op: 'matmul', shapes: [[3], [3, 2]] },
  { op: 'matmul', shapes: [[2, 3], [3]] },
  { op: 'matmul', shapes: [[3], [3]] },
  { op: 'matmul', shapes: [[2, 2, 3], [3, 4]] },
  { op: 'matmul', shapes: [[2, 1, 2, 3], [3, 3, 2]] },
  { op: 'linear', shapes: [[2, 3], [4, 3], [4]] },
  { op: 'linear', shapes: [[2, 2, 3], [4, 3]] },
  // reduce
  { op: 'sum', shapes: [[2, 3, 4]], attrs: { dims: [1] } },
  { op: 'sum', shapes: [[2, 3]], attrs: { keepdim: true } },
  { op: 'sum', shapes: [[2, 3, 4]], attrs: { dims: [0, -1], keepdim: true } },
  { op: 'mean', shapes: [[2, 3, 4]], attrs: { dims: [0, -1] } },
  { op: 'mean', shapes: [[2, 3]], attrs: { dims: [1], keepdim: true } },
  { op: 'amax', shapes: [[2, 3]], attrs: { dims: [1] } },
  { op: 'amax', shapes: [[2, 3, 2]] },
  { op: 'softmax', shapes: [[2, 4]], attrs: { dim: 1 } },
  { op: 'softmax', shapes: [[3, 2, 2]], attrs: { dim: 0 } },
  { op: 'log_softmax', shapes: [[2, 4]], attrs: { dim: -1 } },
  { op: 'softmax_backward', shapes: [[2, 3], [2, 3]], attrs: { dim: 0 } },
  { op: 'expand', shapes: [[3, 1]], attrs: { shape: [2, 3, 4] } },
  { op: 'expand', shapes: [[3, 1]], attrs: { shape: [-1, 4] } },
  { op: 'expand', shapes: [[2, 3]], attrs: { shape: [2, -1] } },
  // layout
  { op: 'transpose', shapes: [[2, 3, 4]], attrs: { dim0: 0, dim1: 2 } },
  { op: 'transpose', shapes: [[2, 3]], attrs: { dim0: -1, dim1: -2 } },
  { op: 'permute', shapes: [[2, 3, 4]], attrs: { dims: [2, 0, 1] } },
  { op: 'reshape', shapes: [[2, 6]], attrs: { shape: [3, -1] } },
  { op: 'slice', shapes: [[2, 5]], attrs: { dim: 1, start: 1, end: 3 } },
  { op: 'pad', shapes: [[2, 3]], attrs: { dim: -1, before: 1, after: 2 } },
  { op: 'concat', shapes: [[2, 3], [1, 3]], attrs: { dim: 0 } },
  { op: 'split', shapes: [[5, 2]], attrs: { dim: 0, sizes: [2, 3] } },
  // norm
  { op: 'layer_norm', shapes: [[2, 4], [4], [4]], attrs: { eps: '1/100' } },
  { op: 'layer_norm', shapes: [[2, 2, 3]], attrs: { eps: '1/10', normalized_dims: 2 } },
  { op: 'layer_norm_backward', shapes: [[2, 4], [2, 4], [4]], attrs: { eps: '1/100' } },
  { op: 'layer_norm_backward', shapes: [[3, 2], [3, 2]], attrs: { eps: '1/100' } },
  { op: 'rms_norm', shapes: [[3, 4], [4]], attrs: { eps: '1/100' } },
  { op: 'rms_norm', shapes: [[2, 3]], attrs: { eps: '1/1000' } },
  { op: 'rms_norm_backward', shapes: [[3, 4], [3, 4], [4]], attrs: { eps: '1/100' } },
  { op: 'rms_norm_backward', shapes: [[2, 2, 3], [2, 2, 3]], attrs: { eps: '1/100', normalized_dims: 2 } },
  // attention
  { op: 'attention', shapes: [[2, 3, 2], [1, 3, 2], [1, 3, 2]], attrs: { causal: true } },
  { op: 'attention', shapes: [[2, 2, 3, 2], [2, 2, 4, 2], [2, 2, 4, 3]], attrs: { scale: '1/2' } },
  { op: 'attention', shapes: [[2, 2, 2], [2, 3, 2], [2, 3, 2]] },
  // Grouped-query heads, 4 query heads over 2 kv heads (DimSig.grouped bites).
  { op: 'attention', shapes: [[4, 3, 2], [2, 3, 2], [2, 3, 2]], attrs: { causal: true } },
  { op: 'attention_backward', shapes: [[4, 3, 2], [4, 3, 2], [2, 3, 2], [2, 3, 2], [4, 3, 2]], attrs: { causal: true } },
  { op: 'attention_backward', shapes: [[2, 2, 3], [2, 2, 2], [2, 3, 2], [2, 3, 3], [2, 2, 3]], attrs: { scale: '1/2' } },
  { op: 'attention_backward', shapes: [[2, 3, 2], [2, 3, 2], [1, 3, 2], [1, 3, 2], [2, 3, 2]], attrs: { causal: true } },
  { op: 'attention_partial_backward', shapes: [[2, 2, 3], [2, 2, 2], [2, 3, 2], [2, 3, 3], [2, 2, 3], [2, 2], [2, 2]], attrs: { scale: '1/2' } },
  { op: 'attention_partial_backward', shapes: [[2, 3, 2], [2, 3, 2], [1, 3, 2], [1, 3, 2], [2, 3, 2], [2, 3], [2, 3]], attrs: { causal: true, q_offset: 1 } },
  { op: 'attention_partial', shapes: [[2, 2, 2], [2, 3, 2], [2, 3, 2]], attrs: { scale: '1/3' } },
  { op: 'attention_partial', shapes: [[2, 2, 2], [2, 3, 2], [2, 3, 2]], attrs: { causal: true, q_offset: 1 } },
  { op: 'attention_combine', shapes: [[2, 3, 2], [2, 3], [2, 3], [2, 3, 2], [2, 3], [2, 3]], positive: [2, 5] },
  // collectives
  { op: 'all_reduce', shapes: [[2, 3]], attrs: { reduce: 'sum' } },
  { op: 'all_reduce', shapes: [[2, 3]], attrs: { reduce: 'max' } },
  { op: 'all_gather', shapes: [[2, 3]], attrs: { dim: 1 } },
  { op: 'reduce_scatter', shapes: [[4, 3]], attrs: { dim: 0, reduce: 'avg' } },
  { op: 'all_to_all', shapes: [[4, 2, 3]], attrs: { split_dim: 0, concat_dim: 2 } },
  { op: 'all_to_all', shapes: [[2, 4]], attrs: { split_dim: 1, concat_dim: 1 } },
  { op: 'broadcast', shapes: [[2, 3]], attrs: { src: 0 } },
  { op: 'broadcast', shapes: [], attrs: { src: 0 }, rejects: /comes from the source rank/ },
  { op: 'send', shapes: [[2, 3]] },
  { op: 'recv', shapes: [], rejects: /comes from the matching send/ },
  { op: 'send_recv', shapes: [[2, 3]] },
  // indexing
  { op: 'embedding', shapes: [[2, 3], [4, 2]], ints: { 0: range(4) } },
  { op: 'embedding_backward', shapes: [[2, 3, 2], [2, 3]], attrs: { num_embeddings: 4 }, ints: { 1: range(4) } },
  { op: 'gather', shapes: [[2, 4], [2, 3]], ints: { 1: range(4) } },
  { op: 'gather_backward', shapes: [[2, 3], [2, 3]], attrs: { size: 4 }, ints: { 1: range(4) } },
  { op: 'vocab_mask', shapes: [[2, 3]], attrs: { start: 2, end: 4 }, ints: { 0: range(6) } },
  { op: 'vocab_local_ids', shapes: [[2, 3]], attrs: { start: 2, end: 4 }, ints: { 0: range(6) } },
  // loss
  { op: 'cross_entropy', shapes: [[4, 3], [4]], attrs: { reduction: 'mean' }, ints: { 1: [-100, 0, 1, 2] } },
  { op: 'cross_entropy', shapes: [[3, 3], [3]], attrs: { reduction: 'none', ignore_index: 1 }, ints: { 1: range(3) } },
  { op: 'cross_entropy', shapes: [[3, 4], [3]], attrs: { reduction: 'sum' }, ints: { 1: range(4) } },
  { op: 'cross_entropy_backward', shapes: [[], [4, 3], [4]], ints: { 2: range(3) } },
  { op: 'cross_entropy_backward', shapes: [[3], [3, 3], [3]], attrs: { reduction: 'none' }, ints: { 2: range(3) } },
  { op: 'cross_entropy_backward', shapes: [[], [3, 4], [3]], attrs: { reduction: 'sum' }, ints: { 2: range(4) } },
  { op: 'mse_loss', shapes: [[3, 2], [3, 2]], attrs: { reduction: 'mean' } },
  { op: 'mse_loss', shapes: [[3, 2], [3, 2]], attrs: { reduction: 'sum' } },
  { op: 'mse_loss_backward', shapes: [[3, 2], [3, 2], []], attrs: { reduction: 'mean' } },
  { op: 'mse_loss_backward', shapes: [[3, 2], [3, 2]], attrs: { reduction: 'sum' } },
  // moe
  { op: 'topk', shapes: [[2, 4]], attrs: { k: 2 } },
  { op: 'topk', shapes: [[2, 3, 4]], attrs: { k: 1 } },
  { op: 'moe_dispatch', shapes: [[3, 2], [3, 2]], attrs: { experts: 3 }, ints: { 1: range(3) } },
  { op: 'moe_dispatch', shapes: [[3, 2], [3, 2], [3, 2]], attrs: { experts: 3 }, ints: { 1: range(3) } },
  { op: 'moe_gather', shapes: [[3, 4, 2], [2, 2]], ints: { 1: range(3) } },
  { op: 'moe_combine', shapes: [[2, 4, 3], [2, 2], [2, 2]], ints: { 1: range(2) } },
  { op: 'moe_combine', shapes: [[2, 2, 3], [2, 1]], ints: { 1: range(2) } },
  // optim
  { op: 'sgd_update', shapes: [[2, 3], [2, 3]], attrs: { lr: '1/10', weight_decay: '1/100' } },
  { op: 'sgd_momentum_update', shapes: [[2, 3], [2, 3], [2, 3]], attrs: { lr: '1/10', momentum: '9/10', nesterov: true } },
  { op: 'adam_update', shapes: [[2, 3], [2, 3], [2, 3], [2, 3]], attrs: { ...adam, weight_decay: '1/100', decoupled_weight_decay: true }, positive: [3] },
  { op: 'clip_coef', shapes: [[]], attrs: { max_norm: 1 }, positive: [0] },
  // max_norm small, so the clip factor is below 1 (a saturated min would hide the coupling).
  { op: 'clip_grad_norm', shapes: [[2, 3], [4]], attrs: { max_norm: '1/10' } },
  // position
  { op: 'rope', shapes: [[2, 3, 4], [3, 4], [3, 4]] },
  { op: 'rope', shapes: [[2, 2], [1, 2], [2, 2]] },
];

type Num = Dense<number>;

function numelOf(s: Shape): number {
  return s.reduce((p, v) => p * v, 1);
}

function defOf(name: string): OpDef {
  const id = registry.id(name);
  assert.ok(id >= 0, `unknown op ${name}`);
  return registry.get(id);
}

function title(s: Sample): string {
  return `${s.op} ${JSON.stringify(s.shapes)}${s.attrs === undefined ? '' : ` ${JSON.stringify(s.attrs)}`}`;
}

function inputsOf(s: Sample, seed: number): Num[] {
  const rnd = mulberry32(seed);
  const draw = (i: number): number => {
    const dom = s.ints?.[i];
    if (dom !== undefined) return dom[Math.floor(rnd() * dom.length)] as number;
    return s.positive?.includes(i) ? 0.5 + rnd() : rnd() * 2 - 1;
  };
  return s.shapes.map((shape, i) => ({ shape, data: Array.from({ length: numelOf(shape) }, () => draw(i)) }));
}

/** Every label's size and role in a signature, checking that they agree wherever it appears. */
function labelTable(sig: DimSig, inShapes: readonly Shape[], outShapes: readonly Shape[]): Map<string, { size: number; role: DimLabel['role'] }> {
  const table = new Map<string, { size: number; role: DimLabel['role'] }>();
  const visit = (labels: readonly DimLabel[], shape: Shape, where: string): void => {
    assert.equal(labels.length, shape.length, `${where}: ${labels.length} labels for a rank-${shape.length} tensor`);
    labels.forEach((l, d) => {
      const size = shape[d] as number;
      const seen = table.get(l.label);
      if (seen === undefined) {
        table.set(l.label, { size, role: l.role });
        return;
      }
      assert.equal(size, seen.size, `${where} dim ${d}: label '${l.label}' has size ${size} here and ${seen.size} elsewhere`);
      assert.equal(l.role, seen.role, `${where} dim ${d}: label '${l.label}' is '${l.role}' here and '${seen.role}' elsewhere`);
    });
  };
  assert.equal(sig.inputs.length, inShapes.length, `labels for ${sig.inputs.length} inputs, the op has ${inShapes.length}`);
  assert.equal(sig.outputs.length, outShapes.length, `labels for ${sig.outputs.length} outputs, the op has ${outShapes.length}`);
  sig.inputs.forEach((l, i) => visit(l, inShapes[i] as Shape, `input ${i}`));
  sig.outputs.forEach((l, i) => visit(l, outShapes[i] as Shape, `output ${i}`));
  const values = (m: DimSig['inputValues'], n: number, where: string): void => {
    for (const [k, l] of Object.entries(m ?? {})) {
      assert.ok(Number(k) >= 0 && Number(k) < n, `${where} values: no ${where} ${k}`);
      assert.notEqual(l.role, 'batch', `${where} ${k}: its values index axis '${l.label}', which cannot be batch`);
      const seen = table.get(l.label);
      if (seen !== undefined) assert.equal(l.role, seen.role, `values axis '${l.label}' is '${l.role}' there and '${seen.role}' on the dims`);
    }
  };
  values(sig.inputValues, inShapes.length, 'input');
  values(sig.outputValues, outShapes.length, 'output');
  return table;
}

/** x restricted to index pick[label] along every dim carrying a picked label. */
function restrict(x: Num, labels: readonly DimLabel[], pick: ReadonlyMap<string, number>): Num {
  let y = x;
  labels.forEach((l, d) => {
    const i = pick.get(l.label);
    if (i !== undefined) y = narrow(y, d, i, i + 1);
  });
  return y;
}

/** The first difference between two output lists, or undefined. Exact: same terms, same order. */
function firstDiff(got: readonly Num[], want: readonly Num[]): string | undefined {
  if (got.length !== want.length) return `${got.length} outputs, expected ${want.length}`;
  for (let k = 0; k < want.length; k++) {
    const g = got[k] as Num;
    const w = want[k] as Num;
    if (g.shape.length !== w.shape.length || g.shape.some((v, d) => v !== w.shape[d])) return `output ${k} has shape [${g.shape.join(', ')}], expected [${w.shape.join(', ')}]`;
    for (let j = 0; j < w.data.length; j++) {
      if (!Object.is(g.data[j], w.data[j])) return `output ${k} element ${j}: ${g.data[j]} vs ${w.data[j]}`;
    }
  }
  return undefined;
}

/** x restricted to [start, end) along every dim carrying a label in `ranges`. */
function restrictRanges(x: Num, labels: readonly DimLabel[], ranges: ReadonlyMap<string, readonly [number, number]>): Num {
  let y = x;
  labels.forEach((l, d) => {
    const r = ranges.get(l.label);
    if (r !== undefined) y = narrow(y, d, r[0], r[1]);
  });
  return y;
}

/**
 * Whether the op is a plain sum over `label`: run on [0, 1) and [1, size) of it, the outputs
 * without the label add up to the full ones (to rounding: the order of the sum changes) and
 * the outputs with it are the matching slices.
 */
function sumsDiff(s: Sample, def: OpDef, sig: DimSig, label: string, seed: number, comb: 'sum' | 'max' = 'sum'): string | undefined {
  const attrs = s.attrs ?? {};
  const inputs = inputsOf(s, seed);
  const size = (() => {
    for (let i = 0; i < sig.inputs.length; i++) {
      const d = (sig.inputs[i] as DimLabel[]).findIndex((l) => l.label === label);
      if (d >= 0) return (s.shapes[i] as number[])[d] as number;
    }
    return 0;
  })();
  if (size < 2) return `'${label}' has size ${size}: pick a sample where it is >= 2`;
  const full = def.apply(floatAlgebra, inputs, attrs);
  const parts = ([[0, 1], [1, size]] as const).map((rg) => {
    const m = new Map([[label, rg]]);
    return { m, out: def.apply(floatAlgebra, inputs.map((x, i) => restrictRanges(x, sig.inputs[i] as DimLabel[], m)), attrs) };
  });
  for (let k = 0; k < full.length; k++) {
    const labels = sig.outputs[k] as DimLabel[];
    const f = full[k] as Num;
    if (labels.some((l) => l.label === label)) {
      for (const p of parts) {
        const d = firstDiff([p.out[k] as Num], [restrictRanges(f, labels, p.m)]);
        if (d !== undefined) return `output ${k} (has '${label}'): ${d}`;
      }
      continue;
    }
    for (let j = 0; j < f.data.length; j++) {
      const vals = parts.map((p) => (p.out[k] as Num).data[j] as number);
      const sum = comb === 'max' ? Math.max(...vals) : vals.reduce((a, b) => a + b, 0);
      const want = f.data[j] as number;
      if (Math.abs(sum - want) > 1e-9 * Math.max(1, Math.abs(want))) return `output ${k} element ${j}: the addends combine (${comb}) to ${sum}, the op gives ${want}`;
    }
  }
  return undefined;
}

interface Run {
  readonly what: string;
  readonly inputs: readonly Num[];
  readonly inLabels: readonly (readonly DimLabel[])[];
  readonly outLabels: readonly (readonly DimLabel[])[];
  readonly run: (ins: readonly Num[]) => Num[];
}

/** Whether restricting every picked label to its index commutes with the op; a difference otherwise. */
function simdDiff(r: Run, pick: ReadonlyMap<string, number>): string | undefined {
  const full = r.run(r.inputs);
  const want = full.map((o, k) => restrict(o, r.outLabels[k] as DimLabel[], pick));
  const got = r.run(r.inputs.map((x, i) => restrict(x, r.inLabels[i] as DimLabel[], pick)));
  return firstDiff(got, want);
}

/** The op applied alone, and (for collectives) as a group of two members. */
function runsOf(s: Sample, def: OpDef, sig: DimSig, seed: number): Run[] {
  const attrs = s.attrs ?? {};
  const inputs = inputsOf(s, seed);
  const runs: Run[] = [{ what: 'apply', inputs, inLabels: sig.inputs, outLabels: sig.outputs, run: (ins) => def.apply(floatAlgebra, ins, attrs) }];
  const c = def.collective;
  if (c === undefined || inputs.length === 0 || sig.outputs.length === 0) return runs;
  const group = Int32Array.of(0, 1);
  const present = (xs: readonly (Num | undefined)[]): Num[] => xs.map((x) => {
    assert.ok(x !== undefined, 'a member got no output');
    return x;
  });
  const lin = sig.inputs[0] as DimLabel[];
  const lout = sig.outputs[0] as DimLabel[];
  if (c.pattern === 'symmetric') {
    const second = inputsOf(s, seed + 7919)[0] as Num;
    runs.push({ what: 'group of 2', inputs: [inputs[0] as Num, second], inLabels: [lin, lin], outLabels: [lout, lout], run: (ins) => present(c.applyGroup(floatAlgebra, ins, attrs, group)) });
  } else if (c.pattern === 'broadcast') {
    runs.push({ what: 'group of 2', inputs, inLabels: [lin], outLabels: [lout, lout], run: (ins) => present(c.applyGroup(floatAlgebra, [ins[0], undefined], attrs, group)) });
  } else {
    runs.push({ what: 'pair', inputs, inLabels: [lin], outLabels: [lout], run: (ins) => present(c.applyGroup(floatAlgebra, [ins[0], undefined], attrs, group).slice(1)) });
  }
  return runs;
}

describe('reduction constraints (OpDef.dims)', () => {
  it('every registered op has a sample', () => {
    const covered = new Set(samples.map((s) => s.op));
    assert.deepEqual(
      registry.names().filter((n) => !covered.has(n)),
      [],
    );
  });

  it('the checker catches a mislabeled dim: softmax with its dim called batch', () => {
    const def = defOf('softmax');
    const s: Sample = { op: 'softmax', shapes: [[2, 3]], attrs: { dim: 1 } };
    const wrong: DimSig = { inputs: [[{ label: 'a', role: 'batch' }, { label: 'b', role: 'batch' }]], outputs: [[{ label: 'a', role: 'batch' }, { label: 'b', role: 'batch' }]] };
    const [r] = runsOf(s, def, wrong, 1);
    assert.equal(simdDiff(r as Run, new Map([['a', 1]])), undefined);
    assert.match(String(simdDiff(r as Run, new Map([['b', 1]]))), /output 0 has shape \[2, 1\], expected|element/);
  });

  // The SIMD check cannot see a size used as a constant (1/n); these dims stay fixed by
  // decision (docs/ops.md, "Reduction constraints"), and this pins it.
  it('dims whose size is a constant in the values are fixed, not contracted', () => {
    const roleOf = (op: string, shapes: number[][], attrs: Attrs, input: number, dim: number): string => defOf(op).dims(shapes, attrs).inputs[input]?.[dim]?.role ?? 'missing';
    const cases: [string, number[][], Attrs, number, number, string][] = [
      ['mean', [[2, 3]], { dims: [1] }, 0, 1, 'fixed'],
      ['sum', [[2, 3]], { dims: [1] }, 0, 1, 'contracted'],
      ['layer_norm', [[2, 3]], { eps: '1/10' }, 0, 1, 'fixed'],
      ['rms_norm_backward', [[2, 3], [2, 3]], { eps: '1/10' }, 1, 1, 'fixed'],
      ['mse_loss', [[2, 3], [2, 3]], {}, 0, 0, 'fixed'],
      ['mse_loss', [[2, 3], [2, 3]], { reduction: 'sum' }, 0, 0, 'contracted'],
      ['mse_loss_backward', [[2, 3], [2, 3]], {}, 0, 1, 'fixed'],
      ['cross_entropy', [[2, 3], [2]], {}, 0, 0, 'fixed'],
      ['cross_entropy', [[2, 3], [2]], { reduction: 'sum' }, 0, 0, 'contracted'],
      ['cross_entropy_backward', [[], [2, 3], [2]], {}, 1, 0, 'fixed'],
      ['attention', [[2, 3, 2], [2, 3, 2], [2, 3, 2]], {}, 0, 2, 'fixed'],
      ['attention', [[2, 3, 2], [2, 3, 2], [2, 3, 2]], { scale: '1/2' }, 0, 2, 'contracted'],
    ];
    for (const [op, shapes, attrs, input, dim, role] of cases) assert.equal(roleOf(op, shapes, attrs, input, dim), role, `${op} ${JSON.stringify(attrs)} input ${input} dim ${dim}`);
  });

  it('the linearity and rescale checks can fail: silu is not linear, mean is not 1/2 x sum over 3', () => {
    const silu = defOf('silu');
    const a: Num = { shape: [2], data: [0.5, -1] };
    const [fa] = silu.apply(floatAlgebra, [a], {}) as [Num];
    const [f3] = silu.apply(floatAlgebra, [{ shape: [2], data: [1.5, -3] }], {}) as [Num];
    assert.ok(Math.abs((f3.data[0] as number) - 3 * (fa.data[0] as number)) > 1e-3);
    assert.equal(silu.linearIn, undefined);
    const r = defOf('mean').rescale?.([[2, 3]], { dims: [1] }, [undefined]);
    assert.deepEqual(r, { op: 'sum', attrs: { dims: [1] }, factor: '1/3' });
    const ce = defOf('cross_entropy');
    assert.equal(ce.rescale?.([[3, 4], [3]], { reduction: 'mean', ignore_index: 1 }, [undefined, [0, 1, 2, 3]]), undefined, 'a label may be ignored: the count is not N');
    assert.equal(ce.rescale?.([[3, 4], [3]], { reduction: 'mean' }, [undefined, undefined]), undefined, 'unknown labels may be ignore_index');
    assert.deepEqual(ce.rescale?.([[3, 4], [3]], { reduction: 'mean' }, [undefined, [0, 1, 2, 3]]), { attrs: { reduction: 'sum' }, factor: '1/3' });
  });

  it("the 'sums' check catches a wrong declaration: linear with a bias summed over its input features", () => {
    const s: Sample = { op: 'linear', shapes: [[2, 3], [4, 3], [4]] };
    const def = defOf('linear');
    const sig = def.dims(s.shapes, {});
    assert.equal(sig.sums, undefined, 'a bias is added once per addend: linear with a bias must not declare sums');
    assert.match(String(sumsDiff(s, def, sig, 'in', 5)), /addends combine \(sum\) to/);
    const noBias: Sample = { op: 'linear', shapes: [[2, 3], [4, 3]] };
    assert.deepEqual(def.dims(noBias.shapes, {}).sums, ['in']);
    assert.equal(sumsDiff(noBias, def, def.dims(noBias.shapes, {}), 'in', 5), undefined);
  });

  it('reshape on a slice (reshapeRegions): every accepted region is exactly the local reshape of the local block', () => {
    const pairs: [number[], number[]][] = [
      [[4, 6], [24]],
      [[24], [4, 6]],
      [[4, 6], [4, 2, 3]],
      [[4, 2, 3], [4, 6]],
      [[2, 4, 6], [8, 6]],
      [[8, 6], [2, 4, 6]],
      [[2, 12], [4, 6]],
      [[4, 6], [2, 12]],
      [[1, 4, 6], [4, 6, 1]],
      [[6, 4], [3, 2, 2, 2]],
    ];
    let accepted = 0;
    let refused = 0;
    const reshape = defOf('reshape');
    for (const [a, b] of pairs) {
      const x: Num = { shape: a, data: range(numelOf(a)).map((i) => i + 1) };
      const [full] = reshape.apply(floatAlgebra, [x], { shape: b }) as [Num];
      for (let d = 0; d < a.length; d++) {
        for (let lo = 0; lo < (a[d] as number); lo++) {
          for (let hi = lo + 1; hi <= (a[d] as number); hi++) {
            const reg = a.map((n, i): [number, number] => (i === d ? [lo, hi] : [0, n]));
            const out = reshapeRegions(a, b, reg);
            if (typeof out === 'string') {
              refused++;
              continue;
            }
            accepted++;
            const oreg = out[0] as [number, number][];
            let local = x;
            reg.forEach(([s0, e0], i) => (local = narrow(local, i, s0, e0)));
            const [got] = reshape.apply(floatAlgebra, [local], { shape: oreg.map(([s0, e0]) => e0 - s0) }) as [Num];
            let want = full;
            oreg.forEach(([s0, e0], i) => (want = narrow(want, i, s0, e0)));
            assert.equal(firstDiff([got], [want]), undefined, `${JSON.stringify(a)} -> ${JSON.stringify(b)}, dim ${d} [${lo}, ${hi}) -> ${JSON.stringify(oreg)}`);
          }
        }
      }
    }
    assert.ok(accepted > 50 && refused > 20, `accepted ${accepted}, refused ${refused}: both kinds must occur`);
    // A slice of an inner dim of a merged group is not a block of the merged dim.
    assert.equal(typeof reshapeRegions([4, 6], [24], [[0, 4], [0, 3]]), 'string');
    void cat;
  });

  samples.forEach((s, si) => {
    describe(title(s), () => {
      const def = defOf(s.op);
      const attrs = s.attrs ?? {};

      if (s.rejects !== undefined) {
        it('is rejected by the shape rule and by dims() alike', () => {
          const re = s.rejects as RegExp;
          assert.throws(() => def.shape(s.shapes, attrs), (e: unknown) => e instanceof ShapeError && re.test(e.message));
          assert.throws(() => def.dims(s.shapes, attrs), (e: unknown) => e instanceof ShapeError && re.test(e.message));
        });
        return;
      }

      let sig: DimSig;
      let table: Map<string, { size: number; role: DimLabel['role'] }>;
      before(() => {
        assert.equal(registry.checkAttrs(registry.id(s.op), attrs), undefined, 'sample attributes are invalid');
        sig = def.dims(s.shapes, attrs);
        table = labelTable(sig, s.shapes, def.shape(s.shapes, attrs));
      });

      it('labels every dim consistently; batch and contracted labels are >= 2 here (so the checks bite)', () => {
        for (const [label, { size, role }] of table) {
          if (role !== 'fixed') assert.ok(size >= 2, `${role} label '${label}' has size ${size}: pick a sample where it is >= 2`);
        }
      });

      it("'batch' labels are SIMD: restricting them to any index commutes with the op", () => {
        const batch = [...table].filter(([, v]) => v.role === 'batch');
        for (const r of runsOf(s, def, sig, 100 + si)) {
          const full = r.run(r.inputs);
          full.forEach((o, k) => assert.ok(o.data.every((v) => Number.isFinite(v)), `${r.what}: output ${k} is not finite; fix the sample`));
          for (const [label, { size }] of batch) {
            for (let i = 0; i < size; i++) {
              const d = simdDiff(r, new Map([[label, i]]));
              assert.equal(d, undefined, `${r.what}: '${label}' is labeled batch, but at index ${i}: ${d}`);
            }
          }
          if (batch.length > 1) {
            for (const at of ['first', 'last'] as const) {
              const pick = new Map(batch.map(([label, { size }]) => [label, at === 'first' ? 0 : size - 1]));
              const d = simdDiff(r, pick);
              assert.equal(d, undefined, `${r.what}: all batch labels at their ${at} index: ${d}`);
            }
          }
        }
      });

      it('linearIn: every output is linear in each listed input (sum and scaling), others fixed', () => {
        for (const i of def.linearIn?.(s.shapes.length) ?? []) {
          assert.ok(i >= 0 && i < s.shapes.length && s.ints?.[i] === undefined, `input ${i} cannot be linear`);
          const a = inputsOf(s, 400 + si);
          const b = inputsOf(s, 500 + si)[i] as Num;
          const with_ = (x: Num): Num[] => def.apply(floatAlgebra, a.map((y, j) => (j === i ? x : y)), attrs);
          const xa = a[i] as Num;
          const sum = with_({ shape: xa.shape, data: xa.data.map((v, j) => v + (b.data[j] as number)) });
          const fa = with_(xa);
          const fb = with_(b);
          const twice = with_({ shape: xa.shape, data: xa.data.map((v) => 3 * v) });
          sum.forEach((o, k) => o.data.forEach((v, j) => {
            const want = ((fa[k] as Num).data[j] as number) + ((fb[k] as Num).data[j] as number);
            assert.ok(Math.abs(v - want) <= 1e-9 * Math.max(1, Math.abs(want)), `input ${i}, output ${k}[${j}]: f(a + b) = ${v}, f(a) + f(b) = ${want}`);
            const t = (twice[k] as Num).data[j] as number;
            const w3 = 3 * ((fa[k] as Num).data[j] as number);
            assert.ok(Math.abs(t - w3) <= 1e-9 * Math.max(1, Math.abs(w3)), `input ${i}, output ${k}[${j}]: f(3a) = ${t}, 3 f(a) = ${w3}`);
          }));
        }
      });

      it('movesValues: every output element is one of the input elements', () => {
        if (def.movesValues !== true) return;
        const ins = inputsOf(s, 700 + si);
        const vals = new Set(ins.flatMap((x) => x.data));
        def.apply(floatAlgebra, ins, attrs).forEach((o, k) => o.data.forEach((v, j) => assert.ok(vals.has(v), `output ${k}[${j}] = ${v} is no input element`)));
      });

      it('decompose: the expression computes the op', () => {
        const dec = def.decompose?.(s.shapes.length, attrs, s.shapes, s.shapes.map((_, i) => s.ints?.[i]));
        if (dec === undefined) return;
        const ins = inputsOf(s, 800 + si);
        const evalExpr = (e: DecompExpr): Num => {
          if ('input' in e) return ins[e.input] as Num;
          if ('sum' in e) {
            const xs = e.sum.map(evalExpr);
            return { shape: (xs[0] as Num).shape, data: (xs[0] as Num).data.map((_, j) => xs.reduce((acc, x) => acc + (x.data[j] as number), 0)) };
          }
          return defOf(e.op).apply(floatAlgebra, e.args.map(evalExpr), e.attrs)[e.output ?? 0] as Num;
        };
        const want = def.apply(floatAlgebra, ins, attrs);
        dec.forEach((e, k) => {
          const got = evalExpr(e);
          (want[k] as Num).data.forEach((w, j) => assert.ok(Math.abs((got.data[j] as number) - w) <= 1e-9 * Math.max(1, Math.abs(w)), `output ${k}[${j}]: ${got.data[j]} vs ${w}`));
        });
      });

      it('rescale: the op equals its factor times the rescaled op', () => {
        const r = def.rescale?.(s.shapes, attrs, s.shapes.map((_, i) => s.ints?.[i]));
        if (r === undefined) return;
        const other = defOf(r.op ?? s.op);
        assert.equal(registry.checkAttrs(registry.id(r.op ?? s.op), r.attrs), undefined);
        const ins = inputsOf(s, 600 + si);
        const want = def.apply(floatAlgebra, ins, attrs);
        const m = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(r.factor);
        assert.ok(m !== null, r.factor);
        const f = Number(m[1]) / Number(m[2] ?? '1');
        other.apply(floatAlgebra, ins, r.attrs).forEach((o, k) => o.data.forEach((v, j) => {
          const w = (want[k] as Num).data[j] as number;
          assert.ok(Math.abs(f * v - w) <= 1e-9 * Math.max(1, Math.abs(w)), `output ${k}[${j}]: ${r.factor} x ${v} vs ${w}`);
        }));
      });

      // Tensor-level proofs (stages/engines/tensorlevel/prover.ts) rely on `sums` and `grouped`: checked here.
      it("'sums' labels are plain sums: the op on two ranges of the label gives addends of the outputs without it, slices of those with it", () => {
        for (const label of sig.sums ?? []) {
          const info = table.get(label);
          assert.ok(info !== undefined && info.role === 'contracted', `'${label}' in sums must be a contracted label`);
          assert.equal(sumsDiff(s, def, sig, label, 200 + si), undefined);
        }
      });

      it("'maxes' labels are plain maxima: the op on two ranges of the label gives max-addends of the outputs without it", () => {
        for (const label of sig.maxes ?? []) {
          const info = table.get(label);
          assert.ok(info !== undefined && info.role === 'contracted', `'${label}' in maxes must be a contracted label`);
          assert.equal(sumsDiff(s, def, sig, label, 250 + si, 'max'), undefined);
          // The same ranges combined by a sum do not give the op: the check can fail.
          assert.notEqual(sumsDiff(s, def, sig, label, 250 + si, 'sum'), undefined);
        }
      });

      it('lookup, scatter and vocabRange records say what the op computes', () => {
        const ins = inputsOf(s, 900 + si);
        const out = def.apply(floatAlgebra, ins, attrs)[0] as Num;
        const lk = def.lookup;
        if (lk !== undefined) {
          const idx = ins[lk.index] as Num;
          const tab = ins[lk.table] as Num;
          const C = tab.shape[lk.dim === 'first' ? 0 : tab.shape.length - 1] as number;
          const row = numelOf(tab.shape) / C;
          out.data.forEach((v, j) => {
            // 'append': position p = j / row reads table row idx[p]; 'aligned': element j reads its row's idx[j].
            const want = lk.out === 'append' ? tab.data[(idx.data[Math.floor(j / row)] as number) * row + (j % row)] : tab.data[Math.floor(j / (idx.shape[idx.shape.length - 1] as number)) * C + (idx.data[j] as number)];
            assert.equal(v, want, `element ${j}`);
          });
        }
        const sc = def.scatter;
        if (sc !== undefined) {
          const g = ins[sc.grad] as Num;
          const idx = ins[sc.index] as Num;
          const V = attrs[sc.size] as number;
          const want = new Array<number>(out.data.length).fill(0);
          if (sc.dim === 'first') {
            const row = numelOf(g.shape) / numelOf(idx.shape);
            g.data.forEach((v, j) => {
              const at = (idx.data[Math.floor(j / row)] as number) * row + (j % row);
              want[at] = (want[at] as number) + v;
            });
          } else {
            const m = idx.shape[idx.shape.length - 1] as number;
            g.data.forEach((v, j) => {
              const at = Math.floor(j / m) * V + (idx.data[j] as number);
              want[at] = (want[at] as number) + v;
            });
          }
          out.data.forEach((v, j) => assert.ok(Math.abs(v - (want[j] as number)) < 1e-9, `element ${j}: ${v} vs ${want[j]}`));
        }
        if (def.vocabRange !== undefined) {
          const [st, en] = [attrs['start'] as number, attrs['end'] as number];
          (ins[0] as Num).data.forEach((id, j) => {
            const inside = id >= st && id < en;
            assert.equal(Number(out.data[j]) + 0, def.vocabRange === 'outside' ? (inside ? 0 : 1) : inside ? id - st : 0, `element ${j} (id ${id})`);
          });
        }
      });

      it("'grouped' labels pair blocks: a block of groups with its partner's indices is the op on a slice", () => {
        for (const g of sig.grouped ?? []) {
          const a = table.get(g.label);
          const b = table.get(g.of);
          assert.ok(a !== undefined && b !== undefined && a.size === b.size * g.ratio, `'${g.label}' must be ${g.ratio} x '${g.of}'`);
          for (let j = 0; j < b.size; j++) {
            const ranges = new Map<string, [number, number]>([
              [g.label, [j * g.ratio, (j + 1) * g.ratio]],
              [g.of, [j, j + 1]],
            ]);
            const [r] = runsOf(s, def, sig, 300 + si);
            const run = r as Run;
            const want = run.run(run.inputs).map((o, k) => restrictRanges(o, run.outLabels[k] as DimLabel[], ranges));
            const got = run.run(run.inputs.map((x, i) => restrictRanges(x, run.inLabels[i] as DimLabel[], ranges)));
            assert.equal(firstDiff(got, want), undefined, `group ${j}`);
          }
        }
      });

      it("'contracted' labels are not SIMD: the same check fails for each", () => {
        const contracted = [...table].filter(([, v]) => v.role === 'contracted');
        const [r] = runsOf(s, def, sig, 100 + si);
        for (const [label, { size }] of contracted) {
          const diffs = range(size).map((i) => simdDiff(r as Run, new Map([[label, i]])));
          assert.ok(
            diffs.some((d) => d !== undefined),
            `'${label}' is labeled contracted, but restricting it commutes with the op at every index: it could be batch`,
          );
        }
      });
    });
  });
});
