/**
 * Stage decomposition and exact proof.
 *
 * Obligations are the parallel tensors with lineage that some op or collective produces, on
 * every rank (so each replica is proved, not just one). A stage gathers the obligations of
 * one logical tensor. Walking back from them through the parallel dataflow, every tensor with
 * lineage that is reached is a stage input: its relation to its logical tensor is assumed
 * (it is an obligation of an earlier stage, or a contract input). The logical value is
 * computed from the same logical tensors. Assumptions are encoded by substitution: each
 * logical element is one symbol shared by all complete copies; elements held as partial
 * addends get one free symbol per addend and the logical element is their combination.
 *
 * A stage is proved when every obligation element equals its logical counterpart in the
 * exact normal form and every division the parallel side performs is by a value that is
 * evidently nonzero or that the logical side divides by as well. A normal-form difference is
 * not a refutation: the caller pairs it with a numeric witness or reports "unknown".
 */
import type { Diagnosis } from '../witness/diagnose.js';
import type { Algebra, Dense } from '../../ops/algebra.js';
import { registry } from '../../ops/registry.js';
import { type Attrs, numel } from '../../ops/types.js';
import { termAlgebra } from '../../sdfg/algebras.js';
import { logicalIndexer } from '../../sdfg/execute.js';
import { DEFAULT_TERM_BUDGET, TermBudgetError, TermStopError, TermStore, TermUnsupportedError, type TermId } from '../../sdfg/terms.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { RawPlan } from '../../plans/raw.js';
import type { NumericReport } from '../witness/numeric.js';
import type { CollectiveInstance, Program } from '../../plans/model.js';
import { evalLineage, groupKey, type LineageNF } from '../../lineage/model.js';
import type { Constants } from '../engines/constants.js';

/**
 * One rank's part of a stage, extracted and proved on its own (stages/shrink/part.ts). The hook's types
 * live here so that stages/decompose/template.ts, which is handed the hook, and part.ts, which implements
 * it, need not import each other (part.ts reaches template.ts through verify.ts).
 */
export interface PartResult {
  /** The rank whose obligation was extracted, and every rank its closure reaches. */
  readonly rank: number;
  readonly ranks: readonly number[];
  /** The result on the part (reduced when the reducer could), and its numeric run (ranks as in the full plan). */
  readonly result: StageResult;
  readonly witness: NumericReport['mismatches'];
  readonly reduced: boolean;
  /** Why the part was not reduced, when it was not. */
  readonly notReduced?: string;
  readonly raw: RawPlan;
  /** What the witness values look like (stages/witness/diagnose.ts). */
  readonly diagnosis?: Diagnosis;
}

export type ProvePart = (plan: LoadedPlan, raw: RawPlan, stage: Stage, rank: number, tensor: number, seed: number) => PartResult | { why: string };

export interface Obligation {
  readonly rank: number;
  readonly tensor: number;
  readonly nf: LineageNF;
}

export interface Stage {
  readonly index: number;
  /** The logical tensor whose claims this stage proves. */
  readonly logical: number;
  readonly obligations: Obligation[];
}

type StageStatus = 'proved' | 'differs' | 'unknown';

export interface StageResult {
  readonly stage: Stage;
  readonly status: StageStatus;
  /** For 'differs' / 'unknown': why, with the first residual. */
  readonly reason?: string;
  /** Ranks whose obligations are not proved. */
  readonly failingRanks: number[];
  readonly logicalOps: number;
  readonly parallelOps: number;
  readonly terms: number;
  readonly ms: number;
  /** Which procedure decided a proved stage, when not the normal form. */
  readonly decidedBy?: DecidedBy;
}

/**
 * What decided a proved stage other than the exact normal form: tensor level, or a record of the
 * per-stage portfolio (stages/portfolio.ts STAGE_METHODS, by its name) that can prove one.
 */
export type DecidedBy = 'tensor' | 'z3' | 'constants' | 'per-stage';

/** One stage per logical tensor with produced claims, in topological order of the logical graph. */
export function decompose(plan: LoadedPlan, order: readonly number[]): Stage[] {
  // One plan is decomposed by several passes of one run (inference's check, reduction's
  // pre-pass, the proof): its lineage does not change, so the stages are computed once per
  // plan and order. Callers get their own array; the stages themselves are never modified.
  let byOrder = DECOMPOSED.get(plan);
  if (byOrder === undefined) DECOMPOSED.set(plan, (byOrder = new WeakMap()));
  let stages = byOrder.get(order);
  if (stages === undefined) byOrder.set(order, (stages = decomposeOnce(plan, order)));
  return stages.slice();
}

const DECOMPOSED = new WeakMap<LoadedPlan, WeakMap<readonly number[], readonly Stage[]>>();

