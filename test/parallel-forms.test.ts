import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';

/**
 * Sequence-parallel LayerNorm over sp=2: rows (tokens) sharded, weight and bias replicated;
 * the weight and bias gradients are partial sums over the ranks' rows and must be
 * all-reduced over SP. `missingAllReduce` is Megatron-LM #1446: the reduction is left out and
 * each rank's partial gradient is used as if complete.
 */
function spLayerNorm(missingAllReduce: boolean): unknown {
  const T = (id: string, shape: number[], role: string): object => ({ id, shape, role });
  const ops: object[] = [
    { id: 'ln', op: 'layer_norm', inputs: ['h', 'w_h', 'b_h'], outputs: ['y_h'], attrs: { eps: '1/100000' } },
    { id: 'ln_grad', op: 'layer_norm_backward', inputs: ['gy_h', 'h', 'w_h'], outputs: ['gx_h', missingAllReduce ? 'gw' : 'gw_part', missingAllReduce ? 'gb' : 'gb_part'], attrs: { eps: '1/100000' } },
  ];
  if (!missingAllReduce) {
    ops.push(
      { id: 'ar_w', op: 'all_reduce', inputs: ['gw_part'], outputs: ['gw'], attrs: { reduce: 'sum' }, group: { axes: ['sp'] } },
      { id: 'ar_b', op: 'all_reduce', inputs: ['gb_part'], outputs: ['gb'], attrs: { reduce: 'sum' }, group: { axes: ['sp'] } },
    );
  }
  return {
    format: 'planproof/v1',
    name: `sp-layernorm${missingAllReduce ? '-missing-allreduce' : ''}`,
    mesh: { axes: [{ name: 'sp', size: 2 }] },
    logical: {
      tensors: [T('x', [4, 3], 'input'), T('w', [3], 'param'), T('b', [3], 'param'), T('gy', [4, 3], 'input'), T('y', [4, 3], 'output'), T('gx', [4, 3], 'output'), T('gw', [3], 'output'), T('gb', [3], 'output')],
      ops: [
        { id: 'ln', op: 'layer_norm', inputs: ['x', 'w', 'b'], outputs: ['y'], attrs: { eps: '1/100000' } },
        { id: 'ln_grad', op: 'layer_norm_backward', inputs: ['gy', 'x', 'w'], outputs: ['gx', 'gw', 'gb'], attrs: { eps: '1/100000' } },
      ],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'h', shape: [2, 3], lineage: { logical: 'x', placements: ['S(0)'] } },
            { id: 'w_h', shape: [3], lineage: { logical: 'w', placements: ['R'] } },
            { id: 'b_h', shape: [3], lineage: { logical: 'b', placements: ['R'] } },
            { id: 'gy_h', shape: [2, 3], lineage: { logical: 'gy', placements: ['S(0)'] } },
            { id: 'y_h', shape: [2, 3], lineage: { logical: 'y', placements: ['S(0)'] } },
            { id: 'gx_h', shape: [2, 3], lineage: { logical: 'gx', placements: ['S(0)'] } },
            ...(missingAllReduce
              ? []
              : [
                  { id: 'gw_part', shape: [3], lineage: { logical: 'gw', placements: ['P(sum)'] } },
                  { id: 'gb_part', shape: [3], lineage: { logical: 'gb', placements: ['P(sum)'] } },
                ]),
            { id: 'gw', shape: [3], lineage: { logical: 'gw', placements: ['R'] } },
            { id: 'gb', shape: [3], lineage: { logical: 'gb', placements: ['R'] } },
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['x', 'w', 'b', 'gy'], outputs: ['y', 'gx', 'gw', 'gb'] },
  };
}

