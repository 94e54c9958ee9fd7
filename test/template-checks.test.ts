/**
 * Loading per template (symbolic mesh coordinates) against loading rank by rank: on every
 * plan both accept, they must agree on everything the loader decides (coverage, warnings,
 * collective instances); on every plan either rejects, both reject, at the same JSON path.
 * Then the checks that only the per-template path makes, at mesh sizes the per-rank path
 * would not reach.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { generatePlan, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import { normalForm } from '../lineage/normal.js';
import { compileExpr } from '../plans/expr.js';
import { EXAMPLES, FIXTURES } from './helpers.js';

const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };
const model = (name: string): ModelConfig => (PRESETS[name] as { model: ModelConfig }).model;

type Outcome = { ok: true; plan: LoadedPlan } | { ok: false; error: PlanError };

function load(name: string, raw: unknown, checks: 'template' | 'rank'): Outcome {
  try {
    return { ok: true, plan: loadPlanObject(name, structuredClone(raw), { checks }) };
  } catch (e) {
    if (e instanceof PlanError) return { ok: false, error: e };
    throw e;
  }
}

function sameOutcome(name: string, raw: unknown): 'accepted' | 'rejected' {
  const t = load(name, raw, 'template');
  const r = load(name, raw, 'rank');
  if (!t.ok || !r.ok) {
    assert.ok(!t.ok && !r.ok, `${name}: per template ${t.ok ? 'accepts' : `rejects (${t.error.message})`}, per rank ${r.ok ? 'accepts' : `rejects (${r.error.message})`}`);
    const tp = new Set(t.error.issues.map((i) => i.path));
    const rp = new Set(r.error.issues.map((i) => i.path));
    assert.ok([...tp].some((p) => rp.has(p)), `${name}: per template at ${[...tp].join(', ')}; per rank at ${[...rp].join(', ')}`);
    assert.equal(t.error.issues[0]?.message, r.error.issues.find((i) => i.path === t.error.issues[0]?.path)?.message ?? r.error.issues[0]?.message, name);
    return 'rejected';
  }
  const tc = t.plan.coverage.map((c) => ({ ...c }));
  const rc = r.plan.coverage.map((c) => ({ ...c, claims: 0 }));
  assert.deepEqual(tc.map((c) => ({ ...c, claims: 0 })), rc, `${name}: coverage`);
  // Distinct claims are counted per family on the template path: never more than per rank.
  tc.forEach((c, i) => assert.ok(c.claims >= 1 && c.claims <= (r.plan.coverage[i]?.claims ?? 0) * 2, `${name}: claims of ${c.logical}`));
  assert.deepEqual(t.plan.warnings, r.plan.warnings, `${name}: warnings`);
  assert.deepEqual(normalForm(t.plan), normalForm(r.plan), `${name}: normal form (views, collective instances)`);
  const count = (p: LoadedPlan, send: boolean): number => p.collectiveKinds.filter((k) => (k.op === 'send_recv') === send).reduce((n, k) => n + k.instances, 0);
  assert.equal(count(t.plan, false), count(r.plan, false), `${name}: group collective instances`);
  assert.equal(count(t.plan, true), count(r.plan, true), `${name}: send/recv instances`);
  return 'accepted';
}

describe('loading per template agrees with loading per rank', () => {
  const files = [
    ...readdirSync(EXAMPLES).filter((f) => f.endsWith('.json') && f !== 'manifest.json').map((f) => `${EXAMPLES}${f}`),
    ...readdirSync(`${EXAMPLES}buggy/`).filter((f) => f.endsWith('.json')).map((f) => `${EXAMPLES}buggy/${f}`),
    ...readdirSync(`${FIXTURES}equiv/`).filter((f) => f.endsWith('.json')).map((f) => `${FIXTURES}equiv/${f}`),
  ];
  it(`on the examples and equivalence fixtures (${files.length} plans)`, () => {
    for (const f of files) assert.equal(sameOutcome(f, JSON.parse(readFileSync(f, 'utf8'))), 'accepted', f);
  });
  it('on every malformed plan of the corpus: both reject, at the same place @full', () => {
    const dir = `${FIXTURES}invalid/`;
    let n = 0;
    for (const f of readdirSync(dir).filter((x) => x.endsWith('.json') && x !== 'manifest.json')) {
      let raw: unknown;
      try {
        raw = JSON.parse(readFileSync(`${dir}${f}`, 'utf8'));
      } catch {
        continue; // unparsable on purpose: no load to compare
      }
      assert.equal(sameOutcome(f, raw), 'rejected', f);
      n++;
    }
    assert.ok(n >= 30, `${n} fixtures compared`);
  }).timeout(120_000);
  it('on generated plans: data, tensor, sequence, pipeline (1F1B and interleaved), context and expert parallelism @full', () => {
    const configs: [ModelConfig, Parameters<typeof generatePlan>[0]['par']][] = [
      [model('mlp-tiny'), { dp: 2, tp: 2, micro: 2 }],
      [model('gpt2-tiny'), { dp: 2, tp: 2, micro: 2, sp: true, zero: 1 }],
      [{ ...model('llama-tiny'), layers: 2 }, { dp: 2, tp: 2, micro: 2, pp: 2, sp: true }],
      [{ ...model('mlp-tiny'), layers: 4 }, { dp: 1, tp: 1, micro: 2, pp: 2, virtual: 2 }],
      [{ ...model('llama-tiny'), seq: 4, batch: 1 }, { dp: 1, tp: 2, micro: 1, cp: 2, sp: true }],
      [model('moe-tiny'), { dp: 2, tp: 2, micro: 1, ep: true }],
      [{ ...model('llama-tiny'), layers: 4 }, { dp: 2, tp: 2, micro: 2, pp: 4, zero: 3 }],
    ];
    for (const [m, par] of configs) assert.equal(sameOutcome(`${m.family} ${JSON.stringify(par)}`, generatePlan({ model: m, par, optimizer: OPT })), 'accepted');
  }).timeout(120_000);
  it('on every catalogued bug injected into a generated plan @full', () => {
    const contexts: [BugContext, ModelConfig][] = [];
    for (const [sp, zero, pp] of [[false, 0, 1], [false, 1, 1], [false, 3, 1], [true, 0, 1], [false, 0, 2]] as const) {
      for (const family of ['gpt2', 'llama'] as const) contexts.push([{ dp: 2, tp: 2, micro: 2, sp, zero, pp, family }, { ...model(`${family}-tiny`), layers: pp }]);
    }
    contexts.push([{ dp: 2, tp: 1, micro: 1, family: 'moe', ep: true }, model('moe-tiny')], [{ dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm: 'ring' }, { ...model('llama-tiny'), seq: 4, batch: 1 }]);
    let n = 0;
    for (const bug of BUGS) {
      const hit = contexts.find(([c]) => bug.applies(c));
      if (hit === undefined) continue;
      const [ctx, m] = hit;
      const plan = generatePlan({ model: m, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
      bug.inject(plan, ctx);
      assert.equal(sameOutcome(bug.id, plan), bug.kind === 'consistency' ? 'rejected' : 'accepted', bug.id);
      n++;
    }
    assert.ok(n >= 20, `${n} bugs compared`);
  }).timeout(300_000);
});

/** x (input) -> y = identity(x) over a dp mesh, each rank holding rows of both. */
function rowsPlan(dp: number, rows: number, lo: string, hi: string, value?: unknown): object {
  const lin = (t: string): object => ({ logical: t, index: [[{ expr: lo }, { expr: hi }]], ...(value === undefined ? {} : { value }) });
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'dp', size: dp }] },
    logical: { tensors: [{ id: 'x', shape: [rows], role: 'input' }, { id: 'y', shape: [rows], role: 'output' }], ops: [{ id: 'f', op: 'identity', inputs: ['x'], outputs: ['y'] }] },
    parallel: { programs: [{ ranks: 'all', tensors: [{ id: 'x', shape: [1], lineage: lin('x') }, { id: 'y', shape: [1], lineage: lin('y') }], ops: [{ id: 'f', op: 'identity', inputs: ['x'], outputs: ['y'] }] }] },
    contract: { inputs: ['x'], outputs: ['y'] },
  };
}