function decomposeOnce(plan: LoadedPlan, order: readonly number[]): Stage[] {
  const byLogical = new Map<number, Obligation[]>();
  const produced = producedSets(plan);
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const spec = p.lineage[t];
      if (spec === undefined || !(produced[r] as Uint8Array)[t]) continue;
      const nf = evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
      let l = byLogical.get(nf.logical);
      if (l === undefined) byLogical.set(nf.logical, (l = []));
      l.push({ rank: r, tensor: t, nf });
    }
  }
  const pos = new Int32Array(plan.logical.tensors.size).fill(-1);
  order.forEach((op, i) => {
    for (const t of plan.logical.ops.opOutputs(op)) pos[t] = i;
  });
  return [...byLogical.entries()]
    .sort((a, b) => (pos[a[0]] as number) - (pos[b[0]] as number) || a[0] - b[0])
    .map(([logical, obligations], index) => ({ index, logical, obligations }));
}

/** produced[rank][tensor]: some local op or collective writes the tensor on that rank. */
export function producedSets(plan: LoadedPlan): Uint8Array[] {
  const out = Array.from({ length: plan.mesh.size }, (_, r) => new Uint8Array((plan.programs[plan.rankProgram[r] as number] as Program).tensors.size));
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) (out[r] as Uint8Array)[t] = 1;
  }
  for (const c of plan.collectives) c.group.forEach((r, i) => {
    const o = c.outputs[i] as number;
    if (o >= 0) (out[r] as Uint8Array)[o] = 1;
  });
  return out;
}

export interface Producer {
  /** Local op index, or -1. */
  op: number;
  /** Collective instance index, or -1. */
  inst: number;
}

/** What the stage builder asks of a producer map (keys "rank:tensor"). */
export interface ProducerLookup {
  get(key: string): Producer | undefined;
  /** The collective instance a producer names (default: plan.collectives, built over every rank on first use). */
  instance?(inst: number): CollectiveInstance | undefined;
}

const producerCache = new WeakMap<LoadedPlan, Map<string, Producer>>();

/** Producer of each (rank, tensor); built once per plan (the stage builder and stage extraction share it). */
export function producers(plan: LoadedPlan): Map<string, Producer> {
  const hit = producerCache.get(plan);
  if (hit !== undefined) return hit;
  const m = new Map<string, Producer>();
  producerCache.set(plan, m);
  plan.collectives.forEach((c, ci) => c.group.forEach((r, i) => {
    const o = c.outputs[i] as number;
    if (o >= 0) m.set(`${r}:${o}`, { op: -1, inst: ci });
  }));
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const sites = new Set(p.collectiveSites);
    for (let op = 0; op < p.ops.size; op++) {
      if (sites.has(op)) continue;
      for (const t of p.ops.opOutputs(op)) m.set(`${r}:${t}`, { op, inst: -1 });
    }
  }
  return m;
}

/** One equality the stage must establish. */
interface Pair<S> {
  readonly par: S;
  readonly log: S;
  readonly rank: number;
  /** Where it comes from, for messages. */
  readonly what: string;
}

interface StageBuild<S> {
  readonly pairs: Pair<S>[];
  readonly logicalOps: number;
  readonly parallelOps: number;
  /** Set when the stage's input relation cannot be encoded. */
  readonly unsupported?: string;
  /** Set when the stage's tensors hold more elements than a symbolic stage may. */
  readonly tooLarge?: string;
}

/**
 * Tensor elements one stage may hold (its parallel closure, the logical inputs it names and
 * its own logical tensor). A symbolic stage is an array of terms per tensor: past this, a
 * stage at real model shapes (an embedding of 500M elements) would exhaust the heap before
 * the work budget could stop it. Shape reduction is what brings such stages down.
 */
export const MAX_STAGE_ELEMENTS = 4_000_000;

interface SymbolSource<S> {
  readonly alg: Algebra<S>;
  /** A fresh input element; `values` makes it categorical (an integer id taking one of them). */
  sym(name: string, values?: readonly number[]): S;
  /** Called after the logical side is built, before the parallel side (divisions after it are the parallel side's). */
  parallelStart?(): void;
}

/** The state one StageBuilder.build shares across its phases. */
interface BuildContext<S> {
  readonly stage: Stage;
  readonly src: SymbolSource<S>;
  /** `src.alg`, with `require` collecting the ops' requirements into `reqs`. */
  readonly alg: Algebra<S>;
  /** A value map's combination of addends: sum / divisor, max or min. */
  readonly combine: (reduce: string, divisor: number, xs: S[]) => S;
  readonly reqs: { cond: S; what: string; rank: number }[];
  /** The op being applied (and its rank), for requirement messages. */
  readonly here: { what: string; rank: number };
  logicalOps: number;
  parallelOps: number;
}

/** Symbols of the logical tensors a stage's inputs name: per element, and per addend of partial elements. */
interface InputSymbols<S> {
  readonly logical: Map<number, S[]>;
  readonly chunks: Map<string, S>;
}

/**
 * Builds a stage over any algebra: symbols for the inputs (by substitution), the logical
 * value, the parallel values, and the equalities between them. Deciding the equalities is
 * the caller's (exact normal form, or Z3).
 */
