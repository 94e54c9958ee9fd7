/**
 * Convolutions and pooling (issue 33: a data-parallel CNN as PyTorch's examples write it) as
 * compositions of registry ops, exact in real arithmetic:
 *
 * - `convolution` (1 to 3 spatial dims, any stride, padding and dilation, any groups, not
 *   transposed) is im2col: for each kernel offset the strided slice of the zero-padded input
 *   (`pad`, then `slice` + `reshape` for a step), stacked in the weight's (c, i, j) order, and
 *   one `matmul` with the weight viewed as [O, C·K], plus the bias: out[n, o, y] = b[o] +
 *   Σ_{c, k} w[o, c, k] · xp[n, c, y·s + k·d], term by term what ATen sums. With G groups
 *   (depthwise: G = C) channel c = g·C/G + c' and output o = g·O/G + o' meet only within group
 *   g: the columns viewed as [N, G, (C/G)·K, P] and the weight as [G, O/G, (C/G)·K] make one
 *   batched `matmul` per group, the same sums restricted to the group.
 * - `convolution_backward` is that linear map's adjoint: grad_bias Σ g over batch and space,
 *   grad_weight Σ_n g · colsᵀ, grad_input the columns' gradient wᵀ · g placed back at each
 *   offset with the stride (zero-interleaved, `pad`) and summed, the padding cut off.
 * - `max_pool{2,3}d_with_indices` is the element-wise `maximum` of the window's strided slices;
 *   its backward sends g to the FIRST maximum of each window in scan order, as ATen's CPU
 *   kernel does (`if (val > maxval)`: ties keep the earlier index): the mask of offset k is
 *   [x_k ≥ m] · Π_{j<k} [x_j < m] (one comparison atom each; x_j ≤ m always, so [x_j < m] is
 *   [x_j ≠ m]). The indices are read only by that backward, which recomputes the mask.
 * - `avg_pool{2,3}d` (+ backward), `adaptive_avg_pool2d` / `_adaptive_avg_pool2d` (+ backward)
 *   when each output cell's window has one size (the input a multiple of the output): sums of
 *   the slices over the divisor.
 *
 * - `native_batch_norm` (+ backward), training and eval: the batch statistics per channel
 *   over (N, *space), mean and biased variance, `(x − mean) / sqrt(var + eps) · w + b`; the
 *   running statistics written in place as ATen writes them (momentum, unbiased variance).
 *   Under DDP without SyncBatchNorm each rank normalizes by its own rows' statistics: not the
 *   logical batch's, and verify says so (examples/torch/ddp_cnn.py --bn).
 * - `native_group_norm` (+ backward): `layer_norm` over each sample's groups of channels and
 *   their positions ([N, G, (C/G)·HxW]), then the per-channel affine; the backward is
 *   `layer_norm_backward` of g·w on the same rows, Σ g·x̂ and Σ g.
 *
 * Transposed convolutions are mapped in aten-cv.ts (with inputGradOf and weightGradOf below).
 * Refused with the reason: max pooling with padding (its
 * `-inf` border is not an exact real), `ceil_mode` where it changes the output size, average
 * pooling with padding not counted, adaptive pooling with uneven windows.
 */
import type { FxNode } from './fxtext.js';
import type { Lowerer, OpaqueVal, Rule, TensorVal, Val } from './lower.js';

export const prod = (xs: readonly number[]): number => xs.reduce((a, b) => a * b, 1);

/** A list argument of one int per spatial dim (ATen passes `[s]` or `[s, s]`; `[]` means the default). */
export function perDim(l: Lowerer, n: FxNode, k: number, name: string, k0: number, dflt: readonly number[]): number[] {
  const a = l.arg(n, k0, name);
  if (a === undefined || a.kind === 'none') return [...dflt];
  const v = l.ints(a, name);
  if (v.length === 0) return [...dflt];
  if (v.length === 1) return Array.from({ length: k }, () => v[0] as number);
  if (v.length !== k) l.fail(`${n.target}: ${name} has ${v.length} entries for ${k} spatial dims`);
  return v;
}

/** Elements off, off + s, …, off + s·(count − 1) along dim d (a slice, then for s > 1 column 0 of a [count, s] view). */
function strided(l: Lowerer, x: TensorVal, d: number, off: number, count: number, s: number): TensorVal {
  const size = x.shape[d] as number;
  if (off + s * (count - 1) >= size) l.fail(`internal: strided slice past the end (${off} + ${s}·${count - 1} of ${size})`);
  if (s === 1) return off === 0 && count === size ? x : l.one('slice', [x], { dim: d, start: off, end: off + count });
  const end = Math.min(size, off + s * count);
  let t = off === 0 && end === size ? x : l.one('slice', [x], { dim: d, start: off, end });
  // (zeros past the end fill the last row of the view; only column 0 is read, never them)
  if (end - off < s * count) t = l.one('pad', [t], { dim: d, before: 0, after: s * count - (end - off) });
  const grid = l.one('reshape', [t], { shape: [...x.shape.slice(0, d), count, s, ...x.shape.slice(d + 1)] });
  const col = l.one('slice', [grid], { dim: d + 1, start: 0, end: 1 });
  return l.one('reshape', [col], { shape: [...x.shape.slice(0, d), count, ...x.shape.slice(d + 1)] });
}

