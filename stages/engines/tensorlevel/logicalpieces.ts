/**
 * Regions restated on the logical graph's own pieces (docs/engine.md, rule 13): a rank that
 * splits, slices, concatenates or broadcasts differently from the single-device graph (vLLM's
 * fused QKV and gate/up columns split per rank's heads, a causal mask repeated over fewer
 * heads) still reaches the logical ops that compute the same values.
 *  - inSplitPiece: a region of X inside a logical split's output or slice P is P's region;
 *  - concatOfLogical: a concat of regions of a logical concat's inputs is its output's region;
 *  - expandRegion / alignRepeated: a repeated dim of a logical expand holds the same values at
 *    every index, so its region may be taken anywhere of the same length.
 * Each builds only relations on the plan's own logical tensors (never a virtual op's).
 */
import { registry } from '../../../ops/registry.js';
import { numel, type Shape } from '../../../ops/types.js';
import { type Range, ONE, feq, isMaxPart, type Relation } from './relations.js';
import { stripeOf, stripeRange } from './stripes.js';
import { iadd, iconst, isub } from './sym.js';
import type { LogicalWorld, OpRef } from './world.js';

/** Ops that compute each element from the same element of their inputs (scalars broadcast). */
const ELEMENTWISE = new Set(['where', 'add', 'sub', 'mul', 'div', 'neg', 'identity', 'scale', 'exp', 'sqrt', 'log', 'tanh', 'sigmoid', 'silu', 'gelu', 'compare', 'maximum', 'minimum']);

export interface PieceKinds {
  readonly split: number;
  readonly slice: number;
  readonly concat: number;
  readonly expand: number;
}

export class LogicalPieces {
  constructor(
    private readonly world: LogicalWorld,
    private readonly kinds: PieceKinds,
    /** The prover's check of a relation against the local shape (the caller's `checked`). */
    private readonly checked: (r: Relation, outShape: Shape) => Relation | string,
  ) {}

  /**
   * An expand that repeats a value fewer times than the logical graph's expand of the same
   * value (attention's causal mask broadcast over a rank's heads): the rank's output is the
   * logical output's region [0, n) along every repeated dim (new leading dims, and dims of size
   * 1 in the logical input), and the input's region along the others. Sound because a repeated
   * dim holds the same values at every index.
   */
  expandRegion(x: Relation, xs: Shape, outShape: Shape): Relation | undefined {
    const w = this.world;
    if (x.part !== undefined || x.bcast !== undefined || isMaxPart(x) || xs.length > outShape.length) return undefined;
    const ls = w.shape(x.logical);
    const lead = outShape.length - xs.length;
    for (const q of w.index.get(`${this.kinds.expand}|${x.logical}`) ?? []) {
      const o = w.ops[q] as OpRef;
      const out = o.outputs[0];
      if (out === undefined || out >= w.nLogical) continue;
      const lo = w.shape(out);
      if (lo.length !== outShape.length) continue;
      const ranges: Range[] = [];
      let ok = true;
      for (let d = 0; d < outShape.length && ok; d++) {
        const n = outShape[d] as number;
        const dd = d - lead;
        const repeated = dd < 0 || (ls[dd] === 1 && (lo[d] as number) !== 1);
        if (repeated) {
          const rg = dd < 0 ? undefined : (x.ranges[dd] as Range);
          ok = n <= (lo[d] as number) && (rg === undefined || (rg[0] === 0 && rg[1] === 1 && xs[dd] === 1));
          ranges.push([0, n]);
        } else {
          ok = lo[d] === ls[dd] && n === xs[dd];
          ranges.push(x.ranges[dd] as Range);
        }
      }
      const [id, f] = w.canon(out);
      if (!ok || id !== out || !feq(f, ONE)) continue;
      const c = this.checked({ logical: out, ranges, scale: x.scale }, outShape);
      if (typeof c !== 'string') return c;
    }
    return undefined;
  }

  /** Per logical tensor written by the plan's own expand: its repeated dims (expandRegion). */
  private repeatedDims: Map<number, readonly number[]> | undefined;

