/**
 * Rank programs. A program is written once for a set of ranks (SPMD template) or once per
 * rank (explicit spelling); both become Program records. Shapes, attributes, groups, peers and
 * lineage may use integer expressions over the rank's mesh coordinates; `instantiate` turns a
 * program into the concrete view of one rank.
 */
import { registry } from '../ops/registry.js';
import type { Attrs, AttrValue, Shape } from '../ops/types.js';
import { jpath, type IssueSink } from './errors.js';
import { checkRunClock } from './clock.js';
import { compileExpr, ExprError, type CompiledExpr } from './expr.js';
import { iota, type Mesh } from './mesh.js';
import { NameTable, OpTableBuilder, type AttrSpec, type GroupSpec, type IntSpec, type LogicalGraph, type PeerSpec, type Program, type RankView } from './model.js';
import type { RawGroup, RawInt, RawLineage, RawPeer, RawPlan, RawProgram, RawSelector } from './raw.js';
import { rankEnv } from './mesh.js';
import { type LineageSpec, parsePlacement, LineageError, type Reduce } from './model.js';
import { MAX_ELEMENTS, checkOpShapes } from './logical.js';

/**
 * A coordinate-dependent expression at one place in the plan. Plans hold millions of these
 * (the 405B plan: a lineage range or shape per tensor), so each is one small object: the
 * shared compiled expression and where it was written, as a base path and the keys below it
 * (a path string, or a closure to build one, per occurrence cost hundreds of megabytes). The
 * path is built only when an evaluation fails, to name it.
 */
class SiteExpr implements CompiledExpr {
  // Three fields: the compiled expression's own fields are read through it, and `keys` is one
  // shared array per distinct key list (internKeys), not one per occurrence (a SiteExpr with
  // copied fields and its own keys was ~140 bytes, ~3 million of them in the 405B plan).
  constructor(
    private readonly e: CompiledExpr,
    private readonly base: string,
    private readonly keys: readonly (string | number)[],
  ) {}
  get source(): string {
    return this.e.source;
  }
  get vars(): readonly string[] {
    return this.e.vars;
  }
  get affine(): CompiledExpr['affine'] {
    return this.e.affine;
  }
  eval(env: (name: string) => number): number {
    try {
      return this.e.eval(env);
    } catch (err) {
      // Evaluation errors (e.g. inexact division for some rank) name the expression's path.
      if (err instanceof ExprError) err.path ??= jpath(this.base, ...this.keys, 'expr');
      throw err;
    }
  }
}

class ExprCompiler {
  readonly vars: Set<string>;
  private readonly bound: (name: string) => readonly [number, number];
  private readonly cache = new Map<string, CompiledExpr>();
  /** Key lists below a site's base path, one array each (a plan has few: shape dims, range ends). */
  private readonly keyLists = new Map<string, readonly (string | number)[]>();
  constructor(readonly mesh: Mesh) {
    this.vars = new Set([...mesh.axes, 'rank']);
    this.bound = (name) => (name === 'rank' ? [0, mesh.size - 1] : [0, (mesh.sizes[mesh.axisIndex(name)] ?? 1) - 1]);
  }
  private internKeys(keys: readonly (string | number)[]): readonly (string | number)[] {
    // As JSON, so that the number 0 and the key "0" stay apart (jpath prints them differently).
    const k = JSON.stringify(keys);
    let got = this.keyLists.get(k);
    if (got === undefined) {
      got = keys;
      if (this.keyLists.size < 100_000) this.keyLists.set(k, got);
    }
    return got;
  }
  /** Number or compiled expression, written at jpath(base, ...keys); constant expressions fold to numbers. */
  int(raw: RawInt, base: string, sink: IssueSink, ...keys: (string | number)[]): IntSpec {
    if (typeof raw === 'number') return raw;
    try {
      // Generated plans repeat a few expressions thousands of times: parse each source once.
      let e = this.cache.get(raw.expr);
      if (e === undefined) {
        e = compileExpr(raw.expr, this.vars, this.bound);
        if (this.cache.size < 100_000) this.cache.set(raw.expr, e);
      }
      if (e.vars.length === 0) return e.eval(() => 0);
      return new SiteExpr(e, base, this.internKeys(keys));
    } catch (err) {
      if (err instanceof ExprError) {
        sink.add(jpath(base, ...keys, 'expr'), err.message);
        return 0;
      }
      throw err;
    }
  }
}

