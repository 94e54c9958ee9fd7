import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { loadPlanObject, loadPlanText } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { firstBadOffset } from '../plans/json.js';
import { EXAMPLES, FIXTURES, runCli } from './helpers.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A chain of identity ops over a dp mesh, every tensor one element of its logical tensor per
 * rank: ranks x (links + 1) per-rank lineage claims.
 */
function wideChain(ranks: number, links: number): object {
  const ids = Array.from({ length: links + 1 }, (_, i) => `t${i}`);
  return {
    format: 'planproof/v1',
    mesh: { axes: [{ name: 'dp', size: ranks }] },
    logical: {
      tensors: ids.map((id, i) => ({ id, shape: [ranks], role: i === 0 ? 'input' : 'activation' })),
      ops: ids.slice(1).map((id, i) => ({ id: `op${i}`, op: 'identity', inputs: [ids[i]], outputs: [id] })),
    },
    parallel: {
      programs: [
        {
          ranks: 'all',
          tensors: ids.map((id) => ({ id, shape: [1], lineage: { logical: id, index: [[{ expr: 'dp' }, { expr: 'dp + 1' }]] } })),
          ops: ids.slice(1).map((id, i) => ({ id: `op${i}`, op: 'identity', inputs: [ids[i]], outputs: [id] })),
        },
      ],
    },
    contract: { inputs: ['t0'], outputs: [ids[links]] },
  };
}

const bases = [`${EXAMPLES}mlp-dp2.json`, `${EXAMPLES}mlp-tp2.json`, `${FIXTURES}equiv/mlp-dp2.explicit.json`].map((f) => JSON.parse(readFileSync(f, 'utf8')) as unknown);

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** All container paths of a JSON value (as key lists). */
function paths(v: Json, prefix: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  if (v !== null && typeof v === 'object') {
    out.push(prefix);
    if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...prefix, i], out));
    else for (const [k, x] of Object.entries(v)) paths(x, [...prefix, k], out);
  }
  return out;
}

type Mutation = { kind: 'set' | 'delete' | 'dup'; at: number; key: number; value: Json };

function mutate(base: Json, muts: Mutation[]): Json {
  const doc = structuredClone(base);
  for (const m of muts) {
    const ps = paths(doc);
    const p = ps[m.at % ps.length] as (string | number)[];
    let node: Json = doc;
    for (const k of p) node = (node as Record<string | number, Json>)[k] as Json;
    if (node === null || typeof node !== 'object') continue;
    const keys = Array.isArray(node) ? node.map((_, i) => i) : Object.keys(node);
    if (keys.length === 0) continue;
    const k = keys[m.key % keys.length] as string | number;
    if (m.kind === 'set') (node as Record<string | number, Json>)[k] = structuredClone(m.value);
    else if (m.kind === 'delete') {
      if (Array.isArray(node)) node.splice(k as number, 1);
      else delete (node as Record<string, Json>)[k as string];
    } else if (Array.isArray(node)) node.push(structuredClone(node[k as number] as Json));
  }
  return doc;
}

const mutation = fc.record({
  kind: fc.constantFrom('set' as const, 'delete' as const, 'dup' as const),
  at: fc.nat(),
  key: fc.nat(),
  value: fc.oneof(fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>, fc.constantFrom<Json>(-1, 0, 1, 2, 1e12, 2 ** 31, '*', 'R', 'S(0)', 'P(avg)', 'x', 'dp', { expr: 'dp*2' }, { expr: 'dp/0' }, [0, 2], [[0, 1], [1, 2]])),
});

