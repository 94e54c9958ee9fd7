/**
 * Certified witnesses: both graphs evaluated in interval arithmetic on the numeric run's
 * random inputs. Every interval encloses the exact real value the op computes at those inputs
 * (outward rounding of every Float64 operation), so a user claim whose parallel interval and
 * logical interval are disjoint is false at that input, in exact arithmetic: the plan is not
 * equivalent, with a concrete input as the witness, whatever the size of the stage (no normal
 * form is built). An interval that cannot be decided (a division by an interval holding 0, a
 * routing choice between overlapping scores, an id test on an interval holding an integer that is
 * not a single point, NaN) makes the evaluation give up, and a value outside a real function's
 * domain (or possibly so) is NaN, which is never disjoint from anything: nothing is certified,
 * never the opposite answer. A parallel op certainly outside its domain (an index that is no
 * integer of its table: PyTorch raises) while every logical op is within its own is a
 * certified difference too (`Certified.domain`).
 *
 * Assumption (docs/engine.md, "Certified witnesses"): + - * / and sqrt are IEEE-754 correctly
 * rounded (ECMAScript requires it), so one ulp outward encloses the exact result; exp, log,
 * tanh and the erf of realFunctions are within 1e-12 relative (plus 1e-300 absolute) of the
 * exact value (V8's are within 1 ulp; the erf here within 1e-15), so that much outward
 * encloses them.
 */
import type { Algebra, Dense, RealFn } from '../../ops/algebra.js';
import { realFunctions } from '../../ops/algebra.js';
import { numel } from '../../ops/types.js';
import { qParse } from '../../ops/rational.js';
import { executeLogical, executeParallel, logicalIndexer, type LogicalValues, type ParallelHooks, type RankValues } from '../../sdfg/execute.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { evalLineage, groupKey, type LineageNF } from '../../lineage/model.js';
import { mulberry32, type Mismatch } from '../witness/numeric.js';
import { drawInputs, neededDomains, signedAddend } from '../witness/domains.js';

/** A closed interval [lo, hi] holding one exact real value. */
export interface Iv {
  readonly lo: number;
  readonly hi: number;
}

/** Thrown when an interval cannot decide a choice the op must make. */
export class Undecided extends Error {}

const buf = new DataView(new ArrayBuffer(8));
function nextUp(x: number): number {
  if (Number.isNaN(x) || x === Infinity) return x;
  if (x === 0) return Number.MIN_VALUE;
  buf.setFloat64(0, x);
  const b = buf.getBigInt64(0);
  buf.setBigInt64(0, x > 0 ? b + 1n : b - 1n);
  return buf.getFloat64(0);
}
const nextDown = (x: number): number => -nextUp(-x);

const pt = (x: number): Iv => ({ lo: x, hi: x });
const ZERO: Iv = pt(0);

/**
 * Two operands that are one interval object hold one exact value. An object is made by the op
 * that computed the value and is only passed along by reference where the value is passed
 * along unchanged (views, copies, the input a `winner` returns), never reused for another value;
 * the shared NaN is excluded (it stands for no value). `mul` reads x * x so already.
 */
const sameValue = (a: Iv, b: Iv): boolean => a === b && a.lo <= a.hi;

/**
 * The input that is certainly the max (sign 1) or min (-1) of `xs`, as that very object: its
 * exact value is at least every other's (lo >= the others' hi), so it is the exact max, and
 * keeping its object lets a later comparison with it (max pooling's backward: `x >= max(x, ..)`)
 * see one value instead of an interval difference around 0. Undefined when none is certain.
 */
function winner(xs: readonly Iv[], sign: 1 | -1): Iv | undefined {
  for (const x of xs) {
    if (!(x.lo <= x.hi)) return undefined;
    const lo = sign === 1 ? x.lo : -x.hi;
    if (xs.every((y) => y === x || lo >= (sign === 1 ? y.hi : -y.lo))) return x;
  }
  return undefined;
}
/**
 * Not enclosed: an op outside its domain at some point of the interval (a division by an
 * interval holding 0, a square root reaching below 0). NaN compares false with everything, so
 * nothing computed from it is ever disjoint from anything.
 */
