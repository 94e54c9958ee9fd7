/**
 * Builds a plan from exported graphs: the single-device graph (the logical iteration), one
 * graph per rank (explicit per-rank programs), and a relations file stating lineage on the
 * boundary only (inputs, parameters, dropout masks, outputs). Collectives are matched by the
 * group they name and by per-rank order (the loader matches per-rank calls that way).
 * Intermediate tensors carry no lineage: `verify --infer` infers cut points (docs/import.md).
 */
import type { ValidateFunction } from 'ajv';
import { ajvClass } from '../../ops/registry.js';
import type { RawLineage, RawLogicalTensor, RawParallelOp, RawParallelTensor, RawPlan, RawProgram, RawGroup } from '../raw.js';
import { lowerGraph } from './aten.js';
import { ImportError, parseFxGraph, type FxGraph } from './fxtext.js';
import type { ConstValue, Lowered, Returned, TensorVal, Val } from './lower.js';
import { opMapRules, type OpMap } from './opmap.js';
import { liveOps, pruneDeadOps } from './prune.js';
import { numberToJson } from '../json.js';

/** Lineage of one boundary tensor, in the plan's vocabulary (DTensor placements or index/value maps). */
type LineageSpec = { logical?: string; placements?: string[]; index?: unknown[]; value?: unknown };

export interface Relations {
  format: 'planproof-relations/v1';
  mesh: { axes: { name: string; size: number }[]; ranks?: number[] };
  inputs: Record<string, LineageSpec & { role?: 'input' | 'param' | 'optimizer_state'; values?: { range: [number, number]; also?: number[] } }>;
  /**
   * Either one entry per returned value of the program's graphs in order (null: not an output,
   * AOTAutograd's saved tensors), or entries naming their node (`node`, and `logicalNode` when
   * the single-device graph's node has another name): returned values no entry names are
   * ignored, and a node need not be returned at all (a check on one region of the graph).
   */
  outputs: ((LineageSpec & { name: string; node?: string; logicalNode?: string }) | null)[];
  groups?: Record<string, { ranks: number[] } | { axes: string[] }>;
  /** Values of module-attribute constants (`self._tensor_constant0`), the same in every graph. */
  constants?: Record<string, ConstValue>;
  /** Op maps to use: shipped ones by name (apex, vllm, tg) or files (paths relative to the relations file). */
  opMap?: string | string[];
  /** "auto": dropout masks paired by order, their placements read from the shapes. */
  dropout?: 'auto';
}

const lineageProps = {
  logical: { type: 'string', minLength: 1, maxLength: 256 },
  placements: { type: 'array', items: { type: 'string', maxLength: 16 }, maxItems: 8 },
  index: { type: 'array', maxItems: 16 },
  value: {},
};
const RELATIONS_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['format', 'mesh', 'inputs', 'outputs'],
  properties: {
    format: { const: 'planproof-relations/v1' },
    mesh: { type: 'object' },
    inputs: {
      type: 'object',
      maxProperties: 100000,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: { ...lineageProps, role: { enum: ['input', 'param', 'optimizer_state'] }, values: { type: 'object' } },
      },
    },
    outputs: {
      type: 'array',
      maxItems: 100000,
      items: { oneOf: [{ type: 'null' }, { type: 'object', additionalProperties: false, required: ['name'], properties: { ...lineageProps, name: { type: 'string', pattern: '^[A-Za-z0-9_][A-Za-z0-9_.:/@#\\[\\]-]*$', maxLength: 256 }, node: { type: 'string', minLength: 1, maxLength: 256 }, logicalNode: { type: 'string', minLength: 1, maxLength: 256 } } }] },
    },
    constants: { type: 'object', maxProperties: 100000, additionalProperties: { anyOf: [{ type: 'number' }, { type: 'array', maxItems: 4096 }] } },
    opMap: { anyOf: [{ type: 'string', minLength: 1, maxLength: 4096 }, { type: 'array', items: { type: 'string', minLength: 1, maxLength: 4096 }, maxItems: 64 }] },
    dropout: { const: 'auto' },
    groups: {
      type: 'object',
      maxProperties: 10000,
      additionalProperties: {
        oneOf: [
          { type: 'object', additionalProperties: false, required: ['ranks'], properties: { ranks: { type: 'array', items: { type: 'integer', minimum: 0 }, minItems: 1, maxItems: 1048576 } } },
          { type: 'object', additionalProperties: false, required: ['axes'], properties: { axes: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 8 } } },
        ],
      },
    },
  },
};
/** Compiled on first use: the CLI imports this module for every command. */
let relationsValidator: ValidateFunction | undefined;

