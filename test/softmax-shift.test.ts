import { strict as assert } from 'node:assert';
import { loadPlanObject } from '../lineage/load.js';
import { verifyPlan } from '../stages/verify.js';
import { type VerifyReport } from '../stages/report.js';

/**
 * Shift invariance of softmax and log-sum-exp (issue 37, docs/engine.md "Shift invariance"),
 * on one rank: softmax, log_softmax and log-sum-exp written out by hand, with the logits
 * shifted by a per-row value c before exp. Any c that is one value on every element of the row
 * is correct (exp(x_i − c) / Σ_j exp(x_j − c) = softmax(x)_i, log Σ_j exp(x_j − c) + c =
 * logsumexp(x)); a c that differs along the row is not, and must be refuted with a witness.
 */
const N = 2;
const C = 4;

/** Shifts constant along the row (correct) and varying along it (wrong twins). */
const GOOD = ['max', 'sum', 'mean', 'const', 'zero'] as const;
const BAD = ['column-iota', 'column-sum', 'half-x'] as const;
type Shift = (typeof GOOD)[number] | (typeof BAD)[number];

/** Ops computing `c` from `x`, and their tensors. */
function shiftOps(shift: Shift): { ops: object[]; tensors: object[] } {
  const reduce = (op: string, dim: number): { ops: object[]; tensors: object[] } => ({
    ops: [{ id: 'c', op, inputs: ['x'], outputs: ['c'], attrs: { dims: [dim], keepdim: true } }],
    tensors: [{ id: 'c', shape: dim === 1 ? [N, 1] : [1, C] }],
  });
  // A plan-time constant: iota from a scalar zero (sum of x times 0).
  const iota = (shape: number[], dim: number, step: string): { ops: object[]; tensors: object[] } => ({
    ops: [
      { id: 'z_all', op: 'scale', inputs: ['x'], outputs: ['z_all'], attrs: { factor: 0 } },
      { id: 'z', op: 'sum', inputs: ['z_all'], outputs: ['z'] },
      { id: 'c', op: 'iota', inputs: ['z'], outputs: ['c'], attrs: { shape, dim, step } },
    ],
    tensors: [{ id: 'z_all', shape: [N, C] }, { id: 'z', shape: [] }, { id: 'c', shape }],
  });
  switch (shift) {
    case 'max':
      return reduce('amax', 1);
    case 'sum':
      return reduce('sum', 1);
    case 'mean':
      return reduce('mean', 1);
    case 'const':
      // 5/2 times the row index: one value per row, a different one on each row.
      return iota([N, 1], 0, '5/2');
    case 'zero':
      // No shift at all (c = 0): the unshifted form equals the logical (max-shifted) one.
      return iota([N, 1], 0, '0');
    case 'column-iota':
      // Wrong: the column index, a different value on every element of the row.
      return iota([1, C], 1, '1');
    case 'column-sum':
      // Wrong: the sum over the other dim (rows), so it varies along the reduced dim.
      return reduce('sum', 0);
    case 'half-x':
      // Wrong: half of x itself (a softmax at temperature 2).
      return { ops: [{ id: 'c', op: 'scale', inputs: ['x'], outputs: ['c'], attrs: { factor: '1/2' } }], tensors: [{ id: 'c', shape: [N, C] }] };
  }
}

type Form = 'softmax' | 'log_softmax' | 'logsumexp';

/**
 * - softmax: y = exp(x − c) / sum(exp(x − c)) against the softmax op;
 * - log_softmax: y = (x − c) − log(sum(exp(x − c))) against the log_softmax op;
 * - logsumexp: y = log(sum(exp(x − c))) + c against log(sum(exp(x))), with no shift.
 */
