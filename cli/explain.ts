/**
 * `planproof explain PLAN STAGE`: one stage for the person localizing a failure. Its logical
 * and parallel ops side by side (a table in the manner of torch.fx's print_tabular), the
 * input relations it assumes, the output relations it must prove, its outcome, and the first
 * differing elements with their terms and the numeric witness values. `--dot` writes the
 * stage's graph for Graphviz instead (cli/dot.ts).
 */
import { writeFileSync } from 'node:fs';
import { ExitCode } from '../plans/errors.js';
import type { LoadedPlan } from '../lineage/load.js';
import { findStage, planStages, stageView, type StageView, type ViewRelation } from '../stages/decompose/stageview.js';
import { elementDifferences, Prover, type ElementDifference, type StageResult } from '../stages/decompose/prove.js';
import { numericCheck, type Mismatch } from '../stages/witness/numeric.js';
import { witnessLine } from '../stages/report.js';
import { stageDot } from './dot.js';

interface Out {
  log(s: string): void;
  err(s: string): void;
}

export interface ExplainOptions {
  readonly json: boolean;
  readonly seed: number;
  /** Write DOT: to this file, or to stdout when '' (the flag without a value). */
  readonly dot?: string;
}

/** Rows as columns padded to their widest cell. */
function table(head: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string => r.map((c, i) => c.padEnd(w[i] as number)).join('  ').trimEnd();
  return [line(head), line(w.map((n) => '-'.repeat(n))), ...rows.map(line)];
}

/** Two tables side by side, the left padded to its widest line. */
function sideBySide(left: readonly string[], right: readonly string[]): string[] {
  const w = Math.max(...left.map((l) => l.length));
  const n = Math.max(left.length, right.length);
  return Array.from({ length: n }, (_, i) => `${(left[i] ?? '').padEnd(w)}  |  ${right[i] ?? ''}`.trimEnd());
}

/** The logical and parallel op tables, collectives as one row per member. */
function opTables(v: StageView): { logical: string[]; parallel: string[] } {
  const logical = table(
    ['opcode', 'name', 'target', 'args'],
    v.logicalOps.map((o) => [o.kind, o.id, o.outputs.join(', '), o.inputs.join(', ')]),
  );
  const rows: string[][] = v.parallelOps.map((o) => [String(o.rank), o.kind, o.id, o.outputs.join(', '), o.inputs.join(', ')]);
  // The kind with its attributes (`all_reduce(reduce: avg)`): a wrong reduce op is the bug to see.
  for (const c of v.collectives) for (const m of c.members) rows.push([String(m.rank), c.attrs === '' ? c.kind : `${c.kind}(${c.attrs})`, c.id, m.output, `${m.input} (group ${c.group})`]);
  rows.sort((a, b) => Number(a[0]) - Number(b[0]));
  return { logical: ['logical side (one device)', ...logical], parallel: ['parallel side (per rank; collectives name their group)', ...table(['rank', 'opcode', 'name', 'target', 'args'], rows)] };
}

const relLine = (r: ViewRelation): string => `rank ${r.rank} '${r.tensor}' = ${r.logical}${r.region} ${r.value}`;

interface Explained {
  readonly view: StageView;
  readonly status: 'proved' | 'differs' | 'unknown';
  readonly reason?: string;
  readonly differences: ElementDifference[];
  readonly differencesNote?: string;
  readonly witness: Mismatch[];
  /** Ranks the proof found differing (all of them, where the differences and witness show a few). */
  readonly failingRanks: number[];
}

/** Proves the stage and gathers what the text and JSON forms show. */
function gather(plan: LoadedPlan, v: StageView, stage: Parameters<Prover['prove']>[0], seed: number): Explained {
  let res: StageResult;
  try {
    res = new Prover(plan).prove(stage);
  } catch (e) {
    res = { stage, status: 'unknown', reason: `engine error: ${e instanceof Error ? e.message : String(e)}`, failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
  }
  let differences: ElementDifference[] = [];
  let differencesNote: string | undefined;
  if (res.status === 'differs') {
    try {
      const d = elementDifferences(plan, stage);
      if (Array.isArray(d)) differences = d;
      else differencesNote = d.why;
    } catch (e) {
      differencesNote = `terms not shown: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
  const n = numericCheck(plan, seed);
  const witness = n.mismatches.filter((m) => m.logical === v.logical).slice(0, 4);
  const failingRanks = res.status === 'differs' ? [...new Set([...res.failingRanks, ...witness.map((m) => m.rank), ...differences.map((d) => d.rank)])].sort((a, b) => a - b) : [];
  return { view: v, status: res.status, ...(res.reason === undefined ? {} : { reason: res.reason }), differences, ...(differencesNote === undefined ? {} : { differencesNote }), witness, failingRanks };
}

/** The explain command on a loaded plan; returns the exit code (2 for a stage that is not there). */
export function explain(plan: LoadedPlan, key: string, o: ExplainOptions, out: Out): number {
  const stages = planStages(plan);
  const s = findStage(stages, plan, key);
  if ('error' in s) {
    if (o.json) out.log(JSON.stringify({ error: s.error, stages: stages.length }, null, 2));
    else out.err(`planproof: ${s.error}`);
    return ExitCode.invalidPlan;
  }
  const v = stageView(plan, stages, s);
  const e = gather(plan, v, s, o.seed);
  if (o.dot !== undefined) {
    const dot = stageDot(v, { failing: e.status === 'differs', failingRanks: e.failingRanks, ...(e.witness.length === 0 ? {} : { failingTensors: e.witness }) });
    if (o.dot === '') out.log(dot.trimEnd());
    else writeFileSync(o.dot, dot);
    if (o.dot === '') return 0;
  }
  if (o.json) {
    out.log(JSON.stringify(e, null, 2));
    return 0;
  }
  const L: string[] = [];
  L.push(`stage ${v.index} of ${v.count}: ${v.logical}  (${plan.file})`);
  L.push('');
  const t = opTables(v);
  L.push(...sideBySide(t.logical, t.parallel));
  L.push('');
  L.push(`assumed input relations (${e.view.inputs.length}; logical inputs: ${v.logicalInputs.join(', ') || 'none'}):`);
  for (const r of v.inputs) L.push(`  ${relLine(r)}`);
  L.push(`output relations to prove (${v.outputs.length}):`);
  for (const r of v.outputs) L.push(`  ${relLine(r)}`);
  L.push('');
  L.push(`outcome: ${e.status === 'proved' ? 'proved' : e.status === 'differs' ? 'the normal forms differ' : 'unknown'}${e.reason === undefined ? '' : ` (${e.reason})`}`);
  if (e.differences.length > 0) {
    L.push('first differing elements (exact terms over the stage inputs):');
    for (const d of e.differences) {
      L.push(`  ${d.what}`);
      L.push(`    parallel           = ${d.parallel}`);
      L.push(`    logical            = ${d.logical}`);
      L.push(`    parallel - logical = ${d.difference}`);
    }
  }
  if (e.differencesNote !== undefined) L.push(`  ${e.differencesNote}`);
  if (e.witness.length > 0) {
    L.push(`numeric witness (inputs drawn with seed ${o.seed}):`);
    for (const m of e.witness) L.push(`  ${witnessLine(m)}`);
  }
  if (o.dot !== undefined && o.dot !== '') L.push(`graph written to ${o.dot} (render: dot -Tsvg ${o.dot} -o stage.svg)`);
  out.log(L.join('\n'));
  return 0;
}
