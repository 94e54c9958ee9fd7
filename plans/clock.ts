/**
 * The run's time limit (--time-limit) as seen by long loops in this thread, from the plan load
 * up: the load's phases and per-op loops, the tensor-level derivations, per-template work and
 * the inference test. It lives at the bottom of the layers that check it (plans/, lineage/,
 * stages/) so that loading a large plan is bounded like proving it. The worker pool has its
 * own limit (stages/engines/pool.ts, per stage). Past the limit `checkRunClock` throws
 * TimeLimitReached, which the CLI turns into an "unknown" verdict (never a partial
 * "verified"); code that catches errors per stage or per plan issue rethrows it.
 */

/** Thrown by checkRunClock once the run's time limit has passed. */
export class TimeLimitReached extends Error {
  constructor(readonly seconds: number) {
    super(`stopped at the time limit (--time-limit ${seconds})`);
    this.name = 'TimeLimitReached';
  }
}

let endAt = Infinity;
let seconds = 0;

/** Sets the limit (performance.now() time of the end), or clears it with undefined. */
export function setRunClock(limit: { readonly endAt: number; readonly seconds: number } | undefined): void {
  endAt = limit?.endAt ?? Infinity;
  seconds = limit?.seconds ?? 0;
}

/** Throws TimeLimitReached past the run's time limit (a clock read: cheap enough per step). */
export function checkRunClock(): void {
  if (endAt !== Infinity && performance.now() > endAt) throw new TimeLimitReached(seconds);
}
