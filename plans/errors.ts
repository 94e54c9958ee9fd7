/**
 * Plan errors: every rejection names the file, a location (JSON path, or op / tensor / rank)
 * and a one-line reason. The CLI maps them to exit code 2; nothing here ever throws a bare
 * Error at a user.
 */

/** Exit codes of the CLI (documented in README). */
export const ExitCode = {
  verified: 0,
  notEquivalent: 1,
  invalidPlan: 2,
  unknown: 3,
  /** Usage errors and internal faults; never used for a verdict. */
  usage: 4,
} as const;

export interface PlanIssue {
  /** A JSON path such as `$.logical.ops[3].inputs[1]`, or '' when the issue is global. */
  readonly path: string;
  /** Optional entity named by the issue, e.g. `op 'fc1'`, `rank 3 tensor 'g'`. */
  readonly where?: string;
  readonly message: string;
}

/** A plan that cannot be accepted. Carries every issue found in the failing phase. */
export class PlanError extends Error {
  readonly file: string;
  readonly issues: readonly PlanIssue[];
  constructor(file: string, given: readonly PlanIssue[]) {
    const issues = given.map((i): PlanIssue => (i.where === undefined ? { ...i, path: clip(i.path), message: clip(i.message) } : { ...i, path: clip(i.path), where: clip(i.where), message: clip(i.message) }));
    super(issues.map((i) => formatIssue(file, i)).join('\n'));
    this.name = 'PlanError';
    this.file = file;
    this.issues = issues;
  }
}

export function formatIssue(file: string, i: PlanIssue): string {
  const loc = [i.path, i.where].filter((s) => s !== undefined && s !== '').join(' ');
  return `${file}: ${loc === '' ? '' : loc + ': '}${i.message}`;
}

/**
 * Collects issues during one validation phase; `throwIfAny` ends the phase. A cap keeps a
 * badly broken 100k-op plan from printing a million lines.
 */
/**
 * Echoed input is cut: an issue never repeats megabytes of a hostile file (a 50 MB unknown key
 * was echoed whole into stderr). Paths, places and messages are each cut to `max` characters.
 */
export function clip(s: string, max = 1000): string {
  return s.length <= max ? s : `${s.slice(0, max)}... (${s.length.toLocaleString('en-US')} characters)`;
}

export class IssueSink {
  readonly issues: PlanIssue[] = [];
  dropped = 0;
  constructor(
    readonly file: string,
    readonly cap = 50,
  ) {}
  add(path: string, message: string, where?: string): void {
    if (this.issues.length >= this.cap) {
      this.dropped++;
      return;
    }
    this.issues.push(where === undefined ? { path: clip(path), message: clip(message) } : { path: clip(path), where: clip(where), message: clip(message) });
  }
  get size(): number {
    return this.issues.length + this.dropped;
  }
  /**
   * Whether the sink holds as many issues as it shows: a per-rank check can stop here (its
   * cost must not grow with the rank count on a plan already refused), and says so.
   */
  get full(): boolean {
    if (this.issues.length < this.cap) return false;
    this.stopped = true;
    return true;
  }
  private stopped = false;
  throwIfAny(): void {
    if (this.size === 0) return;
    const all =
      this.dropped > 0
        ? [...this.issues, { path: '', message: `... and ${this.dropped} more issue(s)${this.stopped ? ' (checking stopped there: fix these first)' : ''}` }]
        : this.stopped
          ? [...this.issues, { path: '', message: '... and perhaps more (checking stopped there: fix these first)' }]
          : this.issues;
    throw new PlanError(this.file, all);
  }
}

/** Builds `$.a.b[3]` style paths. */
export function jpath(base: string, ...parts: (string | number)[]): string {
  let p = base;
  for (const part of parts) {
    if (typeof part === 'number') p += `[${part}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(part)) p += `.${part}`;
    else p += `[${JSON.stringify(part)}]`;
  }
  return p;
}
