/** Reductions over dims, softmax along a dim, and expand (the backward of sum/mean). */
import { type OpDef, type Attrs, attrInts, attrObject, fixed, normDim, sameShape, ShapeError, type Shape, shapeStr, attrNum } from './types.js';

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

function reduction(name: string, doc: string): OpDef {
  return { name, family: 'reduce', doc, inputs: fixed(1), outputs: fixed(1), attrSchema: reduceAttrs, shape: ([a], at) => [reduceShape(a as Shape, at)] };
}

const dimAttr = attrObject({ dim: { type: 'integer' } }, ['dim']);

function alongDim(name: string, doc: string): OpDef {
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
  };
}

export const ops: OpDef[] = [
  reduction('sum', 'torch.sum(a, dims, keepdim); all dims when dims is omitted'),
  reduction('mean', 'torch.mean(a, dims, keepdim); all dims when dims is omitted'),
  alongDim('softmax', 'torch.softmax(a, dim)'),
  alongDim('log_softmax', 'torch.log_softmax(a, dim)'),
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
  },
  {
    name: 'expand',
    family: 'reduce',
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
  },
];