const NAN: Iv = { lo: Number.NaN, hi: Number.NaN };
/** [lo, hi] one ulp outward: encloses a correctly rounded result. */
const out1 = (lo: number, hi: number): Iv => ({ lo: nextDown(lo), hi: nextUp(hi) });
/** Outward by the assumed libm error. */
const LIBM_REL = 1e-12;
const LIBM_ABS = 1e-300;
const outLibm = (lo: number, hi: number): Iv => ({ lo: nextDown(lo - Math.abs(lo) * LIBM_REL - LIBM_ABS), hi: nextUp(hi + Math.abs(hi) * LIBM_REL + LIBM_ABS) });

/** a + b is exact in Float64 (TwoSum's error term is 0). */
function exactSum(a: number, b: number, s: number): boolean {
  if (!Number.isFinite(s)) return false;
  const bb = s - a;
  return a - (s - bb) + (b - bb) === 0;
}

function add(a: Iv, b: Iv): Iv {
  const lo = a.lo + b.lo;
  const hi = a.hi + b.hi;
  return { lo: exactSum(a.lo, b.lo, lo) ? lo : nextDown(lo), hi: exactSum(a.hi, b.hi, hi) ? hi : nextUp(hi) };
}
const neg = (a: Iv): Iv => ({ lo: -a.hi, hi: -a.lo });

function mul(a: Iv, b: Iv): Iv {
  // x * x of one value is a square (never below 0), whatever the interval's width.
  if (a === b && a.lo !== a.hi) {
    const l2 = a.lo * a.lo;
    const h2 = a.hi * a.hi;
    if (a.lo <= 0 && a.hi >= 0) return { lo: 0, hi: nextUp(Math.max(l2, h2)) };
    return out1(Math.min(l2, h2), Math.max(l2, h2));
  }
  if (a.lo === a.hi && b.lo === b.hi) {
    const p = a.lo * b.lo;
    // Products of integers below 2^53 are exact, and so are products with 0 or +-1.
    if ((Number.isSafeInteger(a.lo) && Number.isSafeInteger(b.lo) && Number.isSafeInteger(p)) || a.lo === 0 || b.lo === 0 || Math.abs(a.lo) === 1 || Math.abs(b.lo) === 1) return pt(p);
    return out1(p, p);
  }
  const ps = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi].map((x) => (Number.isNaN(x) ? 0 : x));
  // 0 * inf is 0 for an interval endpoint that is exactly 0.
  return out1(Math.min(...ps), Math.max(...ps));
}

function div(a: Iv, b: Iv): Iv {
  if (b.lo <= 0 && b.hi >= 0) return NAN;
  if (b.lo === 1 && b.hi === 1) return a;
  const qs = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi];
  return out1(Math.min(...qs), Math.max(...qs));
}

const inc = (f: (x: number) => number) => (a: Iv): Iv => outLibm(f(a.lo), f(a.hi));

function fn(name: RealFn, a: Iv): Iv {
  const f = realFunctions[name];
  switch (name) {
    case 'tanh':
    case 'sigmoid':
      return inc(f)(a);
    case 'Phi': {
      // 0.5 (1 + erf(x / sqrt 2)): erf's absolute error carries over near 0 and 1.
      const r = inc(f)(a);
      return { lo: Math.max(0, nextDown(r.lo - 1e-14)), hi: Math.min(1, nextUp(r.hi + 1e-14)) };
    }
    case 'log':
      if (a.lo <= 0) return NAN;
      return inc(f)(a);
    case 'sqrt':
      if (a.lo < 0) return NAN;
      return out1(Math.sqrt(a.lo), Math.sqrt(a.hi));
    case 'rsqrt':
      if (a.lo <= 0) return NAN;
      return outLibm(f(a.hi), f(a.lo));
    case 'phi': {
      // Largest at 0, falling with |x|.
      const far = Math.max(Math.abs(a.lo), Math.abs(a.hi));
      const near = a.lo <= 0 && a.hi >= 0 ? 0 : Math.min(Math.abs(a.lo), Math.abs(a.hi));
      return outLibm(f(far), f(near));
    }
    case 'sqrt_2_over_pi':
      return outLibm(f(0), f(0));
  }
}

