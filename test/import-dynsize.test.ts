/**
 * Issue 34: data-dependent sizes (`u0` from `nonzero`) read by dense masking
 * (plans/import/dynsize.ts; docs/import.md, "Data-dependent sizes"). A top-1 switch MLP routed
 * by nonzero, printed the way torch 2.x prints Megatron's legacy SwitchMLP (argmax router ->
 * eq(expert) -> nonzero -> x[nonzero] -> expert MLP -> index_put), forward and backward, on one
 * device and under tensor parallelism inside the experts over 2 ranks: the correct plan
 * VERIFIES; without the all-reduce of the switch-MLP output it is NOT EQUIVALENT with a witness.
 * Uses of u0 the dense form cannot justify are exit 2 naming the line and the construct.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FIXTURES, runCli } from './helpers.js';
import { checkRelations, importGraphs } from '../plans/import/plan.js';
import { loadPlanObject } from '../lineage/load.js';
import { executeLogical } from '../sdfg/execute.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import type { Dense } from '../ops/algebra.js';

const N = 4; // tokens
const H = 4; // hidden
const F = 8; // expert FFN width (single device)
const E = 2; // experts
const DEV = "device(type='cpu')";

interface Opts {
  /** Tensor-parallel degree inside the experts (1: the single-device graph). */
  readonly tp: number;
  /** Leave out the all-reduce of the switch-MLP output (Entangle's bug_missing_switchmlp_allreduce). */
  readonly noOutputReduce?: boolean;
  /**
   * Sequence parallel (Megatron's `sequence_parallel`, as Entangle's tp2 switch-MLP graphs): each
   * rank routes its own tokens, all-gathers the hidden states and the choices for the experts,
   * reduce-scatters their output; the router's weight gradient covers only the rank's tokens and
   * is all-reduced (finalize_model_grads).
   */
  readonly sp?: boolean;
  /** Leave out that all-reduce of the router's gradient (sequence parallel only). */
  readonly noRouterReduce?: boolean;
  /** Route by a [N, 1] mask, its positions' row column `nonzero(mask)[:, 0]` as the index (Megatron core's top-1 indices kept as a column). */
  readonly column?: boolean;
  /** Replace a line (a refusal test). */
  readonly edit?: (s: string) => string;
}