/** Checks a parsed relations file; ImportError naming the JSON path (and tensor) otherwise. */
export function checkRelations(file: string, r: unknown): Relations {
  const validateRelations = (relationsValidator ??= new (ajvClass())({ allErrors: false, strict: false }).compile(RELATIONS_SCHEMA));
  if (!validateRelations(r)) {
    const e = validateRelations.errors?.[0];
    const path = (e?.instancePath ?? '').split('/').slice(1);
    const tensor = path[0] === 'inputs' && path[1] !== undefined ? ` (tensor '${path[1]}')` : '';
    const extra = e?.keyword === 'additionalProperties' ? `: unknown field '${String((e.params as { additionalProperty: string }).additionalProperty)}'` : '';
    throw new ImportError(file, 0, `invalid relations at $${path.map((p) => (/^[0-9]+$/.test(p) ? `[${p}]` : `.${p}`)).join('')}${tensor}: ${e?.message ?? 'invalid'}${extra}`);
  }
  return r as unknown as Relations;
}

export interface GraphFile {
  readonly name: string;
  readonly text: string;
}

export interface ImportInput {
  /** The single-device program: one graph, or several run in order (a forward, then its backward). */
  readonly logical: GraphFile | readonly GraphFile[];
  /** One program per rank, rank i at index i, in the same form. */
  readonly ranks: readonly (GraphFile | readonly GraphFile[])[];
  readonly relations: Relations;
  readonly relationsFile: string;
  readonly name?: string;
  /** The op maps the relations' "opMap" and --op-map name, read and checked (plans/import/opmap.ts). */
  readonly opMaps?: readonly OpMap[];
  /** Called before each graph file is parsed and each program lowered, and before the plan is assembled (import-graphs' bar). */
  readonly onProgress?: (done: number, total: number, what: string) => void;
  /** The captured run's input values by name (a capture's inputs.json): kept for the inputs guards depend on. */
  readonly runInputs?: Readonly<Record<string, readonly number[]>>;
}

export interface ImportStats {
  /** Calls read, over every graph (ATen and mapped ops). */
  readonly atenOps: number;
  /** Calls per target over every graph, most frequent first. */
  readonly byTarget: readonly (readonly [string, number])[];
  /** Calls read through an op map. */
  readonly mapped: number;
  /** Returned values no output relation names (saved activations), over every program. */
  readonly ignoredReturns: number;
  /** Intermediate nodes made inputs by an assumption in the relations. */
  readonly assumptions: number;
  /** Dropout masks paired by "dropout": "auto". */
  readonly pairedMasks: number;
  /** Module constants read from the relations. */
  readonly constants: number;
  /** Plan ops removed because their values reach no output (plans/import/prune.ts). */
  readonly pruned: number;
  /** Graph inputs (over every program) with no relation that no kept op reads: left out of the plan. */
  readonly unread: number;
  /** nonzero selections read densely, and runtime assertions on their sizes dropped (plans/import/dynsize.ts). */
  readonly dynamic: { readonly selections: number; readonly asserts: number };
  readonly planOps: number;
  readonly collectives: number;
}

function lineageOf(spec: LineageSpec, dflt: string): RawLineage {
  const logical = spec.logical ?? dflt;
  if (spec.placements !== undefined) return { logical, placements: spec.placements };
  // index / value are passed through: the loader checks them against the plan schema and
  // reports the tensor they belong to.
  return { logical, ...(spec.index === undefined ? {} : { index: spec.index }), ...(spec.value === undefined ? {} : { value: spec.value }) } as RawLineage;
}

/** A node name as relations write it (`mm_7`, or `g1:mm_7` for the second graph of a program) to the program's qualified name. */
/** Name sets of each graph, built once per graph (relations name nodes; graphs hold up to 2·10^6). */
const nameSets = new WeakMap<FxGraph, { nodes: Set<string>; inputs: Set<string> }>();
function namesOf(g: FxGraph): { nodes: Set<string>; inputs: Set<string> } {
  let s = nameSets.get(g);
  if (s === undefined) nameSets.set(g, (s = { nodes: new Set(g.nodes.map((x) => x.name)), inputs: new Set(g.inputs.map((x) => x.name)) }));
  return s;
}