export function specVars(s: IntSpec): readonly string[] {
  return typeof s === 'number' ? [] : s.vars;
}

export function evalInt(s: IntSpec, env: (n: string) => number): number {
  return typeof s === 'number' ? s : s.eval(env);
}

/** Ranks chosen by a selector, ascending. */
export function selectRanks(sel: RawSelector, mesh: Mesh, path: string, sink: IssueSink): Int32Array {
  if (sel === 'all') return iota(mesh.size);
  if (Array.isArray(sel)) {
    const seen = new Set<number>();
    sel.forEach((r, k) => {
      if (r >= mesh.size) sink.add(jpath(path, k), `rank ${r} is outside the mesh (${mesh.size} ranks)`);
      else if (seen.has(r)) sink.add(jpath(path, k), `rank ${r} is listed twice`);
      seen.add(r);
    });
    return Int32Array.from([...seen].filter((r) => r < mesh.size).sort((a, b) => a - b));
  }
  const conds: [number, Set<number>][] = [];
  for (const [axis, v] of Object.entries(sel.where)) {
    const a = mesh.axisIndex(axis);
    if (a < 0) {
      sink.add(jpath(path, 'where', axis), `unknown mesh axis '${axis}'`);
      continue;
    }
    const vals = Array.isArray(v) ? v : [v];
    for (const c of vals) if (c >= (mesh.sizes[a] as number)) sink.add(jpath(path, 'where', axis), `coordinate ${c} is outside axis '${axis}' of size ${mesh.sizes[a]}`);
    conds.push([a, new Set(vals)]);
  }
  const out: number[] = [];
  for (let r = 0; r < mesh.size; r++) if (conds.every(([a, s]) => s.has(mesh.coord(r, a)))) out.push(r);
  if (out.length === 0) sink.add(path, 'selects no rank');
  return Int32Array.from(out);
}

function compileLineage(raw: RawLineage, path: string, logical: LogicalGraph, mesh: Mesh, ec: ExprCompiler, sink: IssueSink): LineageSpec | undefined {
  const lt = logical.tensors.id(raw.logical);
  if (lt < 0) {
    sink.add(jpath(path, 'logical'), `'${raw.logical}' is not a logical tensor`);
    return undefined;
  }
  if ('placements' in raw) {
    try {
      const placements = raw.placements.map(parsePlacement);
      if (placements.length !== mesh.axes.length) {
        sink.add(jpath(path, 'placements'), `${placements.length} placements for a ${mesh.axes.length}-axis mesh (${mesh.axes.join(', ')}): give one per mesh axis`);
        return undefined;
      }
      const axes = placements.flatMap((p, a) => (p.k === 'R' ? [] : [a]));
      return { kind: 'placements', logical: lt, path, placements, axes };
    } catch (e) {
      if (e instanceof LineageError) sink.add(jpath(path, 'placements'), e.message);
      else throw e;
      return undefined;
    }
  }
  const vars = new Set<string>();
  const note = (s: IntSpec): IntSpec => {
    for (const v of specVars(s)) vars.add(v);
    return s;
  };
  const dims = raw.index?.map((d, i): IntSpec[] | undefined => {
    if (d === '*') return undefined;
    const ranges = isRange(d) ? [d] : (d as RawInt[][]);
    const one = isRange(d);
    return ranges.flatMap((r, k) => {
      const at = one ? ['index', i] : ['index', i, k];
      return [note(ec.int(r[0] as RawInt, path, sink, ...at, 0)), note(ec.int(r[1] as RawInt, path, sink, ...at, 1))];
    });
  });
  let idx: IntSpec = 0;
  let n = 1;
  let reduce: Reduce = 'sum';
  let divisor = 1;
  let split = '';
  const v = raw.value;
  if (v !== undefined) {
    if (Array.isArray(v)) {
      idx = note(ec.int(v[0], path, sink, 'value', 0));
      n = v[1];
      const r = v[2] ?? 'sum';
      if (r === 'avg') divisor = n;
      else reduce = r;
    } else {
      idx = note(ec.int(v.chunk, path, sink, 'value', 'chunk'));
      n = v.of;
      reduce = v.reduce ?? 'sum';
      divisor = v.divisor ?? 1;
      split = v.split ?? '';
    }
    if (reduce !== 'sum' && divisor !== 1) sink.add(jpath(path, 'value'), `a divisor only applies to sum partials, not ${reduce}`);
    if (typeof idx === 'number' && (idx < 0 || idx >= n)) sink.add(jpath(path, 'value'), `chunk ${idx} is not in 0..${n - 1}`);
  }
  const axes = [...vars].map((name) => (name === 'rank' ? -1 : mesh.axisIndex(name)));
  return { kind: 'index', logical: lt, path, dims, idx, n, reduce, divisor, split, axes };
}