/**
 * pred at the exact value a encloses (Algebra.test). A point is decided by pred itself. An
 * interval strictly between two consecutive integers is decided too: every predicate ops pass
 * to `test` is a step function whose steps sit at integers (the contract stated on
 * Algebra.test: equality with an integer, comparisons with integer bounds, Number.isInteger),
 * so it takes one value on all of (k, k + 1). That is checked where it can be: pred is
 * evaluated at both ends and at the midpoint, and values that are not all equal (a predicate
 * breaking the contract) give up. An interval holding an integer (or NaN, or unbounded) is
 * undecided.
 */
export function decideTest(a: Iv, pred: (v: number) => boolean): boolean {
  if (a.lo === a.hi) return pred(a.lo);
  const k = Math.floor(a.lo);
  if (Number.isFinite(a.lo) && Number.isFinite(a.hi) && a.lo > k && a.hi < k + 1) {
    const at = [pred(a.lo), pred((a.lo + a.hi) / 2), pred(a.hi)];
    if (at[0] === at[1] && at[1] === at[2]) return at[0] as boolean;
    throw new Undecided(`a test whose predicate is not constant between the integers ${k} and ${k + 1} (it must step at integers only: ops/algebra.ts, Algebra.test)`);
  }
  throw new Undecided('a test on a value that is not a single point and whose interval holds an integer');
}

/** NaN endpoints: the value is undefined or not enclosed; nothing depending on it is certified. */
function check(a: Iv): Iv {
  return Number.isNaN(a.lo) || Number.isNaN(a.hi) ? NAN : a;
}

/** The interval algebra (op rules run on it unchanged). */
export const intervalAlgebra: Algebra<Iv> = {
  exact: false,
  zero: pt(0),
  one: pt(1),
  constant: (v) => {
    if (typeof v === 'number') return pt(v);
    const r = qParse(v);
    const n = Number(r.n);
    const d = Number(r.d);
    if (Number.isSafeInteger(n) && d === 1) return pt(n);
    // n / d of safe integers is one correctly rounded division; past 2^53 the conversions round too.
    if (Number.isSafeInteger(n) && Number.isSafeInteger(d)) return out1(n / d, n / d);
    return outLibm(n / d, n / d);
  },
  add: (a, b) => check(add(a, b)),
  // One object is one exact value (see `sameValue`): x - x is exactly 0, however wide x is.
  sub: (a, b) => (sameValue(a, b) ? ZERO : check(add(a, neg(b)))),
  mul: (a, b) => check(mul(a, b)),
  div: (a, b) => check(div(a, b)),
  neg,
  sum: (xs) => check(xs.reduce(add, pt(0))),
  exp: (a) => check(inc(Math.exp)(a)),
  max: (xs) => winner(xs, 1) ?? check({ lo: xs.reduce((m, x) => Math.max(m, x.lo), -Infinity), hi: xs.reduce((m, x) => Math.max(m, x.hi), -Infinity) }),
  min: (xs) => winner(xs, -1) ?? check({ lo: xs.reduce((m, x) => Math.min(m, x.lo), Infinity), hi: xs.reduce((m, x) => Math.min(m, x.hi), Infinity) }),
  fn: (name, a) => check(fn(name, a)),
  test: (a, pred) => (decideTest(a, pred) ? pt(1) : pt(0)),
  gt0: (a) => {
    if (a.lo > 0) return pt(1);
    if (a.hi <= 0) return pt(0);
    throw new Undecided('a comparison of a value whose interval holds 0');
  },
  known: (a) => (a.lo === a.hi ? a.lo : undefined),
  topk: (xs, k) => {
    // The order must be decided: each chosen value strictly above the next one, and the last
    // chosen strictly above every other (equal points keep torch's lower-index-first order).
    const order = xs.map((x, i) => [x, i] as const).sort((p, q) => q[0].lo + q[0].hi - (p[0].lo + p[0].hi) || p[1] - q[1]);
    const above = (p: readonly [Iv, number], q: readonly [Iv, number]): boolean => p[0].lo > q[0].hi || (p[0].lo === p[0].hi && q[0].lo === q[0].hi && p[0].lo === q[0].lo && p[1] < q[1]);
    for (let j = 0; j < k; j++) {
      for (let m = j + 1; m < order.length; m++) if (!above(order[j] as readonly [Iv, number], order[m] as readonly [Iv, number])) throw new Undecided('a routing choice between overlapping scores');
    }
    return order.slice(0, k).map(([, i]) => pt(i));
  },
  require: (cond) => {
    if (!(cond.lo === 1 && cond.hi === 1)) throw new Undecided('an op outside its domain');
  },
};

