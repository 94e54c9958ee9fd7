/** The human-readable verification report: for the person who has to fix the bug. */
import type { Mismatch } from './witness/numeric.js';
import type { Cause } from './witness/diagnose.js';
import type { DecidedBy } from './decompose/prove.js';

/** The decision procedure a run used: the exact normal form, or Z3 alone (a cross-check). */
export type Engine = 'normal' | 'z3';

/** A plan's or a stage's outcome (stages/verify.ts's module comment says the evidence each needs). */
export type Verdict = 'verified' | 'not_equivalent' | 'unknown';

/** How the text and HTML reports name what proved a stage (StageReport.decidedBy). */
export const DECIDED_BY_TEXT: Readonly<Record<'normal' | DecidedBy, string>> = {
  normal: 'normal form',
  tensor: 'tensor level',
  z3: 'by Z3',
  constants: "with the plan's constants",
  'per-stage': 'per stage, on a reduced copy',
};

export interface StageReport {
  readonly index: number;
  readonly logical: string;
  /** Producing logical op id and kind, or undefined for a contract input. */
  readonly op?: { id: string; kind: string; loc?: string };
  readonly ranks: number[];
  readonly status: 'proved' | 'not_equivalent' | 'unknown';
  readonly reason?: string;
  readonly failingRanks: number[];
  /** Concrete differing values (first few), for not_equivalent stages. */
  readonly witness?: Mismatch[];
  /** A diagnosis of the witness, when one fits. */
  readonly diagnosis?: string;
  /** The rule that gave it (stages/witness/diagnose.ts), 'none' where no rule fits. */
  readonly diagnosisRule?: Cause;
  /** The ranks the diagnosis names wrong: each shown wrong by the values. */
  readonly diagnosisRanks?: number[];
  readonly logicalOps: number;
  readonly parallelOps: number;
  readonly ms: number;
  /**
   * Which method proved the stage: the exact normal form, tensor level, or the record of the
   * per-stage portfolio (stages/portfolio.ts) that proved what the proofs left open.
   */
  readonly decidedBy?: 'normal' | DecidedBy;
  /** Stage number (1-based) whose proof covers this one: equal canonical forms (stages/cache/dedup.ts). */
  readonly coveredBy?: number;
  /** The covering proof was read from the proof cache. */
  readonly cached?: boolean;
  /**
   * Stages decomposed per template (plans past the per-rank stage bound, stages/decompose/template.ts):
   * `ranks` is then empty; `rankCount` is how many distinct ranks hold obligations, and
   * `templates` the (program, tensor, ranks) families they come in.
   */
  readonly rankCount?: number;
  readonly templates?: { program: string; tensor: string; ranks: number }[];
  /** Elements the stage's tensors hold at full shapes (a lower bound when `elementsExact` is false). */
  readonly elements?: number;
  readonly elementsExact?: boolean;
  /** Per-template stages proved rank by rank: classes of ranks with identical parts (each proved, or covered by an equal canonical form). */
  readonly rankClasses?: number;
}

/** What verifyPlan returns: the verdict, every stage's result, the numeric run and timings. */
export interface VerifyReport {
  readonly file: string;
  readonly name: string;
  readonly verdict: Verdict;
  readonly summary: string;
  readonly stages: StageReport[];
  readonly numeric: { evaluated: boolean; seed: number; claimsChecked: number; mismatches: number; reason?: string };
  /** Semantics approximations used by this plan's ops (none so far). */
  readonly approximations: string[];
  readonly ms: number;
  /** Set when a decision procedure other than the normal form was used. */
  readonly engine?: Engine;
  /** Stage deduplication: stages, distinct canonical forms, proofs run, proofs read from the cache. */
  readonly proofs?: { stages: number; distinct: number; run: number; cached: number; tensorLevel?: number };
  /** Set when stages were decomposed per template instead of rank by rank (stages/decompose/template.ts). */
  readonly decomposition?: { path: 'template'; entries: number; bound: number; reason: string };
  /**
   * Where the time went, in milliseconds per phase, in the order they ran (the CLI adds
   * `load` and `reduction`): so a slow run says whether stage proofs, the numeric runs, the
   * witness search or a fallback took it.
   */
  readonly phases?: Record<string, number>;
  /** Set when the run's time limit (--time-limit) stopped work: what was left is "unknown". */
  readonly timeLimit?: { seconds: number; reached: boolean };
  /** The plan's values read into Python (Plan.specialized): a verdict holds for these values only. */
  readonly specialized?: readonly string[];
}

