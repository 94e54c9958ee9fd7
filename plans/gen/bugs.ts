/**
 * A catalog of real parallelization bugs, injected into a generated plan file. Every bug is a
 * mutation of the written plan (an op replaced, rewired, re-grouped or given another
 * constant; one rank's program diverging), so the verifier only ever sees a plan file, as it
 * would from a real framework. docs/bugs.md gives each entry's source.
 */
import type { AttrValue } from '../../ops/types.js';
import type { RawParallelOp, RawPlan } from '../raw.js';
import { programs, program, find, axesOf, isAr, reducerOf, shapeIn, scaleGradient, changeAttr, swapChunkAttrs, everyProgram, toIdentity, ownProgram, type Program } from './bug-edits.js';

export interface BugContext {
  readonly dp: number;
  readonly tp: number;
  readonly micro: number;
  readonly family: string;
  readonly sp?: boolean;
  readonly zero?: 0 | 1 | 2 | 3;
  readonly pp?: number;
  readonly ep?: boolean;
  readonly virtual?: number;
  readonly cp?: number;
  readonly cpComm?: 'ring' | 'allgather';
  readonly recompute?: boolean;
}

/**
 * Why a plan can be refused at load rather than refuted: it describes no program that could run.
 * `shape`: a collective's result does not have the declared shape (PyTorch raises at the
 * collective or at the first op that reads it); `unproduced`: a tensor the plan reads and lineage
 * claims is computed by no op (a dangling name); `deadlock`: a rank's schedule waits on itself (a
 * cycle through program order and collective matching).
 */
export type LoadReason = 'shape' | 'unproduced' | 'deadlock';

/**
 * How the verifier must catch a bug. The default is a witness: NOT EQUIVALENT at a stage
 * downstream of the injection. `load` is for a plan that is no program at all: no run exists, so
 * no witness can, and the loader's refusal (exit 2) naming the op is the detection.
 */
export type Detection = { readonly at: 'witness' } | { readonly at: 'load'; readonly reason: LoadReason };

export interface Bug {
  readonly id: string;
  readonly title: string;
  /** Where it comes from (issue, paper, reproduction). */
  readonly source: string;
  /** TTrace's taxonomy: wrong data, wrong communication, missing communication; or a scheduling or consistency error. */
  readonly kind: 'missing-communication' | 'wrong-communication' | 'wrong-data' | 'scheduling' | 'consistency';
  /** How it must be detected; absent means a witness (docs/bugs.md, "Expected detection"). */
  readonly detect?: Detection;
  /** Whether the generated plan has the place this bug needs. */
  applies(c: BugContext): boolean;
  /** Mutates the plan; returns the op or tensor the bug is in (tests expect it in the first failing stage). */
  inject(plan: RawPlan, c: BugContext): string;
}

