/**
 * What every record in the cache directory shares (the proof cache, stages/cache/cache.ts; kept
 * answers, cli/answers.ts; incremental records, cli/delta.ts): where the directory is by
 * default, how an entry is written, its digest, and its seal. No engine module is imported, so
 * the executable's fast path can use it before anything else loads.
 *
 * The seal (docs/engine.md, "Who can forge a cache entry"): every record carries an HMAC-SHA-256
 * of its whole body under a secret key kept outside the cache directory, so someone who can
 * write the cache directory (a cache shared between CI branches, a restored cache) but not read
 * the key cannot make a record that is trusted: a forged, edited, recomputed-digest or swapped
 * entry is a miss, and the plan is verified again.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve, sep } from 'node:path';

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

/**
 * Where the cache key lives: `$PLANPROOF_CACHE_KEY_FILE`, else `$XDG_CONFIG_HOME/planproof/cache-key`,
 * else `~/.config/planproof/cache-key` (a configuration directory, never the cache's).
 */
function cacheKeyFile(): string {
  const own = process.env['PLANPROOF_CACHE_KEY_FILE'];
  if (own !== undefined && own !== '') return own;
  const xdg = process.env['XDG_CONFIG_HOME'];
  return join(xdg !== undefined && xdg !== '' ? xdg : join(homedir(), '.config'), 'planproof', 'cache-key');
}

/** The real path of `p`, or of its nearest existing ancestor joined with the rest. */
function realish(p: string): string {
  const abs = resolve(p);
  try {
    return realpathSync(abs);
  } catch {
    const up = dirname(abs);
    return up === abs ? abs : join(realish(up), abs.slice(up.length + (up.endsWith(sep) ? 0 : 1)));
  }
}

const keys = new Map<string, Buffer | string>();

/**
 * The secret that seals records of the cache directory `dir`, or why there is none (then no
 * record is trusted and none is written). `$PLANPROOF_CACHE_KEY` (at least 32 characters, for a
 * CI secret) is used as it is; otherwise the key file is read, or created on first use with 32
 * random bytes, readable by its owner only. A key file inside the cache directory is refused: a
 * writer of the directory could replace it.
 */
export function cacheKey(dir: string): Buffer | string {
  const memo = keys.get(dir);
  if (memo !== undefined) return memo;
  const k = readCacheKey(dir);
  keys.set(dir, k);
  return k;
}

function readCacheKey(dir: string): Buffer | string {
  const env = process.env['PLANPROOF_CACHE_KEY'];
  if (env !== undefined && env !== '') return env.length >= 32 ? Buffer.from(env, 'utf8') : 'PLANPROOF_CACHE_KEY is shorter than 32 characters';
  const file = cacheKeyFile();
  const root = realish(dir);
  const real = realish(file);
  if (real === root || real.startsWith(root.endsWith(sep) ? root : root + sep)) return `the cache key file ${file} is inside the cache directory ${dir}`;
  try {
    const text = readFileSync(file, 'utf8').trim();
    return text.length >= 32 ? Buffer.from(text, 'utf8') : `the cache key file ${file} holds fewer than 32 characters`;
  } catch {
    // Absent: created below.
  }
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    // 'wx': two first runs at once do not overwrite each other's key; the loser reads the winner's.
    writeFileSync(file, `${randomBytes(32).toString('hex')}\n`, { flag: 'wx', mode: 0o600 });
  } catch {
    // Created by another process meanwhile, or not writable: read what is there.
  }
  try {
    const text = readFileSync(file, 'utf8').trim();
    return text.length >= 32 ? Buffer.from(text, 'utf8') : `the cache key file ${file} holds fewer than 32 characters`;
  } catch (e) {
    return `no cache key (${file}: ${e instanceof Error ? e.message : String(e)})`;
  }
}

/** The seal of a record body for the cache directory `dir`, or undefined when there is no key. */
export function seal(dir: string, body: string): string | undefined {
  const k = cacheKey(dir);
  return typeof k === 'string' ? undefined : createHmac('sha256', k).update(body).digest('hex');
}

/** Whether `mac` is the seal of `body` under this machine's key for `dir` (false without a key). */
export function sealed(dir: string, body: string, mac: unknown): boolean {
  const want = seal(dir, body);
  if (want === undefined || typeof mac !== 'string' || mac.length !== want.length) return false;
  return timingSafeEqual(Buffer.from(mac, 'utf8'), Buffer.from(want, 'utf8'));
}
