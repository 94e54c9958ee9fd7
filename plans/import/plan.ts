/**
 * Builds a plan from exported graphs: the single-device graph (the logical iteration), one
 * graph per rank (explicit per-rank programs), and a relations file stating lineage on the
 * boundary only (inputs, parameters, dropout masks, outputs). Collectives are matched by the
 * group they name and by per-rank order (the loader matches per-rank calls that way).
 * Intermediate tensors carry no lineage: `verify --infer` infers cut points (docs/import.md).
 */
import type { ValidateFunction } from 'ajv';
import { ajvClass } from '../../ops/registry.js';
import type { RawLineage, RawLogicalTensor, RawParallelTensor, RawPlan, RawProgram, RawGroup } from '../raw.js';
import { lowerGraph, type Lowered, type TensorVal } from './aten.js';
import { ImportError, parseFxGraph } from './fxtext.js';

/** Lineage of one boundary tensor, in the plan's vocabulary (DTensor placements or index/value maps). */
type LineageSpec = { logical?: string; placements?: string[]; index?: unknown[]; value?: unknown };

export interface Relations {
  format: 'planproof-relations/v1';
  mesh: { axes: { name: string; size: number }[]; ranks?: number[] };
  inputs: Record<string, LineageSpec & { role?: 'input' | 'param' | 'optimizer_state'; values?: { range: [number, number]; also?: number[] } }>;
  /** One entry per returned value of the program's graphs in order; null: not an output (AOTAutograd's saved tensors). */
  outputs: ((LineageSpec & { name: string }) | null)[];
  groups?: Record<string, { ranks: number[] } | { axes: string[] }>;
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
      items: { oneOf: [{ type: 'null' }, { type: 'object', additionalProperties: false, required: ['name'], properties: { ...lineageProps, name: { type: 'string', pattern: '^[A-Za-z0-9_][A-Za-z0-9_.:/@#\\[\\]-]*$', maxLength: 256 } } }] },
    },
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
}

