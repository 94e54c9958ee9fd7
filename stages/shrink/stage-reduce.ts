/**
 * Per-stage shape reduction (docs/engine.md, "Per-stage reduction").
 *
 * Whole-plan reduction (stages/shrink/reduce.ts) unions dim classes over the whole plan, so one
 * mean or rms_norm anywhere keeps a dim full everywhere. A stage, though, is connected to
 * the rest of the plan only through the lineage of its inputs (free symbols constrained by
 * their lineage) and of its obligations. So each stage is extracted as a standalone plan
 * (stages/decompose/extract.ts), checked to be the same stage, and reduced on its own by the same
 * reducer: its classes come from its own ops, lineage and collectives only. A proof of the
 * reduced stage is a proof of the stage (the lane argument, applied to the extracted plan);
 * a witness of the reduced stage, copied into every lane, is a witness of the stage.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LoadedPlan } from '../../lineage/load.js';
import type { RawPlan } from '../../plans/raw.js';
import { logicalOrder } from '../../sdfg/execute.js';
import { numericCheck, type NumericReport } from '../witness/numeric.js';
import { certifiedMismatch, certifyWitness, domainClaimText, type Iv } from '../engines/interval.js';
import { decompose, Prover, type Stage, type StageResult, type Stop } from '../decompose/prove.js';
import { analyzeReduction, prefixPlan, reducePlan, ReductionError, zeroCutPlan, type ReducedClass } from './reduce.js';
import { extractStage, ExtractionError, extractStageRaw, loadExtracted, stageClosure, stageOf, withOutputFallback } from '../decompose/extract.js';
import { batchClasses, checkComponent, ComponentError, componentRaw, loadComponent, rankStage, renamedText, splitsByRank, windowsOf, type ClassInfo } from './components.js';
import { assemble } from '../verify.js';
import { retryDraws } from '../portfolio.js';
import { type VerifyReport } from '../report.js';
import { timeLeft, type TimeLimit } from '../engines/pool.js';

interface StageReductionInfo {
  /** 1-based stage number in the full plan. */
  readonly stage: number;
  readonly logical: string;
  /**
   * 'components': proved per rank component (stages/shrink/components.ts); 'reduced': on the reduced
   * extracted stage; 'extracted': on the extracted stage at full shapes; 'in-place': in the full plan.
   */
  readonly mode: 'components' | 'reduced' | 'extracted' | 'in-place';
  /** For 'components': rank components and distinct component plans proved. */
  readonly components?: { readonly ranks: number; readonly distinct: number; readonly covered?: number };
  /** Why the stage was not reduced (or not extracted). */
  readonly reason?: string;
  readonly reduced: ReducedClass[];
  readonly kept: ReducedClass[];
  /** Where --emit-reduced wrote the stage plan. */
  readonly emitted?: string;
}

interface PreparedStage {
  readonly info: StageReductionInfo;
  /** The plan the stage is proved in, and the stage there. */
  readonly plan: LoadedPlan;
  readonly stage: Stage;
  /** The stage plan file (reduced or extracted), when there is one. */
  readonly raw?: RawPlan;
}

/** Extracts a stage and reduces it on its own; falls back to the stage in place, with the reason. */
export function prepareStage(full: LoadedPlan, raw: RawPlan, stage: Stage, reduce = true): PreparedStage {
  const logical = full.logical.tensors.name(stage.logical);
  const base = { stage: stage.index + 1, logical };
  let ex;
  try {
    ex = extractStage(full, raw, stage);
  } catch (e) {
    if (!(e instanceof ExtractionError)) throw e;
    return { info: { ...base, mode: 'in-place', reason: e.message, reduced: [], kept: [] }, plan: full, stage };
  }
  if (!reduce) return { info: { ...base, mode: 'extracted', reason: 'turned off (--no-reduce)', reduced: [], kept: [] }, plan: ex.plan, stage: ex.stage, raw: ex.raw };
  try {
    const red = reducePlan(ex.plan, ex.raw);
    if (red === undefined) {
      return { info: { ...base, mode: 'extracted', reason: 'no dim of the stage can shrink', reduced: [], kept: analyzeReduction(ex.plan).classes }, plan: ex.plan, stage: ex.stage, raw: ex.raw };
    }
    const s = stageOf(red.plan, logical);
    if (s === undefined || s.obligations.length !== ex.stage.obligations.length) throw new ReductionError(`the reduced stage plan has ${s?.obligations.length ?? 0} obligations of '${logical}', the stage ${ex.stage.obligations.length}`);
    const cls = red.analysis.classes;
    return { info: { ...base, mode: 'reduced', reduced: cls.filter((c) => c.factor > 1), kept: cls.filter((c) => c.factor === 1) }, plan: red.plan, stage: s, raw: red.raw };
  } catch (e) {
    if (!(e instanceof ReductionError)) throw e;
    return { info: { ...base, mode: 'extracted', reason: `the reduced stage did not check out: ${e.message}`, reduced: [], kept: [] }, plan: ex.plan, stage: ex.stage, raw: ex.raw };
  }
}

