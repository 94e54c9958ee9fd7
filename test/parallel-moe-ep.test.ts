import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';

/**
 * Expert-parallel MoE layers over ep=2 (the all_to_all token exchange of GShard / DeepSpeed-MoE
 * / Megatron's alltoall dispatcher), with routing indices kept symbolic: every proof holds for
 * every routing, including uneven ones where all tokens pick one expert.
 *
 * Logical (one device): buf = moe_dispatch(x, idx) [E, N*k, D] (dropless, slots sorted by
 * expert in token order); h = buf @ w, batched over experts (w [E, D, F]); y = moe_combine(h,
 * idx[, gate]) [N, F].
 *
 * Parallel, rank r: its N/2 tokens and their routing (S(0)), the weights of its E/2 experts.
 * It dispatches its own tokens into [E, (N/2)*k, D] (each expert's rows padded to the local
 * dropless capacity), all_to_all(split 0, concat 1) hands every rank its experts' rows from
 * both ranks ([E/2, N*k, D]: rank 0's slots, then rank 1's), the local experts run, and
 * all_to_all(split 1, concat 0) sends every rank's slots back to it ([E, (N/2)*k, F]) for
 * combine. Only x, idx, the weights and y have lineage: the exchanged buffers are laid out by
 * source rank and local capacity, which is no slice of any logical tensor, so the whole layer
 * is one stage (y).
 *
 * Sizes are tiny on purpose: a routed slot's buffer position depends on the choices of all
 * earlier slots, so the exact normal form enumerates joint routings (E^(N*k) cases) and grows
 * fast with D and F (see the notes by each plan).
 */

const EP = 2;

interface Sizes {
  readonly N: number; // tokens
  readonly D: number; // model dim
  readonly F: number; // expert output dim
  readonly E: number; // experts
  readonly k: number; // experts per token
}

const e = (expr: string): object => ({ expr });
const lin = (logical: string, placements: string[]): object => ({ logical, placements });

/**
 * Expert placement: `contiguous` puts experts [r*E/2, (r+1)*E/2) on rank r (w sharded S(0));
 * `round-robin` puts expert j on rank j % 2 (Megatron's / DeepSpeed's alternative), so the
 * dispatch buffer's expert dim is permuted to [0, 2, 1, 3] before the exchange and permuted
 * back after the return, and rank r's weights are the striped rows {r, r + 2}.
 */
type Layout = 'contiguous' | 'round-robin';

/**
 * Near misses (real EP bugs), all shape-correct:
 * - `experts-swapped`: rank r loads the other rank's expert weights (lineage honest: experts
 *   2-3 on rank 0), while the dispatch all_to_all still sends it experts 0-1's tokens.
 * - `other-rank-indices`: combine reads the other rank's routing indices (a stale / mis-sliced
 *   routing map), so the rank's own tokens gather the wrong expert rows.
 * - `rr-contiguous-weights`: round-robin dispatch, but the checkpoint is sharded contiguously
 *   (w S(0)): rank 0 runs experts 0 and 2's tokens through experts 0 and 1's weights.
 * - `rr-no-unpermute`: round-robin, but the expert dim of the returned buffer is not permuted
 *   back before combine, so experts 1 and 2's rows trade places.
 * `return-not-swapped` (the return all_to_all with the dispatch's split/concat dims) is a shape
 * error, rejected when the plan is loaded.
 */
type Bug = 'none' | 'experts-swapped' | 'other-rank-indices' | 'rr-contiguous-weights' | 'rr-no-unpermute' | 'return-not-swapped';

