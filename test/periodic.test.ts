/**
 * Periodic witnesses (stages/shrink/periodic.ts, docs/engine.md "Periodic witnesses"), at L1's
 * structure at small width (llama, data parallel only, one micro-batch, two layers). The loss
 * stage's part holds every rank's rows; at one period (every rank's rows equal to rank 0's) it
 * holds one rank. Each refutation's witness is checked at full size: the period's inputs are
 * repeated over the periods, both sides of the full part run on them in Float64, and they must
 * differ there (and agree with the period's values). The correct twin is never refuted, and a
 * part without a periodic rule or with a claim across periods is left alone.
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import { loadPartObject, loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import type { Program } from '../plans/model.js';
import type { Dense } from '../ops/algebra.js';
import { numel } from '../ops/types.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { executeLogical, executeParallel, logicalIndexer, type LogicalValues } from '../sdfg/execute.js';
import { evalLineage } from '../lineage/model.js';
import { evaluateBoth } from '../stages/witness/numeric.js';
import { verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { verifyPlan } from '../stages/verify.js';
import { closure, partRaw } from '../stages/shrink/part.js';
import { periodicPart, provePartPeriodic } from '../stages/shrink/periodic.js';
import { mlpPlan, planParams } from './reduce-plans.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
const DP = 4;
const CTX: BugContext = { dp: DP, tp: 1, micro: 1, family: 'llama' };

function makeL1(bug?: string): RawPlan {
  const p = PRESETS['llama-tiny'];
  assert.ok(p !== undefined);
  const raw = generatePlan({ model: { ...p.model, layers: 2, batch: DP }, par: { dp: DP, tp: 1, micro: 1 }, optimizer: OPT }) as unknown as RawPlan;
  if (bug !== undefined) {
    const b = BUGS.find((x) => x.id === bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, CTX);
  }
  return raw;
}

/** The loss obligation on program 0's lowest rank, and its part as written (stages/shrink/part.ts). */
function lossPart(raw: RawPlan): { plan: LoadedPlan; logical: number; rank: number; tensor: number; written: RawPlan } {
  const plan = loadPlanObject('p.json', structuredClone(raw));
  const logical = plan.logical.tensors.id('head/loss');
  const prog = plan.programs[0] as Program;
  const rank = prog.ranks[0] as number;
  let tensor = -1;
  for (let t = 0; t < prog.tensors.size && tensor < 0; t++) if (prog.lineage[t]?.logical === logical) tensor = t;
  assert.ok(tensor >= 0);
  const written = partRaw(plan, raw, { index: 0, logical, obligations: [] }, closure(plan, logical, rank, tensor)).raw;
  return { plan, logical, rank, tensor, written };
}

/** A dense value repeated along every dim where `shape` is larger (element i of a dim reads i mod the period's size). */
function tile(v: Dense<number>, shape: readonly number[]): Dense<number> {
  const n = numel(shape);
  const data = new Array<number>(n);
  for (let f = 0; f < n; f++) {
    let rest = f;
    let src = 0;
    let stride = 1;
    const idx: number[] = [];
    for (let d = shape.length - 1; d >= 0; d--) {
      idx[d] = rest % (shape[d] as number);
      rest = Math.floor(rest / (shape[d] as number));
    }
    for (let d = shape.length - 1; d >= 0; d--) {
      src += ((idx[d] as number) % (v.shape[d] as number)) * stride;
      stride *= v.shape[d] as number;
    }
    data[f] = v.data[src] as number;
  }
  return { shape: [...shape], data };
}

/**
 * The periodic part's witness draw, repeated over the periods, run on the full part: the sum
 * of every rank's loss addend and the logical loss there; and the period part's own values.
 */
