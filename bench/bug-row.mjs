// One case of bench/bugs-at-scale.sh and bench/bugs-405b.sh: reads the verify --json report of an
// injected plan and prints "verdict|where" for the markdown row, checked against the catalog's
// expected detection (plans/gen/bugs.ts, `detect`): a witness (NOT EQUIVALENT at a stage), or a
// refusal at load (exit 2) whose message gives the expected reason. Anything else is marked
// unexpected, so a sweep shows at a glance which cases miss their detection.
// Usage: node bench/bug-row.mjs CLI BUG REPORT.json STDERR
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { URL, pathToFileURL } from 'node:url';

const [cli, bugId, reportFile, errFile] = process.argv.slice(2);
// The catalog of the build that verified (CLI=... may be another build than this tree's).
const { bugById, detectionOf, LOAD_MESSAGE } = await import(new URL('../plans/gen/bugs.js', pathToFileURL(resolve(cli))).href);
const bug = bugById(bugId);
const d = bug === undefined ? { at: 'witness' } : detectionOf(bug);
const cell = (s) => s.replace(/[\n|]/g, ' ');
let r;
try {
  r = JSON.parse(readFileSync(reportFile, 'utf8'));
} catch {
  process.stdout.write(`no report|${cell(readFileSync(errFile, 'utf8').slice(0, 160))}`);
  process.exit(0);
}
if (r.verdict === 'invalid') {
  const issues = r.issues ?? [];
  const first = issues[0] ?? {};
  const asExpected = d.at === 'load' && issues.some((i) => LOAD_MESSAGE[d.reason].test(i.message ?? ''));
  const v = asExpected ? `refused at load (expected: ${d.reason})` : `**refused at load, unexpected** (expected: ${d.at === 'load' ? d.reason : 'a witness'})`;
  process.stdout.write(`${v}|${cell(`${first.where ?? first.path ?? ''}: ${first.message ?? ''}`.slice(0, 160))}`);
  process.exit(0);
}
const st = r.stages ?? [];
const s = st.find((x) => x.status === 'not_equivalent') ?? st.find((x) => x.status !== 'proved');
const where = s === undefined ? '' : `${s.index} \`${s.logical}\``;
let v = r.verdict === 'not_equivalent' ? '**NE**' : r.verdict;
if (d.at === 'load') v += ` (unexpected: expected refused at load, ${d.reason})`;
else if (r.verdict !== 'not_equivalent') v += ' (unexpected: expected a witness)';
process.stdout.write(`${v}|${cell(where)}`);
