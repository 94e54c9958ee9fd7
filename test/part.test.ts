/**
 * Witnesses per template (stages/shrink/part.ts, docs/engine.md "Witnesses per template"): a stage the
 * per-template tensor level leaves open is refuted on one rank's part, extracted with the ranks
 * it reads. Checked against the rank-by-rank path (the reference, with its whole-plan numeric
 * run): every refuted stage is the stage rank by rank names first, with a witness; correct plans
 * whose stages stay open per template are never refuted.
 */
import { strict as assert } from 'node:assert';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import { loadPartObject, loadPlanObject } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import type { RawPlan } from '../plans/raw.js';
import { verifyPlan } from '../stages/verify.js';
import { templateDiff, verifyPerTemplate } from '../stages/decompose/template-verify.js';
import { partProver, provePart } from '../stages/shrink/part.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };

function planOf(preset: string, ctx: BugContext, bug?: string): RawPlan {
  const p = PRESETS[preset];
  assert.ok(p !== undefined);
  const raw = generatePlan({ model: p.model, par: { ...p.par, ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
  if (bug !== undefined) {
    const b = BUGS.find((x) => x.id === bug);
    assert.ok(b !== undefined, bug);
    b.inject(raw, ctx);
  }
  return raw as unknown as RawPlan;
}

const perTemplate = (make: () => RawPlan): ReturnType<typeof verifyPerTemplate> => verifyPerTemplate(loadPlanObject('p.json', make()), { witness: { raw: make, provePart } });
const perTemplateWith = (make: () => RawPlan, prove: typeof provePart): ReturnType<typeof verifyPerTemplate> => verifyPerTemplate(loadPlanObject('p.json', make()), { witness: { raw: make, provePart: prove } });

describe('witnesses per template (one rank\'s part of an open stage)', () => {
  const llama: BugContext = { dp: 2, tp: 2, micro: 2, family: 'llama' };
  const gpt2: BugContext = { dp: 2, tp: 2, micro: 2, family: 'gpt2' };
  const cases: [string, string, BugContext][] = [
    ['dp-grad-allreduce-avg', 'llama-tiny', llama],
    ['dp-grad-allreduce-dropped', 'llama-tiny', llama],
    ['loss-per-rank-normalization', 'llama-tiny', llama],
    ['tp-forward-allreduce-dropped', 'llama-tiny', llama],
    ['tp-backward-allreduce-dropped', 'llama-tiny', llama],
    ['rope-backward-cos-sin-swapped', 'llama-tiny', llama],
    ['norm-eps-several-ranks', 'llama-tiny', llama],
    ['vocab-range-off-by-one', 'gpt2-tiny', gpt2],
    ['attention-scale-all-ranks', 'gpt2-tiny', gpt2],
    // One rank spelled apart (its own program): parts of few-rank programs are tried early.
    ['rmsnorm-eps-one-rank', 'llama-tiny', llama],
    ['adam-eps-one-rank', 'llama-tiny', llama],
  ];
  it('catalog bugs: not equivalent per template, at the stage rank by rank names first, with a witness @full', () => {
    for (const [bug, preset, ctx] of cases) {
      const make = (): RawPlan => planOf(preset, ctx, bug);
      const ref = verifyPlan(loadPlanObject('ref.json', make()));
      assert.equal(ref.verdict, 'not_equivalent', `${bug}: the reference`);
      const first = ref.stages.find((s) => s.status === 'not_equivalent');
      const r = perTemplate(make);
      assert.equal(r.verdict, 'not_equivalent', `${bug}: ${r.summary}`);
      const st = r.stages.find((s) => s.status === 'not_equivalent');
      assert.ok(st !== undefined && (st.witness?.length ?? 0) > 0, `${bug}: a witness`);
      assert.equal(st.logical, first?.logical, `${bug}: the stage refuted`);
      // The witness names a rank of the plan that holds the stage's tensor.
      for (const w of st.witness ?? []) assert.ok(w.rank >= 0 && w.rank < 8, `${bug}: witness rank ${w.rank}`);
    }
  }).timeout(600_000);

  it('a part too large for the exact normal form is refuted by its numeric run on two draws, a correct one never', () => {
    // A term budget of 5 makes these parts "too large" for the normal form at these sizes,
    // as a 16,032-row vocabulary gradient is at L3's (docs/engine.md, "Numeric witnesses of large parts").
    const small = (make: () => RawPlan): ReturnType<typeof verifyPerTemplate> => verifyPerTemplate(loadPlanObject('p.json', make()), { witness: { raw: make, provePart: partProver({ termBudget: 5 }) } });
    for (const bug of ['dp-grad-allreduce-avg', 'tp-forward-allreduce-dropped', 'loss-per-rank-normalization']) {
      const r = small(() => planOf('llama-tiny', llama, bug));
      assert.equal(r.verdict, 'not_equivalent', `${bug}: ${r.summary}`);
      const st = r.stages.find((s) => s.status === 'not_equivalent');
      assert.ok(st !== undefined && (st.witness?.length ?? 0) > 0, `${bug}: a witness`);
      assert.match(st.reason ?? '', /numeric witness on two draws.*exact engine gave up/, `${bug}: refuted by the numeric run, the engine having given up`);
    }
    for (const [preset, ctx] of [['llama-tiny-sp', { dp: 2, tp: 2, micro: 2, sp: true, family: 'llama' }], ['gpt2-tiny', gpt2]] as [string, BugContext][]) {
      const r = small(() => planOf(preset, ctx));
      assert.notEqual(r.verdict, 'not_equivalent', `${preset}: ${r.summary}`);
    }
  }).timeout(600_000);

  it('the witness search tries first the stages downstream of an op the programs disagree on', () => {
    for (const [bug, want] of [['rmsnorm-eps-one-rank', /rms_norm/], ['adam-eps-one-rank', /\.new(\.\d+)?$/]] as const) {
      const raw = planOf('llama-tiny', llama, bug);
      const plan = loadPlanObject('p.json', structuredClone(raw));
      const d = templateDiff(plan, raw);
      const names = [...d.stages].map((l) => plan.logical.tensors.name(l));
      assert.ok(names.length > 0 && names.every((n) => want.test(n)), `${bug}: ${names.join(', ')}`);
      assert.equal(d.programs.size, 2, `${bug}: the spelled-apart rank's program and the one it was copied from`);
    }
    // One program, or programs that agree: nothing to put first.
    const ok = planOf('llama-tiny', llama);
    assert.equal(templateDiff(loadPlanObject('p.json', structuredClone(ok)), ok).stages.size, 0);
  });

  it('a complete value whose addend group is too large to join: its own addends are assumed as claimed, bugs refuted, correct plans never', () => {
    // At D3 the router gradient's micro-batch addends form a group of 65,536 holders; a limit
    // of 1 holder makes moe-tiny's (dp 2) groups of 2 too large in the same way.
    const moe: BugContext = { dp: 2, tp: 1, micro: 1, family: 'moe' };
    const cutProver = partProver({ maxHolders: 1 });
    const run = (make: () => RawPlan): ReturnType<typeof verifyPerTemplate> => verifyPerTemplate(loadPlanObject('p.json', make()), { witness: { raw: make, provePart: cutProver } });
    const bad = run(() => planOf('moe-tiny', moe, 'moe-router-grad-not-synced'));
    assert.equal(bad.verdict, 'not_equivalent', bad.summary);
    const st = bad.stages.find((s) => s.status === 'not_equivalent');
    assert.match(st?.reason ?? '', /assumed as claimed: \d+ addend/);
    assert.ok((st?.witness?.length ?? 0) > 0);
    for (const [preset, ctx] of [['moe-tiny', moe], ['llama-tiny', llama]] as [string, BugContext][]) {
      const ok = run(() => planOf(preset, ctx));
      assert.notEqual(ok.verdict, 'not_equivalent', `${preset}: ${ok.summary}`);
    }
  }).timeout(600_000);

  it('an all-reduce group larger than a part is folded: the bug refuted with a witness, the correct plan proved on the part, a fold that cannot hold left open @full', () => {
    // D3's clipping all-reduce spans its 2,048 ranks (pp x dp x tp, the experts split over dp);
    // here pp2 dp4 tp2 spans 16, and a part of at most 8 ranks forces the fold (stages/shrink/fold.ts).
    const ctx: BugContext = { dp: 4, tp: 2, micro: 1, pp: 2, ep: true, family: 'moe' };
    const p = PRESETS['moe-tiny'];
    assert.ok(p !== undefined);
    const make = (bug?: string): RawPlan => {
      const raw = generatePlan({ model: { ...p.model, layers: 2, experts: 4, batch: 4 }, par: { ...p.par, ...ctx }, optimizer: OPT }) as unknown as RawPlan;
      if (bug !== undefined) BUGS.find((b) => b.id === bug)?.inject(raw, ctx);
      return raw;
    };
    const fold = partProver({ maxRanks: 8 });
    const clipPart = (raw: RawPlan): ReturnType<typeof fold> => {
      const plan = loadPlanObject('p.json', structuredClone(raw));
      const prog = plan.programs[plan.rankProgram[1] as number];
      assert.ok(prog !== undefined);
      const logical = plan.logical.tensors.id('clip');
      return fold(plan, raw, { index: 0, logical, obligations: [] }, 1, prog.tensors.id('clip'), 1);
    };
    // The correct plan: its folded part is proved in exact arithmetic (the fold computes the
    // stage exactly at inputs zero outside the part's slices), on 5 of the 16 ranks.
    const ok = clipPart(make());
    assert.ok(!('why' in ok), 'why' in ok ? ok.why : '');
    assert.equal(ok.result.status, 'proved', ok.result.reason);
    assert.match(ok.result.reason ?? '', /'clip_tp\/all_reduce' over 16 ranks kept as 5/);
    assert.equal(ok.ranks.length, 5);
    const scales = ok.raw.parallel.programs.flatMap((q) => q.ops.filter((o) => o.op === 'scale' && /^part\/(fold|zero)\//.test(o.id)).map((o) => String(o.attrs?.['factor'])));
    assert.ok(scales.includes('8') && scales.includes('3') && scales.includes('0'), `multiplicities and zeros in the part: ${scales.join(' ')}`);
    assert.ok(ok.raw.logical.ops.some((o) => o.op === 'pad') && ok.raw.logical.ops.some((o) => o.op === 'scale'), 'logical inputs masked');
    // One rank's norm term uses g instead of g^2: refuted per template, with a witness, on the folded part.
    const bad = perTemplateWith(() => make('square-exponent-one-rank'), fold);
    assert.equal(bad.verdict, 'not_equivalent', bad.summary);
    const st = bad.stages.find((s) => s.status === 'not_equivalent');
    assert.match(st?.logical ?? '', /^clip/);
    assert.match(st?.reason ?? '', /folded for a witness/);
    assert.ok((st?.witness?.length ?? 0) > 0, 'a witness');
    // A fold whose condition fails: stage 1's total also runs a tp all-reduce (a bug: pp 1's
    // terms counted twice), so a member's contribution runs a further collective. The part says
    // so and stays open; with a part large enough for the group the same plan is refuted.
    const twice = (): RawPlan => {
      const raw = make();
      const stage1 = raw.parallel.programs.find((q) => q.name === 'stage1');
      assert.ok(stage1 !== undefined);
      const i = stage1.ops.findIndex((o) => o.id === 'clip_tp/all_reduce');
      const ar = stage1.ops[i];
      assert.ok(ar !== undefined);
      stage1.ops.splice(i, 0, { id: 'clip_tp/extra', op: 'all_reduce', inputs: [...ar.inputs], outputs: ['clip_tp/extra'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } });
      ar.inputs = ['clip_tp/extra'];
      stage1.tensors?.push({ id: 'clip_tp/extra', shape: [] });
      return raw;
    };
    const open = clipPart(twice());
    assert.ok('why' in open && /cannot be folded: a member's contribution runs a further collective \('clip_tp\/extra'\)/.test(open.why), JSON.stringify(open).slice(0, 300));
    assert.notEqual(perTemplateWith(twice, fold).verdict, 'not_equivalent');
    assert.equal(perTemplateWith(twice, partProver()).verdict, 'not_equivalent', 'a real bug, refuted without the fold');
  }).timeout(600_000);

  it('an epsilon changed on one rank under the real learning rate: refuted with log-uniform draws where uniform ones show nothing', () => {
    // lr 1e-3 and eps 1e-8 -> 1e-3 move the update by ~lr * 1e-3 on uniform draws, under the
    // witness tolerance; draws with tiny second moments show it (stages/witness/numeric.ts 'log').
    const make = (bug = true): RawPlan => {
      const p = PRESETS['llama-tiny'];
      assert.ok(p !== undefined);
      const raw = generatePlan({ model: p.model, par: { ...p.par, ...llama, pp: 1 } });
      if (bug) BUGS.find((b) => b.id === 'adam-eps-one-rank')?.inject(raw, llama);
      return raw as unknown as RawPlan;
    };
    // The correct twin, same optimizer: verified (log draws never run on a proved stage).
    assert.equal(verifyPlan(loadPlanObject('p.json', make(false))).verdict, 'verified');
    const r = verifyPlan(loadPlanObject('p.json', make()));
    assert.equal(r.verdict, 'not_equivalent', r.summary);
    const st = r.stages.find((s) => s.status === 'not_equivalent');
    assert.match(st?.logical ?? '', /\.new/);
    assert.ok((st?.witness?.length ?? 0) > 0, 'a witness');
  }).timeout(300_000);

  it('a part loads only through the internal loader: the public one still requires its claims to tile', () => {
    const make = (): RawPlan => planOf('llama-tiny', llama, 'dp-grad-allreduce-avg');
    const plan = loadPlanObject('p.json', make());
    const r = verifyPerTemplate(plan, {});
    const i = r.stages.findIndex((s) => s.status !== 'proved');
    const st = r.stages[i];
    assert.ok(st !== undefined && st.templates !== undefined);
    const tpl = st.templates[0];
    assert.ok(tpl !== undefined);
    const prog = plan.programs.find((q) => q.name === tpl.program);
    assert.ok(prog !== undefined);
    const part = provePart(plan, make(), { index: i, logical: plan.logical.tensors.id(st.logical), obligations: [] }, prog.ranks[0] as number, prog.tensors.id(tpl.tensor), 1);
    assert.ok(!('why' in part), 'a part is built');
    assert.ok(loadPartObject('part.json', structuredClone(part.raw)).programs.length > 0);
    // Even with the old option spelled in, the public loader checks tiling.
    assert.throws(() => loadPlanObject('part.json', structuredClone(part.raw), { subset: true } as Parameters<typeof loadPlanObject>[2]), (e: unknown) => e instanceof PlanError && /tile|held/.test(e.message + JSON.stringify(e.issues)));
  }).timeout(120_000);

  it('correct plans with stages open per template are never refuted @full', () => {
    // Llama with context parallelism whose keys and values are all-gathered leaves stages open per
    // template (ring CP did until rule 14, llama-tiny-sp until rule 12 of docs/engine.md).
    const lt = PRESETS['llama-tiny'];
    assert.ok(lt !== undefined);
    const cp = (): RawPlan => generatePlan({ model: { ...lt.model, seq: 4, batch: 2 }, par: { ...lt.par, dp: 2, tp: 1, micro: 1, cp: 2, pp: 1, cpComm: 'allgather' }, optimizer: OPT }) as unknown as RawPlan;
    const r = perTemplate(cp);
    assert.ok(r.stages.some((s) => s.status !== 'proved'), 'some stage open per template (else this checks nothing)');
    assert.notEqual(r.verdict, 'not_equivalent', r.summary);
    assert.ok(r.stages.some((s) => /witness search per part/.test(s.reason ?? '')), 'the witness search ran');
    // A bug on one rank: its own program; tried parts elsewhere are proved there, never a false refutation.
    const one = (): RawPlan => planOf('llama-tiny', llama, 'rmsnorm-eps-one-rank');
    assert.notEqual(perTemplate(one).verdict, 'verified');
  }).timeout(600_000);
});
