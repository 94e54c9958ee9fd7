/**
 * The one verify pipeline (stages/pipeline.ts, issue 36): a library caller gets the verdict
 * `planproof verify` gives, on every example, the equivalence fixtures, a sample of the captures and
 * a stripped plan (the inference record), docs/engine.md's first table lists the pipeline's
 * records in order, and its second table the per-stage portfolio's (stages/portfolio.ts).
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
import { STAGE_METHODS } from '../stages/portfolio.js';
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
    const table = pipelineSection().split(PER_STAGE)[0] as string;
    const rows = [...table.matchAll(/^\| `([a-z-]+)` \|.*\]\(([^)]*)\)/gm)].map((m) => [m[1], m[2]]);
    assert.deepEqual(rows.map((r) => r[0]), ROUTES.map((r) => r.name));
    // Each row links the section that argues its record sound (Route.soundness, in this file).
    for (const [i, r] of ROUTES.entries()) assert.equal((rows[i] as string[])[1], r.soundness.replace('docs/engine.md', ''));
  });

  it("docs/engine.md's per-stage table: one row per record of STAGE_METHODS, in order, after the proofs' rows", () => {
    const rows = tableRows(pipelineSection().split(PER_STAGE)[1] as string);
    const cells = rows.map((r) => r.split(' | ').map((c) => c.trim()));
    const isRecord = (c: string[]): boolean => /^`[a-z0-9-]+`$/.test(c[0] as string);
    const first = cells.findIndex(isRecord);
    assert.ok(first > 0, 'the proofs\' rows come first');
    const records = cells.slice(first);
    assert.ok(records.every(isRecord), 'no proof row after a record');
    assert.deepEqual(records.map((c) => (c[0] as string).slice(1, -1)), STAGE_METHODS.map((m) => m.name));
    // Each row says what its record says (applies, returns, cost) and links its soundness section.
    for (const [i, m] of STAGE_METHODS.entries()) {
      const [, applies, returns, cost, soundness] = records[i] as string[];
      assert.deepEqual([applies, returns, cost], [m.applies, m.returns, m.cost], m.name);
      assert.match(soundness as string, new RegExp(`\\]\\(${m.soundness.replace('docs/engine.md', '')}\\)`), m.name);
    }
  });

  it('what a stage can be decided by is in the report schema: `normal`, `tensor`, and the records that prove (by their names)', () => {
    const schema = readFileSync(`${ROOT}cli/report-v1.schema.json`, 'utf8');
    const m = /"decidedBy": \{[^}]*"enum": (\[[^\]]*\])/.exec(schema);
    const values = JSON.parse(m?.[1] ?? '[]') as string[];
    const proves = STAGE_METHODS.flatMap((r) => (r.proves === undefined ? [] : [r.proves]));
    for (const r of STAGE_METHODS) if (r.proves !== undefined) assert.equal(r.proves, r.name, 'a record proves under its own name');
    // The proofs' rows name theirs in backticks (`tensor`, `normal`).
    const proofRows = tableRows(pipelineSection().split(PER_STAGE)[1] as string).filter((r) => !r.startsWith('`'));
    const named = proofRows.flatMap((r) => [...(r.split(' | ')[0] as string).matchAll(/\(`([a-z0-9-]+)`\)/g)].map((x) => x[1] as string)).filter((n) => n !== 'earlyCertificate');
    assert.deepEqual(named, ['tensor', 'normal']);
    assert.deepEqual([...values].sort(), [...new Set([...named, ...proves])].sort());
  });
});

/** The opening section of docs/engine.md ("The pipeline"). */
function pipelineSection(): string {
  const doc = readFileSync(`${ROOT}docs/engine.md`, 'utf8');
  const at = doc.indexOf('## The pipeline');
  return doc.slice(at, doc.indexOf('\n## ', at + 5));
}

/** Where the section's second table (the per-stage one) is introduced. */
const PER_STAGE = 'Inside `rank-by-rank`';

/** A markdown table's body rows, without their outer pipes (the header and rule rows dropped). */
function tableRows(text: string): string[] {
  const rows = text.split('\n').filter((l) => l.startsWith('| ')).map((l) => l.slice(2, l.endsWith(' |') ? -2 : undefined));
  return rows.slice(1);
}