/** A claim shown false at a concrete input, in exact arithmetic. */
export interface Certified {
  readonly seed: number;
  readonly rank: number;
  readonly tensor: string;
  /** Row-major element index in the logical tensor. */
  readonly element: number;
  readonly kind: 'complete' | 'partial' | 'replica';
  /** For `domain`: the requirement's value, the point 0 (the exact engine's requirement pair). */
  readonly parallel: Iv;
  /** For `domain`: 1, what the requirement must be. */
  readonly logical: Iv;
  /**
   * Set when the claim fails because an op it is computed from is outside its domain on rank
   * `domain.rank` at these inputs (a requirement certainly violated: PyTorch raises there), while
   * every requirement of the logical graph certainly holds: the rank does not compute the
   * claimed tensor where the model computes it. `value` encloses the logical element.
   */
  readonly domain?: DomainViolation;
}

/** A parallel op certainly outside its domain at the witness inputs. */
export interface DomainViolation {
  readonly rank: number;
  /** The op's name in its program. */
  readonly op: string;
  /** What is wrong: the requirement the op declared (Algebra.require) and "does not hold", or the op's own words. */
  readonly what: string;
  /** The value the requirement tested (an index, a label), when known. */
  readonly tested?: Iv;
  /** The logical element the claim is about. */
  readonly value: Iv;
}

export type CertifyResult = { certified: Certified } | { undecided: string };

/**
 * A certified witness as a numeric mismatch of logical tensor `logical` (its coordinates, the
 * midpoints of the two enclosures as its values, the enclosures themselves), `order` its
 * topological position.
 */
export function certifiedMismatch(plan: LoadedPlan, logical: number, w: Certified, order: number): Mismatch {
  const shape = plan.logical.shapes[logical] ?? [];
  const element = shape.map((_, d) => Math.floor(w.element / shape.slice(d + 1).reduce((x, y) => x * y, 1)) % (shape[d] as number));
  const mid = (x: Iv): number => (x.lo + x.hi) / 2;
  // The rank raises: it holds no value (NaN), the logical element is what it should hold.
  if (w.domain !== undefined) return { logical: plan.logical.tensors.name(logical), element, rank: w.rank, tensor: w.tensor, kind: w.kind, parallel: Number.NaN, expected: mid(w.domain.value), order, domain: domainText(w.domain) };
  return { logical: plan.logical.tensors.name(logical), element, rank: w.rank, tensor: w.tensor, kind: w.kind, parallel: mid(w.parallel), expected: mid(w.logical), order, certified: { parallel: [w.parallel.lo, w.parallel.hi], logical: [w.logical.lo, w.logical.hi] } };
}

const ivText = (x: Iv): string => (x.lo === x.hi ? String(x.lo) : `[${x.lo.toPrecision(17)}, ${x.hi.toPrecision(17)}]`);

