/**
 * A parallel op that reads a float tensor as its index (a gather, a cross-entropy's labels) is
 * outside its domain: PyTorch raises there, while the model computes the value. Interval
 * arithmetic (stages/engines/interval.ts) certifies it at the numeric run's inputs: the float's
 * interval lies strictly between two integers (or is a point that is no integer), so the op's
 * requirement "index an integer in [0, n)" is certainly violated, and every logical requirement
 * certainly holds. The plan is NOT EQUIVALENT with that witness; its correct twin (the op reads
 * the integer ids) is VERIFIED. Before, the exact engine gave up ("a comparison needs an integer
 * value") and the certificate gave up on the test of a non-point interval: "unknown".
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { certifyWitness, decideTest, intervalAlgebra, Undecided, type Iv } from '../stages/engines/interval.js';

const V = 4;
const VL = V / 2;
const N = 3;
const e = (expr: string): object => ({ expr });
const T = (id: string, shape: number[], role: string, extra: object = {}): object => ({ id, shape, role, ...extra });
const ids = (id: string): object => T(id, [N], 'input', { dtype: 'int64', values: { range: [0, V] } });

/**
 * Megatron's vocab-parallel cross-entropy over tp=2 (test/parallel-vocab.test.ts), the target
 * logit picked by `gather` with index `index`: the local label ids (correct), the all-reduced
 * row max (a float that is an exact point at the inputs), or the log-sum-exp (a float whose
 * interval is not a point).
 */
function vocabCrossEntropy(index: 'local2' | 'm' | 'lse2'): unknown {
  const rangeAttrs = { start: e(`${VL}*tp`), end: e(`${VL}*tp + ${VL}`) };
  return {
    format: 'planproof/v1',
    name: `vocab-parallel-cross-entropy-index-${index}`,
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [T('logits', [N, V], 'input'), ids('labels'), T('loss', [], 'output')],
      ops: [{ id: 'ce', op: 'cross_entropy', inputs: ['logits', 'labels'], outputs: ['loss'], attrs: { reduction: 'mean' } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'logits_r', shape: [N, VL], lineage: { logical: 'logits', placements: ['S(1)'] } },
            { id: 'labels_r', shape: [N], dtype: 'int64', lineage: { logical: 'labels', placements: ['R'] } },
            { id: 'm_local', shape: [N, 1] },
            { id: 'm', shape: [N, 1] },
            { id: 'sh', shape: [N, VL] },
            { id: 'ex', shape: [N, VL] },
            { id: 's_part', shape: [N] },
            { id: 's', shape: [N] },
            { id: 'lse', shape: [N] },
            { id: 'lse2', shape: [N, 1] },
            { id: 'mask', shape: [N] },
            { id: 'local', shape: [N], dtype: 'int64' },
            { id: 'local2', shape: [N, 1], dtype: 'int64' },
            { id: 'pick2', shape: [N, 1] },
            { id: 'pick', shape: [N] },
            { id: 'zeros', shape: [N] },
            { id: 'pred_part', shape: [N] },
            { id: 'pred', shape: [N] },
            { id: 'rows', shape: [N] },
            { id: 'loss_r', shape: [], lineage: { logical: 'loss', placements: ['R'] } },
          ],
          ops: [
            { id: 'max_local', op: 'amax', inputs: ['logits_r'], outputs: ['m_local'], attrs: { dims: [1], keepdim: true } },
            { id: 'ar_max', op: 'all_reduce', inputs: ['m_local'], outputs: ['m'], attrs: { reduce: 'max' }, group: { axes: ['tp'] } },
            { id: 'shift', op: 'sub', inputs: ['logits_r', 'm'], outputs: ['sh'] },
            { id: 'exp', op: 'exp', inputs: ['sh'], outputs: ['ex'] },
            { id: 'sum_local', op: 'sum', inputs: ['ex'], outputs: ['s_part'], attrs: { dims: [1] } },
            { id: 'ar_sum', op: 'all_reduce', inputs: ['s_part'], outputs: ['s'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } },
            { id: 'log', op: 'log', inputs: ['s'], outputs: ['lse'] },
            { id: 'lse2', op: 'reshape', inputs: ['lse'], outputs: ['lse2'], attrs: { shape: [N, 1] } },
            { id: 'mask', op: 'vocab_mask', inputs: ['labels_r'], outputs: ['mask'], attrs: rangeAttrs },
            { id: 'local', op: 'vocab_local_ids', inputs: ['labels_r'], outputs: ['local'], attrs: rangeAttrs },
            { id: 'local2', op: 'reshape', inputs: ['local'], outputs: ['local2'], attrs: { shape: [N, 1] } },
            { id: 'pick', op: 'gather', inputs: ['sh', index], outputs: ['pick2'] },
            { id: 'pick1', op: 'reshape', inputs: ['pick2'], outputs: ['pick'], attrs: { shape: [N] } },
            { id: 'zeros', op: 'scale', inputs: ['pick'], outputs: ['zeros'], attrs: { factor: 0 } },
            { id: 'pred_local', op: 'where', inputs: ['mask', 'zeros', 'pick'], outputs: ['pred_part'] },
            { id: 'ar_pred', op: 'all_reduce', inputs: ['pred_part'], outputs: ['pred'], attrs: { reduce: 'sum' }, group: { axes: ['tp'] } },
            { id: 'rows', op: 'sub', inputs: ['lse', 'pred'], outputs: ['rows'] },
            { id: 'mean', op: 'mean', inputs: ['rows'], outputs: ['loss_r'] },
          ],
        },
      ],
    },
    contract: { inputs: ['logits', 'labels'], outputs: ['loss'] },
  };
}

