/**
 * Loader fuzzing (issue 13): structure-aware corruption of valid plans with fast-check
 * (types, ranges, references, lineage, deleted and added fields), each run through the CLI's
 * main in process. Every case must end in exit 2 naming a JSON path, or in a verdict the
 * ground truth does not contradict; never exit 4, never a stack trace, within 10 s, and the
 * process's resident size growing by less than 1 GiB.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { generatePlan } from '../../plans/gen/plan.js';
import { PRESETS } from '../../plans/gen/presets.js';
import type { ModelConfig } from '../../plans/gen/models.js';
import { OPT, truthOf, verifyCli, VERIFY_FLAGS } from './harness.js';
import type { Json } from './mutations.js';

export const FUZZ_MS = 10_000;
export const FUZZ_RSS = 2 ** 30;

export interface FuzzSource {
  readonly name: string;
  readonly plan: Json;
}

const EXAMPLES = fileURLToPath(new URL('../../../examples', import.meta.url));

export function fuzzSources(): FuzzSource[] {
  const ex = ['mlp-dp2.json', 'mlp-tp2.json', 'mlp-dp2tp2.json', 'mlp-dp2-explicit.json', 'mlp-tp2-explicit.json'].map((f) => ({ name: f, plan: JSON.parse(readFileSync(join(EXAMPLES, f), 'utf8')) as Json }));
  const mlp = (PRESETS['mlp-tiny'] as { model: ModelConfig }).model;
  const gen = [
    { name: 'gen mlp dp2 tp2 mb2', plan: generatePlan({ model: mlp, par: { dp: 2, tp: 2, micro: 2 }, optimizer: OPT }) },
    { name: 'gen mlp-2l pp2', plan: generatePlan({ model: { ...mlp, layers: 2 }, par: { dp: 1, tp: 1, micro: 2, pp: 2 }, optimizer: OPT }) },
  ];
  return [...ex, ...gen];
}

type Path = (string | number)[];
type Node = { path: Path; value: unknown; key: string | number | undefined; inLineage: boolean };

function nodes(v: unknown, path: Path = [], inLineage = false, out: Node[] = []): Node[] {
  out.push({ path, value: v, key: path[path.length - 1], inLineage });
  if (Array.isArray(v)) v.forEach((x, i) => nodes(x, [...path, i], inLineage, out));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) nodes(x, [...path, k], inLineage || k === 'lineage', out);
  return out;
}

const REF_KEYS = new Set(['inputs', 'outputs', 'logical', 'id', 'op']);
/** The key a leaf hangs under, through arrays (inputs[0] -> inputs). */
function owner(n: Node): string {
  for (let i = n.path.length - 1; i >= 0; i--) if (typeof n.path[i] === 'string') return n.path[i] as string;
  return '';
}

export const CORRUPTIONS = ['type', 'range', 'reference', 'lineage', 'delete', 'insert'] as const;
export type Corruption = (typeof CORRUPTIONS)[number];

export interface FuzzCase {
  readonly source: number;
  readonly kind: Corruption;
  readonly at: number;
  readonly value: unknown;
  readonly pick: number;
}

const RANGE_VALUES: readonly unknown[] = [-1, 0, 1, 2, 3, 0.5, -0.5, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, -1e308, 1e9, '1/0', '0/0', '-1/0', '1e999', '1/3', '-7', 'x', ''];

export const fuzzCaseArb = (nSources: number): fc.Arbitrary<FuzzCase> =>
  fc.record({
    source: fc.nat({ max: nSources - 1 }),
    kind: fc.constantFrom(...CORRUPTIONS),
    at: fc.nat(),
    pick: fc.nat(),
    value: fc.oneof(
      fc.string({ maxLength: 6 }),
      fc.integer({ min: -5, max: 70 }),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.boolean(),
      fc.constant(null),
      fc.constant([]),
      fc.constant({}),
      fc.array(fc.integer({ min: -2, max: 9 }), { maxLength: 3 }),
      fc.constantFrom(...RANGE_VALUES),
    ),
  });

const typeOf = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

function setAt(root: Json, path: Path, v: unknown): void {
  let o: unknown = root;
  for (const k of path.slice(0, -1)) o = (o as Record<string | number, unknown>)[k];
  (o as Record<string | number, unknown>)[path[path.length - 1] as string | number] = v;
}

