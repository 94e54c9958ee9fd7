/**
 * The one verify pipeline (stages/pipeline.ts, issue 36): a library caller gets the verdict
 * `planproof verify` gives, on every example, the equivalence fixtures, a sample of the captures and
 * a stripped plan (the inference record), and docs/engine.md's first table lists the pipeline's
 * records in order.
 */
import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPlanObject, loadPlanText } from '../lineage/load.js';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import { stripToBoundary } from '../plans/gen/strip.js';
import { reportOf, ROUTES, verifyPipeline, type RouteName } from '../stages/pipeline.js';
import { EXAMPLES, FIXTURES, ROOT, runCli } from './helpers.js';
import { fullUnless } from './optional.js';

/** The verdict, the deciding record (--json `route`) and exit code of `planproof verify --json --no-cache FILE`. */
async function cliVerdict(file: string, ...args: string[]): Promise<{ verdict: string; route: string | undefined; code: number }> {
  const r = await runCli(['verify', '--json', '--no-cache', ...args, file]);
  const j = JSON.parse(r.stdout) as { verdict: string; route?: string };
  return { verdict: j.verdict, route: j.route, code: r.code };
}

/** The pipeline's verdict on a file as a library caller runs it (no cache, default options). */
async function libraryVerdict(file: string): Promise<{ verdict: string | undefined; route: RouteName }> {
  const text = readFileSync(file, 'utf8');
  const plan = loadPlanText(file, text);
  const r = await verifyPipeline(file, plan, JSON.stringify(JSON.parse(text)));
  return { verdict: reportOf(r)?.verdict, route: r.route };
}

const plans = [
  ...readdirSync(EXAMPLES).filter((f) => f.endsWith('.json') && f !== 'manifest.json').map((f) => `${EXAMPLES}${f}`),
  ...readdirSync(`${EXAMPLES}buggy`).filter((f) => f.endsWith('.json')).map((f) => `${EXAMPLES}buggy/${f}`),
  ...readdirSync(`${FIXTURES}equiv`).filter((f) => f.endsWith('.json')).map((f) => `${FIXTURES}equiv/${f}`),
];

describe('verify pipeline: library = CLI', function () {
  this.timeout(300_000);
  for (const f of plans) {
    const name = f.slice(ROOT.length);
    it(`${name}: the same verdict${fullUnless(name === 'examples/mlp-tp2.json')}`, async () => {
      const [lib, cli] = [await libraryVerdict(f), await cliVerdict(f)];
      assert.equal(lib.verdict, cli.verdict, `${name}: library ${lib.verdict} (${lib.route}), CLI ${cli.verdict}`);
      assert.equal(lib.route, 'rank-by-rank');
      assert.equal(cli.route, lib.route);
    });
  }

  it('a plan with lineage only at its boundary, with --infer: decided by the inference record, as the CLI decides it @full', async () => {
    const MLP = (PRESETS['mlp-tiny'] as { model: ModelConfig }).model;
    const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
    const raw = stripToBoundary(generatePlan({ model: MLP, par: { dp: 2, tp: 2, micro: 2 }, optimizer: OPT }));
    const file = join(mkdtempSync(join(tmpdir(), 'planproof-pipeline-')), 'stripped.json');
    const text = JSON.stringify(raw);
    writeFileSync(file, text);
    const r = await verifyPipeline(file, loadPlanObject(file, raw), text, { infer: true });
    const cli = await cliVerdict(file, '--infer');
    assert.equal(reportOf(r)?.verdict, cli.verdict);
    assert.equal(r.route, 'inferred-boundaries');
    assert.equal(cli.route, r.route);
  });

  // Committed captures (test/fixtures/capture/), imported as `planproof import-graphs` does: a
  // sample of correct and buggy ones (each goes through inference rounds, seconds apiece).
  for (const name of ['ddp_mlp', 'ddp_mlp-bug', 'adamw_mlp', 'dp_tp_mlp', 'dp_tp_mlp-bug', 'alltoall_exchange'].filter((d) => existsSync(`${FIXTURES}capture/${d}/relations.json`))) {
    it(`capture ${name}: the same verdict and record @full`, async () => {
      const file = join(mkdtempSync(join(tmpdir(), 'planproof-pipeline-')), 'plan.json');
      const imp = await runCli(['import-graphs', '--dir', `${FIXTURES}capture/${name}`, '-o', file]);
      assert.equal(imp.code, 0, imp.stderr);
      const [lib, cli] = [await libraryVerdict(file), await cliVerdict(file)];
      assert.equal(lib.verdict, cli.verdict, `${name}: library ${lib.verdict} (${lib.route}), CLI ${cli.verdict}`);
      assert.equal(cli.route, lib.route);
    });
  }

  it("docs/engine.md opens with the pipeline's records, in order, each with its soundness link", () => {
    const doc = readFileSync(`${ROOT}docs/engine.md`, 'utf8');
    const table = doc.slice(doc.indexOf('## The pipeline'), doc.indexOf('\n## ', doc.indexOf('## The pipeline') + 5));
    const rows = [...table.matchAll(/^\| `([a-z-]+)` \|.*\]\(([^)]*)\)/gm)].map((m) => [m[1], m[2]]);
    assert.deepEqual(rows.map((r) => r[0]), ROUTES.map((r) => r.name));
    // Each row links the section that argues its record sound (Route.soundness, in this file).
    for (const [i, r] of ROUTES.entries()) assert.equal((rows[i] as string[])[1], r.soundness.replace('docs/engine.md', ''));
  });
});
