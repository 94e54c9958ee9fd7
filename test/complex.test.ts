/**
 * Complex tensors as pairs of reals (plans/import/aten-complex.ts; issue 33, Meta's llama RoPE).
 * Small graphs run in Float64 against values torch 1.13 computed for the same inputs (the
 * forward and the backward autograd records: `g * conj(w)`), and what is refused and why. The
 * committed capture of examples/torch/llama_meta_tp.py checks the whole model's loss and AdamW
 * updates against PyTorch's (test/capture.test.ts).
 */
import { strict as assert } from 'node:assert';
import { graph, runGraph as run } from './one-graph.js';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';



// The inputs of tools the values below came from (torch 1.13, /usr/bin/python3):
//   x = tensor([1, 2, -1, 3, 0.5, -2, 4, 1]).view(1, 2, 1, 4); f = tensor([1, 2, 3, -1, -2, 0.5, 1, 1]).view(2, 2, 2)
//   y = view_as_real(view_as_complex(x.reshape(1, 2, 1, 2, 2)) * view_as_complex(f).view(1, 2, 1, 2)).flatten(3)
//   y.backward(g), g = tensor([1, -1, 2, 0.5, 3, 1, -2, 1]).view(1, 2, 1, 4)
const X = [1, 2, -1, 3, 0.5, -2, 4, 1];
const F = [1, 2, 3, -1, -2, 0.5, 1, 1];
const G = [1, -1, 2, 0.5, 3, 1, -2, 1];

describe('complex tensors: Meta llama RoPE (view_as_complex, a complex product, view_as_real)', () => {
  // The forward and backward torch 1.13 records for apply_rotary_emb (the capture's own lines).
  const rope = graph('x: "f32[1, 2, 1, 4]", f: "f32[2, 2, 2]", g: "f32[1, 2, 1, 4]"', [
    'fc: "c64[2, 2]" = torch.ops.aten.view_as_complex.default(f)',
    'r: "f32[1, 2, 1, 2, 2]" = torch.ops.aten._reshape_alias.default(x, [1, 2, 1, 2, 2], [8, 4, 4, 2, 1])',
    'z: "c64[1, 2, 1, 2]" = torch.ops.aten.view_as_complex.default(r)',
    'fv: "c64[1, 2, 1, 2]" = torch.ops.aten.view.default(fc, [1, 2, 1, 2])',
    'm: "c64[1, 2, 1, 2]" = torch.ops.aten.mul.Tensor(z, fv)',
    'o: "f32[1, 2, 1, 2, 2]" = torch.ops.aten.view_as_real.default(m)',
    'y: "f32[1, 2, 1, 4]" = torch.ops.aten._reshape_alias.default(o, [1, 2, 1, 4], [8, 4, 4, 1])',
    'gr: "f32[1, 2, 1, 2, 2]" = torch.ops.aten._reshape_alias.default(g, [1, 2, 1, 2, 2], [8, 4, 4, 2, 1])',
    'gz: "c64[1, 2, 1, 2]" = torch.ops.aten.view_as_complex.default(gr)',
    'cj: "c64[1, 2, 1, 2]" = torch.ops.aten._conj.default(fv)',
    'cl: "c64[1, 2, 1, 2]" = torch.ops.aten.clone.default(cj)',
    'gm: "c64[1, 2, 1, 2]" = torch.ops.aten.mul.Tensor(gz, cl)',
    'go: "f32[1, 2, 1, 2, 2]" = torch.ops.aten.view_as_real.default(gm)',
    'dx: "f32[1, 2, 1, 4]" = torch.ops.aten._reshape_alias.default(go, [1, 2, 1, 4], [8, 4, 4, 1])',
    'return (y, dx)',
  ]);

  it('the rotated heads and their gradient are the values torch computed', () => {
    const [y, dx] = run(rope, { x: X, f: F, g: G }, ['y', 'dx']);
    assert.deepEqual(y, [-3, 4, 0, 10, 0, 4.25, 3, 5]);
    assert.deepEqual(dx, [-1, -3, 5.5, 3.5, -5.5, -3.5, -1, 3]);
  });

  it('the product is the complex one, not the element-wise product of the pairs', () => {
    // A mapping that multiplied (re, im) pairs element by element would give x * f here.
    const [y] = run(rope, { x: X, f: F, g: G }, ['y']);
    assert.notDeepEqual(y, X.map((v, i) => v * (F[i] as number)));
  });
});