/** One stage, proved where prepareStage put it, with a witness from a numeric run there. */
export function proveStage(p: PreparedStage, seed: number, termBudget?: number, stop?: Stop): { result: StageResult; numeric: NumericReport } {
  const name = p.plan.logical.tensors.name(p.stage.logical);
  const attempt = (witnessed: boolean): StageResult => {
    try {
      return new Prover(p.plan, termBudget).prove(p.stage, witnessed, stop);
    } catch (e) {
      return { stage: p.stage, status: 'unknown', reason: `engine error: ${e instanceof Error ? e.message : String(e)}`, failingRanks: p.stage.obligations.map((o) => o.rank), logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
    }
  };
  // Prove first (a proof needs no numbers); the numeric run is for a stage that is not proved.
  const first = attempt(false);
  if (first.status === 'proved' || /too large/.test(first.reason ?? '')) return { result: first, numeric: { evaluated: false, reason: 'not needed: the stage is proved, or too large', seed, claimsChecked: 0, mismatches: [], failingTensors: [] } };
  let numeric = numericCheck(p.plan, seed);
  // A difference no draw shows yet: a few more seeds, as the whole-plan witness search does
  // (a stage reduced to a few elements has few chances per draw; the seed is in the report).
  // (Log draws among them: only ever for a difference the engine found.)
  for (const d of retryDraws(seed)) {
    if (first.status !== 'differs' || !numeric.evaluated || numeric.failingTensors.includes(name)) break;
    numeric = numericCheck(p.plan, d.seed, undefined, d.draw);
  }
  // A difference the exact engine found that no draw shows above the tolerance (an eps of 1e-8
  // against 0): interval arithmetic on the first draw may still certify a witness.
  if (first.status === 'differs' && numeric.evaluated && !numeric.failingTensors.includes(name)) {
    const c = certifiedDifference(p.plan, name, seed, first, numeric, '', undefined, 'differs');
    if (c !== undefined) return c;
  }
  // With a witness, a lazy difference is final (docs/engine.md, "Lazy sums"): prove again so.
  const result = first.status === 'differs' || !numeric.failingTensors.includes(name) ? first : attempt(true);
  return { result, numeric };
}

/**
 * Proofs shared across stages: plan texts up to renaming (components.renamedText) whose
 * plan was proved, with the stage that proved it; and batch classes of extracted stages.
 */
interface ProofMemo {
  readonly proved: Map<string, number>;
  readonly classes: Map<string, { cls: Map<string, number>; size: Map<number, number> }>;
  /**
   * Extracted stage texts whose rank components did not check out (they go whole), and those
   * found too large (an "unknown", never a proof: sharing it cannot make a false "verified").
   */
  readonly noSplit: Set<string>;
  readonly tooLarge: Map<string, number>;
}

const newMemo = (): ProofMemo => ({ proved: new Map(), classes: new Map(), noSplit: new Set(), tooLarge: new Map() });

/** Batch classes of a stage's extracted plan, cached by its text up to renaming. */
function stageClasses(full: LoadedPlan, raw: RawPlan, stage: Stage, memo: ProofMemo): ClassInfo {
  const closure = stageClosure(full, stage);
  const exRaw = extractStageRaw(full, raw, stage, closure);
  const key = renamedText(exRaw);
  // Cached by position of the logical tensor in the extracted plan's list.
  const pos = new Map(exRaw.logical.tensors.map((t, i) => [i, full.logical.tensors.id(t.id)]));
  const byPos = (ci: ClassInfo): { cls: Map<string, number>; size: Map<number, number> } => {
    const inv = new Map([...pos].map(([i, id]) => [id, i]));
    return { cls: new Map([...ci.cls].map(([k, c]) => { const [l, d] = k.split(':').map(Number) as [number, number]; return [`${inv.get(l) ?? -1}:${d}`, c]; })), size: ci.size };
  };
  let hit = key === undefined ? undefined : memo.classes.get(key);
  if (hit === undefined) {
    const ex = withOutputFallback(exRaw, (x) => loadExtracted(full, stage, closure, x, `${full.file} (stage ${stage.index + 1})`));
    hit = byPos(batchClasses(full, ex.plan));
    if (key !== undefined) memo.classes.set(key, hit);
  }
  return { cls: new Map([...hit.cls].map(([k, c]) => { const [i, d] = k.split(':').map(Number) as [number, number]; return [`${pos.get(i) ?? -1}:${d}`, c]; })), size: hit.size };
}

export function proveByComponents(full: LoadedPlan, raw: RawPlan, stage: Stage, seed: number, reduce = true, memo: ProofMemo = newMemo(), stop?: Stop): { result: StageResult; mismatches: NumericReport['mismatches']; claims: number; info: StageReductionInfo; raws: RawPlan[]; coveredBy?: number } | undefined {
  const closure = stageClosure(full, stage);
  if (!splitsByRank(closure)) return undefined;
  const stageKey = renamedText(extractStageRaw(full, raw, stage, closure));
  if (stageKey !== undefined && memo.noSplit.has(stageKey)) return undefined;
  const name = full.logical.tensors.name(stage.logical);
  const ranks = [...new Set(stage.obligations.map((o) => o.rank))].sort((a, b) => a - b);
  try {
    const groups = new Map<string, { ranks: number[]; rank: number; c: ReturnType<typeof stageClosure>; win: ReturnType<typeof windowsOf> }>();
    // Batch classes of the whole extracted stage (every rank's view): a component's own
    // classes are finer (its constraints are a subset), so a dim batch here is batch there,
    // and cutting a union of its classes to one window is the same argument.
    const classes: ClassInfo = stageClasses(full, raw, stage, memo);
    for (const r of ranks) {
      const c = stageClosure(full, rankStage(stage, r));
      const win = reduce ? windowsOf(full, stage, r, c, classes) : new Map<string, [number, number]>();
      const text = JSON.stringify(componentRaw(full, raw, stage, r, c, win));
      const g = groups.get(text);
      if (g === undefined) groups.set(text, { ranks: [r], rank: r, c, win });
      else g.ranks.push(r);
    }
    const results: StageResult[] = [];
    const mismatches: NumericReport['mismatches'][number][] = [];
    const raws: RawPlan[] = [];
    let claims = 0;
    let reducedAny = false;
    const failing: number[] = [];
    let first: { status: StageResult['status']; reason?: string } | undefined;
    let covered = 0;
    let coveredBy: number | undefined;
    for (const [text, g] of groups) {
      // A component plan equal up to renaming to one already proved (any stage): covered.
      const key = renamedText(JSON.parse(text) as RawPlan);
      const by = key === undefined ? undefined : memo.proved.get(key);
      if (by !== undefined) {
        covered++;
        coveredBy ??= by;
        continue;
      }
      const comp = loadComponent(text, `${full.file} (stage ${stage.index + 1}, rank ${g.rank})`);
      const cs = checkComponent(full, stage, g.rank, g.c, g.win, comp);
      let plan = comp;
      let st = cs;
      let compRaw = JSON.parse(text) as RawPlan;
      if (reduce) {
        try {
          const red = reducePlan(comp, compRaw);
          const rs = red === undefined ? undefined : stageOf(red.plan, name);
          if (red !== undefined && rs !== undefined && rs.obligations.length === cs.obligations.length) {
            plan = red.plan;
            st = rs;
            compRaw = red.raw;
            reducedAny = true;
          }
        } catch (e) {
          if (!(e instanceof ReductionError)) throw e;
        }
      }
      raws.push(compRaw);
      const { result, numeric } = proveStage({ info: { stage: stage.index + 1, logical: name, mode: 'components', reduced: [], kept: [] }, plan, stage: st }, seed, undefined, stop);
      results.push(result);
      if (result.status === 'proved' && key !== undefined) memo.proved.set(key, stage.index);
      claims += numeric.claimsChecked;
      for (const m of numeric.mismatches) if (m.logical === name) mismatches.push({ ...m, rank: g.rank });
      if (result.status !== 'proved') {
        for (const r of g.ranks) failing.push(r);
        const rank = (x: StageResult['status']): number => (x === 'differs' ? 2 : x === 'unknown' ? 1 : 0);
        if (first === undefined || rank(result.status) > rank(first.status)) first = { status: result.status, ...(result.reason === undefined ? {} : { reason: `rank ${g.rank}'s component: ${result.reason}` }) };
      }
    }
    const sum = (f: (r: StageResult) => number): number => results.reduce((a, r) => a + f(r), 0);
    const result: StageResult = {
      stage,
      status: first?.status ?? 'proved',
      ...(first?.reason === undefined ? {} : { reason: first.reason }),
      failingRanks: failing.sort((a, b) => a - b),
      logicalOps: sum((r) => r.logicalOps),
      parallelOps: sum((r) => r.parallelOps),
      terms: sum((r) => r.terms),
      ms: sum((r) => r.ms),
    };
    const info: StageReductionInfo = { stage: stage.index + 1, logical: name, mode: 'components', components: { ranks: ranks.length, distinct: groups.size, covered }, ...(reducedAny || covered === groups.size ? {} : { reason: 'no dim of the components can shrink' }), reduced: [], kept: [] };
    return { result, mismatches, claims, info, raws, ...(covered === groups.size && coveredBy !== undefined ? { coveredBy } : {}) };
  } catch (e) {
    if (e instanceof ComponentError || e instanceof ExtractionError) {
      if (stageKey !== undefined) memo.noSplit.add(stageKey);
      return undefined;
    }
    throw e;
  }
}

interface PerStageOptions {
  readonly seed?: number;
  readonly reduce?: boolean;
  readonly emitDir?: string;
  /** Split stages without collectives into rank components (stages/shrink/components.ts), default true. */
  readonly components?: boolean;
  /** Prove each distinct canonical stage once (stages/cache/canon.ts), default true. */
  readonly dedup?: boolean;
  readonly onStage?: (done: number, total: number) => void;
}

type PerStageReport = VerifyReport & { readonly stageReduction: StageReductionInfo[] };

/**
 * Verifies a plan stage by stage, each stage extracted and reduced on its own. Equal
 * canonical forms of the full plan's stages share one proof (a proof only: a stage whose
 * representative is not proved is proved on its own). Witnesses come from each stage plan's
 * own numeric run: inputs drawn for the stage's assumed tensors, at the stage's reduced shapes.
 */
export function verifyPerStage(plan: LoadedPlan, raw: RawPlan, opts: PerStageOptions = {}): PerStageReport {
  const t0 = performance.now();
  const seed = opts.seed ?? 1;
  const stages = decompose(plan, logicalOrder(plan));
  const memo = newMemo();
  const dedup = opts.dedup !== false;
  const results: (StageResult | undefined)[] = new Array<StageResult | undefined>(stages.length);
  const infos: (StageReductionInfo | undefined)[] = new Array<StageReductionInfo | undefined>(stages.length);
  const coveredBy = Int32Array.from({ length: stages.length }, (_, i) => i);
  const mismatches: NumericReport['mismatches'][number][] = [];
  let claims = 0;
  let done = 0;
  const run = (i: number): StageResult => {
    const s = stages[i] as Stage;
    const name = plan.logical.tensors.name(s.logical);
    const byComp = opts.components === false ? undefined : proveByComponents(plan, raw, s, seed, opts.reduce !== false, dedup ? memo : newMemo());
    if (byComp !== undefined) {
      if (byComp.coveredBy !== undefined) coveredBy[i] = byComp.coveredBy;
      let info = byComp.info;
      if (opts.emitDir !== undefined) {
        mkdirSync(opts.emitDir, { recursive: true });
        const files = byComp.raws.map((r, k) => {
          const file = join(opts.emitDir as string, `stage-${String(s.index + 1).padStart(4, '0')}-component-${k}.json`);
          writeFileSync(file, JSON.stringify(r, null, 1));
          return file;
        });
        info = { ...info, emitted: files.join(', ') };
      }
      infos[i] = info;
      claims += byComp.claims;
      mismatches.push(...byComp.mismatches);
      opts.onStage?.(++done, stages.length);
      return byComp.result;
    }
    // A stage plan equal up to renaming to one already proved: covered.
    const key = dedup ? renamedText(extractStageRaw(plan, raw, s, stageClosure(plan, s))) : undefined;
    const by = key === undefined ? undefined : (memo.proved.get(key) ?? memo.tooLarge.get(key));
    if (by !== undefined && infos[by] !== undefined) {
      coveredBy[i] = by;
      infos[i] = { ...(infos[by] as StageReductionInfo), stage: i + 1, logical: name };
      opts.onStage?.(++done, stages.length);
      return { ...(results[by] as StageResult), stage: s, ms: 0 };
    }
    const p = prepareStage(plan, raw, s, opts.reduce !== false);
    let info = p.info;
    if (opts.emitDir !== undefined && p.raw !== undefined) {
      mkdirSync(opts.emitDir, { recursive: true });
      const file = join(opts.emitDir, `stage-${String(s.index + 1).padStart(4, '0')}.json`);
      writeFileSync(file, JSON.stringify(p.raw, null, 1));
      info = { ...info, emitted: file };
    }
    infos[i] = info;
    const { result, numeric } = proveStage(p, seed);
    if (result.status === 'proved' && key !== undefined) memo.proved.set(key, i);
    if (result.status === 'unknown' && /too large/.test(result.reason ?? '') && key !== undefined) memo.tooLarge.set(key, i);
    claims += numeric.claimsChecked;
    for (const m of numeric.mismatches) if (m.logical === name) mismatches.push(m);
    opts.onStage?.(++done, stages.length);
    // Results are reported against the full plan's stage.
    return { ...result, stage: s };
  };
  for (let i = 0; i < stages.length; i++) results[i] = run(i);
  const proofsRun = coveredBy.filter((c, i) => c === i).length;
  const failingTensors = [...new Set(mismatches.map((m) => m.logical))];
  const numeric: NumericReport = { evaluated: true, seed, claimsChecked: claims, mismatches, failingTensors };
  const report = assemble(plan, results as StageResult[], numeric, seed, t0);
  const stagesOut = report.stages.map((s, i) => ((coveredBy[i] as number) !== i ? { ...s, coveredBy: (coveredBy[i] as number) + 1 } : s));
  const reducedStages = infos.filter((x) => x?.mode === 'reduced').length;
  const compStages = infos.filter((x) => x?.mode === 'components').length;
  const note = `${stages.length} stages, ${proofsRun} proved on their own, ${stages.length - proofsRun} covered by an equal stage or component plan; ${reducedStages} stage(s) proved at per-stage reduced shapes, ${compStages} by rank components`;
  return { ...report, stages: stagesOut, summary: `${report.summary}; ${note}`, proofs: { stages: stages.length, distinct: proofsRun, run: proofsRun, cached: 0 }, stageReduction: infos as StageReductionInfo[] };
}

/** Report lines for per-stage reduction. */
export function formatPerStage(infos: readonly StageReductionInfo[], verbose: boolean): string {
  const by = { components: 0, reduced: 0, extracted: 0, 'in-place': 0 };
  for (const i of infos) by[i.mode]++;
  const lines = [`per-stage reduction: ${by.components} stage(s) proved by rank components, ${by.reduced} reduced, ${by.extracted} extracted at full shapes, ${by['in-place']} proved in place (docs/engine.md, "Per-stage reduction")`];
  for (const i of infos.slice(0, verbose ? infos.length : 8)) {
    const red = i.reduced.map((c) => `${c.dim} ${c.full}->${c.reduced}`).join(', ');
    const comp = i.components === undefined ? '' : ` (${i.components.ranks} rank(s), ${i.components.distinct} distinct)`;
    lines.push(`  stage ${i.stage} (${i.logical}): ${i.mode}${comp}${red === '' ? '' : `: ${red}`}${i.reason === undefined ? '' : ` (${i.reason})`}${i.emitted === undefined ? '' : ` -> ${i.emitted}`}`);
  }
  if (!verbose && infos.length > 8) lines.push(`  ... ${infos.length - 8} more (--verbose)`);
  return lines.join('\n');
}

/** Time the per-stage fallback may spend on one plan before it leaves the other stages open. */
const FALLBACK_BUDGET_MS = 300_000;

/** What the per-stage fallback did to one stage (for the report and the benchmarks). */
export interface FallbackInfo {
  readonly stage: number;
  readonly logical: string;
  readonly status: StageResult['status'];
  readonly mode: StageReductionInfo['mode'];
  readonly reduced: string;
  readonly ms: number;
}

/**
 * The hook of verifyPlanInPool (StageFallback): every stage the whole-plan path left "unknown"
 * because it is too large is extracted and reduced on its own (rank components first) and
 * proved there. A proof replaces the "unknown"; a difference with a witness of the stage plan
 * becomes the stage's result, its mismatches added to the numeric evidence (at the stage
 * plan's reduced shapes: the lane argument maps them to full shapes, docs/engine.md). Stages
 * after the first refuted one are not tried: the verdict is settled and the first failing
 * stage is the likely root cause.
 */
export function perStageFallback(rawPlan: RawPlan | (() => RawPlan), seed: number, log: FallbackInfo[] = [], budgetMs = FALLBACK_BUDGET_MS): (plan: LoadedPlan, results: readonly StageResult[], numeric: NumericReport, limit?: TimeLimit) => { results: StageResult[]; numeric: NumericReport } {
  // A thunk is called only when a stage is tried: most runs need no second parse of the plan.
  let parsed: RawPlan | undefined = typeof rawPlan === 'function' ? undefined : rawPlan;
  const rawOf = (): RawPlan => (parsed ??= (rawPlan as () => RawPlan)());
  return (plan, results, numeric, limit) => {
    const start = performance.now();
    const out = [...results];
    const mismatches = [...numeric.mismatches];
    const failing = new Set(numeric.failingTensors);
    const nameOf = (r: StageResult): string => plan.logical.tensors.name(r.stage.logical);
    const memo = newMemo();
    // Set when the walk (in topological order) passes a refuted stage: open stages before it are still tried.
    let refuted = false;
    for (const [i, r] of results.entries()) {
      if (r.status === 'differs' && failing.has(nameOf(r))) refuted = true;
      // Too large, or past its deadline at full shapes: smaller shapes may decide it.
      if (r.status !== 'unknown' || !/too large|deadline/.test(r.reason ?? '')) continue;
      if (refuted) {
        out[i] = { ...r, reason: `${r.reason ?? ''} (not tried per stage: the plan is already refuted at an earlier stage)` };
        continue;
      }
      // Many open stages (every clipped gradient reads the global norm) must not take hours.
      if (performance.now() - start > budgetMs) {
        out[i] = { ...r, reason: `${r.reason ?? ''} (not tried per stage: the fallback's ${Math.round(budgetMs / 1000)} s were spent on earlier stages)` };
        continue;
      }
      if (limit !== undefined && timeLeft(limit) <= 0) {
        out[i] = { ...r, reason: `${r.reason ?? ''} (not tried per stage: the run's time limit of ${limit.seconds} s (--time-limit) was reached)` };
        continue;
      }
      const t0 = performance.now();
      const name = nameOf(r);
      let res: StageResult;
      let found: NumericReport['mismatches'];
      let info: StageReductionInfo;
      const raw = rawOf();
      // Proofs here run in this thread: the normal form stops at the fallback's budget or the
      // run's time limit, whichever comes first (a mutant's attention stage took 27 s past a
      // 2 s limit).
      const byLimit = limit === undefined ? Infinity : t0 + timeLeft(limit);
      const byBudget = start + budgetMs;
      const stop: Stop = byLimit < byBudget && limit !== undefined
        ? { at: byLimit, reason: `stopped: the run's time limit of ${limit.seconds} s (--time-limit) was reached` }
        : { at: byBudget, reason: `stopped: the fallback's ${Math.round(budgetMs / 1000)} s were spent` };
      const comp = proveByComponents(plan, raw, r.stage, seed, true, memo, stop);
      if (comp !== undefined) {
        res = comp.result;
        found = comp.mismatches;
        info = comp.info;
      } else {
        const p = prepareStage(plan, raw, r.stage);
        const { result, numeric: n } = proveStage(p, seed, undefined, stop);
        res = result;
        found = n.mismatches.filter((m) => m.logical === name);
        info = p.info;
        // Still too large: a prefix cut of its value-indexed axes (vocab), for a witness only.
        if (res.status === 'unknown' && /too large/.test(res.reason ?? '') && p.raw !== undefined) {
          const cut = prefixWitness(p.plan, p.raw, name, seed, stop);
          if (cut !== undefined) {
            log.push({ stage: i + 1, logical: name, status: cut.result.status, mode: info.mode, reduced: `prefix cut: ${cut.cut.join(', ')}`, ms: performance.now() - t0 });
            if (cut.result.status === 'differs' && cut.found.length > 0) {
              const red = info.reduced.map((c) => `${c.dim} ${c.full}->${c.reduced}`).join(', ');
              out[i] = { ...cut.result, stage: r.stage, reason: `per stage (${info.mode}${red === '' ? '' : `: ${red}`}; then cut to a prefix for a witness: ${cut.cut.join(', ')}, its ids restricted to it); witness values at the cut plan's shapes: ${cut.result.reason ?? ''}` };
              mismatches.push(...cut.found);
              failing.add(name);
              refuted = true;
              continue;
            }
            // A proof or an open difference at a prefix cut decides nothing: the stage stays open.
            res = { ...res, reason: `${res.reason ?? ''}; at a prefix cut (${cut.cut.join(', ')}; for witnesses only): ${cut.result.status}${cut.result.reason === undefined ? '' : ` (${cut.result.reason})`}` };
          }
          // Then a zero-extension cut of its contracted dims (a global norm), for a witness only.
          const z = zeroCutWitness(p.plan, p.raw, name, seed, stop);
          if ('why' in z) res = { ...res, reason: `${res.reason ?? ''}; no zero-extension cut: ${z.why}` };
          else {
            log.push({ stage: i + 1, logical: name, status: z.result.status, mode: info.mode, reduced: `zero-extension cut: ${z.cut.slice(0, 4).join(', ')}`, ms: performance.now() - t0 });
            if (z.result.status === 'differs' && z.found.length > 0) {
              const red = info.reduced.map((c) => `${c.dim} ${c.full}->${c.reduced}`).join(', ');
              out[i] = { ...z.result, stage: r.stage, reason: `per stage (${info.mode}${red === '' ? '' : `: ${red}`}; then cut for a witness by zero extension: ${cutList(z.cut)}, the inputs zero at the positions cut); witness values at the cut plan's shapes: ${z.result.reason ?? ''}` };
              mismatches.push(...z.found);
              failing.add(name);
              refuted = true;
              continue;
            }
            res = { ...res, reason: `${res.reason ?? ''}; at a zero-extension cut (for witnesses only): ${z.result.status}` };
          }
        }
      }
      const reduced = info.reduced.map((c) => `${c.dim} ${c.full}->${c.reduced}`).join(', ');
      const how = `per stage (${info.mode}${info.components === undefined ? '' : `, ${info.components.ranks} rank(s), ${info.components.distinct} distinct`}${reduced === '' ? '' : `: ${reduced}`})`;
      log.push({ stage: i + 1, logical: name, status: res.status, mode: info.mode, reduced, ms: performance.now() - t0 });
      if (res.status === 'proved') {
        out[i] = { ...r, status: 'proved', failingRanks: [], ms: r.ms + res.ms };
      } else if (res.status === 'differs' && found.length > 0) {
        out[i] = { ...res, stage: r.stage, reason: `${how}; witness values at the stage plan's shapes: ${res.reason ?? ''}` };
        mismatches.push(...found);
        failing.add(name);
        refuted = true;
      } else {
        out[i] = { ...r, reason: `${r.reason ?? ''}; ${how}: ${res.status === 'differs' ? `differs without a witness: ${res.reason ?? ''}` : (res.reason ?? 'undecided')}` };
      }
    }
    return { results: out, numeric: { ...numeric, mismatches, failingTensors: [...failing] } };
  };
}

/** Report lines for the per-stage fallback (empty when no stage went there). */
export function formatFallback(log: readonly FallbackInfo[]): string {
  if (log.length === 0) return '';
  const lines = [`\nper-stage fallback: ${log.length} stage(s) too large in the whole plan were extracted and reduced on their own (docs/engine.md, "Per-stage reduction")`];
  for (const f of log) lines.push(`  stage ${f.stage} (${f.logical}): ${f.status} (${f.mode}${f.reduced === '' ? '' : `: ${f.reduced}`}, ${(f.ms / 1000).toFixed(1)} s)`);
  return lines.join('\n');
}

/** The stage proved at a prefix cut of its plan (reduce.ts prefixPlan), or undefined when nothing can be cut. Only a difference with a witness may be used. */
export function prefixWitness(plan: LoadedPlan, raw: RawPlan, name: string, seed: number, stop?: Stop): { result: StageResult; found: NumericReport['mismatches']; cut: string[] } | undefined {
  // One id first (every id the same: a sum over positions stays a plain sum, cheap to normalize), then two.
  let last: { result: StageResult; found: NumericReport['mismatches']; cut: string[] } | undefined;
  for (const size of [1, 2]) {
    try {
      const pre = prefixPlan(plan, raw, size);
      if (pre === undefined) return last;
      const s = stageOf(pre.plan, name);
      if (s === undefined) return last;
      const { result, numeric } = proveStage({ info: { stage: 0, logical: name, mode: 'reduced', reduced: [], kept: [] }, plan: pre.plan, stage: s, raw: pre.raw }, seed, undefined, stop);
      last = { result, found: numeric.mismatches.filter((m) => m.logical === name), cut: pre.cut };
      if (result.status === 'differs' && last.found.length > 0) return last;
    } catch (e) {
      if (e instanceof ReductionError || e instanceof ExtractionError) return last;
      throw e;
    }
  }
  return last;
}

/** The dims a cut names, the first four and how many more (for reasons). */
export function cutList(cut: readonly string[]): string {
  return `${cut.slice(0, 4).join(', ')}${cut.length > 4 ? `, ... ${cut.length - 4} more` : ''}`;
}

/**
 * The stage at a zero-extension cut of its plan (reduce.ts zeroCutPlan: contracted dims that
 * every op keeps zeros along, such as every gradient under global-norm clipping), or why
 * nothing was cut. Only a difference with a witness may be used. The cut plan is proved by the
 * exact engine; when that gives up, the numeric run on two draws (all inputs drawn, then only
 * the obligations' ranks' inputs) and interval arithmetic on the same draws look for a witness
 * (docs/engine.md, "Zero-extension cuts for witnesses").
 */
export function zeroCutWitness(plan: LoadedPlan, raw: RawPlan, name: string, seed: number, stop?: Stop, termBudget?: number): { result: StageResult; found: NumericReport['mismatches']; cut: string[] } | { why: string } {
  try {
    const z = zeroCutPlan(plan, raw);
    if (z === undefined) return { why: 'no contracted dim that every op keeps zeros along' };
    const s = stageOf(z.plan, name);
    if (s === undefined) return { why: `the cut plan has no stage of '${name}'` };
    let { result, numeric } = proveStage({ info: { stage: 0, logical: name, mode: 'reduced', reduced: [], kept: [] }, plan: z.plan, stage: s, raw: z.raw }, seed, termBudget, stop);
    if (result.status === 'unknown' && /too large/.test(result.reason ?? '')) {
      // Two draws of every input; then two with only the obligations' own ranks' inputs
      // nonzero: a one-rank change to a global norm moves it by a part in 10^5 when every
      // other rank's gradients are drawn too, under the witness tolerance.
      const own = new Set(s.obligations.map((o) => o.rank));
      const held = new Set<number>();
      for (const r of own) {
        const p = z.plan.programs[z.plan.rankProgram[r] as number];
        p?.lineage.forEach((spec) => {
          if (spec !== undefined) held.add(spec.logical);
        });
      }
      const zero = new Set([...z.plan.contract.inputs].filter((t) => !held.has(t)));
      for (const focus of zero.size > 0 ? [undefined, zero] : [undefined]) {
        const how = focus === undefined ? '' : `, drawing only the inputs rank(s) ${[...own].join(', ')} of the cut part hold, the others 0`;
        const two = twoDraws(z.plan, name, seed, result, how, focus);
        if (two === undefined) break;
        const a = two.numeric;
        if (two.result.status === 'differs') {
          ({ result, numeric } = two);
          break;
        }
        // A difference under the witness tolerance (a clipped gradient is small: the clipped
        // norm is max_norm over every element) is still certain if interval arithmetic, which
        // encloses the exact values, separates the two sides (stages/engines/interval.ts).
        const c = certifiedDifference(z.plan, name, seed, result, a, how, focus, 'gave up');
        if (c !== undefined) {
          ({ result, numeric } = c);
          break;
        }
      }
    }
    return { result, found: numeric.mismatches.filter((m) => m.logical === name), cut: z.cut };
  } catch (e) {
    if (e instanceof ReductionError || e instanceof ExtractionError) return { why: e.message.slice(0, 300) };
    throw e;
  }
}

/**
 * A witness certified by interval arithmetic (stages/engines/interval.ts, "Certified witnesses") for
 * stage tensor `name` on the draw of `seed` (inputs in `zero` drawn as 0): `result` made
 * "differs" with the witness as `numeric`'s one mismatch, or undefined when the intervals of
 * the two sides overlap everywhere. For a difference under the witness tolerance (a clipped
 * gradient, an eps of 1e-8 against 0), which the numeric run cannot tell from rounding.
 */
function certifiedDifference(plan: LoadedPlan, name: string, seed: number, result: StageResult, numeric: NumericReport, how: string, zero: ReadonlySet<number> | undefined, engine: 'gave up' | 'differs'): { result: StageResult; numeric: NumericReport } | undefined {
  const target = plan.logical.tensors.id(name);
  const c = certifyWitness(plan, seed, [target], () => true, zero);
  if (!('certified' in c)) return undefined;
  const w = c.certified;
  const iv = (x: Iv): string => `[${x.lo.toPrecision(17)}, ${x.hi.toPrecision(17)}]`;
  const said = engine === 'gave up' ? 'the exact engine gave up' : 'the exact engine found the difference, under the numeric tolerance on every draw';
  return {
    numeric: { ...numeric, seed, mismatches: [certifiedMismatch(plan, target, w, 0)], failingTensors: [name] },
    result: { ...result, status: 'differs', reason: `certified witness (interval arithmetic at seed ${seed}${how}): ${w.domain !== undefined ? domainClaimText(name, { ...w, domain: w.domain }) : `rank ${w.rank} '${w.tensor}' lies in ${iv(w.parallel)}, the logical element ${w.element} in ${iv(w.logical)}: disjoint`}, so the claim is false at these inputs in exact arithmetic; ${said}: ${(result.reason ?? '').slice(0, 160)}`, failingRanks: [w.rank] },
  };
}

/**
 * A numeric witness of a stage the exact engine gave up on (docs/engine.md, "Numeric witnesses
 * of large parts"): the stage's tensor differs on two draws (seeds s and s+1), so a rounding
 * artefact at a discontinuity of one draw is no reason to refute. The result is `given` made
 * "differs", with the first draw's report; `given` when the draws do not both differ;
 * undefined when the plan is too large to evaluate. `zero`: inputs drawn as 0 (numericCheck).
 */
export function twoDraws(plan: LoadedPlan, name: string, seed: number, given: StageResult, how = '', zero?: ReadonlySet<number>): { result: StageResult; numeric: NumericReport } | undefined {
  const a = numericCheck(plan, seed, undefined, 'uniform', zero);
  if (!a.evaluated) return undefined;
  const b = a.failingTensors.includes(name) ? numericCheck(plan, seed + 1, undefined, 'uniform', zero) : undefined;
  if (b === undefined || !b.failingTensors.includes(name)) return { result: given, numeric: a };
  const failingRanks = [...new Set(a.mismatches.filter((m) => m.logical === name).map((m) => m.rank))].sort((x, y) => x - y);
  return { result: { ...given, status: 'differs', reason: `numeric witness on two draws (seeds ${seed}, ${seed + 1}${how}); the exact engine gave up: ${(given.reason ?? '').slice(0, 160)}`, failingRanks }, numeric: a };
}
