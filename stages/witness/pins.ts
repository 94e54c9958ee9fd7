/**
 * Input elements the reads into Python imply (docs/engine.md, "Proofs under the reads").
 *
 * A captured program that reads a value into Python is traced for that value: its plan is the
 * program on the set S of inputs where every read gives what the run read (stages/witness/
 * guards.ts). A correct program whose ranks branch differently on a read (rank 1's batch holds
 * no auxiliary label, `if has_aux.any():` is False there, so it skips the auxiliary loss) is
 * equal to the model on S only: the proof for every input fails, and no witness keeps the
 * reads, so it ended "unknown". Here the guards are written as an exact 0/1 term G of the
 * plan's inputs (their cones evaluated in the normal form: integer inputs categorical, every
 * other value a free symbol), and an element x of an integer contract input is *pinned* to v
 * when G · (1 − [x = v]) has the zero normal form: on every input where all the reads come out
 * as recorded, x = v. The plan is then verified again with those elements fixed
 * (`x-planproof-pins`, Plan.pins), which proves it on a superset of S: a proof there holds on S.
 *
 * Sound because (a) a zero normal form is the zero function (the normal form is sound), so
 * each pin holds on all of S; (b) a free symbol for a value the cone cannot evaluate exactly
 * (a partial addend, a collective's result, a float) only makes G hold on more points, so it
 * can lose pins, never invent one; (c) a guard whose cone is outside the normal form is left
 * out of G, again losing pins only; (d) G must not be the zero term (reads no input gives:
 * float32 roundings read exactly), else nothing is pinned: a proof on an empty set is void.
 */
import { numel, type Attrs } from '../../ops/types.js';
import type { Dense } from '../../ops/algebra.js';
import { registry } from '../../ops/registry.js';
import { termAlgebra } from '../../sdfg/algebras.js';
import { logicalIndexer } from '../../sdfg/execute.js';
import { TermStore, type TermId } from '../../sdfg/terms.js';
import { evalLineage } from '../../lineage/model.js';
import { pinsNote, type LoadedPlan } from '../../lineage/load.js';
import type { PlanGuard, Program } from '../../plans/model.js';
import type { PlanIssue } from '../../plans/errors.js';

/** Work budget of the guards' normal forms, and the time they may take. */
const PIN_TERM_BUDGET = 2_000_000;
const PIN_MS = 5_000;
/** Elements of the cones' values past which a guard is left out (its cone is not small). */
const MAX_CONE_ELEMENTS = 200_000;

export interface GuardPins {
  /** Logical contract input -> element -> the value every input of S gives it. */
  readonly pins: Map<number, Map<number, number>>;
  /** The reads G was built from (their `where`). */
  readonly reads: readonly string[];
}

class Skip extends Error {}

/** The guards' exact terms: each guard's tensor evaluated in the normal form on demand. */
interface GuardTerms {
  readonly T: TermStore;
  /** Categorical elements created, per logical input: what a pin may be about. */
  readonly cat: ReadonlyMap<number, readonly TermId[]>;
  /** The exact 0/1 term "the read came out as recorded", or undefined when it has none (throws past the budget, or outside the normal form). */
  indicator(g: PlanGuard): TermId | undefined;
}

/**
 * Guard cones in the normal form: integer contract inputs categorical (with `ownPins` the
 * plan's pinned elements as their values), every other value a free symbol (module header).
 */
