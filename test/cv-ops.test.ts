/**
 * Vision ops (plans/import/aten-cv.ts): transposed convolution, nearest and bilinear
 * upsampling, mish, hardswish and repeat, forward and backward, run in Float64 on small graphs
 * against the values torch 1.13 computed (float64, computed once with the script in the
 * comments and embedded), and what is refused and why. The committed captures of
 * examples/torch/unet_seg_ddp.py and denoise_ae_ddp.py check the same rules on a whole training
 * step (test/capture.test.ts, the golden check).
 */
import { strict as assert } from 'node:assert';
import { close, graph, runGraph as run } from './one-graph.js';
import { lowerGraph } from '../plans/import/aten.js';
import { parseFxGraph } from '../plans/import/fxtext.js';




const ramp = (n: number, mod: number, sub: number): number[] => Array.from({ length: n }, (_, i) => (i % mod) - sub);
const lowerFails = (text: string, re: RegExp): void => assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), re);

describe('transposed convolution (nn.ConvTranspose2d) against torch 1.13', () => {
  it('stride 2, padding 1, output_padding 1, bias: forward, grad_input, grad_weight, grad_bias', () => {
    // torch (float64): x = arange(12).view(1, 2, 2, 3), w = arange(24).view(2, 3, 2, 2) % 5 - 2,
    // b = [0.5, -1, 2]; y = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)
    // ([1, 3, 3, 5]); y.backward(g), g = arange(45).view(y.shape) % 7 - 3.
    const text = graph('x: "f32[1, 2, 2, 3]", w: "f32[2, 3, 2, 2]", b: "f32[3]", g: "f32[1, 3, 3, 5]"', [
      'y: "f32[1, 3, 3, 5]" = torch.ops.aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)',
      'cb = torch.ops.aten.convolution_backward.default(g, x, w, [3], [2, 2], [1, 1], [1, 1], True, [1, 1], 1, [True, True, True])',
      'dx: "f32[1, 2, 2, 3]" = cb[0]',
      'dw: "f32[2, 3, 2, 2]" = cb[1]',
      'db: "f32[3]" = cb[2]',
      'return (y, dx, dw, db)',
    ]);
    const [y, dx, dw, db] = run(text, { x: ramp(12, 100, 0), w: ramp(24, 5, 2), b: [0.5, -1, 2], g: ramp(45, 7, 3) }, ['y', 'dx', 'dw', 'db']);
    assert.deepEqual(y, [-11.5, 14.5, -12.5, 16.5, -13.5, 6.5, -7.5, 6.5, -9.5, 6.5, -14.5, 20.5, -15.5, 22.5, -16.5, 11.0, 5.0, 13.0, 5.0, 15.0, -7.0, -3.0, -9.0, -2.0, -11.0, 17.0, 5.0, 19.0, 5.0, 21.0, 8.0, 0.0, 8.0, -2.0, 8.0, -1.0, -14.0, 0.0, -15.0, 1.0, 8.0, -6.0, 8.0, -8.0, 8.0]);
    assert.deepEqual(dx, [-2.0, -1.0, -7.0, -16.0, -12.0, 10.0, 1.0, -2.0, 6.0, 9.0, 8.0, 3.0]);
    assert.deepEqual(dw, [2.0, -11.0, 17.0, -6.0, -17.0, 1.0, -6.0, 9.0, -8.0, -8.0, 6.0, -4.0, 8.0, -23.0, 29.0, -30.0, -41.0, 7.0, -12.0, 21.0, -20.0, -26.0, 24.0, 2.0]);
    assert.deepEqual(db, [-3.0, -2.0, -1.0]);
  });
  it('groups 2, dilation 2, no bias: forward and backward', () => {
    // torch: x = arange(16).view(1, 4, 2, 2), w = arange(16).view(4, 1, 2, 2) % 3 - 1;
    // y = F.conv_transpose2d(x, w, stride=2, dilation=2, groups=2) ([1, 2, 5, 5]); g = arange(50) % 5 - 2.
    const text = graph('x: "f32[1, 4, 2, 2]", w: "f32[4, 1, 2, 2]", g: "f32[1, 2, 5, 5]"', [
      'y: "f32[1, 2, 5, 5]" = torch.ops.aten.convolution.default(x, w, None, [2, 2], [0, 0], [2, 2], True, [0, 0], 2)',
      'cb = torch.ops.aten.convolution_backward.default(g, x, w, None, [2, 2], [0, 0], [2, 2], True, [0, 0], 2, [True, True, False])',
      'dx: "f32[1, 4, 2, 2]" = cb[0]',
      'dw: "f32[4, 1, 2, 2]" = cb[1]',
      'return (y, dx, dw)',
    ]);
    const [y, dx, dw] = run(text, { x: ramp(16, 100, 0), w: ramp(16, 3, 1), g: ramp(50, 5, 2) }, ['y', 'dx', 'dw']);
    assert.deepEqual(y, [0.0, 0.0, 3.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, -6.0, 0.0, -1.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0, -4.0, 0.0, -6.0, 0.0, -3.0, -4.0, 0.0, -12.0, 0.0, -9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8.0, 0.0, -5.0, 0.0, -15.0, 0.0, 0.0, 0.0, 0.0, 0.0, 14.0, 0.0, 11.0, 0.0, -4.0]);
    assert.deepEqual(dx, [0.0, -2.0, 0.0, -2.0, 2.0, 2.0, 2.0, 2.0, -2.0, 0.0, -2.0, 0.0, 0.0, -2.0, 0.0, -2.0]);
    assert.deepEqual(dw, [-4.0, 8.0, -4.0, 8.0, -20.0, 24.0, -20.0, 24.0, -36.0, 40.0, -36.0, 40.0, -52.0, 56.0, -52.0, 56.0]);
  });
  it('an ordinary convolution is still the ordinary one (transposed=False goes to aten-conv.ts)', () => {
    // torch: F.conv2d(arange(9).view(1, 1, 3, 3), [[1, 2], [3, 4]]) = [[27, 37], [57, 67]].
    const text = graph('x: "f32[1, 1, 3, 3]", w: "f32[1, 1, 2, 2]"', ['y: "f32[1, 1, 2, 2]" = torch.ops.aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)', 'return (y,)']);
    assert.deepEqual(run(text, { x: ramp(9, 100, 0), w: [1, 2, 3, 4] }, ['y'])[0], [27, 37, 57, 67]);
  });
});

