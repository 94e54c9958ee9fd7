/**
 * Synthetic, valid planproof/v1 plans of any size, for benchmarks.
 *
 * The model is a deep residual MLP trained for one iteration with SGD under data parallelism
 * over a 1-D mesh `dp` of `ranks` ranks. Per layer i (a_0 = x, square weights [W, W]):
 *
 *   forward   h_i = matmul(a_{i-1}, w_i); g_i = gelu(h_i); a_i = add(g_i, a_{i-1})
 *   backward  d_h_i = gelu_backward(d_a_i, h_i)
 *             w_i_t = transpose(w_i); d_in_i = matmul(d_h_i, w_i_t); d_a_{i-1} = add(d_in_i, d_a_i)   (i > 1)
 *             a_{i-1}_t = transpose(a_{i-1}); g_w_i = matmul(a_{i-1}_t, d_h_i)
 *             w_i_new = sgd_update(w_i, g_w_i)
 *
 * with an MSE loss on a_L. In the parallel graph every rank holds a batch shard of x, y and all
 * activations, replicated weights, and turns its partial weight gradient (and partial loss)
 * into the replicated average with all_reduce over {"axes": ["dp"]}. Lineage is written on the
 * inputs, params, activations, partial and reduced gradients, the loss and the updated weights,
 * so loading runs every phase: schema, logical graph, programs, per-rank shapes, collective
 * matching, dataflow/cycle check and lineage tiling.
 *
 * Tensor sizes are set by `width` (W, default 8) and `batchPerRank` (default 2); the proof
 * engine works at the plan's own shapes, so proving benchmarks use small ones.
 *
 * Spellings:
 *  - 'explicit': one program per rank ("ranks": [r]), concrete shard offsets, lineage as
 *    index/value maps (value [r, ranks, "avg"] before the all-reduce);
 *  - 'template': one SPMD program for "all" ranks, lineage as DTensor placements
 *    (S(0), R, P(avg)).
 */
import type { RawInt, RawLineage, RawLogicalTensor, RawOp, RawParallelOp, RawParallelTensor, RawPlan } from '../plans/raw.js';

export type Spelling = 'explicit' | 'template';

export interface SynthOptions {
  /** Number of MLP layers (>= 1). */
  readonly layers: number;
  /** Data-parallel ranks (>= 1). */
  readonly ranks: number;
  readonly spelling: Spelling;
  /** Hidden width W (default 8). */
  readonly width?: number;
  /** Local batch per rank (default 2). */
  readonly batchPerRank?: number;
  /**
   * Also write lineage on the backward intermediates d_h, d_in and d_a. Each rank's loss is the
   * mean over its own shard, so its gradients are `ranks` times the logical gradient's rows:
   * a batch shard with value map `{chunk: 0, of: 1, divisor: ranks}` (logical = local / ranks).
   * Default false: they stay unannotated, as most temporaries in real plans do. The proof
   * engine cuts stages at lineage, so without it every weight-gradient stage reaches back
   * through the whole gradient chain to the loss (bench/prove.ts measures both).
   */
  readonly gradLineage?: boolean;
}

export interface OpCount {
  readonly logical: number;
  /** Parallel ops as written in the file (summed over programs). */
  readonly parallel: number;
  readonly total: number;
}

/** Logical ops of a plan with `layers` layers. */
export function logicalOpsFor(layers: number): number {
  // 10 per layer, layer 1 has no input gradient (transpose, matmul, add), plus the loss and its backward.
  return 10 * layers - 3 + 2;
}

/** Parallel ops of one program: every logical op, one all_reduce per weight and one for the loss. */
export function programOpsFor(layers: number): number {
  return logicalOpsFor(layers) + layers + 1;
}

/** Ops as written in the file for the given options, without generating the plan. */
export function opCountFor(o: SynthOptions): OpCount {
  const logical = logicalOpsFor(o.layers);
  const parallel = programOpsFor(o.layers) * (o.spelling === 'explicit' ? o.ranks : 1);
  return { logical, parallel, total: logical + parallel };
}

/** Smallest layer count whose explicit plan over `ranks` ranks has at least `ops` ops in the file. */
export function layersForOps(ops: number, ranks: number, spelling: Spelling = 'explicit'): number {
  let layers = Math.max(1, Math.floor(ops / (10 + 11 * (spelling === 'explicit' ? ranks : 1))));
  while (opCountFor({ layers, ranks, spelling }).total < ops) layers++;
  return layers;
}

/** Counts the ops actually present in a plan object. */
export function countOps(plan: RawPlan): OpCount {
  const logical = plan.logical.ops.length;
  const parallel = plan.parallel.programs.reduce((n, p) => n + p.ops.length, 0) + (plan.parallel.collectives?.length ?? 0);
  return { logical, parallel, total: logical + parallel };
}

/** One tensor of the model: its logical shape and how a rank holds it. */
type Layout = 'batch' | 'batchT' | 'replicated' | 'partial' | 'scaledBatch' | 'none';

interface TensorDef {
  readonly id: string;
  readonly shape: [number, number] | [];
  readonly role: RawLogicalTensor['role'];
  /** Logical tensor the local copy maps to (defaults to `id`). */
  readonly logical?: string;
  readonly layout: Layout;
}

