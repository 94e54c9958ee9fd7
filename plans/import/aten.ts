/**
 * ATen to planproof ops: lowers one parsed graph (plans/import/fxtext.ts) to planproof ops over
 * named tensors. Each ATen overload has one rule (here, and the training-code ops in
 * plans/import/aten-training.ts); an op without a rule is an error naming the op, the file and
 * line (never dropped). docs/import.md lists the mapping and why each rule computes what the
 * ATen op computes in exact real arithmetic.
 */
import type { AttrValue } from '../../ops/types.js';
import type { RawParallelOp } from '../raw.js';
import type { FxArg, FxGraph, FxNode } from './fxtext.js';
import { TRAINING_RULES } from './aten-training.js';
import { INDEX_RULES } from './aten-index.js';
import { SORT_RULES } from './aten-sort.js';
import { CONV_RULES } from './aten-conv.js';
import { MASK_RULES } from './aten-mask.js';
import { BAG_RULES } from './aten-bag.js';
import { SAMPLE_RULES } from './aten-sample.js';
import { ACT_RULES } from './aten-act.js';
import { CV_RULES } from './aten-cv.js';
import { NL_RULES } from './aten-nl.js';
import { withEmpty } from './aten-empty.js';
import { withDynsize } from './dynsize.js';
import { LOOPS_RULES } from './aten-loops.js';
import { labelMasks, nllBackward, nllForward, withProbe } from './aten-probe.js';
import { withComplex } from './aten-complex.js';
import { maskedSoftmax, negInfOf, withNegInf } from './aten-neginf.js';
import { binary, filled, likeShape, type ConstValue, type Lowered, Lowerer, type LowerOptions, type OpaqueVal, REDUCE, refuseTruncation, reshape, type Rule, sameStrides, scaleBy, splitPieces, type TensorVal, uninitialized, unary, type Val, view, viewStrides } from './lower.js';

export type { Lowered, TensorVal } from './lower.js';

/** self + value * (tensor1 op tensor2): addcmul and addcdiv (Adam's second moment and update). */
function addc(op: 'mul' | 'div', inPlace: boolean): Rule {
  return (l, n) => {
    const self = l.tensor(n.args[0], 'self');
    const t1 = l.tensor(n.args[1], 'tensor1');
    const t2 = l.tensor(n.args[2], 'tensor2');
    const value = l.num(n.kwargs['value'] ?? n.args[3], 'value', 1);
    let p = l.one(op, [t1, t2]);
    if (value !== 1) p = l.one('scale', [p], { factor: value });
    const r = l.one('add', [self, p], {}, inPlace ? undefined : l.out(n), self.dtype);
    if (inPlace) l.write(n.args[0], r);
    return l.bind(n, r);
  };
}

/**
 * What copy(dst, src) and copy_ leave in dst: src, expanded to dst's shape. Uninitialized
 * memory as dst is fine, every element is written (autograd's .grad from new_empty_strided,
 * Megatron's torch.empty buffers).
 */
function copied(l: Lowerer, n: FxNode, out: string | undefined): TensorVal {
  const d = l.val(n.args[0], 'self');
  const shape = d.kind === 'opaque' && d.what === 'uninitialized memory' ? (JSON.parse(String(d.data['shape'])) as number[]) : undefined;
  const dst = shape === undefined ? l.tensor(n.args[0], 'self') : { shape, dtype: String(d.kind === 'opaque' ? d.data['dtype'] : 'float32') };
  const src = l.tensor(n.args[1], 'src');
  refuseTruncation(l, src, dst.dtype);
  const same = src.shape.length === dst.shape.length && src.shape.every((x, i) => x === dst.shape[i]);
  return same ? src : l.one('expand', [src], { shape: [...dst.shape] }, out);
}

/** matmul of (a, b) plus beta * bias (addmm, baddbmm). */
function addmm(l: Lowerer, n: FxNode): Val {
  const beta = l.num(n.kwargs['beta'], 'beta', 1);
  // beta = 0 ignores self (ATen: not even NaN propagates), so an uninitialized buffer is fine
  // there (Megatron's baddbmm into torch.empty).
  const bias = beta === 0 ? undefined : l.tensor(n.args[0], 'self');
  const a = l.tensor(n.args[1], 'mat1');
  const b = l.tensor(n.args[2], 'mat2');
  const alpha = l.num(n.kwargs['alpha'], 'alpha', 1);
  let p = l.one('matmul', [a, b]);
  if (alpha !== 1) p = l.one('scale', [p], { factor: alpha });
  if (beta === 0) return l.bind(n, l.one('identity', [p], {}, l.out(n)));
  const c = beta === 1 ? (bias as TensorVal) : l.one('scale', [bias as TensorVal], { factor: beta });
  return l.bind(n, l.one('add', [p, c], {}, l.out(n)));
}

/** Group of a functional collective: its name (torch >= 2.3) or the legacy explicit rank list. */
function collective(l: Lowerer, n: FxNode, op: string, input: TensorVal, attrs: Record<string, AttrValue>, groupArg: FxArg | undefined, sizeArg: FxArg | undefined, legacyRanks: FxArg | undefined): TensorVal {
  // The group size shapes all_gather's and reduce_scatter's output (before: taken as 1, so a
  // gathered tensor's annotated shape never matched).
  const size = legacyRanks !== undefined ? l.ints(legacyRanks, 'ranks').length : sizeArg !== undefined ? l.int(sizeArg, 'group_size') : undefined;
  const out = l.emit(op, [input], attrs, [l.out(n)], input.dtype, size)[0] as TensorVal;
  const raw = l.ops[l.ops.length - 1] as RawParallelOp;
  if (legacyRanks !== undefined) {
    const ranks = l.ints(legacyRanks, 'ranks');
    l.collectives.push({ op: raw, group: `ranks:${ranks.join(',')}`, ranks, groupSize: ranks.length, line: n.line });
  } else {
    const group = groupArg?.kind === 'str' ? groupArg.value : groupArg?.kind === 'num' ? groupArg.text : l.fail(`${n.target}: expected the group name`);
    l.collectives.push({ op: raw, group, ...(sizeArg === undefined ? {} : { groupSize: l.int(sizeArg, 'group_size') }), line: n.line });
  }
  return out;
}