/** The adjoint of `strided`: t's elements at off, off + s, … along dim d of a zero tensor of `size` there. */
function placed(l: Lowerer, t: TensorVal, d: number, off: number, s: number, size: number): TensorVal {
  const count = t.shape[d] as number;
  let u = t;
  if (s > 1) {
    const col = l.one('reshape', [t], { shape: [...t.shape.slice(0, d), count, 1, ...t.shape.slice(d + 1)] });
    const grid = l.one('pad', [col], { dim: d + 1, before: 0, after: s - 1 });
    u = l.one('reshape', [grid], { shape: [...t.shape.slice(0, d), count * s, ...t.shape.slice(d + 1)] });
  }
  const len = u.shape[d] as number;
  // (the zeros after the last element may run past the end: cut them)
  if (off + len > size) u = l.one('slice', [u], { dim: d, start: 0, end: size - off });
  const after = size - off - (u.shape[d] as number);
  return off === 0 && after === 0 ? u : l.one('pad', [u], { dim: d, before: off, after });
}

export interface Geometry {
  readonly kernel: readonly number[];
  readonly stride: readonly number[];
  readonly padding: readonly number[];
  readonly dilation: readonly number[];
  /** Output sizes of the spatial dims. */
  readonly out: readonly number[];
}

export function outSizes(l: Lowerer, n: FxNode, space: readonly number[], g: Omit<Geometry, 'out'>, ceil: boolean): number[] {
  return space.map((S, i) => {
    const [K, s, p, d] = [g.kernel[i], g.stride[i], g.padding[i], g.dilation[i]] as [number, number, number, number];
    if (s < 1 || d < 1 || p < 0) l.fail(`${n.target}: stride ${s}, dilation ${d}, padding ${p}: positive strides and dilations, padding ≥ 0 expected`);
    const span = S + 2 * p - d * (K - 1) - 1;
    if (span < 0) l.fail(`${n.target}: the kernel (${K}, dilation ${d}) is larger than the padded input (${S} + 2·${p})`);
    const floor = Math.floor(span / s) + 1;
    if (ceil) {
      // ATen's pooling_output_shape: ceil, less one when the last window would start in the padding.
      let c = Math.floor((span + s - 1) / s) + 1;
      if ((c - 1) * s >= S + p) c -= 1;
      if (c !== floor) l.fail(`${n.target}: ceil_mode=True adds a partial window here (${c} outputs instead of ${floor}); only ceil_mode where it changes nothing is supported`);
    }
    return floor;
  });
}

/** Kernel offsets in row-major order (the weight's layout, and the pooling kernels' scan order). */
function offsets(kernel: readonly number[]): number[][] {
  let acc: number[][] = [[]];
  for (const K of kernel) acc = acc.flatMap((o) => Array.from({ length: K }, (_, i) => [...o, i]));
  return acc;
}

/** The window's element at kernel offset `o` for every output position: [N, C, *out]. */
function window(l: Lowerer, x: TensorVal, g: Geometry, o: readonly number[]): TensorVal {
  let t = x;
  o.forEach((i, k) => (t = strided(l, t, 2 + k, i * (g.dilation[k] as number), g.out[k] as number, g.stride[k] as number)));
  return t;
}

/** x with `padding` zeros on both sides of each spatial dim. */
function zeroPadded(l: Lowerer, x: TensorVal, padding: readonly number[]): TensorVal {
  let t = x;
  padding.forEach((p, k) => {
    if (p > 0) t = l.one('pad', [t], { dim: 2 + k, before: p, after: p });
  });
  return t;
}

/** im2col: [N, C·K, P] (P the output positions), the window elements in the weight's (c, k) order; one per input and geometry. */
const colsCache = new WeakMap<TensorVal, Map<string, TensorVal>>();
function columns(l: Lowerer, x: TensorVal, g: Geometry): TensorVal {
  const key = JSON.stringify(g);
  const hit = colsCache.get(x)?.get(key);
  if (hit !== undefined) return hit;
  const [N, C] = x.shape as [number, number];
  const xp = zeroPadded(l, x, g.padding);
  const P = prod(g.out);
  const pieces = offsets(g.kernel).map((o) => l.one('reshape', [window(l, xp, g, o)], { shape: [N, C, 1, P] }));
  const stacked = pieces.length === 1 ? (pieces[0] as TensorVal) : l.one('concat', pieces, { dim: 2 });
  const cols = l.one('reshape', [stacked], { shape: [N, C * pieces.length, P] });
  const m = colsCache.get(x) ?? new Map<string, TensorVal>();
  m.set(key, cols);
  colsCache.set(x, m);
  return cols;
}

