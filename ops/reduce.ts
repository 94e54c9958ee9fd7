/** Reductions over dims, softmax along a dim, and expand (the backward of sum/mean). */
import type { Algebra, Dense } from './algebra.js';
import { arg, broadcastReader, generate, reduceDims, strides } from './dense.js';
import { batchDim, fixedDim, shapeAttrAtLanes } from './dims.js';
import { type GradRef, NO_BACKWARD, one, unbroadcast } from './grad.js';
import { type DimLabel, type DimRole, type DimSig, type OpDef, type Attrs, attrInts, attrObject, fixed, normDim, numel, sameShape, ShapeError, type Shape, shapeStr, attrNum, withZeroTails, ZERO_ALWAYS } from './types.js';

function reduceDimList(shape: Shape, attrs: Attrs): number[] {
  return (attrInts(attrs, 'dims') ?? shape.map((_, i) => i)).map((d) => normDim(d, shape.length));
}

/** Applies f to every 1-D fiber of x along dim (softmax-like ops). */
function alongDimApply<S>(xs: readonly Dense<S>[], dim: number, f: (fibers: S[][]) => S[]): Dense<S> {
  const x = xs[0] as Dense<S>;
  const d = normDim(dim, x.shape.length);
  const st = strides(x.shape);
  const len = x.shape[d] as number;
  const out: S[] = new Array<S>(x.data.length);
  const outer = numel(x.shape) / Math.max(len, 1);
  const step = st[d] as number;
  for (let o = 0; o < outer; o++) {
    const base = Math.floor(o / step) * step * len + (o % step);
    const fibers = xs.map((t) => Array.from({ length: len }, (_, i) => t.data[base + i * step] as S));
    const r = f(fibers);
    for (let i = 0; i < len; i++) out[base + i * step] = r[i] as S;
  }
  return { shape: x.shape, data: out };
}

/** Numerically stable softmax; exact terms normalize the max away, so it is also exact. */
function softmaxFiber<S>(alg: Algebra<S>, x: S[]): S[] {
  const m = alg.max(x);
  const e = x.map((v) => alg.exp(alg.sub(v, m)));
  const z = alg.sum(e);
  return e.map((v) => alg.div(v, z));
}

const reduceAttrs = attrObject({
  dims: { type: 'array', items: { type: 'integer' }, maxItems: 16 },
  keepdim: { type: 'boolean' },
});

function reduceShape(a: Shape, attrs: Attrs): Shape {
  const dims = attrInts(attrs, 'dims');
  const keep = attrs['keepdim'] === true;
  const set = new Set<number>();
  for (const d of dims ?? a.map((_, i) => i)) {
    const nd = normDim(d, a.length);
    if (set.has(nd)) throw new ShapeError(`dim ${d} listed twice`);
    set.add(nd);
  }
  const out: number[] = [];
  a.forEach((v, i) => {
    if (!set.has(i)) out.push(v);
    else if (keep) out.push(1);
  });
  return out;
}

/**
 * Reduced dims get `reducedRole`, the others are SIMD; a keepdim output dim (size 1, no input
 * dim behind it) is 'fixed'.
 */
function reduceSig(shape: Shape, attrs: Attrs, reducedRole: DimRole): DimSig {
  const red = new Set(reduceDimList(shape, attrs));
  const keep = attrs['keepdim'] === true;
  const ins = shape.map((_, d): DimLabel => (red.has(d) ? { label: `r${d}`, role: reducedRole } : batchDim(`d${d}`)));
  const out = shape.flatMap((_, d): DimLabel[] => (!red.has(d) ? [batchDim(`d${d}`)] : keep ? [fixedDim(`keep${d}`)] : []));
  return { inputs: [ins], outputs: [out] };
}

/** `dim` is normalized across ('contracted'), every other dim is SIMD; nIn inputs of one shape. */
function alongDimSig(shape: Shape, attrs: Attrs, nIn: number): DimSig {
  const d = normDim(attrNum(attrs, 'dim'), shape.length);
  const l = shape.map((_, i): DimLabel => (i === d ? { label: `r${i}`, role: 'contracted' } : batchDim(`d${i}`)));
  return { inputs: Array.from({ length: nIn }, () => l), outputs: [l] };
}