function reduceOp(l: Lowerer, a: FxArg | undefined): string {
  const r = REDUCE[l.str(a, 'reduce_op').toLowerCase()];
  return r ?? l.fail(`reduce op '${l.str(a, 'reduce_op')}' is not supported (sum, avg, max, min)`);
}

/** Functional collectives: `_c10d_functional` (group name) and the legacy `c10d_functional` (tag, ranks, group size). */
function collectiveRules(ns: '_c10d_functional' | 'c10d_functional'): Record<string, Rule> {
  const legacy = ns === 'c10d_functional';
  return {
    [`${ns}.all_reduce`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, collective(l, n, 'all_reduce', x, { reduce: reduceOp(l, n.args[1]) }, n.args[2], undefined, legacy ? n.args[3] : undefined));
    },
    [`${ns}.all_reduce_`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      const r = collective(l, n, 'all_reduce', x, { reduce: reduceOp(l, n.args[1]) }, n.args[2], undefined, legacy ? n.args[3] : undefined);
      l.write(n.args[0], r);
      return l.bind(n, r);
    },
    [`${ns}.all_gather_into_tensor`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, legacy ? collective(l, n, 'all_gather', x, { dim: 0 }, undefined, undefined, n.args[2]) : collective(l, n, 'all_gather', x, { dim: 0 }, n.args[2], n.args[1], undefined));
    },
    [`${ns}.reduce_scatter_tensor`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      const attrs = { dim: 0, reduce: reduceOp(l, n.args[1]) };
      return l.bind(n, legacy ? collective(l, n, 'reduce_scatter', x, attrs, undefined, undefined, n.args[3]) : collective(l, n, 'reduce_scatter', x, attrs, n.args[3], n.args[2], undefined));
    },
    [`${ns}.all_to_all_single`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      for (const k of [1, 2]) {
        const s = n.args[k];
        if (s !== undefined && s.kind !== 'none' && new Set(l.ints(s, 'split_sizes')).size > 1) l.fail(`${n.target}: uneven split sizes are not supported`);
      }
      return l.bind(n, legacy ? collective(l, n, 'all_to_all', x, { split_dim: 0, concat_dim: 0 }, undefined, undefined, n.args[4]) : collective(l, n, 'all_to_all', x, { split_dim: 0, concat_dim: 0 }, n.args[3], undefined, undefined));
    },
    [`${ns}.broadcast`]: (l, n) => {
      const x = l.tensor(n.args[0], 'input');
      return l.bind(n, collective(l, n, 'broadcast', x, { src: l.int(n.args[1], 'src') }, n.args[2], undefined, legacy ? n.args[3] : undefined));
    },
    [`${ns}.wait_tensor`]: (l, n) => view(l, n, l.tensor(n.args[0], 'tensor')),
  };
}

function foreach(op: 'add' | 'sub' | 'mul' | 'div', inPlace: boolean): Rule {
  return (l, n) => {
    const a = n.args[0];
    const b = n.args[1];
    if (a?.kind !== 'list') return l.fail(`${n.target}: expected a list of tensors`);
    const alpha = n.kwargs['alpha'] ?? n.args[2];
    const outs: TensorVal[] = a.items.map((x, i) => {
      const t = l.tensor(x, `self[${i}]`);
      const other = b?.kind === 'list' ? b.items[i] : b;
      let r: TensorVal;
      if (other?.kind === 'num' && (op === 'mul' || op === 'div')) r = scaleBy(l, t, op, other.value, undefined);
      else {
        let o = l.operand(other, `other[${i}]`);
        if (alpha !== undefined && (op === 'add' || op === 'sub') && l.num(alpha, 'alpha') !== 1) o = l.one('scale', [o], { factor: l.num(alpha, 'alpha') });
        r = l.one(op, [t, o]);
      }
      if (inPlace) l.write(x, r);
      return r;
    });
    return l.bind(n, inPlace ? { kind: 'none' } : { kind: 'list', items: outs });
  };
}

/**
 * x[start:end:step] along d (DistributedSampler's rank::world rows): the dim viewed as
 * [size / step, step], the column start % step taken, then the rows. Needs step to divide the size.
 */
function stridedSlice(l: Lowerer, x: TensorVal, d: number, start: number, end: number, step: number, out: string): TensorVal {
  const size = x.shape[d] as number;
  if (step < 1) l.fail(`slice step ${step} must be positive`);
  if (size % step !== 0) l.fail(`slice with step ${step} of a dim of size ${size}: only steps that divide the size are supported`);
  const count = Math.max(0, Math.ceil((end - start) / step));
  if (count === 0) l.fail('an empty strided slice is not supported');
  const rows = size / step;
  const grid = l.one('reshape', [x], { shape: [...x.shape.slice(0, d), rows, step, ...x.shape.slice(d + 1)] });
  const col = l.one('slice', [grid], { dim: d + 1, start: start % step, end: (start % step) + 1 });
  const a0 = Math.floor(start / step);
  const flat = l.one('reshape', [col], { shape: [...x.shape.slice(0, d), rows, ...x.shape.slice(d + 1)] }, a0 === 0 && count === rows ? out : undefined);
  return a0 === 0 && count === rows ? flat : l.one('slice', [flat], { dim: d, start: a0, end: a0 + count }, out);
}

/**
 * NLL's gradient with respect to the log-probabilities [N, C], as ops: −g · onehot(target) for
 * labels that are not ignored, divided by their count for the mean (what nll_loss_backward
 * computes with its total weight).
 */
