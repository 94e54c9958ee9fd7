/**
 * Integers affine in the mesh coordinates, for tensor-level proofs per template
 * (docs/engine.md, "Tensor level per template").
 *
 * A derivation per template runs at one base rank of a program and stands for every rank of
 * the program's box: a quantity that depends on the rank (a region's start, an addend's index,
 * a member's place in its group) is `v + sum_a k[a] * (x[a] - x0[a])`, its value `v` at the
 * base coordinates x0 and one coefficient per mesh axis. Values are interned, so `===` on two
 * of them is equality of the affine functions, hence equality at every rank; a value with no
 * coefficient is a plain number. Arithmetic that would leave the affine forms (a product of two
 * rank-dependent values, a division that is not exact for every coefficient) gives undefined,
 * and the rule that asked leaves the stage unproved.
 *
 * TypeScript rejects `+`, `-`, `*` and `<` on a `Sym`, so every place that computes with a
 * region goes through the functions below; `===` stays exact by the interning.
 */

export class Sym {
  private constructor(
    /** Value at the base rank. */
    readonly v: number,
    /** Coefficient per mesh axis (not all zero). */
    readonly k: readonly number[],
  ) {}

  private static readonly table = new Map<string, Sym>();

  /** The interned value; a plain number when every coefficient is zero. */
  static of(v: number, k: readonly number[]): Int {
    if (!Number.isSafeInteger(v) || k.some((x) => !Number.isSafeInteger(x))) throw new RangeError('affine value out of the safe integer range');
    if (k.every((x) => x === 0)) return v;
    const key = `${v}|${k.join(',')}`;
    let s = Sym.table.get(key);
    if (s === undefined) {
      // Bounded: a plan's derivations intern a few values per region; clearing only costs identity.
      if (Sym.table.size > 1_000_000) Sym.table.clear();
      Sym.table.set(key, (s = new Sym(v, [...k])));
    }
    return s;
  }

  /** The text, built once: keys of regions and covers print the same interned values again and again. */
  private text: string | undefined;

  toString(): string {
    if (this.text === undefined) {
      const terms = this.k.flatMap((c, a) => (c === 0 ? [] : [`${c}*x${a}`]));
      this.text = `${this.v}{${terms.join('+')}}`;
    }
    return this.text;
  }
}

/** A region bound, an addend index or a group position: a number, or affine in the coordinates. */
export type Int = number | Sym;

const coef = (a: Int, i: number): number => (typeof a === 'number' ? 0 : (a.k[i] ?? 0));
const val = (a: Int): number => (typeof a === 'number' ? a : a.v);
const width = (a: Int, b: Int): number => Math.max(typeof a === 'number' ? 0 : a.k.length, typeof b === 'number' ? 0 : b.k.length);

export function iadd(a: Int, b: Int): Int {
  if (typeof a === 'number' && typeof b === 'number') return a + b;
  const n = width(a, b);
  return Sym.of(val(a) + val(b), Array.from({ length: n }, (_, i) => coef(a, i) + coef(b, i)));
}

export function isub(a: Int, b: Int): Int {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  const n = width(a, b);
  return Sym.of(val(a) - val(b), Array.from({ length: n }, (_, i) => coef(a, i) - coef(b, i)));
}

/** a x c for a constant c. */
export function iscale(a: Int, c: number): Int {
  if (typeof a === 'number') return a * c;
  return Sym.of(a.v * c, a.k.map((x) => x * c));
}

/** a x b when one of them is a constant; undefined for a product of two rank-dependent values. */
export function imul(a: Int, b: Int): Int | undefined {
  if (typeof b === 'number') return iscale(a, b);
  if (typeof a === 'number') return iscale(b, a);
  return undefined;
}

/** a / c when it is an integer at every rank (value and every coefficient divisible), else undefined. */
export function idiv(a: Int, c: number): Int | undefined {
  if (c === 0) return undefined;
  if (typeof a === 'number') return Number.isInteger(a / c) ? a / c : undefined;
  if (!Number.isInteger(a.v / c) || a.k.some((x) => !Number.isInteger(x / c))) return undefined;
  return Sym.of(a.v / c, a.k.map((x) => x / c));
}

/**
 * The sign of a - b at every rank, when it is one sign everywhere: the difference must be a
 * constant (rank-dependent bounds are only ever compared to bounds that move with them).
 */
export function icmp(a: Int, b: Int): -1 | 0 | 1 | undefined {
  const d = isub(a, b);
  if (typeof d !== 'number') return undefined;
  return d < 0 ? -1 : d > 0 ? 1 : 0;
}

/** The constant, or undefined for a rank-dependent value. */
export const iconst = (a: Int): number | undefined => (typeof a === 'number' ? a : undefined);

/** Its value with coordinates x (per mesh axis) against the base x0. */
export function ieval(a: Int, x: ArrayLike<number>, x0: ArrayLike<number>): number {
  if (typeof a === 'number') return a;
  let s = a.v;
  a.k.forEach((c, i) => {
    s += c * ((x[i] as number) - (x0[i] as number));
  });
  return s;
}

/** The axes a value depends on. */
export function iaxes(a: Int): number[] {
  return typeof a === 'number' ? [] : a.k.flatMap((c, i) => (c === 0 ? [] : [i]));
}

/**
 * The value at a rank whose coordinates on `axes` are `at` (the others as the reader's): the
 * coefficients on those axes fold into the value.
 */
export function isubst(a: Int, axes: readonly number[], at: ArrayLike<number>, x0: ArrayLike<number>): Int {
  if (typeof a === 'number') return a;
  let v = a.v;
  const k = [...a.k];
  for (const ax of axes) {
    v += (k[ax] ?? 0) * ((at[ax] as number) - (x0[ax] as number));
    k[ax] = 0;
  }
  return Sym.of(v, k);
}

export const ikey = (a: Int): string => (typeof a === 'number' ? String(a) : a.toString());