/** Applies a corruption to a copy of `plan`; returns the copy and a description. */
export function corrupt(plan: Json, c: FuzzCase): { plan: Json; what: string } {
  const p = JSON.parse(JSON.stringify(plan)) as Json;
  const all = nodes(p).filter((n) => n.path.length > 0);
  const choose = (xs: Node[]): Node => xs[c.at % xs.length] as Node;
  const ids = [...new Set(all.filter((n) => n.key === 'id' && typeof n.value === 'string').map((n) => n.value as string))];
  const where = (n: Node): string => `$${n.path.map((k) => (typeof k === 'number' ? `[${k}]` : `.${k}`)).join('')}`;
  switch (c.kind) {
    case 'type': {
      const n = choose(all);
      // A value of another JSON type (the drawn one if it differs, else a string).
      const v = typeOf(c.value) !== typeOf(n.value) ? c.value : typeof n.value === 'string' ? 7 : 'x';
      setAt(p, n.path, v);
      return { plan: p, what: `type at ${where(n)}: ${JSON.stringify(n.value)?.slice(0, 40)} -> ${JSON.stringify(v)}` };
    }
    case 'range': {
      const leaves = all.filter((n) => typeof n.value === 'number' || (typeof n.value === 'string' && /^-?\d+(\/\d+)?$/.test(n.value)));
      const n = choose(leaves);
      const v = RANGE_VALUES[c.pick % RANGE_VALUES.length];
      setAt(p, n.path, v);
      return { plan: p, what: `range at ${where(n)}: ${JSON.stringify(n.value)} -> ${JSON.stringify(v)}` };
    }
    case 'reference': {
      const refs = all.filter((n) => typeof n.value === 'string' && REF_KEYS.has(owner(n)));
      const n = choose(refs);
      const v = c.pick % 5 === 0 ? 'no_such_name' : ids[c.pick % ids.length];
      setAt(p, n.path, v);
      return { plan: p, what: `reference at ${where(n)}: ${JSON.stringify(n.value)} -> ${JSON.stringify(v)}` };
    }
    case 'lineage': {
      const lin = all.filter((n) => n.inLineage && n.key !== 'lineage');
      if (lin.length === 0) return corrupt(plan, { ...c, kind: 'type' });
      const n = choose(lin);
      let v: unknown;
      if (Array.isArray(n.value) && n.value.length === 2) v = [n.value[1], n.value[0]]; // a reversed range
      else if (typeof n.value === 'string' && /^[SP]\(/.test(n.value)) v = ['S(9)', 'P(xx)', 'S(-1)', 'R', 'P(max)', 'S(1)'][c.pick % 6];
      else v = c.pick % 2 === 0 ? RANGE_VALUES[c.pick % RANGE_VALUES.length] : c.value;
      setAt(p, n.path, v);
      return { plan: p, what: `lineage at ${where(n)}: ${JSON.stringify(n.value)?.slice(0, 60)} -> ${JSON.stringify(v)}` };
    }
    case 'delete': {
      const n = choose(all);
      const parent = n.path.slice(0, -1);
      let o: unknown = p;
      for (const k of parent) o = (o as Record<string | number, unknown>)[k];
      if (Array.isArray(o)) o.splice(n.key as number, 1);
      else delete (o as Record<string, unknown>)[n.key as string];
      return { plan: p, what: `deleted ${where(n)}` };
    }
    case 'insert': {
      const containers = all.filter((n) => n.value !== null && typeof n.value === 'object');
      const n = choose(containers);
      if (Array.isArray(n.value)) {
        const dup = n.value.length > 0 && c.pick % 2 === 0 ? JSON.parse(JSON.stringify(n.value[c.pick % n.value.length])) as unknown : c.value;
        n.value.splice(c.pick % (n.value.length + 1), 0, dup);
        return { plan: p, what: `inserted ${JSON.stringify(dup)?.slice(0, 60)} into ${where(n)}` };
      }
      (n.value as Json)[`x_fuzz_${c.pick % 3}`] = c.value;
      (n.value as Json)[['shape', 'attrs', 'group', 'peer', 'lineage', 'value', 'index'][c.pick % 7] as string] ??= c.value;
      return { plan: p, what: `fields added to ${where(n)}` };
    }
  }
}

export interface FuzzOutcome {
  readonly code: number;
  readonly ms: number;
  readonly what: string;
  readonly failure?: string;
}

const STACK = /^\s+at .+:\d+:\d+\)?$/m;