function qualify(rf: string, graphs: readonly FxGraph[], name: string, what: string): string | undefined {
  const m = /^g([0-9]+):(.+)$/.exec(name);
  // A later graph's input named like an earlier graph's value is that value (AOTAutograd's
  // backward takes the forward's saved nodes): it does not name a second tensor.
  const inGraph = (k: number, n: string): boolean => {
    const g = graphs[k];
    if (g === undefined) return false;
    if (namesOf(g).nodes.has(n)) return true;
    return namesOf(g).inputs.has(n) && !graphs.slice(0, k).some((e) => namesOf(e).nodes.has(n) || namesOf(e).inputs.has(n));
  };
  if (m !== null) return inGraph(Number(m[1]), m[2] as string) ? name : undefined;
  const hits = graphs.flatMap((_, k) => (inGraph(k, name) ? [k === 0 ? name : `g${k}:${name}`] : []));
  if (hits.length > 1) throw new ImportError(rf, 0, `${what}: '${name}' names a node of several graphs of ${graphs.map((g) => g.file).join(', ')}: write ${hits.map((h) => `'${h}'`).join(' or ')}`);
  return hits[0];
}

/** Is `q` (qualified) a computed node of the program, not a graph input? */
function isNode(graphs: readonly FxGraph[], q: string): boolean {
  const m = /^g([0-9]+):(.+)$/.exec(q);
  const g = graphs[m === null ? 0 : Number(m[1])];
  return g !== undefined && namesOf(g).nodes.has(m === null ? q : (m[2] as string));
}

/** Placements of a rank's dropout mask read from its shape and the logical mask's, or why not. */
function dropoutPlacements(mesh: Relations['mesh'], local: readonly number[], whole: readonly number[]): string[] | string {
  if (local.length !== whole.length) return `rank [${local.join(', ')}] and logical [${whole.join(', ')}] differ in rank`;
  const differ = whole.flatMap((d, i) => (d !== local[i] ? [i] : []));
  if (differ.length === 0) return mesh.axes.map(() => 'R');
  if (mesh.axes.length !== 1 || differ.length !== 1) return `rank [${local.join(', ')}] of the logical [${whole.join(', ')}]: the shapes do not say how (state it in "inputs"; in a captured script, cap.mask_placement before the dropout)`;
  const d = differ[0] as number;
  if ((local[d] as number) * (mesh.axes[0] as { size: number }).size !== whole[d]) return `dim ${d}: ${local[d]} is not the logical ${whole[d]} split over ${(mesh.axes[0] as { size: number }).size} ranks`;
  return [`S(${d})`];
}