function nllGrad(l: Lowerer, g: TensorVal, lp: TensorVal, tgt: TensorVal, reduction: string, ignore: number): TensorVal {
  const { onehot, valid } = labelMasks(l, lp, tgt, ignore, 'nll_loss_backward read as a tensor');
  const N = lp.shape[0] as number;
  const w = l.one('mul', [onehot, valid], {}, undefined, 'float32');
  const gw = reduction === 'none' ? l.one('mul', [l.one('reshape', [g], { shape: [N, 1] }), w]) : l.one('mul', [w, g]);
  const neg = l.one('neg', [gw]);
  return reduction === 'mean' ? l.one('div', [neg, l.one('sum', [valid])]) : neg;
}

const RULES: Record<string, Rule> = {
  // ---- no-ops: the same value (views share storage; copies in exact arithmetic are identities)
  'aten.alias': (l, n) => view(l, n, l.tensor(n.args[0], 'self')),
  // (Detaching uninitialized memory keeps it uninitialized: an autograd Function's forward
  // detaches the buffers it allocates for a list all_gather.)
  'aten.detach': (l, n) => {
    const v = l.val(n.args[0], 'self');
    // (and saved LayerNorm statistics stay what they are: AOTAutograd detaches them for the backward)
    return v.kind === 'opaque' && v.materialize === undefined ? l.bind(n, v) : view(l, n, l.tensor(n.args[0], 'self'));
  },
  'aten.clone': (l, n) => l.bind(n, l.tensor(n.args[0], 'self')),
  'aten.lift_fresh_copy': (l, n) => l.bind(n, l.tensor(n.args[0], 'self')),
  'aten._to_copy': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const to = n.type?.dtype ?? x.dtype;
    // A cast between floating types, or from integers to floats, keeps the exact value
    // (docs/engine.md: values are exact reals whatever the dtype); one to an integer type
    // truncates, which no op here computes.
    // A cast to bool is `x != 0` (`.bool()` of a 0/1 mask; an identity would keep a 2 a 2).
    if (to === 'bool' && x.dtype !== 'bool') return l.bind(n, l.one('compare', [x, l.constant(0)], { rel: 'ne' }, l.out(n), 'bool'));
    refuseTruncation(l, x, to);
    return l.bind(n, x.dtype === to ? x : l.one('identity', [x], {}, l.out(n), to));
  },
  // (functional copy_: the result is src in dst's shape)
  'aten.copy': (l, n) => l.bind(n, copied(l, n, l.out(n))),
  'aten.copy_': (l, n) => {
    const v = copied(l, n, undefined);
    l.write(n.args[0], v);
    return l.bind(n, v);
  },
  getitem: (l, n) => {
    const v = l.val(n.args[0], 'tuple');
    const i = l.int(n.args[1], 'index');
    if (v.kind !== 'list') return l.fail('indexing a value that is not a tuple');
    const item = v.items[i] ?? l.fail(`index ${i} out of range`);
    // Items share the tuple's storage root: split pieces are views of the split input. Pieces
    // of a split are disjoint (a write through one leaves the others readable); the items of a
    // fresh tuple (lower.ts, FRESH_TUPLES) are separate storages; the items of any other tuple
    // conservatively go stale together.
    const list = (n.args[0] as { name?: string }).name;
    if (list !== undefined && l.freshLists.has(list)) return l.bind(n, item);
    return list !== undefined && l.splitLists.has(list) ? l.bindPiece(n, item, list, i) : l.bind(n, item, list);
  },
  getattr: (l, n) => {
    // A module-attribute tensor (`self._tensor_constant0`, what `torch.tensor(0)` in the
    // traced code becomes): its value comes from the relations' "constants", never a guess.
    const name = (n.args[0] as { value?: string }).value ?? '?';
    const c = l.opts.constants?.[name];
    if (c === undefined) return l.fail(`module attribute 'self.${name}' (a constant tensor): give its value in the relations' "constants" (docs/import.md, "Constants"), or pass it as a graph input`);
    return l.bind(n, constantTensor(l, c, name));
  },

  // ---- layout
  'aten.view': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  'aten._unsafe_view': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  'aten.reshape': (l, n) => reshape(l, n, l.ints(n.args[1], 'shape')),
  'aten.view_copy': (l, n) => reshape(l, n, l.ints(n.args[1], 'size')),
  // One dim split into `sizes` (one may be -1): a row-major reshape (GPT-J's interleaved pairs).
  'aten.unflatten': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    const sizes = l.ints(n.args[2], 'sizes');
    const known = sizes.filter((s) => s !== -1).reduce((a, b) => a * b, 1);
    const dims = sizes.map((s) => (s === -1 && known > 0 ? size / known : s));
    if (dims.reduce((a, b) => a * b, 1) !== size) l.fail(`cannot unflatten dim ${d} of size ${size} into [${sizes.join(', ')}]`);
    return reshape(l, n, [...x.shape.slice(0, d), ...dims, ...x.shape.slice(d + 1)]);
  },
  // torch 1.13's reshape of a contiguous tensor: a view with explicit (contiguous) strides.
  'aten._reshape_alias': (l, n) => {
    const size = l.ints(n.args[1], 'size');
    const stride = l.ints(n.args[2], 'stride');
    // The strides torch computes to view the input as `size` (autograd's reshape of a
    // transposed tensor): then it is that view, whose values are the row-major reshape.
    const x = l.tensor(n.args[0], 'self');
    const st = l.stridesAt(n.args[0]);
    if (st !== undefined) {
      const viewed = viewStrides(x.shape, st, size);
      if (viewed !== undefined && sameStrides(size, stride, viewed)) return reshape(l, n, size);
      l.fail(`_reshape_alias with strides [${stride.join(', ')}] for size [${size.join(', ')}] is not a view of its input (shape [${x.shape.join(', ')}], strides [${st.join(', ')}]): a strided view this mapping does not model`);
    }
    // Input strides unknown (a slice, a split piece): a reshape only with row-major strides.
    // Only row-major strides are a reshape; any other is a strided view this mapping does not model.
    let acc = 1;
    for (let i = size.length - 1; i >= 0; i--) {
      if ((size[i] as number) !== 1 && stride[i] !== acc) l.fail(`_reshape_alias with strides [${stride.join(', ')}] for size [${size.join(', ')}] is not a row-major reshape`);
      acc *= size[i] as number;
    }
    return reshape(l, n, size);
  },
  'aten.unsqueeze': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r = x.shape.length + 1;
    let d = l.int(n.args[1], 'dim');
    if (d < 0) d += r;
    if (d < 0 || d >= r) l.fail(`dim ${d} out of range`);
    return reshape(l, n, [...x.shape.slice(0, d), 1, ...x.shape.slice(d)]);
  },
  'aten.squeeze': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const dims = n.args[1] === undefined ? x.shape.map((_, i) => i) : l.ints(n.args[1], 'dim').map((d) => (d < 0 ? d + x.shape.length : d));
    return reshape(l, n, x.shape.filter((s, i) => !(s === 1 && dims.includes(i))));
  },
  'aten.t': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (x.shape.length < 2) return view(l, n, x);
    return l.bind(n, l.one('transpose', [x], { dim0: 0, dim1: 1 }, l.out(n)), (n.args[0] as { name?: string }).name);
  },
  'aten.transpose': (l, n) => l.bind(n, l.one('transpose', [l.tensor(n.args[0], 'self')], { dim0: l.int(n.args[1], 'dim0'), dim1: l.int(n.args[2], 'dim1') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.permute': (l, n) => l.bind(n, l.one('permute', [l.tensor(n.args[0], 'self')], { dims: l.ints(n.args[1], 'dims') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.expand': (l, n) => l.bind(n, l.one('expand', [l.tensor(n.args[0], 'self')], { shape: l.ints(n.args[1], 'size') }, l.out(n)), (n.args[0] as { name?: string }).name),
  'aten.slice': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(n.args[1], 'dim', 0);
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    const clamp = (v: number): number => Math.max(0, Math.min(size, v < 0 ? v + size : v));
    const startArg = n.args[2];
    const endArg = n.args[3];
    const start = clamp(startArg === undefined || startArg.kind === 'none' ? 0 : l.num(startArg, 'start'));
    const end = clamp(endArg === undefined || endArg.kind === 'none' ? size : l.num(endArg, 'end'));
    const step = l.int(n.args[4], 'step', 1);
    if (step !== 1) return l.bind(n, stridedSlice(l, x, d, start, end, step, l.out(n)));
    // (the whole dim: x itself, still a region so that a write through it reaches x)
    if (start === 0 && end === size) return l.bindRegion(n, x, (n.args[0] as { name: string }).name, d, 0, size, x.shape);
    const sl = l.one('slice', [x], { dim: d, start, end: Math.max(start, end) }, l.out(n));
    return l.bindRegion(n, sl, (n.args[0] as { name: string }).name, d, start, Math.max(start, end), sl.shape);
  },
  'aten.cat': (l, n) => {
    const xs = n.args[0];
    if (xs?.kind !== 'list') return l.fail('expected a list of tensors');
    return l.bind(n, l.one('concat', xs.items.map((x, i) => l.tensor(x, `tensors[${i}]`)), { dim: l.int(n.args[1], 'dim', 0) }, l.out(n)));
  },
  'aten.split': (l, n) => {
    // split.Tensor(self, split_size, dim): pieces of split_size, the last one smaller (torch.chunk's decomposition).
    const x = l.tensor(n.args[0], 'self');
    let d = l.int(l.arg(n, 2, 'dim'), 'dim', 0);
    if (d < 0) d += x.shape.length;
    const size = x.shape[d] ?? l.fail(`dim ${d} out of range`);
    if (n.args[1]?.kind === 'list') l.fail('split with a list of sizes: expected split_with_sizes');
    const k = l.int(n.args[1], 'split_size');
    if (k <= 0) l.fail('split_size must be positive');
    return splitPieces(l, n, x, d, size, k);
  },
  // unsafe_split / unsafe_split_with_sizes (LSTM's gates): the same values as split (only
  // autograd's view tracking differs).
  'aten.unsafe_split': (l, n) => (RULES['aten.split'] as Rule)(l, n),
  'aten.unsafe_split_with_sizes': (l, n) => (RULES['aten.split_with_sizes'] as Rule)(l, n),
  'aten.split_with_sizes': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const sizes = l.ints(n.args[1], 'split_sizes');
    const outs = l.emit('split', [x], { dim: l.int(n.args[2], 'dim', 0), sizes }, sizes.map((_, i) => `${l.out(n)}.${i}`), x.dtype);
    return l.bind(n, { kind: 'list', items: outs }, (n.args[0] as { name?: string }).name);
  },

  // ---- arithmetic
  'aten.add': binary('add', false),
  'aten.sub': binary('sub', false),
  'aten.mul': binary('mul', false),
  'aten.div': binary('div', false),
  'aten.add_': binary('add', true),
  'aten.sub_': binary('sub', true),
  'aten.mul_': binary('mul', true),
  'aten.div_': binary('div', true),
  'aten.neg': unary('neg'),
  'aten.exp': unary('exp'),
  'aten.sqrt': unary('sqrt'),
  'aten.addcmul': addc('mul', false),
  'aten.addcmul_': addc('mul', true),
  'aten.addcdiv': addc('div', false),
  'aten.addcdiv_': addc('div', true),
  'aten.log': unary('log'),
  'aten.tanh': unary('tanh'),
  'aten.sigmoid': unary('sigmoid'),
  'aten.silu': unary('silu'),
  'aten.neg_': unary('neg', true),
  'aten.exp_': unary('exp', true),
  'aten.sqrt_': unary('sqrt', true),
  'aten.log_': unary('log', true),
  'aten.tanh_': unary('tanh', true),
  'aten.sigmoid_': unary('sigmoid', true),
  'aten.silu_': unary('silu', true),
  'aten.mm': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'mat2')], {}, l.out(n))),
  'aten.bmm': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'mat2')], {}, l.out(n))),
  'aten.matmul': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'other')], {}, l.out(n))),
  // A matrix times a vector (`x @ w` with a 1-D `w`), a dot product: torch.matmul's 1-D promotion (ops/matmul.ts).
  'aten.mv': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'vec')], {}, l.out(n))),
  'aten.dot': (l, n) => l.bind(n, l.one('matmul', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'tensor')], {}, l.out(n))),
  'aten.addmm': addmm,
  // torch.export's ATen dialect keeps these composite ops; each has a registry op of the same meaning.
  'aten.linear': (l, n) => {
    const b = l.optTensor(l.arg(n, 2, 'bias'), 'bias');
    return l.bind(n, l.one('linear', [l.tensor(n.args[0], 'input'), l.tensor(n.args[1], 'weight'), ...(b === undefined ? [] : [b])], {}, l.out(n)));
  },
  'aten.layer_norm': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const w = l.optTensor(l.arg(n, 2, 'weight'), 'weight');
    const b = l.optTensor(l.arg(n, 3, 'bias'), 'bias');
    if (b !== undefined && w === undefined) l.fail('a bias without a weight is not supported');
    return l.bind(n, l.one('layer_norm', [x, ...(w === undefined ? [] : [w]), ...(b === undefined ? [] : [b])], { eps: l.num(l.arg(n, 4, 'eps'), 'eps', 1e-5), normalized_dims: l.ints(n.args[1], 'normalized_shape').length }, l.out(n)));
  },
  'aten.softmax': (l, n) => l.bind(n, l.one('softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n))),
  'aten.log_softmax': (l, n) => l.bind(n, l.one('log_softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n))),
  'aten.cross_entropy_loss': (l, n) => {
    if (l.optTensor(l.arg(n, 2, 'weight'), 'weight') !== undefined) l.fail('cross_entropy with class weights is not supported');
    if (l.num(l.arg(n, 5, 'label_smoothing'), 'label_smoothing', 0) !== 0) l.fail('cross_entropy with label smoothing is not supported');
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 3, 'reduction'), 'reduction', 1)] ?? l.fail('bad reduction');
    return l.bind(n, l.one('cross_entropy', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'target')], { reduction, ignore_index: l.int(l.arg(n, 4, 'ignore_index'), 'ignore_index', -100) }, l.out(n)));
  },
  'aten.baddbmm': addmm,
  'aten.sum': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (n.target.endsWith('.default') || n.args[1] === undefined || n.args[1].kind === 'none') return l.bind(n, l.one('sum', [x], {}, l.out(n)));
    return l.bind(n, l.one('sum', [x], { dims: l.ints(n.args[1], 'dim'), keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) }, l.out(n)));
  },
  'aten.mean': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (n.target.endsWith('.default') || n.args[1] === undefined || n.args[1].kind === 'none') return l.bind(n, l.one('mean', [x], {}, l.out(n)));
    return l.bind(n, l.one('mean', [x], { dims: l.ints(n.args[1], 'dim'), keepdim: l.bool(l.arg(n, 2, 'keepdim'), 'keepdim', false) }, l.out(n)));
  },

  // ---- activations, softmax, losses
  'aten.gelu': (l, n) => l.bind(n, l.one('gelu', [l.tensor(n.args[0], 'self')], { approximate: l.str(l.arg(n, 1, 'approximate'), 'approximate', 'none') }, l.out(n))),
  'aten.gelu_backward': (l, n) => l.bind(n, l.one('gelu_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'self')], { approximate: l.str(l.arg(n, 2, 'approximate'), 'approximate', 'none') }, l.out(n))),
  'aten.silu_backward': (l, n) => l.bind(n, l.one('silu_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'self')], {}, l.out(n))),
  'aten.tanh_backward': (l, n) => l.bind(n, l.one('tanh_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], {}, l.out(n))),
  'aten.sigmoid_backward': (l, n) => l.bind(n, l.one('sigmoid_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], {}, l.out(n))),
  'aten._softmax': (l, n) => {
    const filled = negInfOf(l, n.args[0]);
    if (filled !== undefined) return maskedSoftmax(l, n, filled, l.int(n.args[1], 'dim'));
    return l.bind(n, l.one('softmax', [l.tensor(n.args[0], 'self')], { dim: l.int(n.args[1], 'dim') }, l.out(n)));
  },
  'aten._softmax_backward_data': (l, n) => l.bind(n, l.one('softmax_backward', [l.tensor(n.args[0], 'grad_output'), l.tensor(n.args[1], 'output')], { dim: l.int(n.args[2], 'dim') }, l.out(n))),
  'aten._log_softmax': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    const r = l.bind(n, l.one('log_softmax', [x], { dim: l.int(n.args[1], 'dim') }, l.out(n)));
    logSoftmaxOf.set(r as TensorVal, { logits: x, dim: l.int(n.args[1], 'dim') });
    return r;
  },
  'aten._log_softmax_backward_data': (l, n) => {
    const g = l.val(n.args[0], 'grad_output');
    const out = l.tensor(n.args[1], 'output');
    const dim = l.int(n.args[2], 'dim');
    if (g.kind === 'opaque' && g.what === 'the NLL loss gradient') {
      // log_softmax backward of nll_loss backward is the cross-entropy gradient of the logits.
      if (g.data['logsm'] !== out.id) l.fail('the NLL gradient is not of this log-softmax output');
      const { logits: src, grad: gl, target: tgt } = g.tensors as Record<'logits' | 'grad' | 'target', TensorVal>;
      return l.bind(n, l.one('cross_entropy_backward', [gl, src, tgt], { reduction: String(g.data['reduction']), ignore_index: Number(g.data['ignore_index']) }, l.out(n), src.dtype));
    }
    if (g.kind !== 'tensor') return l.fail('argument grad_output: expected a tensor');
    // grad - exp(out) * sum(grad, dim, keepdim): the adjoint of log_softmax.
    const s = l.one('sum', [g], { dims: [dim], keepdim: true });
    const p = l.one('exp', [out]);
    return l.bind(n, l.one('sub', [g, l.one('mul', [p, s])], {}, l.out(n)));
  },
  'aten.nll_loss_forward': (l, n) => {
    const lp = l.tensor(n.args[0], 'self');
    const tgt = l.tensor(n.args[1], 'target');
    if (l.optTensor(n.args[2], 'weight') !== undefined) l.fail('nll_loss with class weights is not supported');
    const src = crossEntropyOf(lp);
    // Log-probabilities of another provenance (a view of a [B, T, V] log_softmax): NLL by its formula.
    if (src === undefined) return nllForward(l, n, undefined);
    const reduction = ['none', 'mean', 'sum'][l.int(n.args[3], 'reduction')] ?? l.fail('bad reduction');
    const ii = l.int(n.args[4], 'ignore_index', -100);
    const loss = l.one('cross_entropy', [src.logits, tgt], { reduction, ignore_index: ii }, `${l.out(n)}.0`, src.logits.dtype);
    return l.bind(n, { kind: 'list', items: [loss, { kind: 'opaque', what: 'the NLL total weight', data: {} }] });
  },
  'aten.nll_loss_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const lp = l.tensor(n.args[1], 'self');
    const tgt = l.tensor(n.args[2], 'target');
    if (l.optTensor(n.args[3], 'weight') !== undefined) l.fail('nll_loss with class weights is not supported');
    const src = crossEntropyOf(lp);
    if (src === undefined) return nllBackward(l, n, undefined);
    const reduction = ['none', 'mean', 'sum'][l.int(n.args[4], 'reduction')] ?? l.fail('bad reduction');
    const tw = l.val(n.args[6], 'total_weight');
    if (tw.kind !== 'opaque' || tw.what !== 'the NLL total weight') l.fail('total_weight must come from nll_loss_forward');
    const ignore = l.int(n.args[5], 'ignore_index', -100);
    return l.bind(n, { kind: 'opaque', what: 'the NLL loss gradient', data: { logsm: lp.id, reduction, ignore_index: ignore }, tensors: { grad: g, logits: src.logits, target: tgt }, materialize: () => nllGrad(l, g, lp, tgt, reduction, ignore) });
  },
  'aten.mse_loss': (l, n) => {
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 2, 'reduction'), 'reduction', 1)] ?? l.fail('bad reduction');
    if (reduction === 'none') {
      // (self - target)^2 per element (per-sample losses)
      const d = l.one('sub', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'target')]);
      return l.bind(n, l.one('mul', [d, d], {}, l.out(n)));
    }
    return l.bind(n, l.one('mse_loss', [l.tensor(n.args[0], 'self'), l.tensor(n.args[1], 'target')], { reduction }, l.out(n)));
  },
  'aten.mse_loss_backward': (l, n) => {
    const reduction = ['none', 'mean', 'sum'][l.int(l.arg(n, 3, 'reduction'), 'reduction')] ?? l.fail('bad reduction');
    const g = l.tensor(n.args[0], 'grad_output');
    if (reduction === 'none') {
      // 2 (self - target) grad, element-wise
      const d = l.one('sub', [l.tensor(n.args[1], 'self'), l.tensor(n.args[2], 'target')]);
      return l.bind(n, l.one('mul', [l.one('scale', [d], { factor: 2 }), g], {}, l.out(n)));
    }
    if (g.shape.length !== 0) l.fail('mse_loss_backward: expected a scalar grad_output');
    return l.bind(n, l.one('mse_loss_backward', [l.tensor(n.args[1], 'self'), l.tensor(n.args[2], 'target'), g], { reduction }, l.out(n)));
  },
  'aten.native_layer_norm': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const ns = l.ints(n.args[1], 'normalized_shape');
    const w = l.optTensor(n.args[2], 'weight');
    const b = l.optTensor(n.args[3], 'bias');
    const eps = l.num(n.args[4], 'eps');
    const ins = [x, ...(w === undefined ? (b === undefined ? [] : l.fail('a bias without a weight is not supported')) : [w]), ...(b === undefined ? [] : [b])];
    const y = l.one('layer_norm', ins, { eps, normalized_dims: ns.length }, `${l.out(n)}.0`);
    const stat = (what: string): OpaqueVal => ({ kind: 'opaque', what, data: { x: x.id, eps, k: ns.length } });
    return l.bind(n, { kind: 'list', items: [y, stat('the LayerNorm mean'), stat('the LayerNorm rstd')] });
  },
  'aten.native_layer_norm_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_out');
    const x = l.tensor(n.args[1], 'input');
    const ns = l.ints(n.args[2], 'normalized_shape');
    // A standalone backward graph takes the saved statistics as tensors (apex saves them flat):
    // then the backward is its definition over those values, not a recomputation.
    if (l.val(n.args[3], 'mean').kind === 'tensor' && l.val(n.args[4], 'rstd').kind === 'tensor') return layerNormBackwardOf(l, n, g, x, ns.length);
    for (const [k, what] of [[3, 'the LayerNorm mean'], [4, 'the LayerNorm rstd']] as const) {
      const s = l.val(n.args[k], k === 3 ? 'mean' : 'rstd');
      if (s.kind !== 'opaque' || s.what !== what || s.data['x'] !== x.id) l.fail(`argument ${k === 3 ? 'mean' : 'rstd'}: expected ${what} of the same input from native_layer_norm`);
    }
    const mean = l.val(n.args[3], 'mean') as OpaqueVal;
    const w = l.optTensor(n.args[5], 'weight');
    const b = l.optTensor(n.args[6], 'bias');
    const mask = n.args[7]?.kind === 'list' ? n.args[7].items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
    const nOut = w === undefined ? 1 : 3;
    const outs = l.emit('layer_norm_backward', [g, x, ...(w === undefined ? [] : [w])], { eps: Number(mean.data['eps']), normalized_dims: ns.length }, Array.from({ length: nOut }, (_, i) => `${l.out(n)}.${i}`), g.dtype);
    const items: Val[] = [0, 1, 2].map((i) => (mask[i] === false || (i === 2 && b === undefined) ? { kind: 'none' } : (outs[i] ?? { kind: 'none' })));
    return l.bind(n, { kind: 'list', items });
  },
  'aten.embedding': (l, n) => {
    const w = l.tensor(n.args[0], 'weight');
    const ids = l.tensor(n.args[1], 'indices');
    return l.bind(n, l.one('embedding', [ids, w], {}, l.out(n), w.dtype));
  },
  'aten.embedding_dense_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const ids = l.tensor(n.args[1], 'indices');
    if (l.bool(n.args[4], 'scale_grad_by_freq', false)) l.fail('embedding with scale_grad_by_freq is not supported');
    // nn.Embedding(padding_idx=p): ATen skips the positions whose id is p, so row p gets no
    // gradient: the same sum with those positions' gradients zeroed first.
    const pad = l.int(n.args[3], 'padding_idx', -1);
    let gg = g;
    if (pad !== -1) {
      const at = l.one('compare', [ids, l.constant(pad)], { rel: 'eq' }, undefined, 'bool');
      const wide = l.one('expand', [l.one('reshape', [at], { shape: [...ids.shape, 1] }, undefined, 'bool')], { shape: [...g.shape] }, undefined, 'bool');
      gg = l.one('where', [wide, l.constantLike(g, 0), g], {}, undefined, g.dtype);
    }
    return l.bind(n, l.one('embedding_backward', [gg, ids], { num_embeddings: l.int(n.args[2], 'num_weights') }, l.out(n)));
  },
  'aten.native_dropout': (l, n) => {
    const x = l.tensor(n.args[0], 'input');
    const p = l.num(n.args[1], 'p');
    const train = n.args[2] === undefined || n.args[2].kind === 'none' ? true : l.bool(n.args[2], 'train', true);
    if (!train || p === 0) return l.bind(n, { kind: 'list', items: [x, l.constantLike(x, 1)] });
    // The sampled mask is an input of the plan (its relation is stated like any other input's).
    const maskId = `${l.out(n)}.mask`;
    const mask = l.addTensor(maskId, x.shape, 'bool');
    l.extra.push({ id: maskId, shape: x.shape, dtype: 'bool', line: n.line });
    const y = l.one('dropout', [x, mask], { p }, `${l.out(n)}.0`);
    return l.bind(n, { kind: 'list', items: [y, mask] });
  },
  // torch 1.13's CPU dropout: a buffer filled in place with Bernoulli samples, then scaled and
  // multiplied in. The samples are a plan input (`<node>.mask`, values 0 and 1), as above.
  'aten.bernoulli_': (l, n) => {
    const d = l.val(n.args[0], 'self');
    const shape = d.kind === 'tensor' ? d.shape : d.kind === 'opaque' && d.what === 'uninitialized memory' ? (JSON.parse(String(d.data['shape'])) as number[]) : l.fail('bernoulli_ on something that is not a tensor');
    const maskId = `${l.out(n)}.mask`;
    const mask = l.addTensor(maskId, shape, 'bool');
    l.extra.push({ id: maskId, shape, dtype: 'bool', line: n.line });
    l.write(n.args[0], mask);
    return l.bind(n, mask);
  },
  'aten.native_dropout_backward': (l, n) => {
    const g = l.tensor(n.args[0], 'grad_output');
    const mask = l.tensor(n.args[1], 'mask');
    const scale = l.num(n.args[2], 'scale');
    return l.bind(n, l.one('scale', [l.one('mul', [g, mask], {}, undefined, g.dtype)], { factor: scale }, l.out(n)));
  },

  // ---- uninitialized memory: only a whole-tensor copy_ may write it, nothing may read it
  'aten.new_empty_strided': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[1], 'size'))),
  'aten.new_empty': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[1], 'size'))),
  'aten.empty_like': (l, n) => l.bind(n, uninitialized(l, n, likeShape(l, n))),
  'aten.empty': (l, n) => l.bind(n, uninitialized(l, n, l.ints(n.args[0], 'size'))),

  // ---- constants
  'aten.ones_like': (l, n) => filled(l, n, 1, likeShape(l, n)),
  'aten.zeros_like': (l, n) => filled(l, n, 0, likeShape(l, n)),
  'aten.full_like': (l, n) => filled(l, n, l.num(n.args[1], 'fill_value'), likeShape(l, n)),
  'aten.ones': (l, n) => filled(l, n, 1, l.ints(n.args[0], 'size')),
  'aten.zeros': (l, n) => filled(l, n, 0, l.ints(n.args[0], 'size')),
  'aten.full': (l, n) => filled(l, n, l.num(n.args[1], 'fill_value'), l.ints(n.args[0], 'size')),
  'aten.scalar_tensor': (l, n) => filled(l, n, l.num(n.args[0], 's'), []),

  // ---- optimizer (torch.optim's foreach implementation)
  'aten._foreach_add': foreach('add', false),
  'aten._foreach_sub': foreach('sub', false),
  'aten._foreach_mul': foreach('mul', false),
  'aten._foreach_div': foreach('div', false),
  'aten._foreach_add_': foreach('add', true),
  'aten._foreach_sub_': foreach('sub', true),
  'aten._foreach_mul_': foreach('mul', true),
  'aten._foreach_div_': foreach('div', true),

  ...collectiveRules('_c10d_functional'),
  ...collectiveRules('c10d_functional'),
  ...TRAINING_RULES,
  ...INDEX_RULES,
  ...SORT_RULES,
  ...CONV_RULES,
  ...MASK_RULES,
  ...LOOPS_RULES,
  ...BAG_RULES,
  ...SAMPLE_RULES,
  ...ACT_RULES,
  ...CV_RULES,
  ...NL_RULES,
};

