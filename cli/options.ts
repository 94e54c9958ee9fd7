/**
 * Every command's options, built from a few groups, so that each command accepts and its --help
 * lists only the options it reads (they were all global: every command listed verify's). The
 * usage errors' suggestions (cli/usage.ts) come from the same lists.
 */
import { availableParallelism } from 'node:os';
import { DEFAULT_LIMITS } from '../plans/loader.js';
import { defaultCacheDir } from '../stages/cache/cache.js';
import { CAPTURE_OPTIONS } from './capture.js';
import { IMPORT_OPTIONS } from './import.js';
import { GEN_OPTIONS } from './gen.js';
import { DEFAULT_MAX_RANKS } from './limits.js';

/** Every command takes it, before or after the command's name: the one global option. */
export const JSON_OPTION = { json: { type: 'boolean', default: false, describe: 'machine-readable output on stdout' } } as const;
const SEED = { seed: { type: 'number', default: 1, describe: 'seed of the random inputs used for numeric witnesses (an integer)' } } as const;
const VERBOSE = { verbose: { type: 'boolean', default: false, describe: 'list every stage, also proved ones' } } as const;
const JOBS = { jobs: { type: 'number', default: Math.min(2, availableParallelism()), describe: 'worker threads proving stages (0: in this thread)' } } as const;

/** The engine of a proving run (verify, demo). */
const ENGINE = {
  engine: { choices: ['normal', 'z3'] as const, default: 'normal' as const, describe: 'decision procedure: the exact normal form, or Z3 alone as a cross-check' },
  deadline: { type: 'number', default: 60, describe: 'seconds a stage may take before it is stopped and reported unknown' },
  'time-limit': { type: 'number', default: 1800, describe: 'seconds the whole run may take: stages not decided by then are reported unknown' },
  'infer-time-limit': { type: 'number', default: 120, describe: "seconds verify's inference rounds may take (within --time-limit): hints still being proved then are dropped and their stages reported unknown" },
} as const;

/** The bounds on a plan file every command that reads one takes (README, "Options that bound a run"). */
const LIMITS = {
  'max-file-mb': { type: 'number', default: DEFAULT_LIMITS.bytes / (1024 * 1024), describe: 'largest plan file (or standard input) read, in MiB' },
  'max-depth': { type: 'number', default: DEFAULT_LIMITS.depth, describe: 'deepest JSON nesting a plan may use' },
  'max-ops': { type: 'number', default: DEFAULT_LIMITS.ops, describe: 'most ops a plan may hold as written (logical, program and collective entries)' },
  'max-claims': { type: 'number', default: DEFAULT_LIMITS.claims, describe: 'most lineage claims a plan may hold as written' },
} as const;

const REPORT_FILES = {
  junit: { type: 'string', describe: 'also write the report as JUnit XML to this file (one testcase per stage; docs/reports.md)' },
  html: { type: 'string', describe: 'also write a self-contained HTML report to this file (failing stages drawn; docs/reports.md)' },
} as const;

/** verify's own options. */
const VERIFY = {
  'max-ranks': { type: 'number', default: DEFAULT_MAX_RANKS, describe: 'most ranks for verify work that is still per rank (a plan decided per template is not bounded by it)' },
  infer: { type: 'boolean', describe: 'infer stage cut points for parallel tensors without lineage (hints, proved before use; by default when lineage is missing inside a stage tensor-level proofs leave open, and for the hints the file marks inferred; --no-infer turns it off)' },
  reduce: { type: 'boolean', default: true, describe: 'prove at reduced shapes where the soundness conditions hold (--no-reduce: at full shapes)' },
  'emit-reduced': { type: 'string', describe: 'write the reduced plan (an ordinary plan file) into this directory' },
  cache: { type: 'string', describe: `directory of the proof cache (default ${defaultCacheDir()}; --no-cache: off)` },
  'answer-cache': { type: 'boolean', default: true, describe: 'print the kept answer of an earlier run on the same plan bytes, options and planproof build (in the cache directory; --no-answer-cache verifies again, still with the proof cache)' },
  'tensor-level': { type: 'boolean', default: true, describe: 'prove stages by relations between whole tensors first (docs/engine.md, "Tensor-level proofs"; --no-tensor-level: element engines only)' },
  'per-stage': { type: 'boolean', default: false, describe: 'extract and reduce each stage on its own (in this thread; --emit-reduced writes one plan file per stage)' },
  ...REPORT_FILES,
  shard: { type: 'string', describe: 'prove only shard i/n of the stage proofs and write a part file on stdout for planproof merge (CI matrices; no proof cache; exit 0 when written)' },
} as const;

/** Each command's own options, besides --json (its positionals are declared with the command, cli/app.ts). */
export const COMMAND_OPTIONS = {
  verify: { ...SEED, ...VERBOSE, ...JOBS, ...ENGINE, ...LIMITS, ...VERIFY },
  merge: { ...VERBOSE, ...JOBS, ...LIMITS, ...REPORT_FILES },
  explain: { ...SEED, ...LIMITS, dot: { type: 'string', describe: "write the stage's graph as Graphviz DOT to this file (--dot alone: to stdout, instead of the table)" } },
  inspect: { ...LIMITS },
  'infer-lineage': { ...SEED, ...LIMITS, out: { alias: ['o', 'output'], type: 'string', describe: 'output plan file (default: stdout; --output is the same)' } },
  'import-graphs': { ...IMPORT_OPTIONS },
  capture: { ...CAPTURE_OPTIONS },
  demo: { ...SEED, ...JOBS, ...ENGINE },
  gen: { ...GEN_OPTIONS },
} as const;

/** The option names of each command and their aliases, long and short (for "did you mean"). */
export const COMMAND_OPTION_NAMES: Readonly<Record<string, readonly string[]>> = Object.fromEntries(
  Object.entries(COMMAND_OPTIONS).map(([c, o]) => [
    c,
    [
      ...Object.entries(o as Record<string, { alias?: string | readonly string[] }>).flatMap(([n, s]) => [n, ...(s.alias === undefined ? [] : typeof s.alias === 'string' ? [s.alias] : s.alias)]),
      'json',
      'help',
      'version',
    ],
  ]),
);
