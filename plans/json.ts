/** Reading untrusted plan text: size limit, parse errors with line and column. */
import { readFileSync, readSync, statSync } from 'node:fs';
import { clip, PlanError } from './errors.js';

/** Plans above this size are refused before parsing (V8 strings top out near 512 MiB). */
export const MAX_PLAN_BYTES = 256 * 1024 * 1024;

/** The name `-` reads the plan from standard input (errors name it `<stdin>`). */
export const STDIN_NAME = '<stdin>';

/**
 * Reads a plan; a UTF-8 byte order mark (as some editors write) is dropped, not an error.
 * `maxBytes` defaults to MAX_PLAN_BYTES (the CLI's --max-file-mb sets it).
 */
export function readPlanText(file: string, maxBytes = MAX_PLAN_BYTES): string {
  return stripBom(file === '-' || file === STDIN_NAME ? readStdin(maxBytes) : readPlanFile(file, maxBytes));
}

/** How a byte limit reads in a message: MiB when whole, bytes otherwise. */
function bytesText(n: number): string {
  return n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : `${n} bytes`;
}

function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** Standard input in chunks, refused as soon as it passes the size limit (never buffered whole). */
function readStdin(maxBytes: number): string {
  const chunks: Buffer[] = [];
  let total = 0;
  const buf = Buffer.alloc(1 << 20);
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buf, 0, buf.length, null);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') continue;
      if (code === 'EOF') break;
      throw new PlanError(STDIN_NAME, [{ path: '', message: `cannot read standard input (${code ?? 'unreadable'})` }]);
    }
    if (n === 0) break;
    total += n;
    if (total > maxBytes) throw new PlanError(STDIN_NAME, [{ path: '', message: `plan on standard input exceeds the limit of ${bytesText(maxBytes)} (--max-file-mb raises it)` }]);
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  return Buffer.concat(chunks).toString('utf8');
}

