/** Ops that move elements without arithmetic: transpose, permute, reshape, slice, concat, split. */
import type { Algebra, Dense } from './algebra.js';
import { arg, at, cat, generate, narrow } from './dense.js';
import { dimLabels, resizeOneDim, shapeAttrAtLanes } from './dims.js';
import { type GradRef, one } from './grad.js';
import { type Attrs, type DimLabel, type DimSig, type OpDef, attrInts, attrNum, attrObject, fixed, normDim, numel, ShapeError, type Shape, shapeStr, withZeroTails, ZERO_ALWAYS } from './types.js';

function permuteApply<S>(x: Dense<S>, dims: readonly number[]): Dense<S> {
  const shape = dims.map((d) => x.shape[d] as number);
  return generate(shape, (idx) => {
    const src = new Array<number>(dims.length);
    dims.forEach((d, i) => (src[d] = idx[i] as number));
    return at(x, src);
  });
}

const intList = { type: 'array', items: { type: 'integer' }, maxItems: 16 };

export const ops: OpDef[] = withZeroTails([
  {
    name: 'transpose',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    linearIn: () => [0],
    doc: 'torch.transpose(a, dim0, dim1)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ dim0: { type: 'integer' }, dim1: { type: 'integer' } }, ['dim0', 'dim1']),
    shape: ([a], at) => {
      const s = [...(a as Shape)];
      const d0 = normDim(attrNum(at, 'dim0'), s.length, 'dim0');
      const d1 = normDim(attrNum(at, 'dim1'), s.length, 'dim1');
      [s[d0], s[d1]] = [s[d1] as number, s[d0] as number];
      return [s];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const d0 = normDim(attrNum(a, 'dim0'), x.shape.length);
      const d1 = normDim(attrNum(a, 'dim1'), x.shape.length);
      const dims = x.shape.map((_, i) => (i === d0 ? d1 : i === d1 ? d0 : i));
      return [permuteApply(x, dims)];
    },
    backward: (b, { grads: [g], attrs }) => [one(b, 'transpose', [g as GradRef], { dim0: attrs['dim0'] ?? 0, dim1: attrs['dim1'] ?? 0 })],
    // Labels move with the dims.
    dims: ([a], at) => {
      const l = dimLabels(a as Shape, 'd', 'batch');
      const d0 = normDim(attrNum(at, 'dim0'), l.length, 'dim0');
      const d1 = normDim(attrNum(at, 'dim1'), l.length, 'dim1');
      return { inputs: [l], outputs: [l.map((x, i) => (i === d0 ? l[d1] : i === d1 ? l[d0] : x) as typeof x)] };
    },
  },
  {
    name: 'permute',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    linearIn: () => [0],
    doc: 'a.permute(dims)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ dims: intList }, ['dims']),
    shape: ([a], at) => {
      const s = a as Shape;
      const dims = (attrInts(at, 'dims') ?? []).map((d) => normDim(d, s.length));
      if (dims.length !== s.length || new Set(dims).size !== dims.length) throw new ShapeError(`dims [${dims.join(', ')}] are not a permutation of ${s.length} dims`);
      return [dims.map((d) => s[d] as number)];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      return [permuteApply(x, (attrInts(a, 'dims') ?? []).map((d) => normDim(d, x.shape.length)))];
    },
    backward: (b, { inputs: [x], grads: [g], attrs }) => {
      const r = b.shape(x as GradRef).length;
      const dims = (attrInts(attrs, 'dims') ?? []).map((d) => normDim(d, r));
      const inv = new Array<number>(r);
      dims.forEach((d, i) => (inv[d] = i));
      return [one(b, 'permute', [g as GradRef], { dims: inv })];
    },
    dims: ([a], at) => {
      const l = dimLabels(a as Shape, 'd', 'batch');
      return { inputs: [l], outputs: [(attrInts(at, 'dims') ?? []).map((d) => l[normDim(d, l.length)] as (typeof l)[number])] };
    },
  },
  {
    name: 'reshape',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    linearIn: () => [0],
    doc: 'a.reshape(shape) (row-major; one -1 allowed)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ shape: { type: 'array', items: { type: 'integer', minimum: -1 }, maxItems: 16 } }, ['shape']),
    shape: ([a], at) => {
      const s = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      const n = numel(s);
      const free = tgt.filter((d) => d === -1).length;
      if (free > 1) throw new ShapeError('at most one -1 in reshape');
      const known = tgt.reduce((p, d) => (d === -1 ? p : p * d), 1);
      const out = tgt.map((d) => (d === -1 ? (known === 0 ? 0 : n / known) : d));
      if (!out.every((d) => Number.isInteger(d) && d >= 0) || numel(out) !== n) throw new ShapeError(`cannot reshape ${shapeStr(s)} (${n} elements) to ${shapeStr(tgt)}`);
      return [out];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const tgt = attrInts(a, 'shape') ?? [];
      const known = tgt.reduce((p, d) => (d === -1 ? p : p * d), 1);
      return [{ shape: tgt.map((d) => (d === -1 ? x.data.length / known : d)), data: x.data }];
    },
    backward: (b, { inputs: [x], grads: [g] }) => [one(b, 'reshape', [g as GradRef], { shape: [...b.shape(x as GradRef)] })],
    // The target shape is an attribute: every dim on both sides is fixed (conservative; a dim
    // that reshape leaves alone could be tracked, but its size is still spelled in the attribute).
    dims: ([a], at) => {
      const s = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      return { inputs: [dimLabels(s, 'in', 'fixed')], outputs: [dimLabels(tgt, 'out', 'fixed')] };
    },
    sliceRegions: ([a], [o], [reg]) => reshapeRegions(a as Shape, o as Shape, reg as readonly (readonly [number, number])[]),
    lanes: ([a], at) => {
      const s = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      const known = tgt.reduce((p, d) => (d === -1 ? p : p * d), 1);
      return reshapeLanes(s, tgt.map((d) => (d === -1 ? numel(s) / known : d)));
    },
    laneAttrs: shapeAttrAtLanes,
  },
  {
    name: 'slice',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    narrows: { dim: 'dim', start: 'start', end: 'end' },
    doc: 'a.narrow(dim, start, end - start), i.e. a[..., start:end, ...]',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ dim: { type: 'integer' }, start: { type: 'integer', minimum: 0 }, end: { type: 'integer', minimum: 0 } }, ['dim', 'start', 'end']),
    shape: ([a], at) => {
      const s = [...(a as Shape)];
      const d = normDim(attrNum(at, 'dim'), s.length);
      const st = attrNum(at, 'start');
      const en = attrNum(at, 'end');
      if (!(st < en && en <= (s[d] as number))) throw new ShapeError(`slice [${st}, ${en}) is not inside dim ${d} of size ${s[d]}`);
      s[d] = en - st;
      return [s];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      return [narrow(x, normDim(attrNum(a, 'dim'), x.shape.length), attrNum(a, 'start'), attrNum(a, 'end'))];
    },
    backward: (b, { inputs: [x], grads: [g], attrs }) => {
      const xs = b.shape(x as GradRef);
      const d = normDim(attrNum(attrs, 'dim'), xs.length);
      return [one(b, 'pad', [g as GradRef], { dim: d, before: attrNum(attrs, 'start'), after: (xs[d] as number) - attrNum(attrs, 'end') })];
    },
    dims: ([a], at) => resizeOneDim(a as Shape, attrNum(at, 'dim')),
  },
  {
    name: 'concat',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    doc: 'torch.cat(inputs, dim)',
    inputs: { min: 1, max: Infinity },
    outputs: fixed(1),
    attrSchema: attrObject({ dim: { type: 'integer' } }, ['dim']),
    shape: (ins, at) => {
      const first = ins[0] as Shape;
      const d = normDim(attrNum(at, 'dim'), first.length);
      let total = 0;
      ins.forEach((s, k) => {
        if (s.length !== first.length || s.some((v, i) => i !== d && v !== first[i])) {
          throw new ShapeError(`input ${k} ${shapeStr(s)} does not match input 0 ${shapeStr(first)} outside dim ${d}`);
        }
        total += s[d] as number;
      });
      const out = [...first];
      out[d] = total;
      return [out];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => [cat(ins, normDim(attrNum(a, 'dim'), arg(ins, 0).shape.length))],
    backward: (b, { inputs, grads: [g], attrs }) => {
      const d = normDim(attrNum(attrs, 'dim'), b.shape(inputs[0] as GradRef).length);
      return b.op('split', [g as GradRef], { dim: d, sizes: inputs.map((x) => b.shape(x)[d] as number) });
    },
    dims: (ins, at) => resizeOneDim(ins[0] as Shape, attrNum(at, 'dim'), ins.length, 1),
  },
  {
    name: 'split',
    family: 'layout',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    doc: 'torch.split(a, sizes, dim): one output per size',
    inputs: fixed(1),
    outputs: { min: 1, max: Infinity },
    attrSchema: attrObject({ dim: { type: 'integer' }, sizes: { type: 'array', items: { type: 'integer', minimum: 1 }, minItems: 1, maxItems: 65536 } }, ['dim', 'sizes']),
    shape: ([a], at) => {
      const s = a as Shape;
      const d = normDim(attrNum(at, 'dim'), s.length);
      const sizes = attrInts(at, 'sizes') ?? [];
      const tot = sizes.reduce((p, v) => p + v, 0);
      if (tot !== s[d]) throw new ShapeError(`split sizes sum to ${tot}, dim ${d} has size ${s[d]}`);
      return sizes.map((z) => {
        const o = [...s];
        o[d] = z;
        return o;
      });
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const d = normDim(attrNum(a, 'dim'), x.shape.length);
      let start = 0;
      return (attrInts(a, 'sizes') ?? []).map((z) => {
        const piece = narrow(x, d, start, start + z);
        start += z;
        return piece;
      });
    },
    backward: (b, { grads, attrs }) => [one(b, 'concat', grads, { dim: attrs['dim'] ?? 0 })],
    dims: ([a], at) => resizeOneDim(a as Shape, attrNum(at, 'dim'), 1, (attrInts(at, 'sizes') ?? []).length),
  },
  {
    name: 'pad',
    family: 'layout',
    linearIn: () => [0],
    zeroPads: { dim: 'dim', before: 'before', after: 'after' },
    doc: 'torch.nn.functional.pad with zeros along one dim: `before` zeros, a, `after` zeros (the backward of slice)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ dim: { type: 'integer' }, before: { type: 'integer', minimum: 0 }, after: { type: 'integer', minimum: 0 } }, ['dim', 'before', 'after']),
    shape: ([a], at) => {
      const s = [...(a as Shape)];
      const d = normDim(attrNum(at, 'dim'), s.length);
      s[d] = (s[d] as number) + attrNum(at, 'before') + attrNum(at, 'after');
      return [s];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const d = normDim(attrNum(a, 'dim'), x.shape.length);
      const before = attrNum(a, 'before');
      const shape = [...x.shape];
      shape[d] = (shape[d] as number) + before + attrNum(a, 'after');
      return [
        generate(shape, (idx) => {
          const i = (idx[d] as number) - before;
          if (i < 0 || i >= (x.shape[d] as number)) return alg.zero;
          const src = [...idx];
          src[d] = i;
          return at(x, src);
        }),
      ];
    },
    backward: (b, { inputs: [x], grads: [g], attrs }) => {
      const d = normDim(attrNum(attrs, 'dim'), b.shape(x as GradRef).length);
      const before = attrNum(attrs, 'before');
      return [one(b, 'slice', [g as GradRef], { dim: d, start: before, end: before + (b.shape(x as GradRef)[d] as number) })];
    },
    dims: ([a], at) => resizeOneDim(a as Shape, attrNum(at, 'dim')),
  },
],
// Zero extension (OpDef.zeroTails): dims permuted, values moved. A slice or pad keeps zeros along
// every dim but the one it narrows or pads, whose class is fixed (resizeOneDim) and so never cut
// whatever the rule says; reshape, concat and split, whose sizes are spelled, have no rule.
{ transpose: ZERO_ALWAYS, permute: ZERO_ALWAYS, slice: ZERO_ALWAYS, pad: ZERO_ALWAYS });

