/**
 * The verdict of a plan decomposed per template (stages/decompose/template.ts): every stage
 * proved at tensor level per template (stages/engines/tensorlevel/template.ts), a stage left open
 * refuted on one rank's part (stages/shrink/part.ts, docs/engine.md "Witnesses per template"),
 * the report assembled, and which value-only attributes the proofs relied on (incremental
 * re-verification).
 */
import { MAX_STAGE_ENTRIES, stageEntries } from '../../plans/loader.js';
import type { LoadedPlan } from '../../lineage/load.js';
import { logicalOrder } from '../../sdfg/execute.js';
import type { StageReport, VerifyReport } from '../report.js';
import type { Program } from '../../plans/model.js';
import { registry } from '../../ops/registry.js';
import type { ProvePart } from './prove.js';
import { TensorLevelProver } from '../engines/tensorlevel/prover.js';
import { AttrUse } from '../engines/tensorlevel/world.js';
import type { RawPlan } from '../../plans/raw.js';
import { TimeLimitReached } from '../clock.js';
import { type TemplatePart, type TemplateStage, type LocalProof, TemplateStages } from './template.js';

export interface TemplateVerifyOptions {
  readonly seed?: number;
  /** The per-rank entry bound the plan is past (for the report). */
  readonly maxStageEntries?: number;
  /** Per-stage element limit (default MAX_STAGE_ELEMENTS; lowered by tests). */
  readonly maxStageElements?: number;
  readonly onStage?: (done: number, total: number) => void;
  /** Start time, when the caller's clock started earlier. */
  readonly t0?: number;
  /** Term budget per proof (default DEFAULT_TERM_BUDGET). */
  readonly budget?: number;
  /** Tensor-level proofs per template first (default true; stages/engines/tensorlevel/prover.ts proveTemplate). */
  readonly tensorLevel?: boolean;
  /**
   * Witnesses: a stage left open is refuted on one rank's part (stages/shrink/part.ts provePart, passed
   * in by the caller so that this module does not depend on the element paths), read from the
   * plan file (`raw`, parsed only when a stage is open).
   */
  readonly witness?: { readonly raw: () => RawPlan; readonly provePart: ProvePart };
  /** Milliseconds the witness search may take (default WITNESS_BUDGET_MS). */
  readonly witnessMs?: number;
}

/** Default time for witnesses per template: parts tried until one refutes or this runs out. */
const WITNESS_BUDGET_MS = 120_000;
/** Open stages (in order) and parts per stage tried for a witness. */
const WITNESS_STAGES = 64;
const WITNESS_PARTS = 2;

/**
 * The verdict of a plan past the per-rank stage bound: its stages decomposed per template, each
 * sized at full shapes and "unknown" with its reason. Never "verified", never "not equivalent":
 * nothing is proved or evaluated on this path.
 */
/** A stage's report fields that do not depend on how it was decided. */
function stageHead(plan: LoadedPlan, s: TemplateStage, i: number): Pick<StageReport, 'index' | 'logical' | 'op' | 'ranks' | 'templates'> {
  const lg = plan.logical;
  const prodOp = lg.producer[s.logical] as number;
  const op = prodOp < 0 ? undefined : { id: lg.ops.ids.name(prodOp), kind: registry.get(lg.ops.kind[prodOp] as number).name, ...(lg.ops.loc[prodOp] === undefined ? {} : { loc: lg.ops.loc[prodOp] as string }) };
  return {
    index: i + 1,
    logical: lg.tensors.name(s.logical),
    ...(op === undefined ? {} : { op }),
    ranks: [],
    templates: s.parts.map((p) => {
      const prog = plan.programs[p.program] as Program;
      return { program: prog.name, tensor: prog.tensors.name(p.tensor), ranks: p.ranks };
    }),
  };
}

/**
 * Per-rank stage entries (plans/loader.ts stageEntries) past which `planproof verify` tries
 * verifiedPerTemplate first: below it the rank-by-rank path costs seconds and brings the
 * numeric run; above it that path costs minutes (L1, 7.7 million entries: 131 s rank by rank,
 * 6 s per template).
 */
