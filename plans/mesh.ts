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
