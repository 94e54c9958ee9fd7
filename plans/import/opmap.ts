/**
 * Op maps: what an op outside ATen computes, written as a small FX body of ATen ops, so graphs
 * that call custom kernels (apex's fused LayerNorm, vLLM's fused RMSNorm, a tracer's marker
 * ops) import without a rule per kernel in the importer (docs/import.md, "Op maps").
 *
 *     { "format": "planproof-opmap/v1",
 *       "ops": { "apex.fused_layer_norm_affine_fwd.default": {
 *                  "args": ["input", "weight", "bias", "normalized_shape", "eps"],
 *                  "body": "r = torch.ops.aten.native_layer_norm.default(input, normalized_shape, weight, bias, eps)\nreturn r" } } }
 *
 * `args` names the op's parameters in schema order (the call's positional and keyword
 * arguments bind to them); the body's statements are parsed like a graph's and inlined at each
 * call with the parameters replaced by the call's arguments (tensors or literals), so the ATen
 * rules, their shape checks and their refusals apply unchanged. An op that writes its arguments
 * in place (called through `higher_order.auto_functionalized`, as torch.compile prints
 * mutating custom ops) lists them in `mutates` (schema order) and its body returns their new
 * values in that order. A map is a claim the user makes about a kernel: the proof is for the
 * kernel as mapped (the report names the maps used).
 *
 * A kernel whose meaning depends on a flag or on which optional buffers are given (TE's GEMM:
 * transpose flags, fp8 dtypes, an empty bias) lists `cases`: the first whose `when` holds for
 * the call's arguments gives the body, or a `refuse` message (an fp8 cast is never an
 * identity); with none holding, the entry's `body`, or a refusal naming the arguments. `sizes`
 * binds names the bodies may use to an argument's shape or one of its sizes, for the views a
 * kernel makes from its inputs' sizes (vLLM's rotary embedding views the query per token).
 */
import type { ValidateFunction } from 'ajv';
import { ajvClass } from '../../ops/registry.js';
import { ImportError, parseFxGraph, type FxArg, type FxGraph, type FxNode } from './fxtext.js';
import type { Lowerer, Rule, Val } from './lower.js';

/** A literal an argument may equal in a case's `when` (None is `null`). */
export type OpMapLiteral = boolean | number | string | null;
/**
 * A condition on one argument: that literal (True is 1 and False 0, as Python compares them),
 * one of a list, a tensor of no elements or None (`empty: true`: TE's `empty_tensor` standing
 * for an absent buffer) or a tensor with elements (`empty: false`), a tensor of `ndim` dims.
 */
export type OpMapCond = OpMapLiteral | { readonly in: readonly OpMapLiteral[] } | { readonly empty: boolean } | { readonly ndim: number };

export interface OpMapCase {
  readonly when: Readonly<Record<string, OpMapCond>>;
  /** The body when the case holds; or */
  readonly body?: string;
  /** why such a call is refused. */
  readonly refuse?: string;
}

export interface OpMapEntry {
  /** The op's parameters in schema order. */
  readonly args: readonly string[];
  /** FX statements over the parameters, ending in `return` (the body when no case holds). */
  readonly body?: string;
  /** Bodies or refusals chosen by the call's arguments, the first that holds. */
  readonly cases?: readonly OpMapCase[];
  /** Names bound for the bodies: a tensor parameter's shape (`"query"`) or one size (`["positions", 0]`). */
  readonly sizes?: Readonly<Record<string, string | readonly [string, number]>>;
  /** Parameters the op writes in place, in schema order (auto_functionalized). */
  readonly mutates?: readonly string[];
  readonly doc?: string;
}

export interface OpMap {
  readonly format: 'planproof-opmap/v1';
  readonly ops: Readonly<Record<string, OpMapEntry>>;
}

