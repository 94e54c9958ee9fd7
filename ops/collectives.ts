/**
 * Communication ops. In a plan they appear either once per rank (matched across the group by
 * call order, as NCCL matches them) or once for the whole group; the loader normalizes both
 * into collective instances. Group order is ascending rank for rank lists (as
 * torch.distributed.new_group sorts them) and mesh-coordinate order for axis groups.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg, cat, narrow, zipWith } from './dense.js';
import { batchDim, dimLabels, fixedDim, resizeOneDim, sameShapeSig } from './dims.js';
import { NO_BACKWARD } from './grad.js';
import { type Attrs, type DimSig, type OpDef, attrNum, attrObject, fixed, normDim, ShapeError, type Shape, shapeStr, withZeroTails, ZERO_ALWAYS } from './types.js';

type GroupApply = <S>(alg: Algebra<S>, inputs: readonly (Dense<S> | undefined)[], attrs: Attrs, group: Int32Array) => (Dense<S> | undefined)[];

function present<S>(inputs: readonly (Dense<S> | undefined)[]): Dense<S>[] {
  return inputs.map((x, i) => {
    if (x === undefined) throw new Error(`member ${i} passes no input`);
    return x;
  });
}

/** Element-wise reduction of the members' tensors. */
function reduceMembers<S>(alg: Algebra<S>, xs: readonly Dense<S>[], reduce: string): Dense<S> {
  return zipWith(xs, (vals) => {
    switch (reduce) {
      case 'sum':
        return alg.sum(vals);
      case 'avg':
        return alg.mul(alg.sum(vals), alg.constant(`1/${vals.length}`));
      case 'max':
        return alg.max(vals);
      case 'min':
        return alg.min(vals);
    }
    throw new Error(`unknown reduction '${reduce}'`);
  });
}

function split<S>(x: Dense<S>, dim: number, g: number): Dense<S>[] {
  const c = (x.shape[dim] as number) / g;
  return Array.from({ length: g }, (_, i) => narrow(x, dim, i * c, (i + 1) * c));
}

const allReduceApply: GroupApply = (alg, inputs, at) => {
  const r = reduceMembers(alg, present(inputs), String(at['reduce']));
  return inputs.map(() => r);
};
const allGatherApply: GroupApply = (_alg, inputs, at) => {
  const xs = present(inputs);
  const r = cat(xs, normDim(attrNum(at, 'dim'), (xs[0] as Dense<unknown>).shape.length));
  return inputs.map(() => r);
};
const reduceScatterApply: GroupApply = (alg, inputs, at) => {
  const xs = present(inputs);
  const r = reduceMembers(alg, xs, String(at['reduce']));
  return split(r, normDim(attrNum(at, 'dim'), r.shape.length), xs.length);
};
const allToAllApply: GroupApply = (_alg, inputs, at) => {
  const xs = present(inputs);
  const rank = (xs[0] as Dense<unknown>).shape.length;
  const sd = normDim(attrNum(at, 'split_dim'), rank);
  const cd = normDim(attrNum(at, 'concat_dim'), rank);
  const chunks = xs.map((x) => split(x, sd, xs.length));
  // Member j receives chunk j of every member i, concatenated in member order.
  return xs.map((_, j) => cat(chunks.map((c) => c[j] as Dense<never>), cd));
};
const broadcastApply: GroupApply = (_alg, inputs, at, group) => {
  const i = group.indexOf(attrNum(at, 'src'));
  const x = inputs[i];
  if (x === undefined) throw new Error('broadcast source passes no input');
  return inputs.map(() => x);
};
const p2pApply: GroupApply = (_alg, inputs) => [undefined, inputs[0]];

/** A collective's value for a single member (group of one), as OpDef.apply. */
function soloApply(f: GroupApply) {
  return <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
    const out = f(alg, [arg(ins, 0)], at, Int32Array.of(typeof at['src'] === 'number' ? at['src'] : 0));
    return out.filter((x): x is Dense<S> => x !== undefined);
  };
}

const reduceAttr = { enum: ['sum', 'avg', 'max', 'min'] };

function collective(
  name: string,
  doc: string,
  attrSchema: object,
  outShape: (input: Shape, attrs: Attrs, g: number) => Shape,
  applyGroup: GroupApply,
  dims: (input: Shape, attrs: Attrs) => DimSig,
): OpDef {
  return {
    name,
    family: 'collectives',
    doc,
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema,
    // Per-member shape without the group; the loader calls collective.outShape with it.
    shape: ([a], at) => [outShape(a as Shape, at, 1)],
    apply: soloApply(applyGroup),
    // Collectives' adjoints are collectives (all_reduce(sum) <-> all_reduce(sum), all_gather <->
    // reduce_scatter, all_to_all with dims swapped, send <-> recv): plan generators mirror them.
    backward: NO_BACKWARD,
    collective: { pattern: 'symmetric', outShape, applyGroup },
    // Per member; the group size divides or multiplies the gathered / scattered / split dims,
    // which are therefore fixed.
    dims: ([a], at) => dims(a as Shape, at),
  };
}

function scaleDim(s: Shape, d: number, mul: number, div: number, what: string): Shape {
  const out = [...s];
  const v = (s[d] as number) * mul;
  if (v % div !== 0) throw new ShapeError(`${what}: dim ${d} of ${shapeStr(s)} is not divisible by the group size ${div}`);
  out[d] = v / div;
  return out;
}