/** Builds the plan. Throws ImportError (exit 2) naming the file, line, op or tensor. */
export function importGraphs(inp: ImportInput): { plan: RawPlan; stats: ImportStats } {
  const rel = inp.relations;
  const rf = inp.relationsFile;
  const nRanks = rel.mesh.axes.reduce((a, x) => a * x.size, 1);
  if (nRanks !== inp.ranks.length) throw new ImportError(rf, 0, `the mesh has ${nRanks} ranks but ${inp.ranks.length} rank graph(s) were given`);
  const filesOf = (fs: GraphFile | readonly GraphFile[]): readonly GraphFile[] => (Array.isArray(fs) ? (fs as readonly GraphFile[]) : [fs as GraphFile]);
  // Steps: each file parsed, each program (the logical one, each rank's) lowered, the plan assembled.
  const total = [inp.logical, ...inp.ranks].reduce((n, fs) => n + filesOf(fs).length, 0) + 1 + inp.ranks.length + 1;
  let done = 0;
  const step = (what: string): void => {
    inp.onProgress?.(done++, total, what);
  };
  const parse = (fs: GraphFile | readonly GraphFile[]): FxGraph[] =>
    filesOf(fs).map((f) => {
      step(`parsing ${f.name}`);
      return parseFxGraph(f.name, f.text);
    });
  const lgraphs = parse(inp.logical);
  const rgraphs = inp.ranks.map(parse);
  const extraRules = inp.opMaps === undefined || inp.opMaps.length === 0 ? undefined : opMapRules(inp.opMaps);
  const constants = rel.constants;

  // ---- assumptions on intermediate nodes: an "inputs" key that names a node, not a graph input
  const inputsSpec: Relations['inputs'] = { ...rel.inputs };
  const cutsOf = (graphs: readonly FxGraph[], logicalSide: boolean): Set<string> => {
    const cuts = new Set<string>();
    for (const [k, spec] of Object.entries(rel.inputs)) {
      const name = logicalSide ? (spec.logical ?? k) : k;
      const q = qualify(rf, graphs, name, `relation for tensor '${k}'`);
      if (q !== undefined && isNode(graphs, q)) cuts.add(q);
    }
    return cuts;
  };
  const integral = new Set(Object.entries(rel.inputs).flatMap(([k, v]) => (v.values === undefined ? [] : [k, v.logical ?? k])));
  const lower = (graphs: readonly FxGraph[], cuts: Set<string>): Lowered => lowerGraph(graphs, { ...(constants === undefined ? {} : { constants }), ...(extraRules === undefined ? {} : { extraRules }), cuts, integral });
  step('lowering the logical program');
  const logical = lower(lgraphs, cutsOf(lgraphs, true));
  const ranks = rgraphs.map((gs, r) => {
    step(`lowering rank ${r}'s program`);
    return lower(gs, cutsOf(gs, false));
  });
  step('assembling the plan');
  // A cut's relation is keyed by the name as written; its tensor by the qualified name.
  const keyOfCut = new Map<string, string>();
  for (const [k, spec] of Object.entries(rel.inputs)) {
    for (const [graphs, side] of [[lgraphs, true], ...rgraphs.map((g) => [g, false] as const)] as const) {
      const q = qualify(rf, graphs, side ? (spec.logical ?? k) : k, `relation for tensor '${k}'`);
      if (q !== undefined && q !== k && isNode(graphs, q)) keyOfCut.set(q, k);
    }
  }
  const relationOf = (id: string): Relations['inputs'][string] | undefined => inputsSpec[keyOfCut.get(id) ?? id];

  // ---- dropout masks paired by order ("dropout": "auto")
  const masks = (g: Lowered): { id: string; shape: readonly number[] }[] => g.extra.filter((e) => e.constant === undefined && e.unspecified !== true);
  if (rel.dropout === 'auto') {
    const lm = masks(logical);
    const paired = new Map<string, LineageSpec>();
    for (const g of ranks) {
      const rm = masks(g);
      if (rm.length !== lm.length) throw new ImportError(rf, 0, `"dropout": "auto": ${g.file} samples ${rm.length} dropout mask(s), ${logical.file} ${lm.length}: pair them by hand in "inputs" (in a captured script, cap.mask_placement before each dropout)`);
      rm.forEach((m, k) => {
        const l = lm[k] as { id: string; shape: readonly number[] };
        inputsSpec[l.id] ??= {};
        if (rel.inputs[m.id] !== undefined) return; // stated by hand
        const pl = dropoutPlacements(rel.mesh, m.shape, l.shape);
        if (typeof pl === 'string') throw new ImportError(rf, 0, `"dropout": "auto": mask ${k + 1} ('${m.id}' of ${g.file}, '${l.id}' of ${logical.file}): ${pl}`);
        const want: LineageSpec = { ...(m.id === l.id ? {} : { logical: l.id }), placements: pl };
        // Ranks that name a mask alike must pair it alike (one relation serves them all).
        const prev = paired.get(m.id) ?? (inputsSpec[m.id] === inputsSpec[l.id] ? undefined : inputsSpec[m.id]);
        if (prev !== undefined && JSON.stringify(prev) !== JSON.stringify(want)) throw new ImportError(rf, 0, `"dropout": "auto": mask '${m.id}' pairs differently on different ranks (${JSON.stringify(prev.placements)} and ${JSON.stringify(want.placements)}): state it in "inputs" (in a captured script, cap.mask_placement before the dropout)`);
        paired.set(m.id, want);
        if (m.id === l.id) Object.assign(inputsSpec[l.id] as object, want);
        else inputsSpec[m.id] = want;
      });
    }
  }

  // ---- boundary names: every graph input (and dropout mask, and cut node) that an output reads
  // needs a relation, and every relation names one. An input without a relation is checked after
  // dead code is dropped (below): if nothing kept reads it, it cannot change an output and needs
  // no claim (a backward partition's saved activations that each side names differently).
  const boundary = (g: Lowered): string[] => [...g.inputs.map((t) => t.id), ...masks(g).map((e) => e.id), ...g.cutInputs.map((t) => t.id)];
  const known = new Set<string>();
  const unrelated = new Map<Lowered, Set<string>>();
  for (const g of [logical, ...ranks]) {
    const u = new Set<string>();
    for (const id of boundary(g)) {
      known.add(keyOfCut.get(id) ?? id);
      if (relationOf(id) === undefined) u.add(id);
    }
    unrelated.set(g, u);
  }
  const noRelation = (g: Lowered, id: string): ImportError =>
    new ImportError(rf, 0, `no relation for input tensor '${id}' of ${g.file}: add it to "inputs"${rel.dropout === undefined && id.endsWith('.mask') ? ' (or pair dropout masks by order with "dropout": "auto")' : ''}`);
  for (const [k, spec] of Object.entries(rel.inputs)) if (!known.has(k) && !known.has(spec.logical ?? k)) throw new ImportError(rf, 0, `relation for tensor '${k}': no graph has an input or node of that name`);

  // ---- outputs: by position (every program returns that many values) or by node
  const byNode = rel.outputs.some((o) => o?.node !== undefined);
  if (byNode && rel.outputs.some((o) => o === null || o.node === undefined)) throw new ImportError(rf, 0, '"outputs": name every output\'s node ("node"), or none (one entry per returned value)');
  if (!byNode) {
    for (const g of [logical, ...ranks]) {
      if (g.outputs.length !== rel.outputs.length) throw new ImportError(rf, 0, `"outputs" lists ${rel.outputs.length} relation(s) but ${g.file} returns ${g.outputs.length} value(s) (or name each output's node: "node", and the other returned values are ignored)`);
    }
  }
  const outNames = new Set<string>();
  for (const o of rel.outputs) {
    if (o === null) continue;
    if (outNames.has(o.name)) throw new ImportError(rf, 0, `output '${o.name}' is named twice`);
    outNames.add(o.name);
  }
  if (outNames.size === 0) throw new ImportError(rf, 0, '"outputs" names no output');
  const asTensor = (g: Lowered, v: Val | Returned, where: string, name: string): TensorVal => {
    if (v === undefined || v.kind === 'none') throw new ImportError(rf, 0, `output '${name}': ${where} of ${g.file} is None`);
    if (v.kind !== 'tensor') throw new ImportError(rf, 0, `output '${name}': ${where} of ${g.file} is ${v.kind === 'opaque' ? v.what : 'a tuple'}, not a tensor`);
    return v;
  };
  /** The tensor an output relation names in a program, or undefined where a rank returns None at that position. */
  const outputValue = (g: Lowered, graphs: readonly FxGraph[], k: number, o: LineageSpec & { name: string; node?: string; logicalNode?: string }, logicalSide: boolean): TensorVal | undefined => {
    if (!byNode) {
      const v = g.outputs[k];
      if (!logicalSide && v === undefined && k < g.outputs.length) return undefined;
      return asTensor(g, v, `return value ${k}`, o.name);
    }
    const node = logicalSide ? (o.logicalNode ?? (o.node as string)) : (o.node as string);
    const q = qualify(rf, graphs, node, `output '${o.name}'`);
    if (q === undefined) throw new ImportError(rf, 0, `output '${o.name}': ${g.file} has no node '${node}'`);
    const v = g.named.get(q) ?? g.tensors.get(q) ?? g.tensors.get(q.replace(/^g[0-9]+:/, ''));
    return asTensor(g, v, `node '${node}'`, o.name);
  };

  /** The tensors an output relation names, per program (what the import summary does not count as ignored). */
  const namedSrc = new Map<Lowered, Set<string>>();
  const named = (g: Lowered): Set<string> => namedSrc.get(g) ?? (namedSrc.set(g, new Set()).get(g) as Set<string>);

  // ---- the logical graph: one device, so a collective there is over a group of one (Megatron
  // at tp 1 still calls its all-reduces): the identity. A larger group is not a single-device graph.
  for (const c of logical.collectives) {
    // The functional all_reduce names no size: a group the relations declare larger is refused too.
    const declared = rel.groups?.[c.group];
    const declaredSize = declared === undefined ? undefined : 'ranks' in declared ? declared.ranks.length : declared.axes.reduce((a, ax) => a * (rel.mesh.axes.find((m) => m.name === ax)?.size ?? 1), 1);
    const size = c.ranks?.length ?? c.groupSize ?? declaredSize;
    if (size !== undefined && size !== 1) throw new ImportError(logical.file, c.line, `a collective over ${size} ranks in the single-device graph: the logical program must run on one device`);
    const op = c.op as RawParallelOp;
    op.op = 'identity';
    delete op.attrs;
    delete op.group;
  }
  const ltensors: RawLogicalTensor[] = [];
  const lops = [...logical.ops];
  const contractIn: string[] = [];
  const inputIds = new Set(boundary(logical));
  const consts = new Map<string, number>();
  for (const g of [logical, ...ranks]) for (const e of g.extra) if (e.constant !== undefined) consts.set(e.id, e.constant);
  // Values a rank holds that nothing determines (after dist.reduce, off dst): free inputs, which the logical program has and never reads.
  const free = new Map<string, { shape: readonly number[]; dtype: string }>();
  for (const g of ranks) for (const e of g.extra) if (e.unspecified === true) free.set(e.id, e);
  for (const t of logical.tensors.values()) {
    if (consts.has(t.id)) continue;
    const r = relationOf(t.id);
    if (inputIds.has(t.id) && r !== undefined) {
      if (r.logical !== undefined && r.logical !== t.id && !keyOfCut.has(t.id)) throw new ImportError(rf, 0, `relation for tensor '${t.id}': "logical" may only rename inputs of the rank graphs; '${t.id}' is an input of the logical graph`);
      ltensors.push({ id: t.id, shape: [...t.shape], role: r.role ?? 'input', dtype: t.dtype, ...(r.values === undefined ? {} : { values: r.values }) });
      contractIn.push(t.id);
    } else ltensors.push({ id: t.id, shape: [...t.shape], role: 'activation', dtype: t.dtype });
  }
  for (const [id, c] of consts) {
    ltensors.push({ id, shape: [], role: 'input', dtype: 'int64', values: { range: [c, c + 1] } });
    contractIn.push(id);
  }
  for (const [id, e] of free) {
    if (logical.tensors.has(id)) throw new ImportError(rf, 0, `tensor name '${id}' of a rank's unspecified value is also a tensor of ${logical.file}`);
    ltensors.push({ id, shape: [...e.shape], role: 'input', dtype: e.dtype });
    contractIn.push(id);
  }
  const logicalShapes = new Map(ltensors.map((t) => [t.id, t]));
  rel.outputs.forEach((o, k) => {
    if (o === null) return;
    if (logicalShapes.has(o.name)) throw new ImportError(rf, 0, `output name '${o.name}' is also a tensor of ${logical.file}: choose another name`);
    const src = outputValue(logical, lgraphs, k, o, true) as TensorVal;
    named(logical).add(src.id);
    ltensors.push({ id: o.name, shape: [...src.shape], role: 'output', dtype: src.dtype });
    lops.push({ id: `return.${o.name}`, op: 'identity', inputs: [src.id], outputs: [o.name], loc: `${byNode ? `${logical.file}: node ${o.logicalNode ?? o.node}` : `${logical.file}: return value ${k}`}${madeAt(logical.ops, src.id)}` });
  });
  for (const id of new Set([...contractIn])) {
    const t = logicalShapes.get(id);
    if (t !== undefined && t.role === 'activation') t.role = 'input';
  }
  // The logical name a rank's boundary tensor stands for: a cut's logical node, qualified.
  const logicalNameOf = (id: string, spec: LineageSpec): string => {
    const key = keyOfCut.get(id) ?? id;
    const target = spec.logical ?? key;
    // (graph inputs keep their names in every graph; only nodes are qualified)
    const q = qualify(rf, lgraphs, target, `relation for tensor '${key}'`);
    return q !== undefined && isNode(lgraphs, q) ? q : target;
  };

  // ---- groups: a declared group, or the ranks whose graphs call collectives on that name
  const members = new Map<string, Set<number>>();
  ranks.forEach((g, r) => {
    for (const c of g.collectives) {
      let s = members.get(c.group);
      if (s === undefined) members.set(c.group, (s = new Set()));
      s.add(r);
    }
  });
  const groupOf = (name: string): RawGroup => {
    const d = rel.groups?.[name];
    if (d !== undefined) return 'ranks' in d ? [...d.ranks].sort((a, b) => a - b) : { axes: d.axes };
    return [...(members.get(name) ?? [])].sort((a, b) => a - b);
  };
  for (const g of ranks) {
    for (const c of g.collectives) {
      const grp = groupOf(c.group);
      const size = Array.isArray(grp) ? grp.length : undefined;
      if (c.ranks !== undefined && Array.isArray(grp) && (grp.length !== c.ranks.length || c.ranks.some((x) => !grp.includes(x)))) throw new ImportError(g.file, c.line, `collective ranks [${c.ranks.join(', ')}] differ from the ranks that call it`);
      if (c.groupSize !== undefined && size !== undefined && c.groupSize !== size) {
        throw new ImportError(g.file, c.line, `group '${c.group}' has group_size ${c.groupSize} here, but ${size} rank graph(s) call collectives on it (ranks ${(grp as number[]).join(', ')}); declare it in the relations' "groups" if some members make no call`);
      }
      c.op.group = grp;
    }
  }

  // ---- the rank programs
  const programs: RawProgram[] = ranks.map((g, r) => {
    const tensors: RawParallelTensor[] = [];
    const ops = [...g.ops];
    const bset = new Set(boundary(g));
    for (const t of g.tensors.values()) {
      let lineage: RawLineage | undefined;
      if (consts.has(t.id) || free.has(t.id)) lineage = { logical: t.id };
      else if (bset.has(t.id)) {
        const spec = relationOf(t.id);
        // (no relation: allowed only if nothing kept reads it, checked after pruning)
        if (spec === undefined) {
          tensors.push({ id: t.id, shape: [...t.shape], dtype: t.dtype });
          continue;
        }
        const target = logicalNameOf(t.id, spec);
        const lt = logicalShapes.get(target);
        if (lt === undefined || !contractIn.includes(target)) throw new ImportError(rf, 0, `relation for tensor '${t.id}': '${target}' is not an input of the logical graph ${logical.file}`);
        if (spec.placements === undefined && spec.index === undefined && spec.value === undefined && spec.logical === undefined && (lt.shape.length !== t.shape.length || lt.shape.some((d, i) => d !== t.shape[i]))) {
          throw new ImportError(rf, 0, `relation for tensor '${t.id}' states no placements, but rank ${r} holds [${t.shape.join(', ')}] of the logical [${lt.shape.join(', ')}]`);
        }
        if (spec.placements !== undefined && spec.placements.length !== rel.mesh.axes.length) throw new ImportError(rf, 0, `relation for tensor '${t.id}': ${spec.placements.length} placement(s) for a mesh of ${rel.mesh.axes.length} axis/axes`);
        lineage = lineageOf({ ...spec, logical: target }, t.id);
      }
      tensors.push({ id: t.id, shape: [...t.shape], dtype: t.dtype, ...(lineage === undefined ? {} : { lineage }) });
    }
    rel.outputs.forEach((o, k) => {
      if (o === null) return;
      // A rank that returns None there does not hold that output (a pipeline's loss is on its
      // last stage); the loader checks that the ranks that do hold every output whole.
      const src = outputValue(g, rgraphs[r] as FxGraph[], k, o, false);
      if (src === undefined) return;
      named(g).add(src.id);
      const id = `return.${o.name}`;
      if (g.tensors.has(id)) throw new ImportError(g.file, 0, `tensor name '${id}' is reserved for return values`);
      tensors.push({ id, shape: [...src.shape], dtype: src.dtype, lineage: lineageOf({ logical: o.logical ?? o.name, ...(o.placements === undefined ? {} : { placements: o.placements }), ...(o.index === undefined ? {} : { index: o.index }), ...(o.value === undefined ? {} : { value: o.value }) }, o.name) });
      ops.push({ id: `return.${o.name}.op`, op: 'identity', inputs: [src.id], outputs: [id], loc: `${byNode ? `${g.file}: node ${o.node}` : `${g.file}: return value ${k}`}${madeAt(g.ops, src.id)}` });
    });
    return { name: `rank ${r} (${g.file})`, ranks: [r], tensors, ops };
  });

  // Ops whose values reach no output (saved activations, what precedes an assumption) go.
  const lgraph = { ops: lops };
  const pruned = pruneDeadOps(lgraph, programs, (o) => o.id.startsWith('return.'), { logical: guardTensors(logical), ranks: ranks.map(guardTensors) });
  const used = (ops: readonly { inputs: readonly string[]; outputs: readonly string[] }[]): Set<string> => new Set(ops.flatMap((o) => [...o.inputs, ...o.outputs]));
  const lUsed = used(lgraph.ops);
  // An input without a relation that a kept op still reads would need one: refused, naming it.
  const refuseRead = (g: Lowered, u: Set<string>): void => {
    for (const id of unrelated.get(g) ?? []) if (u.has(id)) throw noRelation(g, id);
  };
  refuseRead(logical, lUsed);
  const keptL = ltensors.filter((t) => t.role !== 'activation' || lUsed.has(t.id));
  programs.forEach((p, r) => {
    const u = used(p.ops);
    refuseRead(ranks[r] as Lowered, u);
    p.tensors = (p.tensors ?? []).filter((t) => t.lineage !== undefined || u.has(t.id));
  });
  const unread = [...unrelated.values()].reduce((a, s) => a + s.size, 0);

  const plan: RawPlan = {
    format: 'planproof/v1',
    name: inp.name ?? 'imported',
    description: `Imported from exported ATen graphs: logical ${logical.file}; ranks ${ranks.map((g) => g.file).join(', ')}; relations ${rf}.`,
    mesh: rel.mesh,
    logical: { tensors: keptL, ops: lgraph.ops },
    parallel: { programs },
    contract: { inputs: contractIn, outputs: [...outNames] },
  };
  // Values read into Python on either side: the graphs hold them as constants (a proof is for them only).
  const reads = [logical, ...ranks].flatMap((g) => g.reads.map((r) => `${g === logical ? 'logical run' : g.file}: ${r}`));
  if (reads.length > 0) plan['x-planproof-specialized'] = reads.slice(0, 1000);
  // What a witness must reproduce of those reads (stages/witness/guards.ts checks it).
  const guards = [logical, ...ranks].flatMap((g, i) =>
    g.guards.map((x) => ({
      program: i === 0 ? 'logical' : i - 1,
      tensor: x.tensor,
      cmp: x.cmp,
      ...(x.values === undefined ? {} : { values: x.values === null ? null : x.values.map(numberToJson) }),
      ...(typeof x.other === 'string' ? { other: x.other } : x.other === undefined ? {} : { otherValue: numberToJson(x.other) }),
      ...(x.outcome === undefined ? {} : { outcome: x.outcome }),
      where: x.where,
    })),
  );
  if (guards.length > 0) plan['x-planproof-guards'] = guards;
  // The run's values of the inputs the guards depend on: the first witness draw keeps the reads there.
  if (guards.length > 0 && inp.runInputs !== undefined) {
    const run: Record<string, readonly number[]> = {};
    const numel = (id: string): number => (logicalShapes.get(id)?.shape ?? []).reduce((x, y) => x * y, 1);
    for (const g of [logical, ...ranks]) {
      for (const id of guardCone(g)) {
        const spec = relationOf(id);
        const name = spec === undefined ? id : logicalNameOf(id, spec);
        const v = inp.runInputs[name];
        if (v !== undefined && contractIn.includes(name) && v.length === numel(name)) run[name] = v;
      }
    }
    if (Object.keys(run).length > 0) plan['x-planproof-run-inputs'] = run;
  }
  const atenOps = [logical, ...ranks].reduce((a, g) => a + g.atenOps, 0);
  const planOps = lgraph.ops.length + programs.reduce((a, p) => a + p.ops.length, 0);
  const collectives = ranks.reduce((a, g) => a + g.collectives.length, 0);
  const counts = new Map<string, number>();
  for (const g of [logical, ...ranks]) for (const [t, c] of g.byTarget) counts.set(t, (counts.get(t) ?? 0) + c);
  const byTarget = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const mappedOps = new Set(inp.opMaps?.flatMap((m) => Object.keys(m.ops)) ?? []);
  const mapped = byTarget.reduce((a, [t, c]) => a + (mappedOps.has(t) || t.startsWith('higher_order.') ? c : 0), 0);
  const ignoredReturns = [logical, ...ranks].reduce((a, g) => a + g.outputs.filter((v) => v !== undefined && (v.kind !== 'tensor' || namedSrc.get(g)?.has(v.id) !== true)).length, 0);
  const assumptions = [logical, ...ranks].reduce((a, g) => a + g.cutInputs.length, 0);
  const pairedMasks = rel.dropout === 'auto' ? ranks.reduce((a, g) => a + masks(g).filter((m) => rel.inputs[m.id] === undefined).length, 0) : 0;
  const constantReads = [logical, ...ranks].reduce((a, g) => a + (g.byTarget.get('getattr') ?? 0), 0);
  const dynamic = { selections: counts.get('aten.nonzero.default') ?? 0, asserts: counts.get('aten._assert_scalar.default') ?? 0 };
  return { plan, stats: { atenOps, byTarget, mapped, ignoredReturns, assumptions, pairedMasks, constants: constantReads, planOps, collectives, pruned, unread, dynamic } };
}