export class StageBuilder {
  private readonly prod: ProducerLookup;
  private readonly instance: (inst: number) => CollectiveInstance | undefined;
  private readonly lineageCache = new Map<string, LineageNF | undefined>();
  /** `prod`: the producer of each "rank:tensor" (default: the plan-wide map; stages/decompose/template.ts passes one computed from the templates). */
  constructor(
    readonly plan: LoadedPlan,
    prod?: ProducerLookup,
  ) {
    this.prod = prod ?? producers(plan);
    this.instance = prod?.instance?.bind(prod) ?? ((i) => plan.collectives[i]);
  }

  lineage(r: number, t: number): LineageNF | undefined {
    const key = `${r}:${t}`;
    if (this.lineageCache.has(key)) return this.lineageCache.get(key);
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    const nf = spec === undefined ? undefined : evalLineage(spec, this.plan.mesh, r, this.plan.logical.shapes[spec.logical] ?? [], this.plan.view(r).shapes[t] ?? []);
    this.lineageCache.set(key, nf);
    return nf;
  }

  tensorName(r: number, t: number): string {
    return (this.plan.programs[this.plan.rankProgram[r] as number] as Program).tensors.name(t);
  }

  /**
   * The stage's parallel closure: walking back from its obligations, every tensor reached
   * (`seen`, keys "rank:tensor") and the claimed ones where the walk stops (`inputs`). Claims of
   * the stage's own logical tensor are recomputed, never assumed (unless no op produces them:
   * claims of a contract input).
   */
  closure(stage: Stage): { inputs: Map<string, LineageNF>; seen: Set<string>; ops: Set<string> } {
    const plan = this.plan;
    const inputs = new Map<string, LineageNF>();
    // Parallel ops the stage runs, as "rank:op id" (collectives: each member's call site).
    const ops = new Set<string>();
    const stack = stage.obligations.map((o) => [o.rank, o.tensor] as [number, number]);
    const seen = new Set<string>();
    while (stack.length > 0) {
      const [r, t] = stack.pop() as [number, number];
      const key = `${r}:${t}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const nf = this.lineage(r, t);
      const pr = this.prod.get(key);
      if (nf !== undefined && (nf.logical !== stage.logical || pr === undefined)) {
        inputs.set(key, nf);
        continue;
      }
      if (pr === undefined) continue;
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      if (pr.op >= 0) {
        ops.add(`${r}:${p.ops.ids.name(pr.op)}`);
        for (const x of p.ops.opInputs(pr.op)) stack.push([r, x]);
      } else {
        const c = this.instance(pr.inst);
        c?.group.forEach((m, i) => {
          const site = c.sites[i] as number;
          ops.add(`${m}:${site >= 0 ? (plan.programs[plan.rankProgram[m] as number] as Program).ops.ids.name(site) : c.id}`);
          const x = c.inputs[i] as number;
          if (x >= 0) stack.push([m, x]);
        });
      }
    }
    return { inputs, seen, ops };
  }

  /**
   * The stage over `src`'s algebra, in five phases: the parallel closure (`closure`), symbols
   * for the logical tensors its inputs name (`inputSymbols`), the logical value
   * (`logicalValue`), the parallel values on demand (`parallelValues`), and the equalities
   * between them (`equalities`).
   */
  build<S>(stage: Stage, src: SymbolSource<S>, constants?: Constants, expand = false): StageBuild<S> {
    const ctx = this.context(stage, src);
    const { inputs, seen } = this.closure(stage);
    const tooLarge = this.tooLarge(stage, inputs, seen);
    if (tooLarge !== undefined) return { pairs: [], logicalOps: 0, parallelOps: 0, tooLarge };
    const defined = expand ? this.definedInputs(stage, inputs, constants) : new Set<number>();
    const syms = this.inputSymbols(ctx, inputs, constants, defined);
    if ('unsupported' in syms) return { pairs: [], logicalOps: 0, parallelOps: 0, unsupported: syms.unsupported };
    const evalLogical = this.logicalEvaluator(ctx, syms.logical, constants);
    const target = evalLogical(stage.logical);
    // Defined inputs: their logical definition, cut at the other inputs' symbols (docs/engine.md, "Inputs defined by their logical ops").
    for (const L of defined) {
      const why = this.symbolsOf(ctx, L, inputs, constants, syms, evalLogical(L).data);
      if (why !== undefined) return { pairs: [], logicalOps: 0, parallelOps: 0, unsupported: why };
    }
    src.parallelStart?.();
    const evalPar = this.parallelValues(ctx, inputs, syms, seen);
    return this.equalities(ctx, evalPar, target, syms.chunks);
  }

  /**
   * Input logical tensors a stage may take by their logical definition instead of as free
   * symbols, for a retry of a stage left differing (`Prover`): those computed from the other
   * inputs alone (a logical tensor that only splits another, both named by hints), and
   * those the logical value does not read at all, walking back from the stage's logical tensor
   * through the others (a hint claimed for one of two equal logical tensors, the consumer's
   * logical op reading the other). Free, either says nothing about what the stage computes.
   */
  definedInputs(stage: Stage, inputs?: ReadonlyMap<string, LineageNF>, constants?: Constants): Set<number> {
    const lg = this.plan.logical;
    const named = new Set<number>([...(inputs ?? this.closure(stage).inputs).values()].map((nf) => nf.logical));
    const leaf = (x: number): boolean => (lg.producer[x] as number) < 0 || (constants?.get(x)?.size ?? -1) === numel(lg.shapes[x] ?? []);
    const ins = (x: number): readonly number[] => (leaf(x) ? [] : [...lg.ops.opInputs(lg.producer[x] as number)]);
    // Whether x is a named tensor or a function of named tensors and constants alone
    // (memoized, iterative: graphs are deep). A contract input no claim names is not.
    const known = new Map<number, boolean>();
    const determined = (root: number): boolean => {
      const stack: [number, boolean][] = [[root, false]];
      while (stack.length > 0) {
        const [x, after] = stack.pop() as [number, boolean];
        if (known.has(x)) continue;
        if (named.has(x) || leaf(x)) {
          known.set(x, named.has(x) || (lg.producer[x] as number) >= 0);
          continue;
        }
        if (!after) {
          stack.push([x, true]);
          for (const y of ins(x)) if (!known.has(y)) stack.push([y, false]);
          continue;
        }
        known.set(x, ins(x).every((y) => known.get(y) === true));
      }
      return known.get(root) === true;
    };
    // Inputs computed from the others alone (a split or reshape of one): defined, they add no
    // free symbol, only what the logical graph says about them.
    const defined = new Set([...named].filter((L) => !leaf(L) && ins(L).every(determined)));
    // What the logical value reads, through defined inputs to the symbols they are computed from.
    const read = new Set<number>();
    const stack = [stage.logical];
    while (stack.length > 0) {
      const x = stack.pop() as number;
      if (read.has(x)) continue;
      read.add(x);
      if (named.has(x) && !defined.has(x)) continue;
      stack.push(...ins(x));
    }
    for (const L of named) if (!read.has(L)) defined.add(L);
    return defined;
  }

  /** The algebra a build runs on: `src`'s, with the requirements ops declare collected, and where they were declared. */
  private context<S>(stage: Stage, src: SymbolSource<S>): BuildContext<S> {
    // Requirements the ops declare (ids within their table) become obligations of the stage.
    const reqs: { cond: S; what: string; rank: number }[] = [];
    const here = { what: '', rank: stage.obligations[0]?.rank ?? 0 };
    const alg: Algebra<S> = { ...src.alg, require: (cond, what) => reqs.push({ cond, what: `${here.what}: ${what}`, rank: here.rank }) };
    const combine = (reduce: string, divisor: number, xs: S[]): S =>
      reduce === 'sum' ? alg.mul(alg.sum(xs), alg.constant(`1/${divisor}`)) : reduce === 'max' ? alg.max(xs) : alg.min(xs);
    return { stage, src, alg, combine, reqs, here, logicalOps: 0, parallelOps: 0 };
  }

  /** Why the stage is too large to build symbolically (its closure, input and own logical tensors), or undefined. */
  private tooLarge(stage: Stage, inputs: ReadonlyMap<string, LineageNF>, seen: ReadonlySet<string>): string | undefined {
    const plan = this.plan;
    const lg = plan.logical;
    const inputLogical = new Set<number>([...inputs.values()].map((nf) => nf.logical));
    let elements = numel(lg.shapes[stage.logical] ?? []);
    for (const L of inputLogical) elements += numel(lg.shapes[L] ?? []);
    for (const key of seen) {
      const [r, t] = key.split(':').map(Number) as [number, number];
      elements += numel(plan.view(r).shapes[t] ?? []);
    }
    if (elements <= MAX_STAGE_ELEMENTS) return undefined;
    return `its tensors hold ${elements.toLocaleString('en-US')} elements (at most ${MAX_STAGE_ELEMENTS.toLocaleString('en-US')} per stage): shapes this large need shape reduction (docs/engine.md, "Shape reduction" and "Per-stage reduction")`;
  }

  /**
   * Symbols for the logical tensors the inputs name (substitution): one per complete element;
   * for an element held as partial addends, one per addend and the element is their
   * combination (`chunks`, keyed "logical|group|element|addend"). An element `constants` holds
   * (stages/engines/constants.ts) is that constant instead of a symbol; held as addends of a
   * sum, all but one addend of each group stay free and the last makes up the constant.
   */
  private inputSymbols<S>(ctx: BuildContext<S>, inputs: ReadonlyMap<string, LineageNF>, constants: Constants | undefined, defined: ReadonlySet<number>): InputSymbols<S> | { unsupported: string } {
    const syms: InputSymbols<S> = { logical: new Map(), chunks: new Map() };
    for (const L of new Set<number>([...inputs.values()].map((nf) => nf.logical))) {
      if (defined.has(L)) continue;
      const why = this.symbolsOf(ctx, L, inputs, constants, syms);
      if (why !== undefined) return { unsupported: why };
    }
    return syms;
  }

  /**
   * The values of input logical tensor `L` into `syms` (why not, when its relation cannot be
   * encoded): symbols, or `preset` (its logical definition) with the partial addends of each
   * element made up to it as a constant's are.
   */
  private symbolsOf<S>(ctx: BuildContext<S>, L: number, inputs: ReadonlyMap<string, LineageNF>, constants: Constants | undefined, syms: InputSymbols<S>, preset?: readonly S[]): string | undefined {
    const lg = this.plan.logical;
    const { src, alg, combine } = ctx;
    const shape = lg.shapes[L] ?? [];
    const name = lg.tensors.name(L);
    const groupsAt = new Map<number, Map<string, LineageNF>>();
    for (const nf of inputs.values()) {
      if (nf.logical !== L || (nf.value.n === 1 && nf.value.divisor === 1)) continue;
      const idx = logicalIndexer(nf, shape);
      const cnt = nf.ranges.reduce((p, r) => p * r.reduce((s, _, i) => (i % 2 === 0 ? s + ((r[i + 1] as number) - (r[i] as number)) : s), 0), 1);
      const gk = groupKey(nf.value);
      for (let f = 0; f < cnt; f++) {
        const e = idx(f);
        let m = groupsAt.get(e);
        if (m === undefined) groupsAt.set(e, (m = new Map()));
        if (!m.has(gk)) m.set(gk, nf);
      }
    }
    const vals: S[] = new Array<S>(numel(shape));
    const domain = lg.domains[L];
    const known = constants?.get(L);
    const pinned = this.plan.pins?.get(L);
    for (let e = 0; e < vals.length; e++) {
      const gs = groupsAt.get(e);
      const p = pinned?.get(e);
      const c = known?.get(e) ?? (p === undefined ? undefined : String(p));
      const fixed = preset?.[e] ?? (c !== undefined ? alg.constant(c) : undefined);
      if (gs === undefined) {
        vals[e] = fixed ?? src.sym(`${name}[${e}]`, domain);
        continue;
      }
      if (domain !== undefined && preset === undefined) return `integer tensor '${name}' is held as partial addends`;
      const sums = [...gs.values()].every((nf) => nf.value.reduce === 'sum');
      if (preset !== undefined && !sums) return `logical '${name}' is defined by its logical ops and held as ${[...gs.values()].find((nf) => nf.value.reduce !== 'sum')?.value.reduce ?? ''} addends`;
      let value: S | undefined = fixed !== undefined && sums ? fixed : undefined;
      for (const [gk, nf] of gs) {
        const v = nf.value;
        const chunks: S[] = [];
        if (value === undefined) {
          for (let i = 0; i < v.n; i++) chunks.push(src.sym(`${name}[${e}]#${i}/${v.n}`));
          value = combine(v.reduce, v.divisor, chunks);
        } else {
          if (v.reduce !== 'sum') return `logical '${name}' is assumed as two partial decompositions, one of them ${v.reduce}`;
          for (let i = 0; i < v.n - 1; i++) chunks.push(src.sym(`${name}[${e}]#${i}/${v.n}'`));
          chunks.push(alg.sub(alg.mul(value, alg.constant(v.divisor)), alg.sum(chunks)));
        }
        chunks.forEach((c, i) => syms.chunks.set(`${L}|${gk}|${e}|${i}`, c));
      }
      vals[e] = value as S;
    }
    syms.logical.set(L, vals);
    return undefined;
  }

  /**
   * The logical values (the stage's tensor, and expanded inputs), from the input logical
   * tensors' symbols. A tensor the stage does not take as input is computed from its producers, unless `constants` holds
   * every element of it (then it is those constants: a logical op reading another output of a
   * split than the parallel side reads need not pull in the whole graph behind it).
   */
  private logicalEvaluator<S>(ctx: BuildContext<S>, logicalSyms: ReadonlyMap<number, S[]>, constants?: Constants): (x: number) => Dense<S> {
    const lg = this.plan.logical;
    const { src, alg, here } = ctx;
    const lvals = new Map<number, Dense<S>>();
    for (const [L, v] of logicalSyms) lvals.set(L, { shape: lg.shapes[L] ?? [], data: v });
    const evalLogical = (x: number): Dense<S> => {
      const hit = lvals.get(x);
      if (hit !== undefined) return hit;
      const known = constants?.get(x);
      const shape = lg.shapes[x] ?? [];
      if (known !== undefined && known.size === numel(shape)) {
        const v = { shape, data: Array.from({ length: known.size }, (_, e) => alg.constant(known.get(e) as string)) };
        lvals.set(x, v);
        return v;
      }
      const op = lg.producer[x] as number;
      if (op < 0) {
        // A contract input the parallel side does not read in this stage: fresh symbols (a pinned element its value).
        const pinned = this.plan.pins?.get(x);
        const v = { shape, data: Array.from({ length: numel(shape) }, (_, e) => { const p = pinned?.get(e); return p === undefined ? src.sym(`${lg.tensors.name(x)}[${e}]`, lg.domains[x]) : alg.constant(String(p)); }) };
        lvals.set(x, v);
        return v;
      }
      ctx.logicalOps++;
      const ins = [...lg.ops.opInputs(op)].map(evalLogical);
      here.what = `logical op '${lg.ops.ids.name(op)}'`;
      // Only the output asked for: an op may skip the others (a LayerNorm backward's grad_x
      // when the stage is its weight gradient); one asked for later runs the op again, its
      // shared terms memoized. Only computed outputs are kept.
      const outIds = lg.ops.opOutputs(op);
      const want = outIds.length > 1 ? [...outIds].map((t) => t === x) : undefined;
      const outs = registry.get(lg.ops.kind[op] as number).apply(alg, ins, lg.attrs[op] as Attrs, want);
      outIds.forEach((t, k) => {
        if (want?.[k] !== false) lvals.set(t, outs[k] as Dense<S>);
      });
      return lvals.get(x) as Dense<S>;
    };
    return evalLogical;
  }

  /** Parallel values: the inputs from the symbols, then each tensor's producer on demand (`evalPar(rank, tensor)`). */
  private parallelValues<S>(ctx: BuildContext<S>, inputs: ReadonlyMap<string, LineageNF>, syms: InputSymbols<S>, seen: ReadonlySet<string>): (r: number, t: number) => Dense<S> {
    const plan = this.plan;
    const lg = plan.logical;
    const { alg, here } = ctx;
    const pvals = new Map<string, Dense<S>>();
    for (const [key, nf] of inputs) {
      const [r, t] = key.split(':').map(Number) as [number, number];
      const shape = plan.view(r).shapes[t] ?? [];
      const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
      const sym = syms.logical.get(nf.logical) as S[];
      const complete = nf.value.n === 1 && nf.value.divisor === 1;
      const gk = groupKey(nf.value);
      pvals.set(key, {
        shape,
        data: Array.from({ length: numel(shape) }, (_, f) => {
          const e = idx(f);
          return complete ? (sym[e] as S) : (syms.chunks.get(`${nf.logical}|${gk}|${e}|${nf.value.idx}`) as S);
        }),
      });
    }
    const evalPar = (r: number, t: number): Dense<S> => {
      const key = `${r}:${t}`;
      const hit = pvals.get(key);
      if (hit !== undefined) return hit;
      const pr = this.prod.get(key);
      if (pr === undefined) throw new Error(`rank ${r} tensor '${this.tensorName(r, t)}' has no producer and no lineage`);
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      ctx.parallelOps++;
      if (pr.op >= 0) {
        const ins = [...p.ops.opInputs(pr.op)].map((x) => evalPar(r, x));
        here.what = `rank ${r} op '${p.ops.ids.name(pr.op)}'`;
        here.rank = r;
        // Only the outputs the stage's closure reaches (as on the logical side).
        const outIds = p.ops.opOutputs(pr.op);
        const want = outIds.length > 1 ? [...outIds].map((x) => x === t || seen.has(`${r}:${x}`)) : undefined;
        const outs = registry.get(p.ops.kind[pr.op] as number).apply(alg, ins, plan.view(r).attrs[pr.op] as Attrs, want);
        outIds.forEach((x, k) => {
          if (want?.[k] !== false) pvals.set(`${r}:${x}`, outs[k] as Dense<S>);
        });
      } else {
        const c = this.instance(pr.inst);
        if (c === undefined) throw new Error('missing collective');
        const ins = [...c.group].map((m, i) => ((c.inputs[i] as number) >= 0 ? evalPar(m, c.inputs[i] as number) : undefined));
        const outs = registry.get(c.kind).collective?.applyGroup(alg, ins, c.attrs, c.group) ?? [];
        c.group.forEach((m, i) => {
          const o = c.outputs[i] as number;
          const v = outs[i];
          if (o >= 0 && v !== undefined) pvals.set(`${m}:${o}`, v);
        });
      }
      return pvals.get(key) as Dense<S>;
    };
    return evalPar;
  }

  /**
   * The equalities: complete claims element by element; replicas of one addend with each
   * other; the combination of each partial group with the logical value; and the
   * requirements the ops declared.
   */
  private equalities<S>(ctx: BuildContext<S>, evalPar: (r: number, t: number) => Dense<S>, target: Dense<S>, chunkTerms: ReadonlyMap<string, S>): StageBuild<S> {
    const { stage, combine, reqs, alg } = ctx;
    const pairs: Pair<S>[] = [];
    const lshape = this.plan.logical.shapes[stage.logical] ?? [];
    const partial = new Map<string, Map<number, { v: S; rank: number }>>();
    for (const o of stage.obligations) {
      const v = evalPar(o.rank, o.tensor);
      const idx = logicalIndexer(o.nf, lshape);
      const complete = o.nf.value.n === 1 && o.nf.value.divisor === 1;
      const tname = this.tensorName(o.rank, o.tensor);
      v.data.forEach((term, f) => {
        const e = idx(f);
        if (complete) {
          pairs.push({ par: term, log: target.data[e] as S, rank: o.rank, what: `rank ${o.rank} '${tname}' element ${e}` });
          return;
        }
        const gk = `${groupKey(o.nf.value)}|${e}`;
        let m = partial.get(gk);
        if (m === undefined) partial.set(gk, (m = new Map()));
        const prev = m.get(o.nf.value.idx);
        if (prev === undefined) m.set(o.nf.value.idx, { v: term, rank: o.rank });
        else pairs.push({ par: term, log: prev.v, rank: o.rank, what: `rank ${o.rank} '${tname}': replica of addend ${o.nf.value.idx} of element ${e}` });
      });
    }
    for (const [gk, m] of partial) {
      const [n, reduce, divisor, split, e] = gk.split('|') as [string, string, string, string, string];
      const chunks: S[] = [];
      let rank = -1;
      for (let i = 0; i < Number(n); i++) {
        const c = m.get(i);
        const v = c?.v ?? chunkTerms.get(`${stage.logical}|${n}|${reduce}|${divisor}|${split}|${e}|${i}`);
        if (v === undefined) return { pairs: [], logicalOps: ctx.logicalOps, parallelOps: ctx.parallelOps, unsupported: `element ${e}: addend ${i} of ${n} is computed by no rank in this stage` };
        if (c !== undefined && rank < 0) rank = c.rank;
        chunks.push(v);
      }
      pairs.push({ par: combine(reduce, Number(divisor), chunks), log: target.data[Number(e)] as S, rank, what: `element ${e}: the ${reduce} of ${n} addends${split === '' ? '' : ` of split '${split}'`}` });
    }
    for (const q of reqs) pairs.push({ par: q.cond, log: alg.one, rank: q.rank, what: q.what });
    return { pairs, logicalOps: ctx.logicalOps, parallelOps: ctx.parallelOps };
  }
}

