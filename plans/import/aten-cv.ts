/**
 * Vision ops as segmentation and generative models write them (issue 33: a U-Net's up path,
 * InstanceNorm's per-sample statistics), each a composition of registry ops exact in real
 * arithmetic, forward and backward:
 *
 * - `convolution` / `convolution_backward` with `transposed=True` (`nn.ConvTranspose{1,2,3}d`):
 *   the transposed convolution of x by w ([C_in, C_out/G, *K]) is the input gradient of the
 *   ordinary convolution by the same w whose output gradient is x (aten-conv.ts, inputGradOf),
 *   into an input of the transposed output's size (in − 1)·s − 2p + d·(K − 1) + output_padding
 *   + 1, plus the bias. Its backward: grad_input is that ordinary convolution of the output
 *   gradient (output_padding < stride, so the extra rows are read by no window), grad_weight the
 *   ordinary weight gradient with the roles swapped (Σ_n x · cols(g)ᵀ), grad_bias Σ g. Ordinary
 *   convolutions go to aten-conv.ts unchanged.
 * - `upsample_nearest2d` (+ backward, `.vec` and `.default`): for an integer power-of-two factor
 *   f per dim ATen reads source floor(o · (1/f)) = floor(o / f) exactly (1/f is a float); each
 *   element repeated f times (reshape + expand); the backward sums the f copies.
 * - `upsample_bilinear2d` with `align_corners=False` (+ backward): for f a power of two, output
 *   o = f·i + r has source i + μ_r, μ_r = (r + 0.5)/f − 0.5 (exact in float32, as ATen's
 *   `scale·(o + 0.5) − 0.5`, clamped at 0): phase r is (1 − μ)·x + μ·x_next for μ ≥ 0 and
 *   (−μ)·x_prev + (1 + μ)·x for μ < 0, x_next / x_prev x shifted by one with the edge repeated
 *   (ATen's `h1p = h1 < H − 1`, and the clamp at 0 where the weight of x_prev[0] = x[0] makes
 *   the sum x[0]); the phases interleaved. The two spatial dims one after the other (the kernel's
 *   h0λ·(w0λ·x00 + w1λ·x01) + h1λ·(…) is the same real sum). The backward is the adjoint.
 * - `repeat` (InstanceNorm's affine weight tiled over the batch): reshape, expand, reshape.
 * - `as_strided` with row-major strides over a whole row-major tensor that owns its storage:
 *   a reshape, written back into the base as one (autograd's gradient of an in-place op on
 *   InstanceNorm's view).
 *
 * - `mish` (+ in place, backward): x·tanh(log(1 + exp(x))) with no threshold, as ATen's kernel;
 *   backward g·(t + x·σ(x)·(1 − t²)). `hardswish` (+ in place, backward): x·min(max(x + 3, 0),
 *   6)/6; backward 0 below −3, g·(x/3 + 1/2) up to 3 inclusive, g above (the kernel's branches).
 *
 * - `var` / `std` with a correction c: Σ (x − mean)² / (N − c) over the dims, sqrt for std.
 *
 * Refused with the reason: other interpolation factors (the weights and source indices ATen
 * computes from 1/f are then rounded floats, not the exact ratios), `align_corners=True` (its
 * (in − 1)/(out − 1) weights likewise), antialiasing.
 */
import { CONV_RULES, convDims, groupedColumns, inputGradOf, type Geometry, outSizes, perDim, prod, weightGradOf } from './aten-conv.js';
import type { FxNode } from './fxtext.js';
import { type Lowerer, type Rule, type TensorVal, type Val } from './lower.js';
import { TRAINING_RULES } from './aten-training.js';

/** A transposed convolution's geometry: of the ordinary convolution whose input is the transposed output. */
interface Transposed {
  readonly geometry: Geometry;
  readonly groups: number;
  /** Spatial sizes of the transposed convolution's output. */
  readonly outSpace: readonly number[];
}

