/**
 * Case splits over value classes (sdfg/value-classes.ts, TermStore.split; docs/engine.md,
 * "Value classes"): a split over ids enumerates the classes of values its terms tell apart, and
 * its normal form is the one the enumeration of every joint value gives. The reference here is
 * that enumeration written out: Σ over every joint value u of [x = u] · f(term at u), the term
 * at u built from constants (no id left, so no split in the reference).
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { q } from '../ops/rational.js';
import { TermStore, type TermId } from '../sdfg/terms.js';

/** A random function of ids and reals: what lookups, padding tests and masks build. */
type Recipe = { k: 'sym'; i: number } | { k: 'eq'; v: number; c: number } | { k: 'look'; v: number; rows: number[] } | { k: 'id'; v: number } | { k: 'const'; c: number } | { k: 'add' | 'mul'; a: Recipe; b: Recipe };

const DOMAINS = [
  [0, 1, 2, 3],
  [0, 1, 2],
  [5, 7, 9],
];

const recipe = (ints: boolean): fc.Arbitrary<Recipe> =>
  fc.letrec<{ r: Recipe }>((tie) => ({
    r: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      ...(ints ? [fc.record({ k: fc.constant('const' as const), c: fc.integer({ min: -2, max: 3 }) })] : [fc.record({ k: fc.constant('sym' as const), i: fc.integer({ min: 0, max: 2 }) })]),
      // [x = c] with c in or out of the domain (a padding test, a test that is always 0).
      fc.record({ k: fc.constant('eq' as const), v: fc.integer({ min: 0, max: 2 }), c: fc.constantFrom(0, 1, 2, 3, 5, 7, 9, 11) }),
      fc.record({ k: fc.constant('id' as const), v: fc.integer({ min: 0, max: 2 }) }),
      // A lookup whose table may repeat a row (two ids with one row are one class).
      ...(ints ? [] : [fc.record({ k: fc.constant('look' as const), v: fc.integer({ min: 0, max: 2 }), rows: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 4, maxLength: 4 }) })]),
      fc.record({ k: fc.constantFrom('add' as const, 'mul' as const), a: tie('r'), b: tie('r') }),
    ),
  })).r;

/** The recipe's term with the ids bound to `ids` (categorical terms or constants). */
function build(T: TermStore, r: Recipe, ids: readonly TermId[], syms: readonly TermId[]): TermId {
  switch (r.k) {
    case 'sym':
      return syms[r.i] as TermId;
    case 'const':
      return T.const(r.c);
    case 'id':
      return ids[r.v] as TermId;
    case 'eq':
      return T.test(ids[r.v] as TermId, (x) => x === r.c);
    case 'look': {
      const dom = DOMAINS[r.v] as number[];
      return T.sum(dom.map((u, j) => T.mul(T.test(ids[r.v] as TermId, (x) => x === u), syms[r.rows[j] as number] as TermId)));
    }
    case 'add':
      return T.add(build(T, r.a, ids, syms), build(T, r.b, ids, syms));
    case 'mul':
      return T.mul(build(T, r.a, ids, syms), build(T, r.b, ids, syms));
  }
}

/** Σ over every joint value u of [x = u] · f(recipes at u): the split of every joint value. */
function reference(T: TermStore, xs: readonly TermId[], rs: readonly Recipe[], syms: readonly TermId[], f: (ts: TermId[]) => TermId): TermId {
  const parts: TermId[] = [];
  const go = (d: number, vals: number[]): void => {
    if (d === DOMAINS.length) {
      let ind = T.one;
      vals.forEach((u, i) => (ind = T.mul(ind, T.test(xs[i] as TermId, (x) => x === u))));
      parts.push(T.mul(ind, f(rs.map((r) => build(T, r, vals.map((u) => T.const(u)), syms)))));
      return;
    }
    for (const u of DOMAINS[d] as number[]) go(d + 1, [...vals, u]);
  };
  go(0, []);
  return T.sum(parts);
}

function store(refine: boolean): { T: TermStore; xs: TermId[]; syms: TermId[] } {
  const T = new TermStore();
  if (refine) T.refineClassesAbove = 0;
  const xs = DOMAINS.map((d, i) => T.categorical(`x${i}`, d));
  const syms = [0, 1, 2].map((i) => T.sym(`s${i}`));
  return { T, xs, syms };
}