const NAME = '^[A-Za-z_][A-Za-z0-9_]*$';
const LITERAL = { type: ['boolean', 'number', 'string', 'null'], maxLength: 1000 };
const COND = {
  anyOf: [
    LITERAL,
    { type: 'object', additionalProperties: false, required: ['in'], properties: { in: { type: 'array', items: LITERAL, maxItems: 64 } } },
    { type: 'object', additionalProperties: false, required: ['empty'], properties: { empty: { type: 'boolean' } } },
    { type: 'object', additionalProperties: false, required: ['ndim'], properties: { ndim: { type: 'integer', minimum: 0 } } },
  ],
};
const OPMAP_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['format', 'ops'],
  properties: {
    format: { const: 'planproof-opmap/v1' },
    description: { type: 'string', maxLength: 10000 },
    ops: {
      type: 'object',
      maxProperties: 10000,
      propertyNames: { pattern: '^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*){1,2}$', maxLength: 256 },
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['args'],
        anyOf: [{ required: ['body'] }, { required: ['cases'] }],
        properties: {
          args: { type: 'array', items: { type: 'string', pattern: NAME, maxLength: 64 }, maxItems: 64 },
          body: { type: 'string', minLength: 1, maxLength: 100000 },
          cases: {
            type: 'array',
            maxItems: 256,
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['when'],
              oneOf: [{ required: ['body'] }, { required: ['refuse'] }],
              properties: {
                when: { type: 'object', maxProperties: 64, propertyNames: { pattern: NAME }, additionalProperties: COND },
                body: { type: 'string', minLength: 1, maxLength: 100000 },
                refuse: { type: 'string', minLength: 1, maxLength: 10000 },
              },
            },
          },
          sizes: {
            type: 'object',
            maxProperties: 64,
            propertyNames: { pattern: NAME, maxLength: 64 },
            additionalProperties: { anyOf: [{ type: 'string', pattern: NAME }, { type: 'array', minItems: 2, maxItems: 2, items: [{ type: 'string', pattern: NAME }, { type: 'integer' }] }] },
          },
          mutates: { type: 'array', items: { type: 'string', pattern: NAME, maxLength: 64 }, maxItems: 64 },
          doc: { type: 'string', maxLength: 10000 },
        },
      },
    },
  },
};
let validator: ValidateFunction | undefined;

/** Checks a parsed op map; ImportError naming the file and JSON path otherwise. */
export function checkOpMap(file: string, m: unknown): OpMap {
  const v = (validator ??= new (ajvClass())({ allErrors: false, strict: false }).compile(OPMAP_SCHEMA));
  if (!v(m)) {
    const e = v.errors?.[0];
    const path = (e?.instancePath ?? '').split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    const extra = e?.keyword === 'additionalProperties' ? `: unknown field '${String((e.params as { additionalProperty: string }).additionalProperty)}'` : '';
    throw new ImportError(file, 0, `invalid op map at $${path.map((p) => (/^[0-9]+$/.test(p) ? `[${p}]` : `[${JSON.stringify(p)}]`)).join('')}: ${e?.message ?? 'invalid'}${extra}`);
  }
  const map = m as unknown as OpMap;
  for (const [op, e] of Object.entries(map.ops)) {
    const seen = new Set<string>();
    for (const a of e.args) {
      if (seen.has(a)) throw new ImportError(file, 0, `op map entry '${op}': parameter '${a}' is listed twice`);
      seen.add(a);
    }
    for (const a of e.mutates ?? []) if (!seen.has(a)) throw new ImportError(file, 0, `op map entry '${op}': mutated parameter '${a}' is not one of its args`);
    for (const [k, s] of Object.entries(e.sizes ?? {})) {
      if (seen.has(k)) throw new ImportError(file, 0, `op map entry '${op}': size name '${k}' is also a parameter`);
      const p = typeof s === 'string' ? s : s[0];
      if (!seen.has(p)) throw new ImportError(file, 0, `op map entry '${op}': size '${k}' reads '${p}', not one of its args`);
    }
    for (const c of e.cases ?? []) for (const p of Object.keys(c.when)) if (!seen.has(p)) throw new ImportError(file, 0, `op map entry '${op}': a case tests '${p}', not one of its args`);
    // Every body is refused now, with the entry's name, not at the first call.
    if (e.body !== undefined) parsedBody(file, op, e, e, e.body);
    for (const c of e.cases ?? []) if (c.body !== undefined) parsedBody(file, op, e, c, c.body);
  }
  return map;
}

