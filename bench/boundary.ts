/**
 * Issue 18 benchmark: plans stripped to boundary lineage (claims on contract inputs and
 * outputs only) against their full-lineage versions, and the bug catalog on stripped plans.
 *
 *   node dist/bench/boundary.js [--set presets|matrix|bugs|all] [--only a,b] [--jobs 2] [--before DIR]
 *
 * Prints one markdown row per case: verdicts, times (full lineage: the plain verifier;
 * stripped: `verify --infer`, both with the same worker count), the ratio and the hint counts.
 * Bugs: verdict, witness, the first failing stage, whether the span holds the injected op.
 * `--cli`: instead, both plans of each case written to files and given to `planproof verify`
 * (the default path: it infers by itself when a stage is left open), wall time of the process.
 * `--before DIR`: also runs the stripped plans with another build's verifyBoundary (DIR is its
 * dist/, say of the commit before a change), row by row in the same process, so that both
 * columns see the same machine load.
 */
import { generatePlan, ADAMW, type OptimizerConfig } from '../plans/gen/plan.js';
import { BUGS, type BugContext } from '../plans/gen/bugs.js';
import { PRESETS } from '../plans/gen/presets.js';
import type { ModelConfig } from '../plans/gen/models.js';
import type { Parallelism } from '../plans/gen/net.js';
import { stripToBoundary } from '../plans/gen/strip.js';
import { loadPlanObject } from '../lineage/load.js';
import { verifyBoundary } from '../stages/infer/boundary.js';
import { verifyPlanInPool } from '../stages/verify.js';
import { shutdownZ3 } from '../stages/engines/z3.js';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

type Json = Record<string, unknown>;
const arg = (k: string, d: string): string => {
  const i = process.argv.indexOf(`--${k}`);
  return i < 0 ? d : (process.argv[i + 1] ?? d);
};
const set = arg('set', 'presets');
const only = arg('only', '').split(',').filter((x) => x !== '');
const jobs = Number(arg('jobs', '2'));
const deadlineMs = Number(arg('deadline', '60')) * 1000;
const beforeDir = arg('before', '');
const viaCli = process.argv.includes('--cli');
type VerifyBoundary = typeof verifyBoundary;
// A build before issue 36 has stages/boundary.js, a later one stages/infer/boundary.js.
const beforeModule = (dir: string): string => (existsSync(`${dir}/stages/infer/boundary.js`) ? `${dir}/stages/infer/boundary.js` : `${dir}/stages/boundary.js`);
const before: VerifyBoundary | undefined = beforeDir === '' || viaCli ? undefined : ((await import(beforeModule(beforeDir.replace(/\/$/, '')))) as { verifyBoundary: VerifyBoundary }).verifyBoundary;

const MLP = (PRESETS['mlp-tiny'] as { model: ModelConfig }).model;
const GPT2 = (PRESETS['gpt2-tiny'] as { model: ModelConfig }).model;
const LLAMA = (PRESETS['llama-tiny'] as { model: ModelConfig }).model;
const MOE = (PRESETS['moe-tiny'] as { model: ModelConfig }).model;
// As in test/gen.test.ts: optimizer bugs are visible numerically.
const OPT: OptimizerConfig = { lr: '1', beta1: '9/10', beta2: '999/1000', eps: '1/100000000', weightDecay: '1/100', maxNorm: '1/100' };

interface Case {
  name: string;
  model: ModelConfig;
  par: Parallelism;
  opt: OptimizerConfig;
}

