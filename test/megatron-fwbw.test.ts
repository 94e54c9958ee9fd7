/**
 * Issue 34, acceptance: the megatron-fx corpus as AOTAutograd partitions it (forward and
 * backward graphs, apex LayerNorm, vocab-parallel masking, saved activations that differ per
 * side) at tp 2 and 4 with sequence parallelism and 1 and 2 layers, each with its two bug
 * twins (tools/corpus/megatron_fx.py; test/fixtures/megatron-fx/README.md): correct configs
 * VERIFIED at the default limits, twins NOT EQUIVALENT only at the gradients their bug breaks.
 * Also the two inference rules these configs needed (docs/engine.md, "Cut points in logical
 * order", "Rounds after a certificate end within 20 s").
 */
import { strict as assert } from 'node:assert';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { loadPlanObject } from '../lineage/load.js';
import { inferClaims } from '../stages/infer/infer.js';
import { logicalOrder } from '../sdfg/execute.js';

const CORPUS = 'test/fixtures/megatron-fx';

async function imported(config: string): Promise<string> {
  const d = mkdtempSync(join(tmpdir(), 'pp-mfx-'));
  cpSync(join(CORPUS, config), d, { recursive: true });
  const out = join(d, 'plan.json');
  const r = await runCli(['import-graphs', '--dir', d, '-o', out]);
  assert.equal(r.code, 0, r.stderr);
  return out;
}

interface Report {
  verdict: string;
  stages: { status: string; logical: string; reason?: string }[];
}

async function verify(plan: string): Promise<{ code: number; rep: Report }> {
  // The default limits, as a user runs it (and no cache: every stage is proved here).
  const v = await runCli(['verify', '--infer', '--no-cache', '--no-answer-cache', '--json', plan]);
  return { code: v.code, rep: JSON.parse(v.stdout) as Report };
}

/** The gradients of a config's LayerNorms (every layer's two and the final one). */
function layerNorms(layers: number): string[] {
  const mods = [...Array(layers).keys()].flatMap((l) => [`decoder.layers.${l}.input_layernorm`, `decoder.layers.${l}.pre_mlp_layernorm`]).concat('decoder.final_layernorm');
  return mods.flatMap((m) => [`grad.${m}.weight`, `grad.${m}.bias`]);
}