describe('hostile input never crashes the loader', () => {
  it('random mutations of valid plans load or are rejected with a located PlanError', () => {
    let rejected = 0;
    fc.assert(
      fc.property(fc.nat(bases.length - 1), fc.array(mutation, { minLength: 1, maxLength: 4 }), (b, muts) => {
        const doc = mutate(bases[b] as Json, muts);
        try {
          loadPlanObject('fuzz.json', doc);
        } catch (e) {
          if (!(e instanceof PlanError)) throw e;
          rejected++;
          assert.ok(e.issues.length > 0);
          for (const i of e.issues) assert.ok(i.message.length > 0 && !/undefined|NaN|\[object Object\]/.test(i.message), `bad message: ${i.message}`);
        }
      }),
      { numRuns: 400, seed: 20261121 },
    );
    // Sanity: the mutations are not all harmless.
    assert.ok(rejected > 100, `only ${rejected} of 400 mutated plans were rejected`);
  });
  it('deep nesting is rejected by depth, not by a stack overflow', () => {
    const deep = '{"a":'.repeat(100000) + '{}' + '}'.repeat(100000);
    const text = readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8').replace('"attrs": {\n     "approximate": "none"\n    }', `"attrs": {"approximate": "none", "k": ${deep}}`);
    assert.notEqual(text.indexOf('"k": {"a"'), -1, 'the fixture edit did not apply');
    assert.throws(() => loadPlanText('deep.json', text), (e: unknown) => e instanceof PlanError && /nested deeper than 64 levels/.test(e.message) && /\$\.logical\.ops\[1\]\.attrs\.k\.a\.a/.test(e.message));
  });
  it('an attribute object shaped like an expression is attributes, not an expression (fuzz regression)', () => {
    const doc = structuredClone(bases[2]) as { parallel: { programs: { ops: { attrs?: unknown }[] }[] } };
    const op = doc.parallel.programs[0]?.ops[5];
    assert.ok(op !== undefined);
    op.attrs = { expr: 'dp*2' };
    assert.throws(() => loadPlanObject('x.json', doc), (e: unknown) => e instanceof PlanError && /\$\.parallel\.programs\[0\]\.ops\[5\]/.test(e.message));
  });
  it('a 40,000-op dependency chain loads, and a cycle closing it is reported (no recursion depth limit)', () => {
    const n = 40000;
    const chain = (cyclic: boolean): unknown => {
      const tensors = Array.from({ length: n + 1 }, (_, i) => ({ id: `t${i}`, shape: [2], role: i === 0 ? 'input' : i === n ? 'output' : 'activation' }));
      const ops = Array.from({ length: n }, (_, i) =>
        i === 0 && cyclic ? { id: 'op0', op: 'add', inputs: ['t0', `t${n}`], outputs: ['t1'] } : { id: `op${i}`, op: 'neg', inputs: [`t${i}`], outputs: [`t${i + 1}`] },
      );
      return {
        format: 'planproof/v1',
        mesh: { axes: [{ name: 'dp', size: 1 }] },
        logical: { tensors, ops },
        parallel: {
          programs: [
            {
              ranks: 'all',
              tensors: [
                { id: 'a', shape: [2], lineage: { logical: 't0' } },
                { id: 'b', shape: [2], lineage: { logical: `t${n}` } },
              ],
              ops: [{ id: 'x', op: 'identity', inputs: ['a'], outputs: ['b'] }],
            },
          ],
        },
        contract: { inputs: ['t0'], outputs: [`t${n}`] },
      };
    };
    assert.equal(loadPlanObject('chain.json', chain(false)).logical.ops.size, n);
    assert.throws(() => loadPlanObject('cyc.json', chain(true)), (e: unknown) => e instanceof PlanError && /logical graph has a cycle through ops 'op\d+' -> .* -> \.\.\. 39991 more \.\.\. -> .*\(a cycle of 40000 ops\)$/.test(e.message) && e.message.length < 400);
  });
  it('__proto__ keys are data, not prototype writes', () => {
    const text = readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8').replace('"attrs": {\n     "approximate": "none"\n    }', '"attrs": {"approximate": "none", "__proto__": {"polluted": 1}}');
    assert.throws(() => loadPlanText('proto.json', text), /unknown attribute '__proto__'/);
    assert.equal(({} as Record<string, unknown>)['polluted'], undefined);
  });
});

