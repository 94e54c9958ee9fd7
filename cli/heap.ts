/**
 * A heap large enough for large plans, and a clean error when even that runs out.
 *
 * Node's default heap limit here is about 4 GB, less than a plan at L3's size may need while it
 * loads (a rank spelled apart from its template makes the loader match its collectives rank by
 * rank). V8 ends a process that runs out of heap with SIGABRT and a native stack trace, which no
 * handler in the process can catch. So `verify` on a large plan file runs the command again in
 * a child process with a larger heap (half of the machine's memory, at most 12 GiB, the limit
 * the benchmarks hold to), forwards its output, and turns its death by out-of-memory into the
 * usual "internal error" (exit 4) without the trace: never a stack trace, never a verdict.
 */
import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';
import { totalmem } from 'node:os';
import { getHeapStatistics } from 'node:v8';

/** Plan files from this size on get the larger heap (the examples are under 100 KB, L1 is 3.7 MB, L3 150 MB). */
const SUPERVISE_FROM_BYTES = 1024 * 1024;
/** The child's heap limit: half the memory, at most 12 GiB. */
const HEAP_MB = Math.min(12 * 1024, Math.floor(totalmem() / (2 * 1024 * 1024)));
/**
 * The child's young generation (MiB per semi-space; V8's default is 16). Large plans allocate
 * tens of GB of short-lived keys and relations while their caches live in a large old
 * generation: each scavenge pays a fixed cost for those caches' old-to-new pointers, so fewer,
 * larger scavenges cost less CPU (docs/benchmarks.md, "405B `--sp --cp 2`: CPU"). A
 * --max-semi-space-size the user gave node wins.
 */
const SEMI_SPACE_MB = 32;
/** Set in the heap child (which then neither supervises nor tries the fast path again). */
export const CHILD_ENV = 'PLANPROOF_HEAP_CHILD';
/** When the first process started (epoch ms): --time-limit counts from there (cli/app.ts). */
export const STARTED_AT_ENV = 'PLANPROOF_STARTED_AT';
/** How V8's out-of-memory report starts. */
const MARKERS = ['<--- Last few GCs --->', 'FATAL ERROR: '];

/**
 * The heap (MiB) the command should run with in a child, or undefined to run in this process:
 * only `verify`, `infer-lineage` and `inspect` of a large file (PLANPROOF_SUPERVISE_BYTES, PLANPROOF_HEAP_MB
 * override the size and the heap, for tests), never in the child itself.
 */
export function superviseHeap(argv: readonly string[]): number | undefined {
  if (process.env[CHILD_ENV] === '1') return undefined;
  const cmd = argv.findIndex((a) => a === 'verify' || a === 'infer-lineage' || a === 'inspect');
  if (cmd < 0) return undefined;
  // The largest file named after the command (an option's value may come first; a missing
  // file is the command's own error to report).
  let size = -1;
  for (const a of argv.slice(cmd + 1)) {
    if (a.startsWith('-')) continue;
    try {
      const st = statSync(a);
      if (st.isFile()) size = Math.max(size, st.size);
    } catch {
      // not a file
    }
  }
  if (size < 0) return undefined;
  const from = Number(process.env['PLANPROOF_SUPERVISE_BYTES'] ?? SUPERVISE_FROM_BYTES);
  const heap = Number(process.env['PLANPROOF_HEAP_MB'] ?? HEAP_MB);
  if (!(size >= from) || !Number.isFinite(heap) || heap <= 0) return undefined;
  // Already as large (node started with a larger --max-old-space-size): run here.
  if (process.env['PLANPROOF_HEAP_MB'] === undefined && getHeapStatistics().heap_size_limit >= heap * 1024 * 1024) return undefined;
  return heap;
}

/** Runs this command again in a child with `heapMb` of heap; resolves to the exit code to use. */
export function runWithHeap(heapMb: number, argv: readonly string[]): Promise<number> {
  const script = process.argv[1] as string;
  const semi = process.execArgv.some((a) => a.startsWith('--max-semi-space-size')) ? [] : [`--max-semi-space-size=${SEMI_SPACE_MB}`];
  const child = spawn(process.execPath, [...process.execArgv, ...semi, `--max-old-space-size=${heapMb}`, script, ...argv], {
    stdio: ['inherit', 'inherit', 'pipe'],
    // The child's stderr is a pipe to this process: it draws the progress bar when ours is a terminal.
    env: { ...process.env, [CHILD_ENV]: '1', [STARTED_AT_ENV]: process.env[STARTED_AT_ENV] ?? String(Math.round(Date.now() - performance.now())), ...(process.stderr.isTTY ? { PLANPROOF_STDERR_TTY: '1' } : {}) },
  });
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
  // V8's out-of-memory report (GC trace, native stack) starts with this line: held back.
  let fatal = false;
  let pending = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    if (fatal) return;
    pending += chunk;
    const at = pending.search(/<--- Last few GCs --->|FATAL ERROR: /);
    if (at >= 0) {
      fatal = true;
      process.stderr.write(pending.slice(0, at).replace(/\n+$/, '\n').replace(/^\n$/, ''));
      pending = '';
      return;
    }
    // Forward everything but a last line that may be the start of the marker (a progress
    // bar's carriage-return updates pass at once).
    const tail = pending.slice(pending.lastIndexOf('\n') + 1);
    const held = MARKERS.some((m) => m.startsWith(tail)) ? tail : '';
    process.stderr.write(pending.slice(0, pending.length - held.length));
    pending = held;
  });
  return new Promise((resolve) => {
    child.on('error', (e) => {
      process.stderr.write(`planproof: internal error: could not start the run with a ${heapMb} MiB heap: ${e.message}\n`);
      resolve(4);
    });
    child.on('close', (code, signal) => {
      if (pending !== '' && !fatal) process.stderr.write(pending);
      if (fatal || signal !== null || code === null || code === 134) {
        process.stderr.write(`planproof: internal error: the run stopped ${fatal ? `out of memory (its heap is ${heapMb} MiB)` : `by signal ${signal ?? String(code)}`} before a verdict; nothing above is a verdict\n`);
        resolve(4);
        return;
      }
      resolve(code);
    });
  });
}
