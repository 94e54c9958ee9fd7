/**
 * Exact real-valued terms in a normal form, hash-consed in a TermStore.
 *
 * A term is  c · M · Π f_i^k_i  where
 *  - c is an exact rational (BigInt);
 *  - M is a Laurent monomial over atoms: free symbols, exp atoms, max/min atoms and
 *    uninterpreted function applications. Positive atoms (exp, and UFs declared positive)
 *    may carry any rational power, so exp(a + b) = exp(a) · exp(b) and exp(c·m) = exp(m)^c
 *    hold by construction: exp of a polynomial is a monomial of exp atoms;
 *  - f_i are normalized polynomials with at least two terms (monomial content removed,
 *    leading coefficient 1) and k_i nonzero integers, so a denominator is a product of
 *    factors and identical factors cancel by adding exponents.
 * max and min are associative, commutative and idempotent (arguments flattened, sorted and
 * deduplicated).
 *
 * Equality: identical ids are equal. Otherwise `isZero(sub(a, b))` decides identity of the
 * two rational functions over independent atoms exactly (the subtraction expands both sides
 * relative to their common factors, i.e. cross-multiplies). Atoms are treated as independent,
 * which is sound for "equal" (a formal identity holds for every interpretation of the
 * uninterpreted functions); "different" may still be equal for the real functions, so a
 * difference is never a refutation by itself (see the engine's use of numeric witnesses).
 *
 * Division records a side condition (the divisor is nonzero); `provablyNonzero` discharges
 * the easy ones syntactically (positive atoms, sums of positive terms).
 */
import { type Q, Q0, Q1, q, qAdd, qCmp, qDiv, qEq, qFromNumber, qIsInt, qIsOne, qIsZero, qKey, qMin, qMul, qSign, qToNumber } from '../ops/rational.js';

export type TermId = number;
/** The uf name of [x > 0] (TermStore.gt0). */
export const GT0 = 'gt0';
type AtomId = number;

type AtomKind = 'sym' | 'exp' | 'max' | 'min' | 'uf' | 'ind' | 'lsum';

interface Atom {
  readonly kind: AtomKind;
  /** ind: the categorical group; -1 otherwise. */
  readonly group: number;
  readonly positive: boolean;
  /** >= 0 where defined (e.g. sqrt); positive atoms are nonneg too. */
  readonly nonneg: boolean;
  /** sym: display name; uf: function name. */
  readonly name: string;
  /** exp: [monomial id]; max/min/uf/lsum: argument term ids; ind: [group, class]. */
  readonly args: readonly number[];
}

/** Sorted by atom id; powers nonzero. */
interface Mono {
  readonly atoms: readonly AtomId[];
  readonly pows: readonly Q[];
  /** Holds an indicator atom. */
  readonly ind: boolean;
}

/** Sorted by monomial id; coefficients nonzero. */
interface Poly {
  readonly monos: readonly number[];
  readonly coefs: readonly Q[];
  readonly ind: boolean;
}

/**
 * A categorical variable: an integer-valued input (a token id, a label) or a choice made by a
 * function of other terms (a top-k routing decision). It takes exactly one of `values`.
 */
interface Group {
  readonly name: string;
  readonly values: readonly number[];
  /** For choices: the function key and argument terms (evaluated by the UF implementation). */
  readonly choice?: { readonly key: string; readonly args: readonly TermId[] };
}

/** The zero monomial: a product of two different classes of one categorical variable. */
const ZERO_MONO = -1;
/** Shannon expansions and tests enumerate at most this many joint assignments. */
const MAX_ASSIGNMENTS = 4096;

interface Term {
  readonly c: Q;
  readonly mono: number;
  /** Sorted by factor poly id; exponents nonzero integers. */
  readonly fids: readonly number[];
  readonly fexp: readonly number[];
}

/** Real functions for evaluating UF atoms (witnesses, debugging). */
type UfImpl = (name: string, args: number[]) => number;

/** Thrown when a stage needs more normal-form work than its budget allows. */
export class TermBudgetError extends Error {}

/**
 * Thrown when a store passes its stop time (`TermStore.stopAt`): an in-thread proof cannot be
 * stopped from outside, so the store checks the clock as it works.
 */
export class TermStopError extends Error {}

/** Thrown when a term needs a rule the normal form does not have (reported as "unknown"). */
export class TermUnsupportedError extends Error {}

/** Default budget: monomial products per store (one store per stage). */
export const DEFAULT_TERM_BUDGET = 1_000_000;


/** Units of work between two looks at the clock (TermStore.stopAt). */
const STOP_CHECK = 4096;

/** Characters all nested renderings of one `render` call may write together. */
const RENDER_WORK = 100_000;

/** Text of one rendering, which stops taking pieces once past its cap or the shared allowance. */
class RenderOut {
  text = '';
  constructor(
    private readonly cap: number,
    readonly work: { left: number },
  ) {}
  get full(): boolean {
    return this.text.length > this.cap || this.work.left <= 0;
  }
  add(x: string): void {
    if (this.full) return;
    this.text += x;
    this.work.left -= x.length;
  }
}

export class TermStore {
  /** Monomial products performed so far (the normal form's unit of work). */
  work = 0;
  private readonly atoms: Atom[] = [];
  private readonly atomIndex = new Map<string, AtomId>();
  private readonly monos: Mono[] = [];
  private readonly monoIndex = new Map<string, number>();
  private readonly polys: Poly[] = [];
  private readonly polyIndex = new Map<string, number>();
  private readonly terms: Term[] = [];
  private readonly termIndex = new Map<string, TermId>();
  private readonly groups: Group[] = [];
  private readonly choiceIndex = new Map<string, number>();
  /** Divisors recorded by `div`, each required to be nonzero. */
  readonly conditions: TermId[] = [];
  /**
   * Results of pure operations on interned ids. Replicas (tp ranks computing the same layer,
   * for instance) build identical terms; the memo makes the second copy cost a lookup.
   */
  private readonly memo = new Map<string, TermId>();

  readonly unitMono: number;
  readonly zero: TermId;
  readonly one: TermId;

  /** Lazy sums created so far (see `lazy`). */
  lazySums = 0;

  /**
   * A performance.now() time past which work throws TermStopError (in-thread proofs under a
   * deadline or time limit); checked every STOP_CHECK units of work, so the clock costs nothing.
   */
  stopAt = Infinity;
  private nextStopCheck = STOP_CHECK;