interface OpDef {
  readonly id: string;
  readonly op: string;
  readonly inputs: string[];
  readonly outputs: string[];
  readonly attrs?: Record<string, string | number>;
}

const gelu = { approximate: 'none' } as const;
const swap = { dim0: 0, dim1: 1 } as const;
const lr = { lr: '1/10' } as const;

export function synthPlan(o: SynthOptions): RawPlan {
  const { layers, ranks, spelling } = o;
  const W = o.width ?? 8;
  const b = o.batchPerRank ?? 2;
  const B = b * ranks;
  const gradLayout: Layout = o.gradLineage === true ? 'scaledBatch' : 'none';
  if (!Number.isInteger(layers) || layers < 1) throw new RangeError(`layers must be a positive integer, got ${layers}`);
  if (!Number.isInteger(ranks) || ranks < 1) throw new RangeError(`ranks must be a positive integer, got ${ranks}`);

  // Logical tensors and ops, plus the per-rank extras (partials and all-reduces), in program order.
  const lt: TensorDef[] = [];
  const lops: OpDef[] = [];
  /** Local-only tensors: partial values before an all-reduce. */
  const partials: TensorDef[] = [];
  /** Program ops in order; `collective` marks the all-reduces. */
  const pops: (OpDef & { collective?: true })[] = [];
  const act = (id: string, role: RawLogicalTensor['role'] = 'activation'): void => void lt.push({ id, shape: [B, W], role, layout: 'batch' });

  lt.push({ id: 'x', shape: [B, W], role: 'input', layout: 'batch' });
  lt.push({ id: 'y', shape: [B, W], role: 'input', layout: 'batch' });
  for (let i = 1; i <= layers; i++) lt.push({ id: `w${i}`, shape: [W, W], role: 'param', layout: 'replicated' });
  const a = (i: number): string => (i === 0 ? 'x' : `a${i}`);
  const both = (op: OpDef): void => {
    lops.push(op);
    pops.push(op);
  };

  // Forward.
  for (let i = 1; i <= layers; i++) {
    act(`h${i}`);
    act(`g${i}`);
    act(`a${i}`);
    both({ id: `fc${i}`, op: 'matmul', inputs: [a(i - 1), `w${i}`], outputs: [`h${i}`] });
    both({ id: `act${i}`, op: 'gelu', inputs: [`h${i}`], outputs: [`g${i}`], attrs: gelu });
    both({ id: `res${i}`, op: 'add', inputs: [`g${i}`, a(i - 1)], outputs: [`a${i}`] });
  }
  // Loss: each rank computes the mean over its shard; the average of those is the global mean.
  lt.push({ id: 'loss', shape: [], role: 'output', layout: 'replicated' });
  partials.push({ id: 'loss_part', shape: [], role: 'output', logical: 'loss', layout: 'partial' });
  lops.push({ id: 'loss_fn', op: 'mse_loss', inputs: [a(layers), 'y'], outputs: ['loss'], attrs: { reduction: 'mean' } });
  pops.push({ id: 'loss_fn', op: 'mse_loss', inputs: [a(layers), 'y'], outputs: ['loss_part'], attrs: { reduction: 'mean' } });
  pops.push({ id: 'loss_avg', op: 'all_reduce', inputs: ['loss_part'], outputs: ['loss'], attrs: { reduce: 'avg' }, collective: true });
  lt.push({ id: `d_a${layers}`, shape: [B, W], role: 'grad', layout: gradLayout });
  both({ id: 'loss_bwd', op: 'mse_loss_backward', inputs: [a(layers), 'y'], outputs: [`d_a${layers}`], attrs: { reduction: 'mean' } });

  // Backward and update, last layer first.
  for (let i = layers; i >= 1; i--) {
    lt.push({ id: `d_h${i}`, shape: [B, W], role: 'grad', layout: gradLayout });
    both({ id: `act${i}_bwd`, op: 'gelu_backward', inputs: [`d_a${i}`, `h${i}`], outputs: [`d_h${i}`], attrs: gelu });
    if (i > 1) {
      lt.push({ id: `w${i}_t`, shape: [W, W], role: 'activation', layout: 'replicated' });
      lt.push({ id: `d_in${i}`, shape: [B, W], role: 'grad', layout: gradLayout });
      lt.push({ id: `d_a${i - 1}`, shape: [B, W], role: 'grad', layout: gradLayout });
      both({ id: `w${i}_t`, op: 'transpose', inputs: [`w${i}`], outputs: [`w${i}_t`], attrs: swap });
      both({ id: `fc${i}_bwd_in`, op: 'matmul', inputs: [`d_h${i}`, `w${i}_t`], outputs: [`d_in${i}`] });
      both({ id: `res${i - 1}_bwd`, op: 'add', inputs: [`d_in${i}`, `d_a${i}`], outputs: [`d_a${i - 1}`] });
    }
    lt.push({ id: `${a(i - 1)}_t`, shape: [W, B], role: 'activation', layout: 'batchT' });
    lt.push({ id: `g_w${i}`, shape: [W, W], role: 'grad', layout: 'replicated' });
    lt.push({ id: `w${i}_new`, shape: [W, W], role: 'output', layout: 'replicated' });
    partials.push({ id: `g_w${i}_part`, shape: [W, W], role: 'grad', logical: `g_w${i}`, layout: 'partial' });
    both({ id: `${a(i - 1)}_t`, op: 'transpose', inputs: [a(i - 1)], outputs: [`${a(i - 1)}_t`], attrs: swap });
    lops.push({ id: `fc${i}_bwd_w`, op: 'matmul', inputs: [`${a(i - 1)}_t`, `d_h${i}`], outputs: [`g_w${i}`] });
    pops.push({ id: `fc${i}_bwd_w`, op: 'matmul', inputs: [`${a(i - 1)}_t`, `d_h${i}`], outputs: [`g_w${i}_part`] });
    pops.push({ id: `g_w${i}_avg`, op: 'all_reduce', inputs: [`g_w${i}_part`], outputs: [`g_w${i}`], attrs: { reduce: 'avg' }, collective: true });
    both({ id: `sgd_w${i}`, op: 'sgd_update', inputs: [`w${i}`, `g_w${i}`], outputs: [`w${i}_new`], attrs: lr });
  }

  const logicalTensors: RawLogicalTensor[] = lt.map((t) => ({ id: t.id, shape: [...t.shape], role: t.role, dtype: 'float32' }));
  const logicalOps: RawOp[] = lops.map(rawOp);
  const localDefs = [...lt, ...partials];

  const program = (r: number | undefined): RawPlan['parallel']['programs'][number] => {
    const tensors: RawParallelTensor[] = localDefs.map((t) => {
      const shape = localShape(t, b);
      const lineage = lineageOf(t, r, ranks, b);
      return lineage === undefined ? { id: t.id, shape } : { id: t.id, shape, lineage };
    });
    const ops: RawParallelOp[] = pops.map((op) => (op.collective ? { ...rawOp(op), group: { axes: ['dp'] } } : rawOp(op)));
    return r === undefined ? { name: 'dp-replica', ranks: 'all', tensors, ops } : { name: `rank-${r}`, ranks: [r], tensors, ops };
  };
  const programs = spelling === 'template' ? [program(undefined)] : Array.from({ length: ranks }, (_, r) => program(r));

  return {
    format: 'planproof/v1',
    name: `synth-mlp-${layers}l-dp${ranks}-${spelling}`,
    description: `Synthetic ${layers}-layer residual MLP, data parallel over ${ranks} rank(s), ${spelling} spelling (bench/synth.ts).`,
    mesh: { axes: [{ name: 'dp', size: ranks }] },
    logical: { tensors: logicalTensors, ops: logicalOps },
    parallel: { programs },
    contract: {
      inputs: ['x', 'y', ...Array.from({ length: layers }, (_, k) => `w${k + 1}`)],
      outputs: ['loss', ...Array.from({ length: layers }, (_, k) => `w${k + 1}_new`)],
    },
  };
}