function atFullSize(written: RawPlan, periodic: RawPlan, seed: number): { fullParallel: number; fullLogical: number; periodParallel: number; periodLogical: number } {
  const per = loadPartObject('periodic.json', structuredClone(periodic));
  const both = evaluateBoth(per, seed);
  const full = loadPartObject('part.json', structuredClone(written));
  const inputs: LogicalValues<number> = new Array(full.logical.tensors.size);
  for (const name of written.contract.inputs) {
    const v = both.logical[per.logical.tensors.id(name)];
    assert.ok(v !== undefined, name);
    const l = full.logical.tensors.id(name);
    inputs[l] = tile(v, full.logical.shapes[l] ?? []);
  }
  const logical = executeLogical(full, floatAlgebra, inputs);
  const parallel = executeParallel(full, floatAlgebra, (r, t) => {
    const p = full.programs[full.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    assert.ok(spec !== undefined);
    const nf = evalLineage(spec, full.mesh, r, full.logical.shapes[spec.logical] ?? [], full.view(r).shapes[t] ?? []);
    const shape = full.view(r).shapes[t] ?? [];
    const idx = logicalIndexer(nf, full.logical.shapes[spec.logical] ?? []);
    const src = (logical[spec.logical] as Dense<number>).data;
    return { shape, data: Array.from({ length: numel(shape) }, (_, f) => src[idx(f)] as number) };
  });
  const target = full.logical.tensors.id('head/loss');
  let sum = 0;
  for (let r = 0; r < full.mesh.size; r++) {
    const p = full.programs[full.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) if (p.lineage[t]?.logical === target) sum += (parallel[r]?.[t]?.data[0] ?? NaN) as number;
  }
  const pt = per.logical.tensors.id('head/loss');
  const pp = per.programs[0] as Program;
  let periodParallel = NaN;
  for (let t = 0; t < pp.tensors.size; t++) if (pp.lineage[t]?.logical === pt) periodParallel = both.parallel[0]?.[t]?.data[0] as number;
  return { fullParallel: sum, fullLogical: logical[target]?.data[0] as number, periodParallel, periodLogical: both.logical[pt]?.data[0] as number };
}

const close = (a: number, b: number): boolean => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));