/** A convolution's spatial dims and its stride, padding and dilation (arguments from k0), ordinary or transposed. */
export function convDims(l: Lowerer, n: FxNode, x: TensorVal, w: TensorVal, k0: number): { k: number; stride: number[]; padding: number[]; dilation: number[] } {
  const k = x.shape.length - 2;
  if (k < 1 || k > 3 || w.shape.length !== k + 2) l.fail(`${n.target}: input [${x.shape.join(', ')}] and weight [${w.shape.join(', ')}]: a batched input with 1 to 3 spatial dims expected (an unbatched input is not supported)`);
  const ones = Array.from({ length: k }, () => 1);
  const zeros = Array.from({ length: k }, () => 0);
  return { k, stride: perDim(l, n, k, 'stride', k0, ones), padding: perDim(l, n, k, 'padding', k0 + 1, zeros), dilation: perDim(l, n, k, 'dilation', k0 + 2, ones) };
}

/** The convolution's geometry (and its groups), refusing what is not mapped here (transposed: aten-cv.ts). */
function convGeometry(l: Lowerer, n: FxNode, x: TensorVal, w: TensorVal, k0: number): Geometry & { readonly groups: number } {
  const { stride, padding, dilation } = convDims(l, n, x, w, k0);
  if (l.bool(l.arg(n, k0 + 3, 'transposed'), 'transposed', false)) l.fail(`${n.target}: a transposed convolution here: its rule is aten-cv.ts's (registered after this table)`);
  const groups = l.int(l.arg(n, k0 + 5, 'groups'), 'groups', 1);
  const C = x.shape[1] as number;
  const O = w.shape[0] as number;
  if (!(groups >= 1) || C % groups !== 0 || O % groups !== 0) l.fail(`${n.target}: groups=${groups} does not divide the ${C} input and ${O} output channels`);
  if ((w.shape[1] as number) * groups !== C) l.fail(`${n.target}: the weight has ${w.shape[1]} input channels per group, the input ${C} in ${groups} group(s)`);
  const kernel = w.shape.slice(2);
  return { kernel, stride, padding, dilation, groups, out: outSizes(l, n, x.shape.slice(2), { kernel, stride, padding, dilation }, false) };
}

/** The columns of each group, [N, G, (C/G)·K, P] (the (c, k) order makes the groups contiguous). */
export function groupedColumns(l: Lowerer, x: TensorVal, g: Geometry & { readonly groups: number }): TensorVal {
  const { kernel, stride, padding, dilation, out } = g;
  const cols = columns(l, x, { kernel, stride, padding, dilation, out });
  if (g.groups === 1) return cols;
  const [N, CK, P] = cols.shape as [number, number, number];
  return l.one('reshape', [cols], { shape: [N, g.groups, CK / g.groups, P] });
}

/** convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups). */
const convolution: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'input');
  const w = l.tensor(n.args[1], 'weight');
  const b = l.optTensor(n.args[2], 'bias');
  const g = convGeometry(l, n, x, w, 3);
  const [N] = x.shape as [number];
  const O = w.shape[0] as number;
  const G = g.groups;
  // [G, O/G, (C/G)·K] @ [N, G, (C/G)·K, P] per group (plain [O, C·K] @ [N, C·K, P] for one).
  const w2 = l.one('reshape', [w], { shape: G === 1 ? [O, prod(w.shape.slice(1))] : [G, O / G, prod(w.shape.slice(1))] });
  let y = l.one('matmul', [w2, groupedColumns(l, x, g)]);
  if (G > 1) y = l.one('reshape', [y], { shape: [N, O, prod(g.out)] });
  if (b !== undefined) y = l.one('add', [y, l.one('reshape', [b], { shape: [O, 1] })]);
  return l.bind(n, l.one('reshape', [y], { shape: [N, O, ...g.out] }, l.out(n), x.dtype));
};

/**
 * The input gradient of a convolution (the adjoint of im2col then the weight): g3 the output
 * gradient as [N, O, P] (or [N, G, O/G, P]), wg the weight as [O, C·K] (or [G, O/G, (C/G)·K]),
 * xShape the input's shape [N, C, *space]. The columns' gradient wᵀ·g, each offset's part placed
 * back where its window read, the padding cut off. Also a transposed convolution's forward.
 */
export function inputGradOf(l: Lowerer, g3: TensorVal, wg: TensorVal, G: number, xShape: readonly number[], g: Geometry): TensorVal {
  const [N, C] = xShape as [number, number];
  const w2t = l.one('transpose', [wg], { dim0: G === 1 ? 0 : 1, dim1: G === 1 ? 1 : 2 });
  const dcols = l.one('reshape', [l.one('matmul', [w2t, g3])], { shape: [N, C, prod(g.kernel), ...g.out] });
  const padded = xShape.slice(2).map((S, i) => S + 2 * (g.padding[i] as number));
  const parts = offsets(g.kernel).map((o, k) => {
    let t = l.one('reshape', [l.one('slice', [dcols], { dim: 2, start: k, end: k + 1 })], { shape: [N, C, ...g.out] });
    o.forEach((i, d) => (t = placed(l, t, 2 + d, i * (g.dilation[d] as number), g.stride[d] as number, padded[d] as number)));
    return t;
  });
  let dx = parts.reduce((a, b) => l.one('add', [a, b]));
  g.padding.forEach((p, d) => {
    if (p > 0) dx = l.one('slice', [dx], { dim: 2 + d, start: p, end: p + (xShape[2 + d] as number) });
  });
  return dx;
}

