#!/usr/bin/env node
/**
 * The project's two test commands (README, "Set up on a fresh machine"; docs/benchmarks.md,
 * "Test suite"):
 *   npm test            build, lint, then every mocha test not tagged @full (the fast suite);
 *   npm run test:full   build, lint, then every test.
 * Build and lint run side by side (the machine has 2 cores and each is one thread). The full
 * suite runs under c8: coverage is reported, and its threshold checked, only after a run in
 * which every test passed, so a failing or stopped run is never reported as a coverage problem.
 * The fast suite runs without it (c8 costs it about 20 s; CI runs both).
 * Arguments after the mode go to mocha (for example `-- --grep capture`).
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const mode = process.argv[2];
if (mode !== 'fast' && mode !== 'full') {
  console.error('usage: node tools/run-tests.mjs fast|full [mocha arguments...]');
  process.exit(2);
}
const extra = process.argv.slice(3);
const bin = (name) => join(root, 'node_modules', '.bin', name);
const LINES = 85;

/** Runs a command with the terminal as its output; resolves to its exit code. */
function run(cmd, args, opts = {}) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd: root, stdio: 'inherit', ...opts });
    p.on('error', (e) => {
      console.error(`${cmd}: ${e.message}`);
      resolve(127);
    });
    p.on('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
  });
}

/** How many tests mocha would run with these arguments (a dry run: nothing executes). */
function count(args) {
  return new Promise((resolve) => {
    let out = '';
    const p = spawn(bin('mocha'), ['--dry-run', '--reporter', 'json', ...args], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
    p.stdout.on('data', (d) => (out += d));
    p.on('exit', () => {
      try {
        resolve(JSON.parse(out).stats.tests);
      } catch {
        resolve(undefined);
      }
    });
  });
}

const t0 = Date.now();
const secs = (t) => `${((Date.now() - t) / 1000).toFixed(0)} s`;
const [built, linted] = await Promise.all([run(bin('tsc'), ['-p', 'tsconfig.json']), run(bin('eslint'), ['.'])]);
if (built !== 0 || linted !== 0) {
  console.error(`${built !== 0 ? 'build' : 'lint'} failed: no test run`);
  process.exit(1);
}
console.log(`build and lint: ${secs(t0)}`);
const FAST = ['--grep', '@full', '--invert'];
if (mode === 'full') {
  const [fast, all] = await Promise.all([count(FAST), count([])]);
  console.log(`test:full runs ${all ?? '?'} tests (npm test runs ${fast ?? '?'} of them; the other ${all !== undefined && fast !== undefined ? all - fast : '?'} are tagged @full)`);
}
const t1 = Date.now();
const tested = mode === 'fast' ? await run(bin('mocha'), [...FAST, ...extra]) : await run(bin('c8'), ['--reporter', 'none', bin('mocha'), ...extra]);
console.log(`mocha (${mode}): ${secs(t1)}; total ${secs(t0)}`);
if (tested !== 0 || mode === 'fast') process.exit(tested);
// Coverage of a complete, passing run only: a filtered run (extra arguments) checks nothing.
await run(bin('c8'), ['report']);
if (extra.length === 0) process.exit(await run(bin('c8'), ['check-coverage', '--lines', String(LINES)]));
