#!/usr/bin/env node
/**
 * planproof command line. Exit codes: 0 verified, 1 not equivalent, 2 invalid plan,
 * 3 unknown, 4 usage or internal error. Never prints a stack trace unless PLANPROOF_DEBUG=1.
 */
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { ExitCode, PlanError, formatIssue } from '../plans/errors.js';
import { loadPlan, type LoadedPlan } from '../plans/loader.js';
import { formatSummary, summarize } from './summary.js';

export const DEMO_PLAN = fileURLToPath(new URL('../../examples/mlp-tp2.json', import.meta.url));

/** What `verify` says while the proof engine is not part of this version. */
export const NO_PROOF_REASON = 'the proof engine is not part of this version of planproof: the plan was loaded and checked (schema, SSA, shapes, collectives, lineage tiling), but no equivalence proof was attempted';

interface Out {
  log(s: string): void;
  err(s: string): void;
}

const stdio: Out = { log: (s) => process.stdout.write(s + '\n'), err: (s) => process.stderr.write(s + '\n') };

function load(file: string, json: boolean, out: Out): LoadedPlan | number {
  try {
    return loadPlan(file);
  } catch (e) {
    if (!(e instanceof PlanError)) throw e;
    if (json) out.log(JSON.stringify({ verdict: 'invalid', file, issues: e.issues }, null, 2));
    else {
      out.err(`planproof: invalid plan ${file}`);
      for (const i of e.issues) out.err(`  ${formatIssue(file, i)}`);
    }
    return ExitCode.invalidPlan;
  }
}

function inspect(file: string, json: boolean, out: Out): number {
  const plan = load(file, json, out);
  if (typeof plan === 'number') return plan;
  const s = summarize(plan);
  out.log(json ? JSON.stringify(s, null, 2) : formatSummary(s));
  return 0;
}

function verify(file: string, json: boolean, out: Out): number {
  const plan = load(file, json, out);
  if (typeof plan === 'number') return plan;
  const s = summarize(plan);
  if (json) out.log(JSON.stringify({ verdict: 'unknown', reason: NO_PROOF_REASON, file, plan: s }, null, 2));
  else {
    out.log(formatSummary(s));
    out.log('');
    out.log(`verdict     UNKNOWN: nothing was proved.`);
    out.log(`            ${NO_PROOF_REASON}.`);
  }
  return ExitCode.unknown;
}

function demo(json: boolean, out: Out): number {
  const plan = load(DEMO_PLAN, json, out);
  if (typeof plan === 'number') return plan;
  const s = summarize(plan);
  if (json) out.log(JSON.stringify({ demo: true, verdict: 'unknown', reason: NO_PROOF_REASON, plan: s }, null, 2));
  else {
    out.log('planproof demo: the embedded example plan, loaded and checked.\n');
    out.log(formatSummary(s));
    out.log('');
    out.log('The plan is well formed: every tensor is produced once, shapes agree, collective calls');
    out.log('match across their groups, and the lineage tiles every logical tensor it names.');
    out.log(`Nothing was proved: ${NO_PROOF_REASON}.`);
    out.log('`planproof verify <plan.json>` exits 3 (unknown) until the engine lands.');
  }
  return 0;
}

/** Runs the CLI on `argv` (without node and script); returns the exit code. */
export async function main(argv: string[], out: Out = stdio): Promise<number> {
  let code: number = ExitCode.usage;
  let usageError: string | undefined;
  const parser = yargs(argv)
    .scriptName('planproof')
    .usage('$0 <command> [options]\n\nProves that a distributed training plan computes what the single-device model computes.')
    .option('json', { type: 'boolean', default: false, describe: 'machine-readable output on stdout' })
    .command(
      'verify <plan>',
      'load and check a plan, then prove its equivalence (exit 0 verified, 1 not equivalent, 2 invalid, 3 unknown)',
      (y) => y.positional('plan', { type: 'string', demandOption: true, describe: 'plan file (JSON, format planproof/v1)' }),
      (a) => {
        if (typeof a.plan === 'string') code = verify(a.plan, a.json, out);
      },
    )
    .command(
      'inspect <plan>',
      'load and check a plan, then summarize it: mesh, ranks, ops, collectives, lineage coverage',
      (y) => y.positional('plan', { type: 'string', demandOption: true, describe: 'plan file (JSON, format planproof/v1)' }),
      (a) => {
        if (typeof a.plan === 'string') code = inspect(a.plan, a.json, out);
      },
    )
    .command(
      'demo',
      'load and check the embedded example plan (a two-layer MLP under tensor parallelism)',
      (y) => y,
      (a) => {
        code = demo(a.json, out);
      },
    )
    .demandCommand(1, 'name a command: verify, inspect or demo')
    .strict()
    .help()
    .version()
    .exitProcess(false)
    .fail((msg: string | null, err: Error | undefined) => {
      if (err !== undefined && !(err instanceof Error && /Unknown argument|Not enough|Missing required/.test(err.message))) throw err;
      usageError = msg ?? err?.message ?? 'usage error';
    })
    .epilogue('Exit codes: 0 verified, 1 not equivalent, 2 invalid plan, 3 unknown, 4 usage or internal error.');
  await parser.parseAsync();
  if (usageError !== undefined) {
    out.err(`planproof: ${usageError}\nRun 'planproof --help' for usage.`);
    return ExitCode.usage;
  }
  if (code === ExitCode.usage && (argv.includes('--help') || argv.includes('--version') || argv.includes('-h'))) return 0;
  return code;
}

const isEntry = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === (await import('node:fs')).realpathSync(process.argv[1]);
if (isEntry) {
  main(hideBin(process.argv))
    .then((code) => {
      process.exitCode = code;
    })
    .catch((e: unknown) => {
      const msg = e instanceof Error ? e.message : String(e);
      process.stderr.write(`planproof: internal error: ${msg}\n`);
      if (process.env['PLANPROOF_DEBUG'] === '1' && e instanceof Error) process.stderr.write(`${e.stack ?? ''}\n`);
      else process.stderr.write('(this is a bug in planproof, not in your plan; rerun with PLANPROOF_DEBUG=1 for details)\n');
      process.exitCode = ExitCode.usage;
    });
}