function isRange(d: unknown): d is [RawInt, RawInt] {
  return Array.isArray(d) && d.length === 2 && !Array.isArray(d[0]) && !Array.isArray(d[1]);
}

/** Finds `{"expr": "..."}` leaves inside attributes and compiles them. */
const NO_EXPRS: readonly (readonly [string[], CompiledExpr])[] = [];
const scalar = (v: AttrValue): boolean => v === null || typeof v !== 'object';

function compileAttrs(attrs: Record<string, AttrValue>, path: string, ec: ExprCompiler, sink: IssueSink): AttrSpec {
  // Most ops' attributes are scalars or lists of scalars: nothing to compile or copy.
  if (Object.values(attrs).every((v) => scalar(v) || (Array.isArray(v) && v.every(scalar)))) return { attrs: attrs as Attrs, exprs: NO_EXPRS };
  const exprs: [string[], CompiledExpr][] = [];
  const walk = (v: AttrValue, keys: string[]): AttrValue => {
    if (v !== null && typeof v === 'object') {
      if (!Array.isArray(v) && Object.keys(v).length === 1 && typeof v['expr'] === 'string') {
        const s = ec.int({ expr: v['expr'] }, path, sink, ...keys);
        if (typeof s === 'number') return s;
        exprs.push([keys, s]);
        return 0;
      }
      if (Array.isArray(v)) return v.map((x, i) => walk(x, [...keys, String(i)]));
      // fromEntries defines own properties: a '__proto__' key stays data (and is then
      // rejected as an unknown attribute) instead of replacing the prototype.
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, [...keys, k])])) as AttrValue;
    }
    return v;
  };
  // Only attribute values can be expressions; `attrs` itself is always a plain object.
  const out = Object.fromEntries(Object.entries(attrs).map(([k, v]) => [k, walk(v, [k])])) as Attrs;
  return { attrs: out, exprs };
}

export function instantiateAttrs(spec: AttrSpec, env: (n: string) => number): Attrs {
  if (spec.exprs.length === 0) return spec.attrs;
  const copy = structuredClone(spec.attrs) as Record<string, AttrValue>;
  for (const [keys, e] of spec.exprs) {
    let o: AttrValue = copy;
    for (let i = 0; i < keys.length - 1; i++) o = (o as Record<string, AttrValue>)[keys[i] as string] as AttrValue;
    (o as Record<string, AttrValue>)[keys[keys.length - 1] as string] = e.eval(env);
  }
  return copy;
}

