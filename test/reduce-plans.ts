/**
 * Random small plans for checking shape reduction against full shapes (test/reduce.test.ts,
 * bench/reduce-check.ts): a Megatron MLP forward y = act(x·w1)·w2 on a dp x tp mesh (rows of x
 * over dp, w1 columns and w2 rows over tp, an all-reduce of the partial y over tp), spelled
 * with DTensor placements or with index maps whose bounds are template expressions, and
 * mutants of it (each a real bug on some configurations, harmless on others).
 */
import fc from 'fast-check';
import type { RawLineage, RawPlan } from '../plans/raw.js';

export const MUTANTS = ['none', 'drop-allreduce', 'avg-allreduce', 'swap-rows', 'scale-h', 'wrong-act', 'bias-before-allreduce'] as const;
export type Mutant = (typeof MUTANTS)[number];

export interface PlanParams {
  dp: number;
  tp: number;
  /** Rows per dp rank. */
  rows: number;
  hidden: number;
  /** Columns of h per tp rank. */
  ffn: number;
  out: number;
  act: 'tanh' | 'exp' | 'sigmoid';
  spelling: 'placements' | 'index';
  /** y = act(x·w1)·w2 + bias, the bias replicated (Megatron adds it after the all-reduce). */
  bias: boolean;
  mutant: Mutant;
}

export const planParams: fc.Arbitrary<PlanParams> = fc.record({
  dp: fc.integer({ min: 1, max: 2 }),
  tp: fc.integer({ min: 1, max: 2 }),
  rows: fc.integer({ min: 1, max: 4 }),
  hidden: fc.integer({ min: 1, max: 2 }),
  ffn: fc.integer({ min: 1, max: 2 }),
  out: fc.integer({ min: 1, max: 3 }),
  act: fc.constantFrom('tanh' as const, 'exp' as const, 'sigmoid' as const),
  spelling: fc.constantFrom('placements' as const, 'index' as const),
  bias: fc.boolean(),
  // about half the plans are correct as generated
  mutant: fc.oneof({ arbitrary: fc.constant('none' as Mutant), weight: 7 }, { arbitrary: fc.constantFrom(...MUTANTS.filter((m) => m !== 'none')), weight: 7 }),
});

const e = (expr: string): { expr: string } => ({ expr });

/**
 * MLP plans for zero-extension cuts (test/zero-cut.test.ts, bench/reduce-check.ts --zero-cut):
 * contracted dims large enough to cut (a block of 4 or 6 keeps 2), tanh (which keeps zeros) as
 * often as exp and sigmoid together.
 */
export const zeroCutParams: fc.Arbitrary<PlanParams> = fc.record({
  dp: fc.integer({ min: 1, max: 2 }),
  tp: fc.integer({ min: 1, max: 2 }),
  rows: fc.integer({ min: 1, max: 2 }),
  hidden: fc.constantFrom(2, 4, 6),
  ffn: fc.constantFrom(2, 4),
  out: fc.integer({ min: 1, max: 2 }),
  act: fc.constantFrom('tanh' as const, 'tanh' as const, 'exp' as const, 'sigmoid' as const),
  spelling: fc.constantFrom('placements' as const, 'index' as const),
  bias: fc.boolean(),
  mutant: fc.constantFrom(...MUTANTS),
});