export const PER_TEMPLATE_FIRST = 1_000_000;

/** Thrown inside verifyTemplates when a stage is not proved at tensor level and the caller wants all or nothing. */
class NotAllProved extends Error {}

/**
 * The verdict per template when every stage is proved at tensor level per template, else
 * undefined (at the first stage that is not): a plan under the per-rank bound is tried this way
 * first, one derivation per program instead of one per rank, and goes rank by rank (with
 * witnesses, reduction and the element engines) only when this does not prove it.
 */
export function verifiedPerTemplate(plan: LoadedPlan, opts: TemplateVerifyOptions = {}): VerifyReport | undefined {
  try {
    const r = verifyTemplates(plan, opts, true);
    return r.verdict === 'verified' ? r : undefined;
  } catch (e) {
    if (e instanceof NotAllProved) return undefined;
    throw e;
  }
}

export function verifyPerTemplate(plan: LoadedPlan, opts: TemplateVerifyOptions = {}): VerifyReport {
  return verifyTemplates(plan, opts, false);
}

/**
 * Where programs disagree: two programs are copies of one template when they share at least 90%
 * of their op ids (a rank spelled apart from its program; pipeline stages name their layers'
 * ops apart); an op of such a copy whose id the other lacks, or has with another kind,
 * attributes or inputs, is where they disagree. Returned: the programs holding such ops, and
 * the logical tensors of the claims first reached downstream of them in each (the stages a
 * witness search should try first).
 */
export function templateDiff(plan: LoadedPlan, raw: RawPlan): { stages: Set<number>; programs: Set<number> } {
  const progs = raw.parallel.programs;
  const sigOf = (o: { op: string; inputs: readonly string[]; attrs?: unknown }): string => `${o.op}|${o.inputs.join(',')}|${JSON.stringify(o.attrs ?? {})}`;
  const idSets = progs.map((p) => new Set(p.ops.map((o) => o.id)));
  const sigCache = new Map<number, Map<string, string>>();
  const sigsOf = (i: number): Map<string, string> => {
    let m = sigCache.get(i);
    if (m === undefined) sigCache.set(i, (m = new Map((progs[i]?.ops ?? []).map((o) => [o.id, sigOf(o)]))));
    return m;
  };
  const odd = progs.map(() => new Set<string>());
  for (let a = 0; a < idSets.length; a++) for (let b = a + 1; b < idSets.length; b++) {
    const A = idSets[a] as Set<string>;
    const B = idSets[b] as Set<string>;
    if (Math.min(A.size, B.size) < 0.9 * Math.max(A.size, B.size)) continue;
    // A sample of ids first: pipeline stages share almost none.
    const ids = [...A.keys()];
    let hit = 0;
    for (let k = 0; k < 64; k++) if (B.has(ids[Math.floor((k * ids.length) / 64)] as string)) hit++;
    if (hit < 48) continue;
    let shared = 0;
    for (const id of ids) if (B.has(id)) shared++;
    if (shared < 0.9 * Math.max(A.size, B.size)) continue;
    const [SA, SB] = [sigsOf(a), sigsOf(b)];
    for (const [id, sg] of SA) if (SB.get(id) !== sg) (odd[a] as Set<string>).add(id);
    for (const [id, sg] of SB) if (SA.get(id) !== sg) (odd[b] as Set<string>).add(id);
  }
  const stages = new Set<number>();
  const programs = new Set<number>();
  plan.programs.forEach((p, pi) => {
    const starts: number[] = [];
    for (let op = 0; op < p.ops.size; op++) if (odd[pi]?.has(p.ops.ids.name(op)) === true) starts.push(op);
    if (starts.length === 0) return;
    programs.add(pi);
    // Forward from those ops to the first claims (stage boundaries) in this program.
    const consumers = new Map<number, number[]>();
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opInputs(op)) {
      const l = consumers.get(t);
      if (l === undefined) consumers.set(t, [op]);
      else l.push(op);
    }
    const seenOp = new Set<number>(starts);
    const stack = [...starts];
    while (stack.length > 0 && seenOp.size < 100_000) {
      const op = stack.pop() as number;
      for (const t of p.ops.opOutputs(op)) {
        const spec = p.lineage[t];
        if (spec !== undefined) {
          stages.add(spec.logical);
          continue;
        }
        for (const c of consumers.get(t) ?? []) if (!seenOp.has(c)) {
          seenOp.add(c);
          stack.push(c);
        }
      }
    }
  });
  return { stages, programs };
}