/**
 * Reshape on a slice (tensor-level proofs): dims are grouped where the two shapes' running
 * products meet. Within a group, a row-major reshape maps flat index to flat index, so the
 * slice is the same op on a slice exactly when, on each side, the group's region is one
 * contiguous flat range [A, B): at most one dim sliced, every dim outside it whole or
 * (outer ones) a single index. Then the local reshape of the local block is that range again,
 * laid out as the output block.
 */
export function reshapeRegions(inShape: Shape, outShape: Shape, reg: readonly (readonly [number, number])[]): (readonly [number, number])[][] | string {
  if (reg.length !== inShape.length) return 'region rank differs from the input';
  if (inShape.some((d) => d === 0) || outShape.some((d) => d === 0)) return 'a zero-size dim';
  const out: [number, number][] = outShape.map((d) => [0, d]);
  let i = 0;
  let o = 0;
  while (i < inShape.length || o < outShape.length) {
    // One group: in dims [i0, i) and out dims [o0, o) with equal products.
    const i0 = i;
    const o0 = o;
    let pin = i < inShape.length ? (inShape[i++] as number) : 1;
    let pout = o < outShape.length ? (outShape[o++] as number) : 1;
    while (pin !== pout) {
      if (pin < pout) {
        if (i >= inShape.length) return 'shapes do not group';
        pin *= inShape[i++] as number;
      } else {
        if (o >= outShape.length) return 'shapes do not group';
        pout *= outShape[o++] as number;
      }
    }
    const ind = inShape.slice(i0, i);
    const ireg = reg.slice(i0, i);
    const flat = flatRange(ind, ireg);
    if (typeof flat === 'string') return flat;
    const box = boxOf(outShape.slice(o0, o), flat[0], flat[1]);
    if (box === undefined) return `the slice [${flat[0]}, ${flat[1]}) of a merged group is not a block of the output`;
    box.forEach((b, k) => (out[o0 + k] = b));
  }
  return [out];
}

