/**
 * Issue 35, deliver 5: command-line conventions. "Did you mean" for a mistyped command or
 * option; a number option given text is refused naming the text; every command that writes a
 * plan file takes --out; each command's --help lists its own options only; gen's sizes have a
 * description and a default, and sizes that do not fit together are refused before anything is
 * generated, in one message naming the flags.
 */
import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '../cli/app.js';
import { genConfig, type GenArgs } from '../cli/gen.js';
import { COMMAND_OPTIONS } from '../cli/options.js';
import { editDistance, nearest } from '../cli/usage.js';
import { ADAMW, generatePlan } from '../plans/gen/plan.js';
import { EXAMPLES, ROOT, runCli } from './helpers.js';

/** What `planproof ARGS --help` prints (yargs writes help with console.log), and the exit code. */
async function help(args: string[]): Promise<{ code: number; text: string }> {
  const saved = console.log;
  let text = '';
  console.log = (...x: unknown[]): void => void (text += `${x.map(String).join(' ')}\n`);
  try {
    const code = await main([...args, '--help'], { log: () => undefined, err: () => undefined });
    return { code, text };
  } finally {
    console.log = saved;
  }
}

/** The long option names a help text lists. */
// An option's line starts within six columns (after `-o, ` for an alias); its description's
// continuation lines start further in.
const listed = (text: string): string[] => [...text.matchAll(/^ {2,6}(?:-\w, )*--([a-z][a-z-]*)/gm)].map((m) => m[1] as string).sort();

