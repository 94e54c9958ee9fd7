/**
 * The domain each contract input's witness values are drawn from. A witness is a concrete
 * counterexample, so it must be an input the program can receive: a second moment that an Adam
 * step takes the square root of is never negative, a mask is 0 or 1. Integer inputs keep their
 * declared `values`; float inputs get the domain their uses need (the ops' `inputDomains`
 * records), passed back from each op that needs it through the ops that keep it (copies, sums,
 * products, scales by factors >= 0).
 *
 * Restricting the draws cannot make a false "verified" (witnesses only ever refute), and a
 * refutation found inside the domain is real.
 */
import type { Dense } from '../../ops/algebra.js';
import { registry } from '../../ops/registry.js';
import type { Attrs, InputDomain } from '../../ops/types.js';
import type { LoadedPlan } from '../../lineage/load.js';

/** The stricter of two domains (a 0/1 mask is non-negative; positive excludes 0). */
function meet(a: InputDomain | undefined, b: InputDomain | undefined): InputDomain | undefined {
  if (a === undefined || a === b) return b;
  if (b === undefined) return a;
  if (a === 'positive' || b === 'positive') return 'positive';
  return 'mask';
}

/** Per logical tensor, the domain its uses need (undefined: any real). */
export function neededDomains(plan: LoadedPlan): (InputDomain | undefined)[] {
  const lg = plan.logical;
  const need: (InputDomain | undefined)[] = new Array<InputDomain | undefined>(lg.tensors.size);
  const put = (t: number, d: InputDomain | undefined): void => {
    need[t] = meet(need[t], d);
  };
  // Consumers before producers: every need on an op's output is known when the op is reached.
  for (let k = lg.order.length - 1; k >= 0; k--) {
    const op = lg.order[k] as number;
    const rule = registry.get(lg.ops.kind[op] as number).inputDomains;
    if (rule === undefined) continue;
    const ins = [...lg.ops.opInputs(op)];
    rule.needs?.forEach((d, i) => {
      const t = ins[i];
      if (d !== undefined && t !== undefined) put(t, d);
    });
    const keeps = rule.keeps;
    if (keeps === undefined) continue;
    for (const o of lg.ops.opOutputs(op)) {
      const d = need[o];
      if (d === undefined) continue;
      if (keeps === 'copy') ins.forEach((t) => put(t, d));
      else if (d === 'mask') continue;
      // x * x >= 0 whatever x is: nothing to ask of x.
      else if (keeps === 'product' && d === 'nonneg' && ins.every((t) => t === ins[0])) continue;
      else if (keeps === 'sum' || keeps === 'product' || keeps(lg.attrs[op] as Attrs)) ins.forEach((t) => put(t, d));
    }
  }
  return need;
}

/**
 * A draw within domain `d` from `u` (uniform or log-uniform with a random sign) and `rnd`
 * (on [0, 1)): one call of either per value, so that the other inputs' draws at a seed stay
 * the same. `zero`: the input is set to 0 (to 1 where 0 is outside the domain).
 */
function domainDraw(d: InputDomain | undefined, u: () => number, rnd: () => number, zero: boolean): () => number {
  if (zero) return d === 'positive' ? (): number => 1 : (): number => 0;
  switch (d) {
    case undefined:
      return u;
    case 'nonneg':
      return (): number => Math.abs(u());
    case 'positive':
      return (): number => Math.abs(u()) || 1;
    case 'mask':
      return (): number => (rnd() < 0.5 ? 0 : 1);
  }
}

/**
 * The first n-1 addends of x * divisor (a partial sum over n ranks) for an input of domain `d`:
 * within [0, x * divisor / n) when the domain is a sign, so the rest is in it too.
 */
export function signedAddend(d: InputDomain | undefined, total: number, n: number, u: () => number): number {
  return d === 'nonneg' || d === 'positive' ? (Math.abs(u()) * total) / n : u();
}

/** The logical values of the plan's contract inputs, drawn within their domains (numeric.ts, interval.ts). */
export function drawInputs<T>(plan: LoadedPlan, u: () => number, rnd: () => number, zero: ReadonlySet<number> | undefined, wrap: (x: number) => T): (Dense<T> | undefined)[] {
  const lg = plan.logical;
  const need = neededDomains(plan);
  const inputs: (Dense<T> | undefined)[] = new Array<Dense<T> | undefined>(lg.tensors.size);
  for (const t of plan.contract.inputs) {
    const shape = lg.shapes[t] ?? [];
    const dom = lg.domains[t];
    // Integer inputs draw from their declared values (so an ignore index does occur).
    const draw = dom === undefined ? domainDraw(need[t], u, rnd, zero?.has(t) === true) : (): number => dom[Math.floor(rnd() * dom.length)] as number;
    const data = Array.from({ length: shape.reduce((p, s) => p * s, 1) }, () => wrap(draw()));
    // Pinned elements (Plan.pins) hold their value: a draw stays where the verdict is about.
    for (const [e, v] of plan.pins?.get(t) ?? []) data[e] = wrap(v);
    inputs[t] = { shape, data };
  }
  return inputs;
}
