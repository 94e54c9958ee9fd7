/** Shared test helpers: paths and an in-process CLI runner that captures output. */
import { fileURLToPath } from 'node:url';
import { strict as assert } from 'node:assert';
import { main } from '../cli/app.js';
import { loadPlanObject } from '../lineage/load.js';
import { PlanError } from '../plans/errors.js';
import type { Dense } from '../ops/algebra.js';
import type { GradBuilder, GradRef } from '../ops/grad.js';
import { registry } from '../ops/registry.js';
import type { Attrs, Shape } from '../ops/types.js';
import { floatAlgebra } from '../sdfg/algebras.js';
import { cpSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The CLI's proof cache is on by default: tests keep theirs in a fresh directory, never the user's.
process.env['PLANPROOF_CACHE_DIR'] ??= mkdtempSync(join(tmpdir(), 'planproof-test-cache-'));
// Its key too (stages/cache/cache-files.ts): outside that directory, and never the user's own.
process.env['PLANPROOF_CACHE_KEY_FILE'] ??= join(mkdtempSync(join(tmpdir(), 'planproof-test-key-')), 'cache-key');

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const EXAMPLES = `${ROOT}examples/`;
export const FIXTURES = `${ROOT}test/fixtures/`;

export async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { log: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') });
  return { code, stdout, stderr };
}

/** Asserts that loading `plan` fails with a PlanError whose message matches every pattern. */
export function rejects(plan: unknown, ...patterns: RegExp[]): void {
  assert.throws(
    () => loadPlanObject('t.json', plan),
    (e: unknown) => {
      assert.ok(e instanceof PlanError, `expected a PlanError, got ${String(e)}`);
      for (const re of patterns) assert.match(e.message, re);
      return true;
    },
  );
}

/** Evaluates emitted ops immediately in Float64, checking each op's shape rule on the way. */
export class EagerBuilder implements GradBuilder {
  readonly vals: Dense<number>[] = [];
  put(v: Dense<number>): GradRef {
    this.vals.push(v);
    return this.vals.length - 1;
  }
  op(name: string, inputs: readonly GradRef[], attrs: Attrs = {}): GradRef[] {
    const id = registry.id(name);
    assert.ok(id >= 0, `backward emits unknown op '${name}'`);
    const def = registry.get(id);
    const ins = inputs.map((r) => this.vals[r] as Dense<number>);
    assert.equal(registry.checkAttrs(id, attrs), undefined, `backward emits '${name}' with bad attributes ${JSON.stringify(attrs)}`);
    const shapes = def.shape(ins.map((x) => x.shape), attrs);
    const outs = def.apply(floatAlgebra, ins, attrs);
    outs.forEach((o, k) => assert.deepEqual([...o.shape], [...(shapes[k] as Shape)], `${name}: apply and shape rule disagree`));
    return outs.map((o) => this.put(o));
  }
  shape(r: GradRef): Shape {
    return (this.vals[r] as Dense<number>).shape;
  }
}

/** Every file under `dir/sub` (the records of one kind in a cache directory); [] when there is none. */
export function filesUnder(dir: string, sub: string): string[] {
  try {
    return readdirSync(join(dir, sub), { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name));
  } catch {
    return [];
  }
}

/** Edits of an import directory's files: each function rewrites every file whose name matches. */
export type DirEdits = readonly (readonly [RegExp, (text: string) => string])[];

/** One stage of `verify --json`. */
export interface StageVerdict {
  logical: string;
  status: string;
  decidedBy?: string;
}

/**
 * An `import-graphs --dir` input copied, edited (each edit must change at least one file),
 * imported (which must succeed) and verified with `verify --infer --jobs 0 --no-cache
 * --no-answer-cache --json`: the exit code and the stages.
 */
export async function verifyImportDir(src: string, edits: DirEdits = []): Promise<{ code: number; stages: StageVerdict[] }> {
  const d = mkdtempSync(join(tmpdir(), 'pp-import-dir-'));
  cpSync(src, d, { recursive: true });
  for (const [files, edit] of edits) {
    let changed = 0;
    for (const f of readdirSync(d).filter((x) => files.test(x))) {
      const before = readFileSync(join(d, f), 'utf8');
      const after = edit(before);
      if (after !== before) changed++;
      writeFileSync(join(d, f), after);
    }
    assert.ok(changed > 0, `the edit of ${String(files)} changed nothing`);
  }
  const out = join(d, 'plan.json');
  const imp = await runCli(['import-graphs', '--dir', d, '-o', out]);
  assert.equal(imp.code, 0, imp.stderr);
  const v = await runCli(['verify', '--infer', '--jobs', '0', '--no-cache', '--no-answer-cache', '--json', out]);
  return { code: v.code, stages: (JSON.parse(v.stdout) as { stages: StageVerdict[] }).stages };
}
