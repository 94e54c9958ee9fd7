/**
 * `planproof import-graphs`: a plan from exported ATen graphs (one single-device graph, one per
 * rank, a relations file), checked by the loader before it is written. docs/import.md.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { ExitCode, PlanError, formatIssue } from '../plans/errors.js';
import { finiteNumbersByName, parsePlanJson, readPlanText } from '../plans/json.js';
import { loadPlanObject } from '../lineage/load.js';
import { ImportError, FX_LIMITS } from '../plans/import/fxtext.js';
import { checkRelations, importGraphs, type GraphFile } from '../plans/import/plan.js';
import { checkOpMap, type OpMap } from '../plans/import/opmap.js';
import { SHIPPED_OPMAPS } from '../plans/import/opmaps.js';
import { stepBar, type StepProgress } from './progress.js';

interface Out {
  log(s: string): void;
  err(s: string): void;
}

/** import-graphs' options (yargs). */
export const IMPORT_OPTIONS = {
  dir: { type: 'string', describe: 'directory holding logical.py, rank0.py, rank1.py, ... and relations.json' },
  logical: { type: 'string', describe: 'the single-device graph (FILE, or FW,BW: AOTAutograd forward then backward)' },
  rank: { type: 'string', array: true, describe: 'RANK=FILE (or RANK=FW,BW), one per rank' },
  relations: { type: 'string', describe: 'boundary relations (JSON, format planproof-relations/v1)' },
  'op-map': { type: 'string', array: true, describe: `what ops outside ATen compute: a shipped map (${Object.keys(SHIPPED_OPMAPS).join(', ')}) or an op-map JSON file (docs/import.md, "Op maps"); repeatable` },
  name: { type: 'string', describe: 'plan name' },
  out: { alias: 'o', type: 'string', describe: 'output plan file (default: stdout)' },
} as const;

export interface ImportArgs {
  dir?: string;
  logical?: string;
  rank?: string[];
  relations?: string;
  out?: string;
  name?: string;
  /** --op-map: shipped map names or op-map files. */
  opMap?: string[];
  json: boolean;
}

/** The op maps named by --op-map and the relations' "opMap" (files relative to the relations file). */
function readOpMaps(names: readonly string[], base: string): OpMap[] {
  const seen = new Set<string>();
  const maps: OpMap[] = [];
  for (const n of names) {
    if (seen.has(n)) continue;
    seen.add(n);
    const shipped = SHIPPED_OPMAPS[n];
    if (shipped !== undefined) {
      maps.push(shipped);
      continue;
    }
    const f = isAbsolute(n) || existsSync(n) ? n : join(base, n);
    if (!existsSync(f)) throw new ImportError(n, 0, `no such op map: not a shipped map (${Object.keys(SHIPPED_OPMAPS).join(', ')}) and no file ${f}`);
    maps.push(checkOpMap(f, parsePlanJson(f, readPlanText(f, FX_LIMITS.bytes))));
  }
  return maps;
}

/** A program's graph files: `a.py` or `fw.py,bw.py` (run in order). */
const split = (v: string): string[] => v.split(',').filter((x) => x !== '');

/** The directory convention: `NAME.py`, or `NAME.0.py`, `NAME.1.py`, ... (a forward, then its backward). */
function inDir(dir: string, name: string): string[] | undefined {
  if (existsSync(join(dir, `${name}.py`))) return [join(dir, `${name}.py`)];
  const files: string[] = [];
  for (let k = 0; existsSync(join(dir, `${name}.${k}.py`)); k++) files.push(join(dir, `${name}.${k}.py`));
  return files.length > 0 ? files : undefined;
}

/** `--rank 0=r0.py` values (or the directory convention) to files by rank; a usage error string otherwise. */
function rankFiles(a: ImportArgs): string[][] | string {
  const byRank = new Map<number, string[]>();
  for (const s of a.rank ?? []) {
    const eq = s.indexOf('=');
    const r = Number(s.slice(0, eq));
    if (eq < 1 || !Number.isSafeInteger(r) || r < 0 || r > 1 << 20) return `--rank expects RANK=FILE[,FILE...] (e.g. --rank 0=rank0.py), got '${s}'`;
    if (byRank.has(r)) return `--rank ${r} is given twice`;
    const files = split(s.slice(eq + 1));
    if (files.length === 0) return `--rank ${r}: no file`;
    byRank.set(r, files);
  }
  if (byRank.size === 0 && a.dir !== undefined) {
    for (let r = 0; ; r++) {
      const f = inDir(a.dir, `rank${r}`);
      if (f === undefined) break;
      byRank.set(r, f);
    }
  }
  if (byRank.size === 0) return 'name the rank graphs: --rank 0=FILE --rank 1=FILE ... (or --dir with rank0.py, rank1.py, ...)';
  const files: string[][] = [];
  for (let r = 0; r < byRank.size; r++) {
    const f = byRank.get(r);
    if (f === undefined) return `--rank: ranks must be 0..${byRank.size - 1}; rank ${r} is missing`;
    files.push(f);
  }
  return files;
}

