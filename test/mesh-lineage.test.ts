import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { Mesh, programBoxes } from '../plans/mesh.js';
import { generatePlan } from '../plans/gen/plan.js';
import { BUGS } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import { loadPlanObject } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
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

describe('rank sets as boxes (plans/mesh.ts programBoxes)', () => {
  it('split any rank set into disjoint boxes whose union is the set (or refuse past the bound)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 3 }), fc.array(fc.boolean(), { minLength: 64, maxLength: 64 }), (sizes, keep) => {
        const mesh = new Mesh(sizes.map((_, i) => `a${i}`), sizes);
        const ranks = Array.from({ length: mesh.size }, (_, r) => r).filter((r) => keep[r % 64]);
        const boxes = programBoxes(ranks, mesh, 1000);
        if (ranks.length === 0) return;
        assert.ok(boxes !== undefined);
        const seen = new Map<number, number>();
        for (const b of boxes) {
          let n = 0;
          for (let r = 0; r < mesh.size; r++) {
            if (b.sets.every((set, a) => set.includes(mesh.coord(r, a)))) {
              seen.set(r, (seen.get(r) ?? 0) + 1);
              n++;
            }
          }
          assert.equal(n, b.count, 'a box counts its ranks');
        }
        assert.deepEqual([...seen.keys()].sort((x, y) => x - y), ranks, 'the union is the rank set');
        assert.ok([...seen.values()].every((c) => c === 1), 'the boxes are disjoint');
      }),
      { numRuns: 300 },
    );
    // One rank spelled apart from a 64 x 8 block: two boxes; scattered ranks past the bound: none.
    const mesh = new Mesh(['pp', 'dp', 'tp'], [2, 64, 8]);
    assert.equal(programBoxes(Array.from({ length: 511 }, (_, i) => i + 1), mesh)?.length, 2);
    const scattered = Array.from({ length: 512 }, (_, i) => i).filter((r) => ((r * 2654435761) >>> 0) % 7 < 3);
    assert.equal(programBoxes(scattered, mesh, 1000)?.length, 16);
    assert.equal(programBoxes(scattered, mesh, 8), undefined);
  });
  it('a program with one rank spelled apart keeps its claims checked as families, and a gap in them is still found', () => {
    const preset = PRESETS['llama-tiny'];
    assert.ok(preset !== undefined);
    const ctx = { dp: preset.par.dp, tp: preset.par.tp, micro: preset.par.micro ?? 1, family: 'llama' as const };
    const make = (): Record<string, unknown> => {
      const raw = generatePlan({ model: preset.model, par: preset.par });
      BUGS.find((b) => b.id === 'adam-eps-one-rank')?.inject(raw, ctx);
      return raw;
    };
    const plan = loadPlanObject('p.json', make() as unknown as RawPlan);
    const big = plan.programs.find((p) => p.ranks.length === 3);
    assert.ok(big !== undefined, 'a program of the other 3 ranks');
    assert.ok(plan.stats.lineage.symbolicTensors >= big.lineage.filter((x) => x !== undefined).length, `the 3-rank program's claims are families (${JSON.stringify(plan.stats.lineage)})`);
    // A gap: one claim of the 3-rank program dropped makes its logical tensor untiled.
    const raw = make() as { parallel: { programs: { ranks: unknown; tensors: { id: string; lineage?: unknown }[] }[] } };
    const prog = raw.parallel.programs.find((p) => Array.isArray(p.ranks) && p.ranks.length === 3);
    const victim = prog?.tensors.find((t) => t.lineage !== undefined && /grad/.test(t.id));
    assert.ok(victim !== undefined);
    delete victim.lineage;
    assert.throws(() => loadPlanObject('p.json', raw as unknown as RawPlan), /not (fully )?held|tile|cover|contract|held/);
  });
});
