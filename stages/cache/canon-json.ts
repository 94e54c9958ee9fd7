/**
 * Canonical JSON (object keys sorted, `undefined` as 'u'): one text per JSON value. Kept apart
 * from stages/cache/canon.ts, which loads the op registry, so that the answer cache and the
 * incremental check (cli/answers.ts, cli/delta.ts) can use it before any engine module loads.
 */
import type { AttrValue } from '../../ops/types.js';

/** The canonical text of a JSON value. */
export function canonJson(v: AttrValue | undefined): string {
  if (v === undefined) return 'u';
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonJson).join(',')}]`;
  return `{${Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonJson(v[k])}`)
    .join(',')}}`;
}