/** The region of a group as one flat range, or why it is not contiguous. */
function flatRange(dims: Shape, reg: readonly (readonly [number, number])[]): [number, number] | string {
  // j: the last dim not held whole. Row-major, the block is contiguous when every dim before j
  // is one index (a context-parallel sequence chunk of one sample's row: [dp, dp + 1) x [s, e)).
  let j = -1;
  for (let d = 0; d < dims.length; d++) {
    const [a, b] = reg[d] as [number, number];
    if (!(a === 0 && b === dims[d])) j = d;
  }
  const total = dims.reduce((p, d) => p * d, 1);
  if (j < 0) return [0, total];
  let off = 0;
  for (let d = 0; d < j; d++) {
    const [a, b] = reg[d] as [number, number];
    if (b - a !== 1) return a === 0 && b === dims[d] ? 'sliced along an inner dim of a merged group' : 'sliced along two dims of one merged group';
    off = off * (dims[d] as number) + a;
  }
  const inner = dims.slice(j + 1).reduce((p, d) => p * d, 1);
  const [a, b] = reg[j] as [number, number];
  const base = off * (dims[j] as number) * inner;
  return [base + a * inner, base + b * inner];
}

/** [A, B) of a group's flat index as a block (outer dims one index, one dim a range, inner dims whole). */
function boxOf(dims: Shape, A: number, B: number): [number, number][] | undefined {
  if (dims.length === 0) return A === 0 && B === 1 ? [] : undefined;
  for (let m = 0; m < dims.length; m++) {
    const inner = dims.slice(m + 1).reduce((p, d) => p * d, 1);
    if (A % inner !== 0 || B % inner !== 0) continue;
    const a = A / inner;
    const b = B / inner;
    const size = dims[m] as number;
    const outer = Math.floor(a / size);
    if (Math.floor((b - 1) / size) !== outer) continue;
    const box: [number, number][] = [];
    let rest = outer;
    const coords: number[] = [];
    for (let d = m - 1; d >= 0; d--) {
      coords.unshift(rest % (dims[d] as number));
      rest = Math.floor(rest / (dims[d] as number));
    }
    coords.forEach((c) => box.push([c, c + 1]));
    box.push([a - outer * size, b - outer * size]);
    for (let d = m + 1; d < dims.length; d++) box.push([0, dims[d] as number]);
    return box;
  }
  return undefined;
}