function readPlanFile(file: string, maxBytes: number): string {
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
  if (size > maxBytes) {
    throw new PlanError(file, [
      { path: '', message: `plan file is ${size} bytes; the limit is ${bytesText(maxBytes)} (--max-file-mb raises it; SPMD templates keep plans compact)` },
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
    // V8 gives a position for some errors only ("Unexpected token 'N', "..." is not valid
    // JSON" has none, and echoes the text): the scan below finds the offending character.
    const m = /position (\d+)/.exec(msg);
    const pos = m?.[1] !== undefined ? Number(m[1]) : firstBadOffset(text);
    let where = '';
    let reason = msg.replace(/^JSON\.parse: /, '').replace(/ in JSON at position \d+.*$/s, '').split('\n')[0] ?? '';
    if (pos !== undefined && (pos < text.length || m?.[1] !== undefined)) {
      const before = text.slice(0, pos);
      const line = before.split('\n').length;
      const col = pos - before.lastIndexOf('\n');
      where = `line ${line}, column ${col}`;
      // "-Infinity": V8 points after the minus sign.
      reason = m?.[1] === undefined ? `unexpected ${JSON.stringify(text.slice(pos, pos + 1))}${hint(text, pos)}` : `${reason}${hint(text, pos) || (pos > 0 ? hint(text, pos - 1) : '')}`;
    } else if (pos !== undefined || /end of JSON input|Unterminated/i.test(msg)) {
      where = 'end of file';
      if (m?.[1] === undefined) reason = 'unexpected end of the text';
    }
    throw new PlanError(file, [{ path: '', where, message: `invalid JSON: ${clip(reason)}` }]);
  }
}

/** What JSON lacks that a plan writer may have reached for, at `pos`. */
function hint(text: string, pos: number): string {
  const rest = text.slice(pos, pos + 9);
  if (/^(NaN|-?Infinity)/.test(rest)) return ': JSON has no NaN or Infinity (write a finite number)';
  if (/^\/[/*]/.test(rest)) return ': JSON has no comments';
  if (rest.startsWith("'")) return ': JSON strings use double quotes';
  return '';
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const LITERAL = /true|false|null/y;

/**
 * The offset of the first character that is not JSON (text.length when the text ends early),
 * or undefined when the scan finds none. Iterative: a hostile nesting depth costs no stack.
 */
export function firstBadOffset(text: string): number | undefined {
  const ws = (i: number): number => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
    return i;
  };
  // A member's key and colon at i: the offset after them, or -(bad offset) - 1.
  const keyColon = (i: number): number => {
    const k = stringEnd(text, i);
    if (k === undefined) return -(i < text.length ? i : text.length) - 1;
    const j = ws(k);
    return text[j] === ':' ? j + 1 : -j - 1;
  };
  // The stack holds what the enclosing containers expect next.
  const stack: ('obj' | 'arr')[] = [];
  let i = ws(0);
  let wantValue = true;
  for (;;) {
    if (wantValue) {
      i = ws(i);
      const c = text[i];
      if (c === undefined) return i;
      if (c === '{' || c === '[') {
        stack.push(c === '{' ? 'obj' : 'arr');
        i = ws(i + 1);
        if (text[i] === (c === '{' ? '}' : ']')) {
          stack.pop();
          i++;
          wantValue = false;
          continue;
        }
        if (c === '{') {
          const k = keyColon(i);
          if (k < 0) return -k - 1;
          i = k;
        }
        continue;
      }
      if (c === '"') {
        const k = stringEnd(text, i);
        if (k === undefined) return text.length;
        i = k;
      } else {
        NUMBER.lastIndex = i;
        LITERAL.lastIndex = i;
        if (NUMBER.test(text)) i = NUMBER.lastIndex;
        else if (LITERAL.test(text)) i = LITERAL.lastIndex;
        else return i;
      }
      wantValue = false;
      continue;
    }
    i = ws(i);
    const top = stack[stack.length - 1];
    if (top === undefined) return i < text.length ? i : undefined;
    const c = text[i];
    if (c === undefined) return i;
    if (c === ',') {
      i = ws(i + 1);
      if (top === 'obj') {
        const k = keyColon(i);
        if (k < 0) return -k - 1;
        i = k;
      }
      wantValue = true;
      continue;
    }
    if ((top === 'obj' && c === '}') || (top === 'arr' && c === ']')) {
      stack.pop();
      i++;
      continue;
    }
    return i;
  }
}

/** The offset after a JSON string starting at `i` (a double quote), or undefined. */
function stringEnd(text: string, i: number): number | undefined {
  if (text[i] !== '"') return undefined;
  for (let k = i + 1; k < text.length; k++) {
    const c = text.charCodeAt(k);
    if (c === 0x22) return k + 1;
    if (c === 0x5c) k++;
    else if (c < 0x20) return undefined;
  }
  return undefined;
}

/** Deepest nesting a plan may use by default (--max-depth); real plans need under 10 levels. */
export const MAX_DEPTH = 64;

/**
 * Finds a value nested deeper than `maxDepth`, iteratively (recursive validators and walkers
 * would overflow the stack on hostile input). Returns its JSON path, or undefined.
 */
export function findTooDeep(root: unknown, maxDepth = MAX_DEPTH): string | undefined {
  // Depth-only scan first (no allocation per node); paths are built only for the error.
  const stack: [unknown, number][] = [[root, 0]];
  let found = false;
  while (stack.length > 0 && !found) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== 'object') continue;
    if (depth >= maxDepth) found = true;
    else for (const x of Array.isArray(v) ? v : Object.values(v)) if (x !== null && typeof x === 'object') stack.push([x, depth + 1]);
  }
  if (!found) return undefined;
  const withPath: [unknown, number, string][] = [[root, 0, '$']];
  while (withPath.length > 0) {
    const [v, depth, path] = withPath.pop() as [unknown, number, string];
    if (v === null || typeof v !== 'object') continue;
    if (depth >= maxDepth) return path;
    if (Array.isArray(v)) v.forEach((x, i) => withPath.push([x, depth + 1, `${path}[${i}]`]));
    else for (const [k, x] of Object.entries(v)) withPath.push([x, depth + 1, /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`]);
  }
  return '$';
}

/** A number as a plan's JSON extensions carry it: infinities and NaN as 'inf', '-inf', 'nan' (JSON has none). */
export function numberToJson(v: number): number | string {
  return Number.isFinite(v) ? v : Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
}

/** The number numberToJson wrote, or undefined for anything else. */
export function numberFromJson(x: unknown): number | undefined {
  if (typeof x === 'number') return x;
  return x === 'inf' ? Infinity : x === '-inf' ? -Infinity : x === 'nan' ? Number.NaN : undefined;
}

/** The entries of an untrusted JSON object that are arrays of finite numbers (values by name); undefined when none. */
export function finiteNumbersByName(x: unknown): Record<string, number[]> | undefined {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return undefined;
  const out: Record<string, number[]> = {};
  for (const [k, v] of Object.entries(x)) if (Array.isArray(v) && v.every((e) => typeof e === 'number' && Number.isFinite(e))) out[k] = v as number[];
  return Object.keys(out).length === 0 ? undefined : out;
}
