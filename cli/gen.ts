/**
 * `planproof gen`: its options (each size with what it means, its default and what it must
 * divide), the configuration a command line asks for, checked before anything is generated
 * (sizes that do not fit together are one usage error naming the flags), and the command.
 */
import { ExitCode } from '../plans/errors.js';
import { ADAMW, generatePlan } from '../plans/gen/plan.js';
import { BUGS, bugById } from '../plans/gen/bugs.js';
import { PRESETS, type Preset } from '../plans/gen/presets.js';
import { stripToBoundary } from '../plans/gen/strip.js';
import { stringifyChunks, writeJsonFile } from '../plans/gen/write.js';
import { MAX_PLAN_BYTES } from '../plans/json.js';
import type { ModelConfig } from '../plans/gen/models.js';
import type { Parallelism } from '../plans/gen/net.js';
import type { RawPlan } from '../plans/raw.js';
import { stepBar } from './progress.js';
import { nearest } from './usage.js';

interface Out {
  log(s: string): void;
  err(s: string): void;
  /** Writes text as is (no newline added); without it the plan goes to log as one string. */
  write?(s: string): void;
}

/** The preset a command line without --preset starts from. */
const DEFAULT_PRESET = 'gpt2-tiny';
const base = PRESETS[DEFAULT_PRESET] as Preset;
/** "[default: the preset's; gpt2-tiny: 4]" in --help. */
const fromPreset = (v: unknown): string => `the preset's; ${DEFAULT_PRESET}: ${String(v)}`;

