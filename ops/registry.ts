/**
 * The operator registry. Adding an op family is one new file in ops/ exporting `ops`, plus
 * its import and its entry in `families` below (test/layers.test.ts fails on a family file
 * left out). Attribute schemas are compiled once, lazily.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import type { Attrs, OpDef } from './types.js';
import { ops as activation } from './activation.js';
import { ops as attention } from './attention.js';
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
 * file-name order, as ids have always been numbered), so ids stay the same from run to run.
 */
const families: readonly (readonly OpDef[])[] = [activation, attention, collectives, dropout, elementwise, indexing, layout, loss, matmul, moe, norm, optim, position, reduce];

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