/** Where an in-thread proof stops (a performance.now() time) and the reason it then gives. */
export interface Stop {
  readonly at: number;
  readonly reason: string;
}

/** The default decision procedure: the exact normal form, with syntactic side conditions. */
export class Prover {
  private readonly builder: StageBuilder;
  constructor(
    plan: LoadedPlan,
    private readonly budget = DEFAULT_TERM_BUDGET,
    prod?: ProducerLookup,
  ) {
    this.builder = new StageBuilder(plan, prod);
  }

  /** The current proof's stop (see `prove`). */
  private stopAt = Infinity;

  /**
   * `witnessed`: the numeric run already shows this stage's tensor differing, so a lazy
   * difference is final (the witness is the evidence) and the eager retry is skipped.
   * `stop`: a performance.now() time and the reason to give past it; the normal form checks the
   * clock as it works, so an in-thread proof (no worker to stop) still ends "unknown" on time.
   */
  prove(stage: Stage, witnessed = false, stop?: Stop, constants?: Constants): StageResult {
    const t0 = performance.now();
    this.stopAt = stop?.at ?? Infinity;
    try {
      // Ids first: when an input that is an integer tensor (a categorical variable) is a
      // function of the other inputs, its free symbol is independent of them, so the stage's
      // ids range over the product of their values (Megatron's vocab-parallel target, its range
      // masks and the labels: 2 · 2 · 32 · 32 joint values per token instead of 32) and the
      // stage differs anyway. Defined by its logical op first, the retry that follows a
      // difference is tried before it, not after (docs/engine.md, "Inputs defined by their
      // logical ops"): an exact proof either way; when it does not prove, the usual order.
      const defined = witnessed ? undefined : this.idsDefinedFirst(stage, constants);
      if (defined !== undefined) {
        const r = this.expanded(stage, t0, constants, defined);
        if (r !== undefined) return r;
      }
      return this.proveWithin(stage, t0, true, witnessed, constants, false, defined !== undefined);
    } catch (e) {
      if (e instanceof TermStopError) return result(stage, 'unknown', stop?.reason ?? 'stopped', stage.obligations.map((o) => o.rank), { logicalOps: 0, parallelOps: 0 }, 0, t0);
      if (e instanceof TermUnsupportedError) return result(stage, 'unknown', `outside the exact normal form: ${e.message}`, stage.obligations.map((o) => o.rank), { logicalOps: 0, parallelOps: 0 }, 0, t0);
      if (!(e instanceof TermBudgetError)) throw e;
      const ranks = stage.obligations.map((o) => o.rank);
      return result(stage, 'unknown', `the stage is too large for the exact normal form (${e.message}): give lineage to intermediate tensors (activation gradients, for instance) so that stages are cut shorter`, ranks, { logicalOps: 0, parallelOps: 0 }, 0, t0);
    }
  }

