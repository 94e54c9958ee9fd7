/**
 * Lineage checks.
 *  Tiling: for every logical tensor that has lineage, every element is held by some rank;
 *  at every element, each partial group present (same n, reduce, divisor) is complete: all
 *  chunks 0..n-1 are held. Claims with the same value map at the same element are replicas;
 *  complete and partial claims may overlap (a reduction's input and output both map to the
 *  logical tensor). A tensor holding one element twice is rejected when its index map is read.
 *  Outputs: every element of every contract output has a complete value on some rank.
 *
 * Cost: claims are enumerated once per distinct value of the mesh coordinates they depend on
 * (a replicated weight on 8192 ranks is one claim), and coverage is computed on the grid of
 * range boundaries (coordinate compression), never per element.
 */
import type { Shape } from '../ops/types.js';
import { jpath, type IssueSink } from '../plans/errors.js';
import type { Mesh } from '../plans/mesh.js';
import type { Contract, LogicalGraph, Program, RankView } from '../plans/model.js';
import { specVars } from '../plans/programs.js';
import { ExprError, exprIssue } from '../plans/expr.js';
import { evalLineage, groupKey, type LineageNF, regionStr, valueStr } from './model.js';
import { LineageError, type LineageSpec } from '../plans/model.js';

export interface Claim {
  readonly nf: LineageNF;
  /** A representative rank and how many ranks hold this same claim. */
  readonly rank: number;
  readonly holders: number;
  readonly program: number;
  readonly tensor: number;
}

export interface Coverage {
  readonly logical: number;
  /** Distinct claims and total (rank, tensor) holders. */
  readonly claims: number;
  readonly holders: number;
  /** Every element has a complete value on some rank. */
  readonly complete: boolean;
  /** Some element is held only as partial addends. */
  readonly partialOnly: boolean;
  /** Some claim is a partial addend (e.g. a gradient before its all-reduce). */
  readonly hasPartials: boolean;
}

export const MAX_CELLS = 1 << 22;

/** Evaluates every lineage spec once per distinct coordinate tuple it depends on. */
export function collectClaims(programs: Program[], rankProgram: Int32Array, mesh: Mesh, logical: LogicalGraph, view: (r: number) => RankView, sink: IssueSink): Claim[] {
  const claims: Claim[] = [];
  for (const p of programs) {
    const ranks = [...p.ranks].filter((r) => rankProgram[r] === p.index);
    p.lineage.forEach((spec, t) => {
      if (spec !== undefined) claimsOfSpec(p, t, spec, ranks, mesh, logical, view, sink, claims);
    });
  }
  return claims;
}

/** The mesh axes (-1: `rank`) one tensor's claims depend on: its lineage and its shape. */
export function claimAxes(p: Program, t: number, spec: LineageSpec, mesh: Mesh): number[] {
  const axes = new Set<number>(spec.axes);
  for (const d of p.shapeSpecs[t] ?? []) for (const v of specVars(d)) axes.add(v === 'rank' ? -1 : mesh.axisIndex(v));
  return [...axes].sort((a, b) => a - b);
}

/** Past this many distinct claims of one tensor, the per-rank check stops once the sink is full. */
const MANY_CLAIMS = 4096;

/** The claims of one tensor of one program, once per distinct coordinates (the per-rank path). */
export function claimsOfSpec(p: Program, t: number, spec: LineageSpec, ranks: Iterable<number>, mesh: Mesh, logical: LogicalGraph, view: (r: number) => RankView, sink: IssueSink, claims: Claim[]): void {
  const ax = claimAxes(p, t, spec, mesh);
  // The same stop before the loop below, when the coordinates can be that many.
  if (sink.full && ax.reduce((q, a) => q * (a < 0 ? mesh.size : (mesh.sizes[a] as number)), 1) > MANY_CLAIMS) return;
  // Distinct coordinates as one number (mixed radix; meshes have at most 2^20 ranks), not a
  // joined string: this loop runs once per rank.
  const reps = new Map<number, { rank: number; n: number }>();
  for (const r of ranks) {
    let key = 0;
    for (const a of ax) key = a < 0 ? key * mesh.size + r : key * (mesh.sizes[a] as number) + mesh.coord(r, a);
    const e = reps.get(key);
    if (e === undefined) reps.set(key, { rank: r, n: 1 });
    else e.n++;
  }
  for (const { rank, n } of reps.values()) {
    // A plan of this many distinct claims that already has every issue the sink shows is
    // refused: checking the rest would cost a LineageError per rank (a 2^20-rank plan ran past
    // 120 s), so it stops and says so (IssueSink.full).
    if (reps.size > MANY_CLAIMS && sink.full) return;
    const lshape = logical.shapes[spec.logical] as Shape;
    try {
      const nf = evalLineage(spec, mesh, rank, lshape, view(rank).shapes[t] as Shape);
      claims.push({ nf, rank, holders: n, program: p.index, tensor: t });
    } catch (e) {
      if (e instanceof ExprError) {
        exprIssue(sink, e, spec.path, rank);
        continue;
      }
      if (!(e instanceof LineageError)) throw e;
      sink.add(spec.path, `${e.message} (logical '${logical.tensors.name(spec.logical)}' is ${shapeText(lshape)})`, `rank ${rank} tensor '${p.tensors.name(t)}'`);
    }
  }
}

