/**
 * Cut-point inference: candidate lineage for parallel tensors that carry no claim.
 *
 * Both graphs run once in Float64 on random contract inputs (stages/witness/numeric.ts). A parallel
 * tensor's values are then matched against the logical values:
 *  - a slice: the tensor equals a contiguous block of a logical tensor (found through a value
 *    index: the tensor's rarest value names the candidate tensors and offsets, every element
 *    is then compared);
 *  - addends: the sum of the same tensor over a group of ranks that differ on some mesh axes
 *    equals a slice (a partial value; `avg` when the sum is group-size times the slice);
 *  - a scaled copy: the tensor is k times a slice, for k a group size on the mesh.
 * Candidates whose logical producer is an op of the same kind as the parallel producer are
 * preferred (op matching), and a candidate must hold on every rank of the program with
 * offsets and addend indices that are affine in the mesh coordinates, so that it can be
 * written as one SPMD lineage entry.
 *
 * The result is a hint, never a claim: numeric agreement proves nothing. stages/infer/boundary.ts
 * proves each hint as a stage obligation before any later stage assumes it, and drops a hint
 * that does not prove (docs/engine.md, "Inferred boundaries").
 */
import type { Dense } from '../../ops/algebra.js';
import { numel } from '../../ops/types.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { differs, evaluateBoth } from '../witness/numeric.js';
import { producedSets } from '../decompose/prove.js';
import { registry } from '../../ops/registry.js';
import { logicalOrder } from '../../sdfg/execute.js';
import { fixedTensors } from './fixed.js';
import { strides } from '../../ops/dense.js';
import { blockEquals, MAX_MATCHES, type Match, pieceOf, stripeMatches } from './stripes.js';

/** Plans whose logical tensors hold more elements than this are not fingerprinted. */
const MAX_INFER_ELEMENTS = 4_000_000;
/** Positions kept per value in the index (values shared by more places say little). */
const MAX_POSITIONS = 256;
/** Offsets tried per mesh axis, and fits in all, when a rank's values match several blocks. */
const MAX_FIT_CHOICES = 8;
const MAX_FIT_TRIES = 64;
/** Candidates kept per tensor besides the first. */
const MAX_ALTERNATIVES = 3;
/**
 * Extra random inputs every candidate must also hold on. One run can match by coincidence: a
 * token's capacity slot in an MoE dispatch buffer depends on how the other tokens route, so a
 * local buffer equals a block of the logical one on some inputs only. Such a hint fails its
 * proof, and every stage built on it fails with it, round after round; a second draw removes
 * it for the price of a forward run. Not only routing: with one check draw instead of four,
 * stripped llama-tiny-sp kept a micro-batch's RMSNorm hint that held on both draws (token ids
 * drawn from a small vocabulary repeat) and ended "unknown" at the time limit.
 */
const CHECK_SEEDS = 4;
/** Past this many logical elements, one extra seed only. */
const CHECK_SEEDS_FULL_BELOW = 200_000;

type Json = Record<string, unknown>;

export interface InferredClaim {
  /** Program index and tensor id in it. */
  readonly program: number;
  readonly tensor: string;
  readonly logical: string;
  readonly kind: 'slice' | 'addend' | 'scaled';
  /** The lineage entry as written to the plan file (`"inferred": true`). */
  readonly lineage: Json;
  /** Other candidates that hold numerically, in order of preference. */
  readonly alternatives: Json[];
}

export interface InferResult {
  readonly claims: InferredClaim[];
  /** Parallel tensors without a claim that some op produces (candidates looked for). */
  readonly unclaimed: number;
  /** Set when the plan is not fingerprinted at all. */
  readonly skipped?: string;
  /** Tensors left without a candidate because their values are all integers (stages/infer/infer-struct.ts derives theirs). */
  readonly integer: readonly { readonly program: number; readonly tensor: string }[];
}


interface Cand {
  readonly L: number;
  readonly kind: 'slice' | 'addend' | 'scaled';
  /** Mesh axes the addends run over (empty for slices and scaled copies). */
  readonly axes: number[];
  readonly n: number;
  readonly divisor: number;
  readonly start: number[];
  /** Op matching score: 4 when an input holds the same logical tensor (a collective, a copy), 2 when the producers' inputs correspond, +1 when their kinds match. */
  readonly sameOp: number;
  /**
   * A striped slice (context parallelism's zig-zag sequence chunks): the tensor is `k` equal
   * pieces along `dim`, piece j the block of L at `starts[j]` (full start vectors). `start`
   * is piece 0's.
   */
  readonly stripes?: { readonly dim: number; readonly k: number; readonly starts: readonly (readonly number[])[] };
}

const key = (x: number): string | undefined => (Number.isFinite(x) ? (x === 0 ? '0' : x.toPrecision(9)) : undefined);


/**
 * The earliest logical position (`topo`) among the claims of the tensors `t`'s consumers in
 * its program produce, or undefined when none is claimed. Direct consumers only: a walk on
 * through unclaimed tensors reaches claims that take `t` as one of many parts (Megatron's
 * flattened LayerNorm gradients, all-reduced and sliced back: a slice per layer, each claimed
 * for its own layer's gradient) and dropped claims the stages needed.
 */
function consumerTopo(cons: readonly (readonly number[])[], p: Program, t: number, claimL: Int32Array, topo: Int32Array): number | undefined {
  let best: number | undefined;
  for (const op of cons[t] ?? []) {
    for (const u of p.ops.opOutputs(op)) {
      const L = claimL[u] as number;
      if (L >= 0) best = Math.min(best ?? Infinity, topo[L] as number);
    }
  }
  return best;
}

