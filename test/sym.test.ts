/**
 * Affine integers of the per-template tensor level (stages/engines/tensorlevel/sym.ts): interning makes `===`
 * equality of the functions, and each operation agrees with evaluating at a rank.
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { iadd, icmp, idiv, ieval, imul, iscale, isub, isubst, Sym, type Int } from '../stages/engines/tensorlevel/sym.js';

const x0 = [1, 0, 2];
const arbInt = fc.record({ v: fc.integer({ min: -50, max: 50 }), k: fc.array(fc.integer({ min: -4, max: 4 }), { minLength: 3, maxLength: 3 }) }).map(({ v, k }) => Sym.of(v, k));
const arbX = fc.array(fc.integer({ min: 0, max: 7 }), { minLength: 3, maxLength: 3 });

describe('affine integers (stages/engines/tensorlevel/sym.ts)', () => {
  it('are interned: equal functions are one value, a value with no coefficient is a number', () => {
    assert.equal(Sym.of(3, [0, 2, 0]), Sym.of(3, [0, 2, 0]));
    assert.notEqual(Sym.of(3, [0, 2, 0]), Sym.of(3, [0, 1, 0]));
    assert.equal(Sym.of(5, [0, 0, 0]), 5);
    assert.equal(isub(Sym.of(3, [0, 2, 0]), Sym.of(1, [0, 2, 0])), 2);
  });
  it('add, subtract, scale and substitute as their values do at every rank', () => {
    fc.assert(
      fc.property(arbInt, arbInt, arbX, fc.integer({ min: -3, max: 3 }), (a, b, x, c) => {
        // + 0: -0 and 0 are one integer here.
        const at = (y: Int): number => ieval(y, x, x0) + 0;
        assert.equal(at(iadd(a, b)), at(a) + at(b));
        assert.equal(at(isub(a, b)), at(a) - at(b));
        assert.equal(at(iscale(a, c)), at(a) * c + 0);
        assert.equal(at(imul(a, c) as Int), at(a) * c + 0);
        // Substituting axis 1 by x[1] and reading at any rank with that coordinate gives a's value there.
        const s = isubst(a, [1], x, x0);
        assert.equal(ieval(s, [x[0] as number, 5, x[2] as number], x0) + 0, at(a));
        const d = icmp(a, b);
        if (d !== undefined) assert.equal(d, Math.sign(at(a) - at(b)));
        const q = idiv(a, 2);
        if (q !== undefined) assert.equal(at(q) * 2 + 0, at(a));
      }),
      { seed: 7, numRuns: 300 },
    );
  });
  it('refuse what is not affine: a product of two rank-dependent values, an inexact division, an order that depends on the rank', () => {
    assert.equal(imul(Sym.of(1, [1, 0, 0]), Sym.of(0, [0, 1, 0])), undefined);
    assert.equal(idiv(Sym.of(4, [3, 0, 0]), 2), undefined);
    assert.equal(icmp(Sym.of(0, [1, 0, 0]), 0), undefined);
  });
});
