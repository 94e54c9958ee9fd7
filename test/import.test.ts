/**
 * Issue 15, part 3 and 4: exported per-rank ATen graphs (torch 2.x GraphModule prints) to a
 * plan. The hand-exported TP2 MLP (forward, backward, SGD step) verifies; its twin without the
 * all-reduce is refuted; unsupported ops and bad relations are exit 2 naming the op / tensor.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXAMPLES, runCli } from './helpers.js';
import { parseFxGraph, ImportError } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';

const TP2 = `${EXAMPLES}torch/exported/tp2-mlp`;

/** A copy of the TP2 example with `edit` applied to one of its files. */
function variant(file: string, edit: (s: string) => string): string {
  const d = mkdtempSync(join(tmpdir(), 'pp-import-'));
  cpSync(TP2, d, { recursive: true });
  writeFileSync(join(d, file), edit(readFileSync(join(d, file), 'utf8')));
  return d;
}

describe('import-graphs (exported ATen graphs)', function () {
  this.timeout(120_000);

  it('an all-reduce exported as reduce_scatter_tensor + all_gather_into_tensor imports with the group size in the shapes and VERIFIES', async () => {
    // Before: both collectives were shaped as if the group had one member, so the graph's own
    // annotations ([2, 8] scattered, [4, 8] gathered) were refused.
    const d = mkdtempSync(join(tmpdir(), 'pp-import-'));
    cpSync(TP2, d, { recursive: true });
    for (const f of ['rank0.py', 'rank1.py']) {
      const src = readFileSync(join(d, f), 'utf8');
      const ar = `all_reduce: "f32[4, 8]" = torch.ops._c10d_functional.all_reduce.default(mm_1, 'sum', '0');  mm_1 = None`;
      assert.ok(src.includes(ar), f);
      writeFileSync(join(d, f), src.replace(ar, `rs: "f32[2, 8]" = torch.ops._c10d_functional.reduce_scatter_tensor.default(mm_1, 'sum', 2, '0');  mm_1 = None\n        all_reduce: "f32[4, 8]" = torch.ops._c10d_functional.all_gather_into_tensor.default(rs, 2, '0');  rs = None`));
    }
    const out = join(d, 'plan.json');
    const imp = await runCli(['import-graphs', '--dir', d, '-o', out]);
    assert.equal(imp.code, 0, imp.stderr);
    const ops = (JSON.parse(readFileSync(out, 'utf8')) as { parallel: { programs: { ops: { op: string }[] }[] } }).parallel.programs.flatMap((p) => p.ops.map((o) => o.op));
    assert.ok(ops.includes('reduce_scatter') && ops.includes('all_gather') && !ops.includes('all_reduce'));
    const v = await runCli(['verify', '--infer', '--jobs', '0', out]);
    assert.equal(v.code, 0, v.stdout);
  });

  it('the hand-exported TP2 MLP (forward + backward + SGD) imports and VERIFIES', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'pp-import-')), 'plan.json');
    const imp = await runCli(['import-graphs', '--dir', TP2, '-o', out]);
    assert.equal(imp.code, 0, imp.stderr);
    assert.match(imp.stderr, /imported 70 ATen ops from 3 graphs/);
    const plan = JSON.parse(readFileSync(out, 'utf8')) as { parallel: { programs: { ops: { op: string; group?: unknown }[] }[] } };
    const ars = plan.parallel.programs.map((p) => p.ops.filter((o) => o.op === 'all_reduce'));
    assert.deepEqual(ars.map((a) => a.map((o) => o.group)), [[{ axes: ['tp'] }], [{ axes: ['tp'] }]]);
    const v = await runCli(['verify', '--infer', '--jobs', '0', out]);
    assert.equal(v.code, 0, v.stdout);
    assert.match(v.stdout, /VERIFIED/);
  });

  it('the same MLP with the all-reduce removed is NOT EQUIVALENT, at the loss', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'pp-import-')), 'plan.json');
    const imp = await runCli(['import-graphs', '--dir', `${EXAMPLES}torch/exported/tp2-mlp-no-allreduce`, '-o', out]);
    assert.equal(imp.code, 0, imp.stderr);
    const v = await runCli(['verify', '--infer', '--jobs', '0', out]);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /NOT EQUIVALENT: stage \d+ \(loss, op 'return.loss'\)/);
    assert.match(v.stdout, /witness: rank [01] 'return.loss' holds/);
  });

  it("AOTAutograd's forward and backward graphs per rank, chained by the saved tensors' names, VERIFY; without the all-reduce NOT EQUIVALENT", async () => {
    for (const [d, code] of [['tp2-mlp-aot', 0], ['tp2-mlp-aot-no-allreduce', 1]] as const) {
      const out = join(mkdtempSync(join(tmpdir(), 'pp-import-')), 'plan.json');
      const imp = await runCli(['import-graphs', '--dir', `${EXAMPLES}torch/exported/${d}`, '-o', out]);
      assert.equal(imp.code, 0, imp.stderr);
      assert.match(imp.stderr, /from 6 graphs/);
      const v = await runCli(['verify', '--infer', '--jobs', '0', out]);
      assert.equal(v.code, code, v.stdout);
      if (code === 1) assert.match(v.stdout, /NOT EQUIVALENT: stage \d+ \(loss, op 'return.loss'\)/);
    }
    // The same files named on the command line: FW,BW per program.
    const base = `${EXAMPLES}torch/exported/tp2-mlp-aot`;
    const r = await runCli(['import-graphs', '--logical', `${base}/logical.0.py,${base}/logical.1.py`, '--rank', `0=${base}/rank0.0.py,${base}/rank0.1.py`, '--rank', `1=${base}/rank1.0.py,${base}/rank1.1.py`, '--relations', `${base}/relations.json`, '-o', join(mkdtempSync(join(tmpdir(), 'pp-import-')), 'p.json')]);
    assert.equal(r.code, 0, r.stderr);
  });

  it('an output relation on a None return, or a saved tensor of another shape, is exit 2', async () => {
    const aot = `${EXAMPLES}torch/exported/tp2-mlp-aot`;
    const copy = (file: string, edit: (s: string) => string): string => {
      const d = mkdtempSync(join(tmpdir(), 'pp-import-'));
      cpSync(aot, d, { recursive: true });
      writeFileSync(join(d, file), edit(readFileSync(join(d, file), 'utf8')));
      return d;
    };
    const none = copy('relations.json', (s) => {
      const j = JSON.parse(s) as { outputs: unknown[] };
      j.outputs[10] = { name: 'grad_y', placements: ['R'] };
      return JSON.stringify(j);
    });
    const r1 = await runCli(['import-graphs', '--dir', none, '-o', join(none, 'p.json')]);
    assert.equal(r1.code, 2);
    assert.match(r1.stderr, /output 'grad_y': return value 10 of .*is None/);
    const shape = copy('rank1.1.py', (s) => s.replace('gelu: "f32[4, 8]"', 'gelu: "f32[4, 9]"'));
    const r2 = await runCli(['import-graphs', '--dir', shape, '-o', join(shape, 'p.json')]);
    assert.equal(r2.code, 2);
    assert.match(r2.stderr, /rank1\.1\.py:2: input 'gelu' is \[4, 9\] but the earlier graph returned it as \[4, 8\]/);
  });

  it("a torch.export-style print (linear, layer_norm, cross_entropy_loss kept composite) VERIFIES; an averaging all-reduce where a sum is due is NOT EQUIVALENT", async () => {
    const base = `${EXAMPLES}torch/exported/tp2-export`;
    for (const [edit, code] of [[(s: string) => s, 0], [(s: string) => s.replace("(linear_1, 'sum', '0')", "(linear_1, 'avg', '0')"), 1]] as const) {
      const d = mkdtempSync(join(tmpdir(), 'pp-import-'));
      cpSync(base, d, { recursive: true });
      for (const f of ['rank0.py', 'rank1.py']) writeFileSync(join(d, f), edit(readFileSync(join(d, f), 'utf8')));
      const out = join(d, 'plan.json');
      const imp = await runCli(['import-graphs', '--dir', d, '-o', out]);
      assert.equal(imp.code, 0, imp.stderr);
      const v = await runCli(['verify', '--infer', '--jobs', '0', out]);
      assert.equal(v.code, code, v.stdout);
    }
  });

  it('groups without a declaration are the ranks that call collectives on that name', async () => {
    const d = variant('relations.json', (s) => {
      const j = JSON.parse(s) as Record<string, unknown>;
      delete j['groups'];
      return JSON.stringify(j);
    });
    const out = join(d, 'plan.json');
    const imp = await runCli(['import-graphs', '--dir', d, '-o', out]);
    assert.equal(imp.code, 0, imp.stderr);
    const plan = JSON.parse(readFileSync(out, 'utf8')) as { parallel: { programs: { ops: { op: string; group?: unknown }[] }[] } };
    assert.deepEqual(plan.parallel.programs[0]?.ops.find((o) => o.op === 'all_reduce')?.group, [0, 1]);
  });

  it('an unsupported ATen op is exit 2 naming the op, the rank file and line', async () => {
    const d = variant('rank1.py', (s) => s.replace('torch.ops.aten.gelu.default(mm)', 'torch.ops.aten.erfinv.default(mm)'));
    const r = await runCli(['import-graphs', '--dir', d, '-o', join(d, 'plan.json')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /rank1\.py:8: unsupported ATen op 'aten\.erfinv\.default'/);
  });

  it('bad relations are exit 2 naming the tensor', async () => {
    const cases: [string, (s: string) => string, RegExp][] = [
      ['missing', (s) => s.replace('"y_1": { "placements": ["R"] },', ''), /no relation for input tensor 'y_1'/],
      ['unknown tensor', (s) => s.replace('"inputs": {', '"inputs": { "zz": { "placements": ["R"] },'), /relation for tensor 'zz': no graph has an input or node of that name/],
      ['wrong shard dim', (s) => s.replace('"w1_1": { "role": "param", "placements": ["S(0)"] }', '"w1_1": { "role": "param", "placements": ["S(1)"] }'), /w1_1/],
      ['placements count', (s) => s.replace('"x_1": { "placements": ["R"] }', '"x_1": { "placements": ["R", "R"] }'), /relation for tensor 'x_1': 2 placement\(s\) for a mesh of 1/],
      ['unknown field', (s) => s.replace('"x_1": { "placements": ["R"] }', '"x_1": { "placement": ["R"] }'), /\$\.inputs\.x_1 \(tensor 'x_1'\).*unknown field 'placement'/],
      ['output count', (s) => s.replace('{ "name": "loss", "placements": ["R"] },', ''), /"outputs" lists 2 relation\(s\) but .* returns 3 value\(s\)/],
    ];
    for (const [what, edit, re] of cases) {
      const d = variant('relations.json', edit);
      const r = await runCli(['import-graphs', '--dir', d, '-o', join(d, 'plan.json')]);
      assert.equal(r.code, 2, `${what}: ${r.stderr}`);
      assert.match(r.stderr, re, what);
    }
  });

  it('a graph input without a relation is left out when no output reads it, and refused when one does', async () => {
    const sig = 'w2_1: "f32[8, 8]"):';
    const unread = variant('rank0.py', (s) => s.replace(sig, 'w2_1: "f32[8, 8]", saved_1: "f32[4, 8]"):'));
    const ok = await runCli(['import-graphs', '--dir', unread, '-o', join(unread, 'plan.json')]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stderr, /1 graph input\(s\) without a relation left out: no output reads them/);
    assert.doesNotMatch(readFileSync(join(unread, 'plan.json'), 'utf8'), /saved_1/);
    // The same input read on the way to the loss.
    const read = variant('rank0.py', (s) => s.replace(sig, 'w2_1: "f32[8, 8]", saved_1: "f32[4, 8]"):').replace('torch.ops.aten.gelu.default(mm)', 'torch.ops.aten.add.Tensor(mm, saved_1)'));
    const bad = await runCli(['import-graphs', '--dir', read, '-o', join(read, 'plan.json')]);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /no relation for input tensor 'saved_1' of .*rank0\.py/);
  });

  it('ranks calling one all-reduce on different groups is exit 2 (the calls do not match)', async () => {
    const d = variant('rank0.py', (s) => s.replace("_c10d_functional.all_reduce.default(mm_1, 'sum', '0')", "_c10d_functional.all_reduce.default(mm_1, 'sum', '7')"));
    const r = await runCli(['import-graphs', '--dir', d, '-o', join(d, 'plan.json')]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /the imported plan does not load/);
  });
});

