/**
 * Shape reduction is checked against full shapes: random plans and mutants get the same
 * verdict, and the same failing stages, at reduced and at full shapes; dims tied to their
 * size are kept; a reduced plan that does not check out is refused.
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import { analyzeReduction, reducePlan, reducedRaw, ReductionError } from '../stages/shrink/reduce.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';
import { meanRowsPlan, mlpPlan, planParams, reshapeParams, reshapePlan, type PlanParams } from './reduce-plans.js';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import type { ReducedVerifyReport } from '../stages/shrink/reduced-verify.js';

const load = (raw: RawPlan): LoadedPlan => loadPlanObject('mem.json', JSON.parse(JSON.stringify(raw)));
const failing = (r: VerifyReport): string => r.stages.filter((s) => s.status !== 'proved').map((s) => `${s.logical}:${s.status}`).join(',');

/** Verdict at full and at reduced shapes; the reduced one is undefined when nothing shrinks. */
export function compareAtShapes(p: PlanParams): { full: VerifyReport; reduced: VerifyReport | undefined } {
  const raw = mlpPlan(p);
  const plan = load(raw);
  const full = verifyPlan(plan);
  const red = reducePlan(plan, raw);
  return { full, reduced: red === undefined ? undefined : verifyPlan(red.plan) };
}

describe('shape reduction', function () {
  this.timeout(120000);

  it('reduces the batch dims of a dp x tp MLP by their lane factor, and keeps contracted dims', () => {
    const raw = mlpPlan({ dp: 2, tp: 2, rows: 4, hidden: 2, ffn: 2, out: 3, act: 'tanh', spelling: 'index', bias: false, mutant: 'none' });
    const plan = load(raw);
    const red = reducePlan(plan, raw);
    assert.ok(red !== undefined);
    const shape = (t: string): readonly number[] => red.plan.logical.shapes[red.plan.logical.tensors.id(t)] ?? [];
    assert.deepEqual(shape('x'), [2, 2]); // rows 8 -> 2: one row per dp rank
    assert.deepEqual(shape('y'), [2, 1]); // out 3 is SIMD in the matmul's columns
    assert.deepEqual(shape('h'), [2, 4]); // ffn is contracted by fc2: kept
    assert.deepEqual(shape('w1'), [2, 4]); // hidden contracted by fc1: kept
    const kept = red.analysis.classes.filter((c) => c.factor === 1).map((c) => `${c.dim}: ${c.kept ?? ''}`);
    assert.ok(kept.some((k) => /'x' dim 1: contracted in op 'fc1'/.test(k)), kept.join('\n'));
    assert.ok(kept.some((k) => /'w1' dim 1: contracted in op 'fc2'/.test(k)), kept.join('\n'));
    // template expressions became exact divisions
    const x = red.raw.parallel.programs[0]?.tensors?.[0];
    assert.deepEqual(x?.lineage, { logical: 'x', index: [[{ expr: '(dp*4)/4' }, { expr: '(dp*4 + 4)/4' }], '*'] });
    assert.equal(verifyPlan(red.plan).verdict, 'verified');
  });

  it('keeps a dim whose size enters an attribute or a value (mean over rows)', () => {
    const raw = meanRowsPlan();
    const plan = load(raw);
    const a = analyzeReduction(plan);
    const rows = a.classes.find((c) => c.dim === "'x' dim 0");
    assert.equal(rows?.factor, 1);
    assert.match(rows?.kept ?? '', /fixed in op 'avg' \(mean\)/);
    // the out dim is still SIMD everywhere and shrinks
    assert.equal(a.classes.find((c) => c.dim === "'w2' dim 1")?.factor, 2);
    const red = reducePlan(plan, raw);
    assert.ok(red !== undefined);
    assert.equal(verifyPlan(red.plan).verdict, 'verified');
  });

  it('keeps a dim whose lineage offsets are not multiples of a common factor', () => {
    // dp=2 over 3 rows: torch.chunk gives 2 and 1 rows, so sizes 3, 2, 1 share no factor.
    const raw = mlpPlan({ dp: 2, tp: 1, rows: 2, hidden: 1, ffn: 1, out: 1, act: 'tanh', spelling: 'placements', bias: false, mutant: 'none' });
    (raw.logical.tensors.find((t) => t.id === 'x') as { shape: number[] }).shape = [3, 1];
    for (const t of ['h', 'a', 'y']) (raw.logical.tensors.find((x) => x.id === t) as { shape: number[] }).shape[0] = 3;
    for (const t of raw.parallel.programs[0]?.tensors ?? []) if (t.id !== 'w1' && t.id !== 'w2') t.shape[0] = { expr: '2 - dp' };
    const a = analyzeReduction(load(raw));
    const rows = a.classes.find((c) => c.dim === "'x' dim 0");
    assert.equal(rows?.factor, 1);
    assert.match(rows?.kept ?? '', /no common factor/);
  });

  it('refuses a reduced plan that does not check out', () => {
    const raw = mlpPlan({ dp: 2, tp: 1, rows: 2, hidden: 1, ffn: 1, out: 1, act: 'tanh', spelling: 'index', bias: false, mutant: 'none' });
    const plan = load(raw);
    const a = analyzeReduction(plan);
    // a tampered factor table: x's rows would be divided but not h's
    const bad = { ...a, logicalFactors: a.logicalFactors.map((fs, t) => (plan.logical.tensors.name(t) === 'x' ? fs.map(() => 3) : fs)) };
    assert.throws(() => reducedRaw(raw, plan, bad), ReductionError);
  });

  it('gives the verdict of full shapes at reduced shapes on 100 random plans and mutants', () => {
    let reduced = 0;
    let broken = 0;
    fc.assert(
      fc.property(planParams, (p) => {
        const { full, reduced: red } = compareAtShapes(p);
        if (full.verdict !== 'verified') broken++;
        if (red === undefined) return true;
        reduced++;
        assert.equal(red.verdict, full.verdict, `${JSON.stringify(p)}: full ${full.verdict} (${full.summary}), reduced ${red.verdict} (${red.summary})`);
        assert.equal(failing(red), failing(full), JSON.stringify(p));
        return true;
      }),
      { numRuns: 100, seed: 12 },
    );
    // the property is not vacuous: most plans shrink, and many are broken
    assert.ok(reduced >= 60, `only ${reduced} of 100 plans reduced`);
    assert.ok(broken >= 20, `only ${broken} of 100 plans are broken`);
  });
});