/** gen's options; a size not given is the preset's (every preset: docs/generators.md). */
export const GEN_OPTIONS = {
  preset: { type: 'string', defaultDescription: DEFAULT_PRESET, describe: `a named configuration, which the options below override: ${Object.keys(PRESETS).join(', ')}` },
  model: { choices: ['mlp', 'gpt2', 'llama', 'moe'] as const, defaultDescription: fromPreset(base.model.family), describe: 'model family' },
  layers: { type: 'number', defaultDescription: fromPreset(base.model.layers), describe: 'layers (transformer blocks; mlp: linear pairs); at least --pp x --virtual' },
  hidden: { type: 'number', defaultDescription: fromPreset(base.model.hidden), describe: 'hidden size (model width); a multiple of --heads (llama, moe: with an even head dim)' },
  heads: { type: 'number', defaultDescription: fromPreset(base.model.heads), describe: 'attention heads (gpt2, llama, moe); divide --hidden, a multiple of --tp and of --kv-heads' },
  'kv-heads': { type: 'number', defaultDescription: '--heads', describe: 'key/value heads (llama, moe: grouped-query attention); divide --heads, a multiple of --tp' },
  seq: { type: 'number', defaultDescription: fromPreset(base.model.seq), describe: 'tokens per sample (gpt2, llama, moe); a multiple of 2 x --cp, and with --sp of --tp too' },
  vocab: { type: 'number', defaultDescription: fromPreset(base.model.vocab), describe: 'vocabulary size (gpt2, llama, moe); a multiple of --tp (vocab-parallel embedding)' },
  batch: { type: 'number', defaultDescription: fromPreset(base.model.batch), describe: 'global batch (samples per iteration); a multiple of --dp x --micro' },
  ffn: { type: 'number', defaultDescription: fromPreset(base.model.ffn ?? 4 * base.model.hidden), describe: 'MLP inner width (4 x hidden where a preset gives none); a multiple of --tp' },
  dp: { type: 'number', defaultDescription: fromPreset(base.par.dp), describe: 'data-parallel ranks' },
  tp: { type: 'number', defaultDescription: fromPreset(base.par.tp), describe: 'tensor-parallel ranks (Megatron)' },
  micro: { type: 'number', defaultDescription: fromPreset(base.par.micro), describe: 'micro-batches per iteration (gradient accumulation)' },
  sp: { type: 'boolean', defaultDescription: fromPreset(base.par.sp === true), describe: 'Megatron sequence parallelism (with tp > 1)' },
  pp: { type: 'number', defaultDescription: fromPreset(base.par.pp ?? 1), describe: 'pipeline stages' },
  virtual: { type: 'number', defaultDescription: fromPreset(base.par.virtual ?? 1), describe: 'interleaved pipeline: layer chunks (virtual stages) per stage (with --pp 2 or more)' },
  cp: { type: 'number', defaultDescription: fromPreset(base.par.cp ?? 1), describe: 'context parallelism (gpt2, llama, moe): zig-zag sequence chunks' },
  recompute: { type: 'boolean', defaultDescription: fromPreset(base.par.recompute === true), describe: 'full activation recomputation: each layer runs again in the backward' },
  'cp-comm': { choices: ['ring', 'allgather'] as const, defaultDescription: 'ring', describe: 'CP attention: ring attention with online softmax, or all-gathered keys and values' },
  ep: { type: 'boolean', defaultDescription: fromPreset(base.par.ep === true), describe: 'expert parallelism (moe): experts split across dp' },
  experts: { type: 'number', defaultDescription: "the preset's, else 4", describe: 'routed experts (moe); with --ep a multiple of --dp' },
  topk: { type: 'number', defaultDescription: "the preset's, else 1", describe: 'experts per token (moe); at most --experts' },
  shared: { type: 'number', defaultDescription: "the preset's, else none", describe: 'shared experts (moe)' },
  'expert-ffn': { type: 'number', defaultDescription: "the preset's, else --ffn", describe: 'routed-expert MLP width (moe)' },
  'moe-layout': { choices: ['packed', 'token'] as const, defaultDescription: 'packed', describe: 'MoE expert buffers: slots sorted by expert, or each slot at its own row' },
  schedule: { choices: ['1f1b', 'gpipe'] as const, defaultDescription: '1f1b', describe: 'pipeline schedule' },
  zero: { type: 'number', choices: [0, 1, 2, 3], defaultDescription: fromPreset(base.par.zero ?? 0), describe: 'ZeRO stage (with dp > 1): sharded optimizer state and step; 3 also shards the parameters' },
  inject: { type: 'string', describe: 'a bug from the catalog (see --list-bugs and docs/bugs.md)' },
  'list-bugs': { type: 'boolean', default: false, describe: 'list the bug catalog (id, kind, title) and exit' },
  out: { alias: 'o', type: 'string', describe: 'output file (default: stdout)' },
  'boundary-lineage': { type: 'boolean', describe: 'keep lineage only on contract inputs (data, parameters, optimizer state) and outputs, as a user would write it' },
} as const;

/** gen's parsed command line. */
export interface GenArgs {
  preset?: string | undefined;
  model?: 'mlp' | 'gpt2' | 'llama' | 'moe' | undefined;
  ep?: boolean | undefined;
  virtual?: number | undefined;
  experts?: number | undefined;
  topk?: number | undefined;
  layers?: number | undefined;
  hidden?: number | undefined;
  heads?: number | undefined;
  kvHeads?: number | undefined;
  shared?: number | undefined;
  expertFfn?: number | undefined;
  moeLayout?: 'packed' | 'token' | undefined;
  seq?: number | undefined;
  vocab?: number | undefined;
  batch?: number | undefined;
  ffn?: number | undefined;
  dp?: number | undefined;
  tp?: number | undefined;
  micro?: number | undefined;
  sp?: boolean | undefined;
  zero?: number | undefined;
  pp?: number | undefined;
  cp?: number | undefined;
  cpComm?: 'ring' | 'allgather' | undefined;
  recompute?: boolean | undefined;
  schedule?: '1f1b' | 'gpipe' | undefined;
  inject?: string | undefined;
  listBugs?: boolean | undefined;
  out?: string | undefined;
  json?: boolean | undefined;
  boundaryLineage?: boolean | undefined;
}