/** Parsed bodies by the object holding them (the entry, or one of its cases). */
const bodies = new WeakMap<object, FxGraph>();
function parsedBody(file: string, op: string, e: OpMapEntry, holder: object, body: string): FxGraph {
  let g = bodies.get(holder);
  if (g === undefined) {
    const params = [...e.args, ...Object.keys(e.sizes ?? {})];
    const text = `def forward(self${params.map((a) => `, ${a}`).join('')}):\n${body.split('\n').map((s) => `    ${s}`).join('\n')}\n`;
    try {
      g = parseFxGraph(`${file} (op map entry '${op}')`, text);
    } catch (err) {
      if (err instanceof ImportError) throw new ImportError(file, 0, `op map entry '${op}': ${err.reason}${err.line > 1 ? ` (body line ${err.line - 1})` : ''}`);
      throw err;
    }
    bodies.set(holder, g);
  }
  return g;
}

/** A literal argument's value (Python's True == 1), or undefined for anything else. */
function literal(a: FxArg | undefined): OpMapLiteral | undefined {
  if (a === undefined) return undefined;
  switch (a.kind) {
    case 'bool':
      return a.value ? 1 : 0;
    case 'num':
    case 'str':
      return a.value;
    case 'none':
      return null;
    default:
      return undefined;
  }
}
const norm = (c: OpMapLiteral): OpMapLiteral => (typeof c === 'boolean' ? (c ? 1 : 0) : c);

/** Whether argument `a` meets `c`; an absent argument (its schema default is not known here) meets none. */
function holds(l: Lowerer, a: FxArg | undefined, c: OpMapCond): boolean {
  if (a === undefined) return false;
  if (c === null || typeof c !== 'object') return literal(a) === norm(c);
  if ('in' in c) return c.in.some((x) => literal(a) === norm(x));
  if (a.kind !== 'name') return 'empty' in c && c.empty && a.kind === 'none';
  const shape = shapeOf(l.val(a, 'a case argument'));
  if (shape === undefined) return false;
  if ('empty' in c) return shape.some((d) => d === 0) === c.empty;
  return shape.length === c.ndim;
}

/** A tensor's shape, or that of `torch.empty` memory (TE's `empty_tensor` is never read, only its size tested). */
function shapeOf(v: Val): readonly number[] | undefined {
  if (v.kind === 'tensor') return v.shape;
  if (v.kind === 'opaque' && v.what === 'uninitialized memory') return JSON.parse(String(v.data['shape'])) as number[];
  return undefined;
}

/** How an argument reads in a refusal. */
function describe(l: Lowerer, a: FxArg | undefined): string {
  if (a === undefined) return 'absent';
  if (a.kind === 'name') {
    const shape = shapeOf(l.val(a, 'argument'));
    return shape !== undefined ? `a tensor [${shape.join(', ')}]` : `'${a.name}'`;
  }
  if (a.kind === 'bool') return a.value ? 'True' : 'False';
  if (a.kind === 'none') return 'None';
  const x = literal(a);
  return x === undefined ? a.kind : JSON.stringify(x);
}

