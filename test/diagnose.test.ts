/**
 * The diagnosis rules (stages/witness/diagnose.ts): each names its cause on a plan with that bug and
 * does not misname a twin with another; over the whole bug catalog every diagnosis is a right
 * cause or "no rule fits", and the ranks it names never contradict the witness.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { RULES, tensorValues, type Cause } from '../stages/witness/diagnose.js';
import type { StageReport } from '../stages/report.js';
import { EXAMPLES, FIXTURES, runCli } from './helpers.js';
import { fullUnless } from './optional.js';

const MLP = (PRESETS['mlp-tiny'] as { model: ModelConfig }).model;
const GPT2 = (PRESETS['gpt2-tiny'] as { model: ModelConfig }).model;
const LLAMA = (PRESETS['llama-tiny'] as { model: ModelConfig }).model;
const MOE = (PRESETS['moe-tiny'] as { model: ModelConfig }).model;
// As test/gen.test.ts: a large learning rate and a small clipping threshold make every bug visible.
const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };

type Bug = (typeof BUGS)[number];

/** The first small configuration that has the bug's place (the order test/gen.test.ts uses). */
function ctxFor(bug: Bug): [BugContext, ModelConfig] {
  for (const [sp, zero, pp] of [[false, 0, 1], [false, 1, 1], [false, 2, 1], [false, 3, 1], [true, 0, 1], [false, 0, 2], [false, 1, 2]] as const) {
    for (const [family, model] of [['gpt2', GPT2], ['llama', LLAMA]] as const) {
      const c: BugContext = { dp: 2, tp: 2, micro: 2, sp, zero, pp, family };
      if (bug.applies(c)) return [c, pp > 1 ? { ...model, layers: 2 } : model];
    }
  }
  const others: [BugContext, ModelConfig][] = [
    [{ dp: 2, tp: 2, micro: 2, family: 'llama', recompute: true }, LLAMA],
    [{ dp: 2, tp: 2, micro: 1, family: 'gpt2' }, GPT2],
    [{ dp: 2, tp: 1, micro: 1, family: 'moe', ep: true }, MOE],
    [{ dp: 1, tp: 2, micro: 1, family: 'moe', sp: true }, { ...MOE, seq: 2, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm: 'ring' }, { ...LLAMA, seq: 4, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm: 'allgather' }, { ...LLAMA, seq: 4, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 2, family: 'mlp', pp: 2, virtual: 2 }, { ...MLP, layers: 4 }],
  ];
  const found = others.find(([c]) => bug.applies(c));
  if (found === undefined) throw new Error(`no test configuration for ${bug.id}`);
  return found;
}

