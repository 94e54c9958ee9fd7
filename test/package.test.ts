/**
 * The package as a user installs it: `npm pack`, the tarball installed by npm in a scratch
 * project, imported by name in ESM and type-checked by tsc. Offline: the runtime dependencies
 * are the ones `npm ci` already fetched, linked into the scratch project, so npm finds every
 * dependency of the tarball satisfied and downloads nothing.
 */
import { strict as assert } from 'node:assert';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { EXAMPLES, ROOT } from './helpers.js';

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

function run(cmd: string, args: string[], cwd: string): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 120_000 });
}

function ok(r: SpawnSyncReturns<string>, what: string): string {
  assert.equal(r.status, 0, `${what} failed (${String(r.status)}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

describe('package: npm pack, install, import by name', function () {
  this.timeout(300_000);
  let dir = '';
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-pack-'));
    // dist/ is built by `npm test` before mocha runs: pack it as is (no prepare script).
    ok(run(npm, ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir], ROOT), 'npm pack');
    const tgz = readdirSync(dir).find((f) => f.endsWith('.tgz'));
    assert.ok(tgz !== undefined, 'npm pack wrote no tarball');
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const deps: Record<string, string> = {};
    mkdirSync(join(dir, 'node_modules', '@types'), { recursive: true });
    for (const d of Object.keys(pkg.dependencies)) {
      // A scoped dependency (@scope/name) needs its scope folder first.
      mkdirSync(dirname(join(dir, 'node_modules', d)), { recursive: true });
      symlinkSync(join(ROOT, 'node_modules', d), join(dir, 'node_modules', d), 'dir');
      deps[d] = (JSON.parse(readFileSync(join(ROOT, 'node_modules', d, 'package.json'), 'utf8')) as { version: string }).version;
    }
    // A TypeScript consumer has Node's types.
    symlinkSync(join(ROOT, 'node_modules', '@types', 'node'), join(dir, 'node_modules', '@types', 'node'), 'dir');
    const typesNode = (JSON.parse(readFileSync(join(ROOT, 'node_modules', '@types', 'node', 'package.json'), 'utf8')) as { version: string }).version;
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module', dependencies: deps, devDependencies: { '@types/node': typesNode } }));
    ok(run(npm, ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', `./${tgz}`], dir), 'npm install of the tarball');
  });

  after(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  it('installs the packed files, not a link to the checkout', () => {
    const installed = JSON.parse(readFileSync(join(dir, 'node_modules', 'planproof', 'package.json'), 'utf8')) as { name: string };
    assert.equal(installed.name, 'planproof');
    assert.ok(readdirSync(join(dir, 'node_modules', 'planproof', 'dist')).includes('index.js'));
    // Both published schemas resolve by their exported names: the plan format and the --json report.
    for (const name of ['plan-v1', 'report-v1']) {
      const out = ok(run(process.execPath, ['-e', `const s = require(require.resolve('planproof/schema/${name}.schema.json')); console.log(s.$id)`], dir), `resolving ${name}`);
      assert.equal(out.trim(), `https://planproof.dev/schema/${name}.schema.json`);
    }
  });

  it('imports by name in ESM and verifies a plan in process and in the pool', () => {
    const script = [
      "import { loadPlan, verifyPlan, verifyPlanInPool, formatReport, registry, BUGS, generatePlan, PRESETS, PlanError } from 'planproof';",
      "import { readFileSync } from 'node:fs';",
      `const file = ${JSON.stringify(`${EXAMPLES}mlp-dp2.json`)};`,
      'const r = verifyPlan(loadPlan(file));',
      'const p = await verifyPlanInPool(loadPlan(file), readFileSync(file, "utf8"), { jobs: 1, deadlineMs: 60000 });',
      "let invalid = '';",
      "try { loadPlan('/nonexistent/plan.json'); } catch (e) { invalid = e instanceof PlanError ? 'PlanError' : String(e); }",
      'const gen = generatePlan(PRESETS["mlp-tiny"]);',
      'console.log(JSON.stringify({ inProcess: r.verdict, pool: p.verdict, first: formatReport(r).split("\\n")[0], ops: registry.names().length, bugs: BUGS.length, genFormat: gen.format, invalid }));',
    ].join('\n');
    writeFileSync(join(dir, 'consumer.mjs'), script);
    const out = JSON.parse(ok(run(process.execPath, ['consumer.mjs'], dir), 'the ESM consumer')) as Record<string, unknown>;
    assert.equal(out['inProcess'], 'verified');
    assert.equal(out['pool'], 'verified');
    assert.match(String(out['first']), /^plan +mlp-dp2 /);
    assert.ok((out['ops'] as number) > 50, `registry has ${String(out['ops'])} ops`);
    assert.ok((out['bugs'] as number) > 10);
    assert.equal(out['genFormat'], 'planproof/v1');
    assert.equal(out['invalid'], 'PlanError');
  });

  // README's "Use it as a library" examples, as written.
  const section = /## Use it as a library\n([\s\S]*?)\n## /.exec(readFileSync(join(ROOT, 'README.md'), 'utf8'))?.[1] ?? '';
  const examples = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);

  it('runs the README example that generates a plan, injects a catalogued bug and verifies it (not equivalent)', () => {
    const example = examples.find((e) => e.includes('generatePlan'));
    assert.ok(example !== undefined, 'README has no generator example');
    // It is plain JavaScript too (no annotations): run as written.
    writeFileSync(join(dir, 'readme-gen.mjs'), example);
    assert.match(ok(run(process.execPath, ['readme-gen.mjs'], dir), 'the README generator example'), /^not_equivalent \(\d+ ops registered\)\n$/);
  });

  it('type-checks a TypeScript consumer and the README examples against the shipped declarations, and rejects a wrong one @full', () => {
    assert.ok(examples.length >= 2 && examples.every((e) => e.includes("from 'planproof'")), `README has ${examples.length} library examples`);
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: true, types: ['node'] }, files: ['consumer.ts', ...examples.map((_, i) => `readme${i}.ts`)] }),
    );
    examples.forEach((e, i) => writeFileSync(join(dir, `readme${i}.ts`), `${e}\nexport {};\n`));
    const good = [
      "import { loadPlan, verifyPlan, type VerifyReport, type OpDef, type Algebra } from 'planproof';",
      "const r: VerifyReport = verifyPlan(loadPlan('plan.json'));",
      "const v: 'verified' | 'not_equivalent' | 'unknown' = r.verdict;",
      'const f = (d: OpDef, a: Algebra<number>): string => `${d.name} ${String(a.exact)}`;',
      'console.log(v, f);',
    ].join('\n');
    writeFileSync(join(dir, 'consumer.ts'), good);
    ok(run(process.execPath, [tsc, '-p', '.'], dir), 'tsc on the consumer');
    // The declarations carry real types (no `any`): a verdict is not a number.
    writeFileSync(join(dir, 'consumer.ts'), good.replace("const v: 'verified' | 'not_equivalent' | 'unknown' =", 'const v: number ='));
    const bad = run(process.execPath, [tsc, '-p', '.'], dir);
    assert.notEqual(bad.status, 0);
    assert.match(bad.stdout, /consumer\.ts\(3,7\): error TS2322/);
  });
});
