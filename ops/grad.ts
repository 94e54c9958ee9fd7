/**
 * Backward rules: how an op's input gradients are computed from its output gradients, as
 * ops (the way an execution plan lists its backward pass). A rule emits ops through a
 * GradBuilder, so the same rule can build a plan's backward graph (generators) or be
 * evaluated eagerly (tests against finite differences).
 */
import type { Attrs, Shape } from './basic.js';

/** A value in the gradient graph being built. */
export type GradRef = number;

export interface GradBuilder {
  /** Emits one op and returns its outputs. */
  op(name: string, inputs: readonly GradRef[], attrs?: Attrs): GradRef[];
  shape(r: GradRef): Shape;
}

interface GradContext {
  readonly inputs: readonly GradRef[];
  readonly outputs: readonly GradRef[];
  /** Gradients of the outputs (same order). */
  readonly grads: readonly GradRef[];
  readonly attrs: Attrs;
}

/** Gradient per input, or undefined for inputs without one (e.g. integer indices). */
export type BackwardRule = (b: GradBuilder, c: GradContext) => (GradRef | undefined)[];

/** Not differentiated: optimizer steps, backward ops, collectives (mirrored by plan generators). */
export const NO_BACKWARD = 'none' as const;

/** Sums g down to `shape` (the adjoint of PyTorch broadcasting). */
export function unbroadcast(b: GradBuilder, g: GradRef, shape: Shape): GradRef {
  const gs = b.shape(g);
  if (gs.length === shape.length && gs.every((v, i) => v === shape[i])) return g;
  const off = gs.length - shape.length;
  const dims: number[] = [];
  gs.forEach((v, d) => {
    if (d < off || (shape[d - off] === 1 && v !== 1)) dims.push(d);
  });
  const summed = dims.length === 0 ? g : (b.op('sum', [g], { dims, keepdim: true })[0] as GradRef);
  return b.op('reshape', [summed], { shape: [...shape] })[0] as GradRef;
}

export function one(b: GradBuilder, name: string, inputs: readonly GradRef[], attrs?: Attrs): GradRef {
  return b.op(name, inputs, attrs)[0] as GradRef;
}
