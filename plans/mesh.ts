/** The device mesh: named axes, row-major coordinates, and the rank at each coordinate. */

export class Mesh {
  readonly size: number;
  /** rankAt[flat coordinate index] = rank. */
  readonly rankAt: Int32Array;
  /** flatOf[rank] = flat coordinate index. */
  readonly flatOf: Int32Array;
  private readonly strides: number[];
  constructor(
    readonly axes: readonly string[],
    readonly sizes: readonly number[],
    rankAt?: Int32Array,
  ) {
    this.size = sizes.reduce((p, s) => p * s, 1);
    this.strides = sizes.map((_, i) => sizes.slice(i + 1).reduce((p, s) => p * s, 1));
    this.rankAt = rankAt ?? iota(this.size);
    this.flatOf = rankAt === undefined ? this.rankAt : new Int32Array(this.size);
    if (rankAt !== undefined) for (let i = 0; i < this.size; i++) this.flatOf[rankAt[i] as number] = i;
  }
  axisIndex(name: string): number {
    return this.axes.indexOf(name);
  }
  /** Coordinate of `rank` along axis `a`. */
  coord(rank: number, a: number): number {
    return Math.floor((this.flatOf[rank] as number) / (this.strides[a] as number)) % (this.sizes[a] as number);
  }
  coords(rank: number): number[] {
    return this.axes.map((_, a) => this.coord(rank, a));
  }
  rankOf(coords: readonly number[]): number {
    let flat = 0;
    coords.forEach((c, a) => (flat += c * (this.strides[a] as number)));
    return this.rankAt[flat] as number;
  }
  /** Members of `rank`'s group along `axes` (axis indices, in mesh order), in coordinate order. */
  groupAlong(rank: number, axes: readonly number[]): Int32Array {
    const sorted = [...axes].sort((x, y) => x - y);
    const base = this.coords(rank);
    for (const a of sorted) base[a] = 0;
    const n = sorted.reduce((p, a) => p * (this.sizes[a] as number), 1);
    const out = new Int32Array(n);
    const c = [...base];
    for (let i = 0; i < n; i++) {
      let rem = i;
      for (let j = sorted.length - 1; j >= 0; j--) {
        const a = sorted[j] as number;
        const s = this.sizes[a] as number;
        c[a] = rem % s;
        rem = Math.floor(rem / s);
      }
      out[i] = this.rankOf(c);
    }
    return out;
  }
  describe(): string {
    return this.axes.map((a, i) => `${a}=${this.sizes[i]}`).join(' x ');
  }
}

/** 0, 1, ..., n - 1. */
export function iota(n: number): Int32Array {
  const a = new Int32Array(n);
  for (let i = 0; i < n; i++) a[i] = i;
  return a;
}

/** The environment of a rank's template expressions: `rank` and its coordinate on each named axis. */
export function rankEnv(mesh: Mesh, rank: number): (name: string) => number {
  return (name) => (name === 'rank' ? rank : mesh.coord(rank, mesh.axisIndex(name)));
}

/** The coordinates a program's ranks take on each axis; a box when their product is the rank set. */
export interface Box {
  readonly sets: Int32Array[];
  readonly lo: Int32Array;
  readonly hi: Int32Array;
  readonly isBox: boolean;
  readonly count: number;
}

export function programBox(ranks: ArrayLike<number>, mesh: Mesh): Box {
  const n = mesh.axes.length;
  if (ranks.length === mesh.size && mesh.size > 0) {
    // Every rank (distinct ranks of the mesh): the whole mesh, no need to look.
    const sets = mesh.sizes.map((s) => iota(s));
    return { sets, lo: new Int32Array(n), hi: Int32Array.from(mesh.sizes.map((s) => s - 1)), isBox: true, count: ranks.length };
  }
  const seen = mesh.sizes.map((s) => new Uint8Array(s));
  for (let i = 0; i < ranks.length; i++) {
    const r = ranks[i] as number;
    for (let a = 0; a < n; a++) (seen[a] as Uint8Array)[mesh.coord(r, a)] = 1;
  }
  const sets = seen.map((u) => {
    const out: number[] = [];
    u.forEach((x, c) => {
      if (x) out.push(c);
    });
    return Int32Array.from(out);
  });
  const product = sets.reduce((p, s) => p * s.length, 1);
  return {
    sets,
    lo: Int32Array.from(sets.map((s) => s[0] ?? 0)),
    hi: Int32Array.from(sets.map((s) => s[s.length - 1] ?? 0)),
    isBox: product === ranks.length && ranks.length > 0,
    count: ranks.length,
  };
}

/** Most boxes a rank set is split into before its claims are enumerated per rank instead. */
const MAX_BOXES = 64;

/**
 * A rank set as disjoint boxes (each the product of one coordinate set per axis), or undefined
 * past `max` boxes. A program with one rank spelled apart (ranks 1..511 of a 64 x 8 stage) is
 * two boxes, so its claims are still checked as families, not rank by rank. Split on the
 * outermost axis; coordinates whose sub-decompositions are equal share one box.
 */
export function programBoxes(ranks: ArrayLike<number>, mesh: Mesh, max = MAX_BOXES): Box[] | undefined {
  const whole = programBox(ranks, mesh);
  if (whole.isBox) return [whole];
  const n = mesh.axes.length;
  // Boxes over axes a..n-1 as coordinate lists per axis.
  const split = (rs: number[], a: number): number[][][] | undefined => {
    if (a === n) return [[]];
    const byCoord = new Map<number, number[]>();
    for (const r of rs) {
      const c = mesh.coord(r, a);
      let l = byCoord.get(c);
      if (l === undefined) byCoord.set(c, (l = []));
      l.push(r);
    }
    const groups = new Map<string, { coords: number[]; sub: number[][][] }>();
    for (const [c, l] of [...byCoord].sort((x, y) => x[0] - y[0])) {
      const sub = split(l, a + 1);
      if (sub === undefined) return undefined;
      const key = JSON.stringify(sub);
      const g = groups.get(key);
      if (g === undefined) groups.set(key, { coords: [c], sub });
      else g.coords.push(c);
    }
    const out: number[][][] = [];
    for (const g of groups.values()) for (const b of g.sub) out.push([g.coords, ...b]);
    return out.length > max ? undefined : out;
  };
  const boxes = split(Array.from(ranks), 0);
  if (boxes === undefined) return undefined;
  return boxes.map((sets) => {
    const count = sets.reduce((p, s) => p * s.length, 1);
    return { sets: sets.map((s) => Int32Array.from(s)), lo: Int32Array.from(sets.map((s) => s[0] ?? 0)), hi: Int32Array.from(sets.map((s) => s[s.length - 1] ?? 0)), isBox: true, count };
  });
}