/** One program of the switch MLP as a joint forward + backward graph. */
function graph(o: Opts): string {
  const f = F / o.tp;
  const L: string[] = [];
  const s = (line: string): void => {
    L.push(`        ${line}`);
  };
  // The rank's own tokens (all of them but under sequence parallelism).
  const nl = o.sp === true ? N / 2 : N;
  const inputs = [`x_1: "f32[${nl}, ${H}]"`, `wr_1: "f32[${E}, ${H}]"`];
  for (let e = 0; e < E; e++) inputs.push(`w1_${e}: "f32[${f}, ${H}]"`, `w2_${e}: "f32[${H}, ${f}]"`);
  inputs.push(`tangents_1: "f32[${nl}, ${H}]"`);
  s('# File: megatron/legacy/model/transformer.py:262 in forward, code: route = self.router(hidden_states)');
  s(`t: "f32[${H}, ${E}]" = torch.ops.aten.t.default(wr_1)`);
  s(`mm: "f32[${nl}, ${E}]" = torch.ops.aten.mm.default(x_1, t)`);
  s(`_softmax: "f32[${nl}, ${E}]" = torch.ops.aten._softmax.default(mm, 1, False)`);
  s('# File: megatron/legacy/model/transformer.py:281 in forward, code: max_prob, max_ind = torch.max(route, dim=1)');
  s('max_1 = torch.ops.aten.max.dim(_softmax, 1)');
  s(`getitem: "f32[${nl}]" = max_1[0]`);
  s(`getitem_1: "i64[${nl}]" = max_1[1]`);
  s(`unsqueeze: "f32[${nl}, 1]" = torch.ops.aten.unsqueeze.default(getitem, 1)`);
  // The experts see every token: under sequence parallelism gathered, with their choices.
  const xs = o.sp === true ? 'xg' : 'x_1';
  const route = o.sp === true ? 'gidx' : 'getitem_1';
  if (o.sp === true) {
    s('# File: megatron/legacy/model/transformer.py:275 in forward, code: global_hidden_states = gather_from_sequence_parallel_region_to_moe(hidden_states)');
    s(`ag: "f32[${N}, ${H}]" = torch.ops._c10d_functional.all_gather_into_tensor.default(x_1, 2, '0')`);
    s(`xg: "f32[${N}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(ag)`);
    s(`ag_1: "i64[${N}]" = torch.ops._c10d_functional.all_gather_into_tensor.default(getitem_1, 2, '0')`);
    s(`gidx: "i64[${N}]" = torch.ops._c10d_functional.wait_tensor.default(ag_1)`);
  }
  s(`zeros_like: "f32[${N}, ${H}]" = torch.ops.aten.zeros_like.default(${xs}, pin_memory = False)`);
  let prev = 'zeros_like';
  // The index the selections use, and the extra dim x[nonzero] has ([u, 1, h]; none for the row column).
  const ix = (e: number): string => (o.column === true ? `rows_${e}` : `nonzero_${e}`);
  const mid = o.column === true ? '' : '1, ';
  for (let e = 0; e < E; e++) {
    const u = `u${e}`;
    s('# File: megatron/legacy/model/transformer.py:298 in forward, code: local_indices = (global_indices == local_expert_index).nonzero()');
    if (o.column === true) {
      s(`col_${e}: "i64[${N}, 1]" = torch.ops.aten.unsqueeze.default(${route}, 1)`);
      s(`eq_${e}: "b8[${N}, 1]" = torch.ops.aten.eq.Scalar(col_${e}, ${e})`);
      s(`nonzero_${e}: "i64[${u}, 2]" = torch.ops.aten.nonzero.default(eq_${e})`);
      s(`rows_${e}: "i64[${u}]" = torch.ops.aten.select.int(nonzero_${e}, 1, 0)`);
    } else {
      s(`eq_${e}: "b8[${N}]" = torch.ops.aten.eq.Scalar(${route}, ${e})`);
      s(`nonzero_${e}: "i64[${u}, 1]" = torch.ops.aten.nonzero.default(eq_${e})`);
    }
    s(`sym_size_int_${e}: "Sym(${u})" = torch.ops.aten.sym_size.int(nonzero_${e}, 0)`);
    s(`ge_${e}: "Sym(${u} >= 0)" = sym_size_int_${e} >= 0`);
    s(`_assert_scalar_${e} = torch.ops.aten._assert_scalar.default(ge_${e}, "Runtime assertion failed for expression ${u} >= 0 on node 'ge_${e}'");  ge_${e} = _assert_scalar_${e} = None`);
    s(`le_${e}: "Sym(${u} <= ${N})" = sym_size_int_${e} <= ${N}`);
    s(`_assert_scalar_le_${e} = torch.ops.aten._assert_scalar.default(le_${e}, "Runtime assertion failed for expression ${u} <= ${N} on node 'le_${e}'");  le_${e} = _assert_scalar_le_${e} = None`);
    s('# File: megatron/legacy/model/transformer.py:299 in forward, code: hidden = global_hidden_states[local_indices, :]');
    s(`index_${e}: "f32[${u}, ${mid}${H}]" = torch.ops.aten.index.Tensor(${xs}, [${ix(e)}])`);
    s('# File: megatron/legacy/model/transformer.py:300 in forward, code: output, output_bias = expert(hidden)');
    s(`view_${e}: "f32[${u}, ${H}]" = torch.ops.aten.view.default(index_${e}, [sym_size_int_${e}, ${H}])`);
    s(`t1_${e}: "f32[${H}, ${f}]" = torch.ops.aten.t.default(w1_${e})`);
    s(`mm1_${e}: "f32[${u}, ${f}]" = torch.ops.aten.mm.default(view_${e}, t1_${e})`);
    s(`gelu_${e}: "f32[${u}, ${f}]" = torch.ops.aten.gelu.default(mm1_${e})`);
    s(`t2_${e}: "f32[${f}, ${H}]" = torch.ops.aten.t.default(w2_${e})`);
    s(`mm2_${e}: "f32[${u}, ${H}]" = torch.ops.aten.mm.default(gelu_${e}, t2_${e})`);
    s(`view2_${e}: "f32[${u}, ${mid}${H}]" = torch.ops.aten.view.default(mm2_${e}, [sym_size_int_${e}, ${mid}${H}])`);
    s('# File: megatron/legacy/model/transformer.py:302 in forward, code: output_total[local_indices, :] = output');
    s(`put_${e}: "f32[${N}, ${H}]" = torch.ops.aten.index_put.default(${prev}, [${ix(e)}], view2_${e})`);
    prev = `put_${e}`;
  }
  let total = prev;
  if (o.sp === true) {
    s('# File: megatron/legacy/model/transformer.py:304 in forward, code: output_total = reduce_scatter_to_sequence_parallel_region_from_moe(output_total)');
    s(`rs: "f32[${nl}, ${H}]" = torch.ops._c10d_functional.reduce_scatter_tensor.default(${prev}, 'sum', 2, '0')`);
    s(`wait_tensor: "f32[${nl}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(rs)`);
    total = 'wait_tensor';
  } else if (o.tp > 1 && o.noOutputReduce !== true) {
    s('# File: megatron/core/tensor_parallel/mappings.py:485 in reduce_from_tensor_model_parallel_region, code: return _ReduceFromModelParallelRegion.apply(input_)');
    s(`all_reduce: "f32[${N}, ${H}]" = torch.ops._c10d_functional.all_reduce.default(${prev}, 'sum', '0')`);
    s(`wait_tensor: "f32[${N}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)`);
    total = 'wait_tensor';
  }
  s('# File: megatron/legacy/model/transformer.py:306 in forward, code: output_total = output_total * max_prob');
  s(`out: "f32[${nl}, ${H}]" = torch.ops.aten.mul.Tensor(${total}, unsqueeze)`);
  // The backward, as autograd records it.
  s(`mul_1: "f32[${nl}, ${H}]" = torch.ops.aten.mul.Tensor(tangents_1, unsqueeze)`);
  s(`mul_2: "f32[${nl}, ${H}]" = torch.ops.aten.mul.Tensor(tangents_1, ${total})`);
  s(`sum_1: "f32[${nl}, 1]" = torch.ops.aten.sum.dim_IntList(mul_2, [1], True)`);
  let gin = 'mul_1';
  if (o.sp === true) {
    s(`ag_2: "f32[${N}, ${H}]" = torch.ops._c10d_functional.all_gather_into_tensor.default(mul_1, 2, '0')`);
    s(`gout: "f32[${N}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(ag_2)`);
    gin = 'gout';
  }
  const dxs: string[] = [];
  for (let e = E - 1; e >= 0; e--) {
    const u = `u${e}`;
    if (e > 0) {
      // The gradient passed to the earlier expert's index_put: this expert's rows zeroed.
      s(`zz_${e}: "f32[${u}, ${mid}${H}]" = torch.ops.aten.zeros.default([sym_size_int_${e}, ${mid}${H}], dtype = torch.float32, device = ${DEV}, pin_memory = False)`);
      s(`gprev_${e}: "f32[${N}, ${H}]" = torch.ops.aten.index_put.default(${gin}, [${ix(e)}], zz_${e})`);
    }
    s(`gidx_${e}: "f32[${u}, ${mid}${H}]" = torch.ops.aten.index.Tensor(${gin}, [${ix(e)}])`);
    s(`gv_${e}: "f32[${u}, ${H}]" = torch.ops.aten.view.default(gidx_${e}, [sym_size_int_${e}, ${H}])`);
    s(`gm_${e}: "f32[${u}, ${f}]" = torch.ops.aten.mm.default(gv_${e}, w2_${e})`);
    s(`tg_${e}: "f32[${H}, ${u}]" = torch.ops.aten.t.default(gv_${e})`);
    s(`dw2_${e}: "f32[${H}, ${f}]" = torch.ops.aten.mm.default(tg_${e}, gelu_${e})`);
    s(`gb_${e}: "f32[${u}, ${f}]" = torch.ops.aten.gelu_backward.default(gm_${e}, mm1_${e})`);
    s(`gx_${e}: "f32[${u}, ${H}]" = torch.ops.aten.mm.default(gb_${e}, w1_${e})`);
    s(`tb_${e}: "f32[${f}, ${u}]" = torch.ops.aten.t.default(gb_${e})`);
    s(`dw1_${e}: "f32[${f}, ${H}]" = torch.ops.aten.mm.default(tb_${e}, view_${e})`);
    s(`gxv_${e}: "f32[${u}, ${mid}${H}]" = torch.ops.aten.view.default(gx_${e}, [sym_size_int_${e}, ${mid}${H}])`);
    s(`nz_${e}: "f32[${N}, ${H}]" = torch.ops.aten.new_zeros.default(gx_${e}, [${N}, ${H}], dtype = torch.float32, layout = torch.strided, device = ${DEV})`);
    s(`dx_${e}: "f32[${N}, ${H}]" = torch.ops.aten.index_put.default(nz_${e}, [${ix(e)}], gxv_${e}, True)`);
    dxs.push(`dx_${e}`);
    if (e > 0) gin = `gprev_${e}`;
  }
  s(`dxe: "f32[${N}, ${H}]" = torch.ops.aten.add.Tensor(${dxs[0] as string}, ${dxs[1] as string})`);
  let dxall = 'dxe';
  if (o.sp === true) {
    s(`rs_1: "f32[${nl}, ${H}]" = torch.ops._c10d_functional.reduce_scatter_tensor.default(dxe, 'sum', 2, '0')`);
    s(`wait_tensor_1: "f32[${nl}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(rs_1)`);
    dxall = 'wait_tensor_1';
  } else if (o.tp > 1) {
    s(`all_reduce_1: "f32[${N}, ${H}]" = torch.ops._c10d_functional.all_reduce.default(dxe, 'sum', '0')`);
    s(`wait_tensor_1: "f32[${N}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce_1)`);
    dxall = 'wait_tensor_1';
  }
  s(`squeeze: "f32[${nl}]" = torch.ops.aten.squeeze.dim(sum_1, 1)`);
  s(`new_zeros_r: "f32[${nl}, ${E}]" = torch.ops.aten.new_zeros.default(squeeze, [${nl}, ${E}], dtype = torch.float32, layout = torch.strided, device = ${DEV})`);
  s(`arange: "i64[${nl}]" = torch.ops.aten.arange.start(0, ${nl}, device = ${DEV}, pin_memory = False)`);
  s(`index_put_r: "f32[${nl}, ${E}]" = torch.ops.aten.index_put.default(new_zeros_r, [arange, getitem_1], squeeze, True)`);
  s(`sbd: "f32[${nl}, ${E}]" = torch.ops.aten._softmax_backward_data.default(index_put_r, _softmax, 1, torch.float32)`);
  s(`t_r: "f32[${E}, ${nl}]" = torch.ops.aten.t.default(sbd)`);
  s(`dwr: "f32[${E}, ${H}]" = torch.ops.aten.mm.default(t_r, x_1)`);
  let dwr = 'dwr';
  if (o.sp === true && o.noRouterReduce !== true) {
    s('# File: megatron/core/distributed/finalize_model_grads.py:75 in _allreduce_layernorm_grads, code: torch.distributed.all_reduce(coalesced, group=parallel_state.get_tensor_model_parallel_group())');
    s(`all_reduce_2: "f32[${E}, ${H}]" = torch.ops._c10d_functional.all_reduce.default(dwr, 'sum', '0')`);
    s(`dwr_total: "f32[${E}, ${H}]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce_2)`);
    dwr = 'dwr_total';
  }
  s(`dxr: "f32[${nl}, ${H}]" = torch.ops.aten.mm.default(sbd, wr_1)`);
  s(`dx: "f32[${nl}, ${H}]" = torch.ops.aten.add.Tensor(${dxall}, dxr)`);
  s(`return (out, ${dwr}, dx, dw1_0, dw2_0, dw1_1, dw2_1)`);
  const text = ['import torch', 'from torch import device', '', 'class joint(torch.nn.Module):', `    def forward(self, ${inputs.join(', ')}):`, ...L, ''].join('\n');
  return o.edit === undefined ? text : o.edit(text);
}

