/**
 * Rotary position embedding with separate cos and sin tables (the Llama / Hugging Face
 * convention): out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) over the
 * two halves of the last dim. cos and sin are inputs, never identified with each other.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg, broadcastReader, generate } from './dense.js';
import { broadcastLabels } from './dims.js';
import { type GradBuilder, type GradRef, one, unbroadcast } from './grad.js';
import { type OpDef, broadcastShapes, fixed, noAttrs, ShapeError, type Shape, shapeStr } from './types.js';

function ropeShape([x, c, s]: readonly Shape[]): Shape[] {
  const xs = x as Shape;
  const d = xs[xs.length - 1];
  if (d === undefined || d % 2 !== 0) throw new ShapeError(`the last dim of ${shapeStr(xs)} must be even (it is rotated in halves)`);
  for (const [t, what] of [
    [c, 'cos'],
    [s, 'sin'],
  ] as const) {
    if (!broadcastShapes(xs, t as Shape).every((v, i) => v === xs[i]) || broadcastShapes(xs, t as Shape).length !== xs.length) {
      throw new ShapeError(`${what} table ${shapeStr(t as Shape)} must broadcast to the input ${shapeStr(xs)}`);
    }
  }
  return [xs];
}

/** rotate_half along the last dim (sign = 1), or its transpose (sign = -1): cat(-x2, x1) / cat(x2, -x1). */
function rotateHalfOps(b: GradBuilder, x: GradRef, transpose: boolean): GradRef {
  const sh = b.shape(x);
  const d = sh[sh.length - 1] as number;
  const [x1, x2] = b.op('split', [x], { dim: -1, sizes: [d / 2, d / 2] }) as [GradRef, GradRef];
  return transpose ? one(b, 'concat', [x2, one(b, 'neg', [x1])], { dim: -1 }) : one(b, 'concat', [one(b, 'neg', [x2]), x1], { dim: -1 });
}

export const ops: OpDef[] = [
  {
    name: 'rope',
    family: 'position',
    linearIn: () => [0],
    doc: 'rotary embedding (Llama / HF apply_rotary_pos_emb): x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]); cos and sin broadcast to x',
    inputs: fixed(3),
    outputs: fixed(1),
    attrSchema: noAttrs(),
    shape: ropeShape,
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const x = arg(ins, 0);
      const rc = broadcastReader(arg(ins, 1), x.shape.length);
      const rs = broadcastReader(arg(ins, 2), x.shape.length);
      const rx = broadcastReader(x, x.shape.length);
      const d = x.shape[x.shape.length - 1] as number;
      return [
        generate(x.shape, (idx) => {
          const last = idx[idx.length - 1] as number;
          const partner = [...idx];
          partner[idx.length - 1] = last < d / 2 ? last + d / 2 : last - d / 2;
          const rot = last < d / 2 ? alg.neg(rx(partner)) : rx(partner);
          return alg.add(alg.mul(rx(idx), rc(idx)), alg.mul(rot, rs(idx)));
        }),
      ];
    },
    backward: (b, { inputs: [x, cos, sin], grads: [g] }) => {
      const gx = one(b, 'add', [one(b, 'mul', [g as GradRef, cos as GradRef]), rotateHalfOps(b, one(b, 'mul', [g as GradRef, sin as GradRef]), true)]);
      const gcos = unbroadcast(b, one(b, 'mul', [g as GradRef, x as GradRef]), b.shape(cos as GradRef));
      const gsin = unbroadcast(b, one(b, 'mul', [g as GradRef, rotateHalfOps(b, x as GradRef, false)]), b.shape(sin as GradRef));
      return [gx, gcos, gsin];
    },
    // SIMD except the last dim, whose halves are paired by rotate_half.
    dims: (ins) => {
      const x = ins[0] as Shape;
      const l = broadcastLabels(ins, (i) => (i === x.length - 1 ? 'fixed' : 'batch'));
      return { inputs: l.inputs, outputs: [l.out] };
    },
  },
];
