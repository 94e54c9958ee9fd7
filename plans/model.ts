/**
 * The in-memory normal form of a plan. Names are interned to integer ids; op inputs and
 * outputs live in flat Int32Arrays; rank programs stay as templates (one program shared by
 * many ranks) and are instantiated per rank only on demand, so an 8192-rank plan costs one
 * copy of each distinct program.
 */
import type { Attrs, Shape } from '../ops/types.js';
import type { CompiledExpr } from './expr.js';
import type { Mesh } from './mesh.js';
import type { PlanIssue } from './errors.js';

export type Role = 'input' | 'param' | 'optimizer_state' | 'activation' | 'grad' | 'output';

/** Interned names with their declaration path (for error messages). */
export class NameTable {
  readonly names: string[] = [];
  readonly paths: string[] = [];
  private readonly index = new Map<string, number>();
  /** Returns the new id, or -1 when the name is taken. */
  add(name: string, path: string): number {
    if (this.index.has(name)) return -1;
    this.index.set(name, this.names.length);
    this.names.push(name);
    this.paths.push(path);
    return this.names.length - 1;
  }
  id(name: string): number {
    return this.index.get(name) ?? -1;
  }
  get size(): number {
    return this.names.length;
  }
  name(id: number): string {
    return this.names[id] ?? `#${id}`;
  }
}

/** Ops in struct-of-arrays form. Tensor refs are ids in the owning graph's NameTable. */
export class OpTable {
  readonly ids = new NameTable();
  kind: Int32Array = new Int32Array(0);
  inStart: Int32Array = new Int32Array(1);
  inputs: Int32Array = new Int32Array(0);
  outStart: Int32Array = new Int32Array(1);
  outputs: Int32Array = new Int32Array(0);
  readonly loc: (string | undefined)[] = [];
  get size(): number {
    return this.ids.size;
  }
  opInputs(op: number): Int32Array {
    return this.inputs.subarray(this.inStart[op], this.inStart[op + 1]);
  }
  opOutputs(op: number): Int32Array {
    return this.outputs.subarray(this.outStart[op], this.outStart[op + 1]);
  }
}

/** Accumulates ops, then freezes them into typed arrays. */
export class OpTableBuilder {
  readonly table = new OpTable();
  private kinds: number[] = [];
  private ins: number[] = [];
  private outs: number[] = [];
  private inStarts: number[] = [0];
  private outStarts: number[] = [0];
  /** Returns the op index, or -1 when the id is taken. */
  push(id: string, path: string, kind: number, inputs: readonly number[], outputs: readonly number[], loc?: string): number {
    const k = this.table.ids.add(id, path);
    if (k < 0) return -1;
    this.kinds.push(kind);
    for (const t of inputs) this.ins.push(t);
    for (const t of outputs) this.outs.push(t);
    this.inStarts.push(this.ins.length);
    this.outStarts.push(this.outs.length);
    this.table.loc.push(loc);
    return k;
  }
  finish(): OpTable {
    const t = this.table;
    t.kind = Int32Array.from(this.kinds);
    t.inputs = Int32Array.from(this.ins);
    t.outputs = Int32Array.from(this.outs);
    t.inStart = Int32Array.from(this.inStarts);
    t.outStart = Int32Array.from(this.outStarts);
    this.kinds = this.ins = this.outs = this.inStarts = this.outStarts = [];
    return t;
  }
}

export interface LogicalGraph {
  readonly tensors: NameTable;
  readonly shapes: Shape[];
  readonly roles: Role[];
  readonly dtypes: (string | undefined)[];
  /** Integer inputs: the values each element may take, ascending (categorical symbols). */
  readonly domains: (readonly number[] | undefined)[];
  readonly ops: OpTable;
  readonly attrs: Attrs[];
  /** producer[t] = op index, or -1 for iteration inputs. */
  readonly producer: Int32Array;
  /**
   * The ops in one topological order, computed once at load (plans/logical.ts): every later
   * phase (domains, execution, stage decomposition) follows this one. Empty when the load
   * stopped before it (a cycle or an earlier error).
   */
  readonly order: readonly number[];
}

/** A dimension, attribute or group entry that may depend on mesh coordinates. */
export type IntSpec = number | CompiledExpr;

export type GroupSpec =
  | { readonly kind: 'ranks'; readonly ranks: readonly IntSpec[] }
  | { readonly kind: 'axes'; readonly axes: readonly number[] };

export type PeerSpec = { readonly kind: 'rank'; readonly rank: IntSpec } | { readonly kind: 'shift'; readonly shift: readonly (readonly [number, number])[] };

/** A rank program: an SPMD template shared by `ranks` (one rank for explicit spelling). */
export interface Program {
  readonly index: number;
  readonly name: string;
  readonly path: string;
  readonly ranks: Int32Array;
  readonly tensors: NameTable;
  readonly shapeSpecs: (readonly IntSpec[])[];
  readonly dtypes: (string | undefined)[];
  readonly lineage: (LineageSpec | undefined)[];
  readonly ops: OpTable;
  /** Attributes as written; values may hold compiled expressions (see instantiate). */
  readonly attrSpecs: AttrSpec[];
  readonly groups: (GroupSpec | undefined)[];
  readonly peers: (PeerSpec | undefined)[];
  readonly microbatch: Int32Array;
  /** Indices of ops that are collective calls, in program order. */
  readonly collectiveSites: Int32Array;
  /** True when some shape or attribute depends on the rank's coordinates. */
  readonly coordDependent: boolean;
  /** Tensors whose lineage is marked `"inferred": true`: hints, never user claims (stages/infer/boundary.ts). */
  readonly inferred?: ReadonlySet<number>;
}