function epMoe(sz: Sizes, layout: Layout, bug: Bug): unknown {
  const { N, D, F, E, k } = sz;
  const NL = N / EP;
  const EL = E / EP;
  const slots = NL * k;
  const rr = layout === 'round-robin';
  // Rank r's expert weights, in the order its received buffer lists the experts.
  const contiguousW = (rank: string): object => ({ logical: 'w', index: [[e(`${EL}*${rank}`), e(`${EL}*${rank} + ${EL}`)], '*', '*'] });
  const stripedW = { logical: 'w', index: [Array.from({ length: EL }, (_, a) => [e(`${EP * a} + ep`), e(`${EP * a} + ep + 1`)]), '*', '*'] };
  const wLineage = bug === 'experts-swapped' ? contiguousW('(1 - ep)') : rr && bug !== 'rr-contiguous-weights' ? stripedW : contiguousW('ep');
  // Expert-dim permutation between expert order and round-robin (rank-major) order: the
  // transpose of an [EL, EP] grid (its inverse is the transpose of the [EP, EL] grid).
  const permute = (from: string, to: string, grid: [number, number], last: number): object[] => [
    { id: `${to}_grid`, op: 'reshape', inputs: [from], outputs: [`${to}_g`], attrs: { shape: [...grid, slots, last] } },
    { id: `${to}_swap`, op: 'transpose', inputs: [`${to}_g`], outputs: [`${to}_t`], attrs: { dim0: 0, dim1: 1 } },
    { id: `${to}_flat`, op: 'reshape', inputs: [`${to}_t`], outputs: [to], attrs: { shape: [E, slots, last] } },
  ];
  const permTensors = (to: string, grid: [number, number], last: number): object[] => [
    { id: `${to}_g`, shape: [...grid, slots, last] },
    { id: `${to}_t`, shape: [grid[1], grid[0], slots, last] },
    { id: to, shape: [E, slots, last] },
  ];
  const unpermute = rr && bug !== 'rr-no-unpermute';
  const returnDims = bug === 'return-not-swapped' ? { split_dim: 0, concat_dim: 1 } : { split_dim: 1, concat_dim: 0 };
  return {
    format: 'planproof/v1',
    name: `moe-ep2-${layout}${bug === 'none' ? '' : `-${bug}`}`,
    mesh: { axes: [{ name: 'ep', size: EP }] },
    logical: {
      tensors: [
        { id: 'x', shape: [N, D], role: 'input' },
        { id: 'idx', shape: [N, k], role: 'input', dtype: 'int64', values: { range: [0, E] } },
        { id: 'w', shape: [E, D, F], role: 'param' },
        { id: 'buf', shape: [E, N * k, D], role: 'activation' },
        { id: 'h', shape: [E, N * k, F], role: 'activation' },
        { id: 'y', shape: [N, F], role: 'output' },
      ],
      ops: [
        { id: 'dispatch', op: 'moe_dispatch', inputs: ['x', 'idx'], outputs: ['buf'], attrs: { experts: E } },
        { id: 'experts', op: 'matmul', inputs: ['buf', 'w'], outputs: ['h'] },
        { id: 'combine', op: 'moe_combine', inputs: ['h', 'idx'], outputs: ['y'] },
      ],
    },
    parallel: {
      programs: [
        {
          name: 'ep-rank',
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [NL, D], lineage: lin('x', ['S(0)']) },
            { id: 'idx', shape: [NL, k], lineage: lin('idx', ['S(0)']) },
            ...(bug === 'other-rank-indices' ? [{ id: 'idx_other', shape: [NL, k], lineage: { logical: 'idx', index: [[e(`${NL}*(1 - ep)`), e(`${NL}*(1 - ep) + ${NL}`)], '*'] } }] : []),
            { id: 'w', shape: [EL, D, F], lineage: wLineage },
            { id: 'buf', shape: [E, slots, D] },
            ...(rr ? permTensors('send', [EL, EP], D) : []),
            { id: 'recv', shape: [EL, N * k, D] },
            { id: 'h', shape: [EL, N * k, F] },
            { id: 'back', shape: [E, slots, F] },
            ...(unpermute ? permTensors('back_e', [EP, EL], F) : []),
            { id: 'y', shape: [NL, F], lineage: lin('y', ['S(0)']) },
          ],
          ops: [
            { id: 'dispatch', op: 'moe_dispatch', inputs: ['x', 'idx'], outputs: ['buf'], attrs: { experts: E } },
            ...(rr ? permute('buf', 'send', [EL, EP], D) : []),
            { id: 'a2a_dispatch', op: 'all_to_all', inputs: [rr ? 'send' : 'buf'], outputs: ['recv'], attrs: { split_dim: 0, concat_dim: 1 }, group: { axes: ['ep'] } },
            { id: 'experts', op: 'matmul', inputs: ['recv', 'w'], outputs: ['h'] },
            { id: 'a2a_combine', op: 'all_to_all', inputs: ['h'], outputs: ['back'], attrs: returnDims, group: { axes: ['ep'] } },
            ...(unpermute ? permute('back', 'back_e', [EP, EL], F) : []),
            { id: 'combine', op: 'moe_combine', inputs: [unpermute ? 'back_e' : 'back', bug === 'other-rank-indices' ? 'idx_other' : 'idx'], outputs: ['y'] },
          ],
        },
      ],
    },
    contract: { inputs: ['x', 'idx', 'w'], outputs: ['y'] },
  };
}

/**
 * The same layer with a real router and top-2 gating (Mixtral-style, without renormalizing the
 * gates): scores = softmax(x @ wr), (gate, idx) = topk(scores, 2), dispatch unweighted, combine
 * weighted by gate. The router weight is replicated; each rank routes its own tokens. The
 * choices of topk are uninterpreted (the same scores always choose the same experts), so the
 * proof holds for any tie-breaking.
 *
 * Near miss `gates-swapped`: the rank combines with the gates of the wrong slot (gate columns
 * reversed, as after re-sorting indices without their gates): each token mixes its two experts'
 * outputs with each other's weights.
 */