  /**
   * `lazy`: a sum over different denominators becomes an opaque sum atom over its
   * per-denominator parts (canonical, flattened and sorted), whatever the grouping of its
   * addends. Equal results are then still equal reals (an
   * atom stands for its value), but equal reals may get different forms: a lazy store proves,
   * and a caller falls back to an eager store where it does not.
   */
  constructor(
    readonly budget = DEFAULT_TERM_BUDGET,
    readonly lazy = false,
  ) {
    this.unitMono = this.internMono([], []);
    this.zero = this.internTerm(Q0, this.unitMono, [], []);
    this.one = this.internTerm(Q1, this.unitMono, [], []);
  }

  get size(): number {
    return this.terms.length;
  }

  // ---------------------------------------------------------------- interning

  private internAtom(kind: AtomKind, name: string, args: readonly number[], positive: boolean, nonneg = positive): AtomId {
    const group = kind === 'ind' ? (args[0] as number) : -1;
    return intern(this.atomIndex, this.atoms, `${kind}|${name}|${args.join(',')}`, () => ({ kind, group, positive, nonneg: nonneg || positive, name, args }));
  }

  private internMono(atoms: readonly AtomId[], pows: readonly Q[]): number {
    let key = '';
    for (let i = 0; i < atoms.length; i++) key += `${atoms[i]}^${qKey(pows[i] as Q)};`;
    return intern(this.monoIndex, this.monos, key, () => ({ atoms, pows, ind: atoms.some((a) => (this.atoms[a] as Atom).kind === 'ind') }));
  }

  private internPoly(monos: readonly number[], coefs: readonly Q[]): number {
    let key = '';
    for (let i = 0; i < monos.length; i++) key += `${monos[i]}*${qKey(coefs[i] as Q)};`;
    return intern(this.polyIndex, this.polys, key, () => ({ monos, coefs, ind: monos.some((m) => (this.monos[m] as Mono).ind) }));
  }

  private internTerm(c: Q, mono: number, fids: readonly number[], fexp: readonly number[]): TermId {
    if (qIsZero(c)) {
      mono = this.unitMono;
      fids = [];
      fexp = [];
    }
    let key = `${qKey(c)}|${mono}|`;
    for (let i = 0; i < fids.length; i++) key += `${fids[i]}^${fexp[i]};`;
    return intern(this.termIndex, this.terms, key, () => ({ c, mono, fids, fexp }));
  }

  // ---------------------------------------------------------------- monomials

  /**
   * a · b^kb. Indicator atoms are idempotent (e^2 = e: positive powers clamp to 1) and two
   * classes of one variable annihilate (e_i · e_j = 0): the result is then ZERO_MONO. A
   * negative indicator power only exists transiently, while a common content is divided out.
   */
  private monoMulPow(a: number, b: number, kb: Q): number {
    const A = this.monos[a] as Mono;
    const B = this.monos[b] as Mono;
    if (B.atoms.length === 0) return a;
    const atoms: AtomId[] = [];
    const pows: Q[] = [];
    const clamp = (atom: AtomId, p: Q): Q => ((this.atoms[atom] as Atom).kind === 'ind' && qSign(p) > 0 ? Q1 : p);
    let i = 0;
    let j = 0;
    while (i < A.atoms.length || j < B.atoms.length) {
      const x = A.atoms[i] ?? Infinity;
      const y = B.atoms[j] ?? Infinity;
      if (x < y) {
        atoms.push(x);
        pows.push(A.pows[i] as Q);
        i++;
      } else if (y < x) {
        atoms.push(y);
        pows.push(clamp(y, qMul(B.pows[j] as Q, kb)));
        j++;
      } else {
        const p = qAdd(A.pows[i] as Q, qMul(B.pows[j] as Q, kb));
        if (!qIsZero(p)) {
          atoms.push(x);
          pows.push(clamp(x, p));
        }
        i++;
        j++;
      }
    }
    if (A.ind || B.ind) {
      const seen = new Set<number>();
      for (let k = 0; k < atoms.length; k++) {
        const at = this.atoms[atoms[k] as number] as Atom;
        if (at.kind !== 'ind' || qSign(pows[k] as Q) < 0) continue;
        if (seen.has(at.group)) return ZERO_MONO;
        seen.add(at.group);
      }
    }
    return this.internMono(atoms, pows);
  }

  /** a · b where the product cannot vanish (content removal, exp atoms). */
  private monoMul(a: number, b: number): number {
    const m = this.monoMulPow(a, b, Q1);
    if (m === ZERO_MONO) throw new Error('internal: unexpected zero monomial');
    return m;
  }

  /** a^k; for k < 0 indicator atoms get the transient negative power used to divide out content. */
  private monoPow(a: number, k: Q): number {
    if (a === this.unitMono) return a;
    const M = this.monos[a] as Mono;
    return this.internMono(M.atoms, M.pows.map((p) => qMul(p, k)));
  }

  /** Per atom, the smaller power of the two (absent = 0): the common part of a and b. */
  private monoMin(a: number, b: number): number {
    const A = this.monos[a] as Mono;
    const B = this.monos[b] as Mono;
    const atoms: AtomId[] = [];
    const pows: Q[] = [];
    let i = 0;
    let j = 0;
    while (i < A.atoms.length || j < B.atoms.length) {
      const x = A.atoms[i] ?? Infinity;
      const y = B.atoms[j] ?? Infinity;
      let atom: number;
      let p: Q;
      if (x < y) {
        atom = x;
        p = qMin(A.pows[i] as Q, Q0);
        i++;
      } else if (y < x) {
        atom = y;
        p = qMin(B.pows[j] as Q, Q0);
        j++;
      } else {
        atom = x;
        p = qMin(A.pows[i] as Q, B.pows[j] as Q);
        i++;
        j++;
      }
      if (!qIsZero(p)) {
        atoms.push(atom);
        pows.push(p);
      }
    }
    return this.internMono(atoms, pows);
  }

  // ---------------------------------------------------------------- polynomials

  private polyFromMap(m: Map<number, Q>): Poly {
    const monos = [...m.keys()].filter((k) => !qIsZero(m.get(k) as Q)).sort((x, y) => x - y);
    return { monos, coefs: monos.map((k) => m.get(k) as Q), ind: monos.some((k) => (this.monos[k] as Mono).ind) };
  }

  private charge(n: number): void {
    this.work += n;
    if (this.work > this.budget) throw new TermBudgetError(`more than ${this.budget} monomial products`);
    if (this.work >= this.nextStopCheck) {
      this.nextStopCheck = this.work + STOP_CHECK;
      if (performance.now() > this.stopAt) throw new TermStopError(`stopped after ${this.work} monomial products`);
    }
  }

