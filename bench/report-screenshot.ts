/**
 * The README tour's picture: the HTML report of examples/buggy/mlp-dp2-loss-scale-twice.json,
 * rendered by headless chromium into docs/report-buggy.png.
 * Run: npm run build && node dist/bench/report-screenshot.js
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { main } from '../cli/app.js';
import { launchChromium } from './browser.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const html = join(mkdtempSync(join(tmpdir(), 'planproof-shot-')), 'report.html');
const quiet = { log: (): void => undefined, err: (s: string): void => void process.stderr.write(s + '\n') };
// Relative path: the report shows the file as a user would type it.
process.chdir(root);
const code = await main(['verify', 'examples/buggy/mlp-dp2-loss-scale-twice.json', '--no-cache', '--html', html], quiet);
if (code !== 1) throw new Error(`expected exit 1 (not equivalent), got ${code}`);
const b = await launchChromium({ width: 1100, height: 900 });
const page = await b.ctx.newPage();
await page.goto(pathToFileURL(html).href);
const out = join(root, 'docs', 'report-buggy.png');
await page.screenshot({ path: out, fullPage: true });
await b.close();
process.stdout.write(`wrote ${out}\n`);