/** x: the transposed convolution's input [N, C_in, *space], w [C_in, C_out/G, *K]; arguments from k0 (stride) on. */
function transposedGeometry(l: Lowerer, n: FxNode, x: TensorVal, w: TensorVal, k0: number): Transposed {
  const { k, stride, padding, dilation } = convDims(l, n, x, w, k0);
  const outPad = perDim(l, n, k, 'output_padding', k0 + 4, Array.from({ length: k }, () => 0));
  const groups = l.int(l.arg(n, k0 + 5, 'groups'), 'groups', 1);
  const Cin = x.shape[1] as number;
  if (!(groups >= 1) || Cin % groups !== 0 || (w.shape[0] as number) !== Cin) l.fail(`${n.target}: weight [${w.shape.join(', ')}] for ${Cin} input channels in ${groups} group(s): [C_in, C_out/groups, *kernel] expected`);
  outPad.forEach((op, i) => {
    if (op < 0 || (op >= (stride[i] as number) && op >= (dilation[i] as number))) l.fail(`${n.target}: output_padding ${op} must be smaller than the stride or the dilation`);
  });
  const kernel = w.shape.slice(2);
  const space = x.shape.slice(2);
  const outSpace = space.map((S, i) => (S - 1) * (stride[i] as number) - 2 * (padding[i] as number) + (dilation[i] as number) * ((kernel[i] as number) - 1) + (outPad[i] as number) + 1);
  if (outSpace.some((S) => S < 1)) l.fail(`${n.target}: the output would have sizes [${outSpace.join(', ')}]`);
  // The ordinary convolution from the output back to the input must read exactly `space` positions.
  const back = outSizes(l, n, outSpace, { kernel, stride, padding, dilation }, false);
  if (back.some((S, i) => S !== space[i])) l.fail(`internal: transposed convolution geometry does not invert ([${back.join(', ')}] for [${space.join(', ')}])`);
  return { geometry: { kernel, stride, padding, dilation, out: space }, groups, outSpace };
}

/** The weight [C_in, C_out/G, *K] as the ordinary convolution's [O, C·K] (or [G, O/G, (C/G)·K]), O = C_in. */
function weightRows(l: Lowerer, w: TensorVal, G: number): TensorVal {
  const O = w.shape[0] as number;
  return l.one('reshape', [w], { shape: G === 1 ? [O, prod(w.shape.slice(1))] : [G, O / G, prod(w.shape.slice(1))] });
}

/** An [N, C, *space] tensor as [N, C, P] (or [N, G, C/G, P]). */
function rows3(l: Lowerer, t: TensorVal, G: number): TensorVal {
  const [N, C] = t.shape as [number, number];
  const P = prod(t.shape.slice(2));
  return l.one('reshape', [t], { shape: G === 1 ? [N, C, P] : [N, G, C / G, P] });
}

const convolutionRule = CONV_RULES['aten.convolution'] as Rule;
const convolutionBackwardRule = CONV_RULES['aten.convolution_backward'] as Rule;

/** convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups). */
const convolution: Rule = (l, n) => {
  if (!l.bool(l.arg(n, 6, 'transposed'), 'transposed', false)) return convolutionRule(l, n);
  const x = l.tensor(n.args[0], 'input');
  const w = l.tensor(n.args[1], 'weight');
  const b = l.optTensor(n.args[2], 'bias');
  const t = transposedGeometry(l, n, x, w, 3);
  const G = t.groups;
  const [N] = x.shape as [number];
  const Cout = (w.shape[1] as number) * G;
  let y = inputGradOf(l, rows3(l, x, G), weightRows(l, w, G), G, [N, Cout, ...t.outSpace], t.geometry);
  if (b !== undefined) y = l.one('add', [y, l.one('reshape', [b], { shape: [Cout, ...t.outSpace.map(() => 1)] })]);
  return l.bind(n, l.one('identity', [y], {}, l.out(n), x.dtype));
};

/** convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask). */
const convolutionBackward: Rule = (l, n) => {
  if (!l.bool(l.arg(n, 7, 'transposed'), 'transposed', false)) return convolutionBackwardRule(l, n);
  const gy = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'input');
  const w = l.tensor(n.args[2], 'weight');
  const t = transposedGeometry(l, n, x, w, 4);
  if (gy.shape.slice(2).some((S, i) => S !== t.outSpace[i])) l.fail(`${n.target}: grad_output [${gy.shape.join(', ')}] does not have the transposed output's sizes [${t.outSpace.join(', ')}]`);
  const maskArg = l.arg(n, 10, 'output_mask');
  const mask = maskArg?.kind === 'list' ? maskArg.items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
  const G = t.groups;
  const [N, Cin] = x.shape as [number, number];
  const items: Val[] = [{ kind: 'none' }, { kind: 'none' }, { kind: 'none' }];
  const cols = mask[0] === true || mask[1] === true ? groupedColumns(l, gy, { ...t.geometry, groups: G }) : undefined;
  if (mask[0] === true && cols !== undefined) {
    // The ordinary convolution of g by w: [G, C_in/G, (C_out/G)·K] @ [N, G, (C_out/G)·K, P].
    let dx = l.one('matmul', [weightRows(l, w, G), cols]);
    if (G > 1) dx = l.one('reshape', [dx], { shape: [N, Cin, prod(x.shape.slice(2))] });
    items[0] = l.one('reshape', [dx], { shape: [...x.shape] }, `${l.out(n)}.grad_input`, x.dtype);
  }
  if (mask[1] === true && cols !== undefined) items[1] = weightGradOf(l, rows3(l, x, G), cols, w.shape, `${l.out(n)}.grad_weight`);
  if (mask[2] === true) items[2] = l.one('sum', [gy], { dims: [0, ...gy.shape.slice(2).map((_, i) => 2 + i)] }, `${l.out(n)}.grad_bias`);
  return l.bind(n, { kind: 'list', items });
};

/** Is f an integer power of two (1, 2, 4, …)? Then 1/f and the phase offsets are exact floats. */
const powerOfTwo = (f: number): boolean => Number.isInteger(f) && f >= 1 && (f & (f - 1)) === 0;

/**
 * The integer factor of each of the k trailing spatial dims from output_size / scale factors;
 * refused unless each is a power of two that ATen's 1/f reproduces exactly.
 */
function factors(l: Lowerer, n: FxNode, inSpace: readonly number[], outArg: Parameters<Lowerer['val']>[0], scales: readonly (Parameters<Lowerer['val']>[0])[]): number[] {
  const k = inSpace.length;
  const given = scales.map((s, i) => (s === undefined || s.kind === 'none' ? undefined : l.num(s, `scale_factors[${i}]`)));
  const outSize = outArg === undefined || outArg.kind === 'none' ? undefined : l.ints(outArg, 'output_size');
  if (outSize !== undefined && outSize.length !== k) l.fail(`${n.target}: output_size has ${outSize.length} entries for ${k} spatial dims`);
  return inSpace.map((S, i) => {
    const s = given[i];
    const f = s !== undefined ? s : (outSize?.[i] as number) / S;
    if (s === undefined && outSize === undefined) l.fail(`${n.target}: neither output_size nor scale_factors given`);
    if (!powerOfTwo(f)) l.fail(`${n.target}: interpolation by ${s !== undefined ? `scale_factor ${s}` : `${S} -> ${outSize?.[i]}`}: only integer power-of-two factors (2, 4, ...) are mapped, whose source positions ATen computes exactly; resize to such a factor, or interpolate outside the traced step`);
    if (outSize !== undefined && outSize[i] !== S * f) l.fail(`${n.target}: output_size ${outSize[i]} is not ${S}·${f}`);
    return f;
  });
}

