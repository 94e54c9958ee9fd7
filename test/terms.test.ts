import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { TermStore, type TermId } from '../sdfg/terms.js';
import { q, qFromNumber, qToNumber, qParse } from '../ops/rational.js';
import { realUf, termAlgebra } from '../sdfg/algebras.js';
import { registry } from '../ops/registry.js';

const syms = (T: TermStore, prefix: string, n: number): TermId[] => Array.from({ length: n }, (_, i) => T.sym(`${prefix}${i}`));

describe('rationals', () => {
  it('are exact: doubles convert to their dyadic value, strings parse p/q', () => {
    assert.deepEqual(qFromNumber(0.5), q(1n, 2n));
    assert.deepEqual(qFromNumber(0.1), q(3602879701896397n, 36028797018963968n));
    assert.equal(qToNumber(qFromNumber(0.1)), 0.1);
    assert.deepEqual(qParse('-6/4'), q(-3n, 2n));
    assert.throws(() => qFromNumber(NaN), /finite/);
    assert.throws(() => qParse('1/x'), /not a rational/);
  });
});

describe('term normal form', () => {
  it('polynomial identities: commutativity, distributivity, cancellation', () => {
    const T = new TermStore();
    const [a, b, c] = syms(T, 'x', 3) as [TermId, TermId, TermId];
    assert.equal(T.add(a, b), T.add(b, a));
    assert.equal(T.mul(a, T.add(b, c)), T.add(T.mul(a, b), T.mul(c, a)));
    assert.equal(T.sub(T.mul(T.add(a, b), T.add(a, b)), T.add(T.mul(a, a), T.add(T.scale(T.mul(a, b), q(2n)), T.mul(b, b)))), T.zero);
    assert.notEqual(T.add(a, b), T.add(a, c));
  });

  it('k-split matmul: the sum of the two half-K partial products is the full product', () => {
    const T = new TermStore();
    const K = 8;
    const a = syms(T, 'a', K);
    const b = syms(T, 'b', K);
    const full = T.sum(a.map((x, k) => T.mul(x, b[k] as TermId)));
    const p0 = T.sum(a.slice(0, K / 2).map((x, k) => T.mul(x, b[k] as TermId)));
    const p1 = T.sum(a.slice(K / 2).map((x, k) => T.mul(x, b[k + K / 2] as TermId)));
    assert.equal(T.add(p0, p1), full);
    // Near miss: one partial product dropped (a missing all-reduce) or counted twice.
    assert.ok(!T.equal(p0, full));
    assert.ok(!T.equal(T.add(p0, T.scale(p1, q(2n))), full));
  });

  it('DP gradient averaging: mean of per-rank means == global mean; a doubled scale is refuted', () => {
    const T = new TermStore();
    const g = syms(T, 'g', 8);
    const mean = (xs: TermId[]): TermId => T.scale(T.sum(xs), q(1n, BigInt(xs.length)));
    const logical = mean(g);
    const avgOfMeans = T.scale(T.add(mean(g.slice(0, 4)), mean(g.slice(4))), q(1n, 2n));
    assert.equal(avgOfMeans, logical);
    const sumOfMeans = T.add(mean(g.slice(0, 4)), mean(g.slice(4)));
    assert.ok(!T.equal(sumOfMeans, logical));
    assert.ok(!T.equal(T.scale(avgOfMeans, q(1n, 2n)), logical));
  });

  it('exp is a homomorphism: exp(a+b) = exp(a)·exp(b), exp(2a) = exp(a)^2, exp(a)/exp(a) = 1 without side conditions', () => {
    const T = new TermStore();
    const [a, b] = syms(T, 'x', 2) as [TermId, TermId];
    assert.equal(T.exp(T.add(a, b)), T.mul(T.exp(a), T.exp(b)));
    assert.equal(T.exp(T.scale(a, q(2n))), T.mul(T.exp(a), T.exp(a)));
    assert.equal(T.exp(T.zero), T.one);
    assert.equal(T.div(T.exp(a), T.exp(a)), T.one);
    assert.equal(T.conditions.length, 0, 'exp is positive: no side condition');
    assert.ok(!T.equal(T.exp(T.add(a, b)), T.add(T.exp(a), T.exp(b))));
  });

  it('max is associative, commutative and idempotent', () => {
    const T = new TermStore();
    const [a, b, c] = syms(T, 'x', 3) as [TermId, TermId, TermId];
    assert.equal(T.max([T.max([a, b]), c]), T.max([a, T.max([c, b])]));
    assert.equal(T.max([a, a]), a);
    assert.equal(T.max([T.const(2), T.const(-3)]), T.const(2));
    assert.notEqual(T.max([a, b]), T.min([a, b]));
    assert.notEqual(T.max([a, b]), T.max([a, c]));
  });

  it('online softmax: combining two blocks with rescaling by exp of max differences equals softmax·V', () => {
    const T = new TermStore();
    const n = 8;
    const x = syms(T, 's', n);
    const v = syms(T, 'v', n);
    // Logical: o = Σ_j softmax(x)_j v_j with softmax_j = exp(x_j) / Σ exp(x).
    const Z = T.sum(x.map((xi) => T.exp(xi)));
    const logical = T.sum(x.map((xi, j) => T.mul(T.div(T.exp(xi), Z), v[j] as TermId)));
    // Parallel: two blocks, each with its own running max, then rescale-and-combine.
    const block = (lo: number, hi: number): { m: TermId; s: TermId; o: TermId } => {
      const xs = x.slice(lo, hi);
      const m = T.max(xs);
      const p = xs.map((xi) => T.exp(T.sub(xi, m)));
      const s = T.sum(p);
      const o = T.div(T.sum(p.map((pi, j) => T.mul(pi, v[lo + j] as TermId))), s);
      return { m, s, o };
    };
    const b0 = block(0, n / 2);
    const b1 = block(n / 2, n);
    const m = T.max([b0.m, b1.m]);
    const r0 = T.exp(T.sub(b0.m, m));
    const r1 = T.exp(T.sub(b1.m, m));
    const s = T.add(T.mul(b0.s, r0), T.mul(b1.s, r1));
    const combined = T.div(T.add(T.mul(T.mul(b0.o, b0.s), r0), T.mul(T.mul(b1.o, b1.s), r1)), s);
    assert.equal(combined, logical, 'normal forms coincide');
    // Every denominator is a sum of exponentials: discharged syntactically.
    assert.equal(T.conditions.length, 0);
    // Near miss 1: combining without rescaling.
    const noRescale = T.div(T.add(T.mul(b0.o, b0.s), T.mul(b1.o, b1.s)), T.add(b0.s, b1.s));
    assert.ok(!T.equal(noRescale, logical));
    // Near miss 2: the denominator is not reduced across blocks (each block divides by its own sum).
    const unreduced = T.add(T.mul(b0.o, r0), T.mul(b1.o, r1));
    assert.ok(!T.equal(unreduced, logical));
  });

  it('rational functions: a/b + c/d == (ad + cb)/(bd); division records nonzero conditions', () => {
    const T = new TermStore();
    const [a, b, c, d] = syms(T, 'x', 4) as [TermId, TermId, TermId, TermId];
    const lhs = T.add(T.div(a, b), T.div(c, d));
    const rhs = T.div(T.add(T.mul(a, d), T.mul(c, b)), T.mul(b, d));
    assert.ok(T.equal(lhs, rhs));
    assert.ok(T.conditions.length >= 3);
    assert.equal(T.div(T.mul(a, b), b), a);
    const onePlusSq = T.add(T.one, T.mul(a, a));
    assert.ok(T.provablyNonzero(onePlusSq));
    assert.ok(!T.provablyNonzero(T.add(a, b)));
    assert.throws(() => T.div(a, T.zero), /zero term/);
    // sqrt is >= 0, not > 0: sqrt(v) + eps is evidently nonzero, sqrt(v) alone is not.
    const sq = T.uf('sqrt', [b], false, true);
    assert.ok(T.provablyNonzero(T.add(sq, T.const('1/100000000'))));
    assert.ok(!T.provablyNonzero(sq));
    assert.ok(!T.provablyNonzero(T.sub(sq, T.const('1/100000000'))));
  });

  it('uninterpreted functions are equal only on equal arguments; gelu on partial sums is refuted', () => {
    const T = new TermStore();
    const [a, b] = syms(T, 'x', 2) as [TermId, TermId];
    const gelu = (t: TermId): TermId => T.uf('gelu', [t]);
    assert.equal(gelu(T.add(a, b)), gelu(T.add(b, a)));
    assert.ok(!T.equal(T.add(gelu(a), gelu(b)), gelu(T.add(a, b))));
  });

  it('evaluates with real functions for witnesses', () => {
    const T = new TermStore();
    const [a, b] = syms(T, 'x', 2) as [TermId, TermId];
    const t = T.div(T.exp(T.sub(a, T.max([a, b]))), T.add(T.one, T.uf('tanh', [b])));
    const env = (n: string): number => (n === 'x0' ? 0.3 : -1.2);
    const want = Math.exp(0.3 - Math.max(0.3, -1.2)) / (1 + Math.tanh(-1.2));
    assert.ok(Math.abs(T.evaluate(t, env, (name, args) => (name === 'tanh' ? Math.tanh(args[0] as number) : NaN)) - want) < 1e-12);
    assert.match(T.render(t), /exp|max|tanh/);
  });
});

