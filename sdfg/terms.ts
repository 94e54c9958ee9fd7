/**
 * Exact real-valued terms in a normal form, hash-consed in a TermStore: what the atoms mean.
 * The field part (interning, sums, products, division, equality, evident signs) is TermCore
 * (sdfg/term-core.ts); a term is  c · M · Π f_i^k_i  there, M a Laurent monomial over atoms.
 *
 * Atoms and their built-in facts:
 *  - exp: positive atoms may carry any rational power, so exp(a + b) = exp(a) · exp(b) and
 *    exp(c·m) = exp(m)^c hold by construction: exp of a polynomial is a monomial of exp atoms;
 *  - log: log(exp(p) · R) = p + log(R), so the exp atoms of its argument leave it (shift
 *    invariance of softmax and log-sum-exp, docs/engine.md); the rest is uninterpreted;
 *  - max and min are associative, commutative and idempotent (arguments flattened, sorted and
 *    deduplicated), and an argument provably below another leaves a max (above: a min), by
 *    max(S) ≥ s ≥ min(S) for s in S (`dropDominated`);
 *  - uninterpreted functions (tanh, sigmoid, ...), [x > 0] atoms, and categorical variables
 *    (ids, routing choices) as indicator atoms; a function of an id-dependent argument is
 *    split by cases, so atoms never hold indicators.
 *
 * Atoms are otherwise treated as independent, which is sound for "equal" (an identity that
 * holds for every interpretation of the uninterpreted functions, and the facts above, which
 * hold for the real ones); "different" may still be equal for the real functions, so a
 * difference is never a refutation by itself (see the engine's use of numeric witnesses).
 */
import { type Q, Q1, q, qAdd, qCmp, qEq, qFromNumber, qIsOne, qKey, qMul, qSign, qToNumber } from '../ops/rational.js';
import { type Atom, type AtomId, type Mono, type Poly, type Term, type TermId, TermCore } from './term-core.js';
import { type Blocks, type Split, jointCount, mentionedBlocks, mergeByKey, representatives } from './value-classes.js';

export { DEFAULT_TERM_BUDGET, TermBudgetError, TermStopError, type TermId } from './term-core.js';

/** The uf name of [x > 0] (TermStore.gt0). */
export const GT0 = 'gt0';

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

/** Shannon expansions and tests enumerate at most this many joint value classes. */
const MAX_ASSIGNMENTS = 4096;

/** Pairs of max/min arguments compared per max or min (TermStore.dropDominated). */
const MAX_ORDER_PAIRS = 256;

/** Replacements of a max/min atom by an argument per comparison (TermStore.nonnegByOrder). */
const ORDER_STEPS = 16;

/** Real functions for evaluating UF atoms (witnesses, debugging). */
type UfImpl = (name: string, args: number[]) => number;

/** Thrown when a term needs a rule the normal form does not have (reported as "unknown"). */
export class TermUnsupportedError extends Error {}

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

export class TermStore extends TermCore {
  private readonly groups: Group[] = [];
  private readonly choiceIndex = new Map<string, number>();

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

  /** Per categorical group occurring in ts, the value indices of its indicator atoms there. */
  private mentioned(ts: readonly TermId[]): Map<number, Set<number>> {
    const into = new Map<number, Set<number>>();
    const scan = (m: number): void => {
      const M = this.monos[m] as Mono;
      if (!M.ind) return;
      for (const a of M.atoms) {
        const at = this.atoms[a] as Atom;
        if (at.kind !== 'ind') continue;
        let s = into.get(at.group);
        if (s === undefined) into.set(at.group, (s = new Set()));
        s.add(at.args[1] as number);
      }
    };
    for (const t of ts) {
      const T = this.terms[t] as Term;
      scan(T.mono);
      for (const f of T.fids) {
        const P = this.polys[f] as Poly;
        if (P.ind) for (const m of P.monos) scan(m);
      }
    }
    return into;
  }

