/**
 * Dead code of an imported plan: ops whose results reach no output. Exported graphs compute
 * saved activations only a backward reads, and a region check (an assumption on an
 * intermediate node, docs/import.md) leaves everything before the node unused; proving those
 * values would cost stages that decide nothing. An op is kept when an output, a point-to-point
 * transfer or a proof obligation (`assert_mask`) needs it. A collective is kept on every rank
 * when any rank needs it (its k-th call on a group is one call across the ranks), so calls
 * still match per communicator. Removing ops whose values reach no output changes no output:
 * the verdict is about the outputs alone.
 */
import { registry } from '../../ops/registry.js';
import type { RawOp, RawParallelOp, RawProgram } from '../raw.js';

const ROOT_OPS = new Set(['send', 'recv', 'send_recv', 'assert_mask']);

/** Live ops of one program from its roots and the collectives forced live; indices into ops. */
export function liveOps(ops: readonly RawOp[], isRoot: (op: RawOp, i: number) => boolean): boolean[] {
  const producer = new Map<string, number>();
  ops.forEach((o, i) => {
    for (const t of o.outputs) producer.set(t, i);
  });
  const live = ops.map(() => false);
  const stack: number[] = [];
  ops.forEach((o, i) => {
    if (isRoot(o, i)) {
      live[i] = true;
      stack.push(i);
    }
  });
  while (stack.length > 0) {
    const o = ops[stack.pop() as number] as RawOp;
    for (const t of o.inputs) {
      const p = producer.get(t);
      if (p !== undefined && !live[p]) {
        live[p] = true;
        stack.push(p);
      }
    }
  }
  return live;
}

const isCollective = (op: RawOp): boolean => {
  const id = registry.id(op.op);
  return id >= 0 && registry.get(id).collective !== undefined;
};

/** The k-th call of each group on a program, as a key shared by the ranks (`<group>#k`). */
function callKeys(ops: readonly RawParallelOp[]): (string | undefined)[] {
  const seen = new Map<string, number>();
  return ops.map((o) => {
    if (!isCollective(o)) return undefined;
    const g = `${o.op}:${JSON.stringify(o.group ?? null)}`;
    const k = seen.get(g) ?? 0;
    seen.set(g, k + 1);
    return `${g}#${k}`;
  });
}

/** Removes dead ops from the logical graph and every program (in place); the number removed. */
export function pruneDeadOps(logical: { ops: RawOp[] }, programs: RawProgram[], isOutputOp: (op: RawOp) => boolean, keep?: { readonly logical: ReadonlySet<string>; readonly ranks: readonly ReadonlySet<string>[] }): number {
  let removed = 0;
  // Tensors a guard reads (a value read into Python) stay computable: a witness is checked against them.
  const kept = (o: RawOp, s: ReadonlySet<string> | undefined): boolean => s !== undefined && o.outputs.some((t) => s.has(t));
  const lLive = liveOps(logical.ops, (o) => isOutputOp(o) || ROOT_OPS.has(o.op) || kept(o, keep?.logical));
  removed += lLive.filter((x) => !x).length;
  logical.ops = logical.ops.filter((_, i) => lLive[i]);

  const keys = programs.map((p) => callKeys(p.ops as RawParallelOp[]));
  const forced = new Set<string>();
  let lives: boolean[][] = [];
  for (;;) {
    lives = programs.map((p, pi) => liveOps(p.ops, (o, i) => isOutputOp(o) || ROOT_OPS.has(o.op) || kept(o, keep?.ranks[pi]) || forced.has(keys[pi]?.[i] ?? '')));
    const before = forced.size;
    lives.forEach((live, pi) => (keys[pi] ?? []).forEach((k, i) => k !== undefined && live[i] && forced.add(k)));
    if (forced.size === before) break;
  }
  programs.forEach((p, pi) => {
    const live = lives[pi] as boolean[];
    removed += live.filter((x) => !x).length;
    p.ops = p.ops.filter((_, i) => live[i]);
  });
  return removed;
}