/** The .vec overload's scale_factors list (a list or None), or the .default overload's scales_h / scales_w. */
function scaleArgs(l: Lowerer, n: FxNode, vecAt: number, k: number): (Parameters<Lowerer['val']>[0])[] {
  if (n.target.endsWith('.vec')) {
    const a = l.arg(n, vecAt, 'scale_factors');
    if (a === undefined || a.kind === 'none') return Array.from({ length: k }, () => undefined);
    if (a.kind !== 'list' || a.items.length !== k) return l.fail(`${n.target}: scale_factors: a list of ${k} numbers expected`);
    return [...a.items];
  }
  return Array.from({ length: k }, (_, i) => l.arg(n, vecAt + i, i === 0 ? 'scales_h' : 'scales_w'));
}

/** Each element along dim d repeated f times (x[.., i, ..] at f·i … f·i + f − 1). */
function repeatEach(l: Lowerer, x: TensorVal, d: number, f: number): TensorVal {
  if (f === 1) return x;
  const pre = x.shape.slice(0, d + 1);
  const post = x.shape.slice(d + 1);
  const col = l.one('reshape', [x], { shape: [...pre, 1, ...post] });
  const wide = l.one('expand', [col], { shape: [...pre, f, ...post] });
  return l.one('reshape', [wide], { shape: [...x.shape.slice(0, d), (x.shape[d] as number) * f, ...post] });
}

/** The adjoint of repeatEach: the f copies of each element summed. */
function sumEach(l: Lowerer, g: TensorVal, d: number, f: number): TensorVal {
  if (f === 1) return g;
  const S = (g.shape[d] as number) / f;
  const grid = l.one('reshape', [g], { shape: [...g.shape.slice(0, d), S, f, ...g.shape.slice(d + 1)] });
  return l.one('sum', [grid], { dims: [d + 1] });
}

/** x shifted by one along dim d toward lower indices (x_next[i] = x[min(i + 1, S − 1)]) or higher (x_prev[i] = x[max(i − 1, 0)]). */
function shifted(l: Lowerer, x: TensorVal, d: number, next: boolean): TensorVal {
  const S = x.shape[d] as number;
  if (S === 1) return x;
  const sl = (a: number, b: number): TensorVal => l.one('slice', [x], { dim: d, start: a, end: b });
  return next ? l.one('concat', [sl(1, S), sl(S - 1, S)], { dim: d }) : l.one('concat', [sl(0, 1), sl(0, S - 1)], { dim: d });
}

/** The adjoint of shifted: g's elements sent back to the positions they were read from. */
function unshifted(l: Lowerer, g: TensorVal, d: number, next: boolean): TensorVal {
  const S = g.shape[d] as number;
  if (S === 1) return g;
  const sl = (a: number, b: number): TensorVal => l.one('slice', [g], { dim: d, start: a, end: b });
  const pad = (t: TensorVal, before: number, after: number): TensorVal => l.one('pad', [t], { dim: d, before, after });
  // next: position j receives g[j − 1] (j ≥ 1) and the last also g[S − 1]; prev: j receives g[j + 1] (j ≤ S − 2) and the first also g[0].
  return next ? l.one('add', [pad(sl(0, S - 1), 1, 0), pad(sl(S - 1, S), S - 1, 0)]) : l.one('add', [pad(sl(1, S), 0, 1), pad(sl(0, 1), 0, S - 1)]);
}

/** Phase r's offset μ_r = (r + 0.5)/f − 0.5 of ATen's align_corners=False source index. */
const phaseOffset = (r: number, f: number): number => (r + 0.5) / f - 0.5;

