/**
 * Incremental re-verification (cli/delta.ts) and the executable's fast path: a plan file
 * changed only in value-only attributes is answered VERIFIED without loading it exactly when
 * every equality of them the tensor-level proofs relied on still holds; any other change, a
 * refused value, and any tampered record verify in full. Every incremental answer is checked
 * against a full run of the same file.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { deltaProblem, fastVerify, lookupDelta, skeletonOf, type DeltaRecord, type ValueKinds } from '../cli/delta.js';
import { buildDigest } from '../cli/answers.js';
import { registry } from '../ops/registry.js';
import { loadPlanObject } from '../lineage/load.js';
import { AttrUse } from '../stages/engines/tensorlevel/world.js';
import { filesUnder, ROOT, runCli } from './helpers.js';

const INCREMENTAL = /^incremental VERIFIED without loading the plan/m;
const CACHE_LINE = /^cache {7}answer kept from /m;

interface RawOp {
  id: string;
  op: string;
  attrs?: Record<string, unknown>;
}
interface Raw {
  logical: { ops: RawOp[] };
  parallel: { programs: { ops: RawOp[] }[] };
}

/** What the executable does (cli/main.ts): the fast path, else the ordinary run. */
async function exe(args: string[]): Promise<{ code: number; stdout: string; stderr: string; fast: boolean }> {
  let stdout = '';
  let stderr = '';
  const code = fastVerify(args, { log: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') });
  if (code !== undefined) return { code, stdout, stderr, fast: true };
  return { ...(await runCli(args)), fast: false };
}

/** Sets attrs[key] = value on the ops with this id: on the logical side, in every program, or both. */
function edit(raw: Raw, id: string, key: string, value: unknown, side: 'both' | 'logical' | 'parallel'): number {
  let n = 0;
  const lists = [...(side === 'parallel' ? [] : [raw.logical.ops]), ...(side === 'logical' ? [] : raw.parallel.programs.map((p) => p.ops))];
  for (const ops of lists)
    for (const o of ops) {
      if (o.id !== id || o.attrs === undefined) continue;
      o.attrs[key] = value;
      n++;
    }
  return n;
}

describe('incremental re-verification (value-only attributes)', function () {
  this.timeout(600_000);
  let dir: string;
  let cache: string;
  let plan: string;
  let base: string;
  const args = (): string[] => ['verify', plan, '--cache', cache];
  /** Writes the base plan with these edits to the plan path. */
  const write = (...edits: [string, string, unknown, 'both' | 'logical' | 'parallel'][]): void => {
    const raw = JSON.parse(base) as Raw;
    for (const [id, key, v, side] of edits) assert.ok(edit(raw, id, key, v, side) > 0, `${id} ${key}`);
    writeFileSync(plan, JSON.stringify(raw, null, 1));
  };
  /** The full run of the file as it is now (no cache: nothing kept is read). */
  const full = async (): Promise<number> => (await runCli(['verify', plan, '--no-cache'])).code;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'planproof-delta-'));
    cache = join(dir, 'cache');
    plan = join(dir, 'p.json');
    // Past PER_TEMPLATE_FIRST per-rank entries: verified at tensor level per template (about 1 s).
    const g = await runCli(['gen', '--preset', 'llama-tiny', '--dp', '4096', '--tp', '1', '--micro', '1', '--batch', '4096', '--out', plan]);
    assert.equal(g.code, 0, g.stderr);
    base = readFileSync(plan, 'utf8');
    const cold = await exe(args());
    assert.equal(cold.code, 0, cold.stderr);
    assert.equal(cold.fast, false);
    assert.equal(filesUnder(cache, 'delta').length, 1, 'a VERIFIED run per template keeps a delta record');
    assert.equal(filesUnder(cache, 'argv').length, 1);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('answers the same bytes again from the fast path, and a changed eps or lr on both sides incrementally @full', async () => {
    writeFileSync(plan, base);
    const again = await exe(args());
    assert.equal(again.fast, true);
    assert.equal(again.code, 0);
    assert.match(again.stdout, CACHE_LINE);
    for (const edits of [
      [['l0/rms_norm', 'eps', '1/1000', 'both']],
      [['l0/rms_norm', 'eps', '1/1000', 'both'], ['l0/rms_norm#1', 'eps', 3, 'both']],
      [['grad/l0/rms_norm_backward', 'eps', '2/7', 'both']],
    ] as [string, string, unknown, 'both'][][]) {
      write(...edits);
      const r = await exe(args());
      assert.equal(r.fast, true, JSON.stringify(edits));
      assert.equal(r.code, 0);
      assert.match(r.stdout, INCREMENTAL);
      // Each edit changes the logical op and the program's op.
      assert.match(r.stdout, new RegExp(`of ${2 * edits.length} op\\(s\\)`));
      assert.equal(await full(), 0, 'the full run agrees');
      // The incremental answer is kept for these bytes: the next run is an exact hit.
      const next = await exe(args());
      assert.equal(next.fast, true);
      assert.match(next.stdout, CACHE_LINE);
    }
    // The ordinary run tries the same check before loading (plans too large for the fast path).
    write(['l0/rms_norm', 'eps', '1/555', 'both']);
    const viaApp = await runCli(args());
    assert.equal(viaApp.code, 0);
    assert.match(viaApp.stdout, INCREMENTAL);
    // An optimizer hyperparameter of one parameter (its logical and parallel step).
    const raw = JSON.parse(base) as Raw;
    const adam = raw.logical.ops.find((o) => o.op === 'adam_update') as RawOp;
    write([adam.id, 'lr', '1/7', 'both']);
    const r = await exe(args());
    assert.equal(r.fast, true);
    assert.match(r.stdout, INCREMENTAL);
    assert.equal(await full(), 0);
  });

  it('verifies in full when a relied-on equality breaks, and the full run finds the bug @full', async () => {
    for (const side of ['parallel', 'logical'] as const) {
      write(['l0/rms_norm', 'eps', '1/1000', side]);
      const r = await exe(args());
      assert.equal(r.fast, false, side);
      assert.notEqual(r.code, 0, `${side}: eps changed on one side is not verified`);
    }
  });

  it('verifies in full after any other change: a refused value, an expression, a structural attribute, a renamed op @full', async () => {
    const raw0 = JSON.parse(base) as Raw;
    const cases: [string, (r: Raw) => void, number][] = [
      ['eps refused by its schema', (r) => edit(r, 'l0/rms_norm', 'eps', 'abc', 'both'), 2],
      ['eps as an expression', (r) => edit(r, 'l0/rms_norm', 'eps', { expr: 'dp' }, 'both'), -1],
      ['a structural attribute', (r) => edit(r, 'l0/rms_norm', 'normalized_dims', 1, 'both'), -1],
      ['an op renamed', (r) => ((r.logical.ops[0] as RawOp).id = `${(r.logical.ops[0] as RawOp).id}x`), -1],
    ];
    assert.ok(raw0.logical.ops.length > 0);
    for (const [what, change, code] of cases) {
      const raw = JSON.parse(base) as Raw;
      change(raw);
      writeFileSync(plan, JSON.stringify(raw, null, 1));
      const r = await exe(args());
      assert.equal(r.fast, false, what);
      if (code >= 0) assert.equal(r.code, code, `${what}: ${r.stderr}`);
    }
  });

  it('ignores a tampered record or command-line memo and verifies in full', async () => {
    // A memo changed in a way that would still work: the exact answer of these bytes is not used.
    writeFileSync(plan, base);
    assert.equal((await exe(args())).fast, true);
    for (const f of filesUnder(cache, 'argv')) writeFileSync(f, readFileSync(f, 'utf8').replace(/"maxBytes":(\d+)/, (_, n: string) => `"maxBytes":${Number(n) + 1}`));
    const m = await exe(args());
    assert.equal(m.fast, false, 'tampered command-line memo');
    assert.equal(m.code, 0);
    // A delta record whose answer reads differently: not printed.
    write(['l0/rms_norm', 'eps', '1/77', 'both']);
    let n = 0;
    for (const f of filesUnder(cache, 'delta')) {
      const text = readFileSync(f, 'utf8');
      writeFileSync(f, text.replace('all 160 stages proved', 'all 161 stages proved'));
      if (readFileSync(f, 'utf8') !== text) n++;
    }
    assert.ok(n > 0);
    const r = await exe(args());
    assert.equal(r.fast, false, 'tampered delta record');
    assert.equal(r.code, 0);
    assert.doesNotMatch(r.stdout, /161 stages/);
    // The full run kept a sound record again.
    write(['l0/rms_norm', 'eps', '1/78', 'both']);
    const r2 = await exe(args());
    assert.equal(r2.fast, true);
    assert.doesNotMatch(r2.stdout, /161 stages/);
  });

  it('keeps --json reports JSON: the incremental answer says what it is based on', async () => {
    writeFileSync(plan, base);
    const first = await exe([...args(), '--json']);
    assert.equal(first.fast, false);
    write(['l0/rms_norm', 'eps', '1/1234', 'both']);
    const r = await exe([...args(), '--json']);
    assert.equal(r.fast, true);
    const rep = JSON.parse(r.stdout) as { verdict: string; incremental?: { basis: string; changedOps: string[] } };
    assert.equal(rep.verdict, 'verified');
    assert.equal(rep.incremental?.changedOps.length, 2);
  });

  it('the class check is what refuses a one-sided change (and a record without classes would not)', () => {
    const kinds = registry.valueKinds() as ValueKinds;
    const rec = lookupAnyDelta(cache);
    const raw = JSON.parse(base) as Raw;
    edit(raw, 'l0/rms_norm', 'eps', '1/1000', 'parallel');
    const skel = skeletonOf(raw, kinds);
    assert.ok(typeof skel !== 'string');
    const validator = (id: number) => (x: unknown) => registry.checkAttrs(id, x as never) === undefined;
    assert.match(deltaProblem(rec, skel, kinds, validator) ?? '', /no longer have equal value-only attributes/);
    assert.equal(deltaProblem({ ...rec, classes: [] }, skel, kinds, validator), undefined);
  });

  it('records which attribute sets were compared equal, and a set that is no op of the plan spoils the record', () => {
    const p = loadPlanObject('p.json', JSON.parse(base));
    const use = new AttrUse(p);
    const kind = registry.id('rms_norm');
    const lg = p.logical;
    const ops = Array.from({ length: lg.ops.size }, (_, i) => i).filter((i) => lg.ops.kind[i] === kind);
    use.same(kind, lg.attrs[ops[0] as number], lg.attrs[ops[1] as number]);
    assert.deepEqual(use.classes(), [[`L${ops[0] as number}`, `L${ops[1] as number}`]]);
    assert.equal(use.poisoned, undefined);
    use.same(kind, { eps: '1/100000' }, lg.attrs[ops[0] as number]);
    assert.match(use.poisoned ?? '', /not a plan op's own/);
  });

  it('property: whenever a random value-only edit is answered incrementally, the full run verifies it too @full', async () => {
    const raw0 = JSON.parse(base) as Raw;
    const kinds = registry.valueKinds();
    const valued = raw0.logical.ops.filter((o) => kinds[o.op] !== undefined && o.attrs !== undefined);
    let incremental = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ op: fc.integer({ min: 0, max: valued.length - 1 }), v: fc.constantFrom<unknown>('1/1000', 3, '2/9', 0, '1/100000'), side: fc.constantFrom('both', 'both', 'logical', 'parallel') }), { minLength: 1, maxLength: 2 }),
        async (edits) => {
          const raw = JSON.parse(base) as Raw;
          for (const e of edits) {
            const o = valued[e.op] as RawOp;
            const keys = (kinds[o.op]?.keys ?? []).filter((k) => o.attrs !== undefined && k in o.attrs && typeof o.attrs[k] !== 'boolean' && k !== 'step');
            if (keys.length > 0) edit(raw, o.id, keys[0] as string, e.v, e.side as 'both');
          }
          writeFileSync(plan, JSON.stringify(raw, null, 1));
          const r = await exe(args());
          const f = await full();
          if (r.fast) {
            incremental++;
            assert.equal(r.code, 0);
            assert.equal(f, 0, `answered incrementally but the full run says ${f}: ${JSON.stringify(edits)}`);
          } else refused++;
          // Edits on both sides only: the incremental path must answer.
          if (edits.every((e) => e.side === 'both')) assert.equal(r.fast, true, JSON.stringify(edits));
        },
      ),
      { numRuns: 8, seed: 12 },
    );
    assert.ok(incremental > 0 && refused > 0, `${incremental} incremental, ${refused} in full`);
  });

  it('the executable answers from the fast path without loading the engine', () => {
    write(['l0/rms_norm', 'eps', '1/4242', 'both']);
    const out = execFileSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args()], { encoding: 'utf8', env: { ...process.env, PLANPROOF_DEBUG: '' } });
    assert.match(out, INCREMENTAL);
  });

  /** The record kept for the base plan's skeleton. */
  function lookupAnyDelta(cdir: string): DeltaRecord {
    const skel = skeletonOf(JSON.parse(base), registry.valueKinds());
    assert.ok(typeof skel !== 'string');
    for (const f of filesUnder(cdir, 'delta')) {
      const e = JSON.parse(readFileSync(f, 'utf8')) as { key: { build: string; options: string; skeleton: string } };
      if (e.key.skeleton !== skel.digest || JSON.parse(e.key.options).plan !== plan) continue;
      assert.equal(e.key.build, buildDigest());
      const rec = lookupDelta(cdir, e.key);
      if (rec !== undefined) return rec;
    }
    assert.fail('no delta record for the base plan');
  }
});
