/**
 * Zero-extension cuts for witnesses (stages/shrink/reduce.ts zeroCutPlan; docs/engine.md,
 * "Zero-extension cuts for witnesses"). A contracted dim that every op keeps zeros along is cut
 * in each aligned block; a difference of the cut plan must be a difference of the full plan.
 * Checked on global-norm clipping (the bugs this exists for, and their correct twin) and on
 * random plans and mutants against the verdict at full shapes; dims an op does not keep zeros
 * along (exp, sigmoid, an add with an operand broadcast along them) are never cut.
 */
import { strict as assert } from 'node:assert';
import fc from 'fast-check';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import type { RawPlan } from '../plans/raw.js';
import { verifyPlan } from '../stages/verify.js';
import { stageOf } from '../stages/decompose/extract.js';
import { prepareStage, zeroCutWitness } from '../stages/shrink/stage-reduce.js';
import { zeroCutPlan } from '../stages/shrink/reduce.js';
import { provePart } from '../stages/shrink/part.js';
import { mlpPlan, zeroCutParams, type PlanParams } from './reduce-plans.js';
import { readFileSync } from 'node:fs';
import { registry } from '../ops/registry.js';
import type { Attrs } from '../ops/types.js';
import type { Dense } from '../ops/algebra.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { FIXTURES } from './helpers.js';

interface Enc {
  shape: number[];
  data: number[];
}
/** The golden cases from PyTorch (tools/gen_golden.py): valid shapes and attributes of every op. */
const golden = JSON.parse(readFileSync(`${FIXTURES}golden/ops.json`, 'utf8')) as { cases: { op: string; attrs: Attrs; inputs?: Enc[]; group?: number[] }[] };

/** Positions of a row-major tensor whose index along dims `ds` is 0 (any of them). */
function atZero(shape: readonly number[], ds: readonly number[]): boolean[] {
  const n = shape.reduce((a, b) => a * b, 1);
  return Array.from({ length: n }, (_, f) => {
    let rest = f;
    let hit = false;
    for (let d = shape.length - 1; d >= 0; d--) {
      const i = rest % (shape[d] as number);
      rest = Math.floor(rest / (shape[d] as number));
      if (i === 0 && ds.includes(d)) hit = true;
    }
    return hit;
  });
}

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
const load = (raw: RawPlan): LoadedPlan => loadPlanObject('mem.json', JSON.parse(JSON.stringify(raw)));

function llama(bug?: string): RawPlan {
  const p = PRESETS['llama-tiny'];
  assert.ok(p !== undefined);
  const ctx: BugContext = { dp: 2, tp: 2, micro: 2, family: 'llama', pp: 1 };
  const raw = generatePlan({ model: p.model, par: { ...p.par, ...ctx }, optimizer: OPT });
  if (bug !== undefined) {
    const b = BUGS.find((x) => x.id === bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, ctx);
  }
  return raw as unknown as RawPlan;
}

