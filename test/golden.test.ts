import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import type { Dense } from '../ops/algebra.js';
import { registry } from '../ops/registry.js';
import type { Attrs } from '../ops/types.js';
import { floatAlgebra, realUf, termAlgebra } from '../sdfg/algebras.js';
import { TermStore, type TermId } from '../sdfg/terms.js';
import { EagerBuilder, FIXTURES } from './helpers.js';

interface Enc {
  shape: number[];
  data: number[];
}
interface Case {
  op: string;
  attrs: Attrs;
  note: string;
  inputs?: Enc[];
  outputs?: Enc[];
  grad?: { seed: Enc[]; inputs: (Enc | null)[] };
  group?: number[];
  memberInputs?: (Enc | null)[];
  memberOutputs?: (Enc | null)[];
  /** Integer inputs: the values each element may take (symbolic ids). */
  ints?: Record<string, number[]>;
}
const golden = JSON.parse(readFileSync(`${FIXTURES}golden/ops.json`, 'utf8')) as { torch: string; cases: Case[] };

/** Within 1e-9 of PyTorch, relative to max(|expected|, 1). */
function close(got: readonly number[], want: Enc, what: string): void {
  assert.equal(got.length, want.data.length, `${what}: ${got.length} values, PyTorch has ${want.data.length}`);
  got.forEach((g, i) => {
    const w = want.data[i] as number;
    assert.ok(Math.abs(g - w) <= 1e-9 * Math.max(1, Math.abs(w)), `${what}[${i}]: ${g}, PyTorch ${w}`);
  });
}

/** Symbolic evaluation with one symbol per input element, then the terms evaluated with the real functions. */
function symbolic(inputs: readonly Enc[], run: (T: TermStore, ins: Dense<TermId>[]) => (Dense<TermId> | undefined)[], ints: Record<string, number[]> = {}): (number[] | undefined)[] {
  const T = new TermStore();
  const values = new Map<string, number>();
  const ins = inputs.map((x, i) => ({
    shape: x.shape,
    data: x.data.map((v, j) => {
      values.set(`in${i}_${j}`, v);
      const dom = ints[String(i)];
      // Integer inputs are categorical: the result must hold for every id, evaluated at this one.
      return dom === undefined ? T.sym(`in${i}_${j}`) : T.categorical(`in${i}_${j}`, dom);
    }),
  }));
  const env = (n: string): number => values.get(n) as number;
  return run(T, ins).map((o) => o?.data.map((t) => T.evaluate(t, env, realUf)));
}

/** send and recv are the two halves of send_recv; their golden cases are send_recv's. */
const coverageName = (op: string): string => (op === 'send' || op === 'recv' ? 'send_recv' : op);

describe(`golden vectors from PyTorch ${golden.torch} (tools/gen_golden.py)`, () => {
  it('every op in ops/ has at least three golden cases', () => {
    const count = new Map<string, number>();
    for (const c of golden.cases) count.set(c.op, (count.get(c.op) ?? 0) + 1);
    const missing = registry.names().filter((n) => (count.get(coverageName(n)) ?? 0) < 3);
    assert.deepEqual(missing, []);
    for (const c of golden.cases) assert.ok(registry.id(c.op) >= 0, `golden case for unknown op '${c.op}'`);
  });

  golden.cases.forEach((c, k) => {
    const def = registry.get(registry.id(c.op));
    const label = `${c.op} #${k} ${JSON.stringify(c.attrs)}${c.note === '' ? '' : ` (${c.note})`}`;
    if (c.group !== undefined) {
      it(`${label}: group of ${c.group.length}, numeric and symbolic`, () => {
        const rule = def.collective;
        assert.ok(rule !== undefined);
        const group = Int32Array.from(c.group ?? []);
        const ins = (c.memberInputs ?? []).map((x) => (x === null ? undefined : x));
        const outs = rule.applyGroup(floatAlgebra, ins, c.attrs, group);
        (c.memberOutputs ?? []).forEach((w, i) => {
          if (w === null) assert.equal(outs[i], undefined);
          else close((outs[i] as Dense<number>).data, w, `member ${i}`);
        });
        const present = ins.filter((x): x is Enc => x !== undefined);
        const sym = symbolic(present, (T, sins) => {
          let p = 0;
          const full = ins.map((x) => (x === undefined ? undefined : sins[p++]));
          return rule.applyGroup(termAlgebra(T), full, c.attrs, group);
        });
        (c.memberOutputs ?? []).forEach((w, i) => {
          if (w !== null) close(sym[i] as number[], w, `symbolic member ${i}`);
        });
      });
      return;
    }
    it(`${label}: numeric, symbolic${c.grad === undefined ? '' : ', backward'}`, () => {
      const inputs = c.inputs ?? [];
      const outs = def.apply(floatAlgebra, inputs, c.attrs);
      (c.outputs ?? []).forEach((w, i) => {
        assert.deepEqual([...(outs[i] as Dense<number>).shape], w.shape, `output ${i} shape`);
        close((outs[i] as Dense<number>).data, w, `output ${i}`);
      });
      const sym = symbolic(inputs, (T, ins) => def.apply(termAlgebra(T), ins, c.attrs), c.ints);
      (c.outputs ?? []).forEach((w, i) => close(sym[i] as number[], w, `symbolic output ${i}`));
      if (c.grad === undefined) return;
      assert.notEqual(def.backward, 'none', `${c.op} has autograd golden data but no backward rule`);
      const rule = def.backward as Exclude<typeof def.backward, 'none'>;
      const b = new EagerBuilder();
      const inRefs = inputs.map((x) => b.put(x));
      const outRefs = outs.map((o) => b.put(o));
      const seeds = c.grad.seed.map((s) => b.put(s));
      const grads = rule(b, { inputs: inRefs, outputs: outRefs, grads: seeds, attrs: c.attrs });
      c.grad.inputs.forEach((w, i) => {
        if (w === null) return;
        const g = grads[i];
        assert.ok(g !== undefined, `no gradient for input ${i}`);
        close((b.vals[g] as Dense<number>).data, w, `grad of input ${i}`);
      });
    });
  });
});