/** The weight gradient Σ_n g · colsᵀ (g3 as in inputGradOf, cols from groupedColumns), as wShape. */
export function weightGradOf(l: Lowerer, g3: TensorVal, cols: TensorVal, wShape: readonly number[], out: string): TensorVal {
  const perRow = l.one('matmul', [g3, l.one('transpose', [cols], { dim0: cols.shape.length - 2, dim1: cols.shape.length - 1 })]);
  return l.one('reshape', [l.one('sum', [perRow], { dims: [0] })], { shape: [...wShape] }, out);
}

/** convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask). */
const convolutionBackward: Rule = (l, n) => {
  const gy = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'input');
  const w = l.tensor(n.args[2], 'weight');
  const g = convGeometry(l, n, x, w, 4);
  const maskArg = l.arg(n, 10, 'output_mask');
  const mask = maskArg?.kind === 'list' ? maskArg.items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
  const [N, C] = x.shape as [number, number];
  const O = w.shape[0] as number;
  const P = prod(g.out);
  const CK = prod(w.shape.slice(1));
  const G = g.groups;
  // Per group with G > 1: g as [N, G, O/G, P], the weight as [G, O/G, (C/G)·K].
  const g3 = l.one('reshape', [gy], { shape: G === 1 ? [N, O, P] : [N, G, O / G, P] });
  const wg = l.one('reshape', [w], { shape: G === 1 ? [O, CK] : [G, O / G, CK] });
  const space = x.shape.slice(2).map((_, i) => 2 + i);
  const items: Val[] = [{ kind: 'none' }, { kind: 'none' }, { kind: 'none' }];
  if (mask[0] === true) items[0] = l.one('identity', [inputGradOf(l, g3, wg, G, [N, C, ...x.shape.slice(2)], g)], {}, `${l.out(n)}.grad_input`);
  if (mask[1] === true) items[1] = weightGradOf(l, g3, groupedColumns(l, x, g), w.shape, `${l.out(n)}.grad_weight`);
  if (mask[2] === true) items[2] = l.one('sum', [gy], { dims: [0, ...space] }, `${l.out(n)}.grad_bias`);
  return l.bind(n, { kind: 'list', items });
};

/** Pooling geometry: kernel, stride (default the kernel), padding, dilation from argument k0 on. */
function poolGeometry(l: Lowerer, n: FxNode, x: TensorVal, k: number, k0: number, withDilation: boolean, ceilAt: number): Geometry {
  if (x.shape.length !== k + 2) l.fail(`${n.target}: input [${x.shape.join(', ')}]: a batched input [N, C, ...] with ${k} spatial dims expected (an unbatched input is not supported)`);
  const kernel = perDim(l, n, k, 'kernel_size', k0, []);
  if (kernel.length !== k) l.fail(`${n.target}: kernel_size has ${kernel.length} entries for ${k} spatial dims`);
  const stride = perDim(l, n, k, 'stride', k0 + 1, kernel);
  const padding = perDim(l, n, k, 'padding', k0 + 2, kernel.map(() => 0));
  const dilation = withDilation ? perDim(l, n, k, 'dilation', k0 + 3, kernel.map(() => 1)) : kernel.map(() => 1);
  const ceil = l.bool(l.arg(n, ceilAt, 'ceil_mode'), 'ceil_mode', false);
  return { kernel, stride, padding, dilation, out: outSizes(l, n, x.shape.slice(2), { kernel, stride, padding, dilation }, ceil) };
}

/** What max pooling keeps for its backward: the input, the window elements in scan order, the maximum. */
interface MaxPoolSaved {
  readonly x: TensorVal;
  readonly geometry: Geometry;
  readonly candidates: readonly TensorVal[];
  readonly max: TensorVal;
}
const maxPoolIndices = new WeakMap<OpaqueVal, MaxPoolSaved>();

function maxPool(k: number, withIndices: boolean): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const g = poolGeometry(l, n, x, k, 1, true, 5);
    if (g.padding.some((p) => p > 0)) l.fail(`${n.target}: padding ${JSON.stringify(g.padding)}: max pooling pads with -inf, which is not an exact real; only padding 0 is supported`);
    const candidates = offsets(g.kernel).map((o) => window(l, x, g, o));
    const m = candidates.slice(1).reduce((a, c) => l.one('maximum', [a, c]), candidates[0] as TensorVal);
    const out = l.one('identity', [m], {}, withIndices ? `${l.out(n)}.0` : l.out(n));
    if (!withIndices) return l.bind(n, out);
    const idx: OpaqueVal = { kind: 'opaque', what: 'the max-pooling indices', data: { x: x.id } };
    maxPoolIndices.set(idx, { x, geometry: g, candidates, max: out });
    return l.bind(n, { kind: 'list', items: [out, idx] });
  };
}

