/** Shared test helpers: paths and an in-process CLI runner that captures output. */
import { fileURLToPath } from 'node:url';
import { strict as assert } from 'node:assert';
import { main } from '../cli/main.js';
import { loadPlanObject } from '../plans/loader.js';
import { PlanError } from '../plans/errors.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const EXAMPLES = `${ROOT}examples/`;
export const FIXTURES = `${ROOT}test/fixtures/`;

export async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { log: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') });
  return { code, stdout, stderr };
}

/** Asserts that loading `plan` fails with a PlanError whose message matches every pattern. */
export function rejects(plan: unknown, ...patterns: RegExp[]): void {
  assert.throws(
    () => loadPlanObject('t.json', plan),
    (e: unknown) => {
      assert.ok(e instanceof PlanError, `expected a PlanError, got ${String(e)}`);
      for (const re of patterns) assert.match(e.message, re);
      return true;
    },
  );
}