function compileGroup(g: RawGroup, path: string, mesh: Mesh, ec: ExprCompiler, sink: IssueSink): GroupSpec {
  if (Array.isArray(g)) return { kind: 'ranks', ranks: g.map((r, k) => ec.int(r, path, sink, k)) };
  if ('ranks' in g) return { kind: 'ranks', ranks: g.ranks.map((r, k) => ec.int(r, path, sink, 'ranks', k)) };
  const axes: number[] = [];
  g.axes.forEach((a, k) => {
    const i = mesh.axisIndex(a);
    if (i < 0) sink.add(jpath(path, 'axes', k), `unknown mesh axis '${a}'`);
    else if (axes.includes(i)) sink.add(jpath(path, 'axes', k), `axis '${a}' listed twice`);
    else axes.push(i);
  });
  return { kind: 'axes', axes: axes.sort((x, y) => x - y) };
}

function compilePeer(p: RawPeer, path: string, mesh: Mesh, ec: ExprCompiler, sink: IssueSink): PeerSpec {
  if (typeof p === 'number' || 'expr' in p) return { kind: 'rank', rank: ec.int(p, path, sink) };
  const shift: [number, number][] = [];
  for (const [axis, d] of Object.entries(p.shift)) {
    const a = mesh.axisIndex(axis);
    if (a < 0) sink.add(jpath(path, 'shift', axis), `unknown mesh axis '${axis}'`);
    else shift.push([a, d]);
  }
  return { kind: 'shift', shift };
}

export function buildPrograms(raw: RawPlan, mesh: Mesh, logical: LogicalGraph, sink: IssueSink): { programs: Program[]; rankProgram: Int32Array } {
  const ec = new ExprCompiler(mesh);
  const rankProgram = new Int32Array(mesh.size).fill(-1);
  const programs = raw.parallel.programs.map((rp, pi) => buildProgram(rp, pi, mesh, logical, ec, sink));
  for (const p of programs) {
    for (const r of p.ranks) {
      const prev = rankProgram[r] as number;
      if (prev >= 0) {
        sink.add(jpath(p.path, 'ranks'), `template expansion conflict: rank ${r} is already given a program by ${programs[prev]?.path ?? ''}`);
      } else rankProgram[r] = p.index;
    }
  }
  const idle: number[] = [];
  for (let r = 0; r < rankProgram.length; r++) if ((rankProgram[r] as number) < 0) idle.push(r);
  if (idle.length > 0) {
    const at = (r: number): string => `(${mesh.axes.map((a, i) => `${a}=${mesh.coord(r, i)}`).join(', ')})`;
    sink.add('$.parallel.programs', `rank(s) ${idle.slice(0, 10).join(', ')}${idle.length > 10 ? ', ...' : ''} of the mesh have no program; first at coordinates ${at(idle[0] as number)}`);
  }
  return { programs, rankProgram };
}

