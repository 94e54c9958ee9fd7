import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan, verifyPlanInPool } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';

/**
 * Megatron's vocab-parallel embedding and cross-entropy over tp=2, with token ids and labels
 * symbolic over the whole vocabulary (V = 4): each rank owns rows [2 tp, 2 tp + 2).
 */
const V = 4;
const VL = V / 2;
const N = 3;
const D = 2;
const e = (expr: string): object => ({ expr });
const start = e(`${VL}*tp`);
const end = e(`${VL}*tp + ${VL}`);
const T = (id: string, shape: number[], role: string, extra: object = {}): object => ({ id, shape, role, ...extra });
const ids = (id: string): object => T(id, [N], 'input', { dtype: 'int64', values: { range: [0, V] } });

/**
 * VocabParallelEmbedding: mask the ids the rank does not own, look the others up in the local
 * shard, zero the rows of masked ids, all-reduce the partial rows.
 * - `no-zeroing`: masked ids were set to 0 but their rows are not zeroed, so every rank adds
 *   its local row 0 for ids it does not own (TTrace's wrong embedding mask under TP).
 * - `wrong-range`: rank 1 believes it owns [1, 3) (an off-by-one vocab start).
 */
function vocabEmbedding(bug: 'none' | 'no-zeroing' | 'wrong-range'): unknown {
  const s = bug === 'wrong-range' ? e(`${VL}*tp - tp`) : start;
  const en = bug === 'wrong-range' ? e(`${VL}*tp + ${VL} - tp`) : end;
  const ops: object[] = [
    { id: 'mask', op: 'vocab_mask', inputs: ['ids_r'], outputs: ['mask'], attrs: { start: s, end: en } },
    { id: 'local', op: 'vocab_local_ids', inputs: ['ids_r'], outputs: ['local'], attrs: { start: s, end: en } },
    { id: 'lookup', op: 'embedding', inputs: ['local', 'w_r'], outputs: [bug === 'no-zeroing' ? 'emb_part' : 'rows'] },
  ];
  if (bug !== 'no-zeroing') {
    ops.push(
      { id: 'mask2', op: 'reshape', inputs: ['mask'], outputs: ['mask2'], attrs: { shape: [N, 1] } },
      { id: 'zeros', op: 'scale', inputs: ['rows'], outputs: ['zeros'], attrs: { factor: 0 } },
      { id: 'zero_masked', op: 'where', inputs: ['mask2', 'zeros', 'rows'], outputs: ['emb_part'] },
    );
  }
  ops.push({ id: 'ar', op: 'all_reduce', inputs: ['emb_part'], outputs: ['emb_r'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } });
  return {
    format: 'planproof/v1',
    name: `vocab-parallel-embedding-${bug}`,
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [ids('ids'), T('w', [V, D], 'param'), T('emb', [N, D], 'output')],
      ops: [{ id: 'embed', op: 'embedding', inputs: ['ids', 'w'], outputs: ['emb'] }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'ids_r', shape: [N], dtype: 'int64', lineage: { logical: 'ids', placements: ['R'] } },
            { id: 'w_r', shape: [VL, D], lineage: { logical: 'w', placements: ['S(0)'] } },
            { id: 'mask', shape: [N] },
            { id: 'local', shape: [N], dtype: 'int64' },
            ...(bug === 'no-zeroing' ? [] : [{ id: 'rows', shape: [N, D] }, { id: 'mask2', shape: [N, 1] }, { id: 'zeros', shape: [N, D] }]),
            { id: 'emb_part', shape: [N, D], lineage: { logical: 'emb', placements: ['P(sum)'] } },
            { id: 'emb_r', shape: [N, D], lineage: { logical: 'emb', placements: ['R'] } },
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['ids', 'w'], outputs: ['emb'] },
  };
}

/**
 * Megatron's vocab_parallel_cross_entropy: logits sharded over the vocabulary. The row max is
 * all-reduced (max), logits are shifted by it, each rank contributes the target logit if it
 * owns the label (all-reduce sum) and its sum of exp (all-reduce sum); loss = log(sum exp) -
 * target, averaged over tokens. Logically: F.cross_entropy(logits, labels).
 * - `local-target`: the predicted-logit all-reduce is left out (each rank uses its own
 *   contribution, zero when it does not own the label).
 * - `local-max`: the max is not all-reduced (each rank shifts by its local max) while the sums
 *   of exp are still added across ranks.
 *
 * `shift` is the per-row value subtracted from the logits (issue 37): any value that is the
 * same on every element of a row is correct (softmax and log-sum-exp are shift invariant).
 * - `max`: the all-reduced row max (Megatron);
 * - `sum`: the all-reduced row sum; `mean`: the all-reduced (avg) mean of the shard means;
 * - `const`: 5/2 times the row index (iota): constant along the row, different per row;
 * - `varying` (wrong): half the logits themselves, a different value on every element, so the
 *   "loss" is a softmax at temperature 2, not cross-entropy;
 * - `min-of-max`: the min-all-reduce of the shards' maxima, one value on the row and on every
 *   rank (not the row max, but a shift all the same);
 * - `min-of-max-per-rank` (wrong): that value times 1 + tp, so rank 1 shifts its shard by twice
 *   what rank 0 does: constant along each shard, different across ranks.
 */