  /**
   * Inputs whose region along a repeated dim of a logical expand's output is moved to a
   * partner input's region there (same length, partner's logical dim as long): a repeated
   * dim holds the same values at every index, so E[a : a + n] = E[b : b + n] along it.
   * Undefined when nothing moves.
   */
  alignRepeated(ins: readonly Relation[]): Relation[] | undefined {
    const w = this.world;
    if (this.repeatedDims === undefined) {
      const reps = (this.repeatedDims = new Map());
      const same = (a: Shape, b: Shape): boolean => a.length === b.length && a.every((n, i) => n === b[i]);
      // (The plan's own ops in logical order: an element-wise op of one repeated value and scalars repeats it too.)
      for (const o of w.ops) {
        const out = o.outputs[0];
        const src = o.inputs[0];
        if (out === undefined || src === undefined || out >= w.nLogical) continue;
        const lo = w.shape(out);
        if (o.kind === this.kinds.expand) {
          const ls = w.shape(src);
          const lead = lo.length - ls.length;
          const rep = lo.flatMap((n, d) => (d < lead || (ls[d - lead] === 1 && n !== 1) ? [d] : []));
          if (rep.length > 0) reps.set(out, rep);
          continue;
        }
        if (!ELEMENTWISE.has(registry.get(o.kind).name) || o.outputs.length !== 1) continue;
        const big = o.inputs.filter((t) => numel(w.shape(t)) !== 1);
        const rep = big.length === 1 ? reps.get(big[0] as number) : undefined;
        if (rep !== undefined && same(w.shape(big[0] as number), lo)) reps.set(out, rep);
      }
    }
    let changed = false;
    const out = ins.map((x, i) => {
      const rep = this.repeatedDims?.get(x.logical);
      if (rep === undefined || x.part !== undefined || x.bcast !== undefined) return x;
      const ranges = [...x.ranges];
      for (const d of rep) {
        const rg = ranges[d] as Range;
        const n = iconst(isub(rg[1], rg[0]));
        const partner = ins.find((y, j) => j !== i && y.ranges.length === x.ranges.length && y.bcast === undefined && w.shape(y.logical)[d] === w.shape(x.logical)[d] && iconst(isub((y.ranges[d] as Range)[1], (y.ranges[d] as Range)[0])) === n && stripeOf(y.ranges[d] as Range) === undefined);
        const to = partner?.ranges[d];
        if (n === undefined || to === undefined || (to[0] === rg[0] && to[1] === rg[1])) continue;
        ranges[d] = to;
        changed = true;
      }
      return { ...x, ranges };
    });
    return changed ? out : undefined;
  }

