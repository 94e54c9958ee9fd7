/**
 * examples/ stays consistent with examples/manifest.json: every plan loads and passes
 * `planproof inspect`; every plan file is listed; every buggy twin is a small edit of a
 * correct base with the same logical iteration; the stated first failing stage names real
 * tensors and ops of the plan. The verdicts themselves need the proof engine (issue 3);
 * nothing here pretends to check them numerically.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { loadPlan, type LoadedPlan } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { EXAMPLES, runCli } from './helpers.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

interface FirstFailing {
  readonly logicalTensor: string;
  readonly parallelTensor: string;
  readonly logicalOp: string | null;
  readonly parallelOp: string;
  readonly ranks: readonly number[];
}

interface Entry {
  readonly file: string;
  readonly expect: 'verified' | 'not_equivalent';
  readonly strategy: string;
  readonly bug: string | null;
  readonly base?: string;
  readonly firstFailing?: FirstFailing;
}

/** A twin may differ from its base in at most this many JSON leaves (name, description and $schema aside). */
const MAX_TWIN_LEAVES = 16;
/** Top-level keys a twin rewrites by design. */
const FREE_KEYS = new Set(['$schema', 'name', 'description']);

const isObj = (v: Json | undefined): v is { [k: string]: Json } => v !== null && v !== undefined && typeof v === 'object' && !Array.isArray(v);

function readJson(file: string): Json {
  return JSON.parse(readFileSync(file, 'utf8')) as Json;
}

/** Checks the manifest's shape by hand so a malformed entry fails with its index. */
function parseManifest(raw: Json): Entry[] {
  assert.ok(Array.isArray(raw), 'examples/manifest.json must be an array');
  return raw.map((e, i) => {
    const at = `manifest[${i}]`;
    assert.ok(isObj(e), `${at} is not an object`);
    const allowed = new Set(['file', 'expect', 'strategy', 'bug', 'base', 'firstFailing']);
    for (const k of Object.keys(e)) assert.ok(allowed.has(k), `${at}: unknown key '${k}'`);
    assert.equal(typeof e['file'], 'string', `${at}.file`);
    assert.ok(e['expect'] === 'verified' || e['expect'] === 'not_equivalent', `${at}.expect must be verified or not_equivalent`);
    assert.ok(typeof e['strategy'] === 'string' && e['strategy'] !== '', `${at}.strategy`);
    if (e['expect'] === 'verified') {
      assert.equal(e['bug'], null, `${at}: a correct example has bug null`);
      assert.ok(!('base' in e) && !('firstFailing' in e), `${at}: a correct example has no base or firstFailing`);
    } else {
      assert.ok(typeof e['bug'] === 'string' && e['bug'] !== '', `${at}.bug must describe the bug`);
      assert.equal(typeof e['base'], 'string', `${at}.base`);
      const f = e['firstFailing'];
      assert.ok(isObj(f), `${at}.firstFailing`);
      for (const k of ['logicalTensor', 'parallelTensor', 'parallelOp']) assert.equal(typeof f[k], 'string', `${at}.firstFailing.${k}`);
      assert.ok(f['logicalOp'] === null || typeof f['logicalOp'] === 'string', `${at}.firstFailing.logicalOp`);
      const ranks = f['ranks'];
      assert.ok(Array.isArray(ranks) && ranks.length > 0 && ranks.every((r) => Number.isInteger(r)), `${at}.firstFailing.ranks`);
      assert.deepEqual([...(ranks as number[])].sort((a, b) => a - b), ranks, `${at}.firstFailing.ranks must be ascending`);
      assert.equal(new Set(ranks).size, ranks.length, `${at}.firstFailing.ranks has duplicates`);
    }
    return e as unknown as Entry;
  });
}

/** Every .json under dir (recursive), relative to dir, with '/' separators. */
function jsonFiles(dir: string, root = dir): string[] {
  const out: string[] = [];
  for (const d of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, d.name);
    if (d.isDirectory()) out.push(...jsonFiles(p, root));
    else if (d.isFile() && d.name.endsWith('.json')) out.push(relative(root, p).split('\\').join('/'));
  }
  return out.sort();
}

function leaves(v: Json | undefined): number {
  if (v === undefined) return 0;
  if (v === null || typeof v !== 'object') return 1;
  const kids: Json[] = Array.isArray(v) ? v : Object.values(v);
  return kids.length === 0 ? 1 : kids.reduce<number>((n, k) => n + leaves(k), 0);
}

