/**
 * Certified witnesses for differences under the numeric tolerance: an optimizer eps of 1.1e-8
 * on the ranks against 1e-8 in the logical step changes the update by about 1e-13, which no
 * draw shows above the tolerance; the exact engine finds the difference and interval arithmetic
 * (stages/engines/interval.ts) separates the two sides, so the plan is NOT EQUIVALENT with a witness,
 * on the whole-plan path and per stage. Its twins: the same change on both sides verifies, and
 * a change too small for the intervals to separate stays "unknown", never a refutation.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers.js';
import { FULL } from './optional.js';

interface RawOp {
  id: string;
  attrs?: Record<string, unknown>;
}
interface Raw {
  logical: { ops: RawOp[] };
  parallel: { programs: { ops: RawOp[] }[] };
}
interface Witness {
  parallel: number;
  expected: number;
  certified?: { parallel: [number, number]; logical: [number, number] };
}
interface Report {
  verdict: string;
  stages: { logical: string; status: string; witness?: Witness[] }[];
}

describe('certified witnesses under the numeric tolerance', function () {
  this.timeout(300_000);
  let dir: string;
  let base: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-certified-'));
    const f = join(dir, 'base.json');
    const g = await runCli(['gen', '--preset', 'llama-tiny', '--out', f]);
    assert.equal(g.code, 0, g.stderr);
    base = readFileSync(f, 'utf8');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** The plan with adam eps of `l0.attn.k` set to `v` on the ranks (and in the logical step when `both`). */
  function plan(v: string, both = false): string {
    const raw = JSON.parse(base) as Raw;
    const lists = [...(both ? [raw.logical.ops] : []), ...raw.parallel.programs.map((p) => p.ops)];
    let n = 0;
    for (const ops of lists)
      for (const o of ops)
        if (o.id === 'l0.attn.k.new' && o.attrs !== undefined) {
          o.attrs['eps'] = v;
          n++;
        }
    assert.ok(n > 0);
    const f = join(dir, `p-${v.replace('/', '_')}-${both}.json`);
    writeFileSync(f, JSON.stringify(raw));
    return f;
  }

  for (const mode of [[], ['--per-stage']]) {
    it(`refutes eps 1.1e-8 against 1e-8 with a certified witness${mode.length > 0 ? ` per stage${FULL}` : ''}`, async () => {
      const r = await runCli(['verify', plan('11/1000000000'), '--no-cache', '--json', ...mode]);
      assert.equal(r.code, 1, r.stdout.slice(-2000));
      const rep = JSON.parse(r.stdout) as Report;
      const s = rep.stages.find((x) => x.status === 'not_equivalent');
      assert.equal(s?.logical, 'l0.attn.k.new');
      const w = s?.witness?.[0];
      assert.ok(w?.certified !== undefined, 'the witness is certified');
      const [pl, ph] = w.certified.parallel;
      const [ll, lh] = w.certified.logical;
      assert.ok(ph < ll || lh < pl, 'the two enclosures are disjoint');
      // Under the tolerance: the midpoints agree to about 1e-12.
      assert.ok(Math.abs(w.parallel - w.expected) < 1e-9);
    });
  }

  it('verifies the same change made on both sides', async () => {
    const r = await runCli(['verify', plan('11/1000000000', true), '--no-cache']);
    assert.equal(r.code, 0, r.stdout.slice(-2000));
  });

  it('leaves a change too small to separate unknown, never refuted without a witness @full', async () => {
    const r = await runCli(['verify', plan('100000001/10000000000000000'), '--no-cache', '--json']);
    assert.equal(r.code, 3, r.stdout.slice(-2000));
    const rep = JSON.parse(r.stdout) as Report;
    assert.equal(rep.verdict, 'unknown');
    assert.ok(rep.stages.every((x) => x.status !== 'not_equivalent'));
  });
});