describe('printed-graph reader', () => {
  const g = (body: string, sig = 'x: "f32[2, 3]"'): string => `class GraphModule(torch.nn.Module):\n    def forward(self, ${sig}):\n${body}\n`;

  it('reads annotations, keyword arguments, nested calls, tuple results and source locations', () => {
    const fx = parseFxGraph(
      'g.py',
      g(
        [
          '        # File: /src/model.py:17 in forward, code: y = x.clone()',
          '        clone: "f32[2, 3]" = torch.ops.aten.clone.default(x, memory_format = torch.contiguous_format);  x = None',
          "        empty: \"f32[2]\" = torch.ops.aten.empty.memory_format([2], dtype = torch.float32, device = device(type='cuda', index=1), pin_memory = False)",
          '        split = torch.ops.aten.split_with_sizes.default(clone, [1, 2], -1)',
          '        getitem: "f32[2, 1]" = split[0]',
          '        sl: "f32[2, 3]" = torch.ops.aten.slice.Tensor(clone, 1, 0, 9223372036854775807)',
          '        return (getitem, sl)',
        ].join('\n'),
      ),
    );
    assert.deepEqual(fx.inputs.map((i) => [i.name, i.type?.dtype, i.type?.shape]), [['x', 'float32', [2, 3]]]);
    assert.equal(fx.nodes[0]?.loc, '/src/model.py:17');
    assert.equal(fx.nodes[0]?.target, 'aten.clone.default');
    assert.deepEqual(fx.nodes[0]?.kwargs['memory_format'], { kind: 'dotted', text: 'torch.contiguous_format' });
    const dev = fx.nodes[1]?.kwargs['device'];
    assert.equal(dev?.kind, 'call');
    assert.deepEqual(fx.nodes[2]?.args[2], { kind: 'num', value: -1, text: '-1' });
    assert.equal(fx.nodes[3]?.target, 'getitem');
    assert.equal(fx.outputs.length, 2);
  });

  it('refuses symbolic sizes, unterminated strings and missing returns with the line', () => {
    assert.throws(() => parseFxGraph('g.py', g('        return (x,)', 'x: "Sym(s0)"')), (e: unknown) => e instanceof ImportError && /g\.py:2: unsupported type annotation "Sym\(s0\)"/.test(e.message));
    // Both spellings say what to do: export with static shapes, or capture the run.
    assert.throws(() => parseFxGraph('g.py', g('        return (x,)', 'x: "Sym(s0)"')), /symbolic size: .*export it with static shapes.*planproof capture/);
    assert.throws(() => parseFxGraph('g.py', g('        return (x,)', 'x: "f32[s0, 3]"')), /g\.py:2: unsupported size 's0' in "f32\[s0, 3\]" \(a symbolic size: .*export it with static shapes/);
    assert.throws(() => parseFxGraph('g.py', g("        a: \"f32[2, 3]\" = torch.ops.aten.add.Tensor(x, 'oops)\n        return (a,)")), /g\.py:3: unterminated string/);
    assert.throws(() => parseFxGraph('g.py', g('        a: "f32[2, 3]" = torch.ops.aten.clone.default(x)')), /no 'return' statement/);
    assert.throws(() => parseFxGraph('g.py', 'x = 1\n'), /no 'def forward\(' found/);
  });

  it('lowering refuses a read of a view after an in-place write to its storage', () => {
    const fx = parseFxGraph(
      'g.py',
      g(
        [
          '        t: "f32[3, 2]" = torch.ops.aten.t.default(x)',
          '        add_: "f32[2, 3]" = torch.ops.aten.add_.Tensor(x, 1)',
          '        mm: "f32[2, 2]" = torch.ops.aten.mm.default(x, t)',
          '        return (mm,)',
        ].join('\n'),
      ),
    );
    assert.throws(() => lowerGraph(fx), /g\.py:5: 't' is read after its storage was written in place at line 4/);
  });

  it('an in-place write to a split input makes its pieces unreadable', () => {
    const fx = parseFxGraph(
      'g.py',
      g(
        [
          '        split = torch.ops.aten.split.Tensor(x, 1)',
          '        getitem: "f32[1, 3]" = split[0]',
          '        mul_: "f32[2, 3]" = torch.ops.aten.mul_.Tensor(x, 2)',
          '        add: "f32[1, 3]" = torch.ops.aten.add.Tensor(getitem, getitem)',
          '        return (add,)',
        ].join('\n'),
      ),
    );
    assert.throws(() => lowerGraph(fx), /g\.py:6: 'getitem' is read after its storage was written in place at line 5/);
  });

  it("an in-place write to one split piece leaves the other pieces readable (an LSTM cell's gates), but not the split input", () => {
    const body = (tail: string[]): string =>
      g(
        [
          '        split = torch.ops.aten.unsafe_split.Tensor(x, 1)',
          '        getitem: "f32[1, 3]" = split[0]',
          '        getitem_1: "f32[1, 3]" = split[1]',
          '        sigmoid_: "f32[1, 3]" = torch.ops.aten.sigmoid_.default(getitem)',
          '        detach: "f32[1, 3]" = torch.ops.aten.detach.default(getitem_1)',
          '        tanh_: "f32[1, 3]" = torch.ops.aten.tanh_.default(getitem_1)',
          ...tail,
        ].join('\n'),
      );
    const low = lowerGraph(parseFxGraph('g.py', body(['        mul: "f32[1, 3]" = torch.ops.aten.mul.Tensor(getitem, getitem_1)', '        return (mul, detach)'])));
    // Each gate holds its own activation: sigmoid of piece 0 times tanh of piece 1; detach (made
    // before the write, the same value) follows the write.
    assert.deepEqual(low.ops.filter((o) => ['sigmoid', 'tanh', 'mul'].includes(o.op)).map((o) => o.op), ['sigmoid', 'tanh', 'mul']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', body(['        add: "f32[2, 3]" = torch.ops.aten.add.Tensor(x, x)', '        return (add,)']))), /g\.py:9: 'x' is read after its storage was written in place at line 6/);
    // unbind's pieces are views of its input too.
    const ub = g(['        unbind = torch.ops.aten.unbind.int(x)', '        getitem: "f32[3]" = unbind[0]', '        mul_: "f32[3]" = torch.ops.aten.mul_.Tensor(getitem, 2)', '        add: "f32[2, 3]" = torch.ops.aten.add.Tensor(x, x)', '        return (add,)'].join('\n'));
    assert.throws(() => lowerGraph(parseFxGraph('g.py', ub)), /g\.py:6: 'x' is read after its storage was written in place at line 5/);
  });

  it('hostile text is a located error, never a crash: deep nesting, long lines, binary, huge shapes', () => {
    const cases: [string, RegExp][] = [
      [g(`        a: "f32[2, 3]" = torch.ops.aten.view.default(x, ${'['.repeat(5000)}${']'.repeat(5000)})\n        return (a,)`), /g\.py:3: arguments nested too deeply/],
      [g(`        a: "f32[2, 3]" = torch.ops.aten.clone.default(x${', 1'.repeat(400_000)})\n        return (a,)`), /g\.py:3: line longer than 1000000 characters/],
      [`def forward(self, x: "f32[2]"):\n        \u0000\u0001 = torch.ops.aten.clone.default(x)\n`, /g\.py:2: unexpected character/],
      [g('        return (x,)', 'x: "f32[99999999999, 2]"'), /unsupported size '99999999999'/],
      [g('        a = os.system("true")\n        return (a,)'), /g\.py:3: unsupported call 'os\.system'/],
    ];
    for (const [text, re] of cases) {
      assert.throws(
        () => lowerGraph(parseFxGraph('g.py', text)),
        (e: unknown) => e instanceof ImportError && re.test(e.message),
        String(re),
      );
    }
  });

  it('a count of a mask (sum of bools, an add of bools in an OR) is no bool: it would be given the domain {0, 1}', () => {
    const body = [
      '        ne: "b8[4]" = torch.ops.aten.ne.Scalar(t, -100)',
      '        lt: "b8[4]" = torch.ops.aten.lt.Scalar(t, 2)',
      '        any: "b8[4]" = torch.ops.aten.bitwise_or.Tensor(ne, lt)',
      '        both: "b8[4]" = torch.ops.aten.bitwise_and.Tensor(ne, lt)',
      '        cnt: "i64[]" = torch.ops.aten.sum.default(ne)',
      '        return (cnt, any, both)',
    ].join('\n');
    const low = lowerGraph(parseFxGraph('g.py', g(body, 't: "i64[4]"')));
    const bools = [...low.tensors.values()].filter((t) => t.dtype === 'bool').map((t) => t.id);
    const producer = new Map(low.ops.flatMap((o) => o.outputs.map((x) => [x, o.op] as const)));
    // Every tensor typed bool is made by an op whose result stays in {0, 1}.
    for (const id of bools) assert.ok(['compare', 'mul', undefined].includes(producer.get(id)), `${id} is bool but made by ${producer.get(id)}`);
    assert.ok(!bools.includes('cnt'), 'the count is typed bool');
    assert.ok(bools.includes('any') && bools.includes('both') && bools.includes('ne'));
    // The OR's x + y (0 to 2) is typed int64.
    assert.ok(low.ops.some((o) => o.op === 'add' && low.tensors.get(o.outputs[0] as string)?.dtype === 'int64'));
  });

  it('a cast from a float to an integer type (a truncation) is refused; int to float is an identity', () => {
    const cast = (to: string): string => g(`        c: "${to}[2, 3]" = torch.ops.aten._to_copy.default(x, dtype = torch.int64)\n        return (c,)`);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', cast('i64'))), /g\.py:3: a cast from float32 to int64 truncates/);
    assert.equal(lowerGraph(parseFxGraph('g.py', g('        c: "f64[2, 3]" = torch.ops.aten._to_copy.default(x, dtype = torch.float64)\n        return (c,)', 'x: "i64[2, 3]"'))).ops.length, 1);
  });

  it('_reshape_alias with the strides torch computes for viewing its input (a transposed tensor) is that reshape; other strides are refused', () => {
    // x [2, 3] transposed is [3, 2] with strides [1, 3]; viewed as [6]: no view exists (refused),
    // unsqueezed as [3, 1, 2]: strides [1, 2, 3] (accepted, its values the row-major reshape).
    const alias = (size: string, stride: string): string =>
      g(['        t: "f32[3, 2]" = torch.ops.aten.t.default(x)', `        r: "f32[${size}]" = torch.ops.aten._reshape_alias.default(t, [${size}], [${stride}])`, '        return (r,)'].join('\n'));
    const ok = lowerGraph(parseFxGraph('g.py', alias('3, 1, 2', '1, 2, 3')));
    assert.ok(ok.ops.some((o) => o.op === 'reshape'));
    assert.throws(() => lowerGraph(parseFxGraph('g.py', alias('6', '1'))), /g\.py:4: _reshape_alias with strides \[1\] for size \[6\] is not a view of its input \(shape \[3, 2\], strides \[1, 3\]\)/);
    // The same size with the tensor's own strides is the identity; with row-major ones it is not.
    assert.doesNotThrow(() => lowerGraph(parseFxGraph('g.py', alias('3, 2', '1, 3'))));
    assert.throws(() => lowerGraph(parseFxGraph('g.py', alias('3, 2', '3, 1'))), /g\.py:4: _reshape_alias with strides \[3, 1\] for size \[3, 2\] is not a view of its input/);
  });

  it("a split piece keeps its input's strides: Megatron's fused-QKV split then reshape is a view; wrong strides are refused", () => {
    // mixed [4, 2, 2, 12] (row-major: [48, 24, 12, 1]) split in 4s along the last dim: each piece
    // [4, 2, 2, 4] has strides [48, 24, 12, 1]; viewed as [4, 4, 4] its strides are [48, 12, 1].
    const piece = (stride: string): string =>
      g(
        [
          '        split = torch.ops.aten.split.Tensor(x, 4, -1)',
          '        q: "f32[4, 2, 2, 4]" = split[0]',
          `        r: "f32[4, 4, 4]" = torch.ops.aten._reshape_alias.default(q, [4, 4, 4], [${stride}])`,
          '        return (r,)',
        ].join('\n'),
        'x: "f32[4, 2, 2, 12]"',
      );
    assert.ok(lowerGraph(parseFxGraph('g.py', piece('48, 12, 1'))).ops.some((o) => o.op === 'reshape'));
    assert.throws(() => lowerGraph(parseFxGraph('g.py', piece('16, 4, 1'))), /_reshape_alias with strides \[16, 4, 1\] for size \[4, 4, 4\] is not a view of its input \(shape \[4, 2, 2, 4\], strides \[48, 24, 12, 1\]\)/);
  });

  it('a shape annotation that disagrees with the mapped op is an error', () => {
    const fx = parseFxGraph('g.py', g('        t: "f32[2, 3]" = torch.ops.aten.t.default(x)\n        return (t,)'));
    assert.throws(() => lowerGraph(fx), /g\.py:3: aten\.t\.default: the graph says t has shape \[2, 3\], the mapped op gives \[3, 2\]/);
  });
});