describe('plans of many ranks', () => {
  it('load per template: 65,536 ranks x 64 tensors checked as 64 families, not 4 million claims', async () => {
    const ranks = 1 << 16;
    const links = 63;
    const t0 = performance.now();
    const p = loadPlanObject('wide.json', wideChain(ranks, links));
    assert.ok(performance.now() - t0 < 20_000, 'the load does not walk ranks x tensors');
    assert.equal(p.stats.lineage.symbolicTensors, links + 1);
    assert.equal(p.stats.lineage.enumeratedClaims, 0);
    assert.deepEqual(p.coverage.map((c) => [c.claims, c.holders, c.complete]).slice(0, 2), [[ranks, ranks, true], [ranks, ranks, true]]);
    // The same plan through the CLI: inspect exits 0; verify decomposes its stages per template
    // instead of rank by rank (never a heap exhaustion) and proves them at tensor level, one
    // derivation per program.
    const dir = mkdtempSync(join(tmpdir(), 'planproof-wide-'));
    writeFileSync(join(dir, 'wide.json'), JSON.stringify(wideChain(ranks, links)));
    const i = await runCli(['inspect', join(dir, 'wide.json')]);
    assert.equal(i.code, 0, i.stderr);
    const r = await runCli(['verify', join(dir, 'wide.json')]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /decomposed per template \(building its stages rank by rank would take [0-9,]+ per-rank tensor and op entries/);
    assert.match(r.stdout, /verdict {5}VERIFIED/);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
    // On fewer ranks, the claims are still there for the stages: one per rank and tensor.
    const small = loadPlanObject('narrow.json', wideChain(1 << 10, 8));
    assert.equal(small.claims.length, (1 << 10) * 9);
  }).timeout(120_000);
  it('are bounded by their text: ops and claims as written, with the limit named', () => {
    assert.throws(() => loadPlanObject('wide.json', wideChain(4, 99), { limits: { ops: 150 } }), (e: unknown) => e instanceof PlanError && /has 198 ops as written; the limit is 150 \(--max-ops raises it/.test(e.message));
    assert.throws(() => loadPlanObject('wide.json', wideChain(4, 99), { limits: { claims: 50 } }), (e: unknown) => e instanceof PlanError && /has 100 lineage claims as written; the limit is 50/.test(e.message));
    assert.equal(loadPlanObject('wide.json', wideChain(4, 99), { limits: { ops: 198, claims: 100 } }).coverage.length, 100);
  });
  it('refuse more than 500,000 ops or claims by default, counted before the schema runs (issue 13, defect 4)', () => {
    // Before: the limits were 4,000,000 and checked after the schema, so a plan of 10^6 dead
    // ops was loaded and proved (127 s, 7.6 GB) and a malformed huge one validated op by op.
    const plan = JSON.parse(JSON.stringify(wideChain(2, 3))) as { logical: { ops: unknown[] }; parallel: { programs: { tensors: unknown[] }[] } };
    plan.logical.ops = Array.from({ length: 500_001 }, () => ({}));
    assert.throws(() => loadPlanObject('huge.json', plan), (e: unknown) => e instanceof PlanError && e.issues.length === 1 && /has 500,0\d\d ops as written; the limit is 500,000 \(--max-ops raises it/.test(e.message));
    const claims = JSON.parse(JSON.stringify(wideChain(2, 3))) as { parallel: { programs: { tensors: unknown[] }[] } };
    const prog = claims.parallel.programs[0];
    assert.ok(prog !== undefined);
    prog.tensors = Array.from({ length: 500_001 }, () => ({ lineage: 'x' }));
    assert.throws(() => loadPlanObject('claims.json', claims), (e: unknown) => e instanceof PlanError && e.issues.length === 1 && /has 500,001 lineage claims as written; the limit is 500,000 \(--max-claims raises it/.test(e.message));
  });
});

describe('hostile input: echoed text and JSON syntax (issue 32, item 4)', () => {
  const issuesOf = (text: string): { path: string; where?: string; message: string }[] => {
    try {
      loadPlanText('t.json', text);
    } catch (e) {
      assert.ok(e instanceof PlanError, String(e));
      return [...e.issues];
    }
    assert.fail('loaded');
  };

  it('every JSON syntax error has a line and column, and says what JSON lacks', () => {
    const cases: [string, string, RegExp][] = [
      ['{\n  "format": NaN\n}', 'line 2, column 13', /unexpected "N": JSON has no NaN or Infinity/],
      ['{"a": [1, Infinity]}', 'line 1, column 11', /NaN or Infinity/],
      ['{"a": -Infinity}', 'line 1, column 8', /NaN or Infinity/],
      ['// a plan\n{}', 'line 1, column 1', /JSON has no comments/],
      ['{\n  "a": 1 /* x */\n}', 'line 2, column 10', /./],
      ["{'a': 1}", 'line 1, column 2', /double quotes/],
      ['{"a": tru}', 'line 1, column 7', /unexpected "t"/],
    ];
    for (const [text, where, re] of cases) {
      const [i] = issuesOf(text);
      assert.equal(i?.where, where, text);
      assert.match(i?.message ?? '', re, text);
      assert.ok((i?.message.length ?? 0) < 200, i?.message);
    }
  });

  it('the scan that locates them agrees with JSON.parse on what is JSON (property)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.json(), fc.string(), fc.json().map((j) => j.slice(0, -1)), fc.json().map((j) => `${j}x`)), (text) => {
        let valid = true;
        try {
          JSON.parse(text);
        } catch {
          valid = false;
        }
        const bad = firstBadOffset(text);
        return valid ? bad === undefined : bad !== undefined && bad <= text.length;
      }),
      { numRuns: 2000 },
    );
  });

  it('a 5 MB unknown key, format string and JSON error are not echoed whole', async () => {
    const big = 'k'.repeat(5 << 20);
    const plan = JSON.parse(readFileSync(`${EXAMPLES}mlp-dp2.json`, 'utf8')) as Record<string, unknown>;
    const dir = mkdtempSync(join(tmpdir(), 'planproof-echo-'));
    const files: [string, string][] = [
      ['key.json', JSON.stringify({ ...plan, [big]: 1 })],
      ['format.json', JSON.stringify({ ...plan, format: big })],
      ['syntax.json', `{"a": ${big}}`],
    ];
    for (const [name, text] of files) {
      const f = join(dir, name);
      writeFileSync(f, text);
      const r = await runCli(['verify', f, '--no-cache']);
      assert.equal(r.code, 2, name);
      assert.ok(r.stderr.length < 20_000, `${name}: ${r.stderr.length} characters on stderr`);
      if (name !== 'syntax.json') assert.match(r.stderr, /characters\)/, name);
    }
  });
});