type Shift = 'max' | 'sum' | 'mean' | 'const' | 'varying' | 'min-of-max' | 'min-of-max-per-rank';

/** The ops computing `m` (the shift) from `logits_r` on each rank, and their tensors. */
function shiftOps(shift: Shift, bug: 'none' | 'local-target' | 'local-max'): { ops: object[]; tensors: object[] } {
  const CL = VL;
  switch (shift) {
    case 'max':
      return {
        ops: [
          { id: 'max_local', op: 'amax', inputs: ['logits_r'], outputs: [bug === 'local-max' ? 'm' : 'm_local'], attrs: { dims: [1], keepdim: true } },
          ...(bug === 'local-max' ? [] : [{ id: 'ar_max', op: 'all_reduce', inputs: ['m_local'], outputs: ['m'], attrs: { reduce: 'max' }, group: { axes: ['tp'] } }]),
        ],
        tensors: [...(bug === 'local-max' ? [] : [{ id: 'm_local', shape: [N, 1] }]), { id: 'm', shape: [N, 1] }],
      };
    case 'sum':
    case 'mean': {
      const op = shift === 'sum' ? 'sum' : 'mean';
      return {
        ops: [
          { id: 'shift_local', op, inputs: ['logits_r'], outputs: ['m_local'], attrs: { dims: [1], keepdim: true } },
          { id: 'ar_shift', op: 'all_reduce', inputs: ['m_local'], outputs: ['m'], attrs: { reduce: shift === 'sum' ? 'sum' : 'avg' }, group: { axes: ['tp'] } },
        ],
        tensors: [{ id: 'm_local', shape: [N, 1] }, { id: 'm', shape: [N, 1] }],
      };
    }
    case 'const':
      return {
        ops: [
          { id: 'zero_all', op: 'scale', inputs: ['logits_r'], outputs: ['zero_all'], attrs: { factor: 0 } },
          { id: 'zero', op: 'sum', inputs: ['zero_all'], outputs: ['zero'] },
          { id: 'rows_iota', op: 'iota', inputs: ['zero'], outputs: ['m'], attrs: { shape: [N, 1], dim: 0, step: '5/2' } },
        ],
        tensors: [{ id: 'zero_all', shape: [N, CL] }, { id: 'zero', shape: [] }, { id: 'm', shape: [N, 1] }],
      };
    case 'min-of-max':
    case 'min-of-max-per-rank': {
      const perRank = shift === 'min-of-max-per-rank';
      return {
        ops: [
          { id: 'max_local', op: 'amax', inputs: ['logits_r'], outputs: ['m_local'], attrs: { dims: [1], keepdim: true } },
          { id: 'ar_min', op: 'all_reduce', inputs: ['m_local'], outputs: [perRank ? 'm_min' : 'm'], attrs: { reduce: 'min' }, group: { axes: ['tp'] } },
          ...(perRank ? [{ id: 'per_rank', op: 'scale', inputs: ['m_min'], outputs: ['m'], attrs: { factor: e('1 + tp') } }] : []),
        ],
        tensors: [{ id: 'm_local', shape: [N, 1] }, ...(perRank ? [{ id: 'm_min', shape: [N, 1] }] : []), { id: 'm', shape: [N, 1] }],
      };
    }
    case 'varying':
      return {
        ops: [{ id: 'half', op: 'scale', inputs: ['logits_r'], outputs: ['m'], attrs: { factor: '1/2' } }],
        tensors: [{ id: 'm', shape: [N, CL] }],
      };
  }
}

/**
 * `predReduce`: the reduce op of the target-logit all-reduce. Each rank contributes its shifted
 * target logit x_t − m if it owns the label, else 0; Megatron adds them. With m the row max,
 * x_t − m ≤ 0, so min gives the same value (min(0, x_t − max_j x_j) = x_t − max_j x_j: the
 * normal form's order rule for max and min, docs/engine.md), and max gives 0 (wrong).
 */
