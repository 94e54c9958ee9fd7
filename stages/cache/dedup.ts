/**
 * Proving each distinct stage once (docs/engine.md, "Stage deduplication"), with the proof
 * cache. Stages are grouped by canonical form (stages/cache/canon.ts); the cache is asked first;
 * the remaining representatives are proved, largest first. A proved representative covers
 * every stage of its class. A representative that is not proved covers nothing: the other
 * members are then proved one by one, so every failing stage gets its own residual, ranks
 * and witness.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { DecidedBy, Stage, StageResult } from '../decompose/prove.js';
import { groupStages, type StageClass } from './canon.js';
import type { ProofCache } from './cache.js';
import type { VerifyReport } from '../report.js';

interface DistinctProofs {
  /** One result per stage, in decomposition order. */
  readonly results: StageResult[];
  /** coveredBy[i]: index of the stage whose proof covers stage i (i itself when proved on its own or from the cache). */
  readonly coveredBy: Int32Array;
  /** fromCache[i]: stage i's proof was read from the cache. */
  readonly fromCache: Uint8Array;
  readonly classes: number;
  /** Stages whose proof was actually run in this process or its workers. */
  readonly proofsRun: number;
  readonly cacheHits: number;
  /** Stages proved at tensor level before grouping (stages/engines/tensorlevel/prover.ts). */
  readonly tensorLevel: number;
}

type ProveSome = (stages: readonly Stage[]) => Promise<StageResult[]>;

/**
 * What proveDistinct tells its caller about the classes. Progress in stages rather than
 * proofs: `weights` is filled with how many stages a proof of each stage decides (its class's
 * size for a representative, 0 for a member re-proved after its representative failed:
 * counted already), `decided` hears of stages decided without a proof (the cache). `repOf`
 * maps every stage of a class to its representative (sharded runs give a class one owner).
 */
export interface StageProgress {
  readonly weights: Map<number, number>;
  decided(n: number): void;
  readonly repOf?: Map<number, number>;
}

export async function proveDistinct(plan: LoadedPlan, stages: readonly Stage[], prove: ProveSome, cache?: ProofCache, known?: ReadonlyMap<number, StageResult>, progress?: StageProgress): Promise<DistinctProofs> {
  // Stages already decided (tensor-level proofs) are neither grouped nor proved again.
  const open = known === undefined ? stages : stages.filter((s) => !known.has(s.index));
  // Nothing left (every stage proved at tensor level): no canonical forms to build (on 512
  // ranks the canonizer's producer table alone is millions of entries).
  const classes = (open.length === 0 ? [] : groupStages(plan, open)).map((c) => ({ ...c, rep: (open[c.rep] as Stage).index, members: c.members.map((m) => (open[m] as Stage).index) }));
  const results: (StageResult | undefined)[] = new Array<StageResult | undefined>(stages.length);
  if (known !== undefined) for (const [i, r] of known) results[i] = r;
  const coveredBy = Int32Array.from({ length: stages.length }, (_, i) => i);
  const fromCache = new Uint8Array(stages.length);
  let cacheHits = 0;
  const todo: StageClass[] = [];
  for (const c of classes) {
    for (const m of c.members) progress?.repOf?.set(m, c.rep);
    const hit = c.form === '' ? undefined : cache?.lookup(c.hash, c.form);
    if (hit === undefined) {
      progress?.weights.set(c.rep, c.members.length);
      todo.push(c);
      continue;
    }
    cacheHits++;
    progress?.decided(c.members.length);
    const s = stages[c.rep] as Stage;
    results[c.rep] = { stage: s, status: 'proved', failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0, ...(hit.decidedBy === undefined ? {} : { decidedBy: hit.decidedBy }) };
    fromCache[c.rep] = 1;
  }
  // Largest first: the long stages start while the short ones fill the other workers.
  todo.sort((a, b) => b.elements - a.elements || a.rep - b.rep);
  let proofsRun = 0;
  const first = todo.length === 0 ? [] : await prove(todo.map((c) => stages[c.rep] as Stage));
  proofsRun += first.length;
  for (const r of first) results[r.stage.index] = r;
  const rest: Stage[] = [];
  for (const c of classes) {
    const rep = results[c.rep] as StageResult;
    if (rep.status === 'proved') {
      if (fromCache[c.rep] === 0 && c.form !== '' && cacheable(rep.decidedBy)) cache?.store(c.hash, c.form, rep.decidedBy);
      for (const m of c.members) {
        if (m === c.rep) continue;
        results[m] = { ...rep, stage: stages[m] as Stage, ms: 0 };
        coveredBy[m] = c.rep;
        fromCache[m] = fromCache[c.rep] as number;
      }
    } else
      for (const m of c.members) {
        if (m === c.rep) continue;
        progress?.weights.set(m, 0);
        rest.push(stages[m] as Stage);
      }
  }
  if (rest.length > 0) {
    const more = await prove(rest);
    proofsRun += more.length;
    for (const r of more) results[r.stage.index] = r;
  }
  return { results: results as StageResult[], coveredBy, fromCache, classes: classes.length, proofsRun, cacheHits, tensorLevel: known?.size ?? 0 };
}

/**
 * A proof the cache may hold: the stage's own (normal form, tensor level, Z3). A stage proved
 * with facts from outside it (the plan's constants) is never stored, nor one proved on a
 * reduced copy; neither reaches here today (the portfolio runs after the proofs), and this keeps
 * it so if one ever did.
 */
function cacheable(by: DecidedBy | undefined): by is 'z3' | 'tensor' | undefined {
  return by === undefined || by === 'z3' || by === 'tensor';
}

/** Adds to a report which proof covers each stage, and "N stages, K distinct proofs". */
export function withProofs(report: VerifyReport, d: DistinctProofs): VerifyReport {
  const stages = report.stages.map((s, i) => {
    const by = d.coveredBy[i] as number;
    return { ...s, ...(by !== i ? { coveredBy: by + 1 } : {}), ...(d.fromCache[i] === 1 ? { cached: true } : {}) };
  });
  const proofs = { stages: stages.length, distinct: d.classes, run: d.proofsRun, cached: d.cacheHits, tensorLevel: d.tensorLevel };
  const note =
    d.tensorLevel === 0
      ? `${proofs.stages} stages, ${proofs.distinct} distinct proofs (${proofs.run} run, ${proofs.cached} from the cache)`
      : `${proofs.stages} stages: ${d.tensorLevel} proved at tensor level; the other ${proofs.stages - d.tensorLevel} in ${proofs.distinct} distinct proofs (${proofs.run} run, ${proofs.cached} from the cache)`;
  return { ...report, stages, proofs, summary: `${report.summary}; ${note}` };
}