/** max_pool*_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices). */
function maxPoolBackward(k: number): Rule {
  return (l, n) => {
    const gy = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const g = poolGeometry(l, n, x, k, 2, true, 6);
    const idx = l.val(l.arg(n, 7, 'indices'), 'indices');
    const saved = idx.kind === 'opaque' ? maxPoolIndices.get(idx) : undefined;
    if (saved === undefined || saved.x.id !== x.id || JSON.stringify(saved.geometry) !== JSON.stringify(g)) return l.fail(`${n.target}: the indices must be those max_pool*_with_indices returned for the same input and window`);
    // Torch's CPU kernel keeps the first maximum in scan order (`val > maxval`): offset k gets g
    // where x_k reaches the maximum and no earlier x_j does.
    const below = saved.candidates.map((c) => l.one('compare', [c, saved.max], { rel: 'lt' }, undefined, 'bool'));
    const padded = x.shape.slice(2);
    let none: TensorVal | undefined;
    const parts = offsets(g.kernel).map((o, j) => {
      const reaches = l.one('compare', [saved.candidates[j] as TensorVal, saved.max], { rel: 'ge' }, undefined, 'bool');
      const first = none === undefined ? reaches : l.one('mul', [reaches, none], {}, undefined, 'bool');
      none = none === undefined ? (below[j] as TensorVal) : l.one('mul', [none, below[j] as TensorVal], {}, undefined, 'bool');
      let t = l.one('mul', [gy, first], {}, undefined, gy.dtype);
      o.forEach((i, d) => (t = placed(l, t, 2 + d, i * (g.dilation[d] as number), g.stride[d] as number, padded[d] as number)));
      return t;
    });
    return l.bind(n, l.one('identity', [parts.reduce((a, b) => l.one('add', [a, b]))], {}, l.out(n)));
  };
}

/** Average pooling's divisor: the window size, or divisor_override; padding only when counted (count_include_pad). */
function avgDivisor(l: Lowerer, n: FxNode, g: Geometry, countAt: number): number {
  const count = l.bool(l.arg(n, countAt, 'count_include_pad'), 'count_include_pad', true);
  const over = l.arg(n, countAt + 1, 'divisor_override');
  if (g.padding.some((p) => p > 0) && !count && (over === undefined || over.kind === 'none')) l.fail(`${n.target}: count_include_pad=False with padding divides border windows by fewer elements; not supported`);
  return over === undefined || over.kind === 'none' ? prod(g.kernel) : l.int(over, 'divisor_override');
}

/** avg_pool*(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override). */
function avgPool(k: number): Rule {
  return (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const g = poolGeometry(l, n, x, k, 1, false, 4);
    const div = avgDivisor(l, n, g, 5);
    const xp = zeroPadded(l, x, g.padding);
    const s = offsets(g.kernel).map((o) => window(l, xp, g, o)).reduce((a, b) => l.one('add', [a, b]));
    return l.bind(n, l.one('div', [s, l.constant(div)], {}, l.out(n), x.dtype));
  };
}

/** avg_pool*_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override). */
function avgPoolBackward(k: number): Rule {
  return (l, n) => {
    const gy = l.tensor(n.args[0], 'grad_output');
    const x = l.tensor(n.args[1], 'self');
    const g = poolGeometry(l, n, x, k, 2, false, 5);
    const gd = l.one('div', [gy, l.constant(avgDivisor(l, n, g, 6))]);
    const padded = x.shape.slice(2).map((S, i) => S + 2 * (g.padding[i] as number));
    let dx = offsets(g.kernel)
      .map((o) => {
        let t = gd;
        o.forEach((i, d) => (t = placed(l, t, 2 + d, i, g.stride[d] as number, padded[d] as number)));
        return t;
      })
      .reduce((a, b) => l.one('add', [a, b]));
    g.padding.forEach((p, d) => {
      if (p > 0) dx = l.one('slice', [dx], { dim: 2 + d, start: p, end: p + (x.shape[2 + d] as number) });
    });
    return l.bind(n, l.one('identity', [dx], {}, l.out(n)));
  };
}

/** Adaptive average pooling as average pooling with kernel = stride = input / output (even windows only). */
function adaptiveGeometry(l: Lowerer, n: FxNode, x: TensorVal, outSize: readonly number[]): Geometry {
  const space = x.shape.slice(-outSize.length);
  if (x.shape.length !== outSize.length + 2) l.fail(`${n.target}: input [${x.shape.join(', ')}]: a batched input [N, C, ...] expected`);
  const kernel = space.map((S, i) => {
    const o = outSize[i] as number;
    if (o < 1 || S % o !== 0) l.fail(`${n.target}: output size ${o} does not divide the input size ${S}: windows of different sizes are not supported`);
    return S / o;
  });
  return { kernel, stride: kernel, padding: kernel.map(() => 0), dilation: kernel.map(() => 1), out: [...outSize] };
}