function shapeText(s: Shape): string {
  return `[${s.join(', ')}]`;
}

/** Checks tiling of every logical tensor with lineage and the output contract. */
export function checkLineage(claims: Claim[], programs: Program[], logical: LogicalGraph, contract: Contract, sink: IssueSink): Coverage[] {
  const byLogical = new Map<number, Claim[]>();
  for (const c of claims) {
    let l = byLogical.get(c.nf.logical);
    if (l === undefined) byLogical.set(c.nf.logical, (l = []));
    l.push(c);
  }
  const coverage: Coverage[] = [];
  for (const [lt, list] of [...byLogical].sort((a, b) => a[0] - b[0])) {
    const c = checkTiling(lt, list, programs, logical, sink);
    if (c !== undefined) coverage.push(c);
  }
  checkContract(coverage, logical, contract, sink);
  return coverage;
}

/** Tiling of one logical tensor by its claims (all of them, from every program). */
export function checkTiling(lt: number, list: readonly Claim[], programs: Program[], logical: LogicalGraph, sink: IssueSink): Coverage | undefined {
  // No claim (every one refused, or a check stopped early): the refusals are the issues.
  if (list.length === 0) return undefined;
  const label = (c: Claim): string => {
    const p = programs[c.program] as Program;
    return `rank ${c.rank}${c.holders > 1 ? ` (+${c.holders - 1} more)` : ''} '${p.tensors.name(c.tensor)}'`;
  };
  const specPath = (c: Claim): string => {
    const p = programs[c.program] as Program;
    return p.lineage[c.tensor]?.path ?? (p.tensors.paths[c.tensor] as string);
  };
  {
    const name = logical.tensors.name(lt);
    const where = `logical tensor '${name}'`;
    const shape = logical.shapes[lt] as Shape;
    // Distinct claims (replicas collapse).
    const distinct = new Map<string, Claim>();
    let holders = 0;
    for (const c of list) {
      holders += c.holders;
      const v = c.nf.value;
      const key = `${c.nf.ranges.map((r) => r.join(',')).join(';')}|${v.idx}|${groupKey(v)}`;
      if (!distinct.has(key)) distinct.set(key, c);
    }
    const cs = [...distinct.values()];
    const bounds = shape.map((full, d) => {
      const s = new Set<number>([0, full]);
      for (const c of cs) for (const x of c.nf.ranges[d] ?? []) s.add(x);
      return Int32Array.from([...s].sort((a, b) => a - b));
    });
    const sizes = bounds.map((b) => b.length - 1);
    const cells = sizes.reduce((p, s) => p * s, 1);
    if (cells > MAX_CELLS) {
      sink.add(specPath(cs[0] as Claim), `lineage is split into ${cells} distinct blocks; more than ${MAX_CELLS} cannot be checked`, where);
      return undefined;
    }
    const complete = new Uint8Array(cells);
    // Partial groups by (n, reduce, divisor, split); per group, the claims of each chunk index.
    const groups = new Map<string, { n: number; v: LineageNF['value']; byIdx: Map<number, Claim[]> }>();
    const strides = sizes.map((_, d) => sizes.slice(d + 1).reduce((p, s) => p * s, 1));
    const cellsOf = (c: Claim): number[] => {
      let acc = [0];
      c.nf.ranges.forEach((r, d) => {
        const b = bounds[d] as Int32Array;
        const idxs: number[] = [];
        for (let i = 0; i < r.length; i += 2) {
          const lo = lowerBound(b, r[i] as number);
          const hi = lowerBound(b, r[i + 1] as number);
          for (let k = lo; k < hi; k++) idxs.push(k);
        }
        const next: number[] = [];
        for (const a of acc) for (const k of idxs) next.push(a + k * (strides[d] as number));
        acc = next;
      });
      return acc;
    };
    for (const c of cs) {
      const v = c.nf.value;
      if (v.n === 1 && v.divisor === 1) {
        for (const x of cellsOf(c)) complete[x] = 1;
        continue;
      }
      const gk = groupKey(v);
      let g = groups.get(gk);
      if (g === undefined) groups.set(gk, (g = { n: v.n, v, byIdx: new Map() }));
      let l = g.byIdx.get(v.idx);
      if (l === undefined) g.byIdx.set(v.idx, (l = []));
      l.push(c);
    }
    const cellRegion = (x: number): string => {
      const parts = sizes.map((_, d) => {
        const k = Math.floor(x / (strides[d] as number)) % (sizes[d] as number);
        const b = bounds[d] as Int32Array;
        return `${b[k]}:${b[k + 1]}`;
      });
      return `[${parts.join(', ')}]`;
    };
    const groupText = (v: LineageNF['value']): string => `${v.reduce} of ${v.n}${v.divisor === 1 ? '' : `, divided by ${v.divisor}`}${v.split === '' ? '' : `, split '${v.split}'`}`;
    let reported = 0;
    const incomplete = (g: { n: number; v: LineageNF['value']; byIdx: Map<number, Claim[]> }, x: number): void => {
      const present = [...g.byIdx].filter(([, l]) => l.some((c) => cellsOf(c).includes(x))).map(([i]) => i);
      const have = new Set(present);
      const missing: number[] = [];
      for (let i = 0; i < g.n && missing.length < 8; i++) if (!have.has(i)) missing.push(i);
      const hc = (g.byIdx.get(present[0] as number) as Claim[])[0] as Claim;
      sink.add(
        specPath(hc),
        `elements ${cellRegion(x)} are held as partial addends (${groupText(g.v)}) but chunk(s) ${missing.join(', ')}${g.n - have.size > missing.length ? ', ...' : ''} are held by no rank, e.g. ${label(hc)} holds chunk ${hc.nf.value.idx}: the partial group is incomplete`,
        where,
      );
      reported++;
    };
    // Distinct chunks per cell, counted with a stamp array: memory O(cells), work O(sum of
    // claim cells), whatever n is.
    const partialHeld = new Uint8Array(cells);
    for (const g of groups.values()) {
      if (reported >= 3) break;
      if (g.byIdx.size < g.n) {
        // Fewer distinct chunks than n exist at all: incomplete wherever the group is held.
        const first = cellsOf(([...g.byIdx.values()][0] as Claim[])[0] as Claim)[0] as number;
        incomplete(g, first);
        continue;
      }
      const count = new Int32Array(cells);
      const stamp = new Int32Array(cells).fill(-1);
      for (const [idx, l] of g.byIdx) {
        for (const c of l) {
          for (const x of cellsOf(c)) {
            if (stamp[x] === idx) continue;
            stamp[x] = idx;
            count[x] = (count[x] as number) + 1;
          }
        }
      }
      for (let x = 0; x < cells && reported < 3; x++) {
        const k = count[x] as number;
        if (k === 0) continue;
        partialHeld[x] = 1;
        if (k < g.n) incomplete(g, x);
      }
    }
    let partialOnly = false;
    let allComplete = true;
    for (let x = 0; x < cells && reported < 3; x++) {
      if (complete[x] === 1) continue;
      allComplete = false;
      if (partialHeld[x] === 1) {
        partialOnly = true;
        continue;
      }
      sink.add(specPath(cs[0] as Claim), `elements ${cellRegion(x)} are held by no rank: the lineage does not tile the tensor (held: ${cs.slice(0, 4).map((c) => `${label(c)} ${regionStr(c.nf.ranges)} ${valueStr(c.nf.value)}`).join('; ')})`, where);
      reported++;
    }
    return { logical: lt, claims: cs.length, holders, complete: allComplete && reported === 0, partialOnly, hasPartials: groups.size > 0 };
  }
}

/** Every element of every contract output has a complete value on some rank. */
export function checkContract(coverage: readonly Coverage[], logical: LogicalGraph, contract: Contract, sink: IssueSink): void {
  const cov = new Map(coverage.map((c) => [c.logical, c]));
  contract.outputs.forEach((t, k) => {
    if (t < 0) return;
    const c = cov.get(t);
    const where = `contract output '${logical.tensors.name(t)}'`;
    if (c === undefined) sink.add(jpath('$.contract.outputs', k), 'has no lineage: no rank is known to hold it, so the plan cannot be compared with the logical iteration', where);
    else if (!c.complete && c.partialOnly) sink.add(jpath('$.contract.outputs', k), 'some elements are held only as partial values on every rank: the iteration must end with a complete value on some rank (a reduction is missing?)', where);
  });
}

export function lowerBound(a: Int32Array, v: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if ((a[m] as number) < v) lo = m + 1;
    else hi = m;
  }
  return lo;
}