describe('zero-extension cuts for witnesses', function () {
  this.timeout(300000);

  it('global-norm clipping: the clip stages of three bugs are refuted at the cut, their correct twin is not @full', () => {
    for (const bug of [undefined, 'clip-one-rank', 'clip-local-norm', 'square-exponent-one-rank']) {
      const raw = llama(bug);
      const plan = load(raw);
      const full = verifyPlan(plan);
      assert.equal(full.verdict, bug === undefined ? 'verified' : 'not_equivalent', `${bug ?? 'correct'}: ${full.summary}`);
      for (const name of ['clip', 'clip.5']) {
        const st = stageOf(plan, name);
        assert.ok(st !== undefined, name);
        const p = prepareStage(plan, raw, st);
        assert.ok(p.raw !== undefined);
        const z = zeroCutWitness(p.plan, p.raw, name, 1);
        if ('why' in z) assert.fail(`${bug ?? 'correct'} ${name}: nothing cut: ${z.why}`);
        // Every gradient's and clipped gradient's contracted dims are cut (8 -> 2 or 4), nothing else.
        assert.ok(z.cut.length >= 20 && z.cut.every((c) => /^'(grad\/|clip)/.test(c)), z.cut.join('; '));
        if (bug === undefined) {
          // The correct plan's cut is the correct plan on inputs zero at the positions cut: proved.
          assert.equal(z.result.status, 'proved', `${name}: ${z.result.reason ?? ''}`);
          assert.equal(z.found.length, 0);
        } else {
          assert.equal(z.result.status, 'differs', `${bug} ${name}: ${z.result.reason ?? ''}`);
          assert.ok(z.found.length > 0, `${bug} ${name}: no witness`);
          // The full plan fails at this stage too (the reference, rank by rank).
          assert.notEqual(full.stages.find((s) => s.logical === name)?.status, 'proved', `${bug} ${name}`);
        }
      }
    }
  });

  it('a difference under the witness tolerance is certified by interval arithmetic (clipping to a norm of 1e-8)', () => {
    // Clipped gradients of norm 1e-8 differ by far less than the tolerance of 1e-6 (absolute
    // below 1): only intervals, which enclose the exact values, can tell them apart.
    const tiny: OptimizerConfig = { ...OPT, maxNorm: '1/100000000' };
    for (const bug of [undefined, 'square-exponent-one-rank', 'clip-local-norm']) {
      const p = PRESETS['llama-tiny'];
      assert.ok(p !== undefined);
      const ctx: BugContext = { dp: 2, tp: 2, micro: 2, family: 'llama', pp: 1 };
      const raw = generatePlan({ model: p.model, par: { ...p.par, ...ctx }, optimizer: tiny }) as unknown as RawPlan;
      if (bug !== undefined) BUGS.find((x) => x.id === bug)?.inject(raw as never, ctx);
      const plan = load(raw);
      const st = stageOf(plan, 'clip');
      assert.ok(st !== undefined);
      const prep = prepareStage(plan, raw, st);
      assert.ok(prep.raw !== undefined);
      // A term budget of 10 makes the exact engine give up at the cut, as at L3's size.
      const z = zeroCutWitness(prep.plan, prep.raw, 'clip', 1, undefined, 10);
      if ('why' in z) assert.fail(z.why);
      if (bug === undefined) assert.notEqual(z.result.status, 'differs', z.result.reason);
      else {
        assert.equal(z.result.status, 'differs', `${bug}: ${z.result.reason ?? ''}`);
        assert.match(z.result.reason ?? '', /certified witness \(interval arithmetic/);
        assert.ok(z.found.length > 0);
      }
    }
  });

  it('a part whose rank no longer reaches the others starts its logical side from the stage\'s other claims (clip-one-rank under pp)', () => {
    const pp = (bug?: string): RawPlan => {
      const p = PRESETS['llama-tiny'];
      assert.ok(p !== undefined);
      const ctx: BugContext = { dp: 2, tp: 2, micro: 2, family: 'llama', pp: 2 };
      const raw = generatePlan({ model: { ...p.model, layers: 2 }, par: { ...p.par, ...ctx }, optimizer: OPT });
      if (bug !== undefined) BUGS.find((x) => x.id === bug)?.inject(raw, ctx);
      return raw as unknown as RawPlan;
    };
    for (const bug of [undefined, 'clip-one-rank']) {
      const raw = pp(bug);
      const plan = load(raw);
      const st = stageOf(plan, 'clip');
      assert.ok(st !== undefined);
      // Rank 1 skips the clipping under the bug: its part no longer reaches the all-reduce.
      const ob = st.obligations.find((o) => o.rank === 1);
      assert.ok(ob !== undefined);
      const r = provePart(plan, raw, st, ob.rank, ob.tensor, 1);
      assert.ok(!('why' in r), 'why' in r ? r.why : '');
      // The logical side is the clipping of the claimed gradients, not the model recomputed.
      const kinds = new Set(r.raw.logical.ops.map((o) => o.op));
      assert.deepEqual([...kinds], ['clip_grad_norm'], `${bug ?? 'correct'}: ${[...kinds].join(', ')}`);
      assert.equal(r.result.status, bug === undefined ? 'proved' : 'differs', `${bug ?? 'correct'}: ${r.result.reason ?? ''}`);
      if (bug !== undefined) assert.ok(r.witness.length > 0);
    }
  });

  it('every zeroTails rule holds on its op\'s golden cases: zeros stay zero, and sums ignore them', () => {
    let checked = 0;
    for (const c of golden.cases) {
      const def = registry.get(registry.id(c.op));
      if (def.zeroTails === undefined || c.group !== undefined || c.inputs === undefined) continue;
      const inputs = c.inputs;
      const sig = def.dims(inputs.map((x) => x.shape), c.attrs);
      const labels = new Set(sig.inputs.flatMap((ls) => ls.map((l) => l.label)));
      for (const label of labels) {
        const dimsIn = sig.inputs.map((ls) => ls.flatMap((l, d) => (l.label === label ? [d] : [])));
        const carries = dimsIn.map((ds) => ds.length > 0);
        if (!def.zeroTails(carries)) continue;
        // A fixed label's class is never cut (reduce.ts cuts contracted classes only): its rule is not asked.
        if ([...sig.inputs, ...sig.outputs].some((ls) => ls.some((l) => l.label === label && l.role === 'fixed'))) continue;
        // Position 0 along the label is zero in every input that carries it.
        if (inputs.some((x, i) => (dimsIn[i] ?? []).some((d) => (x.shape[d] as number) < 2))) continue;
        const zeroed: Dense<number>[] = inputs.map((x, i) => {
          const z = atZero(x.shape, dimsIn[i] ?? []);
          return { shape: x.shape, data: x.data.map((v, f) => (z[f] === true ? 0 : v)) };
        });
        const outs = def.apply(floatAlgebra, zeroed, c.attrs);
        const what = `${c.op} ${JSON.stringify(c.attrs)} [${inputs.map((x) => x.shape.join('x')).join(', ')}] along '${label}' (carried by ${carries.join(',')})`;
        let onOutput = false;
        outs.forEach((o, k) => {
          const ds = (sig.outputs[k] ?? []).flatMap((l, d) => (l.label === label ? [d] : []));
          if (ds.length === 0) return;
          onOutput = true;
          const z = atZero(o.shape, ds);
          o.data.forEach((v, f) => assert.ok(z[f] !== true || v === 0, `${what}: output ${k}[${f}] = ${v}, not 0`));
        });
        // A label the outputs lack is summed over: the zeros add nothing, so deleting those
        // positions gives the same outputs.
        if (!onOutput) {
          const cutIns: Dense<number>[] = zeroed.map((x, i) => {
            const z = atZero(x.shape, dimsIn[i] ?? []);
            return { shape: x.shape.map((n, d) => ((dimsIn[i] ?? []).includes(d) ? n - 1 : n)), data: x.data.filter((_, f) => z[f] !== true) };
          });
          const cutOuts = def.apply(floatAlgebra, cutIns, c.attrs);
          outs.forEach((o, k) => o.data.forEach((v, f) => {
            const w = (cutOuts[k] as Dense<number>).data[f] as number;
            assert.ok(Math.abs(v - w) <= 1e-12 * Math.max(1, Math.abs(w)), `${what}: output ${k}[${f}] = ${v} with zeros, ${w} without them`);
          }));
        }
        checked++;
      }
    }
    assert.ok(checked >= 30, `only ${checked} (case, label) pairs checked`);
  });

  const params = (act: PlanParams['act'], mutant: PlanParams['mutant'] = 'none', bias = false): PlanParams => ({ dp: 2, tp: 2, rows: 2, hidden: 4, ffn: 4, out: 2, act, spelling: 'index', bias, mutant });
  const cutDims = (p: PlanParams): string[] => {
    const raw = mlpPlan(p);
    return zeroCutPlan(load(raw), raw)?.cut ?? [];
  };

  it('cuts a contracted dim only where every op keeps zeros along it', () => {
    // tanh(0) = 0: the ffn dims (h, a, w1 columns, w2 rows) are cut, as is the hidden dim.
    const tanh = cutDims(params('tanh'));
    assert.ok(tanh.some((c) => c.startsWith("'x' dim 1")), tanh.join('; '));
    assert.ok(tanh.some((c) => c.startsWith("'w2' dim 0")), tanh.join('; '));
    // exp(0) = 1 and sigmoid(0) = 1/2: the ffn dims are kept, the hidden dim is still cut.
    for (const act of ['exp', 'sigmoid'] as const) {
      const dims = cutDims(params(act));
      assert.ok(dims.some((c) => c.startsWith("'x' dim 1")), `${act}: ${dims.join('; ')}`);
      assert.ok(!dims.some((c) => c.startsWith("'w2' dim 0") || c.startsWith("'h' ")), `${act}: ${dims.join('; ')}`);
    }
    // A wrong activation on the ranks keeps the dims too (every op of the class counts, both sides).
    assert.ok(!cutDims(params('tanh', 'wrong-act')).some((c) => c.startsWith("'w2' dim 0")));
  });

  it('never refutes a plan that verifies, and every refutation is one at full shapes (100 random plans and mutants)', () => {
    let cut = 0;
    let refuted = 0;
    let verified = 0;
    fc.assert(
      fc.property(zeroCutParams, (p) => {
        const raw = mlpPlan(p);
        const plan = load(raw);
        const z = zeroCutPlan(plan, raw);
        if (z === undefined) return true;
        cut++;
        const full = verifyPlan(plan);
        const atCut = verifyPlan(z.plan);
        if (full.verdict === 'verified') {
          verified++;
          assert.notEqual(atCut.verdict, 'not_equivalent', `${JSON.stringify(p)}: verified at full shapes, refuted at the cut (${atCut.summary})`);
        }
        if (atCut.verdict === 'not_equivalent') {
          refuted++;
          assert.equal(full.verdict, 'not_equivalent', `${JSON.stringify(p)}: refuted at the cut, ${full.verdict} at full shapes`);
        }
        return true;
      }),
      { numRuns: 100, seed: 27 },
    );
    // Not vacuous: most plans are cut, and both kinds of verdict are compared.
    assert.ok(cut >= 70, `only ${cut} of 100 plans cut`);
    assert.ok(verified >= 20, `only ${verified} cut plans verify at full shapes`);
    assert.ok(refuted >= 20, `only ${refuted} cut plans refuted`);
  });
});
