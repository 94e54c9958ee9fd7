import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { rejects } from './helpers.js';

/** A one-op plan: y = identity(x) per rank, with the given lineage on x and y (template or per rank). */
function plan(axes: [string, number][], xShape: number[], local: (r: number) => { shape: number[]; x: object; y: object }, outputs = true): unknown {
  const n = axes.reduce((p, [, s]) => p * s, 1);
  return {
    format: 'planproof/v1',
    mesh: { axes: axes.map(([name, size]) => ({ name, size })) },
    logical: {
      tensors: [
        { id: 'x', shape: xShape, role: 'input' },
        { id: 'y', shape: xShape, role: 'output' },
      ],
      ops: [{ id: 'id', op: 'identity', inputs: ['x'], outputs: ['y'] }],
    },
    parallel: {
      programs: Array.from({ length: n }, (_, r) => {
        const l = local(r);
        return {
          ranks: [r],
          tensors: [
            { id: 'x', shape: l.shape, lineage: { logical: 'x', ...l.x } },
            { id: 'y', shape: l.shape, lineage: { logical: outputs ? 'y' : 'x', ...l.y } },
          ],
          ops: [{ id: 'id', op: 'identity', inputs: ['x'], outputs: ['y'] }],
        };
      }),
    },
    contract: { inputs: ['x'], outputs: ['y'] },
  };
}

describe('lineage tiling', () => {
  it('accepts the context-parallel zig-zag layout (rank r holds chunks r and 2*cp-1-r)', () => {
    // seq 8, cp 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 holds chunks 1 and 2.
    const zz = (r: number): number[][] => [
      [2 * r, 2 * r + 2],
      [2 * (3 - r), 2 * (3 - r) + 2],
    ];
    const p = loadPlanObject('zz', plan([['cp', 2]], [8, 3], (r) => ({ shape: [4, 3], x: { index: [zz(r), '*'] }, y: { index: [zz(r), '*'] } })));
    assert.equal(p.coverage.length, 2);
    assert.ok(p.coverage.every((c) => c.complete));
  });
  it('accepts stripes listed out of index order (list order is the local layout order)', () => {
    const swapped = (r: number): number[][] => [
      [2 * (3 - r), 2 * (3 - r) + 2],
      [2 * r, 2 * r + 2],
    ];
    const p = loadPlanObject('zz2', plan([['cp', 2]], [8, 3], (r) => ({ shape: [4, 3], x: { index: [swapped(r), '*'] }, y: { index: [swapped(r), '*'] } })));
    assert.deepEqual(p.claims.find((c) => c.rank === 0)?.nf.ranges[0], [6, 8, 0, 2]);
  });
  it('rejects overlapping stripes within one tensor (an element held twice)', () => {
    const ov = (r: number): number[][] => [
      [2 * r, 2 * r + 3],
      [2 * (3 - r) - 1, 2 * (3 - r) + 1],
    ];
    rejects(plan([['cp', 2]], [8, 3], (r) => ({ shape: [5, 3], x: { index: [ov(r), '*'] }, y: { index: [ov(r), '*'] } })), /overlap \(a tensor cannot hold an element twice\)/, /programs\[1\]\.tensors\[0\]\.lineage rank 1 tensor .x./);
  });
  it('rejects a gap: elements held by no rank', () => {
    rejects(
      plan([['dp', 2]], [4, 2], (r) => ({ shape: [1, 2], x: { index: [[r * 2, r * 2 + 1], '*'] }, y: { index: [[r * 2, r * 2 + 1], '*'] } })),
      /logical tensor 'x'/,
      /elements \[1:2, 0:2\] are held by no rank/,
    );
  });
  it('accepts partial addends over one axis replicated over another, and complete + partial overlap', () => {
    // Mesh dp x tp; x is P(sum) over tp and replicated over dp; y (output) is complete everywhere.
    const p = loadPlanObject(
      'pr',
      plan(
        [
          ['dp', 2],
          ['tp', 2],
        ],
        [2],
        (r) => ({ shape: [2], x: { value: [r & 1, 2] }, y: {} }),
      ),
    );
    const x = p.coverage.find((c) => c.logical === 0);
    assert.deepEqual(x && { claims: x.claims, holders: x.holders, complete: x.complete, partialOnly: x.partialOnly }, { claims: 2, holders: 4, complete: false, partialOnly: true });
  });
  it('rejects an incomplete partial group and names the missing chunk', () => {
    rejects(plan([['tp', 2]], [2], () => ({ shape: [2], x: { value: [0, 2] }, y: {} })), /partial addends \(sum of 2\) but chunk\(s\) 1 are held by no rank/, /logical tensor 'x'/);
  });
  it('rejects a contract output that only exists as partial addends (a missing reduction)', () => {
    rejects(plan([['tp', 2]], [2], (r) => ({ shape: [2], x: {}, y: { value: [r, 2] } })), /\$\.contract\.outputs\[0\]/, /held only as partial values/);
  });
  it('rejects a contract output with no lineage at all', () => {
    rejects(plan([['tp', 2]], [2], () => ({ shape: [2], x: {}, y: {} }), false), /contract output 'y'/, /has no lineage/);
  });
  it('separates partial groups by (n, reduce, divisor): sum and max addends do not complete each other', () => {
    rejects(plan([['tp', 2]], [2], (r) => ({ shape: [2], x: { value: r === 0 ? [0, 2, 'sum'] : [1, 2, 'max'] }, y: {} })), /chunk\(s\) 1 are held by no rank/);
  });
  it('checks lineage once per distinct coordinate tuple: a replicated tensor on 4096 ranks is one claim', () => {
    const big = {
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'dp', size: 64 }, { name: 'tp', size: 64 }] },
      logical: { tensors: [{ id: 'w', shape: [128, 64], role: 'input' }, { id: 'v', shape: [128, 64], role: 'output' }], ops: [{ id: 'n', op: 'neg', inputs: ['w'], outputs: ['v'] }] },
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [
              { id: 'w', shape: [128, 1], lineage: { logical: 'w', placements: ['R', 'S(1)'] } },
              { id: 'v', shape: [128, 1], lineage: { logical: 'v', placements: ['R', 'S(1)'] } },
            ],
            ops: [{ id: 'n', op: 'neg', inputs: ['w'], outputs: ['v'] }],
          },
        ],
      },
      contract: { inputs: ['w'], outputs: ['v'] },
    };
    const p = loadPlanObject('big', big);
    assert.equal(p.claims.length, 128);
    assert.deepEqual(p.coverage.map((c) => [c.claims, c.holders, c.complete]), [
      [64, 4096, true],
      [64, 4096, true],
    ]);
  });
});
