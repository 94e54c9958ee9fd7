/**
 * A stage's dataflow as Graphviz DOT (`planproof explain --dot`, and the HTML report's
 * drawings, laid out by Graphviz itself): the logical side in one cluster, the parallel side
 * in one cluster per rank, collectives between the rank clusters. Assumed inputs are dashed;
 * the stage's tensor is bold, and red where the stage fails (only the tensors a witness shows
 * wrong, on the failing ranks). Collectives show their kind, attributes and group.
 */
import type { StageView } from '../stages/decompose/stageview.js';

/** A DOT double-quoted string. */
function dotString(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

export interface DotOptions {
  /** The stage fails: its tensor is drawn red on these ranks (and on the logical side). */
  readonly failingRanks?: readonly number[];
  readonly failing?: boolean;
  /**
   * The parallel tensors a witness shows wrong. When given, only they are red (and tensors of
   * the same name on the other failing ranks: the witness keeps a few values), not every
   * obligation of a failing rank: a correct addend before a wrong all-reduce stays bold.
   */
  readonly failingTensors?: readonly { readonly rank: number; readonly tensor: string }[];
}

const BAD = 'color="#c62828", fillcolor="#ffcdd2", style="filled,bold", penwidth=2, class="failing"';
const OUT = 'style="bold", penwidth=2';

/** The stage as a DOT digraph. */
export function stageDot(v: StageView, o: DotOptions = {}): string {
  const L: string[] = [];
  const bad = new Set(o.failingRanks ?? []);
  const badKeys = new Set((o.failingTensors ?? []).map((x) => `${x.rank}:${x.tensor}`));
  const badNames = new Set((o.failingTensors ?? []).map((x) => x.tensor));
  const fails = (r: number, t: string): boolean => o.failing === true && (badKeys.has(`${r}:${t}`) || (bad.has(r) && (o.failingTensors === undefined || badNames.has(t))));
  L.push(`digraph ${dotString(`stage ${v.index}: ${v.logical}`)} {`);
  L.push('  rankdir=TB; newrank=true; compound=true;');
  L.push('  graph [fontname="Helvetica", fontsize=11];');
  L.push('  node [fontname="Helvetica", fontsize=10];');
  L.push('  edge [color="#555555"];');
  // Logical side.
  L.push('  subgraph cluster_logical {');
  L.push(`    label="logical (one device)"; style="rounded"; color="#1565c0";`);
  const ltensors = new Set<string>([...v.logicalInputs, ...v.logicalOps.flatMap((op) => [...op.inputs, ...op.outputs])]);
  if (v.logicalOps.length === 0) ltensors.add(v.logical);
  const inputs = new Set(v.logicalInputs);
  for (const t of ltensors) {
    const attrs = t === v.logical ? (o.failing === true ? BAD : OUT) : inputs.has(t) ? 'style="dashed"' : '';
    L.push(`    ${dotString(`L:t:${t}`)} [label=${dotString(t)}, shape=ellipse${attrs === '' ? '' : `, ${attrs}`}];`);
  }
  for (const op of v.logicalOps) {
    L.push(`    ${dotString(`L:o:${op.id}`)} [label=${dotString(`${op.id}\n${op.kind}`)}, shape=box, style="rounded"];`);
    for (const t of op.inputs) L.push(`    ${dotString(`L:t:${t}`)} -> ${dotString(`L:o:${op.id}`)};`);
    for (const t of op.outputs) L.push(`    ${dotString(`L:o:${op.id}`)} -> ${dotString(`L:t:${t}`)};`);
  }
  L.push('  }');
  // Parallel side: one cluster per rank.
  const ranks = [...new Set([...v.parallelOps.map((p) => p.rank), ...v.inputs.map((r) => r.rank), ...v.outputs.map((r) => r.rank), ...v.collectives.flatMap((c) => c.members.map((m) => m.rank))])].sort((a, b) => a - b);
  const assumed = new Set(v.inputs.map((r) => `${r.rank}:${r.tensor}`));
  const obliged = new Set(v.outputs.map((r) => `${r.rank}:${r.tensor}`));
  const tid = (r: number, t: string): string => dotString(`R${r}:t:${t}`);
  for (const r of ranks) {
    L.push(`  subgraph ${dotString(`cluster_rank_${r}`)} {`);
    L.push(`    label=${dotString(`rank ${r}`)}; style="rounded"; color="#2e7d32";`);
    const ts = new Set<string>();
    for (const p of v.parallelOps.filter((x) => x.rank === r)) for (const t of [...p.inputs, ...p.outputs]) ts.add(t);
    for (const c of v.collectives) for (const m of c.members) if (m.rank === r) for (const t of [m.input, m.output]) if (t !== '') ts.add(t);
    for (const x of [...v.inputs, ...v.outputs]) if (x.rank === r) ts.add(x.tensor);
    for (const t of ts) {
      const key = `${r}:${t}`;
      const attrs = obliged.has(key) ? (fails(r, t) ? BAD : OUT) : assumed.has(key) ? 'style="dashed"' : '';
      L.push(`    ${tid(r, t)} [label=${dotString(t)}, shape=ellipse${attrs === '' ? '' : `, ${attrs}`}];`);
    }
    for (const p of v.parallelOps.filter((x) => x.rank === r)) {
      const id = dotString(`R${r}:o:${p.id}`);
      L.push(`    ${id} [label=${dotString(`${p.id}\n${p.kind}`)}, shape=box, style="rounded"];`);
      for (const t of p.inputs) L.push(`    ${tid(r, t)} -> ${id};`);
      for (const t of p.outputs) L.push(`    ${id} -> ${tid(r, t)};`);
    }
    L.push('  }');
  }
  // Collectives span ranks: drawn outside the rank clusters.
  for (const c of v.collectives) {
    const id = dotString(`C:${c.id}`);
    // Kind, attributes (the reduce op) and group: a wrong reduce op or group is often the bug.
    L.push(`  ${id} [label=${dotString(`${c.id}\n${c.kind}${c.attrs === '' ? '' : `\n${c.attrs}`}\ngroup ${c.group}`)}, shape=hexagon, style="filled", fillcolor="#fff3e0", color="#ef6c00"];`);
    for (const m of c.members) {
      if (m.input !== '') L.push(`  ${tid(m.rank, m.input)} -> ${id};`);
      if (m.output !== '') L.push(`  ${id} -> ${tid(m.rank, m.output)};`);
    }
  }
  L.push('}');
  return L.join('\n') + '\n';
}
