/**
 * A memo keyed by a sequence of small integers (ids interned elsewhere), walked one Map level
 * per integer: a lookup allocates nothing, where a key built as a string (text per id,
 * concatenated, then hashed in full) allocated and hashed at every call. deriveOp's memo
 * (slices.ts) is the user: at 405B widths it is consulted millions of times per run.
 */

/** One level: the memo's value when the sequence ends here, and the next integers. */
export interface MemoNode<V> {
  value?: V;
  next?: Map<number, MemoNode<V>>;
}

export class IntMemo<V> {
  private root: MemoNode<V> = {};
  /** Values stored since the last clear. */
  size = 0;

  /** The node one integer further from `n`, made when missing (a miss costs what a set would). */
  step(n: MemoNode<V>, k: number): MemoNode<V> {
    let m = n.next;
    if (m === undefined) n.next = m = new Map();
    let c = m.get(k);
    if (c === undefined) m.set(k, (c = {}));
    return c;
  }

  /** The node of a sequence starting with a and b. */
  start(a: number, b: number): MemoNode<V> {
    return this.step(this.step(this.root, a), b);
  }

  /** Stores at a node reached by step since the last clear (a node from before it is dropped with the tree). */
  put(n: MemoNode<V>, v: V): void {
    if (n.value === undefined) this.size++;
    n.value = v;
  }

  clear(): void {
    this.root = {};
    this.size = 0;
  }
}
