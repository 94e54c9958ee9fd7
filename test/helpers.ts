/** Shared test helpers: paths and an in-process CLI runner that captures output. */
import { fileURLToPath } from 'node:url';
import { main } from '../cli/main.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const EXAMPLES = `${ROOT}examples/`;
export const FIXTURES = `${ROOT}test/fixtures/`;

export async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { log: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') });
  return { code, stdout, stderr };
}
