/**
 * docs/plan-format.md stays true: every example it marks with `<!-- example: NAME -->` loads and
 * passes `planproof inspect`, and every name the schema defines is documented.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPlan } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { registry } from '../ops/registry.js';
import { ROOT, runCli } from './helpers.js';

const DOC_PATH = `${ROOT}docs/plan-format.md`;
const SCHEMA_PATH = `${ROOT}plans/plan-v1.schema.json`;

interface DocExample {
  readonly name: string;
  /** 1-based line of the marker comment. */
  readonly line: number;
  readonly json: string;
}

const MARKER = /^<!--\s*example:\s*([A-Za-z0-9_.-]+)\s*-->\s*$/;

/** The ```json block right after each `<!-- example: NAME -->` line (blank lines may separate them). */
export function extractExamples(markdown: string): DocExample[] {
  const lines = markdown.split(/\r?\n/);
  const out: DocExample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = MARKER.exec(lines[i] ?? '');
    if (m === null) continue;
    const name = m[1] as string;
    let j = i + 1;
    while (j < lines.length && (lines[j] ?? '').trim() === '') j++;
    assert.equal((lines[j] ?? '').trim(), '```json', `example '${name}' (line ${i + 1}) must be followed by a \`\`\`json block`);
    const body: string[] = [];
    let k = j + 1;
    while (k < lines.length && (lines[k] ?? '').trim() !== '```') body.push(lines[k++] ?? '');
    assert.ok(k < lines.length, `example '${name}' (line ${i + 1}): the json block is not closed`);
    out.push({ name, line: i + 1, json: body.join('\n') });
    i = k;
  }
  return out;
}

/** Top-level property names, $defs names, and every property name declared inside $defs. */
function schemaNames(schema: Record<string, unknown>): Set<string> {
  const names = new Set<string>(Object.keys((schema['properties'] ?? {}) as object));
  const defs = (schema['$defs'] ?? {}) as Record<string, unknown>;
  for (const d of Object.keys(defs)) names.add(d);
  const walk = (v: unknown): void => {
    if (v === null || typeof v !== 'object') return;
    if (Array.isArray(v)) {
      v.forEach(walk);
      return;
    }
    const o = v as Record<string, unknown>;
    const props = o['properties'];
    if (props !== null && typeof props === 'object' && !Array.isArray(props)) for (const k of Object.keys(props)) names.add(k);
    Object.values(o).forEach(walk);
  };
  walk(defs);
  return names;
}

