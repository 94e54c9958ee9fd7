/**
 * An operator is one record of rules (JAX-style primitive with a rule table). The loader and,
 * later, the engine only ever look rules up here; nothing switches on op names elsewhere.
 * This issue defines the rules the loader needs (attributes, arity, shapes, collective
 * pattern); numeric/symbolic evaluation and reduction constraints are added to the same
 * records by the engine.
 */

import type { Algebra, Dense } from './algebra.js';
import type { BackwardRule, NO_BACKWARD } from './grad.js';

export type Shape = readonly number[];
export type AttrValue = null | boolean | number | string | AttrValue[] | { [k: string]: AttrValue };
export type Attrs = Readonly<Record<string, AttrValue>>;

/** Thrown by shape rules; the loader turns it into a located plan error. */
export class ShapeError extends Error {}

export interface Arity {
  readonly min: number;
  /** Infinity for variadic ops such as concat. */
  readonly max: number;
}

/** How a collective's members hold inputs and outputs. */
export type CollectivePattern =
  /** Every member has one input and one output (all_reduce, all_gather, reduce_scatter, all_to_all). */
  | 'symmetric'
  /** The source member has one input; every member has one output. */
  | 'broadcast'
  /** Two members: the sender's input becomes the receiver's output. */
  | 'p2p';

export interface CollectiveRule {
  readonly pattern: CollectivePattern;
  /** For per-rank spelling of p2p: which side of the pair this op name is. */
  readonly side?: 'send' | 'recv';
  /** Output shape of one member from its input shape (members' inputs must agree). */
  outShape(input: Shape, attrs: Attrs, groupSize: number): Shape;
  /**
   * Values: members' inputs in group order (undefined where a member passes none) to members'
   * outputs in group order (undefined where a member receives none). `group` holds the ranks.
   */
  applyGroup<S>(alg: Algebra<S>, inputs: readonly (Dense<S> | undefined)[], attrs: Attrs, group: Int32Array): (Dense<S> | undefined)[];
}

export interface OpDef {
  readonly name: string;
  /** The ops/ file it lives in, e.g. 'elementwise'. */
  readonly family: string;
  /** One line: what it computes, as its PyTorch equivalent. */
  readonly doc: string;
  readonly inputs: Arity;
  readonly outputs: Arity;
  /** JSON Schema for `attrs` (validated after template expressions are evaluated). */
  readonly attrSchema: object;
  /** Output shapes from input shapes; throws ShapeError with a one-line reason. */
  shape(inputs: readonly Shape[], attrs: Attrs): Shape[];
  /**
   * Values of the outputs, over any scalar domain: Float64 for numeric evaluation, exact terms
   * for symbolic evaluation. Inputs have passed the shape rule. Collectives apply as a group of
   * one here; see CollectiveRule.applyGroup.
   */
  apply<S>(alg: Algebra<S>, inputs: readonly Dense<S>[], attrs: Attrs): Dense<S>[];
  /** Present on communication ops. */
  readonly collective?: CollectiveRule;
  /** Input gradients as ops, or 'none' when the op is not differentiated (see ops/grad.ts). */
  readonly backward: BackwardRule | typeof NO_BACKWARD;
}

export const fixed = (n: number): Arity => ({ min: n, max: n });

/** An exact scalar attribute: a JSON number or a rational string such as "1/3". */
export const scalarSchema = {
  oneOf: [{ type: 'number' }, { type: 'string', pattern: '^-?[0-9]+(/[0-9]+)?$' }],
} as const;

export function noAttrs(): object {
  return { type: 'object', additionalProperties: false, properties: {} };
}

export function attrObject(properties: Record<string, object>, required: string[] = []): object {
  return { type: 'object', additionalProperties: false, properties, required };
}

export function shapeStr(s: Shape): string {
  return `[${s.join(', ')}]`;
}

/** Normalizes a possibly negative dim against a rank, as PyTorch does. */
export function normDim(dim: number, rank: number, what = 'dim'): number {
  const d = dim < 0 ? dim + rank : dim;
  if (!Number.isInteger(d) || d < 0 || d >= Math.max(rank, 1) || (rank === 0 && d !== 0)) {
    throw new ShapeError(`${what} ${dim} out of range for a rank-${rank} tensor`);
  }
  return d;
}

export function sameShape(a: Shape, b: Shape): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

export function numel(s: Shape): number {
  let n = 1;
  for (const d of s) n *= d;
  return n;
}

/** PyTorch broadcasting of two shapes. */
export function broadcastShapes(a: Shape, b: Shape): Shape {
  const n = Math.max(a.length, b.length);
  const out: number[] = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) {
      throw new ShapeError(`shapes ${shapeStr(a)} and ${shapeStr(b)} do not broadcast (dim ${i}: ${x} vs ${y})`);
    }
    out[i] = x === 1 ? y : x;
  }
  return out;
}

export function attrNum(attrs: Attrs, key: string, dflt?: number): number {
  const v = attrs[key];
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'number') throw new ShapeError(`attribute '${key}' must be a number`);
  return v;
}

export function attrInts(attrs: Attrs, key: string): number[] | undefined {
  const v = attrs[key];
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number')) throw new ShapeError(`attribute '${key}' must be a list of integers`);
  return v as number[];
}

/** A scalar attribute as given (number or "p/q"), for Algebra.constant. */
export function attrScalar(attrs: Attrs, key: string, dflt?: number | string): number | string {
  const v = attrs[key];
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'number' && typeof v !== 'string') throw new ShapeError(`attribute '${key}' must be a number or a rational string`);
  return v;
}
