/**
 * Constant elements of the logical graph: elements whose exact value is the same rational at
 * every input the plan can receive, proved op by op in the normal form.
 *
 * Why: a stage assumes its input tensors are arbitrary, so a claim that holds only because an
 * input is identically zero is left open ("normal forms differ but no numeric witness"). At
 * small shapes this is common and real: with one key per query (a sequence of length 1, or the
 * first position of a causal mask) softmax is the constant 1 and the gradients of q and k are
 * exactly 0, so an edit that only touches those gradients changes nothing. Substituting the
 * proved constants for a stage's input symbols (stages/decompose/prove.ts, `constants`) decides
 * such stages.
 *
 * Soundness (docs/engine.md, "Constant elements"): an element is recorded only when its op's
 * normal form, with the op's inputs symbolic except for elements already recorded, is that
 * constant, and every division the op makes is by a value the normal form proves nonzero. By
 * induction over the logical order, the element equals the constant at every input where the
 * plan is defined. Two Float64 runs only choose which elements to try (candidates whose values
 * agree at two seeds); they never record one. Each stage that uses a constant still proves its
 * own claims exactly.
 */
import { numel, type Attrs } from '../../ops/types.js';
import { registry } from '../../ops/registry.js';
import type { Dense } from '../../ops/algebra.js';
import { floatAlgebra, termAlgebra } from '../../sdfg/algebras.js';
import { executeLogical, type LogicalValues } from '../../sdfg/execute.js';
import { TermBudgetError, TermStopError, TermStore, TermUnsupportedError, type TermId } from '../../sdfg/terms.js';
import type { LoadedPlan } from '../../lineage/load.js';
import { mulberry32 } from '../witness/numeric.js';
import { drawInputs } from '../witness/domains.js';

/** Per logical tensor, its proved constant elements: flat element index -> exact rational "n/d". */
export type Constants = ReadonlyMap<number, ReadonlyMap<number, string>>;

/** Elements an op may hold (inputs and outputs) for its symbolic check; past it the op is skipped. */
const MAX_OP_ELEMENTS = 200_000;
/** Time one op's region may take. */
const OP_MS = 250;
/** Work budget of one op's normal form. */
const OP_TERM_BUDGET = 400_000;

/**
 * The constant elements of `plan`'s logical graph, within `deadlineMs` (what is not reached
 * in time is simply not recorded: fewer constants, never a wrong one).
 */
export function provedConstants(plan: LoadedPlan, deadlineMs = 5_000, targets?: Iterable<number>): Constants {
  const t0 = performance.now();
  const lg = plan.logical;
  const wanted = targets === undefined ? undefined : ancestorOps(plan, targets);
  // Logical order positions, once: each region is sorted by them.
  const pos = new Map(lg.order.map((o, i) => [o, i]));
  const runs = [1, 2].map((seed) => {
    const rnd = mulberry32(seed);
    const u = (): number => rnd() * 2 - 1;
    return executeLogical(plan, floatAlgebra, drawInputs(plan, u, rnd, undefined, (x) => x) as LogicalValues<number>);
  });
  const out = new Map<number, Map<number, string>>();
  for (const op of lg.order) {
    if (performance.now() - t0 > deadlineMs) break;
    if (wanted !== undefined && !wanted.has(op)) continue;
    const outs = [...lg.ops.opOutputs(op)];
    // Candidates: elements with one finite value at both seeds.
    const cand = outs.map((t) => {
      const a = (runs[0]?.[t] as Dense<number> | undefined)?.data;
      const b = (runs[1]?.[t] as Dense<number> | undefined)?.data;
      const es: number[] = [];
      if (a !== undefined && b !== undefined) for (let e = 0; e < a.length; e++) if (Number.isFinite(a[e]) && a[e] === b[e]) es.push(e);
      return es;
    });
    if (cand.every((es) => es.length === 0)) continue;
    const region = regionOf(plan, op, pos, (x) => out.get(x)?.size === numel(lg.shapes[x] ?? []));
    if (region === undefined) continue;
    const T = new TermStore(OP_TERM_BUDGET, false);
    // An op whose region blows up (an optimizer step over a gradient's whole expression) is
    // given up quickly: it only costs constants, never a wrong one.
    T.stopAt = Math.min(t0 + deadlineMs, performance.now() + OP_MS);
    const alg = termAlgebra(T);
    const vals = new Map<number, Dense<TermId>>();
    // A tensor no op of the region produces: symbols (shared by every op that reads it), or
    // the constants already proved.
    const valueOf = (x: number): Dense<TermId> => {
      const hit = vals.get(x);
      if (hit !== undefined) return hit;
      const shape = lg.shapes[x] ?? [];
      const known = out.get(x);
      const dom = lg.domains[x];
      const name = lg.tensors.name(x);
      const v = { shape, data: Array.from({ length: numel(shape) }, (_, e) => {
        const c = known?.get(e);
        if (c !== undefined) return alg.constant(c);
        return dom === undefined ? T.sym(`${name}[${e}]`) : T.categorical(`${name}[${e}]`, dom);
      }) };
      vals.set(x, v);
      return v;
    };
    let values: Dense<TermId>[] = [];
    try {
      for (const o of region) {
        const res = registry.get(lg.ops.kind[o] as number).apply(alg, [...lg.ops.opInputs(o)].map(valueOf), lg.attrs[o] as Attrs) as Dense<TermId>[];
        lg.ops.opOutputs(o).forEach((t, k) => vals.set(t, res[k] as Dense<TermId>));
        if (o === op) values = res;
      }
    } catch (e) {
      if (e instanceof TermBudgetError || e instanceof TermStopError || e instanceof TermUnsupportedError) continue;
      throw e;
    }
    // A division by a value that may be 0 leaves the op's value open where it is: no constant.
    if (T.conditions.some((c) => !T.provablyNonzero(c))) continue;
    outs.forEach((t, k) => {
      const v = values[k];
      if (v === undefined) return;
      for (const e of cand[k] as number[]) {
        const c = T.constValue(v.data[e] as TermId);
        if (c === undefined) continue;
        let m = out.get(t);
        if (m === undefined) out.set(t, (m = new Map()));
        m.set(e, `${c.n}/${c.d}`);
      }
    });
  }
  return out;
}