/** rowsPlan over a 2-axis mesh dp x tp, 8 rows per dp coordinate, a row per rank. */
function gridPlan(dp: number, lo: string): object {
  const raw = rowsPlan(1, 8 * dp, lo, `${lo} + 1`) as { mesh: { axes: { name: string; size: number }[] } };
  raw.mesh.axes = [
    { name: 'dp', size: dp },
    { name: 'tp', size: 8 },
  ];
  return raw;
}
/** Row 8 dp + tp for tp 0-3 and 8 dp + 11 - tp for tp 4-7 (the second half reversed, as zig-zag chunks): piecewise affine in tp. */
const ZIGZAG = '8*dp + (1 - tp//4)*tp + (tp//4)*(11 - tp)';

describe('piecewise-affine lineage per template (lineage/fit.ts, issue 37)', () => {
  it('a correct piecewise lineage is families on pieces cut along tp, with the per-rank outcome', () => {
    assert.equal(sameOutcome('zigzag', gridPlan(16, ZIGZAG)), 'accepted');
    const p = loadPlanObject('zigzag.json', gridPlan(1024, ZIGZAG));
    assert.deepEqual(p.stats.lineage, { symbolicTensors: 2, piecewiseTensors: 2, enumeratedTensors: 0, enumeratedClaims: 0, explained: 0 });
    assert.deepEqual(p.coverage.map((c) => [c.holders, c.complete]), [[8192, true], [8192, true]]);
  });
  it('a wrong second half, or one coordinate off the fitted function, is rejected as per rank', () => {
    // tp 4-7 hold 8 dp + 10 - tp: row 8 dp + 7 held by no rank.
    assert.equal(sameOutcome('half', gridPlan(16, '8*dp + (1 - tp//4)*tp + (tp//4)*(10 - tp)')), 'rejected');
    // Right at tp 4, 5, 6 (where a fit reads it), tp 7 holds row 8 dp + 5: row 8 dp + 4 held by no rank.
    const off = `${ZIGZAG} + tp//7`;
    assert.equal(sameOutcome('off', gridPlan(16, off)), 'rejected');
    assert.throws(
      () => loadPlanObject('off.json', gridPlan(1024, off)),
      (e: unknown) => e instanceof PlanError && /elements \[4:5\] are held by no rank/.test(e.message),
    );
  });
  it('SP at tp 8 under zig-zag CP loads with no claim enumerated, as per rank', () => {
    const tp = 8;
    const par = { dp: 2, tp, micro: 1, sp: true, cp: 2 };
    const raw = generatePlan({ model: { family: 'llama', layers: 1, hidden: 4 * tp, heads: tp, kvHeads: tp, seq: 32, vocab: 2 * tp, batch: 2, ffn: 2 * tp }, par, optimizer: OPT });
    assert.equal(sameOutcome('sp-cp', raw), 'accepted');
    const p = loadPlanObject('sp-cp.json', raw);
    assert.equal(p.stats.lineage.enumeratedTensors, 0);
    assert.ok(p.stats.lineage.piecewiseTensors > 0);
  });
});