describe('shift invariance: log(exp(p) · R) = p + log(R) (docs/engine.md)', () => {
  const lse = (T: TermStore, x: readonly TermId[], c: TermId): TermId => T.add(T.log(T.sum(x.map((xi) => T.exp(T.sub(xi, c))))), c);

  it('exp factors leave the log as their exponents; log(1) = 0', () => {
    const T = new TermStore();
    const [a, b, s] = syms(T, 'x', 3) as [TermId, TermId, TermId];
    const S = T.add(T.exp(a), T.exp(b));
    assert.equal(T.log(T.mul(T.exp(T.scale(s, q(-3n))), S)), T.sub(T.log(S), T.scale(s, q(3n))));
    assert.equal(T.log(T.exp(T.add(a, T.const(2)))), T.add(a, T.const(2)));
    assert.equal(T.log(T.one), T.zero);
    // An exponent with a fraction is an opaque exp atom: it leaves the log too.
    const frac = T.div(a, T.add(T.one, T.mul(b, b)));
    assert.equal(T.log(T.mul(T.exp(frac), S)), T.add(frac, T.log(S)));
    // Nothing but exp leaves: log(a · S) stays one log, and log(S) is not split.
    assert.equal(T.log(T.mul(a, S)), T.uf('log', [T.mul(a, S)]));
    assert.ok(!T.equal(T.log(S), T.add(a, b)));
  });

  it('log-sum-exp is the same under any shift that is one value on the whole row', () => {
    const T = new TermStore();
    const x = syms(T, 'l', 4);
    const want = T.log(T.sum(x.map((xi) => T.exp(xi))));
    const sum = T.sum(x);
    const shifts: [string, TermId][] = [
      ['max', T.max(x)],
      ['max of the shards maxima (all-reduced max)', T.max([T.max(x.slice(0, 2)), T.max(x.slice(2))])],
      ['sum', sum],
      ['all-reduced sum of the shard sums', T.add(T.sum(x.slice(0, 2)), T.sum(x.slice(2)))],
      ['mean', T.scale(sum, q(1n, 4n))],
      ['constant', T.const('7/3')],
      ['another input', T.sym('u')],
      ['a nonlinear value', T.mul(T.max(x), T.uf('tanh', [sum]))],
    ];
    for (const [what, c] of shifts) {
      assert.equal(lse(T, x, c), want, what);
      // Cross-entropy: lse − target, both shifted: the shift cancels.
      assert.equal(T.sub(T.log(T.sum(x.map((xi) => T.exp(T.sub(xi, c))))), T.sub(x[1] as TermId, c)), T.sub(want, x[1] as TermId), what);
      // softmax: exp(x_i − c) / Σ exp(x_j − c), no side condition.
      const z = T.sum(x.map((xi) => T.exp(T.sub(xi, c))));
      assert.equal(T.div(T.exp(T.sub(x[0] as TermId, c)), z), T.div(T.exp(x[0] as TermId), T.sum(x.map((xi) => T.exp(xi)))), what);
    }
    assert.equal(T.conditions.length, 0);
  });

  it('a shift that differs along the row is not absorbed (local maxima, per-element values)', () => {
    const T = new TermStore();
    const x = syms(T, 'l', 4);
    const y = syms(T, 'y', 4);
    const want = T.log(T.sum(x.map((xi) => T.exp(xi))));
    // Each element its own shift y_j, added back as y_0.
    assert.ok(!T.equal(T.add(T.log(T.sum(x.map((xi, j) => T.exp(T.sub(xi, y[j] as TermId))))), y[0] as TermId), want));
    // Megatron's 'local-max' bug: each shard shifted by its own max, the sums then added.
    const m0 = T.max(x.slice(0, 2));
    const m1 = T.max(x.slice(2));
    const s = T.add(T.sum(x.slice(0, 2).map((xi) => T.exp(T.sub(xi, m0)))), T.sum(x.slice(2).map((xi) => T.exp(T.sub(xi, m1)))));
    for (const back of [m0, m1, T.max([m0, m1])]) assert.ok(!T.equal(T.add(T.log(s), back), want));
  });

  it('log of an id-dependent value is split by cases, each case pulled out', () => {
    const T = new TermStore();
    const [a, b] = syms(T, 'x', 2) as [TermId, TermId];
    const i = T.categorical('i', [0, 1]);
    const S = T.add(T.exp(a), T.exp(b));
    // log(exp(i·a) · S) = i·a + log(S) for both values of i.
    assert.ok(T.equal(T.log(T.mul(T.exp(T.mul(i, a)), S)), T.add(T.mul(i, a), T.log(S))));
  });

  it('the rewrite is an identity of real numbers: log(t) evaluates to Math.log of t (property)', () => {
    const uf = (name: string, args: number[]): number => realUf(name, args);
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -3, max: 3 }), { minLength: 3, maxLength: 3 }),
        fc.array(fc.integer({ min: -2, max: 2 }), { minLength: 3, maxLength: 3 }),
        fc.array(fc.double({ min: -2, max: 2, noNaN: true }), { minLength: 3, maxLength: 3 }),
        fc.boolean(),
        (k, e, vals, negate) => {
          const T = new TermStore();
          const x = syms(T, 'v', 3);
          // t = ±exp(Σ k_i x_i) · exp(1)^e0 · Σ_j exp(e_j x_j) · (1 + x_0²): exp factors, a
          // sum of exponentials and a positive polynomial.
          const lin = T.sum(x.map((xi, j) => T.scale(xi, q(BigInt(k[j] as number)))));
          const S = T.sum(x.map((xi, j) => T.exp(T.scale(xi, q(BigInt(e[j] as number))))));
          let t = T.mul(T.mul(T.exp(T.add(lin, T.const(e[0] as number))), S), T.add(T.one, T.mul(x[0] as TermId, x[0] as TermId)));
          if (negate) t = T.neg(t);
          const env = (n: string): number => vals[Number(n.slice(1))] as number;
          const got = T.evaluate(T.log(t), env, uf);
          const want = Math.log(T.evaluate(t, env, uf));
          // Both undefined (NaN) for a negative argument, else equal up to rounding.
          return Number.isNaN(want) ? Number.isNaN(got) : Math.abs(got - want) <= 1e-9 * Math.max(1, Math.abs(want));
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('order of max and min arguments (an argument below another leaves a max)', () => {
  it("the target logit shifted by the row max is ≤ 0: min with 0 is itself, max with 0 is 0 (vocab-parallel cross-entropy's all-reduce by min)", () => {
    const T = new TermStore();
    const x = syms(T, 'l', 4);
    // The all-reduced max of the shards' maxima is one flattened max atom.
    const m = T.max([T.max(x.slice(0, 2)), T.max(x.slice(2))]);
    for (const xt of x) {
      const shifted = T.sub(xt, m);
      assert.equal(T.min([T.zero, shifted]), shifted);
      assert.equal(T.min([shifted, T.zero]), shifted);
      assert.equal(T.max([T.zero, shifted]), T.zero);
      assert.equal(T.min([xt, m]), xt);
      assert.equal(T.max([xt, m]), m);
      // And by the row min: x_t − min ≥ 0.
      assert.equal(T.min([T.zero, T.sub(xt, T.min(x))]), T.zero);
    }
    // Through a constant: x_0 − max(x) − 1 ≤ −1 < 0, and max(x) + 2 ≥ x_1 + 1.
    assert.equal(T.min([T.const(-1), T.sub(T.sub(x[0] as TermId, m), T.one)]), T.sub(T.sub(x[0] as TermId, m), T.one));
    assert.equal(T.max([T.add(x[1] as TermId, T.one), T.add(m, T.const(2))]), T.add(m, T.const(2)));
  });

  it('an argument is not dropped without an order fact (other row, other input, wrong scale, shift not the max)', () => {
    const T = new TermStore();
    const x = syms(T, 'l', 4);
    const m = T.max(x.slice(0, 3));
    const mm = T.min([T.max(x.slice(0, 2)), T.max(x.slice(2))]);
    for (const a of [
      T.sub(x[3] as TermId, m), // x_3 is not in the max
      T.sub(T.sym('u'), m), // another input
      T.sub(T.scale(x[0] as TermId, q(2n)), m), // 2·x_0 can exceed max(x)
      T.sub(x[0] as TermId, mm), // x_t − min(m_0, m_1) may be positive
    ]) {
      assert.notEqual(T.min([T.zero, a]), a, T.render(a));
      assert.notEqual(T.min([T.zero, a]), T.zero, T.render(a));
      assert.notEqual(T.max([T.zero, a]), T.zero, T.render(a));
    }
  });

  it('max and min still evaluate to Math.max and Math.min of their arguments (property)', () => {
    const uf = (name: string, args: number[]): number => realUf(name, args);
    const coef = fc.integer({ min: -2, max: 2 });
    const lin = fc.array(coef, { minLength: 6, maxLength: 6 });
    fc.assert(
      fc.property(fc.array(lin, { minLength: 2, maxLength: 4 }), fc.boolean(), fc.array(fc.integer({ min: -3, max: 3 }), { minLength: 4, maxLength: 4 }), (rows, isMax, vals) => {
        const T = new TermStore();
        const x = syms(T, 'v', 4);
        // Linear combinations of x_0, x_1, max(x_0, x_1, x_2), min(x_1, x_3), 1 and x_2·x_3: the
        // integer values make ties (where a wrong drop would still pass) as likely as not.
        const basis = [x[0], x[1], T.max(x.slice(0, 3)), T.min([x[1] as TermId, x[3] as TermId]), T.one, T.mul(x[2] as TermId, x[3] as TermId)] as TermId[];
        const args = rows.map((r) => T.sum(r.map((k, i) => T.scale(basis[i] as TermId, q(BigInt(k))))));
        const env = (n: string): number => vals[Number(n.slice(1))] as number;
        const got = T.evaluate(isMax ? T.max(args) : T.min(args), env, uf);
        const evs = args.map((a) => T.evaluate(a, env, uf));
        const want = isMax ? Math.max(...evs) : Math.min(...evs);
        return Math.abs(got - want) <= 1e-9;
      }),
      { numRuns: 500 },
    );
  });
});

describe('lazy sums (a lazy store proves; an eager store decides the rest)', () => {
  // Rows i of a softmax-like backward: t_i = x_i / D_i with D_i = 1 + y_i^2 + z_i^2 (eight
  // different denominators); a common denominator would multiply out all eight.
  const rows = (T: TermStore): TermId[] =>
    Array.from({ length: 8 }, (_, i) => {
      const [x, y, z] = [T.sym(`x${i}`), T.sym(`y${i}`), T.sym(`z${i}`)];
      return T.div(x, T.sum([T.one, T.mul(y, y), T.mul(z, z)]));
    });

  it('the same addends in any grouping give the same term, without expanding the common denominator', () => {
    const T = new TermStore(5_000, true);
    const t = rows(T);
    const flat = T.sum(t);
    const blocks = T.add(T.sum(t.slice(0, 3)), T.add(T.sum(t.slice(3, 5)), T.sum(t.slice(5).reverse())));
    assert.equal(blocks, flat);
    assert.ok(T.lazySums > 0);
    // A near miss (one row dropped, one counted twice) is a different term.
    assert.notEqual(T.sum(t.slice(1)), flat);
    assert.notEqual(T.add(flat, t[0] as TermId), flat);
    // The eager store runs out of budget on the same sum.
    const E = new TermStore(5_000, false);
    assert.throws(() => E.sum(rows(E)), /monomial products/);
  });

  it('an identity that needs the common denominator is missed lazily and found eagerly', () => {
    const build = (T: TermStore): [TermId, TermId] => {
      const [x, y, a, b] = [T.sym('x'), T.sym('y'), T.sym('a'), T.sym('b')];
      const da = T.add(T.one, T.mul(a, a));
      const db = T.add(T.one, T.mul(b, b));
      return [T.add(T.div(x, da), T.div(y, db)), T.div(T.add(T.mul(x, db), T.mul(y, da)), T.mul(da, db))];
    };
    const L = new TermStore(1_000_000, true);
    const [l1, l2] = build(L);
    assert.ok(!L.equal(l1, l2));
    const E = new TermStore();
    const [e1, e2] = build(E);
    assert.ok(E.equal(e1, e2));
  });

  it('evaluates and renders a lazy sum as the sum of its parts', () => {
    const T = new TermStore(1_000_000, true);
    const t = rows(T).slice(0, 2);
    const s = T.sum(t);
    const val = (name: string): number => (name.startsWith('x') ? 1 : 0.5);
    const uf = (): number => NaN;
    assert.ok(Math.abs(T.evaluate(s, val, uf) - (1 / 1.5 + 1 / 1.5)) < 1e-12);
    assert.match(T.render(s), /\+/);
  });
});

describe('term memo', () => {
  it('building the same terms again costs no normal-form work (replicas pay once)', () => {
    const T = new TermStore();
    // The same input symbols (a replicated input is one symbol on every rank).
    const xs = ['a', 'b', 'c', 'd'].map((n) => T.sym(n));
    const build = (): TermId => {
      const s = T.sum(xs.map((x, i) => T.mul(x, xs[(i + 1) % 4] as TermId)));
      return T.mul(s, T.add(s, T.one));
    };
    const first = build();
    const work = T.work;
    assert.ok(work > 0);
    assert.equal(build(), first);
    assert.equal(T.work, work);
  });
});

describe('rendering terms for reports', () => {
  // A residual of deeply nested, shared max/sum atoms: the old renderer wrote the whole text
  // (exponential in the depth) and then cut it to its cap; an in-thread proof of a mutant spent
  // 14 minutes here (test/fixtures/mutants/hang-zero3-adam-grad-replaced.json).
  it('costs its cap, not the size of the full text', () => {
    const T = new TermStore();
    let t = T.sym('a');
    for (let i = 0; i < 24; i++) t = T.max([t, T.add(t, T.sym(`b${i}`))]);
    const t0 = performance.now();
    const s = T.render(t, 300);
    assert.ok(performance.now() - t0 < 2000, `rendering took ${performance.now() - t0} ms`);
    assert.equal(s.length, 303);
    assert.match(s, /^max\(a, .*\.\.\.$/);
  });

  it('a capped rendering is the prefix of the uncapped one (random terms)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(8), fc.nat(), fc.nat()), { minLength: 1, maxLength: 30 }), fc.integer({ min: 5, max: 200 }), (steps, cap) => {
        const T = new TermStore();
        const pool: TermId[] = [T.sym('a'), T.sym('bb'), T.const('-1'), T.const('3/7')];
        for (const [k, i, j] of steps) {
          const x = pool[i % pool.length] as TermId;
          const y = pool[j % pool.length] as TermId;
          const ops = [() => T.add(x, y), () => T.mul(x, y), () => T.sub(x, y), () => T.exp(x), () => T.max([x, y]), () => T.uf('tanh', [x]), () => T.div(x, T.add(y, T.const(2))), () => T.neg(x), () => T.sum([x, y, T.sym(`d${pool.length}`)])];
          try {
            pool.push((ops[k] as () => TermId)());
          } catch {
            // A division the store refuses (a zero divisor) is not a term to render.
          }
        }
        const t = pool[pool.length - 1] as TermId;
        const full = T.render(t, 1e9);
        assert.equal(T.render(t, cap), full.length > cap ? `${full.slice(0, cap)}...` : full);
      }),
      { seed: 16, numRuns: 300 },
    );
  });
});