/**
 * F.cross_entropy on the all-gathered logits, with the labels (correct) or the row sum of the
 * logits (a float) as its labels.
 */
function gatheredCrossEntropy(labels: 'labels_r' | 'rowsum'): unknown {
  return {
    format: 'planproof/v1',
    name: `gathered-cross-entropy-labels-${labels}`,
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [T('logits', [N, V], 'input'), ids('labels'), T('loss', [], 'output')],
      ops: [{ id: 'ce', op: 'cross_entropy', inputs: ['logits', 'labels'], outputs: ['loss'], attrs: { reduction: 'mean' } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'logits_r', shape: [N, VL], lineage: { logical: 'logits', placements: ['S(1)'] } },
            { id: 'labels_r', shape: [N], dtype: 'int64', lineage: { logical: 'labels', placements: ['R'] } },
            { id: 'full', shape: [N, V], lineage: { logical: 'logits', placements: ['R'] } },
            { id: 'rowsum', shape: [N] },
            { id: 'loss_r', shape: [], lineage: { logical: 'loss', placements: ['R'] } },
          ],
          ops: [
            { id: 'ag', op: 'all_gather', inputs: ['logits_r'], outputs: ['full'], attrs: { dim: 1 }, group: { axes: ['tp'] } },
            { id: 'rowsum', op: 'sum', inputs: ['full'], outputs: ['rowsum'], attrs: { dims: [1] } },
            { id: 'ce', op: 'cross_entropy', inputs: ['full', labels], outputs: ['loss_r'], attrs: { reduction: 'mean' } },
          ],
        },
      ],
    },
    contract: { inputs: ['logits', 'labels'], outputs: ['loss'] },
  };
}

/**
 * The gradient of a gather along a vocabulary split over tp=2 (Megatron's vocab-parallel
 * cross-entropy backward): each rank scatters the rows' gradients at the local ids of the labels
 * it owns (zeros for the others). `index`: the local ids (correct), or the gradient itself (a
 * float: the mutant of /work/cases/unknown-4, whose gather_backward read the logits).
 */
function vocabGatherBackward(index: 'local' | 'g_r'): unknown {
  const rangeAttrs = { start: e(`${VL}*tp`), end: e(`${VL}*tp + ${VL}`) };
  const col = (id: string): object => T(id, [N, 1], 'input', { dtype: 'int64', values: { range: [0, V] } });
  return {
    format: 'planproof/v1',
    name: `vocab-parallel-gather-backward-index-${index}`,
    mesh: { axes: [{ name: 'tp', size: 2 }] },
    logical: {
      tensors: [T('g', [N, 1], 'input'), col('labels'), T('gx', [N, V], 'output')],
      ops: [{ id: 'gb', op: 'gather_backward', inputs: ['g', 'labels'], outputs: ['gx'], attrs: { size: V } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'g_r', shape: [N, 1], lineage: { logical: 'g', placements: ['R'] } },
            { id: 'labels_r', shape: [N, 1], dtype: 'int64', lineage: { logical: 'labels', placements: ['R'] } },
            { id: 'mask', shape: [N, 1] },
            { id: 'local', shape: [N, 1], dtype: 'int64' },
            { id: 'zeros', shape: [N, 1] },
            { id: 'gm', shape: [N, 1] },
            { id: 'gx_r', shape: [N, VL], lineage: { logical: 'gx', placements: ['S(1)'] } },
          ],
          ops: [
            { id: 'mask', op: 'vocab_mask', inputs: ['labels_r'], outputs: ['mask'], attrs: rangeAttrs },
            { id: 'local', op: 'vocab_local_ids', inputs: ['labels_r'], outputs: ['local'], attrs: rangeAttrs },
            { id: 'zeros', op: 'scale', inputs: ['g_r'], outputs: ['zeros'], attrs: { factor: 0 } },
            { id: 'gm', op: 'where', inputs: ['mask', 'zeros', 'g_r'], outputs: ['gm'] },
            { id: 'gb', op: 'gather_backward', inputs: ['gm', index], outputs: ['gx_r'], attrs: { size: VL } },
          ],
        },
      ],
    },
    contract: { inputs: ['g', 'labels'], outputs: ['gx'] },
  };
}

