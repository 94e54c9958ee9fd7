/**
 * Z3 as an independent decision procedure (`--engine z3`): the same stage equalities, built
 * directly as Z3 Real terms with no normal form. exp and the named real functions are
 * uninterpreted functions with only their positivity as axioms; max and min are If-terms.
 * So Z3 proves strictly from the field axioms and those facts: it is a cross-check of the
 * default engine, weaker on exp identities (an online-softmax rescale needs the normal
 * form), never stronger than the truth.
 */
import type { init, Arith, Bool, Context, FuncDecl } from 'z3-solver';
import type { Algebra, RealFn } from '../../ops/algebra.js';
import { nonnegFns, positiveFns } from '../../ops/algebra.js';
import { qParse } from '../../ops/rational.js';
import type { LoadedPlan } from '../../lineage/load.js';
import { result, StageBuilder, type Stage, type StageResult } from '../decompose/prove.js';

type Api = Awaited<ReturnType<typeof init>>;
type Ctx = Context<'main'>;
type Real = Arith<'main'>;

let api: Promise<Api> | undefined;

/**
 * Z3's own allocation bound (MB). The wasm build cannot grow past 2 GB and aborts its whole
 * thread when malloc fails there (with a wasm stack trace written straight to fd 2); under this
 * bound Z3 stops first and answers "unknown" (max. memory exceeded), a reason like any other.
 */
const Z3_MEMORY_MB = 1800;

async function z3(): Promise<{ api: Api; ctx: Ctx }> {
  // Imported on first use: most runs never start Z3, and loading it is start-up time.
  api ??= import('z3-solver').then((z) => z.init()).then((a) => {
    a.setParam('memory_max_size', Z3_MEMORY_MB);
    return a;
  });
  const a = await api;
  return { api: a, ctx: a.Context('main') };
}

/** Stops Z3's threads so the process can exit (z3-solver keeps them alive). */
export async function shutdownZ3(): Promise<void> {
  if (api === undefined) return;
  const a = await api;
  const { killThreads } = await import('z3-solver');
  await killThreads(a.em);
  api = undefined;
}

/** A value the z3 encoding cannot express (a comparison on a value of unknown range). */
class Z3UnsupportedError extends Error {}

/** Joint values of two integer-valued operands, when small. */
function combineDomains(a: readonly number[] | undefined, b: readonly number[] | undefined, f: (x: number, y: number) => number): number[] | undefined {
  if (a === undefined || b === undefined || a.length * b.length > 4096) return undefined;
  const out = new Set<number>();
  for (const x of a) for (const y of b) out.add(f(x, y));
  return [...out];
}

/**
 * Z3 terms for the stage algebra. Integer-valued terms (ids, masks, counts) carry the finite
 * set of values they can take, so a test becomes an If over that set.
 */