  /**
   * The case split of `ts` over their categorical variables, by value classes (docs/engine.md,
   * "Value classes"): per variable, the values whose indicator `ts` mention each alone and all
   * others with the last value; past `refineClassesAbove` joint classes, mentioned values whose
   * restrictions of every t are the same terms merged too. Bounded by MAX_ASSIGNMENTS classes.
   */
  private split(ts: readonly TermId[]): Split {
    const byGroup = this.mentioned(ts);
    const groups = [...byGroup.keys()].sort((a, b) => a - b);
    const size = (g: number): number => (this.groups[g] as Group).values.length;
    let blocks: Blocks[] = groups.map((g) => mentionedBlocks(size(g), byGroup.get(g) as Set<number>));
    if (jointCount(blocks) > this.refineClassesAbove) {
      // One restriction per mentioned value and variable: a sum over the variables where the
      // enumeration is a product.
      blocks = blocks.map((b, i) => (b.length < 2 ? b : mergeByKey(b, (block) => ts.map((t) => this.restrict(t, [groups[i] as number], [block[block.length - 1] as number])).join(','))));
    }
    const n = jointCount(blocks);
    if (n > MAX_ASSIGNMENTS) {
      let full = 1;
      for (const g of groups) full *= size(g);
      throw new TermUnsupportedError(`a value depends on ${groups.length} categorical variables with ${full} joint values (${n} classes of them told apart, more than ${MAX_ASSIGNMENTS})`);
    }
    this.charge(n);
    return { groups, blocks };
  }

  /**
   * Past this many joint classes of the mentioned values, a split also merges mentioned values
   * that restrict every term alike (costs one restriction per value; tests set 0 to exercise it).
   */
  refineClassesAbove = MAX_ASSIGNMENTS;