  private polyMulInto(acc: Map<number, Q>, p: Poly, c: Q, mono: number): void {
    this.charge(p.monos.length);
    for (let i = 0; i < p.monos.length; i++) {
      const m = this.monoMulPow(p.monos[i] as number, mono, Q1);
      if (m === ZERO_MONO) continue;
      const v = qMul(p.coefs[i] as Q, c);
      const prev = acc.get(m);
      acc.set(m, prev === undefined ? v : qAdd(prev, v));
    }
  }

  private polyMul(a: Poly, b: Poly): Poly {
    const acc = new Map<number, Q>();
    for (let i = 0; i < b.monos.length; i++) this.polyMulInto(acc, a, b.coefs[i] as Q, b.monos[i] as number);
    return this.polyFromMap(acc);
  }

  /** Expands c · M · Π f^k (all k > 0) into a polynomial. */
  private expand(c: Q, mono: number, fids: readonly number[], fexp: readonly number[]): Poly {
    let p: Poly = { monos: [mono], coefs: [c], ind: (this.monos[mono] as Mono).ind };
    for (let i = 0; i < fids.length; i++) {
      const f = this.polys[fids[i] as number] as Poly;
      const k = fexp[i] as number;
      if (k < 0) throw new Error('expand: negative factor exponent');
      for (let r = 0; r < k; r++) p = this.polyMul(p, f);
    }
    return p;
  }

  /** Turns a polynomial into a term: c · content monomial · normalized factor. */
  private termOfPoly(p: Poly): TermId {
    if (p.monos.length === 0) return this.zero;
    if (p.monos.length === 1) return this.internTerm(p.coefs[0] as Q, p.monos[0] as number, [], []);
    let content = p.monos[0] as number;
    for (let i = 1; i < p.monos.length; i++) content = this.monoMin(content, p.monos[i] as number);
    const inv = this.monoPow(content, q(-1n));
    const acc = new Map<number, Q>();
    for (let i = 0; i < p.monos.length; i++) acc.set(this.monoMul(p.monos[i] as number, inv), p.coefs[i] as Q);
    const reduced = this.polyFromMap(acc);
    const lc = reduced.coefs[0] as Q;
    const fid = this.internPoly(
      reduced.monos,
      reduced.coefs.map((x) => qDiv(x, lc)),
    );
    return this.internTerm(lc, content, [fid], [1]);
  }

  // ---------------------------------------------------------------- constructors

  /** A fresh free symbol (an input element). Names are for display and evaluation: keep them unique. */
  sym(name: string): TermId {
    const a = this.internAtom('sym', name, [this.atoms.length], false);
    return this.internTerm(Q1, this.internMono([a], [Q1]), [], []);
  }

  const(c: Q | number | string): TermId {
    const v = typeof c === 'object' ? c : typeof c === 'number' ? qFromNumber(c) : qParseStr(c);
    return this.internTerm(v, this.unitMono, [], []);
  }

  /** The constant value of a term, or undefined when it depends on atoms. */
  constValue(t: TermId): Q | undefined {
    const T = this.terms[t] as Term;
    return T.mono === this.unitMono && T.fids.length === 0 ? T.c : undefined;
  }

  isZero(t: TermId): boolean {
    return t === this.zero;
  }

  add(a: TermId, b: TermId): TermId {
    return this.sum([a, b]);
  }

  sub(a: TermId, b: TermId): TermId {
    return this.sum([a, this.neg(b)]);
  }

  neg(a: TermId): TermId {
    return this.scale(a, q(-1n));
  }

  scale(a: TermId, k: Q): TermId {
    const A = this.terms[a] as Term;
    return this.internTerm(qMul(A.c, k), A.mono, A.fids, A.fexp);
  }

  /**
   * n-ary sum. The common part of all addends (smallest power of each atom and factor) is
   * kept factored; the rests are expanded and added as polynomials.
   */
  sum(list: readonly TermId[]): TermId {
    const ts = list.filter((t) => t !== this.zero);
    if (ts.length === 0) return this.zero;
    if (ts.length === 1) return ts[0] as TermId;
    const key = `s${ts.slice().sort((x, y) => x - y).join(',')}`;
    const hit = this.memo.get(key);
    if (hit !== undefined) return hit;
    const r = this.sumOf(ts);
    this.memo.set(key, r);
    return r;
  }

  private sumOf(list: readonly TermId[]): TermId {
    const ts = this.lazy ? this.flattenLazy(list) : list;
    if (ts.length === 0) return this.zero;
    if (ts.length === 1) return ts[0] as TermId;
    const T = ts.map((t) => this.terms[t] as Term);
    const t0 = T[0] as Term;
    // Same shape everywhere: just add coefficients.
    if (T.every((x) => x.mono === t0.mono && sameFactors(x, t0))) {
      let c = Q0;
      for (const x of T) c = qAdd(c, x.c);
      return this.internTerm(c, t0.mono, t0.fids, t0.fexp);
    }
    let gm = t0.mono;
    for (const x of T) gm = this.monoMin(gm, x.mono);
    const gf = new Map<number, number>();
    const allF = new Set<number>();
    for (const x of T) for (const f of x.fids) allF.add(f);
    for (const f of allF) {
      let k = Infinity;
      for (const x of T) {
        const i = x.fids.indexOf(f);
        k = Math.min(k, i < 0 ? 0 : (x.fexp[i] as number));
      }
      if (k !== 0) gf.set(f, k);
    }
    if (this.lazy && this.lazyWorthIt(T, gf)) return this.lazySum(ts, T);
    const ginv = this.monoPow(gm, q(-1n));
    const acc = new Map<number, Q>();
    for (const x of T) {
      const fids: number[] = [];
      const fexp: number[] = [];
      x.fids.forEach((f, i) => {
        const k = (x.fexp[i] as number) - (gf.get(f) ?? 0);
        if (k !== 0) {
          fids.push(f);
          fexp.push(k);
        }
      });
      for (const [f, k] of gf) {
        if (!x.fids.includes(f)) {
          fids.push(f);
          fexp.push(-k);
        }
      }
      const p = this.expand(x.c, this.monoMul(x.mono, ginv), ...sortFactors(fids, fexp));
      this.charge(p.monos.length);
      for (let i = 0; i < p.monos.length; i++) {
        const m = p.monos[i] as number;
        const prev = acc.get(m);
        acc.set(m, prev === undefined ? (p.coefs[i] as Q) : qAdd(prev, p.coefs[i] as Q));
      }
    }
    const s = this.termOfPoly(this.polyFromMap(acc));
    if (s === this.zero) return this.zero;
    const g = this.internTerm(Q1, gm, ...sortFactors([...gf.keys()], [...gf.values()]));
    return this.mul(g, s);
  }