/**
 * Lane labels of a reshape (OpDef.lanes, shape reduction). Dims are grouped where the running
 * products of the two shapes meet (size-1 dims aside: they do not move the flat index). In a
 * group the flat index F is row-major on both sides. Dividing the group's last input dim and
 * last output dim by the same f (f dividing both) keeps F mod f as the lane on both sides and
 * F div f as the reduced flat index, so the reshape at reduced sizes maps lane j to lane j. A
 * group of one dim on each side (a dim the reshape leaves alone) is that case. Every other
 * dim of a group is fixed: dividing an outer dim of a merge would not keep lanes.
 */
export function reshapeLanes(inShape: Shape, outShape: Shape): DimSig {
  const why = "its size is spelled in the reshape's `shape` and it is not the innermost dim of its merge/split group (only innermost dims keep row-major lanes when divided)";
  const ins: DimLabel[] = inShape.map((_, d) => ({ label: `in1.${d}`, role: 'batch' }));
  const outs: DimLabel[] = outShape.map((_, d) => ({ label: `out1.${d}`, role: 'batch' }));
  const ii = inShape.flatMap((s, d) => (s === 1 ? [] : [d]));
  const oo = outShape.flatMap((s, d) => (s === 1 ? [] : [d]));
  let i = 0;
  let o = 0;
  let g = 0;
  while (i < ii.length || o < oo.length) {
    const gi: number[] = [];
    const go: number[] = [];
    let pin = 1;
    let pout = 1;
    do {
      if (pin <= pout) {
        if (i >= ii.length) throw new ShapeError('reshape dims do not group');
        gi.push(ii[i] as number);
        pin *= inShape[ii[i++] as number] as number;
      } else {
        if (o >= oo.length) throw new ShapeError('reshape dims do not group');
        go.push(oo[o] as number);
        pout *= outShape[oo[o++] as number] as number;
      }
    } while (pin !== pout);
    const label = `g${g++}`;
    gi.forEach((d, k) => (ins[d] = k === gi.length - 1 ? { label, role: 'batch' } : { label: `${label}.in${d}`, role: 'fixed', why }));
    go.forEach((d, k) => (outs[d] = k === go.length - 1 ? { label, role: 'batch' } : { label: `${label}.out${d}`, role: 'fixed', why }));
  }
  return { inputs: [ins], outputs: [outs] };
}
