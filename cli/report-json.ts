/**
 * What `verify --json` prints (and `merge`, `demo`): the report object (stages/report.ts
 * VerifyReport) with `schemaVersion` and, for a not_equivalent verdict, `firstFailing`; an
 * invalid plan; a usage error. All three follow cli/report-v1.schema.json, published as
 * `planproof/schema/report-v1.schema.json` (docs/reports.md, "The --json report").
 */
import type { PlanIssue } from '../plans/errors.js';
import type { StageReport, VerifyReport } from '../stages/report.js';

/** The version of cli/report-v1.schema.json the output follows. */
export const REPORT_SCHEMA_VERSION = 1;

/** The first failing stage of a not_equivalent verdict, in a few fields a CI step can read. */
interface FirstFailing {
  /** Its number in `stages` (1-based). */
  readonly stage: number;
  readonly tensor: string;
  /** The logical op producing the tensor; null for a contract input. */
  readonly op: { id: string; kind: string; loc?: string } | null;
  /** The ranks shown wrong. */
  readonly ranks: number[];
  /** The diagnosis, or the proof's difference where no diagnosis fits. */
  readonly cause: string;
}

/** The first not_equivalent stage of the report, as FirstFailing (undefined when there is none). */
function firstFailing(r: Pick<VerifyReport, 'stages'>): FirstFailing | undefined {
  const s: StageReport | undefined = r.stages.find((x) => x.status === 'not_equivalent');
  if (s === undefined) return undefined;
  return { stage: s.index, tensor: s.logical, op: s.op ?? null, ranks: s.failingRanks, cause: (s.diagnosisRule === 'none' ? undefined : s.diagnosis) ?? s.reason ?? `the two sides differ on ${s.logical}` };
}

/**
 * A verify report as printed by --json: schemaVersion first, firstFailing after the summary
 * when the verdict is not_equivalent, then the rest of the report and `extra` (the sections a
 * path adds: reduction, perStageFallback, demo).
 */
export function reportJson(r: VerifyReport, extra: Readonly<Record<string, unknown>> = {}): string {
  const { file, name, verdict, summary, ...rest } = r;
  const first = verdict === 'not_equivalent' ? firstFailing(r) : undefined;
  return JSON.stringify({ schemaVersion: REPORT_SCHEMA_VERSION, file, name, verdict, summary, ...(first === undefined ? {} : { firstFailing: first }), ...rest, ...extra }, null, 2);
}

/** An invalid plan as printed by --json (exit 2). */
export function invalidJson(file: string, issues: readonly PlanIssue[]): string {
  return JSON.stringify({ schemaVersion: REPORT_SCHEMA_VERSION, verdict: 'invalid', file, issues }, null, 2);
}

/** A refused command line as printed by --json (exit 4). */
export function usageJson(error: string): string {
  return JSON.stringify({ schemaVersion: REPORT_SCHEMA_VERSION, verdict: 'usage_error', error }, null, 2);
}
