import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { rejects } from './helpers.js';
import { normalForm } from '../lineage/normal.js';

const logical2 = (ops: object[], tensors: object[]): object => ({ tensors, ops });

/** Two pipeline stages: stage 0 computes h = neg(x) and sends it; stage 1 receives it and computes y = exp(h). */
function pipeline(order: 'ok' | 'deadlock'): unknown {
  const stage0Ops: object[] = [
    { id: 'neg', op: 'neg', inputs: ['x'], outputs: ['h'] },
    { id: 'send_h', op: 'send', inputs: ['h'], outputs: [], peer: { shift: { pp: 1 } } },
  ];
  const stage1Ops: object[] = [
    { id: 'recv_h', op: 'recv', inputs: [], outputs: ['h'], peer: { shift: { pp: -1 } } },
    { id: 'exp', op: 'exp', inputs: ['h'], outputs: ['y'] },
  ];
  if (order === 'deadlock') {
    // Stage 0 first waits for a tensor that stage 1 sends only after receiving h.
    stage0Ops.unshift({ id: 'recv_z', op: 'recv', inputs: [], outputs: ['z'], peer: { shift: { pp: 1 } } });
    stage1Ops.push({ id: 'send_z', op: 'send', inputs: ['y'], outputs: [], peer: { shift: { pp: -1 } } });
  }
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'pp', size: 2 }, { name: 'dp', size: 2 }] },
    logical: logical2(
      [
        { id: 'neg', op: 'neg', inputs: ['x'], outputs: ['h'] },
        { id: 'exp', op: 'exp', inputs: ['h'], outputs: ['y'] },
      ],
      [
        { id: 'x', shape: [4, 2], role: 'input' },
        { id: 'h', shape: [4, 2], role: 'activation' },
        { id: 'y', shape: [4, 2], role: 'output' },
      ],
    ),
    parallel: {
      programs: [
        {
          name: 'stage0',
          ranks: { where: { pp: 0 } },
          tensors: [
            { id: 'x', shape: [2, 2], lineage: { logical: 'x', placements: ['R', 'S(0)'] } },
            { id: 'h', shape: [2, 2], lineage: { logical: 'h', placements: ['R', 'S(0)'] } },
            ...(order === 'deadlock' ? [{ id: 'z', shape: [2, 2] }, { id: 'use_z', shape: [2, 2] }] : []),
          ],
          ops: order === 'deadlock' ? [...stage0Ops, { id: 'use', op: 'neg', inputs: ['z'], outputs: ['use_z'] }] : stage0Ops,
        },
        {
          name: 'stage1',
          ranks: { where: { pp: 1 } },
          tensors: [
            { id: 'h', shape: [2, 2], lineage: { logical: 'h', placements: ['R', 'S(0)'] } },
            { id: 'y', shape: [2, 2], lineage: { logical: 'y', placements: ['R', 'S(0)'] } },
          ],
          ops: stage1Ops,
        },
      ],
    },
    contract: { inputs: ['x'], outputs: ['y'] },
  };
}

