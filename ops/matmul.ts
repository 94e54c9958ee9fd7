/** Matrix products with torch.matmul / F.linear shape semantics. */
import { type OpDef, broadcastShapes, fixed, noAttrs, ShapeError, type Shape, shapeStr } from './types.js';

export function matmulShape(a: Shape, b: Shape): Shape {
  if (a.length === 0 || b.length === 0) throw new ShapeError('matmul operands must have at least one dim');
  const a2 = a.length === 1 ? [1, a[0] as number] : a;
  const b2 = b.length === 1 ? [b[0] as number, 1] : b;
  const k1 = a2[a2.length - 1] as number;
  const k2 = b2[b2.length - 2] as number;
  if (k1 !== k2) throw new ShapeError(`matmul contracted dims differ: ${shapeStr(a)} @ ${shapeStr(b)}`);
  const batch = broadcastShapes(a2.slice(0, -2), b2.slice(0, -2));
  const out = [...batch];
  if (a.length > 1) out.push(a2[a2.length - 2] as number);
  if (b.length > 1) out.push(b2[b2.length - 1] as number);
  return out;
}

export const ops: OpDef[] = [
  {
    name: 'matmul',
    family: 'matmul',
    doc: 'torch.matmul(a, b)',
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([a, b]) => [matmulShape(a as Shape, b as Shape)],
  },
  {
    name: 'linear',
    family: 'matmul',
    doc: 'torch.nn.functional.linear(x, w, b?) = x @ w.T (+ b)',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ([x, w, b]) => {
      const xs = x as Shape;
      const ws = w as Shape;
      if (ws.length !== 2) throw new ShapeError(`linear weight must be 2-D, got ${shapeStr(ws)}`);
      if (xs.length === 0 || xs[xs.length - 1] !== ws[1]) throw new ShapeError(`linear input ${shapeStr(xs)} does not match weight ${shapeStr(ws)}`);
      if (b !== undefined && (b.length !== 1 || b[0] !== ws[0])) throw new ShapeError(`linear bias ${shapeStr(b)} does not match weight ${shapeStr(ws)}`);
      return [[...xs.slice(0, -1), ws[0] as number]];
    },
  },
];
