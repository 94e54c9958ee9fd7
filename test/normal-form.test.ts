import { strict as assert } from 'node:assert';
import { loadPlan, loadPlanObject } from '../lineage/load.js';
import { normalForm } from '../lineage/normal.js';
import { EXAMPLES, FIXTURES } from './helpers.js';

describe('normal form: different spellings of one plan load identically', () => {
  for (const name of ['mlp-dp2', 'mlp-tp2']) {
    it(`${name}: DTensor placements == index/value maps (same template)`, () => {
      const a = normalForm(loadPlan(`${EXAMPLES}${name}.json`));
      const b = normalForm(loadPlan(`${FIXTURES}equiv/${name}.index.json`));
      assert.deepEqual(b, a);
    });
    it(`${name}: SPMD template with per-rank collective calls == explicit per-rank programs with multi-rank collectives`, () => {
      const a = normalForm(loadPlan(`${EXAMPLES}${name}.json`));
      const b = normalForm(loadPlan(`${FIXTURES}equiv/${name}.explicit.json`));
      assert.deepEqual(b, a);
    });
  }

  it('the normal form is not trivially equal: a changed lineage shows up', () => {
    const a = normalForm(loadPlan(`${EXAMPLES}mlp-dp2.json`));
    const b = normalForm(loadPlan(`${EXAMPLES}mlp-tp2.json`));
    assert.notDeepEqual(a.ranks, b.ranks);
    assert.match(a.ranks[1]?.find((l) => l.startsWith('tensor x ')) ?? '', /<- x\[2:4, 0:3\] complete/);
    assert.match(a.ranks[0]?.find((l) => l.startsWith('tensor g_w1_part ')) ?? '', /addend 0 of 2, divided by 2/);
  });

  it('2-D mesh: [S(0), S(1)] placements == expressions over mesh coordinates == explicit literals', () => {
    const base = (programs: unknown[]): unknown => ({
      format: 'planproof/v1',
      mesh: { axes: [{ name: 'dp', size: 2 }, { name: 'tp', size: 2 }] },
      logical: {
        tensors: [
          { id: 'x', shape: [4, 6], role: 'input' },
          { id: 'w', shape: [6, 4], role: 'param' },
          { id: 'y', shape: [4, 4], role: 'output' },
        ],
        ops: [{ id: 'mm', op: 'matmul', inputs: ['x', 'w'], outputs: ['y'] }],
      },
      parallel: { programs },
      contract: { inputs: ['x', 'w'], outputs: ['y'] },
    });
    const ops = [{ id: 'mm', op: 'matmul', inputs: ['x', 'w'], outputs: ['y'] }];
    const dt = base([
      {
        ranks: 'all',
        tensors: [
          { id: 'x', shape: [2, 6], lineage: { logical: 'x', placements: ['S(0)', 'R'] } },
          { id: 'w', shape: [6, 2], lineage: { logical: 'w', placements: ['R', 'S(1)'] } },
          { id: 'y', shape: [2, 2], lineage: { logical: 'y', placements: ['S(0)', 'S(1)'] } },
        ],
        ops,
      },
    ]);
    const ex = base([
      {
        ranks: 'all',
        tensors: [
          { id: 'x', shape: [2, 6], lineage: { logical: 'x', index: [[{ expr: 'dp*2' }, { expr: 'dp*2+2' }], '*'] } },
          { id: 'w', shape: [6, 2], lineage: { logical: 'w', index: ['*', [{ expr: '2*tp' }, { expr: '2*(tp+1)' }]] } },
          { id: 'y', shape: [2, 2], lineage: { logical: 'y', index: [[{ expr: 'dp*2' }, { expr: 'dp*2+2' }], [{ expr: 'tp*2' }, { expr: 'tp*2+2' }]], value: [0, 1] } },
        ],
        ops,
      },
    ]);
    const lit = base(
      [0, 1, 2, 3].map((r) => {
        const dp = r >> 1;
        const tp = r & 1;
        return {
          ranks: [r],
          tensors: [
            { id: 'x', shape: [2, 6], lineage: { logical: 'x', index: [[dp * 2, dp * 2 + 2], '*'] } },
            { id: 'w', shape: [6, 2], lineage: { logical: 'w', index: ['*', [tp * 2, tp * 2 + 2]] } },
            { id: 'y', shape: [2, 2], lineage: { logical: 'y', index: [[dp * 2, dp * 2 + 2], [tp * 2, tp * 2 + 2]] } },
          ],
          ops,
        };
      }),
    );
    const a = normalForm(loadPlanObject('dt', dt));
    assert.deepEqual(normalForm(loadPlanObject('ex', ex)), a);
    assert.deepEqual(normalForm(loadPlanObject('lit', lit)), a);
    assert.deepEqual(a.ranks[3]?.[2], 'tensor y [2,2] <- y[2:4, 2:4] complete');
  });
});
