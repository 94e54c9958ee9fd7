import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { loadPlanText } from '../plans/loader.js';
import { verifyPlan, verifyPlanInPool } from '../stages/verify.js';
import { shutdownZ3 } from '../stages/z3.js';
import { EXAMPLES } from './helpers.js';

interface Entry {
  file: string;
  expect: 'verified' | 'not_equivalent';
}
const manifest = JSON.parse(readFileSync(`${EXAMPLES}manifest.json`, 'utf8')) as Entry[];

describe('--engine z3 agrees with the normal form on every example', function () {
  this.timeout(120_000);
  after(async () => shutdownZ3());
  for (const e of manifest) {
    it(e.file, async () => {
      const text = readFileSync(`${EXAMPLES}${e.file}`, 'utf8');
      const plan = loadPlanText(e.file, text);
      const z = await verifyPlanInPool(plan, text, { jobs: 0, deadlineMs: 30_000, engine: 'z3' });
      const n = verifyPlan(plan);
      assert.equal(z.engine, 'z3');
      assert.equal(z.verdict, e.expect, z.summary);
      assert.deepEqual(
        z.stages.map((s) => [s.logical, s.status, s.failingRanks]),
        n.stages.map((s) => [s.logical, s.status, s.failingRanks]),
      );
    });
  }
});