function z3Algebra(ctx: Ctx, axioms: Bool<'main'>[]): Algebra<Real> & { categorical(name: string, values: readonly number[]): Real } {
  const dom = new Map<number, readonly number[]>();
  const withDom = (e: Real, d: readonly number[] | undefined): Real => {
    if (d !== undefined) dom.set(e.id(), d);
    return e;
  };
  const domOf = (e: Real): readonly number[] | undefined => dom.get(e.id());
  const num = (v: number): Real => withDom(ctx.Real.val(v), [v]);
  const choices = new Map<string, Real[]>();
  const categorical = (name: string, values: readonly number[]): Real => {
    const x = ctx.Real.const(name);
    axioms.push(ctx.Or(...values.map((v) => x.eq(v))));
    return withDom(x, values);
  };
  const fns = new Map<string, FuncDecl<'main'>>();
  const fn = (name: string): FuncDecl<'main'> => {
    let f = fns.get(name);
    if (f === undefined) fns.set(name, (f = ctx.Function.declare(name, ctx.Real.sort(), ctx.Real.sort())));
    return f;
  };
  let sqrt2pi: Real | undefined;
  const zero = ctx.Real.val(0);
  const apply = (name: string, a: Real, positive: boolean, nonneg = false): Real => {
    const v = fn(name).call(a) as Real;
    if (positive) axioms.push(v.gt(0));
    else if (nonneg) axioms.push(v.ge(0));
    return v;
  };
  withDom(zero, [0]);
  return {
    exact: true,
    zero,
    one: num(1),
    constant: (v) => {
      const r = qParse(v);
      const e = ctx.Real.val({ numerator: r.n, denominator: r.d });
      return r.d === 1n ? withDom(e, [Number(r.n)]) : e;
    },
    add: (a, b) => withDom(a.add(b), combineDomains(domOf(a), domOf(b), (x, y) => x + y)),
    sub: (a, b) => withDom(a.sub(b), combineDomains(domOf(a), domOf(b), (x, y) => x - y)),
    mul: (a, b) => withDom(a.mul(b), combineDomains(domOf(a), domOf(b), (x, y) => x * y)),
    div: (a, b) => a.div(b),
    neg: (a) => withDom(a.neg(), domOf(a)?.map((x) => -x)),
    sum: (xs) => {
      if (xs.length === 0) return zero;
      if (xs.length === 1) return xs[0] as Real;
      let d: readonly number[] | undefined = domOf(xs[0] as Real);
      for (const x of xs.slice(1)) d = combineDomains(d, domOf(x), (p, q) => p + q);
      return withDom(ctx.Sum(xs[0] as Real, ...xs.slice(1)), d);
    },
    exp: (a) => apply('exp', a, true),
    max: (xs) => xs.slice(1).reduce((m, x) => ctx.If(x.gt(m), x, m) as Real, xs[0] as Real),
    min: (xs) => xs.slice(1).reduce((m, x) => ctx.If(x.lt(m), x, m) as Real, xs[0] as Real),
    fn: (name: RealFn, a) => {
      if (name === 'sqrt_2_over_pi') {
        if (sqrt2pi === undefined) {
          sqrt2pi = ctx.Real.const('sqrt_2_over_pi');
          axioms.push(sqrt2pi.gt(0));
        }
        return sqrt2pi;
      }
      return apply(name, a, positiveFns.has(name), nonnegFns.has(name));
    },
    test: (a, pred) => {
      const d = domOf(a);
      if (d === undefined) throw new Z3UnsupportedError('a comparison on a value whose range the z3 encoding does not track');
      const hits = d.filter(pred);
      if (hits.length === 0) return zero;
      if (hits.length === d.length) return num(1);
      return withDom(ctx.If(ctx.Or(...hits.map((v) => a.eq(v))), ctx.Real.val(1), ctx.Real.val(0)) as Real, [0, 1]);
    },
    gt0: (a) => {
      const d = domOf(a);
      if (d !== undefined && d.every((v) => v > 0)) return num(1);
      if (d !== undefined && d.every((v) => v <= 0)) return zero;
      return withDom(ctx.If(a.gt(0), ctx.Real.val(1), ctx.Real.val(0)) as Real, [0, 1]);
    },
    known: (a) => {
      const d = domOf(a);
      return d !== undefined && d.length === 1 ? d[0] : undefined;
    },
    topk: (xs, k) => {
      // One choice per distinct score vector: the same scores make the same choice.
      const key = `${k}|${xs.map((x) => x.id()).join(',')}`;
      let cs = choices.get(key);
      if (cs === undefined) {
        const values = xs.map((_, i) => i);
        cs = Array.from({ length: k }, (_, j) => categorical(`topk${k}.${j}$${choices.size}`, values));
        if (cs.length > 1) axioms.push(ctx.Distinct(...cs));
        choices.set(key, cs);
      }
      return cs;
    },
    require: () => undefined,
    categorical,
  };
}

export class Z3Prover {
  private readonly builder: StageBuilder;
  constructor(plan: LoadedPlan) {
    this.builder = new StageBuilder(plan);
  }

  async prove(stage: Stage, timeoutMs: number): Promise<StageResult> {
    const t0 = performance.now();
    const { ctx } = await z3();
    const axioms: Bool<'main'>[] = [];
    let n = 0;
    const alg = z3Algebra(ctx, axioms);
    let b;
    try {
      b = this.builder.build(stage, { alg, sym: (name, values) => (values === undefined ? ctx.Real.const(`${name}$${n++}`) : alg.categorical(`${name}$${n++}`, values)) });
    } catch (e) {
      if (!(e instanceof Z3UnsupportedError)) throw e;
      return result(stage, 'unknown', `z3: ${e.message}`, stage.obligations.map((o) => o.rank), { logicalOps: 0, parallelOps: 0 }, 0, t0);
    }
    const ranks = stage.obligations.map((o) => o.rank);
    if (b.tooLarge !== undefined) return result(stage, 'unknown', `the stage is too large: ${b.tooLarge}`, ranks, b, 0, t0);
    if (b.unsupported !== undefined) return result(stage, 'unknown', `unsupported input relation: ${b.unsupported}`, ranks, b, 0, t0);
    if (b.pairs.length === 0) return result(stage, 'proved', undefined, [], b, 0, t0);
    const solver = new ctx.Solver();
    solver.set('timeout', Math.max(1, Math.floor(timeoutMs)));
    for (const a of axioms) solver.add(a);
    solver.add(ctx.Or(...b.pairs.map((p) => p.par.neq(p.log))));
    // Z3's own timeout overshoots; interrupt from a timer as well.
    const timer = setTimeout(() => ctx.interrupt(), timeoutMs + 100);
    let verdict: string;
    try {
      verdict = await solver.check();
    } finally {
      clearTimeout(timer);
    }
    if (verdict === 'unsat') return result(stage, 'proved', undefined, [], b, 0, t0);
    if (verdict === 'unknown') return result(stage, 'unknown', `z3 returned unknown (${solver.reasonUnknown()})`, ranks, b, 0, t0);
    const model = solver.model();
    const failing = new Set<number>();
    let first: string | undefined;
    for (const p of b.pairs) {
      const d = model.eval(p.par.sub(p.log), true).toString();
      if (d === '0' || d === '0.0') continue;
      failing.add(p.rank);
      first ??= `${p.what}: z3 found values where parallel - logical = ${d}`;
    }
    return result(stage, 'differs', first ?? 'z3 found a model where the two sides differ', failing.size > 0 ? [...failing] : ranks, b, 0, t0);
  }
}