function verifyTemplates(plan: LoadedPlan, opts: TemplateVerifyOptions, allOrNothing: boolean): VerifyReport {
  const t0 = opts.t0 ?? performance.now();
  const seed = opts.seed ?? 1;
  const bound = opts.maxStageEntries ?? MAX_STAGE_ENTRIES;
  const entries = stageEntries(plan);
  const ts = new TemplateStages(plan, opts.maxStageElements);
  const stages = ts.decompose(logicalOrder(plan));
  const limit = ts.limit.toLocaleString('en-US');
  let tooLarge = 0;
  let proved = 0;
  let tensor = 0;
  const use = new AttrUse(plan);
  const tl = opts.tensorLevel === false ? undefined : new TensorLevelProver(plan, { perTemplate: true, attrUse: use });
  /** Per stage: the part where tensor level stopped (tried first for a witness). */
  const failedPart = new Map<number, number>();
  const reports: StageReport[] = stages.map((s, i) => {
    const t1 = performance.now();
    let tlWhy: string | undefined;
    if (tl !== undefined) {
      let r: { proved: true } | { why: string; part?: number };
      try {
        r = tl.proveTemplate(s);
      } catch (e) {
        if (e instanceof TimeLimitReached) throw e;
        r = { why: `tensor-level error: ${e instanceof Error ? e.message : String(e)}` };
      }
      if ('proved' in r) {
        proved++;
        tensor++;
        opts.onStage?.(i + 1, stages.length);
        return { ...stageHead(plan, s, i), rankCount: ts.ranksOf(s), status: 'proved' as const, decidedBy: 'tensor' as const, failingRanks: [], logicalOps: 0, parallelOps: 0, ms: performance.now() - t1 };
      }
      tlWhy = r.why;
      if (r.part !== undefined) failedPart.set(i, r.part);
      if (allOrNothing) throw new NotAllProved(r.why);
    }
    const size = ts.size(s);
    const n = size.elements.toLocaleString('en-US');
    const counted = size.exact ? 'counted per template' : `counted per template, a lower bound: ${size.partial ?? ''}`;
    let reason: string | undefined;
    let classes: number | undefined;
    if (ts.tooLarge(size)) {
      tooLarge++;
      // The per-rank builder's words (stages/decompose/prove.ts), so that reports read alike on both paths.
      reason = `the stage is too large: its tensors hold ${size.exact ? '' : 'at least '}${n} elements (${counted}; at most ${limit} per stage): shapes this large need shape reduction (docs/engine.md, "Shape reduction" and "Per-stage reduction")`;
    } else {
      let r: LocalProof;
      try {
        r = ts.proveLocal(s, size, opts.budget);
      } catch (e) {
        if (e instanceof TimeLimitReached) throw e;
        r = { status: 'unknown', classes: 0, reason: `engine error: ${e instanceof Error ? e.message : String(e)}` };
      }
      if (r.status === 'proved') {
        proved++;
        classes = r.classes;
      } else {
        reason = `not proved on the per-template path: ${r.reason ?? ''}; its tensors hold ${size.exact ? '' : 'at least '}${n} elements (${counted}; the per-stage limit is ${limit})`;
      }
    }
    // Where tensor level stopped localizes a stage the element engines cannot take.
    if (reason !== undefined && tlWhy !== undefined) reason = `${reason}; at tensor level: ${tlWhy}`;
    opts.onStage?.(i + 1, stages.length);
    return {
      ...stageHead(plan, s, i),
      rankCount: ts.ranksOf(s),
      elements: size.elements,
      elementsExact: size.exact,
      ...(reason === undefined ? { status: 'proved' as const, decidedBy: 'normal' as const, rankClasses: classes ?? 0 } : { status: 'unknown' as const, reason }),
      // Unknown or proved here: failing ranks come only with a witness (below).
      failingRanks: [],
      logicalOps: 0,
      parallelOps: 0,
      ms: performance.now() - t1,
    };
  });
  const why =
    entries > bound
      ? `building its stages rank by rank would take ${entries.toLocaleString('en-US')} per-rank tensor and op entries (at most ${bound.toLocaleString('en-US')})`
      : 'tried per template first: one tensor-level derivation per program, not one per rank';
  // Witnesses: the first open stages, tried on one rank's part each (stages/shrink/part.ts); a part that
  // differs with a witness refutes its stage (and so the plan), anything else leaves it open.
  let refuted: StageReport | undefined;
  const wit = opts.witness;
  if (wit !== undefined && reports.some((r) => r.status !== 'proved')) {
    const until = performance.now() + (opts.witnessMs ?? WITNESS_BUDGET_MS);
    const raw: RawPlan = wit.raw();
    let tried = 0;
    // Stages reached from an op whose programs disagree on it come first (a rank spelled apart
    // with another attribute or op), then the rest in order: an ordering only, never a verdict.
    const { stages: suspects, programs: diverging } = templateDiff(plan, raw);
    const byLogical = new Map<number, number[]>();
    stages.forEach((s, i) => {
      const l = byLogical.get(s.logical);
      if (l === undefined) byLogical.set(s.logical, [i]);
      else l.push(i);
    });
    const first = [...suspects].flatMap((l) => byLogical.get(l) ?? []).sort((a, b) => a - b);
    for (const i of new Set([...first, ...reports.keys()])) {
      if (refuted !== undefined || tried >= WITNESS_STAGES || performance.now() >= until) break;
      const rep = reports[i] as StageReport;
      if (rep.status === 'proved') continue;
      tried++;
      const s = stages[i] as TemplateStage;
      const notes: string[] = [];
      const failed = failedPart.get(i);
      // Where tensor level stopped first; then programs that disagree with another on an op;
      // then programs of few ranks (a rank spelled apart from its template is where a one-rank
      // divergence lives).
      const rest = s.parts.filter((_, j) => j !== failed).sort((a, b) => Number(diverging.has(b.program)) - Number(diverging.has(a.program)) || a.ranks - b.ranks);
      const order = failed === undefined ? rest : [s.parts[failed] as TemplatePart, ...rest];
      for (const part of order.slice(0, WITNESS_PARTS)) {
        if (performance.now() >= until) break;
        const prog = plan.programs[part.program] as Program;
        const rank = prog.ranks[0] as number;
        const t1 = performance.now();
        const r = wit.provePart(plan, raw, { index: i, logical: s.logical, obligations: [] }, rank, part.tensor, seed);
        if ('why' in r) {
          notes.push(`rank ${rank}: ${r.why}`);
          continue;
        }
        if (r.result.status === 'differs' && r.witness.length > 0) {
          const diagnosis = r.diagnosis;
          refuted = {
            ...rep,
            status: 'not_equivalent',
            reason: `the two sides differ on rank ${rank}'s part (its obligation and the ${r.ranks.length} rank(s) it reads, extracted${r.reduced ? ' and reduced' : ''}: stages/shrink/part.ts): ${r.result.reason ?? ''}`,
            witness: r.witness.slice(0, 4),
            ...(diagnosis === undefined ? {} : { diagnosis: diagnosis.text, diagnosisRule: diagnosis.rule, diagnosisRanks: diagnosis.ranks }),
            failingRanks: r.result.failingRanks,
            ms: rep.ms + (performance.now() - t1),
          };
          reports[i] = refuted;
          break;
        }
        notes.push(`rank ${rank} '${prog.tensors.name(part.tensor)}': the part is ${r.result.status === 'proved' ? 'proved there (no witness on this rank)' : `${r.result.status}${r.witness.length === 0 ? ' without a witness' : ''} (${clipMiddle(r.result.reason ?? '', 200, 300)}${r.notReduced === undefined ? '' : `; not reduced: ${r.notReduced}`})`}`);
      }
      if (refuted === undefined && notes.length > 0 && rep.status === 'unknown') reports[i] = { ...rep, reason: `${rep.reason ?? ''}; witness search per part: ${notes.join('; ')}` };
    }
  }
  const open = reports.filter((r) => r.status !== 'proved');
  const first = open[0];
  const counts = `${proved} proved (${tensor} at tensor level per template; rank by rank from the templates: ${ts.proofsRun} proof(s) run, ${ts.proofsShared} part(s) covered by an equal canonical form), ${tooLarge} too large at full shapes, ${open.length - tooLarge} not proved on this path`;
  // Every obligation is some stage's part (stages decomposed per template cover every
  // (program, tensor) with lineage that the program writes), and the loader checked that the
  // contract outputs are held complete: all stages proved is a proof of the plan.
  const verified = reports.length > 0 && first === undefined;
  const summary =
    refuted !== undefined
      ? `stage ${refuted.index} (${refuted.logical}${refuted.op ? `, op '${refuted.op.id}'` : ''}) is the first failing stage found and the likely root cause (refuted on one rank's part; decomposed per template: ${why}); ${open.length - 1} other stage(s) not proved: ${counts}`
      : reports.length === 0
      ? `no stage: no tensor with lineage is produced (${why}; stages decomposed per template)`
      : first === undefined
        ? `all ${reports.length} stages proved equivalent in exact arithmetic; every contract output is held complete; decomposed per template (${why}): ${counts}`
        : `${open.length} of ${reports.length} stage(s) undecided, decomposed per template (${why}): ${counts}; first: stage ${first.index} (${first.logical}): ${first.reason ?? ''}`;
  const report: VerifyReport = {
    file: plan.file,
    name: plan.name,
    verdict: refuted !== undefined ? 'not_equivalent' : verified ? 'verified' : 'unknown',
    summary,
    stages: reports,
    numeric: { evaluated: false, seed, claimsChecked: 0, mismatches: 0, reason: 'not run: the plan is past the per-rank stage bound (stages decomposed per template)' },
    approximations: [],
    ms: performance.now() - t0,
    decomposition: { path: 'template', entries, bound, reason: why },
    ...(plan.specialized === undefined ? {} : { specialized: plan.specialized }),
  };
  // Incremental re-verification (cli/delta.ts) reuses a verdict that tensor level alone reached.
  if (verified && tensor === reports.length && use.poisoned === undefined) ATTR_USE.set(report, { refs: use.refs, classes: use.classes() });
  return report;
}

/** What a VERIFIED report per template relied on of value-only attributes (AttrUse). */
export interface AttrReliance {
  /** Every op of a kind with value-only attributes: 'L<op>' or 'P<program>:<op>'. */
  readonly refs: readonly string[];
  /** Ops whose attribute sets the derivations relied on being equal (two or more each). */
  readonly classes: readonly (readonly string[])[];
}
const ATTR_USE = new WeakMap<VerifyReport, AttrReliance>();

/**
 * For a report of verifiedPerTemplate or verifyPerTemplate that is VERIFIED with every stage
 * proved at tensor level, and whose derivations compared only the plan's own attribute sets
 * of value-only kinds: which of those they relied on being equal. Else undefined.
 */
export function attrRelianceOf(r: VerifyReport): AttrReliance | undefined {
  return ATTR_USE.get(r);
}

/** A long reason's start and end (the later attempts, cuts for witnesses, are at its end). */
function clipMiddle(s: string, head: number, tail: number): string {
  return s.length <= head + tail + 5 ? s : `${s.slice(0, head)} ... ${s.slice(s.length - tail)}`;
}