/** What is wrong when a parallel op is outside its domain, in words. */
function domainText(d: DomainViolation): string {
  const tested = d.tested === undefined ? '' : `; the value it tests ${d.tested.lo === d.tested.hi ? `is ${d.tested.lo}` : `lies in ${ivText(d.tested)}, strictly between two integers, so it is no integer`}`;
  return `rank ${d.rank} op '${d.op}' is outside its domain at these inputs (${d.what}${tested}): PyTorch raises there, while every op of the logical graph is within its domain`;
}

/** The claim a domain violation refutes, in words. */
export function domainClaimText(logicalName: string, w: Certified & { domain: DomainViolation }): string {
  return `${domainText(w.domain)}; rank ${w.rank} '${w.tensor}' is computed from that op, so it does not hold logical ${logicalName} (element ${w.element} in ${ivText(w.domain.value)})`;
}

/** A certified witness as a stage's reason: the two disjoint enclosures, in words. */
export function certifiedReason(logicalName: string, w: Certified): string {
  if (w.domain !== undefined) return `certified witness (interval arithmetic at seed ${w.seed}, no normal form): ${domainClaimText(logicalName, { ...w, domain: w.domain })}: the claim is false at these inputs in exact arithmetic`;
  const iv = (x: Iv): string => `[${x.lo.toPrecision(10)}, ${x.hi.toPrecision(10)}]`;
  const what = w.kind === 'replica' ? `another copy of the same addend in ${iv(w.logical)}` : `logical ${logicalName} element ${w.element} in ${iv(w.logical)}`;
  return `certified witness (interval arithmetic at seed ${w.seed}, no normal form): rank ${w.rank} '${w.tensor}'${w.kind === 'partial' ? ' (its addends combined)' : ''} lies in ${iv(w.parallel)}, ${what}: disjoint, so the claim is false at these inputs in exact arithmetic`;
}

/**
 * Evaluates both graphs in intervals on the inputs `numericCheck` draws at `seed` (the same
 * random stream), and looks, tensor by tensor in the order given, for a claim of a logical
 * tensor among `tensors` (and among those `claims` accepts) whose parallel interval is disjoint
 * from the logical one, or that is computed from a parallel op certainly outside its domain
 * (`Certified.domain`: every requirement of the logical graph certainly holds, or nothing is
 * certified).
 */
