import { strict as assert } from 'node:assert';
import { generatePlan } from '../plans/gen/plan.js';
import { BUGS, LOAD_MESSAGE, detectionOf, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import type { Parallelism } from '../plans/gen/net.js';
import { checkStructure } from '../plans/loader.js';
import { loadPlanObject } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { verifyPlan } from '../stages/verify.js';
import { numericCheck } from '../stages/witness/numeric.js';
import { runCli, ROOT } from './helpers.js';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fullUnless } from './optional.js';
import { bugConfig, GPT2, LLAMA, MLP, MOE, OPT } from './catalog.js';

/** Logical op outputs that no parallel tensor on any program claims (nnScaler plans carry lineage for all). */
function unclaimedLogicalOutputs(plan: Record<string, unknown>): string[] {
  const logical = plan['logical'] as { ops: { outputs: string[] }[] };
  const progs = (plan['parallel'] as { programs: { tensors: { lineage?: { logical: string } }[] }[] }).programs;
  const claimed = new Set(progs.flatMap((p) => p.tensors.flatMap((t) => (t.lineage === undefined ? [] : [t.lineage.logical]))));
  return logical.ops.flatMap((o) => o.outputs).filter((o) => !claimed.has(o));
}

describe('plan generators: the strategy matrix verifies', () => {
  const matrix: [ModelConfig, number, number, number, boolean, (0 | 1 | 2 | 3)?, number?, boolean?, number?, number?, ('ring' | 'allgather')?][] = [];
  for (const m of [MLP, GPT2, LLAMA]) for (const [dp, tp, micro] of [[1, 1, 1], [2, 1, 1], [1, 2, 1], [1, 1, 2], [2, 2, 2]] as const) matrix.push([m, dp, tp, micro, false]);
  matrix.push([GPT2, 2, 2, 2, true], [LLAMA, 1, 2, 1, true], [MLP, 2, 1, 2, false, 1], [GPT2, 2, 2, 2, false, 1], [LLAMA, 2, 2, 2, true, 2], [GPT2, 2, 2, 2, false, 3], [LLAMA, 2, 2, 2, false, 3]);
  // Pipelines (two layers, two stages, 1F1B), with tied embedding (gpt2), SP and ZeRO (llama).
  matrix.push([{ ...MLP, layers: 2 }, 1, 1, 2, false, 0, 2], [{ ...GPT2, layers: 2 }, 2, 2, 2, false, 0, 2], [{ ...LLAMA, layers: 2 }, 2, 2, 2, true, 1, 2]);
  // Interleaved pipeline: four layers, two stages, two virtual stages each.
  matrix.push([{ ...MLP, layers: 4 }, 1, 1, 2, false, 0, 2, false, 2]);
  // Context parallelism (llama, sequence 4 in zig-zag chunks of 1 token over cp2): ring attention (one program per CP rank), and all-gathered K/V.
  const LLAMA_CP = { ...LLAMA, seq: 4, batch: 1 };
  matrix.push([LLAMA_CP, 1, 1, 1, false, 0, 1, false, 1, 2], [{ ...LLAMA_CP, batch: 2 }, 2, 1, 1, false, 0, 1, false, 1, 2], [LLAMA_CP, 1, 1, 1, false, 0, 1, false, 1, 2, 'allgather']);
  // CP composed: with TP and SP (each tp rank holds a piece of the zig-zag pair), ZeRO-3,
  // a pipeline, all-gathered K/V with SP; GPT-2 (learned positions in zig-zag rows) with
  // dp, tp, SP and ZeRO-1.
  const GPT2_CP = { ...GPT2, seq: 4, batch: 2 };
  matrix.push(
    [LLAMA_CP, 1, 2, 1, true, 0, 1, false, 1, 2],
    [LLAMA_CP, 1, 2, 1, true, 0, 1, false, 1, 2, 'allgather'],
    [{ ...LLAMA_CP, batch: 2 }, 2, 1, 1, false, 3, 1, false, 1, 2],
    [{ ...LLAMA_CP, layers: 2, batch: 2 }, 1, 1, 2, false, 0, 2, false, 1, 2],
    [GPT2_CP, 1, 1, 1, false, 0, 1, false, 1, 2],
    [GPT2_CP, 2, 2, 1, true, 1, 1, false, 1, 2],
  );
  // DeepSeek-style MoE: data parallel with experts split across dp (EP), and with tp.
  // With SP each tp rank routes its own tokens (one each here), and the router and expert
  // gradients are all-reduced over tp.
  matrix.push([MOE, 1, 1, 1, false], [MOE, 2, 1, 1, false, 0, 1, true], [MOE, 2, 2, 1, false], [MOE, 2, 2, 1, false, 0, 1, true], [{ ...MOE, seq: 2, batch: 1 }, 1, 2, 1, true]);
  // MoE with accumulation, ZeRO (expert weights under EP are dp shards already: ZeRO leaves
  // them as they are), and a pipeline.
  matrix.push([MOE, 1, 1, 2, false], [MOE, 2, 1, 1, false, 1, 1, true], [MOE, 2, 1, 1, false, 3, 1, true], [{ ...MOE, layers: 2 }, 1, 1, 2, false, 0, 2]);
  // The token layout (each routing slot at its own buffer row): buffers are linear in the
  // routing and a rank's slots are a row block, so more tokens per stage prove: CP, SP with
  // two tokens per tp rank, EP with SP, top-2 of 3 experts, EP with two micro-batches.
  const MOE_T: ModelConfig = { ...MOE, moeLayout: 'token' };
  matrix.push(
    [{ ...MOE_T, seq: 4, batch: 1 }, 1, 1, 1, false, 0, 1, false, 1, 2],
    [{ ...MOE_T, seq: 2, batch: 2 }, 1, 2, 1, true],
    [{ ...MOE_T, seq: 2, batch: 2 }, 2, 2, 1, true, 0, 1, true],
    [{ ...MOE_T, topk: 2, experts: 3 }, 2, 1, 1, false],
    [{ ...MOE_T, batch: 4 }, 2, 1, 2, false, 0, 1, true],
  );
  // npm test keeps every fourth configuration; test:full runs them all.
  for (const [k, [model, dp, tp, micro, sp, zero, pp, ep, virtual, cp, cpComm]] of matrix.entries()) {
    it(`${model.family}${model.moeLayout === 'token' ? ' (token layout)' : ''} dp${dp} tp${tp}${sp ? ' sp' : ''}${ep === true ? ' ep' : ''}${cp === undefined ? '' : ` cp${cp} (${cpComm ?? 'ring'})`}${zero === undefined ? '' : ` zero${zero}`}${pp === undefined ? '' : ` pp${pp}`}${virtual === undefined ? '' : ` virtual${virtual}`} micro${micro}: forward, backward, accumulation, reduction, clipping, AdamW are verified${fullUnless(k % 4 === 0)}`, () => {
      const plan = generatePlan({ model, par: { dp, tp, micro, sp, zero: zero ?? 0, pp: pp ?? 1, ep: ep === true, virtual: virtual ?? 1, cp: cp ?? 1, ...(cpComm === undefined ? {} : { cpComm }) }, optimizer: OPT });
      const lp = loadPlanObject('gen.json', plan);
      const r = verifyPlan(lp);
      assert.equal(r.verdict, 'verified', r.summary);
      // Every contract output (loss, updated parameters and optimizer state) is proved.
      const staged = new Set(r.stages.map((s) => s.logical));
      for (const o of (plan['contract'] as { outputs: string[] }).outputs) assert.ok(staged.has(o), `no stage for '${o}'`);
      // Every logical op output is claimed, except MoE expert buffers of a subset of the tokens
      // (slot positions depend on those tokens' routing), which the plan itself lists.
      const unclaimed = unclaimedLogicalOutputs(plan);
      const declared = ((plan['x-planproof-gen'] as { unclaimed?: { logical: string; why: string }[] } | undefined)?.unclaimed ?? []);
      assert.deepEqual(declared.map((d) => d.logical), unclaimed, 'the plan lists exactly the logical op outputs it leaves unclaimed');
      const tokensSplit = dp > 1 || sp || (cp ?? 1) > 1 || micro > 1;
      for (const d of declared) assert.ok(model.family === 'moe' && tokensSplit && /^MoE expert buffer/.test(d.why) && /(^|\/)(experts\/|moe_dispatch)/.test(d.logical), `${d.logical}: ${d.why}`);
      // Packed: the dispatch buffer of a token subset has no claim. Token layout: every buffer
      // is claimed, except after an expert-parallel exchange of a strided token subset.
      if (model.family === 'moe' && tokensSplit && model.moeLayout !== 'token') assert.ok(declared.some((d) => d.logical === 'l0/moe/experts/moe_dispatch'), 'the dispatch buffer of a token subset has no claim');
      if (model.moeLayout === 'token' && !(ep === true && (micro > 1 || sp || (cp ?? 1) > 1))) assert.deepEqual(declared, []);
    });
  }
});

