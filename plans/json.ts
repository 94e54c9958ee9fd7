/** Reading untrusted plan text: size limit, parse errors with line and column. */
import { readFileSync, statSync } from 'node:fs';
import { PlanError } from './errors.js';

/** Plans above this size are refused before parsing (V8 strings top out near 512 MiB). */
export const MAX_PLAN_BYTES = 256 * 1024 * 1024;

export function readPlanText(file: string): string {
  let size: number;
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new PlanError(file, [{ path: '', message: 'not a regular file' }]);
    size = st.size;
  } catch (e) {
    if (e instanceof PlanError) throw e;
    const code = (e as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new PlanError(file, [{ path: '', message: `cannot read plan file (${code})` }]);
  }
  if (size > MAX_PLAN_BYTES) {
    throw new PlanError(file, [
      { path: '', message: `plan file is ${size} bytes; the limit is ${MAX_PLAN_BYTES} bytes (use SPMD templates to keep plans compact)` },
    ]);
  }
  return readFileSync(file, 'utf8');
}

/** JSON.parse with an error that points at line:column instead of a character offset. */
export function parsePlanJson(file: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    const msg = (e as Error).message;
    const m = /position (\d+)/.exec(msg);
    let where = '';
    if (m?.[1] !== undefined) {
      const pos = Number(m[1]);
      const before = text.slice(0, pos);
      const line = before.split('\n').length;
      const col = pos - before.lastIndexOf('\n');
      where = `line ${line}, column ${col}`;
    } else if (/end of JSON input|Unterminated/i.test(msg)) {
      where = 'end of file';
    }
    const reason = msg.replace(/^JSON\.parse: /, '').replace(/ in JSON at position \d+.*$/, '').split('\n')[0];
    throw new PlanError(file, [{ path: '', where, message: `invalid JSON: ${reason}` }]);
  }
}