/** Parallel tensors some op produces that carry no lineage, counted once per program. */
export function unclaimedCount(plan: LoadedPlan): number {
  const produced = producedSets(plan);
  let unclaimed = 0;
  for (const p of plan.programs) {
    const r0 = p.ranks[0];
    if (r0 === undefined) continue;
    for (let t = 0; t < p.tensors.size; t++) if (p.lineage[t] === undefined && (produced[r0] as Uint8Array)[t] === 1) unclaimed++;
  }
  return unclaimed;
}

/** Parallel tensors some op produces that carry no lineage, by program (rank 0 of each). */
function unclaimedTargets(plan: LoadedPlan, produced: readonly Uint8Array[]): { program: number; tensor: string }[] {
  const out: { program: number; tensor: string }[] = [];
  plan.programs.forEach((p, pi) => {
    const r0 = p.ranks[0];
    if (r0 === undefined) return;
    for (let t = 0; t < p.tensors.size; t++) if (p.lineage[t] === undefined && (produced[r0] as Uint8Array)[t] === 1) out.push({ program: pi, tensor: p.tensors.name(t) });
  });
  return out;
}

export function inferClaims(plan: LoadedPlan, seed = 1): InferResult {
  const lg = plan.logical;
  const produced = producedSets(plan);
  const unclaimed = unclaimedCount(plan);
  if (unclaimed === 0) return { claims: [], unclaimed, integer: [] };
  let total = 0;
  for (let t = 0; t < lg.tensors.size; t++) total += numel(lg.shapes[t] ?? []);
  // Too large to fingerprint: every unclaimed tensor is left to structural candidates
  // (stages/infer/infer-struct.ts, derived from the claims by the tensor-level rules).
  if (total > MAX_INFER_ELEMENTS) return { claims: [], unclaimed, integer: unclaimedTargets(plan, produced), skipped: `the logical tensors hold ${total} elements; fingerprinting is limited to ${MAX_INFER_ELEMENTS}` };
  const { logical, parallel } = evaluateBoth(plan, seed);
  const nCheck = total < CHECK_SEEDS_FULL_BELOW ? CHECK_SEEDS : 1;
  const checks = Array.from({ length: nCheck }, (_, i) => evaluateBoth(plan, seed + 7919 * (i + 1)));

  const fixed = fixedTensors(plan);
  const matchSlices = sliceMatcher(plan, logical, fixed.logical);
  const topo = new Int32Array(lg.tensors.size).fill(-1);
  logicalOrder(plan).forEach((op, i) => {
    for (const x of lg.ops.opOutputs(op)) topo[x] = i;
  });

  // (logical tensor, op kind) pairs where an op of that kind reads the tensor.
  const reads = new Set<string>();
  for (let op = 0; op < lg.ops.size; op++) for (const x of lg.ops.opInputs(op)) reads.add(`${x}|${lg.ops.kind[op] as number}`);
  const readBy = (L: number, kind: number): boolean => reads.has(`${L}|${kind}`);

  const mesh = plan.mesh;
  const axesN = mesh.sizes.length;
  const bigAxes = [...Array(axesN).keys()].filter((a) => (mesh.sizes[a] as number) > 1);
  // Axis sets partial values may run over: each axis alone, then all of them.
  const axisSets: number[][] = bigAxes.map((a) => [a]);
  if (bigAxes.length > 1) axisSets.push(bigAxes);
  const coords = (r: number): number[] => [...Array(axesN).keys()].map((a) => mesh.coord(r, a));
  const valueOf = (r: number, name: string): Dense<number> | undefined => {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const t = p.tensors.id(name);
    return t < 0 ? undefined : parallel[r]?.[t];
  };
  // Per group of ranks and tensor: the sum over the group, and its matches as is and / size.
  const groupCache = new Map<string, { sum?: Float64Array; ms: Match[][] }>();
  const scales = [...new Set([...bigAxes.map((a) => mesh.sizes[a] as number), mesh.size])].filter((k) => k > 1);

  let claims: InferredClaim[] = [];
  // Indices of claims no candidate of which cuts anything (below).
  const dropped = new Set<number>();
  const integer: { program: number; tensor: string }[] = [];
  plan.programs.forEach((p, pi) => {
    const ranks = [...p.ranks];
    const r0 = ranks[0];
    if (r0 === undefined) return;
    const prodKind = new Int32Array(p.tensors.size).fill(-1);
    const prodOp = new Int32Array(p.tensors.size).fill(-1);
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) {
      prodKind[t] = p.ops.kind[op] as number;
      prodOp[t] = op;
    }
    // The logical tensor each program tensor is claimed for (given, or chosen so far).
    const claimL = new Int32Array(p.tensors.size).fill(-1);
    // Inferred claims of this program: their index in `claims` and every candidate that fitted.
    const foundAt = new Map<number, { claim: number; found: { c: Cand; lineage: Json }[] }>();
    p.lineage.forEach((l, t) => {
      if (l !== undefined) claimL[t] = l.logical;
    });
    // Tensors in program order of their producers, so that inputs are decided first.
    const order = [...Array(p.tensors.size).keys()].sort((a, b) => (prodOp[a] as number) - (prodOp[b] as number));
    const fixedHere = fixed.program(pi);
    for (const t of order) {
      if (p.lineage[t] !== undefined || (produced[r0] as Uint8Array)[t] !== 1 || fixedHere[t] === 1) continue;
      const name = p.tensors.name(t);
      // Op matching: the logical producer has the parallel producer's kind, and its inputs
      // are what the parallel producer's inputs are claimed for (or the tensor itself: a
      // collective or a copy keeps the logical tensor).
      const sameOp = (L: number): number => {
        const op = lg.producer[L] as number;
        const kind = op >= 0 && lg.ops.kind[op] === prodKind[t] ? 1 : 0;
        const pop = prodOp[t] as number;
        if (pop < 0) return kind;
        const lins = op >= 0 ? new Set(lg.ops.opInputs(op)) : new Set<number>();
        const ins = [...p.ops.opInputs(pop)];
        // Only an op with one distinct input (a collective, a copy, a reshape) keeps it: a
        // product whose other factor is 1 on these inputs (a clip coefficient below its
        // threshold) equals its input here, but is another logical tensor.
        // Unless a logical op of this kind reads L: then the op computes something from L that
        // only equals it on these shapes (a transpose across a dim of size 1), and the logical
        // tensor it computes keeps the structure its consumers are matched by.
        if (new Set(ins).size === 1 && ins.some((x) => claimL[x] === L)) return readBy(L, prodKind[t] as number) ? kind : 4 + kind;
        const related = ins.some((x) => (claimL[x] as number) >= 0 && lins.has(claimL[x] as number)) ? 2 : 0;
        return kind + related;
      };
      // The latest logical tensor (in logical order) that the producer's inputs are claimed for.
      let inputsTopo = -1;
      if ((prodOp[t] as number) >= 0) for (const x of p.ops.opInputs(prodOp[t] as number)) if ((claimL[x] as number) >= 0) inputsTopo = Math.max(inputsTopo, topo[claimL[x] as number] as number);
      const candsAt = (r: number, striped: boolean): Cand[] => {
        const v = parallel[r]?.[t];
        if (v === undefined || v.data.length === 0) return [];
        const out: Cand[] = matchSlices(v.data, v.shape).map((m) => ({ L: m.L, kind: 'slice', axes: [], n: 1, divisor: 1, start: m.start, sameOp: sameOp(m.L) }));
        // Asked when no contiguous candidate fits every rank: equal pieces along one dim, each a
        // block of one logical tensor (zig-zag sequence chunks: rank r holds chunks r and
        // 2·cp-1-r). Some ranks' pieces can also be one block by coincidence (repeated tokens).
        if (striped) for (const st of stripeMatches(matchSlices, logical, v.data, v.shape)) out.push({ L: st.L, kind: 'slice', axes: [], n: 1, divisor: 1, start: st.starts[0] as number[], sameOp: sameOp(st.L), stripes: st });
        {
          for (const A of axisSets) {
            const c = coords(r);
            const gkey = `${A.join(',')}|${c.map((x, a) => (A.includes(a) ? '*' : x)).join(',')}|${name}`;
            let g = groupCache.get(gkey);
            if (g === undefined) {
              g = { ms: [[], []] };
              const members = [...mesh.groupAlong(r, A)];
              const vals = members.map((m) => valueOf(m, name));
              if (vals.every((x) => x !== undefined && x.shape.length === v.shape.length && x.shape.every((s, d) => s === v.shape[d]))) {
                const sum = new Float64Array(v.data.length);
                for (const x of vals) (x as Dense<number>).data.forEach((y, f) => (sum[f] = (sum[f] as number) + y));
                g = { sum, ms: [matchSlices(sum, v.shape), matchSlices(sum.map((y) => y / members.length), v.shape)] };
              }
              groupCache.set(gkey, g);
            }
            const n = A.reduce((acc, a) => acc * (mesh.sizes[a] as number), 1);
            for (const m of g.ms[0] as Match[]) out.push({ L: m.L, kind: 'addend', axes: A, n, divisor: 1, start: m.start, sameOp: sameOp(m.L) });
            for (const m of g.ms[1] as Match[]) out.push({ L: m.L, kind: 'addend', axes: A, n, divisor: n, start: m.start, sameOp: sameOp(m.L) });
            // Striped partial values (a row-parallel output inside context parallelism).
            if (striped && g.sum !== undefined) {
              const sum = g.sum;
              for (const st of stripeMatches(matchSlices, logical, sum, v.shape)) out.push({ L: st.L, kind: 'addend', axes: A, n, divisor: 1, start: st.starts[0] as number[], sameOp: sameOp(st.L), stripes: st });
              for (const st of stripeMatches(matchSlices, logical, sum.map((y) => y / n), v.shape)) out.push({ L: st.L, kind: 'addend', axes: A, n, divisor: n, start: st.starts[0] as number[], sameOp: sameOp(st.L), stripes: st });
            }
          }
        }
        // Also behind addends alone: a sum over ranks can equal a block by an identity of
        // the values (top-2 of 2 experts: the two gate probabilities sum to 1, so the experts'
        // scaled output gradients add up to the loss gradient), and that addend hint is then too
        // weak for the consumers, which need each rank's scaled block.
        if (out.every((c) => c.kind === 'addend')) {
          for (const k of scales) {
            const scaled = v.data.map((y) => y / k);
            if (!striped) for (const m of matchSlices(scaled, v.shape)) out.push({ L: m.L, kind: 'scaled', axes: [], n: 1, divisor: k, start: m.start, sameOp: sameOp(m.L) });
            // Scaled striped slices: DistributedSampler's rows (rank r takes r, r + ws, ...) and
            // a per-rank mean loss make each activation gradient ws times a strided selection.
            else for (const st of stripeMatches(matchSlices, logical, scaled, v.shape)) out.push({ L: st.L, kind: 'scaled', axes: [], n: 1, divisor: k, start: st.starts[0] as number[], sameOp: sameOp(st.L), stripes: st });
          }
        }
        // Slices before addends before scaled copies; op matches first; among equal values
        // (a clip factor of 1, a copy), the logical tensor earliest in topological order; the
        // others stay as alternatives, tried when the first does not prove.
        // A candidate computed before a logical tensor the producer's inputs are claimed for
        // goes after those that are not: its stage computes the logical tensor without that
        // input, so it proves only by coincidence of these shapes (a ring-attention block over
        // one key equals that key's value, claimed for v before it is transposed, while its
        // inputs are claimed for the transposed v: every such hint failed, one round each).
        const rankOf = (c: Cand): number => (c.kind === 'slice' ? 0 : c.kind === 'addend' ? 1 : 2) * 16 + ((topo[c.L] as number) < inputsTopo ? 8 : 0) + (7 - c.sameOp);
        // Last, between logical tensors that are equal (a duplicated reshape, say), the name:
        // the logical side is computed from the tensor the stage names, so the one the
        // parallel plan mirrors keeps the stage short.
        const suffix = (L: number): number => commonSuffix(lg.tensors.name(L), name);
        return out.sort((a, b) => rankOf(a) - rankOf(b) || suffix(b.L) - suffix(a.L) || (topo[a.L] as number) - (topo[b.L] as number));
      };
      // A tensor whose values are all integers on these random inputs (a zero gradient, a
      // mask, expert indices) matches any block of equal integers: its values do not say which
      // logical tensor it is, and a hint on it is false or too weak to help. It gets none here;
      // stages/infer/infer-struct.ts derives one from its producers' claims instead.
      if (ranks.every((r) => (parallel[r]?.[t]?.data ?? []).every((x) => Number.isInteger(x)))) {
        integer.push({ program: pi, tensor: name });
        continue;
      }
      let per = new Map<number, Cand[]>(ranks.map((r) => [r, candsAt(r, false)]));
      const shapeAt = (r: number): readonly number[] => plan.view(r).shapes[t] ?? [];
      /** The candidate, at the offsets fitted per rank, on another run of both graphs. */
      // `piece`: only that piece of a striped candidate, its start first in `starts`.
      const holdsOn = (run: { logical: (Dense<number> | undefined)[]; parallel: (Dense<number> | undefined)[][] }, c: Cand, starts: ReadonlyMap<number, readonly (readonly number[])[]>, piece?: number): boolean => {
        const lv = run.logical[c.L];
        if (lv === undefined) return false;
        for (const r of ranks) {
          const v = run.parallel[r]?.[t];
          const st = starts.get(r);
          if (v === undefined || st === undefined) return false;
          let data: ArrayLike<number> = v.data;
          if (c.kind === 'addend') {
            const sum = new Float64Array(v.data.length);
            for (const m of mesh.groupAlong(r, c.axes)) {
              const p2 = plan.programs[plan.rankProgram[m] as number] as Program;
              const x = run.parallel[m]?.[p2.tensors.id(name)];
              if (x === undefined || x.data.length !== v.data.length) return false;
              x.data.forEach((y, f) => (sum[f] = (sum[f] as number) + y));
            }
            data = sum;
          }
          if (c.stripes === undefined) {
            if (!blockEquals(data, v.shape, c.divisor, lv, st[0] as readonly number[])) return false;
            continue;
          }
          for (let j = 0; j < c.stripes.k; j++) {
            if (piece !== undefined && j !== piece) continue;
            const pc = pieceOf(data, v.shape, c.stripes.dim, c.stripes.k, j);
            if (!blockEquals(pc.data, pc.shape, c.divisor, lv, st[piece === undefined ? j : 0] as readonly number[])) return false;
          }
        }
        return true;
      };
      const found: { c: Cand; lineage: Json }[] = [];
      for (let pass = 0; pass < 2 && found.length === 0; pass++) {
      if (pass === 1) per = new Map<number, Cand[]>(ranks.map((r) => [r, candsAt(r, true)]));
      if (process.env['DBG_INFER'] === name) for (const [r, cs] of per) console.error(pi, pass, r, JSON.stringify(cs.map((c) => [c.L, c.kind, c.start, c.stripes, c.axes, c.divisor])));
      for (const c0 of per.get(r0) ?? []) {
        if (found.length > MAX_ALTERNATIVES) break;
        if (pass === 1 && c0.stripes === undefined) continue;
        const same = (c: Cand): boolean => c.L === c0.L && c.kind === c0.kind && c.n === c0.n && c.divisor === c0.divisor && c.axes.join() === c0.axes.join() && c.stripes?.dim === c0.stripes?.dim && c.stripes?.k === c0.stripes?.k;
        if (found.some((f) => same(f.c))) continue;
        // This candidate anchors the fit at the first rank (values can match several blocks).
        const at = (r: number): Cand[] => (r === r0 ? [c0] : (per.get(r) ?? []).filter(same));
        // The fit must also hold on the other draws (a fit through one coincidence does not).
        const fit =
          c0.stripes === undefined
            ? fitTemplate(plan, ranks, (r) => at(r).map((c) => c.start), shapeAt, lg.shapes[c0.L] ?? [], (f) => checks.every((run) => holdsOn(run, c0, f)))
            : fitStripes(plan, ranks, c0.stripes, at, shapeAt, lg.shapes[c0.L] ?? [], (j, f) => checks.every((run) => holdsOn(run, c0, f, j)));
        if (fit === undefined) continue;
        const entry = fit.entry;
        const lineage: Json = { logical: lg.tensors.name(c0.L), index: entry };
        if (c0.kind !== 'slice') {
          const A = c0.axes;
          // Chunk index: row-major over the addend axes, in mesh order.
          let stride = 1;
          const terms: [number, number][] = [];
          for (let i = A.length - 1; i >= 0; i--) {
            terms.push([A[i] as number, stride]);
            stride *= mesh.sizes[A[i] as number] as number;
          }
          // A split of this tensor's own: addends of one split on one element are one
          // decomposition, so two tensors in a shared split would have to be equal addend by
          // addend (the masked and unmasked halves of a vocab-parallel gradient are both
          // addends of it, but of different decompositions). Named by the tensor, not the
          // program: a tensor of one name in several programs (one per context-parallel
          // rank) holds the addends of one decomposition, which the loader needs complete.
          lineage['value'] = { chunk: affineExpr(plan, 0, terms), of: c0.n, divisor: c0.divisor, ...(A.length > 0 ? { split: `inferred.${A.map((a) => mesh.axes[a]).join('.')}:${splitTag(name)}` } : {}) };
        }
        lineage['inferred'] = true;
        found.push({ c: c0, lineage });
      }
      }
      const [first, ...rest] = found;
      if (first !== undefined) claimL[t] = first.c.L;
      if (first !== undefined) {
        foundAt.set(t, { claim: claims.length, found });
        claims.push({ program: pi, tensor: name, logical: lg.tensors.name(first.c.L), kind: first.c.kind, lineage: first.lineage, alternatives: rest.map((f) => f.lineage) });
      }
    }
    // A claim for a logical tensor computed after one a consumer is claimed for cuts nothing:
    // the consumer's stage computes its logical tensor without it, so that stage runs from the
    // iteration's inputs (Megatron's value gradient per head at tp 4, [8, 2, 4] of the
    // logical [8, 8, 4] along batch x heads, also equals a contiguous block of the fused QKV
    // gradient [8, 2, 48] further down: claimed for that, the stage of the consumer went past
    // the normal form's bound, twice per round). Such a tensor takes its first candidate that
    // no consumer precedes, or no claim: its consumers' stages then walk through it.
    const cons: number[][] = Array.from({ length: p.tensors.size }, () => []);
    for (let op = 0; op < p.ops.size; op++) for (const x of p.ops.opInputs(op)) (cons[x] as number[]).push(op);
    for (const [t, { claim, found }] of foundAt) {
      const after = consumerTopo(cons, p, t, claimL, topo);
      if (after === undefined) continue;
      const [k0, ...krest] = found.filter((f) => (topo[f.c.L] as number) <= after);
      if (k0 === found[0]) continue;
      claimL[t] = k0 === undefined ? -1 : k0.c.L;
      const old = claims[claim] as InferredClaim;
      if (k0 === undefined) dropped.add(claim);
      else claims[claim] = { ...old, logical: lg.tensors.name(k0.c.L), kind: k0.c.kind, lineage: k0.lineage, alternatives: krest.map((f) => f.lineage) };
    }
  });
  if (dropped.size > 0) claims = claims.filter((_, i) => !dropped.has(i));
  accumulationAddends(plan, claims);
  return { claims, unclaimed, integer };
}

