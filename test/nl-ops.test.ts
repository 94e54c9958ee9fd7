/**
 * NLP / speech ops (plans/import/aten-nl.ts) against values torch 1.13 computed once in float64
 * (`torch.ops.aten.<op>` on the inputs below; embedded here): weight norm and its backward on
 * dim 0 and on the last dim, glu and glu_backward, var_mean / std / var / logsumexp, gather and
 * scatter_add along a dim other than the last, stable sort; and `_ctc_loss` refused with what to
 * do. Small graphs run in Float64 by planproof's executor. The captures of
 * examples/torch/wavenet_vocoder_ddp.py and roberta_bucket_ddp.py check the same rules in whole
 * programs (test/capture.test.ts, golden check).
 */
import { strict as assert } from 'node:assert';
import { close, graph, runGraph as run } from './one-graph.js';




describe('weight norm (torch.nn.utils.weight_norm): the fused interface and its backward', () => {
  // torch: v = [[1, 2, 2], [0.5, -1, 3]], g = [[2], [-1.5]], grad_w = [[0.3, -0.2, 1], [0.7, 0.1, -0.4]].
  const V = [1, 2, 2, 0.5, -1, 3];
  const GW = [0.3, -0.2, 1, 0.7, 0.1, -0.4];
  const want = {
    w: [0.666666666666667, 1.333333333333333, 1.333333333333333, -0.234260642832909, 0.468521285665818, -1.405563856997455],
    n: [3.0, 3.201562118716424],
    gv: [0.059259259259259, -0.414814814814815, 0.385185185185185, -0.349676861984733, -0.003428204529262, 0.057136742154368],
    gg: [0.633333333333333, -0.296730147588352],
  };
  it('dim 0 (nn.Conv1d / nn.Linear weights): w = v·g/‖v‖ row-wise, and grad_v, grad_g', () => {
    const text = graph('v: "f64[2, 3]", g: "f64[2, 1]", gw: "f64[2, 3]"', [
      'wn = torch.ops.aten._weight_norm_interface.default(v, g)',
      'w: "f64[2, 3]" = wn[0]',
      'n: "f64[2, 1]" = wn[1]',
      'b = torch.ops.aten._weight_norm_interface_backward.default(gw, v, g, n, 0)',
      'gv: "f64[2, 3]" = b[0]',
      'gg: "f64[2, 1]" = b[1]',
      'return (w, n, gv, gg)',
    ]);
    const [w, n, gv, gg] = run(text, { v: V, g: [2, -1.5], gw: GW }, ['w', 'n', 'gv', 'gg']);
    close(w as number[], want.w, 'w');
    close(n as number[], want.n, 'norm');
    close(gv as number[], want.gv, 'grad_v');
    close(gg as number[], want.gg, 'grad_g');
  });
  it('the last dim: the same numbers transposed', () => {
    const t = (a: readonly number[]): number[] => [a[0], a[3], a[1], a[4], a[2], a[5]] as number[];
    const text = graph('v: "f64[3, 2]", g: "f64[1, 2]", gw: "f64[3, 2]"', [
      'wn = torch.ops.aten._weight_norm_interface.default(v, g, 1)',
      'w: "f64[3, 2]" = wn[0]',
      'n: "f64[1, 2]" = wn[1]',
      'b = torch.ops.aten._weight_norm_interface_backward.default(gw, v, g, n, 1)',
      'gv: "f64[3, 2]" = b[0]',
      'gg: "f64[1, 2]" = b[1]',
      'return (w, gv, gg)',
    ]);
    const [w, gv, gg] = run(text, { v: t(V), g: [2, -1.5], gw: t(GW) }, ['w', 'gv', 'gg']);
    close(w as number[], t(want.w), 'w');
    close(gv as number[], t(want.gv), 'grad_v');
    close(gg as number[], want.gg, 'grad_g');
  });
});