export function certifyWitness(plan: LoadedPlan, seed: number, tensors: readonly number[], claims: (rank: number, tensor: number) => boolean, zero?: ReadonlySet<number>, accept?: (lv: LogicalValues<Iv>, pv: RankValues<Iv>) => string | undefined, fixed?: ReadonlyMap<number, readonly number[]>): CertifyResult & { logical?: number } {
  const lg = plan.logical;
  const rnd = mulberry32(seed);
  const uniform = (): number => rnd() * 2 - 1;
  // `zero`: as numericCheck's (the same inputs at the same seed, within their domains).
  const need = neededDomains(plan);
  const inputs = drawInputs(plan, uniform, rnd, zero, pt) as LogicalValues<Iv>;
  // Inputs set to given values (after the draw, so the others are the seed's as ever).
  for (const [t, v] of fixed ?? []) inputs[t] = { shape: lg.shapes[t] ?? [], data: v.map(pt) };
  let lv: LogicalValues<Iv>;
  let pv: RankValues<Iv>;
  const broken = brokenOps(plan);
  // Integer inputs split into random real addends: a rank indexing with an addend is outside
  // its domain at these inputs, but a contract may mean integer addends; no domain witness then.
  let realAddendsOfIds = false;
  try {
    // Logical requirements must certainly hold (intervalAlgebra.require), or nothing is certified.
    lv = executeLogical(plan, intervalAlgebra, inputs);
    // Partial inputs: random addends, the last one the rest (an interval holding the exact
    // rest, so that some real point of the input box satisfies the contract exactly).
    const addends = new Map<string, Iv[][]>();
    const addendsOf = (nf: LineageNF): Iv[][] => {
      const v = nf.value;
      const key = `${nf.logical}|${groupKey(v)}`;
      let a = addends.get(key);
      if (a === undefined) {
        if (lg.domains[nf.logical] !== undefined) realAddendsOfIds = true;
        const x0 = lv[nf.logical] as Dense<Iv>;
        a = Array.from({ length: v.n }, () => new Array<Iv>(x0.data.length));
        for (let e = 0; e < x0.data.length; e++) {
          const x = x0.data[e] as Iv;
          if (v.reduce === 'sum') {
            let rest = mul(x, pt(v.divisor));
            for (let i = 0; i < v.n - 1; i++) {
              const r = pt(signedAddend(need[nf.logical], ((x.lo + x.hi) / 2) * v.divisor, v.n, uniform));
              (a[i] as Iv[])[e] = r;
              rest = add(rest, neg(r));
            }
            (a[v.n - 1] as Iv[])[e] = rest;
          } else {
            const holder = e % v.n;
            for (let i = 0; i < v.n; i++) (a[i] as Iv[])[e] = i === holder ? x : v.reduce === 'max' ? (need[nf.logical] === 'nonneg' || need[nf.logical] === 'positive' ? mul(x, pt(rnd())) : add(x, pt(-0.5 - rnd()))) : add(x, pt(0.5 + rnd()));
          }
        }
        addends.set(key, a);
      }
      return a;
    };
    pv = executeParallel(
      plan,
      broken.alg,
      (r, t) => {
        const nf = lineageOf(plan, r, t) as LineageNF;
        const shape = plan.view(r).shapes[t] ?? [];
        const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
        const src = nf.value.n === 1 && nf.value.divisor === 1 ? (lv[nf.logical] as Dense<Iv>).data : (addendsOf(nf)[nf.value.idx] as Iv[]);
        return { shape, data: Array.from({ length: numel(shape) }, (_, f) => src[idx(f)] as Iv) };
      },
      broken.hooks,
    );
  } catch (e) {
    if (e instanceof Undecided) return { undecided: e.message };
    throw e;
  }
  // The inputs must be ones the claim is about (stages/witness/guards.ts: every value read into Python as the run read it).
  const refused = accept?.(lv, pv);
  if (refused !== undefined) return { undecided: refused };
  const { violations, poisoned } = broken;
  for (const logical of tensors) {
    const r = disjointClaim(plan, lv, pv, seed, logical, (rank, t) => claims(rank, t) && !poisoned.has(`${rank}:${t}`));
    if (r !== undefined) return { certified: r, logical };
    if (violations.length === 0 || realAddendsOfIds) continue;
    const d = domainClaim(plan, lv, seed, logical, claims, violations, poisoned);
    if (d !== undefined) return { certified: d, logical };
  }
  if (violations.length > 0) {
    const v = violations[0] as Omit<DomainViolation, 'value'>;
    const why = realAddendsOfIds ? 'integer contract inputs are split into real addends at these inputs' : 'no claim of the failing tensors is computed from it';
    return { undecided: `rank ${v.rank} op '${v.op}' is outside its domain at these inputs (${v.what}), not certified: ${why}` };
  }
  return { undecided: 'every claim of the failing tensors overlaps its logical value at these inputs (rounding too wide to separate them)' };
}

/**
 * The parallel run's algebra and hooks that record ops certainly outside their domain instead
 * of giving up: a requirement whose interval is the point 0 is violated at the exact inputs,
 * whatever the rounding. The op's outputs, and everything computed from them (through local ops
 * and collectives), are `poisoned`: their values stand for nothing (the rank raised), so no value
 * claim is certified on them, and an op computed from them that cannot be decided yields NaN
 * instead of giving up. A requirement not certainly met nor certainly violated still gives up.
 */
