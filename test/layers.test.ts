/**
 * Imports go one way: ops <- plans <- lineage <- sdfg <- stages <- cli, plans/gen beside plans
 * using ops (and the plan file types, plans/raw.ts) only. `npm run lint` (eslint.config.js: import-x/no-restricted-paths and
 * import-x/no-cycle) checks the tree; these tests show both rules fail on a backward import,
 * check the file graph for cycles that import-x skips (type-only imports), and check that the
 * op registry lists every op family.
 */
import { strict as assert } from 'node:assert';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { ESLint } from 'eslint';
import ts from 'typescript';
import { registry } from '../ops/registry.js';
import { ROOT } from './helpers.js';

const PRODUCT = ['ops', 'plans', 'lineage', 'sdfg', 'stages', 'cli'];

/** Every .ts file of the product (repo-relative), and the repo-relative files each imports, type-only imports included. */
export function importGraph(): Map<string, string[]> {
  const files: string[] = ['index.ts'];
  const walk = (d: string): void => {
    for (const e of readdirSync(join(ROOT, d), { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) files.push(join(d, e.name));
    }
  };
  PRODUCT.forEach(walk);
  const g = new Map<string, string[]>();
  for (const f of files) {
    const info = ts.preProcessFile(readFileSync(join(ROOT, f), 'utf8'), true, true);
    const deps = info.importedFiles.map((i) => i.fileName).filter((n) => n.startsWith('.')).map((n) => normalize(join(dirname(f), n)).replace(/\.js$/, '.ts'));
    g.set(f, deps);
  }
  return g;
}

/** The strongly connected components with more than one file (or a file importing itself): Tarjan's algorithm. */
export function cycles(g: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!g.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (g.get(v) ?? []).includes(v)) out.push(scc.sort());
    }
  };
  for (const v of g.keys()) if (!index.has(v)) visit(v);
  return out;
}

