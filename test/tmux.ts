/** Watching a command's terminal in a detached tmux pane (Debian's tmux; callers check `needs(this, TOOLS.tmux)`). */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';

/**
 * Runs `cmd` in a detached 160x20 tmux pane and returns every distinct screen seen until it
 * prints DONE (its exit code follows) or `until` holds.
 */
export async function watchPane(name: string, cmd: string, until?: (screens: string[]) => boolean): Promise<string[]> {
  const session = `planproof-${name}-${process.pid}`;
  const r = spawnSync('tmux', ['new-session', '-d', '-s', session, '-x', '160', '-y', '20', `${cmd}; echo DONE $?; sleep 120`]);
  assert.equal(r.status, 0, String(r.stderr));
  const screens: string[] = [];
  try {
    const t0 = Date.now();
    for (;;) {
      const s = spawnSync('tmux', ['capture-pane', '-p', '-t', session], { encoding: 'utf8' }).stdout;
      if (screens[screens.length - 1] !== s) screens.push(s);
      if (/DONE \d+/.test(s) || until?.(screens) === true) break;
      assert.ok(Date.now() - t0 < 240_000, 'the run did not finish');
      await new Promise((res) => setTimeout(res, 40));
    }
  } finally {
    spawnSync('tmux', ['kill-session', '-t', session]);
  }
  return screens;
}