const RELATIONS = {
  format: 'planproof-relations/v1',
  mesh: { axes: [{ name: 'tp', size: 2 }] },
  inputs: {
    x_1: { placements: ['R'] },
    wr_1: { role: 'param', placements: ['R'] },
    w1_0: { role: 'param', placements: ['S(0)'] },
    w2_0: { role: 'param', placements: ['S(1)'] },
    w1_1: { role: 'param', placements: ['S(0)'] },
    w2_1: { role: 'param', placements: ['S(1)'] },
    tangents_1: { placements: ['R'] },
  },
  outputs: [
    { name: 'output', placements: ['R'] },
    { name: 'grad.router', placements: ['R'] },
    { name: 'grad.x', placements: ['R'] },
    { name: 'grad.w1_0', placements: ['S(0)'] },
    { name: 'grad.w2_0', placements: ['S(1)'] },
    { name: 'grad.w1_1', placements: ['S(0)'] },
    { name: 'grad.w2_1', placements: ['S(1)'] },
  ],
};

/** An import directory: the single-device graph, two ranks, relations. */
/** Sequence parallel: each rank's tokens (and their gradients) are its rows. */
const SP_RELATIONS = {
  ...RELATIONS,
  inputs: { ...RELATIONS.inputs, x_1: { placements: ['S(0)'] }, tangents_1: { placements: ['S(0)'] } },
  outputs: RELATIONS.outputs.map((x) => (x.name === 'output' || x.name === 'grad.x' ? { ...x, placements: ['S(0)'] } : x)),
};

