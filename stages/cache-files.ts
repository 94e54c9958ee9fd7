/**
 * What every record in the cache directory shares (the proof cache, stages/cache.ts; kept
 * answers, cli/answers.ts; incremental records, cli/delta.ts): where the directory is by
 * default, how an entry is written, and its digest. No engine module is imported, so the
 * executable's fast path can use it before anything else loads.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/** `$PLANPROOF_CACHE_DIR`, else `$XDG_CACHE_HOME/planproof`, else `~/.cache/planproof`. */
export function defaultCacheDir(): string {
  const own = process.env['PLANPROOF_CACHE_DIR'];
  if (own !== undefined && own !== '') return own;
  const xdg = process.env['XDG_CACHE_HOME'];
  return join(xdg !== undefined && xdg !== '' ? xdg : join(homedir(), '.cache'), 'planproof');
}

/** Hex SHA-256 of a text or bytes. */
export const sha256 = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');

/**
 * Writes an entry: to a temporary file, then renamed, so a reader never sees half of one.
 * Best effort (false when it cannot be written): a cache that cannot be written costs time,
 * not correctness.
 */
export function writeAtomic(file: string, text: string): boolean {
  try {
    mkdirSync(dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, text);
    renameSync(tmp, file);
    return true;
  } catch {
    return false;
  }
}
