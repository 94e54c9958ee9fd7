/**
 * The answer cache (docs/engine.md, "Answer cache"): a `verify` run that ends VERIFIED or NOT
 * EQUIVALENT is kept in the proof cache directory under `answers/`, keyed by the plan's bytes,
 * the whole command line that reaches the answer (every option but where the cache and the
 * JUnit file go) and the build of planproof that answered. A later run with the same key
 * prints the kept answer (and writes its JUnit file) without loading the plan.
 *
 * Why this is sound: both answers are facts about the plan (an exact proof; a witness checked
 * exactly or certified by interval arithmetic), and a run is a function of the plan bytes, the options and the code. The code is
 * identified by a digest of every compiled module, the schema and its generated validators,
 * the z3-solver package and the Node.js version, so any change to any of them misses. An
 * entry is used only when its format tag, its full key (compared field by field, not by the
 * file name's hash) and its seal (an HMAC under a key kept outside the cache directory,
 * stages/cache/cache-files.ts) all check and its exit code is the one its verdict has; anything else
 * is ignored and the plan is verified again. "unknown" is never
 * kept: it can depend on time and load, and another run may decide it.
 *
 * Per-stage proofs stay in the proof cache (stages/cache/cache.ts): a plan whose bytes changed
 * misses here and reuses those.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AttrValue } from '../ops/types.js';
import { canonJson } from '../stages/cache/canon-json.js';
import { seal, sealed, sha256, writeAtomic } from '../stages/cache/cache-files.js';

const ANSWER_FORMAT = 'planproof-answer/2';

/** What an answer is kept under; equal keys, field by field, are the only hits. */
export interface AnswerKey {
  /** Digest of the compiled code that answered (buildDigest). */
  readonly build: string;
  /** SHA-256 of the plan file's bytes. */
  readonly plan: string;
  /** The command line's options, as canonical JSON (sorted keys). */
  readonly options: string;
}

/** A kept answer: what the run printed and its exit code. */
export interface Answer {
  readonly verdict: 'verified' | 'not_equivalent';
  readonly code: 0 | 1;
  readonly stdout: readonly string[];
  readonly stderr: readonly string[];
  /** The JUnit XML of the report (written again when --junit asks for it). */
  readonly junit: string;
  /** When it was answered (ISO 8601) and in how many seconds. */
  readonly at: string;
  readonly seconds: number;
}

interface Entry {
  format: string;
  key: AnswerKey;
  answer: Answer;
  /**
   * The seal (stages/cache/cache-files.ts) of the format, the key and the answer together: without
   * the key kept outside the cache directory no one can make one, and an answer moved to
   * another plan's entry, or edited, is a miss.
   */
  mac: string;
}


let build: string | undefined;

/** Every .js file under a directory, in a stable order (repo-relative names hashed with them). */
function jsFiles(dir: string, rel = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const r = rel === '' ? e.name : `${rel}/${e.name}`;
    if (e.isDirectory()) {
      // Tests and benchmarks never run inside `verify`.
      if (r !== 'test' && r !== 'bench') out.push(...jsFiles(dir, r));
    } else if (e.name.endsWith('.js') || e.name.endsWith('.cjs')) out.push(r);
  }
  return out;
}

/**
 * The digest of the code a `verify` answer comes from: every compiled module of planproof
 * (dist/, tests and benchmarks aside), the plan schema and the generated validators, the
 * z3-solver version and the Node.js version.
 */
export function buildDigest(): string {
  const dist = dirname(dirname(fileURLToPath(import.meta.url)));
  build ??= treeDigest(dist, dirname(dist));
  return build;
}

/** buildDigest of a build tree: its dist directory and the package root beside it (exported for tests). */
export function treeDigest(dist: string, root: string): string {
  const h = createHash('sha256').update(`${ANSWER_FORMAT}\nnode ${process.version}\n`);
  for (const f of jsFiles(dist)) h.update(`dist/${f}\n`).update(readFileSync(join(dist, f)));
  for (const f of ['plans/plan-v1.schema.json', 'plans/plan-v1.validate.cjs', 'ops/attr.validate.cjs']) {
    try {
      h.update(`${f}\n`).update(readFileSync(join(root, f)));
    } catch {
      h.update('absent\n');
    }
  }
  try {
    const z3 = createRequire(import.meta.url)('z3-solver/package.json') as { version?: unknown };
    h.update(`z3-solver ${String(z3.version)}\n`);
  } catch {
    h.update('z3-solver absent\n');
  }
  return h.digest('hex');
}