function dir(rank: Opts, logical: Opts = { tp: 1 }): string {
  const d = mkdtempSync(join(tmpdir(), 'pp-dynsize-'));
  writeFileSync(join(d, 'logical.py'), graph(logical));
  writeFileSync(join(d, 'rank0.py'), graph(rank));
  writeFileSync(join(d, 'rank1.py'), graph(rank));
  writeFileSync(join(d, 'relations.json'), JSON.stringify(rank.sp === true ? SP_RELATIONS : RELATIONS, null, 1));
  return d;
}

async function imported(d: string): Promise<{ code: number; stderr: string; plan: string }> {
  const plan = join(d, 'plan.json');
  const r = await runCli(['import-graphs', '--dir', d, '-o', plan]);
  return { code: r.code, stderr: r.stderr, plan };
}

describe('import-graphs: data-dependent sizes (dense masking)', function () {
  this.timeout(300_000);

  it('a nonzero-routed switch MLP under TP inside the experts imports and VERIFIES', async () => {
    const imp = await imported(dir({ tp: 2 }));
    assert.equal(imp.code, 0, imp.stderr);
    // The runtime assertions on u0 and u1 (two per expert, three graphs) are dropped and counted.
    assert.match(imp.stderr, /12 runtime assertion\(s\) on data-dependent sizes dropped/);
    const ops = (JSON.parse(readFileSync(imp.plan, 'utf8')) as { logical: { ops: { op: string }[] } }).logical.ops.map((o) => o.op);
    // Both exits of the u world read only the selected rows: index_put as where, contractions over u masked.
    assert.ok(ops.filter((o) => o === 'where').length >= 2 * E + 2 * E, ops.join(' '));
    const v = await runCli(['verify', '--infer', '--jobs', '0', imp.plan]);
    assert.equal(v.code, 0, v.stdout + v.stderr);
    assert.match(v.stdout, /VERIFIED/);
  });

  it("under sequence parallelism (Entangle's switch-MLP layout at test widths) it VERIFIES; without the all-reduce of the router's gradient it is NOT EQUIVALENT at that gradient, with a witness", async () => {
    let imp = await imported(dir({ tp: 2, sp: true }));
    assert.equal(imp.code, 0, imp.stderr);
    let v = await runCli(['verify', '--infer', '--jobs', '0', imp.plan]);
    assert.equal(v.code, 0, v.stdout + v.stderr);
    assert.match(v.stdout, /VERIFIED/);
    imp = await imported(dir({ tp: 2, sp: true, noRouterReduce: true }));
    assert.equal(imp.code, 0, imp.stderr);
    v = await runCli(['verify', '--infer', '--jobs', '0', '--json', imp.plan]);
    assert.equal(v.code, 1, v.stdout + v.stderr);
    const rep = JSON.parse(v.stdout) as { verdict: string; firstFailing: { stage: number; tensor: string }; stages: { index: number; witness?: unknown[] }[] };
    assert.equal(rep.verdict, 'not_equivalent');
    assert.equal(rep.firstFailing.tensor, 'grad.router');
    assert.ok((rep.stages.find((x) => x.index === rep.firstFailing.stage)?.witness?.length ?? 0) > 0, 'a witness');
  });

  it('routed by a [N, 1] mask (its positions\' row column as the index) it VERIFIES too', async () => {
    const imp = await imported(dir({ tp: 2, column: true }, { tp: 1, column: true }));
    assert.equal(imp.code, 0, imp.stderr);
    const v = await runCli(['verify', '--infer', '--jobs', '0', imp.plan]);
    assert.equal(v.code, 0, v.stdout + v.stderr);
    assert.match(v.stdout, /VERIFIED/);
  });

  it('without the all-reduce of the switch-MLP output it is NOT EQUIVALENT, with a witness', async () => {
    const imp = await imported(dir({ tp: 2, noOutputReduce: true }));
    assert.equal(imp.code, 0, imp.stderr);
    const v = await runCli(['verify', '--infer', '--jobs', '0', '--json', imp.plan]);
    assert.equal(v.code, 1, v.stdout + v.stderr);
    const rep = JSON.parse(v.stdout) as { verdict: string; firstFailing: { stage: number; tensor: string; cause: string }; stages: { index: number; witness?: unknown[] }[] };
    assert.equal(rep.verdict, 'not_equivalent');
    assert.equal(rep.firstFailing.tensor, 'output');
    assert.match(rep.firstFailing.cause, /all-reduce \(sum\) over those ranks is missing/);
    const st = rep.stages.find((x) => x.index === rep.firstFailing.stage);
    assert.ok((st?.witness?.length ?? 0) > 0, 'a witness');
  });

  for (const column of [false, true])
  it(`the imported single-device graph computes PyTorch's numbers, forward and backward (tools/corpus/dynsize_switch_golden.py)${column ? ', routed by a [N, 1] mask' : ''}`, () => {
    // PyTorch ran Megatron's SwitchMLP code eagerly in float64 on these inputs (2 of 4 tokens
    // per expert, so each expert's dense form has 2 junk rows); every output of the plan's
    // logical graph, evaluated in Float64, must equal autograd's.
    const want = JSON.parse(readFileSync(`${FIXTURES}dynsize/switch-values.json`, 'utf8')) as Record<string, number[]>;
    assert.deepEqual(want['x-tokens-per-expert'], [2, 2]);
    const relations = checkRelations('relations.json', RELATIONS);
    const { plan: raw } = importGraphs({ logical: { name: 'logical.py', text: graph({ tp: 1, column }) }, ranks: [0, 1].map((r) => ({ name: `rank${r}.py`, text: graph({ tp: 2, column }) })), relations, relationsFile: 'relations.json' });
    const plan = loadPlanObject('switch', JSON.parse(JSON.stringify(raw)));
    const lg = plan.logical;
    const inputs: (Dense<number> | undefined)[] = [];
    for (const id of raw.contract.inputs) {
      const t = lg.tensors.id(id);
      const c = /^const\.(m?)([0-9]+)$/.exec(id);
      const data = c !== null ? [(c[1] === 'm' ? -1 : 1) * Number(c[2])] : want[id];
      assert.ok(data !== undefined, `no value for input '${id}'`);
      inputs[t] = { shape: lg.shapes[t] as readonly number[], data };
    }
    const vals = executeLogical(plan, floatAlgebra, inputs);
    assert.equal(raw.contract.outputs.length, 7);
    for (const o of raw.contract.outputs) {
      const got = (vals[lg.tensors.id(o)] as Dense<number>).data;
      const w = want[o] as number[];
      assert.equal(got.length, w.length, o);
      got.forEach((v, i) => assert.ok(Math.abs(v - (w[i] as number)) <= 1e-9 * Math.max(1, Math.abs(w[i] as number)), `${o}[${i}]: planproof ${v}, PyTorch ${w[i]}`));
    }
  });

  it('a selection named as an output or as an assumption is refused (its junk rows would be read)', async () => {
    const d = dir({ tp: 2 });
    const out = { ...RELATIONS, outputs: [{ name: 'output', node: 'out', placements: ['R'] }, { name: 'h', node: 'gelu_0', placements: ['R'] }] };
    writeFileSync(join(d, 'relations.json'), JSON.stringify(out));
    let imp = await imported(d);
    assert.equal(imp.code, 2, imp.stderr);
    assert.match(imp.stderr, /output 'h': node 'gelu_0' of \S*logical\.py is the dense form of a tensor whose size depends on the data \(u0\)/);
    writeFileSync(join(d, 'relations.json'), JSON.stringify({ ...RELATIONS, inputs: { ...RELATIONS.inputs, gelu_0: { placements: ['R'] } } }));
    imp = await imported(d);
    assert.equal(imp.code, 2, imp.stderr);
    assert.match(imp.stderr, /logical\.py:\d+: 'gelu_0' is named in the relations' "inputs" but its size depends on the data \(u0\)/);
  });

  it("the other dense uses compute PyTorch's numbers: a sum over the selected rows, a scalar written into them, softmax and mean along another dim", () => {
    // x[local_indices, :] of rows routed to expert 0 by an argmax (one of four selected, three junk rows).
    const text = [
      'import torch',
      'class rowops(torch.nn.Module):',
      '    def forward(self, x_1: "f32[4, 3]", w_1: "f32[3, 2]"):',
      '        mm: "f32[4, 2]" = torch.ops.aten.mm.default(x_1, w_1)',
      '        max_1 = torch.ops.aten.max.dim(mm, 1)',
      '        getitem_1: "i64[4]" = max_1[1]',
      '        eq: "b8[4]" = torch.ops.aten.eq.Scalar(getitem_1, 0)',
      '        nonzero: "i64[u0, 1]" = torch.ops.aten.nonzero.default(eq)',
      '        index: "f32[u0, 1, 3]" = torch.ops.aten.index.Tensor(x_1, [nonzero])',
      '        rowsum: "f32[1, 3]" = torch.ops.aten.sum.dim_IntList(index, [0])',
      '        scalar_tensor: "f32[]" = torch.ops.aten.scalar_tensor.default(0.5, dtype = torch.float32)',
      '        put: "f32[4, 3]" = torch.ops.aten.index_put.default(x_1, [nonzero], scalar_tensor)',
      '        _softmax: "f32[u0, 1, 3]" = torch.ops.aten._softmax.default(index, -1, False)',
      '        zeros_like: "f32[4, 3]" = torch.ops.aten.zeros_like.default(x_1, pin_memory = False)',
      '        soft: "f32[4, 3]" = torch.ops.aten.index_put.default(zeros_like, [nonzero], _softmax)',
      '        mean: "f32[u0, 1, 1]" = torch.ops.aten.mean.dim(index, [2], True)',
      '        new_zeros: "f32[4, 1]" = torch.ops.aten.new_zeros.default(x_1, [4, 1], dtype = torch.float32, layout = torch.strided)',
      '        meanp: "f32[4, 1]" = torch.ops.aten.index_put.default(new_zeros, [nonzero], mean)',
      '        return (rowsum, put, soft, meanp)',
      '',
    ].join('\n');
    const want = JSON.parse(readFileSync(`${FIXTURES}dynsize/rowops-values.json`, 'utf8')) as Record<string, number[]>;
    assert.deepEqual(want['x-selected'], [2]);
    const relations = checkRelations('relations.json', {
      format: 'planproof-relations/v1',
      mesh: { axes: [{ name: 'tp', size: 2 }] },
      inputs: { x_1: { placements: ['R'] }, w_1: { placements: ['R'] } },
      outputs: ['o.rowsum', 'o.put', 'o.soft', 'o.mean'].map((name) => ({ name, placements: ['R'] })),
    });
    const file = (name: string): { name: string; text: string } => ({ name, text });
    const { plan: raw } = importGraphs({ logical: file('logical.py'), ranks: [file('rank0.py'), file('rank1.py')], relations, relationsFile: 'relations.json' });
    const plan = loadPlanObject('rowops', JSON.parse(JSON.stringify(raw)));
    const lg = plan.logical;
    const inputs: (Dense<number> | undefined)[] = [];
    for (const id of raw.contract.inputs) {
      const t = lg.tensors.id(id);
      const c = /^const\.(m?)([0-9]+)$/.exec(id);
      const data = c !== null ? [(c[1] === 'm' ? -1 : 1) * Number(c[2])] : want[id];
      assert.ok(data !== undefined, `no value for input '${id}'`);
      inputs[t] = { shape: lg.shapes[t] as readonly number[], data };
    }
    const vals = executeLogical(plan, floatAlgebra, inputs);
    for (const [o, key] of [['o.rowsum', 'rowsum'], ['o.put', 'put'], ['o.soft', 'soft'], ['o.mean', 'mean']] as const) {
      const got = (vals[lg.tensors.id(o)] as Dense<number>).data;
      const w = want[key] as number[];
      assert.equal(got.length, w.length, o);
      got.forEach((v, i) => assert.ok(Math.abs(v - (w[i] as number)) <= 1e-12, `${o}[${i}]: planproof ${v}, PyTorch ${w[i]}`));
    }
  });

  it("a [N, 1] mask's two-column positions used as one index are refused (they would also gather row 0)", async () => {
    const bad = (t: string): string => t.replace('index_0: "f32[u0, 4]" = torch.ops.aten.index.Tensor(x_1, [rows_0])', 'index_0: "f32[u0, 2, 4]" = torch.ops.aten.index.Tensor(x_1, [nonzero_0])');
    const imp = await imported(dir({ tp: 2, column: true }, { tp: 1, column: true, edit: bad }));
    assert.equal(imp.code, 2, imp.stderr);
    assert.match(imp.stderr, /logical\.py:\d+: aten\.index\.Tensor: the positions of a \[N, 1\] mask \(two columns: row, column\) used as one index/);
  });

  it('softmax along the data-dependent dim is refused naming the line and the construct', async () => {
    const bad = (s: string): string => s.replace('gelu_0: "f32[u0, 8]" = torch.ops.aten.gelu.default(mm1_0)', 'gelu_0: "f32[u0, 8]" = torch.ops.aten._softmax.default(mm1_0, 0, False)');
    const d = dir({ tp: 2 }, { tp: 1, edit: bad });
    const imp = await imported(d);
    assert.equal(imp.code, 2, imp.stderr);
    assert.match(imp.stderr, /logical\.py:\d+: aten\._softmax\.default along the data-dependent dim \(u0\) mixes the selected rows/);
    assert.match(imp.stderr, /at megatron\/legacy\/model\/transformer\.py:300/);
  });

  it('a sum over the selected rows reads only them; a mean over them, a collective on them and a view that moves them are refused', async () => {
    const cases: [string, string, RegExp][] = [
      ['dw2_0: "f32[4, 8]" = torch.ops.aten.mm.default(tg_0, gelu_0)', 'dw2_0: "f32[4, 8]" = torch.ops.aten.mean.dim(gelu_0, [0], True)', /mean\.dim over the data-dependent dim \(u0\) divides by the number of selected rows/],
      ['gelu_0: "f32[u0, 8]" = torch.ops.aten.gelu.default(mm1_0)', 'gelu_0: "f32[u0, 8]" = torch.ops._c10d_functional.all_reduce.default(mm1_0, \'sum\', \'0\')', /all_reduce\.default reads a tensor whose size depends on the data/],
      ['mm1_0: "f32[u0, 8]" = torch.ops.aten.mm.default(view_0, t1_0)', 'mm1_0: "f32[u0, 8]" = torch.ops.aten.mm.default(view_0, t1_0)\n        bad: "f32[4, 4]" = torch.ops.aten.view.default(view_0, [4, 4])', /a view that does not keep the data-dependent dim \(u0\) leading/],
    ];
    for (const [from, to, re] of cases) {
      const bad = (s: string): string => {
        assert.ok(s.includes(from), from);
        return s.replace(from, to);
      };
      const imp = await imported(dir({ tp: 2 }, { tp: 1, edit: bad }));
      assert.equal(imp.code, 2, `${to}: ${imp.stderr}`);
      assert.match(imp.stderr, re);
    }
  });
});