/** The body for this call (its case's, or the entry's), the call's sizes bound with the parameters. */
function pick(l: Lowerer, op: string, e: OpMapEntry, params: Map<string, FxArg>): FxGraph {
  let holder: object | undefined;
  let body: string | undefined;
  for (const c of e.cases ?? []) {
    if (!Object.entries(c.when).every(([p, cond]) => holds(l, params.get(p), cond))) continue;
    if (c.refuse !== undefined) l.fail(`'${op}' (op map): ${c.refuse}`);
    [holder, body] = [c, c.body];
    break;
  }
  if (body === undefined && e.body !== undefined) [holder, body] = [e, e.body];
  if (holder === undefined || body === undefined) {
    const tested = [...new Set((e.cases ?? []).flatMap((c) => Object.keys(c.when)))];
    return l.fail(`op map entry '${op}': no case holds for ${tested.map((p) => `${p} = ${describe(l, params.get(p))}`).join(', ')} (each case needs its arguments as literals or tensors as the entry says)`);
  }
  for (const [k, s] of Object.entries(e.sizes ?? {})) {
    const [p, dim] = typeof s === 'string' ? [s, undefined] : s;
    const v = l.val(params.get(p), `op map '${op}' parameter '${p}'`);
    if (v.kind !== 'tensor') l.fail(`op map entry '${op}': size '${k}' reads '${p}', which is not a tensor`);
    const num = (x: number): FxArg => ({ kind: 'num', value: x, text: String(x) });
    if (dim === undefined) params.set(k, { kind: 'list', items: v.shape.map(num) });
    else params.set(k, num(v.shape[dim < 0 ? dim + v.shape.length : dim] ?? l.fail(`op map entry '${op}': size '${k}': '${p}' has ${v.shape.length} dim(s), not dim ${dim}`)));
  }
  return parsedBody('op map', op, e, holder, body);
}

/** Replaces a body's parameter names and node names in an argument. */
function substitute(a: FxArg, params: ReadonlyMap<string, FxArg>, rename: (n: string) => string): FxArg {
  switch (a.kind) {
    case 'name':
      return params.get(a.name) ?? { kind: 'name', name: rename(a.name) };
    case 'list':
      return { kind: 'list', items: a.items.map((x) => substitute(x, params, rename)) };
    case 'call':
      return { ...a, args: a.args.map((x) => substitute(x, params, rename)), kwargs: Object.fromEntries(Object.entries(a.kwargs).map(([k, x]) => [k, substitute(x, params, rename)])) };
    default:
      return a;
  }
}

/** Inlines an entry's body at call `n` with its parameters bound to `params`; the returned values. */
function inline(l: Lowerer, n: FxNode, op: string, e: OpMapEntry, params: Map<string, FxArg>): Val[] {
  const g = pick(l, op, e, params);
  const local = new Set(g.nodes.map((b) => b.name));
  // Body nodes get names no graph node has (`<call>__<node>`), so inlining twice never clashes.
  const rename = (s: string): string => (local.has(s) ? `${n.name}__${s}` : s);
  for (const b of g.nodes) {
    const node: FxNode = { ...b, name: rename(b.name), line: n.line, args: b.args.map((x) => substitute(x, params, rename)), kwargs: Object.fromEntries(Object.entries(b.kwargs).map(([k, x]) => [k, substitute(x, params, rename)])), ...(n.loc === undefined ? {} : { loc: n.loc }) };
    l.lowerInlined(node);
  }
  return g.outputs.map((o, k) => (o.kind === 'none' ? { kind: 'none' } : l.val(substitute(o, params, rename), `op map '${op}' return value ${k}`)));
}

/** The call's arguments bound to the entry's parameters (positional first, then keywords). */
function bindArgs(l: Lowerer, op: string, e: OpMapEntry, args: readonly FxArg[], kwargs: Readonly<Record<string, FxArg>>): Map<string, FxArg> {
  if (args.length > e.args.length) l.fail(`op map entry '${op}' lists ${e.args.length} parameter(s); the call passes ${args.length} positional argument(s)`);
  const m = new Map<string, FxArg>();
  args.forEach((a, i) => m.set(e.args[i] as string, a));
  for (const [k, a] of Object.entries(kwargs)) {
    if (!e.args.includes(k)) l.fail(`op map entry '${op}' has no parameter '${k}' (its args: ${e.args.join(', ')})`);
    if (m.has(k)) l.fail(`op map entry '${op}': parameter '${k}' given twice`);
    m.set(k, a);
  }
  return m;
}