/**
 * native_layer_norm_backward over given statistics (mean, rstd: one per row, any shape of that
 * many elements): x̂ = (x − mean)·rstd, ĝ = g·w;
 * dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) over the normalized dims, dw = Σ g·x̂, db = Σ g over the rows.
 */
function layerNormBackwardOf(l: Lowerer, n: FxNode, g: TensorVal, x: TensorVal, k: number): Val {
  const lead = x.shape.slice(0, x.shape.length - k);
  const rows = lead.reduce((a, d) => a * d, 1);
  const statShape = [...lead, ...x.shape.slice(lead.length).map(() => 1)];
  const stat = (a: FxArg | undefined, what: string): TensorVal => {
    const t = l.tensor(a, what);
    if (t.shape.reduce((p, d) => p * d, 1) !== rows) l.fail(`argument ${what}: ${t.shape.join('x')} elements, one per row of the input's ${rows} rows expected`);
    return l.one('reshape', [t], { shape: statShape });
  };
  const mean = stat(n.args[3], 'mean');
  const rstd = stat(n.args[4], 'rstd');
  const w = l.optTensor(n.args[5], 'weight');
  const b = l.optTensor(n.args[6], 'bias');
  const mask = n.args[7]?.kind === 'list' ? n.args[7].items.map((v, i) => l.bool(v, `output_mask[${i}]`, true)) : [true, true, true];
  const norm = x.shape.map((_, i) => i).slice(lead.length);
  const xhat = l.one('mul', [l.one('sub', [x, mean]), rstd]);
  const gw = w === undefined ? g : l.one('mul', [g, w]);
  const m1 = l.one('mean', [gw], { dims: norm, keepdim: true });
  const m2 = l.one('mean', [l.one('mul', [gw, xhat])], { dims: norm, keepdim: true });
  // (output names apart from the temporaries' `<node>.<k>`)
  const dx = l.one('mul', [rstd, l.one('sub', [l.one('sub', [gw, m1]), l.one('mul', [xhat, m2])])], {}, `${l.out(n)}.grad_input`, g.dtype);
  const leadDims = lead.map((_, i) => i);
  const reduceRows = (t: TensorVal, out: string): TensorVal => (leadDims.length === 0 ? l.one('identity', [t], {}, out) : l.one('sum', [t], { dims: leadDims }, out));
  const dw = w === undefined || mask[1] === false ? undefined : reduceRows(l.one('mul', [g, xhat]), `${l.out(n)}.grad_weight`);
  const db = b === undefined || mask[2] === false ? undefined : reduceRows(g, `${l.out(n)}.grad_bias`);
  const some = (t: TensorVal | undefined): Val => t ?? { kind: 'none' };
  return l.bind(n, { kind: 'list', items: [mask[0] === false ? { kind: 'none' } : dx, some(dw), some(db)] });
}