describe('import layers', function () {
  this.timeout(120_000);
  const eslint = new ESLint({ cwd: ROOT });
  const lint = async (file: string, code: string): Promise<string[]> => {
    const [r] = await eslint.lintText(code, { filePath: join(ROOT, file) });
    return (r?.messages ?? []).map((m) => `${m.ruleId ?? ''}: ${m.message}`);
  };

  it('the lint rule refuses a backward import between layers @full', async () => {
    const backward = await lint('ops/backward-fixture.ts', "import { verifyPlan } from '../stages/verify.js';\nexport const f = verifyPlan;\n");
    assert.equal(backward.length, 1, backward.join('\n'));
    assert.match(backward[0] as string, /^import-x\/no-restricted-paths: .*ops\/ is below plans, lineage, sdfg, stages, cli/);
    const plansToLineage = await lint('plans/backward-fixture.ts', "import { evalLineage } from '../lineage/model.js';\nexport const f = evalLineage;\n");
    assert.match(plansToLineage.join('\n'), /import-x\/no-restricted-paths: .*plans\/ is below lineage/);
    const genToPlans = await lint('plans/gen/backward-fixture.ts', "import { loadStructure } from '../loader.js';\nexport const f = loadStructure;\n");
    assert.match(genToPlans.join('\n'), /import-x\/no-restricted-paths: .*plans\/gen uses ops and plans\/raw.ts only/);
    // cli/ hands a plan to stages/pipeline.ts: it imports no engine (issue 36).
    const cliToEngine = await lint('cli/engine-fixture.ts', "import { Z3Prover } from '../stages/engines/z3.js';\nexport const f = Z3Prover;\n");
    assert.match(cliToEngine.join('\n'), /import-x\/no-restricted-paths: .*cli\/ does not pick engines/);
    const cliToShrink = await lint('cli/shrink-fixture.ts', "import { provePart } from '../stages/shrink/part.js';\nexport const f = provePart;\n");
    assert.match(cliToShrink.join('\n'), /import-x\/no-restricted-paths: .*cli\/ does not shrink stages/);
    assert.deepEqual(await lint('cli/pipeline-fixture.ts', "import { verifyPipeline } from '../stages/pipeline.js';\nexport const f = verifyPipeline;\n"), []);
    // The same imports in the right direction pass.
    assert.deepEqual(await lint('stages/forward-fixture.ts', "import { evalLineage } from '../lineage/model.js';\nexport const f = evalLineage;\n"), []);
  });

  it('the lint rule refuses an import cycle', async () => {
    // ops/types.ts importing the registry closes a cycle: registry -> activation.ts -> types.ts.
    const src = readFileSync(join(ROOT, 'ops', 'types.ts'), 'utf8');
    const msgs = await lint('ops/types.ts', `${src}\nimport { registry } from './registry.js';\nexport const r = registry;\n`);
    assert.ok(msgs.some((m) => m.startsWith('import-x/no-cycle: Dependency cycle')), msgs.join('\n'));
    assert.deepEqual(await lint('ops/types.ts', src), []);
  });

  it('no file cycle, type-only imports included, and no import past its layer', () => {
    const g = importGraph();
    assert.ok(g.size > 60, `only ${g.size} files found`);
    assert.deepEqual(cycles(g), []);
    const rank = (f: string): number => (f === 'index.ts' ? PRODUCT.length : f.startsWith('plans/gen/') ? 0.5 : PRODUCT.indexOf(f.split('/')[0] as string));
    const backward: string[] = [];
    const gen = (f: string): boolean => f.startsWith('plans/gen/');
    // plans/gen: ops, itself and the plan file's types; only cli and index.ts import it.
    const allowed = (f: string, d: string): boolean => (gen(f) ? rank(d) <= 0.5 || d === 'plans/raw.ts' : rank(d) <= rank(f) && (!gen(d) || rank(f) >= PRODUCT.indexOf('cli')));
    for (const [f, deps] of g) for (const d of deps) if (!allowed(f, d)) backward.push(`${f} -> ${d}`);
    assert.deepEqual(backward, []);
  });

  it('the cycle finder finds a cycle (and a self-import) in a small graph', () => {
    const g = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['d.ts', 'a.ts']],
      ['e.ts', ['a.ts']],
    ]);
    assert.deepEqual(cycles(g), [['a.ts', 'b.ts', 'c.ts'], ['d.ts']]);
  });

  it('docs/architecture.md matches the tree: every file it names exists, every folder has its row, every value index.ts exports is named', async () => {
    const doc = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8');
    // Paths from the root, and in each folder's row the file names it gives (in the folder or below).
    const named = [...doc.matchAll(/`((?:[a-z]+\/)+[a-z0-9_.-]+\.(?:ts|json|md))`/g)].map((m) => m[1] as string);
    const missing = named.filter((f) => !existsSync(join(ROOT, f)));
    const under = (d: string): string[] => readdirSync(join(ROOT, d), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? under(join(d, e.name)) : [e.name]));
    let inRows = 0;
    for (const d of PRODUCT) {
      const row = doc.split('\n').find((l) => l.startsWith(`| \`${d}/\` |`));
      assert.ok(row !== undefined, `no row for ${d}/`);
      const files = new Set(under(d));
      for (const m of row.matchAll(/`([a-z0-9_-]+\.(?:ts|json))`/g)) {
        inRows++;
        if (!files.has(m[1] as string)) missing.push(`${d}/ row: ${m[1] as string}`);
      }
    }
    assert.ok(named.length + inRows > 40, `${named.length + inRows} files named`);
    assert.deepEqual(missing, []);
    const api = Object.keys(await import('../index.js'));
    assert.ok(api.length >= 8, api.join(', '));
    assert.deepEqual(api.filter((n) => !doc.includes(`\`${n}\``)), []);
  });

  it('the op registry lists every ops/ file that exports op records, in file-name order', () => {
    const files = readdirSync(join(ROOT, 'ops'))
      .filter((f) => f.endsWith('.ts') && /^export const ops\b/m.test(readFileSync(join(ROOT, 'ops', f), 'utf8')))
      .map((f) => f.replace(/\.ts$/, ''))
      .sort();
    const families = [...new Set(registry.defs.map((d) => d.family))];
    assert.deepEqual(families, files);
  });
});
