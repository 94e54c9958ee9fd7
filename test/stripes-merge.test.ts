/**
 * The striped layout rules of tensor-level proofs against brute force (docs/engine.md rule 13):
 * a reshape that merges a dim whose inner part is sliced (mergedLayout) and a reshape that
 * splits a striped dim back (stripedLayout's joined case). For random shapes, slices and
 * reshapes, the relation the rules derive must map every local output position to the logical
 * output position the reshapes put the same element at; a rule may refuse, never mis-map.
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { registry } from '../ops/registry.js';
import type { Attrs, Shape } from '../ops/types.js';
import { mergedLayout, stripedLayout, stripeOf } from '../stages/engines/tensorlevel/stripes.js';
import type { Range } from '../stages/engines/tensorlevel/relations.js';

const reshape = registry.get(registry.id('reshape'));
const slice = (reshape.sliceRegions as NonNullable<typeof reshape.sliceRegions>).bind(reshape);

const numel = (s: Shape): number => s.reduce((a, b) => a * b, 1);
const unflat = (f: number, s: Shape): number[] => {
  const out: number[] = [];
  for (let d = s.length - 1; d >= 0; d--) {
    out.unshift(f % (s[d] as number));
    f = Math.floor(f / (s[d] as number));
  }
  return out;
};
const flat = (ix: readonly number[], s: Shape): number => ix.reduce((acc, x, d) => acc * (s[d] as number) + x, 0);

/** The logical position of each local position (row-major) that a relation states, or undefined. */
function stated(ranges: readonly Range[], local: Shape): number[][] {
  const per = ranges.map((r) => {
    const pieces = stripeOf(r) ?? [r];
    return pieces.flatMap(([a, b]) => Array.from({ length: (b as number) - (a as number) }, (_, i) => (a as number) + i));
  });
  per.forEach((p, d) => assert.equal(p.length, local[d], 'the relation holds as many positions as the local dim'));
  return Array.from({ length: numel(local) }, (_, k) => unflat(k, local).map((x, d) => (per[d] as number[])[x] as number));
}

/** Where a reshape (in -> out) of the logical input, sliced to `region`, puts each local element. */
function truth(inShape: Shape, outShape: Shape, region: readonly [number, number][]): number[][] {
  const local = region.map(([a, b]) => b - a);
  return Array.from({ length: numel(local) }, (_, k) => {
    const li = unflat(k, local).map((x, d) => x + (region[d] as [number, number])[0]);
    return unflat(flat(li, inShape), outShape);
  });
}

const mapsFor = (inShape: Shape, outShape: Shape, localOut: Shape) => ({
  logical: (rs: readonly Range[]): readonly Range[] | string => {
    const m = slice([inShape], [outShape], [rs as [number, number][]], {} as Attrs, {} as Attrs);
    return typeof m === 'string' ? m : ((m[0] as Range[] | undefined) ?? 'no output');
  },
  local: (inL: readonly number[], rs: [number, number][]): readonly (readonly [number, number])[] | string => {
    const m = slice([inL], [localOut], [rs], {} as Attrs, {} as Attrs);
    return typeof m === 'string' ? m : (m[0] ?? 'no output');
  },
});

describe('striped layouts against brute force (tensor-level rule 13)', () => {
  it('a merge with a sliced inner dim, and the split back, map every element where the reshapes put it', () => {
    let merged = 0;
    let joined = 0;
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 2, maxLength: 4 }),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        (shape, dPick, aPick, lenPick, gPick) => {
          const n = shape.length;
          // Slice one dim [a, b); merge dims [g, g + 2) (a group of two) in the output.
          const d = dPick % n;
          const size = shape[d] as number;
          const a = aPick % size;
          const b = a + 1 + (lenPick % (size - a));
          const g = gPick % (n - 1);
          const region = shape.map((s, i) => (i === d ? ([a, b] as [number, number]) : ([0, s] as [number, number])));
          const local = region.map(([x, y]) => y - x);
          const merge = (s: Shape): number[] => [...s.slice(0, g), (s[g] as number) * (s[g + 1] as number), ...s.slice(g + 2)];
          const outShape = merge(shape);
          const localOut = merge(local);
          const maps = mapsFor(shape, outShape, localOut);
          const rel = mergedLayout(region, localOut, maps.logical, maps.local);
          if (rel === undefined) return;
          merged++;
          assert.deepEqual(stated(rel, localOut), truth(shape, outShape, region));
          // Split back: the striped relation through the inverse reshape, to a plain box.
          const striped = rel.findIndex((r) => stripeOf(r) !== undefined);
          if (striped < 0) return;
          const back = mapsFor(outShape, shape, local);
          const rel2 = stripedLayout(rel, striped, local, back.logical, back.local);
          if (typeof rel2 === 'string') return;
          joined++;
          assert.deepEqual(stated(rel2, local), truth(shape, shape, region));
        },
      ),
      { numRuns: 400, seed: 7 },
    );
    // The cases that matter were reached: the checks above ran.
    assert.ok(merged > 20 && joined > 10, `${merged} merged, ${joined} joined`);
  });
});