/** Contiguous blocks of logical tensors equal to a value (`data` of shape `shape`), through an index of the logical values. */
function sliceMatcher(plan: LoadedPlan, logical: readonly (Dense<number> | undefined)[], fixed: Uint8Array): (data: ArrayLike<number>, shape: readonly number[]) => Match[] {
  const lg = plan.logical;
  // Value index: key -> [L, e, L, e, ...]; integer tensors (ids) and fixed ones are left out.
  const index = new Map<string, number[]>();
  for (let L = 0; L < lg.tensors.size; L++) {
    if (lg.domains[L] !== undefined || fixed[L] === 1) continue;
    const v = logical[L];
    if (v === undefined) continue;
    v.data.forEach((x, e) => {
      const k = key(x);
      if (k === undefined) return;
      let l = index.get(k);
      if (l === undefined) index.set(k, (l = []));
      if (l.length < 2 * MAX_POSITIONS) l.push(L, e);
    });
  }
  const lstrides = lg.shapes.map((s) => strides(s ?? []));

  /** Contiguous blocks of logical tensors that equal `data` (of shape `shape`). */
  const matchSlices = (data: ArrayLike<number>, shape: readonly number[]): Match[] => {
    const n = data.length;
    if (n === 0) return [];
    let probe = -1;
    let best = Infinity;
    for (let f = 0; f < Math.min(n, 64); f++) {
      const k = key(data[f] as number);
      const hits = k === undefined ? undefined : index.get(k);
      if (hits !== undefined && hits.length < best) {
        best = hits.length;
        probe = f;
      }
    }
    if (probe < 0) return [];
    const hits = index.get(key(data[probe] as number) as string) as number[];
    const ls = strides(shape);
    const pc = shape.map((_, d) => Math.floor(probe / (ls[d] as number)) % (shape[d] as number));
    const out: Match[] = [];
    for (let h = 0; h < hits.length && out.length < MAX_MATCHES; h += 2) {
      const L = hits[h] as number;
      const e = hits[h + 1] as number;
      const S = lg.shapes[L] ?? [];
      if (S.length !== shape.length) continue;
      const st = lstrides[L] as number[];
      const start = S.map((_, d) => (Math.floor(e / (st[d] as number)) % (S[d] as number)) - (pc[d] as number));
      if (start.some((s, d) => s < 0 || s + (shape[d] as number) > (S[d] as number))) continue;
      if (out.some((m) => m.L === L && m.start.every((s, d) => s === start[d]))) continue;
      const lv = (logical[L] as Dense<number>).data;
      let ok = true;
      for (let f = 0; f < n && ok; f++) {
        let g = 0;
        for (let d = 0; d < shape.length; d++) g += ((start[d] as number) + (Math.floor(f / (ls[d] as number)) % (shape[d] as number))) * (st[d] as number);
        ok = !differs(data[f] as number, lv[g] as number);
      }
      if (ok) out.push({ L, start });
    }
    return out;
  };

  return matchSlices;
}