describe('shape reduction through reshape and expand (lane rules)', function () {
  this.timeout(120000);

  it('shrinks the innermost dims of a reshape group and rewrites the `shape` attributes; a dim outer in a merge shrinks in a later round once the dims inside it are 1', () => {
    const raw = reshapePlan({ dp: 2, rows: 2, seq: 4, heads: 2, hd: 4, act: 'tanh', spelling: 'index', mutant: 'none' });
    const plan = load(raw);
    const red = reducePlan(plan, raw);
    assert.ok(red !== undefined);
    const shape = (t: string): readonly number[] => red.plan.logical.shapes[red.plan.logical.tensors.id(t)] ?? [];
    // Round 1: seq 4 -> 1 and head dim 4 -> 1 (innermost in their groups). Round 2: rows and
    // heads are then the only dims of their groups: rows 4 -> 2 (dp's bounds), heads 2 -> 1.
    assert.deepEqual(shape('x'), [2, 1, 1]);
    assert.deepEqual(shape('y'), [2, 1]);
    const attr = (id: string): unknown => red.raw.logical.ops.find((o) => o.id === id)?.attrs?.['shape'];
    assert.deepEqual(attr('split'), [2, 1, 1, 1]);
    assert.deepEqual(attr('merge'), [2, 1]);
    assert.deepEqual(attr('bx'), [2, 1, 1, 1]);
    const par = red.raw.parallel.programs[0]?.ops.find((o) => o.id === 'merge')?.attrs?.['shape'];
    assert.deepEqual(par, [1, -1]); // the local merge: 1 row x seq 1, -1 kept
    // The classes say what shrank over both rounds, at full sizes.
    assert.deepEqual(red.analysis.classes.filter((c) => c.factor > 1).map((c) => `${c.dim} ${c.full}->${c.reduced}`).sort(), ["'x' dim 0 4->2", "'x' dim 1 4->1", "'x' dim 2 8->1"]);
    assert.equal(verifyPlan(red.plan).verdict, 'verified');
  });

  it('keeps a dim that is an outer dim of a merge (its size is tied to the attribute): shrinking it would hide a bug', () => {
    // Rows and seq transposed before they are merged: a bug when both are > 1.
    const p = { dp: 1, rows: 2, seq: 2, heads: 1, hd: 2, act: 'tanh' as const, spelling: 'index' as const, mutant: 'transpose-before-merge' as const };
    const raw = reshapePlan(p);
    const plan = load(raw);
    const a = analyzeReduction(plan);
    const rows = a.classes.find((c) => c.dim === "'x' dim 0");
    assert.equal(rows?.factor, 1);
    assert.match(rows?.kept ?? '', /fixed in op 'merge' \(reshape\): .*not the innermost dim of its merge\/split group/);
    assert.equal(verifyPlan(plan).verdict, 'not_equivalent');
    // What a reduction of the rows (2 -> 1) would prove: the same plan with one row verifies.
    assert.equal(verifyPlan(load(reshapePlan({ ...p, rows: 1 }))).verdict, 'verified');
    const red = reducePlan(plan, raw);
    assert.ok(red === undefined || verifyPlan(red.plan).verdict === 'not_equivalent');
  });

  it('refuses a reduced plan whose rewritten reshape does not match its lanes', () => {
    const raw = reshapePlan({ dp: 1, rows: 1, seq: 4, heads: 2, hd: 2, act: 'tanh', spelling: 'index', mutant: 'none' });
    const plan = load(raw);
    const a = analyzeReduction(plan);
    // a tampered factor table: the merged output's rows shrink, the seq dim of its input does not
    const y = plan.logical.tensors.id('y');
    assert.equal(a.logicalFactors[y]?.[0], 4); // seq 4 -> 1, so rows x seq 4 -> 1
    const bad = { ...a, logicalFactors: a.logicalFactors.map((fs, t) => (t === y ? [2, fs[1] ?? 1] : fs)) };
    // The merge's attribute is rewritten for 2 rows while its input holds 1: the loader refuses it.
    assert.throws(() => loadPlanObject('tampered.json', JSON.parse(JSON.stringify(reducedRaw(raw, plan, bad)))), /reshape/);
    assert.doesNotThrow(() => loadPlanObject('ok.json', JSON.parse(JSON.stringify(reducedRaw(raw, plan, a)))));
  });

  it('gives the verdict of full shapes at reduced shapes on 100 random reshape-heavy plans and mutants', () => {
    let reduced = 0;
    let broken = 0;
    fc.assert(
      fc.property(reshapeParams, (p) => {
        const raw = reshapePlan(p);
        const plan = load(raw);
        const full = verifyPlan(plan);
        if (full.verdict !== 'verified') broken++;
        const red = reducePlan(plan, raw);
        if (red === undefined) return true;
        reduced++;
        const r = verifyPlan(red.plan);
        assert.equal(r.verdict, full.verdict, `${JSON.stringify(p)}: full ${full.verdict} (${full.summary}), reduced ${r.verdict} (${r.summary})`);
        assert.equal(failing(r), failing(full), JSON.stringify(p));
        return true;
      }),
      { numRuns: 100, seed: 12 },
    );
    assert.ok(reduced >= 60, `only ${reduced} of 100 plans reduced`);
    assert.ok(broken >= 20, `only ${broken} of 100 plans are broken`);
  });
});