/** "0-7" for a run of consecutive ranks, else "0,2,5". */
export function ranksText(r: readonly number[]): string {
  if (r.length > 2 && r.every((x, i) => i === 0 || x === (r[i - 1] as number) + 1)) return `${r[0]}-${r[r.length - 1]}`;
  return r.join(',');
}

function num(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toPrecision(8);
}

/** One witness value as a sentence (the text, JUnit and HTML reports share it). */
export function witnessLine(m: Mismatch): string {
  if (m.domain !== undefined) return `rank ${m.rank} '${m.tensor}' holds no value where logical ${m.logical}[${m.element.join(', ')}] = ${num(m.expected)}: ${m.domain} (certified by interval arithmetic)`;
  const line = valuesLine(m);
  if (m.certified === undefined) return line;
  const iv = ([lo, hi]: readonly [number, number]): string => `[${lo.toPrecision(17)}, ${hi.toPrecision(17)}]`;
  return `${line} (certified by interval arithmetic: ${iv(m.certified.parallel)} against ${iv(m.certified.logical)}, disjoint; the difference is under the numeric tolerance)`;
}

function valuesLine(m: Mismatch): string {
  const at = `${m.logical}[${m.element.join(', ')}]`;
  switch (m.kind) {
    case 'complete':
      return `rank ${m.rank} '${m.tensor}' holds ${num(m.parallel)} where logical ${at} = ${num(m.expected)}`;
    case 'partial':
      return `the addends of ${at} (e.g. rank ${m.rank} '${m.tensor}') combine to ${num(m.parallel)}, logical = ${num(m.expected)}`;
    case 'replica':
      return `rank ${m.rank} '${m.tensor}' holds ${num(m.parallel)} for ${at} but another replica of the same addend holds ${num(m.expected)}`;
  }
}

const mark = { proved: 'proved', not_equivalent: 'NOT EQUIVALENT', unknown: 'unknown' } as const;