function reduction(name: string, doc: string, mean: boolean): OpDef {
  return {
    name,
    family: 'reduce',
    doc,
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: reduceAttrs,
    shape: ([a], at) => [reduceShape(a as Shape, at)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const dims = reduceDimList(x.shape, at);
      const n = dims.reduce((p, d) => p * (x.shape[d] as number), 1);
      const k = alg.constant(`1/${n}`);
      return [reduceDims(x, dims, at['keepdim'] === true, (vals) => (mean ? alg.mul(alg.sum(vals), k) : alg.sum(vals)))];
    },
    backward: (b, { inputs: [x], grads: [g], attrs }) => {
      const xs = b.shape(x as GradRef);
      const dims = reduceDimList(xs, attrs);
      const keep = xs.map((v, d) => (dims.includes(d) ? 1 : v));
      const e = one(b, 'expand', [one(b, 'reshape', [g as GradRef], { shape: keep })], { shape: [...xs] });
      const n = dims.reduce((p, d) => p * (xs[d] as number), 1);
      return [mean ? one(b, 'scale', [e], { factor: `1/${n}` }) : e];
    },
    // mean's 1/n is the reduced size as a constant: shrinking n would change it on this side
    // only (a plan may spell the same 1/n as a scale factor), so mean's reduced dims are fixed.
    dims: ([a], at) => {
      const sig = reduceSig(a as Shape, at, mean ? 'fixed' : 'contracted');
      // A sum adds its reduced dims plainly (DimSig.sums); a mean's 1/n is a constant.
      return mean ? sig : { ...sig, sums: (sig.inputs[0] ?? []).filter((l) => l.role === 'contracted').map((l) => l.label) };
    },
    linearIn: () => [0],
    // mean = (1/n) sum over the same dims.
    ...(mean
      ? {
          rescale: ([a]: readonly Shape[], at: Attrs) => {
            const n = reduceDimList(a as Shape, at).reduce((p, d) => p * ((a as Shape)[d] as number), 1);
            return n > 0 ? { op: 'sum', attrs: { ...at }, factor: `1/${n}` } : undefined;
          },
        }
      : {}),
  };
}

const dimAttr = attrObject({ dim: { type: 'integer' } }, ['dim']);