describe('a parallel op reading a float tensor as its index', () => {
  it('the interval test decides between two integers, and gives up where it cannot', () => {
    const iv = (lo: number, hi: number): Iv => ({ lo, hi });
    // Every predicate ops pass steps at integers: one value on all of (k, k + 1).
    assert.equal(decideTest(iv(0.25, 0.75), (v) => Number.isInteger(v) && v >= 0 && v < 4), false);
    assert.equal(decideTest(iv(2.25, 2.75), (v) => v !== 0), true);
    assert.equal(decideTest(iv(-0.75, -0.25), (v) => v < 0 || v >= 2), true);
    assert.equal(decideTest(iv(3, 3), (v) => v === 3), true);
    // An interval holding an integer, NaN, or unbounded: undecided.
    for (const x of [iv(0.5, 1.5), iv(-0.5, 0), iv(1, 1.5), iv(Number.NaN, Number.NaN), iv(0.5, Infinity)]) assert.throws(() => decideTest(x, (v) => v === 1), Undecided, `${x.lo}, ${x.hi}`);
    // The check that can fail: a predicate stepping inside (0, 1) breaks the contract.
    assert.throws(() => decideTest(iv(0.25, 0.75), (v) => v < 0.5), Undecided);
    assert.deepEqual(intervalAlgebra.test(iv(0.25, 0.75), (v) => v === 0), { lo: 0, hi: 0 });
  });

  it('correct twins are verified', () => {
    for (const plan of [vocabCrossEntropy('local2'), gatheredCrossEntropy('labels_r'), vocabGatherBackward('local')]) {
      const r = verifyPlan(loadPlanObject('twin.json', plan));
      assert.equal(r.verdict, 'verified', `${(plan as { name: string }).name}: ${r.summary}`);
    }
  });

  const mutants: [string, unknown, string, string][] = [
    ['a gather indexed by the row max (a float point)', vocabCrossEntropy('m'), 'pick', 'loss'],
    ['a gather indexed by the log-sum-exp (a float interval)', vocabCrossEntropy('lse2'), 'pick', 'loss'],
    ['a cross-entropy whose labels are the row sums of the logits', gatheredCrossEntropy('rowsum'), 'ce', 'loss'],
    ['a gather_backward indexed by the gradient it scatters', vocabGatherBackward('g_r'), 'gb', 'gx'],
  ];
  for (const [what, plan, op, tensor] of mutants) {
    it(`${what} is NOT EQUIVALENT with a certified witness`, () => {
      for (const seed of [1, 2]) {
        const r = verifyPlan(loadPlanObject('float-index.json', plan), { seed });
        assert.equal(r.verdict, 'not_equivalent', `seed ${seed}: ${r.summary}`);
        const f = r.stages.find((s) => s.status === 'not_equivalent');
        assert.equal(f?.logical, tensor);
        assert.match(f.reason ?? '', /certified witness/);
        assert.match(f.reason ?? '', new RegExp(`rank \\d op '${op}' is outside its domain at these inputs \\((gather: index|gather_backward: index|cross_entropy: label) .*\\[0, \\d\\)`));
        const w = (f.witness ?? []).find((m) => m.domain !== undefined);
        assert.ok(w !== undefined, 'the witness says the rank raises');
        assert.ok(Number.isNaN(w.parallel));
      }
    });
  }

  it('the CLI says so too: exit 1, the witness holds no value and names the op (--json `domain`)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-float-index-'));
    try {
      const f = join(dir, 'gb.json');
      writeFileSync(f, JSON.stringify(vocabGatherBackward('g_r')));
      const r = await runCli(['verify', f, '--no-cache', '--json']);
      assert.equal(r.code, 1, r.stdout.slice(-2000));
      const rep = JSON.parse(r.stdout) as { verdict: string; stages: { status: string; witness?: { parallel: number | null; domain?: string }[] }[] };
      assert.equal(rep.verdict, 'not_equivalent');
      const w = rep.stages.find((s) => s.status === 'not_equivalent')?.witness?.find((m) => m.domain !== undefined);
      assert.match(w?.domain ?? '', /^rank \d op 'gb' is outside its domain at these inputs \(gather_backward: index .* is not an integer in \[0, 2\)\): PyTorch raises there/);
      const t = await runCli(['verify', f, '--no-cache']);
      assert.match(t.stdout, /NOT EQUIVALENT/);
      assert.match(t.stdout, /holds no value where logical gx\[/);
      const twin = join(dir, 'twin.json');
      writeFileSync(twin, JSON.stringify(vocabGatherBackward('local')));
      assert.equal((await runCli(['verify', twin, '--no-cache'])).code, 0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a certificate rests on the logical requirements: a model that reads a float is never refuted so', () => {
    // The model's cross-entropy reads the row sums as labels too: the logical run is outside its
    // domain, so nothing is certified, whatever the parallel side does.
    const raw = gatheredCrossEntropy('rowsum') as { logical: { tensors: object[]; ops: object[] } };
    raw.logical.tensors.push(T('rs', [N], 'activation'));
    raw.logical.ops = [
      { id: 'rs', op: 'sum', inputs: ['logits'], outputs: ['rs'], attrs: { dims: [1] } },
      { id: 'ce', op: 'cross_entropy', inputs: ['logits', 'rs'], outputs: ['loss'], attrs: { reduction: 'mean' } },
    ];
    const lp = loadPlanObject('both.json', raw);
    const c = certifyWitness(lp, 1, [...Array(lp.logical.tensors.size).keys()], () => true);
    assert.ok('undecided' in c, 'certified' in c ? JSON.stringify(c.certified) : '');
    // The parallel side alone: certified, and it says which op of which rank is wrong.
    const mp = loadPlanObject('one.json', gatheredCrossEntropy('rowsum'));
    const d = certifyWitness(mp, 1, [...Array(mp.logical.tensors.size).keys()], () => true);
    assert.ok('certified' in d, 'undecided' in d ? d.undecided : '');
    assert.equal(d.certified.domain?.op, 'ce');
    assert.match(d.certified.domain.what, /^cross_entropy: label within \[0, 4\)/);
  });
});