/** The report as text: verdict, stages (failing ones always, proved ones when verbose), witness values. */
export function formatReport(r: VerifyReport, verbose = false): string {
  const out: string[] = [];
  out.push(`plan        ${r.name === '' ? '(unnamed)' : r.name}  (${r.file})`);
  out.push(
    r.decomposition === undefined
      ? `stages      ${r.stages.length}, one per logical tensor that ranks compute (every replica on every rank is proved)`
      : `stages      ${r.stages.length}, one per logical tensor that ranks compute, decomposed per template: ${r.decomposition.reason}`,
  );
  const tensor = r.stages.filter((s) => s.decidedBy === 'tensor').length;
  out.push(`engine      ${r.engine === 'z3' ? 'Z3 alone (cross-check; exp identities not built in)' : tensor > 0 ? `tensor-level relations (${tensor} stages), exact normal form for the others` : 'exact normal form'}`);
  out.push(
    `numeric     ${r.numeric.evaluated ? `${r.numeric.claimsChecked} claims evaluated at random inputs (seed ${r.numeric.seed}): ${r.numeric.mismatches === 0 ? 'all agree' : `${r.numeric.mismatches} differ`}` : `not evaluated (${r.numeric.reason ?? ''})`}`,
  );
  // Stages left unattempted after a certified refutation say nothing about the plan: one line
  // counts them (a llama mutant listed 80 of them after its witness).
  // So do undecided stages after the first failing one of a refuted plan (their consumers of
  // a wrong value; a refuted nanoGPT step listed 30 of them stopped at the rounds' limit).
  const firstFail = r.verdict === 'not_equivalent' ? r.stages.find((s) => s.status === 'not_equivalent')?.index : undefined;
  const skipped = (s: StageReport): boolean => !verbose && s.status === 'unknown' && (/the plan is already refuted at stage \d+ \(a certified witness\)/.test(s.reason ?? '') || (firstFail !== undefined && s.index > firstFail));
  const show = (s: StageReport): boolean => !skipped(s) && (verbose || s.status !== 'proved' || r.stages.length <= 40);
  // Column widths from the rows shown, so a long label or a 4-digit stage number never
  // shifts the columns after it; labels past MAX_COL are cut in the middle.
  const shown = r.stages.filter(show);
  const opText = (s: StageReport): string => fit(s.op === undefined ? '(contract input)' : `${s.op.id} (${s.op.kind})`);
  const w = Math.max(6, ...shown.map((s) => fit(s.logical).length));
  const wi = Math.max(3, ...shown.map((s) => String(s.index).length));
  const wo = Math.max(10, ...shown.map((s) => opText(s).length));
  // Per-template stages (stages/decompose/template.ts) give a count, not a list.
  const rk = (s: StageReport): string => (s.rankCount === undefined ? ranksText(s.ranks) : `${s.rankCount} rank(s)`);
  const wr = Math.max(5, ...shown.map((s) => rk(s).length));
  out.push('');
  out.push(`  ${'#'.padEnd(wi)} ${'tensor'.padEnd(w)}  ${'logical op'.padEnd(wo)} ${'ranks'.padEnd(wr)} result`);
  let hidden = 0;
  let notAttempted = 0;
  for (const s of r.stages) {
    if (skipped(s)) notAttempted++;
    else if (!show(s)) hidden++;
    if (!show(s)) continue;
    out.push(`  ${String(s.index).padStart(wi)} ${fit(s.logical).padEnd(w)}  ${opText(s).padEnd(wo)} ${rk(s).padEnd(wr)} ${mark[s.status]}${s.decidedBy === undefined || s.decidedBy === 'normal' ? '' : ` (${DECIDED_BY_TEXT[s.decidedBy]})`}${s.coveredBy === undefined ? '' : ` (same canonical stage as #${s.coveredBy})`}${s.cached === true ? ' (from the proof cache)' : ''}`);
    if (s.status === 'proved') continue;
    if (s.op?.loc !== undefined) out.push(`        source: ${s.op.loc}`);
    if (s.templates !== undefined && verbose) out.push(`        obligations: ${s.templates.map((t) => `'${t.tensor}' of ${t.program} on ${t.ranks} rank(s)`).join('; ')}`);
    if (s.failingRanks.length > 0) out.push(`        failing ranks: ${s.failingRanks.join(', ')}`);
    for (const m of s.witness ?? []) out.push(`        witness: ${witnessLine(m)}`);
    if (s.diagnosis !== undefined) out.push(`        looks like: ${s.diagnosis}`);
    if (s.reason !== undefined) out.push(`        ${s.status === 'unknown' ? 'why unknown' : 'proof'}: ${s.reason}`);
  }
  if (hidden > 0) out.push(`  ... ${hidden} proved stage(s) not shown (--verbose lists them)`);
  if (notAttempted > 0) out.push(`  ... ${notAttempted} later stage(s) left open: the plan is already refuted (--verbose lists them with their reasons)`);
  out.push('');
  const head = r.verdict === 'verified' ? 'VERIFIED' : r.verdict === 'not_equivalent' ? 'NOT EQUIVALENT' : 'UNKNOWN';
  const sp = r.specialized ?? [];
  out.push(`verdict     ${head}${sp.length > 0 && r.verdict !== 'unknown' ? ' (for the values the program read into Python)' : ''}: ${r.summary} (${(r.ms / 1000).toFixed(2)} s)`);
  for (const s of sp.slice(0, 10)) out.push(`            specialized: ${s}`);
  if (sp.length > 10) out.push(`            specialized: ... ${sp.length - 10} more`);
  if (r.verdict === 'not_equivalent') out.push(`            witness inputs: the contract inputs drawn uniformly from [-1, 1) with seed ${r.numeric.seed} (planproof verify --seed ${r.numeric.seed} reproduces them)`);
  if (r.phases !== undefined) out.push(`time        ${formatPhases(r.phases)}`);
  if (r.timeLimit?.reached === true) out.push(`            the run's time limit of ${r.timeLimit.seconds} s (--time-limit) was reached: stages left undecided are unknown`);
  return out.join('\n');
}

/** "stages 1.20 s, witnessSearch 0.31 s, ...": phases of 10 ms or more, the largest first. */
function formatPhases(p: Readonly<Record<string, number>>): string {
  const shown = Object.entries(p).filter(([, ms]) => ms >= 10).sort((a, b) => b[1] - a[1]);
  return shown.length === 0 ? 'every phase under 10 ms' : shown.map(([k, ms]) => `${k} ${(ms / 1000).toFixed(2)} s`).join(', ');
}

/** Widest a table cell gets; longer labels keep their start and end. */
const MAX_COL = 48;

function fit(x: string): string {
  if (x.length <= MAX_COL) return x;
  const half = (MAX_COL - 1) >> 1;
  return `${x.slice(0, half)}…${x.slice(x.length - (MAX_COL - 1 - half))}`;
}