describe('plan generators: ring attention over a longer ring', () => {
  // cp4 (sequence 8): distinct successor and predecessor, blocks skipped per rank. The
  // attention backward's key-side sums run over eight rows with eight softmax denominators,
  // which the engine keeps as lazy sums.
  it('llama cp4 (ring) is verified, and a ring bug at this size is refuted @full', () => {
    const plan = generatePlan({ model: { ...LLAMA, seq: 8, batch: 1 }, par: { dp: 1, tp: 1, micro: 1, cp: 4 }, optimizer: OPT });
    const progs = (plan['parallel'] as { programs: { name: string; ops: { op: string; peer?: unknown }[] }[] }).programs;
    assert.deepEqual(progs.map((p) => p.name), ['cp0', 'cp1', 'cp2', 'cp3']);
    // Rank 1 sends to rank 2 and receives from rank 0.
    const peers = new Set((progs[1]?.ops ?? []).filter((o) => o.op === 'send' || o.op === 'recv').map((o) => `${o.op} ${JSON.stringify(o.peer)}`));
    assert.deepEqual([...peers].sort(), ['recv {"shift":{"cp":-1}}', 'send {"shift":{"cp":1}}']);
    const r = verifyPlan(loadPlanObject('ring4.json', plan));
    assert.equal(r.verdict, 'verified', r.summary);
    const bad = generatePlan({ model: { ...LLAMA, seq: 8, batch: 1 }, par: { dp: 1, tp: 1, micro: 1, cp: 4 }, optimizer: OPT });
    const at = (BUGS.find((b) => b.id === 'cp-ring-stale-kv') as (typeof BUGS)[number]).inject(bad, { dp: 1, tp: 1, micro: 1, family: 'llama', cp: 4 });
    const rb = verifyPlan(loadPlanObject('ring4-bug.json', bad));
    assert.equal(rb.verdict, 'not_equivalent', `${at}: ${rb.summary}`);
    assert.ok(numericCheck(loadPlanObject('ring4-bug.json', bad), 7).mismatches.length > 0);
  });
});

