/**
 * Persistent proof cache (docs/engine.md, "Proof cache"). One file per proved canonical stage:
 * `<dir>/<hash[0..2]>/<hash>.json` holding the format tag, the engine version, the full
 * canonical form and the status. An entry is used only when every field checks: the tag, the
 * engine version, the form (compared in full with the stage's own form, and hashing to the
 * file's name), the status 'proved' and the seal (an HMAC under a key kept outside the cache
 * directory, cache-files.ts), so a writer of the directory cannot forge a proof. Anything else (a truncated file, bad JSON, another
 * engine, another form) is ignored, and the stage is proved again. Only proofs are cached:
 * a difference needs its witness from this run's numeric evaluation.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CANON_VERSION, formHash } from './canon.js';
import { seal, sealed, writeAtomic } from './cache-files.js';

const CACHE_FORMAT = 'planproof-proof/2';

export { defaultCacheDir } from './cache-files.js';

let version: string | undefined;

/**
 * The engine's version: a hash of the compiled modules whose behaviour a proof depends on
 * (ops, terms, lineage, stage building and proving, the canonical form). Any change to them
 * makes every earlier entry foreign.
 */
function engineVersion(): string {
  if (version !== undefined) return version;
  // This file is dist/stages/cache/cache.js: the root is dist/.
  const root = dirname(dirname(dirname(fileURLToPath(import.meta.url))));
  const h = createHash('sha256').update(`canon ${CANON_VERSION}\n`);
  for (const dir of ['ops', 'sdfg', 'lineage']) {
    for (const f of readdirSync(join(root, dir)).filter((x) => x.endsWith('.js')).sort()) h.update(`${dir}/${f}\n`).update(readFileSync(join(root, dir, f)));
  }
  for (const f of ['decompose/prove.js', 'engines/z3.js', 'cache/canon.js', 'witness/numeric.js']) h.update(`stages/${f}\n`).update(readFileSync(join(root, 'stages', f)));
  version = h.digest('hex').slice(0, 32);
  return version;
}

interface Entry {
  format: string;
  engine: string;
  hash: string;
  form: string;
  status: string;
  decidedBy?: 'z3' | 'tensor';
  /** The seal (cache-files.ts) of every field above: only this machine's key makes one. */
  mac?: string;
}

/** What a proof entry's seal covers. */
const sealBody = (engine: string, hash: string, form: string, decidedBy: string | undefined): string => JSON.stringify([CACHE_FORMAT, engine, hash, form, 'proved', decidedBy ?? null]);

interface CacheStats {
  hits: number;
  misses: number;
  /** Entries present but not trusted (corrupt, truncated, foreign). */
  rejected: number;
  stored: number;
  /** Writes that failed (the cache is best effort). */
  writeErrors: number;
}

export class ProofCache {
  readonly stats: CacheStats = { hits: 0, misses: 0, rejected: 0, stored: 0, writeErrors: 0 };
  constructor(readonly dir: string) {}

  path(hash: string): string {
    return join(this.dir, hash.slice(0, 2), `${hash}.json`);
  }

  /** A proof of exactly this form by this engine, or undefined. */
  lookup(hash: string, form: string): { decidedBy?: 'z3' | 'tensor' } | undefined {
    let text: string;
    try {
      text = readFileSync(this.path(hash), 'utf8');
    } catch {
      this.stats.misses++;
      return undefined;
    }
    let e: Partial<Entry>;
    try {
      e = JSON.parse(text) as Partial<Entry>;
    } catch {
      this.stats.rejected++;
      return undefined;
    }
    const ok =
      e !== null &&
      typeof e === 'object' &&
      e.format === CACHE_FORMAT &&
      e.engine === engineVersion() &&
      e.hash === hash &&
      e.form === form &&
      formHash(e.form) === hash &&
      e.status === 'proved' &&
      (e.decidedBy === undefined || e.decidedBy === 'z3' || e.decidedBy === 'tensor') &&
      sealed(this.dir, sealBody(engineVersion(), hash, form, e.decidedBy), e.mac);
    if (!ok) {
      this.stats.rejected++;
      return undefined;
    }
    this.stats.hits++;
    return e.decidedBy === undefined ? {} : { decidedBy: e.decidedBy };
  }

  store(hash: string, form: string, decidedBy?: 'z3' | 'tensor'): void {
    const mac = seal(this.dir, sealBody(engineVersion(), hash, form, decidedBy));
    if (mac === undefined) {
      this.stats.writeErrors++;
      return;
    }
    const entry: Entry = { format: CACHE_FORMAT, engine: engineVersion(), hash, form, status: 'proved', ...(decidedBy === undefined ? {} : { decidedBy }), mac };
    if (writeAtomic(this.path(hash), JSON.stringify(entry))) this.stats.stored++;
    else this.stats.writeErrors++;
  }
}
