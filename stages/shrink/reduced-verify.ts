/**
 * Verification through shape reduction (stages/shrink/reduce.ts): the plan is reduced, the reduced
 * plan is verified by the ordinary pipeline, and the report says what was reduced, what kept
 * its size and why. When reduction does not check out, the plan is proved at full shapes and
 * the report says why.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { LoadedPlan } from '../../lineage/load.js';
import type { RawPlan } from '../../plans/raw.js';
import { analyzeReduction, formatReduction, keptDims, reducePlan, ReductionError, type ReducedClass, type ReductionAnalysis } from './reduce.js';
import type { VerifyReport } from '../report.js';
import { proveTensorLevel } from '../engines/tensorlevel/prover.js';
import { decompose } from '../decompose/prove.js';
import { logicalOrder } from '../../sdfg/execute.js';

interface ReductionReport {
  /** True when the proof ran on the reduced plan. */
  readonly ran: boolean;
  /** Why it did not, when it did not. */
  readonly reason?: string;
  readonly reduced: ReducedClass[];
  readonly kept: ReducedClass[];
  /** Where --emit-reduced wrote the reduced plan. */
  readonly emitted?: string;
}

export type ReducedVerifyReport = VerifyReport & { readonly reduction: ReductionReport };

export interface ReduceOptions {
  /** False with --no-reduce. */
  readonly reduce: boolean;
  /** --emit-reduced DIR */
  readonly emitDir?: string;
  /** Proof cache directory; undefined: no cache (passed through to the prover). */
  readonly cacheDir?: string;
  /** False with --no-tensor-level: then no tensor-level pre-pass decides whether to reduce. */
  readonly tensorLevel?: boolean;
}

/** Why the plan was not reduced when tensor level proves every stage (nothing left to shrink for). */
export const REDUCTION_NOT_NEEDED = 'not needed: every stage is proved at tensor level, at full shapes';

/**
 * Runs `prove` on the reduced plan when one checks out, else on the plan itself, and adds the
 * reduction to the report. Stages "unknown (too large)" name the dims that kept their size.
 */
export async function verifyReduced(plan: LoadedPlan, text: string, opts: ReduceOptions, prove: (plan: LoadedPlan, text: string) => Promise<VerifyReport>): Promise<ReducedVerifyReport> {
  // The report's time is the whole verification: the tensor-level pre-pass below can be most
  // of it, and `prove` only times what it runs itself.
  const t0 = performance.now();
  const r = await verifyReducedSteps(plan, text, opts, prove);
  return { ...r, ms: Math.max(r.ms, performance.now() - t0) };
}

async function verifyReducedSteps(plan: LoadedPlan, text: string, opts: ReduceOptions, prove: (plan: LoadedPlan, text: string) => Promise<VerifyReport>): Promise<ReducedVerifyReport> {
  if (!opts.reduce) {
    const r = await prove(plan, text);
    return { ...r, reduction: { ran: false, reason: 'turned off (--no-reduce)', reduced: [], kept: [] } };
  }
  // Reduction only serves stages the element engines prove; tensor level needs none (and its
  // results are kept per stage, so the proof below does not derive them twice). A user who
  // asks for the reduced plan (--emit-reduced) still gets it.
  if (opts.tensorLevel !== false && opts.emitDir === undefined && proveTensorLevel(plan, decompose(plan, logicalOrder(plan))).open.size === 0) {
    const r = await prove(plan, text);
    return { ...r, reduction: { ran: false, reason: REDUCTION_NOT_NEEDED, reduced: [], kept: [] } };
  }
  let analysis: ReductionAnalysis;
  let target = plan;
  let targetText = text;
  let ran = false;
  let reason: string | undefined;
  let emitted: string | undefined;
  try {
    const red = reducePlan(plan, JSON.parse(text) as RawPlan);
    analysis = red?.analysis ?? analyzeReduction(plan);
    if (red === undefined) reason = 'no dim can shrink: every dim with size > 1 is kept (below)';
    else {
      target = red.plan;
      targetText = red.text;
      ran = true;
    }
    if (opts.emitDir !== undefined) {
      mkdirSync(opts.emitDir, { recursive: true });
      emitted = join(opts.emitDir, basename(plan.file).replace(/\.json$/, '') + '.reduced.json');
      writeFileSync(emitted, red === undefined ? text : JSON.stringify(red.raw, null, 1));
    }
  } catch (e) {
    if (!(e instanceof ReductionError)) throw e;
    analysis = analyzeReduction(plan);
    reason = `the reduced plan did not check out, proved at full shapes: ${e.message}`;
  }
  const report = await prove(target, targetText);
  const stages = report.stages.map((s) => {
    if (s.status !== 'unknown' || !/too large/.test(s.reason ?? '')) return s;
    const id = plan.logical.tensors.id(s.logical);
    const kept = id < 0 ? '' : keptDims(analysis, plan, id);
    return { ...s, reason: `not reducible: ${kept === '' ? 'no dim of this tensor is reducible' : kept}; ${s.reason ?? ''}` };
  });
  const summary = report.verdict === 'unknown' && /too large/.test(report.summary) ? report.summary.replace(/: ([^:]*too large)/, ': not reducible ($1)') : report.summary;
  return {
    ...report,
    file: plan.file,
    summary,
    stages,
    reduction: {
      ran,
      ...(reason === undefined ? {} : { reason }),
      reduced: analysis.classes.filter((c) => c.factor > 1),
      kept: analysis.classes.filter((c) => c.factor === 1),
      ...(emitted === undefined ? {} : { emitted }),
    },
  };
}

/** Lines for the human report. */
export function formatReductionReport(r: ReductionReport, verbose: boolean): string {
  if (r.reason === REDUCTION_NOT_NEEDED) return `shape reduction ${REDUCTION_NOT_NEEDED}`;
  const lines = formatReduction({ classes: [...r.reduced, ...r.kept], logicalFactors: [], logicalKept: [], programFactors: [], reduces: r.ran }, verbose ? Infinity : 8);
  lines[0] = `${r.ran ? 'proved at reduced shapes' : 'proved at full shapes'}: ${lines[0] ?? ''}${r.reason === undefined ? '' : `; ${r.reason}`}`;
  if (r.ran) lines.push('  witnesses are at reduced shapes: element b of a dim reduced by lane factor f stands for elements b*f .. b*f+f-1 at full shapes');
  if (r.emitted !== undefined) lines.push(`  reduced plan written to ${r.emitted} (planproof verify it to re-check what was proved)`);
  return lines.join('\n');
}