/**
 * Propagation through `add` (its dim signature keeps every dim and adds values): when
 * y = a + b holds a claim (a slice, or addend i of n) and a and b have none and feed nothing
 * else (gradient accumulation over micro-batches), a and b are addends 2i and 2i + 1 of a
 * 2n-way decomposition of the same slice, in a split of their own (one per tree of
 * accumulations: a nested pair extends its parent's split, so that all the leaves of one tree
 * are addends of one decomposition). Ops are visited from the last, so a chain nests.
 */
function accumulationAddends(plan: LoadedPlan, claims: InferredClaim[]): void {
  const add = registry.id('add');
  if (add < 0) return;
  plan.programs.forEach((p, pi) => {
    const uses = new Int32Array(p.tensors.size);
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opInputs(op)) uses[t] = (uses[t] as number) + 1;
    const claimOf = new Map(claims.filter((c) => c.program === pi).map((c) => [c.tensor, c]));
    for (let op = p.ops.size - 1; op >= 0; op--) {
      if (p.ops.kind[op] !== add) continue;
      const y = p.ops.opOutputs(op)[0] as number;
      const ins = [...p.ops.opInputs(op)];
      const yc = claimOf.get(p.tensors.name(y));
      if (yc === undefined || ins.length !== 2 || ins[0] === ins[1]) continue;
      if (ins.some((t) => p.lineage[t] !== undefined || claimOf.has(p.tensors.name(t)) || uses[t] !== 1)) continue;
      const v = yc.lineage['value'] as Json | undefined;
      const chunk = v?.['chunk'] ?? 0;
      const e = typeof chunk === 'number' ? String(chunk) : String((chunk as Json)['expr']);
      const of = Number(v?.['of'] ?? 1);
      ins.forEach((t, k) => {
        const lineage: Json = { logical: yc.lineage['logical'], index: yc.lineage['index'], value: { chunk: { expr: `(${e})*2 + ${k}` }, of: 2 * of, divisor: Number(v?.['divisor'] ?? 1), split: v?.['split'] === undefined ? `inferred.acc:${splitTag(p.tensors.name(y))}` : `${String(v['split'])}.acc` }, inferred: true };
        const c: InferredClaim = { program: pi, tensor: p.tensors.name(t), logical: yc.logical, kind: 'addend', lineage, alternatives: [] };
        claims.push(c);
        claimOf.set(c.tensor, c);
      });
    }
  });
}

