/**
 * Losses and norms of training loops (plans/import/aten-loops.ts): xlogy is read only where its
 * y is a softmax output (a probability input may be 0, where x·log y is not the kernel's 0), and
 * smooth_l1 with beta = 0 (an L1 loss) is refused. Their values are checked against PyTorch's in
 * test/capture.test.ts (the ddp_losses fixtures).
 */
import { strict as assert } from 'node:assert';
import { parseFxGraph } from '../plans/import/fxtext.js';
import { lowerGraph } from '../plans/import/aten.js';

function graph(sig: string, body: readonly string[]): string {
  return ['class G(torch.nn.Module):', `    def forward(self, ${sig}):`, ...body.map((b) => `        ${b}`)].join('\n') + '\n';
}

describe('aten-loops: xlogy and the refused cases', () => {
  it('xlogy of a softmax output lowers (KL distillation); of a plain input it is refused', () => {
    const ok = graph('x: "f32[2, 3]"', [
      's: "f32[2, 3]" = torch.ops.aten._softmax.default(x, -1, False)',
      'k: "f32[2, 3]" = torch.ops.aten.xlogy.Tensor(s, s)',
      'return (k,)',
    ]);
    assert.doesNotThrow(() => lowerGraph(parseFxGraph('g.py', ok)));
    const bad = graph('p: "f32[2, 3]"', ['k: "f32[2, 3]" = torch.ops.aten.xlogy.Tensor(p, p)', 'return (k,)']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', bad)), /xlogy\(x, y\) is read only where y is a softmax output/);
  });
  it('smooth_l1_loss with beta 0 (an L1 loss) is refused', () => {
    const text = graph('a: "f32[4]", b: "f32[4]"', ['l: "f32[]" = torch.ops.aten.smooth_l1_loss.default(a, b, 1, 0.0)', 'return (l,)']);
    assert.throws(() => lowerGraph(parseFxGraph('g.py', text)), /beta = 0: only a positive finite beta is supported/);
  });
});