/** Linear interpolation by f along dim d (align_corners=False): the phases, interleaved. */
function linearAlong(l: Lowerer, x: TensorVal, d: number, f: number): TensorVal {
  if (f === 1) return x;
  const next = shifted(l, x, d, true);
  const prev = shifted(l, x, d, false);
  const phases = Array.from({ length: f }, (_, r) => {
    const mu = phaseOffset(r, f);
    const [a, wa, wx] = mu >= 0 ? [next, mu, 1 - mu] : [prev, -mu, 1 + mu];
    const t = l.one('add', [l.one('scale', [x], { factor: wx }), l.one('scale', [a], { factor: wa })]);
    return l.one('reshape', [t], { shape: [...x.shape.slice(0, d + 1), 1, ...x.shape.slice(d + 1)] });
  });
  const grid = l.one('concat', phases, { dim: d + 1 });
  return l.one('reshape', [grid], { shape: [...x.shape.slice(0, d), (x.shape[d] as number) * f, ...x.shape.slice(d + 1)] });
}

/** The adjoint of linearAlong: each phase's gradient back through its two weighted reads. */
function linearAlongBackward(l: Lowerer, g: TensorVal, d: number, f: number): TensorVal {
  if (f === 1) return g;
  const S = (g.shape[d] as number) / f;
  const grid = l.one('reshape', [g], { shape: [...g.shape.slice(0, d), S, f, ...g.shape.slice(d + 1)] });
  const parts = Array.from({ length: f }, (_, r) => {
    const gr = l.one('reshape', [l.one('slice', [grid], { dim: d + 1, start: r, end: r + 1 })], { shape: [...g.shape.slice(0, d), S, ...g.shape.slice(d + 1)] });
    const mu = phaseOffset(r, f);
    const [isNext, wa, wx] = mu >= 0 ? [true, mu, 1 - mu] : [false, -mu, 1 + mu];
    return l.one('add', [l.one('scale', [gr], { factor: wx }), l.one('scale', [unshifted(l, gr, d, isNext)], { factor: wa })]);
  });
  return parts.reduce((a, b) => l.one('add', [a, b]));
}

/** upsample_nearest2d(input, output_size, scale_factors) (.vec) or (input, output_size, scales_h, scales_w). */
const nearest2d: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'input');
  if (x.shape.length !== 4) l.fail(`${n.target}: input [${x.shape.join(', ')}]: [N, C, H, W] expected`);
  const f = factors(l, n, x.shape.slice(2), l.arg(n, 1, 'output_size'), scaleArgs(l, n, 2, 2));
  const y = f.reduce((t, fi, i) => repeatEach(l, t, 2 + i, fi), x);
  return l.bind(n, l.one('identity', [y], {}, l.out(n), x.dtype));
};

/** upsample_nearest2d_backward(grad_output, output_size, input_size, scale_factors) (.vec) or (…, scales_h, scales_w). */
const nearest2dBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_output');
  const inSize = l.ints(l.arg(n, 2, 'input_size'), 'input_size');
  if (g.shape.length !== 4 || inSize.length !== 4) l.fail(`${n.target}: grad_output [${g.shape.join(', ')}], input_size [${inSize.join(', ')}]: 4-D expected`);
  const f = factors(l, n, inSize.slice(2), l.arg(n, 1, 'output_size'), scaleArgs(l, n, 3, 2));
  if (f.some((fi, i) => (inSize[2 + i] as number) * fi !== g.shape[2 + i])) l.fail(`${n.target}: grad_output [${g.shape.join(', ')}] is not input_size [${inSize.join(', ')}] scaled by [${f.join(', ')}]`);
  const dx = f.reduce((t, fi, i) => sumEach(l, t, 2 + i, fi), g);
  return l.bind(n, l.one('identity', [dx], {}, l.out(n), g.dtype));
};

function refuseAlignCorners(l: Lowerer, n: FxNode, at: number): void {
  if (l.bool(l.arg(n, at, 'align_corners'), 'align_corners', false)) l.fail(`${n.target}: align_corners=True interpolates with weights (in − 1)/(out − 1) that ATen rounds to floats; only align_corners=False (the default) with a power-of-two factor is mapped`);
}