describe('comparisons of real values (gt0)', () => {
  it('folds constants and evident signs, drops positive factors, and is one atom per normal form', () => {
    const T = new TermStore();
    const [a, b] = syms(T, 'x', 2) as [TermId, TermId];
    assert.equal(T.gt0(T.const(q(3n))), T.one);
    assert.equal(T.gt0(T.const(q(0n))), T.zero);
    assert.equal(T.gt0(T.exp(a)), T.one);
    assert.equal(T.gt0(T.neg(T.exp(a))), T.zero);
    assert.equal(T.gt0(T.scale(T.sub(a, b), q(2n))), T.gt0(T.sub(a, b)));
    assert.equal(T.gt0(T.add(T.sub(a, b), T.zero)), T.gt0(T.sub(a, b)));
    // Opposite signs are different atoms (their product is 0 for the reals, not known here).
    assert.notEqual(T.gt0(T.sub(b, a)), T.gt0(T.sub(a, b)));
    assert.notEqual(T.gt0(a), T.gt0(b));
  });

  it('test() of a comparison or its complement is exact; an integer comparison is a case split', () => {
    const T = new TermStore();
    const [a] = syms(T, 'x', 1) as [TermId];
    const p = T.gt0(a);
    assert.equal(T.test(p, (v) => v !== 0), p);
    assert.equal(T.test(T.sub(T.one, p), (v) => v !== 0), T.sub(T.one, p));
    assert.equal(T.test(p, (v) => v === 0), T.sub(T.one, p));
    assert.equal(T.test(p, () => true), T.one);
    const id = T.categorical('id', [0, 1, 2, 3]);
    const ge2 = T.gt0(T.sub(id, T.const(q(3n, 2n))));
    assert.equal(ge2, T.test(id, (v) => v >= 2));
  });
});

