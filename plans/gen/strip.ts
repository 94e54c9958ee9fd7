/**
 * Boundary lineage: a plan as a user would write it, with lineage only where the user knows
 * it. Claims on contract inputs (data, parameters, optimizer state) and contract outputs are
 * kept; every claim on an intermediate logical tensor is dropped. Issue 18's benchmark and
 * tests start from generated plans stripped this way.
 */
type Json = Record<string, unknown>;

export function stripToBoundary(plan: Json): Json {
  const out = structuredClone(plan);
  const contract = out['contract'] as { inputs?: string[]; outputs?: string[] } | undefined;
  const keep = new Set([...(contract?.inputs ?? []), ...(contract?.outputs ?? [])]);
  const progs = (out['parallel'] as { programs?: { tensors?: Json[] }[] } | undefined)?.programs ?? [];
  for (const p of progs) {
    for (const t of p.tensors ?? []) {
      const l = t['lineage'] as { logical?: string } | undefined;
      if (l !== undefined && !keep.has(l.logical ?? '')) delete t['lineage'];
    }
  }
  return out;
}

/** Claims per kind: given (no `inferred` mark) and inferred. */
export function claimCounts(plan: Json): { given: number; inferred: number } {
  let given = 0;
  let inferred = 0;
  const progs = (plan['parallel'] as { programs?: { tensors?: Json[] }[] } | undefined)?.programs ?? [];
  for (const p of progs) {
    for (const t of p.tensors ?? []) {
      const l = t['lineage'] as { inferred?: boolean } | undefined;
      if (l === undefined) continue;
      if (l.inferred === true) inferred++;
      else given++;
    }
  }
  return { given, inferred };
}
