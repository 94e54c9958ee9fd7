/**
 * Per-stage reduction (stages/decompose/extract.ts, stages/shrink/stage-reduce.ts): an extracted stage at full
 * shapes is the stage in place (same status, obligations and inputs); per-stage reduction
 * shrinks dims that whole-plan reduction must keep; and the verdict and failing stages with
 * per-stage reduction equal those at full shapes on random plans and mutants.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, readdirSync } from 'node:fs';
import fc from 'fast-check';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import { logicalOrder } from '../sdfg/execute.js';
import { decompose, Prover } from '../stages/decompose/prove.js';
import { extractStage, ExtractionError, extractStageRaw, loadExtracted, stageClosure } from '../stages/decompose/extract.js';
import { perStageFallback, prefixWitness, prepareStage, proveByComponents, verifyPerStage, type FallbackInfo } from '../stages/shrink/stage-reduce.js';
import { assemble } from '../stages/verify.js';
import type { StageResult } from '../stages/decompose/prove.js';
import { batchClasses, checkComponent, ComponentError, componentRaw, rankStage, windowsOf } from '../stages/shrink/components.js';
import { analyzeReduction } from '../stages/shrink/reduce.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';
import { EXAMPLES, runCli } from './helpers.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embedParams, embedPlan, meanRowsPlan, mlpPlan, planParams, reshapeParams, reshapePlan } from './reduce-plans.js';
import { prefixPlan } from '../stages/shrink/reduce.js';
import { FULL } from './optional.js';

const load = (raw: RawPlan): LoadedPlan => loadPlanObject('mem.json', JSON.parse(JSON.stringify(raw)));
const failing = (r: VerifyReport): string => r.stages.filter((s) => s.status !== 'proved').map((s) => `${s.logical}:${s.status}@${s.failingRanks.join('/')}`).join(',');
const examples = [...readdirSync(EXAMPLES).filter((f) => /^mlp.*\.json$/.test(f)).map((f) => `${EXAMPLES}${f}`), ...readdirSync(`${EXAMPLES}buggy`).filter((f) => f.endsWith('.json')).map((f) => `${EXAMPLES}buggy/${f}`)];

describe('per-stage reduction', function () {
  this.timeout(120000);

  it('an extracted stage at full shapes proves exactly what the stage in place proves (every stage of every example)', () => {
    let extracted = 0;
    let differs = 0;
    for (const f of examples) {
      const raw = JSON.parse(readFileSync(f, 'utf8')) as RawPlan;
      const plan = load(raw);
      const prover = new Prover(plan);
      for (const s of decompose(plan, logicalOrder(plan))) {
        const inPlace = prover.prove(s, false);
        let ex;
        try {
          ex = extractStage(plan, raw, s);
        } catch (e) {
          // Only a stage held as partial values alone may fail to extract (the loader's output check).
          assert.ok(e instanceof ExtractionError && /partial values/.test(e.message), `${f} ${plan.logical.tensors.name(s.logical)}: ${String(e)}`);
          continue;
        }
        extracted++;
        const out = new Prover(ex.plan).prove(ex.stage, false);
        assert.equal(out.status, inPlace.status, `${f} stage ${plan.logical.tensors.name(s.logical)}`);
        assert.deepEqual(out.failingRanks, inPlace.failingRanks);
        if (out.status !== 'proved') differs++;
      }
    }
    assert.ok(extracted >= 100, `only ${extracted} stages extracted`);
    assert.ok(differs >= 4, `only ${differs} failing stages: the check would not see a wrong extraction`);
  });

  it('refuses an extraction that is not the same stage', () => {
    const raw = JSON.parse(readFileSync(`${EXAMPLES}mlp-tp2.json`, 'utf8')) as RawPlan;
    const plan = load(raw);
    const stages = decompose(plan, logicalOrder(plan));
    const s = stages.find((x) => plan.logical.tensors.name(x.logical) === 'h');
    assert.ok(s !== undefined);
    const c = stageClosure(plan, s);
    const r = extractStageRaw(plan, raw, s, c);
    // drop one rank's lineage of the stage's tensor: an obligation goes missing
    const t = r.parallel.programs[0]?.tensors?.find((x) => x.id === 'h');
    assert.ok(t !== undefined);
    delete t.lineage;
    assert.throws(() => loadExtracted(plan, s, c, r, 'bad.json'), ExtractionError);
  });

  it('splits a stage without collectives into rank components, proves equal ones once, and refuses a component that is not the rank\'s part', () => {
    const raw = JSON.parse(readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8')) as RawPlan;
    const plan = load(raw);
    const s = decompose(plan, logicalOrder(plan)).find((x) => plan.logical.tensors.name(x.logical) === 'h');
    assert.ok(s !== undefined);
    const r = proveByComponents(plan, raw, s, 1);
    assert.ok(r !== undefined);
    assert.equal(r.result.status, 'proved');
    assert.deepEqual(r.info.components, { ranks: 2, distinct: 1, covered: 0 });
    // the two dp ranks' components are one plan: batch rows cut to the rank's window
    const c1 = stageClosure(plan, rankStage(s, 1));
    const classes = batchClasses(plan, extractStage(plan, raw, s).plan);
    const win = windowsOf(plan, s, 1, c1, classes);
    assert.ok(win.size > 0);
    const comp = componentRaw(plan, raw, s, 1, c1, win);
    assert.equal(comp.mesh.axes.every((a) => a.size === 1), true);
    const cp = loadPlanObject('c.json', JSON.parse(JSON.stringify(comp)));
    assert.ok(checkComponent(plan, s, 1, c1, win, cp) !== undefined);
    // checked against other offsets (a window one row off), the component is not the rank's part
    const off = new Map([...win].map(([k, [o, w]]) => [k, [o + 1, w] as [number, number]]));
    assert.throws(() => checkComponent(plan, s, 1, c1, off, cp), ComponentError);
    // a stage with a collective does not split
    const g = decompose(plan, logicalOrder(plan)).find((x) => plan.logical.tensors.name(x.logical) === 'g_w1');
    assert.ok(g !== undefined && proveByComponents(plan, raw, g, 1) === undefined);
  });

  it('shrinks per stage a dim that whole-plan reduction keeps (the ffn width, contracted only in a later stage)', () => {
    const raw = JSON.parse(readFileSync(`${EXAMPLES}mlp-tp2.json`, 'utf8')) as RawPlan;
    const plan = load(raw);
    const whole = analyzeReduction(plan);
    const ffn = whole.classes.find((c) => c.dim === "'w1' dim 1");
    assert.equal(ffn?.factor, 1);
    assert.match(ffn?.kept ?? '', /contracted/);
    const s = decompose(plan, logicalOrder(plan)).find((x) => plan.logical.tensors.name(x.logical) === 'h');
    assert.ok(s !== undefined);
    const p = prepareStage(plan, raw, s);
    assert.equal(p.info.mode, 'reduced');
    const w1 = p.info.reduced.find((c) => c.dim === "'w1' dim 1");
    assert.ok(w1 !== undefined && w1.factor > 1, JSON.stringify(p.info));
    // the stage's contracted dim (hidden) stays full in the stage too
    assert.ok(p.info.kept.some((c) => /'x' dim 1/.test(c.dim) && /contracted/.test(c.kept ?? '')), JSON.stringify(p.info.kept));
    assert.equal(new Prover(p.plan).prove(p.stage, false).status, 'proved');
  });

  it('keeps, per stage, a dim whose size enters a value (mean over rows)', () => {
    const raw = meanRowsPlan();
    const plan = load(raw);
    const s = decompose(plan, logicalOrder(plan)).find((x) => plan.logical.tensors.name(x.logical) === 'm');
    assert.ok(s !== undefined);
    const p = prepareStage(plan, raw, s);
    const rows = p.info.kept.find((c) => c.dim === "'y' dim 0");
    assert.match(rows?.kept ?? '', /fixed in op 'avg' \(mean\)/, JSON.stringify(p.info));
  });

  it('keeps a contracted dim full in every stage and component: the e3 counterexample stays not equivalent', () => {
    // p_k = sum_i x_i^k over the contracted dim; e3 = (p1^3 - 3 p1 p2 + 2 p3)/6 vanishes
    // identically at 2 elements, not at 4. The parallel side adds e3 to p1 (on 2 dp ranks).
    const R = 2;
    const K = 4;
    const t = (id: string, shape: number[], role: RawPlan['logical']['tensors'][number]['role'] = 'activation'): RawPlan['logical']['tensors'][number] => ({ id, shape, role });
    const common = [
      { id: 'sq', op: 'mul', inputs: ['x', 'x'], outputs: ['x2'] },
      { id: 'cube', op: 'mul', inputs: ['x2', 'x'], outputs: ['x3'] },
      { id: 's1', op: 'sum', inputs: ['x'], outputs: ['p1'], attrs: { dims: [1] } },
    ];
    const rows = [{ expr: 'dp' }, { expr: 'dp + 1' }] as [{ expr: string }, { expr: string }];
    const raw: RawPlan = {
      format: 'planproof/v1',
      name: 'e3',
      mesh: { axes: [{ name: 'dp', size: R }] },
      logical: { tensors: [t('x', [R, K], 'input'), t('x2', [R, K]), t('x3', [R, K]), t('y', [R], 'output'), t('p1', [R])], ops: [...common, { id: 'out', op: 'identity', inputs: ['p1'], outputs: ['y'] }] },
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [
              { id: 'x', shape: [1, K], lineage: { logical: 'x', index: [rows, '*'] } },
              { id: 'x2', shape: [1, K] },
              { id: 'x3', shape: [1, K] },
              { id: 'p1', shape: [1] },
              { id: 'p2', shape: [1] },
              { id: 'p3', shape: [1] },
              { id: 'p1sq', shape: [1] },
              { id: 'p1cu', shape: [1] },
              { id: 'p1p2', shape: [1] },
              { id: 'a', shape: [1] },
              { id: 'b', shape: [1] },
              { id: 'c', shape: [1] },
              { id: 'd', shape: [1] },
              { id: 'e3', shape: [1] },
              { id: 'y', shape: [1], lineage: { logical: 'y', index: [rows] } },
            ],
            ops: [
              ...common,
              { id: 's2', op: 'sum', inputs: ['x2'], outputs: ['p2'], attrs: { dims: [1] } },
              { id: 's3', op: 'sum', inputs: ['x3'], outputs: ['p3'], attrs: { dims: [1] } },
              { id: 'm1', op: 'mul', inputs: ['p1', 'p1'], outputs: ['p1sq'] },
              { id: 'm2', op: 'mul', inputs: ['p1sq', 'p1'], outputs: ['p1cu'] },
              { id: 'm3', op: 'mul', inputs: ['p1', 'p2'], outputs: ['p1p2'] },
              { id: 'k1', op: 'scale', inputs: ['p1p2'], outputs: ['a'], attrs: { factor: -3 } },
              { id: 'k2', op: 'scale', inputs: ['p3'], outputs: ['b'], attrs: { factor: 2 } },
              { id: 'a1', op: 'add', inputs: ['p1cu', 'a'], outputs: ['c'] },
              { id: 'a2', op: 'add', inputs: ['c', 'b'], outputs: ['d'] },
              { id: 'k3', op: 'scale', inputs: ['d'], outputs: ['e3'], attrs: { factor: '1/6' } },
              { id: 'out', op: 'add', inputs: ['p1', 'e3'], outputs: ['y'] },
            ],
          },
        ],
      },
      contract: { inputs: ['x'], outputs: ['y'] },
    };
    const plan = load(raw);
    const full = verifyPlan(plan);
    assert.equal(full.verdict, 'not_equivalent', full.summary);
    const per = verifyPerStage(plan, raw);
    assert.equal(per.verdict, 'not_equivalent', per.summary);
    assert.equal(failing(per), failing(full));
    // the contracted dim kept its 4 elements in the stage of y
    const s = decompose(plan, logicalOrder(plan)).find((x) => plan.logical.tensors.name(x.logical) === 'y');
    assert.ok(s !== undefined);
    const p = prepareStage(plan, raw, s);
    assert.ok(p.info.kept.some((c) => c.full === K && /contracted/.test(c.kept ?? '')), JSON.stringify(p.info));
    // and the component proof (rank 1's part, cut to its row) is not equivalent at K = 4
    const c = proveByComponents(plan, raw, s, 1);
    assert.ok(c !== undefined && c.result.status === 'differs' && c.info.components?.distinct === 1);
  });

  for (const bug of ['none', 'tp-forward-allreduce-dropped', 'rmsnorm-eps-one-rank']) {
    it(`a generated Llama (2 layers, dp2 x tp2${bug === 'none' ? '' : `, ${bug} injected`}) gets the full-shape verdict, failing stages and ranks${FULL}`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'planproof-stage-'));
      const file = join(dir, 'p.json');
      const args = ['gen', '--model', 'llama', '--layers', '2', '--hidden', '8', '--heads', '2', '--kv-heads', '2', '--seq', '4', '--batch', '4', '--dp', '2', '--tp', '2', '--out', file, ...(bug === 'none' ? [] : ['--inject', bug])];
      assert.equal((await runCli(args)).code, 0);
      const raw = JSON.parse(readFileSync(file, 'utf8')) as RawPlan;
      const plan = load(raw);
      const full = verifyPlan(plan);
      const per = verifyPerStage(plan, raw);
      assert.equal(full.verdict, bug === 'none' ? 'verified' : 'not_equivalent');
      assert.equal(per.verdict, full.verdict, per.summary);
      assert.equal(failing(per), failing(full));
      // layers share proofs; stages split into rank components
      assert.ok((per.proofs?.run ?? Infinity) < per.stages.length / 2, per.summary);
      assert.ok(per.stageReduction.filter((i) => i.mode === 'components').length >= 100, per.summary);
    });
  }

  it('the fallback of verify: stages left "too large" get the verdict of full shapes from per-stage reduction (60 random reshape-heavy plans)', () => {
    let refuted = 0;
    let reduced = 0;
    const first = (r: VerifyReport): string | undefined => r.stages.find((x) => x.status !== 'proved')?.logical;
    fc.assert(
      fc.property(reshapeParams, (p) => {
        const raw = reshapePlan(p);
        const plan = load(raw);
        const full = verifyPlan(plan);
        // Every stage as the whole-plan path leaves it at real sizes: too large, no numbers.
        const stages = decompose(plan, logicalOrder(plan));
        const open: StageResult[] = stages.map((st) => ({ stage: st, status: 'unknown', reason: 'the stage is too large: (simulated)', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 }));
        const log: FallbackInfo[] = [];
        const fb = perStageFallback(raw, 1, log)(plan, open, { evaluated: false, reason: 'simulated', seed: 1, claimsChecked: 0, mismatches: [], failingTensors: [] });
        const rep = assemble(plan, fb.results, fb.numeric, 1, 0);
        assert.equal(rep.verdict, full.verdict, `${JSON.stringify(p)}: full ${full.summary}; fallback ${rep.summary}`);
        assert.equal(first(rep), first(full), JSON.stringify(p));
        if (rep.verdict === 'not_equivalent') {
          refuted++;
          const f = rep.stages.find((x) => x.status === 'not_equivalent');
          assert.ok((f?.witness?.length ?? 0) > 0 && /^the two sides differ: per stage/.test(f?.reason ?? ''), JSON.stringify(f));
        }
        reduced += log.filter((l) => l.reduced !== '').length;
        return true;
      }),
      { numRuns: 60, seed: 7 },
    );
    assert.ok(refuted >= 15, `only ${refuted} plans refuted`);
    assert.ok(reduced >= 10, `only ${reduced} stages reduced`);
    // A stage open for another reason is left alone.
    const raw = reshapePlan({ dp: 1, rows: 1, seq: 2, heads: 1, hd: 2, act: 'tanh', spelling: 'index', mutant: 'scale-a' });
    const plan = load(raw);
    const st = decompose(plan, logicalOrder(plan));
    const other: StageResult[] = st.map((x) => ({ stage: x, status: 'unknown', reason: 'an input relation the engine cannot encode', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 }));
    const kept = perStageFallback(raw, 1)(plan, other, { evaluated: false, seed: 1, claimsChecked: 0, mismatches: [], failingTensors: [] });
    assert.deepEqual(kept.results.map((r) => r.status), other.map(() => 'unknown'));
    // With its time budget spent, the fallback leaves too-large stages open and says why.
    const big: StageResult[] = st.map((x) => ({ stage: x, status: 'unknown', reason: 'the stage is too large: (simulated)', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 }));
    const spent = perStageFallback(raw, 1, [], -1)(plan, big, { evaluated: false, seed: 1, claimsChecked: 0, mismatches: [], failingTensors: [] });
    assert.ok(spent.results.every((r) => r.status === 'unknown' && /fallback's 0 s were spent/.test(r.reason ?? '')));
    assert.equal(perStageFallback(raw, 1)(plan, big, { evaluated: false, seed: 1, claimsChecked: 0, mismatches: [], failingTensors: [] }).results.some((r) => r.status === 'differs'), true);
  });

  it('a prefix cut of the vocab gives witnesses only of real differences (60 random data-parallel embedding gradients)', () => {
    let refuted = 0;
    let proofsIgnored = 0;
    fc.assert(
      fc.property(embedParams, (p) => {
        const raw = embedPlan(p);
        const plan = load(raw);
        const full = verifyPlan(plan);
        const w = prefixWitness(plan, raw, 'gw', 1);
        assert.ok(w !== undefined, 'the vocab of gw can be cut');
        if (w.result.status === 'differs' && w.found.length > 0) {
          refuted++;
          assert.equal(full.verdict, 'not_equivalent', `${JSON.stringify(p)}: the cut refutes a plan that is ${full.verdict}`);
        } else if (w.result.status === 'proved') proofsIgnored++;
        // the bugs that scale every row are seen at one id already
        if (p.dp > 1 && (p.mutant === 'avg-allreduce' || p.mutant === 'drop-allreduce')) assert.equal(w.result.status, 'differs', JSON.stringify(p));
        return true;
      }),
      { numRuns: 60, seed: 5 },
    );
    assert.ok(refuted >= 15, `only ${refuted} refuted`);
    assert.ok(proofsIgnored >= 10, `only ${proofsIgnored} cut plans proved`);
  });

  it('does not cut an axis a softmax normalizes, nor a vocab held in slices', () => {
    const raw = embedPlan({ dp: 2, rows: 1, seq: 2, vocab: 4, hidden: 1, mutant: 'none' });
    const sm = structuredClone(raw);
    sm.logical.tensors.push({ id: 'p', shape: [4, 1], role: 'output' });
    sm.logical.ops.push({ id: 'sm', op: 'softmax', inputs: ['gw'], outputs: ['p'], attrs: { dim: 0 } });
    sm.contract.outputs.push('p');
    sm.parallel.programs[0]?.tensors?.push({ id: 'p', shape: [4, 1], lineage: { logical: 'p' } });
    sm.parallel.programs[0]?.ops.push({ id: 'sm', op: 'softmax', inputs: ['gw'], outputs: ['p'], attrs: { dim: 0 } });
    assert.equal(prefixPlan(load(sm), sm), undefined);
    // each rank holds half of the vocab rows of gw
    const sl = structuredClone(raw);
    const t = sl.parallel.programs[0]?.tensors?.find((x) => x.id === 'gw');
    assert.ok(t !== undefined);
    t.shape = [2, 1];
    t.lineage = { logical: 'gw', index: [[{ expr: 'dp*2' }, { expr: 'dp*2 + 2' }], '*'] };
    sl.parallel.programs[0]?.tensors?.push({ id: 'gs', shape: [2, 1] });
    const ops = sl.parallel.programs[0]?.ops ?? [];
    ops.push({ id: 'half', op: 'slice', inputs: ['gw_all'], outputs: ['gw'], attrs: { dim: 0, start: 0, end: 2 } });
    (ops.find((o) => o.id === 'ar') as { outputs: string[] }).outputs = ['gw_all'];
    sl.parallel.programs[0]?.tensors?.push({ id: 'gw_all', shape: [4, 1] });
    sl.parallel.programs[0]?.tensors?.splice(sl.parallel.programs[0].tensors.findIndex((x) => x.id === 'gs'), 1);
    assert.equal(prefixPlan(load(sl), sl), undefined);
    // the plain plan is cut
    assert.ok(prefixPlan(load(raw), raw, 1) !== undefined);
  });

  it('verify --per-stage: exit codes of the verdicts, and --emit-reduced writes stage plans that verify on their own', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-emit-'));
    const ok = await runCli(['verify', `${EXAMPLES}mlp-tp2.json`, '--per-stage', '--emit-reduced', dir]);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(ok.stdout, /per-stage reduction: \d+ stage\(s\) proved by rank components/);
    const files = readdirSync(dir).filter((f) => f.endsWith('.json'));
    assert.ok(files.length >= 10, files.join(', '));
    for (const f of files.slice(0, 4)) {
      const r = await runCli(['verify', join(dir, f), '--no-reduce', '--jobs', '0', '--no-cache']);
      assert.equal(r.code, 0, `${f}: ${r.stdout}`);
    }
    const bad = await runCli(['verify', `${EXAMPLES}buggy/mlp-tp2-wrong-half.json`, '--per-stage', '--json']);
    assert.equal(bad.code, 1);
    const rep = JSON.parse(bad.stdout) as { verdict: string; stages: { status: string; witness?: unknown[] }[]; stageReduction: unknown[] };
    assert.equal(rep.verdict, 'not_equivalent');
    assert.ok(rep.stages.some((s) => s.status === 'not_equivalent' && (s.witness?.length ?? 0) > 0));
    assert.equal(rep.stageReduction.length, rep.stages.length);
  });

  it('gives the verdict and failing stages of full shapes on 100 random plans and mutants (rank components and per-stage reduction) @full', () => {
    let broken = 0;
    let reducedStages = 0;
    let compStages = 0;
    let sharedComponents = 0;
    fc.assert(
      fc.property(planParams, (p) => {
        const raw = mlpPlan(p);
        const plan = load(raw);
        const full = verifyPlan(plan);
        const per = verifyPerStage(plan, raw);
        if (full.verdict !== 'verified') broken++;
        reducedStages += per.stageReduction.filter((i) => i.mode === 'reduced').length;
        compStages += per.stageReduction.filter((i) => i.mode === 'components').length;
        sharedComponents += per.stageReduction.filter((i) => i.components !== undefined && i.components.distinct < i.components.ranks).length;
        assert.equal(per.verdict, full.verdict, `${JSON.stringify(p)}: full ${full.verdict} (${full.summary}), per-stage ${per.verdict} (${per.summary})`);
        assert.equal(failing(per), failing(full), JSON.stringify(p));
        return true;
      }),
      { numRuns: 100, seed: 21 },
    );
    assert.ok(broken >= 20, `only ${broken} of 100 plans are broken`);
    assert.ok(reducedStages >= 50, `only ${reducedStages} stages reduced`);
    assert.ok(compStages >= 100, `only ${compStages} stages split into rank components`);
    assert.ok(sharedComponents >= 50, `only ${sharedComponents} stages share a component proof between ranks`);
  });
});