/** Rules for the mapped ops, and for `higher_order.auto_functionalized(_v2)` calls of mapped mutating ops. */
export function opMapRules(maps: readonly OpMap[]): Record<string, Rule> {
  const entries = new Map<string, OpMapEntry>();
  for (const m of maps) for (const [op, e] of Object.entries(m.ops)) entries.set(op, e);
  const rules: Record<string, Rule> = {};
  for (const [op, e] of entries) {
    rules[op] = (l, n) => {
      if (e.mutates !== undefined && e.mutates.length > 0) l.fail(`'${op}' writes its arguments in place: only its auto_functionalized form is supported`);
      const vals = inline(l, n, op, e, bindArgs(l, op, e, n.args, n.kwargs));
      return l.bind(n, vals.length === 1 ? (vals[0] as Val) : { kind: 'list', items: vals });
    };
  }
  const functionalized = (v2: boolean): Rule => (l, n) => {
    const callee = n.args[0];
    const op = callee?.kind === 'dotted' && callee.text.startsWith('torch.ops.') ? callee.text.slice('torch.ops.'.length) : l.fail(`${n.target}: expected the op as its first argument`);
    const e = entries.get(op) ?? l.fail(`${n.target} of '${op}': no op map entry says what '${op}' computes (--op-map, or "opMap" in the relations; docs/import.md, "Op maps")`);
    const mutates = e.mutates ?? [];
    const kw: Record<string, FxArg> = {};
    const bases = n.kwargs['_all_bases'];
    for (const [k, a] of Object.entries(n.kwargs)) if (!k.startsWith('_')) kw[k] = a;
    // v2 passes each mutated argument as a base (`_<arg>_base_index` into `_all_bases`).
    const baseOf = new Map<string, number>();
    const baseList: readonly FxArg[] = bases?.kind === 'list' ? bases.items : [];
    if (v2) {
      if (bases?.kind !== 'list') l.fail(`${n.target}: expected _all_bases`);
      for (const m of mutates) {
        const ix = n.kwargs[`_${m}_base_index`];
        if (ix === undefined || ix.kind === 'none') continue;
        if (n.kwargs[`_${m}_size`] !== undefined || n.kwargs[`_${m}_stride`] !== undefined) l.fail(`${n.target}: '${m}' is a view of its base (size/stride given): not supported`);
        const k = l.int(ix, `_${m}_base_index`);
        kw[m] = baseList[k] ?? l.fail(`${n.target}: _${m}_base_index ${k} out of range`);
        baseOf.set(m, k);
      }
    }
    const vals = inline(l, n, op, e, bindArgs(l, op, e, n.args.slice(1), kw));
    if (vals.length !== mutates.length) l.fail(`op map entry '${op}' returns ${vals.length} value(s); it mutates ${mutates.length}`);
    // (op's own result: None for the void kernels mapped here, then the new values)
    if (!v2) return l.bind(n, { kind: 'list', items: [{ kind: 'none' }, ...vals] });
    const items: Val[] = [{ kind: 'none' }, ...baseList.map((b, k) => l.val(b, `_all_bases[${k}]`))];
    mutates.forEach((m, i) => {
      const k = baseOf.get(m);
      if (k !== undefined) items[1 + k] = vals[i] as Val;
    });
    return l.bind(n, { kind: 'list', items });
  };
  rules['higher_order.auto_functionalized'] = functionalized(false);
  rules['higher_order.auto_functionalized_v2'] = functionalized(true);
  return rules;
}