  /** Lazy sums among the addends are opened (c · lsum(a, b) is c·a, c·b). */
  private flattenLazy(list: readonly TermId[]): TermId[] {
    const out: TermId[] = [];
    for (const t of list) {
      const T = this.terms[t] as Term;
      const M = this.monos[T.mono] as Mono;
      const at = T.fids.length === 0 && M.atoms.length === 1 && qIsOne(M.pows[0] as Q) ? (this.atoms[M.atoms[0] as number] as Atom) : undefined;
      if (at?.kind === 'lsum') for (const x of at.args) out.push(this.scale(x, T.c));
      else if (t !== this.zero) out.push(t);
    }
    return out;
  }

  /**
   * Some addend lacks a denominator factor that another has (a common denominator would
   * multiply it out), and no addend holds indicators (their products must always be
   * expanded, see mulExpanded, and atoms never hold them). Lazy whenever possible, not only
   * when expensive: a small block summed eagerly would have another form than the same rows
   * summed lazily elsewhere.
   */
  private lazyWorthIt(T: readonly Term[], gf: ReadonlyMap<number, number>): boolean {
    let lacks = false;
    for (const x of T) {
      if ((this.monos[x.mono] as Mono).ind || x.fids.some((f) => (this.polys[f] as Poly).ind)) return false;
      for (const [f, k] of gf) {
        if (k >= 0 || lacks) continue;
        const i = x.fids.indexOf(f);
        if ((i < 0 ? 0 : (x.fexp[i] as number)) > k) lacks = true;
      }
    }
    return lacks;
  }

  /** Sums per denominator (cheap: a shared denominator stays factored), then one lsum atom. */
  private lazySum(ts: readonly TermId[], T: readonly Term[]): TermId {
    const byDen = new Map<string, TermId[]>();
    T.forEach((x, i) => {
      const key = x.fids.flatMap((f, j) => ((x.fexp[j] as number) < 0 ? [`${f}^${x.fexp[j] as number}`] : [])).join(',');
      let l = byDen.get(key);
      if (l === undefined) byDen.set(key, (l = []));
      l.push(ts[i] as TermId);
    });
    if (byDen.size < 2) throw new Error('lazySum: one denominator');
    const parts = [...byDen.values()].map((l) => this.sum(l)).filter((t) => t !== this.zero).sort((x, y) => x - y);
    if (parts.length === 0) return this.zero;
    if (parts.length === 1) return parts[0] as TermId;
    this.lazySums++;
    return this.atomTerm(this.internAtom('lsum', '', parts, parts.every((t) => this.provablyPositive(t))));
  }

  mul(a: TermId, b: TermId): TermId {
    if (a === this.zero || b === this.zero) return this.zero;
    const key = a < b ? `m${a},${b}` : `m${b},${a}`;
    const hit = this.memo.get(key);
    if (hit !== undefined) return hit;
    const r = this.mulOf(a, b);
    this.memo.set(key, r);
    return r;
  }

  private mulOf(a: TermId, b: TermId): TermId {
    const A = this.terms[a] as Term;
    const B = this.terms[b] as Term;
    if (this.numeratorInd(A) || this.numeratorInd(B)) return this.mulExpanded(A, B);
    const fm = new Map<number, number>();
    A.fids.forEach((f, i) => fm.set(f, A.fexp[i] as number));
    B.fids.forEach((f, i) => fm.set(f, (fm.get(f) ?? 0) + (B.fexp[i] as number)));
    const keep = [...fm].filter(([, k]) => k !== 0);
    return this.internTerm(qMul(A.c, B.c), this.monoMul(A.mono, B.mono), ...sortFactors(keep.map(([f]) => f), keep.map(([, k]) => k)));
  }

  /** The numerator (monomial and positive factors) holds an indicator atom. */
  private numeratorInd(T: Term): boolean {
    return (this.monos[T.mono] as Mono).ind || T.fids.some((f, i) => (T.fexp[i] as number) > 0 && (this.polys[f] as Poly).ind);
  }

  /**
   * Products with indicators are expanded, so that e_i · e_j = 0 and e^2 = e apply between
   * every pair of monomials: numerators of indicator terms are always reduced polynomials,
   * which is what makes their normal form canonical. Denominators stay factored.
   */
  private mulExpanded(A: Term, B: Term): TermId {
    const num = (T: Term): Poly => {
      const f: number[] = [];
      const k: number[] = [];
      T.fids.forEach((x, i) => {
        if ((T.fexp[i] as number) > 0) {
          f.push(x);
          k.push(T.fexp[i] as number);
        }
      });
      return this.expand(T.c, T.mono, f, k);
    };
    const t = this.termOfPoly(this.polyMul(num(A), num(B)));
    const den = new Map<number, number>();
    for (const T of [A, B]) T.fids.forEach((f, i) => {
      const k = T.fexp[i] as number;
      if (k < 0) den.set(f, (den.get(f) ?? 0) + k);
    });
    if (den.size === 0 || t === this.zero) return t;
    const R = this.terms[t] as Term;
    R.fids.forEach((f, i) => den.set(f, (den.get(f) ?? 0) + (R.fexp[i] as number)));
    const keep = [...den].filter(([, k]) => k !== 0);
    return this.internTerm(R.c, R.mono, ...sortFactors(keep.map(([f]) => f), keep.map(([, k]) => k)));
  }

  // ---------------------------------------------------------------- categorical variables

  /**
   * A fresh categorical input (e.g. a token id) taking one of `values`. It is represented by
   * indicator atoms e_k = [x = values[k]] for every class but the last, whose indicator is
   * 1 - sum of the others; the returned term is x = sum_k values[k] · [x = values[k]].
   * Indicators are non-negative, idempotent and pairwise annihilating, so functions of
   * categorical variables have a canonical reduced polynomial form.
   */
  categorical(name: string, values: readonly number[]): TermId {
    if (values.length === 0) throw new RangeError(`categorical '${name}' has no values`);
    this.groups.push({ name, values });
    return this.groupValue(this.groups.length - 1);
  }