describe('verify --emit-reduced', function () {
  this.timeout(120000);
  it('proves at reduced shapes, says so, and writes a reduced plan that verifies on its own', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-reduced-'));
    try {
      const file = join(dir, 'mlp.json');
      writeFileSync(file, JSON.stringify(mlpPlan({ dp: 2, tp: 2, rows: 3, hidden: 2, ffn: 2, out: 2, act: 'tanh', spelling: 'index', bias: true, mutant: 'none' })));
      const r = await runCli(['verify', file, '--json', '--jobs', '0', '--no-cache', '--emit-reduced', join(dir, 'out')]);
      assert.equal(r.code, 0, r.stdout);
      const rep = JSON.parse(r.stdout) as ReducedVerifyReport;
      assert.equal(rep.reduction.ran, true);
      assert.ok(rep.reduction.reduced.some((c) => c.dim === "'x' dim 0" && c.full === 6 && c.reduced === 2 && c.factor === 3));
      assert.ok(rep.reduction.kept.some((c) => /contracted in op 'fc1'/.test(c.kept ?? '')));
      const emitted = join(dir, 'out', 'mlp.reduced.json');
      assert.equal(rep.reduction.emitted, emitted);
      const again = await runCli(['verify', emitted, '--jobs', '0', '--no-cache']);
      assert.equal(again.code, 0, again.stdout);
      // Every stage of the reduced plan is proved at tensor level: nothing is left to reduce for.
      assert.match(again.stdout, /shape reduction not needed: every stage is proved at tensor level/);
      // the buggy twin is refuted at reduced shapes, with a witness
      writeFileSync(file, JSON.stringify(mlpPlan({ dp: 2, tp: 2, rows: 3, hidden: 2, ffn: 2, out: 2, act: 'tanh', spelling: 'index', bias: true, mutant: 'bias-before-allreduce' })));
      const badHtml = join(dir, 'bad.html');
      const bad = await runCli(['verify', file, '--jobs', '0', '--no-cache', '--html', badHtml]);
      assert.equal(bad.code, 1, bad.stdout);
      // The HTML report says that witness elements index the reduced tensors (issue 16).
      assert.match(readFileSync(badHtml, 'utf8'), /proved at reduced shapes \(docs\/engine\.md, &quot;Shape reduction&quot;\): witness elements index the reduced tensors/);
      assert.match(bad.stdout, /witness: /);
      assert.match(bad.stdout, /proved at reduced shapes: shape reduction: 2 dim class\(es\) reduced/);
      // --no-reduce proves at full shapes and says so
      const fullHtml = join(dir, 'full.html');
      const full = await runCli(['verify', file, '--jobs', '0', '--no-cache', '--no-reduce', '--html', fullHtml]);
      assert.equal(full.code, 1);
      assert.doesNotMatch(readFileSync(fullHtml, 'utf8'), /proved at reduced shapes/);
      assert.match(full.stdout, /proved at full shapes: .*turned off \(--no-reduce\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