  /**
   * First with lazy sums (cheap when both sides sum the same addends, in any grouping); where
   * that leaves a difference or an open side condition, again with every sum expanded, so
   * the answer is the eager normal form's whenever the lazy one does not prove.
   */
  /** The inputs `definedInputs` gives when one of them is an integer tensor (has a value domain), else undefined. */
  private idsDefinedFirst(stage: Stage, constants?: Constants): Set<number> | undefined {
    const d = this.builder.definedInputs(stage, undefined, constants);
    const lg = this.builder.plan.logical;
    return [...d].some((L) => lg.domains[L] !== undefined) ? d : undefined;
  }

  /** `expandTried`: the retry with defined inputs was made already (ids first) and is not made again. */
  private proveWithin(stage: Stage, t0: number, lazy: boolean, witnessed: boolean, constants?: Constants, expand = false, expandTried = false): StageResult {
    const T = new TermStore(this.budget, lazy);
    T.stopAt = this.stopAt;
    let logicalConds = new Set<TermId>();
    const b = this.builder.build(stage, {
      alg: termAlgebra(T),
      sym: (name, values) => (values === undefined ? T.sym(name) : T.categorical(name, values)),
      parallelStart: () => {
        logicalConds = new Set(T.conditions);
      },
    }, constants, expand);
    const ranks = stage.obligations.map((o) => o.rank);
    if (b.tooLarge !== undefined) return result(stage, 'unknown', `the stage is too large: ${b.tooLarge}`, ranks, b, T.size, t0);
    if (b.unsupported !== undefined) return result(stage, 'unknown', `unsupported input relation: ${b.unsupported}`, ranks, b, T.size, t0);
    const failing = new Set<number>();
    let firstResidual: string | undefined;
    for (const p of b.pairs) {
      if (T.equal(p.par, p.log)) continue;
      failing.add(p.rank);
      firstResidual ??= `${p.what}: parallel - logical = ${T.render(T.sub(p.par, p.log), 300)}`;
    }
    const eager = (): StageResult | undefined => (lazy && T.lazySums > 0 ? this.proveWithin(stage, t0, false, witnessed, constants, expand, expandTried) : undefined);
    if (failing.size > 0) {
      const r = (witnessed ? undefined : eager()) ?? result(stage, 'differs', firstResidual, [...failing], b, T.size, t0);
      return r.status === 'proved' || witnessed || expand || !lazy || expandTried ? r : (this.expanded(stage, t0, constants) ?? r);
    }
    for (const c of T.conditions) {
      if (logicalConds.has(c) || T.provablyNonzero(c)) continue;
      if ([...logicalConds].some((l) => T.equal(l, c) || T.equal(l, T.neg(c)))) continue;
      return eager() ?? result(stage, 'unknown', `side condition not discharged: ${T.render(c, 200)} != 0 (the parallel plan divides by it, the logical one does not)`, ranks, b, T.size, t0);
    }
    return result(stage, 'proved', undefined, [], b, T.size, t0);
  }