/** The ops `targets` (logical tensors) depend on: only their constants matter to a stage that reads them. */
function ancestorOps(plan: LoadedPlan, targets: Iterable<number>): Set<number> {
  const lg = plan.logical;
  const ops = new Set<number>();
  const stack = [...targets];
  const seen = new Set<number>(stack);
  while (stack.length > 0) {
    const p = lg.producer[stack.pop() as number] as number;
    if (p < 0 || ops.has(p)) continue;
    ops.add(p);
    for (const x of lg.ops.opInputs(p)) if (!seen.has(x)) {
      seen.add(x);
      stack.push(x);
    }
  }
  return ops;
}

/** Producers this many ops back are evaluated with the op (an attention's backward reads its forward output). */
const REGION_DEPTH = 3;

/**
 * The ops evaluated together to decide `op`'s outputs, in logical order: `op` and its
 * producers up to REGION_DEPTH back, as long as their tensors stay within MAX_OP_ELEMENTS.
 * Undefined when `op` alone is past it. Tensors proved constant throughout are not expanded. Any region is sound (what it does not produce is
 * symbolic); a deeper one sees more relations (an attention output that is its v).
 */
function regionOf(plan: LoadedPlan, op: number, pos: ReadonlyMap<number, number>, constant: (tensor: number) => boolean): number[] | undefined {
  const lg = plan.logical;
  const size = (o: number): number => [...lg.ops.opInputs(o), ...lg.ops.opOutputs(o)].reduce((s, t) => s + numel(lg.shapes[t] ?? []), 0);
  let total = size(op);
  if (total > MAX_OP_ELEMENTS) return undefined;
  const region = new Set([op]);
  let frontier = [op];
  for (let d = 0; d < REGION_DEPTH && frontier.length > 0; d++) {
    const next: number[] = [];
    for (const o of frontier)
      for (const x of lg.ops.opInputs(o)) {
        const p = lg.producer[x] as number;
        // A tensor proved constant throughout is its constants: nothing to see behind it.
        if (p < 0 || region.has(p) || constant(x)) continue;
        const n = size(p);
        if (total + n > MAX_OP_ELEMENTS) continue;
        total += n;
        region.add(p);
        next.push(p);
      }
    frontier = next;
  }
  return [...region].sort((a, b) => (pos.get(a) ?? 0) - (pos.get(b) ?? 0));
}

/** How many constant elements `c` holds (for reasons and the report). */
export function constantCount(c: Constants): number {
  let n = 0;
  for (const m of c.values()) n += m.size;
  return n;
}
