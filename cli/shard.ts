/**
 * Sharded runs for CI matrices (docs/reports.md, "Sharded runs"): `verify --shard i/n` proves
 * the i-th of n disjoint subsets of the stage proofs and writes a part file; `planproof merge`
 * reads the n parts, checks they belong together (same plan bytes, same options, each shard
 * once, no stage twice), and runs the verification again with the parts' results in place of
 * the proofs, so its verdict, report and exit code are a single run's.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { ValidateFunction } from 'ajv';
import { ajvClass } from '../ops/registry.js';
import type { ShardResult } from '../stages/verify.js';
import type { StageResult } from '../stages/decompose/prove.js';

const PART_FORMAT = 'planproof-part/v1';

/** The options a part was proved under: a merge runs with exactly these. */
export interface PartOptions {
  readonly seed: number;
  readonly engine: 'normal' | 'z3';
  readonly deadline: number;
  readonly timeLimit?: number;
  readonly tensorLevel: boolean;
  readonly reduce: boolean;
}

interface PartResult extends ShardResult {
  /** 0-based stage index in the plan's decomposition. */
  readonly index: number;
}

export interface Part {
  readonly format: typeof PART_FORMAT;
  readonly shard: { readonly index: number; readonly count: number };
  readonly plan: { readonly file: string; readonly sha256: string };
  readonly options: PartOptions;
  readonly results: PartResult[];
}

/** "i/n" with 1 <= i <= n <= 4096, or an error message. */
export function parseShard(s: unknown): { index: number; count: number } | string {
  const m = typeof s === 'string' ? /^([0-9]{1,4})\/([0-9]{1,4})$/.exec(s) : null;
  const index = Number(m?.[1]);
  const count = Number(m?.[2]);
  if (m === null || index < 1 || count < 1 || index > count || count > 4096) return `--shard must be i/n with 1 <= i <= n <= 4096 (shard i of n), got ${String(s)}`;
  return { index, count };
}

/** The digest of the plan text a run proved (the parsed plan re-serialized: formatting does not count). */
export function planDigest(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export function partOf(shard: { index: number; count: number }, file: string, text: string, options: PartOptions, results: readonly StageResult[]): Part {
  const rs = [...results]
    .sort((a, b) => a.stage.index - b.stage.index)
    .map(({ stage, ...r }) => ({ index: stage.index, ...r }));
  return { format: PART_FORMAT, shard, plan: { file, sha256: planDigest(text) }, options, results: rs };
}

const num = { type: 'number' } as const;
const PART_SCHEMA = {
  type: 'object',
  required: ['format', 'shard', 'plan', 'options', 'results'],
  properties: {
    format: { const: PART_FORMAT },
    shard: { type: 'object', required: ['index', 'count'], properties: { index: { type: 'integer', minimum: 1 }, count: { type: 'integer', minimum: 1, maximum: 4096 } } },
    plan: { type: 'object', required: ['file', 'sha256'], properties: { file: { type: 'string' }, sha256: { type: 'string', pattern: '^[0-9a-f]{64}$' } } },
    options: {
      type: 'object',
      required: ['seed', 'engine', 'deadline', 'tensorLevel', 'reduce'],
      properties: { seed: { type: 'integer' }, engine: { enum: ['normal', 'z3'] }, deadline: num, timeLimit: num, tensorLevel: { type: 'boolean' }, reduce: { type: 'boolean' } },
      additionalProperties: false,
    },
    results: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index', 'status', 'failingRanks', 'logicalOps', 'parallelOps', 'terms', 'ms'],
        properties: {
          index: { type: 'integer', minimum: 0 },
          status: { enum: ['proved', 'differs', 'unknown'] },
          reason: { type: 'string' },
          failingRanks: { type: 'array', items: { type: 'integer', minimum: 0 } },
          logicalOps: num,
          parallelOps: num,
          terms: num,
          ms: num,
          decidedBy: { enum: ['z3', 'tensor'] },
        },
        additionalProperties: false,
      },
    },
  },
  additionalProperties: false,
} as const;

/** Compiled on first use: every command imports this module, few read part files. */
let partValidator: ValidateFunction<Part> | undefined;
const validatePart = (): ValidateFunction<Part> => (partValidator ??= new (ajvClass())({ allErrors: false }).compile<Part>(PART_SCHEMA));

/** What merge proves from: the plan, the options and every stage result, or an error message. */
export interface Merged {
  readonly file: string;
  readonly sha256: string;
  readonly options: PartOptions;
  readonly proved: Map<number, ShardResult>;
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Reads and checks the parts of one sharded run. */
export function readParts(files: readonly string[]): Merged | string {
  const parts: Part[] = [];
  for (const f of files) {
    let v: unknown;
    try {
      v = JSON.parse(readFileSync(f, 'utf8'));
    } catch (e) {
      return `cannot read part ${f}: ${e instanceof Error ? e.message : String(e)}`;
    }
    const validate = validatePart();
    if (!validate(v)) {
      const e = validate.errors?.[0];
      return `${f} is not a planproof part file (${PART_FORMAT}): ${e === undefined ? 'invalid' : `${e.instancePath || '$'} ${e.message ?? ''}`}`;
    }
    parts.push(v);
  }
  const first = parts[0];
  if (first === undefined) return 'name the part files to merge';
  const n = first.shard.count;
  const seen = new Map<number, string>();
  for (const [k, p] of parts.entries()) {
    const f = files[k] as string;
    if (p.shard.count !== n) return `${f} is shard ${p.shard.index}/${p.shard.count}, ${files[0] ?? ''} is of ${n} shards`;
    if (p.plan.sha256 !== first.plan.sha256) return `${f} proved another plan (or another version of it) than ${files[0] ?? ''}`;
    if (!same(p.options, first.options)) return `${f} was proved with other options than ${files[0] ?? ''}: ${JSON.stringify(p.options)} against ${JSON.stringify(first.options)}`;
    const dup = seen.get(p.shard.index);
    if (dup !== undefined) return `shard ${p.shard.index}/${n} is given twice: ${dup} and ${f}`;
    seen.set(p.shard.index, f);
  }
  const missing = Array.from({ length: n }, (_, i) => i + 1).filter((i) => !seen.has(i));
  if (missing.length > 0) return `shard(s) ${missing.map((i) => `${i}/${n}`).join(', ')} missing: a merge needs all ${n} parts`;
  const proved = new Map<number, ShardResult>();
  for (const p of parts)
    for (const { index, ...r } of p.results) {
      if (proved.has(index)) return `stage ${index + 1} is in two parts: the parts are not of one sharded run`;
      proved.set(index, r);
    }
  return { file: first.plan.file, sha256: first.plan.sha256, options: first.options, proved };
}

/**
 * The verdict section of a `verify --json` (or `merge --json`) output: everything but the
 * timings (`ms` of the run and of each stage, `phases`), which no two runs share. Sharded
 * runs are tested to give a single run's verdict section byte for byte.
 */
export function verdictSection(json: unknown): string {
  const strip = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(strip);
    if (v === null || typeof v !== 'object') return v;
    return Object.fromEntries(Object.entries(v).filter(([k]) => k !== 'ms' && k !== 'phases').map(([k, x]) => [k, strip(x)]));
  };
  return JSON.stringify(strip(json), null, 2);
}