  /**
   * x restated on a logical piece of its tensor X when x's range along the piece's dim lies
   * inside it: an output of a logical split (piece j of split(X) is X[off_j : off_j + size_j]
   * exactly) or a logical slice X[s:e]; then X[a:b] = piece[a - off : b - off], piece by piece
   * when striped. A rank that splits differently from the logical graph (a fused QKV
   * projection split per rank's heads) reaches the logical graph's own pieces this way. Whole
   * values only (no addend, no broadcast); fixed ranges only.
   */
  inSplitPiece(x: Relation): Relation | undefined {
    const w = this.world;
    if (x.part !== undefined || x.bcast !== undefined) return undefined;
    const shape = w.shape(x.logical);
    const windows: { out: number; d: number; off: number; n: number }[] = [];
    for (const q of w.index.get(`${this.kinds.split}|${x.logical}`) ?? []) {
      const o = w.ops[q] as OpRef;
      const d0 = o.attrs['dim'];
      const sizes = o.attrs['sizes'];
      if (typeof d0 !== 'number' || !Array.isArray(sizes)) continue;
      let off = 0;
      for (let j = 0; j < sizes.length; j++) {
        const n = sizes[j];
        const out = o.outputs[j];
        if (typeof n !== 'number') break;
        if (out !== undefined) windows.push({ out, d: d0 < 0 ? d0 + shape.length : d0, off, n });
        off += n;
      }
    }
    for (const q of w.index.get(`${this.kinds.slice}|${x.logical}`) ?? []) {
      const o = w.ops[q] as OpRef;
      const [d0, a, b] = [o.attrs['dim'], o.attrs['start'], o.attrs['end']];
      const out = o.outputs[0];
      if (typeof d0 !== 'number' || typeof a !== 'number' || typeof b !== 'number' || out === undefined || (o.attrs['step'] ?? 1) !== 1) continue;
      const d = d0 < 0 ? d0 + shape.length : d0;
      const size = shape[d] as number;
      const lo = Math.min(Math.max(a < 0 ? a + size : a, 0), size);
      const hi = Math.min(Math.max(b < 0 ? b + size : b, lo), size);
      windows.push({ out, d, off: lo, n: hi - lo });
    }
    for (const { out, d, off, n } of windows) {
      const rg = x.ranges[d];
      if (rg === undefined) continue;
      const pieces = stripeOf(rg) ?? [rg];
      // (Per template a range may be affine in the coordinates: only fixed ranges are placed.)
      if (!pieces.every(([a, b]) => typeof a === 'number' && typeof b === 'number' && a >= off && b <= off + n && a < b)) continue;
      const moved = stripeRange(pieces.map(([a, b]) => [(a as number) - off, (b as number) - off] as Range));
      const [id, f] = w.canon(out);
      // (A tensor canonical to itself is itself, factor 1.)
      if (typeof moved === 'string' || id !== out || !feq(f, ONE)) continue;
      return { logical: out, ranges: x.ranges.map((r, i) => (i === d ? moved : r)), scale: x.scale };
    }
    return undefined;
  }

  /**
   * A concat of regions of a logical concat's inputs, in its order, alike outside the concat
   * dim: the region of the logical concat's output at those places (input j's pieces shifted
   * by the sizes of the logical inputs before it), striped when not contiguous. Inputs may be
   * restated on the logical pieces they lie in (inSplitPiece) to reach the logical inputs.
   */
  concatOfLogical(ins: readonly Relation[], d: number, outShape: Shape): Relation | undefined {
    const w = this.world;
    if (ins.some((x) => x.part !== undefined || x.bcast !== undefined || !feq(x.scale, (ins[0] as Relation).scale))) return undefined;
    const choices = ins.map((x) => [x, ...[this.inSplitPiece(x)].filter((y): y is Relation => y !== undefined)]);
    const picks: Relation[][] = [[]];
    for (const c of choices) {
      const next: Relation[][] = [];
      for (const p of picks) for (const y of c) if (next.length < 16) next.push([...p, y]);
      picks.splice(0, picks.length, ...next);
    }
    for (const pick of picks) {
      for (const q of w.index.get(`${this.kinds.concat}|${pick.map((x) => x.logical).join(',')}`) ?? []) {
        const o = w.ops[q] as OpRef;
        const out = o.outputs[0];
        const lshape = w.shape(pick[0]?.logical ?? -1);
        const d0 = o.attrs['dim'];
        // (The plan's own concat: a virtual one states nothing about the logical graph's pieces.)
        if (out === undefined || out >= w.nLogical || typeof d0 !== 'number' || (d0 < 0 ? d0 + lshape.length : d0) !== d) continue;
        const first = pick[0] as Relation;
        if (pick.some((x) => x.ranges.some((rg, i) => i !== d && (rg[0] !== (first.ranges[i] as Range)[0] || rg[1] !== (first.ranges[i] as Range)[1])))) continue;
        const pieces: Range[] = [];
        let off = 0;
        for (const x of pick) {
          for (const [a, b] of stripeOf(x.ranges[d] as Range) ?? [x.ranges[d] as Range]) pieces.push([iadd(a, off), iadd(b, off)]);
          off += w.shape(x.logical)[d] as number;
        }
        const rg = stripeRange(pieces);
        const [id, f] = w.canon(out);
        if (typeof rg === 'string' || id !== out || !feq(f, ONE)) continue;
        const c = this.checked({ logical: out, ranges: first.ranges.map((r, i) => (i === d ? rg : r)), scale: first.scale }, outShape);
        if (typeof c !== 'string') return c;
      }
    }
    return undefined;
  }
}
