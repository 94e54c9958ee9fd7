/**
 * Object collectives and ReduceLROnPlateau under live capture (tools/capture/capture_objects.py,
 * capture_sched.py; docs/capture.md). A traced float read sent in an object by
 * `dist.all_gather_object` leaves the process, so its read is marked by value (the verdict
 * names it as specialized); the same step sending a plain number leaves no mark. And
 * `ReduceLROnPlateau.step(val_loss)` on a traced read writes comparison guards, not the value.
 * (The numbers are not literal-looking: a read of 4.25 is marked at once, docs/capture.md.)
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { needs, TOOLS } from './optional.js';

const SCRIPT = [
  'import sys',
  'import torch, torch.distributed as dist',
  'SEND = "--send-loss" in sys.argv',
  'PLATEAU = "--plateau" in sys.argv',
  'def step(cap):',
  '    ws, rank = dist.get_world_size(), dist.get_rank()',
  '    w = cap.replicate(torch.tensor([0.37, -1.13]).requires_grad_(), name="w", role="param")',
  '    x = cap.replicate(torch.tensor([[1.3, 2.7], [3.1, -1.9], [0.55, 0.45], [2.2, 1.7]]), name="x")',
  '    opt = torch.optim.SGD([w], lr=0.1)',
  '    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)',
  '    with cap.trace():',
  '        loss = (x.chunk(ws)[rank] * w).sum(-1).pow(2).mean()',
  '        loss.backward()',
  '        dist.all_reduce(w.grad)',
  '        w.grad.div_(ws)',
  '        opt.step()',
  '        logged = loss.item()',
  '        got = [None] * ws',
  '        dist.all_gather_object(got, {"rank": rank, "loss": logged if SEND else 0})',
  '        if PLATEAU:',
  '            sched.step(logged)',
  '    cap.output("w_new", w, "R")',
  '',
].join('\n');

describe('object collectives and ReduceLROnPlateau under capture (live, Debian python3-torch)', function () {
  this.timeout(600_000);
  before(function () {
    needs(this, TOOLS.torch);
  });
  const dir = mkdtempSync(join(tmpdir(), 'pp-obj-'));
  const script = join(dir, 'objects.py');
  writeFileSync(script, SCRIPT);
  /** Captures with the flags (keeping the graphs), verifies; the verdict and the logical graph. */
  const capture = async (flags: string[]): Promise<{ verdict: string; logical: string }> => {
    const name = flags.join('') || 'plain';
    const plan = join(dir, `${name}.json`);
    const keep = join(dir, `${name}-graphs`);
    const cap = await runCli(['capture', '--nproc', '2', '--axis', 'dp', '--keep', keep, '--out', plan, '--', script, ...flags]);
    assert.equal(cap.code, 0, cap.stderr);
    const v = await runCli(['verify', '--infer', '--jobs', '0', plan]);
    assert.equal(v.code, 0, v.stdout);
    return { verdict: v.stdout, logical: readFileSync(join(keep, 'logical.py'), 'utf8') };
  };
  it('a loss read sent by all_gather_object is guarded by its value; a plain number sent leaves no guard', async () => {
    const sent = await capture(['--send-loss']);
    assert.match(sent.verdict, /VERIFIED \(for the values the program read into Python\)[\s\S]*specialized: logical run: \S*objects\.py:17: the value of '[^']+' read into Python/);
    assert.match(sent.logical, /planproof\.guard\.default\(mean, 'eq', \[/);
    const plain = await capture([]);
    assert.match(plain.verdict, /VERIFIED/);
    assert.doesNotMatch(plain.verdict, /specialized/);
    assert.doesNotMatch(plain.logical, /planproof\.guard/);
  });
  it('ReduceLROnPlateau.step(loss.item()) compares the read: a comparison guard, not its value', async () => {
    const { verdict, logical } = await capture(['--plateau']);
    assert.match(verdict, /VERIFIED/);
    // mode='min', threshold_mode='rel': is_better(a, best) is a < inf * (1 - 1e-4) on the first step
    assert.match(logical, /planproof\.guard\.default\(mean, 'lt', inf, True\)/);
    assert.doesNotMatch(logical, /'eq', \[/);
  });
});