describe('a model that reads a real tensor as integer values is refused at load', () => {
  /** Logical cross-entropy whose labels are `labels` (declared as given); one rank, lineage 1:1. */
  const ce = (labels: object): unknown => ({
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'dp', size: 1 }] },
    logical: {
      tensors: [T('logits', [N, V], 'input'), labels, T('loss', [], 'output')],
      ops: [{ id: 'ce', op: 'cross_entropy', inputs: ['logits', 'labels'], outputs: ['loss'], attrs: { reduction: 'mean' } }],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'logits', shape: [N, V], lineage: { logical: 'logits' } },
            { id: 'labels', shape: [N], lineage: { logical: 'labels' } },
            { id: 'loss', shape: [], lineage: { logical: 'loss' } },
          ],
          ops: [{ id: 'ce', op: 'cross_entropy', inputs: ['logits', 'labels'], outputs: ['loss'], attrs: { reduction: 'mean' } }],
        },
      ],
    },
    contract: { inputs: ['logits', 'labels'], outputs: ['loss'] },
  });
  const dir = mkdtempSync(join(tmpdir(), 'planproof-realidx-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  for (const [what, labels, why] of [
    ['a trained parameter', T('labels', [N], 'param'), /reads 'labels' \(input 1\) as integer values .* a trained parameter/],
    ['an input declared float32', T('labels', [N], 'input', { dtype: 'float32' }), /reads 'labels' \(input 1\) as integer values .* declared float32/],
  ] as const) {
    it(`labels that are ${what}: exit 2 naming the op's JSON path`, async () => {
      const f = join(dir, `${what.replace(/\W+/g, '-')}.json`);
      writeFileSync(f, JSON.stringify(ce(labels)));
      const r = await runCli(['verify', f, '--no-cache']);
      assert.equal(r.code, 2, r.stdout + r.stderr);
      assert.match(r.stderr, /\$\.logical\.ops\[0\] op 'ce' \(cross_entropy\)/);
      assert.match(r.stderr, why);
    });
  }

  it("routing by topk's values instead of its indices (a generated MoE, the model edited): exit 2 naming both outputs", async () => {
    const f = join(dir, 'moe.json');
    assert.equal((await runCli(['gen', '--preset', 'moe-tiny', '-o', f])).code, 0);
    const raw = JSON.parse(readFileSync(f, 'utf8')) as { logical: { ops: { id: string; op: string; inputs: string[] }[] } };
    const d = raw.logical.ops.find((o) => o.op === 'moe_dispatch');
    assert.ok(d !== undefined && /topk\.1$/.test(d.inputs[1] ?? ''));
    d.inputs[1] = (d.inputs[1] as string).replace(/\.1$/, '');
    writeFileSync(f, JSON.stringify(raw));
    const r = await runCli(['verify', f, '--no-cache']);
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.match(r.stderr, /reads '.*topk' \(input 1\) as integer values .* the values of op '.*topk' \(topk\), real numbers; its positions are '.*topk\.1'/);
  });

  it('its twin with int64 labels loads and is VERIFIED', () => {
    assert.equal(verifyPlan(loadPlanObject('ce.json', ce(ids('labels')))).verdict, 'verified');
  });
});