  /**
   * The stage again with input logical tensors defined by their logical ops
   * (`StageBuilder.definedInputs`): the proof when that one proves, else undefined (the first
   * answer stands; past the work budget too). Sound either way: a logical tensor's value is its
   * logical definition on every run (docs/engine.md, "Inputs defined by their logical ops").
   */
  private expanded(stage: Stage, t0: number, constants?: Constants, defined?: ReadonlySet<number>): StageResult | undefined {
    if ((defined ?? this.builder.definedInputs(stage, undefined, constants)).size === 0) return undefined;
    try {
      const r = this.proveWithin(stage, t0, true, false, constants, true);
      return r.status === 'proved' ? r : undefined;
    } catch (e) {
      if (e instanceof TermBudgetError) return undefined;
      throw e;
    }
  }
}

/** One element pair whose normal forms differ, with both sides' terms (planproof explain). */
export interface ElementDifference {
  readonly what: string;
  readonly rank: number;
  readonly parallel: string;
  readonly logical: string;
  readonly difference: string;
}

/**
 * The first `max` element pairs of a stage whose eager normal forms differ, each side's term
 * rendered: what `planproof explain` shows a person next to the witness values. Builds the
 * stage as the prover does (same builder, every sum expanded); a stage past the term budget
 * throws TermBudgetError, as proving it would.
 */
