/**
 * `planproof capture --nproc N --out plan.json -- script.py [args]`: runs the user's script
 * under tools/capture/planproof_capture.py (once with world size 1, once on N gloo processes),
 * then imports the graphs it wrote (cli/import.ts). docs/capture.md.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ExitCode } from '../plans/errors.js';
import { importCommand } from './import.js';
import { stepBar } from './progress.js';

interface Out {
  log(s: string): void;
  err(s: string): void;
}

const CAPTURE_TOOL = fileURLToPath(new URL('../../tools/capture/planproof_capture.py', import.meta.url));

/** The command line of `capture` (cli/app.ts registers it). */
export const CAPTURE_OPTIONS = {
  nproc: { type: 'number', describe: 'processes of the parallel run (a 1-D mesh; or give --mesh)' },
  mesh: { type: 'string', describe: 'the mesh, axes slowest first: dp=2,tp=2 (nproc is their product)' },
  reference: { type: 'string', describe: "the user's single-device script as the logical side (default: the script at world size 1)" },
  out: { alias: 'o', type: 'string', describe: 'output plan file (default: stdout)' },
  axis: { type: 'string', default: 'tp', describe: 'name of the mesh axis (a 1-D mesh of nproc ranks)' },
  python: { type: 'string', default: '/usr/bin/python3', describe: 'the Python with PyTorch (Debian python3-torch)' },
  keep: { type: 'string', describe: 'keep the captured graphs and relations in this directory' },
} as const;

export interface CaptureArgs {
  nproc: number | undefined;
  /** `dp=2,tp=2`: axes slowest first (rank = row-major index); replaces --nproc and --axis. */
  mesh: string | undefined;
  /** The user's single-device script, run as the logical side instead of the script at world size 1. */
  reference: string | undefined;
  out?: string;
  axis: string;
  python: string;
  keep?: string;
  script: string[];
  json: boolean;
}

/** What the tracer's process did (spawnSync's fields the command reads). */
interface ToolRun {
  readonly status: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly error?: Error;
}

/** Most of a stream kept (spawnSync's maxBuffer was 64 MiB); what is past it is dropped. */
const KEEP_BYTES = 64 * 1024 * 1024;

/** Runs the tracer, calling `tick` every 200 ms while it runs (the bar reads its output directory then). */
function runTool(cmd: string, args: readonly string[], tick: () => void): Promise<ToolRun> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let error: Error | undefined;
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 600_000 });
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      if (stdout.length < KEEP_BYTES) stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      if (stderr.length < KEEP_BYTES) stderr += d;
    });
    const timer = setInterval(tick, 200);
    child.on('error', (e) => {
      error = e;
    });
    child.on('close', (status, signal) => {
      clearInterval(timer);
      resolve({ status, signal, stdout, stderr, ...(error === undefined ? {} : { error }) });
    });
  });
}

/**
 * The capture's phases as steps, read from what the tracer has written into `dir` since `t0`:
 * the 1-process run's meta file, each rank's, then the relations (tools/capture/planproof_capture.py).
 */
function phase(dir: string, nproc: number, t0: number): { done: number; what: string } {
  const fresh = (f: string): boolean => {
    try {
      return statSync(join(dir, f)).mtimeMs >= t0;
    } catch {
      return false;
    }
  };
  if (!fresh('meta.logical.json')) return { done: 0, what: 'spawning and tracing the 1-process run' };
  let ranks = 0;
  for (let r = 0; r < nproc; r++) if (fresh(`meta.${r}.json`)) ranks++;
  if (ranks < nproc) return { done: 1 + ranks, what: `spawning and tracing the ${nproc}-process run: ${ranks} of ${nproc} ranks traced` };
  return { done: 1 + nproc, what: 'merging the ranks\' relations' };
}