  /**
   * A choice made by a function of `args` (a top-k routing decision): one categorical
   * variable per distinct (key, args), so the same scores always make the same choice.
   */
  choice(key: string, args: readonly TermId[], values: readonly number[]): TermId {
    const ck = `${key}|${args.join(',')}`;
    let g = this.choiceIndex.get(ck);
    if (g === undefined) {
      const gs = this.groupsOfAll(args);
      if (gs.length > 0) {
        const mk = `c${values.join(',')}|${ck}`;
        const hit = this.memo.get(mk);
        if (hit !== undefined) return hit;
        const r = this.shannon(args, (xs) => this.choice(key, xs, values));
        this.memo.set(mk, r);
        return r;
      }
      g = this.groups.length;
      this.groups.push({ name: `${key}#${g}`, values, choice: { key, args } });
      this.choiceIndex.set(ck, g);
    }
    return this.groupValue(g);
  }

  private groupValue(g: number): TermId {
    const G = this.groups[g] as Group;
    return this.sum(G.values.map((v, k) => this.scale(this.indicator(g, k), qFromNumber(v))));
  }

  /** [x_g = values[k]]. */
  private indicator(g: number, k: number): TermId {
    const G = this.groups[g] as Group;
    if (G.values.length === 1) return this.one;
    if (k < G.values.length - 1) return this.atomTerm(this.internAtom('ind', G.name, [g, k], false, true));
    return this.sub(this.one, this.sum(G.values.slice(0, -1).map((_, j) => this.indicator(g, j))));
  }

  /** Categorical groups occurring in t (only at polynomial level: atoms never hold indicators). */
  private groupsOf(t: TermId, into: Set<number>): void {
    const T = this.terms[t] as Term;
    const scan = (m: number): void => {
      const M = this.monos[m] as Mono;
      if (M.ind) for (const a of M.atoms) if ((this.atoms[a] as Atom).kind === 'ind') into.add((this.atoms[a] as Atom).group);
    };
    scan(T.mono);
    for (const f of T.fids) {
      const P = this.polys[f] as Poly;
      if (P.ind) for (const m of P.monos) scan(m);
    }
  }

  private groupsOfAll(ts: readonly TermId[]): number[] {
    const set = new Set<number>();
    for (const t of ts) this.groupsOf(t, set);
    return [...set].sort((a, b) => a - b);
  }

  /** Every joint class assignment of `groups` (last group fastest), bounded. */
  private assignments(groups: readonly number[]): number[][] {
    let n = 1;
    for (const g of groups) n *= (this.groups[g] as Group).values.length;
    if (n > MAX_ASSIGNMENTS) throw new TermUnsupportedError(`a value depends on ${groups.length} categorical variables with ${n} joint values (more than ${MAX_ASSIGNMENTS})`);
    this.charge(n);
    const out: number[][] = [];
    const cur = groups.map(() => 0);
    for (let i = 0; i < n; i++) {
      out.push([...cur]);
      for (let d = groups.length - 1; d >= 0; d--) {
        cur[d] = (cur[d] as number) + 1;
        if ((cur[d] as number) < (this.groups[groups[d] as number] as Group).values.length) break;
        cur[d] = 0;
      }
    }
    return out;
  }

  /** t with each listed group fixed to its class (indicators become 0 or 1). */
  private restrict(t: TermId, groups: readonly number[], classes: readonly number[]): TermId {
    const T = this.terms[t] as Term;
    const cls = new Map<number, number>();
    groups.forEach((g, i) => cls.set(g, classes[i] as number));
    const mono = (m: number, c: Q): TermId => {
      const M = this.monos[m] as Mono;
      if (!M.ind) return this.internTerm(c, m, [], []);
      const atoms: AtomId[] = [];
      const pows: Q[] = [];
      for (let i = 0; i < M.atoms.length; i++) {
        const at = this.atoms[M.atoms[i] as number] as Atom;
        const k = at.kind === 'ind' ? cls.get(at.group) : undefined;
        if (k === undefined) {
          atoms.push(M.atoms[i] as number);
          pows.push(M.pows[i] as Q);
        } else if (k !== at.args[1]) return this.zero;
      }
      return this.internTerm(c, this.internMono(atoms, pows), [], []);
    };
    let r = mono(T.mono, T.c);
    T.fids.forEach((f, i) => {
      const P = this.polys[f] as Poly;
      const v = P.ind ? this.sum(P.monos.map((m, j) => mono(m, P.coefs[j] as Q))) : this.internTerm(Q1, this.unitMono, [f], [1]);
      const k = T.fexp[i] as number;
      if (k < 0 && v === this.zero) throw new TermUnsupportedError('a denominator vanishes for some categorical value');
      const base = k < 0 ? this.inv(v) : v;
      for (let e = 0; e < Math.abs(k); e++) r = this.mul(r, base);
    });
    return r;
  }

  /**
   * f(args) for args that depend on categorical variables: the case split
   * sum over assignments s of [s] · f(args | s), so atoms never hold indicators.
   */
  private shannon(args: readonly TermId[], f: (args: TermId[]) => TermId): TermId {
    const groups = this.groupsOfAll(args);
    return this.fromTable(groups, this.assignments(groups).map((cls) => f(args.map((a) => this.restrict(a, groups, cls)))));
  }

  /**
   * The reduced polynomial of a function of categorical variables given by its table (one
   * value per joint assignment, last group fastest). Along each variable the values
   * v_0..v_{K-1} become v_{K-1} + sum_k (v_k - v_{K-1}) [x = k]: a transform in
   * O(n · K^n), with no products of indicator sums.
   */
  private fromTable(groups: readonly number[], table: readonly TermId[]): TermId {
    const sizes = groups.map((g) => (this.groups[g] as Group).values.length);
    const vals = [...table];
    let stride = 1;
    for (let a = groups.length - 1; a >= 0; a--) {
      const K = sizes[a] as number;
      const block = stride * K;
      for (let base = 0; base < vals.length; base += block) {
        for (let off = 0; off < stride; off++) {
          const last = vals[base + off + (K - 1) * stride] as TermId;
          if (last === this.zero) continue;
          for (let k = 0; k < K - 1; k++) {
            const i = base + off + k * stride;
            vals[i] = this.sub(vals[i] as TermId, last);
          }
        }
      }
      stride = block;
    }
    const parts: TermId[] = [];
    vals.forEach((v, idx) => {
      if (v === this.zero) return;
      let mono = this.unitMono;
      let rest = idx;
      for (let a = groups.length - 1; a >= 0; a--) {
        const K = sizes[a] as number;
        const k = rest % K;
        rest = Math.floor(rest / K);
        if (k < K - 1) mono = this.monoMul(mono, this.internMono([this.internAtom('ind', (this.groups[groups[a] as number] as Group).name, [groups[a] as number, k], false, true)], [Q1]));
      }
      parts.push(this.mul(v, this.internTerm(Q1, mono, [], [])));
    });
    return this.sum(parts);
  }