/** The rules, with data-dependent sizes read densely (dynsize.ts), tensors of no elements rewritten by what ops compute on them (aten-empty.ts), tensors holding -inf carried to the softmax that reads them (aten-neginf.ts), complex values as pairs of reals (aten-complex.ts), and weighted NLL and fill with a tensor value (aten-probe.ts). */
const ALL_RULES = withDynsize(withEmpty(withNegInf(withComplex(withProbe(RULES)))));

/** The logits and dim of each log_softmax output (for the cross-entropy pattern). */
const logSoftmaxOf = new WeakMap<TensorVal, { logits: TensorVal; dim: number }>();

/** The logits of lp when lp is the log_softmax over the classes of [N, C] logits (NLL of it is cross-entropy); the same test for nll_loss's forward and backward, so both take the same form. */
function crossEntropyOf(lp: TensorVal): { logits: TensorVal; dim: number } | undefined {
  const src = logSoftmaxOf.get(lp);
  return src === undefined || lp.shape.length !== 2 || (src.dim !== 1 && src.dim !== -1) ? undefined : src;
}

/** Lowers the parsed graphs of one program (one graph, or a forward and a backward); ImportError on anything unsupported. */
export function lowerGraph(g: FxGraph | readonly FxGraph[], opts: LowerOptions = {}): Lowered {
  return new Lowerer(Array.isArray(g) ? (g as readonly FxGraph[]) : [g as FxGraph], ALL_RULES, opts).run();
}

