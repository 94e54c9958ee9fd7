/** Builds and checks the logical (single-device) graph: SSA, dangling tensors, shapes, cycles. */
import { registry } from '../ops/registry.js';
import { qParse } from '../ops/rational.js';
import { type Attrs, ShapeError, type Shape, sameShape, shapeStr, numel } from '../ops/types.js';
import { jpath, type IssueSink } from './errors.js';
import { checkRunClock } from './clock.js';
import { NameTable, type OpTable, OpTableBuilder, type LogicalGraph, type Role, type Contract } from './model.js';
import type { RawLogicalTensor, RawPlan } from './raw.js';
import { cycleText, findCycle, toCsr } from './cycles.js';

/** Largest element count of one tensor: exact integer arithmetic on indices must stay safe. */
export const MAX_ELEMENTS = 2 ** 53 - 1;

export function buildLogical(raw: RawPlan, sink: IssueSink): { graph: LogicalGraph; contract: Contract } {
  const base = '$.logical';
  const tensors = new NameTable();
  const shapes: Shape[] = [];
  const roles: Role[] = [];
  const dtypes: (string | undefined)[] = [];
  const domains: (readonly number[] | undefined)[] = [];
  raw.logical.tensors.forEach((t, i) => {
    const p = jpath(base, 'tensors', i);
    if (tensors.add(t.id, p) < 0) {
      sink.add(p, `tensor id '${t.id}' is declared twice (first at ${tensors.paths[tensors.id(t.id)]})`);
      return;
    }
    if (numel(t.shape) > MAX_ELEMENTS) sink.add(jpath(p, 'shape'), `shape ${shapeStr(t.shape)} has more than 2^53 elements`);
    shapes.push(t.shape);
    roles.push(t.role);
    dtypes.push(t.dtype);
    domains.push(domainOf(t, p, sink));
  });

  const ops = new OpTableBuilder();
  const attrs: Attrs[] = [];
  const producer = new Int32Array(tensors.size).fill(-1);
  const consumed = new Uint8Array(tensors.size);
  raw.logical.ops.forEach((o, i) => {
    if ((i & 255) === 0) checkRunClock();
    const p = jpath(base, 'ops', i);
    const where = `op '${o.id}'`;
    const kind = registry.id(o.op);
    if (kind < 0) sink.add(jpath(p, 'op'), `unknown op '${o.op}'`, where);
    const resolve = (names: string[], field: string): number[] =>
      names.map((n, k) => {
        const t = tensors.id(n);
        if (t < 0) sink.add(jpath(p, field, k), `tensor '${n}' is not declared in $.logical.tensors`, where);
        return t;
      });
    const ins = resolve(o.inputs, 'inputs');
    const outs = resolve(o.outputs, 'outputs');
    const idx = ops.push(o.id, p, kind, ins, outs, o.loc);
    if (idx < 0) {
      sink.add(jpath(p, 'id'), `op id '${o.id}' is used twice (first at ${ops.table.ids.paths[ops.table.ids.id(o.id)]})`);
      return;
    }
    attrs.push(o.attrs ?? {});
    outs.forEach((t, k) => {
      if (t < 0) return;
      const prev = producer[t] as number;
      if (prev >= 0) {
        sink.add(jpath(p, 'outputs', k), `tensor '${o.outputs[k]}' is produced twice (SSA): also by op '${ops.table.ids.name(prev)}'`, where);
      } else producer[t] = idx;
    });
    for (const t of ins) if (t >= 0) consumed[t] = 1;
  });
  const table = ops.finish();

  // Contract.
  const cin = resolveList(raw.contract.inputs, tensors, '$.contract.inputs', sink);
  const cout = resolveList(raw.contract.outputs, tensors, '$.contract.outputs', sink);
  const isInput = new Uint8Array(tensors.size);
  const isOutput = new Uint8Array(tensors.size);
  cin.forEach((t, k) => {
    if (t < 0) return;
    isInput[t] = 1;
    if ((producer[t] as number) >= 0) sink.add(jpath('$.contract.inputs', k), `'${tensors.name(t)}' is a contract input but is produced by op '${table.ids.name(producer[t] as number)}'`);
  });
  cout.forEach((t, k) => {
    if (t < 0) return;
    isOutput[t] = 1;
    if ((producer[t] as number) < 0 && !isInput[t]) sink.add(jpath('$.contract.outputs', k), `contract output '${tensors.name(t)}' is never produced`);
  });
  for (let t = 0; t < tensors.size; t++) {
    const p = tensors.paths[t] as string;
    const where = `tensor '${tensors.name(t)}'`;
    const dt = dtypes[t];
    if (isInput[t] && dt !== undefined && INTEGER_DTYPES.has(dt) && domains[t] === undefined) {
      sink.add(p, `integer input of dtype ${dt} needs "values" (the ids it may take, e.g. {"range": [0, 50257]}): ids stay symbolic over that range`, where);
    }
    if ((producer[t] as number) < 0 && !isInput[t]) {
      if (consumed[t]) sink.add(p, 'is consumed but never produced and not listed in $.contract.inputs (dangling)', where);
      else if (!isOutput[t]) sink.add(p, 'is declared but never produced, consumed or listed in the contract (dangling)', where);
    }
  }

  // Arity, attributes and shapes (only for ops whose tensors all resolved).
  // The values output of an op whose other output holds the positions (topk's values beside
  // its indices) is real unless the op ran over integers.
  const valuesBesidePositions = (t: number): string | undefined => {
    const prod = producer[t] as number;
    if (prod < 0 || (table.kind[prod] as number) < 0) return undefined;
    const pos = registry.get(table.kind[prod] as number).positionsOut;
    const outs = table.opOutputs(prod);
    if (pos === undefined || outs[pos.output] === t) return undefined;
    const src = table.opInputs(prod)[pos.input];
    const sdt = src === undefined ? undefined : dtypes[src];
    if (sdt !== undefined && INTEGER_DTYPES.has(sdt)) return undefined;
    return `the values of op '${table.ids.name(prod)}' (${registry.get(table.kind[prod] as number).name}), real numbers; its positions are '${tensors.name(outs[pos.output] as number)}'`;
  };
  for (let op = 0; op < table.size; op++) {
    const kind = table.kind[op] as number;
    if (kind < 0) continue;
    const ins = table.opInputs(op);
    const outs = table.opOutputs(op);
    if (ins.some((t) => t < 0) || outs.some((t) => t < 0)) continue;
    const p = table.ids.paths[op] as string;
    const msg = checkOpShapes(kind, [...ins].map((t) => shapes[t] as Shape), [...outs].map((t) => shapes[t] as Shape), attrs[op] as Attrs);
    if (msg !== undefined) sink.add(p, msg, `op '${table.ids.name(op)}' (${registry.get(kind).name})`);
    else {
      // An input the op reads as integer values (ids, labels, routing choices) must be able to
      // hold them: a trained parameter, an optimizer state or a tensor declared with a float
      // dtype never does (PyTorch raises on such an index), so the model as written is not a
      // program and no verdict about it means anything.
      const def = registry.get(kind);
      const sig = def.dims([...ins].map((t) => shapes[t] as Shape), attrs[op] as Attrs);
      for (const k of Object.keys(sig.inputValues ?? {}).map(Number)) {
        const t = ins[k] as number;
        const dt = dtypes[t];
        const why = roles[t] === 'param' || roles[t] === 'optimizer_state' ? `a ${roles[t] === 'param' ? 'trained parameter' : 'optimizer state'} (real values)` : dt !== undefined && FLOAT_DTYPES.has(dt) ? `declared ${dt}` : valuesBesidePositions(t);
        if (why !== undefined) sink.add(p, `reads '${tensors.name(t)}' (input ${k}) as integer values (ids, labels or positions), but it is ${why}: give the op an integer tensor`, `op '${table.ids.name(op)}' (${def.name})`);
      }
    }
    if (registry.get(kind).collective !== undefined) sink.add(p, 'collectives belong in the parallel graph, not the logical one', `op '${table.ids.name(op)}'`);
  }

  const order = sink.size === 0 ? topologicalOrder(table, producer, tensors.size) : [];
  const graph: LogicalGraph = { tensors, shapes, roles, dtypes, domains, ops: table, attrs, producer, order };
  if (sink.size === 0 && order.length < table.size) reportCycle(graph, sink);
  if (sink.size === 0) propagateDomains(graph);
  return { graph, contract: { inputs: Int32Array.from(cin), outputs: Int32Array.from(cout) } };
}