export type AttrSpec = { readonly attrs: Attrs; readonly exprs: readonly (readonly [string[], CompiledExpr])[] };

/** A program instantiated for one rank: concrete shapes and attributes. */
export interface RankView {
  readonly rank: number;
  readonly program: Program;
  readonly shapes: Shape[];
  readonly attrs: Attrs[];
}

/** A collective op instance after matching: one per communication, with its group. */
export interface CollectiveInstance {
  readonly id: string;
  readonly kind: number;
  readonly attrs: Attrs;
  /** Members in group order. */
  readonly group: Int32Array;
  /** Per member: local tensor id of its input, or -1. */
  readonly inputs: Int32Array;
  /** Per member: local tensor id of its output, or -1. */
  readonly outputs: Int32Array;
  /** Per member: op index of the per-rank call in its program, or -1 (multi-rank spelling). */
  readonly sites: Int32Array;
  readonly path: string;
  readonly microbatch: number;
}

export interface Contract {
  readonly inputs: Int32Array;
  readonly outputs: Int32Array;
}

/**
 * A condition the traced program depends on (a value read into Python): in program `program`
 * (-1 the logical graph, else a rank), tensor `tensor` equals `values` element by element
 * (`cmp` 'eq', values given; null: not recorded, never shown to hold), or `tensor cmp other`
 * (a tensor of the same program, or a number) came out `outcome`.
 */
export interface PlanGuard {
  readonly program: number;
  readonly tensor: string;
  readonly cmp: 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge';
  readonly values?: readonly number[] | null;
  readonly other?: string | number;
  readonly outcome?: boolean;
  readonly where: string;
}

export interface Plan {
  readonly file: string;
  readonly name: string;
  readonly description: string;
  /**
   * Values the traced program read into Python (`.item()`, `float(t)`): the graphs are
   * specialized to them, so a proof holds for those values only (the top-level
   * `x-planproof-specialized` of an imported plan; every report says so).
   */
  readonly specialized?: readonly string[];
  /**
   * What a witness must reproduce of those reads (`x-planproof-guards`): a "not equivalent"
   * on a specialized plan needs inputs where every guard holds (stages/witness/guards.ts).
   */
  readonly guards?: readonly PlanGuard[];
  /** The captured run's values of contract inputs the guards depend on (`x-planproof-run-inputs`): where a witness is drawn first. */
  readonly runInputs?: Readonly<Record<string, readonly number[]>>;
  /**
   * Elements of integer contract inputs held at one value of their domain (`x-planproof-pins`,
   * written by verify when the reads into Python imply them: stages/witness/pins.ts): logical
   * tensor -> element -> value. Stages are proved, and inputs drawn, with these elements fixed,
   * so a verdict holds for the inputs where they take these values (every report says so).
   */
  readonly pins?: ReadonlyMap<number, ReadonlyMap<number, number>>;
  readonly mesh: Mesh;
  readonly logical: LogicalGraph;
  readonly programs: Program[];
  /** rankProgram[rank] = program index. */
  readonly rankProgram: Int32Array;
  readonly collectives: CollectiveInstance[];
  readonly contract: Contract;
  /** Non-fatal findings (dead tensors and the like). */
  readonly warnings: PlanIssue[];
  /** Concrete view of one rank (cached for coordinate-independent programs). */
  view(rank: number): RankView;
}

/*
 * Lineage as a plan writes it: the spec of each parallel tensor (nnScaler-style index/value
 * maps, or DTensor placements over the mesh) after parsing, template expressions compiled.
 * lineage/model.ts gives a spec its meaning per rank (evalLineage).
 */

export type Reduce = 'sum' | 'max' | 'min';

export type Placement = { readonly k: 'R' } | { readonly k: 'S'; readonly dim: number } | { readonly k: 'P'; readonly reduce: 'sum' | 'avg' | 'max' | 'min' };

export type LineageSpec =
  | {
      readonly kind: 'index';
      readonly logical: number;
      readonly path: string;
      /** Per dim: undefined = whole dim, else [s0, e0, s1, e1, ...] specs. Missing `index` = all whole. */
      readonly dims: readonly (readonly IntSpec[] | undefined)[] | undefined;
      readonly idx: IntSpec;
      readonly n: number;
      readonly reduce: Reduce;
      readonly divisor: number;
      readonly split: string;
      /** Mesh axes the spec depends on; -1 in the list means it uses `rank`. */
      readonly axes: readonly number[];
    }
  | {
      readonly kind: 'placements';
      readonly logical: number;
      readonly path: string;
      readonly placements: readonly Placement[];
      readonly axes: readonly number[];
    };

export class LineageError extends Error {}

export function parsePlacement(s: string): Placement {
  if (s === 'R') return { k: 'R' };
  if (s === 'P') return { k: 'P', reduce: 'sum' };
  const sm = /^S\(([0-9]+)\)$/.exec(s);
  if (sm) return { k: 'S', dim: Number(sm[1]) };
  const pm = /^P\((sum|avg|max|min)\)$/.exec(s);
  if (pm) return { k: 'P', reduce: pm[1] as 'sum' | 'avg' | 'max' | 'min' };
  throw new LineageError(`unknown placement '${s}'`);
}

export function placementStr(p: Placement): string {
  return p.k === 'R' ? 'R' : p.k === 'S' ? `S(${p.dim})` : `P(${p.reduce})`;
}