function guardTerms(plan: LoadedPlan, deadlineMs: number, ownPins: boolean): GuardTerms {
  const t0 = performance.now();
  const T = new TermStore(PIN_TERM_BUDGET, false);
  const alg = termAlgebra(T);
  const lg = plan.logical;
  const inputs = new Set(plan.contract.inputs);
  let elements = 0;
  const charge = (n: number): void => {
    elements += n;
    if (elements > MAX_CONE_ELEMENTS || performance.now() - t0 > deadlineMs) throw new Skip();
  };
  // Categorical elements created, per logical input: what a pin may be about.
  const cat = new Map<number, TermId[]>();
  const lvals = new Map<number, Dense<TermId>>();
  const evalLogical = (x: number): Dense<TermId> => {
    const hit = lvals.get(x);
    if (hit !== undefined) return hit;
    const shape = lg.shapes[x] ?? [];
    const op = lg.producer[x] as number;
    let v: Dense<TermId>;
    if (op < 0) {
      charge(numel(shape));
      const dom = lg.domains[x];
      const name = lg.tensors.name(x);
      const pinned = ownPins ? plan.pins?.get(x) : undefined;
      const data = Array.from({ length: numel(shape) }, (_, e) => {
        const p = pinned?.get(e);
        if (p !== undefined) return alg.constant(String(p));
        return dom === undefined || !inputs.has(x) ? T.sym(`${name}[${e}]`) : T.categorical(`${name}[${e}]`, dom);
      });
      if (lg.domains[x] !== undefined && inputs.has(x)) cat.set(x, data);
      v = { shape, data };
    } else {
      const ins = [...lg.ops.opInputs(op)].map(evalLogical);
      const outs = registry.get(lg.ops.kind[op] as number).apply(alg, ins, lg.attrs[op] as Attrs);
      lg.ops.opOutputs(op).forEach((t, k) => lvals.set(t, outs[k] as Dense<TermId>));
      v = lvals.get(x) as Dense<TermId>;
      charge(v.data.length);
    }
    lvals.set(x, v);
    return v;
  };
  // Rank values on demand: local ops, inputs by their lineage, a collective's outputs from its members.
  const producers = new Map<number, Int32Array>();
  const producerOf = (p: Program): Int32Array => {
    let m = producers.get(p.index);
    if (m === undefined) {
      m = new Int32Array(p.tensors.size).fill(-1);
      for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) m[t] = op;
      producers.set(p.index, m);
    }
    return m;
  };
  const sites = new Map<string, number>();
  let sitesBuilt = false;
  const rvals = new Map<string, Dense<TermId>>();
  const evalRank = (r: number, t: number): Dense<TermId> => {
    const key = `${r}:${t}`;
    const hit = rvals.get(key);
    if (hit !== undefined) return hit;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const op = producerOf(p)[t] as number;
    const isSite = op >= 0 && p.collectiveSites.includes(op);
    let v: Dense<TermId>;
    if (op >= 0 && !isSite) {
      const ins = [...p.ops.opInputs(op)].map((x) => evalRank(r, x));
      const outs = registry.get(p.ops.kind[op] as number).apply(alg, ins, view.attrs[op] as Attrs);
      p.ops.opOutputs(op).forEach((x, k) => rvals.set(`${r}:${x}`, outs[k] as Dense<TermId>));
      v = rvals.get(key) as Dense<TermId>;
      charge(v.data.length);
    } else {
      if (!sitesBuilt) {
        sitesBuilt = true;
        plan.collectives.forEach((c, ci) => c.group.forEach((m, i) => {
          const o = c.outputs[i] as number;
          if (o >= 0) sites.set(`${m}:${o}`, ci);
        }));
      }
      const ci = sites.get(key);
      const shape = view.shapes[t] ?? [];
      if (ci !== undefined) {
        const c = plan.collectives[ci];
        const rule = c === undefined ? undefined : registry.get(c.kind).collective;
        if (c === undefined || rule === undefined) throw new Skip();
        const ins = [...c.group].map((m, i) => ((c.inputs[i] as number) >= 0 ? evalRank(m, c.inputs[i] as number) : undefined));
        const outs = rule.applyGroup(alg, ins, c.attrs, c.group);
        c.group.forEach((m, i) => {
          const o = c.outputs[i] as number;
          const w = outs[i];
          if (o >= 0 && w !== undefined) rvals.set(`${m}:${o}`, w);
        });
        v = rvals.get(key) ?? { shape, data: Array.from({ length: numel(shape) }, (_, e) => T.sym(`r${r}:${t}[${e}]`)) };
        charge(v.data.length);
      } else {
        const spec = p.lineage[t];
        const nf = spec === undefined ? undefined : evalLineage(spec, plan.mesh, r, lg.shapes[spec.logical] ?? [], shape);
        charge(numel(shape));
        if (nf !== undefined && nf.value.n === 1 && nf.value.divisor === 1) {
          const src = evalLogical(nf.logical).data;
          const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
          v = { shape, data: Array.from({ length: numel(shape) }, (_, f) => src[idx(f)] as TermId) };
        } else {
          // A partial addend or a tensor without lineage: any value (pins are only lost).
          v = { shape, data: Array.from({ length: numel(shape) }, (_, e) => T.sym(`r${r}:${t}[${e}]`)) };
        }
      }
    }
    rvals.set(key, v);
    return v;
  };
  const valueOf = (g: PlanGuard, name: string): Dense<TermId> | undefined => {
    if (g.program < 0) {
      const x = lg.tensors.id(name);
      return x < 0 ? undefined : evalLogical(x);
    }
    if (g.program >= plan.mesh.size) return undefined;
    const p = plan.programs[plan.rankProgram[g.program] as number] as Program;
    const x = p.tensors.id(name);
    return x < 0 ? undefined : evalRank(g.program, x);
  };
  const indicator = (g: PlanGuard): TermId | undefined => {
    if (g.values === null) return undefined;
    const a = valueOf(g, g.tensor);
    if (a === undefined) return undefined;
    if (g.values !== undefined) {
      if (g.values.length !== a.data.length) return undefined;
      return g.values.reduce<TermId>((acc, v, e) => T.mul(acc, T.test(a.data[e] as TermId, (w) => w === v)), T.one);
    }
    if (a.data.length !== 1 || g.outcome === undefined || g.other === undefined) return undefined;
    const b = typeof g.other === 'number' ? (Number.isFinite(g.other) ? alg.constant(String(g.other)) : undefined) : valueOf(g, g.other)?.data[0];
    if (b === undefined || (typeof g.other === 'string' && valueOf(g, g.other)?.data.length !== 1)) return undefined;
    const x = a.data[0] as TermId;
    const d = T.sub(x, b);
    const eq = (): TermId => T.test(d, (w) => w === 0);
    const not = (s: TermId): TermId => T.sub(T.one, s);
    const holds: Record<PlanGuard['cmp'], () => TermId> = { gt: () => T.gt0(d), lt: () => T.gt0(T.neg(d)), le: () => not(T.gt0(d)), ge: () => not(T.gt0(T.neg(d))), eq, ne: () => not(eq()) };
    const h = holds[g.cmp]();
    return g.outcome ? h : not(h);
  };
  return { T, cat, indicator };
}