  /**
   * [pred(t)] for an integer-valued t that is a function of categorical variables (an id, an
   * id minus an offset, a count of routing choices): 1 where pred holds, else 0.
   */
  test(t: TermId, pred: (v: number) => boolean): TermId {
    const groups = this.groupsOfAll([t]);
    // A 0/1 value of a real comparison (gt0), or 1 minus one: pred at 0 and at 1 decides it.
    // (Only for terms without ids and not constant: the hot integer path is untouched.)
    const b = groups.length === 0 && this.constValue(t) === undefined ? this.zeroOneAtom(t) : undefined;
    if (b !== undefined) {
      const [p, negated] = b;
      const at1 = pred(negated ? 0 : 1);
      const at0 = pred(negated ? 1 : 0);
      return at0 === at1 ? (at0 ? this.one : this.zero) : at1 ? p : this.sub(this.one, p);
    }
    const value = (x: TermId): number => {
      const c = this.constValue(x);
      if (c === undefined) throw new TermUnsupportedError(`a comparison needs an integer value, got ${this.render(x, 80)}`);
      return qToNumber(c);
    };
    if (groups.length === 0) return pred(value(t)) ? this.one : this.zero;
    return this.fromTable(groups, this.assignments(groups).map((cls) => (pred(value(this.restrict(t, groups, cls))) ? this.one : this.zero)));
  }

  /** 1 / a. Throws on the zero term. Records no condition: use div for that. */
  inv(a: TermId): TermId {
    if (a === this.zero) throw new RangeError('division by the zero term');
    const A = this.terms[a] as Term;
    const M = this.monos[A.mono] as Mono;
    // 1/e = e wherever it is defined (e = 1), so indicator atoms keep their power.
    const mono = M.ind ? this.internMono(M.atoms, M.atoms.map((at, i) => ((this.atoms[at] as Atom).kind === 'ind' ? Q1 : qMul(M.pows[i] as Q, q(-1n))))) : this.monoPow(A.mono, q(-1n));
    return this.internTerm(qDiv(Q1, A.c), mono, A.fids, A.fexp.map((k) => -k));
  }

  /** a / b, recording the side condition b ≠ 0 unless it is evident. */
  div(a: TermId, b: TermId): TermId {
    if (!this.provablyNonzero(b)) this.conditions.push(b);
    return this.mul(a, this.inv(b));
  }

  /** exp with exp(a + b) = exp(a) · exp(b) built in. */
  exp(a: TermId): TermId {
    if (a === this.zero) return this.one;
    const key = `e${a}`;
    const hit = this.memo.get(key);
    if (hit !== undefined) return hit;
    const r = this.expOf(a);
    this.memo.set(key, r);
    return r;
  }

  private expOf(a: TermId): TermId {
    if (this.groupsOfAll([a]).length > 0) return this.shannon([a], ([x]) => this.exp(x as TermId));
    const A = this.terms[a] as Term;
    if (A.fexp.some((k) => k < 0)) {
      // A genuine fraction in the exponent: an opaque positive atom.
      return this.atomTerm(this.internAtom('uf', 'exp', [a], true));
    }
    const p = this.expand(A.c, A.mono, A.fids, A.fexp);
    const atoms: AtomId[] = [];
    const pows: Q[] = [];
    for (let i = 0; i < p.monos.length; i++) {
      atoms.push(this.internAtom('exp', '', [p.monos[i] as number], true));
      pows.push(p.coefs[i] as Q);
    }
    // Atoms are new or existing ids; build the monomial by multiplication to keep it sorted.
    let mono = this.unitMono;
    atoms.forEach((at, i) => (mono = this.monoMul(mono, this.internMono([at], [pows[i] as Q]))));
    return this.internTerm(Q1, mono, [], []);
  }

  /**
   * log with log(exp(p) · R) = p + log(R) built in (docs/engine.md, "Shift invariance"): the
   * exp atoms of a's monomial leave the log as their exponents, the rest stays an
   * uninterpreted log. A sum's common part is its monomial (see `sum`), so a shift c shared by
   * every addend of Σ exp(x_j − c) comes out as −c, and nothing else does.
   */
  log(a: TermId): TermId {
    const key = `l${a}`;
    const hit = this.memo.get(key);
    if (hit !== undefined) return hit;
    const r = this.groupsOfAll([a]).length > 0 ? this.shannon([a], ([x]) => this.log(x as TermId)) : this.logOf(a);
    this.memo.set(key, r);
    return r;
  }

  private logOf(a: TermId): TermId {
    const A = this.terms[a] as Term;
    const M = this.monos[A.mono] as Mono;
    const exponents: TermId[] = [];
    const atoms: AtomId[] = [];
    const pows: Q[] = [];
    M.atoms.forEach((at, i) => {
      const x = this.atoms[at] as Atom;
      const p = M.pows[i] as Q;
      // exp(m)^p is exp(p·m): an exp atom holds a monomial, an opaque exp (fraction) a term.
      if (x.kind === 'exp') exponents.push(this.internTerm(p, x.args[0] as number, [], []));
      else if (x.kind === 'uf' && x.name === 'exp') exponents.push(this.scale(x.args[0] as TermId, p));
      else {
        atoms.push(at);
        pows.push(p);
      }
    });
    if (exponents.length === 0) return a === this.one ? this.zero : this.uf('log', [a]);
    const rest = this.internTerm(A.c, this.internMono(atoms, pows), A.fids, A.fexp);
    return this.sum([...exponents, rest === this.one ? this.zero : this.uf('log', [rest])]);
  }

  /** max, associative, commutative and idempotent. */
  max(args: readonly TermId[]): TermId {
    return this.lattice('max', args);
  }

  min(args: readonly TermId[]): TermId {
    return this.lattice('min', args);
  }

  private lattice(kind: 'max' | 'min', args: readonly TermId[]): TermId {
    if (args.length === 0) throw new RangeError(`${kind} of nothing`);
    const key = `${kind}${args.join(',')}`;
    const hit = this.memo.get(key);
    if (hit !== undefined) return hit;
    const r = this.latticeOf(kind, args);
    this.memo.set(key, r);
    return r;
  }

