import { strict as assert } from 'node:assert';
import { compileExpr, ExprError } from '../plans/expr.js';

const vars = new Set(['dp', 'tp', 'rank']);
const env = (v: Record<string, number>) => (n: string): number => v[n] ?? NaN;

describe('template expressions', () => {
  it('evaluates with precedence, parentheses, unary minus, min/max', () => {
    const e = compileExpr('dp*4 + tp*2 - -1', vars);
    assert.equal(e.eval(env({ dp: 1, tp: 1 })), 7);
    assert.deepEqual([...e.vars].sort(), ['dp', 'tp']);
    assert.equal(compileExpr('(dp+1)*(tp+2)', vars).eval(env({ dp: 1, tp: 0 })), 4);
    assert.equal(compileExpr('max(dp, tp, 3) - min(rank, 2)', vars).eval(env({ dp: 5, tp: 1, rank: 7 })), 3);
  });
  it('floor division and modulo follow Python (floor) semantics; / must be exact', () => {
    assert.equal(compileExpr('7 // 2', vars).eval(env({})), 3);
    assert.equal(compileExpr('-7 // 2', vars).eval(env({})), -4);
    assert.equal(compileExpr('-1 % 4', vars).eval(env({})), 3);
    assert.equal(compileExpr('8 / 2', vars).eval(env({})), 4);
    assert.throws(() => compileExpr('7 / 2', vars).eval(env({})), /not exact/);
    assert.throws(() => compileExpr('rank // 0', vars).eval(env({ rank: 1 })), /division by zero/);
  });
  it('rejects unknown variables and functions, junk, and oversized input', () => {
    assert.throws(() => compileExpr('pp + 1', vars), (e: unknown) => e instanceof ExprError && /unknown variable 'pp'/.test(e.message));
    assert.throws(() => compileExpr('pow(2, 3)', vars), /unknown function 'pow'/);
    assert.throws(() => compileExpr('2 +', vars), /unexpected end/);
    assert.throws(() => compileExpr('2 $ 3', vars), /cannot read expression/);
    assert.throws(() => compileExpr('1+'.repeat(600) + '1', vars), /longer than 1000/);
    assert.throws(() => compileExpr('('.repeat(100) + '1' + ')'.repeat(100), vars), /nested too deeply/);
    assert.throws(() => compileExpr('99999999999 * 99999999999', vars).eval(env({})), /overflows/);
  });
});