/** What a gen command line generates: the model, the parallelism, the bug to inject. */
interface GenConfig {
  readonly model: ModelConfig & { readonly experts: number; readonly topk: number };
  readonly par: Required<Pick<Parallelism, 'dp' | 'tp' | 'micro' | 'sp' | 'zero' | 'pp' | 'cp' | 'cpComm' | 'recompute' | 'ep' | 'virtual' | 'schedule'>>;
}

/** The model and parallelism a command line asks for: the preset's, with the options given instead. */
function configOf(a: GenArgs, p: Preset): GenConfig {
  const m = p.model;
  const model = {
    family: a.model ?? m.family,
    layers: a.layers ?? m.layers,
    hidden: a.hidden ?? m.hidden,
    heads: a.heads ?? m.heads,
    seq: a.seq ?? m.seq,
    vocab: a.vocab ?? m.vocab,
    batch: a.batch ?? m.batch,
    ffn: a.ffn ?? m.ffn ?? 4 * m.hidden,
    ...((a.kvHeads ?? m.kvHeads) === undefined ? {} : { kvHeads: a.kvHeads ?? m.kvHeads }),
    ...((a.shared ?? m.shared) === undefined ? {} : { shared: a.shared ?? m.shared }),
    ...((a.expertFfn ?? m.expertFfn) === undefined ? {} : { expertFfn: a.expertFfn ?? m.expertFfn }),
    experts: a.experts ?? m.experts ?? 4,
    ...((a.moeLayout ?? m.moeLayout) === undefined ? {} : { moeLayout: a.moeLayout ?? m.moeLayout }),
    topk: a.topk ?? m.topk ?? 1,
  };
  const q = p.par;
  const par = { dp: a.dp ?? q.dp, tp: a.tp ?? q.tp, micro: a.micro ?? q.micro, sp: a.sp ?? q.sp === true, zero: (a.zero ?? q.zero ?? 0) as 0 | 1 | 2 | 3, pp: a.pp ?? q.pp ?? 1, cp: a.cp ?? q.cp ?? 1, cpComm: a.cpComm ?? q.cpComm ?? 'ring', recompute: a.recompute ?? q.recompute === true, ep: a.ep ?? q.ep === true, virtual: a.virtual ?? q.virtual ?? 1, schedule: a.schedule ?? q.schedule ?? '1f1b' };
  return { model, par } as GenConfig;
}

/** The sizes that do not fit together, each naming its flags (what the generator would stop on, said before it starts). */
function sizeProblems({ model: m, par }: GenConfig): string[] {
  const out: string[] = [];
  const divides = (a: string, av: number, b: string, bv: number): void => {
    if (bv % av !== 0) out.push(`${a} ${av} does not divide ${b} ${bv}`);
  };
  const seqModel = m.family !== 'mlp';
  const rotary = m.family === 'llama' || m.family === 'moe';
  if (seqModel) {
    divides('--heads', m.heads, '--hidden', m.hidden);
    if (rotary && m.hidden % m.heads === 0 && (m.hidden / m.heads) % 2 !== 0) out.push(`--hidden ${m.hidden} / --heads ${m.heads} = ${m.hidden / m.heads}: the head dim must be even (rotary embedding)`);
    if (rotary) divides('--kv-heads', m.kvHeads ?? m.heads, '--heads', m.heads);
    divides('--tp', par.tp, '--heads', m.heads);
    if (rotary) divides('--tp', par.tp, '--kv-heads', m.kvHeads ?? m.heads);
    divides('--tp', par.tp, '--vocab', m.vocab);
    if (par.cp > 1 && m.seq % (2 * par.cp) !== 0) out.push(`2 x --cp ${par.cp} = ${2 * par.cp} does not divide --seq ${m.seq} (zig-zag chunks)`);
    if (par.sp && par.tp > 1 && (m.seq / par.cp) % par.tp !== 0) out.push(`--tp ${par.tp} does not divide the tokens per CP rank (--seq ${m.seq} / --cp ${par.cp}) that --sp splits`);
  } else if (par.cp > 1) out.push(`--cp ${par.cp} needs a sequence model (--model gpt2, llama or moe)`);
  if (m.family !== 'moe') divides('--tp', par.tp, '--ffn', m.ffn ?? 4 * m.hidden);
  if (m.family === 'moe') {
    if (par.ep) divides('--dp', par.dp, '--experts', m.experts);
    if (m.topk > m.experts) out.push(`--topk ${m.topk} exceeds --experts ${m.experts}`);
  }
  if (m.batch % (par.dp * par.micro) !== 0) out.push(`--dp ${par.dp} x --micro ${par.micro} = ${par.dp * par.micro} does not divide --batch ${m.batch}`);
  if (par.pp * par.virtual > m.layers) out.push(`--pp ${par.pp} x --virtual ${par.virtual} = ${par.pp * par.virtual} exceeds --layers ${m.layers}`);
  if (par.virtual > 1 && par.pp < 2) out.push(`--virtual ${par.virtual} needs --pp 2 or more`);
  return out;
}

