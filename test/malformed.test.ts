/**
 * The malformed-plan corpus: every fixture in test/fixtures/invalid/ must be rejected as an
 * invalid plan (exit 2) with a message that names where the mistake is and why, and never
 * with a stack trace. manifest.json lists each fixture with the substrings its stderr must hold.
 */
import { strict as assert } from 'node:assert';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { FIXTURES, ROOT, runCli } from './helpers.js';
import { FULL, fullUnless } from './optional.js';

interface Entry {
  readonly file: string;
  readonly category: string;
  /** Substrings that must all appear in stderr: a location and a key word of the reason. */
  readonly expect: readonly string[];
  /** Substrings that must not appear: misleading follow-on errors. */
  readonly forbid?: readonly string[];
  /** Run only as a child process with a time limit: in process it could block the whole run. */
  readonly isolate?: boolean;
}

const DIR = `${FIXTURES}invalid/`;
const BIN = `${ROOT}dist/cli/main.js`;
const STACK_LINE = /^\s+at .+:\d+:\d+/m;
/** What counts as naming a location: a JSON path, an op / tensor / collective id, a rank, a line. */
const LOCATION = /\$[.[:]|op '|tensor '|collective '|rank \d|line \d+, column \d+|end of file/;
/** A plan that needs more than this to be rejected is a denial of service, not a check. */
const PROCESS_TIME_LIMIT_MS = 10_000;

const manifest = JSON.parse(readFileSync(`${DIR}manifest.json`, 'utf8')) as Entry[];
const entry = (file: string): Entry => {
  const e = manifest.find((m) => m.file === file);
  if (e === undefined) throw new Error(`${file} is not in the manifest`);
  return e;
};

function assertRejected(file: string, code: number | null, stdout: string, stderr: string, expect: readonly string[], forbid: readonly string[] = []): void {
  const shown = `--- stderr:\n${stderr}--- stdout (head):\n${stdout.slice(0, 800)}`;
  assert.doesNotMatch(stderr, STACK_LINE, `${file}: stderr has a stack trace\n${shown}`);
  assert.doesNotMatch(stderr, /internal error/, `${file}: the loader crashed\n${shown}`);
  assert.ok(code === 2, `${file} was not rejected as an invalid plan: exit ${String(code)}, wanted 2\n${shown}`);
  for (const s of expect) assert.ok(stderr.includes(s), `${file}: stderr lacks ${JSON.stringify(s)}\n${shown}`);
  for (const s of forbid) assert.ok(!stderr.includes(s), `${file}: stderr has the misleading ${JSON.stringify(s)}\n${shown}`);
}

function spawnVerify(file: string, timeout = PROCESS_TIME_LIMIT_MS): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [BIN, 'verify', `${DIR}${file}`], { encoding: 'utf8', timeout, killSignal: 'SIGKILL' });
}

describe('malformed plans', () => {
  describe('the corpus', () => {
    it('has at least 30 fixtures', () => {
      assert.ok(manifest.length >= 30, `only ${manifest.length} fixtures`);
    });
    it('lists every fixture file exactly once, and only files that exist', () => {
      const files = readdirSync(DIR)
        .filter((f) => f.endsWith('.json') && f !== 'manifest.json')
        .sort();
      assert.deepEqual(
        manifest.map((m) => m.file).sort(),
        files,
      );
    });
    it('expects a location and a reason for every fixture', () => {
      for (const m of manifest) {
        assert.ok(m.category.length > 0, `${m.file}: no category`);
        assert.ok(m.expect.length >= 1, `${m.file}: nothing expected`);
        assert.ok(
          m.expect.some((s) => LOCATION.test(s)),
          `${m.file}: no expected substring names a location (JSON path, op, tensor, rank or line): ${JSON.stringify(m.expect)}`,
        );
      }
    });
    it('covers every category of mistake', () => {
      const cats = new Set(manifest.map((m) => m.category));
      for (const c of ['bad-json', 'schema', 'cycle', 'dangling', 'ssa', 'shape', 'lineage', 'op', 'attr', 'collective', 'template', 'size', 'duplicate', 'mesh']) {
        assert.ok(cats.has(c), `no fixture of category ${c}`);
      }
    });
  });

  describe('verify (in process) exits 2 with a located reason and no stack trace', () => {
    for (const m of manifest) {
      if (m.isolate === true) continue;
      it(`${m.category}: ${m.file}`, async () => {
        let r: { code: number; stdout: string; stderr: string };
        try {
          r = await runCli(['verify', `${DIR}${m.file}`]);
        } catch (e) {
          assert.fail(`${m.file}: the CLI threw instead of reporting an invalid plan (a loader crash): ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
        }
        assertRejected(m.file, r.code, r.stdout, r.stderr, m.expect, m.forbid);
      });
    }
  });

  describe('verify as a real process', () => {
    const sample = [
      'json-truncated.json',
      'json-trailing-comma.json',
      'json-empty.json',
      'json-not-object.json',
      'json-comment.json',
      'schema-bad-format.json',
      'cycle-parallel-deadlock.json',
      'lineage-gap-rows.json',
      'size-mesh-2p30.json',
      'size-expr-over-1000-chars.json',
    ];
    // npm test spawns two processes; test:full the whole sample.
    for (const [k, file] of sample.entries()) {
      it(`exits 2 without a stack trace: ${file}${fullUnless(k < 2)}`, () => {
        const r = spawnVerify(file);
        assert.equal(r.error, undefined, `${file}: ${String(r.error)}`);
        assertRejected(file, r.status, r.stdout, r.stderr, entry(file).expect, entry(file).forbid);
      });
    }
    for (const m of manifest.filter((x) => x.isolate === true)) {
      it(`rejects ${m.file} (${m.category}) within ${PROCESS_TIME_LIMIT_MS / 1000} s${FULL}`, () => {
        const t0 = Date.now();
        const r = spawnVerify(m.file);
        const ms = Date.now() - t0;
        assert.ok(r.signal === null, `${m.file}: still running after ${ms} ms (killed with ${String(r.signal)}); a small plan must be rejected promptly`);
        assertRejected(m.file, r.status, r.stdout, r.stderr, m.expect, m.forbid);
      });
    }
  });

  describe('verify --json', () => {
    it('prints verdict "invalid" and issues that each carry a path', async () => {
      const file = 'coll-count-mismatch.json';
      const r = await runCli(['verify', `${DIR}${file}`, '--json']);
      assert.equal(r.code, 2);
      const j = JSON.parse(r.stdout) as { verdict: string; file: string; issues: { path: string; where?: string; message: string }[] };
      assert.equal(j.verdict, 'invalid');
      assert.equal(j.file, `${DIR}${file}`);
      assert.ok(j.issues.length >= 1);
      for (const i of j.issues) {
        assert.equal(typeof i.path, 'string');
        assert.match(i.path, /^\$/, `issue without a JSON path: ${JSON.stringify(i)}`);
        assert.ok(i.message.length > 0);
      }
      assert.ok(j.issues.some((i) => i.path === '$.parallel.programs[0].ops[2]' && /do not match/.test(i.message)), JSON.stringify(j.issues));
    });
  });
});