const identityShape = (a: Shape): Shape => a;

export const ops: OpDef[] = withZeroTails([
  collective(
    'all_reduce',
    'dist.all_reduce(x, op) over the group: every member gets the reduction of all inputs',
    attrObject({ reduce: reduceAttr }, ['reduce']),
    identityShape,
    allReduceApply,
    (a) => sameShapeSig(a, 1, 1),
  ),
  collective(
    'all_gather',
    'dist.all_gather_into_tensor: members\' inputs concatenated along dim, in group order',
    attrObject({ dim: { type: 'integer' } }, ['dim']),
    (a, at, g) => scaleDim(a, normDim(attrNum(at, 'dim'), a.length), g, 1, 'all_gather'),
    allGatherApply,
    (a, at) => resizeOneDim(a, attrNum(at, 'dim')),
  ),
  collective(
    'reduce_scatter',
    'dist.reduce_scatter_tensor: the reduction of all inputs, split along dim; member i keeps chunk i',
    attrObject({ dim: { type: 'integer' }, reduce: reduceAttr }, ['dim', 'reduce']),
    (a, at, g) => scaleDim(a, normDim(attrNum(at, 'dim'), a.length), 1, g, 'reduce_scatter'),
    reduceScatterApply,
    (a, at) => resizeOneDim(a, attrNum(at, 'dim')),
  ),
  collective(
    'all_to_all',
    'dist.all_to_all_single: input split along split_dim, chunk j sent to member j, received chunks concatenated along concat_dim',
    attrObject({ split_dim: { type: 'integer' }, concat_dim: { type: 'integer' } }, ['split_dim', 'concat_dim']),
    (a, at, g) => {
      const sd = normDim(attrNum(at, 'split_dim'), a.length, 'split_dim');
      const cd = normDim(attrNum(at, 'concat_dim'), a.length, 'concat_dim');
      return scaleDim(scaleDim(a, sd, 1, g, 'all_to_all'), cd, g, 1, 'all_to_all');
    },
    allToAllApply,
    (a, at) => {
      const sd = normDim(attrNum(at, 'split_dim'), a.length, 'split_dim');
      const cd = normDim(attrNum(at, 'concat_dim'), a.length, 'concat_dim');
      const side = (name: string) => a.map((_, d) => (d === sd || d === cd ? fixedDim(`d${d}.${name}`) : batchDim(`d${d}`)));
      return { inputs: [side('in')], outputs: [side('out')] };
    },
  ),
  {
    name: 'broadcast',
    family: 'collectives',
    doc: 'dist.broadcast: the member with rank src sends its input to every member (src also gets a copy)',
    inputs: { min: 0, max: 1 },
    outputs: fixed(1),
    attrSchema: attrObject({ src: { type: 'integer', minimum: 0 } }, ['src']),
    shape: ([a]) => {
      if (a === undefined) throw new ShapeError('broadcast output shape comes from the source rank');
      return [a];
    },
    apply: soloApply(broadcastApply),
    backward: NO_BACKWARD,
    dims: ([a]) => {
      if (a === undefined) throw new ShapeError('broadcast output shape comes from the source rank');
      return sameShapeSig(a, 1, 1);
    },
    collective: { pattern: 'broadcast', outShape: identityShape, applyGroup: broadcastApply },
  },
  {
    name: 'send',
    family: 'collectives',
    doc: 'dist.send(x, dst=peer); matched in order with the peer\'s recv',
    inputs: fixed(1),
    outputs: fixed(0),
    attrSchema: attrObject({}),
    shape: () => [],
    apply: () => [],
    backward: NO_BACKWARD,
    dims: ([a]) => ({ inputs: [dimLabels(a as Shape, 'd', 'batch')], outputs: [] }),
    collective: { pattern: 'p2p', side: 'send', outShape: identityShape, applyGroup: p2pApply },
  },
  {
    name: 'recv',
    family: 'collectives',
    doc: 'dist.recv(y, src=peer); matched in order with the peer\'s send',
    inputs: fixed(0),
    outputs: fixed(1),
    attrSchema: attrObject({}),
    shape: () => {
      throw new ShapeError('recv output shape comes from the matching send');
    },
    apply: () => {
      throw new Error('recv has no value on its own: it is evaluated with its matching send');
    },
    backward: NO_BACKWARD,
    dims: () => {
      throw new ShapeError('recv output shape comes from the matching send');
    },
    collective: { pattern: 'p2p', side: 'recv', outShape: identityShape, applyGroup: p2pApply },
  },
  {
    name: 'send_recv',
    family: 'collectives',
    doc: 'multi-rank spelling of a send from src and the matching recv on dst',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({}),
    shape: ([a]) => [a as Shape],
    apply: <S>(_alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => [arg(ins, 0)],
    backward: NO_BACKWARD,
    dims: ([a]) => sameShapeSig(a as Shape, 1, 1),
    collective: { pattern: 'p2p', outShape: identityShape, applyGroup: p2pApply },
  },
],
// Zero extension (OpDef.zeroTails): every member carries the class; sums, max, min and moves of zeros are zero.
{ all_reduce: ZERO_ALWAYS, all_gather: ZERO_ALWAYS, reduce_scatter: ZERO_ALWAYS, all_to_all: ZERO_ALWAYS, broadcast: ZERO_ALWAYS, send: ZERO_ALWAYS, recv: ZERO_ALWAYS, send_recv: ZERO_ALWAYS });