/** A constant's value as a tensor: a scalar, or nested lists (each element an exact constant). */
function constantTensor(l: Lowerer, c: ConstValue, name: string): TensorVal {
  if (typeof c === 'number') return l.constant(c);
  const shape: number[] = [];
  for (let v: ConstValue = c; Array.isArray(v); v = (v as readonly ConstValue[])[0] as ConstValue) shape.push((v as readonly ConstValue[]).length);
  const flat: number[] = [];
  const walk = (v: ConstValue, d: number): void => {
    if (d === shape.length) {
      if (typeof v !== 'number') l.fail(`constant '${name}': nested lists of different depths`);
      flat.push(v);
      return;
    }
    if (!Array.isArray(v) || v.length !== shape[d]) l.fail(`constant '${name}': not a rectangular array of shape [${shape.join(', ')}]`);
    for (const x of v as readonly ConstValue[]) walk(x, d + 1);
  };
  walk(c, 0);
  if (flat.length === 0) l.fail(`constant '${name}' is empty`);
  if (flat.length > 4096) l.fail(`constant '${name}' has ${flat.length} elements (at most 4096 are embedded; pass a larger one as a graph input)`);
  const cells = flat.map((x) => l.one('reshape', [l.constant(x)], { shape: [1] }));
  const row = cells.length === 1 ? (cells[0] as TensorVal) : l.one('concat', cells, { dim: 0 });
  return l.one('reshape', [row], { shape });
}