describe('parallel forms of the norm ops', () => {
  it('sequence-parallel LayerNorm with the weight-gradient all-reduce over SP is verified', () => {
    const r = verifyPlan(loadPlanObject('sp-ln.json', spLayerNorm(false)));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.deepEqual(r.stages.map((s) => s.logical).sort(), ['gb', 'gw', 'gx', 'y']);
  });
  it('Megatron-LM #1446, the SP LayerNorm weight gradient never all-reduced, is refuted at gw with a witness', () => {
    const r = verifyPlan(loadPlanObject('sp-ln-bug.json', spLayerNorm(true)));
    assert.equal(r.verdict, 'not_equivalent');
    const first = r.stages.find((s) => s.status === 'not_equivalent');
    assert.ok(first !== undefined && ['gw', 'gb'].includes(first.logical), `first failing: ${first?.logical}`);
    assert.ok((first.witness ?? []).length > 0);
    assert.deepEqual(first.failingRanks, [0, 1]);
  });
});

/**
 * Global-norm gradient clipping with the gradient sharded over tp=2: each rank sums the
 * squares of its shard, the partial sums are all-reduced, and every shard is scaled by
 * clip_coef. `localNorm` is the near-miss: the norm of the local shard only (no all-reduce).
 */
function shardedClip(localNorm: boolean): unknown {
  const ops: object[] = [
    { id: 'sq', op: 'mul', inputs: ['g_s', 'g_s'], outputs: ['sq'] },
    { id: 'ss', op: 'sum', inputs: ['sq'], outputs: ['ss'] },
    ...(localNorm ? [] : [{ id: 'ar', op: 'all_reduce', inputs: ['ss'], outputs: ['total'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } }]),
    { id: 'coef', op: 'clip_coef', inputs: [localNorm ? 'ss' : 'total'], outputs: ['coef'], attrs: { max_norm: '1/10' } },
    { id: 'clip', op: 'mul', inputs: ['g_s', 'coef'], outputs: ['gc_s'] },
  ];
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [
        { id: 'g', shape: [4, 2], role: 'grad' },
        { id: 'gc', shape: [4, 2], role: 'output' },
      ],
      ops: [{ id: 'clip', op: 'clip_grad_norm', inputs: ['g'], outputs: ['gc'], attrs: { max_norm: '1/10' } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'g_s', shape: [2, 2], lineage: { logical: 'g', placements: ['S(0)'] } },
            { id: 'sq', shape: [2, 2] },
            { id: 'ss', shape: [] },
            ...(localNorm ? [] : [{ id: 'total', shape: [] }]),
            { id: 'coef', shape: [] },
            { id: 'gc_s', shape: [2, 2], lineage: { logical: 'gc', placements: ['S(0)'] } },
          ],
          ops,
        },
      ],
    },
    contract: { inputs: ['g'], outputs: ['gc'] },
  };
}

describe('parallel forms of gradient clipping', () => {
  it('sharded global-norm clipping (sum of squares all-reduced) is verified', () => {
    const r = verifyPlan(loadPlanObject('clip.json', shardedClip(false)));
    assert.equal(r.verdict, 'verified', r.summary);
  });
  it('clipping by the local shard norm only is refuted with a witness on both ranks', () => {
    const r = verifyPlan(loadPlanObject('clip-local.json', shardedClip(true)));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const s = r.stages[0];
    assert.equal(s?.logical, 'gc');
    assert.deepEqual(s?.failingRanks, [0, 1]);
    assert.ok((s?.witness ?? []).length > 0);
  });
});

/**
 * Ring (context-parallel) causal attention over cp=2 without load balancing: rank r holds query,
 * key and value rows [2r, 2r+2). Rank 1 receives rank 0's K/V chunk, computes both partials
 * and merges them with the online-softmax combine; rank 0 only sees its own chunk (the remote
 * one is entirely in its future). `average` is the near-miss: averaging the two partial outputs.
 */
