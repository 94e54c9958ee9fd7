import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { loadPlan, loadPlanObject } from '../lineage/load.js';
import { numericCheck, differs } from '../stages/witness/numeric.js';
import { EXAMPLES } from './helpers.js';

interface Entry {
  file: string;
  expect: 'verified' | 'not_equivalent';
  firstFailing?: { logicalTensor: string; ranks: number[] };
}
const manifest = JSON.parse(readFileSync(`${EXAMPLES}manifest.json`, 'utf8')) as Entry[];

describe('numeric evaluation of whole plans (witnesses, never proofs)', () => {
  for (const e of manifest) {
    if (e.expect === 'verified') {
      it(`${e.file}: every claim on every rank matches the logical values (3 seeds)`, () => {
        const p = loadPlan(`${EXAMPLES}${e.file}`);
        for (const seed of [1, 2, 3]) {
          const r = numericCheck(p, seed);
          assert.ok(r.evaluated);
          assert.ok(r.claimsChecked > 10);
          assert.deepEqual(r.mismatches, [], `seed ${seed}`);
        }
      });
    } else {
      it(`${e.file}: the bug is real, and the first wrong tensor is ${e.firstFailing?.logicalTensor}`, () => {
        const r = numericCheck(loadPlan(`${EXAMPLES}${e.file}`), 5);
        const first = r.mismatches[0];
        assert.ok(first !== undefined, 'no mismatch: the injected bug is not visible numerically');
        assert.equal(first.logical, e.firstFailing?.logicalTensor);
        assert.ok(e.firstFailing?.ranks.includes(first.rank), `first mismatch on rank ${first.rank}, expected one of ${JSON.stringify(e.firstFailing?.ranks)}`);
        assert.ok(differs(first.parallel, first.expected));
      });
    }
  }

  it('partial inputs are split into random addends that replicas share, and max partials reduce by max', () => {
    const plan = (reduce: string, combine: string): unknown => ({
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'dp', size: 2 }, { name: 'tp', size: 2 }] },
      logical: { tensors: [{ id: 'g', shape: [3], role: 'input' }, { id: 'o', shape: [3], role: 'output' }], ops: [{ id: 'n', op: 'neg', inputs: ['g'], outputs: ['o'] }] },
      parallel: {
        programs: [
          {
            ranks: 'all',
            tensors: [
              { id: 'g', shape: [3], lineage: { logical: 'g', placements: ['R', `P(${reduce})`] } },
              { id: 'gr', shape: [3] },
              { id: 'o', shape: [3], lineage: { logical: 'o', placements: ['R', 'R'] } },
            ],
            ops: [
              { id: 'ar', op: 'all_reduce', inputs: ['g'], outputs: ['gr'], attrs: { reduce: combine }, group: { axes: ['tp'] } },
              { id: 'n', op: 'neg', inputs: ['gr'], outputs: ['o'] },
            ],
          },
        ],
      },
      contract: { inputs: ['g'], outputs: ['o'] },
    });
    assert.deepEqual(numericCheck(loadPlanObject('s', plan('sum', 'sum'))).mismatches, []);
    assert.deepEqual(numericCheck(loadPlanObject('a', plan('avg', 'avg'))).mismatches, []);
    assert.deepEqual(numericCheck(loadPlanObject('m', plan('max', 'max'))).mismatches, []);
    assert.notDeepEqual(numericCheck(loadPlanObject('x', plan('sum', 'avg'))).mismatches, []);
    assert.notDeepEqual(numericCheck(loadPlanObject('y', plan('max', 'sum'))).mismatches, []);
  });
});
