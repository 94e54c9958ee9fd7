/**
 * Tests that need a system package (Debian's chromium, libxml2-utils, tmux, python3-torch,
 * python3-junitparser) call `needs` first. Where the package is absent the test is skipped with
 * a one-line reason naming it, and test/reporter.ts counts the skips by reason at the end of
 * the run; under `CI=true` the test fails instead, because CI installs every one of them
 * (tools/install-optional.sh, the one list, which .ci/run and the README both use).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { CHROMIUM } from '../bench/browser.js';

/** A system package a test can need, and how to tell whether it is here. */
interface Tool {
  /** The Debian package that provides it. */
  readonly pkg: string;
  readonly present: () => boolean;
}

const runs = (cmd: string, args: string[]): boolean => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;

export const TOOLS = {
  xmllint: { pkg: 'libxml2-utils', present: () => runs('xmllint', ['--version']) },
  chromium: { pkg: 'chromium', present: () => existsSync(CHROMIUM) },
  tmux: { pkg: 'tmux', present: () => runs('tmux', ['-V']) },
  python3: { pkg: 'python3', present: () => runs('/usr/bin/python3', ['-c', 'pass']) },
  torch: { pkg: 'python3-torch', present: () => runs('/usr/bin/python3', ['-c', 'import torch, torch.distributed']) },
  junitparser: { pkg: 'python3-junitparser', present: () => runs('/usr/bin/python3', ['-c', 'import junitparser']) },
} as const satisfies Record<string, Tool>;

// PLANPROOF_TEST_HIDE=chromium,python3-torch,... treats those packages as absent, to see on a
// machine that has them what a fresh one without them does.
const hidden = new Set((process.env['PLANPROOF_TEST_HIDE'] ?? '').split(',').filter((x) => x !== ''));
const seen = new Map<Tool, boolean>();
const present = (t: Tool): boolean => {
  let p = seen.get(t);
  if (p === undefined) seen.set(t, (p = !hidden.has(t.pkg) && t.present()));
  return p;
};

/** Skip reasons by the runnable (test or suite) they were given on; read by test/reporter.ts. */
const REASONS = Symbol.for('planproof.test.skipReasons');
type Reasons = WeakMap<object, string>;
const g = globalThis as { [REASONS]?: Reasons };
export const skipReasons = (): Reasons => (g[REASONS] ??= new WeakMap());

const INSTALL = 'bash tools/install-optional.sh';

/**
 * Skips the calling test (in `it`) or suite (in `before`) when a package is absent, naming it;
 * under CI=true throws instead. Call it with the mocha context (`function () { needs(this, ...) }`).
 */
export function needs(ctx: Mocha.Context, ...tools: Tool[]): void {
  const missing = tools.filter((t) => !present(t)).map((t) => t.pkg);
  if (missing.length === 0) return;
  const reason = `needs ${missing.join(', ')} (absent; ${INSTALL} installs it)`;
  if (process.env['CI'] === 'true') throw new Error(`${reason}: under CI=true every optional package must be installed`);
  // In a before hook the hook's parent suite is skipped; in a test, the test.
  const runnable = ctx.test !== undefined && (ctx.test as { type?: string }).type === 'hook' ? ctx.test.parent : ctx.test;
  if (runnable !== undefined) skipReasons().set(runnable, reason);
  ctx.skip();
}

/**
 * The title tag of a test that runs only in `npm run test:full` (tools/run-tests.mjs): `npm test`
 * runs with `--grep @full --invert`. Slow tests carry it, each kind keeping at least one fast
 * case (docs/benchmarks.md, "Test suite").
 */
export const FULL = ' @full';
/** FULL unless this case of a loop is the one `npm test` keeps. */
export const fullUnless = (fast: boolean): string => (fast ? '' : FULL);