type RoutedBug = 'none' | 'gates-swapped';

function epMoeRouted(sz: Sizes, bug: RoutedBug): unknown {
  const { N, D, F, E, k } = sz;
  const NL = N / EP;
  const EL = E / EP;
  const swapped = bug === 'gates-swapped';
  const routing = [
    { id: 'router', op: 'matmul', inputs: ['x', 'wr'], outputs: ['logits'] },
    { id: 'probs', op: 'softmax', inputs: ['logits'], outputs: ['scores'], attrs: { dim: -1 } },
    { id: 'route', op: 'topk', inputs: ['scores'], outputs: ['gate', 'idx'], attrs: { k } },
  ];
  return {
    format: 'planproof/v1',
    name: `moe-ep2-routed${swapped ? '-gates-swapped' : ''}`,
    mesh: { axes: [{ name: 'ep', size: EP }] },
    logical: {
      tensors: [
        { id: 'x', shape: [N, D], role: 'input' },
        { id: 'wr', shape: [D, E], role: 'param' },
        { id: 'w', shape: [E, D, F], role: 'param' },
        { id: 'logits', shape: [N, E], role: 'activation' },
        { id: 'scores', shape: [N, E], role: 'activation' },
        { id: 'gate', shape: [N, k], role: 'activation' },
        { id: 'idx', shape: [N, k], role: 'activation', dtype: 'int64' },
        { id: 'buf', shape: [E, N * k, D], role: 'activation' },
        { id: 'h', shape: [E, N * k, F], role: 'activation' },
        { id: 'y', shape: [N, F], role: 'output' },
      ],
      ops: [
        ...routing,
        { id: 'dispatch', op: 'moe_dispatch', inputs: ['x', 'idx'], outputs: ['buf'], attrs: { experts: E } },
        { id: 'experts', op: 'matmul', inputs: ['buf', 'w'], outputs: ['h'] },
        { id: 'combine', op: 'moe_combine', inputs: ['h', 'idx', 'gate'], outputs: ['y'] },
      ],
    },
    parallel: {
      programs: [
        {
          name: 'ep-rank',
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [NL, D], lineage: lin('x', ['S(0)']) },
            { id: 'wr', shape: [D, E], lineage: lin('wr', ['R']) },
            { id: 'w', shape: [EL, D, F], lineage: lin('w', ['S(0)']) },
            { id: 'logits', shape: [NL, E] },
            { id: 'scores', shape: [NL, E] },
            { id: 'gate', shape: [NL, k] },
            { id: 'idx', shape: [NL, k] },
            ...(swapped
              ? [
                  { id: 'gate0', shape: [NL, 1] },
                  { id: 'gate1', shape: [NL, 1] },
                  { id: 'gate_rev', shape: [NL, 2] },
                ]
              : []),
            { id: 'buf', shape: [E, NL * k, D] },
            { id: 'recv', shape: [EL, N * k, D] },
            { id: 'h', shape: [EL, N * k, F] },
            { id: 'back', shape: [E, NL * k, F] },
            { id: 'y', shape: [NL, F], lineage: lin('y', ['S(0)']) },
          ],
          ops: [
            ...routing,
            ...(swapped
              ? [
                  { id: 'gate_split', op: 'split', inputs: ['gate'], outputs: ['gate0', 'gate1'], attrs: { dim: 1, sizes: [1, 1] } },
                  { id: 'gate_swap', op: 'concat', inputs: ['gate1', 'gate0'], outputs: ['gate_rev'], attrs: { dim: 1 } },
                ]
              : []),
            { id: 'dispatch', op: 'moe_dispatch', inputs: ['x', 'idx'], outputs: ['buf'], attrs: { experts: E } },
            { id: 'a2a_dispatch', op: 'all_to_all', inputs: ['buf'], outputs: ['recv'], attrs: { split_dim: 0, concat_dim: 1 }, group: { axes: ['ep'] } },
            { id: 'experts', op: 'matmul', inputs: ['recv', 'w'], outputs: ['h'] },
            { id: 'a2a_combine', op: 'all_to_all', inputs: ['h'], outputs: ['back'], attrs: { split_dim: 1, concat_dim: 0 }, group: { axes: ['ep'] } },
            { id: 'combine', op: 'moe_combine', inputs: ['back', 'idx', swapped ? 'gate_rev' : 'gate'], outputs: ['y'] },
          ],
        },
      ],
    },
    contract: { inputs: ['x', 'wr', 'w'], outputs: ['y'] },
  };
}

function stages(r: VerifyReport): string {
  return `${r.summary}\n${r.stages.map((s) => `${s.logical}: ${s.status} ${s.reason ?? ''}`).join('\n')}`;
}

