/**
 * Issue 34: vLLM's Qwen2 decoder layer as Entangle publishes it (test/fixtures/qwen2-vllm: the
 * graphs torch.compile prints with vLLM's custom kernels, tensor parallel over 2 and 4 ranks,
 * 32,768 tokens) imports through the shipped `vllm` op map and is proved whole at tensor level:
 * vLLM's vocab mask forms (docs/engine.md, rule 10), the fused QKV and gate/up projections split
 * per rank's heads and put back together (rule 13, pieces of logical splits and concats), and
 * the causal mask repeated over fewer heads per rank (rule 13, regions of a repeated dim). Each
 * rule has a mutant refuted with a witness at test widths (the same graphs shrunk by
 * tools/corpus/shrink_qwen2.py) and never proved at the published widths; a correct twin stays
 * verified.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { type DirEdits, verifyImportDir as verifyDir } from './helpers.js';

const FIX = 'test/fixtures/qwen2-vllm';

const RANKS = /^rank\d+\.py$/;
const RANK0 = /^rank0\.py$/;

/** The integer literal of statement `name` (its last argument) replaced by f(value). */
const literal = (name: string, f: (k: number) => number) => (s: string): string =>
  s.replace(new RegExp(`(\\n +${name}: "[^"]*" = torch\\.ops\\.aten\\.[a-zA-Z_.]+\\([a-z_0-9]+, )(\\d+)\\)`), (_m, head: string, k: string) => `${head}${f(Number(k))})`);

const BUGS: [string, DirEdits][] = [
  // The row-parallel o_proj's partial sums never added up.
  ['the all-reduce after o_proj dropped on every rank', [[RANKS, (s) => s.replace(/(all_reduce_1: "[^"]*" = )torch\.ops\.vllm\.all_reduce\.default\(mm, 'tp:0'\)/, '$1torch.ops.aten.clone.default(mm)')]]],
  // Rows of ids outside the shard read row 0 and are summed in.
  ['the embedding output not zeroed outside the shard', [[RANKS, (s) => s.replace(/(masked_fill: "[^"]*" = )torch\.ops\.aten\.masked_fill\.Scalar\(embedding, unsqueeze, 0\)/, '$1torch.ops.aten.clone.default(embedding)')]]],
  // The shard's local ids off by one (its start taken as one less).
  ['the local ids offset by the wrong start on rank 0', [[RANK0, literal('mul', (k) => k + 1)]]],
  // The key/value heads given to the wrong pair of ranks (vLLM replicates kv head g on ranks 2g, 2g + 1).
  ['tp4: the key/value heads placed on the wrong ranks', [[/^relations\.json$/, (s) => s.replaceAll('(tp // 2)', '(tp % 2)')]]],
];

describe('vLLM Qwen2 graphs (Entangle examples/data/qwen2) at tensor level', function () {
  this.timeout(300_000);

  for (const t of [2, 4]) {
    it(`tp ${t} at the published widths (32,768 tokens, vocabulary 151,936, hidden 1536) is VERIFIED, its one stage at tensor level; and at test widths`, async () => {
      for (const dir of [`wide_tp${t}`, `tp${t}`]) {
        const v = await verifyDir(join(FIX, dir));
        assert.equal(v.code, 0, `${dir}: ${JSON.stringify(v.stages)}`);
        assert.deepEqual(v.stages.map((s) => `${s.logical} ${s.status} ${s.decidedBy ?? ''}`), ['hidden proved tensor']);
      }
    });
  }

  it('a correct twin: the added-vocabulary offset (never used: that range is empty) changed on every rank: VERIFIED', async () => {
    const v = await verifyDir(join(FIX, 'tp4'), [[RANKS, literal('mul_1', (k) => k + 5)]]);
    assert.equal(v.code, 0, JSON.stringify(v.stages));
  });

  for (const [what, edits] of BUGS) {
    it(`${what}: NOT EQUIVALENT with a witness at test widths, never proved at the published widths`, async () => {
      const tp = what.startsWith('tp4') ? 4 : 2;
      const small = await verifyDir(join(FIX, `tp${tp}`), edits);
      assert.equal(small.code, 1, JSON.stringify(small.stages));
      assert.ok(small.stages.some((s) => s.status === 'not_equivalent'), JSON.stringify(small.stages));
      const wide = await verifyDir(join(FIX, `wide_tp${tp}`), edits);
      assert.notEqual(wide.code, 0, JSON.stringify(wide.stages));
      assert.notEqual(wide.stages.find((s) => s.logical === 'hidden')?.status ?? 'missing', 'proved', JSON.stringify(wide.stages));
    });
  }
});