describe('complex tensors: conj, sums, layouts, parts and products with reals (values torch computed)', () => {
  // a = view_as_complex(F.view(2, 2, 2)) = [[1+2i, 3-i], [-2+0.5i, 1+i]]
  const body = (lines: readonly string[]): string =>
    graph('f: "f32[2, 2, 2]", r: "f32[2]"', ['a: "c64[2, 2]" = torch.ops.aten.view_as_complex.default(f)', ...lines]);
  it('conj().resolve_conj(): the imaginary parts negated', () => {
    const [c] = run(body(['c: "c64[2, 2]" = torch.ops.aten.conj.default(a)', 'k: "c64[2, 2]" = torch.ops.aten.resolve_conj.default(c)', 'o: "f32[2, 2, 2]" = torch.ops.aten.view_as_real.default(k)', 'return (o,)']), { f: F, r: [2, -3] }, ['o']);
    assert.deepEqual(c, [1, -2, 3, 1, -2, -0.5, 1, -1]);
  });
  it('a.sum(0): the sum over a complex dim (not over the pair dim)', () => {
    const [s] = run(body(['s: "c64[2]" = torch.ops.aten.sum.dim_IntList(a, [0])', 'o: "f32[2, 2]" = torch.ops.aten.view_as_real.default(s)', 'return (o,)']), { f: F, r: [2, -3] }, ['o']);
    assert.deepEqual(s, [-1, 2.5, 4, 0]);
  });
  it('a.real, a.imag', () => {
    const [re, im] = run(body(['re: "f32[2, 2]" = torch.ops.aten.real.default(a)', 'im: "f32[2, 2]" = torch.ops.aten.imag.default(a)', 'return (re, im)']), { f: F, r: [2, -3] }, ['re', 'im']);
    assert.deepEqual(re, [1, 3, -2, 1]);
    assert.deepEqual(im, [2, -1, 0.5, 1]);
  });
  it('a.transpose(0, 1) * 2 + a.transpose(0, 1): dims counted on the complex shape', () => {
    const [t] = run(
      body([
        't: "c64[2, 2]" = torch.ops.aten.transpose.int(a, 0, 1)',
        'm: "c64[2, 2]" = torch.ops.aten.mul.Tensor(t, 2)',
        's: "c64[2, 2]" = torch.ops.aten.add.Tensor(m, t)',
        'o: "f32[2, 2, 2]" = torch.ops.aten.view_as_real.default(s)',
        'return (o,)',
      ]),
      { f: F, r: [2, -3] },
      ['o'],
    );
    assert.deepEqual(t, [3, 6, -6, 1.5, 9, -3, 3, 3]);
  });
  it('a * r with r real [2]: both parts times r, broadcast over the last complex dim', () => {
    const [m] = run(body(['m: "c64[2, 2]" = torch.ops.aten.mul.Tensor(a, r)', 'o: "f32[2, 2, 2]" = torch.ops.aten.view_as_real.default(m)', 'return (o,)']), { f: F, r: [2, -3] }, ['o']);
    assert.deepEqual(m, [2, 4, -9, 3, -4, 1, -3, -3]);
  });
});

describe('complex tensors: what is refused (exit 2 with the line), never read as reals', () => {
  const lower = (sig: string, lines: readonly string[]): (() => unknown) => () => lowerGraph(parseFxGraph('g.py', graph(sig, lines)));
  it('an op without a complex rule reading a complex value', () => {
    assert.throws(lower('f: "f32[2, 2]"', ['a: "c64[2]" = torch.ops.aten.view_as_complex.default(f)', 'e: "c64[2]" = torch.ops.aten.exp.default(a)', 'return (e,)']), /g\.py:4: the complex tensor made at g\.py:3 is read by an op without a complex rule/);
  });
  it('a cast of a complex tensor to a real dtype (drops the imaginary part)', () => {
    assert.throws(lower('f: "f32[2, 2]"', ['a: "c64[2]" = torch.ops.aten.view_as_complex.default(f)', 'e: "f32[2]" = torch.ops.aten._to_copy.default(a, dtype = torch.float32)', 'return (e,)']), /drops its imaginary part/);
  });
  it('torch.polar inside the traced step (cos and sin have no exact rule), with what to do', () => {
    assert.throws(lower('r: "f32[2]", t: "f32[2]"', ['p: "c64[2]" = torch.ops.aten.polar.default(r, t)', 'return (p,)']), /torch\.polar computes cos and sin[\s\S]*outside the traced step/);
  });
  it('a complex graph input, a complex output, and a real op giving a complex annotation', () => {
    assert.throws(lower('z: "c64[2]"', ['return (z,)']), /input 'z' is complex64: complex graph inputs are not supported/);
    assert.throws(lower('f: "f32[2, 2]"', ['a: "c64[2]" = torch.ops.aten.view_as_complex.default(f)', 'return (a,)']), /read by an op without a complex rule/);
    assert.throws(lower('f: "f32[2]"', ['a: "c64[2]" = torch.ops.aten.ones_like.default(f, dtype = torch.complex64)', 'return (a,)']), /with a complex \(complex64\) result: not supported/);
  });
  it('a complex and a real operand added (no rule), and view_as_complex of a last dim other than 2', () => {
    assert.throws(lower('f: "f32[2, 2]", r: "f32[2]"', ['a: "c64[2]" = torch.ops.aten.view_as_complex.default(f)', 's: "c64[2]" = torch.ops.aten.add.Tensor(a, r)', 'return (s,)']), /of a complex and a real operand is not supported/);
    assert.throws(lower('f: "f32[2, 3]"', ['a: "c64[2]" = torch.ops.aten.view_as_complex.default(f)', 'return (a,)']), /the last dim must have size 2/);
  });
});
