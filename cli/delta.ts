/**
 * Incremental re-verification (docs/engine.md, "Incremental re-verification"): a plan file
 * that differs from one verified earlier only in **value-only attributes** (OpDef.valueAttrs:
 * a norm's eps, an optimizer's lr) is answered VERIFIED again without loading it, when every
 * equality of those attributes the earlier proofs relied on still holds.
 *
 * Three records, all in the cache directory, all written by a full `verify` run:
 *  - `argv/`: what yargs made of this exact command line (same arguments, working directory,
 *    cache-relevant environment, CPU count and build): its options, so that a later run with
 *    the same command line needs neither yargs nor the engine to find its answers;
 *  - `answers/` (cli/answers.ts): the answer for exact plan bytes;
 *  - `delta/`: for a VERIFIED run decided at tensor level per template, keyed by the plan's
 *    **skeleton** (its JSON with every value-only attribute value blanked), the options and the
 *    build: the classes of ops whose attribute sets the derivations relied on being equal
 *    (stages/engines/tensorlevel/prover.ts AttrUse) and the answer.
 *
 * `fastVerify` runs in the executable before anything else loads. It answers only from those
 * records and otherwise returns undefined, and the ordinary run (yargs, loading, proving)
 * decides; it prints nothing until it has an answer.
 *
 * Why a delta answer is the plan's answer: the argument is in docs/engine.md; in short, the new
 * plan equals the old one outside value-only values (equal skeletons); every such value is
 * a plain scalar its op's attribute schema accepts, so every loader check reads what it read
 * before; the derivations read those values only through equality of whole attribute sets,
 * and each equality they relied on still holds, so each derivation step is still an instance
 * of its rule, and every stage is proved as before.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import { canonJson } from '../stages/cache/canon-json.js';
import { defaultCacheDir, seal, sealed, sha256, writeAtomic } from '../stages/cache/cache-files.js';
import type { AttrValue } from '../ops/types.js';
import { answerKey, buildDigest, emitAnswer, isAnswer, isStrings, jsonReport, lookupAnswer, replayAnswer, storeAnswer, type Answer, type AnswerKey, type Out } from './answers.js';

const ARGV_FORMAT = 'planproof-argv/2';
const DELTA_FORMAT = 'planproof-delta/2';


/** Per op name with value-only attributes: its registry id, the keys, and whether the generated validator checks it. */
export type ValueKinds = Readonly<Record<string, { readonly id: number; readonly keys: readonly string[]; readonly generated: boolean }>>;

/** What the options yargs gave depend on besides the build: the arguments and where and how they run. */
function argvContext(argv: readonly string[]): Record<string, unknown> {
  const env = (k: string): string | null => process.env[k] ?? null;
  return {
    argv: [...argv],
    cwd: process.cwd(),
    // --jobs defaults to the CPU count; the default cache directory to these variables.
    cpus: availableParallelism(),
    env: { PLANPROOF_CACHE_DIR: env('PLANPROOF_CACHE_DIR'), XDG_CACHE_HOME: env('XDG_CACHE_HOME'), HOME: env('HOME') },
    build: buildDigest(),
    // yargs reads its parser configuration from the package.json above the executable (the
    // "yargs" key); its own version decides the rest.
    yargs: packageTexts(),
  };
}

let packages: string | undefined;
function packageTexts(): string {
  if (packages === undefined) {
    const read = (f: string): string => {
      try {
        return sha256(readFileSync(f));
      } catch {
        return 'absent';
      }
    };
    const root = fileURLToPath(new URL('../..', import.meta.url));
    packages = `${read(join(root, 'package.json'))} ${read(join(root, 'node_modules/yargs/package.json'))}`;
  }
  return packages;
}

/** What a command line parsed to, as kept under argv/. */
export interface ArgvMemo {
  /** The options of the answer key (cli/app.ts answerOptions), the plan path among them. */
  readonly options: Record<string, unknown>;
  readonly json: boolean;
  readonly junit?: string;
  /** The largest plan file read (--max-file-mb), in bytes. */
  readonly maxBytes: number;
  readonly kinds: ValueKinds;
}

function argvPath(dir: string, ctx: Record<string, unknown>): string {
  const h = sha256(canonJson(ctx as AttrValue));
  return join(dir, 'argv', h.slice(0, 2), `${h}.json`);
}