describe('per-template checks at scale', () => {
  it('an affine lineage over 8192 ranks is one family per tensor, and its tiling is exact', () => {
    const p = loadPlanObject('rows.json', rowsPlan(8192, 8192, 'dp', 'dp + 1'));
    assert.deepEqual(p.stats.lineage, { symbolicTensors: 2, piecewiseTensors: 0, enumeratedTensors: 0, enumeratedClaims: 0, explained: 0 });
    assert.deepEqual(p.coverage.map((c) => [c.claims, c.holders, c.complete]), [[8192, 8192, true], [8192, 8192, true]]);
  });
  it('a gap the family check finds is reported claim by claim, with the rank and region', () => {
    // Ranks hold rows 2dp: every odd row is held by no rank.
    assert.throws(
      () => loadPlanObject('gap.json', rowsPlan(8192, 16384, '2*dp', '2*dp + 1')),
      (e: unknown) => e instanceof PlanError && /elements \[1:2\] are held by no rank: the lineage does not tile the tensor \(held: rank 0 'x' \[0:1\] complete/.test(e.message),
    );
  });
  it('a partial group missing its last chunk at scale is incomplete, naming the chunk', () => {
    // Chunk dp of 8193 addends: chunk 8192 is held by no rank.
    assert.throws(
      () => loadPlanObject('chunks.json', rowsPlan(8192, 1, '0', '1', [{ expr: 'dp' }, 8193])),
      (e: unknown) => e instanceof PlanError && /held as partial addends \(sum of 8193\) but chunk\(s\) 8192 are held by no rank/.test(e.message),
    );
  });
  it('a lineage range outside the tensor on the last rank only is found from the affine bound, and named by rank', () => {
    assert.throws(
      () => loadPlanObject('out.json', rowsPlan(8192, 8192, 'dp + 1', 'dp + 2')),
      (e: unknown) => e instanceof PlanError && /rank 8191 tensor 'x': dim 0: range \[8192, 8193\) is outside \[0, 8192\)/.test(e.message),
    );
  });
  it('a pipeline matches send/recv per program pair, not per rank', () => {
    const plan = generatePlan({ model: { ...model('mlp-tiny'), layers: 4 }, par: { dp: 2, tp: 1, micro: 2, pp: 4 }, optimizer: OPT });
    const p = loadPlanObject('pp.json', plan);
    assert.equal(p.stats.collectives.p2p, 'symbolic');
    assert.ok(p.stats.collectives.p2pClasses >= 6, `${p.stats.collectives.p2pClasses} classes`);
    // Group calls within a stage are matched per template; the gradient-norm all-reduce over
    // pp spans the stages' programs: its 4 call sites (one per stage) are one family, matched
    // once (plans/symcoll.ts spanningFamilies).
    assert.deepEqual([p.stats.collectives.symbolicSites, p.stats.collectives.perRankSites], [17, 0]);
    // Explicit one-program-per-rank plans keep the per-rank checks.
    const e = loadPlanObject('explicit.json', JSON.parse(readFileSync(`${EXAMPLES}mlp-dp2-explicit.json`, 'utf8')));
    assert.equal(e.stats.collectives.symbolicSites, 0);
    assert.equal(e.stats.lineage.symbolicTensors, 0);
    assert.ok(e.stats.lineage.enumeratedClaims > 0);
  });
});

/** x [8, 2] sharded over dp 4, all-gathered, then y = identity: one template for all ranks. */
function gatherPlan(gathered: number, dim: unknown): object {
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'dp', size: 4 }] },
    logical: { tensors: [{ id: 'x', shape: [8, 2], role: 'input' }, { id: 'y', shape: [8, 2], role: 'output' }], ops: [{ id: 'f', op: 'identity', inputs: ['x'], outputs: ['y'] }] },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [2, 2], lineage: { logical: 'x', placements: ['S(0)'] } },
            { id: 'xg', shape: [gathered, 2], lineage: { logical: 'x', placements: ['R'] } },
            { id: 'y', shape: [8, 2], lineage: { logical: 'y', placements: ['R'] } },
          ],
          ops: [
            { id: 'ag', op: 'all_gather', inputs: ['x'], outputs: ['xg'], attrs: { dim }, group: { axes: ['dp'] } },
            { id: 'f', op: 'identity', inputs: ['xg'], outputs: ['y'] },
          ],
        },
      ],
    },
    contract: { inputs: ['x'], outputs: ['y'] },
  };
}