function cases(): Case[] {
  const out: Case[] = [];
  if (set === 'presets' || set === 'all') {
    for (const p of ['mlp-tiny', 'gpt2-tiny', 'llama-tiny', 'llama-tiny-sp', 'moe-tiny']) {
      const pr = PRESETS[p] as { model: ModelConfig; par: Parallelism };
      out.push({ name: p, model: pr.model, par: pr.par, opt: ADAMW });
    }
    out.push({ name: 'gpt2 1 layer h8 s4 v16 tp2+SP (issue table)', model: { ...GPT2, layers: 1, hidden: 8, seq: 4, vocab: 16 }, par: { ...(PRESETS['gpt2-tiny'] as { par: Parallelism }).par, tp: 2, sp: true }, opt: ADAMW });
  }
  if (set === 'matrix' || set === 'all') {
    // The strategy matrix of test/gen.test.ts.
    type Row = [ModelConfig, number, number, number, boolean, (0 | 1 | 2 | 3)?, number?, boolean?, number?, number?, ('ring' | 'allgather')?];
    const m: Row[] = [];
    for (const x of [MLP, GPT2, LLAMA]) for (const [dp, tp, micro] of [[1, 1, 1], [2, 1, 1], [1, 2, 1], [1, 1, 2], [2, 2, 2]] as const) m.push([x, dp, tp, micro, false]);
    m.push([GPT2, 2, 2, 2, true], [LLAMA, 1, 2, 1, true], [MLP, 2, 1, 2, false, 1], [GPT2, 2, 2, 2, false, 1], [LLAMA, 2, 2, 2, true, 2], [GPT2, 2, 2, 2, false, 3], [LLAMA, 2, 2, 2, false, 3]);
    m.push([{ ...MLP, layers: 2 }, 1, 1, 2, false, 0, 2], [{ ...GPT2, layers: 2 }, 2, 2, 2, false, 0, 2], [{ ...LLAMA, layers: 2 }, 2, 2, 2, true, 1, 2]);
    m.push([{ ...MLP, layers: 4 }, 1, 1, 2, false, 0, 2, false, 2]);
    const LLAMA_CP = { ...LLAMA, seq: 4, batch: 1 };
    m.push([LLAMA_CP, 1, 1, 1, false, 0, 1, false, 1, 2], [{ ...LLAMA_CP, batch: 2 }, 2, 1, 1, false, 0, 1, false, 1, 2], [LLAMA_CP, 1, 1, 1, false, 0, 1, false, 1, 2, 'allgather']);
    const GPT2_CP = { ...GPT2, seq: 4, batch: 2 };
    m.push([LLAMA_CP, 1, 2, 1, true, 0, 1, false, 1, 2], [LLAMA_CP, 1, 2, 1, true, 0, 1, false, 1, 2, 'allgather'], [{ ...LLAMA_CP, batch: 2 }, 2, 1, 1, false, 3, 1, false, 1, 2], [{ ...LLAMA_CP, layers: 2, batch: 2 }, 1, 1, 2, false, 0, 2, false, 1, 2], [GPT2_CP, 1, 1, 1, false, 0, 1, false, 1, 2], [GPT2_CP, 2, 2, 1, true, 1, 1, false, 1, 2]);
    m.push([MOE, 1, 1, 1, false], [MOE, 2, 1, 1, false, 0, 1, true], [MOE, 2, 2, 1, false], [MOE, 2, 2, 1, false, 0, 1, true], [{ ...MOE, seq: 2, batch: 1 }, 1, 2, 1, true]);
    m.push([MOE, 1, 1, 2, false], [MOE, 2, 1, 1, false, 1, 1, true], [MOE, 2, 1, 1, false, 3, 1, true], [{ ...MOE, layers: 2 }, 1, 1, 2, false, 0, 2]);
    for (const [model, dp, tp, micro, sp, zero, pp, ep, virtual, cp, cpComm] of m) {
      const par: Parallelism = { dp, tp, micro, sp, zero: zero ?? 0, pp: pp ?? 1, ep: ep ?? false, virtual: virtual ?? 1, cp: cp ?? 1, cpComm: cpComm ?? 'ring' };
      const name = `${model.family}${model.layers > 1 ? `-${model.layers}l` : ''} dp${dp} tp${tp} mb${micro}${sp ? ' sp' : ''}${zero ? ` z${zero}` : ''}${(pp ?? 1) > 1 ? ` pp${pp}` : ''}${ep ? ' ep' : ''}${(virtual ?? 1) > 1 ? ` v${virtual}` : ''}${(cp ?? 1) > 1 ? ` cp${cp}${cpComm === 'allgather' ? '-ag' : ''}` : ''}`;
      out.push({ name, model, par, opt: OPT });
    }
  }
  return out.filter((c) => only.length === 0 || only.some((o) => c.name.includes(o)));
}

async function verifyFull(plan: Json): Promise<{ verdict: string; ms: number; stages: number }> {
  const t0 = performance.now();
  const text = JSON.stringify(plan);
  const r = await verifyPlanInPool(loadPlanObject('full.json', plan), text, { jobs, deadlineMs });
  return { verdict: r.verdict, ms: performance.now() - t0, stages: r.stages.length };
}