export function elementDifferences(plan: LoadedPlan, stage: Stage, max = 4, budget = DEFAULT_TERM_BUDGET): ElementDifference[] | { why: string } {
  const T = new TermStore(budget, false);
  const b = new StageBuilder(plan).build(stage, { alg: termAlgebra(T), sym: (name, values) => (values === undefined ? T.sym(name) : T.categorical(name, values)) });
  if (b.tooLarge !== undefined) return { why: `the stage is too large: ${b.tooLarge}` };
  if (b.unsupported !== undefined) return { why: `unsupported input relation: ${b.unsupported}` };
  const out: ElementDifference[] = [];
  for (const p of b.pairs) {
    if (out.length >= max) break;
    if (T.equal(p.par, p.log)) continue;
    out.push({ what: p.what, rank: p.rank, parallel: T.render(p.par, 300), logical: T.render(p.log, 300), difference: T.render(T.sub(p.par, p.log), 300) });
  }
  return out;
}

export function result(stage: Stage, status: StageStatus, reason: string | undefined, failingRanks: number[], b: { logicalOps: number; parallelOps: number }, terms: number, t0: number): StageResult {
  const r: StageResult = { stage, status, failingRanks: [...new Set(failingRanks)].sort((a, c) => a - c), logicalOps: b.logicalOps, parallelOps: b.parallelOps, terms, ms: performance.now() - t0 };
  return reason === undefined ? r : { ...r, reason };
}