/** A split name for a tensor name (the schema allows [A-Za-z0-9_.:-], 64 characters): its readable tail and a hash of the whole. */
export function splitTag(name: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return `${name.replace(/[^A-Za-z0-9_.:-]/g, '_').slice(-24)}-${h.toString(16)}`;
}

function commonSuffix(a: string, b: string): number {
  let n = 0;
  while (n < a.length && n < b.length && a[a.length - 1 - n] === b[b.length - 1 - n]) n++;
  return n;
}

/** `{"expr": ...}` for b + sum k·coord, or the number when constant. */
function affineExpr(plan: LoadedPlan, b: number, terms: readonly (readonly [number, number])[]): number | Json {
  const parts = terms.filter(([, k]) => k !== 0);
  if (parts.length === 0) return b;
  let s = String(b);
  for (const [a, k] of parts) s += k > 0 ? ` + ${k}*${plan.mesh.axes[a] ?? ''}` : ` - ${-k}*${plan.mesh.axes[a] ?? ''}`;
  return { expr: s };
}

/**
 * One index map for all ranks of a program: per dim, start and end affine in the mesh
 * coordinates. `starts(r)` lists the offsets a candidate has at rank r; the fit takes the first
 * at the program's first rank, derives the coefficient of each axis from a rank that differs on
 * it alone, and checks the prediction against every rank's list.
 */
