/**
 * Cycle detection on a graph in CSR form, iteratively: training graphs are chains tens of
 * thousands of ops deep, which overflow any recursive depth-first search (graphlib's
 * isAcyclic and findCycles among them).
 */

export interface Csr {
  readonly n: number;
  /** Successors of v are succ[succStart[v] .. succStart[v+1]). */
  readonly succStart: Int32Array;
  readonly succ: Int32Array;
}

/** Builds CSR from parallel edge arrays. */
export function toCsr(n: number, src: ArrayLike<number>, dst: ArrayLike<number>): Csr {
  const succStart = new Int32Array(n + 1);
  for (let i = 0; i < src.length; i++) {
    const a = src[i] as number;
    succStart[a + 1] = (succStart[a + 1] as number) + 1;
  }
  for (let i = 0; i < n; i++) succStart[i + 1] = (succStart[i + 1] as number) + (succStart[i] as number);
  const fill = succStart.slice(0, n);
  const succ = new Int32Array(src.length);
  for (let i = 0; i < src.length; i++) {
    const a = src[i] as number;
    const at = fill[a] as number;
    succ[at] = dst[i] as number;
    fill[a] = at + 1;
  }
  return { n, succStart, succ };
}

/** Kahn's algorithm; returns one cycle (nodes in edge order) or undefined when acyclic. */
export function findCycle(g: Csr): number[] | undefined {
  const indeg = new Int32Array(g.n);
  for (const v of g.succ) indeg[v] = (indeg[v] as number) + 1;
  const queue = new Int32Array(g.n);
  let head = 0;
  let tail = 0;
  for (let v = 0; v < g.n; v++) if (indeg[v] === 0) queue[tail++] = v;
  while (head < tail) {
    const v = queue[head++] as number;
    for (let e = g.succStart[v] as number; e < (g.succStart[v + 1] as number); e++) {
      const w = g.succ[e] as number;
      indeg[w] = (indeg[w] as number) - 1;
      if (indeg[w] === 0) queue[tail++] = w;
    }
  }
  if (tail === g.n) return undefined;
  // Every unfinished node still has an unfinished predecessor, so walking predecessors
  // among unfinished nodes must revisit a node: that loop is a cycle.
  const predOf = new Map<number, number>();
  for (let v = 0; v < g.n; v++) {
    if (indeg[v] === 0) continue;
    for (let e = g.succStart[v] as number; e < (g.succStart[v + 1] as number); e++) {
      const w = g.succ[e] as number;
      if ((indeg[w] as number) > 0 && !predOf.has(w)) predOf.set(w, v);
    }
  }
  let v = -1;
  for (let x = 0; x < g.n && v < 0; x++) if ((indeg[x] as number) > 0) v = x;
  const seenAt = new Map<number, number>();
  const walk: number[] = [];
  while (!seenAt.has(v)) {
    seenAt.set(v, walk.length);
    walk.push(v);
    v = predOf.get(v) as number;
  }
  return walk.slice(seenAt.get(v)).reverse();
}

/** "a -> b -> ... -> a" for a cycle, eliding the middle of long ones (error lines stay short). */
export function cycleText(names: readonly string[]): string {
  const shown = names.length <= 10 ? names : [...names.slice(0, 6), `... ${names.length - 9} more ...`, ...names.slice(-3)];
  return `${shown.join(' -> ')} -> ${names[0] ?? ''}${names.length > 10 ? ` (a cycle of ${names.length} ops)` : ''}`;
}