function alongDim(name: string, doc: string, f: <S>(alg: Algebra<S>, x: S[]) => S[], backward: OpDef['backward']): OpDef {
  return {
    name,
    family: 'reduce',
    doc,
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: dimAttr,
    shape: ([a], at) => {
      normDim(attrNum(at, 'dim'), (a as Shape).length);
      return [a as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [alongDimApply([arg(ins, 0)], attrNum(at, 'dim'), ([x]) => f(alg, x as S[]))],
    backward,
    dims: ([a], at) => alongDimSig(a as Shape, at, 1),
  };
}

export const ops: OpDef[] = withZeroTails([
  {
    name: 'amax',
    family: 'reduce',
    doc: 'torch.amax(a, dims, keepdim): the maximum over dims (all when omitted); used detached, as the stabilizing max of softmax and cross-entropy',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: reduceAttrs,
    shape: ([a], at) => [reduceShape(a as Shape, at)],
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      return [reduceDims(x, reduceDimList(x.shape, at), at['keepdim'] === true, (vals) => alg.max(vals))];
    },
    // The gradient of a max needs comparisons of reals; plans use amax detached (a shift that
    // cancels), as Megatron's vocab-parallel cross-entropy does.
    backward: NO_BACKWARD,
    dims: ([a], at) => ({ ...reduceSig(a as Shape, at, 'contracted'), maxes: reduceDimList(a as Shape, at).map((d) => `r${d}`) }),
  },
  reduction('sum', 'torch.sum(a, dims, keepdim); all dims when dims is omitted', false),
  reduction('mean', 'torch.mean(a, dims, keepdim); all dims when dims is omitted', true),
  alongDim('softmax', 'torch.softmax(a, dim)', softmaxFiber, (b, { outputs: [o], grads: [g], attrs }) => [one(b, 'softmax_backward', [g as GradRef, o as GradRef], { dim: attrs['dim'] ?? -1 })]),
  alongDim('log_softmax', 'torch.log_softmax(a, dim) = x - m - log(sum(exp(x - m))), m = max(x)', <S>(alg: Algebra<S>, x: S[]): S[] => {
    const m = alg.max(x);
    const lse = alg.fn('log', alg.sum(x.map((v) => alg.exp(alg.sub(v, m)))));
    return x.map((v) => alg.sub(alg.sub(v, m), lse));
  }, (b, { outputs: [o], grads: [g], attrs }) => {
    // g - softmax(x) * sum(g) along dim, softmax(x) = exp(log_softmax(x))
    const s = one(b, 'sum', [g as GradRef], { dims: [attrs['dim'] as number], keepdim: true });
    return [one(b, 'sub', [g as GradRef, one(b, 'mul', [one(b, 'exp', [o as GradRef]), s])])];
  }),
  {
    name: 'softmax_backward',
    family: 'reduce',
    doc: 'grad of softmax: (grad_out, y) -> y * (grad_out - sum(grad_out * y, dim, keepdim))',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: dimAttr,
    shape: ([g, y], at) => {
      if (!sameShape(g as Shape, y as Shape)) throw new ShapeError(`grad ${shapeStr(g as Shape)} and output ${shapeStr(y as Shape)} differ`);
      normDim(attrNum(at, 'dim'), (y as Shape).length);
      return [g as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => [
      alongDimApply([arg(ins, 0), arg(ins, 1)], attrNum(at, 'dim'), ([g, y]) => {
        const dot = alg.sum((g as S[]).map((gi, i) => alg.mul(gi, (y as S[])[i] as S)));
        return (y as S[]).map((yi, i) => alg.mul(yi, alg.sub((g as S[])[i] as S, dot)));
      }),
    ],
    backward: NO_BACKWARD,
    dims: ([g], at) => alongDimSig(g as Shape, at, 2),
  },
  {
    name: 'expand',
    family: 'reduce',
    movesValues: true,
    inputDomains: { keeps: 'copy' },
    linearIn: () => [0],
    doc: 'a.expand(shape) (broadcast to shape; -1 keeps a dim)',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({ shape: { type: 'array', items: { type: 'integer', minimum: -1 }, maxItems: 16 } }, ['shape']),
    shape: ([a], at) => {
      const src = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      if (tgt.length < src.length) throw new ShapeError(`cannot expand ${shapeStr(src)} to fewer dims ${shapeStr(tgt)}`);
      const off = tgt.length - src.length;
      const out = tgt.map((t, i) => {
        const s = i >= off ? (src[i - off] as number) : undefined;
        if (t === -1) {
          if (s === undefined) throw new ShapeError('-1 is not allowed for a new leading dim');
          return s;
        }
        if (t < 1) throw new ShapeError(`expand size ${t} must be positive`);
        if (s !== undefined && s !== t && s !== 1) throw new ShapeError(`cannot expand dim ${i} of size ${s} to ${t}`);
        return t;
      });
      return [out];
    },
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const x = arg(ins, 0);
      const tgt = attrInts(at, 'shape') ?? [];
      const off = tgt.length - x.shape.length;
      const shape = tgt.map((t, i) => (t === -1 ? (x.shape[i - off] as number) : t));
      const r = broadcastReader(x, shape.length);
      return [generate(shape, r)];
    },
    backward: (b, { inputs: [x], grads: [g] }) => [unbroadcast(b, g as GradRef, b.shape(x as GradRef))],
    // A dim kept with -1 is SIMD; a size the attribute spells out (new, broadcast, or restated)
    // is fixed: shrinking would contradict the attribute.
    dims: ([a], at) => {
      const src = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      const off = tgt.length - src.length;
      const out = tgt.map((t, i): DimLabel => (t === -1 ? batchDim(`o${i}`) : fixedDim(`o${i}`)));
      const ins = src.map((s, d): DimLabel => {
        const t = tgt[d + off] as number;
        return t === -1 || t === s ? (out[d + off] as DimLabel) : fixedDim(`o${d + off}.bcast`);
      });
      return { inputs: [ins], outputs: [out] };
    },
    // Shape reduction may divide a spelled size: every output dim is SIMD (a broadcast output
    // index reads input index 0 whatever it is), and the attribute is rewritten at lanes.
    lanes: ([a], at) => {
      const src = a as Shape;
      const tgt = attrInts(at, 'shape') ?? [];
      const off = tgt.length - src.length;
      const out = tgt.map((_, i): DimLabel => batchDim(`o${i}`));
      const ins = src.map((s, d): DimLabel => {
        const t = tgt[d + off] as number;
        return t === -1 || t === s ? (out[d + off] as DimLabel) : batchDim(`o${d + off}.bcast`);
      });
      return { inputs: [ins], outputs: [out] };
    },
    laneAttrs: shapeAttrAtLanes,
  },
],
// Zero extension (OpDef.zeroTails): zeros add nothing to a sum; not so for max, mean (it divides by the size) or softmax.
{ sum: ZERO_ALWAYS });
