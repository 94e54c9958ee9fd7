import { strict as assert } from 'node:assert';
import { registry } from '../ops/registry.js';
import { ShapeError, type Attrs, type Shape } from '../ops/types.js';

/** Output shapes of op `name`, or the ShapeError message. Attributes are schema-checked first. */
function shape(name: string, inputs: Shape[], attrs: Attrs = {}): Shape[] | string {
  const id = registry.id(name);
  assert.ok(id >= 0, `unknown op ${name}`);
  const bad = registry.checkAttrs(id, attrs);
  if (bad !== undefined) return `attrs: ${bad}`;
  try {
    return registry.get(id).shape(inputs, attrs);
  } catch (e) {
    if (e instanceof ShapeError) return e.message;
    throw e;
  }
}

describe('op shape rules follow PyTorch', () => {
  it('element-wise ops broadcast', () => {
    assert.deepEqual(shape('add', [[4, 1, 3], [2, 1]]), [[4, 2, 3]]);
    assert.deepEqual(shape('mul', [[], [2, 3]]), [[2, 3]]);
    assert.match(String(shape('sub', [[4, 3], [2, 3]])), /do not broadcast \(dim 0: 4 vs 2\)/);
    assert.deepEqual(shape('scale', [[2]], { factor: '1/3' }), [[2]]);
    assert.match(String(shape('scale', [[2]], { factor: 'one third' })), /attrs/);
  });
  it('matmul: 1-D, 2-D and batched operands as torch.matmul', () => {
    assert.deepEqual(shape('matmul', [[3], [3]]), [[]]);
    assert.deepEqual(shape('matmul', [[2, 3], [3]]), [[2]]);
    assert.deepEqual(shape('matmul', [[3], [3, 5]]), [[5]]);
    assert.deepEqual(shape('matmul', [[7, 1, 2, 3], [4, 3, 5]]), [[7, 4, 2, 5]]);
    assert.match(String(shape('matmul', [[2, 3], [4, 5]])), /contracted dims differ/);
    assert.match(String(shape('matmul', [[], [3]])), /at least one dim/);
  });
  it('linear: x @ w.T + b', () => {
    assert.deepEqual(shape('linear', [[8, 2, 3], [5, 3], [5]]), [[8, 2, 5]]);
    assert.match(String(shape('linear', [[8, 3], [5, 4]])), /does not match weight/);
    assert.match(String(shape('linear', [[8, 3], [5, 3], [4]])), /bias \[4\]/);
    assert.match(String(shape('linear', [[8, 3], [5, 3, 1]])), /must be 2-D/);
  });
  it('sum/mean over dims with keepdim, negative dims, all dims by default', () => {
    assert.deepEqual(shape('sum', [[2, 3, 4]], { dims: [-1] }), [[2, 3]]);
    assert.deepEqual(shape('mean', [[2, 3, 4]], { dims: [0, 2], keepdim: true }), [[1, 3, 1]]);
    assert.deepEqual(shape('sum', [[2, 3]]), [[]]);
    assert.match(String(shape('sum', [[2, 3]], { dims: [1, -1] })), /listed twice/);
    assert.match(String(shape('mean', [[2, 3]], { dims: [2] })), /out of range/);
  });
  it('softmax family keeps the shape; the dim must exist', () => {
    assert.deepEqual(shape('softmax', [[2, 5]], { dim: -1 }), [[2, 5]]);
    assert.deepEqual(shape('softmax_backward', [[2, 5], [2, 5]], { dim: 1 }), [[2, 5]]);
    assert.match(String(shape('softmax_backward', [[2, 5], [2, 4]], { dim: 1 })), /differ/);
    assert.match(String(shape('log_softmax', [[2, 5]], { dim: 2 })), /out of range/);
  });
  it('expand follows Tensor.expand', () => {
    assert.deepEqual(shape('expand', [[3, 1]], { shape: [2, 3, 4] }), [[2, 3, 4]]);
    assert.deepEqual(shape('expand', [[3, 1]], { shape: [-1, 5] }), [[3, 5]]);
    assert.match(String(shape('expand', [[3, 2]], { shape: [3, 4] })), /cannot expand dim 1 of size 2 to 4/);
    assert.match(String(shape('expand', [[3]], { shape: [-1, 3] })), /new leading dim/);
    assert.match(String(shape('expand', [[3, 1]], { shape: [3] })), /fewer dims/);
  });
  it('layout ops: transpose, permute, reshape, slice, concat, split', () => {
    assert.deepEqual(shape('transpose', [[2, 3, 4]], { dim0: 0, dim1: -1 }), [[4, 3, 2]]);
    assert.deepEqual(shape('permute', [[2, 3, 4]], { dims: [2, 0, 1] }), [[4, 2, 3]]);
    assert.match(String(shape('permute', [[2, 3, 4]], { dims: [0, 0, 1] })), /not a permutation/);
    assert.deepEqual(shape('reshape', [[2, 3, 4]], { shape: [6, -1] }), [[6, 4]]);
    assert.match(String(shape('reshape', [[2, 3, 4]], { shape: [5, -1] })), /cannot reshape/);
    assert.match(String(shape('reshape', [[2, 3]], { shape: [-1, -1] })), /at most one -1/);
    assert.deepEqual(shape('slice', [[8, 3]], { dim: 0, start: 2, end: 6 }), [[4, 3]]);
    assert.match(String(shape('slice', [[8, 3]], { dim: 0, start: 6, end: 9 })), /not inside dim 0 of size 8/);
    assert.deepEqual(shape('concat', [[2, 3], [4, 3]], { dim: 0 }), [[6, 3]]);
    assert.match(String(shape('concat', [[2, 3], [4, 2]], { dim: 0 })), /input 1 \[4, 2\] does not match/);
    assert.deepEqual(shape('split', [[5, 3]], { dim: 0, sizes: [2, 3] }), [[2, 3], [3, 3]]);
    assert.match(String(shape('split', [[5, 3]], { dim: 0, sizes: [2, 2] })), /sum to 4/);
  });
  it('losses and optimizer steps', () => {
    assert.deepEqual(shape('mse_loss', [[4, 2], [4, 2]], { reduction: 'mean' }), [[]]);
    assert.deepEqual(shape('mse_loss_backward', [[4, 2], [4, 2], []]), [[4, 2]]);
    assert.match(String(shape('mse_loss_backward', [[4, 2], [4, 2], [1]])), /must be a scalar/);
    assert.match(String(shape('mse_loss', [[4, 2], [4, 3]])), /differ/);
    assert.deepEqual(shape('sgd_update', [[3, 4], [3, 4]], { lr: 0.1, weight_decay: '1/100' }), [[3, 4]]);
    assert.match(String(shape('sgd_update', [[3, 4], [3, 4]])), /missing attribute 'lr'/);
  });
  it('collectives: member output shapes for a group of g', () => {
    const out = (name: string, s: Shape, attrs: Attrs, g: number): Shape | string => {
      try {
        return registry.get(registry.id(name)).collective?.outShape(s, attrs, g) ?? 'none';
      } catch (e) {
        return (e as Error).message;
      }
    };
    assert.deepEqual(out('all_gather', [2, 3], { dim: 0 }, 4), [8, 3]);
    assert.deepEqual(out('reduce_scatter', [8, 3], { dim: 0, reduce: 'sum' }, 4), [2, 3]);
    assert.match(String(out('reduce_scatter', [6, 3], { dim: 0, reduce: 'sum' }, 4)), /not divisible by the group size 4/);
    assert.deepEqual(out('all_to_all', [8, 3], { split_dim: 0, concat_dim: 1 }, 2), [4, 6]);
    assert.deepEqual(out('all_reduce', [8, 3], { reduce: 'avg' }, 2), [8, 3]);
    assert.equal(registry.get(registry.id('broadcast')).collective?.pattern, 'broadcast');
    assert.equal(registry.get(registry.id('recv')).collective?.side, 'recv');
  });
  it('op families are the ones ops/registry.ts lists (one file per family)', () => {
    assert.deepEqual([...new Set(registry.defs.map((d) => d.family))].sort(), ['activation', 'attention', 'collectives', 'compare', 'dropout', 'elementwise', 'indexing', 'layout', 'loss', 'matmul', 'moe', 'norm', 'optim', 'position', 'reduce']);
  });
  it('every registered op documents itself and has a usable attribute schema', () => {
    for (const name of registry.names()) {
      const d = registry.get(registry.id(name));
      assert.ok(d.doc.length > 5, `${name}: no doc`);
      assert.ok(d.family.length > 0, `${name}: no family`);
      assert.equal(typeof registry.checkAttrs(registry.id(name), { definitely_not_an_attribute: 1 }), 'string', `${name} accepts unknown attributes`);
    }
  });
});