describe('cli conventions (issue 35)', function () {
  this.timeout(120_000);
  const plan = `${EXAMPLES}mlp-dp2.json`;

  it('suggests the command meant by a typo, and the option meant by a typo, as usage errors (exit 4, nothing on stdout)', async () => {
    const cases: [string[], RegExp][] = [
      [['verfy', plan], /^planproof: Unknown command: verfy \(did you mean verify\?\)\nRun 'planproof --help' for usage\.\n$/],
      [['inpsect', plan], /Unknown command: inpsect \(did you mean inspect\?\)/],
      [['verify', plan, '--jsno'], /^planproof: Unknown argument: --jsno \(did you mean --json\?\)\nRun 'planproof verify --help' for usage\.\n$/],
      [['verify', plan, '--max-opz', '3'], /Unknown argument: --max-opz \(did you mean --max-ops\?\)$/m],
      [['verify', plan, '--no-tensor-levl'], /Unknown argument: --no-tensor-levl \(did you mean --no-tensor-level\?\)/],
      [['gen', '--hiden', '8'], /Unknown argument: --hiden \(did you mean --hidden\?\)/],
      [['infer-lineage', plan, '--ouput', 'x.json'], /Unknown argument: --ouput \(did you mean --output\?\)/],
    ];
    for (const [args, re] of cases) {
      const r = await runCli(args);
      assert.equal(r.code, 4, args.join(' '));
      assert.equal(r.stdout, '', args.join(' '));
      assert.match(r.stderr, re, args.join(' '));
    }
    // Nothing near: no guess.
    const far = await runCli(['verify', plan, '--frobnicate']);
    assert.match(far.stderr, /Unknown argument: --frobnicate\n/);
    const cmd = await runCli(['frobnicate']);
    assert.match(cmd.stderr, /Unknown command: frobnicate \(commands: verify, merge, explain, inspect, infer-lineage, import-graphs, capture, demo, gen\)/);
    // Under --json the same words, as the usage_error object.
    const j = await runCli(['verfy', plan, '--json']);
    assert.equal(j.code, 4);
    assert.equal((JSON.parse(j.stdout) as { error: string }).error, 'Unknown command: verfy (did you mean verify?)');
    assert.equal(editDistance('jsno', 'json'), 1);
    assert.equal(nearest('xyz', ['json', 'seed']), undefined);
  });

  it("refuses a number option given text with the text (--seed abc said 'got NaN'), or given no value", async () => {
    for (const [args, msg] of [
      [['verify', plan, '--seed', 'abc'], "--seed must be an integer, got 'abc'"],
      [['verify', plan, '--seed=abc'], "--seed must be an integer, got 'abc'"],
      [['verify', plan, '--jobs', 'two'], "--jobs must be an integer from 0 to 256, got 'two'"],
      [['verify', plan, '--time-limit', 'soon'], "--time-limit must be a number of seconds in (0, 604800], got 'soon'"],
      [['verify', plan, '--seed'], '--seed needs a number'],
      [['verify', plan, '--seed', '--json'], '--seed needs a number'],
      [['inspect', plan, '--max-ops', 'many'], "--max-ops must be a positive integer, got 'many'"],
      [['gen', '--hidden', 'abc'], "--hidden must be a number, got 'abc'"],
    ] as const) {
      const r = await runCli([...args, '--json']);
      assert.equal(r.code, 4, args.join(' '));
      const e = (JSON.parse(r.stdout) as { error: string }).error;
      assert.equal(e, msg, args.join(' '));
      assert.doesNotMatch(e, /NaN/);
    }
    // A negative number is a value, refused by its range, not as missing.
    assert.match((await runCli(['verify', plan, '--jobs', '-1'])).stderr, /--jobs must be an integer from 0 to 256, got -1/);
  });

  it('infer-lineage takes --out like the other commands that write a plan, and keeps --output and -o', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-out-'));
    try {
      const texts: string[] = [];
      for (const flag of ['--out', '--output', '-o']) {
        const f = join(dir, `${flag.replace(/-/g, '')}.json`);
        const r = await runCli(['infer-lineage', plan, flag, f]);
        assert.equal(r.code, 0, r.stderr);
        assert.equal(r.stdout, '');
        texts.push(readFileSync(f, 'utf8'));
      }
      assert.equal(new Set(texts).size, 1);
      for (const c of ['gen', 'infer-lineage', 'import-graphs', 'capture']) assert.ok('out' in COMMAND_OPTIONS[c as keyof typeof COMMAND_OPTIONS], `${c} takes --out`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("each command's --help lists its own options only (every command listed verify's)", async () => {
    for (const [cmd, opts] of Object.entries(COMMAND_OPTIONS)) {
      const h = await help([cmd]);
      assert.equal(h.code, 0, cmd);
      assert.deepEqual(listed(h.text), [...Object.keys(opts), 'json', 'help', 'version'].sort(), cmd);
    }
    const inspect = listed((await help(['inspect'])).text);
    for (const o of ['seed', 'jobs', 'engine', 'deadline', 'time-limit', 'verbose', 'max-ranks']) assert.ok(!inspect.includes(o), o);
    // And a command refuses another command's option, wherever it stands.
    assert.match((await runCli(['inspect', plan, '--jobs', '2'])).stderr, /^planproof: Unknown argument: --jobs\nRun 'planproof inspect --help'/);
    assert.match((await runCli(['--jobs', '2', 'inspect', plan])).stderr, /^planproof: Unknown argument: --jobs\nRun 'planproof inspect --help'/);
    // --json is every command's, before its name too; a command's option before its name is its own.
    const j = await runCli(['--json', 'inspect', plan]);
    assert.equal(j.code, 0);
    assert.equal((JSON.parse(j.stdout) as { mesh: { ranks: number } }).mesh.ranks, 2);
    const v = await runCli(['--seed', '2', 'verify', plan, '--json', '--no-cache']);
    assert.equal((JSON.parse(v.stdout) as { numeric: { seed: number } }).numeric.seed, 2);
  });

  it('gen --help gives each model size a description and its default', async () => {
    const text = (await help(['gen'])).text.replace(/\s+/g, ' ');
    for (const o of ['layers', 'hidden', 'heads', 'kv-heads', 'seq', 'vocab', 'batch', 'ffn', 'dp', 'tp', 'micro', 'pp', 'virtual', 'cp', 'experts', 'topk', 'shared', 'expert-ffn']) {
      const entry = new RegExp(`--${o} (?!\\[)([^\\[]+) \\[number\\] \\[default: ([^\\]]+)\\]`).exec(text);
      assert.ok(entry !== null, `--${o}: ${text.slice(text.indexOf(`--${o} `), text.indexOf(`--${o} `) + 200)}`);
      assert.ok((entry[1] ?? '').trim().length > 8, `--${o} has a description`);
    }
    assert.match(text, /--hidden hidden size .*\[default: the preset's; gpt2-tiny: 4\]/);
  });

  it('sizes that do not fit together are refused before generating, in one message naming the flags', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'planproof-gen-'));
    try {
      const f = join(dir, 'never.json');
      const r = await runCli(['gen', '--heads', '3', '--out', f]);
      assert.equal(r.code, 4);
      assert.equal(r.stdout, '');
      assert.equal(r.stderr, "planproof: gen: these sizes do not fit together (gpt2-tiny with the options given): --heads 3 does not divide --hidden 4; --tp 2 does not divide --heads 3\nRun 'planproof gen --help' for usage.\n");
      assert.ok(!existsSync(f), 'nothing written');
      const j = await runCli(['gen', '--preset', 'llama-tiny', '--tp', '4', '--json']);
      assert.equal(j.code, 4);
      assert.match((JSON.parse(j.stdout) as { verdict: string; error: string }).error, /--tp 4 does not divide --kv-heads 2/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Each refusal is one the generator would stop on (never a plan it could make), and the
    // configurations next to them generate.
    const refused: [GenArgs, RegExp][] = [
      [{ heads: 3 }, /--heads 3 does not divide --hidden 4/],
      [{ preset: 'llama-tiny', heads: 8 }, /--hidden 8 \/ --heads 8 = 1: the head dim must be even/],
      [{ preset: 'llama-tiny', kvHeads: 3, tp: 1 }, /--kv-heads 3 does not divide --heads 4/],
      [{ preset: 'llama-tiny', tp: 4 }, /--tp 4 does not divide --kv-heads 2/],
      [{ vocab: 3 }, /--tp 2 does not divide --vocab 3/],
      [{ ffn: 3 }, /--tp 2 does not divide --ffn 3/],
      [{ batch: 6 }, /--dp 2 x --micro 2 = 4 does not divide --batch 6/],
      [{ cp: 2, seq: 2 }, /2 x --cp 2 = 4 does not divide --seq 2/],
      [{ pp: 2 }, /--pp 2 x --virtual 1 = 2 exceeds --layers 1/],
      [{ preset: 'mlp-tiny', cp: 2 }, /--cp 2 needs a sequence model/],
      [{ preset: 'moe-tiny', experts: 3 }, /--dp 2 does not divide --experts 3/],
    ];
    for (const [args, re] of refused) {
      const c = genConfig(args);
      assert.equal(typeof c, 'string', JSON.stringify(args));
      assert.match(c as string, re);
      const p = genConfig({ ...args, heads: undefined, kvHeads: undefined, tp: 1, dp: 1, micro: 1, vocab: undefined, ffn: undefined, batch: undefined, pp: undefined, cp: undefined, experts: undefined });
      assert.notEqual(typeof p, 'string', `the neighbour of ${JSON.stringify(args)}: ${String(p)}`);
      // The generator itself refuses the configuration the check refused (what it would have stopped on).
      const raw = genConfig({ preset: args.preset ?? 'gpt2-tiny' });
      assert.ok(typeof raw !== 'string');
      const given = args as Record<string, unknown>;
      const model = { ...raw.model, ...pick(given, ['heads', 'kvHeads', 'vocab', 'ffn', 'batch', 'seq', 'experts']) } as typeof raw.model;
      const par = { ...raw.par, ...pick(given, ['tp', 'cp', 'pp']) } as typeof raw.par;
      assert.throws(() => generatePlan({ model, par, optimizer: ADAMW }), Error, JSON.stringify(args));
    }
    // A custom Llama that fits generates in one go.
    const ok = await runCli(['gen', '--preset', 'llama-tiny', '--hidden', '16', '--heads', '4', '--kv-heads', '2', '--layers', '2', '--pp', '2']);
    assert.equal(ok.code, 0, ok.stderr);
  });

  it('README and docs/generators.md quote the usage errors exactly as the CLI prints them', async () => {
    let quoted = 0;
    for (const doc of ['README.md', 'docs/generators.md']) {
      const text = readFileSync(`${ROOT}${doc}`, 'utf8');
      // Blocks of `$ npx planproof ARGS` lines, each followed by what it prints.
      for (const block of text.matchAll(/```\n(\$ npx planproof [\s\S]*?)```/g)) {
        const runs = (block[1] ?? '').split(/^\$ npx planproof /m).filter((x) => x !== '');
        for (const r of runs) {
          const [cmd, ...shown] = r.split('\n');
          const got = await runCli((cmd ?? '').split(' '));
          assert.equal(got.code, 4, cmd);
          assert.equal(got.stderr, shown.join('\n'), `${doc}: ${cmd ?? ''}`);
          quoted++;
        }
      }
    }
    assert.ok(quoted >= 4, `${quoted} quoted runs`);
  });
});

function pick(o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k]]));
}
