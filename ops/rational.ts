/** Exact rationals over BigInt, always reduced with a positive denominator. */

export interface Q {
  readonly n: bigint;
  readonly d: bigint;
}

const abs = (x: bigint): bigint => (x < 0n ? -x : x);

function gcd(a: bigint, b: bigint): bigint {
  a = abs(a);
  b = abs(b);
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

export function q(n: bigint, d: bigint = 1n): Q {
  if (d === 0n) throw new RangeError('rational with zero denominator');
  if (d < 0n) {
    n = -n;
    d = -d;
  }
  const g = gcd(n, d);
  return g === 1n || g === 0n ? { n, d } : { n: n / g, d: d / g };
}

export const Q0: Q = { n: 0n, d: 1n };
export const Q1: Q = { n: 1n, d: 1n };

const qInt = (k: number | bigint): Q => ({ n: BigInt(k), d: 1n });
export const qAdd = (a: Q, b: Q): Q => (a.d === b.d ? q(a.n + b.n, a.d) : q(a.n * b.d + b.n * a.d, a.d * b.d));
export const qMul = (a: Q, b: Q): Q => q(a.n * b.n, a.d * b.d);
export const qIsZero = (a: Q): boolean => a.n === 0n;
export const qIsOne = (a: Q): boolean => a.n === 1n && a.d === 1n;
export const qEq = (a: Q, b: Q): boolean => a.n === b.n && a.d === b.d;
export const qIsInt = (a: Q): boolean => a.d === 1n;
export const qSign = (a: Q): number => (a.n > 0n ? 1 : a.n < 0n ? -1 : 0);
export const qCmp = (a: Q, b: Q): number => {
  const x = a.n * b.d - b.n * a.d;
  return x > 0n ? 1 : x < 0n ? -1 : 0;
};
export function qDiv(a: Q, b: Q): Q {
  if (b.n === 0n) throw new RangeError('division of a rational by zero');
  return q(a.n * b.d, a.d * b.n);
}
export const qKey = (a: Q): string => (a.d === 1n ? a.n.toString() : `${a.n}/${a.d}`);
export const qToNumber = (a: Q): number => (a.d === 1n ? Number(a.n) : Number(a.n) / Number(a.d));
export const qMin = (a: Q, b: Q): Q => (qCmp(a, b) <= 0 ? a : b);

/** The exact value of a finite double (every double is a dyadic rational). */
export function qFromNumber(x: number): Q {
  if (!Number.isFinite(x)) throw new RangeError(`${x} is not a finite number`);
  if (Number.isInteger(x) && Number.isSafeInteger(x)) return qInt(x);
  const buf = new DataView(new ArrayBuffer(8));
  buf.setFloat64(0, x);
  const bits = buf.getBigUint64(0);
  const sign = bits >> 63n ? -1n : 1n;
  const exp = Number((bits >> 52n) & 0x7ffn);
  const frac = bits & ((1n << 52n) - 1n);
  const mant = exp === 0 ? frac : frac | (1n << 52n);
  const e = (exp === 0 ? 1 : exp) - 1075;
  return e >= 0 ? q(sign * mant * (1n << BigInt(e))) : q(sign * mant, 1n << BigInt(-e));
}

/** Parses a JSON number or a rational string "p/q" (as plan attributes spell exact scalars). */
export function qParse(v: number | string): Q {
  if (typeof v === 'number') return qFromNumber(v);
  const m = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(v);
  if (m === null) throw new RangeError(`'${v}' is not a rational`);
  return q(BigInt(m[1] as string), BigInt(m[2] ?? '1'));
}