describe('upsampling (F.interpolate, nn.Upsample) against torch 1.13', () => {
  it('bilinear, scale_factor 2, align_corners=False, on a 3x3 image: forward and backward', () => {
    // torch: x below; y = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False); g = arange(36) % 5 - 2.
    const text = graph('x: "f32[1, 1, 3, 3]", g: "f32[1, 1, 6, 6]"', [
      'y: "f32[1, 1, 6, 6]" = torch.ops.aten.upsample_bilinear2d.vec(x, None, False, [2.0, 2.0])',
      'dx: "f32[1, 1, 3, 3]" = torch.ops.aten.upsample_bilinear2d_backward.vec(g, None, [1, 1, 3, 3], False, [2.0, 2.0])',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: [1.0, 4.0, 2.0, 0.0, -2.0, 8.0, 3.0, 5.0, -1.0], g: ramp(36, 5, 2) }, ['y', 'dx']);
    assert.deepEqual(y, [1.0, 1.75, 3.25, 3.5, 2.5, 2.0, 0.75, 1.1875, 2.0625, 2.75, 3.25, 3.5, 0.25, 0.0625, -0.3125, 1.25, 4.75, 6.5, 0.75, 0.5, 0.0, 1.25, 4.25, 5.75, 2.25, 2.5, 3.0, 2.75, 1.75, 1.25, 3.0, 3.5, 4.5, 3.5, 0.5, -1.0]);
    assert.deepEqual(dx, [-3.0, 2.3125, -2.0625, 2.3125, -1.125, -0.1875, -2.0625, -0.1875, 2.0]);
  });
  it('bilinear to size (8, 8) from 2x2 (factor 4, given as output_size): forward and backward', () => {
    // torch: y = F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False); g = arange(64) % 3 - 1.
    const text = graph('x: "f32[1, 1, 2, 2]", g: "f32[1, 1, 8, 8]"', [
      'y: "f32[1, 1, 8, 8]" = torch.ops.aten.upsample_bilinear2d.vec(x, [8, 8], False, None)',
      'dx: "f32[1, 1, 2, 2]" = torch.ops.aten.upsample_bilinear2d_backward.vec(g, [8, 8], [1, 1, 2, 2], False, None)',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: [1.0, 4.0, 0.0, -2.0], g: ramp(64, 3, 1) }, ['y', 'dx']);
    assert.deepEqual(y, [1.0, 1.0, 1.375, 2.125, 2.875, 3.625, 4.0, 4.0, 1.0, 1.0, 1.375, 2.125, 2.875, 3.625, 4.0, 4.0, 0.875, 0.875, 1.171875, 1.765625, 2.359375, 2.953125, 3.25, 3.25, 0.625, 0.625, 0.765625, 1.046875, 1.328125, 1.609375, 1.75, 1.75, 0.375, 0.375, 0.359375, 0.328125, 0.296875, 0.265625, 0.25, 0.25, 0.125, 0.125, -0.046875, -0.390625, -0.734375, -1.078125, -1.25, -1.25, 0.0, 0.0, -0.25, -0.75, -1.25, -1.75, -2.0, -2.0, 0.0, 0.0, -0.25, -0.75, -1.25, -1.75, -2.0, -2.0]);
    assert.deepEqual(dx, [-0.296875, -0.328125, -0.078125, -0.296875]);
  });
  it('nearest, scale_factor 2 (nn.Upsample(scale_factor=2)): forward and backward', () => {
    // torch: x = arange(12).view(1, 2, 2, 3); y = F.interpolate(x, scale_factor=2); g = arange(48) % 5 - 2.
    const text = graph('x: "f32[1, 2, 2, 3]", g: "f32[1, 2, 4, 6]"', [
      'y: "f32[1, 2, 4, 6]" = torch.ops.aten.upsample_nearest2d.vec(x, None, [2.0, 2.0])',
      'dx: "f32[1, 2, 2, 3]" = torch.ops.aten.upsample_nearest2d_backward.vec(g, None, [1, 2, 2, 3], [2.0, 2.0])',
      'return (y, dx)',
    ]);
    const [y, dx] = run(text, { x: ramp(12, 100, 0), g: ramp(48, 5, 2) }, ['y', 'dx']);
    assert.deepEqual(y, [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0, 9.0, 9.0, 10.0, 10.0, 11.0, 11.0, 9.0, 9.0, 10.0, 10.0, 11.0, 11.0]);
    assert.deepEqual(dx, [-4.0, 4.0, -3.0, 4.0, -3.0, 0.0, -3.0, 0.0, 3.0, 0.0, 3.0, -4.0]);
  });
  it('refuses factors ATen rounds (3, 1.5) and align_corners=True, saying what is mapped', () => {
    lowerFails(graph('x: "f32[1, 1, 2, 2]"', ['y: "f32[1, 1, 6, 6]" = torch.ops.aten.upsample_bilinear2d.vec(x, None, False, [3.0, 3.0])', 'return (y,)']), /only integer power-of-two factors/);
    lowerFails(graph('x: "f32[1, 1, 2, 2]"', ['y: "f32[1, 1, 3, 3]" = torch.ops.aten.upsample_nearest2d.vec(x, [3, 3], None)', 'return (y,)']), /only integer power-of-two factors/);
    lowerFails(graph('x: "f32[1, 1, 2, 2]"', ['y: "f32[1, 1, 4, 4]" = torch.ops.aten.upsample_bilinear2d.vec(x, None, True, [2.0, 2.0])', 'return (y,)']), /align_corners=True/);
  });
});

