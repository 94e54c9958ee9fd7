/**
 * CLI pieces of issue 18: `planproof infer-lineage PLAN -o OUT` and the report section of
 * `verify --infer` (inferred boundaries, the span of the first failure).
 */
import { writeFileSync } from 'node:fs';
import { ExitCode } from '../plans/errors.js';
import { loadPlanText } from '../lineage/load.js';
import { inferClaims, withClaims } from '../stages/infer/infer.js';
import type { BoundaryReport } from '../stages/infer/boundary.js';
import { loadableClaims } from '../stages/infer/hints.js';
import { formatReport } from '../stages/report.js';
import { reportJson } from './report-json.js';

interface Out {
  log(s: string): void;
  err(s: string): void;
}

/** Writes the plan with inferred claims added, each marked `"inferred": true`. */
export function inferLineage(file: string, text: string, outFile: string | undefined, seed: number, json: boolean, out: Out): number {
  const plan = loadPlanText(file, text);
  const t0 = performance.now();
  const inferred = inferClaims(plan, seed);
  const raw = JSON.parse(text) as Record<string, unknown>;
  // Only claims that load together: the written file must load in every command.
  const r = { ...inferred, claims: loadableClaims(file, raw, inferred.claims) };
  const written = withClaims(raw, r.claims);
  const body = JSON.stringify(written, null, 1) + '\n';
  if (outFile === undefined) out.log(body);
  else writeFileSync(outFile, body);
  const kinds = { slice: 0, addend: 0, scaled: 0 };
  for (const c of r.claims) kinds[c.kind]++;
  const summary = { file, out: outFile ?? '(stdout)', unclaimed: r.unclaimed, inferred: r.claims.length, ...kinds, ms: Math.round(performance.now() - t0), ...(r.skipped === undefined ? {} : { skipped: r.skipped }) };
  if (json) out.err(JSON.stringify(summary));
  else {
    out.err(`planproof: ${r.claims.length} of ${r.unclaimed} parallel tensors without lineage got an inferred claim (${kinds.slice} slices, ${kinds.addend} partial addends, ${kinds.scaled} scaled copies)${r.skipped === undefined ? '' : `; ${r.skipped}`}`);
    out.err('  inferred claims are hints: verify proves each before it relies on it, and drops one that does not hold');
  }
  return ExitCode.verified;
}

/** Prints the report of a plan verified with inferred boundaries (stages/pipeline.ts's 'inferred-boundaries' record). */
export function printInferred(r: BoundaryReport, json: boolean, verbose: boolean, out: Out, route: string): void {
  out.log(json ? reportJson(r, { route }) : formatBoundary(r, verbose));
}

function formatBoundary(r: BoundaryReport, verbose: boolean): string {
  const b = r.boundary;
  const lines = [formatReport(r, verbose), ''];
  lines.push(`boundaries  ${b.unclaimed} parallel tensors had no lineage; ${b.inferred} hints inferred, ${b.kept} proved and kept as cut points, ${b.replaced} replaced by another candidate, ${b.dropped} dropped (stages merged across them); ${b.rounds} round(s), inference ${(b.inferMs / 1000).toFixed(2)} s${b.skipped === undefined ? '' : `; ${b.skipped}`}`);
  if (b.asWritten !== undefined) lines.push(`            ${b.asWritten} stage(s) the hints left open were proved on the plan as written, without hints`);
  const byZ3 = r.stages.filter((s) => s.decidedBy === 'z3').length;
  const byNf = r.stages.filter((s) => s.decidedBy === 'normal').length;
  const byTl = r.stages.filter((s) => s.decidedBy === 'tensor').length;
  lines.push(`methods     ${byTl} stage(s) proved at tensor level, ${byNf} by the exact normal form, ${byZ3} by Z3`);
  const s = b.span;
  if (s !== undefined) {
    lines.push(`span        the first failing stage (${s.stage}) runs ${s.ops.length} parallel op(s) between boundaries that hold and the claim that does not:`);
    for (const f of s.from.slice(0, 8)) lines.push(`              from ${f}`);
    if (s.from.length > 8) lines.push(`              ... ${s.from.length - 8} more`);
    lines.push(`              to   ${s.to}`);
    // The suspects first: the span is every op the failing claim depends on back to proved
    // boundaries, often hundreds; the numbers say where in it to look.
    if (s.suspects !== undefined) lines.push(`              look first at (values stop holding at the numeric inputs): ${s.suspects.slice(0, 16).join(', ')}${s.suspects.length > 16 ? `, ... (${s.suspects.length - 16} more)` : ''}`);
    lines.push(`              ops  ${s.ops.slice(0, 16).join(', ')}${s.ops.length > 16 ? `, ... (${s.ops.length - 16} more)` : ''}`);
    if (s.likelyCause !== undefined) lines.push(`            likely cause: ${s.likelyCause}`);
  }
  return lines.join('\n');
}