export type Entry = string | [number | Json, number | Json] | [number | Json, number | Json][];

export function fitTemplate(plan: LoadedPlan, ranks: readonly number[], starts: (r: number) => number[][], shapeAt: (r: number) => readonly number[], S: readonly number[], accept: (fitted: ReadonlyMap<number, number[][]>) => boolean): { entry: Entry[]; starts: Map<number, number[][]> } | undefined {
  const mesh = plan.mesh;
  const axesN = mesh.sizes.length;
  const r0 = ranks[0] as number;
  const s0 = starts(r0)[0];
  if (s0 === undefined) return undefined;
  const inProg = new Set(ranks);
  const coord = (r: number): number[] => [...Array(axesN).keys()].map((a) => mesh.coord(r, a));
  const c0 = coord(r0);
  const ends0 = s0.map((s, d) => s + (shapeAt(r0)[d] as number));
  // Per axis, the rank that differs from r0 on it alone fixes the axis's coefficients; when
  // its values match several blocks (repeated tokens), each is tried, up to a few per axis.
  const probes: { a: number; r1: number; cands: number[][] }[] = [];
  for (let a = 0; a < axesN; a++) {
    const r1 = ranks.find((r) => r !== r0 && coord(r).every((x, b) => (b === a ? x !== c0[a] : x === c0[b])));
    if (r1 === undefined || !inProg.has(r1)) continue;
    const cands = starts(r1).slice(0, MAX_FIT_CHOICES);
    if (cands.length === 0) return undefined;
    probes.push({ a, r1, cands });
  }
  const ks = s0.map(() => new Array<number>(axesN).fill(0));
  const ke = s0.map(() => new Array<number>(axesN).fill(0));
  const predict = (b: number, k: readonly number[], c: readonly number[]): number => b - k.reduce((acc, x, a) => acc + x * (c0[a] as number), 0) + k.reduce((acc, x, a) => acc + x * (c[a] as number), 0);
  const fitted = new Map<number, number[][]>();
  const check = (): boolean => {
    fitted.clear();
    for (const r of ranks) {
      const c = coord(r);
      const want = s0.map((s, d) => predict(s, ks[d] as number[], c));
      const end = ends0.map((e, d) => predict(e, ke[d] as number[], c));
      if (end.some((e, d) => e - (want[d] as number) !== (shapeAt(r)[d] as number))) return false;
      if (!starts(r).some((st) => st.every((x, d) => x === want[d]))) return false;
      fitted.set(r, [want]);
    }
    return true;
  };
  let tries = 0;
  const search = (i: number): boolean => {
    if (i === probes.length) return ++tries <= MAX_FIT_TRIES && check() && accept(fitted);
    const { a, r1, cands } = probes[i] as (typeof probes)[number];
    const delta = (coord(r1)[a] as number) - (c0[a] as number);
    for (const s1 of cands) {
      let ok = true;
      for (let d = 0; d < s0.length && ok; d++) {
        const ds = (s1[d] as number) - (s0[d] as number);
        const de = (s1[d] as number) + (shapeAt(r1)[d] as number) - (ends0[d] as number);
        if (ds % delta !== 0 || de % delta !== 0) ok = false;
        else {
          (ks[d] as number[])[a] = ds / delta;
          (ke[d] as number[])[a] = de / delta;
        }
      }
      if (ok && search(i + 1)) return true;
      if (tries > MAX_FIT_TRIES) return false;
    }
    return false;
  };
  if (!search(0)) return fitMultilinear(plan, ranks, starts, shapeAt, S, accept);
  const entry = s0.map((s, d): Entry => {
    const k = ks[d] as number[];
    const e = ke[d] as number[];
    if (k.every((x) => x === 0) && e.every((x) => x === 0) && s === 0 && ends0[d] === S[d]) return '*';
    const base = (b: number, kk: number[]): number => b - kk.reduce((acc, x, a) => acc + x * (c0[a] as number), 0);
    const terms = (kk: number[]): [number, number][] => kk.map((x, a) => [a, x] as [number, number]);
    return [affineExpr(plan, base(s, k), terms(k)), affineExpr(plan, base(ends0[d] as number, e), terms(e))];
  });
  return { entry, starts: fitted };
}