describe('gated units, hand-written norms, logsumexp', () => {
  it('glu along dim 1 and glu_backward', () => {
    // torch: x = [[0.5, -1, 2, 0.25], [1.5, 0, -0.5, 3]], grad = [[1, -2], [0.5, 0.25]].
    const text = graph('x: "f64[2, 4]", gy: "f64[2, 2]"', ['y: "f64[2, 2]" = torch.ops.aten.glu.default(x, 1)', 'gx: "f64[2, 4]" = torch.ops.aten.glu_backward.default(gy, x, 1)', 'return (y, gx)']);
    const [y, gx] = run(text, { x: [0.5, -1, 2, 0.25, 1.5, 0, -0.5, 3], gy: [1, -2, 0.5, 0.25] }, ['y', 'gx']);
    close(y as number[], [0.440398538988941, -0.562176500885798, 0.566311003197218, 0.0], 'glu');
    close(gx as number[], [0.880797077977882, -1.124353001771596, 0.052496792701753, 0.492268165475197, 0.188770334399073, 0.238143531705608, 0.176252784151196, 0.0], 'glu_backward');
  });
  it('var_mean (correction 0), std (correction 1), var of everything, logsumexp kept and not', () => {
    // torch: x = [[1, 2, 4], [-1, 0.5, 3]].
    const text = graph('x: "f64[2, 3]"', [
      'vm = torch.ops.aten.var_mean.correction(x, [1], correction = 0, keepdim = True)',
      'v: "f64[2, 1]" = vm[0]',
      'm: "f64[2, 1]" = vm[1]',
      's: "f64[2, 1]" = torch.ops.aten.std.correction(x, [1], correction = 1, keepdim = True)',
      'va: "f64[]" = torch.ops.aten.var.correction(x)',
      'l: "f64[2, 1]" = torch.ops.aten.logsumexp.default(x, [1], True)',
      'l0: "f64[3]" = torch.ops.aten.logsumexp.default(x, [0])',
      'return (v, m, s, va, l, l0)',
    ]);
    const [v, m, s, va, l, l0] = run(text, { x: [1, 2, 4, -1, 0.5, 3] }, ['v', 'm', 's', 'va', 'l', 'l0']);
    close(v as number[], [1.555555555555555, 2.722222222222223], 'var');
    close(m as number[], [2.333333333333333, 0.833333333333333], 'mean');
    close(s as number[], [1.527525231651947, 2.02072594216369], 'std');
    close(va as number[], [3.241666666666667], 'var (all, unbiased)');
    close(l as number[], [4.169846019556286, 3.095674329414382], 'logsumexp dim 1');
    close(l0 as number[], [1.126928011042973, 2.201413277982752, 4.313261687518223], 'logsumexp dim 0');
  });
  it('a var over one element with correction 1 is refused (torch gives nan)', () => {
    const text = graph('x: "f64[2, 1]"', ['v: "f64[2]" = torch.ops.aten.var.correction(x, [1])', 'return (v,)']);
    assert.throws(() => run(text, { x: [1, 2] }, ['v']), /1 elements with correction 1/);
  });
});