function brokenOps(plan: LoadedPlan): { alg: Algebra<Iv>; hooks: ParallelHooks<Iv>; violations: Omit<DomainViolation, 'value'>[]; poisoned: Map<string, number> } {
  const violations: Omit<DomainViolation, 'value'>[] = [];
  const poisoned = new Map<string, number>();
  const prog = (r: number): Program => plan.programs[plan.rankProgram[r] as number] as Program;
  let here: { what?: string; tested?: Iv } | undefined;
  let lastTest: { value: Iv; result: Iv } | undefined;
  const alg: Algebra<Iv> = {
    ...intervalAlgebra,
    test: (a, pred) => {
      const result = intervalAlgebra.test(a, pred);
      lastTest = { value: a, result };
      return result;
    },
    require: (cond, what) => {
      if (cond.lo === 1 && cond.hi === 1) return;
      if (here !== undefined && cond.lo === 0 && cond.hi === 0) {
        if (here.what === undefined) {
          // alg.zero: the op states what is wrong itself; otherwise `what` is what it requires.
          here.what = cond === intervalAlgebra.zero ? what : `${what} does not hold`;
          if (lastTest !== undefined && lastTest.result === cond) here.tested = lastTest.value;
        }
        return;
      }
      throw new Undecided('an op outside its domain');
    },
  };
  const nanOf = (r: number, t: number): Dense<Iv> => {
    const shape = plan.view(r).shapes[t] ?? [];
    return { shape, data: new Array<Iv>(numel(shape)).fill(NAN) };
  };
  // Outputs of an op computed from a poisoned value: whatever it computes, NaN if it cannot.
  const downstream = <T>(apply: () => T, fallback: () => T): T => {
    try {
      return apply();
    } catch (e) {
      if (e instanceof Undecided) return fallback();
      throw e;
    }
  };
  const hooks: ParallelHooks<Iv> = {
    local: (r, op, apply) => {
      const p = prog(r);
      const outs = p.ops.opOutputs(op);
      const from = [...p.ops.opInputs(op)].map((t) => poisoned.get(`${r}:${t}`)).find((x) => x !== undefined);
      if (from !== undefined) {
        for (const t of outs) poisoned.set(`${r}:${t}`, from);
        return downstream(apply, () => [...outs].map((t) => nanOf(r, t)));
      }
      const h: { what?: string; tested?: Iv } = {};
      here = h;
      lastTest = undefined;
      let v: Dense<Iv>[] | undefined;
      try {
        v = apply();
      } catch (e) {
        // An op that gives up after declaring itself outside its domain: it raised already.
        if (!(e instanceof Undecided) || h.what === undefined) throw e;
      } finally {
        here = undefined;
      }
      if (h.what === undefined) return v as Dense<Iv>[];
      violations.push({ rank: r, op: p.ops.ids.name(op), what: h.what, ...(h.tested === undefined ? {} : { tested: h.tested }) });
      for (const t of outs) poisoned.set(`${r}:${t}`, violations.length - 1);
      return v ?? [...outs].map((t) => nanOf(r, t));
    },
    collective: (ci, apply) => {
      const c = plan.collectives[ci];
      if (c === undefined) return apply();
      const from = [...c.group].map((r, i) => ((c.inputs[i] as number) >= 0 ? poisoned.get(`${r}:${c.inputs[i] as number}`) : undefined)).find((x) => x !== undefined);
      if (from === undefined) return apply();
      c.group.forEach((r, i) => {
        if ((c.outputs[i] as number) >= 0) poisoned.set(`${r}:${c.outputs[i] as number}`, from);
      });
      return downstream(apply, () => [...c.group].map((r, i) => ((c.outputs[i] as number) >= 0 ? nanOf(r, c.outputs[i] as number) : undefined)));
    },
  };
  return { alg, hooks, violations, poisoned };
}

/** A claim of logical tensor `logical` computed from a parallel op outside its domain. */
function domainClaim(plan: LoadedPlan, lv: LogicalValues<Iv>, seed: number, logical: number, claims: (rank: number, tensor: number) => boolean, violations: readonly Omit<DomainViolation, 'value'>[], poisoned: ReadonlyMap<string, number>): Certified | undefined {
  const L = lv[logical];
  if (L === undefined) return undefined;
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const from = poisoned.get(`${r}:${t}`);
      if (from === undefined) continue;
      const nf = lineageOf(plan, r, t);
      if (nf === undefined || nf.logical !== logical || !claims(r, t)) continue;
      const g = logicalIndexer(nf, plan.logical.shapes[logical] ?? [])(0);
      const v = nf.value;
      return { seed, rank: r, tensor: p.tensors.name(t), element: g, kind: v.n === 1 && v.divisor === 1 ? 'complete' : 'partial', parallel: pt(0), logical: pt(1), domain: { ...(violations[from] as Omit<DomainViolation, 'value'>), value: L.data[g] as Iv } };
    }
  }
  return undefined;
}