/** `planproof verify FILE --json` in a child process: its verdict (from the exit code) and wall time. */
function cliVerify(file: string, dist?: string): { verdict: string; ms: number } {
  const t0 = performance.now();
  const main = dist === undefined ? fileURLToPath(new URL('../cli/main.js', import.meta.url)) : `${dist.replace(/\/$/, '')}/cli/main.js`;
  const r = spawnSync(process.execPath, [main, 'verify', file, '--json', '--jobs', String(jobs)], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const ms = performance.now() - t0;
  const verdict = ({ 0: 'verified', 1: 'not_equivalent', 3: 'unknown' } as Record<number, string>)[r.status ?? -1] ?? `exit ${String(r.status)}`;
  return { verdict, ms };
}

async function runCli(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'planproof-boundary-'));
  const bh = beforeDir === '' ? '' : ' before: full | s | stripped | s |';
  console.log(`| plan |${bh} full lineage (\`verify\`) | s | boundary only (\`verify\`) | s | ratio | same verdict |`);
  console.log(`|---|${beforeDir === '' ? '' : '---|--:|---|--:|'}---|--:|---|--:|--:|---|`);
  for (const c of cases()) {
    const full = generatePlan({ model: c.model, par: c.par, optimizer: c.opt });
    writeFileSync(join(dir, 'full.json'), JSON.stringify(full));
    writeFileSync(join(dir, 'stripped.json'), JSON.stringify(stripToBoundary(full)));
    let bc = '';
    if (beforeDir !== '') {
      const fb = cliVerify(join(dir, 'full.json'), beforeDir);
      const bb = cliVerify(join(dir, 'stripped.json'), beforeDir);
      bc = ` ${fb.verdict} | ${(fb.ms / 1000).toFixed(2)} | ${bb.verdict} | ${(bb.ms / 1000).toFixed(2)} |`;
    }
    const f = cliVerify(join(dir, 'full.json'));
    const b = cliVerify(join(dir, 'stripped.json'));
    console.log(`| ${c.name} |${bc} ${f.verdict} | ${(f.ms / 1000).toFixed(2)} | ${b.verdict} | ${(b.ms / 1000).toFixed(2)} | ${(b.ms / f.ms).toFixed(2)} | ${f.verdict === b.verdict ? 'yes' : '**no**'} |`);
  }
}

async function runCases(): Promise<void> {
  if (viaCli) return runCli();
  const bh = before === undefined ? '' : ' before | s | ratio |';
  console.log(`| plan | full lineage | s | stages |${bh} boundary only (\`verify --infer\`) | s | stages | ratio | hints inferred / kept / dropped | same verdict |`);
  console.log(`|---|---|--:|--:|${before === undefined ? '' : '---|--:|--:|'}---|--:|--:|--:|---|---|`);
  const all = cases();
  // Both builds once, untimed: each compiles its own plan schema validator on its first load.
  const w = all[0];
  if (before !== undefined && w !== undefined) {
    const plan = stripToBoundary(generatePlan({ model: w.model, par: w.par, optimizer: w.opt }));
    await before('warm.json', plan, { jobs, deadlineMs, infer: true });
    await verifyBoundary('warm.json', plan, { jobs, deadlineMs, infer: true });
  }
  for (const c of all) {
    const full = generatePlan({ model: c.model, par: c.par, optimizer: c.opt });
    const f = await verifyFull(full);
    let bc = '';
    if (before !== undefined) {
      const tb = performance.now();
      const o = await before('stripped.json', stripToBoundary(full), { jobs, deadlineMs, infer: true });
      const ms = performance.now() - tb;
      bc = ` ${o.verdict} | ${(ms / 1000).toFixed(2)} | ${(ms / f.ms).toFixed(2)} |`;
    }
    const t0 = performance.now();
    const b = await verifyBoundary('stripped.json', stripToBoundary(full), { jobs, deadlineMs, infer: true });
    const ms = performance.now() - t0;
    const bd = b.boundary;
    console.log(`| ${c.name} | ${f.verdict} | ${(f.ms / 1000).toFixed(2)} | ${f.stages} |${bc} ${b.verdict} | ${(ms / 1000).toFixed(2)} | ${b.stages.length} | ${(ms / f.ms).toFixed(2)} | ${bd.inferred} / ${bd.kept} / ${bd.dropped} | ${f.verdict === b.verdict ? 'yes' : '**no**'} |`);
  }
}

