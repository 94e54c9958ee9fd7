/**
 * Debian's chromium, headless, driven by playwright-core: the HTML report's browser test and
 * its screenshot for the docs. Never a downloaded browser (playwright-core ships none): the
 * system one at /usr/bin/chromium (.ci/run installs it), a fresh profile, no network services.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env['PLANPROOF_CHROMIUM'] ?? '/usr/bin/chromium';

const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** A headless context with its own user-data directory; close() removes the directory too. */
export async function launchChromium(viewport = { width: 1280, height: 1000 }): Promise<{ ctx: BrowserContext; close: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'planproof-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport });
  return {
    ctx,
    close: async () => {
      await ctx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