  private latticeOf(kind: 'max' | 'min', args: readonly TermId[]): TermId {
    if (this.groupsOfAll(args).length > 0) return this.shannon(args, (xs) => this.lattice(kind, xs));
    const flat = new Set<TermId>();
    for (const t of args) {
      const at = this.soleAtom(t);
      if (at !== undefined && (this.atoms[at] as Atom).kind === kind) for (const x of (this.atoms[at] as Atom).args) flat.add(x);
      else flat.add(t);
    }
    const list = [...flat].sort((x, y) => x - y);
    const consts = list.map((t) => this.constValue(t));
    if (consts.every((c) => c !== undefined)) {
      let best = consts[0] as Q;
      for (const c of consts) if ((kind === 'max' ? qCmp(c as Q, best) : qCmp(best, c as Q)) > 0) best = c as Q;
      return this.const(best);
    }
    if (list.length === 1) return list[0] as TermId;
    const positive = list.every((t) => this.provablyPositive(t));
    return this.atomTerm(this.internAtom(kind, '', list, kind === 'max' ? list.some((t) => this.provablyPositive(t)) : positive));
  }

  /**
   * An uninterpreted function application; `positive` declares f > 0 and `nonneg` f >= 0
   * wherever f is defined.
   */
  uf(name: string, args: readonly TermId[], positive = false, nonneg = false): TermId {
    if (this.groupsOfAll(args).length > 0) {
      const key = `u${name}|${positive ? 1 : 0}${nonneg ? 1 : 0}|${args.join(',')}`;
      const hit = this.memo.get(key);
      if (hit !== undefined) return hit;
      const r = this.shannon(args, (xs) => this.uf(name, xs, positive, nonneg));
      this.memo.set(key, r);
      return r;
    }
    return this.atomTerm(this.internAtom('uf', name, args, positive, nonneg));
  }

  private atomTerm(a: AtomId): TermId {
    return this.internTerm(Q1, this.internMono([a], [Q1]), [], []);
  }

  /** The atom when t is exactly one atom to the power 1 with coefficient 1. */
  /**
   * [a > 0] of a real a: 1 where a is positive, else 0. Folded for constants and evident
   * signs; otherwise an uninterpreted 0/1 atom of a's normal form, with a's positive constant
   * factor dropped ([c·x > 0] = [x > 0] for c > 0), so equal normal forms give the same atom.
   */
  gt0(a: TermId): TermId {
    if (this.groupsOfAll([a]).length > 0) return this.shannon([a], ([x]) => this.gt0(x as TermId));
    const c = this.constValue(a);
    if (c !== undefined) return qSign(c) > 0 ? this.one : this.zero;
    if (this.provablyPositive(a)) return this.one;
    const na = this.neg(a);
    if (this.provablyNonneg(na)) return this.zero;
    const T = this.terms[a] as Term;
    const unit = this.internTerm(qSign(T.c) > 0 ? Q1 : q(-1n), T.mono, T.fids, T.fexp);
    return this.atomTerm(this.internAtom('uf', GT0, [unit], false, true));
  }

  /** t as [p, negated] when t is a gt0 atom p (negated false) or 1 − p (true). */
  private zeroOneAtom(t: TermId): [TermId, boolean] | undefined {
    const isGt0 = (x: TermId): boolean => {
      const at = this.soleAtom(x);
      return at !== undefined && (this.atoms[at] as Atom).kind === 'uf' && (this.atoms[at] as Atom).name === GT0;
    };
    if (this.constValue(t) !== undefined) return undefined;
    if (isGt0(t)) return [t, false];
    const u = this.sub(this.one, t);
    return isGt0(u) ? [u, true] : undefined;
  }

  private soleAtom(t: TermId): AtomId | undefined {
    const T = this.terms[t] as Term;
    if (!qIsOne(T.c) || T.fids.length > 0) return undefined;
    const M = this.monos[T.mono] as Mono;
    return M.atoms.length === 1 && qIsOne(M.pows[0] as Q) ? M.atoms[0] : undefined;
  }

  // ---------------------------------------------------------------- decisions

  /** Exact identity of two terms as rational functions over independent atoms. */
  equal(a: TermId, b: TermId): boolean {
    return a === b || this.sub(a, b) === this.zero;
  }

  private monoNonneg(m: number, strict: boolean): boolean {
    const M = this.monos[m] as Mono;
    return M.atoms.every((a, i) => {
      const at = this.atoms[a] as Atom;
      if (at.positive) return true;
      if (strict) return false;
      const p = M.pows[i] as Q;
      return at.nonneg || (qIsInt(p) && p.n % 2n === 0n);
    });
  }

  private polyPositive(p: Poly): boolean {
    let strict = false;
    for (let i = 0; i < p.monos.length; i++) {
      if (qSign(p.coefs[i] as Q) <= 0) return false;
      if (!this.monoNonneg(p.monos[i] as number, false)) return false;
      if (this.monoNonneg(p.monos[i] as number, true)) strict = true;
    }
    return strict;
  }

  /** t > 0 for every value of the atoms (syntactic: positive atoms, sums of positive terms). */
  provablyPositive(t: TermId): boolean {
    const T = this.terms[t] as Term;
    if (qSign(T.c) <= 0) return false;
    if (!this.monoNonneg(T.mono, true)) return false;
    return T.fids.every((f) => this.polyPositive(this.polys[f] as Poly));
  }

  /** t >= 0 for every value of the atoms where defined (syntactic, as provablyPositive). */
  private provablyNonneg(t: TermId): boolean {
    const T = this.terms[t] as Term;
    if (qSign(T.c) <= 0) return false;
    if (!this.monoNonneg(T.mono, false)) return false;
    return T.fids.every((f) => this.polyPositive(this.polys[f] as Poly));
  }

  /** t ≠ 0 for every value of the atoms (syntactically evident). */
  provablyNonzero(t: TermId): boolean {
    const T = this.terms[t] as Term;
    if (qIsZero(T.c)) return false;
    if (!this.monoNonneg(T.mono, true)) return false;
    return T.fids.every((f) => this.polyPositive(this.polys[f] as Poly));
  }

  // ---------------------------------------------------------------- evaluation and display

  /**
   * Evaluates t with symbols from `symValue` (by symbol name) and UF atoms from `uf`, in
   * floating point. Used for witnesses and cross-checks, never for a proof.
   */
  evaluate(t: TermId, symValue: (name: string) => number, uf: UfImpl, memo = new Map<string, number>()): number {
    const T = this.terms[t] as Term;
    let v = qToNumber(T.c) * this.evalMono(T.mono, symValue, uf, memo);
    T.fids.forEach((f, i) => {
      const P = this.polys[f] as Poly;
      let s = 0;
      for (let j = 0; j < P.monos.length; j++) s += qToNumber(P.coefs[j] as Q) * this.evalMono(P.monos[j] as number, symValue, uf, memo);
      v *= s ** (T.fexp[i] as number);
    });
    return v;
  }