function catalogPlan(id: string): ReturnType<typeof loadPlanObject> {
  const bug = BUGS.find((b) => b.id === id) as Bug;
  const [ctx, model] = ctxFor(bug);
  const plan = generatePlan({ model, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
  bug.inject(plan, ctx);
  return loadPlanObject(`${id}.json`, plan);
}

const example = (f: string): ReturnType<typeof loadPlanObject> => loadPlanObject(f, JSON.parse(readFileSync(`${EXAMPLES}buggy/${f}`, 'utf8')));

/**
 * examples/buggy/mlp-dp2-loss-scale-twice.json with the all-reduce summing and a scale by
 * `factor` after it on every rank: the claimed gradient is `factor` x the logical one, and no
 * collective produces it (so the reduce-kind rule has nothing to say).
 */
function scaledGradient(factor: string): ReturnType<typeof loadPlanObject> {
  const raw = JSON.parse(readFileSync(`${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`, 'utf8')) as { parallel: { programs: { tensors: { id: string; shape: number[] }[]; ops: { id: string; op: string; inputs: string[]; outputs: string[]; attrs?: Record<string, unknown> }[] }[] } };
  for (const p of raw.parallel.programs) {
    const at = p.ops.findIndex((o) => o.id === 'g_w1_sum');
    const ar = p.ops[at] as (typeof p.ops)[number];
    ar.attrs = { reduce: 'sum' };
    ar.outputs = ['g_w1_summed'];
    p.tensors.push({ id: 'g_w1_summed', shape: [3, 4] });
    p.ops.splice(at + 1, 0, { id: 'g_w1_scaled', op: 'scale', inputs: ['g_w1_summed'], outputs: ['g_w1'], attrs: { factor } });
  }
  return loadPlanObject(`scaled-${factor}.json`, raw);
}

function firstFailing(plan: ReturnType<typeof loadPlanObject>): StageReport {
  const r = verifyPlan(plan);
  assert.equal(r.verdict, 'not_equivalent', r.summary);
  const s = r.stages.find((x) => x.status === 'not_equivalent') as StageReport;
  assert.ok(s.diagnosis !== undefined && s.diagnosisRule !== undefined);
  return s;
}

/** Each rule: a plan it must name (with what its text must say) and a twin it must not name. */
// `fast`: both plans are small examples (well under a second); catalog plans run in test:full.
const RULE_CASES: { rule: Cause; plan: () => ReturnType<typeof loadPlanObject>; says: RegExp; ranks?: number[]; twin: () => ReturnType<typeof loadPlanObject>; fast?: boolean }[] = [
  { rule: 'missing-reduction', plan: () => example('mlp-dp2-missing-grad-allreduce.json'), says: /all-reduce \(avg\) over those ranks is missing/, ranks: [0, 1], twin: () => example('mlp-dp2-loss-scale-twice.json'), fast: true },
  { rule: 'reduce-kind', plan: () => example('mlp-dp2-loss-scale-twice.json'), says: /'g_w1_sum' \(all_reduce over ranks 0, 1\) reduces with 'avg' where 'sum' is due/, ranks: [0, 1], twin: () => example('mlp-dp2-missing-grad-allreduce.json'), fast: true },
  { rule: 'scale', plan: () => scaledGradient('1/2'), says: /hold 1\/2 x the logical value on every element/, ranks: [0, 1], twin: () => scaledGradient('3/7'), fast: true },
  { rule: 'wrong-slice', plan: () => example('mlp-tp2-wrong-half.json'), says: /^'w1' on rank\(s\) 1 holds another slice of 'w1' \(rank 1: 'w1'\[0:3, 0:2\] where its claim is 'w1'\[0:3, 2:4\]\)/, ranks: [1], twin: () => example('mlp-dp2-divergent-replica.json'), fast: true },
  { rule: 'stale-value', plan: () => catalogPlan('zero-update-lost'), says: /holds 'wte', an earlier value that 'wte\.new' is computed from/, twin: () => catalogPlan('pp-stage-boundary-wrong-tensor') },
  { rule: 'wrong-send', plan: () => catalogPlan('pp-stage-boundary-wrong-tensor'), says: /^'mb0\/recv' on rank\(s\) 4, 5, 6, 7, received from another rank, holds 'l0\/add' where 'l0\/add#1' is due/, ranks: [4, 5, 6, 7], twin: () => catalogPlan('zero-update-lost') },
  { rule: 'other-tensor', plan: () => catalogPlan('rope-backward-cos-sin-swapped'), says: /holds the values of 'grad\/l0\/mul#3' where 'grad\/l0\/mul#2' is due/, twin: () => catalogPlan('zero-update-lost') },
  { rule: 'zero', plan: () => scaledGradient('0'), says: /hold 0 where the logical values are not/, ranks: [0, 1], twin: () => scaledGradient('1/2'), fast: true },
  { rule: 'divergence', plan: () => example('mlp-dp2-divergent-replica.json'), says: /rank\(s\) 1 hold wrong values where rank\(s\) 0 hold the logical ones/, ranks: [1], twin: () => example('mlp-dp2-missing-grad-allreduce.json'), fast: true },
];

describe('diagnosis rules: each names its cause, and not its twin', () => {
  it('every rule has its case here', () => {
    assert.deepEqual(RULES.map((r) => r.name).sort(), RULE_CASES.map((c) => c.rule).sort());
  });
  for (const c of RULE_CASES) {
    it(`${c.rule}: named on its plan, not on its twin${fullUnless(c.fast === true)}`, () => {
      const s = firstFailing(c.plan());
      assert.equal(s.diagnosisRule, c.rule, s.diagnosis);
      assert.match(s.diagnosis ?? '', c.says);
      if (c.ranks !== undefined) assert.deepEqual(s.diagnosisRanks, c.ranks);
      const t = firstFailing(c.twin());
      assert.notEqual(t.diagnosisRule, c.rule, t.diagnosis);
    });
  }
  it(`a constant ratio that is no fraction of the group sizes is no scale: no rule fits${fullUnless(false)}`, () => {
    const s = firstFailing(catalogPlan('loss-per-rank-normalization'));
    assert.equal(s.diagnosisRule, 'none');
    assert.match(s.diagnosis ?? '', /^no rule fits: .*parallel = 2\.649942 x logical on every element, not a ratio of the group sizes/);
  });
  it(`the README's tp_mlp.py --bug: a missing reduction on both ranks, both named failing${fullUnless(false)}`, async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'pp-diag-')), 'plan.json');
    const imp = await runCli(['import-graphs', '--dir', `${FIXTURES}capture/tp_mlp-bug`, '-o', out]);
    assert.equal(imp.code, 0, imp.stderr);
    const v = await runCli(['verify', '--infer', '--jobs', '0', '--json', out]);
    const r = JSON.parse(v.stdout) as { stages: StageReport[] };
    const s = r.stages.find((x) => x.status === 'not_equivalent') as StageReport;
    assert.equal(s.diagnosisRule, 'missing-reduction', s.diagnosis);
    assert.deepEqual(s.diagnosisRanks, [0, 1]);
    assert.deepEqual(s.failingRanks, [0, 1]);
    assert.deepEqual([...new Set((s.witness ?? []).map((m) => m.rank))].sort(), [0, 1]);
  });
});