  /** The number of cases a split of `ts` enumerates (its joint value classes). */
  caseCount(ts: readonly TermId[]): number {
    return this.groupsOfAll(ts).length === 0 ? 1 : jointCount(this.split(ts).blocks);
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
   * sum over joint value classes s of [s] · f(args | s), so atoms never hold indicators. Every
   * value of a class restricts each argument to the same term (`split`), so f at the class's
   * representative is f at each of its values.
   */
  private shannon(args: readonly TermId[], f: (args: TermId[]) => TermId): TermId {
    const sp = this.split(args);
    return this.fromTable(sp, representatives(sp).map((cls) => f(args.map((a) => this.restrict(a, sp.groups, cls)))));
  }

  /**
   * The reduced polynomial of a function of categorical variables given by its table (one
   * value per joint value class of `split`, last group fastest). Along each variable with
   * classes C_0..C_{m-1} (C_{m-1} holding the last value) the values v_0..v_{m-1} become
   * v_{m-1} + sum_k (v_k - v_{m-1}) · sum_{j in C_k} [x = j]: the polynomial the table over every
   * value would give (equal values along a class), in O(n · m^n).
   */
  private fromTable(split: Split, table: readonly TermId[]): TermId {
    const { groups, blocks } = split;
    const sizes = blocks.map((b) => b.length);
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
      // Classes of several values (merged by restriction) multiply in as sums of indicators.
      const sums: TermId[] = [];
      let rest = idx;
      for (let a = groups.length - 1; a >= 0; a--) {
        const K = sizes[a] as number;
        const k = rest % K;
        rest = Math.floor(rest / K);
        if (k === K - 1) continue;
        const g = groups[a] as number;
        const cls = (blocks[a] as Blocks)[k] as readonly number[];
        if (cls.length === 1) mono = this.monoMul(mono, this.internMono([this.internAtom('ind', (this.groups[g] as Group).name, [g, cls[0] as number], false, true)], [Q1]));
        else sums.push(this.sum(cls.map((j) => this.indicator(g, j))));
      }
      let p = this.mul(v, this.internTerm(Q1, mono, [], []));
      for (const x of sums) p = this.mul(p, x);
      parts.push(p);
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
    const tab = this.constTable(t);
    if (tab === undefined) {
      const sp = this.split([t]);
      return this.fromTable(sp, representatives(sp).map((cls) => (pred(value(this.restrict(t, sp.groups, cls))) ? this.one : this.zero)));
    }
    return this.fromTable(tab.split, tab.vals.map((v) => (pred(qToNumber(v)) ? this.one : this.zero)));
  }

  /**
   * t's exact value at each joint value class of its split (last group fastest), or undefined
   * when some class leaves a non-constant. The same as restricting t per
   * assignment, but memoized up to an added constant: a lookup tests one id against every row
   * of its table, a one-hot compares every column index j with it (gt0(j − id), gt0(id − j)),
   * and restricting the id is the dear part (Megatron's vocab-parallel target over 2,048 joint
   * values, tested 17 times per token and compared 32 times per row, took most of a stage's
   * time and went past the work budget). t = c + rest with c a rational constant, exactly.
   */
  private constTable(t: TermId): { split: Split; vals: Q[] } | undefined {
    const T = this.terms[t] as Term;
    let c: Q | undefined;
    if (T.mono === this.unitMono && T.fids.length === 1 && T.fexp[0] === 1) {
      const P = this.polys[T.fids[0] as number] as Poly;
      const i = P.monos.indexOf(this.unitMono);
      if (i >= 0) c = qMul(T.c, P.coefs[i] as Q);
    }
    const rest = c === undefined ? t : this.sub(t, this.const(c));
    // rest has t's indicator atoms (only the unit monomial left), so t's split is rest's.
    let tab = this.valueTables.get(rest);
    if (tab === undefined) {
      const split = this.split([rest]);
      const vals: Q[] = [];
      for (const cls of representatives(split)) {
        const v = this.constValue(this.restrict(rest, split.groups, cls));
        if (v === undefined) break;
        vals.push(v);
      }
      tab = vals.length === jointCount(split.blocks) ? { split, vals } : null;
      this.valueTables.set(rest, tab);
    }
    if (tab === null) return undefined;
    return c === undefined ? tab : { split: tab.split, vals: tab.vals.map((v) => qAdd(v, c)) };
  }

  /** `constTable`'s memo, by term without its constant (null: not constant at some class). */
  private readonly valueTables = new Map<TermId, { split: Split; vals: Q[] } | null>();

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
    let list = [...flat].sort((x, y) => x - y);
    const consts = list.map((t) => this.constValue(t));
    if (consts.every((c) => c !== undefined)) {
      let best = consts[0] as Q;
      for (const c of consts) if ((kind === 'max' ? qCmp(c as Q, best) : qCmp(best, c as Q)) > 0) best = c as Q;
      return this.const(best);
    }
    if (list.length > 1) list = this.dropDominated(kind, list);
    if (list.length === 1) return list[0] as TermId;
    const positive = list.every((t) => this.provablyPositive(t));
    return this.atomTerm(this.internAtom(kind, '', list, kind === 'max' ? list.some((t) => this.provablyPositive(t)) : positive));
  }

  /**
   * The arguments of a max (min) without those provably below (above) another argument that
   * stays: max(y, z) = z where z − y ≥ 0 wherever both are defined (docs/engine.md, "Order
   * of max and min arguments"). Vocab-parallel cross-entropy needs it: a rank's shifted target
   * logit x_t − max_j x_j is ≤ 0, so min-all-reducing it with the other ranks' zeros is the
   * same as sum-all-reducing (min(0, x_t − max(…, x_t, …)) = x_t − max(…)). Only pairs where
   * one side is a constant or mentions a max/min atom are tried (a plain max over a row of
   * logits costs nothing), at most MAX_ORDER_PAIRS of them. Greedy: an argument is dropped
   * only for one not dropped before, so each dropped one is below a kept one (through a chain)
   * and the result is the max of the same set.
   */
  private dropDominated(kind: 'max' | 'min', list: readonly TermId[]): TermId[] {
    const tried = list.map((t) => this.constValue(t) !== undefined || this.mentionsLattice(t));
    if (!tried.some((x) => x)) return [...list];
    const dropped = new Set<number>();
    let pairs = 0;
    for (let i = 0; i < list.length; i++) {
      for (let j = 0; j < list.length && pairs < MAX_ORDER_PAIRS; j++) {
        if (i === j || dropped.has(j) || !(tried[i] || tried[j])) continue;
        pairs++;
        // max: drop list[i] when list[j] − list[i] ≥ 0; min: when list[i] − list[j] ≥ 0.
        const y = list[i] as TermId;
        const z = list[j] as TermId;
        if (this.nonnegByOrder(kind === 'max' ? this.sub(z, y) : this.sub(y, z), { left: ORDER_STEPS })) {
          dropped.add(i);
          break;
        }
      }
    }
    return list.filter((_, i) => !dropped.has(i));
  }

