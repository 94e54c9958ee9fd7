/**
 * Writing a generated plan as JSON in chunks: the same bytes as `JSON.stringify(plan, null, 1)`
 * without that one string. A 405B plan at its published scale is 161 MB of text; as one string,
 * plus the copy a trailing newline made and the Buffer a file write made, the text cost three
 * times its size in memory on top of the plan (issue 37 item 4). Here the containers near the
 * root (and any long array) are walked by hand, and everything below them (an op, a tensor, a
 * shape) is JSON.stringify'd whole (native, fast, small), re-indented to its depth.
 *
 * A plan whose indented text would pass what `verify` reads by default (MAX_PLAN_BYTES: the
 * 405B plan with SP and CP is 572 MB indented) is written without whitespace instead
 * (`JSON.stringify(plan)`, about half the bytes): the same JSON value, so the same plan.
 */
import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';

/** Containers this shallow are walked by hand ($ > parallel > programs > [i] > ops > [j] is depth 5). */
const WALK_DEPTH = 5;
/** Arrays longer than this are walked by hand at any depth (a long list is what makes text large). */
const WALK_LENGTH = 64;
/** Text is handed on in pieces of about this many characters (fewer, larger writes). */
const CHUNK_CHARS = 1 << 20;

/** Is `v` written by JSON.stringify as nothing (a member dropped, an array element `null`)? */
function absent(v: unknown): boolean {
  return v === undefined || typeof v === 'function' || typeof v === 'symbol';
}

/**
 * Calls `emit` with consecutive pieces of `JSON.stringify(value, null, 1)` (for a value that
 * stringifies to something: not undefined, a function or a symbol). Values with a toJSON and
 * everything below the walked containers go through JSON.stringify itself, so its rules
 * (toJSON, dropped members, escapes, number formats) are its own, not copied here.
 */
export function stringifyChunks(value: unknown, emit: (piece: string) => void, indent: 0 | 1 = 1): void {
  let buf = '';
  const put = (s: string): void => {
    buf += s;
    if (buf.length >= CHUNK_CHARS) {
      emit(buf);
      buf = '';
    }
  };
  // Indentation by depth, built once per depth.
  const pads: string[] = ['\n'];
  const nl = (depth: number): string => (indent === 0 ? '' : (pads[depth] ??= '\n' + ' '.repeat(depth)));
  const colon = indent === 0 ? ':' : ': ';
  const whole = (v: unknown, depth: number): void => {
    const s = (indent === 0 ? JSON.stringify(v) : JSON.stringify(v, null, 1)) as string | undefined;
    if (s === undefined) return;
    // JSON escapes newlines inside strings, so every '\n' here is indentation: shift it by depth.
    put(depth === 0 || indent === 0 || !s.includes('\n') ? s : s.replaceAll('\n', nl(depth)));
  };
  const walk = (v: unknown, depth: number): void => {
    // Boxed primitives and toJSON are JSON.stringify's to interpret.
    if (v === null || typeof v !== 'object' || typeof (v as { toJSON?: unknown }).toJSON === 'function' || v instanceof Number || v instanceof String || v instanceof Boolean) return whole(v, depth);
    if (Array.isArray(v)) {
      if (v.length === 0 || (depth >= WALK_DEPTH && v.length <= WALK_LENGTH)) return whole(v, depth);
      put('[');
      for (let i = 0; i < v.length; i++) {
        put(i === 0 ? nl(depth + 1) : ',' + nl(depth + 1));
        const x: unknown = v[i];
        if (absent(x)) put('null');
        else walk(x, depth + 1);
      }
      put(nl(depth) + ']');
      return;
    }
    if (depth >= WALK_DEPTH) return whole(v, depth);
    let first = true;
    put('{');
    for (const k of Object.keys(v)) {
      const x: unknown = (v as Record<string, unknown>)[k];
      if (absent(x)) continue;
      put((first ? '' : ',') + nl(depth + 1) + JSON.stringify(k) + colon);
      first = false;
      walk(x, depth + 1);
    }
    put(first ? '}' : nl(depth) + '}');
  };
  walk(value, 0);
  if (buf.length > 0) emit(buf);
}

/** Stops an indented write that passes its bound (then the value is written without whitespace). */
class TooLong extends Error {}

/**
 * Writes `JSON.stringify(value, null, 1)` and a newline to `file`, piece by piece; returns the
 * bytes written. When that text would pass `maxIndented` bytes, the file is rewritten (from
 * its start) as `JSON.stringify(value)` and a newline: the same value in about half the bytes,
 * so that what gen writes stays within what verify reads. The file is opened (truncated) first,
 * so an unwritable path fails before the work of stringifying.
 */
export function writeJsonFile(file: string, value: unknown, maxIndented = Infinity): number {
  const fd = openSync(file, 'w');
  let bytes = 0;
  try {
    const write = (s: string): void => {
      const b = Buffer.from(s, 'utf8');
      if (bytes + b.length > maxIndented) throw new TooLong();
      let off = 0;
      while (off < b.length) off += writeSync(fd, b, off, b.length - off, bytes + off);
      bytes += b.length;
    };
    try {
      stringifyChunks(value, write);
      write('\n');
    } catch (e) {
      if (!(e instanceof TooLong)) throw e;
      ftruncateSync(fd, 0);
      bytes = 0;
      maxIndented = Infinity;
      stringifyChunks(value, write, 0);
      write('\n');
    }
  } finally {
    closeSync(fd);
  }
  return bytes;
}