describe('docs/plan-format.md', () => {
  const doc = readFileSync(DOC_PATH, 'utf8');
  const examples = extractExamples(doc);
  let dir = '';
  const fileOf = (e: DocExample): string => join(dir, `${e.name}.json`);

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-docs-'));
    for (const e of examples) writeFileSync(fileOf(e), e.json);
  });
  after(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  it('marks at least three complete examples, including one named minimal, with distinct names', () => {
    assert.ok(examples.length >= 3, `found ${examples.length} marked example(s)`);
    const names = examples.map((e) => e.name);
    assert.equal(new Set(names).size, names.length, `duplicate example names: ${names.join(', ')}`);
    assert.ok(names.includes('minimal'), 'no <!-- example: minimal --> block');
  });

  it('every marked example is valid JSON and loads without error', () => {
    for (const e of examples) {
      assert.doesNotThrow(() => JSON.parse(e.json) as unknown, `example '${e.name}' (line ${e.line}) is not valid JSON`);
      try {
        loadPlan(fileOf(e));
      } catch (err) {
        if (err instanceof PlanError) assert.fail(`example '${e.name}' (line ${e.line}) is rejected:\n${err.message}`);
        throw err;
      }
    }
  });

  it('planproof inspect exits 0 on every marked example', async () => {
    for (const e of examples) {
      const r = await runCli(['inspect', fileOf(e)]);
      assert.equal(r.code, 0, `inspect on example '${e.name}' (line ${e.line}) exited ${r.code}:\n${r.stderr}`);
    }
  });

  it('planproof verify proves every marked example (exit 0)', async () => {
    for (const e of examples) {
      const r = await runCli(['verify', fileOf(e)]);
      assert.equal(r.code, 0, `verify on example '${e.name}' exited ${r.code}:\n${r.stdout}`);
    }
  });

  it('mentions every top-level and $defs property name of the schema in backticks', () => {
    const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as Record<string, unknown>;
    const names = schemaNames(schema);
    assert.ok(names.has('format') && names.has('valueMap') && names.has('divisor'), 'schema walk found too little');
    const missing = [...names].filter((n) => !doc.includes(`\`${n}\``)).sort();
    assert.deepEqual(missing, [], `docs/plan-format.md does not mention: ${missing.join(', ')}`);
    assert.ok(doc.includes('`x-'), 'the x- extension keys are not documented');
  });

  it('lists every registered operator in backticks', () => {
    const missing = registry.names().filter((n) => !doc.includes(`\`${n}\``));
    assert.deepEqual(missing, [], `docs/plan-format.md does not mention op(s): ${missing.join(', ')}`);
  });

  it('extractExamples finds marked blocks only and rejects a marker without a json block', () => {
    const md = ['<!-- example: a -->', '', '```json', '{"k": 1}', '```', '```json', '{}', '```', '<!-- example: b -->', '```json', '[]', '```'].join('\n');
    assert.deepEqual(
      extractExamples(md).map((e) => [e.name, e.line, e.json]),
      [
        ['a', 1, '{"k": 1}'],
        ['b', 9, '[]'],
      ],
    );
    assert.throws(() => extractExamples('<!-- example: c -->\ntext\n'), /must be followed by a ```json block/);
  });
});

describe('docs/ops.md', () => {
  const ops = readFileSync(`${ROOT}docs/ops.md`, 'utf8');
  it('lists every op in ops/ and nothing that is not there', () => {
    const listed = [...ops.matchAll(/^\| `([a-z_0-9]+)` \| [a-z]+ \|/gm)].map((m) => m[1] as string).sort();
    assert.deepEqual(listed, registry.names().sort());
  });
});

describe('docs/generators.md', () => {
  it('says the large presets verify, as docs/benchmarks.md measured them (issue 35: it said L2 and L3 answer "unknown")', () => {
    const gen = readFileSync(`${ROOT}docs/generators.md`, 'utf8').replace(/\s+/g, ' ');
    const bench = readFileSync(`${ROOT}docs/benchmarks.md`, 'utf8');
    // The presets the summary table's tensor-level rows show all VERIFIED (by their first cell).
    const verified = new Set<string>();
    for (const row of bench.split('\n').filter((l) => l.startsWith('| Tensor-level proofs of the presets') && l.includes('(all VERIFIED)'))) {
      for (const m of (row.split('|')[1] ?? '').matchAll(/\b([LD][1-3])\b/g)) verified.add(m[1] as string);
    }
    assert.deepEqual([...verified].sort(), ['D1', 'D2', 'D3', 'L1', 'L2', 'L3']);
    const said = /`planproof verify` of ([^.]*?) proves every stage per template at tensor level[^.]*? and answers VERIFIED/.exec(gen);
    assert.ok(said !== null, 'generators.md says which large presets verify');
    for (const p of verified) assert.match(said[1] ?? '', new RegExp(`\\b${p}\\b`), p);
    assert.doesNotMatch(gen, /answers "unknown" with a reason per stage/);
  });
});

describe('README tour', () => {
  it('step 3 quotes the buggy example\'s report as the CLI prints it (issue 35: it said "normal forms differ")', async () => {
    const readme = readFileSync(`${ROOT}README.md`, 'utf8');
    const block = /verify examples\/buggy\/mlp-dp2-loss-scale-twice\.json; echo "exit \$\?"\n```\n\n```\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(block !== undefined, 'the tour quotes the report');
    const r = await runCli(['verify', `${ROOT}examples/buggy/mlp-dp2-loss-scale-twice.json`, '--no-cache']);
    const out = `${r.stdout}exit ${r.code}`.split('\n');
    const lines = block.split('\n').filter((l) => l.trim() !== '' && l.trim() !== '...');
    assert.ok(lines.length >= 6);
    // A line the README shortens with "..." is a prefix of a printed line; any other is printed as is.
    for (const line of lines) {
      const cut = line.indexOf('...');
      assert.ok(out.some((o) => (cut < 0 ? o === line : o.startsWith(line.slice(0, cut)))), `not printed: ${line}`);
    }
  });
});