/** A bar the caller draws (capture's, which also counts its own phases). */
export interface ImportProgress {
  readonly update: StepProgress;
  /** Called once, before the summary or the error is printed: the bar ends there. */
  readonly end: () => void;
}

/**
 * Where a graph first holds a float16 / bfloat16 value: the user's line from the capture's
 * `# File: <script>:<line>` comment above it when there is one, else the graph file's line.
 */
function halfAt(g: GraphFile): string | undefined {
  const lines = g.text.split('\n');
  const at = lines.findIndex((t) => /"b?f16\[/.test(t));
  if (at < 0) return undefined;
  for (let i = at; i >= 0; i--) {
    const m = /# File: (\S+?:\d+)/.exec(lines[i] ?? '');
    if (m !== null) return m[1];
  }
  return `${g.name}:${at + 1}`;
}

/**
 * The captured run's input values (`inputs.json`, written by planproof capture when the program
 * read values into Python): where verify first looks for a witness that keeps those reads. Only
 * a hint for witnesses, so a file that is absent or not numbers by name is ignored.
 */
function readRunInputs(file: string): Record<string, number[]> | undefined {
  if (!existsSync(file)) return undefined;
  try {
    return finiteNumbersByName(JSON.parse(readFileSync(file, 'utf8')));
  } catch {
    return undefined;
  }
}

export function importCommand(a: ImportArgs, out: Out, progress?: ImportProgress): number {
  const logicalFile = a.logical !== undefined ? split(a.logical) : a.dir === undefined ? undefined : inDir(a.dir, 'logical');
  const relFile = a.relations ?? (a.dir === undefined ? undefined : join(a.dir, 'relations.json'));
  const ranks = rankFiles(a);
  if (logicalFile === undefined || logicalFile.length === 0 || relFile === undefined || typeof ranks === 'string') {
    progress?.end();
    out.err(`planproof: ${typeof ranks === 'string' ? ranks : 'name the single-device graph (--logical FILE) and the relations (--relations FILE), or give --dir'}\nRun 'planproof import-graphs --help' for usage.`);
    return ExitCode.usage;
  }
  // The bar (cli/progress.ts): files parsed, programs lowered, the plan checked and written.
  const own = progress === undefined ? stepBar('importing', !a.json) : undefined;
  const bar: ImportProgress | undefined = progress ?? (own === undefined ? undefined : { update: (d, t, w) => own.update(d, t, w), end: () => own.stop() });
  let ended = false;
  const end = (): void => {
    if (!ended) bar?.end();
    ended = true;
  };
  const fail = (msg: string, issues?: readonly string[]): number => {
    end();
    if (a.json) out.log(JSON.stringify({ verdict: 'invalid', error: msg, ...(issues === undefined ? {} : { issues }) }, null, 2));
    else {
      out.err(`planproof: import failed: ${msg}`);
      for (const i of issues ?? []) out.err(`  ${i}`);
    }
    return ExitCode.invalidPlan;
  };
  try {
    const read = (f: string): GraphFile => ({ name: f, text: readPlanText(f, FX_LIMITS.bytes) });
    const relations = checkRelations(relFile, parsePlanJson(relFile, readPlanText(relFile, FX_LIMITS.bytes)));
    const t0 = performance.now();
    const fromRel = relations.opMap === undefined ? [] : typeof relations.opMap === 'string' ? [relations.opMap] : relations.opMap;
    const opMaps = readOpMaps([...fromRel, ...(a.opMap ?? [])], dirname(relFile));
    let steps = 0;
    const onProgress = bar === undefined ? undefined : (d: number, t: number, w: string): void => bar.update(d, (steps = t + 2), w);
    const graphs = { logical: logicalFile.map(read), ranks: ranks.map((fs) => fs.map(read)) };
    // (values.json, the golden values a capture with --values writes, holds the same inputs)
    const runInputs = a.dir === undefined ? undefined : (readRunInputs(join(a.dir, 'inputs.json')) ?? readRunInputs(join(a.dir, 'values.json')));
    const { plan, stats } = importGraphs({ logical: graphs.logical, ranks: graphs.ranks, relations, relationsFile: relFile, opMaps, ...(a.name === undefined ? {} : { name: a.name }), ...(onProgress === undefined ? {} : { onProgress }), ...(runInputs === undefined ? {} : { runInputs }) });
    const outName = a.out ?? '(stdout)';
    // The loader checks what the importer wrote (shapes, lineage, tiling, collective matching)
    // before anything is written: a plan that does not load is never left behind.
    bar?.update(steps - 2, steps, 'checking that the plan loads');
    loadPlanObject(outName, JSON.parse(JSON.stringify(plan)));
    bar?.update(steps - 1, steps, `writing ${a.out ?? 'the plan to stdout'}`);
    const body = JSON.stringify(plan, null, 1) + '\n';
    if (a.out === undefined) out.log(body);
    else writeFileSync(a.out, body);
    bar?.update(steps, steps, `wrote ${a.out ?? 'the plan to stdout'}`);
    end();
    const summary = { out: outName, ranks: ranks.length, atenOps: stats.atenOps, planOps: stats.planOps, collectives: stats.collectives, mapped: stats.mapped, ignoredReturns: stats.ignoredReturns, assumptions: stats.assumptions, pairedMasks: stats.pairedMasks, constants: stats.constants, pruned: stats.pruned, unread: stats.unread, dynamic: stats.dynamic, byTarget: Object.fromEntries(stats.byTarget), bytes: Buffer.byteLength(body), ms: Math.round(performance.now() - t0) };
    if (a.json) out.err(JSON.stringify(summary));
    else {
      out.err(`planproof: imported ${stats.atenOps} ATen ops from ${logicalFile.length + ranks.reduce((n, fs) => n + fs.length, 0)} graphs into ${stats.planOps} plan ops (${stats.collectives} collective calls); wrote ${outName}. Lineage is on the boundary only: verify with --infer.`);
      out.err(`  most read: ${stats.byTarget.slice(0, 8).map(([t, c]) => `${t} ${c}`).join(', ')}${stats.byTarget.length > 8 ? `, and ${stats.byTarget.length - 8} more targets` : ''}`);
      const notes = [
        stats.mapped > 0 ? `${stats.mapped} call(s) through op maps` : '',
        stats.constants > 0 ? `${stats.constants} module constant(s) from the relations` : '',
        stats.pairedMasks > 0 ? `${stats.pairedMasks} dropout mask(s) paired by order` : '',
        stats.assumptions > 0 ? `${stats.assumptions} intermediate node(s) assumed as inputs (a region check)` : '',
        stats.ignoredReturns > 0 ? `${stats.ignoredReturns} returned value(s) ignored: no output relation names them (saved activations)` : '',
        stats.pruned > 0 ? `${stats.pruned} op(s) dropped: their values reach no output` : '',
        stats.unread > 0 ? `${stats.unread} graph input(s) without a relation left out: no output reads them` : '',
        stats.dynamic.selections > 0 ? `${stats.dynamic.selections} nonzero selection(s) of data-dependent size read densely (masked rows)` : '',
        stats.dynamic.asserts > 0 ? `${stats.dynamic.asserts} runtime assertion(s) on data-dependent sizes dropped (docs/import.md, "Data-dependent sizes")` : '',
      ].filter((x) => x !== '');
      if (notes.length > 0) out.err(`  ${notes.join('; ')}`);
    }
    // Half-precision values (autocast, .half()): read as exact reals like every float (docs/import.md).
    const half = [...graphs.logical, ...graphs.ranks.flat()].map(halfAt).filter((w) => w !== undefined);
    if (half.length > 0) {
      out.err(`planproof: note: the program computes with float16/bfloat16 values (autocast, .half()), first at ${String(half[0])}; plans are compared in exact real arithmetic, so a verdict says nothing about rounding to those types (docs/capture.md, "Mixed precision")`);
    }
    const reads = plan['x-planproof-specialized'];
    if (Array.isArray(reads) && reads.length > 0) {
      out.err(`planproof: note: the program read ${reads.length} value(s) into Python (.item(), float(t)) and used them outside the arithmetic the capture traces (a branch on them, a constant made from them), so a verdict holds for those values only (verify says so). First: ${String(reads[0])}`);
    }
    return 0;
  } catch (e) {
    if (e instanceof ImportError) return fail(e.message);
    if (e instanceof PlanError) return fail(e.file === (a.out ?? '(stdout)') ? 'the imported plan does not load' : `cannot read ${e.file}`, e.issues.map((i) => formatIssue(e.file, i)));
    throw e;
  } finally {
    end();
  }
}