/**
 * When offsets are not affine in the mesh coordinates: on a program whose ranks form a box
 * with two consecutive coordinates per varying axis, every function of the coordinates is
 * multilinear (sequence parallelism inside context parallelism: rank (cp, tp) holds zig-zag
 * position cp for tp 0 and 3 - cp for tp 1, i.e. cp + 3·tp - 2·cp·tp, at seq 4). The coefficients are
 * the Möbius transform of the offsets on the box's corners; each rank's offset is one of its
 * candidates, tried in turn (a few), and the fit must hold on the check draws.
 */
function fitMultilinear(plan: LoadedPlan, ranks: readonly number[], starts: (r: number) => number[][], shapeAt: (r: number) => readonly number[], S: readonly number[], accept: (fitted: ReadonlyMap<number, number[][]>) => boolean): { entry: Entry[]; starts: Map<number, number[][]> } | undefined {
  const mesh = plan.mesh;
  const axesN = mesh.sizes.length;
  const coord = (r: number, a: number): number => mesh.coord(r, a);
  const axes: number[] = [];
  const lo: number[] = new Array<number>(axesN).fill(0);
  for (let a = 0; a < axesN; a++) {
    const vs = [...new Set(ranks.map((r) => coord(r, a)))].sort((x, y) => x - y);
    if (vs.length === 1) continue;
    if (vs.length !== 2 || (vs[1] as number) !== (vs[0] as number) + 1) return undefined;
    axes.push(a);
    lo[a] = vs[0] as number;
  }
  if (axes.length < 2 || axes.length > 4 || ranks.length !== 1 << axes.length) return undefined;
  const corner = new Map<number, number>();
  for (const r of ranks) corner.set(axes.reduce((m, a, i) => m | ((coord(r, a) - (lo[a] as number)) << i), 0), r);
  if (corner.size !== ranks.length) return undefined;
  const dims = (shapeAt(ranks[0] as number) as number[]).length;
  const choice = new Map<number, number[]>();
  let tries = 0;
  // Möbius transform: coefficient of the monomial over the axes in `mask`.
  const coeffs = (f: (m: number) => number): number[] => {
    const k = Array.from({ length: 1 << axes.length }, (_, m) => f(m));
    for (let i = 0; i < axes.length; i++) for (let m = 0; m < k.length; m++) if (m & (1 << i)) k[m] = (k[m] as number) - (k[m ^ (1 << i)] as number);
    return k;
  };
  const expr = (k: readonly number[]): number | Json => {
    if (k.every((x, m) => m === 0 || x === 0)) return k[0] as number;
    let out = String(k[0]);
    k.forEach((x, m) => {
      if (m === 0 || x === 0) return;
      const vars = axes.filter((_, i) => m & (1 << i)).map((a) => ((lo[a] as number) === 0 ? (mesh.axes[a] as string) : `(${mesh.axes[a] as string} - ${lo[a] as number})`));
      out += `${x < 0 ? ' - ' : ' + '}${Math.abs(x)}*${vars.join('*')}`;
    });
    return { expr: out };
  };
  const finish = (): { entry: Entry[]; starts: Map<number, number[][]> } | undefined => {
    const fitted = new Map<number, number[][]>(ranks.map((r) => [r, [choice.get(r) as number[]]]));
    if (!accept(fitted)) return undefined;
    const entry = Array.from({ length: dims }, (_, d): Entry => {
      const ks = coeffs((m) => (choice.get(corner.get(m) as number) as number[])[d] as number);
      const ke = coeffs((m) => ((choice.get(corner.get(m) as number) as number[])[d] as number) + (shapeAt(corner.get(m) as number)[d] as number));
      if (ks.every((x) => x === 0) && ke.every((x, m) => (m === 0 ? x === S[d] : x === 0))) return '*';
      return [expr(ks), expr(ke)];
    });
    return { entry, starts: fitted };
  };
  const go = (i: number): { entry: Entry[]; starts: Map<number, number[][]> } | undefined => {
    if (i === ranks.length) return ++tries > MAX_FIT_TRIES ? undefined : finish();
    const r = ranks[i] as number;
    for (const st of starts(r).slice(0, MAX_FIT_CHOICES)) {
      choice.set(r, st);
      const f = go(i + 1);
      if (f !== undefined) return f;
      if (tries > MAX_FIT_TRIES) return undefined;
    }
    return undefined;
  };
  return go(0);
}

/**
 * The SPMD fit of a striped candidate: each piece is fitted on its own (fitTemplate, offsets
 * affine in the mesh coordinates); the striped dim's entry lists the pieces' ranges in piece
 * order, which must not overlap (the lineage checker refuses a tensor holding an element twice).
 */