/** Every bug of the catalog; each applies to the generated plans whose `BugContext` has its place. */
export const BUGS: Bug[] = [
  {
    id: 'dp-grad-allreduce-dropped',
    title: 'a data-parallel gradient all-reduce replaced by a local copy (the dataflow is kept)',
    source: 'TrainVerify bug 5 (backward all-reduce replaced by identity); TTrace: missing communication',
    kind: 'missing-communication',
    applies: (c) => c.dp > 1,
    inject: (p) => toIdentity(find(program(p).ops, isAr('dp'), 'dp gradient all-reduce')),
  },
  {
    id: 'dp-grad-allreduce-avg',
    title: 'gradients all-reduced with avg while the loss is already divided by the global batch: gradients scaled by 1/dp',
    source: 'TTrace table 1: DP loss scaling; DeepSpeed PR #4957 (gradients divided twice)',
    kind: 'wrong-data',
    applies: (c) => c.dp > 1,
    inject: (p) => {
      const o = find(program(p).ops, isAr('dp'), 'dp gradient all-reduce');
      o.attrs = { reduce: 'avg' };
      return o.id;
    },
  },
  {
    id: 'dp-wrong-group',
    title: 'the gradient all-reduce runs over the tensor-parallel group instead of the data-parallel one',
    source: 'TTrace table 1: wrong communication group; Megatron-LM PR #5916 (gradients reduced over the wrong group)',
    kind: 'wrong-communication',
    applies: (c) => c.dp > 1 && c.tp > 1,
    // In every program (each pipeline stage has its own gradients): a group changed on one
    // stage only would leave collectives unmatched across stages, a plan that does not load.
    inject: (p) => everyProgram(p, (prog) => {
      const o = find(prog.ops, isAr('dp'), 'dp gradient all-reduce', true);
      o.group = { axes: ['tp'] };
      return o.id;
    }),
  },
  {
    id: 'loss-per-rank-normalization',
    title: 'the loss is normalized by the rank-local token count instead of the global one',
    source: 'torchtitan PR #2206; Megatron-LM #7452 (per-token losses divided by local counts); TTrace: DP loss scaling',
    kind: 'wrong-data',
    applies: (c) => c.dp * c.micro > 1,
    inject: (p, c) => {
      const o = find(program(p).ops, (x) => x.op === 'scale' && /(^|\/)loss$/.test(x.outputs[0] ?? ''), 'loss scaling');
      const f = String(o.attrs?.['factor'] ?? '1/1');
      const [, d] = f.split('/');
      o.attrs = { factor: `1/${Number(d) / (c.dp * c.micro)}` };
      return o.id;
    },
  },
  {
    id: 'tp-forward-allreduce-dropped',
    title: 'the row-parallel output all-reduce replaced by a local copy',
    source: 'TrainVerify bug 1 (all-reduce replaced by identity); Megatron RowParallelLinear',
    kind: 'missing-communication',
    applies: (c) => c.tp > 1,
    inject: (p) => toIdentity(find(program(p).ops, (o) => isAr('tp')(o) && !/(^|\/)grad\//.test(o.id) && !o.id.includes('vp_') && !o.id.includes('clip'), 'forward tp all-reduce', true)),
  },
  {
    id: 'tp-backward-allreduce-dropped',
    title: "the all-reduce of the input gradient of a column-parallel layer (Megatron's f backward) replaced by a local copy",
    source: 'TrainVerify bug 5; spmd_types: the gradient of a replicated input is partial',
    kind: 'missing-communication',
    applies: (c) => c.tp > 1,
    inject: (p) => toIdentity(find(program(p).ops, (o) => isAr('tp')(o) && /(^|\/)grad\//.test(o.id), 'backward tp all-reduce')),
  },
  {
    id: 'clip-local-norm',
    title: 'global-norm clipping from the rank-local norm: the sum of squares is not all-reduced over tp',
    source: 'Megatron-LM PR #5916 (gradient norm leaves out shards); TrainCheck',
    kind: 'missing-communication',
    applies: (c) => c.tp > 1,
    // Every stage's clipping all-reduce (its group spans the pipeline stages).
    inject: (p) => everyProgram(p, (prog) => toIdentity(find(prog.ops, (o) => isAr('tp')(o) && o.id.includes('clip_tp'), 'clipping all-reduce'))),
  },
  {
    id: 'clip-one-rank',
    title: 'gradient clipping applied on rank 0 only (the other ranks step with unclipped gradients): replicas diverge',
    source: 'BLOOM-176B / DeepSpeed #1801 (TrainCheck)',
    kind: 'wrong-data',
    applies: () => true,
    inject: (p, c) => {
      const prog = program(p);
      const n = c.dp * c.tp;
      const others = n > 1 ? prog : undefined;
      if (others === undefined) throw new Error('needs at least two ranks');
      ownProgram(p, 0, n);
      // Ranks other than 0 skip clipping: their optimizer reads the unclipped gradient.
      const clipOps = prog.ops.filter((o) => o.op === 'clip_grad_norm' || (o.op === 'mul' && /(^|\/)clip(\.[0-9]+)?$/.test(o.outputs[0] ?? '')));
      if (clipOps.length === 0) throw new Error('bug injection: no clipping in this plan');
      const first = clipOps[0] as RawParallelOp;
      if (first.op === 'clip_grad_norm') {
        first.op = 'identity';
        // identity takes one input: clip each gradient separately as a copy.
        const ins = first.inputs;
        const outs = first.outputs;
        prog.ops.splice(prog.ops.indexOf(first), 1, ...ins.map((x, i) => ({ id: `noclip.${i}`, op: 'identity', inputs: [x], outputs: [outs[i] as string] })));
      } else for (const o of clipOps) {
        o.op = 'identity';
        o.inputs = [o.inputs[0] as string];
      }
      return first.id;
    },
  },
  {
    id: 'vocab-embedding-rows-not-zeroed',
    title: 'vocab-parallel embedding: ids outside the rank\'s range are masked to 0 but their rows are not zeroed',
    source: 'TTrace table 1: wrong embedding mask under TP; Megatron VocabParallelEmbedding',
    kind: 'wrong-data',
    applies: (c) => c.tp > 1 && c.family === 'gpt2',
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'where' && x.id.includes('vp_emb'), 'vocab-parallel embedding mask');
      o.op = 'identity';
      o.inputs = [o.inputs[2] as string];
      return o.id;
    },
  },
  {
    id: 'vocab-range-off-by-one',
    title: 'vocab-parallel embedding: each rank believes its vocabulary range starts one id later',
    source: 'Megatron-LM #1754 (vocabulary padding mismatch between embedding and cross-entropy shards)',
    kind: 'wrong-data',
    applies: (c) => c.tp > 1 && c.family === 'gpt2',
    inject: (p) => {
      const ops = program(p).ops.filter((x) => (x.op === 'vocab_mask' || x.op === 'vocab_local_ids') && x.id.includes('vp_emb'));
      if (ops.length === 0) throw new Error('bug injection: no vocab-parallel embedding');
      for (const o of ops) {
        // Both ops require start and end (ops/indexing.ts rangeAttrs): neither is undefined here.
        const shift = (v: AttrValue | undefined): AttrValue => (typeof v === 'object' && v !== null && 'expr' in v ? { expr: `${String((v as { expr: string }).expr)} + 1` } : (v as AttrValue));
        o.attrs = { start: shift(o.attrs?.['start']), end: shift(o.attrs?.['end']) };
      }
      return (ops[0] as RawParallelOp).id;
    },
  },
  {
    id: 'vocab-ce-target-not-reduced',
    title: 'vocab-parallel cross-entropy: the target-logit all-reduce is left out (each rank uses its own, zero when it does not own the label)',
    source: 'Megatron-LM #7452 (vocab-parallel cross-entropy fed wrong partials); Megatron vocab_parallel_cross_entropy',
    kind: 'missing-communication',
    applies: (c) => c.tp > 1 && c.family === 'gpt2',
    inject: (p) => toIdentity(find(program(p).ops, (o) => isAr('tp')(o) && o.id.includes('vp_ce') && o.attrs?.['reduce'] === 'sum', 'cross-entropy all-reduce')),
  },
  {
    id: 'vocab-ce-local-max',
    title: 'vocab-parallel cross-entropy: the row max is not all-reduced, so ranks shift their logits differently',
    source: 'Megatron vocab_parallel_cross_entropy (all-reduce of the max)',
    kind: 'missing-communication',
    applies: (c) => c.tp > 1 && c.family === 'gpt2',
    inject: (p) => toIdentity(find(program(p).ops, (o) => isAr('tp')(o) && o.id.includes('vp_ce') && o.attrs?.['reduce'] === 'max', 'cross-entropy max all-reduce')),
  },
  {
    id: 'accumulation-reset',
    title: 'gradient accumulation reset every micro-batch: only the last micro-batch\'s gradient survives',
    source: 'open-instruct PR #1498 (ZeRO-2 manual accumulation)',
    kind: 'wrong-data',
    applies: (c) => c.micro > 1,
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'add' && x.id.startsWith('accum.') && !x.id.startsWith('accum.loss'), 'gradient accumulation');
      o.op = 'identity';
      o.inputs = [o.inputs[1] as string];
      return o.id;
    },
  },
  {
    id: 'grad-after-reducer',
    title: "the last micro-batch's gradient is added after the data-parallel reducer ran (an op scheduled after the gradient all-reduce)",
    source: 'TrainVerify bug 14 (scheduling: the last op of micro-batch 2 moved after the reducer; TrainVerify crashes on it)',
    kind: 'scheduling',
    applies: (c) => c.micro > 1 && c.dp > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const acc = find(ops, (x) => x.op === 'add' && x.id.startsWith('accum.') && !x.id.startsWith('accum.loss'), 'gradient accumulation');
      const ar = find(ops, (x) => isAr('dp')(x) && x.inputs[0] === acc.outputs[0], 'the reducer of that gradient');
      // Reducer now sees only the earlier micro-batches; the late add happens after it.
      const early = acc.inputs[0] as string;
      const late = acc.inputs[1] as string;
      const partial = acc.outputs[0] as string;
      const reduced = ar.outputs[0] as string;
      ar.inputs = [early];
      ar.outputs = [partial];
      acc.inputs = [partial, late];
      acc.outputs = [reduced];
      ops.splice(ops.indexOf(acc), 1);
      ops.splice(ops.indexOf(ar) + 1, 0, acc);
      return acc.id;
    },
  },
  {
    id: 'overlap-reduce-before-last-contribution',
    title: "compute/communication overlap: a gradient bucket's all-reduce starts after the first of two contributions to a parameter's gradient; the second is added locally afterwards",
    source: 'TTrace table 1: wrong gradients with compute/communication overlap (Megatron overlap_grad_reduce)',
    kind: 'scheduling',
    applies: (c) => c.dp > 1 && c.micro === 1 && c.family === 'gpt2' && (c.pp ?? 1) === 1 && (c.zero ?? 0) === 0,
    inject: (p) => {
      const ops = program(p).ops;
      // The reducer of a gradient that is a fan-in sum (the tied embedding's, here).
      const ar = find(ops, (x) => isAr('dp')(x) && ops.some((y) => y.op === 'add' && /\/acc\[/.test(y.id) && y.outputs[0] === x.inputs[0]), 'reducer of a fan-in gradient');
      const add = ops.find((y) => y.outputs[0] === ar.inputs[0]) as RawParallelOp;
      const [early, late] = [add.inputs[0] as string, add.inputs[1] as string];
      const partial = add.outputs[0] as string;
      const reduced = ar.outputs[0] as string;
      ar.inputs = [early];
      ar.outputs = [partial];
      add.inputs = [partial, late];
      add.outputs = [reduced];
      ops.splice(ops.indexOf(add), 1);
      ops.splice(ops.indexOf(ar) + 1, 0, add);
      return add.id;
    },
  },
  {
    id: 'ln-eps-one-rank',
    title: "one rank's LayerNorm epsilon changed",
    source: 'TrainVerify bug 7 (one rank\'s epsilon constant changed)',
    kind: 'wrong-data',
    applies: (c) => c.family === 'gpt2' && c.dp * c.tp > 1,
    inject: (p, c) => changeAttr(ownProgram(p, c.dp * c.tp - 1, c.dp * c.tp), 'layer_norm', 'layer norm', { eps: '1/1000' }),
  },
  {
    id: 'attention-scale-one-rank',
    title: "one rank's attention scale changed",
    source: 'TrainVerify bug 12 (attention scale constant changed on one rank)',
    kind: 'wrong-data',
    applies: (c) => c.family === 'gpt2' && c.dp * c.tp > 1,
    inject: (p, c) => changeAttr(ownProgram(p, 0, c.dp * c.tp), 'attention', 'attention', { scale: '1/3' }),
  },
  {
    id: 'attention-scale-all-ranks',
    title: 'the attention scale changed on every rank',
    source: 'TrainVerify bug 13 (the same constant changed on several ranks)',
    kind: 'wrong-data',
    applies: (c) => c.family === 'gpt2',
    inject: (p) => changeAttr(program(p), 'attention', 'attention', { scale: '1/3' }),
  },
  {
    id: 'fanout-duplicate-grad',
    title: 'a fan-out gradient sum adds one branch twice instead of both branches',
    source: 'TrainVerify bug 10 (backward fan-out given a duplicated wrong gradient input)',
    kind: 'wrong-data',
    applies: () => true,
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'add' && /\/acc\[/.test(x.id), 'gradient fan-out sum');
      o.inputs = [o.inputs[0] as string, o.inputs[0] as string];
      return o.id;
    },
  },
  {
    id: 'rope-backward-cos-sin-swapped',
    title: 'the rotary-embedding backward multiplies the gradient by sin where it needs cos, and the reverse',
    source: 'TrainVerify bug 11 (rotary backward inputs swapped); TrainVerify itself approximated rotary with one table',
    kind: 'wrong-data',
    applies: (c) => c.family === 'llama',
    inject: (p) => {
      const ops = program(p).ops.filter((x) => /(^|\/)grad\//.test(x.id) && x.op === 'mul');
      const c = ops.find((x) => x.inputs.includes('rope_cos'));
      const s = ops.find((x) => x.inputs.includes('rope_sin') && c !== undefined && x.inputs[0] === c.inputs[0]);
      if (c === undefined || s === undefined) throw new Error('bug injection: no rotary backward in this plan');
      c.inputs = c.inputs.map((x) => (x === 'rope_cos' ? 'rope_sin' : x));
      s.inputs = s.inputs.map((x) => (x === 'rope_sin' ? 'rope_cos' : x));
      return c.id;
    },
  },
  {
    id: 'rmsnorm-eps-one-rank',
    title: "one rank's RMSNorm epsilon changed",
    source: 'TrainVerify bug 7 (one rank\'s epsilon constant changed), on the Llama plan it used',
    kind: 'wrong-data',
    applies: (c) => c.family === 'llama' && c.dp * c.tp > 1,
    inject: (p, c) => changeAttr(ownProgram(p, 1, c.dp * c.tp), 'rms_norm', 'RMSNorm', { eps: '1/1000' }),
  },
  {
    id: 'sp-norm-grad-not-reduced',
    title: 'sequence parallelism: a LayerNorm / RMSNorm weight gradient, partial over the sequence shards, is never all-reduced over tp',
    source: 'Megatron-LM #1446 (final LayerNorm weight gradient under TP+SP); TTrace table 1: LayerNorm weights not synchronized under SP',
    kind: 'missing-communication',
    applies: (c) => c.sp === true && c.tp > 1 && c.family !== 'mlp',
    inject: (p) => {
      // The reducer of an accumulated norm-weight gradient (accum.<param>, param a norm; a
      // suffix #k where the generator numbered the accumulator apart, as with 16 micro-batches).
      const o = find(program(p).ops, (x) => isAr('tp')(x) && /^accum\.(.*\.)?(ln[0-9a-z]*|[a-z_]*norm)(\.w)?(#[0-9]+)?$/.test(x.inputs[0] ?? ''), 'norm weight gradient all-reduce');
      return toIdentity(o);
    },
  },
  {
    id: 'sp-gather-before-norm',
    title: 'sequence parallelism: the sequence all-gather placed on the hidden dim instead of the sequence dim',
    source: 'Megatron sequence parallel (gather_from_sequence_parallel_region): a wrong layout; the shapes no longer agree',
    kind: 'consistency',
    detect: { at: 'load', reason: 'shape' },
    applies: (c) => c.sp === true && c.tp > 1 && c.family !== 'mlp',
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'all_gather' && axesOf(x).includes('tp'), 'sequence all-gather');
      o.attrs = { dim: 2 };
      return o.id;
    },
  },
  {
    id: 'zero-update-lost',
    title: 'ZeRO: the all-gather of the updated parameter shards is replaced by the old parameter: the step is lost',
    source: 'TTrace table 1: ZeRO parameter update lost',
    kind: 'missing-communication',
    applies: (c) => (c.zero ?? 0) > 0 && c.dp > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const o = find(ops, (x) => x.op === 'all_gather' && axesOf(x).includes('dp') && /\.new$/.test(x.inputs[0] ?? ''), 'parameter all-gather');
      const shard = find(ops, (x) => x.op === 'slice' && x.outputs[0] === ops.find((y) => y.outputs.includes(o.inputs[0] as string))?.inputs[0], 'parameter shard');
      o.op = 'identity';
      o.inputs = [shard.inputs[0] as string];
      delete o.attrs;
      delete o.group;
      return o.id;
    },
  },
  {
    id: 'zero2-accumulation-reset',
    title: 'ZeRO-2: the sharded gradient buffer is reset every micro-batch, so only the last micro-batch\'s shard survives',
    source: 'open-instruct PR #1498 (ZeRO-2 manual accumulation reset)',
    kind: 'wrong-data',
    applies: (c) => c.zero === 2 && c.dp > 1 && c.micro > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const o = find(ops, (x) => x.op === 'add' && x.id.startsWith('accum.') && !x.id.startsWith('accum.loss') && x.inputs.every((i) => ops.some((y) => y.op === 'reduce_scatter' && y.outputs.includes(i))), 'sharded gradient accumulation');
      o.op = 'identity';
      o.inputs = [o.inputs[1] as string];
      return o.id;
    },
  },
  {
    id: 'zero-clip-norm-shards',
    title: 'ZeRO: the gradient norm for clipping is summed over the tensor-parallel group only, not over the data-parallel shards',
    source: 'Megatron-LM PR #5916 (gradient norm leaves out parts of the model); DeepSpeed ZeRO clipping',
    kind: 'wrong-communication',
    applies: (c) => (c.zero ?? 0) > 0 && c.dp > 1,
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'all_reduce' && x.id.includes('clip_tp') && axesOf(x).includes('dp'), 'clipping norm all-reduce');
      const axes = axesOf(o).filter((a) => a !== 'dp');
      o.group = { axes };
      if (axes.length === 0) toIdentity(o);
      return o.id;
    },
  },
  {
    id: 'pp-microbatch-order-swapped',
    title: 'pipeline: the first stage sends the second micro-batch\'s activations in the first one\'s slot: under 1F1B the schedule deadlocks, and the loader rejects it naming the cycle',
    source: 'TrainVerify bug 6 (p2p send/recv mismatched across pipeline stages); Megatron p2p_communication',
    kind: 'consistency',
    detect: { at: 'load', reason: 'deadlock' },
    applies: (c) => (c.pp ?? 1) > 1 && c.micro > 1,
    inject: (p) => {
      const ops = program(p, 0).ops;
      const sends = ops.filter((x) => x.op === 'send' && JSON.stringify((x as { peer?: unknown }).peer) === '{"shift":{"pp":1}}');
      const [a, b] = [sends[0], sends[1]];
      if (a === undefined || b === undefined) throw new Error('bug injection: fewer than two forward sends');
      const [x, y] = [a.inputs[0] as string, b.inputs[0] as string];
      a.inputs = [y];
      b.inputs = [x];
      // The first send: the loader's cycle runs through it.
      return a.id;
    },
  },
  {
    id: 'pp-tied-embedding-grad-not-synced',
    title: 'pipeline: the tied embedding / LM head gradients of the first and last stages are never summed',
    source: 'Megatron-LM #656 (LM head drifts from the embedding); TTrace table 1: untied embedding / LM head',
    kind: 'missing-communication',
    applies: (c) => (c.pp ?? 1) > 1 && c.family === 'gpt2',
    inject: (p) => {
      const o = find(program(p, 0).ops, (x) => x.op === 'all_reduce' && Array.isArray(x.group), 'embedding-group all-reduce');
      const id = o.id;
      for (const prog of programs(p)) for (const x of prog.ops) if (x.op === 'all_reduce' && Array.isArray(x.group)) toIdentity(x);
      return id;
    },
  },
  {
    id: 'pp-tied-grad-wrong-dp-partner',
    title: 'pipeline + data parallel: the tied embedding gradient is summed with the last stage of another data-parallel replica',
    source: 'Megatron-LM #844 (tied-embedding all-reduce and the distributed optimizer\'s reduce-scatter combine partial sums of different shards); TTrace: wrong communication group',
    kind: 'wrong-communication',
    // Without ZeRO every replica holds the same complete gradient, so the wrong partner is harmless.
    applies: (c) => (c.pp ?? 1) > 1 && c.family === 'gpt2' && c.dp > 1 && (c.zero ?? 0) > 0,
    inject: (p, c) => {
      const T = c.tp;
      const last = ((c.pp ?? 1) - 1) * c.dp * T;
      let id = '';
      programs(p).forEach((prog, k) => {
        for (const x of prog.ops) {
          if (x.op !== 'all_reduce' || !Array.isArray(x.group)) continue;
          id = x.id;
          // Pair (first stage, dp) with (last stage, dp') where dp' = dp + 1 mod dp-size.
          x.group = k === 0 ? [{ expr: 'dp*' + T + ' + tp' }, { expr: `${last} + ((dp + 1) % ${c.dp})*${T} + tp` }] : [{ expr: `((dp + ${c.dp - 1}) % ${c.dp})*${T} + tp` }, { expr: `${last} + dp*${T} + tp` }];
        }
      });
      return id;
    },
  },
  {
    id: 'pp-stage-boundary-wrong-tensor',
    title: 'pipeline: the first stage sends the hidden states from before its last layer\'s MLP, so that sub-layer is skipped',
    source: 'TTrace table 1: wrong pipeline stage division',
    kind: 'wrong-data',
    applies: (c) => (c.pp ?? 1) > 1 && c.family !== 'mlp',
    inject: (p) => {
      const ops = program(p, 0).ops;
      const send = find(ops, (x) => x.op === 'send' && JSON.stringify((x as { peer?: unknown }).peer) === '{"shift":{"pp":1}}', 'forward send');
      const prod = find(ops, (x) => x.outputs.includes(send.inputs[0] as string), 'the sent tensor\'s producer');
      // The residual add's first input is the stream before the MLP.
      send.inputs = [prod.inputs[0] as string];
      return send.id;
    },
  },
  {
    id: 'ep-expert-grad-scaled',
    title: 'expert parallelism: the experts\' gradients are scaled by the data-parallel size (ep times too large)',
    source: 'DeepSpeed #5618 / #6545 (expert gradients scaled by the DP size instead of the expert-DP group size); DeepSpeed PR #4957',
    kind: 'wrong-data',
    applies: (c) => c.family === 'moe' && c.ep === true && c.dp > 1,
    inject: (p, c) => {
      const prog = program(p);
      return scaleGradient(prog, find(prog.ops, (x) => x.op === 'adam_update' && /experts\.w1\.new$/.test(x.id), 'expert optimizer step'), c.dp, 'scaled');
    },
  },
  {
    id: 'ep-return-alltoall-not-swapped',
    title: 'expert parallelism: the all-to-all that returns expert outputs reuses the dispatch\'s split and concat dims: the shapes no longer agree',
    source: 'Megatron MoE token dispatcher (all-to-all dispatch and combine); a wrong layout is a plan inconsistency',
    kind: 'consistency',
    detect: { at: 'load', reason: 'shape' },
    applies: (c) => c.family === 'moe' && c.ep === true && c.dp > 1,
    inject: (p) => {
      const ops = program(p).ops.filter((x) => x.op === 'all_to_all' && !/(^|\/)grad\//.test(x.id));
      const back = ops[1];
      if (back === undefined) throw new Error('bug injection: no return all-to-all');
      back.attrs = { split_dim: 0, concat_dim: 1 };
      return back.id;
    },
  },
  {
    id: 'norm-grad-scaled-by-tp',
    title: 'a LayerNorm / RMSNorm weight gradient multiplied by the tensor-parallel size after its reduction',
    source: 'TTrace table 1: LayerNorm gradients scaled by TP (under TP+CP in Megatron); Megatron-LM #1446 family',
    kind: 'wrong-data',
    applies: (c) => c.tp > 1 && c.family !== 'mlp' && c.family !== 'moe',
    inject: (p, c) => {
      const prog = program(p);
      return scaleGradient(prog, find(prog.ops, (x) => x.op === 'adam_update' && /(ln[0-9a-z]*|norm)(\.w)?\.new$/.test(x.id), 'norm weight optimizer step'), c.tp, 'tp_scaled');
    },
  },
  {
    id: 'stale-activation-in-backward',
    title: "the backward of the second micro-batch reads the first micro-batch's saved activation (a stale buffer)",
    source: 'TTrace table 1: stale input under activation recomputation (the recomputed or saved input comes from a stale buffer)',
    kind: 'wrong-data',
    applies: (c) => c.micro > 1,
    inject: (p) => {
      const ops = program(p).ops;
      // A backward op of micro-batch 1 reading a forward activation of micro-batch 1.
      const o = find(ops, (x) => x.id.startsWith('mb1/grad/l0/') && x.inputs.some((i) => /^mb1\/l0\//.test(i)), 'backward op reading a saved activation');
      const k = o.inputs.findIndex((i) => /^mb1\/l0\//.test(i));
      o.inputs[k] = (o.inputs[k] as string).replace(/^mb1\//, 'mb0/');
      return o.id;
    },
  },
  {
    id: 'moe-router-grad-not-synced',
    title: 'MoE: the router weight gradient is left out of the data-parallel all-reduce, so replicas route differently after the step',
    source: 'Megatron-LM PR #5916 (router replicas out of sync); the data-parallel form of TTrace\'s SP bug below',
    kind: 'missing-communication',
    applies: (c) => c.family === 'moe' && c.dp > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const step = find(ops, (x) => x.op === 'adam_update' && /router\.new$/.test(x.id), 'router optimizer step');
      const ar = reducerOf(ops, step.inputs[1] as string, 'dp');
      return toIdentity(ar);
    },
  },
  {
    id: 'moe-router-grad-not-synced-sp',
    title: "MoE under sequence parallelism: each tp rank routes only its own tokens, and the router weight gradient is left out of the tp all-reduce, so every tp rank steps with its own tokens' part",
    source: 'TTrace table 1: router weights not synchronized under SP',
    kind: 'missing-communication',
    applies: (c) => c.family === 'moe' && c.sp === true && c.tp > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const step = find(ops, (x) => x.op === 'adam_update' && /router\.new$/.test(x.id), 'router optimizer step');
      const ar = reducerOf(ops, step.inputs[1] as string, 'tp');
      return toIdentity(ar);
    },
  },
  {
    id: 'pp-interleave-skips-chunks',
    title: "interleaved pipeline: the first stage feeds its own first chunk's output to its second chunk instead of what the last stage sends back, so the other stages' layers are skipped",
    source: 'TTrace table 1: wrong pipeline stage division (here with Megatron\'s virtual pipeline stages)',
    kind: 'wrong-data',
    applies: (c) => (c.pp ?? 1) > 1 && (c.virtual ?? 1) > 1,
    inject: (p, c) => {
      const ops = program(p, 0).ops;
      const wrap = JSON.stringify({ shift: { pp: (c.pp ?? 1) - 1 } });
      const recv = find(ops, (x) => x.op === 'recv' && JSON.stringify((x as { peer?: unknown }).peer) === wrap && !/(^|\/)grad\//.test(x.id), 'wrap-around receive');
      const send = find(ops, (x) => x.op === 'send' && JSON.stringify((x as { peer?: unknown }).peer) === '{"shift":{"pp":1}}', 'first chunk send');
      const r = recv.outputs[0] as string;
      for (const x of ops) x.inputs = x.inputs.map((i) => (i === r ? (send.inputs[0] as string) : i));
      return send.inputs[0] as string;
    },
  },
  {
    id: 'recompute-stale-input',
    title: "activation recomputation: the second micro-batch's layer is recomputed from the first micro-batch's saved input (a stale activation buffer), so its gradients are computed at the wrong point",
    source: 'TTrace table 1 #2 (Megatron-LM #371): activation recomputation with a wrong input, wrong gradients',
    kind: 'wrong-data',
    applies: (c) => c.recompute === true && c.micro > 1,
    inject: (p) =>
      everyProgram(p, (prog) => {
        const have = new Set(prog.tensors.map((t) => t.id));
        const rec = prog.ops.filter((x) => /^mb1\/grad\/recompute\//.test(x.id));
        // Saved activations of micro-batch 1 read by its recomputation -> micro-batch 0's.
        const stale = (i: string): string | undefined => (/^mb1\//.test(i) && !/^mb1\/grad\//.test(i) && have.has(i.replace(/^mb1\//, 'mb0/')) ? i.replace(/^mb1\//, 'mb0/') : undefined);
        const hit = rec.filter((x) => x.inputs.some((i) => stale(i) !== undefined));
        if (hit.length === 0) throw new Error('bug injection: no recomputation reading a saved activation');
        for (const x of hit) x.inputs = x.inputs.map((i) => stale(i) ?? i);
        return (hit[0] as RawParallelOp).id;
      }),
  },
  {
    id: 'cp-loss-scaled-by-cp',
    title: 'context parallelism: the loss is scaled by the CP size while gradients are reduced as if it were not: gradients over-scaled by cp',
    source: 'Megatron-LM #673 / #906 (context-parallel loss scaled by the CP size); TrainVerify appendix; TTrace table 1: CP loss scaling',
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1,
    inject: (p, c) =>
      everyProgram(p, (prog) => {
        const o = find(prog.ops, (x) => x.op === 'scale' && /(^|\/)loss$/.test(x.outputs[0] ?? ''), 'loss scaling');
        const [n, d] = String(o.attrs?.['factor'] ?? '1/1').split('/');
        o.attrs = { factor: `${Number(n) * (c.cp ?? 1)}/${d ?? 1}` };
        return o.id;
      }),
  },
  {
    id: 'cp-zigzag-offsets-swapped',
    title: "context parallelism: the two zig-zag query chunks are attended with each other's position offsets (chunks in the wrong order)",
    source: 'load-balanced CP (rank r holds chunks r and 2cp-1-r): zig-zag chunks in the wrong order (conventions-and-bugs.md)',
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm === 'allgather',
    inject: (p) => swapChunkAttrs(p, 'attention'),
  },
  {
    id: 'cp-attention-backward-chunk-order',
    title: 'context parallelism: the attention backward of the two zig-zag chunks uses each other\'s offsets, so dQ, dK and dV are wrong',
    source: 'Megatron-LM #1464 / TransformerEngine #1557 (CP attention backward returns wrong dQ/dK/dV: wrong chunk order); TTrace table 1: wrong CP attention gradients',
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm === 'allgather',
    inject: (p) => swapChunkAttrs(p, 'attention_backward'),
  },
  {
    id: 'cp-kv-not-reordered',
    title: 'context parallelism: the all-gathered keys and values are used in gather order, not sequence order',
    source: 'TransformerEngine #1557 family (chunk order of K/V under load-balanced CP)',
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm === 'allgather',
    inject: (p) => {
      const ops = program(p).ops;
      const o = find(ops, (x) => x.op === 'concat' && /\/cp\//.test(x.id) && x.inputs.length > 2, 'K/V reorder');
      const split = find(ops, (x) => x.op === 'split' && x.outputs.includes(o.inputs[0] as string), 'K/V split');
      o.inputs = [...split.outputs];
      return o.id;
    },
  },
  {
    id: 'cp-grad-not-reduced',
    title: 'context parallelism: a parameter gradient is not all-reduced over the CP group (each rank keeps its sequence chunks\' part)',
    source: 'Megatron-LM (gradients are reduced over dp x cp); TTrace table 1: wrong communication group',
    kind: 'missing-communication',
    applies: (c) => (c.cp ?? 1) > 1,
    inject: (p) => everyProgram(p, (prog) => toIdentity(find(prog.ops, (x) => isAr('cp')(x) && /^(accum\.|grad\/)/.test(x.inputs[0] ?? '') && !/loss/.test(x.inputs[0] ?? ''), 'cp gradient all-reduce'))),
  },
  {
    id: 'cp-ring-future-block-attended',
    title: 'ring attention: a query chunk also attends a later key chunk it receives (a block the causal mask skips), so tokens see future tokens',
    source: "ring attention's causal block schedule (zhuzilin/ring-flash-attention: a step's block is skipped when its keys are all in the future; ring-flash-attention #15: wrong causal masking of ring blocks)",
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm !== 'allgather',
    inject: (p) => {
      // On CP rank 0: its first query chunk (chunk 0) sees only itself; the bug merges in the
      // first key chunk that arrives from rank 1.
      const prog = program(p);
      const ops = prog.ops;
      const fwd = (x: RawParallelOp): boolean => /\/cp\//.test(x.id) && !/(^|\/)grad\//.test(x.id);
      const producer = (t: string): RawParallelOp | undefined => ops.find((x) => x.outputs.includes(t));
      const out = find(ops, (x) => fwd(x) && x.op === 'concat' && x.inputs.every((i) => ['attention_partial', 'attention_combine'].includes(producer(i)?.op ?? '')), 'ring attention output');
      const own = producer(out.inputs[0] as string) as RawParallelOp;
      const recvs = ops.filter((x) => fwd(x) && x.op === 'recv').slice(0, 2).map((r) => r.outputs[0] as string);
      const [sk, sv] = recvs.map((r) => find(ops, (x) => x.op === 'split' && x.inputs[0] === r, 'received block split'));
      if (sk === undefined || sv === undefined) throw new Error('bug injection: no received block');
      const id = `${own.id}.future`;
      const part = [id, `${id}.1`, `${id}.2`];
      const merged = [`${id}.merged`, `${id}.merged.1`, `${id}.merged.2`];
      [...part, ...merged].forEach((t, k) => prog.tensors.push({ id: t, shape: shapeIn(prog, own.outputs[k % 3] as string) }));
      ops.splice(ops.indexOf(out), 0, { id, op: 'attention_partial', inputs: [own.inputs[0] as string, sk.outputs[0] as string, sv.outputs[0] as string], outputs: part }, { id: `${id}.merge`, op: 'attention_combine', inputs: [...own.outputs, ...part], outputs: merged });
      out.inputs[0] = merged[0] as string;
      return id;
    },
  },
  {
    id: 'cp-ring-stale-kv',
    title: 'ring attention: a ring step computes on the keys and values the rank already had instead of the block it just received (receive buffer not swapped in)',
    source: 'K/V double buffering in ring attention (zhuzilin/ring-flash-attention #87 alternates two receive buffers by step parity): a step on the stale block',
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm !== 'allgather',
    inject: (p) => {
      const ops = program(p).ops;
      // The forward ring's first hop: the two blocks sent, the two received.
      const sends = ops.filter((x) => x.op === 'send' && /\/cp\//.test(x.id) && !/(^|\/)grad\//.test(x.id)).slice(0, 2);
      const recvs = ops.filter((x) => x.op === 'recv' && /\/cp\//.test(x.id) && !/(^|\/)grad\//.test(x.id)).slice(0, 2);
      if (sends.length < 2 || recvs.length < 2) throw new Error('bug injection: no ring hop in this plan');
      const stale = new Map(recvs.map((r, i) => [r.outputs[0] as string, (sends[i] as RawParallelOp).inputs[0] as string]));
      const users = ops.filter((x) => x.inputs.some((i) => stale.has(i)));
      for (const x of users) x.inputs = x.inputs.map((i) => stale.get(i) ?? i);
      return (users[0] as RawParallelOp).id;
    },
  },
  {
    id: 'cp-ring-dkv-one-hop-short',
    title: "ring attention backward: the key/value gradient accumulators stop one hop short of their owners; each rank takes the accumulator in its hands (another chunk's partial sum) as its own dK, dV",
    source: 'ring attention backward (dK/dV travel the ring with K/V and return to their owner; zhuzilin/ring-flash-attention #10 "Fix ring attn v2 bwd"); TTrace table 1: wrong CP attention gradients',
    kind: 'missing-communication',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm !== 'allgather',
    inject: (p) =>
      everyProgram(p, (prog) => {
        const ops = prog.ops;
        const inRing = (x: RawParallelOp): boolean => /(^|\/)grad\/l0\/cp\//.test(x.id);
        const sends = ops.filter((x) => x.op === 'send' && inRing(x)).slice(-2);
        const recvs = ops.filter((x) => x.op === 'recv' && inRing(x)).slice(-2);
        if (sends.length < 2 || recvs.length < 2) throw new Error('bug injection: no backward ring in this plan');
        const kept = new Map(recvs.map((r, i) => [r.outputs[0] as string, (sends[i] as RawParallelOp).inputs[0] as string]));
        prog.ops = ops.filter((x) => !sends.includes(x) && !recvs.includes(x));
        for (const x of prog.ops) x.inputs = x.inputs.map((i) => kept.get(i) ?? i);
        prog.tensors = prog.tensors.filter((t) => !kept.has(t.id));
        const last = ops.find((x) => x.outputs.includes((sends[0] as RawParallelOp).inputs[0] as string));
        return (last as RawParallelOp).id;
      }),
  },
  {
    id: 'cp-ring-merge-wrong-max',
    title: "ring attention: the online-softmax merge rescales each block's partial output by the other block's row maximum",
    source: "online-softmax merge of attention blocks (flash / ring attention's out and log-sum-exp update): the blocks' statistics crossed",
    kind: 'wrong-data',
    applies: (c) => (c.cp ?? 1) > 1 && c.cpComm !== 'allgather',
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'attention_combine', 'online-softmax merge');
      [o.inputs[1], o.inputs[4]] = [o.inputs[4] as string, o.inputs[1] as string];
      return o.id;
    },
  },
  {
    id: 'allgather-to-allreduce',
    title: 'a sequence all-gather replaced by an all-reduce: the shapes no longer agree',
    source: 'TrainVerify bug 4 (all-gather -> all-reduce): the plan is inconsistent',
    kind: 'consistency',
    detect: { at: 'load', reason: 'shape' },
    applies: (c) => c.sp === true && c.tp > 1 && c.family !== 'mlp',
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'all_gather' && axesOf(x).includes('tp'), 'sequence all-gather');
      o.op = 'all_reduce';
      o.attrs = { reduce: 'sum' };
      return o.id;
    },
  },
  {
    id: 'square-exponent-one-rank',
    title: "one rank squares nothing: its gradient-norm term uses g instead of g^2 (an exponent 2 -> 1)",
    source: 'TrainVerify bug 8 (one rank\'s pow exponent 2 -> 1)',
    kind: 'wrong-data',
    applies: (c) => c.tp > 1 || (c.pp ?? 1) > 1 || (c.zero ?? 0) > 0,
    inject: (p, c) => {
      const prog = ownProgram(p, 1, c.dp * c.tp * (c.pp ?? 1));
      const o = find(prog.ops, (x) => x.op === 'mul' && x.id.includes('clip_tp') && x.inputs.length === 2 && x.inputs[0] === x.inputs[1], 'squared gradient');
      o.op = 'identity';
      o.inputs = [o.inputs[0] as string];
      return o.id;
    },
  },
  {
    id: 'zero3-grad-scatter-avg',
    title: 'ZeRO-3: parameter gradients are reduce-scattered with avg although the loss is already divided by the global batch (gradients scaled by 1/dp)',
    source: 'DeepSpeed PR #4957 (gradients divided twice); TTrace table 1: DP loss scaling',
    kind: 'wrong-data',
    applies: (c) => c.zero === 3 && c.dp > 1,
    inject: (p) => {
      const o = find(program(p).ops, (x) => x.op === 'reduce_scatter' && axesOf(x).includes('dp') && /(^|\/)grad\//.test(x.id), 'gradient reduce-scatter');
      o.attrs = { ...(o.attrs ?? {}), reduce: 'avg' };
      return o.id;
    },
  },
  {
    id: 'norm-eps-several-ranks',
    title: "the RMSNorm epsilon (the constant added to the mean square) changed on several ranks, not all: their activations diverge from the others'",
    source: 'TrainVerify bug 9 (an add constant changed on several ranks)',
    kind: 'wrong-data',
    applies: (c) => c.family === 'llama' && c.dp * c.tp > 2 && (c.pp ?? 1) === 1 && (c.cp ?? 1) === 1,
    inject: (p, c) => {
      // Ranks 0 and 1 run their own copy (the tp pair of the first dp replica at tp 2).
      const copy = ownProgram(p, 0, c.dp * c.tp);
      const base = programs(p)[0] as Program;
      base.ranks = (base.ranks as number[]).filter((r) => r !== 1);
      copy.ranks = [0, 1];
      return changeAttr(copy, 'rms_norm', 'RMSNorm', { eps: '1/1000' });
    },
  },
  {
    id: 'adam-eps-one-rank',
    title: "one rank's optimizer epsilon changed: replicas of a parameter diverge",
    source: 'TrainVerify bug 7 family (a constant changed on one rank), here the optimizer epsilon; TTrace: lost / divergent parameter update',
    kind: 'wrong-data',
    applies: (c) => c.dp * c.tp > 1,
    inject: (p, c) => changeAttr(ownProgram(p, 0, c.dp * c.tp), 'adam_update', 'optimizer step', { eps: '1/1000' }),
  },
  {
    id: 'allreduce-dropped-dataflow',
    title: 'a gradient all-reduce deleted outright, leaving its output unproduced',
    source: 'TrainVerify bug 2 (adapter prims dropped, dataflow broken): the plan is inconsistent',
    kind: 'consistency',
    detect: { at: 'load', reason: 'unproduced' },
    applies: (c) => c.dp > 1,
    inject: (p) => {
      const ops = program(p).ops;
      const o = find(ops, isAr('dp'), 'dp gradient all-reduce');
      ops.splice(ops.indexOf(o), 1);
      return o.outputs[0] as string;
    },
  },
  {
    id: 'allreduce-to-allgather',
    title: 'a gradient all-reduce replaced by an all-gather',
    source: 'TrainVerify bug 3 (all-reduce -> all-gather): the shapes no longer agree',
    kind: 'consistency',
    detect: { at: 'load', reason: 'shape' },
    applies: (c) => c.dp > 1,
    inject: (p) => {
      const o = find(program(p).ops, isAr('dp'), 'dp gradient all-reduce');
      o.op = 'all_gather';
      o.attrs = { dim: 0 };
      return o.id;
    },
  },
];

/**
 * What the loader's message says for each reason (plans/loader.ts, lineage/load.ts): the test
 * over the catalog and the bench scripts check a refusal against it.
 */
export const LOAD_MESSAGE: Readonly<Record<LoadReason, RegExp>> = {
  shape: /output is declared \[[0-9, ]*\] but [a-z_]+ over [0-9]+ ranks of \[[0-9, ]*\] gives|shape error/,
  unproduced: /is never produced on this rank/,
  // Past plans/dataflow.ts's exact-check size (D3, L3) the cycle is found on ranks merged by
  // program and reported as possible.
  deadlock: /has a cycle \(a deadlock if it runs\)|possible cycle \(checked on ranks merged by program/,
};

/** The detection a bug must get: its own, else a witness. */
export function detectionOf(b: Bug): Detection {
  return b.detect ?? { at: 'witness' };
}

export function bugById(id: string): Bug | undefined {
  return BUGS.find((b) => b.id === id);
}