/**
 * The configuration of a gen command line, or why there is none (a usage error: unknown preset
 * or bug, a size that is not a positive integer, sizes that do not fit together, a bug that does
 * not apply). Cheap: yargs' check runs it before any work.
 */
export function genConfig(a: GenArgs): (GenConfig & { readonly bug?: (typeof BUGS)[number] }) | string {
  const p = PRESETS[a.preset ?? DEFAULT_PRESET];
  if (p === undefined) {
    const near = nearest(a.preset ?? '', Object.keys(PRESETS));
    return `unknown preset '${a.preset ?? ''}'${near === undefined ? '' : ` (did you mean ${near}?)`}; presets: ${Object.keys(PRESETS).join(', ')}`;
  }
  const c = configOf(a, p);
  const flag = (k: string): string => `--${k.replace(/[A-Z]/g, (x) => `-${x.toLowerCase()}`)}`;
  for (const [k, v] of Object.entries({ ...c.model, dp: c.par.dp, tp: c.par.tp, micro: c.par.micro, pp: c.par.pp, cp: c.par.cp, virtual: c.par.virtual })) {
    if (typeof v === 'number' && (!Number.isSafeInteger(v) || v < 1) && !(k === 'shared' && v === 0)) return `${flag(k)} must be a positive integer, got ${v}`;
  }
  const bad = sizeProblems(c);
  if (bad.length > 0) return `these sizes do not fit together (${a.preset ?? DEFAULT_PRESET} with the options given): ${bad.join('; ')}`;
  if (a.inject === undefined) return c;
  const bug = bugById(a.inject);
  if (bug === undefined) {
    const near = nearest(a.inject, BUGS.map((b) => b.id));
    return `unknown bug '${a.inject}'${near === undefined ? '' : ` (did you mean ${near}?)`} (planproof gen --list-bugs lists them)`;
  }
  if (!bug.applies({ ...c.par, family: c.model.family })) return `bug '${bug.id}' needs a plan with ${bug.title.split(':')[0] ?? ''}: not applicable to this configuration`;
  return { ...c, bug };
}

