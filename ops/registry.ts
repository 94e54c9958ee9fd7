/**
 * The operator registry. Adding an op family is one new file in ops/ exporting `ops`, plus
 * one line here. Attribute schemas are compiled once, lazily.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import type { Attrs, OpDef } from './types.js';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * Op families are discovered: every module in this folder that exports `ops` is one. Adding
 * a family is one new file (plus its tests). Sorted file order keeps op ids deterministic.
 */
async function discoverFamilies(): Promise<OpDef[][]> {
  const dir = dirname(fileURLToPath(import.meta.url));
  const self = fileURLToPath(import.meta.url).split(/[\\/]/).pop();
  const families: OpDef[][] = [];
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.js') && x !== self).sort()) {
    const m = (await import(pathToFileURL(join(dir, f)).href)) as { ops?: unknown };
    if (Array.isArray(m.ops)) families.push(m.ops as OpDef[]);
  }
  return families;
}

const families = await discoverFamilies();

/** Op records by name and by integer id (the id is the index in registration order). */
export class OpRegistry {
  private readonly byName = new Map<string, number>();
  readonly defs: OpDef[] = [];
  private readonly validators: (ValidateFunction | undefined)[] = [];
  private readonly ajv = new Ajv({ allErrors: false, strict: true });

  constructor(defs: Iterable<OpDef>) {
    for (const d of defs) {
      if (this.byName.has(d.name)) throw new Error(`op '${d.name}' registered twice`);
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
  /** Validates attributes; returns a one-line reason or undefined. */
  checkAttrs(id: number, attrs: Attrs): string | undefined {
    let v = this.validators[id];
    if (v === undefined) {
      v = this.ajv.compile(this.get(id).attrSchema);
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

/** The one registry of every op family. */
export const registry = new OpRegistry(families.flat());