/** The elements the plan's guards pin, or undefined when they pin none. */
export function guardPins(plan: LoadedPlan, deadlineMs = PIN_MS, ownPins = true): GuardPins | undefined {
  const guards = plan.guards ?? [];
  if (guards.length === 0) return undefined;
  const t0 = performance.now();
  const { T, cat, indicator } = guardTerms(plan, deadlineMs, ownPins);
  const lg = plan.logical;
  let G = T.one;
  const reads: string[] = [];
  for (const g of guards) {
    if (performance.now() - t0 > deadlineMs) break;
    try {
      const ind = indicator(g);
      if (ind === undefined) continue;
      G = T.mul(G, ind);
      reads.push(g.where);
    } catch {
      // Outside the normal form (a comparison of a real value, past the budget): left out of G.
      continue;
    }
  }
  // No input keeps every read (or none was written exactly): nothing to prove the plan on.
  if (reads.length === 0 || G === T.zero) return undefined;
  const pins = new Map<number, Map<number, number>>();
  try {
    for (const [x, data] of cat) {
      const dom = lg.domains[x] as readonly number[];
      data.forEach((xe, e) => {
        if (performance.now() - t0 > deadlineMs || T.constValue(xe) !== undefined) return;
        for (const v of dom) {
          if (T.mul(G, T.sub(T.one, T.test(xe, (w) => w === v))) !== T.zero) continue;
          let m = pins.get(x);
          if (m === undefined) pins.set(x, (m = new Map()));
          m.set(e, v);
          break;
        }
      });
    }
  } catch {
    // Past the budget: the pins found so far each hold (each is its own implication).
  }
  return pins.size === 0 ? undefined : { pins, reads: [...new Set(reads)] };
}

function merged(plan: LoadedPlan, pins: GuardPins): Map<number, Map<number, number>> {
  const out = new Map<number, Map<number, number>>();
  for (const src of [plan.pins, pins.pins]) for (const [x, m] of src ?? []) out.set(x, new Map([...(out.get(x) ?? []), ...m]));
  return out;
}

/**
 * The plan with these pins (and any it had), in memory, and its compact JSON text with
 * `x-planproof-pins` (what worker threads load). Everything else is the plan as loaded.
 */
export function withPins(plan: LoadedPlan, text: string | undefined, pins: GuardPins): { plan: LoadedPlan; text: string | undefined } {
  const all = merged(plan, pins);
  const note = pinsNote(plan.logical, all);
  const specialized = [...(plan.specialized ?? []).filter((s) => !s.endsWith('(x-planproof-pins)')), note];
  // Every member as the loaded plan has it (its lazy ones, collectives and claims, stay getters).
  const pinned = Object.defineProperties({}, { ...Object.getOwnPropertyDescriptors(plan), pins: { value: all, enumerable: true }, specialized: { value: specialized, enumerable: true } }) as LoadedPlan;
  if (text === undefined) return { plan: pinned, text };
  const raw = JSON.parse(text) as Record<string, unknown>;
  const json: Record<string, { shape: readonly number[]; at: [number, number][] }> = {};
  for (const [x, m] of all) json[plan.logical.tensors.name(x)] = { shape: plan.logical.shapes[x] ?? [], at: [...m].sort((a, b) => a[0] - b[0]) };
  return { plan: pinned, text: JSON.stringify({ ...raw, 'x-planproof-pins': json }) };
}

/** Whether the plan already holds every one of these pins (verifying again would change nothing). */
export function alreadyPinned(plan: LoadedPlan, pins: GuardPins): boolean {
  for (const [x, m] of pins.pins) for (const [e, v] of m) if (plan.pins?.get(x)?.get(e) !== v) return false;
  return true;
}

/**
 * A pin the plan's file holds that its reads do not imply, as an issue (exit 2), or undefined.
 * Pins narrow what a verdict is about, so only those the reads force are taken from a file: one
 * the reads contradict would make "verified" hold on no input the program can run on.
 */
export function unimpliedPin(plan: LoadedPlan): PlanIssue | undefined {
  if (plan.pins === undefined) return undefined;
  const implied = guardPins(plan, PIN_MS, false);
  for (const [x, m] of plan.pins) {
    for (const [e, v] of m) {
      if (implied?.pins.get(x)?.get(e) === v) continue;
      const name = plan.logical.tensors.name(x);
      return { path: `$.x-planproof-pins.${name}`, message: `${name}[${e}] = ${v} is not implied by the values the program read into Python (x-planproof-guards); verify derives the pins it needs itself: remove x-planproof-pins` };
    }
  }
  return undefined;
}

