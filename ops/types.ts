/**
 * An operator is one record of rules (JAX-style primitive with a rule table). The loader and,
 * later, the engine only ever look rules up here; nothing switches on op names elsewhere.
 * Rules: attributes, arity, shapes, collective pattern, values (numeric and symbolic through
 * one Algebra), backward, and reduction constraints for shape reduction (`dims`).
 */

import type { Algebra, Dense } from './algebra.js';
import type { BackwardRule, NO_BACKWARD } from './grad.js';
import type { Attrs, Shape } from './basic.js';

export type { Shape, AttrValue, Attrs } from './basic.js';

/** Thrown by shape rules; the loader turns it into a located plan error. */
export class ShapeError extends Error {}

interface Arity {
  readonly min: number;
  /** Infinity for variadic ops such as concat. */
  readonly max: number;
}

/** How a collective's members hold inputs and outputs. */
type CollectivePattern =
  /** Every member has one input and one output (all_reduce, all_gather, reduce_scatter, all_to_all). */
  | 'symmetric'
  /** The source member has one input; every member has one output. */
  | 'broadcast'
  /** Two members: the sender's input becomes the receiver's output. */
  | 'p2p';

interface CollectiveRule {
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

/** A value domain an op needs of an input: non-negative, positive, or a 0/1 mask. */
export type InputDomain = 'nonneg' | 'positive' | 'mask';

/** One operator: its record of rules (shape, evaluation over any Algebra, dimension roles, backward). */
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
  /**
   * Value-only attributes: keys that enter only `apply` (the value rule), never the shape, the
   * labels, the lanes or any structural rule (eps of a norm, an optimizer's lr). Tensor-level
   * proofs compare them only for equality, which is what incremental re-verification
   * (docs/engine.md, "Incremental re-verification") relies on. The registry refuses them on an
   * op with rescale, decompose, routing, sliceRegions, prefixAttrs or laneAttrs, or whose
   * narrows, zeroPads or scatter name them; test/value-attrs.test.ts checks the rest.
   */
  readonly valueAttrs?: readonly string[];
  /** Output shapes from input shapes; throws ShapeError with a one-line reason. */
  shape(inputs: readonly Shape[], attrs: Attrs): Shape[];
  /**
   * Values of the outputs, over any scalar domain: Float64 for numeric evaluation, exact terms
   * for symbolic evaluation. Inputs have passed the shape rule. Collectives apply as a group of
   * one here; see CollectiveRule.applyGroup.
   * `want` (optional, one flag per output): the outputs the caller will read. An op may then
   * leave an unwanted output's `data` empty instead of computing it (a stage that needs a
   * LayerNorm's weight gradient need not pay for its input gradient); the caller stores only
   * wanted outputs. Without it, every output is computed.
   */
  apply<S>(alg: Algebra<S>, inputs: readonly Dense<S>[], attrs: Attrs, want?: readonly boolean[]): Dense<S>[];
  /** Present on communication ops. */
  readonly collective?: CollectiveRule;
  /** Input gradients as ops, or 'none' when the op is not differentiated (see ops/grad.ts). */
  readonly backward: BackwardRule | typeof NO_BACKWARD;
  /**
   * Reduction constraints for shape reduction: a label and a role for every dim of every
   * input and output (see DimSig and docs/ops.md, "Reduction constraints"). Inputs have
   * passed the shape rule; throws ShapeError where the shape rule does.
   */
  dims(inputs: readonly Shape[], attrs: Attrs): DimSig;
  /**
   * Zero extension along a dim class (stages/shrink/reduce.ts zeroCutPlan; docs/engine.md,
   * "Zero-extension cuts for witnesses"). Given which inputs carry the class (`carries[i]`:
   * input i has a dim in it), true when inputs that are zero at some positions of the class
   * make every output zero at those positions, and every sum the op takes over the class
   * ignores them. Absent: the op is not known to, and no class it touches is cut.
   */
  readonly zeroTails?: (carries: readonly boolean[]) => boolean;
  /**
   * Lane labels, for shape reduction only (stages/shrink/reduce.ts), of an op whose attributes spell
   * sizes (reshape, expand), where `dims` must call those dims fixed. Dims sharing a label
   * here may differ in size: for every f dividing all their sizes, element i of each is in
   * lane i mod f, output lane j reads only input lane j, and lane j computed alone is this op
   * at the sizes divided by f with the attributes from `laneAttrs`. Roles as in `dims`, with
   * `why` on fixed dims. Not used by tensor-level proofs (a lane is not a slice). Checked
   * numerically in test/reduce-lanes.test.ts.
   */
  lanes?(inputs: readonly Shape[], attrs: Attrs): DimSig;
  /**
   * Declares that the axis this op indexes by integer values (DimSig.inputValues) may be cut
   * to its first `size` positions when those values are < size: the op on that prefix of its
   * inputs computes that prefix of its outputs (embedding reads row ids[p]; embedding_backward
   * sums g[p] into row ids[p]). Returns the attributes at that size. Used for witnesses only
   * (stages/shrink/reduce.ts prefixRaw): a proof at a prefix is no proof.
   */
  prefixAttrs?(attrs: Attrs, size: number): Attrs;
  /** The attributes at reduced sizes: `outFactors` is the lane factor of every output dim. */
  laneAttrs?(attrs: Attrs, outFactors: readonly (readonly number[])[]): Attrs;
  /**
   * For ops whose attributes spell sizes (reshape): the output regions, one [start, end) per
   * dim, when the op applied to these regions of its logical inputs (with the parallel op's
   * own attributes `local`) computes exactly those regions of the logical op's outputs; else
   * why not. Used by tensor-level proofs instead of comparing attributes.
   */
  /**
   * A rescaling identity: with these attributes the op equals `factor` times op `op` (this op
   * when omitted) with `attrs` (a mean over N rows is 1/N times their sum). Tensor-level proofs relate a mean over
   * all rows to sums over row slices by it. Checked numerically in test/reduction-dims.test.ts.
   */
  rescale?(inShapes: readonly Shape[], attrs: Attrs, domains: readonly (readonly number[] | undefined)[]): { readonly op?: string; readonly attrs: Attrs; readonly factor: string } | undefined;
  /**
   * Inputs in which every output is linear, the others held fixed: f(.., a + b, ..) =
   * f(.., a, ..) + f(.., b, ..) and f(.., c a, ..) = c f(.., a, ..). Tensor-level proofs carry
   * scale factors and addends through such inputs. Checked numerically in
   * test/reduction-dims.test.ts.
   */
  linearIn?(nInputs: number): readonly number[];
  /**
   * Every output element is a copy of an input element (layout ops): integer values keep their
   * range through it (a reshape of the labels can still not hold ignore_index). Checked in
   * test/reduction-dims.test.ts.
   */
  readonly movesValues?: boolean;
  /**
   * Input domains, for drawing witness inputs a program can receive (stages/witness/domains.ts).
   * `needs[i]`: the domain input i must lie in for the op to be defined (sqrt's argument >= 0,
   * log's > 0, Adam's second moment >= 0, where's condition and dropout's mask 0/1). `keeps`:
   * how a domain needed of the output passes to the inputs: 'copy' (every output element is an
   * input element: any domain), 'sum' (>= 0 and > 0 when every input is), 'product' (the same,
   * and a tensor times itself needs nothing), or a test of the attributes (a scale by a factor
   * >= 0 keeps the sign).
   */
  readonly inputDomains?: { readonly needs?: readonly (InputDomain | undefined)[]; readonly keeps?: 'copy' | 'sum' | 'product' | ((attrs: Attrs) => boolean) };
  /**
   * Output 0 is input 0 narrowed along attribute `dim` to [`start`, `end`) (slice): the names
   * of those attributes. A region of a region is a region, so tensor-level proofs carry a
   * relation through such an op when the logical graph has no op of its kind on that tensor
   * (Megatron SP slices the position table by sequence chunk; the model adds it whole).
   */
  readonly narrows?: { readonly dim: string; readonly start: string; readonly end: string };
  /**
   * Output 0 is input 0 with zeros added along attribute `dim`, `before` of them ahead and
   * `after` behind (pad, the backward of slice): the names of those attributes. A chunk padded
   * back to its own place is one addend of the whole tensor (the chunks' pads sum to it).
   */
  readonly zeroPads?: { readonly dim: string; readonly before: string; readonly after: string };
  /**
   * An output that holds positions along an input's dim (topk's indices: positions along the
   * scored dim): its values are 0..size-1, so it is categorical like an id tensor. `dim` may be
   * negative (from the end).
   */
  readonly positionsOut?: { readonly output: number; readonly input: number; readonly dim: number };
  /**
   * Token routing (mixture of experts) in the layout whose buffer rows depend on the routing:
   * 'dispatch' packs input 0's rows (tokens) into per-expert buffers [E, N*k, ...] by the
   * choices of input 1 ([N, k]), each expert's slots in token order and zero rows after them;
   * 'gather' ([N, k, ...]) and 'combine' ([N, ...], weighted by input 2) read them back where
   * dispatch put them. Undefined for other layouts. Tensor-level proofs follow such buffers as
   * a permutation of token slots (docs/engine.md, "Routed buffers"); checked against the op's
   * own evaluation in test/tensorlevel.test.ts.
   */
  routing?(attrs: Attrs): 'dispatch' | 'gather' | 'combine' | undefined;
  /**
   * The op as an expression over other ops, one per output (clip_grad_norm is every gradient
   * times clip_coef of the summed squares): tensor-level proofs compare a parallel plan that
   * spells the parts with the logical op through it. Checked numerically in
   * test/reduction-dims.test.ts.
   */
  decompose?(nInputs: number, attrs: Attrs, inShapes?: readonly Shape[], domains?: readonly (readonly number[] | undefined)[]): readonly DecompExpr[] | undefined;
  /**
   * A lookup along one dim of a table by integer positions (embedding rows, gather along the
   * last dim): output position i reads the table at idx_i along `dim`. `out`: 'append' when the
   * output is the index dims followed by the table's other dims (embedding), 'aligned' when
   * the output has the index's dims and the table's other dims are the index's leading ones
   * (gather). Tensor-level proofs relate Megatron's masked lookup into a vocab shard to one
   * addend of the whole lookup (docs/engine.md, "Vocab-parallel rules"). Checked numerically
   * in test/reduction-dims.test.ts.
   */
  readonly lookup?: { readonly index: number; readonly table: number; readonly dim: 'first' | 'last'; readonly out: 'append' | 'aligned' };
  /**
   * The scatter-add adjoint of a lookup (embedding_backward, gather_backward): output row j
   * along `dim` sums the `grad` rows whose `index` is j; the attribute `size` is the number
   * of rows. Checked numerically in test/reduction-dims.test.ts.
   */
  readonly scatter?: { readonly grad: number; readonly index: number; readonly size: string; readonly dim: 'first' | 'last' };
  /**
   * Megatron's vocab-range ops over ids and the attributes start, end: 'outside' is 1 where
   * the id is outside [start, end) and 0 inside; 'local' is id - start inside and 0 outside.
   */
  readonly vocabRange?: 'outside' | 'local';
  sliceRegions?(inShapes: readonly Shape[], outShapes: readonly Shape[], regions: readonly (readonly (readonly [number, number])[])[], logical: Attrs, local: Attrs): (readonly [number, number])[][] | string;
}