function assertVerified(r: VerifyReport): void {
  assert.equal(r.verdict, 'verified', stages(r));
  assert.deepEqual(
    r.stages.map((s) => [s.logical, s.status]),
    [['y', 'proved']],
    stages(r),
  );
}

/** The single stage y is refuted on both ranks with concrete differing values. */
function assertRefutedAtOutput(r: VerifyReport): void {
  assert.equal(r.verdict, 'not_equivalent', stages(r));
  const first = r.stages.find((s) => s.status !== 'proved');
  assert.ok(first !== undefined, stages(r));
  assert.equal(first.logical, 'y', stages(r));
  assert.equal(first.status, 'not_equivalent', stages(r));
  assert.equal(first.op?.kind, 'moe_combine');
  assert.deepEqual(first.failingRanks, [0, 1], stages(r));
  const witness = first.witness ?? [];
  assert.ok(witness.length > 0, stages(r));
  for (const m of witness) assert.notEqual(m.parallel, m.expected, JSON.stringify(m));
}

// Top-1, 4 tokens, 4 experts (two per rank): 4^4 joint routings. D = F = 2 is past the exact
// normal form's budget (more than 10^6 monomial products); D = 2, F = 1 is not.
const TOP1: Sizes = { N: 4, D: 2, F: 1, E: 4, k: 1 };

describe('expert-parallel MoE over ep=2 (routing indices as an integer input)', () => {
  it('contiguous experts: dispatch, all_to_all(0 -> 1), local experts, all_to_all(1 -> 0), combine is verified for every routing', () => {
    assertVerified(verifyPlan(loadPlanObject('moe-ep.json', epMoe(TOP1, 'contiguous', 'none'))));
  });

  it('each rank holding the other rank\'s expert weights (tokens of experts 0-1 run through experts 2-3) is refuted at y with a witness', () => {
    assertRefutedAtOutput(verifyPlan(loadPlanObject('moe-ep-swapped.json', epMoe(TOP1, 'contiguous', 'experts-swapped'))));
  });

  it('combine reading the other rank\'s routing indices is refuted at y with a witness @full', () => {
    assertRefutedAtOutput(verifyPlan(loadPlanObject('moe-ep-other-idx.json', epMoe(TOP1, 'contiguous', 'other-rank-indices'))));
  });

  it('the return all_to_all with the dispatch\'s split/concat dims (not swapped back) is rejected at load as a shape error', () => {
    assert.throws(
      () => loadPlanObject('moe-ep-return.json', epMoe(TOP1, 'contiguous', 'return-not-swapped')),
      (err: unknown) => {
        assert.ok(err instanceof PlanError, String(err));
        // Named by file, JSON path and op, with the shape the exchange would really produce.
        assert.match(err.message, /^moe-ep-return\.json: \$\.parallel\.programs\[0\]\.ops\[\d+\] rank 0 op 'a2a_combine': output is declared \[4, 2, 1\] but all_to_all over 2 ranks of \[2, 4, 1\] gives \[1, 8, 1\]$/m);
        return true;
      },
    );
  });

  it('round-robin experts (expert j on rank j % 2, permuted before and after the exchange) is verified', () => {
    assertVerified(verifyPlan(loadPlanObject('moe-ep-rr.json', epMoe(TOP1, 'round-robin', 'none'))));
  });

  it('round-robin dispatch with contiguously sharded expert weights is refuted at y with a witness', () => {
    assertRefutedAtOutput(verifyPlan(loadPlanObject('moe-ep-rr-w.json', epMoe(TOP1, 'round-robin', 'rr-contiguous-weights'))));
  });

  it('round-robin with the returned buffer not permuted back to expert order is refuted at y with a witness', () => {
    assertRefutedAtOutput(verifyPlan(loadPlanObject('moe-ep-rr-perm.json', epMoe(TOP1, 'round-robin', 'rr-no-unpermute'))));
  });
});

// Top-2 of 2 experts (one per rank), 4 tokens, D = F = 1: 2^8 joint choices. D = 2 is past the
// exact normal form's budget with the softmax gates.
const TOP2: Sizes = { N: 4, D: 1, F: 1, E: 2, k: 2 };

describe('expert-parallel MoE over ep=2 with a softmax router and top-2 gates', () => {
  it('each rank routing its own tokens with the replicated router, gate-weighted combine, is verified for every top-k choice', () => {
    assertVerified(verifyPlan(loadPlanObject('moe-ep-routed.json', epMoeRouted(TOP2, 'none'))));
  });

  it('combining with the gates of the wrong slot is refuted at y with a witness @full', () => {
    assertRefutedAtOutput(verifyPlan(loadPlanObject('moe-ep-routed-gates.json', epMoeRouted(TOP2, 'gates-swapped'))));
  });
});
