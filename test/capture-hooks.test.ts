/**
 * The DDP stand-in's communication hooks against torch's own reducer (tools/capture/
 * capture_dist.py, docs/capture.md "DDP communication hooks"). The golden checks of
 * test/capture.test.ts compare the imported graph with the capture's logical run, which runs
 * the stand-in too, so they cannot see a stand-in that differs from DDP; this runs the same
 * training (three iterations, a hook that scales each bucket position by its own factor, so the
 * bucket order matters) under real DDP on one gloo process and under the capture, and compares
 * the parameters; also with a micro-batch under no_sync() before each synced backward (the
 * reducer records the bucket order only in a synced one). A stand-in that keeps parameter
 * order after the first iteration differs by up to 0.025 (tried).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXAMPLES, FIXTURES } from './helpers.js';
import { needs, TOOLS } from './optional.js';

describe('DDP communication hooks: the stand-in runs a hook on the buckets torch 1.13 gives it', function () {
  this.timeout(300_000);
  before(function () {
    needs(this, TOOLS.torch);
  });
  for (const flags of [[], ['--no-sync']]) {
    it(`an order-sensitive hook over three iterations${flags.length > 0 ? ', each accumulating a micro-batch under no_sync() first' : ''}: the captured run equals real DDP @full`, () => {
      const py = '/usr/bin/python3';
      const script = join(FIXTURES, 'capture-hooks', 'ramp_hook.py');
      const port = String(29700 + (process.pid % 200));
      const real = spawnSync(py, [script, port, ...flags], { encoding: 'utf8' });
      assert.equal(real.status, 0, real.stderr);
      const want = JSON.parse(real.stdout) as Record<string, number[]>;
      const out = join(mkdtempSync(join(tmpdir(), 'pp-hook-')), 'cap');
      const cap = spawnSync(py, [join(EXAMPLES, '../tools/capture/planproof_capture.py'), '--nproc', '2', '--mesh', 'dp=2', '--values', '--out', out, script, ...flags], { encoding: 'utf8' });
      assert.equal(cap.status, 0, cap.stderr);
      const got = JSON.parse(readFileSync(join(out, 'values.json'), 'utf8')) as Record<string, number[]>;
      assert.equal(Object.keys(want).length, 4);
      for (const [k, w] of Object.entries(want)) {
        const g = got[k] ?? assert.fail(`no captured value for ${k}`);
        assert.equal(g.length, w.length, k);
        // Float32 on both sides, the same ops in the same order: equal up to float32 noise.
        g.forEach((v, i) => assert.ok(Math.abs(v - (w[i] as number)) <= 1e-6, `${k}[${i}]: capture ${v}, torch DDP ${w[i]}`));
      }
    });
  }
});
