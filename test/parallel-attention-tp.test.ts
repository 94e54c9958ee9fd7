import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';

/**
 * Megatron tensor-parallel self-attention over tp=2 with grouped-query heads: x [3 tokens, 4],
 * 4 query heads and 2 key/value heads of dim 2, causal. Q/K/V projections are column-parallel
 * (weight rows = output features = heads, sharded S(0)), so rank r holds query heads 2r and
 * 2r+1 and key/value head r, exactly the kv head its query group reads (q head h reads kv head
 * floor(h / 2)). Heads are split out, attended locally, merged back, and the output
 * projection is row-parallel (weight sharded S(1) on its input features): each rank's product
 * is one addend of y (P(sum)) and an all_reduce(sum) over tp completes it.
 *
 * Near misses:
 * - `kv-swapped`: the K/V weight shards are loaded with the wrong rank index (rank r gets kv
 *   head 1 - r), so rank 1's query heads 2 and 3 attend rank 0's kv head and vice versa. The
 *   lineage is honest about which kv head each rank holds, so the projections and the head
 *   split prove and the attention output `o` is where the plan goes wrong.
 * - `avg-reduce`: the row-parallel partial outputs are all-reduced with avg instead of sum.
 * - `no-reduce`: the all-reduce is left out and each rank's partial product is used as the
 *   complete output.
 */
type Bug = 'none' | 'kv-swapped' | 'avg-reduce' | 'no-reduce';

const S = 3; // tokens
const H = 4; // hidden
const HQ = 4; // query heads
const HKV = 2; // key/value heads
const D = 2; // head dim
const TP = 2;
const HQL = HQ / TP; // query heads per rank
const HKVL = HKV / TP; // kv heads per rank

function tpAttention(bug: Bug): unknown {
  const T = (id: string, shape: number[], role: string): object => ({ id, shape, role });
  const lin = (logical: string, placements: string[]): object => ({ logical, placements });
  // The kv head a rank holds: its own (tp) or, in the swapped twin, the other rank's (1 - tp).
  const kvHead = bug === 'kv-swapped' ? '(1 - tp)' : 'tp';
  const e = (expr: string): object => ({ expr });
  const kvRows = [e(`${D * HKVL}*${kvHead}`), e(`${D * HKVL}*${kvHead} + ${D * HKVL}`)];
  const kvHeads = [e(`${HKVL}*${kvHead}`), e(`${HKVL}*${kvHead} + ${HKVL}`)];
  // K/V weights [HKV*D, H] (rows = kv heads), projections [S, HKV*D], heads [HKV, S, D].
  const kvWeight = (logical: string): object => ({ logical, index: [kvRows, '*'] });
  const kvProj = (logical: string): object => ({ logical, index: ['*', kvRows] });
  const kvSplit = (logical: string): object => ({ logical, index: [kvHeads, '*', '*'] });
  const splitHeads = (pre: string, heads: number): object[] => [
    { id: `${pre}_split`, op: 'reshape', inputs: [pre], outputs: [`${pre}3`], attrs: { shape: [S, heads, D] } },
    { id: `${pre}_heads`, op: 'transpose', inputs: [`${pre}3`], outputs: [`${pre}h`], attrs: { dim0: 0, dim1: 1 } },
  ];
  const mergeHeads: object[] = [
    { id: 'o_perm', op: 'permute', inputs: ['o'], outputs: ['o3'], attrs: { dims: [1, 0, 2] } },
    { id: 'o_merge', op: 'reshape', inputs: ['o3'], outputs: ['om'], attrs: { shape: [S, -1] } },
  ];
  const projections = (wq: string, wk: string, wv: string): object[] => [
    { id: 'q_proj', op: 'linear', inputs: ['x', wq], outputs: ['q'] },
    { id: 'k_proj', op: 'linear', inputs: ['x', wk], outputs: ['k'] },
    { id: 'v_proj', op: 'linear', inputs: ['x', wv], outputs: ['v'] },
  ];
  const attn = { id: 'attn', op: 'attention', inputs: ['qh', 'kh', 'vh'], outputs: ['o'], attrs: { causal: true } };

  const reduce = bug === 'avg-reduce' ? 'avg' : 'sum';
  const outProj: object[] =
    bug === 'no-reduce'
      ? [{ id: 'o_proj', op: 'linear', inputs: ['om', 'wo'], outputs: ['y'] }]
      : [
          { id: 'o_proj', op: 'linear', inputs: ['om', 'wo'], outputs: ['y_part'] },
          { id: 'o_proj_ar', op: 'all_reduce', inputs: ['y_part'], outputs: ['y'], attrs: { reduce }, group: { axes: ['tp'] } },
        ];

  return {
    format: 'planproof/v1',
    name: `attention-tp2-gqa${bug === 'none' ? '' : `-${bug}`}`,
    mesh: { axes: [{ name: 'tp', size: TP }] },
    logical: {
      tensors: [
        T('x', [S, H], 'input'),
        T('wq', [HQ * D, H], 'param'),
        T('wk', [HKV * D, H], 'param'),
        T('wv', [HKV * D, H], 'param'),
        T('wo', [H, HQ * D], 'param'),
        T('q', [S, HQ * D], 'activation'),
        T('k', [S, HKV * D], 'activation'),
        T('v', [S, HKV * D], 'activation'),
        T('q3', [S, HQ, D], 'activation'),
        T('k3', [S, HKV, D], 'activation'),
        T('v3', [S, HKV, D], 'activation'),
        T('qh', [HQ, S, D], 'activation'),
        T('kh', [HKV, S, D], 'activation'),
        T('vh', [HKV, S, D], 'activation'),
        T('o', [HQ, S, D], 'activation'),
        T('o3', [S, HQ, D], 'activation'),
        T('om', [S, HQ * D], 'activation'),
        T('y', [S, H], 'output'),
      ],
      ops: [...projections('wq', 'wk', 'wv'), ...splitHeads('q', HQ), ...splitHeads('k', HKV), ...splitHeads('v', HKV), attn, ...mergeHeads, { id: 'o_proj', op: 'linear', inputs: ['om', 'wo'], outputs: ['y'] }],
    },
    parallel: {
      programs: [
        {
          name: 'tp-rank',
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [S, H], lineage: lin('x', ['R']) },
            { id: 'wq', shape: [HQL * D, H], lineage: lin('wq', ['S(0)']) },
            { id: 'wk', shape: [HKVL * D, H], lineage: kvWeight('wk') },
            { id: 'wv', shape: [HKVL * D, H], lineage: kvWeight('wv') },
            { id: 'wo', shape: [H, HQL * D], lineage: lin('wo', ['S(1)']) },
            { id: 'q', shape: [S, HQL * D], lineage: lin('q', ['S(1)']) },
            { id: 'k', shape: [S, HKVL * D], lineage: kvProj('k') },
            { id: 'v', shape: [S, HKVL * D], lineage: kvProj('v') },
            { id: 'q3', shape: [S, HQL, D] },
            { id: 'k3', shape: [S, HKVL, D] },
            { id: 'v3', shape: [S, HKVL, D] },
            { id: 'qh', shape: [HQL, S, D], lineage: lin('qh', ['S(0)']) },
            { id: 'kh', shape: [HKVL, S, D], lineage: kvSplit('kh') },
            { id: 'vh', shape: [HKVL, S, D], lineage: kvSplit('vh') },
            { id: 'o', shape: [HQL, S, D], lineage: lin('o', ['S(0)']) },
            { id: 'o3', shape: [S, HQL, D] },
            { id: 'om', shape: [S, HQL * D], lineage: lin('om', ['S(1)']) },
            ...(bug === 'no-reduce' ? [] : [{ id: 'y_part', shape: [S, H], lineage: lin('y', ['P(sum)']) }]),
            { id: 'y', shape: [S, H], lineage: lin('y', ['R']) },
          ],
          ops: [...projections('wq', 'wk', 'wv'), ...splitHeads('q', HQL), ...splitHeads('k', HKVL), ...splitHeads('v', HKVL), attn, ...mergeHeads, ...outProj],
        },
      ],
    },
    contract: { inputs: ['x', 'wq', 'wk', 'wv', 'wo'], outputs: ['y'] },
  };
}