describe('periodic witnesses: the loss part at one period (L1 structure, small width)', () => {
  it('loss-per-rank-normalization: refuted at one period of one rank; the witness repeated over the periods refutes the full part', () => {
    const bad = makeL1('loss-per-rank-normalization');
    const o = lossPart(bad);
    const r = provePartPeriodic(o.plan, bad, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok(!('why' in r), 'why' in r ? r.why : '');
    assert.equal(r.result.status, 'differs', r.result.reason);
    assert.match(r.result.reason ?? '', /periodic witness/);
    assert.deepEqual(r.ranks, [o.rank], 'every rank is a copy of the first: one rank kept');
    const w = r.witness[0];
    assert.ok(w !== undefined && w.logical === 'head/loss', 'a witness on the loss');
    assert.ok(Math.abs(w.parallel - w.expected) > 1e-6 * Math.max(1, Math.abs(w.expected)), `${w.parallel} vs ${w.expected}`);
    // The witness checked at full size, independently of the rewrite's own arithmetic.
    const pre = periodicPart(o.written, 'head/loss');
    assert.ok(typeof pre !== 'string', String(pre));
    assert.equal(pre.raw.parallel.programs.length, 1);
    const v = atFullSize(o.written, pre.raw, 1);
    assert.ok(close(v.fullParallel, v.periodParallel), `sum of the ${DP} addends ${v.fullParallel} vs the period's ${v.periodParallel}`);
    assert.ok(close(v.fullLogical, v.periodLogical), `logical mean ${v.fullLogical} vs the period's ${v.periodLogical}`);
    assert.ok(Math.abs(v.fullParallel - v.fullLogical) > 1e-6 * Math.max(1, Math.abs(v.fullLogical)), `full part at the repeated draw: ${v.fullParallel} vs ${v.fullLogical}`);
  }).timeout(300_000);

  it('the correct twin: its period part agrees at full size and is never refuted', () => {
    const good = makeL1();
    const o = lossPart(good);
    const r = provePartPeriodic(o.plan, good, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok('why' in r, 'why' in r ? r.why : `${r.result.status}: ${r.result.reason ?? ''}`);
    assert.match(r.why, /periodic: proved at one period \(a witness only/);
    const pre = periodicPart(o.written, 'head/loss');
    assert.ok(typeof pre !== 'string', String(pre));
    for (const seed of [1, 2, 3]) {
      const v = atFullSize(o.written, pre.raw, seed);
      assert.ok(close(v.fullParallel, v.periodParallel) && close(v.fullLogical, v.periodLogical) && close(v.fullParallel, v.fullLogical), JSON.stringify(v));
    }
  }).timeout(300_000);

  it('does not apply to an op without a periodic rule, nor to claims that cross a period', () => {
    const bad = makeL1('loss-per-rank-normalization');
    const o = lossPart(bad);
    // Labels that may be ignore_index: the mean divides by a count of labels, for which
    // cross_entropy declares no rescaling identity, so the class has no rule.
    const ignored = structuredClone(o.written);
    const labels = ignored.logical.tensors.find((t) => t.id === 'head/reshape#1');
    assert.ok(labels?.values !== undefined);
    labels.values = { ...labels.values, also: [-100] };
    const a = periodicPart(ignored, 'head/loss');
    assert.equal(typeof a, 'string');
    assert.match(String(a), /no periodic rule/);
    // A softmax over the rows (normalized across them): no rule either.
    const soft = structuredClone(o.written);
    const x = soft.logical.ops.find((op) => op.op === 'cross_entropy');
    assert.ok(x !== undefined);
    soft.logical.tensors.push({ id: 'soft', shape: [...(soft.logical.tensors.find((t) => t.id === 'head/reshape')?.shape ?? [])], role: 'activation' });
    soft.logical.ops.unshift({ id: 'soft', op: 'softmax', inputs: ['head/reshape'], outputs: ['soft'], attrs: { dim: 0 } });
    x.inputs = ['soft', ...x.inputs.slice(1)];
    const b = periodicPart(soft, 'head/loss');
    assert.equal(typeof b, 'string');
    assert.match(String(b), /'soft' \(softmax\)/);
    // Rank 1 holds rows that straddle two blocks of the others': no period holds every claim.
    const shifted = structuredClone(o.written);
    for (const t of shifted.parallel.programs[1]?.tensors ?? []) {
      const lin = t.lineage;
      if (lin !== undefined && 'index' in lin && (lin.logical === 'head/reshape' || lin.logical === 'head/reshape#1')) {
        const e = lin.index?.[0];
        if (Array.isArray(e) && typeof e[0] === 'number' && typeof e[1] === 'number') lin.index = [[e[0] + 1, e[1] + 1], ...(lin.index?.slice(1) ?? [])];
      }
    }
    const c = periodicPart(shifted, 'head/loss');
    assert.equal(typeof c, 'string');
    assert.match(String(c), /blocks are 1|crosses a period|no dim class/);
  });

  /** L1 at small width with rank 2's program spelled apart: `wrong` divides by its local count, else it only copies its loss once more. */
  function rankApart(wrong: boolean): RawPlan {
    const raw = makeL1();
    const prog = raw.parallel.programs[0];
    assert.ok(prog !== undefined);
    const loss = prog.ops.find((op) => op.op === 'scale' && /(^|\/)loss$/.test(op.outputs[0] ?? ''));
    assert.ok(loss !== undefined);
    const apart = structuredClone(prog);
    apart.ranks = [2];
    prog.ranks = { where: { dp: [0, 1, 3] } };
    const l2 = apart.ops.find((op) => op.id === loss.id);
    assert.ok(l2 !== undefined);
    if (wrong) l2.attrs = { factor: `1/${Number(String(loss.attrs?.['factor']).split('/')[1]) / DP}` };
    else {
      l2.outputs = ['head/loss_pre'];
      apart.tensors?.push({ id: 'head/loss_pre', shape: [] });
      apart.ops.splice(apart.ops.indexOf(l2) + 1, 0, { id: 'head/loss_copy', op: 'identity', inputs: ['head/loss_pre'], outputs: ['head/loss'] });
    }
    raw.parallel.programs.push(apart);
    return raw;
  }

  it('a rank spelled apart correctly: two classes of copies (addends 3 + 1), agreeing at full size and never refuted', () => {
    const raw = rankApart(false);
    assert.equal(verifyPlan(loadPlanObject('ok.json', structuredClone(raw))).verdict, 'verified');
    const o = lossPart(raw);
    const pre = periodicPart(o.written, 'head/loss');
    assert.ok(typeof pre !== 'string', String(pre));
    assert.equal(pre.raw.parallel.programs.length, 2, 'two classes of copies');
    for (const seed of [1, 2]) {
      const v = atFullSize(o.written, pre.raw, seed);
      assert.ok(close(v.fullParallel, v.fullLogical), JSON.stringify(v));
    }
    const r = provePartPeriodic(o.plan, raw, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok('why' in r, 'why' in r ? r.why : `${r.result.status}: ${r.result.reason ?? ''}`);
    assert.match(r.why, /at one period/);
  }).timeout(300_000);

  it('ranks that are not copies of one another (one rank scales apart) are kept apart as two classes, and the witness refutes the full part', () => {
    // Rank 2 alone divides by its local count; the others are right. One period keeps two ranks.
    const raw = rankApart(true);
    const o = lossPart(raw);
    const pre = periodicPart(o.written, 'head/loss');
    assert.ok(typeof pre !== 'string', String(pre));
    assert.equal(pre.raw.parallel.programs.length, 2, 'two classes of copies');
    const v = atFullSize(o.written, pre.raw, 1);
    assert.ok(Math.abs(v.fullParallel - v.fullLogical) > 1e-6 * Math.max(1, Math.abs(v.fullLogical)), JSON.stringify(v));
    const r = provePartPeriodic(o.plan, raw, { index: 0, logical: o.logical, obligations: [] }, o.rank, o.tensor, 1);
    assert.ok(!('why' in r), 'why' in r ? r.why : '');
    assert.equal(r.result.status, 'differs', r.result.reason);
  }).timeout(300_000);

  it('per template with the periodic route alone: the bug NOT EQUIVALENT, the correct plan VERIFIED', () => {
    const bad = makeL1('loss-per-rank-normalization');
    const r = verifyPerTemplate(loadPlanObject('p.json', structuredClone(bad)), { witness: { raw: () => bad, provePart: provePartPeriodic } });
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    assert.ok(r.stages.some((s) => s.status === 'not_equivalent' && /periodic witness/.test(s.reason ?? '')), 'refuted by this route');
    const good = makeL1();
    const ok = verifyPerTemplate(loadPlanObject('p.json', structuredClone(good)), { witness: { raw: () => good, provePart: provePartPeriodic } });
    assert.equal(ok.verdict, 'verified', ok.summary);
    assert.equal(verifyPlan(loadPlanObject('bad.json', structuredClone(bad))).verdict, 'not_equivalent', 'the bug is one rank by rank too');
  }).timeout(1_800_000);

  it('never refutes a plan that verifies, and every refutation is one of the plan (100 random MLP plans and mutants)', () => {
    let applied = 0;
    let refuted = 0;
    let verified = 0;
    fc.assert(
      fc.property(planParams, (p) => {
        const raw = mlpPlan(p);
        const plan = loadPlanObject('mlp.json', structuredClone(raw));
        const full = verifyPlan(loadPlanObject('mlp.json', structuredClone(raw))).verdict;
        if (full === 'verified') verified++;
        // Every obligation of every program, on the program's lowest rank.
        for (const prog of plan.programs) {
          const produced = new Set<number>();
          for (let op = 0; op < prog.ops.size; op++) for (const t of prog.ops.opOutputs(op)) produced.add(t);
          for (let t = 0; t < prog.tensors.size; t++) {
            const spec = prog.lineage[t];
            if (spec === undefined || !produced.has(t)) continue;
            const r = provePartPeriodic(plan, raw, { index: 0, logical: spec.logical, obligations: [] }, prog.ranks[0] as number, t, 1);
            if ('why' in r) {
              // Written at one period and not refuted there (a witness only: never a proof).
              if (/^periodic: \w+ at one period/.test(r.why)) applied++;
              continue;
            }
            applied++;
            refuted++;
            assert.equal(full, 'not_equivalent', `${JSON.stringify(p)}: refuted at one period ('${plan.logical.tensors.name(spec.logical)}'), ${full} rank by rank`);
          }
        }
        return true;
      }),
      { numRuns: 100, seed: 37 },
    );
    // Not vacuous: the route applies to many obligations, refutes some, and meets correct plans.
    assert.ok(applied >= 30, `applied to only ${applied} obligations`);
    assert.ok(refuted >= 10, `only ${refuted} refutations`);
    assert.ok(verified >= 20, `only ${verified} plans verify`);
  }).timeout(600_000);
});
