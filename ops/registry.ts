/**
 * The operator registry. Adding an op family is one new file in ops/ exporting `ops`, plus
 * its import and its entry in `families` below (test/layers.test.ts fails on a family file
 * left out).
 *
 * Attribute schemas are checked by generated standalone code (ops/attr.validate.cjs, written by
 * `npm run gen:validator`), used only when the digest it carries is the digest of today's
 * schemas; otherwise they are compiled once, lazily, with ajv, which is then loaded only for
 * that (loading and compiling it was about 0.1 s of every run).
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Ajv as AjvClass, ValidateFunction } from 'ajv';
import type { Attrs, OpDef } from './types.js';
import { ops as activation } from './activation.js';
import { ops as attention } from './attention.js';
import { ops as compare } from './compare.js';
import { ops as collectives } from './collectives.js';
import { ops as dropout } from './dropout.js';
import { ops as elementwise } from './elementwise.js';
import { ops as indexing } from './indexing.js';
import { ops as layout } from './layout.js';
import { ops as loss } from './loss.js';
import { ops as matmul } from './matmul.js';
import { ops as moe } from './moe.js';
import { ops as norm } from './norm.js';
import { ops as optim } from './optim.js';
import { ops as position } from './position.js';
import { ops as reduce } from './reduce.js';

/**
 * Every op family, listed: an op's integer id is its place in this order (the families in
 * file-name order, as ids have always been numbered), so ids stay the same from run to run
 * (caches key on the engine's version, stages/cache/cache.ts, so a new family renumbering is safe).
 */
const families: readonly (readonly OpDef[])[] = [activation, attention, collectives, compare, dropout, elementwise, indexing, layout, loss, matmul, moe, norm, optim, position, reduce];

/**
 * Why an op's value-only attributes (OpDef.valueAttrs) cannot be value-only, or undefined: a
 * structural rule that reads attributes by name or rewrites them could read them.
 */
export function valueAttrsProblem(d: OpDef): string | undefined {
  const keys = d.valueAttrs ?? [];
  if (keys.length === 0) return undefined;
  for (const f of ['rescale', 'decompose', 'routing', 'sliceRegions', 'prefixAttrs', 'laneAttrs'] as const) if (d[f] !== undefined) return `value-only attributes on an op with ${f}`;
  const named = [d.narrows?.dim, d.narrows?.start, d.narrows?.end, d.zeroPads?.dim, d.zeroPads?.before, d.zeroPads?.after, d.scatter?.size];
  const props = (d.attrSchema as { properties?: Record<string, unknown> }).properties ?? {};
  for (const k of keys) {
    if (named.includes(k)) return `value-only attribute '${k}' is named by a structural rule`;
    if (!(k in props)) return `value-only attribute '${k}' is not in its attribute schema`;
  }
  return undefined;
}

/** Op records by name and by integer id (the id is the index in registration order). */
export class OpRegistry {
  private readonly byName = new Map<string, number>();
  readonly defs: OpDef[] = [];
  private readonly validators: (ValidateFunction | undefined)[] = [];
  /** The generated validators by op id, [] when stale or absent, undefined until first looked up. */
  private generated: (ValidateFunction | undefined)[] | undefined;
  private ajv: AjvClass | undefined;