describe('case splits over value classes (docs/engine.md, "Value classes")', () => {
  for (const refine of [false, true]) {
    const how = refine ? 'mentioned values merged by restriction too' : 'mentioned values alone';
    it(`functions of real terms of ids (uf, exp, max, gt0) equal the split over every joint value (${how}; property)`, () => {
      fc.assert(
        fc.property(recipe(false), recipe(false), (ra, rb) => {
          const { T, xs, syms } = store(refine);
          const a = build(T, ra, xs, syms);
          const b = build(T, rb, xs, syms);
          const ops: [string, (ts: TermId[]) => TermId][] = [
            ['uf', ([x, y]) => T.uf('f', [x as TermId, y as TermId])],
            ['exp', ([x]) => T.exp(x as TermId)],
            ['max', ([x, y]) => T.max([x as TermId, T.scale(y as TermId, q(2n)), T.const(1)])],
            ['gt0', ([x]) => T.gt0(x as TermId)],
          ];
          for (const [name, f] of ops) assert.ok(T.equal(f([a, b]), reference(T, xs, [ra, rb], syms, f)), name);
          // Never more cases than joint values.
          assert.ok(T.caseCount([a, b]) <= 4 * 3 * 3);
        }),
        { numRuns: 40 },
      );
    });

    it(`tests and comparisons of integer terms of ids equal the split over every joint value (${how}; property)`, () => {
      fc.assert(
        fc.property(recipe(true), fc.integer({ min: -3, max: 12 }), (r, c) => {
          const { T, xs, syms } = store(refine);
          const t = build(T, r, xs, syms);
          const ops: [string, (ts: TermId[]) => TermId][] = [
            ['test even', ([x]) => T.test(x as TermId, (v) => v % 2 === 0)],
            ['test = c', ([x]) => T.test(x as TermId, (v) => v === c)],
            ['gt0(t - c)', ([x]) => T.gt0(T.sub(x as TermId, T.const(c)))],
            ['gt0(c - t)', ([x]) => T.gt0(T.sub(T.const(c), x as TermId))],
          ];
          for (const [name, f] of ops) assert.ok(T.equal(f([t]), reference(T, xs, [r], syms, f)), name);
        }),
        { numRuns: 60 },
      );
    });
  }

  it('a value the term tells apart inside the would-be padding class stays its own class (merging it would be wrong)', () => {
    for (const refine of [false, true]) {
      const T = new TermStore();
      if (refine) T.refineClassesAbove = 0;
      const x = T.categorical('x', [0, 1, 2, 3]);
      const [a, b] = [T.sym('a'), T.sym('b')];
      // Padding test on 0, and a second test on 2: {0}, {2}, {1, 3}.
      const t = T.add(T.mul(T.test(x, (v) => v === 0), a), T.mul(T.test(x, (v) => v === 2), b));
      assert.equal(T.caseCount([t]), 3);
      const ft = T.uf('f', [t]);
      const ref = T.sum([0, 1, 2, 3].map((u) => T.mul(T.test(x, (v) => v === u), T.uf('f', [u === 0 ? a : u === 2 ? b : T.zero]))));
      assert.ok(T.equal(ft, ref));
      // The split that merged 2 into the padding test's "everything else" differs.
      const pad = T.test(x, (v) => v === 0);
      const merged = T.add(T.mul(pad, T.uf('f', [a])), T.mul(T.sub(T.one, pad), T.uf('f', [T.zero])));
      assert.ok(!T.equal(ft, merged));
    }
  });

  it('values that restrict alike only for some values of another id are not merged', () => {
    const T = new TermStore();
    T.refineClassesAbove = 0;
    const x = T.categorical('x', [0, 1, 2, 3]);
    const y = T.categorical('y', [0, 1, 2, 3]);
    const a = T.sym('a');
    const eq = (z: TermId, u: number): TermId => T.test(z, (v) => v === u);
    // x = 0 and x = 1 agree where y is 0 or 3 (both 0), not where y is 1 or 2.
    const t = T.add(T.mul(T.mul(eq(x, 0), eq(y, 1)), a), T.mul(T.mul(eq(x, 1), eq(y, 2)), a));
    assert.equal(T.caseCount([t]), 3 * 3);
    const ref = T.sum([0, 1, 2, 3].flatMap((u) => [0, 1, 2, 3].map((w) => T.mul(T.mul(eq(x, u), eq(y, w)), T.exp((u === 0 && w === 1) || (u === 1 && w === 2) ? a : T.zero)))));
    assert.ok(T.equal(T.exp(t), ref));
  });

  it("sentence-transformers' masked mean pooling over 6 ids of a 12-word vocabulary: 2 classes per id, not 12", () => {
    // (h · mask).sum / mask.sum.clamp(min=1e-9), then a nonlinearity: the case split of the
    // clamp and of the nonlinearity asks only [id = pad] of each id (pad = 0 mentions [id = 0]).
    const T = new TermStore();
    const pad = 0;
    const ids = Array.from({ length: 6 }, (_, j) => T.categorical(`id${j}`, Array.from({ length: 12 }, (_, v) => v)));
    const h = ids.map((_, j) => T.sym(`h${j}`));
    const mask = ids.map((id) => T.test(id, (v) => v !== pad));
    const count = T.max([T.sum(mask), T.const('1/1000000000')]);
    const pooled = T.div(T.sum(h.map((x, j) => T.mul(x, mask[j] as TermId))), count);
    assert.equal(T.caseCount([pooled]), 64);
    const y = T.uf('tanh', [pooled]);
    // Every id the pad: the pooled value is 0; id0 real alone: h0; id0 and id1 real: their mean.
    const at = (real: readonly number[]): TermId => ids.reduce((acc, id, j) => T.mul(acc, T.test(id, (v) => (real.includes(j) ? v === 3 + j : v === pad))), T.one);
    assert.ok(T.equal(T.mul(y, at([])), T.mul(T.uf('tanh', [T.zero]), at([]))));
    assert.ok(T.equal(T.mul(y, at([0])), T.mul(T.uf('tanh', [h[0] as TermId]), at([0]))));
    const mean01 = T.scale(T.add(h[0] as TermId, h[1] as TermId), q(1n, 2n));
    assert.ok(T.equal(T.mul(y, at([0, 1])), T.mul(T.uf('tanh', [mean01]), at([0, 1]))));
    // A wrong count (one id's mask dropped) is a different value.
    assert.ok(!T.equal(T.mul(y, at([0, 1])), T.mul(T.uf('tanh', [h[0] as TermId]), at([0, 1]))));
  });

  it('a padding id that is the last value (every other value mentioned): the mentioned values merge by restriction', () => {
    // [id = 5] with 5 the last of 0..5 is 1 − Σ_{v<5} [id = v]: every indicator is mentioned,
    // 6 classes per id by mention alone, 2 once the 6 restrictions are compared. (The normal form
    // itself then has every indicator in each monomial's expansion: no vocabulary of 12 here.)
    const T = new TermStore();
    T.refineClassesAbove = 0;
    const ids = Array.from({ length: 3 }, (_, j) => T.categorical(`id${j}`, Array.from({ length: 6 }, (_, v) => v)));
    const h = ids.map((_, j) => T.sym(`h${j}`));
    const mask = ids.map((id) => T.test(id, (v) => v !== 5));
    const pooled = T.div(T.sum(h.map((x, j) => T.mul(x, mask[j] as TermId))), T.max([T.sum(mask), T.const('1/1000000000')]));
    assert.equal(T.caseCount([pooled]), 8);
    const at = (real: readonly number[]): TermId => ids.reduce((acc, id, j) => T.mul(acc, T.test(id, (v) => (real.includes(j) ? v === 2 * j : v === 5))), T.one);
    const y = T.exp(pooled);
    assert.ok(T.equal(T.mul(y, at([1, 2])), T.mul(T.exp(T.scale(T.add(h[1] as TermId, h[2] as TermId), q(1n, 2n))), at([1, 2]))));
    assert.ok(T.equal(T.mul(y, at([])), at([])));
  });

  it('a lookup tells every row apart: 6 looked-up ids stay past the bound ("unknown", never merged)', () => {
    const T = new TermStore();
    const rows = Array.from({ length: 12 }, (_, v) => T.sym(`E${v}`));
    const ids = Array.from({ length: 6 }, (_, j) => T.categorical(`id${j}`, Array.from({ length: 12 }, (_, v) => v)));
    const emb = ids.map((id) => T.sum(rows.map((r, v) => T.mul(T.test(id, (u) => u === v), r))));
    assert.equal(T.caseCount([emb[0] as TermId]), 12);
    assert.throws(() => T.uf('tanh', [T.sum(emb)]), /6 categorical variables with 2985984 joint values \(2985984 classes of them told apart, more than 4096\)/);
  });
});
