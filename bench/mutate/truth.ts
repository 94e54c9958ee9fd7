/**
 * Ground truth for the mutation harness, independent of the verifier's verdict: both graphs
 * of a loaded plan run in Float64 (sdfg/execute.ts through stages/witness/numeric.ts evaluateBoth) on
 * several seeds the verifier does not use, and every lineage claim is compared with the
 * logical value here, with our own margins. Nothing of the proof engine (stages, normal
 * forms, tensor-level proofs, witness search) is involved.
 *
 * A plan is "wrong" when some claim differs far beyond rounding on some seed, "correct" when
 * every claim agrees within a margin far below any mutation's effect on every seed and every
 * contract output element is covered, and "undetermined" in between (or when evaluation fails).
 */
import type { Dense } from '../../ops/algebra.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { groupKey, type LineageNF } from '../../lineage/model.js';
import { logicalIndexer } from '../../sdfg/execute.js';
import { evaluateBoth } from '../../stages/witness/numeric.js';

/** Relative (to max(1, |a|, |b|)) deviation above which a claim is wrong. */
export const WRONG_MARGIN = 1e-9;
/** Deviation below which a claim agrees (Float64 rounding on these tiny plans stays far under it). */
export const EQUAL_MARGIN = 1e-11;
/** Seeds of the truth runs: the verifier's numeric runs use --seed (1) to --seed + 4. */
export const TRUTH_SEEDS: readonly number[] = [7001, 7002, 7003];

export type Truth =
  | { readonly kind: 'correct'; readonly maxDev: number }
  | { readonly kind: 'wrong'; readonly maxDev: number; readonly where: string }
  | { readonly kind: 'undetermined'; readonly why: string; readonly maxDev: number };

function dev(a: number, b: number): number {
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b) ? 0 : Infinity;
  if (a === b) return 0; // equal infinities too
  // An overflow on one side (a scale of -1e308) is a difference, not inf/inf = NaN, which no
  // margin catches (a fuzzed plan was counted a false alarm that way).
  if (!Number.isFinite(a) || !Number.isFinite(b)) return Infinity;
  return Math.abs(a - b) / Math.max(1, Math.abs(a), Math.abs(b));
}

interface SeedResult {
  maxDev: number;
  where: string;
  uncovered: string | undefined;
}

function oneSeed(plan: LoadedPlan, seed: number): SeedResult {
  const lg = plan.logical;
  const { logical, parallel, lineageOf } = evaluateBoth(plan, seed);
  let maxDev = 0;
  let where = '';
  const note = (d: number, w: () => string): void => {
    if (d > maxDev) {
      maxDev = d;
      where = w();
    }
  };
  // Elements of contract outputs held complete somewhere (a claim or a complete addend group).
  const outputs = new Set(plan.contract.outputs);
  const covered = new Map<number, Uint8Array>();
  const cover = (lt: number, g: number): void => {
    if (!outputs.has(lt)) return;
    let c = covered.get(lt);
    if (c === undefined) covered.set(lt, (c = new Uint8Array((logical[lt] as Dense<number>).data.length)));
    c[g] = 1;
  };
  // Addend groups: (logical, decomposition) -> element -> chunk index -> value.
  const groups = new Map<string, { nf: LineageNF; byElem: Map<number, Map<number, number>> }>();
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const nf = lineageOf(r, t);
      if (nf === undefined) continue;
      const val = (parallel[r] as (Dense<number> | undefined)[])[t];
      const lv = logical[nf.logical] as Dense<number> | undefined;
      if (val === undefined || lv === undefined) {
        note(Infinity, () => `rank ${r} tensor '${p.tensors.name(t)}' has no value`);
        continue;
      }
      const idx = logicalIndexer(nf, lg.shapes[nf.logical] ?? []);
      const v = nf.value;
      if (v.n === 1 && v.divisor === 1) {
        for (let f = 0; f < val.data.length; f++) {
          const g = idx(f);
          note(dev(val.data[f] as number, lv.data[g] as number), () => `rank ${r} '${p.tensors.name(t)}' element ${f} vs logical '${lg.tensors.name(nf.logical)}'[${g}]`);
          cover(nf.logical, g);
        }
        continue;
      }
      const key = `${nf.logical}|${groupKey(v)}`;
      let grp = groups.get(key);
      if (grp === undefined) groups.set(key, (grp = { nf, byElem: new Map() }));
      for (let f = 0; f < val.data.length; f++) {
        const g = idx(f);
        let m = grp.byElem.get(g);
        if (m === undefined) grp.byElem.set(g, (m = new Map()));
        const prev = m.get(v.idx);
        const x = val.data[f] as number;
        // Replicas of one addend must agree.
        if (prev === undefined) m.set(v.idx, x);
        else note(dev(prev, x), () => `rank ${r} '${p.tensors.name(t)}' addend ${v.idx} element ${f} differs from another rank's copy`);
      }
    }
  }
  for (const { nf, byElem } of groups.values()) {
    const lv = logical[nf.logical] as Dense<number>;
    const v = nf.value;
    for (const [g, m] of byElem) {
      if (m.size < v.n) continue;
      const xs = [...m.values()];
      const c = v.reduce === 'sum' ? xs.reduce((a, b) => a + b, 0) / v.divisor : v.reduce === 'max' ? Math.max(...xs) : Math.min(...xs);
      note(dev(c, lv.data[g] as number), () => `addends of logical '${lg.tensors.name(nf.logical)}'[${g}] combine to ${c}, logical ${String(lv.data[g])}`);
      cover(nf.logical, g);
    }
  }
  let uncovered: string | undefined;
  for (const lt of outputs) {
    const c = covered.get(lt);
    const n = (logical[lt] as Dense<number>).data.length;
    if (n > 0 && (c === undefined || c.some((x) => x === 0))) uncovered = `contract output '${lg.tensors.name(lt)}' is not held complete on any rank`;
  }
  return { maxDev, where, uncovered };
}

/** Ground truth of a loaded plan (see the module comment). */
export function groundTruth(plan: LoadedPlan, seeds: readonly number[] = TRUTH_SEEDS): Truth {
  let maxDev = 0;
  let where = '';
  let uncovered: string | undefined;
  for (const s of seeds) {
    let r: SeedResult;
    try {
      r = oneSeed(plan, s);
    } catch (e) {
      return { kind: 'undetermined', why: `evaluation failed: ${e instanceof Error ? e.message : String(e)}`, maxDev };
    }
    if (r.maxDev > maxDev) ({ maxDev, where } = r);
    uncovered ??= r.uncovered;
  }
  if (maxDev > WRONG_MARGIN) return { kind: 'wrong', maxDev, where };
  if (uncovered !== undefined) return { kind: 'undetermined', why: uncovered, maxDev };
  if (maxDev < EQUAL_MARGIN) return { kind: 'correct', maxDev };
  return { kind: 'undetermined', why: `deviation ${maxDev.toExponential(2)} between the margins (${where})`, maxDev };
}
