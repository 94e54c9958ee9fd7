/**
 * The compact text of a loaded plan (the parsed plan re-serialized), built when first read.
 *
 * Workers, derived plans, shard digests and witnesses read it; a run decided per template and
 * verified reads it never. A large plan's compact text is as large as its file (271 MB for
 * the 405B `--sp --cp 2` plan), so holding it from the load on was 7 % of that run's peak RSS
 * (docs/benchmarks.md, "405B `--sp --cp 2`: the peak"). It is rebuilt from its source instead:
 * from the text the caller keeps anyway, or by reading the file again, which must hash to the
 * text that was loaded: a file changed during the run stops it (an internal error, exit 4),
 * never lets proofs of one content stand for another. Standard input cannot be read twice:
 * its compact text is built once the plan is loaded, as before, and so is a small plan's.
 */
import { createHash } from 'node:crypto';
import { parsePlanJson, readPlanText, STDIN_NAME } from '../plans/json.js';

const digestOf = (text: string): string => createHash('sha256').update(text).digest('hex');

/**
 * Plan texts from this many characters on get their compact text on first read; smaller ones
 * (every example, L1 at 3.7 MB) are serialized once loaded, as before: for them it costs
 * little to hold, and a run that reads it (rank by rank, always) need not read the file again.
 */
export const LAZY_TEXT_FROM = 16 * 1024 * 1024;

/**
 * A function giving the compact text of the plan parsed from `source` (read from `file`, or
 * given by a caller that keeps it: `kept`), or undefined for standard input and texts under
 * `lazyFrom` characters (the caller then serializes the plan once it is loaded). Called before
 * the load: nothing returned holds `source` unless it is the caller's, so the file's text is
 * freed as soon as it is parsed.
 */
export function compactTextOf(file: string, source: string, kept: boolean, maxBytes: number, lazyFrom = LAZY_TEXT_FROM): (() => string) | undefined {
  if (file === STDIN_NAME || source.length < lazyFrom) return undefined;
  // Separate functions, so that no closure here holds `source` unless it is the caller's.
  return kept ? fromKept(file, source) : fromFile(file, digestOf(source), maxBytes);
}

function fromKept(file: string, source: string): () => string {
  let text: string | undefined;
  return () => (text ??= JSON.stringify(parsePlanJson(file, source)));
}

function fromFile(file: string, digest: string, maxBytes: number): () => string {
  let text: string | undefined;
  return () => {
    if (text !== undefined) return text;
    const src = readPlanText(file, maxBytes);
    if (digestOf(src) !== digest) throw new Error(`the plan file ${file} changed while it was verified (read again for a later phase, it is not the text that was loaded): nothing is decided; run again`);
    text = JSON.stringify(parsePlanJson(file, src));
    return text;
  };
}