/** upsample_bilinear2d(input, output_size, align_corners, scale_factors) (.vec) or (…, scales_h, scales_w). */
const bilinear2d: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'input');
  if (x.shape.length !== 4) l.fail(`${n.target}: input [${x.shape.join(', ')}]: [N, C, H, W] expected`);
  refuseAlignCorners(l, n, 2);
  const f = factors(l, n, x.shape.slice(2), l.arg(n, 1, 'output_size'), scaleArgs(l, n, 3, 2));
  const y = f.reduce((t, fi, i) => linearAlong(l, t, 2 + i, fi), x);
  return l.bind(n, l.one('identity', [y], {}, l.out(n), x.dtype));
};

/** upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scale_factors) (.vec) or (…, scales_h, scales_w). */
const bilinear2dBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_output');
  const inSize = l.ints(l.arg(n, 2, 'input_size'), 'input_size');
  if (g.shape.length !== 4 || inSize.length !== 4) l.fail(`${n.target}: grad_output [${g.shape.join(', ')}], input_size [${inSize.join(', ')}]: 4-D expected`);
  refuseAlignCorners(l, n, 3);
  const f = factors(l, n, inSize.slice(2), l.arg(n, 1, 'output_size'), scaleArgs(l, n, 4, 2));
  if (f.some((fi, i) => (inSize[2 + i] as number) * fi !== g.shape[2 + i])) l.fail(`${n.target}: grad_output [${g.shape.join(', ')}] is not input_size [${inSize.join(', ')}] scaled by [${f.join(', ')}]`);
  const dx = f.reduce((t, fi, i) => linearAlongBackward(l, t, 2 + i, fi), g);
  return l.bind(n, l.one('identity', [dx], {}, l.out(n), g.dtype));
};

/** repeat(self, repeats): leading new dims, then each dim tiled (reshape to [r, s], expand, reshape). */
const repeat: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'self');
  const reps = l.ints(l.arg(n, 1, 'repeats'), 'repeats');
  if (reps.length < x.shape.length) l.fail(`${n.target}: ${reps.length} repeats for ${x.shape.length} dims (at least as many expected)`);
  if (reps.some((r) => r < 0)) l.fail(`${n.target}: negative repeats ${JSON.stringify(reps)}`);
  const shape = [...reps.slice(0, reps.length - x.shape.length).map(() => 1), ...x.shape];
  const inter = shape.flatMap((s) => [1, s]);
  const wide = shape.flatMap((s, i) => [reps[i] as number, s]);
  const t = l.one('expand', [l.one('reshape', [x], { shape: inter })], { shape: wide });
  return l.bind(n, l.one('reshape', [t], { shape: shape.map((s, i) => s * (reps[i] as number)) }, l.out(n), x.dtype));
};

const asStridedRule = TRAINING_RULES['aten.as_strided'] as Rule;

/** Row-major strides of a shape. */
function contiguousStrides(shape: readonly number[]): number[] {
  const out = new Array<number>(shape.length).fill(1);
  for (let d = shape.length - 2; d >= 0; d--) out[d] = (out[d + 1] as number) * (shape[d + 1] as number);
  return out;
}

/**
 * as_strided(self, size, stride, 0) with row-major strides for `size` over a tensor that owns
 * its storage (not a view: storage offset 0 is its first element), is row-major itself and has
 * as many elements: element k of the storage at row-major position k on both sides, a reshape.
 * Autograd writes the gradient of an in-place op on a view (InstanceNorm's output viewed back
 * to [N, C, H, W], then `SiLU(inplace=True)`) this way. Anything else goes to the identity-only rule.
 */