const adaptiveAvgPool: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'self');
  const outSize = l.ints(n.args[1], 'output_size');
  const g = adaptiveGeometry(l, n, x, outSize);
  const s = offsets(g.kernel).map((o) => window(l, x, g, o)).reduce((a, b) => l.one('add', [a, b]));
  return l.bind(n, l.one('div', [s, l.constant(prod(g.kernel))], {}, l.out(n), x.dtype));
};

const adaptiveAvgPoolBackward: Rule = (l, n) => {
  const gy = l.tensor(n.args[0], 'grad_output');
  const x = l.tensor(n.args[1], 'self');
  const g = adaptiveGeometry(l, n, x, gy.shape.slice(2));
  const gd = l.one('div', [gy, l.constant(prod(g.kernel))]);
  const parts = offsets(g.kernel).map((o) => {
    let t = gd;
    o.forEach((i, d) => (t = placed(l, t, 2 + d, i, g.stride[d] as number, x.shape[2 + d] as number)));
    return t;
  });
  return l.bind(n, l.one('identity', [parts.reduce((a, b) => l.one('add', [a, b]))], {}, l.out(n)));
};

/** A per-channel [C] tensor viewed to broadcast against [N, C, *space]. */
const perChannel = (l: Lowerer, t: TensorVal, rank: number): TensorVal => l.one('reshape', [t], { shape: [t.shape[0] as number, ...Array.from({ length: rank - 2 }, () => 1)] });

/**
 * x̂ = (x − mean)·invstd of each forward, by the value ids of x, mean and invstd: its backward
 * (training) reads the saved mean and invstd and the same input, so it reads the forward's x̂
 * rather than a second copy of it. A copy was another logical tensor of the same values, and a
 * SyncBatchNorm's backward whose x̂ the proof names by the forward's could not be cut there.
 * Same value ids, same op: the same values on every run, so nothing is assumed.
 */
const NORMALIZED = new WeakMap<Lowerer, Map<string, TensorVal>>();
function normalizedBy(l: Lowerer): Map<string, TensorVal> {
  let m = NORMALIZED.get(l);
  if (m === undefined) NORMALIZED.set(l, (m = new Map()));
  return m;
}

/** native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps) -> (out, save_mean, save_invstd). */
const batchNorm: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'input');
  if (x.shape.length < 2) l.fail(`${n.target}: input [${x.shape.join(', ')}]: [N, C, ...] expected`);
  const w = l.optTensor(l.arg(n, 1, 'weight'), 'weight');
  const b = l.optTensor(l.arg(n, 2, 'bias'), 'bias');
  const rm = l.optTensor(l.arg(n, 3, 'running_mean'), 'running_mean');
  const rv = l.optTensor(l.arg(n, 4, 'running_var'), 'running_var');
  const training = l.bool(l.arg(n, 5, 'training'), 'training', true);
  const momentum = l.num(l.arg(n, 6, 'momentum'), 'momentum');
  const eps = l.num(l.arg(n, 7, 'eps'), 'eps');
  const r = x.shape.length;
  const dims = [0, ...x.shape.slice(2).map((_, i) => 2 + i)];
  const M = x.shape[0] as number * prod(x.shape.slice(2));
  let mean: TensorVal;
  let varB: TensorVal;
  let d: TensorVal;
  if (training) {
    mean = l.one('mean', [x], { dims });
    d = l.one('sub', [x, perChannel(l, mean, r)]);
    varB = l.one('mean', [l.one('mul', [d, d])], { dims });
  } else {
    if (rm === undefined || rv === undefined) return l.fail(`${n.target}: eval mode without running statistics`);
    [mean, varB] = [rm, rv];
    d = l.one('sub', [x, perChannel(l, mean, r)]);
  }
  const invstd = l.one('div', [l.constant(1), l.one('sqrt', [l.one('add', [varB, l.constant(eps)])])]);
  // (x − mean) once, for the variance and the output: a second copy was another logical
  // tensor of the same values, so a stage whose parallel side reads one centred tensor (a
  // SyncBatchNorm computing both from it) named a tensor the logical output never reads.
  let y = l.one('mul', [d, perChannel(l, invstd, r)]);
  normalizedBy(l).set(`${x.id}|${mean.id}|${invstd.id}`, y);
  if (w !== undefined) y = l.one('mul', [y, perChannel(l, w, r)]);
  if (b !== undefined) y = l.one('add', [y, perChannel(l, b, r)]);
  if (training && rm !== undefined && rv !== undefined) {
    // ATen updates the running statistics in place: the mean, and the unbiased variance.
    if (M < 2) l.fail(`${n.target}: one value per channel: the unbiased variance is undefined`);
    const keep = (t: TensorVal): TensorVal => l.one('scale', [t], { factor: 1 - momentum });
    l.write(l.arg(n, 3, 'running_mean'), l.one('add', [keep(rm), l.one('scale', [mean], { factor: momentum })]));
    l.write(l.arg(n, 4, 'running_var'), l.one('add', [keep(rv), l.one('mul', [l.one('scale', [varB], { factor: momentum }), l.one('div', [l.constant(M), l.constant(M - 1)])])]));
  }
  const out = l.one('identity', [y], {}, `${l.out(n)}.0`, x.dtype);
  // (eval mode saves empty tensors: nothing may read them but the backward, which recomputes)
  const saved = (t: TensorVal, what: string): Val => (training ? t : { kind: 'opaque', what, data: { x: x.id } });
  return l.bind(n, { kind: 'list', items: [out, saved(mean, 'the BatchNorm saved mean (eval)'), saved(invstd, 'the BatchNorm saved invstd (eval)')] });
};

