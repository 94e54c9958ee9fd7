/**
 * Fixed tensors: what the plan's constants determine, which inference never makes a cut
 * point (docs/engine.md, "Inferred boundaries").
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { logicalOrder } from '../../sdfg/execute.js';

/**
 * Tensors whose value the plan fixes: a contract input with one possible value (a constant
 * the importer declared, `values: {range: [k, k+1]}`) and whatever ops compute from such
 * tensors only, on the logical side; on a program, tensors claimed (by the plan, not by a
 * hint) for a fixed logical tensor and what its ops compute from them. They are never cut
 * points: a cut turns a constant into a free symbol, and two micro-batches' copies of one
 * constant (loss seeds, a causal mask rebuilt from a buffer, position ids from `arange`)
 * into two symbols no proof can equate. Uncut, they fold into the normal form as numbers.
 */
export function fixedTensors(plan: LoadedPlan): { readonly logical: Uint8Array; program(pi: number): Uint8Array } {
  const lg = plan.logical;
  const fixed = new Uint8Array(lg.tensors.size);
  for (const t of plan.contract.inputs) if (lg.domains[t]?.length === 1) fixed[t] = 1;
  for (const op of logicalOrder(plan)) {
    if (![...lg.ops.opInputs(op)].every((x) => fixed[x] === 1)) continue;
    for (const x of lg.ops.opOutputs(op)) fixed[x] = 1;
  }
  const memo = new Map<number, Uint8Array>();
  return {
    logical: fixed,
    program(pi: number): Uint8Array {
      const hit = memo.get(pi);
      if (hit !== undefined) return hit;
      const p = plan.programs[pi] as Program;
      const out = new Uint8Array(p.tensors.size);
      p.lineage.forEach((l, t) => {
        if (l !== undefined && p.inferred?.has(t) !== true && fixed[l.logical] === 1) out[t] = 1;
      });
      // Passes until nothing changes (ops need not be listed in dataflow order; one pass
      // usually suffices).
      for (let changed = true; changed; ) {
        changed = false;
        for (let op = 0; op < p.ops.size; op++) {
          const outs = p.ops.opOutputs(op);
          if (outs.every((x) => out[x] === 1) || ![...p.ops.opInputs(op)].every((x) => out[x] === 1)) continue;
          for (const x of outs) out[x] = 1;
          changed = true;
        }
      }
      memo.set(pi, out);
      return out;
    },
  };
}

