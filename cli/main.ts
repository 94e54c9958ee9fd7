#!/usr/bin/env node
/**
 * The `planproof` executable: a thin entry. Exit codes: 0 verified, 1 not equivalent, 2 invalid
 * plan, 3 unknown, 4 usage or internal error. Never prints a stack trace unless PLANPROOF_DEBUG=1.
 *
 * It imports only what deciding where to run needs (node builtins and cli/heap.ts), and for
 * `verify` cli/delta.ts, which answers from the cache directory when it can (an unchanged plan,
 * or one edited only in value-only attributes) before anything else loads. A large
 * plan file runs the command in a child with a larger heap, and the parent then never loads
 * the engine: importing it costs about 0.35 s, which the parent used to pay before spawning.
 * The commands themselves are in cli/app.ts.
 */
import { fileURLToPath } from 'node:url';
import { realpathSync } from 'node:fs';
import { ExitCode } from '../plans/errors.js';
import { CHILD_ENV, runWithHeap, STARTED_AT_ENV, superviseHeap } from './heap.js';


const INTERNAL = ExitCode.usage;
/** Arguments after `node script` (yargs' hideBin, without importing yargs). */
const argv = process.argv.slice(2);

const isEntry = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === realpathSync(process.argv[1]);
if (isEntry) {
  // --time-limit counts from this process's start (and its heap child's, which inherits it):
  // start-up and loading are part of the run (cli/app.ts timeLimitFrom).
  process.env[STARTED_AT_ENV] ??= String(Math.round(Date.now() - performance.now()));
  // Exit codes are verdicts (0 verified, 1 not equivalent): a process that ends before main
  // decided (a fatal error in a native or WebAssembly module, Z3 out of memory, a stray
  // process.exit) must not read as one. Until main resolves, any exit is an internal fault.
  let decided = false;
  process.on('exit', (code) => {
    if (decided) return;
    process.stderr.write(`planproof: internal error: the process stopped before a verdict (exit code ${code}); nothing above is a verdict\n`);
    process.exitCode = INTERNAL;
  });
  process.on('uncaughtException', (e: unknown) => {
    process.stderr.write(`planproof: internal error: ${e instanceof Error ? e.message : String(e)}\n`);
    if (process.env['PLANPROOF_DEBUG'] === '1' && e instanceof Error) process.stderr.write(`${e.stack ?? ''}\n`);
    decided = true;
    process.exit(INTERNAL);
  });
  // A closed pipe (planproof gen | head) ends output quietly, not with a stack trace.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') {
      decided = true;
      process.exit(process.exitCode ?? 0);
    }
    throw e;
  });
  // `verify` answered from the cache directory's records (cli/delta.ts: an exact answer, or an
  // incremental one) before yargs, the engine or a heap child load; undefined goes on as usual.
  const fastOut = { log: (s: string) => void process.stdout.write(`${s}\n`), err: (s: string) => void process.stderr.write(`${s}\n`) };
  const fast: Promise<number | undefined> =
    argv[0] === 'verify' && process.env[CHILD_ENV] !== '1'
      ? import('./delta.js').then((d) => d.fastVerify(argv, fastOut)).catch(() => undefined)
      : Promise.resolve(undefined);
  fast
    .then((code) => {
      if (code !== undefined) return code;
      const heapMb = superviseHeap(argv);
      return heapMb === undefined ? import('./app.js').then((app) => app.main(argv)) : runWithHeap(heapMb, argv);
    })
    .then((code) => {
      decided = true;
      process.exitCode = code;
    })
    .catch((e: unknown) => {
      const msg = e instanceof Error ? e.message : String(e);
      process.stderr.write(`planproof: internal error: ${msg}\n`);
      if (process.env['PLANPROOF_DEBUG'] === '1' && e instanceof Error) process.stderr.write(`${e.stack ?? ''}\n`);
      else process.stderr.write('(this is a bug in planproof, not in your plan; rerun with PLANPROOF_DEBUG=1 for details)\n');
      decided = true;
      process.exitCode = INTERNAL;
    });
}