function disjointClaim(plan: LoadedPlan, lv: LogicalValues<Iv>, pv: RankValues<Iv>, seed: number, logical: number, claims: (rank: number, tensor: number) => boolean): Certified | undefined {
  const lg = plan.logical;
  const L = lv[logical];
  if (L === undefined) return undefined;
  const disjoint = (a: Iv, b: Iv): boolean => Number.isFinite(a.lo) && Number.isFinite(a.hi) && Number.isFinite(b.lo) && Number.isFinite(b.hi) && (a.hi < b.lo || b.hi < a.lo);
  // Addends per (decomposition, element, addend index).
  const groups = new Map<string, { nf: LineageNF; chunks: Map<number, Map<number, { v: Iv; rank: number; tensor: string }>> }>();
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const nf = lineageOf(plan, r, t);
      if (nf === undefined || nf.logical !== logical || !claims(r, t)) continue;
      const val = pv[r]?.[t];
      if (val === undefined) continue;
      const idx = logicalIndexer(nf, lg.shapes[logical] ?? []);
      const v = nf.value;
      if (v.n === 1 && v.divisor === 1) {
        for (let f = 0; f < val.data.length; f++) {
          const g = idx(f);
          if (disjoint(val.data[f] as Iv, L.data[g] as Iv)) return { seed, rank: r, tensor: p.tensors.name(t), element: g, kind: 'complete', parallel: val.data[f] as Iv, logical: L.data[g] as Iv };
        }
        continue;
      }
      const key = `${logical}|${groupKey(v)}`;
      let grp = groups.get(key);
      if (grp === undefined) groups.set(key, (grp = { nf, chunks: new Map() }));
      for (let f = 0; f < val.data.length; f++) {
        const g = idx(f);
        let byIdx = grp.chunks.get(g);
        if (byIdx === undefined) grp.chunks.set(g, (byIdx = new Map()));
        const prev = byIdx.get(v.idx);
        const x = val.data[f] as Iv;
        if (prev === undefined) byIdx.set(v.idx, { v: x, rank: r, tensor: p.tensors.name(t) });
        // Two copies of one addend that cannot be equal: no value of that addend makes both claims hold.
        else if (disjoint(prev.v, x)) return { seed, rank: r, tensor: p.tensors.name(t), element: g, kind: 'replica', parallel: x, logical: prev.v };
      }
    }
  }
  for (const { nf, chunks } of groups.values()) {
    const v = nf.value;
    if (v.reduce !== 'sum' && v.reduce !== 'max' && v.reduce !== 'min') continue;
    for (const [g, byIdx] of chunks) {
      if (byIdx.size < v.n) continue;
      const xs = [...byIdx.values()].map((e) => e.v);
      const combined = v.reduce === 'sum' ? div(xs.reduce(add, pt(0)), pt(v.divisor)) : v.reduce === 'max' ? intervalAlgebra.max(xs) : intervalAlgebra.min(xs);
      const first = [...byIdx.values()][0] as { rank: number; tensor: string };
      if (disjoint(combined, L.data[g] as Iv)) return { seed, rank: first.rank, tensor: first.tensor, element: g, kind: 'partial', parallel: combined, logical: L.data[g] as Iv };
    }
  }
  return undefined;
}

function lineageOf(plan: LoadedPlan, r: number, t: number): LineageNF | undefined {
  const p = plan.programs[plan.rankProgram[r] as number] as Program;
  const spec = p.lineage[t];
  if (spec === undefined) return undefined;
  return evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
}
