/**
 * Deepened parts: a part cut at earlier claims (docs/engine.md, "Parts of a coarser cut").
 *
 * A part stops at the first claims its walk meets, and its logical side starts from them. When
 * the stage's logical value also reads a tensor no parallel op of the stage reads (every rank
 * adds one branch of a fan-out twice: the other branch's gradient is computed, claimed, and
 * read by nobody), that tensor is recomputed on the logical side from the model's inputs: the
 * whole forward and backward. Here the part walks *through* some claims of other logical
 * tensors (computing them with the rank's own ops instead of assuming them) and stops at
 * earlier claims from which the logical side computes both branches: the part of a coarser
 * decomposition, whose stage is this one merged with the earlier stages it walked through.
 * Its logical side starts from exactly the claims where the walk stopped (not from the stage's
 * starts), so both sides are functions of the same free values. A witness there is a witness
 * of the merged stage; a proof proves nothing and is never used as one.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import type { ProvePart } from '../decompose/prove.js';
import { extractLogicalRaw, logicalClosure } from '../decompose/extract.js';
import { closure, PartError, provePartOf } from './part.js';
import { boxPart } from './box.js';

/** Most logical ops a deeper part's logical side may have (a layer's forward and backward is a few dozen). */
const SMALL_LOGICAL = 256;
/**
 * The exact engine's work budget on a deeper part (monomial products; the default is 10 times
 * more): such a part is tried only for a witness, after the part as written was not refuted,
 * and its sums over a layer's width are where the numeric run on two draws is the witness.
 */
const DEEP_TERM_BUDGET = 100_000;
/** Milliseconds each exact attempt on a deeper part may take (then the numeric run looks for the witness). */
const DEEP_EXACT_MS = 5_000;
/** A deeper part's logical side has at most MATCH x its walk's ops + MATCH_SLACK ops. */
const MATCH = 4;
const MATCH_SLACK = 8;
/** Most claims deep the walk goes. */
const MAX_DEPTH = 12;
/** Most tensors the walks of this file visit (a whole rank program of the presets is a few thousand). */
const MAX_VISIT = 200_000;

/**
 * The logical tensors to walk through and to stop at, for the part of `tensor` on `rank`
 * (stage of logical tensor `logical`); or why there is no deeper cut than the part's own.
 * Claims above the obligation on its rank are layered by depth (how many claims the rank's
 * local ops cross to reach them from the obligation); for depth d = 1, 2, ... the walk passes
 * the claims of depth < d and stops at the rest, and the first d whose logical side, from the
 * claims met, is within SMALL_LOGICAL ops and within MATCH times the walk's own is taken; then
 * claims are stopped at again, deepest first, while that holds and the logical side does not
 * grow. A stop the logical side could compute from the others is never taken. Heuristic only:
 * whatever it picks, the part's logical side starts from the claims where the walk actually
 * stopped, which is what makes a witness sound.
 */