const INTEGER_DTYPES = new Set(['int64', 'int32', 'int16', 'int8', 'uint8']);
const FLOAT_DTYPES = new Set(['float64', 'float32', 'float16', 'bfloat16']);
/** Symbolic ids cost one indicator per value and element: keep domains proof-sized. */
const MAX_DOMAIN = 1 << 20;

/** The ascending value list of an integer tensor (bool: {0, 1}). */
function domainOf(t: RawLogicalTensor, p: string, sink: IssueSink): readonly number[] | undefined {
  const v = t.values;
  if (v === undefined) return t.dtype === 'bool' ? [0, 1] : undefined;
  // A floating tensor may hold integers too (a 0/1 loss mask stored as float32): "values" says
  // which; without a dtype the tensor is real-valued and "values" would be a guess.
  if (t.dtype === undefined || !(INTEGER_DTYPES.has(t.dtype) || t.dtype === 'bool' || FLOAT_DTYPES.has(t.dtype))) {
    sink.add(jpath(p, 'values'), `"values" needs the tensor's "dtype" (got ${t.dtype ?? 'none'})`);
    return undefined;
  }
  const [lo, hi] = v.range;
  if (hi <= lo) {
    sink.add(jpath(p, 'values', 'range'), `range [${lo}, ${hi}) is empty`);
    return undefined;
  }
  const set = new Set<number>(v.also ?? []);
  if (hi - lo + set.size > MAX_DOMAIN) {
    sink.add(jpath(p, 'values', 'range'), `range [${lo}, ${hi}) has more than ${MAX_DOMAIN} values`);
    return undefined;
  }
  for (let x = lo; x < hi; x++) set.add(x);
  return [...set].sort((a, b) => a - b);
}

