/** JSON Schema validation of a raw plan, with errors turned into `$.a.b[3]` paths. */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import type { IssueSink } from './errors.js';

const SCHEMA_PATH = fileURLToPath(new URL('../../plans/plan-v1.schema.json', import.meta.url));

let validator: ValidateFunction | undefined;

function getValidator(): ValidateFunction {
  if (validator === undefined) {
    const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as object;
    const ajv = new Ajv2020({ allErrors: true, strict: true, strictTuples: false, allowUnionTypes: true });
    validator = ajv.compile(schema);
  }
  return validator;
}

function pointerToPath(ptr: string): string {
  if (ptr === '') return '$';
  return (
    '$' +
    ptr
      .split('/')
      .slice(1)
      .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
      .map((seg) => (/^[0-9]+$/.test(seg) ? `[${seg}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(seg) ? `.${seg}` : `[${JSON.stringify(seg)}]`))
      .join('')
  );
}

function describe(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'additionalProperties':
      return `unknown field '${String(p['additionalProperty'])}'`;
    case 'required':
      return `missing required field '${String(p['missingProperty'])}'`;
    case 'const':
      return `must be ${JSON.stringify(p['allowedValue'])}`;
    case 'enum':
      return `must be one of ${(p['allowedValues'] as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'type':
      return `must be of type ${String(p['type'])}`;
    case 'maximum':
    case 'minimum':
    case 'maxItems':
    case 'minItems':
    case 'maxLength':
    case 'minLength':
    case 'maxProperties':
    case 'minProperties':
      return `${e.message ?? 'out of range'} (limit of the plan format)`;
    case 'pattern':
      return `has an invalid form (${e.message ?? ''})`;
    default:
      return e.message ?? 'is invalid';
  }
}

/** Branching keywords say little; a deeper, concrete error is what the user needs. */
const vague = new Set(['oneOf', 'anyOf', 'not', 'if', 'const', 'type', 'enum', 'required', 'additionalProperties']);

/**
 * Validates the raw plan. For each offending location the most specific error is reported:
 * the deepest path wins; among errors at one path, concrete keywords beat branching ones.
 */
export function validateSchema(raw: unknown, sink: IssueSink): boolean {
  const v = getValidator();
  if (v(raw)) return true;
  const errs = v.errors ?? [];
  // Errors inside a oneOf branch are only meaningful if every branch failed at that place:
  // keep the errors of the deepest location, which is where the user has to look.
  const byPath = new Map<string, ErrorObject[]>();
  for (const e of errs) {
    const list = byPath.get(e.instancePath) ?? [];
    list.push(e);
    byPath.set(e.instancePath, list);
  }
  const paths = [...byPath.keys()];
  // Drop a path if a deeper failing path exists below it (the parent error is a consequence).
  const leaves = new Set(paths.filter((p) => !paths.some((q) => q !== p && q.startsWith(p + '/'))));
  for (const p of paths.sort()) {
    let list = byPath.get(p) ?? [];
    if (!leaves.has(p)) {
      // A missing or unknown field at a parent is its own mistake, unless it comes from an
      // alternative of a oneOf that the value did not mean to take.
      list = list.filter((e) => (e.keyword === 'required' || e.keyword === 'additionalProperties') && !/\/(oneOf|anyOf)\//.test(e.schemaPath));
      if (list.length === 0) continue;
    }
    const concrete = list.filter((e) => !vague.has(e.keyword));
    const pick = concrete[0] ?? list.find((e) => e.keyword !== 'oneOf' && e.keyword !== 'anyOf') ?? list[0];
    if (pick === undefined) continue;
    let msg = describe(pick);
    // Within oneOf the sibling alternatives explain what was expected.
    if (concrete.length === 0 && list.length > 1) {
      const alts = [...new Set(list.filter((e) => e.keyword !== 'oneOf').map(describe))];
      if (alts.length > 1) msg = `${alts.slice(0, 3).join(', or ')}`;
    }
    sink.add(pointerToPath(p), msg);
  }
  return false;
}