/** Runs one fuzz case through the CLI and checks what a user (or CI) would see. */
export async function runFuzzCase(sources: readonly FuzzSource[], c: FuzzCase, dir: string): Promise<FuzzOutcome> {
  const { plan, what } = corrupt((sources[c.source] as FuzzSource).plan, c);
  // In process, the resident size also holds the harness (and Z3's heap once grown): a case is
  // charged with the growth it causes.
  const rss0 = process.memoryUsage().rss;
  const v = await verifyCli(plan, dir, VERIFY_FLAGS, 3 * FUZZ_MS);
  const grew = process.memoryUsage().rss - rss0;
  const fail = (f: string): FuzzOutcome => ({ code: v.code, ms: v.ms, what, failure: `${what}: ${f}` });
  if (v.code === -1) return fail(`no answer within ${(3 * FUZZ_MS) / 1000} s`);
  if (v.threw !== undefined) return fail(`internal error (exit 4): ${v.threw.split('\n')[0] ?? ''}`);
  if (v.code === 4 || v.code < 0 || v.code > 4) return fail(`exit ${v.code}: ${v.stderr.slice(0, 200)}`);
  if (STACK.test(v.stdout) || STACK.test(v.stderr)) return fail('a stack trace in the output');
  if (v.ms > FUZZ_MS) return fail(`took ${(v.ms / 1000).toFixed(1)} s`);
  if (grew > FUZZ_RSS) return fail(`resident memory grew by ${(grew / 2 ** 20).toFixed(0)} MiB`);
  if (v.code === 2) {
    let paths: string[];
    try {
      const j = JSON.parse(v.stdout) as { verdict?: string; issues?: { path?: string }[] };
      if (j.verdict !== 'invalid') return fail(`exit 2 with verdict ${String(j.verdict)}`);
      paths = (j.issues ?? []).map((i) => i.path ?? '');
    } catch {
      return fail('exit 2 without a JSON report');
    }
    if (!paths.some((x) => x.startsWith('$'))) return fail(`exit 2 without a JSON path (${JSON.stringify(paths).slice(0, 100)})`);
    return { code: v.code, ms: v.ms, what };
  }
  if (v.code === 0 || v.code === 1) {
    const t = truthOf(plan);
    if (t !== 'unloadable' && v.code === 0 && t.kind === 'wrong') return fail(`false pass (${t.where})`);
    if (t !== 'unloadable' && v.code === 1 && t.kind === 'correct') return fail('false alarm');
  }
  return { code: v.code, ms: v.ms, what };
}

export interface FuzzResult {
  readonly cases: number;
  readonly byExit: Map<number, number>;
  readonly byKind: Map<string, number>;
  readonly failures: string[];
  readonly maxMs: number;
  readonly peakRss: number;
  readonly ms: number;
}

/** `runs` cases drawn by fast-check from `seed` (fc.sample: the benchmark counts every case rather than stopping at the first failure). */
export async function runFuzz(o: { seed: number; runs: number; sources: readonly FuzzSource[]; dir: string; saveDir?: string }): Promise<FuzzResult> {
  const t0 = performance.now();
  const cases = fc.sample(fuzzCaseArb(o.sources.length), { seed: o.seed, numRuns: o.runs });
  const byExit = new Map<number, number>();
  const byKind = new Map<string, number>();
  const failures: string[] = [];
  let maxMs = 0;
  let peakRss = 0;
  for (const c of cases) {
    const r = await runFuzzCase(o.sources, c, o.dir);
    byExit.set(r.code, (byExit.get(r.code) ?? 0) + 1);
    byKind.set(c.kind, (byKind.get(c.kind) ?? 0) + 1);
    maxMs = Math.max(maxMs, r.ms);
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
    if (r.failure !== undefined) {
      failures.push(r.failure);
      if (o.saveDir !== undefined) {
        mkdirSync(o.saveDir, { recursive: true });
        writeFileSync(join(o.saveDir, `fuzz-failure-${failures.length}.json`), JSON.stringify({ ...corrupt((o.sources[c.source] as FuzzSource).plan, c).plan, 'x-fuzz': r.failure }, null, 1));
      }
    }
  }
  return { cases: cases.length, byExit, byKind, failures, maxMs, peakRss, ms: performance.now() - t0 };
}
