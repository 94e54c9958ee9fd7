/**
 * A part's logical side on the box its claims hold (docs/engine.md, "Parts of a coarser cut":
 * the box). A part of one rank holds that rank's rows of a batch or sequence, while its logical
 * side computes every rank's; along a dim every logical op is SIMD along, the logical side
 * restricted to the positions the claims hold computes the same values there.
 */
import { dimClasses } from './dim-classes.js';
import type { RawPlan } from '../../plans/raw.js';

/**
 * The part with its logical side on the box its claims hold: along every dim class that each
 * logical op of the part is SIMD along (`batch` in the ops' own reduction labels, OpDef.dims),
 * the logical tensors keep only the positions from the least to the greatest any claim holds,
 * and the claims are moved down by the start. A part of one rank holds one row of a batch
 * whose logical side has every rank's rows; the lane reducer cannot shrink that (the gcd of 1
 * and the batch is 1). Why a witness of the boxed part is one of the part: an op SIMD along a
 * dim computes output position i from input position i alone, by one rule whatever the size,
 * so on every logical tensor of the part the boxed side computes the full side's values at
 * the box's positions from the inputs' values there (any values elsewhere), and every claim
 * compares the same parallel value with the same logical value. Undefined: nothing to box, or
 * a claim that is not a plain box (then the part is proved as written).
 */
export function boxPart(pr: RawPlan): RawPlan | undefined {
  // A class is boxed only when every op gives its dims the role `batch` (and reads no values along it).
  const batch: boolean[] = [];
  const dc = dimClasses(pr, (node, lab, sig) => {
    const valueLabels = [...Object.values(sig.inputValues ?? {}), ...Object.values(sig.outputValues ?? {})].map((l) => l.label);
    if (lab.role !== 'batch' || valueLabels.includes(lab.label)) batch[node] = false;
  });
  if (typeof dc === 'string') return undefined;
  const { part, base, n, find } = dc;
  const lg = part.logical;
  for (let x = 0; x < n; x++) batch[x] ??= true;
  const isBatch = new Map<number, boolean>();
  for (let x = 0; x < n; x++) isBatch.set(find(x), (isBatch.get(find(x)) ?? true) && batch[x] === true);
  // The box of each class: positions any claim holds.
  const box = new Map<number, [number, number]>();
  const names = new Map<string, number>();
  for (let t = 0; t < lg.tensors.size; t++) names.set(lg.tensors.name(t), t);
  for (const prog of pr.parallel.programs) {
    for (const t of prog.tensors ?? []) {
      const lin = t.lineage;
      if (lin === undefined) continue;
      const l = names.get(lin.logical);
      if (l === undefined || !('index' in lin) || lin.index === undefined) return undefined;
      const shape = lg.shapes[l] ?? [];
      for (let d = 0; d < shape.length; d++) {
        const e = lin.index[d];
        let lo = 0;
        let hi = shape[d] as number;
        if (e !== undefined && e !== '*') {
          if (!Array.isArray(e) || e.length !== 2 || typeof e[0] !== 'number' || typeof e[1] !== 'number') return undefined;
          [lo, hi] = [e[0], e[1]];
        }
        const k = find((base[l] as number) + d);
        const b = box.get(k);
        box.set(k, b === undefined ? [lo, hi] : [Math.min(b[0], lo), Math.max(b[1], hi)]);
      }
    }
  }
  const cut = new Map<number, [number, number]>();
  for (let t = 0; t < lg.tensors.size; t++) {
    (lg.shapes[t] ?? []).forEach((size, d) => {
      const k = find((base[t] as number) + d);
      const b = box.get(k);
      if (isBatch.get(k) === true && b !== undefined && b[1] - b[0] < size) cut.set(k, b);
    });
  }
  if (cut.size === 0) return undefined;
  const out = structuredClone(pr);
  for (const t of out.logical.tensors) {
    const l = names.get(t.id);
    if (l === undefined) continue;
    t.shape = t.shape.map((size, d) => {
      const b = cut.get(find((base[l] as number) + d));
      return b === undefined ? size : b[1] - b[0];
    });
  }
  for (const prog of out.parallel.programs) {
    for (const t of prog.tensors ?? []) {
      const lin = t.lineage;
      if (lin === undefined || !('index' in lin) || lin.index === undefined) continue;
      const l = names.get(lin.logical) as number;
      lin.index = lin.index.map((e, d) => {
        const b = cut.get(find((base[l] as number) + d));
        if (b === undefined || !Array.isArray(e)) return e;
        return [(e[0] as number) - b[0], (e[1] as number) - b[0]];
      });
    }
  }
  return out;
}