describe('megatron-fx forward + backward at tp 2 and 4, 1 and 2 layers, with bug twins (issue 34)', function () {
  this.timeout(1_200_000);

  it("no inferred cut point is claimed for a logical tensor computed after one of its consumers' (Megatron's per-head value gradient at tp 4)", async () => {
    const raw = JSON.parse(readFileSync(await imported('gpt_tp4_l1_fwbw'), 'utf8')) as Record<string, unknown>;
    const plan = loadPlanObject('plan.json', raw);
    const lg = plan.logical;
    const topo = new Int32Array(lg.tensors.size).fill(-1);
    logicalOrder(plan).forEach((op, i) => {
      for (const x of lg.ops.opOutputs(op)) topo[x] = i;
    });
    const r = inferClaims(plan);
    assert.ok(r.claims.length > 500, `${r.claims.length} claims`);
    let checked = 0;
    plan.programs.forEach((p, pi) => {
      const claimed = new Map<number, number>();
      for (const c of r.claims) if (c.program === pi) claimed.set(p.tensors.id(c.tensor), lg.tensors.id(c.logical));
      for (let op = 0; op < p.ops.size; op++) {
        for (const x of p.ops.opInputs(op)) {
          const Lx = claimed.get(x);
          if (Lx === undefined) continue;
          for (const u of p.ops.opOutputs(op)) {
            const Lu = claimed.get(u) ?? (p.lineage[u]?.logical);
            if (Lu === undefined) continue;
            checked++;
            assert.ok((topo[Lx] as number) <= (topo[Lu] as number), `${p.name}: '${p.tensors.name(x)}' is claimed for ${lg.tensors.name(Lx)}, after ${lg.tensors.name(Lu)} that its consumer '${p.tensors.name(u)}' is claimed for`);
          }
        }
      }
    });
    assert.ok(checked > 500, `${checked} claimed pairs`);
    // The value gradient of rank 0's head: the strided block of the logical one, or no claim.
    const t14 = r.claims.find((c) => c.program === 0 && c.tensor === 'g1:transpose_14');
    assert.ok(t14 === undefined || !/^g1:view_/.test(t14.logical), JSON.stringify(t14));
  });

  it('switchmlp_tp2 (top-1 SwitchMLP joint graph) VERIFIED at the default limits; its twin without the router-gradient all-reduce NOT EQUIVALENT at grad.mlp.router.weight', async () => {
    // (UNKNOWN before: the striped-slice search tried every combination of the zero rows' matches, 163 s of 184)
    const ok = await verify(await imported('switchmlp_tp2'));
    assert.equal(ok.code, 0, JSON.stringify(ok.rep.stages.filter((s) => s.status !== 'proved').slice(0, 3)));
    const bad = await verify(await imported('switchmlp_tp2.bug_router_grad'));
    assert.equal(bad.code, 1);
    assert.deepEqual(bad.rep.stages.filter((s) => s.status === 'not_equivalent').map((s) => s.logical), ['grad.mlp.router.weight']);
  });

  for (const [config, layers] of [['gpt_tp2_l2_fwbw', 2], ['gpt_tp4_l1_fwbw', 1], ['gpt_tp4_l2_fwbw', 2]] as const) {
    it(`${config}: VERIFIED at the default limits, every gradient proved @full`, async () => {
      const { code, rep } = await verify(await imported(config));
      assert.equal(code, 0, JSON.stringify(rep.stages.filter((s) => s.status !== 'proved').slice(0, 3)));
      for (const g of [...layerNorms(layers), 'grad.output_layer.weight', 'grad.embedding.word_embeddings.weight']) assert.ok(rep.stages.some((s) => s.logical === g && s.status === 'proved'), g);
    });

    it(`${config}.bug_sp_ln_grad (no SP LayerNorm-gradient all-reduce): NOT EQUIVALENT only at LayerNorm and row-parallel bias gradients @full`, async () => {
      const { code, rep } = await verify(await imported(`${config}.bug_sp_ln_grad`));
      assert.equal(code, 1);
      const biases = [...Array(layers).keys()].flatMap((l) => [`grad.decoder.layers.${l}.self_attention.linear_proj.bias`, `grad.decoder.layers.${l}.mlp.linear_fc2.bias`]);
      const wrong = new Set([...layerNorms(layers), ...biases]);
      const failing = rep.stages.filter((s) => s.status === 'not_equivalent').map((s) => s.logical);
      assert.ok(failing.length > 0 && failing.every((g) => wrong.has(g)), failing.join(', '));
      // The hint rounds stopped 20 s after the certificate (before: every round ran to the
      // 120 s limit, and the stages left were "not attempted" for that limit).
      const open = rep.stages.filter((s) => s.status === 'unknown');
      assert.ok(open.some((s) => /^not attempted: the plan is already refuted/.test(s.reason ?? '')), JSON.stringify(open.slice(0, 2)));
      assert.ok(!open.some((s) => /own limit of 120 s/.test(s.reason ?? '')), JSON.stringify(open.filter((s) => /120 s/.test(s.reason ?? '')).slice(0, 2)));
    });

    it(`${config}.bug_vocab_input_grad (the output layer's input gradient not all-reduced): NOT EQUIVALENT only upstream of the output layer @full`, async () => {
      const { code, rep } = await verify(await imported(`${config}.bug_vocab_input_grad`));
      assert.equal(code, 1);
      const failing = rep.stages.filter((s) => s.status === 'not_equivalent').map((s) => s.logical);
      assert.ok(failing.length > 0 && failing.every((g) => g.startsWith('grad.') && g !== 'grad.output_layer.weight'), failing.join(', '));
    });
  }
});