describe('collectives and point-to-point', () => {
  it('matches send/recv between pipeline stages given as shifts along the pp axis', () => {
    const p = loadPlanObject('pp', pipeline('ok'));
    assert.deepEqual(normalForm(p).collectives, ['send_recv {} [0:h->- 2:-->h]', 'send_recv {} [1:h->- 3:-->h]']);
  });
  it('reports a recv-first cycle across stages as a deadlock, naming the ops', () => {
    rejects(pipeline('deadlock'), /cycle \(a deadlock if it runs\)/, /rank 0 op 'recv_z'/, /rank 2 op 'send_z'/);
  });
  it('reduce_scatter then all_gather over dp (ZeRO) have the right shapes and normalize', () => {
    const p = loadPlanObject('zero', {
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'dp', size: 2 }] },
      logical: logical2(
        [{ id: 'sgd', op: 'sgd_update', inputs: ['w', 'g'], outputs: ['w_new'], attrs: { lr: '1/10' } }],
        [
          { id: 'w', shape: [4, 2], role: 'param' },
          { id: 'g', shape: [4, 2], role: 'input' },
          { id: 'w_new', shape: [4, 2], role: 'output' },
        ],
      ),
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [
              { id: 'g_part', shape: [4, 2], lineage: { logical: 'g', placements: ['P(sum)'] } },
              { id: 'g_shard', shape: [2, 2] },
              { id: 'w', shape: [2, 2], lineage: { logical: 'w', placements: ['S(0)'] } },
              { id: 'w_new_shard', shape: [2, 2], lineage: { logical: 'w_new', placements: ['S(0)'] } },
              { id: 'w_new', shape: [4, 2], lineage: { logical: 'w_new', placements: ['R'] } },
            ],
            ops: [
              { id: 'rs', op: 'reduce_scatter', inputs: ['g_part'], outputs: ['g_shard'], attrs: { dim: 0, reduce: 'sum' }, group: { axes: ['dp'] } },
              { id: 'sgd', op: 'sgd_update', inputs: ['w', 'g_shard'], outputs: ['w_new_shard'], attrs: { lr: '1/10' } },
              { id: 'ag', op: 'all_gather', inputs: ['w_new_shard'], outputs: ['w_new'], attrs: { dim: 0 }, group: { axes: ['dp'] } },
            ],
          },
        ],
      },
      contract: { inputs: ['w', 'g'], outputs: ['w_new'] },
    });
    assert.deepEqual(normalForm(p).collectives, ['all_gather {"dim":0} [0:w_new_shard->w_new 1:w_new_shard->w_new]', 'reduce_scatter {"dim":0,"reduce":"sum"} [0:g_part->g_shard 1:g_part->g_shard]']);
  });
  it('broadcast: only the source passes an input; all_to_all splits one dim and concatenates another', () => {
    const p = loadPlanObject('bc', {
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'ep', size: 2 }] },
      logical: logical2(
        [{ id: 'cp', op: 'identity', inputs: ['x'], outputs: ['y'] }],
        [
          { id: 'x', shape: [4, 2], role: 'input' },
          { id: 'y', shape: [4, 2], role: 'output' },
        ],
      ),
      parallel: {
        programs: [
          {
            ranks: [0],
            tensors: [
              { id: 'x', shape: [4, 2], lineage: { logical: 'x' } },
              { id: 'xb', shape: [4, 2] },
              { id: 'a2a', shape: [2, 4] },
              { id: 'y', shape: [4, 2], lineage: { logical: 'y' } },
            ],
            ops: [
              { id: 'bc', op: 'broadcast', inputs: ['x'], outputs: ['xb'], attrs: { src: 0 }, group: [0, 1] },
              { id: 'a2a', op: 'all_to_all', inputs: ['xb'], outputs: ['a2a'], attrs: { split_dim: 0, concat_dim: 1 }, group: [0, 1] },
              { id: 'cp', op: 'identity', inputs: ['xb'], outputs: ['y'] },
            ],
          },
          {
            ranks: [1],
            tensors: [
              { id: 'xb', shape: [4, 2] },
              { id: 'a2a', shape: [2, 4] },
            ],
            ops: [
              { id: 'bc', op: 'broadcast', inputs: [], outputs: ['xb'], attrs: { src: 0 }, group: [0, 1] },
              { id: 'a2a', op: 'all_to_all', inputs: ['xb'], outputs: ['a2a'], attrs: { split_dim: 0, concat_dim: 1 }, group: [0, 1] },
            ],
          },
        ],
      },
      contract: { inputs: ['x'], outputs: ['y'] },
    });
    assert.deepEqual(normalForm(p).collectives, ['all_to_all {"concat_dim":1,"split_dim":0} [0:xb->a2a 1:xb->a2a]', 'broadcast {"src":0} [0:x->xb 1:-->xb]']);
    // a2a is computed on both ranks and never used: reported as possible dead work, not an error.
    assert.deepEqual(p.warnings.map((w) => [w.where, /never used/.test(w.message)]), [
      ["rank 0 tensor 'a2a'", true],
      ["rank 1 tensor 'a2a'", true],
    ]);
  });
  it('broadcast in one SPMD template: non-source ranks pass a receive buffer whose value is ignored', () => {
    const mk = (bufShape: number[]): unknown => ({
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'dp', size: 2 }] },
      logical: logical2(
        [{ id: 'cp', op: 'identity', inputs: ['x'], outputs: ['y'] }],
        [
          { id: 'x', shape: [4, 2], role: 'input' },
          { id: 'y', shape: [4, 2], role: 'output' },
        ],
      ),
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [
              { id: 'buf', shape: bufShape, lineage: { logical: 'x', placements: ['R'] } },
              { id: 'y', shape: [4, 2], lineage: { logical: 'y', placements: ['R'] } },
            ],
            ops: [{ id: 'bc', op: 'broadcast', inputs: ['buf'], outputs: ['y'], attrs: { src: 0 }, group: { axes: ['dp'] } }],
          },
        ],
      },
      contract: { inputs: ['x'], outputs: ['y'] },
    });
    assert.deepEqual(normalForm(loadPlanObject('bc', mk([4, 2]))).collectives, ['broadcast {"src":0} [0:buf->y 1:buf->y]']);
    // Mis-shaped buffers: the broadcast's output no longer has the declared shape.
    rejects(mk([2, 2]), /\$\.parallel\.programs\[0\]\.ops\[0\] rank 0 op 'bc': output is declared \[4, 2\] but broadcast over 2 ranks of \[2, 2\] gives \[2, 2\]/);
  });
  it('multi-rank entries over axis groups can be restricted by a rank selector', () => {
    const raw = pipeline('ok') as { parallel: { collectives?: object[]; programs: { ops: object[]; tensors: object[] }[] } };
    const st1 = raw.parallel.programs[1] as { ops: object[]; tensors: object[] };
    st1.tensors.push({ id: 'y_sum', shape: [2, 2] }, { id: 'y2', shape: [2, 2] });
    st1.ops.push({ id: 'dbl', op: 'add', inputs: ['y_sum', 'y'], outputs: ['y2'] });
    raw.parallel.collectives = [{ id: 'ar', op: 'all_reduce', attrs: { reduce: 'sum' }, group: { axes: ['dp'] }, ranks: { where: { pp: 1 } }, inputs: ['y'], outputs: ['y_sum'] }];
    const p = loadPlanObject('sel', raw);
    assert.equal(p.collectives.filter((c) => c.id === 'ar').length, 1);
    assert.deepEqual([...(p.collectives.find((c) => c.id === 'ar')?.group ?? [])], [2, 3]);
    raw.parallel.collectives = [{ id: 'ar', op: 'all_reduce', attrs: { reduce: 'sum' }, group: { axes: ['pp'] }, ranks: { where: { pp: 1 } }, inputs: ['y'], outputs: ['y_sum'] }];
    rejects(raw, /\$\.parallel\.collectives\[0\]\.ranks/, /includes rank 0, which the selector leaves out/);
  });
});