describe('per-template collective checks report what the per-rank matcher reports', () => {
  it('a correct all-gather over a template is matched once, not per group', () => {
    const p = loadPlanObject('ag.json', gatherPlan(8, 0));
    assert.deepEqual([p.stats.collectives.symbolicSites, p.stats.collectives.perRankSites], [1, 0]);
    assert.deepEqual(p.collectiveKinds, [{ op: 'all_gather', over: 'dp', groupSize: 4, instances: 1 }]);
  });
  it('a wrong output shape, found once per template, is reported per group with its rank', () => {
    // Gathering along dim 1 gives [2, 8], not the declared [8, 2].
    assert.equal(sameOutcome('ag-shape.json', gatherPlan(8, 1)), 'rejected');
    assert.throws(() => loadPlanObject('ag-shape.json', gatherPlan(8, 1)), /rank 0 op 'ag'.*output is declared \[8, 2\] but all_gather over 4 ranks of \[2, 2\] gives \[2, 8\]/);
  });
  it('attributes that vary inside a group (an expression of the group axis) are compared member by member', () => {
    assert.equal(sameOutcome('ag-attr.json', gatherPlan(8, { expr: 'dp // 2' })), 'rejected');
    assert.throws(() => loadPlanObject('ag-attr.json', gatherPlan(8, { expr: 'dp // 2' })), /attributes \{"dim":1\} differ from rank 0's \{"dim":0\}/);
  });
});

describe('affine forms of expressions', () => {
  const vars = new Set(['dp', 'tp', 'rank']);
  const bounds = (v: string): readonly [number, number] => (v === 'rank' ? [0, 63] : [0, 7]);
  const aff = (src: string): string | undefined => {
    const a = compileExpr(src, vars, bounds).affine;
    return a === undefined ? undefined : `${a.c}|${[...a.k].map(([v, k]) => `${k}${v}`).sort().join('+')}`;
  };
  it('are found for sums of coordinates times constants', () => {
    assert.equal(aff('2*dp + 3'), '3|2dp');
    assert.equal(aff('(0)*8 + tp - 2*(dp - 1)'), '2|-2dp+1tp');
    assert.equal(aff('dp - dp + 5'), '5|');
  });
  it('are not claimed for floor division, modulo, min, max, products of coordinates, or anything that could overflow', () => {
    for (const src of ['dp // 2', 'dp % 2', 'min(dp, 3)', 'max(0, 1 - dp)', 'dp * tp', 'dp / 1', '4503599627370496 * dp', '(dp + 1) * 4503599627370496 - 4503599627370496']) assert.equal(aff(src), undefined, src);
  });
});

/** dp 2 cp 2 llama, one program per cp coordinate: the weight gradients' all-reduces over cp span both programs. */
function cpPlan(edit?: (ops: { id: string; op: string; attrs?: Record<string, unknown> }[]) => void): unknown {
  const raw = generatePlan({ model: { family: 'llama', layers: 1, hidden: 16, heads: 2, kvHeads: 2, seq: 8, vocab: 16, batch: 2, ffn: 16 }, par: { dp: 2, tp: 1, micro: 1, pp: 1, cp: 2 }, optimizer: OPT }) as unknown as { parallel: { programs: { ranks: unknown; ops: { id: string; op: string; attrs?: Record<string, unknown> }[] }[] } };
  const second = raw.parallel.programs[1];
  assert.deepEqual(second?.ranks, { where: { cp: 1 } });
  if (edit !== undefined) edit(second.ops);
  return raw;
}
const cpOp = (ops: { id: string; op: string; attrs?: Record<string, unknown> }[], id: string): { id: string; op: string; attrs?: Record<string, unknown> } => {
  const o = ops.find((x) => x.id === id);
  assert.ok(o !== undefined, id);
  return o;
};

describe('group calls spanning several programs, matched once per family (plans/symcoll.ts)', () => {
  it('the cp all-reduces of a program per cp coordinate: no call site left to the per-rank matcher, and the same instances', () => {
    const raw = cpPlan();
    assert.equal(sameOutcome('cp.json', raw), 'accepted');
    const p = loadPlanObject('cp.json', raw);
    assert.equal(p.stats.collectives.perRankSites, 0);
    assert.ok(p.stats.collectives.symbolicSites >= 13, `${p.stats.collectives.symbolicSites}`);
    // The per-rank list, built on demand, agrees (loader.ts throws on an internal inconsistency).
    assert.ok(p.collectives.length > 0);
  });
  it('one program averaging where the other sums: rejected as per rank, with its message', () => {
    const raw = cpPlan((ops) => (cpOp(ops, 'all_reduce#2').attrs = { reduce: 'avg' }));
    assert.equal(sameOutcome('cp-avg.json', raw), 'rejected');
    assert.throws(() => loadPlanObject('cp-avg.json', raw), /attributes \{"reduce":"avg"\} differ/);
  });
  it('one program missing a call, or making two in the other order: rejected as per rank', () => {
    const missing = cpPlan((ops) => {
      const o = cpOp(ops, 'all_reduce#2') as { op: string; attrs?: Record<string, unknown>; group?: unknown };
      o.op = 'identity';
      delete o.attrs;
      delete o.group;
    });
    assert.equal(sameOutcome('cp-missing.json', missing), 'rejected');
    assert.throws(() => loadPlanObject('cp-missing.json', missing), /do not match/);
    const swapped = cpPlan((ops) => {
      const i = ops.findIndex((x) => x.id === 'all_reduce');
      const j = ops.findIndex((x) => x.id === 'all_reduce#2');
      [ops[i], ops[j]] = [ops[j] as (typeof ops)[number], ops[i] as (typeof ops)[number]];
    });
    assert.equal(sameOutcome('cp-swapped.json', swapped), 'rejected');
    assert.throws(() => loadPlanObject('cp-swapped.json', swapped), /rank 1 op 'all_reduce#2': input \[16\] differs from \[16, 16\] on rank 0/);
  });
});