export interface ImportStats {
  readonly atenOps: number;
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

/** Builds the plan. Throws ImportError (exit 2) naming the file, line, op or tensor. */
export function importGraphs(inp: ImportInput): { plan: RawPlan; stats: ImportStats } {
  const rel = inp.relations;
  const rf = inp.relationsFile;
  const nRanks = rel.mesh.axes.reduce((a, x) => a * x.size, 1);
  if (nRanks !== inp.ranks.length) throw new ImportError(rf, 0, `the mesh has ${nRanks} ranks but ${inp.ranks.length} rank graph(s) were given`);
  const lower = (fs: GraphFile | readonly GraphFile[]): Lowered => lowerGraph((Array.isArray(fs) ? (fs as readonly GraphFile[]) : [fs as GraphFile]).map((f) => parseFxGraph(f.name, f.text)));
  const logical = lower(inp.logical);
  const ranks = inp.ranks.map(lower);

  // ---- boundary names: every graph input (and dropout mask) needs a relation, and every relation names one.
  const boundary = (g: Lowered): string[] => [...g.inputs.map((t) => t.id), ...g.extra.filter((e) => e.constant === undefined).map((e) => e.id)];
  const known = new Set<string>();
  for (const g of [logical, ...ranks]) {
    for (const id of boundary(g)) {
      known.add(id);
      if (rel.inputs[id] === undefined) throw new ImportError(rf, 0, `no relation for input tensor '${id}' of ${g.file}: add it to "inputs"`);
    }
  }
  for (const k of Object.keys(rel.inputs)) if (!known.has(k)) throw new ImportError(rf, 0, `relation for tensor '${k}': no graph has an input of that name`);
  for (const g of [logical, ...ranks]) {
    if (g.outputs.length !== rel.outputs.length) throw new ImportError(rf, 0, `"outputs" lists ${rel.outputs.length} relation(s) but ${g.file} returns ${g.outputs.length} value(s)`);
  }
  const outNames = new Set<string>();
  for (const o of rel.outputs) {
    if (o === null) continue;
    if (outNames.has(o.name)) throw new ImportError(rf, 0, `output '${o.name}' is named twice`);
    outNames.add(o.name);
  }
  if (outNames.size === 0) throw new ImportError(rf, 0, '"outputs" names no output');
  /** The k-th returned value of a program, which has an output relation: a tensor, not None. */
  const returnedValue = (g: Lowered, k: number, name: string): TensorVal => g.outputs[k] ?? (() => {
    throw new ImportError(rf, 0, `output '${name}': return value ${k} of ${g.file} is None`);
  })();

  // ---- the logical graph
  const ltensors: RawLogicalTensor[] = [];
  const lops = [...logical.ops];
  const contractIn: string[] = [];
  const inputIds = new Set(boundary(logical));
  const consts = new Map<string, number>();
  for (const g of [logical, ...ranks]) for (const e of g.extra) if (e.constant !== undefined) consts.set(e.id, e.constant);
  for (const t of logical.tensors.values()) {
    if (consts.has(t.id)) continue;
    const r = rel.inputs[t.id];
    if (inputIds.has(t.id) && r !== undefined) {
      if (r.logical !== undefined && r.logical !== t.id) throw new ImportError(rf, 0, `relation for tensor '${t.id}': "logical" may only rename inputs of the rank graphs; '${t.id}' is an input of the logical graph`);
      ltensors.push({ id: t.id, shape: [...t.shape], role: r.role ?? 'input', dtype: t.dtype, ...(r.values === undefined ? {} : { values: r.values }) });
      contractIn.push(t.id);
    } else ltensors.push({ id: t.id, shape: [...t.shape], role: 'activation', dtype: t.dtype });
  }
  for (const [id, c] of consts) {
    ltensors.push({ id, shape: [], role: 'input', dtype: 'int64', values: { range: [c, c + 1] } });
    contractIn.push(id);
  }
  const logicalShapes = new Map(ltensors.map((t) => [t.id, t]));
  rel.outputs.forEach((o, k) => {
    if (o === null) return;
    if (logicalShapes.has(o.name)) throw new ImportError(rf, 0, `output name '${o.name}' is also a tensor of ${logical.file}: choose another name`);
    const src = returnedValue(logical, k, o.name);
    ltensors.push({ id: o.name, shape: [...src.shape], role: 'output', dtype: src.dtype });
    lops.push({ id: `return.${o.name}`, op: 'identity', inputs: [src.id], outputs: [o.name], loc: `${logical.file}: return value ${k}` });
  });
  for (const id of new Set([...contractIn])) {
    const t = logicalShapes.get(id);
    if (t !== undefined && t.role === 'activation') t.role = 'input';
  }

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
      if (consts.has(t.id)) lineage = { logical: t.id };
      else if (bset.has(t.id)) {
        const spec = rel.inputs[t.id];
        if (spec === undefined) throw new ImportError(rf, 0, `no relation for input tensor '${t.id}'`);
        const target = spec.logical ?? t.id;
        const lt = logicalShapes.get(target);
        if (lt === undefined || !contractIn.includes(target)) throw new ImportError(rf, 0, `relation for tensor '${t.id}': '${target}' is not an input of the logical graph ${logical.file}`);
        if (spec.placements === undefined && spec.index === undefined && spec.value === undefined && spec.logical === undefined && (lt.shape.length !== t.shape.length || lt.shape.some((d, i) => d !== t.shape[i]))) {
          throw new ImportError(rf, 0, `relation for tensor '${t.id}' states no placements, but rank ${r} holds [${t.shape.join(', ')}] of the logical [${lt.shape.join(', ')}]`);
        }
        if (spec.placements !== undefined && spec.placements.length !== rel.mesh.axes.length) throw new ImportError(rf, 0, `relation for tensor '${t.id}': ${spec.placements.length} placement(s) for a mesh of ${rel.mesh.axes.length} axis/axes`);
        lineage = lineageOf(spec, t.id);
      }
      tensors.push({ id: t.id, shape: [...t.shape], dtype: t.dtype, ...(lineage === undefined ? {} : { lineage }) });
    }
    rel.outputs.forEach((o, k) => {
      if (o === null) return;
      // A rank that returns None there does not hold that output (a pipeline's loss is on its
      // last stage); the loader checks that the ranks that do hold every output whole.
      if (g.outputs[k] === undefined && k < g.outputs.length) return;
      const src = returnedValue(g, k, o.name);
      const id = `return.${o.name}`;
      if (g.tensors.has(id)) throw new ImportError(g.file, 0, `tensor name '${id}' is reserved for return values`);
      tensors.push({ id, shape: [...src.shape], dtype: src.dtype, lineage: lineageOf({ ...o, logical: o.logical ?? o.name }, o.name) });
      ops.push({ id: `return.${o.name}.op`, op: 'identity', inputs: [src.id], outputs: [id], loc: `${g.file}: return value ${k}` });
    });
    return { name: `rank ${r} (${g.file})`, ranks: [r], tensors, ops };
  });

  const plan: RawPlan = {
    format: 'planproof/v1',
    name: inp.name ?? 'imported',
    description: `Imported from exported ATen graphs: logical ${logical.file}; ranks ${ranks.map((g) => g.file).join(', ')}; relations ${rf}.`,
    mesh: rel.mesh,
    logical: { tensors: ltensors, ops: lops },
    parallel: { programs },
    contract: { inputs: contractIn, outputs: [...outNames] },
  };
  // Values read into Python on either side: the graphs hold them as constants (a proof is for them only).
  const reads = [logical, ...ranks].flatMap((g) => g.reads.map((r) => `${g === logical ? 'logical run' : g.file}: ${r}`));
  if (reads.length > 0) plan['x-planproof-specialized'] = reads.slice(0, 1000);
  const atenOps = [logical, ...ranks].reduce((a, g) => a + g.atenOps, 0);
  const planOps = lops.length + programs.reduce((a, p) => a + p.ops.length, 0);
  const collectives = ranks.reduce((a, g) => a + g.collectives.length, 0);
  return { plan, stats: { atenOps, planOps, collectives } };
}