/**
 * The causes that are right for each catalog bug (docs/bugs.md says what each bug is). "No
 * rule fits" is always allowed: it is a silence, not a wrong name.
 */
const RIGHT: Readonly<Record<string, readonly Cause[]>> = {
  'dp-grad-allreduce-dropped': ['missing-reduction', 'zero'],
  'dp-grad-allreduce-avg': ['reduce-kind', 'scale'],
  // The all-reduce over the wrong group: the reduction over the data-parallel ranks is missing.
  'dp-wrong-group': ['missing-reduction', 'reduce-kind'],
  'loss-per-rank-normalization': ['scale'],
  'tp-forward-allreduce-dropped': ['missing-reduction', 'zero'],
  'tp-backward-allreduce-dropped': ['missing-reduction', 'zero'],
  'clip-local-norm': ['missing-reduction'],
  // The ranks that skip the clip hold the unclipped gradient: an earlier value.
  'clip-one-rank': ['divergence', 'stale-value'],
  'vocab-embedding-rows-not-zeroed': ['wrong-slice', 'other-tensor'],
  'vocab-range-off-by-one': ['wrong-slice'],
  'vocab-ce-target-not-reduced': ['missing-reduction', 'zero'],
  'vocab-ce-local-max': ['missing-reduction', 'divergence'],
  // Only the last micro-batch's gradient survives: the sum over micro-batches is missing.
  'accumulation-reset': ['missing-reduction', 'stale-value'],
  'grad-after-reducer': ['missing-reduction'],
  'overlap-reduce-before-last-contribution': ['missing-reduction'],
  'ln-eps-one-rank': ['divergence'],
  'attention-scale-one-rank': ['divergence', 'scale'],
  'attention-scale-all-ranks': ['scale'],
  'fanout-duplicate-grad': ['other-tensor', 'scale'],
  // Multiplied by sin where cos is due: the other branch's tensor.
  'rope-backward-cos-sin-swapped': ['other-tensor'],
  'rmsnorm-eps-one-rank': ['divergence'],
  'sp-norm-grad-not-reduced': ['missing-reduction'],
  'zero-update-lost': ['stale-value'],
  'zero2-accumulation-reset': ['missing-reduction', 'stale-value'],
  'zero-clip-norm-shards': ['missing-reduction'],
  'pp-tied-embedding-grad-not-synced': ['missing-reduction'],
  'pp-tied-grad-wrong-dp-partner': ['missing-reduction', 'divergence'],
  'pp-stage-boundary-wrong-tensor': ['wrong-send', 'stale-value'],
  'ep-expert-grad-scaled': ['scale'],
  'norm-grad-scaled-by-tp': ['scale'],
  // The second micro-batch reads the first one's buffer: another slice (micro-batch) or an earlier value.
  'stale-activation-in-backward': ['stale-value', 'wrong-slice', 'other-tensor'],
  'moe-router-grad-not-synced': ['missing-reduction', 'divergence'],
  'moe-router-grad-not-synced-sp': ['missing-reduction', 'divergence'],
  'pp-interleave-skips-chunks': ['wrong-send', 'stale-value', 'other-tensor'],
  'recompute-stale-input': ['stale-value', 'wrong-slice', 'other-tensor'],
  'cp-loss-scaled-by-cp': ['scale', 'reduce-kind'],
  'cp-zigzag-offsets-swapped': ['wrong-slice'],
  'cp-attention-backward-chunk-order': ['wrong-slice'],
  'cp-kv-not-reordered': ['wrong-slice'],
  'cp-grad-not-reduced': ['missing-reduction', 'zero'],
  // An extra block attended: no rule's cause.
  'cp-ring-future-block-attended': [],
  'cp-ring-stale-kv': ['stale-value', 'other-tensor', 'wrong-slice'],
  'cp-ring-dkv-one-hop-short': ['missing-reduction', 'wrong-send', 'other-tensor'],
  'cp-ring-merge-wrong-max': [],
  'square-exponent-one-rank': ['divergence'],
  'zero3-grad-scatter-avg': ['reduce-kind', 'scale'],
  'norm-eps-several-ranks': ['divergence'],
  'adam-eps-one-rank': ['divergence'],
};