describe('mish, hardswish, std / var and repeat against torch 1.13', () => {
  const xs = [-5.0, -3.0, -2.5, -1.0, 0.0, 0.5, 1.0, 2.9, 3.0, 4.0, 25.0];
  const gs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0];
  it('mish (nn.Mish) and its backward, with no softplus threshold (x = 25 included)', () => {
    const text = graph('x: "f32[11]", g: "f32[11]"', ['y: "f32[11]" = torch.ops.aten.mish.default(x)', 'dx: "f32[11]" = torch.ops.aten.mish_backward.default(g, x)', 'return (y, dx)']);
    const [y, dx] = run(text, { x: xs, g: gs }, ['y', 'dx']);
    close(y as number[], [-0.033576237730161704, -0.1456474612756246, -0.19681620390653332, -0.30340146137410895, 0.0, 0.37524521130489513, 0.8650983882673103, 2.8842668281130717, 2.9865350049679575, 3.9974128069762385, 25.0], 'mish');
    close(dx as number[], [-0.026747498019901936, -0.18678622906464168, -0.32923071825055705, 0.23686702350958005, 3.0, 5.318546252146364, 7.343253540698546, 8.194553005328844, 9.189962198364992, 10.044328769037502, 11.0], 'mish_backward');
  });
  it('hardswish (nn.Hardswish) and its backward at the branch points -3 and 3', () => {
    const text = graph('x: "f32[11]", g: "f32[11]"', ['y: "f32[11]" = torch.ops.aten.hardswish.default(x)', 'dx: "f32[11]" = torch.ops.aten.hardswish_backward.default(g, x)', 'return (y, dx)']);
    const [y, dx] = run(text, { x: xs, g: gs }, ['y', 'dx']);
    close(y as number[], [-0.0, -0.0, -0.20833333333333334, -0.3333333333333333, 0.0, 0.2916666666666667, 0.6666666666666666, 2.8516666666666666, 3.0, 4.0, 25.0], 'hardswish');
    close(dx as number[], [0.0, -1.0, -1.0, 0.6666666666666667, 2.5, 4.0, 5.833333333333333, 11.733333333333334, 13.5, 10.0, 11.0], 'hardswish_backward');
  });
  it('std and var with a correction (x.std(), x.var(dim=1, unbiased=False, keepdim=True), torch.std(x, dim=0))', () => {
    // torch (float64), x = [[1, 4, 2, 7], [0, -2, 8, 3]].
    const text = graph('x: "f32[2, 4]"', [
      's: "f32[]" = torch.ops.aten.std.correction(x, None, correction = 1)',
      'v: "f32[2, 1]" = torch.ops.aten.var.correction(x, [1], correction = 0, keepdim = True)',
      'd: "f32[4]" = torch.ops.aten.std.dim(x, [0], True, False)',
      'return (s, v, d)',
    ]);
    const [sd, v, d] = run(text, { x: [1, 4, 2, 7, 0, -2, 8, 3] }, ['s', 'v', 'd']);
    close(sd as number[], [3.399054490379851], 'std');
    close(v as number[], [5.25, 14.1875], 'var');
    close(d as number[], [0.7071067811865476, 4.242640687119285, 4.242640687119285, 2.8284271247461903], 'std.dim');
    lowerFails(graph('x: "f32[1]"', ['s: "f32[]" = torch.ops.aten.std.correction(x, None, correction = 1)', 'return (s,)']), /1 elements with correction 1 \(torch returns inf or nan\)/);
  });
  it('repeat([2, 2]) of a vector: a new leading dim and the last tiled', () => {
    const text = graph('x: "f32[3]"', ['y: "f32[2, 6]" = torch.ops.aten.repeat.default(x, [2, 2])', 'return (y,)']);
    assert.deepEqual(run(text, { x: [1, 2, 3] }, ['y'])[0], [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
  });
  it('as_strided with row-major strides over a fresh buffer is a reshape, and a copy_ through it lands in the buffer (autograd\'s gradient of SiLU(inplace=True) on a view)', () => {
    // the pattern the U-Net capture has: new_empty, zero_, as_strided to [2, 3], copy_ of x into it, the buffer read as [3, 2]
    const text = graph('x: "f32[2, 3]"', [
      'buf: "f32[6]" = torch.ops.aten.new_empty.default(x, [6])',
      'z: "f32[6]" = torch.ops.aten.zero_.default(buf)',
      'v: "f32[2, 3]" = torch.ops.aten.as_strided.default(buf, [2, 3], [3, 1], 0)',
      'c: "f32[2, 3]" = torch.ops.aten.copy_.default(v, x)',
      'w: "f32[3, 2]" = torch.ops.aten.as_strided.default(buf, [3, 2], [2, 1], 0)',
      'y: "f32[3, 2]" = torch.ops.aten.mul.Tensor(w, 2)',
      'return (y,)',
    ]);
    assert.deepEqual(run(text, { x: [1, 2, 3, 4, 5, 6] }, ['y'])[0], [2, 4, 6, 8, 10, 12]);
    // an offset (or strides that are not row-major) is not the whole tensor: still refused
    lowerFails(graph('x: "f32[6]"', ['v: "f32[5]" = torch.ops.aten.as_strided.default(x, [5], [1], 1)', 'return (v,)']), /only that view is supported/);
    lowerFails(graph('x: "f32[6]"', ['v: "f32[3, 2]" = torch.ops.aten.as_strided.default(x, [3, 2], [1, 3], 0)', 'return (v,)']), /only that view is supported/);
  });
});
