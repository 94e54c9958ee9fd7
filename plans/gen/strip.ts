/**
 * Boundary lineage: a plan as a user would write it, with lineage only where the user knows
 * it. Claims on contract inputs (data, parameters, optimizer state) and contract outputs are
 * kept; every claim on an intermediate logical tensor is dropped. Issue 18's benchmark and
 * tests start from generated plans stripped this way.
 */
import type { RawPlan } from '../raw.js';

export function stripToBoundary(plan: RawPlan): RawPlan {
  const out = structuredClone(plan);
  const keep = new Set([...out.contract.inputs, ...out.contract.outputs]);
  for (const p of out.parallel.programs) {
    for (const t of p.tensors ?? []) {
      if (t.lineage !== undefined && !keep.has(t.lineage.logical)) delete t.lineage;
    }
  }
  return out;
}

/** Claims per kind: given (no `inferred` mark) and inferred. */
export function claimCounts(plan: RawPlan): { given: number; inferred: number } {
  let given = 0;
  let inferred = 0;
  for (const p of plan.parallel.programs) {
    for (const t of p.tensors ?? []) {
      if (t.lineage === undefined) continue;
      if (t.lineage.inferred === true) inferred++;
      else given++;
    }
  }
  return { given, inferred };
}