describe('plan generators: activation recomputation verifies', () => {
  // Each layer's forward runs again in the backward (its recomputed values claim what the
  // forward's claim), composed with SP, pipelines and the CP ring (whose sends run again).
  const cases: [string, ModelConfig, Parallelism][] = [
    ['llama dp2 tp2 sp micro2', LLAMA, { dp: 2, tp: 2, micro: 2, sp: true, recompute: true }],
    ['gpt2 dp2 pp2 micro2', { ...GPT2, layers: 2 }, { dp: 2, tp: 1, micro: 2, pp: 2, recompute: true }],
    ['llama cp2 (ring) tp2 sp', { ...LLAMA, seq: 4, batch: 1 }, { dp: 1, tp: 2, micro: 1, sp: true, cp: 2, recompute: true }],
  ];
  for (const [label, model, par] of cases) {
    it(`${label} with full recomputation`, () => {
      const plan = generatePlan({ model, par, optimizer: OPT });
      const ops = (plan['parallel'] as { programs: { ops: { id: string; inputs: string[]; op: string }[] }[] }).programs.flatMap((p) => p.ops);
      // The backward reads recomputed values, not the forward's.
      assert.ok(ops.some((o) => !/\/recompute\//.test(o.id) && /(^|\/)grad\//.test(o.id) && o.inputs.some((i) => /\/recompute\//.test(i))));
      const r = verifyPlan(loadPlanObject('recompute.json', plan));
      assert.equal(r.verdict, 'verified', r.summary);
    });
  }
});

/** Parallel tensors downstream of `start` (an op id or tensor name) in the first program. */
function downstream(plan: Record<string, unknown>, start: string): Set<string> {
  const progs = (plan['parallel'] as { programs: { ops: { id: string; op?: string; inputs: string[]; outputs: string[] }[]; tensors: { id: string; lineage?: { logical: string } }[] }[] }).programs;
  const claims = new Set<string>();
  // Per program, the reached tensors; a reached send reaches every receive (pipelines).
  const reach = progs.map(() => new Set<string>([start]));
  let grew = true;
  while (grew) {
    grew = false;
    const sent = progs.some((prog, i) => prog.ops.some((o) => (o.id === start || o.inputs.some((x) => (reach[i] as Set<string>).has(x))) && (o as { op?: string }).op === 'send'));
    progs.forEach((prog, i) => {
      const r = reach[i] as Set<string>;
      for (const o of prog.ops) {
        const hit = o.id === start || o.inputs.some((x) => r.has(x)) || (sent && (o as { op?: string }).op === 'recv');
        if (hit && o.outputs.some((x) => !r.has(x))) {
          for (const x of o.outputs) r.add(x);
          grew = true;
        }
      }
    });
  }
  progs.forEach((prog, i) => {
    for (const t of prog.tensors) if ((reach[i] as Set<string>).has(t.id) && t.lineage !== undefined) claims.add(t.lineage.logical);
  });
  return claims;
}

describe('bug catalog: every injected bug is caught', () => {
  // Each bug runs on the first configuration that has its place (gpt2, llama, then with SP).
  const ctxFor = bugConfig;
  it('docs/bugs.md lists every entry with its source, and nothing else', () => {
    const doc = readFileSync(`${ROOT}docs/bugs.md`, 'utf8');
    const listed = [...doc.matchAll(/^\| `([a-z0-9-]+)` \|/gm)].map((m) => m[1]);
    assert.deepEqual(listed.sort(), BUGS.map((b) => b.id).sort());
    for (const b of BUGS) assert.ok(doc.includes(b.source), `${b.id}: source not in docs/bugs.md`);
    // The README's tour states the catalog's size.
    assert.match(readFileSync(`${ROOT}README.md`, 'utf8'), new RegExp(`one of ${BUGS.length} catalogued real bugs`));
  });
  it('has at least 30 entries (the issue asks for 30), each with a source', () => {
    assert.ok(BUGS.length >= 30, `${BUGS.length} bugs`);
    for (const b of BUGS) assert.ok(b.source.length > 10 && b.title.length > 10, b.id);
  });
  it('refuses at load exactly the consistency entries (other tests filter the catalog by kind)', () => {
    for (const b of BUGS) assert.equal(detectionOf(b).at === 'load', b.kind === 'consistency', b.id);
  });
  it('verify exits 2 on every entry expected at load, its report naming the op and the reason @full', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pp-load-'));
    try {
      for (const bug of BUGS) {
        const d = detectionOf(bug);
        if (d.at !== 'load') continue;
        const [ctx, model] = ctxFor(bug);
        const plan = generatePlan({ model, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
        const where = bug.inject(plan, ctx);
        const f = join(dir, `${bug.id}.json`);
        writeFileSync(f, JSON.stringify(plan));
        const r = await runCli(['verify', '--json', f]);
        assert.equal(r.code, 2, `${bug.id}: ${r.stderr}`);
        const rep = JSON.parse(r.stdout) as { verdict: string; issues: { where?: string; message: string }[] };
        assert.equal(rep.verdict, 'invalid', bug.id);
        assert.ok(rep.issues.some((i) => LOAD_MESSAGE[d.reason].test(i.message) && `${i.where ?? ''} ${i.message}`.includes(`'${where}'`)), `${bug.id}: ${JSON.stringify(rep.issues[0])}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }).timeout(300_000);
  // MoE entries run once more with the token layout (each routing slot at its own row).
  const runs: [(typeof BUGS)[number], boolean][] = BUGS.flatMap((b): [(typeof BUGS)[number], boolean][] => (ctxFor(b)[1].family === 'moe' ? [[b, false], [b, true]] : [[b, false]]));
  // The correct twin of every entry: each configuration the catalog injects into verifies as
  // generated.
  it('every configuration the bugs are injected into verifies without the bug @full', () => {
    const seen = new Map<string, [BugContext, ModelConfig]>();
    for (const [bug, token] of runs) {
      const [ctx, base] = ctxFor(bug);
      const model: ModelConfig = token ? { ...base, moeLayout: 'token' } : base;
      seen.set(JSON.stringify([ctx, model]), [ctx, model]);
    }
    for (const [key, [ctx, model]] of seen) {
      const r = verifyPlan(loadPlanObject('twin.json', generatePlan({ model, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT })));
      assert.equal(r.verdict, 'verified', `${key}: ${r.summary}`);
    }
    assert.ok(seen.size >= 10, `${seen.size} configurations`);
  }).timeout(600_000);
  // npm test keeps the first entry of each kind; test:full runs every entry.
  const firstOfKind = new Set([...new Map(runs.map(([b]) => [b.kind, b.id] as const).reverse()).values()]);
  for (const [bug, token] of runs) {
    const d = detectionOf(bug);
    it(`${bug.id} (${bug.kind})${token ? ' in the MoE token layout' : ''} is ${d.at === 'load' ? `refused at load (${d.reason}) with its op named` : 'refuted at a stage downstream of the injection, and is a real bug numerically'}${fullUnless(firstOfKind.has(bug.id) && !token)}`, () => {
      const [ctx, base] = ctxFor(bug);
      const model: ModelConfig = token ? { ...base, moeLayout: 'token' } : base;
      assert.ok(bug.applies(ctx), 'the test configuration must have the place this bug needs');
      const plan = generatePlan({ model, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
      const where = bug.inject(plan, ctx);
      if (d.at === 'load') {
        // No program: every issue is in the parallel program, says the expected reason, and one
        // names the injected op or tensor (the refusal is the detection; docs/bugs.md).
        let issues: PlanError['issues'] = [];
        assert.throws(() => loadPlanObject('bug.json', plan), (e: unknown) => e instanceof PlanError && (issues = e.issues).length > 0);
        for (const i of issues) {
          assert.ok(i.path.startsWith('$.parallel'), i.path);
          assert.match(i.message, LOAD_MESSAGE[d.reason]);
        }
        assert.ok(issues.some((i) => `${i.where ?? ''} ${i.message}`.includes(`'${where}'`)), `no issue names '${where}': ${issues[0]?.message}`);
        return;
      }
      const lp = loadPlanObject('bug.json', plan);
      const r = verifyPlan(lp);
      assert.equal(r.verdict, 'not_equivalent', r.summary);
      const first = r.stages.find((s) => s.status === 'not_equivalent');
      assert.ok(first !== undefined && (first.witness ?? []).length > 0);
      assert.ok(downstream(plan, where).has(first.logical), `first failing stage '${first.logical}' is not downstream of the injected '${where}'`);
      // Real: the buggy plan's values differ from the logical ones at random inputs.
      assert.ok(numericCheck(lp, r.numeric.seed).mismatches.length > 0);
    });
  }
  it('a mutation that keeps the plan equivalent verifies: two independent gradient all-reduces swapped in program order', () => {
    const plan = generatePlan({ model: MLP, par: { dp: 2, tp: 1, micro: 1 }, optimizer: OPT });
    const ops = (plan['parallel'] as { programs: { ops: { op: string }[] }[] }).programs[0]?.ops ?? [];
    const idx = ops.map((o, i) => (o.op === 'all_reduce' ? i : -1)).filter((i) => i >= 0);
    assert.ok(idx.length >= 2);
    const [a, b] = [idx[0] as number, idx[1] as number];
    [ops[a], ops[b]] = [ops[b] as { op: string }, ops[a] as { op: string }];
    assert.equal(verifyPlan(loadPlanObject('swap.json', plan)).verdict, 'verified');
  });
});

describe('loader views', () => {
  it('ranks with the same coordinates on the axes a program uses share one view', () => {
    // llama-tiny dp2 tp2: vocab-parallel offsets depend on tp only. Ranks are dp-major.
    const lp = loadPlanObject('views.json', generatePlan({ model: LLAMA, par: { dp: 2, tp: 2, micro: 1 }, optimizer: OPT }));
    const p = lp.programs[0];
    assert.ok(p !== undefined && p.coordDependent);
    assert.equal(lp.view(0).shapes, lp.view(2).shapes);
    assert.equal(lp.view(1).attrs, lp.view(3).attrs);
    assert.notEqual(lp.view(0).attrs, lp.view(1).attrs);
    assert.equal(lp.view(2).rank, 2);
  });
});

describe('plan generators: every preset', () => {
  // The TrainVerify-scale presets (L3: 8192 ranks, 126 layers) must be valid plans: format
  // limits (op arity, expression sizes) and the text limits are checked on all of them
  // (loading them whole is measured in docs/benchmarks.md, "Loading generated presets").
  // npm test generates the small presets; test:full the TrainVerify-scale ones too.
  for (const [name, p] of Object.entries(PRESETS)) {
    it(`${name} generates a plan that passes the format checks (schema, text limits, mesh, logical graph, programs)${fullUnless(name.includes('tiny') || name === 'demo')}`, () => {
      const plan = generatePlan({ model: p.model, par: p.par, optimizer: OPT });
      const size = checkStructure(`${name}.json`, plan);
      assert.ok(size.ops > 0 && size.claims > 0, name);
    }).timeout(600_000);
  }
});

describe('planproof gen', () => {
  it('writes a plan that verify proves, and lists the catalog', async () => {
    const r = await runCli(['gen', '--preset', 'mlp-tiny', '--dp', '2', '--tp', '1', '--micro', '1']);
    assert.equal(r.code, 0, r.stderr);
    const plan = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.equal(verifyPlan(loadPlanObject('gen.json', plan)).verdict, 'verified');
    const l = await runCli(['gen', '--list-bugs']);
    assert.equal(l.code, 0);
    for (const b of BUGS) assert.ok(l.stdout.includes(b.id));
  });
  it('takes kv heads, shared experts and the expert width from the command line', async () => {
    const shapes = async (args: string[]): Promise<Map<string, number[]>> => {
      const r = await runCli(['gen', ...args]);
      assert.equal(r.code, 0, r.stderr);
      const plan = JSON.parse(r.stdout) as { logical: { tensors: { id: string; shape: number[] }[] } };
      return new Map(plan.logical.tensors.map((t) => [t.id, t.shape]));
    };
    // llama-tiny: hidden 8, 4 heads of 2; 2 kv heads give k [4, 8], 4 give [8, 8].
    assert.deepEqual((await shapes(['--preset', 'llama-tiny'])).get('l0.attn.k'), [4, 8]);
    assert.deepEqual((await shapes(['--preset', 'llama-tiny', '--kv-heads', '4'])).get('l0.attn.k'), [8, 8]);
    const moe = await shapes(['--preset', 'moe-tiny', '--shared', '2', '--expert-ffn', '4']);
    assert.deepEqual(moe.get('l0.experts.w1'), [2, 8, 4]);
    assert.ok(moe.has('l0.shared1.up') && !moe.has('l0.shared2.up'));
  });
  it('rejects an unknown preset, an unknown bug and an indivisible configuration with exit 4 and no stack trace', async () => {
    for (const args of [['gen', '--preset', 'nope'], ['gen', '--inject', 'nope'], ['gen', '--preset', 'gpt2-tiny', '--dp', '3'], ['gen', '--preset', 'llama-tiny', '--kv-heads', '3']]) {
      const r = await runCli(args);
      assert.equal(r.code, 4, args.join(' '));
      assert.ok(!/\n\s+at /.test(r.stderr), r.stderr);
    }
  });
});
