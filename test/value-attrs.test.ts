/**
 * Value-only attributes (OpDef.valueAttrs): what incremental re-verification relies on is that
 * they enter only an op's values. Every structural rule of such an op must give the same
 * answer whatever their values, and the registry refuses them where a rule could read them.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { OpRegistry, registry, valueAttrsProblem } from '../ops/registry.js';
import type { Attrs, AttrValue, OpDef, Shape } from '../ops/types.js';
import { FIXTURES } from './helpers.js';

interface Case {
  op: string;
  attrs: Attrs;
  inputs?: { shape: number[] }[];
}
const golden = JSON.parse(readFileSync(`${FIXTURES}golden/ops.json`, 'utf8')) as { cases: Case[] };

/** Other values a value-only attribute may take (those its schema refuses are skipped). */
const ALTERNATIVES: readonly AttrValue[] = [0, 1, 7, '1/3', '-5/2', '1/1000', 2, 9, true, false];

/** What a structural rule answers, as text (a thrown error is an answer too). */
function answer(f: () => unknown): string {
  try {
    return JSON.stringify(f());
  } catch (e) {
    return `throws ${e instanceof Error ? e.message : String(e)}`;
  }
}

describe('value-only attributes', () => {
  const valued = registry.defs.filter((d) => (d.valueAttrs?.length ?? 0) > 0);

  it('are declared on the norms and the optimizer steps, and on no op whose rules could read them', () => {
    const names = valued.map((d) => d.name);
    for (const n of ['rms_norm', 'rms_norm_backward', 'layer_norm', 'layer_norm_backward', 'adam_update', 'sgd_update', 'sgd_momentum_update']) assert.ok(names.includes(n), n);
    for (const d of registry.defs) assert.equal(valueAttrsProblem(d), undefined, d.name);
  });

  it('leave the shape, labels and lanes of every golden case unchanged, whatever their values', () => {
    let checked = 0;
    for (const d of valued) {
      const id = registry.id(d.name);
      const cases = golden.cases.filter((c) => c.op === d.name && c.inputs !== undefined);
      assert.ok(cases.length > 0, `${d.name} has golden cases`);
      for (const c of cases) {
        const shapes = (c.inputs ?? []).map((x) => x.shape as Shape);
        const base = { shape: answer(() => d.shape(shapes, c.attrs)), dims: answer(() => d.dims(shapes, c.attrs)), lanes: answer(() => d.lanes?.(shapes, c.attrs)) };
        assert.doesNotMatch(base.shape, /^throws/, `${d.name}: ${base.shape}`);
        for (const key of d.valueAttrs ?? []) {
          for (const v of ALTERNATIVES) {
            const alt = { ...c.attrs, [key]: v } as Attrs;
            if (registry.checkAttrs(id, alt) !== undefined) continue;
            assert.equal(answer(() => d.shape(shapes, alt)), base.shape, `${d.name} ${key}=${String(v)}: shape`);
            assert.equal(answer(() => d.dims(shapes, alt)), base.dims, `${d.name} ${key}=${String(v)}: dims`);
            assert.equal(answer(() => d.lanes?.(shapes, alt)), base.lanes, `${d.name} ${key}=${String(v)}: lanes`);
            checked++;
          }
        }
      }
    }
    assert.ok(checked > 100, `${checked} variations checked`);
  });

  it('the check above tells a structural attribute apart: normalized_dims changes what rms_norm reads', () => {
    const d = registry.get(registry.id('rms_norm'));
    const c = golden.cases.find((x) => x.op === 'rms_norm' && x.inputs !== undefined) as Case;
    const shapes = (c.inputs ?? []).map((x) => x.shape as Shape);
    const base = answer(() => [d.shape(shapes, c.attrs), d.dims(shapes, c.attrs)]);
    assert.ok([1, 2, 3].some((k) => answer(() => [d.shape(shapes, { ...c.attrs, normalized_dims: k }), d.dims(shapes, { ...c.attrs, normalized_dims: k })]) !== base));
  });

  it('are refused on an op with a rule that reads or rewrites attributes, or that names them, or outside the schema', () => {
    const rms = registry.get(registry.id('rms_norm'));
    const bad: [string, OpDef][] = [
      ['rescale', { ...rms, rescale: () => undefined }],
      ['decompose', { ...rms, decompose: () => undefined }],
      ['routing', { ...rms, routing: () => undefined }],
      ['sliceRegions', { ...rms, sliceRegions: () => 'no' }],
      ['prefixAttrs', { ...rms, prefixAttrs: (a) => a }],
      ['laneAttrs', { ...rms, laneAttrs: (a) => a }],
      ['named by a structural rule', { ...rms, narrows: { dim: 'eps', start: 'a', end: 'b' } }],
      ['not in its attribute schema', { ...rms, valueAttrs: ['epsilon'] }],
    ];
    for (const [why, d] of bad) {
      assert.match(valueAttrsProblem(d) ?? '', new RegExp(why), why);
      assert.throws(() => new OpRegistry([d]), new RegExp(why));
    }
  });
});