function firstFailing(r: VerifyReport): VerifyReport['stages'][number] {
  const first = r.stages.find((s) => s.status !== 'proved');
  assert.ok(first !== undefined, `no failing stage: ${r.summary}`);
  return first;
}

describe('Megatron tensor-parallel attention (tp=2, grouped-query heads, causal)', () => {
  it('column-parallel Q/K/V, local GQA attention, row-parallel output with all_reduce(sum) is verified', () => {
    const r = verifyPlan(loadPlanObject('attn-tp.json', tpAttention('none')));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.ok(
      r.stages.every((s) => s.status === 'proved'),
      r.stages.map((s) => `${s.logical}: ${s.status} ${s.reason ?? ''}`).join('\n'),
    );
    // Every tensor with lineage that some op produces is a stage of its own.
    assert.deepEqual(r.stages.map((s) => s.logical).sort(), ['k', 'kh', 'o', 'om', 'q', 'qh', 'v', 'vh', 'y']);
  });

  it('K/V shards loaded with the wrong rank index (query heads paired with the other rank\'s kv head) is refuted at the attention output with a witness', () => {
    const r = verifyPlan(loadPlanObject('attn-tp-kv-swapped.json', tpAttention('kv-swapped')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const first = firstFailing(r);
    assert.equal(first.logical, 'o', r.summary);
    assert.equal(first.status, 'not_equivalent');
    assert.equal(first.op?.kind, 'attention');
    assert.deepEqual(first.failingRanks, [0, 1]);
    assert.ok((first.witness ?? []).length > 0);
    // The honest lineage lets the projections and the head split prove: the bug is localized.
    for (const t of ['q', 'k', 'v', 'qh', 'kh', 'vh']) assert.equal(r.stages.find((s) => s.logical === t)?.status, 'proved', t);
  });

  it('the row-parallel partial outputs all-reduced with avg instead of sum is refuted at y with a witness', () => {
    const r = verifyPlan(loadPlanObject('attn-tp-avg.json', tpAttention('avg-reduce')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const first = firstFailing(r);
    assert.equal(first.logical, 'y', r.summary);
    assert.equal(first.status, 'not_equivalent');
    assert.deepEqual(first.failingRanks, [0, 1]);
    assert.ok((first.witness ?? []).length > 0);
    // The witness is recognized as the all-reduce's wrong reduce op (issue 35: not a bare scale).
    assert.equal(first.diagnosisRule, 'reduce-kind', first.diagnosis);
    assert.match(first.diagnosis ?? '', /reduces with 'avg' where 'sum' is due/);
    assert.equal(r.stages.filter((s) => s.status !== 'proved').length, 1);
  });

  it('the output all-reduce left out (a rank\'s partial product taken as the complete output) is refuted at y with a witness', () => {
    const r = verifyPlan(loadPlanObject('attn-tp-no-reduce.json', tpAttention('no-reduce')));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const first = firstFailing(r);
    assert.equal(first.logical, 'y', r.summary);
    assert.equal(first.status, 'not_equivalent');
    assert.deepEqual(first.failingRanks, [0, 1]);
    assert.ok((first.witness ?? []).length > 0);
  });
});