  /** A max or min atom occurs in t's monomial or in one of its factors' monomials. */
  private mentionsLattice(t: TermId): boolean {
    const T = this.terms[t] as Term;
    const inMono = (m: number): boolean => (this.monos[m] as Mono).atoms.some((a) => {
      const k = (this.atoms[a] as Atom).kind;
      return k === 'max' || k === 'min';
    });
    return inMono(T.mono) || T.fids.some((f) => (this.polys[f] as Poly).monos.some(inMono));
  }

  /**
   * d ≥ 0 wherever defined, by the order facts of max and min: a max atom with a positive
   * coefficient k (a monomial k · max(S), power 1) is at least k · y for each y in S, a min
   * atom with a negative coefficient likewise, so d ≥ 0 follows from d with that atom
   * replaced by one of its arguments being ≥ 0 (recursively, `steps.left` replacements in
   * all); the base case is a nonnegative constant or an evidently nonnegative term. Sound: each
   * step lowers d (or keeps it), and max(S) ≥ y for y in S holds for the real max.
   */
  private nonnegByOrder(d: TermId, steps: { left: number }): boolean {
    if (d === this.zero) return true;
    const c = this.constValue(d);
    if (c !== undefined) return qSign(c) >= 0;
    if (this.provablyNonneg(d)) return true;
    const D = this.terms[d] as Term;
    if (D.fexp.some((k) => k < 0) || !this.mentionsLattice(d)) return false;
    const p = this.expand(D.c, D.mono, D.fids, D.fexp);
    for (let i = 0; i < p.monos.length; i++) {
      const M = this.monos[p.monos[i] as number] as Mono;
      if (M.atoms.length !== 1 || !qIsOne(M.pows[0] as Q)) continue;
      const at = this.atoms[M.atoms[0] as number] as Atom;
      const k = p.coefs[i] as Q;
      if (!((at.kind === 'max' && qSign(k) > 0) || (at.kind === 'min' && qSign(k) < 0))) continue;
      const rest = this.sub(d, this.internTerm(k, p.monos[i] as number, [], []));
      for (const y of at.args) {
        if (steps.left-- <= 0) return false;
        if (this.nonnegByOrder(this.add(rest, this.scale(y, k)), steps)) return true;
      }
    }
    return false;
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

  /**
   * [a > 0] of a real a: 1 where a is positive, else 0. Folded for constants and evident
   * signs; otherwise an uninterpreted 0/1 atom of a's normal form, with a's positive constant
   * factor dropped ([c·x > 0] = [x > 0] for c > 0), so equal normal forms give the same atom.
   */
  gt0(a: TermId): TermId {
    const groups = this.groupsOfAll([a]);
    if (groups.length > 0) {
      // An integer-valued a (an id against a column index): its table of values, shared with
      // every other term that differs from it by a constant; otherwise the case split.
      const tab = this.constTable(a);
      if (tab !== undefined) return this.fromTable(tab.split, tab.vals.map((v) => (qSign(v) > 0 ? this.one : this.zero)));
      return this.shannon([a], ([x]) => this.gt0(x as TermId));
    }
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
