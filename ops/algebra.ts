/**
 * The scalar domain op rules are written against. One rule per op serves both numeric
 * evaluation (Float64) and symbolic evaluation (exact terms), so the two cannot drift apart.
 * Functions without a closed form in the term language are named here and become
 * uninterpreted functions symbolically; `realFunctions` gives their real meaning.
 */
import type { Shape } from './basic.js';

/** Named real functions (uninterpreted in the symbolic domain). */
export type RealFn = 'tanh' | 'sigmoid' | 'Phi' | 'phi' | 'log' | 'sqrt' | 'rsqrt' | 'sqrt_2_over_pi';

/**
 * Whether f(x) > 0 wherever f is defined (the engine may rely on it). rsqrt is defined for
 * x > 0 only; plans apply it to variances plus a positive eps.
 */
/** f(x) >= 0 wherever defined (sqrt may be 0, so it is not positive). */
export const nonnegFns: ReadonlySet<RealFn> = new Set<RealFn>(['sqrt']);

export const positiveFns: ReadonlySet<RealFn> = new Set<RealFn>(['sigmoid', 'Phi', 'phi', 'rsqrt', 'sqrt_2_over_pi']);

export const realFunctions: Readonly<Record<RealFn, (x: number) => number>> = {
  tanh: Math.tanh,
  sigmoid: (x) => 1 / (1 + Math.exp(-x)),
  Phi: (x) => 0.5 * (1 + erf(x / Math.SQRT2)),
  phi: (x) => Math.exp(-0.5 * x * x) / Math.sqrt(2 * Math.PI),
  log: Math.log,
  sqrt: Math.sqrt,
  rsqrt: (x) => 1 / Math.sqrt(x),
  sqrt_2_over_pi: () => Math.sqrt(2 / Math.PI),
};

/** A scalar domain ops evaluate over: Float64 for numeric runs, exact terms for proofs. */
export interface Algebra<S> {
  readonly exact: boolean;
  readonly zero: S;
  readonly one: S;
  /** A constant from a JSON number or a rational string "p/q". */
  constant(v: number | string): S;
  add(a: S, b: S): S;
  sub(a: S, b: S): S;
  mul(a: S, b: S): S;
  div(a: S, b: S): S;
  neg(a: S): S;
  sum(xs: readonly S[]): S;
  exp(a: S): S;
  max(xs: readonly S[]): S;
  min(xs: readonly S[]): S;
  fn(name: RealFn, a: S): S;
  /**
   * [pred(a)] for an integer-valued a (a token id, a label, a routing choice, a count): 1
   * where pred holds, else 0. Symbolically ids stay symbolic (indicator atoms), so lookups,
   * masks and gathers written with `test` are exact for every possible id.
   *
   * Contract on pred (every op relies on it, and interval certificates depend on it:
   * stages/engines/interval.ts `decideTest`): pred is a step function whose steps sit at
   * integers only, i.e. constant on every open interval (k, k + 1) between consecutive integers.
   * Equality or inequality with an integer, comparisons with integer bounds (shape sizes, loop
   * indices, integer attributes such as vocab ranges and ignore_index), Number.isInteger, and
   * and/or/not of those qualify; a comparison with a non-integer constant (v < 0.5) does not.
   * The interval algebra decides pred on an interval strictly between two integers from its
   * value there (checked at both ends and the midpoint; a mismatch gives up).
   */
  test(a: S, pred: (v: number) => boolean): S;
  /**
   * [a > 0] of a real a: 1 where a is positive, else 0 (comparisons, ReLU's mask, clamp's
   * gradient). Symbolically an uninterpreted 0/1 atom of a's normal form unless the sign is
   * evident; `test` on its result (or on 1 minus it) is exact.
   */
  gt0(a: S): S;
  /** a's value when it is a known constant (always, for numbers): lets ops index directly. */
  known(a: S): number | undefined;
  /**
   * Indices of the k largest of xs, largest first (torch.topk). Symbolically an
   * uninterpreted choice: the same scores always make the same choice.
   */
  topk(xs: readonly S[], k: number): S[];
  /**
   * Declares that cond must be 1 wherever the op runs (e.g. every id within its table: PyTorch
   * raises otherwise). The stage builder turns it into an obligation; numerically the op
   * yields NaN where it would raise. In interval certificates, a parallel op whose cond is
   * certainly 0 is a certified difference (the rank raises where the model does not); pass
   * `alg.zero` itself when `what` already says what is wrong ("index 2.5 is not an integer in
   * [0, 4)"), else `what` says what is required ("index within [0, 4)").
   */
  require(cond: S, what: string): void;
}

/** Indices of the k largest values, largest first; ties broken by the lower index. */
export function topkIndices(xs: readonly number[], k: number): number[] {
  return xs
    .map((v, i) => [v, i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k)
    .map(([, i]) => i);
}

/** The key of choice j of topk(k) (symbolic choices; evaluated by `evalChoice`). */
export function topkKey(k: number, j: number): string {
  return `topk${k}.${j}`;
}

/** Real meaning of a choice key: the j-th index of topk(args, k). */
export function evalChoice(key: string, args: readonly number[]): number | undefined {
  const m = /^topk([0-9]+)\.([0-9]+)$/.exec(key);
  if (m === null) return undefined;
  return topkIndices(args, Number(m[1]))[Number(m[2])];
}

/** A dense row-major tensor over a scalar domain. */
export interface Dense<S> {
  readonly shape: Shape;
  readonly data: readonly S[];
}

/**
 * erf with |error| < 1.2e-16 relative near 0 and ~1e-16 absolute elsewhere: series for small
 * |x|, continued fraction for large |x|. Math has no erf.
 */
function erf(x: number): number {
  const ax = Math.abs(x);
  if (ax < 2.5) {
    // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    let term = x;
    let sum = x;
    const x2 = x * x;
    for (let n = 1; n < 200; n++) {
      term *= -x2 / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    return (2 / Math.sqrt(Math.PI)) * sum;
  }
  // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz)
  let f = ax;
  let C = ax;
  let D = 0;
  for (let n = 1; n < 300; n++) {
    const an = n / 2;
    D = ax + an * D;
    D = D === 0 ? 1e-300 : 1 / D;
    C = ax + an / C;
    if (C === 0) C = 1e-300;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / f;
  return x > 0 ? 1 - erfc : erfc - 1;
}
