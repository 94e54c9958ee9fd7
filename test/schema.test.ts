/**
 * The generated plan-schema validator (plans/plan-v1.validate.cjs) is what the schema says:
 * the committed file is the one plans/schema-gen.ts makes from today's schema, it is used only
 * for the schema text it was made from, and it reports exactly what the compiled schema
 * reports on every example, fixture and malformed plan.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, readdirSync } from 'node:fs';
import { newPlanAjv, SCHEMA_PATH, STANDALONE_PATH, standaloneFor, validateSchema } from '../plans/schema.js';
import { standaloneSource } from '../plans/schema-gen.js';
import { ADAMW, generatePlan } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';
import { FIXTURES, ROOT } from './helpers.js';

const schemaText = readFileSync(SCHEMA_PATH, 'utf8');

/** The issues a validator reports on a value, as path: message lines. */
function issues(v: Parameters<typeof validateSchema>[2], raw: unknown): string[] {
  const out: string[] = [];
  validateSchema(raw, { add: (path: string, msg: string) => void out.push(`${path}: ${msg}`) } as never, v);
  return out;
}

/** Every parseable JSON plan under a directory (recursively). */
function plansUnder(dir: string): [string, unknown][] {
  const out: [string, unknown][] = [];
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile() || !e.name.endsWith('.json') || e.name === 'manifest.json') continue;
    const path = `${e.parentPath}/${e.name}`;
    try {
      out.push([path, JSON.parse(readFileSync(path, 'utf8')) as unknown]);
    } catch {
      // not JSON: the parser's case, not the schema's
    }
  }
  return out;
}

describe('generated plan-schema validator', () => {
  it('the committed file is what schema-gen makes from the schema (run `npm run gen:validator` when this fails)', () => {
    assert.equal(readFileSync(STANDALONE_PATH, 'utf8'), standaloneSource(schemaText));
  });

  it('is used only for the schema text it was made from', () => {
    assert.equal(typeof standaloneFor(schemaText), 'function');
    assert.equal(standaloneFor(schemaText.replace('"maxItems"', '"maxItems" ')), undefined);
    assert.equal(standaloneFor(`${schemaText}\n`), undefined);
  });

  it('reports exactly what the compiled schema reports, on valid and malformed plans', () => {
    const gen = standaloneFor(schemaText);
    assert.ok(gen !== undefined);
    const compiled = newPlanAjv().compile(JSON.parse(schemaText) as object);
    const cases = [...plansUnder(`${ROOT}examples`), ...plansUnder(FIXTURES)];
    for (const name of ['mlp-tiny', 'gpt2-tiny']) {
      const p = PRESETS[name];
      assert.ok(p !== undefined);
      cases.push([`gen ${name}`, generatePlan({ model: p.model, par: p.par, optimizer: ADAMW })]);
    }
    let rejected = 0;
    for (const [name, raw] of cases) {
      const a = issues(gen, raw);
      assert.deepEqual(a, issues(compiled, raw), name);
      if (a.length > 0) rejected++;
    }
    // The corpus holds both kinds, or the comparison would say little.
    assert.ok(cases.length - rejected >= 20, `${cases.length - rejected} valid plans`);
    assert.ok(rejected >= 20, `${rejected} rejected plans`);
  });
});
