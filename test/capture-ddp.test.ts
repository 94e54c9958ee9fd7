/**
 * The DDP stand-in with find_unused_parameters=True against torch's own reducer (tools/capture/
 * capture_dist.py `_sync_find_unused`, docs/capture.md "torch DDP"). The golden checks compare the
 * imported graph with the capture's logical run, which runs the stand-in too; this runs the same
 * training under real DDP on 2 gloo processes, where rank 1 does not use the auxiliary head and
 * no rank uses another parameter, and compares rank 0's parameters with the single-device run's
 * (equal: torch averages the locally unused gradient with zeros), then captures it: VERIFIED, and
 * its twin whose auxiliary loss is a per-rank mean NOT EQUIVALENT (the stand-in refused such a
 * program before, exit 2 naming the parameter); a parameter no rank uses that still has a
 * gradient is exit 2.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXAMPLES, FIXTURES, runCli } from './helpers.js';
import { needs, TOOLS } from './optional.js';

describe('DDP find_unused_parameters=True: the stand-in averages as torch 1.13 reducer does', function () {
  this.timeout(300_000);
  before(function () {
    needs(this, TOOLS.torch);
  });
  it('a head unused on one rank and one unused everywhere: torch DDP equals the single device, the capture is VERIFIED and the per-rank-mean twin NOT EQUIVALENT @full', async () => {
    const py = '/usr/bin/python3';
    const script = join(FIXTURES, 'capture-ddp', 'aux_branch.py');
    const real = spawnSync(py, [script, String(29500 + (process.pid % 200))], { encoding: 'utf8' });
    assert.equal(real.status, 0, real.stderr);
    const want = JSON.parse(real.stdout) as Record<string, number[]>;
    const d = mkdtempSync(join(tmpdir(), 'pp-ddp-'));
    const cap = spawnSync(py, [join(EXAMPLES, '../tools/capture/planproof_capture.py'), '--nproc', '2', '--mesh', 'dp=2', '--values', '--out', join(d, 'cap'), script], { encoding: 'utf8' });
    assert.equal(cap.status, 0, cap.stderr);
    const got = JSON.parse(readFileSync(join(d, 'cap', 'values.json'), 'utf8')) as Record<string, number[]>;
    assert.equal(Object.keys(want).length, 8);
    for (const [k, w] of Object.entries(want)) {
      const g = got[k] ?? assert.fail(`no single-device value for ${k}`);
      assert.equal(g.length, w.length, k);
      g.forEach((v, i) => assert.ok(Math.abs(v - (w[i] as number)) <= 1e-6, `${k}[${i}]: single device ${v}, torch DDP rank 0 ${w[i]}`));
    }
    for (const [flags, code] of [[[], 0], [['--bug'], 1]] as const) {
      const plan = join(d, `${code}.json`);
      const c = await runCli(['capture', '--nproc', '2', '--axis', 'dp', '--out', plan, '--', script, ...flags]);
      assert.equal(c.code, 0, c.stderr);
      const v = await runCli(['verify', '--infer', '--jobs', '0', plan]);
      assert.equal(v.code, code, v.stdout);
      if (code === 1) assert.match(v.stdout, /NOT EQUIVALENT: stage \d+ \([a-z_]+_new, op 'return\.[a-z_]+_new'\)/);
    }
    // A parameter no rank uses that still has a gradient: torch keeps it or averages it by
    // gradient_as_bucket_view: refused, naming it.
    const stale = await runCli(['capture', '--nproc', '2', '--axis', 'dp', '--out', join(d, 'stale.json'), '--', script, '--stale']);
    assert.equal(stale.code, 2, stale.stderr);
    assert.match(stale.stderr, /parameter 'aux\.weight' was used by no rank in this backward but has a gradient/);
  });
});
