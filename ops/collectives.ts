/**
 * Communication ops. In a plan they appear either once per rank (matched across the group by
 * call order, as NCCL matches them) or once for the whole group; the loader normalizes both
 * into collective instances. Group order is ascending rank for rank lists (as
 * torch.distributed.new_group sorts them) and mesh-coordinate order for axis groups.
 */
import { type Attrs, type OpDef, attrNum, attrObject, fixed, normDim, ShapeError, type Shape, shapeStr } from './types.js';

const reduceAttr = { enum: ['sum', 'avg', 'max', 'min'] };

function collective(
  name: string,
  doc: string,
  attrSchema: object,
  outShape: (input: Shape, attrs: Attrs, g: number) => Shape,
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
    collective: { pattern: 'symmetric', outShape },
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

export const ops: OpDef[] = [
  collective('all_reduce', 'dist.all_reduce(x, op) over the group: every member gets the reduction of all inputs', attrObject({ reduce: reduceAttr }, ['reduce']), identityShape),
  collective(
    'all_gather',
    'dist.all_gather_into_tensor: members\' inputs concatenated along dim, in group order',
    attrObject({ dim: { type: 'integer' } }, ['dim']),
    (a, at, g) => scaleDim(a, normDim(attrNum(at, 'dim'), a.length), g, 1, 'all_gather'),
  ),
  collective(
    'reduce_scatter',
    'dist.reduce_scatter_tensor: the reduction of all inputs, split along dim; member i keeps chunk i',
    attrObject({ dim: { type: 'integer' }, reduce: reduceAttr }, ['dim', 'reduce']),
    (a, at, g) => scaleDim(a, normDim(attrNum(at, 'dim'), a.length), 1, g, 'reduce_scatter'),
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
    collective: { pattern: 'broadcast', outShape: identityShape },
  },
  {
    name: 'send',
    family: 'collectives',
    doc: 'dist.send(x, dst=peer); matched in order with the peer\'s recv',
    inputs: fixed(1),
    outputs: fixed(0),
    attrSchema: attrObject({}),
    shape: () => [],
    collective: { pattern: 'p2p', side: 'send', outShape: identityShape },
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
    collective: { pattern: 'p2p', side: 'recv', outShape: identityShape },
  },
  {
    name: 'send_recv',
    family: 'collectives',
    doc: 'multi-rank spelling of a send from src and the matching recv on dst',
    inputs: fixed(1),
    outputs: fixed(1),
    attrSchema: attrObject({}),
    shape: ([a]) => [a as Shape],
    collective: { pattern: 'p2p', outShape: identityShape },
  },
];
