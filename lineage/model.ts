/**
 * Lineage: which slice of which logical tensor a parallel tensor holds, and how its value
 * relates to that slice. Two spellings are accepted (nnScaler-style index/value maps, and
 * DTensor placements over the mesh); both become the same per-rank normal form, LineageNF:
 *   region = per dim a list of disjoint [start, end) ranges (several for striped layouts
 *            such as context-parallel zig-zag); the local tensor holds exactly these
 *            elements, ranges concatenated in list order;
 *   value  = chunk `idx` of `n` addends combined by `reduce`, divided by `divisor`:
 *            logical = reduce_{i<n}(chunk_i) / divisor. n = 1 means a complete value;
 *            `split` names the decomposition, so that two of the same size stay apart.
 */
import { type IntSpec, LineageError, type LineageSpec, type Reduce } from '../plans/model.js';
import { type Mesh, rankEnv } from '../plans/mesh.js';
import type { Shape } from '../ops/types.js';

export interface ValueMap {
  readonly idx: number;
  readonly n: number;
  readonly reduce: Reduce;
  readonly divisor: number;
  /** Name of the decomposition ('' unless the plan names one): addends of different splits are unrelated. */
  readonly split: string;
}

/** Claims with equal keys are addends of one decomposition of their logical element. */
export function groupKey(v: ValueMap): string {
  return `${v.n}|${v.reduce}|${v.divisor}|${v.split}`;
}

export interface LineageNF {
  readonly logical: number;
  /** ranges[d] = [s0, e0, s1, e1, ...] */
  readonly ranges: readonly (readonly number[])[];
  readonly value: ValueMap;
}

function evalSpec(v: IntSpec, env: (n: string) => number): number {
  return typeof v === 'number' ? v : v.eval(env);
}

/**
 * Evaluates a spec for one rank and checks it against the logical shape and the local shape.
 * Throws LineageError with a one-line reason.
 */
export function evalLineage(spec: LineageSpec, mesh: Mesh, rank: number, logicalShape: Shape, localShape: Shape): LineageNF {
  const nf = spec.kind === 'index' ? evalIndexSpec(spec, mesh, rank, logicalShape) : expandPlacements(spec, mesh, rank, logicalShape);
  checkRegion(nf, logicalShape, localShape);
  return nf;
}

function evalIndexSpec(spec: Extract<LineageSpec, { kind: 'index' }>, mesh: Mesh, rank: number, logicalShape: Shape): LineageNF {
  const env = rankEnv(mesh, rank);
  if (spec.dims !== undefined && spec.dims.length !== logicalShape.length) {
    throw new LineageError(`index map has ${spec.dims.length} dims but the logical tensor has ${logicalShape.length}`);
  }
  const ranges = logicalShape.map((full, d) => {
    const dim = spec.dims?.[d];
    return dim === undefined ? [0, full] : dim.map((x) => evalSpec(x, env));
  });
  const idx = evalSpec(spec.idx, env);
  if (idx < 0 || idx >= spec.n) throw new LineageError(`value map chunk ${idx} is not in 0..${spec.n - 1}`);
  return { logical: spec.logical, ranges, value: { idx, n: spec.n, reduce: spec.reduce, divisor: spec.divisor, split: spec.split } };
}

/**
 * DTensor semantics: mesh axes are applied left to right; Shard(d) splits the current piece
 * of dim d with torch.chunk sizes (ceil(L/m) per chunk; trailing chunks may be short or
 * empty); several Partial axes compose as nnScaler's nested value maps (idx*m + j of n*m).
 */
function expandPlacements(spec: Extract<LineageSpec, { kind: 'placements' }>, mesh: Mesh, rank: number, logicalShape: Shape): LineageNF {
  if (spec.placements.length !== mesh.axes.length) {
    throw new LineageError(`${spec.placements.length} placements for a ${mesh.axes.length}-axis mesh (one per mesh axis, in mesh order)`);
  }
  const lo = logicalShape.map(() => 0);
  const hi = [...logicalShape];
  let idx = 0;
  let n = 1;
  let divisor = 1;
  let reduce: Reduce | undefined;
  spec.placements.forEach((p, a) => {
    const m = mesh.sizes[a] as number;
    const c = mesh.coord(rank, a);
    if (p.k === 'S') {
      if (p.dim >= logicalShape.length) throw new LineageError(`S(${p.dim}) on a rank-${logicalShape.length} tensor`);
      const L = (hi[p.dim] as number) - (lo[p.dim] as number);
      const chunk = Math.ceil(L / m);
      const s = (lo[p.dim] as number) + Math.min(c * chunk, L);
      const e = (lo[p.dim] as number) + Math.min((c + 1) * chunk, L);
      lo[p.dim] = s;
      hi[p.dim] = e;
    } else if (p.k === 'P') {
      const r: Reduce = p.reduce === 'avg' ? 'sum' : p.reduce;
      if (reduce !== undefined && reduce !== r) throw new LineageError(`cannot combine P(${p.reduce}) with another partial kind on one tensor`);
      if (r !== 'sum' && reduce === r) throw new LineageError(`P(${p.reduce}) on two mesh axes is not supported; spell the value map explicitly`);
      reduce = r;
      idx = idx * m + c;
      n *= m;
      if (p.reduce === 'avg') divisor *= m;
    }
  });
  return {
    logical: spec.logical,
    ranges: lo.map((s, d) => [s, hi[d] as number]),
    value: { idx, n, reduce: reduce ?? 'sum', divisor, split: '' },
  };
}

function checkRegion(nf: LineageNF, logicalShape: Shape, localShape: Shape): void {
  if (localShape.length !== logicalShape.length) {
    throw new LineageError(`local tensor has ${localShape.length} dims, logical tensor has ${logicalShape.length}`);
  }
  nf.ranges.forEach((r, d) => {
    const full = logicalShape[d] as number;
    let held = 0;
    const pairs: [number, number][] = [];
    for (let i = 0; i < r.length; i += 2) {
      const s = r[i] as number;
      const e = r[i + 1] as number;
      if (s < 0 || e > full || s > e) throw new LineageError(`dim ${d}: range [${s}, ${e}) is outside [0, ${full})`);
      if (s === e && r.length > 2) throw new LineageError(`dim ${d}: empty range [${s}, ${e}) in a striped index map`);
      pairs.push([s, e]);
      held += e - s;
    }
    // The list order is the local layout order; only overlap is an error.
    pairs.sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < pairs.length; i++) {
      const [s, e] = pairs[i] as [number, number];
      const prev = pairs[i - 1] as [number, number];
      if (s < prev[1]) throw new LineageError(`dim ${d}: ranges [${prev[0]}, ${prev[1]}) and [${s}, ${e}) overlap (a tensor cannot hold an element twice)`);
    }
    if (held !== localShape[d]) {
      throw new LineageError(`dim ${d}: the index map selects ${held} elements but the local tensor has ${localShape[d]}`);
    }
  });
}

export function regionStr(ranges: readonly (readonly number[])[]): string {
  return `[${ranges.map((r) => {
    const parts: string[] = [];
    for (let i = 0; i < r.length; i += 2) parts.push(`${r[i]}:${r[i + 1]}`);
    return parts.join('+');
  }).join(', ')}]`;
}

export function valueStr(v: ValueMap): string {
  if (v.n === 1 && v.divisor === 1) return 'complete';
  const base = `addend ${v.idx} of ${v.n}${v.reduce === 'sum' ? '' : ` (${v.reduce})`}`;
  const named = v.split === '' ? base : `${base} of split '${v.split}'`;
  return v.divisor === 1 ? named : `${named}, divided by ${v.divisor}`;
}
