/**
 * Striped slices for inference (stages/infer/infer.ts): a parallel tensor whose pieces along one
 * dim are blocks of one logical tensor in arithmetic progression (DistributedSampler's rows
 * r, r + ws, ...; a block of heads per batch row of Megatron's merged [b·np] dim). Candidates
 * only: every hint is proved before use (docs/engine.md), so a wrong match costs a round, never
 * a verdict.
 */
import type { Dense } from '../../ops/algebra.js';
import { strides } from '../../ops/dense.js';
import { differs } from '../witness/numeric.js';

/** Matches kept per probe. */
export const MAX_MATCHES = 32;

export interface Match {
  readonly L: number;
  readonly start: number[];
}

/**
 * Pieces of a striped slice found by a value search each (`matchSlices`) besides the first two,
 * per dim and piece count. Pieces in arithmetic progression (DistributedSampler's rows r,
 * r + ws, ...; one block of heads per batch row of Megatron's merged [b·np] dim) are checked
 * where the first two put them, at no search; a layout that breaks the progression gets this
 * many searches (up to 10 pieces in all: the former limit, from a list of piece counts, was 8).
 */
const STRIPE_SEARCHES = 8;

/**
 * Combinations of piece matches tried per dim and piece count. Pieces whose values match many
 * blocks (zero rows: the tokens an expert was not routed) made the combinations grow as the
 * product of their match counts: 163 s of a SwitchMLP joint graph's 184 s (megatron-fx
 * switchmlp_tp2), which then verified in seconds. Candidates only: a bound costs completeness.
 */
const STRIPE_COMBINATIONS = 4096;

/** Piece j of k equal pieces of `data` (of `shape`) along `dim`. */
export function pieceOf(data: ArrayLike<number>, shape: readonly number[], dim: number, k: number, j: number): { data: Float64Array; shape: number[] } {
  const ps = shape.map((x, d) => (d === dim ? x / k : x));
  const inner = shape.slice(dim + 1).reduce((a, b) => a * b, 1);
  const outer = shape.slice(0, dim).reduce((a, b) => a * b, 1);
  const len = (ps[dim] as number) * inner;
  const out = new Float64Array(outer * len);
  for (let o = 0; o < outer; o++) for (let i = 0; i < len; i++) out[o * len + i] = data[o * (shape[dim] as number) * inner + j * len + i] as number;
  return { data: out, shape: ps };
}

/**
 * Striped matches: k equal pieces along one dim (k >= 2 a divisor of the dim's size, the fewest
 * that match), each a block of the same logical tensor at the same offsets on the other dims.
 * Per k, the first two pieces are searched by value; every later piece is first checked where
 * the progression of the first two puts it (`blockEquals`, no search), and searched only when
 * it is not there, at most STRIPE_SEARCHES times. So 32 or 256 rows per rank taken with a
 * stride cost two searches and one pass over the values per divisor of the size, where a list
 * of piece counts tried every k up to 8 with k searches each and found nothing past it.
 */
export function stripeMatches(matchSlices: (data: ArrayLike<number>, shape: readonly number[]) => Match[], logical: readonly (Dense<number> | undefined)[], data: ArrayLike<number>, shape: readonly number[]): { L: number; dim: number; k: number; starts: number[][] }[] {
  const out: { L: number; dim: number; k: number; starts: number[][] }[] = [];
  shape.forEach((size, dim) => {
    for (let k = 2; k <= size; k++) {
      if (size % k !== 0) continue;
      const pieces = new Map<number, { data: Float64Array; shape: number[] }>();
      const piece = (j: number): { data: Float64Array; shape: number[] } => {
        let pc = pieces.get(j);
        if (pc === undefined) pieces.set(j, (pc = pieceOf(data, shape, dim, k, j)));
        return pc;
      };
      const found = new Map<number, Match[]>();
      let searches = 0;
      let combinations = 0;
      let exhausted = false;
      // Piece j's value matches, searched once (the first two always; later ones within the bound).
      const search = (j: number): Match[] => {
        let ms = found.get(j);
        if (ms !== undefined) return ms;
        if (j >= 2 && ++searches > STRIPE_SEARCHES) {
          exhausted = true;
          return [];
        }
        const pc = piece(j);
        found.set(j, (ms = matchSlices(pc.data, pc.shape)));
        return ms;
      };
      // Every combination of piece matches on one logical tensor at the same offsets on the
      // other dims (repeated values, such as a repeated token's embedding, match several).
      const grow = (starts: number[][], L: number): void => {
        if (out.length >= MAX_MATCHES || exhausted) return;
        if (++combinations > STRIPE_COMBINATIONS) {
          exhausted = true;
          return;
        }
        const j = starts.length;
        if (j === k) {
          out.push({ L, dim, k, starts });
          return;
        }
        if (j >= 2) {
          const s0 = starts[0] as number[];
          const step = ((starts[1] as number[])[dim] as number) - (s0[dim] as number);
          const next = s0.map((x, d) => (d === dim ? x + j * step : x));
          const lv = logical[L];
          const pc = piece(j);
          const S = lv?.shape ?? [];
          if (lv !== undefined && (next[dim] as number) >= 0 && (next[dim] as number) + (pc.shape[dim] as number) <= (S[dim] as number) && blockEquals(pc.data, pc.shape, 1, lv, next)) {
            grow([...starts, next], L);
            return;
          }
        }
        for (const m of search(j)) if (m.L === L && m.start.every((x, d) => d === dim || x === (starts[0] as number[])[d])) grow([...starts, m.start], L);
      };
      for (const m0 of search(0)) grow([m0.start], m0.L);
      if (out.length > 0) return;
      // Piece 0 matches nothing: no larger k can match either unless its smaller pieces do; a
      // piece of a finer split is part of this one, so keep looking (rows strided inside a
      // piece make the coarse piece no block at all).
    }
  });
  return out;
}

/** Whether `data` (of `shape`) divided by `divisor` equals the block of `lv` starting at `start`. */
export function blockEquals(data: ArrayLike<number>, shape: readonly number[], divisor: number, lv: Dense<number>, start: readonly number[]): boolean {
  const S = lv.shape;
  if (S.length !== shape.length) return false;
  const ls = strides(shape);
  const st = strides(S);
  for (let f = 0; f < data.length; f++) {
    let g = 0;
    for (let d = 0; d < shape.length; d++) g += ((start[d] as number) + (Math.floor(f / (ls[d] as number)) % (shape[d] as number))) * (st[d] as number);
    if (differs((data[f] as number) / divisor, lv.data[g] as number)) return false;
  }
  return true;
}