function buildProgram(rp: RawProgram, index: number, mesh: Mesh, logical: LogicalGraph, ec: ExprCompiler, sink: IssueSink): Program {
  const path = jpath('$.parallel.programs', index);
  const ranks = selectRanks(rp.ranks, mesh, jpath(path, 'ranks'), sink);
  const tensors = new NameTable();
  const shapeSpecs: IntSpec[][] = [];
  const dtypes: (string | undefined)[] = [];
  const lineage: (LineageSpec | undefined)[] = [];
  const inferred: number[] = [];
  let coordDependent = false;
  (rp.tensors ?? []).forEach((t, i) => {
    const tp = jpath(path, 'tensors', i);
    if (tensors.add(t.id, tp) < 0) {
      sink.add(tp, `tensor id '${t.id}' is declared twice in this program (first at ${tensors.paths[tensors.id(t.id)]})`);
      return;
    }
    const shape = t.shape.map((d, k) => ec.int(d, tp, sink, 'shape', k));
    if (shape.some((d) => typeof d !== 'number')) coordDependent = true;
    shapeSpecs.push(shape);
    dtypes.push(t.dtype);
    lineage.push(t.lineage === undefined ? undefined : compileLineage(t.lineage, jpath(tp, 'lineage'), logical, mesh, ec, sink));
    // An inferred claim is a hint (stages/infer/boundary.ts): proved before it is assumed, dropped when it does not prove.
    if (t.lineage?.inferred === true) inferred.push(tensors.size - 1);
  });
  const ops = new OpTableBuilder();
  const attrSpecs: AttrSpec[] = [];
  const groups: (GroupSpec | undefined)[] = [];
  const peers: (PeerSpec | undefined)[] = [];
  const microbatch: number[] = [];
  const sites: number[] = [];
  rp.ops.forEach((o, i) => {
    if ((i & 255) === 0) checkRunClock();
    const op = jpath(path, 'ops', i);
    const where = `op '${o.id}'`;
    const kind = registry.id(o.op);
    if (kind < 0) sink.add(jpath(op, 'op'), `unknown op '${o.op}'`, where);
    const resolve = (names: string[], field: string): number[] =>
      names.map((n, k) => {
        const t = tensors.id(n);
        if (t < 0) sink.add(jpath(op, field, k), `tensor '${n}' is not declared in this program's tensors`, where);
        return t;
      });
    const ins = resolve(o.inputs, 'inputs');
    const outs = resolve(o.outputs, 'outputs');
    const k = ops.push(o.id, op, kind, ins, outs, o.loc);
    if (k < 0) {
      sink.add(jpath(op, 'id'), `op id '${o.id}' is used twice in this program`);
      return;
    }
    const attrs = compileAttrs(o.attrs ?? {}, jpath(op, 'attrs'), ec, sink);
    if (attrs.exprs.length > 0) coordDependent = true;
    attrSpecs.push(attrs);
    microbatch.push(o.microbatch ?? -1);
    const coll = kind >= 0 ? registry.get(kind).collective : undefined;
    if (coll === undefined) {
      if (o.group !== undefined) sink.add(jpath(op, 'group'), `'${o.op}' is not a collective and takes no group`, where);
      if (o.peer !== undefined) sink.add(jpath(op, 'peer'), `'${o.op}' is not a point-to-point op and takes no peer`, where);
      groups.push(undefined);
      peers.push(undefined);
      return;
    }
    sites.push(k);
    if (coll.pattern === 'p2p') {
      if (coll.side === undefined) sink.add(jpath(op, 'op'), `'${o.op}' is the multi-rank spelling: list it in $.parallel.collectives, or use send/recv in a program`, where);
      if (o.peer === undefined) sink.add(op, `'${o.op}' needs a peer`, where);
      if (o.group !== undefined) sink.add(jpath(op, 'group'), `'${o.op}' takes a peer, not a group`, where);
      groups.push(undefined);
      peers.push(o.peer === undefined ? undefined : compilePeer(o.peer, jpath(op, 'peer'), mesh, ec, sink));
    } else {
      if (o.group === undefined) sink.add(op, `collective '${o.op}' needs a group (rank list or mesh axes)`, where);
      if (o.peer !== undefined) sink.add(jpath(op, 'peer'), `'${o.op}' takes a group, not a peer`, where);
      groups.push(o.group === undefined ? undefined : compileGroup(o.group, jpath(op, 'group'), mesh, ec, sink));
      peers.push(undefined);
    }
  });
  return {
    index,
    name: rp.name ?? `program ${index}`,
    path,
    ranks,
    tensors,
    shapeSpecs,
    dtypes,
    lineage,
    ops: ops.finish(),
    attrSpecs,
    groups,
    peers,
    microbatch: Int32Array.from(microbatch),
    collectiveSites: Int32Array.from(sites),
    coordDependent,
    inferred: new Set(inferred),
  };
}

/** Concrete shapes and attributes of `program` on `rank`. Throws ExprError on a bad expression. */
export function instantiate(program: Program, mesh: Mesh, rank: number): RankView {
  const env = rankEnv(mesh, rank);
  const fixed = constantShapes(program);
  const shapes = program.shapeSpecs.map((s, t) => fixed[t] ?? s.map((d) => evalInt(d, env)));
  const attrs = program.attrSpecs.map((a) => instantiateAttrs(a, env));
  return { rank, program, shapes, attrs };
}