function plan(form: Form, shift: Shift): unknown {
  const sh = shiftOps(shift);
  const cShape = (sh.tensors.find((t) => (t as { id: string }).id === 'c') as { shape: number[] }).shape;
  const wide = (cShape[1] as number) > 1;
  const yShape = form === 'logsumexp' ? [N, 1] : [N, C];
  const tail: Record<Form, object[]> = {
    softmax: [{ id: 'y', op: 'div', inputs: ['e', 's'], outputs: ['y'] }],
    log_softmax: [
      { id: 'l', op: 'log', inputs: ['s'], outputs: ['l'] },
      { id: 'y', op: 'sub', inputs: ['sh', 'l'], outputs: ['y'] },
    ],
    logsumexp: [
      { id: 'l', op: 'log', inputs: ['s'], outputs: ['l'] },
      // A shift of more than one column is added back as its first column (the row's value if
      // it were one), so the wrong twins keep the shape of the right ones.
      ...(wide ? [{ id: 'c0', op: 'slice', inputs: ['c'], outputs: ['c0'], attrs: { dim: 1, start: 0, end: 1 } }] : []),
      { id: 'y', op: 'add', inputs: ['l', wide ? 'c0' : 'c'], outputs: ['y'] },
    ],
  };
  const logicalOps: Record<Form, object[]> = {
    softmax: [{ id: 'f', op: 'softmax', inputs: ['x'], outputs: ['y'], attrs: { dim: 1 } }],
    log_softmax: [{ id: 'f', op: 'log_softmax', inputs: ['x'], outputs: ['y'], attrs: { dim: 1 } }],
    logsumexp: [
      { id: 'e', op: 'exp', inputs: ['x'], outputs: ['e'] },
      { id: 's', op: 'sum', inputs: ['e'], outputs: ['s'], attrs: { dims: [1], keepdim: true } },
      { id: 'l', op: 'log', inputs: ['s'], outputs: ['y'] },
    ],
  };
  return {
    format: 'planproof/v1',
    name: `${form}-shift-${shift}`,
    mesh: { axes: [{ name: 'dp', size: 1 }] },
    logical: {
      tensors: [
        { id: 'x', shape: [N, C], role: 'input' },
        ...(form === 'logsumexp' ? [{ id: 'e', shape: [N, C], role: 'activation' }, { id: 's', shape: [N, 1], role: 'activation' }] : []),
        { id: 'y', shape: yShape, role: 'output' },
      ],
      ops: logicalOps[form],
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: [
            { id: 'x', shape: [N, C], lineage: { logical: 'x' } },
            ...sh.tensors,
            { id: 'sh', shape: [N, C] },
            { id: 'e', shape: [N, C] },
            { id: 's', shape: [N, 1] },
            ...(form === 'softmax' ? [] : [{ id: 'l', shape: [N, 1] }]),
            ...(form === 'logsumexp' && wide ? [{ id: 'c0', shape: [cShape[0] as number, 1] }] : []),
            { id: 'y', shape: yShape, lineage: { logical: 'y' } },
          ],
          ops: [
            ...sh.ops,
            { id: 'sh', op: 'sub', inputs: ['x', 'c'], outputs: ['sh'] },
            { id: 'e', op: 'exp', inputs: ['sh'], outputs: ['e'] },
            { id: 's', op: 'sum', inputs: ['e'], outputs: ['s'], attrs: { dims: [1], keepdim: true } },
            ...tail[form],
          ],
        },
      ],
    },
    contract: { inputs: ['x'], outputs: ['y'] },
  };
}

const why = (r: VerifyReport): string => `${r.summary} ${r.stages.map((s) => s.reason ?? '').join('; ')}`;

describe('shift invariance of softmax and log-sum-exp, written by hand on one rank', () => {
  for (const form of ['softmax', 'log_softmax', 'logsumexp'] as const) {
    for (const shift of GOOD) {
      it(`${form} with the logits shifted by the row ${shift} is verified by the normal form`, () => {
        const r = verifyPlan(loadPlanObject(`${form}-${shift}.json`, plan(form, shift)));
        assert.equal(r.verdict, 'verified', why(r));
        assert.deepEqual(r.stages.map((s) => s.logical), ['y']);
        assert.ok(r.stages.every((s) => s.status === 'proved' && s.decidedBy === 'normal'), why(r));
      });
    }
    for (const shift of BAD) {
      it(`${form} shifted by a value that varies along the row (${shift}) is refuted with a witness`, () => {
        const r = verifyPlan(loadPlanObject(`${form}-${shift}.json`, plan(form, shift)));
        assert.equal(r.verdict, 'not_equivalent', why(r));
        const f = r.stages.find((s) => s.status === 'not_equivalent');
        assert.equal(f?.logical, 'y');
        assert.ok((f?.witness ?? []).length > 0, 'a numeric witness');
      });
    }
  }
});