function resolveList(names: string[], tensors: NameTable, path: string, sink: IssueSink): number[] {
  const seen = new Set<number>();
  return names.map((n, k) => {
    const t = tensors.id(n);
    if (t < 0) sink.add(jpath(path, k), `'${n}' is not a logical tensor`);
    else if (seen.has(t)) sink.add(jpath(path, k), `'${n}' is listed twice`);
    seen.add(t);
    return t;
  });
}

/** Arity, attribute schema and shape rule of one op; returns a one-line reason or undefined. */
export function checkOpShapes(kind: number, inShapes: Shape[], outShapes: Shape[], attrs: Attrs): string | undefined {
  const def = registry.get(kind);
  if (inShapes.length < def.inputs.min || inShapes.length > def.inputs.max) {
    return `takes ${arityStr(def.inputs.min, def.inputs.max)} input(s), got ${inShapes.length}`;
  }
  if (outShapes.length < def.outputs.min || outShapes.length > def.outputs.max) {
    return `produces ${arityStr(def.outputs.min, def.outputs.max)} output(s), got ${outShapes.length}`;
  }
  const bad = registry.checkAttrs(kind, attrs);
  if (bad !== undefined) return bad;
  let expect: Shape[];
  try {
    expect = def.shape(inShapes, attrs);
  } catch (e) {
    if (e instanceof ShapeError) return `shape error: ${e.message}`;
    throw e;
  }
  if (expect.length !== outShapes.length) return `produces ${expect.length} output(s), got ${outShapes.length}`;
  for (let k = 0; k < expect.length; k++) {
    if (!sameShape(expect[k] as Shape, outShapes[k] as Shape)) {
      return `output ${k} is declared ${shapeStr(outShapes[k] as Shape)} but the op produces ${shapeStr(expect[k] as Shape)} from inputs ${inShapes.map(shapeStr).join(', ')}`;
    }
  }
  return undefined;
}

function arityStr(min: number, max: number): string {
  return min === max ? `${min}` : max === Infinity ? `at least ${min}` : `${min} to ${max}`;
}

/**
 * The logical ops in topological order (Kahn's algorithm, ready ops taken in id order, each
 * consumer once per input it reads); shorter than the op count when the graph has a cycle.
 */
function topologicalOrder(ops: OpTable, producer: Int32Array, nTensors: number): number[] {
  const n = ops.size;
  const indeg = new Int32Array(n);
  const consumers: number[][] = Array.from({ length: nTensors }, () => []);
  for (let op = 0; op < n; op++) {
    for (const t of ops.opInputs(op)) {
      if ((producer[t] as number) >= 0) indeg[op] = (indeg[op] as number) + 1;
      (consumers[t] as number[]).push(op);
    }
  }
  const queue: number[] = [];
  for (let op = 0; op < n; op++) if (indeg[op] === 0) queue.push(op);
  for (let i = 0; i < queue.length; i++) {
    for (const t of ops.opOutputs(queue[i] as number)) {
      for (const c of consumers[t] as number[]) {
        indeg[c] = (indeg[c] as number) - 1;
        if (indeg[c] === 0) queue.push(c);
      }
    }
  }
  return queue;
}

/**
 * Integer tensors computed from integer inputs by ops that move values without computing on
 * them (OpDef.movesValues: labels reshaped for the loss, ids sliced per micro-batch) keep the
 * inputs' values, and positions along a dim (OpDef.positionsOut: topk's indices) take that
 * dim's positions, so they stay categorical when a stage takes them as inputs.
 */