/**
 * Where a returned tensor was made in the user's code: the `(file:line)` of its producer's loc
 * (an FX `# File:` comment). A return value's own place is the graph file, which a capture
 * deletes: the user's line is what the report should point at.
 */
function madeAt(ops: readonly RawParallelOp[], id: string): string {
  for (let i = ops.length - 1; i >= 0; i--) {
    const op = ops[i] as RawParallelOp;
    if (!op.outputs.includes(id)) continue;
    const m = /\(([^()]*)\)$/.exec(op.loc ?? '');
    return m === null ? '' : ` (made at ${m[1] as string})`;
  }
  return '';
}

/** The tensors a program's guards read (each guard's tensor, and the other side of a comparison). */
function guardTensors(g: Lowered): Set<string> {
  return new Set(g.guards.flatMap((x) => (typeof x.other === 'string' ? [x.tensor, x.other] : [x.tensor])));
}

/** The graph inputs a program's guards depend on (through its ops), by id. */
function guardCone(g: Lowered): Set<string> {
  const read = guardTensors(g);
  const live = liveOps(g.ops, (o) => o.outputs.some((t) => read.has(t)));
  g.ops.forEach((o, i) => live[i] === true && o.inputs.forEach((t) => read.add(t)));
  return new Set(g.inputs.map((t) => t.id).filter((t) => read.has(t)));
}