/**
 * How a dim may be shrunk for proving at reduced shapes (TrainVerify's shape reduction).
 * - 'batch': the op is SIMD along it (output index i reads only index i of the inputs, by the
 *   same rule for every i): it may shrink to 1.
 * - 'contracted': the op sums, normalizes, max-reduces or compares across it; its size never
 *   enters the values as a constant: it may shrink but must stay >= 2.
 * - 'fixed': its size or positions are fixed by an attribute (slice bounds, split sizes, a
 *   reshape target, a vocab range, k, the number of experts), enter the values as a constant
 *   (mean's 1/n, the default attention scale 1/sqrt(d)), or the op pairs positions along it
 *   (rotary halves, causal masks, routing buffers): it may not shrink. Always safe.
 */
export type DimRole = 'batch' | 'contracted' | 'fixed';

/** Dims with the same label (within one op's signature) have the same size and shrink together. */
export interface DimLabel {
  readonly label: string;
  readonly role: DimRole;
  /** Why a dim is fixed, when the role alone does not say it (shape reduction's reason). */
  readonly why?: string;
}

export interface DimSig {
  /** One label per dim, per input / output, in order. */
  readonly inputs: readonly (readonly DimLabel[])[];
  readonly outputs: readonly (readonly DimLabel[])[];
  /**
   * Integer tensors whose values are positions along an axis (token ids index the vocab
   * dim, labels the class dim, routing choices the experts), by input / output index: the
   * axis, which may or may not be a dim of this op. Shrinking the axis shrinks the values'
   * range with it, so such an axis is never 'batch'.
   */
  readonly inputValues?: Readonly<Record<number, DimLabel>>;
  readonly outputValues?: Readonly<Record<number, DimLabel>>;
  /**
   * 'contracted' labels the op sums plainly: every output that lacks the label is the sum,
   * over its indices, of terms that each read only that index of the inputs carrying it (a
   * matmul's k), and every output that has it is SIMD along it. So the op on a range of the
   * label computes one addend of those outputs (stages/engines/tensorlevel/prover.ts). Checked per op in
   * test/tensorlevel.test.ts against the full op.
   */
  readonly sums?: readonly string[];
  /**
   * 'contracted' labels the op max-reduces plainly (amax): on a range of the label it computes
   * one max-addend of every output that lacks it (the max of the max-addends over a partition
   * of the label is the whole output). Checked in test/reduction-dims.test.ts.
   */
  readonly maxes?: readonly string[];
  /**
   * Block pairings: index i along `label` reads only index floor(i / ratio) along `of` (grouped
   * query heads and their key/value head), and both are otherwise SIMD. A slice [a, b) of
   * `label` with a, b multiples of ratio, paired with [a / ratio, b / ratio) of `of`, is the op
   * on a slice (stages/engines/tensorlevel/prover.ts).
   */
  readonly grouped?: readonly { readonly label: string; readonly of: string; readonly ratio: number }[];
}