/**
 * native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
 * save_invstd, train, eps, output_mask). Training: over the saved statistics, x̂ = (x − mean)·invstd,
 * dx = w·invstd·(g − mean(g) − x̂·mean(g·x̂)), dw = Σ g·x̂, db = Σ g (per channel). Eval: the
 * running statistics are constants of the forward, dx = w·invstd·g.
 */
const batchNormBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_out');
  const x = l.tensor(n.args[1], 'input');
  const w = l.optTensor(l.arg(n, 2, 'weight'), 'weight');
  const train = l.bool(l.arg(n, 7, 'train'), 'train', true);
  const eps = l.num(l.arg(n, 8, 'eps'), 'eps');
  const maskArg = l.arg(n, 9, 'output_mask');
  const mask = maskArg?.kind === 'list' ? maskArg.items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
  const r = x.shape.length;
  const dims = [0, ...x.shape.slice(2).map((_, i) => 2 + i)];
  let mean: TensorVal;
  let invstd: TensorVal;
  if (train) {
    mean = l.tensor(l.arg(n, 5, 'save_mean'), 'save_mean');
    invstd = l.tensor(l.arg(n, 6, 'save_invstd'), 'save_invstd');
  } else {
    mean = l.tensor(l.arg(n, 3, 'running_mean'), 'running_mean');
    invstd = l.one('div', [l.constant(1), l.one('sqrt', [l.one('add', [l.tensor(l.arg(n, 4, 'running_var'), 'running_var'), l.constant(eps)])])]);
  }
  const xhat = (train ? normalizedBy(l).get(`${x.id}|${mean.id}|${invstd.id}`) : undefined) ?? l.one('mul', [l.one('sub', [x, perChannel(l, mean, r)]), perChannel(l, invstd, r)]);
  const scale = w === undefined ? perChannel(l, invstd, r) : perChannel(l, l.one('mul', [w, invstd]), r);
  const items: Val[] = [{ kind: 'none' }, { kind: 'none' }, { kind: 'none' }];
  // g·x̂ once, for the input and the weight gradients (two copies were two logical tensors of
  // the same values, and a parallel side computing it once could be cut at only one).
  let gx: TensorVal | undefined;
  const gxhat = (): TensorVal => (gx ??= l.one('mul', [g, xhat]));
  if (mask[0] === true) {
    // g − mean(g) once per g: two BatchNorms whose outputs are summed (ResNet's downsample
    // and its block's last BatchNorm) get the same g, and a second copy was a tensor the proof
    // could not cut at (the parallel side's all-reduced mean named the first).
    const centredG = (): TensorVal => {
      const key = `${g.id}|g-mean(g)`;
      const gc = normalizedBy(l).get(key) ?? l.one('sub', [g, l.one('mean', [g], { dims, keepdim: true })]);
      normalizedBy(l).set(key, gc);
      return gc;
    };
    const centred = train ? l.one('sub', [centredG(), l.one('mul', [xhat, l.one('mean', [gxhat()], { dims, keepdim: true })])]) : g;
    items[0] = l.one('mul', [centred, scale], {}, `${l.out(n)}.grad_input`, g.dtype);
  }
  if (mask[1] === true) items[1] = l.one('sum', [gxhat()], { dims }, `${l.out(n)}.grad_weight`);
  if (mask[2] === true) items[2] = l.one('sum', [g], { dims }, `${l.out(n)}.grad_bias`);
  return l.bind(n, { kind: 'list', items });
};

/** GroupNorm's input as [N, G, (C/G)·HxW] (the rows it normalizes), checking the sizes the op states. */
function groupRows(l: Lowerer, n: FxNode, x: TensorVal, k0: number): { rows: TensorVal; G: number; C: number; space: number[] } {
  const N = l.int(n.args[k0], 'N');
  const C = l.int(n.args[k0 + 1], 'C');
  const HxW = l.int(n.args[k0 + 2], 'HxW');
  const G = l.int(n.args[k0 + 3], 'group');
  const rest = prod(x.shape.slice(2));
  if (x.shape[0] !== N || x.shape[1] !== C || rest !== HxW || !(G >= 1) || C % G !== 0) l.fail(`${n.target}: input [${x.shape.join(', ')}] is not N=${N}, C=${C}, HxW=${HxW} in ${G} groups`);
  const rows = l.one('reshape', [x], { shape: [N, G, (C / G) * rest] });
  return { rows, G, C, space: x.shape.slice(2).map((_, i) => 2 + i) };
}

