/**
 * Value classes of categorical variables: which values of each id a case split must tell
 * apart (docs/engine.md, "Value classes"). A split over the ids of a term enumerated every joint
 * value of their domains; a padding count over 6 token ids of a 12-word vocabulary is 12^6
 * cases, yet the count only asks `[id = pad]` of each id, 2 cases per id. This module holds the
 * bookkeeping on plain numbers (blocks of value indices, their joint enumeration); TermStore
 * (sdfg/terms.ts) decides which values fall in one block and builds the split's polynomial.
 *
 * A value index k of a variable with K values names `values[k]`; index K − 1 has no indicator
 * atom of its own (its indicator is 1 − the others), so the block holding it is kept last: the
 * polynomial of a split is written relative to that block (TermStore.fromTable).
 */

/** A variable's values partitioned into blocks of value indices, the block holding K − 1 last. */
export type Blocks = readonly (readonly number[])[];

/** A case split: its variables (group ids) and, per variable, the blocks it tells apart. */
export interface Split {
  readonly groups: readonly number[];
  readonly blocks: readonly Blocks[];
}

/**
 * The blocks of a variable with K values of which a term mentions the indicator atoms
 * `present` (indices < K − 1): each mentioned value alone, every other value together with
 * K − 1. Sound because fixing the variable to an unmentioned value or to K − 1 zeroes the same
 * atoms (every mentioned one) and sets none: the restricted terms are identical.
 */
export function mentionedBlocks(K: number, present: ReadonlySet<number>): number[][] {
  const alone = [...present].sort((a, b) => a - b).map((k) => [k]);
  const rest: number[] = [];
  for (let k = 0; k < K; k++) if (!present.has(k)) rest.push(k);
  return [...alone, rest];
}

/**
 * `blocks` merged further by a key per block (the restricted terms, as interned ids): blocks
 * with equal keys become one, the one holding K − 1 still last, each sorted.
 */
export function mergeByKey(blocks: Blocks, key: (block: readonly number[]) => string): number[][] {
  const byKey = new Map<string, number[]>();
  let lastKey = '';
  for (const b of blocks) {
    const k = key(b);
    const into = byKey.get(k);
    if (into === undefined) byKey.set(k, [...b]);
    else into.push(...b);
    lastKey = k;
  }
  // The last block of `blocks` holds K − 1; whatever merged with it goes last.
  const out = [...byKey].filter(([k]) => k !== lastKey).map(([, b]) => b.sort((x, y) => x - y));
  out.push((byKey.get(lastKey) as number[]).sort((x, y) => x - y));
  return out;
}

/** The number of joint blocks of a split (a product; may exceed 2^53 only as a float). */
export function jointCount(blocks: readonly Blocks[]): number {
  let n = 1;
  for (const b of blocks) n *= b.length;
  return n;
}

/**
 * One representative value index per variable for every joint block, last variable fastest
 * (the order TermStore.fromTable reads its table in). A block's representative is its largest
 * index, so the block holding K − 1 is represented by K − 1 (a restriction that sets no atom).
 */
export function representatives(split: Split): number[][] {
  const { blocks } = split;
  const n = jointCount(blocks);
  const out: number[][] = [];
  const cur = blocks.map(() => 0);
  for (let i = 0; i < n; i++) {
    out.push(cur.map((c, a) => {
      const b = (blocks[a] as Blocks)[c] as readonly number[];
      return b[b.length - 1] as number;
    }));
    for (let d = blocks.length - 1; d >= 0; d--) {
      cur[d] = (cur[d] as number) + 1;
      if ((cur[d] as number) < (blocks[d] as Blocks).length) break;
      cur[d] = 0;
    }
  }
  return out;
}