function propagateDomains(g: LogicalGraph): void {
  const doms = g.domains as (readonly number[] | undefined)[];
  for (const op of g.order) {
    const ins = [...g.ops.opInputs(op)];
    const def = registry.get(g.ops.kind[op] as number);
    const pos = def.positionsOut;
    if (pos !== undefined) {
      const n = g.shapes[ins[pos.input] as number]?.at(pos.dim) ?? 0;
      const idx = g.ops.opOutputs(op)[pos.output];
      if (idx !== undefined) doms[idx] ??= Array.from({ length: n }, (_, v) => v);
    }
    if (def.movesValues === true && ins.length > 0 && ins.every((t) => doms[t] !== undefined)) {
      const set = new Set<number>();
      for (const t of ins) for (const v of doms[t] as readonly number[]) set.add(v);
      const d = [...set].sort((a, b) => a - b);
      for (const t of g.ops.opOutputs(op)) doms[t] ??= d;
    }
    const out = g.ops.opOutputs(op)[0];
    if (out !== undefined) {
      // A declared domain (a bool's {0, 1}) and a computed one each hold every value the
      // tensor takes, so their intersection does too (a mask that is all ones stays {1}).
      const d = arithmeticDomain(def.name, ins.map((t) => doms[t]), g.attrs[op] ?? {});
      const had = doms[out];
      const inD = d === undefined ? undefined : new Set(d);
      const both = had === undefined || inD === undefined ? d : had.filter((v) => inD.has(v));
      // (Disjoint: no run reaches this op with these inputs; the declared domain is kept.)
      if (both !== undefined && both.length > 0) doms[out] = both;
    }
  }
}

/** Values a computed integer tensor may hold at most: more, and it is left a real variable. */
const MAX_DERIVED_DOMAIN = 4096;

/**
 * The values of an integer op's result from its inputs' (Megatron's vocab masking computes
 * `target - vocab_start`, zeroed where out of range, then gathers with it): a superset of the
 * values it can take, so a stage that takes it as input and enumerates them covers every run.
 */
function arithmeticDomain(op: string, ins: readonly (readonly number[] | undefined)[], attrs: Attrs): readonly number[] | undefined {
  const fin = (set: Set<number>): readonly number[] | undefined => (set.size > 0 && set.size <= MAX_DERIVED_DOMAIN ? [...set].sort((a, b) => a - b) : undefined);
  const [a, b, c] = ins;
  switch (op) {
    case 'compare': {
      // Both sides known: the outcomes that occur (labels in 0..9 against the ignore index
      // -100 are never equal, so the mask of valid targets is all ones, not a free 0/1).
      if (a === undefined || b === undefined || a.length * b.length > 1 << 16) return [0, 1];
      const rel = attrs['rel'];
      const test = (x: number, y: number): boolean => (rel === 'gt' ? x > y : rel === 'ge' ? x >= y : rel === 'lt' ? x < y : rel === 'le' ? x <= y : rel === 'eq' ? x === y : x !== y);
      if (rel !== 'gt' && rel !== 'ge' && rel !== 'lt' && rel !== 'le' && rel !== 'eq' && rel !== 'ne') return [0, 1];
      const set = new Set<number>();
      for (const x of a) for (const y of b) set.add(test(x, y) ? 1 : 0);
      return [...set].sort((x, y) => x - y);
    }
    case 'add':
    case 'sub': {
      if (a === undefined || b === undefined || a.length * b.length > 1 << 16) return undefined;
      const set = new Set<number>();
      for (const x of a) for (const y of b) set.add(op === 'add' ? x + y : x - y);
      return fin(set);
    }
    case 'scale': {
      // Integer factors, and rationals over a power of two (a loss seed divided by the number
      // of micro-batches: 1/2): the products are exact doubles, so the domain holds the exact
      // values. Other rationals (1/3) are not doubles, and are left real.
      const f = attrs['factor'];
      if (a === undefined || (typeof f !== 'number' && typeof f !== 'string')) return undefined;
      let q: { n: bigint; d: bigint };
      try {
        q = qParse(f);
      } catch {
        return undefined;
      }
      if (q.d <= 0n || (q.d & (q.d - 1n)) !== 0n) return undefined;
      const vals = a.map((x) => (Number.isInteger(x) && Math.abs(x * Number(q.n)) < 2 ** 52 ? (x * Number(q.n)) / Number(q.d) : Number.NaN));
      return vals.some(Number.isNaN) ? undefined : fin(new Set(vals));
    }
    case 'where':
      return b !== undefined && c !== undefined ? fin(new Set([...b, ...c])) : undefined;
    default:
      return undefined;
  }
}

/** The cycle's message: one cycle, found by walking the ops Kahn's algorithm could not order. */
function reportCycle(g: LogicalGraph, sink: IssueSink): void {
  const ops = g.ops;
  const src: number[] = [];
  const dst: number[] = [];
  for (let op = 0; op < ops.size; op++) {
    for (const t of ops.opInputs(op)) {
      const p = g.producer[t] as number;
      if (p >= 0) {
        src.push(p);
        dst.push(op);
      }
    }
  }
  const cyc = findCycle(toCsr(ops.size, src, dst));
  if (cyc === undefined) return;
  sink.add(ops.ids.paths[cyc[0] as number] as string, `the logical graph has a cycle through ops ${cycleText(cyc.map((n) => `'${ops.ids.name(n)}'`))}`);
}