/** The key of a run on these plan bytes with these options (anything JSON: it is canonicalized). */
export function answerKey(planBytes: string | Buffer, options: Record<string, unknown>): AnswerKey {
  return { build: buildDigest(), plan: sha256(planBytes), options: canonJson(options as AttrValue) };
}

/** Where an answer is kept: `<dir>/answers/<h[0..2]>/<h>.json`, h the digest of the key. */
export function answerPath(dir: string, key: AnswerKey): string {
  const h = sha256(canonJson({ ...key }));
  return join(dir, 'answers', h.slice(0, 2), `${h}.json`);
}

export const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/** Whether a kept value has every field of an answer, and the exit code its verdict has. */
export function isAnswer(a: unknown): a is Answer {
  if (a === null || typeof a !== 'object') return false;
  const x = a as Partial<Answer>;
  const codeOk = (x.verdict === 'verified' && x.code === 0) || (x.verdict === 'not_equivalent' && x.code === 1);
  return codeOk && isStrings(x.stdout) && isStrings(x.stderr) && typeof x.junit === 'string' && typeof x.at === 'string' && typeof x.seconds === 'number';
}

/** The answer kept for exactly this key, or undefined (absent, unreadable, or any field off). */
export function lookupAnswer(dir: string, key: AnswerKey): Answer | undefined {
  let e: Partial<Entry>;
  try {
    e = JSON.parse(readFileSync(answerPath(dir, key), 'utf8')) as Partial<Entry>;
  } catch {
    return undefined;
  }
  if (e === null || typeof e !== 'object' || e.format !== ANSWER_FORMAT) return undefined;
  const k = e.key;
  if (k === undefined || k === null || k.build !== key.build || k.plan !== key.plan || k.options !== key.options) return undefined;
  const a = e.answer;
  if (a === undefined || a === null || !sealed(dir, sealBody(key, a), e.mac)) return undefined;
  return isAnswer(a) ? a : undefined;
}

/** Keeps an answer (best effort: a cache that cannot be written costs time, not correctness). */
export function storeAnswer(dir: string, key: AnswerKey, answer: Answer): boolean {
  const mac = seal(dir, sealBody(key, answer));
  if (mac === undefined) return false;
  const entry: Entry = { format: ANSWER_FORMAT, key, answer, mac };
  return writeAtomic(answerPath(dir, key), JSON.stringify(entry));
}

/** What an answer's seal covers: the format, this run's own key (field by field) and the answer. */
function sealBody(key: AnswerKey, answer: unknown): string {
  return JSON.stringify([ANSWER_FORMAT, key.build, key.plan, key.options, answer]);
}

/** Where a replayed answer goes (the CLI's stdout and stderr). */
export interface Out {
  log(s: string): void;
  err(s: string): void;
}

/** With --json, stdout must be one JSON object (the report), so a kept one can say where it came from. */
export function jsonReport(stdout: readonly string[]): object | undefined {
  if (stdout.length !== 1) return undefined;
  try {
    const v = JSON.parse(stdout[0] as string) as unknown;
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Prints a kept answer as the run that made it printed it, saying where it came from, and
 * writes its JUnit file; returns the exit code. Undefined, having printed nothing, when --json
 * asks and the kept stdout is not one JSON report.
 */
export function replayAnswer(a: Answer, json: boolean, junit: string | undefined, out: Out): number | undefined {
  const report = json ? jsonReport(a.stdout) : undefined;
  if (json && report === undefined) return undefined;
  const from = { at: a.at, seconds: a.seconds, note: 'the answer of an earlier run on the same plan bytes, with the same options and the same build of planproof; --no-answer-cache verifies again' };
  const stdout =
    report !== undefined
      ? [JSON.stringify({ ...report, answerCache: from }, null, 2)]
      : [...a.stdout, `cache       answer kept from ${a.at} (${a.seconds.toFixed(1)} s then): same plan bytes, options and planproof build; --no-answer-cache verifies again`];
  return emitAnswer({ ...a, stdout }, junit, out);
}

/**
 * Prints an answer's stderr and stdout and writes its JUnit file when asked; returns its exit
 * code, or 4 (usage) when the JUnit file cannot be written, so CI never reads a missing report
 * as a pass.
 */
export function emitAnswer(a: Pick<Answer, 'stdout' | 'stderr' | 'junit' | 'code'>, junit: string | undefined, out: Out): number {
  for (const s of a.stderr) out.err(s);
  for (const s of a.stdout) out.log(s);
  if (junit !== undefined) {
    try {
      writeFileSync(junit, a.junit);
    } catch (e) {
      out.err(`planproof: cannot write the report: ${e instanceof Error ? e.message : String(e)}`);
      return 4;
    }
  }
  return a.code;
}
