/**
 * Numeric evaluation of a whole plan: both graphs run in Float64 on the same random contract
 * inputs, and every lineage claim on every rank is compared with the logical value. A
 * difference far beyond rounding is a concrete witness that the plan is not equivalent
 * (end to end, from real inputs); agreement proves nothing and is never reported as
 * "verified".
 */
import type { Dense } from '../../ops/algebra.js';
import { numel } from '../../ops/types.js';
import { floatAlgebra } from '../../sdfg/algebras.js';
import { executeLogical, executeParallel, logicalIndexer, logicalOrder, type LogicalValues, type RankValues } from '../../sdfg/execute.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { evalLineage, groupKey, type LineageNF } from '../../lineage/model.js';
import { drawInputs, neededDomains, signedAddend } from './domains.js';

/** A difference this far beyond rounding (relative) is a witness. */
const WITNESS_TOLERANCE = 1e-6;
/** Plans larger than this (total elements of logical tensors) are not evaluated numerically. */
const MAX_NUMERIC_ELEMENTS = 20_000_000;
/** ... and the ranks' tensors, all ranks together (about 0.5 GB of values). */
const MAX_NUMERIC_PARALLEL_ELEMENTS = 60_000_000;

export interface Mismatch {
  readonly logical: string;
  /** Row-major coordinates in the logical tensor. */
  readonly element: number[];
  readonly rank: number;
  readonly tensor: string;
  readonly kind: 'complete' | 'partial' | 'replica';
  /** The value the parallel plan holds (for partials: the combined addends). */
  readonly parallel: number;
  /** The logical value (for 'replica': another rank's copy of the same addend). */
  readonly expected: number;
  /** Position of the logical tensor in topological order (inputs first). */
  readonly order: number;
  /**
   * A witness certified by interval arithmetic (stages/engines/interval.ts): the enclosures of the two
   * values, disjoint, when the difference is under the numeric tolerance (the two numbers above
   * are their midpoints and may print alike).
   */
  readonly certified?: { readonly parallel: readonly [number, number]; readonly logical: readonly [number, number] };
  /**
   * A witness certified by interval arithmetic where the rank computes no value: an op the
   * tensor is computed from is outside its domain at these inputs (PyTorch raises), while the
   * logical graph is within its own; what is wrong, in words (`parallel` is then NaN).
   */
  readonly domain?: string;
}

export interface NumericReport {
  readonly evaluated: boolean;
  readonly reason?: string;
  readonly seed: number;
  readonly claimsChecked: number;
  /** Sorted by topological order, then rank; at most a few per logical tensor. */
  readonly mismatches: Mismatch[];
  /** Logical tensors with at least one mismatch, in topological order. */
  readonly failingTensors: string[];
  /** How the inputs were drawn, when not 'uniform' (so the diagnosis sees the witness's values again). */
  readonly draw?: InputDraw;
}

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `tol` above the default (log draws) also ignores a NaN on one side only: over twelve decades
 * a value near zero may round to either sign before a square root.
 */
export function differs(a: number, b: number, tol = WITNESS_TOLERANCE): boolean {
  if (Number.isNaN(a) !== Number.isNaN(b)) return tol === WITNESS_TOLERANCE;
  return Math.abs(a - b) > tol * Math.max(1, Math.abs(a), Math.abs(b));
}

/** Total elements of the plan's logical tensors, or a reason when past MAX_NUMERIC_ELEMENTS. */
function tooLargeForNumeric(plan: LoadedPlan): string | undefined {
  const lg = plan.logical;
  let total = 0;
  for (let t = 0; t < lg.tensors.size; t++) total += numel(lg.shapes[t] ?? []);
  if (total > MAX_NUMERIC_ELEMENTS) return `the logical tensors hold ${total} elements; numeric evaluation is limited to ${MAX_NUMERIC_ELEMENTS}`;
  // Every rank's tensors too: a part of 512 ranks (a dp all-reduce's members) holds 512 copies.
  let par = 0;
  for (let r = 0; r < plan.mesh.size; r++) {
    const shapes = plan.view(r).shapes;
    for (const sh of shapes) par += numel(sh ?? []);
    if (par > MAX_NUMERIC_PARALLEL_ELEMENTS) return `the ranks' tensors hold more than ${MAX_NUMERIC_PARALLEL_ELEMENTS} elements; numeric evaluation is limited to that`;
  }
  return undefined;
}

/** How float contract inputs are drawn: uniform on (-1, 1), or log-uniform magnitudes with a random sign. */
export type InputDraw = 'uniform' | 'log';