describe('work saved without changing a value', () => {
  it("a LayerNorm backward asked only for its weight and bias gradients gives the same terms and leaves grad_x out; asked for all, the same as without `want`", () => {
    const T = new TermStore();
    const alg = termAlgebra(T);
    const ln = registry.get(registry.id('layer_norm_backward'));
    const dense = (p: string, shape: number[]) => ({ shape, data: syms(T, p, shape.reduce((a, b) => a * b, 1)) });
    const ins = [dense('g', [3, 4]), dense('x', [3, 4]), dense('w', [4])];
    const attrs = { eps: 1e-5, normalized_dims: 1 };
    const full = ln.apply(alg, ins, attrs);
    const part = ln.apply(alg, ins, attrs, [false, true, true]);
    assert.equal(full[0]?.data.length, 12);
    assert.equal(part[0]?.data.length, 0);
    assert.deepEqual(part[1]?.data, full[1]?.data);
    assert.deepEqual(part[2]?.data, full[2]?.data);
    assert.deepEqual(ln.apply(alg, ins, attrs, [true, true, true]).map((d) => d.data), full.map((d) => d.data));
    // The weight gradient is what the rule says: sum over rows of g · xhat (not a stale table).
    const n = ins[1] as { data: TermId[] };
    const xh = (r: number, j: number): TermId => {
      const row = n.data.slice(4 * r, 4 * r + 4);
      const mu = T.scale(T.sum(row), q(1n, 4n));
      const c = row.map((v) => T.sub(v, mu));
      const r2 = alg.fn('rsqrt', T.add(T.scale(T.sum(c.map((v) => T.mul(v, v))), q(1n, 4n)), T.const(1e-5)));
      return T.mul(c[j] as TermId, r2);
    };
    const g = (ins[0] as { data: TermId[] }).data;
    assert.ok(T.equal(part[1]?.data[2] as TermId, T.sum([0, 1, 2].map((r) => T.mul(g[4 * r + 2] as TermId, xh(r, 2))))));
  });

  it('a product of two sums over one id\'s indicators (the class-bucketed product) equals the sum of its termwise products, exactly (property)', () => {
    // Each factor: terms c · [x = u]^{0|1} · [y = w]^{0|1} · s_k^{0|1}, at least 9 of them, so
    // the product takes sdfg/term-core.ts polyMulByClass (more than 64 pairs); the reference
    // multiplies one-term factors only (the plain path) and adds them up.
    const term = fc.tuple(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -1, max: 3 }), fc.integer({ min: -1, max: 2 }), fc.integer({ min: -1, max: 2 }));
    fc.assert(
      fc.property(fc.array(term, { minLength: 9, maxLength: 14 }), fc.array(term, { minLength: 9, maxLength: 14 }), (fa, fb) => {
        const T = new TermStore();
        const x = T.categorical('x', [0, 1, 2, 3]);
        const y = T.categorical('y', [0, 1, 2]);
        const s = syms(T, 's', 3);
        const one = ([c, u, w, k]: [number, number, number, number]): TermId => {
          let t = T.const(q(BigInt(c === 0 ? 1 : c)));
          if (u >= 0) t = T.mul(t, T.test(x, (v) => v === u));
          if (w >= 0) t = T.mul(t, T.test(y, (v) => v === w));
          if (k >= 0) t = T.mul(t, s[k] as TermId);
          return t;
        };
        const ta = fa.map(one);
        const tb = fb.map(one);
        const ref = T.sum(ta.flatMap((a) => tb.map((b) => T.mul(a, b))));
        assert.ok(T.equal(T.mul(T.sum(ta), T.sum(tb)), ref));
      }),
      { numRuns: 80 },
    );
  });

  it('comparisons of an id against many constants (one table per id, shared up to a constant) are the indicator sums of a case split, exactly (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -2, max: 2 }), fc.integer({ min: 1, max: 3 }), fc.array(fc.tuple(fc.integer({ min: -6, max: 8 }), fc.integer({ min: 1, max: 3 })), { minLength: 1, maxLength: 6 }), (a, b, offsets) => {
        const T = new TermStore();
        const xs = [0, 1, 2];
        const ys = [0, 2, 5];
        const x = T.categorical('x', xs);
        const y = T.categorical('y', ys);
        const t = T.add(T.scale(x, q(BigInt(a))), T.scale(y, q(BigInt(b))));
        // Reference: [x = u]·[y = w] summed over the assignments where the predicate holds.
        const ref = (pred: (v: number) => boolean): TermId =>
          T.sum(xs.flatMap((u) => ys.filter((w) => pred(a * u + b * w)).map((w) => T.mul(T.test(x, (v) => v === u), T.test(y, (v) => v === w)))));
        for (const [n, d] of offsets) {
          const c = n / d;
          // gt0(c − t) and gt0(t − c): both terms differ from ±t by a constant; c may be a fraction.
          assert.ok(T.equal(T.gt0(T.sub(T.const(q(BigInt(n), BigInt(d))), t)), ref((v) => c - v > 0)), `gt0(${n}/${d} - t)`);
          assert.ok(T.equal(T.gt0(T.sub(t, T.const(q(BigInt(n), BigInt(d))))), ref((v) => v - c > 0)), `gt0(t - ${n}/${d})`);
          assert.ok(T.equal(T.test(T.add(t, T.const(q(BigInt(n)))), (v) => v === 0), ref((v) => v + n === 0)), `[t + ${n} = 0]`);
        }
      }),
      { numRuns: 60 },
    );
  });
});