/**
 * Per program, the shapes that do not depend on the rank, one array each that every view
 * shares (shapes are read-only): views of a coordinate-dependent program differ in a few
 * tensors, and a copy of every shape per view was ~100 MB in the 405B plan.
 */
const CONSTANT_SHAPES = new WeakMap<Program, readonly (Shape | undefined)[]>();
function constantShapes(program: Program): readonly (Shape | undefined)[] {
  let c = CONSTANT_SHAPES.get(program);
  if (c === undefined) CONSTANT_SHAPES.set(program, (c = program.shapeSpecs.map((s) => (s.every((d) => typeof d === 'number') ? (s as readonly number[]) : undefined))));
  return c;
}

/**
 * Checks one rank's view: dims in range and the shape rule of every local (non-collective) op.
 * Collective calls are checked across their group when matched.
 */
export function checkView(view: RankView, sink: IssueSink, rankLabel: string): void {
  const p = view.program;
  view.shapes.forEach((s, t) => checkTensorDims(p, t, s, sink, rankLabel));
  for (let op = 0; op < p.ops.size; op++) checkOpAt(p, op, (t) => view.shapes[t] as Shape, view.attrs[op] as Attrs, sink, rankLabel);
}

/** Dims of one tensor (as instantiated on some rank) are integers in range. */
export function checkTensorDims(p: Program, t: number, s: Shape, sink: IssueSink, rankLabel: string): void {
  let n = 1;
  for (const d of s) {
    if (!Number.isInteger(d) || d < 0 || d > 2147483647) {
      sink.add(jpath(p.tensors.paths[t] as string, 'shape'), `dimension ${d} is not an integer in [0, 2^31)`, `${rankLabel}tensor '${p.tensors.name(t)}'`);
      return;
    }
    n *= d;
  }
  if (n > MAX_ELEMENTS) sink.add(jpath(p.tensors.paths[t] as string, 'shape'), 'more than 2^53 elements', `${rankLabel}tensor '${p.tensors.name(t)}'`);
}

/** One op's arity, attributes and shape rule, with shapes and attributes as on some rank. */
export function checkOpAt(p: Program, op: number, shapeOf: (t: number) => Shape, attrs: Attrs, sink: IssueSink, rankLabel: string): void {
  const ops = p.ops;
  const kind = ops.kind[op] as number;
  if (kind < 0) return;
  const ins = ops.opInputs(op);
  const outs = ops.opOutputs(op);
  if (ins.some((t) => t < 0) || outs.some((t) => t < 0)) return;
  const def = registry.get(kind);
  if (def.collective !== undefined) {
    // Shapes are checked across the group once calls are matched; arity and attributes here.
    const bad =
      ins.length < def.inputs.min || ins.length > def.inputs.max
        ? `takes ${def.inputs.min === def.inputs.max ? def.inputs.min : `${def.inputs.min} to ${def.inputs.max}`} input(s), got ${ins.length}`
        : outs.length < def.outputs.min || outs.length > def.outputs.max
          ? `produces ${def.outputs.min === def.outputs.max ? def.outputs.min : `${def.outputs.min} to ${def.outputs.max}`} output(s), got ${outs.length}`
          : registry.checkAttrs(kind, attrs);
    if (bad !== undefined) sink.add(ops.ids.paths[op] as string, bad, `${rankLabel}op '${ops.ids.name(op)}' (${def.name})`);
    return;
  }
  const msg = checkOpShapes(kind, [...ins].map(shapeOf), [...outs].map(shapeOf), attrs);
  if (msg !== undefined) sink.add(ops.ids.paths[op] as string, msg, `${rankLabel}op '${ops.ids.name(op)}' (${registry.get(kind).name})`);
}