describe('diagnosis over the bug catalog', () => {
  it('maps every catalog bug that verifies (all but the consistency ones, rejected at load)', () => {
    assert.deepEqual(BUGS.filter((b) => b.kind !== 'consistency').map((b) => b.id).sort(), Object.keys(RIGHT).sort());
  });
  it('every diagnosis is a right cause or "no rule fits", and its ranks agree with the witness @full', () => {
    const count = { right: 0, none: 0, wrong: [] as string[], contradictions: [] as string[] };
    for (const bug of BUGS.filter((b) => b.kind !== 'consistency')) {
      const lp = catalogPlan(bug.id);
      const r = verifyPlan(lp);
      const s = r.stages.find((x) => x.status === 'not_equivalent');
      assert.ok(s !== undefined && s.diagnosisRule !== undefined, `${bug.id}: ${r.summary}`);
      const rule = s.diagnosisRule;
      if (rule === 'none') count.none++;
      else if ((RIGHT[bug.id] ?? []).includes(rule)) count.right++;
      else count.wrong.push(`${bug.id}: ${rule}: ${s.diagnosis ?? ''}`);
      // The ranks it names wrong are wrong in the values; the witness's ranks are among the
      // failing ranks; no rank it calls right is in the witness.
      const witnessRanks = new Set((s.witness ?? []).map((m) => m.rank));
      const values = tensorValues(lp, r.numeric.seed)(lp.logical.tensors.id(s.logical));
      const wrong = new Set([...witnessRanks, ...values.holders.filter((h) => h.wrong > 0).map((h) => h.rank)]);
      const named = s.diagnosisRanks ?? [];
      const right = /where rank\(s\) ([0-9, ]+) hold the logical ones/.exec(s.diagnosis ?? '')?.[1]?.split(', ').map(Number) ?? [];
      if (named.some((x) => !wrong.has(x)) || right.some((x) => wrong.has(x)) || [...witnessRanks].some((x) => !s.failingRanks.includes(x))) count.contradictions.push(`${bug.id}: named ${named.join(',')}, right ${right.join(',')}, witness ${[...witnessRanks].join(',')}, failing ${s.failingRanks.join(',')}`);
    }
    console.log(`      catalog: ${count.right} right cause, ${count.none} no rule fits, ${count.wrong.length} wrong, ${count.contradictions.length} rank contradictions`);
    assert.deepEqual(count.wrong, []);
    assert.deepEqual(count.contradictions, []);
  }).timeout(900_000);
});
