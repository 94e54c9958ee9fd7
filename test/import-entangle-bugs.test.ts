/**
 * Issue 34: Entangle's reproduced bugs as published (test/fixtures/entangle-bugs). Bug 6, a loss
 * accumulated over two micro-batches without dividing by their number, is NOT EQUIVALENT with a
 * witness at the accumulated loss; the same graphs with each micro-batch's loss divided by 2 (the
 * fix) are VERIFIED.
 */
import { strict as assert } from 'node:assert';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';

const GA = 'test/fixtures/entangle-bugs/grad_accumulation';

async function verifyDir(src: string, edit?: (rank0: string) => string): Promise<{ code: number; stages: { logical: string; status: string }[] }> {
  const d = mkdtempSync(join(tmpdir(), 'pp-entangle-bug-'));
  cpSync(src, d, { recursive: true });
  if (edit !== undefined) {
    const before = readFileSync(join(d, 'rank0.py'), 'utf8');
    const after = edit(before);
    assert.notEqual(after, before, 'the edit changed nothing');
    writeFileSync(join(d, 'rank0.py'), after);
  }
  const out = join(d, 'plan.json');
  const imp = await runCli(['import-graphs', '--dir', d, '-o', out]);
  assert.equal(imp.code, 0, imp.stderr);
  const v = await runCli(['verify', '--infer', '--jobs', '0', '--no-cache', '--no-answer-cache', '--json', out]);
  return { code: v.code, stages: (JSON.parse(v.stdout) as { stages: { logical: string; status: string }[] }).stages };
}

/** Each micro-batch's loss divided by the number of micro-batches (2) before it is accumulated. */
const halved = (s: string): string =>
  s
    .replace(/(\n +)(add_1: "f32\[\]" = torch\.ops\.aten\.add\.Tensor\(arg4_1, )detach_2\)/, '$1half: "f32[]" = torch.ops.aten.div.Tensor(detach_2, 2)$1$2half)')
    .replace(/(\n +)(add_3: "f32\[\]" = torch\.ops\.aten\.add\.Tensor\(add_1, )detach_5\)/, '$1half_1: "f32[]" = torch.ops.aten.div.Tensor(detach_5, 2)$1$2half_1)');

describe("Entangle's reproduced bugs (examples/data of github.com/nyu-systems/Entangle)", function () {
  this.timeout(120_000);

  it('bug 6, gradient accumulation: the loss not divided by the number of micro-batches is NOT EQUIVALENT at the accumulated loss', async () => {
    const v = await verifyDir(GA);
    assert.equal(v.code, 1, JSON.stringify(v.stages));
    assert.equal(v.stages.find((s) => s.logical === 'loss_sum')?.status, 'not_equivalent', JSON.stringify(v.stages));
  });

  it('bug 6 fixed (each micro-batch loss divided by 2): VERIFIED', async () => {
    const v = await verifyDir(GA, halved);
    assert.equal(v.code, 0, JSON.stringify(v.stages));
  });
});