function vocabCrossEntropy(bug: 'none' | 'local-target' | 'local-max', shift: Shift = 'max', predReduce: 'sum' | 'min' | 'max' = 'sum'): unknown {
  const C = V;
  const CL = VL;
  const rangeAttrs = { start, end };
  const sh = shiftOps(shift, bug);
  const ops: object[] = [
    ...sh.ops,
    { id: 'shift', op: 'sub', inputs: ['logits_r', 'm'], outputs: ['sh'] },
    { id: 'mask', op: 'vocab_mask', inputs: ['labels_r'], outputs: ['mask'], attrs: rangeAttrs },
    { id: 'local', op: 'vocab_local_ids', inputs: ['labels_r'], outputs: ['local'], attrs: rangeAttrs },
    { id: 'local2', op: 'reshape', inputs: ['local'], outputs: ['local2'], attrs: { shape: [N, 1] } },
    { id: 'pick', op: 'gather', inputs: ['sh', 'local2'], outputs: ['pick2'] },
    { id: 'pick1', op: 'reshape', inputs: ['pick2'], outputs: ['pick'], attrs: { shape: [N] } },
    { id: 'zeros', op: 'scale', inputs: ['pick'], outputs: ['zeros'], attrs: { factor: 0 } },
    { id: 'pred_local', op: 'where', inputs: ['mask', 'zeros', 'pick'], outputs: [bug === 'local-target' ? 'pred' : 'pred_part'] },
    ...(bug === 'local-target' ? [] : [{ id: 'ar_pred', op: 'all_reduce', inputs: ['pred_part'], outputs: ['pred'], attrs: { reduce: predReduce }, group: { axes: ['tp'] } }]),
    { id: 'exp', op: 'exp', inputs: ['sh'], outputs: ['ex'] },
    { id: 'sum_local', op: 'sum', inputs: ['ex'], outputs: ['s_part'], attrs: { dims: [1] } },
    { id: 'ar_sum', op: 'all_reduce', inputs: ['s_part'], outputs: ['s'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } },
    { id: 'log', op: 'log', inputs: ['s'], outputs: ['lse'] },
    { id: 'rows', op: 'sub', inputs: ['lse', 'pred'], outputs: ['rows'] },
    { id: 'mean', op: 'mean', inputs: ['rows'], outputs: ['loss_r'] },
  ];
  return {
    format: 'planproof/v1',
    name: `vocab-parallel-cross-entropy-${bug}${shift === 'max' ? '' : `-${shift}`}${predReduce === 'sum' ? '' : `-pred-${predReduce}`}`,
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [T('logits', [N, C], 'input'), ids('labels'), T('loss', [], 'output')],
      ops: [{ id: 'ce', op: 'cross_entropy', inputs: ['logits', 'labels'], outputs: ['loss'], attrs: { reduction: 'mean' } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'logits_r', shape: [N, CL], lineage: { logical: 'logits', placements: ['S(1)'] } },
            { id: 'labels_r', shape: [N], dtype: 'int64', lineage: { logical: 'labels', placements: ['R'] } },
            ...sh.tensors,
            { id: 'sh', shape: [N, CL] },
            { id: 'mask', shape: [N] },
            { id: 'local', shape: [N], dtype: 'int64' },
            { id: 'local2', shape: [N, 1], dtype: 'int64' },
            { id: 'pick2', shape: [N, 1] },
            { id: 'pick', shape: [N] },
            { id: 'zeros', shape: [N] },
            ...(bug === 'local-target' ? [] : [{ id: 'pred_part', shape: [N] }]),
            { id: 'pred', shape: [N] },
            { id: 'ex', shape: [N, CL] },
            { id: 's_part', shape: [N] },
            { id: 's', shape: [N] },
            { id: 'lse', shape: [N] },
            { id: 'rows', shape: [N] },
            { id: 'loss_r', shape: [], lineage: { logical: 'loss', placements: ['R'] } },
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['logits', 'labels'], outputs: ['loss'] },
  };
}

function firstFailing(r: VerifyReport): VerifyReport['stages'][number] {
  const f = r.stages.find((s) => s.status === 'not_equivalent');
  assert.ok(f !== undefined, r.summary);
  return f;
}