describe('gather / scatter_add along a dim other than the last, stable sort', () => {
  it('lprobs.gather(1, target.unsqueeze(1)) on [B, C, T] and its backward scatter_add', () => {
    // torch: lp = [[[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]], idx = [[[2, 0]]]; scatter_add of [[[1.5, -2]]] into zeros.
    const text = graph('lp: "f64[1, 3, 2]", idx: "i64[1, 1, 2]", g: "f64[1, 1, 2]", z: "f64[1, 3, 2]"', [
      'y: "f64[1, 1, 2]" = torch.ops.aten.gather.default(lp, 1, idx)',
      's: "f64[1, 3, 2]" = torch.ops.aten.scatter_add.default(z, 1, idx, g)',
      'return (y, s)',
    ]);
    const [y, s] = run(text, { lp: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], idx: [2, 0], g: [1.5, -2], z: [0, 0, 0, 0, 0, 0] }, ['y', 's'], ['idx']);
    close(y as number[], [0.5, 0.2], 'gather');
    close(s as number[], [0, -2, 0, 0, 1.5, 0], 'scatter_add');
  });
  for (const descending of [true, false]) {
    it(`torch.sort(stable=True, descending=${descending}) with ties keeps their order`, () => {
      // torch: sort([3, 6, 3, 5, 6], stable=True, descending=True) = [6, 6, 5, 3, 3], [1, 4, 3, 0, 2]; ascending [3, 3, 5, 6, 6], [0, 2, 3, 1, 4].
      const text = graph('x: "i64[5]"', [`s = torch.ops.aten.sort.stable(x, stable = True, descending = ${descending ? 'True' : 'False'})`, 'v: "i64[5]" = s[0]', 'i: "i64[5]" = s[1]', 'return (v, i)']);
      const [v, i] = run(text, { x: [3, 6, 3, 5, 6] }, ['v', 'i'], ['x']);
      assert.deepEqual(v, descending ? [6, 6, 5, 3, 3] : [3, 3, 5, 6, 6]);
      assert.deepEqual(i, descending ? [1, 4, 3, 0, 2] : [0, 2, 3, 1, 4]);
    });
  }
  it('torch.sort without stable=True is refused (ties in unspecified order)', () => {
    const text = graph('x: "i64[5]"', ['s = torch.ops.aten.sort.default(x)', 'v: "i64[5]" = s[0]', 'return (v,)']);
    assert.throws(() => run(text, { x: [3, 6, 3, 5, 6] }, ['v'], ['x']), /without stable=True/);
  });
});

describe('CTC loss: no exact rule, refused with what to do', () => {
  it('_ctc_loss names the way to proceed', () => {
    const text = graph('lp: "f32[3, 1, 4]", t: "i64[1, 2]"', ['c = torch.ops.aten._ctc_loss.Tensor(lp, t, [3], [2], 0, False)', 'l: "f32[1]" = c[0]', 'return (l,)']);
    assert.throws(() => run(text, { lp: Array.from({ length: 12 }, () => 0), t: [1, 2] }, ['l'], ['t']), /F\.ctc_loss has no exact rule[\s\S]*To proceed/);
  });
});

describe('mv and dot (`x @ w` with a 1-D `w`; what autograd emits for its backward)', () => {
  it('mv, its backward (the outer product as a broadcast product, mv of the transpose) and dot, exactly', () => {
    // A = [[1, 2], [3, 4], [5, 6]], v = [1, -1], g = [0.5, 1, -2]: A v = [-1, -1, -1];
    // grad_A = g ⊗ v = [[0.5, -0.5], [1, -1], [-2, 2]]; grad_v = Aᵀ g = [-6.5, -7]; dot(v, v) = 2.
    const text = graph('a: "f64[3, 2]", v: "f64[2]", g: "f64[3]"', [
      'y: "f64[3]" = torch.ops.aten.mv.default(a, v)',
      'gu: "f64[3, 1]" = torch.ops.aten.unsqueeze.default(g, 1)',
      'ga: "f64[3, 2]" = torch.ops.aten.mul.Tensor(gu, v)',
      't: "f64[2, 3]" = torch.ops.aten.t.default(a)',
      'gv: "f64[2]" = torch.ops.aten.mv.default(t, g)',
      'd: "f64[]" = torch.ops.aten.dot.default(v, v)',
      'return (y, ga, gv, d)',
    ]);
    const [y, ga, gv, d] = run(text, { a: [1, 2, 3, 4, 5, 6], v: [1, -1], g: [0.5, 1, -2] }, ['y', 'ga', 'gv', 'd']);
    close(y as number[], [-1, -1, -1], 'mv');
    close(ga as number[], [0.5, -0.5, 1, -1, -2, 2], 'grad_A');
    close(gv as number[], [-6.5, -7], 'grad_v');
    close(d as number[], [2], 'dot');
  });
});
