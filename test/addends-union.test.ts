/**
 * The addend walk's union of number covers (stages/engines/tensorlevel/addends.ts unionCoverN)
 * against the union it replaces on that path (relations.ts unionCover with no first operand):
 * the same answer, overlap or not, on random covers of both kinds, with repeats, ties at one
 * start, empty and adjacent ranges (the cases where order and merging decide the result).
 */
import { strict as assert } from 'node:assert';
import { unionCoverN } from '../stages/engines/tensorlevel/addends.js';
import { unionCover } from '../stages/engines/tensorlevel/relations.js';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('addend union on numbers (unionCoverN)', () => {
  it('answers as unionCover on random covers: merged, refused and undefined alike', () => {
    const rnd = rng(37);
    const seen = { idxOk: 0, idxRep: 0, rangeOk: 0, rangeOverlap: 0 };
    for (let n = 0; n < 4000; n++) {
      const k = 1 + Math.floor(rnd() * 8);
      const idx: number[] = [];
      for (let i = 0; i < k; i++) idx.push(Math.floor(rnd() * 10));
      const a = unionCoverN('idx', idx);
      assert.deepEqual(a, unionCover('idx', [], idx), `idx ${idx.join(',')}`);
      if (a === undefined) seen.idxRep++;
      else seen.idxOk++;
      // Ranges: tiles of [0, 12) cut at random points, some shuffled, some with a stray range.
      const cuts = [0];
      while ((cuts.at(-1) as number) < 12) cuts.push(Math.min(12, (cuts.at(-1) as number) + Math.floor(rnd() * 4)));
      const pairs: [number, number][] = [];
      for (let i = 1; i < cuts.length; i++) pairs.push([cuts[i - 1] as number, cuts[i] as number]);
      if (rnd() < 0.4) pairs.push([Math.floor(rnd() * 12), Math.floor(rnd() * 12)]);
      for (let i = pairs.length - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        [pairs[i], pairs[j]] = [pairs[j] as [number, number], pairs[i] as [number, number]];
      }
      const flat = pairs.flat();
      const r = unionCoverN('range', flat);
      assert.deepEqual(r, unionCover('range', [], flat), `range ${JSON.stringify(pairs)}`);
      if (r === undefined) seen.rangeOverlap++;
      else seen.rangeOk++;
    }
    // Both answers occur for both kinds (else the comparison proved little).
    for (const [k, v] of Object.entries(seen)) assert.ok(v > 100, `${k}: ${v}`);
  });

  it('keeps ties in input order: an empty range before or after one at its start', () => {
    assert.deepEqual(unionCoverN('range', [0, 0, 0, 2, 2, 4]), [0, 4]);
    assert.deepEqual(unionCoverN('range', [0, 2, 0, 0, 2, 4]), unionCover('range', [], [0, 2, 0, 0, 2, 4]));
    assert.deepEqual(unionCoverN('range', [4, 6, 0, 4]), [0, 6]);
    assert.equal(unionCoverN('range', [0, 3, 2, 5]), undefined);
    assert.equal(unionCoverN('idx', [3, 1, 3]), undefined);
  });
});
