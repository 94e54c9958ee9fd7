/**
 * The generated plan-schema validator (plans/plan-v1.validate.cjs) is what the schema says:
 * the committed file is the one plans/schema-gen.ts makes from today's schema, it is used only
 * for the schema text it was made from, and it reports exactly what the compiled schema
 * reports on every example, fixture and malformed plan.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, readdirSync } from 'node:fs';
import { newPlanAjv, SCHEMA_PATH, STANDALONE_PATH, standaloneFor, validateSchema } from '../plans/schema.js';
import { attrValidatorsSource, standaloneSource } from '../plans/schema-gen.js';
import { ATTR_VALIDATORS_PATH, generatedFor, newAttrAjv, registry } from '../ops/registry.js';
import type { OpDef } from '../ops/types.js';
import type { ValidateFunction } from 'ajv';
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

/** What a validator says of a value: accepted, or its first error (the registry reads only that). */
function verdict(v: ValidateFunction, x: unknown): string {
  return v(x) ? 'ok' : JSON.stringify(v.errors?.[0] ?? null);
}

describe('generated attribute validators (ops/attr.validate.cjs)', () => {
  it('the committed file is what schema-gen makes from the op records (run `npm run gen:validator` when this fails)', () => {
    assert.equal(readFileSync(ATTR_VALIDATORS_PATH, 'utf8'), attrValidatorsSource());
  });

  it('are used only for the attribute schemas they were made from', () => {
    const gen = generatedFor(registry.defs);
    assert.equal(gen.length, registry.defs.length);
    assert.ok(gen.every((f) => typeof f === 'function'));
    // One op's schema changed (a new attribute allowed): the whole file is stale, every op compiles.
    const changed: OpDef[] = registry.defs.map((d, i) => (i === 3 ? { ...d, attrSchema: { ...d.attrSchema, description: 'changed' } } : d));
    assert.deepEqual(generatedFor(changed), []);
    // Renamed or reordered ops: ids would point at other validators.
    assert.deepEqual(generatedFor([...registry.defs].reverse()), []);
    assert.deepEqual(generatedFor(registry.defs, `${ATTR_VALIDATORS_PATH}.missing`), []);
  });

  it('say exactly what the compiled schemas say, on the golden cases and on broken attributes', () => {
    const golden = JSON.parse(readFileSync(`${FIXTURES}golden/ops.json`, 'utf8')) as { cases: { op: string; attrs: Record<string, unknown> }[] };
    const gen = generatedFor(registry.defs);
    const ajv = newAttrAjv();
    let checked = 0;
    let rejected = 0;
    const seen = new Set<string>();
    for (const c of golden.cases) {
      const id = registry.id(c.op);
      assert.ok(id >= 0, c.op);
      const g = gen[id];
      assert.ok(g !== undefined, c.op);
      const compiled = ajv.compile(registry.get(id).attrSchema);
      const samples: unknown[] = [c.attrs, { ...c.attrs, bogus: 1 }];
      if (!seen.has(c.op)) {
        seen.add(c.op);
        samples.push({}, null, 'x');
        // Every attribute given the wrong type, one at a time.
        for (const k of Object.keys(c.attrs)) samples.push({ ...c.attrs, [k]: [[true]] }, { ...c.attrs, [k]: 'not/a/number' });
      }
      for (const x of samples) {
        const a = verdict(g, x);
        assert.equal(a, verdict(compiled, x), `${c.op} ${JSON.stringify(x)}`);
        checked++;
        if (a !== 'ok') rejected++;
      }
    }
    assert.ok(seen.size >= 60, `${seen.size} ops`);
    assert.ok(rejected >= 200 && checked - rejected >= 200, `${checked - rejected} accepted, ${rejected} rejected`);
  });
});
