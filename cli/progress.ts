/**
 * Progress bars on a terminal (cli-progress, on stderr): verify's stages decided out of all
 * stages with the rate and the ETA, and the steps of gen, capture and import-graphs with what is
 * being done. Nothing at all when stderr is not a terminal (CI logs, pipes) or with --json, so
 * machine-read output never holds a carriage-return bar.
 */
import cliProgress from 'cli-progress';

export interface StageBar {
  update(done: number, total: number): void;
  stop(): void;
}

/** A bar of steps that says what the current step does. */
export interface StepBar {
  update(done: number, total: number, what: string): void;
  stop(): void;
}

/** Reports steps done out of a total, and what the current one does (a bar, or nothing). */
export type StepProgress = (done: number, total: number, what: string) => void;

interface Style {
  readonly format: string;
  /** The bar appears only once the work has run this long: a run that ends sooner prints nothing. */
  readonly delayMs: number;
  /** Tests only (PLANPROOF_BAR_PACE_MS): draw every step and hold it this long, so a terminal sampled every 40 ms sees each step of a fast run. */
  readonly paceMs?: number;
}

/** Whether a bar may draw on `stream`. */
function drawable(enabled: boolean, stream: NodeJS.WriteStream): { relayed: boolean } | undefined {
  // Run under cli/heap.ts's supervisor, stderr is a pipe to a process whose stderr is a terminal.
  const relayed = stream === process.stderr && process.env['PLANPROOF_STDERR_TTY'] === '1';
  return !enabled || (stream.isTTY !== true && !relayed) ? undefined : { relayed };
}

function bar(style: Style, stream: NodeJS.WriteStream, relayed: boolean): StepBar {
  const b = new cliProgress.SingleBar(
    {
      stream,
      ...(relayed ? { noTTYOutput: true, notTTYSchedule: 100 } : {}),
      format: style.format,
      barsize: 30,
      hideCursor: true,
      clearOnComplete: false,
      etaBuffer: 50,
      fps: 10,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  let stopped = false;
  const t0 = performance.now();
  let drawn = t0;
  const rate = (done: number): string => {
    const s = (performance.now() - t0) / 1000;
    return s <= 0 ? '0' : (done / s).toFixed(1);
  };
  return {
    update(done, total, what) {
      // A step count past the estimate grows the total rather than overflowing the bar.
      const all = Math.max(total, done);
      const payload = { rate: rate(done), what };
      if (stopped) return;
      if (!started) {
        if (performance.now() - t0 < style.delayMs) return;
        b.start(all, done, payload);
        started = true;
        drawn = performance.now();
        return;
      }
      if (b.getTotal() !== all) b.setTotal(all);
      b.update(done, payload);
      if ((style.paceMs ?? 0) > 0) {
        b.render();
        // A synchronous wait: the steps of gen and import-graphs run in one loop.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, style.paceMs);
        return;
      }
      // A synchronous loop (verify per template, gen, import) never lets the bar's timer fire:
      // draw at most every 100 ms from here.
      const now = performance.now();
      if (now - drawn >= 100) {
        drawn = now;
        b.render();
      }
    },
    stop() {
      // Once: a second stop would print the bar's line again.
      if (started && !stopped) b.stop();
      stopped = true;
    },
  };
}

/** verify's bar when `enabled` and `stream` is a terminal, else undefined. */
export function stageBar(enabled: boolean, stream: NodeJS.WriteStream = process.stderr): StageBar | undefined {
  const d = drawable(enabled, stream);
  if (d === undefined) return undefined;
  const b = bar({ format: 'proving stages [{bar}] {value}/{total} stages | {rate} stages/s | ETA {eta_formatted}', delayMs: 0 }, stream, d.relayed);
  return { update: (done, total) => b.update(done, total, ''), stop: () => b.stop() };
}

/**
 * The bar of gen, capture and import-graphs (`label`: generating, capturing, importing) when
 * `enabled` and `stream` is a terminal, else undefined; with `eta: false` it shows the time so
 * far instead of an ETA. It appears after half a second of work,
 * so a small plan or import prints only its summary line.
 */
export function stepBar(label: string, enabled: boolean, opts: { readonly eta?: boolean; readonly stream?: NodeJS.WriteStream } = {}): StepBar | undefined {
  const stream = opts.stream ?? process.stderr;
  const d = drawable(enabled, stream);
  if (d === undefined) return undefined;
  // PLANPROOF_BAR_DELAY_MS: tests watch the bar of a run shorter than a slow machine's.
  const delay = Number(process.env['PLANPROOF_BAR_DELAY_MS'] ?? 500);
  // Steps of very unequal cost (capture's two runs, then quick import steps) make a poor ETA: the time so far instead.
  const time = opts.eta === false ? '{duration_formatted}' : 'ETA {eta_formatted}';
  const pace = Number(process.env['PLANPROOF_BAR_PACE_MS'] ?? 0);
  return bar({ format: `${label} [{bar}] {value}/{total} steps | ${time} | {what}`, delayMs: Number.isFinite(delay) ? delay : 500, paceMs: Number.isFinite(pace) ? Math.min(Math.max(pace, 0), 1000) : 0 }, stream, d.relayed);
}
