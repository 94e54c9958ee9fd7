/**
 * Mocha's spec reporter plus one closing line: how many tests were skipped, and why (the
 * package test/optional.ts found absent, or a test written as pending), so a run on a machine
 * without the optional packages says what it did not check.
 */
import Mocha from 'mocha';
import { skipReasons } from './optional.js';

const { EVENT_TEST_PENDING, EVENT_RUN_END } = Mocha.Runner.constants;

/** The reason given on a test or the nearest suite above it. */
function reasonOf(t: Mocha.Runnable): string {
  const reasons = skipReasons();
  for (let r: Mocha.Runnable | Mocha.Suite | undefined = t; r !== undefined; r = r.parent) {
    const why = reasons.get(r);
    if (why !== undefined) return why;
  }
  return 'written as pending';
}

export default class SkipSummary extends Mocha.reporters.Spec {
  constructor(runner: Mocha.Runner, options?: Mocha.MochaOptions) {
    super(runner, options);
    const byReason = new Map<string, number>();
    runner.on(EVENT_TEST_PENDING, (t: Mocha.Test) => {
      const why = reasonOf(t);
      byReason.set(why, (byReason.get(why) ?? 0) + 1);
    });
    // Registered after Spec's own listener: printed below mocha's summary.
    runner.once(EVENT_RUN_END, () => {
      const n = [...byReason.values()].reduce((a, b) => a + b, 0);
      if (n === 0) {
        console.log('skipped: none');
        return;
      }
      console.log(`skipped: ${n} test(s): ${[...byReason].map(([why, k]) => `${k} ${why}`).join('; ')}`);
    });
  }
}