function fitStripes(plan: LoadedPlan, ranks: readonly number[], st: NonNullable<Cand['stripes']>, cands: (r: number) => Cand[], shapeAt: (r: number) => readonly number[], S: readonly number[], accept: (piece: number, fitted: ReadonlyMap<number, number[][]>) => boolean): { entry: Entry[]; starts: Map<number, number[][]> } | undefined {
  const pieceShape = (r: number): number[] => shapeAt(r).map((x, d) => (d === st.dim ? x / st.k : x));
  const fits: { entry: Entry[]; starts: Map<number, number[][]> }[] = [];
  for (let j = 0; j < st.k; j++) {
    const f = fitTemplate(plan, ranks, (r) => cands(r).map((c) => [...((c.stripes?.starts[j] ?? []) as number[])]), pieceShape, S, (fitted) => accept(j, fitted));
    if (f === undefined) return undefined;
    fits.push(f);
  }
  const starts = new Map<number, number[][]>();
  for (const r of ranks) {
    const ps = fits.map((f) => f.starts.get(r)?.[0] as number[]);
    const span = ps.map((p) => [p[st.dim] as number, (p[st.dim] as number) + (pieceShape(r)[st.dim] as number)]).sort((a, b) => (a[0] as number) - (b[0] as number));
    for (let i = 1; i < span.length; i++) if ((span[i]?.[0] as number) < (span[i - 1]?.[1] as number)) return undefined;
    starts.set(r, ps);
  }
  const f0 = fits[0] as { entry: Entry[] };
  const entry = f0.entry.map((e, d): Entry => (d === st.dim ? fits.map((f) => f.entry[d] as [number | Json, number | Json]) : e));
  // Other dims: every piece must sit at the same offsets (one region is a product of ranges).
  for (const f of fits) if (f.entry.some((e, d) => d !== st.dim && JSON.stringify(e) !== JSON.stringify(f0.entry[d]))) return undefined;
  return { entry, starts };
}

/** The plan with the inferred claims written in (a deep copy; the input is not changed). */
export function withClaims(plan: Json, claims: readonly InferredClaim[]): Json {
  const out = structuredClone(plan);
  const progs = (out['parallel'] as { programs: { tensors: Json[] }[] }).programs;
  for (const c of claims) {
    const t = progs[c.program]?.tensors.find((x) => x['id'] === c.tensor);
    if (t !== undefined && (t['lineage'] === undefined || (t['lineage'] as Json)['inferred'] === true)) t['lineage'] = c.lineage;
  }
  return out;
}

/** How a parallel tensor's value on one rank relates to the logical values (localization), and to which logical tensors. */
export interface ValueMatch {
  readonly kind: 'slice' | 'addend' | 'scaled' | 'integer';
  readonly logical: readonly number[];
}

/**
 * Per rank, with no SPMD fit: whether the tensor's value on that rank is a block of a logical
 * tensor ('slice'), its sum over the ranks differing on some mesh axes is one (or group-size
 * times one: 'addend'), or k times (or 1/k of) one for k a group size ('scaled'); 'integer' for
 * values that are all integers (they say nothing); undefined when none holds. Values at
 * `seed`, as the numeric run draws them. Used to localize a failure: the first ops whose
 * outputs match nothing while their inputs do.
 */
export function valueMatcher(plan: LoadedPlan, seed: number): (rank: number, tensor: number) => ValueMatch | undefined {
  const { logical, parallel } = evaluateBoth(plan, seed);
  const fixed = fixedTensors(plan);
  const matchSlices = sliceMatcher(plan, logical, fixed.logical);
  const mesh = plan.mesh;
  const bigAxes = [...Array(mesh.sizes.length).keys()].filter((a) => (mesh.sizes[a] as number) > 1);
  const axisSets: number[][] = bigAxes.map((a) => [a]);
  if (bigAxes.length > 1) axisSets.push(bigAxes);
  const scales = [...new Set([...bigAxes.map((a) => mesh.sizes[a] as number), mesh.size])].filter((k) => k > 1);
  const memo = new Map<string, ValueMatch | undefined>();
  const of = (kind: ValueMatch['kind'], ms: readonly Match[]): ValueMatch => ({ kind, logical: [...new Set(ms.map((m) => m.L))] });
  return (r, t) => {
    const key = `${r}:${t}`;
    if (memo.has(key)) return memo.get(key);
    const v = parallel[r]?.[t];
    let out: ValueMatch | undefined;
    if (v === undefined || v.data.length === 0 || v.data.every((x) => Number.isInteger(x))) out = { kind: 'integer', logical: [] };
    else {
      const ms = matchSlices(v.data, v.shape);
      if (ms.length > 0) out = of('slice', ms);
    }
    if (out === undefined && v !== undefined) {
      const name = (plan.programs[plan.rankProgram[r] as number] as Program).tensors.name(t);
      for (const A of axisSets) {
        const members = [...mesh.groupAlong(r, A)];
        const vals = members.map((m) => {
          const p = plan.programs[plan.rankProgram[m] as number] as Program;
          const x = p.tensors.id(name);
          return x < 0 ? undefined : parallel[m]?.[x];
        });
        if (!vals.every((x) => x !== undefined && x.data.length === v.data.length)) continue;
        const sum = new Float64Array(v.data.length);
        for (const x of vals) (x as Dense<number>).data.forEach((y, f) => (sum[f] = (sum[f] as number) + y));
        const ms = [...matchSlices(sum, v.shape), ...matchSlices(sum.map((y) => y / members.length), v.shape)];
        if (ms.length > 0) {
          out = of('addend', ms);
          break;
        }
      }
      for (const k of scales) {
        if (out !== undefined) break;
        const ms = [...matchSlices(v.data.map((y) => y / k), v.shape), ...matchSlices(v.data.map((y) => y * k), v.shape)];
        if (ms.length > 0) out = of('scaled', ms);
      }
    }
    memo.set(key, out);
    return out;
  };
}