/** An op's decomposition (OpDef.decompose): an input, an op applied to expressions, or an element-wise sum of same-shaped ones. */
export type DecompExpr =
  | { readonly input: number }
  | { readonly op: string; readonly attrs: Attrs; readonly args: readonly DecompExpr[]; readonly output?: number }
  | { readonly sum: readonly DecompExpr[] };

export const fixed = (n: number): Arity => ({ min: n, max: n });

/** An exact scalar attribute: a JSON number or a rational string such as "1/3". */
export const scalarSchema = {
  oneOf: [{ type: 'number' }, { type: 'string', pattern: '^-?[0-9]+(/0*[1-9][0-9]*)?$' }],
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

/** zeroTails rules: f(0) = 0 whatever the other inputs are (a product, a move, a sum). */
export const ZERO_ALWAYS = (): boolean => true;
/** zeroTails rules: 0 + 0 = 0, but 0 + b is not 0 for an input b broadcast along the class. */
export const ZERO_IF_ALL_CARRY = (carries: readonly boolean[]): boolean => carries.every(Boolean);

/** Sets the zeroTails rule of the named ops of a family (each op's rule beside its definition). */
export function withZeroTails(defs: OpDef[], rules: Readonly<Record<string, (carries: readonly boolean[]) => boolean>>): OpDef[] {
  for (const name of Object.keys(rules)) if (!defs.some((d) => d.name === name)) throw new Error(`zeroTails rule for unknown op '${name}'`);
  return defs.map((d) => (rules[d.name] === undefined ? d : { ...d, zeroTails: rules[d.name] }));
}