  constructor(defs: Iterable<OpDef>) {
    for (const d of defs) {
      if (this.byName.has(d.name)) throw new Error(`op '${d.name}' registered twice`);
      const bad = valueAttrsProblem(d);
      if (bad !== undefined) throw new Error(`op '${d.name}': ${bad}`);
      this.byName.set(d.name, this.defs.length);
      this.defs.push(d);
    }
  }
  /** Integer id of an op name, or -1. */
  id(name: string): number {
    return this.byName.get(name) ?? -1;
  }
  get(id: number): OpDef {
    const d = this.defs[id];
    if (d === undefined) throw new Error(`no op with id ${id}`);
    return d;
  }
  names(): string[] {
    return this.defs.map((d) => d.name);
  }
  /**
   * The ops with value-only attributes (OpDef.valueAttrs): per name, the id, the keys, and
   * whether its attributes are checked by the generated validator (export `a<id>` of
   * ops/attr.validate.cjs). Incremental re-verification (cli/delta.ts) reads this table
   * without loading the registry.
   */
  valueKinds(): Record<string, { id: number; keys: string[]; generated: boolean }> {
    this.generated ??= generatedFor(this.defs);
    const out: Record<string, { id: number; keys: string[]; generated: boolean }> = {};
    this.defs.forEach((d, id) => {
      if ((d.valueAttrs?.length ?? 0) > 0) out[d.name] = { id, keys: [...(d.valueAttrs ?? [])], generated: this.generated?.[id] !== undefined };
    });
    return out;
  }
  /** Validates attributes; returns a one-line reason or undefined. */
  checkAttrs(id: number, attrs: Attrs): string | undefined {
    let v = this.validators[id];
    if (v === undefined) {
      this.generated ??= generatedFor(this.defs);
      v = this.generated[id] ?? (this.ajv ??= newAttrAjv()).compile(this.get(id).attrSchema);
      this.validators[id] = v;
    }
    if (v(attrs)) return undefined;
    const e = v.errors?.[0];
    if (e === undefined) return 'invalid attributes';
    const at = e.instancePath === '' ? 'attrs' : `attrs${e.instancePath.replace(/\//g, '.')}`;
    if (e.keyword === 'additionalProperties') return `unknown attribute '${String((e.params as { additionalProperty: string }).additionalProperty)}'`;
    if (e.keyword === 'required') return `missing attribute '${String((e.params as { missingProperty: string }).missingProperty)}'`;
    // An exact scalar fails both branches of its oneOf; the first ("must be number") misleads
    // when the string form was meant.
    if (v.errors?.some((x) => x.keyword === 'pattern' && x.instancePath === e.instancePath) === true) {
      return `${at} must be a number or an exact rational string such as "1/10" (integer numerator, nonzero denominator)`;
    }
    return `${at} ${e.message ?? 'is invalid'}`;
  }
}

/** Where the generated attribute validators are (beside this module's source, as the schema is). */
export const ATTR_VALIDATORS_PATH = fileURLToPath(new URL('../../ops/attr.validate.cjs', import.meta.url));

/** ajv's constructor, loaded on first call (no run that uses only generated validators loads it). */
export function ajvClass(): typeof AjvClass {
  return (createRequire(import.meta.url)('ajv') as typeof import('ajv')).Ajv;
}

/** The one set of options attribute schemas are compiled with (here and in the generated file). */
export function newAttrAjv(extra: Record<string, unknown> = {}): AjvClass {
  const Ajv = ajvClass();
  return new Ajv({ allErrors: false, strict: true, ...extra });
}

/** What ties the generated file to the schemas: the names and schemas of every op, in id order. */
export function attrSchemasDigest(defs: readonly OpDef[]): string {
  return createHash('sha256').update(JSON.stringify(defs.map((d) => [d.name, d.attrSchema]))).digest('hex');
}

/**
 * The generated validators (export `a<id>` per op) when the file was made from exactly these
 * schemas; [] otherwise, and every op is compiled. PLANPROOF_COMPILE_SCHEMA=1 forces compiling.
 */
export function generatedFor(defs: readonly OpDef[], path: string = ATTR_VALIDATORS_PATH): (ValidateFunction | undefined)[] {
  if (process.env['PLANPROOF_COMPILE_SCHEMA'] === '1') return [];
  let code: string;
  try {
    code = readFileSync(path, 'utf8');
  } catch {
    return [];
  }
  if (!code.includes(`// attr-schemas-sha256: ${attrSchemasDigest(defs)}\n`)) return [];
  const mod = createRequire(import.meta.url)(path) as Record<string, unknown>;
  return defs.map((_, i) => {
    const f = mod[`a${i}`];
    return typeof f === 'function' ? (f as ValidateFunction) : undefined;
  });
}

/** The one registry of every op family. */
export const registry = new OpRegistry(families.flat());
