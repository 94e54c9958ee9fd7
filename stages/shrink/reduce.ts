/**
 * Shape reduction by lanes (docs/engine.md, "Shape reduction").
 *
 * Every dim of every logical and parallel tensor is a node. Nodes are joined into classes
 * through each op's reduction labels (OpDef.dims: equal labels within one op application are
 * one class), through lineage (dim d of a parallel tensor holds ranges of dim d of its
 * logical tensor) and through collectives (members' inputs and outputs, by the collective's
 * labels). A class takes the strongest role of its members ('fixed' > 'contracted' > 'batch').
 *
 * Only 'batch' classes shrink, by a factor f that divides every size of every member and
 * every lineage bound along it (on every rank). Then the full plan is f independent copies
 * ("lanes") of the reduced plan: element b*f + j of a class dim belongs to lane j, every op
 * is SIMD along the class (output b*f + j reads only inputs b*f + j, by one rule for every
 * index), and every lineage slice starts and ends on a multiple of f, so it maps lanes to
 * lanes. Hence the full plan is equivalent iff the reduced plan is, and a witness of the
 * reduced plan, copied into every lane, is a witness of the full plan.
 *
 * 'contracted' and 'fixed' classes keep their full size, with the reason: a sum over a
 * shrunk dim is not a proof for the full dim in general (docs/engine.md has a counterexample
 * to the ">= 2 elements" rule), and a 'fixed' size enters values or attributes.
 *
 * The reduced plan is written as an ordinary plan file (sizes and lineage bounds divided by
 * f; template expressions become `(e)/f`, exact division), loaded with every check of the
 * loader, and compared against the full plan's shapes and lineage before it is used.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { loadPartObject, loadPlanObject } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import type { RawDimIndex, RawInt, RawPlan, RawRange } from '../../plans/raw.js';
import { PlanError } from '../../plans/errors.js';
import { registry } from '../../ops/registry.js';
import type { Attrs, DimLabel, DimRole, DimSig, OpDef, Shape } from '../../ops/types.js';
import { evalLineage } from '../../lineage/model.js';

const ROLE_RANK: Record<DimRole, number> = { batch: 0, contracted: 1, fixed: 2 };

export interface ReducedClass {
  /** A member that names the class: a logical tensor dim where there is one. */
  readonly dim: string;
  readonly role: DimRole;
  /** Size of the named member at full shapes and after reduction. */
  readonly full: number;
  readonly reduced: number;
  /** Lane factor: every member's size is divided by it. */
  readonly factor: number;
  /** Why the class keeps its full size (factor 1). */
  readonly kept?: string;
  /** Members: logical dims, then parallel dims. */
  readonly members: number;
}

/** A class's named member: its program (-1: the logical graph), tensor and dim. */
interface ClassAt {
  readonly program: number;
  readonly tensor: string;
  readonly dim: number;
}
/** Where each class's named member is (for composing rounds); kept off the report's objects. */
const classAt = new WeakMap<ReducedClass, ClassAt>();

export interface ReductionAnalysis {
  readonly classes: ReducedClass[];
  /** factorOfLogical[t][d]; 1 where the dim keeps its size. */
  readonly logicalFactors: number[][];
  /** keptReason[t][d] for logical dims of size > 1 that keep their size. */
  readonly logicalKept: (string | undefined)[][];
  /** factor per program, per tensor, per dim. */
  readonly programFactors: number[][][];
  /** True when some class shrinks. */
  readonly reduces: boolean;
  /** Per logical tensor, per dim: class id and role (per-component windows, stages/shrink/components.ts). */
  readonly logicalClass?: number[][];
  readonly logicalRole?: DimRole[][];
  /**
   * Value-indexed dims that may be cut to a prefix for witnesses only (prefixRaw): per logical
   * tensor and per program tensor, per dim; and the logical integer tensors whose values index them.
   */
  readonly logicalPrefix?: boolean[][];
  readonly programPrefix?: boolean[][][];
  readonly prefixValues?: number[];
  /**
   * Zero-extension cuts (analyzeReduction with zeroCut; zeroCutPlan): per logical tensor and per
   * program tensor, per dim, the factor a contracted class is cut by (1: not cut).
   */
  readonly zeroLogical?: number[][];
  readonly zeroProgram?: number[][][];
}

interface Reduction {
  readonly analysis: ReductionAnalysis;
  /** The reduced plan as an ordinary plan file, loaded and checked. */
  readonly raw: RawPlan;
  readonly text: string;
  readonly plan: LoadedPlan;
}

/** Raised when the reduced plan does not check out; the caller proves at full shapes. */
export class ReductionError extends Error {}

class UnionFind {
  readonly parent: Int32Array;
  constructor(n: number) {
    this.parent = Int32Array.from({ length: n }, (_, i) => i);
  }
  find(x: number): number {
    const p = this.parent;
    while (p[x] !== x) {
      const g = p[p[x] as number] as number;
      p[x] = g;
      x = g;
    }
    return x;
  }
  union(a: number, b: number): void {
    const ra = this.find(a);
    const rb = this.find(b);
    if (ra !== rb) this.parent[Math.max(ra, rb)] = Math.min(ra, rb);
  }
}

function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Ranks of each program (programs are templates shared by ranks). */
function ranksOf(plan: LoadedPlan): number[][] {
  const out: number[][] = plan.programs.map(() => []);
  for (let r = 0; r < plan.mesh.size; r++) (out[plan.rankProgram[r] as number] as number[]).push(r);
  return out;
}

/** Ranks whose views cover every distinct shape and attribute set of a program. */
function viewRanks(p: Program, ranks: readonly number[]): readonly number[] {
  return p.coordDependent ? ranks : ranks.slice(0, 1);
}