/**
 * native_group_norm(input, weight, bias, N, C, HxW, group, eps): each sample's channels in
 * groups of C/G, normalized together with their positions: layer_norm over the last dim of
 * [N, G, (C/G)·HxW] (biased variance, eps inside the root), then the per-channel affine.
 */
const groupNorm: Rule = (l, n) => {
  const x = l.tensor(n.args[0], 'input');
  const w = l.optTensor(n.args[1], 'weight');
  const b = l.optTensor(n.args[2], 'bias');
  const eps = l.num(n.args[7], 'eps');
  const { rows, G } = groupRows(l, n, x, 3);
  let y = l.one('reshape', [l.one('layer_norm', [rows], { eps, normalized_dims: 1 })], { shape: [...x.shape] });
  if (w !== undefined) y = l.one('mul', [y, perChannel(l, w, x.shape.length)]);
  if (b !== undefined) y = l.one('add', [y, perChannel(l, b, x.shape.length)]);
  y = l.one('identity', [y], {}, `${l.out(n)}.0`, x.dtype);
  const stat = (what: string): OpaqueVal => ({ kind: 'opaque', what, data: { x: x.id, eps, groups: G } });
  return l.bind(n, { kind: 'list', items: [y, stat('the GroupNorm mean'), stat('the GroupNorm rstd')] });
};

/**
 * native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
 * over the forward's statistics: dx is layer_norm's backward of g·w on the group rows (the
 * affine-free one: rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))), dw = Σ g·x̂ and db = Σ g over batch and space.
 */
const groupNormBackward: Rule = (l, n) => {
  const g = l.tensor(n.args[0], 'grad_out');
  const x = l.tensor(n.args[1], 'input');
  let eps = 0;
  for (const [k, what] of [[2, 'the GroupNorm mean'], [3, 'the GroupNorm rstd']] as const) {
    const s = l.val(n.args[k], k === 2 ? 'mean' : 'rstd');
    if (s.kind !== 'opaque' || s.what !== what || s.data['x'] !== x.id) return l.fail(`argument ${k === 2 ? 'mean' : 'rstd'}: expected ${what} of the same input from native_group_norm (saved statistics as tensors are not supported)`);
    eps = Number(s.data['eps']);
  }
  const w = l.optTensor(n.args[4], 'weight');
  const { rows, space } = groupRows(l, n, x, 5);
  const maskArg = n.args[9];
  const mask = maskArg?.kind === 'list' ? maskArg.items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
  const items: Val[] = [{ kind: 'none' }, { kind: 'none' }, { kind: 'none' }];
  if (mask[0] === true) {
    const gw = w === undefined ? g : l.one('mul', [g, perChannel(l, w, x.shape.length)]);
    const gRows = l.one('reshape', [gw], { shape: [...rows.shape] });
    const [dRows] = l.emit('layer_norm_backward', [gRows, rows], { eps, normalized_dims: 1 }, [`${l.out(n)}.rows`], g.dtype);
    items[0] = l.one('reshape', [dRows as TensorVal], { shape: [...x.shape] }, `${l.out(n)}.grad_input`, g.dtype);
  }
  if (mask[1] === true && w !== undefined) {
    const xhat = l.one('reshape', [l.one('layer_norm', [rows], { eps, normalized_dims: 1 })], { shape: [...x.shape] });
    items[1] = l.one('sum', [l.one('mul', [g, xhat])], { dims: [0, ...space] }, `${l.out(n)}.grad_weight`, g.dtype);
  }
  if (mask[2] === true) items[2] = l.one('sum', [g], { dims: [0, ...space] }, `${l.out(n)}.grad_bias`, g.dtype);
  return l.bind(n, { kind: 'list', items });
};

export const CONV_RULES: Record<string, Rule> = {
  'aten.native_group_norm': groupNorm,
  'aten.native_group_norm_backward': groupNormBackward,
  'aten.convolution': convolution,
  'aten.convolution_backward': convolutionBackward,
  'aten.max_pool2d_with_indices': maxPool(2, true),
  'aten.max_pool3d_with_indices': maxPool(3, true),
  'aten.max_pool2d': maxPool(2, false),
  'aten.max_pool2d_with_indices_backward': maxPoolBackward(2),
  'aten.max_pool3d_with_indices_backward': maxPoolBackward(3),
  'aten.avg_pool2d': avgPool(2),
  'aten.avg_pool3d': avgPool(3),
  'aten.avg_pool2d_backward': avgPoolBackward(2),
  'aten.avg_pool3d_backward': avgPoolBackward(3),
  'aten.adaptive_avg_pool2d': adaptiveAvgPool,
  'aten._adaptive_avg_pool2d': adaptiveAvgPool,
  'aten._adaptive_avg_pool2d_backward': adaptiveAvgPoolBackward,
  'aten.native_batch_norm': batchNorm,
  'aten.native_batch_norm_backward': batchNormBackward,
};
