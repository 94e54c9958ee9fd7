/** The two scalar domains the op rules run on: Float64 numbers and exact terms. */
import { type Algebra, evalChoice, nonnegFns, positiveFns, type RealFn, realFunctions, topkIndices, topkKey } from '../ops/algebra.js';
import { qParse } from '../ops/rational.js';
import { GT0, type TermId, type TermStore } from './terms.js';

export const floatAlgebra: Algebra<number> = {
  exact: false,
  zero: 0,
  one: 1,
  constant: (v) => (typeof v === 'number' ? v : evalRational(v)),
  add: (a, b) => a + b,
  sub: (a, b) => a - b,
  mul: (a, b) => a * b,
  div: (a, b) => a / b,
  neg: (a) => -a,
  sum: (xs) => {
    // Neumaier summation: witnesses should not be rounding artifacts of long sums.
    let s = 0;
    let c = 0;
    for (const x of xs) {
      const t = s + x;
      c += Math.abs(s) >= Math.abs(x) ? s - t + x : x - t + s;
      s = t;
    }
    return s + c;
  },
  exp: Math.exp,
  // Reductions, not Math.max(...xs): a row can be longer than the argument limit.
  max: (xs) => xs.reduce((a, b) => Math.max(a, b), -Infinity),
  min: (xs) => xs.reduce((a, b) => Math.min(a, b), Infinity),
  fn: (name, a) => realFunctions[name](a),
  test: (a, pred) => (pred(a) ? 1 : 0),
  gt0: (a) => (a > 0 ? 1 : 0),
  known: (a) => a,
  topk: (xs, k) => topkIndices(xs, k),
  require: () => undefined,
};

function evalRational(s: string): number {
  const r = qParse(s);
  return Number(r.n) / Number(r.d);
}

/** Exact terms in `store`; UFs of RealFn names, with declared positivity. */
export function termAlgebra(store: TermStore): Algebra<TermId> {
  return {
    exact: true,
    zero: store.zero,
    one: store.one,
    constant: (v) => store.const(qParse(v)),
    add: (a, b) => store.add(a, b),
    sub: (a, b) => store.sub(a, b),
    mul: (a, b) => store.mul(a, b),
    div: (a, b) => store.div(a, b),
    neg: (a) => store.neg(a),
    sum: (xs) => store.sum(xs),
    exp: (a) => store.exp(a),
    max: (xs) => store.max(xs),
    min: (xs) => store.min(xs),
    fn: (name: RealFn, a) => {
      // log(exp(p) · R) = p + log(R): what makes softmax and log-sum-exp shift invariant.
      if (name === 'log') return store.log(a);
      // sqrt of a positive constant (a bias correction, say) is positive, not just >= 0.
      const c = name === 'sqrt' ? store.constValue(a) : undefined;
      const positive = positiveFns.has(name) || (c !== undefined && c.n > 0n);
      return store.uf(name, name === 'sqrt_2_over_pi' ? [] : [a], positive, nonnegFns.has(name));
    },
    test: (a, pred) => store.test(a, pred),
    gt0: (a) => store.gt0(a),
    known: (a) => {
      const c = store.constValue(a);
      return c === undefined ? undefined : Number(c.n) / Number(c.d);
    },
    topk: (xs, k) => {
      const values = xs.map((_, i) => i);
      return Array.from({ length: k }, (_, j) => store.choice(topkKey(k, j), xs, values));
    },
    require: () => undefined,
  };
}

/** Real meaning of the UF atoms termAlgebra creates (for evaluating terms). */
export function realUf(name: string, args: number[]): number {
  if (name === GT0) return (args[0] ?? 0) > 0 ? 1 : 0;
  const c = evalChoice(name, args);
  if (c !== undefined) return c;
  const f = (realFunctions as Record<string, ((x: number) => number) | undefined>)[name];
  if (f === undefined) throw new Error(`no real function '${name}'`);
  return f(args[0] ?? 0);
}