function ringAttention(average: boolean): unknown {
  const rows = (r: number): object => ['*', [2 * r, 2 * r + 2], '*'];
  const t = (id: string, logical: string | undefined, r: number): object => ({ id, shape: [1, 2, 2], ...(logical === undefined ? {} : { lineage: { logical, index: rows(r) } }) });
  const stats = (id: string): object => ({ id, shape: [1, 2] });
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'cp', size: 2 }] },
    logical: {
      tensors: [
        { id: 'q', shape: [1, 4, 2], role: 'input' },
        { id: 'k', shape: [1, 4, 2], role: 'input' },
        { id: 'v', shape: [1, 4, 2], role: 'input' },
        { id: 'o', shape: [1, 4, 2], role: 'output' },
      ],
      ops: [{ id: 'attn', op: 'attention', inputs: ['q', 'k', 'v'], outputs: ['o'], attrs: { causal: true } }],
    },
    parallel: {
      programs: [
        {
          ranks: [0],
          tensors: [t('q', 'q', 0), t('k', 'k', 0), t('v', 'v', 0), t('o', 'o', 0), stats('m'), stats('l')],
          ops: [
            { id: 'send_k', op: 'send', inputs: ['k'], outputs: [], peer: 1 },
            { id: 'send_v', op: 'send', inputs: ['v'], outputs: [], peer: 1 },
            { id: 'local', op: 'attention_partial', inputs: ['q', 'k', 'v'], outputs: ['o', 'm', 'l'], attrs: { causal: true, q_offset: 0, k_offset: 0 } },
          ],
        },
        {
          ranks: [1],
          tensors: [
            t('q', 'q', 1),
            t('k', 'k', 1),
            t('v', 'v', 1),
            t('k_in', undefined, 1),
            t('v_in', undefined, 1),
            t('o_a', undefined, 1),
            stats('m_a'),
            stats('l_a'),
            t('o_b', undefined, 1),
            stats('m_b'),
            stats('l_b'),
            ...(average ? [t('o_sum', undefined, 1)] : [stats('m'), stats('l')]),
            t('o', 'o', 1),
          ],
          ops: [
            { id: 'recv_k', op: 'recv', inputs: [], outputs: ['k_in'], peer: 0 },
            { id: 'recv_v', op: 'recv', inputs: [], outputs: ['v_in'], peer: 0 },
            { id: 'local', op: 'attention_partial', inputs: ['q', 'k', 'v'], outputs: ['o_a', 'm_a', 'l_a'], attrs: { causal: true, q_offset: 2, k_offset: 2 } },
            { id: 'remote', op: 'attention_partial', inputs: ['q', 'k_in', 'v_in'], outputs: ['o_b', 'm_b', 'l_b'], attrs: { causal: true, q_offset: 2, k_offset: 0 } },
            ...(average
              ? [
                  { id: 'sum', op: 'add', inputs: ['o_a', 'o_b'], outputs: ['o_sum'] },
                  { id: 'avg', op: 'scale', inputs: ['o_sum'], outputs: ['o'], attrs: { factor: '1/2' } },
                ]
              : [{ id: 'combine', op: 'attention_combine', inputs: ['o_a', 'm_a', 'l_a', 'o_b', 'm_b', 'l_b'], outputs: ['o', 'm', 'l'] }]),
          ],
        },
      ],
    },
    contract: { inputs: ['q', 'k', 'v'], outputs: ['o'] },
  };
}

describe('parallel forms of attention', () => {
  it('ring attention with the online-softmax combine (rescaling by exp of max differences) is verified', () => {
    const r = verifyPlan(loadPlanObject('ring.json', ringAttention(false)));
    assert.equal(r.verdict, 'verified', r.summary);
  });
  it('combining the partial outputs by averaging is refuted on rank 1 with a witness', () => {
    const r = verifyPlan(loadPlanObject('ring-avg.json', ringAttention(true)));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    assert.deepEqual(r.stages[0]?.failingRanks, [1]);
    assert.ok((r.stages[0]?.witness ?? []).length > 0);
  });
});