/** The key that identifies elements of a list of objects (`id`, else `name`), when every element has a distinct one. */
function keyOf(a: Json[], b: Json[]): string | undefined {
  for (const key of ['id', 'name']) {
    const ks = [...a, ...b].map((x) => (isObj(x) && typeof x[key] === 'string' ? x[key] : undefined));
    if (ks.every((k) => k !== undefined) && new Set(ks.slice(0, a.length)).size === a.length && new Set(ks.slice(a.length)).size === b.length) return key;
  }
  return undefined;
}

/**
 * Leaves that differ between two JSON values. Lists of tensors, ops or programs are matched
 * by id (or name), so deleting one op counts that op's leaves, not every later op's.
 */
export function leafDiff(a: Json | undefined, b: Json | undefined): number {
  if (a === undefined || b === undefined) return leaves(a) + leaves(b);
  if (Array.isArray(a) && Array.isArray(b)) {
    const key = keyOf(a, b);
    if (key !== undefined) {
      const ma = new Map(a.map((x) => [(x as Record<string, Json>)[key] as string, x]));
      const mb = new Map(b.map((x) => [(x as Record<string, Json>)[key] as string, x]));
      let n = 0;
      for (const k of new Set([...ma.keys(), ...mb.keys()])) n += leafDiff(ma.get(k), mb.get(k));
      return n;
    }
    let n = 0;
    for (let i = 0; i < Math.max(a.length, b.length); i++) n += leafDiff(a[i], b[i]);
    return n;
  }
  if (isObj(a) && isObj(b)) {
    let n = 0;
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) n += leafDiff(a[k], b[k]);
    return n;
  }
  if (a !== null && typeof a === 'object') return leaves(a) + leaves(b);
  if (b !== null && typeof b === 'object') return leaves(a) + leaves(b);
  return a === b ? 0 : 1;
}

function withoutFreeKeys(v: Json): Json {
  assert.ok(isObj(v));
  return Object.fromEntries(Object.entries(v).filter(([k]) => !FREE_KEYS.has(k)));
}

function load(file: string): LoadedPlan {
  try {
    return loadPlan(file);
  } catch (err) {
    if (err instanceof PlanError) assert.fail(`${file} is rejected by the loader:\n${err.message}`);
    throw err;
  }
}