/** The configuration test/gen.test.ts injects each bug into. */
function ctxFor(bug: (typeof BUGS)[number]): [BugContext, ModelConfig] {
  for (const [sp, zero, pp] of [[false, 0, 1], [false, 1, 1], [false, 2, 1], [false, 3, 1], [true, 0, 1], [false, 0, 2], [false, 1, 2]] as const) {
    for (const [family, model] of [['gpt2', GPT2], ['llama', LLAMA]] as const) {
      const c: BugContext = { dp: 2, tp: 2, micro: 2, sp, zero, pp, family };
      if (bug.applies(c)) return [c, pp > 1 ? { ...model, layers: 2 } : model];
    }
  }
  const tries: [BugContext, ModelConfig][] = [
    [{ dp: 2, tp: 2, micro: 2, family: 'llama', recompute: true }, LLAMA],
    [{ dp: 2, tp: 2, micro: 1, family: 'gpt2' }, GPT2],
    [{ dp: 2, tp: 1, micro: 1, family: 'moe', ep: true }, MOE],
    [{ dp: 1, tp: 2, micro: 1, family: 'moe', sp: true }, { ...MOE, seq: 2, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm: 'ring' }, { ...LLAMA, seq: 4, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 1, family: 'llama', cp: 2, cpComm: 'allgather' }, { ...LLAMA, seq: 4, batch: 1 }],
    [{ dp: 1, tp: 1, micro: 2, family: 'mlp', pp: 2, virtual: 2 }, { ...MLP, layers: 4 }],
  ];
  for (const t of tries) if (bug.applies(t[0])) return t;
  throw new Error(`no configuration for ${bug.id}`);
}

async function runBugs(): Promise<void> {
  console.log('| bug | verdict | witness | first failing stage | span ops | span holds the injected op | suspects | suspects hold it | s |');
  console.log('|---|---|---|---|--:|---|--:|---|--:|');
  let refuted = 0;
  let held = 0;
  let total = 0;
  for (const bug of BUGS) {
    if (bug.kind === 'consistency') continue;
    if (only.length > 0 && !only.includes(bug.id)) continue;
    const [ctx, model] = ctxFor(bug);
    const plan = generatePlan({ model, par: { ...ctx, pp: ctx.pp ?? 1 }, optimizer: OPT });
    const where = bug.inject(plan, ctx);
    const t0 = performance.now();
    const r = await verifyBoundary('bug.json', stripToBoundary(plan), { jobs, deadlineMs, infer: true });
    const first = r.stages.find((s) => s.status === 'not_equivalent');
    const span = r.boundary.span;
    const holds = span !== undefined && (span.ops.some((o) => o.slice(o.indexOf(':') + 1) === where) || span.tensors.some((t) => t.slice(t.indexOf(':') + 1) === where));
    const sus = span?.suspects;
    const susHolds = sus !== undefined && sus.some((o) => o.slice(o.indexOf(':') + 1) === where);
    const witness = (first?.witness ?? []).length > 0;
    total++;
    if (r.verdict === 'not_equivalent' && witness) refuted++;
    if (holds) held++;
    console.log(`| ${bug.id} | ${r.verdict} | ${witness ? 'yes' : 'no'} | ${first?.logical ?? '-'} | ${span?.ops.length ?? '-'} | ${holds ? 'yes' : '**no**'} | ${sus?.length ?? '-'} | ${sus === undefined ? '-' : susHolds ? 'yes' : 'no'} | ${((performance.now() - t0) / 1000).toFixed(1)} |`);
  }
  console.log(`\n${refuted} of ${total} not equivalent with a witness; the span holds the injected op for ${held} of ${total}.`);
  // A non-zero exit when the acceptance point fails, so that a script can check it.
  if (refuted < total || held < total) process.exitCode = 1;
}

if (set === 'bugs') await runBugs();
else {
  await runCases();
  if (set === 'all') await runBugs();
}
await shutdownZ3();