export function deepCut(plan: LoadedPlan, logical: number, rank: number, tensor: number): { pass: Set<number>; stops: Set<number>; depth: number; logicalOps: number } | string {
  const lg = plan.logical;
  const pi = plan.rankProgram[rank] as number;
  const p = plan.programs[pi] as Program;
  const producer = new Int32Array(p.tensors.size).fill(-1);
  for (let op = 0; op < p.ops.size; op++) for (const x of p.ops.opOutputs(op)) producer[x] = op;
  const sites = new Set(p.collectiveSites);
  // A claim the walk may go through: of another logical tensor, made by a local op.
  const claimOf = (t: number): number | undefined => {
    const spec = p.lineage[t];
    return spec !== undefined && spec.logical !== logical && (producer[t] as number) >= 0 ? spec.logical : undefined;
  };
  const local = (t: number): boolean => (producer[t] as number) >= 0 && !sites.has(producer[t] as number);
  // Least depth of each logical tensor claimed above the obligation (0-1 breadth-first: a claim costs 1).
  const depth = new Int32Array(p.tensors.size).fill(-1);
  const minDepth = new Map<number, number>();
  const passable = new Map<number, boolean>();
  let frontier = [tensor];
  depth[tensor] = 0;
  let visits = 0;
  for (let d = 0; frontier.length > 0 && d <= MAX_DEPTH; d++) {
    const next: number[] = [];
    const queue = [...frontier];
    while (queue.length > 0) {
      const t = queue.pop() as number;
      if (++visits > MAX_VISIT) return `more than ${MAX_VISIT} tensors above the obligation`;
      const l = claimOf(t);
      if (l !== undefined && t !== tensor) {
        if (!minDepth.has(l)) minDepth.set(l, d);
        passable.set(l, (passable.get(l) ?? true) && local(t));
      }
      if (!local(t)) continue;
      for (const x of p.ops.opInputs(producer[t] as number)) {
        if (depth[x] !== -1) continue;
        if (claimOf(x) !== undefined) {
          depth[x] = d + 1;
          next.push(x);
        } else {
          depth[x] = d;
          queue.push(x);
        }
      }
    }
    frontier = next;
  }
  // The claims a walk passing `pass` stops at (local ops only; a collective's output is a
  // stop), and the size of the logical side from them (SMALL_LOGICAL + 1: larger).
  const walk = (pass: ReadonlySet<number>): { stops: Set<number>; ops: number } => {
    const stops = new Set<number>();
    let mine = 0;
    const seen = new Uint8Array(p.tensors.size);
    const st = [tensor];
    while (st.length > 0) {
      const t = st.pop() as number;
      if (seen[t]) continue;
      seen[t] = 1;
      const l = claimOf(t);
      if (t !== tensor && l !== undefined && !pass.has(l)) {
        stops.add(l);
        continue;
      }
      if (!local(t)) continue;
      mine++;
      for (const x of p.ops.opInputs(producer[t] as number)) st.push(x);
    }
    const done = new Set<number>(stops);
    const ls = [logical];
    let ops = 0;
    while (ls.length > 0 && ops <= SMALL_LOGICAL) {
      const x = ls.pop() as number;
      if (done.has(x) && x !== logical) continue;
      done.add(x);
      const op = lg.producer[x] as number;
      if (op < 0) continue;
      ops++;
      for (const y of lg.ops.opInputs(op)) ls.push(y);
    }
    // Matched: the logical side about as large as the rank's walk (both branches of one
    // layer), not a model recomputed beside one op.
    if (ops > SMALL_LOGICAL || ops > MATCH * mine + MATCH_SLACK) return { stops, ops: SMALL_LOGICAL + 1 };
    // No stop the logical side could compute from what else it reads: as a free value it
    // would be drawn apart from them (u = f(x) and v = f(x) with the ranks reading u twice: a
    // stop at u and v computed from x differ, though the plan is correct). Such a stop is not
    // a cut; the walk goes through it instead.
    const reads = new Set([...done].filter((x) => !stops.has(x) && (lg.producer[x] as number) < 0));
    for (const x of stops) if (derivable(x, stops, reads)) return { stops, ops: SMALL_LOGICAL + 1 };
    return { stops, ops };
  };
  /** Whether stop `x` is computed by at most SMALL_LOGICAL logical ops from the other stops and the contract inputs in `reads`. */
  const derivable = (x: number, stops: ReadonlySet<number>, reads: ReadonlySet<number>): boolean => {
    const seenL = new Set<number>();
    const st = [x];
    let n = 0;
    while (st.length > 0) {
      const y = st.pop() as number;
      if (seenL.has(y)) continue;
      seenL.add(y);
      if (y !== x && stops.has(y)) continue;
      const op = lg.producer[y] as number;
      if (op < 0) {
        if (!reads.has(y)) return false;
        continue;
      }
      if (++n > SMALL_LOGICAL) return false;
      for (const z of lg.ops.opInputs(op)) st.push(z);
    }
    return true;
  };
  for (let d = 1; d <= MAX_DEPTH; d++) {
    const pass = new Set([...minDepth].filter(([l, k]) => k < d && passable.get(l) === true).map(([l]) => l));
    if (pass.size === 0) continue;
    let best = walk(pass);
    if (best.ops > SMALL_LOGICAL) continue;
    // Stop earlier where the logical side stays closed and no larger, deepest claims first
    // (a head's norm backward at the edge of the cut also sums over rows, which would keep the
    // rows from shrinking).
    for (const l of [...pass].sort((a, b) => (minDepth.get(b) as number) - (minDepth.get(a) as number))) {
      pass.delete(l);
      const w = walk(pass);
      if (w.ops <= best.ops) best = w;
      else pass.add(l);
    }
    if (pass.size === 0) return 'the cut found is the part\'s own';
    return { pass, stops: best.stops, depth: d, logicalOps: best.ops };
  }
  return `no depth up to ${MAX_DEPTH} claims above the obligation gives a logical side of at most ${SMALL_LOGICAL} ops`;
}

/**
 * The part of `tensor` on `rank` cut at earlier claims (deepCut), its logical side from the
 * claims where its walk stopped; proved and evaluated as every part is (stages/shrink/part.ts).
 */
export const provePartDeep: ProvePart = (plan, raw, stage, rank, tensor, seed) => {
  try {
    const cut = deepCut(plan, stage.logical, rank, tensor);
    if (typeof cut === 'string') return { why: `no deeper cut: ${cut}` };
    const c = closure(plan, stage.logical, rank, tensor, undefined, undefined, cut.pass);
    if (c.fold !== undefined) return { why: 'no deeper cut: the deeper part folds a group' };
    // Both sides from the same free values: only the claims where the walk stopped.
    const lside = logicalClosure(plan, stage.logical, c.inputs.values());
    const logicalSide = extractLogicalRaw(plan, raw, stage, lside);
    const r = provePartOf(plan, raw, stage, rank, c, seed, { termBudget: DEEP_TERM_BUDGET, exactMs: DEEP_EXACT_MS }, logicalSide, (pr) => boxPart(pr) ?? pr);
    if ('why' in r) return r;
    const walked = [...cut.pass].slice(0, 4).map((l) => `'${plan.logical.tensors.name(l)}'`).join(', ');
    return { ...r, result: { ...r.result, reason: `cut at earlier claims (docs/engine.md, "Parts of a coarser cut": walked through the claims within ${cut.depth} of the obligation, of ${cut.pass.size} logical tensor(s) such as ${walked}; both sides from the ${c.inputs.size} claim(s) where the walk stopped, ${lside.logicalOps.size} logical op(s)): ${r.result.reason ?? ''}` } };
  } catch (e) {
    if (e instanceof PartError) return { why: `no deeper cut: ${e.message}` };
    throw e;
  }
};