export interface BothValues {
  readonly logical: LogicalValues<number>;
  readonly parallel: RankValues<number>;
  readonly lineageOf: (r: number, t: number) => LineageNF | undefined;
  readonly rnd: () => number;
}

/**
 * Both graphs in Float64 on random contract inputs (partial inputs split into random addends).
 * `zero`: real contract inputs set to 0 instead (a witness search that looks at one rank's
 * inputs alone; 0 is a value like any other).
 */
export function evaluateBoth(plan: LoadedPlan, seed = 1, draw: InputDraw = 'uniform', zero?: ReadonlySet<number>): BothValues {
  const lg = plan.logical;
  const rnd = mulberry32(seed);
  // 'log': magnitudes spread over twelve decades (a random sign, 10^-12 .. 1), so that some
  // elements meet a constant of their own size: an epsilon changed from 1e-8 to 1e-3 moves an
  // Adam update only where the second moment is tiny (design principle 1: a small search).
  const uniform = draw === 'log' ? (): number => (rnd() < 0.5 ? -1 : 1) * 10 ** (-12 * rnd()) : (): number => rnd() * 2 - 1;
  // Each input within its domain (stages/witness/domains.ts): no witness from a negative second moment.
  const need = neededDomains(plan);
  const inputs = drawInputs(plan, uniform, rnd, zero, (x) => x) as LogicalValues<number>;
  const signed = (t: number): boolean => need[t] === 'nonneg' || need[t] === 'positive';
  const logical = executeLogical(plan, floatAlgebra, inputs);

  // Addends of partial inputs: drawn once per (logical tensor, group), shared by replicas.
  const addends = new Map<string, number[][]>();
  const addendsOf = (nf: LineageNF): number[][] => {
    const v = nf.value;
    const key = `${nf.logical}|${groupKey(v)}`;
    let a = addends.get(key);
    if (a === undefined) {
      const lv = logical[nf.logical] as Dense<number>;
      a = Array.from({ length: v.n }, () => new Array<number>(lv.data.length));
      for (let e = 0; e < lv.data.length; e++) {
        const x = lv.data[e] as number;
        if (v.reduce === 'sum') {
          let rest = x * v.divisor;
          for (let i = 0; i < v.n - 1; i++) {
            const r = signedAddend(need[nf.logical], x * v.divisor, v.n, uniform);
            (a[i] as number[])[e] = r;
            rest -= r;
          }
          (a[v.n - 1] as number[])[e] = signed(nf.logical) ? Math.max(0, rest) : rest;
        } else {
          const holder = e % v.n;
          for (let i = 0; i < v.n; i++) (a[i] as number[])[e] = i === holder ? x : v.reduce === 'max' ? (signed(nf.logical) ? x * rnd() : x - 0.5 - rnd()) : x + 0.5 + rnd();
        }
      }
      addends.set(key, a);
    }
    return a;
  };
  const lineageOf = (r: number, t: number): LineageNF | undefined => {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    if (spec === undefined) return undefined;
    return evalLineage(spec, plan.mesh, r, lg.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
  };
  const parallel = executeParallel(plan, floatAlgebra, (r, t) => {
    const nf = lineageOf(r, t) as LineageNF;
    const shape = plan.view(r).shapes[t] ?? [];
    const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
    const src = nf.value.n === 1 && nf.value.divisor === 1 ? (logical[nf.logical] as Dense<number>).data : (addendsOf(nf)[nf.value.idx] as number[]);
    return { shape, data: Array.from({ length: numel(shape) }, (_, f) => src[idx(f)] as number) };
  });
  return { logical, parallel, lineageOf, rnd };
}

/**
 * `skip(rank, tensor)`: claims left out of the comparison (inferred hints: a hint that does not
 * hold is dropped, never a witness).
 */
export function numericCheck(plan: LoadedPlan, seed = 1, skip?: (rank: number, tensor: number) => boolean, draw: InputDraw = 'uniform', zero?: ReadonlySet<number>): NumericReport {
  const tooLarge = tooLargeForNumeric(plan);
  if (tooLarge !== undefined) return { evaluated: false, reason: tooLarge, seed, claimsChecked: 0, mismatches: [], failingTensors: [] };
  const lg = plan.logical;
  const { logical, parallel, lineageOf } = evaluateBoth(plan, seed, draw, zero);
  // Magnitudes over twelve decades make cancellation likelier: a log draw's witness must be a
  // hundred times further beyond rounding.
  const tol = draw === 'log' ? 100 * WITNESS_TOLERANCE : WITNESS_TOLERANCE;

  // Topological position of each logical tensor.
  const order = new Int32Array(lg.tensors.size).fill(-1);
  logicalOrder(plan).forEach((op, i) => {
    for (const t of lg.ops.opOutputs(op)) order[t] = i;
  });
  const mismatches: Mismatch[] = [];
  const coords = (t: number, flat: number): number[] => {
    const shape = lg.shapes[t] ?? [];
    const out = new Array<number>(shape.length);
    for (let d = shape.length - 1; d >= 0; d--) {
      out[d] = flat % (shape[d] as number);
      flat = Math.floor(flat / (shape[d] as number));
    }
    return out;
  };
  const perTensor = new Map<number, number>();
  const note = (m: Omit<Mismatch, 'order' | 'element'> & { lt: number; flat: number }): void => {
    const n = perTensor.get(m.lt) ?? 0;
    if (n >= 4) return;
    perTensor.set(m.lt, n + 1);
    mismatches.push({ logical: m.logical, element: coords(m.lt, m.flat), rank: m.rank, tensor: m.tensor, kind: m.kind, parallel: m.parallel, expected: m.expected, order: order[m.lt] as number });
  };
  // Partial groups: per (logical, n, reduce, divisor) and element, the addend per chunk index.
  const groups = new Map<string, { nf: LineageNF; chunks: Map<number, Map<number, { v: number; rank: number; tensor: string }>> }>();
  let claimsChecked = 0;
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const nf = lineageOf(r, t);
      const val = (parallel[r] as (Dense<number> | undefined)[])[t];
      if (nf === undefined || val === undefined || skip?.(r, t) === true) continue;
      claimsChecked++;
      const lv = logical[nf.logical] as Dense<number>;
      const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
      const name = lg.tensors.name(nf.logical);
      const v = nf.value;
      if (v.n === 1 && v.divisor === 1) {
        val.data.forEach((x, f) => {
          const g = idx(f);
          if (differs(x, lv.data[g] as number, tol)) note({ logical: name, lt: nf.logical, flat: g, rank: r, tensor: p.tensors.name(t), kind: 'complete', parallel: x, expected: lv.data[g] as number });
        });
        continue;
      }
      const key = `${nf.logical}|${groupKey(v)}`;
      let grp = groups.get(key);
      if (grp === undefined) groups.set(key, (grp = { nf, chunks: new Map() }));
      val.data.forEach((x, f) => {
        const g = idx(f);
        let byIdx = (grp as { chunks: Map<number, Map<number, { v: number; rank: number; tensor: string }>> }).chunks.get(g);
        if (byIdx === undefined) (grp as { chunks: Map<number, Map<number, { v: number; rank: number; tensor: string }>> }).chunks.set(g, (byIdx = new Map()));
        const prev = byIdx.get(v.idx);
        if (prev === undefined) byIdx.set(v.idx, { v: x, rank: r, tensor: p.tensors.name(t) });
        else if (differs(prev.v, x, tol)) note({ logical: name, lt: nf.logical, flat: g, rank: r, tensor: p.tensors.name(t), kind: 'replica', parallel: x, expected: prev.v });
      });
    }
  }
  for (const { nf, chunks } of groups.values()) {
    const lv = logical[nf.logical] as Dense<number>;
    const v = nf.value;
    for (const [g, byIdx] of chunks) {
      if (byIdx.size < v.n) continue;
      const xs = [...byIdx.values()].map((e) => e.v);
      const combined = v.reduce === 'sum' ? xs.reduce((a, b) => a + b, 0) / v.divisor : v.reduce === 'max' ? xs.reduce((a, b) => Math.max(a, b), -Infinity) : xs.reduce((a, b) => Math.min(a, b), Infinity);
      if (differs(combined, lv.data[g] as number, tol)) {
        const first = [...byIdx.values()][0] as { rank: number; tensor: string };
        note({ logical: lg.tensors.name(nf.logical), lt: nf.logical, flat: g, rank: first.rank, tensor: first.tensor, kind: 'partial', parallel: combined, expected: lv.data[g] as number });
      }
    }
  }
  mismatches.sort((a, b) => a.order - b.order || a.rank - b.rank);
  const failingTensors = [...new Set(mismatches.map((m) => m.logical))];
  return { evaluated: true, seed, claimsChecked, mismatches, failingTensors, ...(draw === 'uniform' ? {} : { draw }) };
}