describe('vocab-parallel embedding and cross-entropy (ids symbolic over the vocabulary)', () => {
  it('VocabParallelEmbedding over tp=2 is verified for every token id', () => {
    const r = verifyPlan(loadPlanObject('vp-emb.json', vocabEmbedding('none')));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.deepEqual(r.stages.map((s) => s.logical), ['emb']);
  });
  for (const bug of ['no-zeroing', 'wrong-range'] as const) {
    it(`vocab-parallel embedding near miss '${bug}' is refuted at emb with a witness`, () => {
      const r = verifyPlan(loadPlanObject('vp-emb-bug.json', vocabEmbedding(bug)));
      assert.equal(r.verdict, 'not_equivalent', r.summary);
      const f = firstFailing(r);
      assert.equal(f.logical, 'emb');
      assert.ok((f.witness ?? []).length > 0);
    });
  }
  it("Megatron's vocab-parallel cross-entropy over tp=2 is verified against F.cross_entropy", () => {
    const r = verifyPlan(loadPlanObject('vp-ce.json', vocabCrossEntropy('none')));
    assert.equal(r.verdict, 'verified', r.summary);
  });
  // Z3 (ids as integers constrained to their values) cross-checks the embedding. The
  // cross-entropy stage, with exp, log and max over the vocabulary, times out in Z3: the
  // normal form is what proves it (docs/engine.md).
  it('z3 agrees on the vocab-parallel embedding: proved, and the no-zeroing twin refuted @full', async () => {
    for (const [plan, want] of [
      [vocabEmbedding('none'), 'verified'],
      [vocabEmbedding('no-zeroing'), 'not_equivalent'],
    ] as const) {
      const r = await verifyPlanInPool(loadPlanObject('vp.json', plan), '', { jobs: 0, deadlineMs: 30_000, engine: 'z3' });
      assert.equal(r.verdict, want, `${(plan as { name: string }).name}: ${r.summary} ${r.stages.map((s) => s.reason ?? '').join('; ')}`);
    }
  });
  for (const bug of ['local-target', 'local-max'] as const) {
    it(`vocab-parallel cross-entropy near miss '${bug}' is refuted at loss with a witness`, () => {
      const r = verifyPlan(loadPlanObject('vp-ce-bug.json', vocabCrossEntropy(bug)));
      assert.equal(r.verdict, 'not_equivalent', r.summary);
      const f = firstFailing(r);
      assert.equal(f.logical, 'loss');
      assert.ok((f.witness ?? []).length > 0);
    });
  }
  for (const shift of ['sum', 'mean', 'const'] as const) {
    it(`vocab-parallel cross-entropy shifted by the row ${shift} (not the max) is verified: shift invariance`, () => {
      const r = verifyPlan(loadPlanObject('vp-ce-shift.json', vocabCrossEntropy('none', shift)));
      assert.equal(r.verdict, 'verified', `${r.summary} ${r.stages.map((s) => s.reason ?? '').join('; ')}`);
    });
  }
  it('vocab-parallel cross-entropy shifted by a value that varies along the row is refuted at loss with a witness', () => {
    const r = verifyPlan(loadPlanObject('vp-ce-vary.json', vocabCrossEntropy('none', 'varying')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const f = firstFailing(r);
    assert.equal(f.logical, 'loss');
    assert.ok((f.witness ?? []).length > 0);
  });
  // The shift by the min-all-reduce of the shards' maxima is one value on the row and on every
  // rank: absorbed by log (shift invariance). Scaled by 1 + tp it differs across ranks.
  it('vocab-parallel cross-entropy shifted by the min-all-reduce of the local maxima is verified: shift invariance', () => {
    const r = verifyPlan(loadPlanObject('vp-ce-minmax.json', vocabCrossEntropy('none', 'min-of-max')));
    assert.equal(r.verdict, 'verified', `${r.summary} ${r.stages.map((s) => s.reason ?? '').join('; ')}`);
  });
  it('vocab-parallel cross-entropy whose shift differs across ranks (min of the maxima times 1 + tp) is refuted at loss with a witness', () => {
    const r = verifyPlan(loadPlanObject('vp-ce-minmax-rank.json', vocabCrossEntropy('none', 'min-of-max-per-rank')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const f = firstFailing(r);
    assert.equal(f.logical, 'loss');
    assert.ok((f.witness ?? []).length > 0);
  });
  // The target-logit all-reduce by min (test/fixtures: a reduce-op mutant of gpt2 tp2 that was
  // "unknown"): x_t − max_j x_j ≤ 0 on the owning rank, 0 elsewhere, so min = sum. Not when the
  // shifted target can be positive (shift by the min of the maxima), nor with max.
  it('vocab-parallel cross-entropy with the target logit min-all-reduced (shift by the row max) is verified: x_t − max ≤ 0', () => {
    const r = verifyPlan(loadPlanObject('vp-ce-pred-min.json', vocabCrossEntropy('none', 'max', 'min')));
    assert.equal(r.verdict, 'verified', `${r.summary} ${r.stages.map((s) => s.reason ?? '').join('; ')}`);
  });
  for (const [shift, red] of [
    ['min-of-max', 'min'],
    ['max', 'max'],
  ] as const) {
    it(`vocab-parallel cross-entropy with the target logit ${red}-all-reduced, shifted by the ${shift}, is refuted at loss with a witness`, () => {
      const r = verifyPlan(loadPlanObject('vp-ce-pred-bad.json', vocabCrossEntropy('none', shift, red)));
      assert.equal(r.verdict, 'not_equivalent', r.summary);
      const f = firstFailing(r);
      assert.equal(f.logical, 'loss');
      assert.ok((f.witness ?? []).length > 0);
    });
  }
});
