import { strict as assert } from 'node:assert';
import { Mesh } from '../plans/mesh.js';
import { evalLineage } from '../lineage/model.js';
import { LineageError, parsePlacement, type LineageSpec } from '../plans/model.js';

function placements(ps: string[], axes: number[]): LineageSpec {
  return { kind: 'placements', logical: 0, path: '$', placements: ps.map(parsePlacement), axes };
}

describe('mesh', () => {
  it('row-major coordinates, last axis fastest', () => {
    const m = new Mesh(['dp', 'pp', 'tp'], [2, 2, 2]);
    assert.deepEqual(m.coords(5), [1, 0, 1]);
    assert.equal(m.rankOf([1, 1, 0]), 6);
    assert.deepEqual([...m.groupAlong(5, [2])], [4, 5]);
    assert.deepEqual([...m.groupAlong(5, [0])], [1, 5]);
    assert.deepEqual([...m.groupAlong(0, [0, 2])], [0, 1, 4, 5]);
  });
  it('a custom rank order maps coordinates to the listed ranks', () => {
    const m = new Mesh(['dp', 'tp'], [2, 2], Int32Array.from([0, 2, 1, 3]));
    assert.deepEqual(m.coords(2), [0, 1]);
    assert.deepEqual([...m.groupAlong(0, [1])], [0, 2]);
    assert.deepEqual([...m.groupAlong(0, [0])], [0, 1]);
  });
});

describe('DTensor placements expand like torch', () => {
  const m = new Mesh(['dp', 'tp'], [2, 2]);
  it('Shard uses torch.chunk sizes: ceil(L/n) per chunk, trailing chunk short', () => {
    const m3 = new Mesh(['x'], [3]);
    const spec = placements(['S(0)'], [0]);
    assert.deepEqual(evalLineage(spec, m3, 0, [7], [3]).ranges, [[0, 3]]);
    assert.deepEqual(evalLineage(spec, m3, 2, [7], [1]).ranges, [[6, 7]]);
  });
  it('Shard may leave a rank an empty chunk (torch.chunk returns fewer chunks)', () => {
    const m4 = new Mesh(['x'], [4]);
    const spec = placements(['S(0)'], [0]);
    assert.deepEqual(evalLineage(spec, m4, 3, [3], [0]).ranges, [[3, 3]]);
  });
  it('two mesh axes sharding one dim nest left to right', () => {
    const spec = placements(['S(0)', 'S(0)'], [0, 1]);
    // dim 5: dp splits [0,3) [3,5); tp splits [0,3) into [0,2) [2,3) and [3,5) into [3,4) [4,5).
    assert.deepEqual(evalLineage(spec, m, 0, [5, 2], [2, 2]).ranges, [[0, 2], [0, 2]]);
    assert.deepEqual(evalLineage(spec, m, 1, [5, 2], [1, 2]).ranges, [[2, 3], [0, 2]]);
    assert.deepEqual(evalLineage(spec, m, 3, [5, 2], [1, 2]).ranges, [[4, 5], [0, 2]]);
  });
  it('partials compose like nnScaler value maps; avg becomes a divisor', () => {
    const nf = evalLineage(placements(['P(sum)', 'P(avg)'], [0, 1]), m, 3, [2], [2]);
    assert.deepEqual(nf.value, { idx: 3, n: 4, reduce: 'sum', divisor: 2, split: '' });
    const mx = evalLineage(placements(['R', 'P(max)'], [1]), m, 1, [2], [2]);
    assert.deepEqual(mx.value, { idx: 1, n: 2, reduce: 'max', divisor: 1, split: '' });
  });
  it('rejects mixing partial kinds and shapes that do not match the placement', () => {
    assert.throws(() => evalLineage(placements(['P(sum)', 'P(max)'], [0, 1]), m, 0, [2], [2]), LineageError);
    assert.throws(() => evalLineage(placements(['S(0)', 'R'], [0]), m, 0, [4], [4]), /selects 2 elements but the local tensor has 4/);
    assert.throws(() => evalLineage(placements(['S(2)', 'R'], [0]), m, 0, [4], [2]), /S\(2\) on a rank-1 tensor/);
    assert.throws(() => parsePlacement('Shard(0)'), /unknown placement/);
  });
});