function rawOp(op: OpDef): RawOp {
  const out: RawOp = { id: op.id, op: op.op, inputs: op.inputs, outputs: op.outputs };
  if (op.attrs !== undefined) out.attrs = { ...op.attrs };
  return out;
}

function localShape(t: TensorDef, b: number): number[] {
  const [d0, d1] = t.shape;
  if (d0 === undefined || d1 === undefined) return [];
  if (t.layout === 'batch' || t.layout === 'scaledBatch' || t.layout === 'none') return [b, d1];
  if (t.layout === 'batchT') return [d0, b];
  return [d0, d1];
}

/**
 * Lineage of one local tensor; undefined for backward intermediates (d_h, d_in, d_a) unless
 * `gradLineage` is set: by default they stay unannotated like most temporaries in real plans. `r` is the rank (explicit spelling)
 * or undefined (template: placements).
 */
function lineageOf(t: TensorDef, r: number | undefined, ranks: number, b: number): RawLineage | undefined {
  const logical = t.logical ?? t.id;
  switch (t.layout) {
    case 'none':
      return undefined;
    case 'replicated':
      return r === undefined ? { logical, placements: ['R'] } : { logical };
    case 'partial':
      return r === undefined ? { logical, placements: ['P(avg)'] } : { logical, value: [r, ranks, 'avg'] };
    case 'batch':
      return r === undefined ? { logical, placements: ['S(0)'] } : { logical, index: [[r * b, (r + 1) * b], '*'] };
    case 'batchT':
      return r === undefined ? { logical, placements: ['S(1)'] } : { logical, index: ['*', [r * b, (r + 1) * b]] };
    case 'scaledBatch': {
      // Placements cannot say "shard times ranks"; a template uses an index map with expressions.
      const rows: [RawInt, RawInt] = r === undefined ? [{ expr: `${b}*dp` }, { expr: `${b}*dp + ${b}` }] : [r * b, (r + 1) * b];
      return ranks === 1 ? { logical, index: [rows, '*'] } : { logical, index: [rows, '*'], value: { chunk: 0, of: 1, divisor: ranks } };
    }
  }
}
