/**
 * The progress bar of a verify run on a terminal (cli-progress, on stderr): stages decided out
 * of all stages, the rate and the ETA. Nothing at all when stderr is not a terminal (CI logs,
 * pipes) or with --json, so machine-read output never holds a carriage-return bar.
 */
import cliProgress from 'cli-progress';

export interface StageBar {
  update(done: number, total: number): void;
  stop(): void;
}

/** A bar when `enabled` and `stream` is a terminal, else undefined. */
export function stageBar(enabled: boolean, stream: NodeJS.WriteStream = process.stderr): StageBar | undefined {
  // Run under cli/heap.ts's supervisor, stderr is a pipe to a process whose stderr is a terminal.
  const relayed = stream === process.stderr && process.env['PLANPROOF_STDERR_TTY'] === '1';
  if (!enabled || (stream.isTTY !== true && !relayed)) return undefined;
  const bar = new cliProgress.SingleBar(
    {
      stream,
      ...(relayed ? { noTTYOutput: true, notTTYSchedule: 100 } : {}),
      format: 'proving stages [{bar}] {value}/{total} stages | {rate} stages/s | ETA {eta_formatted}',
      barsize: 30,
      hideCursor: true,
      clearOnComplete: false,
      etaBuffer: 50,
      fps: 10,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  const t0 = performance.now();
  let drawn = t0;
  const rate = (done: number): string => {
    const s = (performance.now() - t0) / 1000;
    return s <= 0 ? '0' : (done / s).toFixed(1);
  };
  return {
    update(done, total) {
      if (!started) {
        bar.start(total, done, { rate: rate(done) });
        started = true;
        return;
      }
      if (bar.getTotal() !== total) bar.setTotal(total);
      bar.update(done, { rate: rate(done) });
      // A synchronous proof loop (per template, in this thread) never lets the bar's timer
      // fire: draw at most every 100 ms from here.
      const now = performance.now();
      if (now - drawn >= 100) {
        drawn = now;
        bar.render();
      }
    },
    stop() {
      if (started) bar.stop();
    },
  };
}
