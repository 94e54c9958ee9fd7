/**
 * The docs stay true: every example docs/plan-format.md marks with `<!-- example: NAME -->` loads
 * and passes `planproof inspect`, every name the schema defines is documented, and every command
 * the README shows runs and prints what the README says it prints (test/doc-commands.ts).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPlan } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { registry } from '../ops/registry.js';
import { ROOT, runCli } from './helpers.js';
import { docCommands, unprinted } from './doc-commands.js';
import { FULL, needs, TOOLS } from './optional.js';

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

describe('README and docs/reports.md say what the CLI prints (issue 35, deliver 7)', function () {
  this.timeout(600_000);
  const cli = join(ROOT, 'dist', 'cli', 'main.js');
  const readme = docCommands(readFileSync(`${ROOT}README.md`, 'utf8'));
  let dir = '';
  let runs = 0;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-readme-'));
    // The README's commands run where examples/ is the project's; /tmp/ is this directory's tmp/.
    symlinkSync(join(ROOT, 'examples'), join(dir, 'examples'));
    mkdirSync(join(dir, 'tmp'));
  });
  after(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  /** Runs a README script as a user would (npx planproof is the built CLI), stdout and stderr as one stream, in a fresh cache. */
  function run(script: string): { code: number; printed: string[] } {
    // (/tmp/ first: a checkout under /tmp/ must not have its own path rewritten)
    const s = script.replaceAll('/tmp/', `${dir}/tmp/`).replace(/npx planproof /g, `${process.execPath} ${cli} `);
    const env = { ...process.env, PLANPROOF_CACHE_DIR: join(dir, `cache${runs++}`) };
    const r = spawnSync('bash', ['-c', `exec 2>&1\n${s}`], { cwd: dir, encoding: 'utf8', env, timeout: 600_000 });
    return { code: r.status ?? -1, printed: (r.stdout ?? '').replaceAll(`${dir}/tmp/`, '/tmp/').replace(/\n$/, '').split('\n') };
  }

  /** The shown output is printed: line for line when it elides nothing, else each shown line in order. */
  function assertShown(what: string, shown: readonly string[], printed: readonly string[]): void {
    const missing = unprinted(shown, printed);
    assert.deepEqual(missing, [], `${what}: the README shows lines the CLI does not print:\n${missing.join('\n')}\n--- printed:\n${printed.join('\n')}`);
    const body = shown.filter((l, i) => !(i === shown.length - 1 && l === ''));
    if (!body.some((l) => l.includes('...'))) assert.equal(printed.length, body.length, `${what}: printed\n${printed.join('\n')}`);
  }

  it('finds the tour\'s commands: every sh block is run below or installs (npm), and the transcripts and claims', () => {
    const npm = readme.blocks.filter((b) => b.script.startsWith('npm '));
    assert.deepEqual(npm.map((b) => b.script), ['npm ci && npm run demo', 'npm ci && npm test']);
    assert.ok(readme.blocks.length - npm.length >= 8, `${readme.blocks.length} sh blocks`);
    assert.ok(readme.blocks.filter((b) => b.shown !== undefined).length >= 7);
    assert.ok(readme.transcripts.length >= 3 && readme.claimed.length >= 10);
  });

  for (const b of readme.blocks.filter((x) => !x.script.startsWith('npm '))) {
    const first = b.script.split('\n').find((l) => l.includes('planproof')) ?? b.script;
    it(`README line ${b.line}: ${first.slice(0, 90)}`, () => {
      const r = run(b.script);
      if (b.shown !== undefined) assertShown(`line ${b.line}`, b.shown, r.printed);
      // Without shown output: a verdict (0, 1, 3), never a usage error or a refused plan.
      else assert.ok([0, 1, 3].includes(r.code), `exit ${r.code}:\n${r.printed.join('\n')}`);
    });
  }

  for (const t of readme.transcripts) {
    it(`README line ${t.line}: $ ${t.command}`, () => {
      assertShown(`line ${t.line}`, t.shown, run(t.command).printed);
    });
  }

  for (const c of readme.claimed) {
    it(`README line ${c.line}: ${c.command.replace(/ && .*/, '')} is ${c.verdict}${c.at === undefined ? '' : ` at ${c.at}`}${FULL}`, function () {
      if (c.command.includes('planproof capture')) needs(this, TOOLS.torch);
      const r = run(`${c.command}; echo "exit $?"`);
      const verdict = r.printed.find((l) => l.startsWith('verdict '));
      assert.ok(verdict !== undefined, r.printed.join('\n'));
      const esc = (x: string): string => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      assert.match(verdict, new RegExp(`^verdict {5}${c.verdict}${esc(c.qualifier)}:`));
      if (c.at !== undefined) assert.match(verdict, new RegExp(`stage \\d+ \\(${esc(c.at)}, `), 'the first failing stage');
      assert.equal(r.printed[r.printed.length - 1], `exit ${c.exit ?? (c.verdict === 'VERIFIED' ? 0 : 1)}`);
    });
  }

  it('docs/reports.md: the firstFailing it shows is the buggy example\'s', () => {
    const doc = readFileSync(`${ROOT}docs/reports.md`, 'utf8');
    const block = /```json\n("firstFailing": \{[\s\S]*?\n\})\n```/.exec(doc)?.[1];
    assert.ok(block !== undefined, 'docs/reports.md shows a firstFailing');
    const r = run('npx planproof verify examples/buggy/mlp-dp2-loss-scale-twice.json --json');
    assert.equal(r.code, 1);
    assert.deepEqual((JSON.parse(`{${block}}`) as { firstFailing: unknown }).firstFailing, (JSON.parse(r.printed.join('\n')) as { firstFailing: unknown }).firstFailing);
  });

  it('docCommands and unprinted: blocks, transcripts and claims found; a line not printed, out of order or longer is reported', () => {
    const md = ['```sh', 'a x', '```', '', '```', 'one', '...', 'three ... end (0.5 s)', '```', '```', '$ b', 'out', '$ c', '```', '```sh', 'd  # NOT EQUIVALENT at t (why), exit 1', 'e  # VERIFIED (for the values the program read into Python): x', '```'].join('\n');
    const d = docCommands(md);
    assert.deepEqual(d.blocks, [{ line: 1, script: 'a x', shown: ['one', '...', 'three ... end (0.5 s)'] }]);
    assert.deepEqual(d.transcripts, [{ line: 11, command: 'b', shown: ['out'] }, { line: 13, command: 'c', shown: [] }]);
    assert.deepEqual(d.claimed, [
      { line: 16, command: 'd', verdict: 'NOT EQUIVALENT', qualifier: '', at: 't', exit: 1 },
      { line: 17, command: 'e', verdict: 'VERIFIED', qualifier: ' (for the values the program read into Python)' },
    ]);
    const shown = d.blocks[0]?.shown ?? [];
    assert.deepEqual(unprinted(shown, ['one', 'two', 'three and so on end (1.25 s)']), []);
    assert.deepEqual(unprinted(shown, ['three x end (1 s)', 'one']), ['three ... end (0.5 s)']);
    assert.deepEqual(unprinted(shown, ['one', 'three x end (1 s) and more']), ['three ... end (0.5 s)']);
    assert.deepEqual(unprinted(['one'], ['one!']), ['one']);
  });
});