/** The gen command: the catalog with --list-bugs, else the plan (to --out, or stdout). */
export function gen(a: GenArgs, out: Out): number {
  if (a.listBugs === true) {
    if (a.json === true) out.log(JSON.stringify(BUGS.map((b) => ({ id: b.id, kind: b.kind, title: b.title })), null, 2));
    else for (const b of BUGS) out.log(`${b.id.padEnd(34)} ${b.kind.padEnd(22)} ${b.title}`);
    return 0;
  }
  const c = genConfig(a);
  if (typeof c === 'string') {
    out.err(`planproof: gen: ${c}`);
    return ExitCode.usage;
  }
  const t0 = performance.now();
  // The bar (cli/progress.ts): the generator's steps, then injecting, stripping and writing.
  const bar = stepBar('generating', a.json !== true);
  const after = [...(c.bug === undefined ? [] : [`injecting ${c.bug.id}`]), ...(a.boundaryLineage === true ? ['keeping lineage on the boundary only'] : []), `writing ${a.out ?? 'the plan to stdout'}`];
  let steps = 0;
  const next = (what: string): void => bar?.update(steps - after.length + after.indexOf(what), steps, what);
  try {
    let plan: RawPlan;
    try {
      plan = generatePlan({
        model: c.model,
        par: c.par,
        optimizer: ADAMW,
        ...(bar === undefined ? {} : { onProgress: (d: number, t: number, w: string) => bar.update(d, (steps = t + after.length), w) }),
      });
      if (c.bug !== undefined) {
        next(`injecting ${c.bug.id}`);
        c.bug.inject(plan, { ...c.par, family: c.model.family });
        plan.name = `${String(plan.name)}+${c.bug.id}`;
      }
    } catch (e) {
      // A combination the checks above do not know: the generator's words, without a stack trace.
      out.err(`planproof: cannot generate this plan: ${e instanceof Error ? e.message : String(e)}`);
      return ExitCode.usage;
    }
    if (a.boundaryLineage === true) {
      next('keeping lineage on the boundary only');
      plan = stripToBoundary(plan);
    }
    next(`writing ${a.out ?? 'the plan to stdout'}`);
    // In pieces, never one string (plans/gen/write.ts): the same bytes as JSON.stringify(plan, null, 1),
    // or without whitespace where that would pass what verify reads by default.
    const bytes = a.out === undefined ? toStdout(plan, out) : writeJsonFile(a.out, plan, MAX_PLAN_BYTES);
    bar?.update(steps, steps, `wrote ${a.out ?? 'the plan to stdout'}`);
    bar?.stop();
    summary(plan, a, bytes, performance.now() - t0, out);
    return 0;
  } finally {
    bar?.stop();
  }
}

/** The plan and a newline on `out`, in pieces where it takes them; returns the bytes. */
function toStdout(plan: RawPlan, out: Out): number {
  let bytes = 0;
  const pieces: string[] = [];
  stringifyChunks(plan, (s) => {
    bytes += Buffer.byteLength(s);
    if (out.write === undefined) pieces.push(s);
    else out.write(s);
  });
  if (out.write === undefined) out.log(pieces.join(''));
  else out.write('\n');
  return bytes + 1;
}

/** gen's one line on stderr after a plan is written (a JSON object with --json): what it holds, where, how large. */
function summary(plan: RawPlan, a: GenArgs, bytes: number, ms: number, out: Out): void {
  const axes = plan.mesh.axes;
  const ranks = axes.reduce((n, x) => n * x.size, 1);
  const programs = plan.parallel.programs;
  const programOps = programs.reduce((n, p) => n + p.ops.length, 0);
  const s = { out: a.out ?? '(stdout)', name: String(plan.name ?? ''), ranks, mesh: Object.fromEntries(axes.map((x) => [x.name, x.size])), programs: programs.length, logicalOps: plan.logical.ops.length, programOps, bytes, ms: Math.round(ms) };
  if (a.json === true) {
    out.err(JSON.stringify(s));
    return;
  }
  const mb = bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
  out.err(`planproof: gen: wrote ${s.out === '(stdout)' ? 'the plan to stdout' : s.out} (${mb}): ${s.name}, ${ranks} ranks (${axes.map((x) => `${x.name} ${x.size}`).join(', ')}), ${s.programs} program${s.programs === 1 ? '' : 's'}, ${s.logicalOps} logical ops, ${programOps} program ops, in ${(ms / 1000).toFixed(1)} s`);
}