/** Keeps what this command line parsed to, in the cache directory it names. */
export function storeArgvMemo(dir: string, argv: readonly string[], memo: ArgvMemo): boolean {
  const ctx = argvContext(argv);
  const body = { format: ARGV_FORMAT, ctx, dir, memo };
  const mac = seal(dir, JSON.stringify(body));
  return mac !== undefined && writeAtomic(argvPath(dir, ctx), JSON.stringify({ ...body, mac }));
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function lookupArgvMemo(dir: string, argv: readonly string[]): ArgvMemo | undefined {
  const ctx = argvContext(argv);
  let e: unknown;
  try {
    e = JSON.parse(readFileSync(argvPath(dir, ctx), 'utf8'));
  } catch {
    return undefined;
  }
  if (!isRecord(e) || e['format'] !== ARGV_FORMAT || e['dir'] !== dir) return undefined;
  const body = { format: e['format'], ctx: e['ctx'], dir: e['dir'], memo: e['memo'] };
  if (!sealed(dir, JSON.stringify(body), e['mac']) || canonJson(e['ctx'] as AttrValue) !== canonJson(ctx as AttrValue)) return undefined;
  const m = e['memo'];
  if (!isRecord(m) || !isRecord(m['options']) || typeof m['json'] !== 'boolean' || typeof m['maxBytes'] !== 'number' || !isRecord(m['kinds'])) return undefined;
  if (m['junit'] !== undefined && typeof m['junit'] !== 'string') return undefined;
  return m as unknown as ArgvMemo;
}

/** The cache directories a command line may name: the default one and any --cache value. */
function candidateDirs(argv: readonly string[]): string[] {
  const dirs = [defaultCacheDir()];
  argv.forEach((a, i) => {
    if (a === '--cache' && argv[i + 1] !== undefined) dirs.push(argv[i + 1] as string);
    else if (a.startsWith('--cache=')) dirs.push(a.slice('--cache='.length));
  });
  return [...new Set(dirs)];
}

/** A plan's skeleton and its value-only attributes (per op ref, 'L<op>' or 'P<program>:<op>'). */
export interface Skeleton {
  /** SHA-256 of the plan's JSON with every value-only attribute value replaced by null. */
  readonly digest: string;
  /** Per ref: the op's attributes, and their value-only values as JSON (in the op record's key order, null where absent). */
  readonly ops: ReadonlyMap<string, { readonly kind: string; readonly attrs: Record<string, unknown>; readonly values: string }>;
}

const isScalar = (v: unknown): boolean => typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean';

/**
 * The skeleton of a parsed plan, or why it has none (not the shape of a plan, or a value-only
 * value that is not a plain scalar: an expression is instantiated per rank). The parsed object
 * is changed while the text is made and restored before returning.
 */
export function skeletonOf(raw: unknown, kinds: ValueKinds): Skeleton | string {
  if (!isRecord(raw) || !isRecord(raw['logical']) || !isRecord(raw['parallel'])) return 'not a plan object';
  const lops = raw['logical']['ops'];
  const progs = raw['parallel']['programs'];
  if (!Array.isArray(lops) || !Array.isArray(progs)) return 'not a plan object';
  const lists: [string, unknown[]][] = [['L', lops]];
  for (let p = 0; p < progs.length; p++) {
    const g = progs[p] as unknown;
    if (!isRecord(g) || !Array.isArray(g['ops'])) return 'not a plan object';
    lists.push([`P${p}:`, g['ops'] as unknown[]]);
  }
  const ops = new Map<string, { kind: string; attrs: Record<string, unknown>; values: string }>();
  const saved: [Record<string, unknown>, string, unknown][] = [];
  let why: string | undefined;
  for (const [prefix, list] of lists) {
    list.forEach((o, i) => {
      if (why !== undefined || !isRecord(o) || typeof o['op'] !== 'string') return;
      const k = Object.hasOwn(kinds, o['op']) ? kinds[o['op']] : undefined;
      if (k === undefined) return;
      const attrs = o['attrs'];
      if (attrs !== undefined && !isRecord(attrs)) return;
      const a = attrs ?? {};
      // In the op record's key order, null where absent (a present value is never null).
      const vals: unknown[] = [];
      for (const key of k.keys) {
        if (!Object.hasOwn(a, key)) {
          vals.push(null);
          continue;
        }
        const v = a[key];
        if (!isScalar(v)) {
          why = `${prefix}${i}: value-only attribute '${key}' is not a plain scalar`;
          return;
        }
        vals.push(v);
        saved.push([a, key, v]);
        a[key] = null;
      }
      ops.set(`${prefix}${i}`, { kind: o['op'], attrs: a, values: JSON.stringify(vals) });
    });
  }
  const text = why === undefined ? JSON.stringify(raw) : '';
  for (const [a, key, v] of saved) a[key] = v;
  return why ?? { digest: sha256(text), ops };
}

/** What a delta record is kept under: the build, the options (the plan path among them) and the skeleton. */
export interface DeltaKey {
  readonly build: string;
  readonly options: string;
  readonly skeleton: string;
}

/** A VERIFIED answer per template and the attribute equalities its proofs relied on. */
export interface DeltaRecord {
  /** Every op of a value-only kind, and its value-only attributes then (canonical JSON). */
  readonly refs: readonly string[];
  readonly values: readonly string[];
  /** Ops whose attribute sets the proofs relied on being equal. */
  readonly classes: readonly (readonly string[])[];
  readonly answer: Answer;
}

/** Records of one build and option set share a directory: a run with none skips parsing its plan. */
function deltaDir(dir: string, build: string, options: string): string {
  return join(dir, 'delta', sha256(canonJson({ build, options })));
}

function deltaPath(dir: string, key: DeltaKey): string {
  return join(deltaDir(dir, key.build, key.options), `${sha256(key.skeleton)}.json`);
}

export function storeDelta(dir: string, key: DeltaKey, rec: DeltaRecord): boolean {
  const body = { format: DELTA_FORMAT, key, rec };
  const mac = seal(dir, JSON.stringify(body));
  return mac !== undefined && writeAtomic(deltaPath(dir, key), JSON.stringify({ ...body, mac }));
}


export function lookupDelta(dir: string, key: DeltaKey): DeltaRecord | undefined {
  let e: unknown;
  try {
    e = JSON.parse(readFileSync(deltaPath(dir, key), 'utf8'));
  } catch {
    return undefined;
  }
  if (!isRecord(e) || e['format'] !== DELTA_FORMAT || !isRecord(e['key']) || !isRecord(e['rec'])) return undefined;
  const k = e['key'];
  if (k['build'] !== key.build || k['options'] !== key.options || k['skeleton'] !== key.skeleton) return undefined;
  if (!sealed(dir, JSON.stringify({ format: e['format'], key: e['key'], rec: e['rec'] }), e['mac'])) return undefined;
  const r = e['rec'];
  const a = r['answer'];
  if (!isStrings(r['refs']) || !isStrings(r['values']) || r['refs'].length !== r['values'].length || !Array.isArray(r['classes']) || !r['classes'].every(isStrings)) return undefined;
  // Only VERIFIED answers are reused this way (a witness of the old plan is not one of the new).
  if (!isAnswer(a) || a.verdict !== 'verified') return undefined;
  return r as unknown as DeltaRecord;
}

/** A generated attribute validator (ops/attr.validate.cjs, export a<id>). */
type Validator = (data: unknown) => boolean;

/**
 * Why the plan with this skeleton is not answered by the record, or undefined: its value-only
 * ops must be the record's, each one's attributes accepted by its op's schema, and every class
 * must hold one value.
 */
export function deltaProblem(rec: DeltaRecord, skel: Skeleton, kinds: ValueKinds, validator: (id: number) => Validator | undefined): string | undefined {
  if (skel.ops.size !== rec.refs.length || rec.refs.some((r) => !skel.ops.has(r))) return 'its value-only ops are not those of the record';
  for (const [ref, o] of skel.ops) {
    const k = kinds[o.kind];
    const v = k === undefined || !k.generated ? undefined : validator(k.id);
    if (v === undefined) return `no generated validator for '${o.kind}'`;
    if (!v(o.attrs)) return `${ref}: attributes of '${o.kind}' that its schema refuses`;
  }
  for (const c of rec.classes) {
    const first = skel.ops.get(c[0] as string)?.values;
    if (first === undefined || c.some((r) => skel.ops.get(r)?.values !== first)) return `ops ${c.join(', ')} no longer have equal value-only attributes, and the proofs relied on it`;
  }
  return undefined;
}

let validators: Record<string, unknown> | undefined;
function generatedValidator(id: number): Validator | undefined {
  try {
    // The generated file beside the sources (ops/registry.ts reads the same one).
    validators ??= createRequire(import.meta.url)(fileURLToPath(new URL('../../ops/attr.validate.cjs', import.meta.url))) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const v = validators[`a${id}`];
  return typeof v === 'function' ? (v as Validator) : undefined;
}

/** The line (text) or field (--json) a delta answer adds. */
function deltaNote(rec: DeltaRecord, skel: Skeleton): { changed: string[]; text: string } {
  const changed = rec.refs.filter((r, i) => skel.ops.get(r)?.values !== rec.values[i]);
  const text = `incremental VERIFIED without loading the plan: it differs from the plan verified ${rec.answer.at} (${rec.answer.seconds.toFixed(1)} s then) only in value-only attributes, of ${changed.length} op(s), and every equality of them the tensor-level proofs relied on holds (docs/engine.md, "Incremental re-verification"); --no-answer-cache verifies in full`;
  return { changed, text };
}

/**
 * The incremental answer for this plan text (answer key `key`, options included), printed, and
 * kept as the exact answer of these bytes; undefined, having printed nothing, when there is
 * none (no record for its skeleton, or the record's check fails). Used by the fast path and,
 * for plans too large to parse there, by the ordinary run before it loads the plan.
 */
export function deltaAnswer(dir: string, text: string, key: AnswerKey, memo: Pick<ArgvMemo, 'json' | 'junit' | 'kinds'>, out: Out, t0 = performance.now()): number | undefined {
  if (!existsSync(deltaDir(dir, key.build, key.options))) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  const skel = skeletonOf(raw, memo.kinds);
  if (typeof skel === 'string') return undefined;
  const rec = lookupDelta(dir, { build: key.build, options: key.options, skeleton: skel.digest });
  if (rec === undefined || deltaProblem(rec, skel, memo.kinds, generatedValidator) !== undefined) return undefined;
  const note = deltaNote(rec, skel);
  const a = rec.answer;
  let stdout: string[];
  if (memo.json) {
    const rep = jsonReport(a.stdout);
    if (rep === undefined) return undefined;
    stdout = [JSON.stringify({ ...rep, incremental: { basis: a.at, changedOps: note.changed, note: note.text } }, null, 2)];
  } else stdout = [...a.stdout, note.text];
  const answer: Answer = { ...a, stdout, at: new Date().toISOString(), seconds: (performance.now() - t0) / 1000 };
  // The next run on these bytes is an exact hit.
  storeAnswer(dir, key, answer);
  return emitAnswer(answer, memo.junit, out);
}

/**
 * `verify` answered from the records above, before yargs or the engine load: an exact answer
 * for these plan bytes, or a delta answer. Undefined when there is none (the ordinary run
 * decides). Never throws: anything unexpected is a miss.
 */
export function fastVerify(argv: readonly string[], out: Out): number | undefined {
  const t0 = performance.now();
  try {
    if (argv[0] !== 'verify' || process.env['PLANPROOF_NO_FAST'] === '1') return undefined;
    // Such runs keep no command-line memo: nothing to look up (not even the build digest).
    if (argv.includes('--no-cache') || argv.includes('--no-answer-cache')) return undefined;
    for (const dir of candidateDirs(argv)) {
      const memo = lookupArgvMemo(dir, argv);
      if (memo === undefined) continue;
      const file = memo.options['plan'];
      if (typeof file !== 'string') return undefined;
      const bytes = readFileSync(file);
      if (bytes.length > memo.maxBytes) return undefined;
      const text = bytes.toString('utf8');
      const key = answerKey(text, memo.options);
      const kept = lookupAnswer(dir, key);
      if (kept !== undefined) return replayAnswer(kept, memo.json, memo.junit, out);
      // This process has the default heap (the heap child has not started): a file too large to
      // parse here comfortably is left to the ordinary run, which tries deltaAnswer itself.
      if (bytes.length * 32 > getHeapStatistics().heap_size_limit) return undefined;
      return deltaAnswer(dir, text, key, memo, out, t0);
    }
    return undefined;
  } catch {
    return undefined;
  }
}