describe('examples/', () => {
  const manifest = parseManifest(readJson(`${EXAMPLES}manifest.json`));
  const byFile = new Map(manifest.map((e) => [e.file, e]));
  const buggy = manifest.filter((e) => e.expect === 'not_equivalent');
  const plans = new Map<string, LoadedPlan>();
  const planOf = (file: string): LoadedPlan => {
    let p = plans.get(file);
    if (p === undefined) plans.set(file, (p = load(`${EXAMPLES}${file}`)));
    return p;
  };

  it('the manifest lists each file once, correct examples at the top level and buggy twins under buggy/', () => {
    assert.equal(byFile.size, manifest.length, 'a file is listed twice');
    for (const e of manifest) assert.equal(e.file.startsWith('buggy/'), e.expect === 'not_equivalent', `${e.file}: buggy twins (and only they) live in examples/buggy/`);
    for (const f of ['mlp-dp2.json', 'mlp-tp2.json', 'mlp-dp2tp2.json']) assert.equal(byFile.get(f)?.expect, 'verified', `${f} is listed as verified`);
    assert.ok(buggy.length >= 5, `only ${buggy.length} buggy twins`);
  });

  it('every .json under examples/ (except manifest.json) is in the manifest, and every listed file exists', () => {
    // examples/torch/ holds importer inputs (graph prints, relations files), not plans: test/import.test.ts covers them.
    const onDisk = jsonFiles(EXAMPLES).filter((f) => f !== 'manifest.json' && !f.startsWith('torch/'));
    assert.deepEqual(onDisk, [...byFile.keys()].sort());
  });

  it('every listed plan loads without warnings', () => {
    for (const e of manifest) assert.deepEqual(planOf(e.file).warnings, [], `${e.file} has loader warnings`);
  });

  it('planproof inspect exits 0 on every listed plan', async () => {
    for (const e of manifest) {
      const r = await runCli(['inspect', `${EXAMPLES}${e.file}`]);
      assert.equal(r.code, 0, `inspect ${e.file} exited ${r.code}:\n${r.stderr}`);
    }
  });

  it('every MLP example runs the logical iteration and contract of mlp-dp2.json', () => {
    const ref = readJson(`${EXAMPLES}mlp-dp2.json`) as Record<string, Json>;
    for (const e of manifest.filter((x) => /(^|\/)mlp-/.test(x.file))) {
      const doc = readJson(`${EXAMPLES}${e.file}`) as Record<string, Json>;
      assert.deepEqual(doc['logical'], ref['logical'], `${e.file}: logical graph differs from mlp-dp2.json`);
      assert.deepEqual(doc['contract'], ref['contract'], `${e.file}: contract differs from mlp-dp2.json`);
    }
  });

  it('each buggy twin is a small edit of its correct base: same mesh, logical graph and contract', () => {
    for (const e of buggy) {
      const base = byFile.get(e.base as string);
      assert.equal(base?.expect, 'verified', `${e.file}: base ${e.base} must be a verified example in the manifest`);
      const twin = readJson(`${EXAMPLES}${e.file}`) as Record<string, Json>;
      const orig = readJson(`${EXAMPLES}${e.base}`) as Record<string, Json>;
      for (const k of ['mesh', 'logical', 'contract']) assert.deepEqual(twin[k], orig[k], `${e.file}: ${k} differs from ${e.base}`);
      const n = leafDiff(withoutFreeKeys(twin), withoutFreeKeys(orig));
      assert.ok(n >= 1 && n <= MAX_TWIN_LEAVES, `${e.file} differs from ${e.base} in ${n} JSON leaves (want 1..${MAX_TWIN_LEAVES})`);
    }
  });

  it('the leaf diff counts edits, not shifted list positions', () => {
    const base: Json = { ops: [{ id: 'a', op: 'x' }, { id: 'b', op: 'y', attrs: { k: 1 } }, { id: 'c', op: 'z' }] };
    assert.equal(leafDiff(base, base), 0);
    assert.equal(leafDiff(base, { ops: [{ id: 'a', op: 'x' }, { id: 'c', op: 'z' }] }), 3);
    assert.equal(leafDiff(base, { ops: [{ id: 'a', op: 'x' }, { id: 'b', op: 'y', attrs: { k: 2 } }, { id: 'c', op: 'z' }] }), 1);
    assert.equal(leafDiff([1, 2, 3], [1, 2]), 1);
    assert.equal(leafDiff({ g: { axes: ['dp'] } }, { g: [0, 1] }), 3);
  });

  it('each first failing stage names a logical tensor, its producer, and a tensor and op held on the stated ranks', () => {
    for (const e of buggy) {
      const f = e.firstFailing as FirstFailing;
      const p = planOf(e.file);
      const lt = p.logical.tensors.id(f.logicalTensor);
      assert.ok(lt >= 0, `${e.file}: no logical tensor '${f.logicalTensor}'`);
      const producer = p.logical.producer[lt] as number;
      assert.equal(producer < 0 ? null : p.logical.ops.ids.name(producer), f.logicalOp, `${e.file}: logicalOp is not the producer of '${f.logicalTensor}'`);
      for (const r of f.ranks) {
        assert.ok(r >= 0 && r < p.rankProgram.length, `${e.file}: rank ${r} is not in the mesh`);
        const prog = p.programs[p.rankProgram[r] as number];
        assert.ok(prog !== undefined);
        const t = prog.tensors.id(f.parallelTensor);
        assert.ok(t >= 0, `${e.file}: rank ${r} has no tensor '${f.parallelTensor}'`);
        assert.equal(prog.lineage[t]?.logical, lt, `${e.file}: rank ${r} tensor '${f.parallelTensor}' has no lineage on '${f.logicalTensor}'`);
        const local = prog.ops.ids.id(f.parallelOp);
        const produces = local >= 0 ? prog.ops.opOutputs(local).includes(t) : p.collectives.some((c) => c.id === f.parallelOp && c.outputs[c.group.indexOf(r)] === t);
        assert.ok(produces, `${e.file}: on rank ${r}, '${f.parallelOp}' does not produce '${f.parallelTensor}'`);
      }
    }
  });

  it('examples/buggy/README.md documents every buggy twin', () => {
    const readme = readFileSync(`${EXAMPLES}buggy/README.md`, 'utf8');
    for (const e of buggy) {
      const name = e.file.slice('buggy/'.length);
      assert.ok(readme.includes(`## \`${name}\``), `README has no section for ${name}`);
    }
  });
});