  private evalMono(m: number, symValue: (name: string) => number, uf: UfImpl, memo: Map<string, number>): number {
    const M = this.monos[m] as Mono;
    let v = 1;
    M.atoms.forEach((a, i) => {
      v *= this.evalAtom(a, symValue, uf, memo) ** qToNumber(M.pows[i] as Q);
    });
    return v;
  }

  private evalAtom(a: AtomId, symValue: (name: string) => number, uf: UfImpl, memo: Map<string, number>): number {
    const key = `a${a}`;
    const hit = memo.get(key);
    if (hit !== undefined) return hit;
    const A = this.atoms[a] as Atom;
    let v: number;
    switch (A.kind) {
      case 'sym':
        v = symValue(A.name);
        break;
      case 'exp':
        v = Math.exp(this.evalMono(A.args[0] as number, symValue, uf, memo));
        break;
      case 'max':
        v = A.args.reduce((m: number, x) => Math.max(m, this.evaluate(x, symValue, uf, memo)), -Infinity);
        break;
      case 'min':
        v = A.args.reduce((m: number, x) => Math.min(m, this.evaluate(x, symValue, uf, memo)), Infinity);
        break;
      case 'uf':
        v = A.name === 'exp' ? Math.exp(this.evaluate(A.args[0] as TermId, symValue, uf, memo)) : uf(A.name, A.args.map((x) => this.evaluate(x, symValue, uf, memo)));
        break;
      case 'lsum':
        v = A.args.reduce((s, x) => s + this.evaluate(x, symValue, uf, memo), 0);
        break;
      case 'ind': {
        const G = this.groups[A.args[0] as number] as Group;
        const x = G.choice === undefined ? symValue(G.name) : uf(G.choice.key, G.choice.args.map((y) => this.evaluate(y, symValue, uf, memo)));
        v = x === G.values[A.args[1] as number] ? 1 : 0;
        break;
      }
    }
    memo.set(key, v);
    return v;
  }

  /**
   * A readable rendering (for residuals in reports): the first `budget` characters of the
   * term's text, then "...". The text is written left to right and generation stops past the
   * cap, and all nested renderings share one work allowance: a term whose full text is huge
   * (deeply shared sums of sums) costs its cap, not its full size (an in-thread proof spent
   * minutes rendering a residual it then cut to 300 characters).
   */
  render(t: TermId, budget = 400): string {
    return this.renderCapped(t, budget, { left: RENDER_WORK });
  }

  private renderCapped(t: TermId, cap: number, work: { left: number }): string {
    const out = new RenderOut(cap, work);
    const T = this.terms[t] as Term;
    const c = T.c;
    const hasMono = (this.monos[T.mono] as Mono).atoms.length > 0;
    let first = true;
    const sep = (): void => {
      if (!first) out.add('*');
      first = false;
    };
    if (!qIsOne(c) || !hasMono) {
      // A bare minus sign joins its monomial without '*': "-x*y", not "-*x*y".
      if (qEq(c, q(-1n)) && hasMono) out.add('-');
      else {
        sep();
        out.add(qKey(c));
      }
    }
    if (hasMono) {
      sep();
      this.monoInto(out, T.mono);
    }
    T.fids.forEach((f, i) => {
      if (out.full) return;
      const P = this.polys[f] as Poly;
      sep();
      out.add('(');
      for (let j = 0; j < P.monos.length && !out.full; j++) {
        if (j > 0) out.add(' + ');
        out.add(qKey(P.coefs[j] as Q));
        const mm = P.monos[j] as number;
        if ((this.monos[mm] as Mono).atoms.length > 0) {
          out.add('*');
          this.monoInto(out, mm);
        }
      }
      out.add(')');
      const k = T.fexp[i] as number;
      if (k !== 1) out.add(`^${k}`);
    });
    const s = out.text;
    return s.length > cap ? `${s.slice(0, cap)}...` : s;
  }

  private monoInto(out: RenderOut, m: number): void {
    const M = this.monos[m] as Mono;
    for (let i = 0; i < M.atoms.length && !out.full; i++) {
      if (i > 0) out.add('*');
      this.atomInto(out, M.atoms[i] as AtomId);
      const p = M.pows[i] as Q;
      if (!qIsOne(p)) out.add(`^${qKey(p)}`);
    }
  }

  private atomInto(out: RenderOut, a: AtomId): void {
    const A = this.atoms[a] as Atom;
    const args = (open: string, sepr: string): void => {
      out.add(open);
      A.args.forEach((x, i) => {
        if (out.full) return;
        if (i > 0) out.add(sepr);
        out.add(this.renderCapped(x, 60, out.work));
      });
      out.add(')');
    };
    switch (A.kind) {
      case 'sym':
        out.add(A.name);
        return;
      case 'exp':
        out.add('exp(');
        if ((this.monos[A.args[0] as number] as Mono).atoms.length === 0) out.add('1');
        else this.monoInto(out, A.args[0] as number);
        out.add(')');
        return;
      case 'max':
      case 'min':
        args(`${A.kind}(`, ', ');
        return;
      case 'uf':
        args(`${A.name}(`, ', ');
        return;
      case 'lsum':
        args('(', ' + ');
        return;
      case 'ind': {
        const G = this.groups[A.args[0] as number] as Group;
        out.add(`[${G.name}=${G.values[A.args[1] as number]}]`);
        return;
      }
    }
  }

}

/** Hash-consing: the id of `key` in `index`, appending `make()` to `list` when it is new. */
function intern<T>(index: Map<string, number>, list: T[], key: string, make: () => T): number {
  let id = index.get(key);
  if (id === undefined) {
    id = list.length;
    list.push(make());
    index.set(key, id);
  }
  return id;
}

function sameFactors(a: Term, b: Term): boolean {
  return a.fids.length === b.fids.length && a.fids.every((f, i) => f === b.fids[i] && a.fexp[i] === b.fexp[i]);
}

function sortFactors(fids: number[], fexp: number[]): [number[], number[]] {
  const idx = fids.map((_, i) => i).sort((x, y) => (fids[x] as number) - (fids[y] as number));
  return [idx.map((i) => fids[i] as number), idx.map((i) => fexp[i] as number)];
}

function qParseStr(s: string): Q {
  const m = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(s);
  if (m === null) throw new RangeError(`'${s}' is not a rational`);
  return q(BigInt(m[1] as string), BigInt(m[2] ?? '1'));
}

