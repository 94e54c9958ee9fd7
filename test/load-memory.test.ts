/**
 * A load keeps what it built, not the plan as parsed (issue 37 item 4: the 405B-SP plan's parse
 * tree is 230 MB), and coordinate expressions are stored compactly (plans/programs.ts SiteExpr)
 * while an expression that fails for some rank still names the path it was written at.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadPlanObject, type LoadedPlan } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import { EXAMPLES } from './helpers.js';

type Json = Record<string, unknown>;
const example = (): Json => JSON.parse(readFileSync(`${EXAMPLES}mlp-tp2.json`, 'utf8')) as Json;
const tensor = (p: Json, i: number): Json => ((p['parallel'] as { programs: { tensors: Json[] }[] }).programs[0] as { tensors: Json[] }).tensors[i] as Json;

/** The issues of loading `p`, as "path: message". */
function issues(p: Json): string[] {
  try {
    loadPlanObject('t.json', p);
  } catch (e) {
    assert.ok(e instanceof PlanError, String(e));
    return e.issues.map((i) => `${i.path}: ${i.message}`);
  }
  return assert.fail('loaded');
}

describe('load: memory kept and expression paths', () => {
  it('an expression that fails for a rank names its path (shape, lineage range, lineage range list)', () => {
    const a = example();
    (tensor(a, 2)['shape'] as unknown[])[1] = { expr: '(tp+1)/2*2' };
    assert.match(issues(a)[0] ?? '', /^\$\.parallel\.programs\[0\]\.tensors\[2\]\.shape\[1\]\.expr: template does not expand for rank 0: '\(tp\+1\)\/2\*2': 1 \/ 2 is not exact/);
    const b = example();
    tensor(b, 2)['lineage'] = { logical: 'w1', index: ['*', [{ expr: '(tp+1)/2' }, { expr: 'tp*2+2' }]] };
    assert.match(issues(b)[0] ?? '', /^\$\.parallel\.programs\[0\]\.tensors\[2\]\.lineage\.index\[1\]\[0\]\.expr: template does not expand for rank 0/);
    const c = example();
    tensor(c, 2)['lineage'] = { logical: 'w1', index: ['*', [[{ expr: '0' }, { expr: '(tp+1)/2' }]]] };
    assert.match(issues(c)[0] ?? '', /^\$\.parallel\.programs\[0\]\.tensors\[2\]\.lineage\.index\[1\]\[0\]\[1\]\.expr: template does not expand for rank 0/);
  });

  it('a loaded plan does not keep the parse tree alive', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // Built in a function of its own: no variable of this test holds the tree.
    const loadOne = (): { plan: LoadedPlan; programs: WeakRef<object>; ops: WeakRef<object> } => {
      const raw = example() as { parallel: { programs: { ops: object }[] } };
      const plan = loadPlanObject('t.json', raw);
      return { plan, programs: new WeakRef(raw.parallel.programs), ops: new WeakRef((raw.parallel.programs[0] as { ops: object }).ops) };
    };
    const { plan, programs, ops } = loadOne();
    // WeakRefs hold their target until the current job ends.
    await new Promise((r) => setTimeout(r, 0));
    gc();
    assert.equal(programs.deref(), undefined, 'the parsed programs are still reachable from the loaded plan');
    assert.equal(ops.deref(), undefined, 'the parsed ops are still reachable from the loaded plan');
    // The plan still works, collectives rank by rank included (built from what it kept).
    assert.ok(plan.collectives.length > 0);
    assert.equal(plan.programs.length, 1);
  });
});
