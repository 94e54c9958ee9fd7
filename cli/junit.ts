/**
 * JUnit XML of a verify report (`planproof verify --junit FILE`), for CI systems that show
 * which test failed: one <testsuite> per plan, one <testcase> per stage. A stage proved is a
 * passing case; not equivalent is a <failure> carrying the witness values, the diagnosis and
 * the normal-form difference; unknown is <skipped> with the reason (undecided is not a pass,
 * and not a failure with evidence either). The element and attribute set is the one Jenkins'
 * JUnit plugin, GitLab and the Ant JUnit task read; test/reports.test.ts validates the output
 * against test/fixtures/junit.xsd.
 */
import { ranksText, witnessLine, type StageReport, type VerifyReport } from '../stages/report.js';
import { formatIssue, type PlanIssue } from '../plans/errors.js';

/** XML text or attribute value: the five special characters escaped, characters XML 1.0 forbids dropped. */
function xmlEscape(s: string): string {
  return s
    .replace(/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

/** The logical op of a stage as the text report's column shows it. */
export function stageOp(s: StageReport): string {
  return s.op === undefined ? '(contract input)' : `${s.op.id} (${s.op.kind})`;
}

/**
 * The stage's tensor and ranks, "g_w1 on ranks 0,1" (its op is the testcase's classname): never
 * its number, which a stage added or removed upstream changes, so a CI system's history of a
 * test survives such edits (issue 35). Two stages of one tensor and op on the same ranks get
 * " (2)", " (3)" in report order.
 */
function stageNames(stages: readonly StageReport[]): string[] {
  const seen = new Map<string, number>();
  return stages.map((s) => {
    const ranks = s.rankCount === undefined ? `ranks ${ranksText(s.ranks)}` : `${s.rankCount} rank(s)`;
    const name = `${s.logical} on ${ranks}`;
    const key = `${stageOp(s)}\u0000${name}`;
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    return n === 1 ? name : `${name} (${n})`;
  });
}

/** What a failing stage's <failure> body says: the same lines as the text report. */
function failureLines(s: StageReport): string[] {
  const out: string[] = [];
  if (s.op?.loc !== undefined) out.push(`source: ${s.op.loc}`);
  if (s.failingRanks.length > 0) out.push(`failing ranks: ${s.failingRanks.join(', ')}`);
  for (const m of s.witness ?? []) out.push(`witness: ${witnessLine(m)}`);
  if (s.diagnosis !== undefined) out.push(`looks like: ${s.diagnosis}`);
  if (s.reason !== undefined) out.push(`${s.status === 'unknown' ? 'why unknown' : 'proof'}: ${s.reason}`);
  return out;
}

const secs = (ms: number): string => (ms / 1000).toFixed(3);

/** The report as a JUnit XML document. */
export function junitXml(r: VerifyReport): string {
  const failures = r.stages.filter((s) => s.status === 'not_equivalent').length;
  // A plan-level verdict no stage explains (numeric evidence against all-proved stages) must
  // not read as a green suite: it gets a case of its own.
  const planCase = r.verdict !== 'verified' && failures === 0 && !r.stages.some((s) => s.status === 'unknown');
  const skipped = r.stages.filter((s) => s.status === 'unknown').length + (planCase ? 1 : 0);
  const tests = r.stages.length + (planCase ? 1 : 0);
  const a = (k: string, v: string | number): string => ` ${k}="${xmlEscape(String(v))}"`;
  const lines: string[] = ['<?xml version="1.0" encoding="UTF-8"?>'];
  const suiteName = r.name === '' ? r.file : r.name;
  lines.push(`<testsuites${a('name', 'planproof')}${a('tests', tests)}${a('failures', failures)}${a('errors', 0)}${a('time', secs(r.ms))}>`);
  lines.push(`  <testsuite${a('name', suiteName)}${a('tests', tests)}${a('failures', failures)}${a('errors', 0)}${a('skipped', skipped)}${a('time', secs(r.ms))}${a('file', r.file)}>`);
  lines.push('    <properties>');
  const props: [string, string][] = [
    ['verdict', r.verdict],
    ['summary', r.summary],
    ['file', r.file],
    ['seed', String(r.numeric.seed)],
  ];
  for (const [k, v] of props) lines.push(`      <property${a('name', k)}${a('value', v)}/>`);
  lines.push('    </properties>');
  const names = stageNames(r.stages);
  r.stages.forEach((s, i) => {
    const open = `    <testcase${a('classname', stageOp(s))}${a('name', names[i] as string)}${a('time', secs(s.ms))}`;
    if (s.status === 'proved') {
      lines.push(`${open}/>`);
      return;
    }
    lines.push(`${open}>`);
    const body = xmlEscape(failureLines(s).join('\n'));
    if (s.status === 'not_equivalent') {
      const message = s.diagnosis ?? `the two sides differ on ${s.logical}`;
      lines.push(`      <failure${a('type', 'not_equivalent')}${a('message', message)}>${body}</failure>`);
    } else lines.push(`      <skipped${a('message', `unknown: ${s.reason ?? 'undecided'}`)}>${body}</skipped>`);
    lines.push('    </testcase>');
  });
  if (planCase) {
    lines.push(`    <testcase${a('classname', 'planproof')}${a('name', 'plan verdict')}${a('time', '0.000')}>`);
    lines.push(`      <skipped${a('message', `${r.verdict}: ${r.summary}`)}/>`);
    lines.push('    </testcase>');
  }
  lines.push(`    <system-out>${xmlEscape(`verdict ${r.verdict}: ${r.summary}`)}</system-out>`);
  lines.push('  </testsuite>');
  lines.push('</testsuites>');
  return lines.join('\n') + '\n';
}

/**
 * An invalid plan as JUnit: one testcase `load` with an <error> listing every issue, so a CI
 * step reading the file shows why nothing was proved (the exit code is 2).
 */
export function junitInvalid(file: string, issues: readonly PlanIssue[]): string {
  const a = (k: string, v: string | number): string => ` ${k}="${xmlEscape(String(v))}"`;
  const first = issues[0];
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites${a('name', 'planproof')}${a('tests', 1)}${a('failures', 0)}${a('errors', 1)}>`,
    `  <testsuite${a('name', file)}${a('tests', 1)}${a('failures', 0)}${a('errors', 1)}${a('skipped', 0)}${a('file', file)}>`,
    '    <properties>',
    `      <property${a('name', 'verdict')}${a('value', 'invalid')}/>`,
    '    </properties>',
    `    <testcase${a('classname', 'planproof')}${a('name', 'load')}${a('time', '0.000')}>`,
    `      <error${a('type', 'invalid_plan')}${a('message', first === undefined ? 'invalid plan' : formatIssue(file, first))}>${xmlEscape(issues.map((i) => formatIssue(file, i)).join('\n'))}</error>`,
    '    </testcase>',
    '  </testsuite>',
    '</testsuites>',
    '',
  ].join('\n');
}