/**
 * `lanes: false` reads only the ops' `dims` (slice semantics: a batch dim may be cut to any
 * range), for rank-component windows and prefix cuts; lane labels (OpDef.lanes) join dims that
 * agree by index mod f, not by range, and are for lane reduction only.
 */
export function analyzeReduction(plan: LoadedPlan, opts: { readonly lanes?: boolean; readonly zeroCut?: boolean } = {}): ReductionAnalysis {
  const sigOf = (def: OpDef, shapes: readonly Shape[], attrs: Attrs): DimSig => (opts.lanes !== false && def.lanes !== undefined ? def.lanes(shapes, attrs) : def.dims(shapes, attrs));
  const lg = plan.logical;
  // Node numbering: logical dims first, then each program's tensors' dims.
  const lBase: number[] = [];
  let n = 0;
  for (let t = 0; t < lg.tensors.size; t++) {
    lBase.push(n);
    n += (lg.shapes[t] as Shape).length;
  }
  const nLogical = n;
  const pBase: number[][] = plan.programs.map((p) =>
    p.shapeSpecs.map((s) => {
      const b = n;
      n += s.length;
      return b;
    }),
  );
  const uf = new UnionFind(n);
  const role = new Uint8Array(n);
  const why: (string | undefined)[] = new Array<string | undefined>(n);
  // Prefix cuts (prefixRaw): a node is blocked by any constraint other than being the axis an
  // op with OpDef.prefixAttrs indexes by integer values; vIdx marks such axes.
  const block = new Uint8Array(n);
  const vIdx = new Uint8Array(n);
  // Zero-extension cuts (zeroCutPlan): a node is blocked by an op that does not keep zeros
  // along it (OpDef.zeroTails), or by being a dim of an integer tensor.
  const zblock = new Uint8Array(n);
  const valueTensors: [number, number][] = []; // (logical tensor, node of the axis its values index)
  const mark = (node: number, r: DimRole, reason: string): void => {
    if (ROLE_RANK[r] > (role[node] as number)) {
      role[node] = ROLE_RANK[r];
      why[node] = reason;
    }
  };
  /** One op application: nodes of its operands' dims, joined by label. */
  const apply = (sig: DimSig, ins: readonly (readonly number[] | undefined)[], outs: readonly (readonly number[] | undefined)[], what: string, prefixOk = false, zero?: OpDef['zeroTails']): Map<string, number> => {
    const byLabel = new Map<string, number>();
    const nodesOf = new Map<string, number[]>();
    const valueLabels = new Set([...Object.values(sig.inputValues ?? {}), ...Object.values(sig.outputValues ?? {})].map((l) => l.label));
    const constrain = (node: number, label: string): void => {
      if (prefixOk && valueLabels.has(label)) vIdx[node] = 1;
      else block[node] = 1;
    };
    const visit = (labels: readonly DimLabel[] | undefined, nodes: readonly number[] | undefined): void => {
      if (labels === undefined || nodes === undefined) return;
      labels.forEach((l, d) => {
        const node = nodes[d];
        if (node === undefined) return;
        const seen = byLabel.get(l.label);
        if (seen === undefined) byLabel.set(l.label, node);
        else uf.union(seen, node);
        if (opts.zeroCut === true) {
          const ns = nodesOf.get(l.label);
          if (ns === undefined) nodesOf.set(l.label, [node]);
          else ns.push(node);
        }
        if (l.role !== 'batch') {
          mark(node, l.role, `${l.role} in ${what}${l.why === undefined ? '' : `: ${l.why}`}`);
          constrain(node, l.label);
        }
      });
    };
    ins.forEach((nodes, i) => visit(sig.inputs[i], nodes));
    outs.forEach((nodes, i) => visit(sig.outputs[i], nodes));
    if (opts.zeroCut === true) {
      for (const [label, nodes] of nodesOf) {
        const carries = ins.map((_, i) => sig.inputs[i]?.some((l) => l.label === label) === true);
        if (zero === undefined || !zero(carries)) for (const node of nodes) zblock[node] = 1;
      }
    }
    // An integer tensor's values index an axis: never shrink it (the labels say so; enforce it).
    for (const l of [...Object.values(sig.inputValues ?? {}), ...Object.values(sig.outputValues ?? {})]) {
      const node = byLabel.get(l.label);
      if (node !== undefined) {
        mark(node, l.role === 'batch' ? 'fixed' : l.role, `indexed by integer values in ${what}`);
        constrain(node, l.label);
      }
    }
    return byLabel;
  };
  const fixAll = (nodes: readonly (readonly number[] | undefined)[], reason: string): void => {
    for (const ns of nodes) {
      for (const node of ns ?? []) {
        mark(node, 'fixed', reason);
        block[node] = 1;
        zblock[node] = 1;
      }
    }
  };
  const lNodes = (t: number): number[] => (lg.shapes[t] as Shape).map((_, d) => (lBase[t] as number) + d);
  const pNodes = (p: number, t: number): number[] => (plan.programs[p]?.shapeSpecs[t] ?? []).map((_, d) => (pBase[p]?.[t] as number) + d);

  // Logical ops.
  for (let op = 0; op < lg.ops.size; op++) {
    const def = registry.get(lg.ops.kind[op] as number);
    const ins = [...lg.ops.opInputs(op)];
    const outs = [...lg.ops.opOutputs(op)];
    const what = `op '${lg.ops.ids.name(op)}' (${def.name})`;
    try {
      // Ops whose attributes spell sizes give lane labels (OpDef.lanes); reducedRaw rewrites those attributes.
      const sig = sigOf(def, ins.map((t) => lg.shapes[t] as Shape), lg.attrs[op] ?? {});
      const labels = apply(sig, ins.map(lNodes), outs.map(lNodes), what, def.prefixAttrs !== undefined, def.zeroTails);
      // The integer inputs whose values index an axis (their domain is cut with it).
      for (const [k, l] of Object.entries(sig.inputValues ?? {})) {
        const node = labels.get(l.label);
        if (node !== undefined) valueTensors.push([ins[Number(k)] as number, node]);
      }
    } catch (e) {
      fixAll([...ins.map(lNodes), ...outs.map(lNodes)], `${what} has no reduction labels here (${e instanceof Error ? e.message : String(e)})`);
    }
  }

  // Parallel ops, once per distinct view of each program.
  const progRanks = ranksOf(plan);
  plan.programs.forEach((p, pi) => {
    const sites = new Set(p.collectiveSites);
    for (const r of viewRanks(p, progRanks[pi] ?? [])) {
      const v = plan.view(r);
      for (let op = 0; op < p.ops.size; op++) {
        if (sites.has(op)) continue;
        const def = registry.get(p.ops.kind[op] as number);
        const ins = [...p.ops.opInputs(op)];
        const outs = [...p.ops.opOutputs(op)];
        const what = `parallel op '${p.ops.ids.name(op)}' (${def.name}) of program '${p.name}'`;
        const inN = ins.map((t) => pNodes(pi, t));
        const outN = outs.map((t) => pNodes(pi, t));
        try {
          apply(sigOf(def, ins.map((t) => v.shapes[t] as Shape), v.attrs[op] ?? {}), inN, outN, what, def.prefixAttrs !== undefined, def.zeroTails);
        } catch (e) {
          fixAll([...inN, ...outN], `${what} has no reduction labels here (${e instanceof Error ? e.message : String(e)})`);
        }
      }
    }
  });

  // Collectives: every member's input and output under the collective's labels.
  for (const c of plan.collectives) {
    const def = registry.get(c.kind);
    const what = `collective '${c.id}' (${def.name})`;
    const ins: (number[] | undefined)[] = [];
    const outs: (number[] | undefined)[] = [];
    let shape: Shape | undefined;
    c.group.forEach((r, i) => {
      const pi = plan.rankProgram[r] as number;
      const ti = c.inputs[i] as number;
      const to = c.outputs[i] as number;
      if (ti >= 0) {
        ins.push(pNodes(pi, ti));
        shape ??= plan.view(r).shapes[ti];
      }
      if (to >= 0) outs.push(pNodes(pi, to));
    });
    try {
      if (shape === undefined) throw new Error('no member passes an input');
      const sig = def.dims([shape], c.attrs);
      // All inputs share the input labels, all outputs the output labels (members agree in shape).
      apply({ inputs: ins.map(() => sig.inputs[0] as readonly DimLabel[]), outputs: outs.map(() => sig.outputs[0] as readonly DimLabel[]) }, ins, outs, what, false, def.zeroTails);
    } catch (e) {
      fixAll([...ins, ...outs], `${what} has no reduction labels here (${e instanceof Error ? e.message : String(e)})`);
    }
  }

  // Lineage: dim d of a parallel tensor holds ranges of dim d of its logical tensor.
  plan.programs.forEach((p, pi) => {
    p.lineage.forEach((spec, t) => {
      if (spec === undefined) return;
      const ln = lNodes(spec.logical);
      const pn = pNodes(pi, t);
      if (ln.length !== pn.length) {
        fixAll([ln, pn], `lineage of '${p.tensors.name(t)}' in program '${p.name}' changes the number of dims`);
        return;
      }
      ln.forEach((node, d) => uf.union(node, pn[d] as number));
    });
  });

  // Fold roles per class.
  const cRole = new Uint8Array(n);
  const cWhy: (string | undefined)[] = new Array<string | undefined>(n);
  for (let x = 0; x < n; x++) {
    const r = uf.find(x);
    if ((role[x] as number) > (cRole[r] as number) || (cWhy[r] === undefined && why[x] !== undefined && role[x] === cRole[r])) {
      cRole[r] = role[x] as number;
      cWhy[r] = why[x];
    }
  }

  // Lane factor per batch class: gcd of all member sizes and lineage bounds.
  const g = new Float64Array(n); // 0 = no size seen yet
  const add = (node: number, v: number): void => {
    const r = uf.find(node);
    g[r] = gcd(g[r] as number, v);
  };
  for (let t = 0; t < lg.tensors.size; t++) (lg.shapes[t] as Shape).forEach((s, d) => add((lBase[t] as number) + d, s));
  plan.programs.forEach((p, pi) => {
    const ranks = progRanks[pi] ?? [];
    for (const r of viewRanks(p, ranks)) {
      const v = plan.view(r);
      v.shapes.forEach((s, t) => s.forEach((x, d) => add((pBase[pi]?.[t] as number) + d, x)));
    }
    // Lineage bounds, on every rank, for tensors with a dim in a batch class.
    p.lineage.forEach((spec, t) => {
      if (spec === undefined) return;
      const pn = pNodes(pi, t);
      // (Contracted classes too for zero-extension cuts; their lane factor is never used.)
      if (!pn.some((node) => cRole[uf.find(node)] === 0 || (opts.zeroCut === true && cRole[uf.find(node)] === 1))) return;
      for (const r of ranks) {
        const nf = evalLineage(spec, plan.mesh, r, lg.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
        nf.ranges.forEach((bounds, d) => {
          for (const b of bounds) add(pn[d] as number, b);
        });
      }
    });
  });

  const factorOf = (node: number): number => {
    const r = uf.find(node);
    if (cRole[r] !== 0) return 1;
    const f = g[r] as number;
    return f > 1 ? f : 1;
  };
  const keptOf = (node: number): string | undefined => {
    const r = uf.find(node);
    if (cRole[r] !== 0) return cWhy[r] ?? 'not SIMD';
    return (g[r] as number) <= 1 ? 'sizes and lineage bounds along it have no common factor > 1' : undefined;
  };

  const logicalFactors = lg.shapes.map((s, t) => s.map((_, d) => factorOf((lBase[t] as number) + d)));
  const logicalKept = lg.shapes.map((s, t) => s.map((x, d) => (x > 1 ? keptOf((lBase[t] as number) + d) : undefined)));
  const programFactors = plan.programs.map((p, pi) => p.shapeSpecs.map((s, t) => s.map((_, d) => factorOf((pBase[pi]?.[t] as number) + d))));

  // One entry per class, named by its first member.
  const classes: ReducedClass[] = [];
  const seen = new Map<number, number>();
  const nameOf = (node: number): { dim: string; full: number; at?: ClassAt } => {
    if (node < nLogical) {
      let t = 0;
      while (t + 1 < lBase.length && (lBase[t + 1] as number) <= node) t++;
      const d = node - (lBase[t] as number);
      return { dim: `'${lg.tensors.name(t)}' dim ${d}`, full: (lg.shapes[t] as Shape)[d] as number, at: { program: -1, tensor: lg.tensors.name(t), dim: d } };
    }
    for (const [pi, bases] of pBase.entries()) {
      for (const [t, b] of bases.entries()) {
        const p = plan.programs[pi] as Program;
        const len = (p.shapeSpecs[t] ?? []).length;
        if (node >= b && node < b + len) {
          const r = (progRanks[pi] ?? [0])[0] as number;
          return { dim: `'${p.tensors.name(t)}' dim ${node - b} (program '${p.name}')`, full: (plan.view(r).shapes[t] ?? [])[node - b] ?? 0, at: { program: pi, tensor: p.tensors.name(t), dim: node - b } };
        }
      }
    }
    return { dim: `#${node}`, full: 0 };
  };
  const members = new Map<number, number>();
  for (let x = 0; x < n; x++) {
    const r = uf.find(x);
    members.set(r, (members.get(r) ?? 0) + 1);
  }
  for (let x = 0; x < n; x++) {
    const r = uf.find(x);
    if (seen.has(r)) continue;
    seen.set(r, classes.length);
    const { dim, full, at } = nameOf(x);
    if (full <= 1) continue;
    const f = factorOf(x);
    const kept = keptOf(x);
    const cls: ReducedClass = { dim, role: (['batch', 'contracted', 'fixed'] as const)[cRole[r] as number] as DimRole, full, reduced: full / f, factor: f, ...(kept === undefined ? {} : { kept }), members: members.get(r) ?? 0 };
    if (at !== undefined) classAt.set(cls, at);
    classes.push(cls);
  }
  const roleName = ['batch', 'contracted', 'fixed'] as const;
  const logicalClass = lg.shapes.map((s, t) => s.map((_, d) => uf.find((lBase[t] as number) + d)));
  const logicalRole = logicalClass.map((cs) => cs.map((c) => roleName[cRole[c] as number] as DimRole));

  // Prefix classes: value-indexed, blocked by nothing else, every lineage range along them whole.
  const cBlock = new Uint8Array(n);
  const cIdx = new Uint8Array(n);
  for (let x = 0; x < n; x++) {
    const r = uf.find(x);
    if (block[x]) cBlock[r] = 1;
    if (vIdx[x]) cIdx[r] = 1;
  }
  const isPrefix = (node: number): boolean => {
    const r = uf.find(node);
    return cIdx[r] === 1 && cBlock[r] === 0;
  };
  plan.programs.forEach((p, pi) => {
    p.lineage.forEach((spec, t) => {
      if (spec === undefined) return;
      const pn = pNodes(pi, t);
      if (!pn.some(isPrefix)) return;
      for (const r of progRanks[pi] ?? []) {
        const full = lg.shapes[spec.logical] ?? [];
        const nf = evalLineage(spec, plan.mesh, r, full, plan.view(r).shapes[t] ?? []);
        nf.ranges.forEach((bounds, d) => {
          if (isPrefix(pn[d] as number) && bounds.some((b) => b !== 0 && b !== full[d])) cBlock[uf.find(pn[d] as number)] = 1;
        });
      }
    });
  });
  const logicalPrefix = lg.shapes.map((s, t) => s.map((_, d) => isPrefix((lBase[t] as number) + d)));
  const programPrefix = plan.programs.map((p, pi) => p.shapeSpecs.map((s, t) => s.map((_, d) => isPrefix((pBase[pi]?.[t] as number) + d))));
  const prefixValues = [...new Set(valueTensors.filter(([, node]) => isPrefix(node)).map(([t]) => t))];
  let zero: Pick<ReductionAnalysis, 'zeroLogical' | 'zeroProgram'> = {};
  if (opts.zeroCut === true) {
    // Integer tensors: their values may not include 0.
    for (let t = 0; t < lg.tensors.size; t++) if (lg.domains[t] !== undefined) for (const node of lNodes(t)) zblock[node] = 1;
    const cZero = new Uint8Array(n);
    for (let x = 0; x < n; x++) if (zblock[x]) cZero[uf.find(x)] = 1;
    const byRoot = new Map<number, number>();
    const zf = (node: number): number => {
      const r = uf.find(node);
      const gg = g[r] as number;
      if (cRole[r] !== 1 || cZero[r] === 1 || !(gg >= 2)) return 1;
      let f = byRoot.get(r);
      if (f === undefined) {
        // Keep the smallest block of at least two positions: f = g / m, m the least divisor >= 2
        // (once per class: g may be a large prime).
        let m = 2;
        while (gg % m !== 0 && m * m <= gg) m++;
        f = gg % m === 0 ? gg / m : 1;
        byRoot.set(r, f);
      }
      return f;
    };
    zero = {
      zeroLogical: lg.shapes.map((s, t) => s.map((_, d) => zf((lBase[t] as number) + d))),
      zeroProgram: plan.programs.map((p, pi) => p.shapeSpecs.map((s, t) => s.map((_, d) => zf((pBase[pi]?.[t] as number) + d)))),
    };
  }
  return { classes, logicalFactors, logicalKept, programFactors, reduces: classes.some((c) => c.factor > 1), logicalClass, logicalRole, logicalPrefix, programPrefix, prefixValues, ...zero };
}

function divInt(x: RawInt, f: number, where: string): RawInt {
  if (f === 1) return x;
  if (typeof x === 'number') {
    if (x % f !== 0) throw new ReductionError(`${where}: ${x} is not a multiple of ${f}`);
    return x / f;
  }
  return { expr: `(${x.expr})/${f}` };
}

function divIndex(ix: RawDimIndex, f: number, where: string): RawDimIndex {
  if (ix === '*' || f === 1) return ix;
  const range = (r: RawRange): RawRange => [divInt(r[0], f, where), divInt(r[1], f, where)];
  if (Array.isArray(ix[0])) return (ix as RawRange[]).map(range);
  return range(ix as RawRange);
}

/** The reduced plan file: sizes and lineage bounds of reduced dims divided by their factor. */
export function reducedRaw(raw: RawPlan, plan: LoadedPlan, a: ReductionAnalysis): RawPlan {
  const out = structuredClone(raw);
  out.name = `${raw.name ?? plan.name} (reduced)`;
  out.description = `${raw.description ?? ''}${raw.description ? ' ' : ''}[Shape-reduced by planproof: batch (SIMD) dims divided by their lane factor; see docs/engine.md, "Shape reduction".]`;
  out.logical.tensors.forEach((t, i) => {
    const id = plan.logical.tensors.id(t.id);
    if (id < 0) throw new ReductionError(`logical tensor '${t.id}' not found in the loaded plan`);
    const fs = a.logicalFactors[id] as number[];
    t.shape = t.shape.map((s, d) => divInt(s, fs[d] ?? 1, `$.logical.tensors[${i}].shape[${d}]`) as number);
  });
  // Attributes that spell sizes (reshape, expand targets) at the reduced sizes of their outputs.
  const relabel = (o: { op: string; outputs: readonly string[]; attrs?: Record<string, unknown> }, factors: (name: string) => readonly number[], where: string): void => {
    const id = registry.id(o.op);
    const def = id < 0 ? undefined : registry.get(id);
    if (def?.laneAttrs === undefined || o.attrs === undefined) return;
    const fs = o.outputs.map(factors);
    if (fs.every((f) => f.every((x) => x === 1))) return;
    try {
      o.attrs = def.laneAttrs(o.attrs as Attrs, fs);
    } catch (e) {
      throw new ReductionError(`${where}: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
  out.logical.ops.forEach((o, i) => relabel(o, (name) => a.logicalFactors[plan.logical.tensors.id(name)] ?? [], `$.logical.ops[${i}].attrs`));
  out.parallel.programs.forEach((rp, pi) => {
    const p = plan.programs[pi];
    if (p === undefined) throw new ReductionError(`program ${pi} not found in the loaded plan`);
    rp.ops.forEach((o, oi) => relabel(o, (name) => a.programFactors[pi]?.[p.tensors.id(name)] ?? [], `$.parallel.programs[${pi}].ops[${oi}].attrs`));
    for (const [ti, t] of (rp.tensors ?? []).entries()) {
      const id = p.tensors.id(t.id);
      if (id < 0) throw new ReductionError(`tensor '${t.id}' of program '${p.name}' not found in the loaded plan`);
      const fs = a.programFactors[pi]?.[id] ?? [];
      const where = `$.parallel.programs[${pi}].tensors[${ti}]`;
      t.shape = t.shape.map((s, d) => divInt(s, fs[d] ?? 1, `${where}.shape[${d}]`));
      const l = t.lineage;
      if (l !== undefined && 'index' in l && l.index !== undefined) {
        // Lineage dims are the logical tensor's dims, which share the parallel dim's class.
        const lid = plan.logical.tensors.id(l.logical);
        const lf = a.logicalFactors[lid] ?? [];
        l.index = l.index.map((ix, d) => divIndex(ix, lf[d] ?? 1, `${where}.lineage.index[${d}]`));
      }
    }
  });
  return out;
}

/**
 * Reduces a plan: the analysis, the reduced plan file, and the reduced plan loaded with the
 * loader's checks. Then every logical shape, every rank's parallel shapes and every lineage
 * claim of the reduced plan are checked to be exactly the full plan's divided by the factors.
 * Returns undefined when nothing shrinks. Throws ReductionError when the check fails.
 * `subset`: the plan is some ranks of another (stages/shrink/part.ts), loaded without the tiling
 * check, and so is its reduction.
 */
export function reducePlan(plan: LoadedPlan, raw: RawPlan, subset = false): Reduction | undefined {
  let cur = reduceOnce(plan, raw, subset);
  if (cur === undefined) return undefined;
  // Rounds: a reduction can free dims the previous round kept. Megatron merges [s, b] into
  // [s·b] with s outer: round 1 divides b and s·b by b (b's lanes), so b is 1; then s is the
  // merge's only dim and shares its lanes (round 2). Each round is a reduction of the plan
  // before it (loaded and checked against it), so the composition is one: the full plan is
  // equivalent iff the last is, and a witness lifts through every round (docs/engine.md).
  for (let round = 1; round < MAX_ROUNDS; round++) {
    const next = reduceOnce(cur.plan, cur.raw, subset);
    if (next === undefined) break;
    cur = { analysis: composeAnalyses(plan, cur.plan, cur.analysis, next.analysis), raw: next.raw, text: next.text, plan: next.plan };
  }
  return cur;
}

/** Rounds of reduction at most (each divides some size by at least 2). */
const MAX_ROUNDS = 8;

/**
 * The analysis of two reductions in a row, against the first's plan: factors multiply (the
 * second's are looked up by tensor name in the middle plan); the classes are the first's
 * reduced ones, then the second's reduced ones with their sizes at full shapes, then the
 * second's kept ones.
 */
function composeAnalyses(full: LoadedPlan, mid: LoadedPlan, a: ReductionAnalysis, b: ReductionAnalysis): ReductionAnalysis {
  const lf = full.logical.shapes.map((s, t) => {
    const m = mid.logical.tensors.id(full.logical.tensors.name(t));
    return s.map((_, d) => (a.logicalFactors[t]?.[d] ?? 1) * (b.logicalFactors[m]?.[d] ?? 1));
  });
  const pf = full.programs.map((p, pi) => {
    const mp = mid.programs[pi] as Program;
    return p.shapeSpecs.map((s, t) => {
      const m = mp.tensors.id(p.tensors.name(t));
      return s.map((_, d) => (a.programFactors[pi]?.[t]?.[d] ?? 1) * (b.programFactors[pi]?.[m]?.[d] ?? 1));
    });
  });
  const earlier = (c: ReducedClass): number => {
    const at = classAt.get(c);
    if (at === undefined) return 1;
    const { program, tensor, dim } = at;
    if (program < 0) return a.logicalFactors[full.logical.tensors.id(tensor)]?.[dim] ?? 1;
    const p = full.programs[program];
    return p === undefined ? 1 : (a.programFactors[program]?.[p.tensors.id(tensor)]?.[dim] ?? 1);
  };
  const again = b.classes.filter((c) => c.factor > 1).map((c) => {
    const e = earlier(c);
    const x: ReducedClass = { ...c, full: c.full * e, factor: c.factor * e };
    const at = classAt.get(c);
    if (at !== undefined) classAt.set(x, at);
    return x;
  });
  const classes = [...a.classes.filter((c) => c.factor > 1 && !again.some((x) => x.dim === c.dim)), ...again, ...b.classes.filter((c) => c.factor === 1)];
  const kept = full.logical.shapes.map((_, t) => b.logicalKept[mid.logical.tensors.id(full.logical.tensors.name(t))] ?? []);
  return { classes, logicalFactors: lf, logicalKept: kept, programFactors: pf, reduces: true };
}

function reduceOnce(plan: LoadedPlan, raw: RawPlan, subset: boolean): Reduction | undefined {
  const analysis = analyzeReduction(plan);
  if (!analysis.reduces) return undefined;
  const rr = reducedRaw(raw, plan, analysis);
  const text = JSON.stringify(rr);
  let red: LoadedPlan;
  try {
    red = (subset ? loadPartObject : loadPlanObject)(`${plan.file} (reduced)`, JSON.parse(text));
  } catch (e) {
    const msg = e instanceof PlanError ? e.issues.slice(0, 3).map((i) => `${i.path}: ${i.message}`).join('; ') : e instanceof Error ? e.message : String(e);
    throw new ReductionError(`the reduced plan does not load: ${msg}`);
  }
  checkReduced(plan, red, analysis);
  return { analysis, raw: rr, text, plan: red };
}

function checkReduced(full: LoadedPlan, red: LoadedPlan, a: ReductionAnalysis): void {
  const lg = full.logical;
  if (red.logical.tensors.size !== lg.tensors.size || red.programs.length !== full.programs.length || red.mesh.size !== full.mesh.size) throw new ReductionError('the reduced plan has other tensors, programs or ranks');
  for (let t = 0; t < lg.tensors.size; t++) {
    const fs = a.logicalFactors[t] ?? [];
    const want = (lg.shapes[t] as Shape).map((s, d) => s / (fs[d] ?? 1));
    const got = red.logical.shapes[red.logical.tensors.id(lg.tensors.name(t))] ?? [];
    if (want.join() !== got.join()) throw new ReductionError(`logical '${lg.tensors.name(t)}': reduced shape [${got.join(', ')}], expected [${want.join(', ')}]`);
  }
  const progRanks = ranksOf(full);
  full.programs.forEach((p, pi) => {
    const rp = red.programs[pi] as Program;
    for (const r of progRanks[pi] ?? []) {
      if (red.rankProgram[r] !== pi) throw new ReductionError(`rank ${r} runs another program in the reduced plan`);
      const fv = full.view(r);
      const rv = red.view(r);
      for (let t = 0; t < p.tensors.size; t++) {
        const fs = a.programFactors[pi]?.[t] ?? [];
        const rt = rp.tensors.id(p.tensors.name(t));
        const want = (fv.shapes[t] ?? []).map((s, d) => s / (fs[d] ?? 1));
        if (want.join() !== (rv.shapes[rt] ?? []).join()) throw new ReductionError(`rank ${r} '${p.tensors.name(t)}': reduced shape [${(rv.shapes[rt] ?? []).join(', ')}], expected [${want.join(', ')}]`);
        const spec = p.lineage[t];
        const rspec = rp.lineage[rt];
        if (spec === undefined || rspec === undefined) {
          if (spec !== rspec) throw new ReductionError(`'${p.tensors.name(t)}': lineage differs in the reduced plan`);
          continue;
        }
        if (!p.coordDependent && spec.axes.length === 0 && r !== (progRanks[pi] ?? [])[0]) continue;
        const lf = a.logicalFactors[spec.logical] ?? [];
        const fn = evalLineage(spec, full.mesh, r, lg.shapes[spec.logical] ?? [], fv.shapes[t] ?? []);
        const rn = evalLineage(rspec, red.mesh, r, red.logical.shapes[rspec.logical] ?? [], rv.shapes[rt] ?? []);
        const wantR = fn.ranges.map((b, d) => b.map((x) => x / (lf[d] ?? 1)).join(',')).join(';');
        const gotR = rn.ranges.map((b) => b.join(',')).join(';');
        if (wantR !== gotR || JSON.stringify(fn.value) !== JSON.stringify(rn.value)) throw new ReductionError(`rank ${r} '${p.tensors.name(t)}': reduced lineage ${gotR}, expected ${wantR}`);
      }
    }
  });
}

/** Report lines: what shrank, what kept its size and why. */
export function formatReduction(a: ReductionAnalysis, limit = 12): string[] {
  const red = a.classes.filter((c) => c.factor > 1);
  const kept = a.classes.filter((c) => c.factor === 1);
  const lines = [`shape reduction: ${red.length} dim class(es) reduced, ${kept.length} kept at full size (docs/engine.md, "Shape reduction")`];
  for (const c of red.slice(0, limit)) lines.push(`  reduced ${c.dim}: ${c.full} -> ${c.reduced} (batch, lane factor ${c.factor}, ${c.members} dims)`);
  if (red.length > limit) lines.push(`  ... ${red.length - limit} more reduced`);
  for (const c of kept.slice(0, limit)) lines.push(`  kept ${c.dim} at ${c.full}: ${c.kept ?? ''}`);
  if (kept.length > limit) lines.push(`  ... ${kept.length - limit} more kept`);
  return lines;
}

/** Why a logical tensor's dims keep their size (for "not reducible" reasons). */
export function keptDims(a: ReductionAnalysis, plan: LoadedPlan, logical: number): string {
  const shape = plan.logical.shapes[logical] ?? [];
  const parts: string[] = [];
  (a.logicalKept[logical] ?? []).forEach((k, d) => {
    if (k !== undefined) parts.push(`dim ${d} (${shape[d] ?? '?'}) is ${k}`);
  });
  return parts.join('; ');
}

/**
 * A witness-only cut (docs/engine.md, "Prefix cuts for witnesses"): every prefix class (an axis
 * only indexed by integer values of ops with OpDef.prefixAttrs, SIMD everywhere else, every
 * lineage range along it whole) cut to its first `size` positions, the integer tensors whose
 * values index it restricted to [0, size), and the ops' attributes rewritten. Every input of
 * the cut plan is an input of the full plan (ids in [0, size) are in their full domain; the
 * other elements are the first `size` of each row), and on it every output of the cut plan is
 * the first `size` positions of the full output. So a difference of the cut plan is a
 * difference of the full plan; a proof of the cut plan proves nothing and must not be used.
 */
export function prefixPlan(plan: LoadedPlan, raw: RawPlan, size = 2): { raw: RawPlan; plan: LoadedPlan; cut: string[] } | undefined {
  // Slice semantics: a prefix is a range, which lane labels do not keep.
  const a = analyzeReduction(plan, { lanes: false });
  const lp = a.logicalPrefix ?? [];
  const pp = a.programPrefix ?? [];
  const lg = plan.logical;
  const cut = new Set<string>();
  lp.forEach((ds, t) => ds.forEach((x, d) => {
    if (x && ((lg.shapes[t] as Shape)[d] as number) > size) cut.add(`'${lg.tensors.name(t)}' dim ${d} ${(lg.shapes[t] as Shape)[d] as number} -> ${size}`);
  }));
  if (cut.size === 0) return undefined;
  for (const t of a.prefixValues ?? []) {
    const dom = lg.domains[t];
    for (let v = 0; v < size; v++) if (dom === undefined || !dom.includes(v)) throw new ReductionError(`the values of '${lg.tensors.name(t)}' do not include 0..${size - 1}: a prefix of its axis would read ids it never holds`);
  }
  const out = structuredClone(raw);
  out.name = `${raw.name ?? plan.name} (prefix cut)`;
  const values = new Set((a.prefixValues ?? []).map((t) => lg.tensors.name(t)));
  out.logical.tensors.forEach((t) => {
    const id = lg.tensors.id(t.id);
    t.shape = t.shape.map((s, d) => (lp[id]?.[d] === true ? Math.min(s, size) : s));
    if (values.has(t.id)) t.values = { range: [0, size] };
  });
  const touches = (o: { op: string; inputs: readonly string[]; outputs: readonly string[] }, prefixOf: (name: string) => readonly boolean[]): boolean => [...o.inputs, ...o.outputs].some((x) => prefixOf(x).some(Boolean));
  const rewrite = (o: { op: string; inputs: readonly string[]; outputs: readonly string[]; attrs?: Record<string, unknown> }, prefixOf: (name: string) => readonly boolean[]): void => {
    const id = registry.id(o.op);
    const def = id < 0 ? undefined : registry.get(id);
    if (def?.prefixAttrs !== undefined && touches(o, prefixOf)) o.attrs = def.prefixAttrs((o.attrs ?? {}) as Attrs, size);
  };
  out.logical.ops.forEach((o) => rewrite(o, (x) => lp[lg.tensors.id(x)] ?? []));
  out.parallel.programs.forEach((rp, pi) => {
    const p = plan.programs[pi] as Program;
    const prefixOf = (x: string): readonly boolean[] => pp[pi]?.[p.tensors.id(x)] ?? [];
    for (const t of rp.tensors ?? []) {
      const fs = prefixOf(t.id);
      t.shape = t.shape.map((s, d) => (fs[d] === true ? size : s));
      const l = t.lineage;
      if (l !== undefined && 'index' in l && l.index !== undefined) {
        const lf = lp[lg.tensors.id(l.logical)] ?? [];
        l.index = l.index.map((ix, d) => (lf[d] === true && ix !== '*' ? ([0, size] as RawRange) : ix));
      }
    }
    rp.ops.forEach((o) => rewrite(o, prefixOf));
  });
  let cutPlan: LoadedPlan;
  try {
    cutPlan = loadPlanObject(`${plan.file} (prefix cut)`, JSON.parse(JSON.stringify(out)));
  } catch (e) {
    const msg = e instanceof PlanError ? e.issues.slice(0, 3).map((i) => `${i.path}: ${i.message}`).join('; ') : e instanceof Error ? e.message : String(e);
    throw new ReductionError(`the prefix-cut plan does not load: ${msg}`);
  }
  // Every shape is the full one with the prefix dims cut, on every rank.
  for (let t = 0; t < lg.tensors.size; t++) {
    const want = (lg.shapes[t] as Shape).map((s, d) => (lp[t]?.[d] === true ? Math.min(s, size) : s)).join();
    if ((cutPlan.logical.shapes[cutPlan.logical.tensors.id(lg.tensors.name(t))] ?? []).join() !== want) throw new ReductionError(`logical '${lg.tensors.name(t)}' is not its prefix cut`);
  }
  for (let r = 0; r < plan.mesh.size; r++) {
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const cp = cutPlan.programs[cutPlan.rankProgram[r] as number] as Program;
    const fv = plan.view(r);
    const cv = cutPlan.view(r);
    for (let t = 0; t < p.tensors.size; t++) {
      const want = (fv.shapes[t] ?? []).map((s, d) => (pp[pi]?.[t]?.[d] === true ? size : s)).join();
      if ((cv.shapes[cp.tensors.id(p.tensors.name(t))] ?? []).join() !== want) throw new ReductionError(`rank ${r} '${p.tensors.name(t)}' is not its prefix cut`);
    }
  }
  return { raw: out, plan: cutPlan, cut: [...cut] };
}

/**
 * A witness-only cut (docs/engine.md, "Zero-extension cuts for witnesses"): every contracted
 * class whose ops all keep zeros along it (OpDef.zeroTails) is cut, in every aligned block of
 * g positions (g: the gcd of its members' sizes and lineage bounds), to the block's first m
 * (the least divisor of g >= 2): sizes and lineage bounds divided by f = g / m, as reducedRaw
 * writes them. Position q of the cut plan stands for position (q div m) * g + q mod m of the
 * full plan. An input of the cut plan, zero at every other position, is an input of the full
 * plan; on it every tensor of a cut class is zero at those other positions (each op keeps
 * zeros; a sum over the class adds only zeros from them), so every output of the cut plan is
 * the full output at the positions it stands for. A difference of the cut plan is therefore a
 * difference of the full plan. A proof of the cut plan proves nothing and must not be used.
 * `subset`: the plan is a part (stages/shrink/part.ts), loaded without the tiling check.
 */
export function zeroCutPlan(plan: LoadedPlan, raw: RawPlan, subset = true): { raw: RawPlan; plan: LoadedPlan; cut: string[] } | undefined {
  const a = analyzeReduction(plan, { lanes: false, zeroCut: true });
  const lz = a.zeroLogical ?? [];
  const pz = a.zeroProgram ?? [];
  if (!lz.some((ds) => ds.some((f) => f > 1)) && !pz.some((ts) => ts.some((ds) => ds.some((f) => f > 1)))) return undefined;
  const lg = plan.logical;
  const cut: string[] = [];
  lz.forEach((ds, t) => ds.forEach((f, d) => {
    if (f > 1) cut.push(`'${lg.tensors.name(t)}' dim ${d} ${(lg.shapes[t] as Shape)[d] as number} -> ${((lg.shapes[t] as Shape)[d] as number) / f}`);
  }));
  // reducedRaw divides sizes and bounds by these factors; nothing else of the analysis is read.
  const factors: ReductionAnalysis = { ...a, logicalFactors: lz, programFactors: pz, reduces: true };
  const out = reducedRaw(raw, plan, factors);
  out.name = `${raw.name ?? plan.name} (zero-extension cut)`;
  out.description = `${raw.description ?? ''}${raw.description ? ' ' : ''}[Cut by planproof for a witness only: contracted dims that every op keeps zeros along, cut in each aligned block; see docs/engine.md, "Zero-extension cuts for witnesses".]`;
  const text = JSON.stringify(out);
  let cutPlan: LoadedPlan;
  try {
    cutPlan = (subset ? loadPartObject : loadPlanObject)(`${plan.file} (zero-extension cut)`, JSON.parse(text));
  } catch (e) {
    const msg = e instanceof PlanError ? e.issues.slice(0, 3).map((i) => `${i.path}: ${i.message}`).join('; ') : e instanceof Error ? e.message : String(e);
    throw new ReductionError(`the zero-extension cut does not load: ${msg}`);
  }
  // Every shape and lineage bound is the full one divided by the factors, on every rank.
  checkReduced(plan, cutPlan, factors);
  return { raw: out, plan: cutPlan, cut };
}
