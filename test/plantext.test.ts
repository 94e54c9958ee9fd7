/**
 * A loaded plan's compact text is built only when a later phase reads it (cli/plantext.ts):
 * it is the parsed plan re-serialized, as before; a file changed after the load is refused,
 * never read as the plan that was proved; a run decided per template never builds it.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { loadWithText } from '../cli/app.js';
import { compactTextOf } from '../cli/plantext.js';
import { loadPlanObject } from '../lineage/load.js';
import { generatePlan } from '../plans/gen/plan.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import type { Parallelism } from '../plans/gen/net.js';
import { stageEntries } from '../plans/loader.js';
import { reportOf, verifyPipeline } from '../stages/pipeline.js';
import { PER_TEMPLATE_FIRST } from '../stages/decompose/template-verify.js';
import { EXAMPLES } from './helpers.js';
import { FULL } from './optional.js';

const quiet = { log: (): void => undefined, err: (): void => undefined };

describe('the compact plan text, built when read (cli/plantext.ts)', () => {
  const src = readFileSync(`${EXAMPLES}mlp-dp2tp2.json`, 'utf8');

  it('is the parsed plan re-serialized, from the file read again', () => {
    const file = `${mkdtempSync(`${tmpdir()}/pp-`)}/p.json`;
    const padded = `{  ${src.slice(src.indexOf('{') + 1)}`;
    writeFileSync(file, padded);
    const textOf = compactTextOf(file, padded, false, 1 << 20, 0);
    assert.ok(textOf !== undefined);
    // Rewritten with the same bytes: still the plan that was loaded.
    writeFileSync(file, readFileSync(file));
    assert.equal(textOf(), JSON.stringify(JSON.parse(src)));
    // The CLI's load gives the same text (a small plan's, built at once).
    const l = loadWithText(file, false, quiet);
    assert.ok(typeof l !== 'number');
    assert.equal(l.text, textOf());
    assert.ok(compactTextOf(file, padded, false, 1 << 20) === undefined, 'a small plan is serialized once loaded, as before');
  });

  it('refuses a file changed after the load (no proof of one content stands for another)', () => {
    const file = `${mkdtempSync(`${tmpdir()}/pp-`)}/p.json`;
    writeFileSync(file, src);
    const textOf = compactTextOf(file, src, false, 1 << 20, 0);
    assert.ok(textOf !== undefined);
    // Same plan, other bytes: the text read for later phases must be the text loaded.
    writeFileSync(file, ` ${src}`);
    assert.throws(() => textOf(), /changed while it was verified/);
  });

  it('comes from the caller\'s text when it keeps one (the answer cache), whatever the file holds', () => {
    const file = `${mkdtempSync(`${tmpdir()}/pp-`)}/p.json`;
    writeFileSync(file, '{}');
    const textOf = compactTextOf(file, src, true, 1 << 20, 0);
    assert.equal(textOf?.(), JSON.stringify(JSON.parse(src)));
    const l = loadWithText(file, false, quiet, undefined, src);
    assert.ok(typeof l !== 'number');
    assert.equal(l.text, JSON.stringify(JSON.parse(src)));
  });

  it(`is never built on a run verified per template, and is on a run that needs it${FULL}`, async () => {
    // Past the per-rank bound for trying per template first (TrainVerify's L1, proved per template in seconds).
    const l1 = PRESETS['L1'] as { model: ModelConfig; par: Parallelism };
    const raw = generatePlan({ model: l1.model, par: l1.par });
    const big = loadPlanObject('big.json', raw);
    assert.ok(stageEntries(big) > PER_TEMPLATE_FIRST);
    let asked = 0;
    const r = await verifyPipeline('big.json', big, () => (asked++, JSON.stringify(raw)));
    assert.equal(reportOf(r)?.verdict, 'verified');
    assert.match(r.route, /per-template/);
    assert.equal(asked, 0, 'a verified per-template run never reads the text');
    // The twin: a small plan goes rank by rank, whose workers read the text once.
    const small = generatePlan({ model: (PRESETS['mlp-tiny'] as { model: ModelConfig }).model, par: { dp: 2, tp: 2, micro: 2 } });
    let smallAsked = 0;
    const s = await verifyPipeline('small.json', loadPlanObject('small.json', small), () => (smallAsked++, JSON.stringify(small)));
    assert.equal(reportOf(s)?.verdict, 'verified');
    assert.equal(s.route, 'rank-by-rank');
    assert.equal(smallAsked, 1, 'asked once, then kept');
  });
});
