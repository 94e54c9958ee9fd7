/**
 * Constant folding in `planproof capture` (tools/capture/capture_fold.py, docs/capture.md
 * "Constant folding"): a truncation of a tensor computed from trace constants only (T5's
 * relative position buckets) is written as the run's constant; the same truncation once an
 * input, a parameter, a collective or a sampled value reaches it stays refused (exit 2).
 * Live captures with Debian's python3-torch (skipped with a reason without it).
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { needs, TOOLS } from './optional.js';

/** A DDP-free 2-rank step whose bucket formula reads `src` (a Python expression of the step). */
function script(src: string): string {
  return [
    'import math, torch, torch.distributed as dist, torch.nn as nn',
    'def step(cap):',
    '    ws, rank = dist.get_world_size(), dist.get_rank()',
    '    torch.manual_seed(0)',
    '    emb = nn.Embedding(8, 2)',
    '    cap.replicate(emb.weight, name="emb", role="param")',
    '    x = cap.replicate(torch.arange(4.0) + 1, name="x")',
    '    noise = torch.zeros(4)',
    '    with cap.trace():',
    `        pos = ${src}`,
    '        b = (torch.log(pos / 2) / math.log(4) * 3).to(torch.long).clamp(0, 7)',
    '        out = emb(b).sum()',
    '        dist.all_reduce(out)',
    '        out = out / ws',
    '        out.backward()',
    '    cap.output("out", out, "R")',
    '    cap.output("emb_grad", emb.weight.grad, "R")',
    '',
  ].join('\n');
}

async function capture(src: string): Promise<{ code: number; stderr: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'pp-fold-'));
  writeFileSync(join(dir, 'step.py'), script(src));
  return runCli(['capture', '--nproc', '2', '--axis', 'dp', '--out', join(dir, 'plan.json'), '--', join(dir, 'step.py')]);
}

describe('capture: truncations of constants are folded, of anything else refused', function () {
  this.timeout(300_000);
  before(function () {
    needs(this, TOOLS.torch);
  });
  it('a truncation of arange positions is written as the run\'s constant (imports)', async () => {
    const r = await capture('torch.arange(4).float() + 1');
    assert.equal(r.code, 0, r.stderr);
  });
  it('the same formula of an input is refused as a truncation (exit 2)', async () => {
    const r = await capture('x');
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /truncates/);
  });
  it('a constant written in place by a collective is no constant any more (exit 2)', async () => {
    const r = await capture('noise.add_(1.0) if dist.all_reduce(noise) is None else noise');
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /truncates/);
  });
  it('a sampled tensor is no constant (exit 2)', async () => {
    const r = await capture('torch.nn.functional.dropout(torch.ones(4) * 2, 0.5, True) + 1');
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /truncates/);
  });
});