const asStrided: Rule = (l, n) => {
  const base = n.args[0];
  const x = l.tensor(base, 'self');
  const size = l.ints(n.args[1], 'size');
  const stride = l.ints(n.args[2], 'stride');
  const offset = l.int(l.arg(n, 3, 'storage_offset'), 'storage_offset', 0);
  const own = l.stridesAt(base);
  const same = (a: readonly number[], b: readonly number[] | undefined): boolean => b !== undefined && a.length === b.length && a.every((v, i) => v === b[i]);
  const numel = (s: readonly number[]): number => s.reduce((p, d) => p * d, 1);
  const owns = base?.kind === 'name' && l.rootOf(base.name) === base.name;
  if (offset === 0 && owns && same(contiguousStrides(x.shape), own) && same(contiguousStrides(size), stride) && numel(size) === numel(x.shape) && numel(size) > 0 && x.shape.length > 0 && base?.kind === 'name') {
    // The whole of the base, so a write through the view (autograd's copy_ into it) is written
    // into the base reshaped back (a region spanning every row of dim 0).
    const v = l.one('reshape', [x], { shape: size }, l.out(n), x.dtype);
    return l.bindRegion(n, v, base.name, 0, 0, x.shape[0] as number, x.shape);
  }
  return asStridedRule(l, n);
};

/** mish(x) = x·tanh(log(1 + exp(x))), as ATen's CPU kernel writes it (no softplus threshold). */
function mish(inPlace: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const t = l.one('tanh', [l.one('log', [l.one('add', [l.constant(1), l.one('exp', [x])])])]);
    const y = l.one('mul', [x, t], {}, l.out(n), x.dtype);
    if (inPlace) l.write(n.args[0], y);
    return l.bind(n, y);
  };
}

/** mish_backward(g, x) = g·(t + x·σ(x)·(1 − t²)), t = tanh(log(1 + exp(x))), σ(x) = 1/(1 + exp(−x)) (the kernel's terms). */
const mishBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'self');
  const t = l.one('tanh', [l.one('log', [l.one('add', [l.constant(1), l.one('exp', [x])])])]);
  const d = l.one('add', [t, l.one('mul', [l.one('mul', [x, l.one('sigmoid', [x])]), l.one('sub', [l.constant(1), l.one('mul', [t, t])])])]);
  return l.bind(n, l.one('mul', [g, d], {}, l.out(n), g.dtype));
};

/** hardswish(x) = x·min(max(x + 3, 0), 6)/6 (the kernel's formula). */
function hardswish(inPlace: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r6 = l.one('minimum', [l.one('maximum', [l.one('add', [x, l.constant(3)]), l.constant(0)]), l.constant(6)]);
    const y = l.one('div', [l.one('mul', [x, r6]), l.constant(6)], {}, l.out(n), x.dtype);
    if (inPlace) l.write(n.args[0], y);
    return l.bind(n, y);
  };
}

/** hardswish_backward(g, x): 0 where x < −3, g·(x/3 + 1/2) where x ≤ 3, else g (the kernel's branches). */
const hardswishBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'self');
  const below = l.one('compare', [x, l.constant(-3)], { rel: 'lt' }, undefined, 'bool');
  const inside = l.one('compare', [x, l.constant(3)], { rel: 'le' }, undefined, 'bool');
  const mid = l.one('mul', [g, l.one('add', [l.one('div', [x, l.constant(3)]), l.constant(0.5)])]);
  const zero = l.one('scale', [g], { factor: 0 });
  return l.bind(n, l.one('where', [below, zero, l.one('where', [inside, mid, g])], {}, l.out(n), g.dtype));
};

export const CV_RULES: Record<string, Rule> = {
  'aten.convolution': convolution,
  'aten.convolution_backward': convolutionBackward,
  'aten.upsample_nearest2d': nearest2d,
  'aten.upsample_nearest2d_backward': nearest2dBackward,
  'aten.upsample_bilinear2d': bilinear2d,
  'aten.upsample_bilinear2d_backward': bilinear2dBackward,
  'aten.repeat': repeat,
  'aten.as_strided': asStrided,
  'aten.mish': mish(false),
  'aten.mish_': mish(true),
  'aten.mish_backward': mishBackward,
  'aten.hardswish': hardswish(false),
  'aten.hardswish_': hardswish(true),
  'aten.hardswish_backward': hardswishBackward,
};