export function mlpPlan(p: PlanParams): RawPlan {
  const B = p.dp * p.rows;
  const F = p.tp * p.ffn;
  const b = p.rows;
  const rowStart = p.mutant === 'swap-rows' ? `(${p.dp - 1} - dp)*${b}` : `dp*${b}`;
  const rowsIx = [e(rowStart), e(`${rowStart} + ${b}`)] as [{ expr: string }, { expr: string }];
  const yRows = [e(`dp*${b}`), e(`dp*${b} + ${b}`)] as [{ expr: string }, { expr: string }];
  const cols = [e(`tp*${p.ffn}`), e(`tp*${p.ffn} + ${p.ffn}`)] as [{ expr: string }, { expr: string }];
  const pl = (logical: string, placements: string[], index: RawLineage): RawLineage => (p.spelling === 'placements' && p.mutant !== 'swap-rows' ? { logical, placements } : index);
  const parAct = p.mutant === 'wrong-act' ? (p.act === 'tanh' ? 'sigmoid' : 'tanh') : p.act;
  const ops: RawPlan['parallel']['programs'][number]['ops'] = [
    { id: 'fc1', op: 'matmul', inputs: ['x', 'w1'], outputs: [p.mutant === 'scale-h' ? 'h0' : 'h'] },
    ...(p.mutant === 'scale-h' ? [{ id: 'bug', op: 'scale', inputs: ['h0'], outputs: ['h'], attrs: { factor: 2 } }] : []),
    { id: 'act', op: parAct, inputs: ['h'], outputs: ['a'] },
    { id: 'fc2', op: 'matmul', inputs: ['a', 'w2'], outputs: ['y_part'] },
  ];
  // With a bias: the all-reduce writes y_sum and the bias is added after it; the mutant adds
  // it to each rank's partial sum instead (tp times the bias once reduced).
  const early = p.bias && p.mutant === 'bias-before-allreduce';
  const yPre = p.bias ? 'y0' : 'y';
  const arIn = early ? 'y_pb' : 'y_part';
  const arOut = p.bias && !early ? 'y_sum' : 'y';
  if (early) ops.push({ id: 'bias', op: 'add', inputs: ['y_part', 'b'], outputs: ['y_pb'] });
  ops.push(
    p.mutant === 'drop-allreduce'
      ? { id: 'ar', op: 'identity', inputs: [arIn], outputs: [arOut] }
      : { id: 'ar', op: 'all_reduce', inputs: [arIn], outputs: [arOut], attrs: { reduce: p.mutant === 'avg-allreduce' ? 'avg' : 'sum' }, group: { axes: ['tp'] } },
  );
  if (p.bias && !early) ops.push({ id: 'bias', op: 'add', inputs: ['y_sum', 'b'], outputs: ['y'] });
  return {
    format: 'planproof/v1',
    name: `mlp-fwd-dp${p.dp}-tp${p.tp}-${p.spelling}-${p.mutant}`,
    description: 'random Megatron MLP forward (test/reduce-plans.ts)',
    mesh: { axes: [{ name: 'dp', size: p.dp }, { name: 'tp', size: p.tp }] },
    logical: {
      tensors: [
        { id: 'x', shape: [B, p.hidden], role: 'input' },
        { id: 'w1', shape: [p.hidden, F], role: 'param' },
        { id: 'w2', shape: [F, p.out], role: 'param' },
        { id: 'h', shape: [B, F], role: 'activation' },
        { id: 'a', shape: [B, F], role: 'activation' },
        { id: 'y', shape: [B, p.out], role: 'output' },
        ...(p.bias
          ? [
              { id: 'b', shape: [p.out], role: 'param' as const },
              { id: 'y0', shape: [B, p.out], role: 'activation' as const },
            ]
          : []),
      ],
      ops: [
        { id: 'fc1', op: 'matmul', inputs: ['x', 'w1'], outputs: ['h'] },
        { id: 'act', op: p.act, inputs: ['h'], outputs: ['a'] },
        ...(p.bias
          ? [
              { id: 'fc2', op: 'matmul', inputs: ['a', 'w2'], outputs: ['y0'] },
              { id: 'bias', op: 'add', inputs: ['y0', 'b'], outputs: ['y'] },
            ]
          : [{ id: 'fc2', op: 'matmul', inputs: ['a', 'w2'], outputs: ['y'] }]),
      ],
    },
    parallel: {
      programs: [
        {
          name: 'rank',
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [b, p.hidden], lineage: pl('x', ['S(0)', 'R'], { logical: 'x', index: [rowsIx, '*'] }) },
            { id: 'w1', shape: [p.hidden, p.ffn], lineage: pl('w1', ['R', 'S(1)'], { logical: 'w1', index: ['*', cols] }) },
            { id: 'w2', shape: [p.ffn, p.out], lineage: pl('w2', ['R', 'S(0)'], { logical: 'w2', index: [cols, '*'] }) },
            ...(p.mutant === 'scale-h' ? [{ id: 'h0', shape: [b, p.ffn] }] : []),
            { id: 'h', shape: [b, p.ffn], lineage: pl('h', ['S(0)', 'S(1)'], { logical: 'h', index: [yRows, cols] }) },
            { id: 'a', shape: [b, p.ffn], lineage: pl('a', ['S(0)', 'S(1)'], { logical: 'a', index: [yRows, cols] }) },
            { id: 'y_part', shape: [b, p.out], lineage: pl(yPre, ['S(0)', 'P(sum)'], { logical: yPre, index: [yRows, '*'], value: [e('tp'), p.tp] }) },
            { id: 'y', shape: [b, p.out], lineage: pl('y', ['S(0)', 'R'], { logical: 'y', index: [yRows, '*'] }) },
            ...(p.bias ? [{ id: 'b', shape: [p.out], lineage: pl('b', ['R', 'R'], { logical: 'b' }) }, { id: early ? 'y_pb' : 'y_sum', shape: [b, p.out] }] : []),
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['x', 'w1', 'w2', ...(p.bias ? ['b'] : [])], outputs: ['y'] },
  };
}

/** A one-rank MLP with a mean over rows as an extra output: the row dim's size enters a value. */
export function meanRowsPlan(): RawPlan {
  const raw = mlpPlan({ dp: 1, tp: 1, rows: 4, hidden: 1, ffn: 1, out: 2, act: 'exp', spelling: 'index', bias: false, mutant: 'none' });
  raw.logical.tensors.push({ id: 'm', shape: [2], role: 'output' });
  raw.logical.ops.push({ id: 'avg', op: 'mean', inputs: ['y'], outputs: ['m'], attrs: { dims: [0] } });
  raw.contract.outputs.push('m');
  const prog = raw.parallel.programs[0];
  prog?.tensors?.push({ id: 'm', shape: [2], lineage: { logical: 'm' } });
  prog?.ops.push({ id: 'avg', op: 'mean', inputs: ['y'], outputs: ['m'], attrs: { dims: [0] } });
  return raw;
}

export const RESHAPE_MUTANTS = ['none', 'wrong-act', 'bias-twice', 'transpose-before-merge', 'heads-swapped-in-merge', 'scale-a'] as const;
export type ReshapeMutant = (typeof RESHAPE_MUTANTS)[number];

export interface ReshapeParams {
  dp: number;
  /** Rows per dp rank. */
  rows: number;
  seq: number;
  heads: number;
  /** Head dim. */
  hd: number;
  act: 'tanh' | 'exp' | 'sigmoid';
  spelling: 'placements' | 'index';
  mutant: ReshapeMutant;
}

export const reshapeParams: fc.Arbitrary<ReshapeParams> = fc.record({
  dp: fc.integer({ min: 1, max: 2 }),
  rows: fc.integer({ min: 1, max: 2 }),
  seq: fc.constantFrom(1, 2, 4),
  heads: fc.integer({ min: 1, max: 2 }),
  hd: fc.constantFrom(1, 2, 4),
  act: fc.constantFrom('tanh' as const, 'exp' as const, 'sigmoid' as const),
  spelling: fc.constantFrom('placements' as const, 'index' as const),
  mutant: fc.oneof({ arbitrary: fc.constant('none' as ReshapeMutant), weight: 5 }, { arbitrary: fc.constantFrom(...RESHAPE_MUTANTS.filter((m) => m !== 'none')), weight: 7 }),
});

/**
 * Reshape-heavy random plans (the lane rules of reshape and expand): x [B, S, H*D] split into
 * heads, a bias [D] expanded and added, an activation, and heads merged back with the rows,
 * y [B*S, H*D]; rows over dp. The seq and head dims shrink through the reshapes' innermost
 * group dims (their `shape` attributes rewritten); B and H are outer dims of a merge and keep
 * their size. Mutants: a wrong activation, the bias added twice, a transpose of rows and seq
 * before the merge (a bug when both are > 1), heads and head dim swapped before the merge (a
 * bug when both are > 1), a scaled activation.
 */
export function reshapePlan(p: ReshapeParams): RawPlan {
  const { dp, rows: b, seq: S, heads: H, hd: D } = p;
  const B = dp * b;
  const K = H * D;
  const rowsIx = [e(`dp*${b}`), e(`dp*${b} + ${b}`)] as [{ expr: string }, { expr: string }];
  const yIx = [e(`dp*${b * S}`), e(`dp*${b * S} + ${b * S}`)] as [{ expr: string }, { expr: string }];
  const pl = (logical: string, placements: string[], index: RawLineage): RawLineage => (p.spelling === 'placements' ? { logical, placements } : index);
  const parAct = p.mutant === 'wrong-act' ? (p.act === 'tanh' ? 'sigmoid' : 'tanh') : p.act;
  const ops: RawPlan['parallel']['programs'][number]['ops'] = [
    { id: 'split', op: 'reshape', inputs: ['x'], outputs: ['r'], attrs: { shape: [b, S, H, D] } },
    { id: 'bx', op: 'expand', inputs: ['bias'], outputs: ['be'], attrs: { shape: [b, S, H, -1] } },
    { id: 'add', op: 'add', inputs: ['r', 'be'], outputs: [p.mutant === 'bias-twice' ? 's0' : 's'] },
    ...(p.mutant === 'bias-twice' ? [{ id: 'add2', op: 'add', inputs: ['s0', 'be'], outputs: ['s'] }] : []),
    { id: 'act', op: parAct, inputs: ['s'], outputs: [p.mutant === 'scale-a' ? 'a0' : 'a'] },
    ...(p.mutant === 'scale-a' ? [{ id: 'bug', op: 'scale', inputs: ['a0'], outputs: ['a'], attrs: { factor: 2 } }] : []),
  ];
  const tensors: NonNullable<RawPlan['parallel']['programs'][number]['tensors']> = [
    { id: 'x', shape: [b, S, K], lineage: pl('x', ['S(0)'], { logical: 'x', index: [rowsIx, '*', '*'] }) },
    { id: 'bias', shape: [D], lineage: pl('bias', ['R'], { logical: 'bias' }) },
    { id: 'r', shape: [b, S, H, D] },
    { id: 'be', shape: [b, S, H, D] },
    { id: 's', shape: [b, S, H, D] },
    ...(p.mutant === 'bias-twice' ? [{ id: 's0', shape: [b, S, H, D] }] : []),
    ...(p.mutant === 'scale-a' ? [{ id: 'a0', shape: [b, S, H, D] }] : []),
    { id: 'a', shape: [b, S, H, D], lineage: pl('a', ['S(0)'], { logical: 'a', index: [rowsIx, '*', '*', '*'] }) },
    { id: 'y', shape: [b * S, K], lineage: pl('y', ['S(0)'], { logical: 'y', index: [yIx, '*'] }) },
  ];
  if (p.mutant === 'transpose-before-merge') {
    ops.push({ id: 'tr', op: 'transpose', inputs: ['a'], outputs: ['t'], attrs: { dim0: 0, dim1: 1 } });
    ops.push({ id: 'merge', op: 'reshape', inputs: ['t'], outputs: ['y'], attrs: { shape: [b * S, K] } });
    tensors.push({ id: 't', shape: [S, b, H, D] });
  } else if (p.mutant === 'heads-swapped-in-merge') {
    ops.push({ id: 'tr', op: 'transpose', inputs: ['a'], outputs: ['t'], attrs: { dim0: 2, dim1: 3 } });
    ops.push({ id: 'merge', op: 'reshape', inputs: ['t'], outputs: ['y'], attrs: { shape: [-1, K] } });
    tensors.push({ id: 't', shape: [b, S, D, H] });
  } else {
    ops.push({ id: 'merge', op: 'reshape', inputs: ['a'], outputs: ['y'], attrs: { shape: [b * S, -1] } });
  }
  return {
    format: 'planproof/v1',
    name: `heads-dp${p.dp}-${p.spelling}-${p.mutant}`,
    description: 'random reshape-heavy plan (test/reduce-plans.ts)',
    mesh: { axes: [{ name: 'dp', size: dp }] },
    logical: {
      tensors: [
        { id: 'x', shape: [B, S, K], role: 'input' },
        { id: 'bias', shape: [D], role: 'param' },
        { id: 'r', shape: [B, S, H, D], role: 'activation' },
        { id: 'be', shape: [B, S, H, D], role: 'activation' },
        { id: 's', shape: [B, S, H, D], role: 'activation' },
        { id: 'a', shape: [B, S, H, D], role: 'activation' },
        { id: 'y', shape: [B * S, K], role: 'output' },
      ],
      ops: [
        { id: 'split', op: 'reshape', inputs: ['x'], outputs: ['r'], attrs: { shape: [B, S, H, D] } },
        { id: 'bx', op: 'expand', inputs: ['bias'], outputs: ['be'], attrs: { shape: [B, S, H, D] } },
        { id: 'add', op: 'add', inputs: ['r', 'be'], outputs: ['s'] },
        { id: 'act', op: p.act, inputs: ['s'], outputs: ['a'] },
        { id: 'merge', op: 'reshape', inputs: ['a'], outputs: ['y'], attrs: { shape: [B * S, K] } },
      ],
    },
    parallel: { programs: [{ name: 'rank', ranks: 'all', tensors, ops }] },
    contract: { inputs: ['x', 'bias'], outputs: ['y'] },
  };
}

export const EMBED_MUTANTS = ['none', 'avg-allreduce', 'drop-allreduce', 'scale-grad', 'ids-of-other-rank'] as const;
export type EmbedMutant = (typeof EMBED_MUTANTS)[number];

export interface EmbedParams {
  dp: number;
  rows: number;
  seq: number;
  vocab: number;
  hidden: number;
  mutant: EmbedMutant;
}

export const embedParams: fc.Arbitrary<EmbedParams> = fc.record({
  dp: fc.integer({ min: 1, max: 3 }),
  rows: fc.integer({ min: 1, max: 2 }),
  seq: fc.integer({ min: 1, max: 3 }),
  vocab: fc.integer({ min: 2, max: 6 }),
  hidden: fc.integer({ min: 1, max: 2 }),
  mutant: fc.constantFrom(...EMBED_MUTANTS),
});

/**
 * The data-parallel embedding gradient (prefix cuts of the vocab, stages/shrink/reduce.ts prefixPlan):
 * gw = embedding_backward(g, ids) [V, H] from rows of g and ids over dp, each rank's local
 * gradient all-reduced. Mutants: an averaging all-reduce, no all-reduce, a gradient scaled by
 * 2, and ids read from the next rank's rows (a bug when ranks hold different ids).
 */
export function embedPlan(p: EmbedParams): RawPlan {
  const { dp, rows: b, seq: S, vocab: V, hidden: H } = p;
  const B = dp * b;
  const rowsIx = (shift: number): [{ expr: string }, { expr: string }] => [e(`((dp + ${shift}) % ${dp})*${b}`), e(`((dp + ${shift}) % ${dp})*${b} + ${b}`)];
  const ops: RawPlan['parallel']['programs'][number]['ops'] = [{ id: 'bwd', op: 'embedding_backward', inputs: ['g', 'ids'], outputs: [p.mutant === 'scale-grad' ? 'gl0' : 'gl'], attrs: { num_embeddings: V } }];
  if (p.mutant === 'scale-grad') ops.push({ id: 'bug', op: 'scale', inputs: ['gl0'], outputs: ['gl'], attrs: { factor: 2 } });
  ops.push(p.mutant === 'drop-allreduce' ? { id: 'ar', op: 'identity', inputs: ['gl'], outputs: ['gw'] } : { id: 'ar', op: 'all_reduce', inputs: ['gl'], outputs: ['gw'], attrs: { reduce: p.mutant === 'avg-allreduce' ? 'avg' : 'sum' }, group: { axes: ['dp'] } });
  return {
    format: 'planproof/v1',
    name: `embed-grad-dp${dp}-${p.mutant}`,
    description: 'random data-parallel embedding gradient (test/reduce-plans.ts)',
    mesh: { axes: [{ name: 'dp', size: dp }] },
    logical: {
      tensors: [
        { id: 'ids', shape: [B, S], role: 'input', dtype: 'int64', values: { range: [0, V] } },
        { id: 'g', shape: [B, S, H], role: 'input' },
        { id: 'gw', shape: [V, H], role: 'grad' },
      ],
      ops: [{ id: 'bwd', op: 'embedding_backward', inputs: ['g', 'ids'], outputs: ['gw'], attrs: { num_embeddings: V } }],
    },
    parallel: {
      programs: [
        {
          name: 'rank',
          ranks: 'all',
          tensors: [
            { id: 'ids', shape: [b, S], lineage: { logical: 'ids', index: [rowsIx(p.mutant === 'ids-of-other-rank' ? 1 : 0), '*'] } },
            { id: 'g', shape: [b, S, H], lineage: { logical: 'g', index: [rowsIx(0), '*', '*'] } },
            ...(p.mutant === 'scale-grad' ? [{ id: 'gl0', shape: [V, H] }] : []),
            { id: 'gl', shape: [V, H], lineage: { logical: 'gw', index: ['*', '*'], value: [e('dp'), dp] } },
            { id: 'gw', shape: [V, H], lineage: { logical: 'gw' } },
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['ids', 'g'], outputs: ['gw'] },
  };
}