/** Runs the capture; exit 0 with the plan written, 2 when the graphs do not import, 4 when the script or Python fails. */
export async function captureCommand(a: CaptureArgs, out: Out): Promise<number> {
  if (a.script.length === 0) {
    out.err("planproof: name the script after '--': planproof capture --nproc 2 --out plan.json -- script.py");
    return ExitCode.usage;
  }
  const mesh = meshOf(a);
  if (typeof mesh === 'string') {
    out.err(`planproof: ${mesh}`);
    return ExitCode.usage;
  }
  const nproc = mesh.reduce((p, x) => p * x.size, 1);
  if (a.reference !== undefined && !existsSync(a.reference)) {
    out.err(`planproof: --reference ${a.reference}: no such file`);
    return ExitCode.usage;
  }
  const dir = a.keep ?? mkdtempSync(join(tmpdir(), 'planproof-capture-'));
  // The bar (cli/progress.ts): the 1-process run, each rank of the N-process run, merging, then
  // the import's own steps (2N + 5 of them: files, programs, assembly, check, write).
  const bar = stepBar('capturing', !a.json, { eta: false });
  const captureSteps = 2 + nproc;
  const estimate = captureSteps + 2 * nproc + 5;
  // A file in a --keep directory from an earlier capture is not progress (mtime granularity: a second).
  const t0 = Date.now() - 1000;
  try {
    const r = await runTool(a.python, [CAPTURE_TOOL, '--nproc', String(nproc), '--mesh', mesh.map((x) => `${x.name}=${x.size}`).join(','), '--out', dir, ...(a.reference === undefined ? [] : ['--reference', a.reference]), ...a.script], () => {
      if (bar === undefined) return;
      const p = phase(dir, nproc, t0);
      bar.update(p.done, estimate, p.what);
    });
    bar?.update(captureSteps - 1, estimate, 'merging the ranks\' relations');
    // Anything printed from here on ends the bar first.
    const say = (s: string): void => {
      bar?.stop();
      out.err(s);
    };
    if (r.error !== undefined) {
      say(`planproof: capture could not run ${a.python}: ${r.error.message}`);
      return ExitCode.usage;
    }
    if (r.status === 2) {
      // A mistake in the script's declarations (tools/capture: UserError), said in one line with the user's line.
      const said = (r.stderr ?? '').split('\n').filter((l) => l.startsWith('planproof capture: '));
      if (said.length > 0) {
        say(`${said.join('\n')}\n(planproof capture --keep DIR keeps the captured graphs for a look)`);
        return ExitCode.invalidPlan;
      }
    }
    if (r.status !== 0) {
      const tail = (r.stderr ?? '').trim().split('\n').slice(-15).join('\n');
      say(`planproof: capture failed: ${a.python} exited ${r.status ?? r.signal ?? '?'}${/No module named 'torch'/.test(tail) ? ' (PyTorch is not installed for this Python: apt-get install python3-torch, or pass --python)' : ''}\n${tail}`);
      return ExitCode.usage;
    }
    if (!existsSync(join(dir, 'relations.json'))) {
      say('planproof: capture wrote no relations.json');
      return ExitCode.usage;
    }
    const captured = `planproof: captured ${a.script.join(' ')} on 1 and ${nproc} process(es): ${(r.stdout ?? '').trim()}`;
    if (bar === undefined) out.err(captured);
    // The import's steps go on the same bar, after the capture's; the captured line comes when it ends.
    const progress = bar === undefined ? undefined : { update: (d: number, t: number, w: string) => bar.update(captureSteps + d, captureSteps + t, w), end: () => say(captured) };
    return importCommand({ dir, ...(a.out === undefined ? {} : { out: a.out }), name: `capture of ${a.script.join(' ')}`.slice(0, 200), json: a.json }, out, progress);
  } finally {
    bar?.stop();
    if (a.keep === undefined) rmSync(dir, { recursive: true, force: true });
  }
}

/** The mesh from --mesh (`dp=2,tp=2`) or --nproc and --axis; a string is the usage error. */
function meshOf(a: CaptureArgs): { name: string; size: number }[] | string {
  const name = /^[A-Za-z_][A-Za-z0-9_]{0,31}$/;
  let mesh: { name: string; size: number }[];
  if (a.mesh !== undefined) {
    mesh = [];
    for (const part of a.mesh.split(',')) {
      const m = /^\s*([^=\s]+)\s*=\s*([0-9]+)\s*$/.exec(part);
      if (m === null || !name.test(m[1] as string)) return `--mesh: expected axis=size pairs such as dp=2,tp=2, got '${part}'`;
      if (mesh.some((x) => x.name === m[1])) return `--mesh: axis '${m[1]}' given twice`;
      mesh.push({ name: m[1] as string, size: Number(m[2]) });
    }
    if (a.nproc !== undefined && a.nproc !== mesh.reduce((p, x) => p * x.size, 1)) return `--nproc ${a.nproc} is not the mesh's ${mesh.reduce((p, x) => p * x.size, 1)} ranks`;
  } else {
    if (a.nproc === undefined) return 'give --nproc N (a 1-D mesh) or --mesh dp=2,tp=2';
    if (!name.test(a.axis)) return `--axis must be a mesh axis name, got '${a.axis}'`;
    mesh = [{ name: a.axis, size: a.nproc }];
  }
  const n = mesh.reduce((p, x) => p * x.size, 1);
  if (mesh.some((x) => !Number.isSafeInteger(x.size) || x.size < 1) || !Number.isSafeInteger(n) || n < 1 || n > 64) return `the parallel run must have 1 to 64 processes (--nproc or the --mesh sizes' product), got ${a.mesh ?? a.nproc}`;
  return mesh;
}
