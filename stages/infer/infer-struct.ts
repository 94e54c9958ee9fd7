/**
 * Structural candidates: lineage for parallel tensors whose values say nothing (all integers
 * on the random inputs: a gradient that is identically zero, such as attention's query and key
 * gradients at sequence length 1), derived from the claims of the tensors they are computed
 * from. Each op's rule carries the relations of its inputs to its output
 * (TensorLevelProver.deriveFromClaims: the op's dim signature for slices, contractions for
 * addends, collectives for sums), so the candidate follows the ops rather than any block of
 * zeros that happens to match.
 *
 * The result is a hint like any inferred claim (stages/infer/boundary.ts proves it as a stage before
 * anything assumes it, and drops it when it does not prove): the claims it was derived from
 * may themselves be hints that fail.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { TensorLevelProver, type DerivedClaim } from '../engines/tensorlevel/prover.js';
import { fitTemplate, splitTag, type InferredClaim } from './infer.js';
import { fixedTensors } from './fixed.js';

type Json = Record<string, unknown>;

/** Candidates kept per tensor besides the first (as stages/infer/infer.ts). */
const MAX_ALTERNATIVES = 3;

/**
 * Hints for `targets` (program, tensor name) from the claims of `plan` (loaded with the
 * hints inferred so far). A tensor gets one when every rank of its program derives a relation
 * to the same logical tensor, with offsets (and an addend index) affine in the mesh
 * coordinates, so that it is one SPMD lineage entry.
 */
export function structuralClaims(plan: LoadedPlan, targets: readonly { readonly program: number; readonly tensor: string }[]): InferredClaim[] {
  if (targets.length === 0) return [];
  const prover = new TensorLevelProver(plan);
  const lg = plan.logical;
  const out: InferredClaim[] = [];
  // Fixed tensors are never cut points (stages/infer/infer.ts fixedTensors).
  const fixed = fixedTensors(plan);
  for (const { program, tensor } of targets) {
    const p = plan.programs[program] as Program | undefined;
    if (p === undefined) continue;
    const t = p.tensors.id(tensor);
    if (t < 0 || p.lineage[t] !== undefined || fixed.program(program)[t] === 1) continue;
    const ranks = [...p.ranks];
    const derived = new Map<number, DerivedClaim>();
    for (const r of ranks) {
      let d: DerivedClaim | string;
      try {
        d = prover.deriveFromClaims(r, t);
      } catch {
        // A rule that cannot handle these shapes derives nothing: no candidate, never an error.
        d = 'error';
      }
      if (typeof d === 'string') break;
      derived.set(r, d);
    }
    if (derived.size !== ranks.length) continue;
    const d0 = derived.get(ranks[0] as number) as DerivedClaim;
    // The tensor's own name first among equal logical tensors (a plan mirrors the names of the
    // logical graph it was derived from), then the logical graph's order.
    const order = [...d0.logicals].filter((c) => fixed.logical[c.logical] !== 1).sort((a, b) => Number(lg.tensors.name(b.logical) === tensor) - Number(lg.tensors.name(a.logical) === tensor) || a.logical - b.logical);
    const found: Json[] = [];
    let first: number | undefined;
    for (const c of order) {
      if (found.length > MAX_ALTERNATIVES) break;
      const lineage = entryFor(plan, p, t, ranks, derived, c.logical, c.num, c.den);
      if (lineage === undefined) continue;
      first ??= c.logical;
      found.push(lineage);
    }
    const [head, ...rest] = found;
    if (head === undefined || first === undefined) continue;
    out.push({ program, tensor, logical: lg.tensors.name(first), kind: d0.part === undefined ? 'slice' : 'addend', lineage: head, alternatives: rest });
  }
  return out;
}

/** The lineage entry stating the derived relations to logical tensor L on every rank, or undefined when they are not one SPMD entry. */
function entryFor(plan: LoadedPlan, p: Program, t: number, ranks: readonly number[], derived: ReadonlyMap<number, DerivedClaim>, L: number, num: number, den: number): Json | undefined {
  // A claim states parallel = divisor x logical (or its addends sum to that), divisor a positive integer.
  if (den !== 1 || num < 1) return undefined;
  const S = plan.logical.shapes[L] ?? [];
  const shapeAt = (r: number): readonly number[] => plan.view(r).shapes[t] ?? [];
  const chunks = new Map<number, number>();
  let of = 0;
  for (const r of ranks) {
    const d = derived.get(r) as DerivedClaim;
    if (!d.logicals.some((x) => x.logical === L && x.num === num && x.den === den)) return undefined;
    const sh = shapeAt(r);
    if (d.ranges.length !== S.length || sh.length !== S.length) return undefined;
    if (d.ranges.some(([a, b], k) => a < 0 || b > (S[k] as number) || b - a !== sh[k])) return undefined;
    if (d.part === undefined) continue;
    // An addend index: the place of this rank's addend (or summed range) among equal ones.
    const [a, b] = d.part.cover;
    let chunk: number;
    let n: number;
    if (d.part.kind === 'idx' && d.part.cover.length === 1) [chunk, n] = [a as number, d.part.total];
    else if (d.part.kind === 'range' && d.part.cover.length === 2 && b !== undefined && a !== undefined && b > a && d.part.total % (b - a) === 0 && a % (b - a) === 0) [chunk, n] = [a / (b - a), d.part.total / (b - a)];
    else return undefined;
    if (of !== 0 && n !== of) return undefined;
    of = n;
    chunks.set(r, chunk);
  }
  if (chunks.size > 0 && chunks.size !== ranks.length) return undefined;
  const fit = fitTemplate(plan, ranks, (r) => [(derived.get(r) as DerivedClaim).ranges.map(([a]) => a)], shapeAt, S, () => true);
  if (fit === undefined) return undefined;
  const lineage: Json = { logical: plan.logical.tensors.name(L), index: fit.entry };
  if (chunks.size > 0) {
    // The addend index, fitted like a one-dim offset of width 1 among `of`.
    const cf = fitTemplate(plan, ranks, (r) => [[chunks.get(r) as number]], () => [1], [of], () => true);
    const e = cf?.entry[0];
    if (e === undefined) return undefined;
    const chunk = e === '*' ? 0 : Array.isArray(e) && !Array.isArray(e[0]) ? (e[0] as number | Json) : undefined;
    if (chunk === undefined) return undefined;
    lineage['value'] = { chunk, of, divisor: num, split: `inferred.struct:${splitTag(p.tensors.name(t))}` };
  } else if (num !== 1) lineage['value'] = { chunk: 0, of: 1, divisor: num };
  lineage['inferred'] = true;
  return lineage;
}
