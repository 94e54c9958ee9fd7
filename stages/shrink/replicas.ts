/**
 * Witnesses from replicas that disagree (docs/engine.md, "Replicas that disagree").
 *
 * Two ranks that hold complete claims of the same logical element claim the same value. If
 * they compute different values at the same inputs, at least one claim is false there, whatever
 * the logical value is: a witness that needs no logical side. That matters where a part's
 * logical side is the whole model (D3's clipping from a rank-local norm: the rank's norm never
 * reaches the other pipeline stages' gradients, so its part's logical side recomputes them from
 * the model's inputs). Here the part holds the two ranks' closures (stages/shrink/part.ts
 * `closure`), its logical side only the tensors their claims name (free inputs, as every part's)
 * and the stage's tensor as a free input; the comparison is of the two ranks' values alone.
 * Large parts are cut by zero extension first (stages/shrink/reduce.ts `zeroCutPlan`), whose
 * argument gives the full plan's values at the positions kept. A difference counts only on
 * two draws, beyond the numeric tolerance; agreement says nothing.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { loadPartObject } from '../../lineage/load.js';
import { evalLineage, type LineageNF } from '../../lineage/model.js';
import { PlanError } from '../../plans/errors.js';
import type { Program } from '../../plans/model.js';
import type { RawPlan } from '../../plans/raw.js';
import type { Dense } from '../../ops/algebra.js';
import { logicalIndexer } from '../../sdfg/execute.js';
import type { PartResult, ProvePart, Stage } from '../decompose/prove.js';
import { extractLogicalRaw, stageOf } from '../decompose/extract.js';
import { differs, evaluateBoth, type Mismatch } from '../witness/numeric.js';
import { closure, PartError, partRaw, provePart } from './part.js';
import { ReductionError, zeroCutPlan } from './reduce.js';
import { cutList } from './stage-reduce.js';
import { provePartDeep } from './deepen.js';
import { provePartPeriodic } from './periodic.js';

/** Elements (logical plus parallel) a replica part may hold when it is evaluated. */
const MAX_REPLICA_ELEMENTS = 20_000_000;
/** Ranks of the program tried as the second replica (one step along each mesh axis, then the next ranks). */
const MAX_CANDIDATES = 3;
/**
 * Milliseconds replicas may take per plan: they run before each open stage's part, so replicas
 * that agree (stages open for another reason) must not eat the witness search's budget.
 */
const REPLICA_BUDGET_MS = 30_000;
const SPENT = new WeakMap<LoadedPlan, number>();

/** Whether two claims' regions meet (per dim, some range of each overlaps). */
function overlap(a: LineageNF, b: LineageNF): boolean {
  return a.ranges.every((ra, d) => {
    const rb = b.ranges[d] ?? [];
    for (let i = 0; i < ra.length; i += 2) for (let j = 0; j < rb.length; j += 2) if ((ra[i] as number) < (rb[j + 1] as number) && (rb[j] as number) < (ra[i + 1] as number)) return true;
    return false;
  });
}

const complete = (nf: LineageNF): boolean => nf.value.n === 1 && nf.value.divisor === 1;

/**
 * Ranks of rank a's program whose `tensor` claims a complete slice meeting rank a's: first one
 * step along each mesh axis (a tp peer holds a tp-replicated weight), then ranks in order.
 */
function candidates(plan: LoadedPlan, a: number, tensor: number): number[] {
  const p = plan.programs[plan.rankProgram[a] as number] as Program;
  const spec = p.lineage[tensor];
  if (spec === undefined) return [];
  const nfOf = (r: number): LineageNF => evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[tensor] ?? []);
  const na = nfOf(a);
  if (!complete(na)) return [];
  const mine = new Set(p.ranks);
  const order: number[] = [];
  const c0 = plan.mesh.coords(a);
  for (let ax = c0.length - 1; ax >= 0; ax--) {
    const c = [...c0];
    c[ax] = (c[ax] as number) + 1;
    if ((c[ax] as number) < (plan.mesh.sizes[ax] as number)) order.push(plan.mesh.rankOf(c));
  }
  for (const r of p.ranks.slice(0, 64)) order.push(r);
  const out: number[] = [];
  for (const r of order) {
    if (r === a || !mine.has(r) || out.includes(r)) continue;
    const nb = nfOf(r);
    if (complete(nb) && overlap(na, nb)) out.push(r);
    if (out.length >= MAX_CANDIDATES) break;
  }
  return out;
}

/** The replicas' disagreements on one draw: pairs of complete claims of one element with values apart. */
function disagreements(part: LoadedPlan, target: string, seed: number, ranks: readonly number[]): Mismatch[] {
  const st = stageOf(part, target);
  if (st === undefined) return [];
  const { parallel } = evaluateBoth(part, seed);
  const lt = part.logical.tensors.id(target);
  const shape = part.logical.shapes[lt] ?? [];
  const seen = new Map<number, { v: number; rank: number; tensor: string }>();
  const out: Mismatch[] = [];
  const coords = (flat: number): number[] => {
    const c = new Array<number>(shape.length);
    for (let d = shape.length - 1; d >= 0; d--) {
      c[d] = flat % (shape[d] as number);
      flat = Math.floor(flat / (shape[d] as number));
    }
    return c;
  };
  for (const o of st.obligations) {
    if (!complete(o.nf)) continue;
    const val = (parallel[o.rank] as (Dense<number> | undefined)[])[o.tensor];
    if (val === undefined) continue;
    const idx = logicalIndexer(o.nf, shape);
    const name = (part.programs[part.rankProgram[o.rank] as number] as Program).tensors.name(o.tensor);
    val.data.forEach((x, f) => {
      const g = idx(f);
      const prev = seen.get(g);
      if (prev === undefined) seen.set(g, { v: x, rank: o.rank, tensor: name });
      else if (prev.rank !== o.rank && differs(prev.v, x) && out.length < 4) {
        out.push({ logical: target, element: coords(g), rank: ranks[o.rank] ?? o.rank, tensor: name, kind: 'replica', parallel: x, expected: prev.v, order: 0 });
      }
    });
  }
  return out;
}

/**
 * Rank `rank`'s obligation `tensor` of `stage` against another rank's replica of the same
 * elements: refuted when the two differ on two draws (the witness: kind 'replica', `expected`
 * the other rank's value), else why not.
 */
export function replicaWitness(plan: LoadedPlan, raw: RawPlan, stage: Stage, rank: number, tensor: number, seed: number): PartResult | { why: string } {
  const target = plan.logical.tensors.name(stage.logical);
  if ((SPENT.get(plan) ?? 0) >= REPLICA_BUDGET_MS) return { why: `replicas: their ${REPLICA_BUDGET_MS / 1000} s for this plan are spent` };
  const started = performance.now();
  try {
    return replicaPairs(plan, raw, stage, rank, tensor, seed, target);
  } finally {
    SPENT.set(plan, (SPENT.get(plan) ?? 0) + performance.now() - started);
  }
}

function replicaPairs(plan: LoadedPlan, raw: RawPlan, stage: Stage, rank: number, tensor: number, seed: number, target: string): PartResult | { why: string } {
  const others = candidates(plan, rank, tensor);
  if (others.length === 0) return { why: 'no other rank holds a complete replica of its slice' };
  const whys: string[] = [];
  const t0 = performance.now();
  for (const b of others) {
    try {
      const ca = closure(plan, stage.logical, rank, tensor);
      const cb = closure(plan, stage.logical, b, tensor);
      // Folds and cut addends assume things of the logical side's inputs; kept out here.
      if (ca.fold !== undefined || cb.fold !== undefined || ca.cutAddends > 0 || cb.cutAddends > 0) {
        whys.push(`rank ${b}: a closure folds a group or cuts addends`);
        continue;
      }
      const ops = new Map(ca.ops);
      for (const [r, s] of cb.ops) ops.set(r, new Set([...(ops.get(r) ?? []), ...s]));
      const c = { ...ca, ops, inputs: new Map([...ca.inputs, ...cb.inputs]), obligations: new Map([...ca.obligations, ...cb.obligations]), groups: new Map([...ca.groups, ...cb.groups]), peers: new Map([...ca.peers, ...cb.peers]) };
      // Logical side: the tensors the claims name, free, and the stage's tensor as a copy of a
      // free input (so that its claims load): nothing of the model is recomputed.
      const inputs = new Set([...c.inputs.values()].map((nf) => nf.logical));
      inputs.delete(stage.logical);
      const side = extractLogicalRaw(plan, raw, stage, { logicalOps: new Set(), logicalInputs: inputs });
      const tt = side.tensors.find((t) => t.id === target);
      if (tt === undefined) throw new PartError(`no logical tensor '${target}'`);
      const free = `${target}@replica`;
      side.tensors.push({ ...structuredClone(tt), id: free, role: 'input' });
      tt.role = 'activation';
      side.ops.push({ id: 'part/replica/identity', op: 'identity', inputs: [free], outputs: [target] });
      side.contractInputs.push(free);
      const { raw: pr, ranks } = partRaw(plan, raw, stage, c, undefined, side);
      let part: LoadedPlan;
      try {
        part = loadPartObject(`${plan.file} (stage ${stage.index + 1}, replicas on ranks ${rank} and ${b})`, JSON.parse(JSON.stringify(pr)));
      } catch (e) {
        if (e instanceof PlanError) {
          whys.push(`rank ${b}: the part does not load: ${e.issues.slice(0, 2).map((i) => `${i.path}: ${i.message}`).join('; ')}`);
          continue;
        }
        throw e;
      }
      // Zero extension keeps every parallel value at the positions it keeps (and zeros the
      // rest), so replicas that differ in the cut part differ in the full plan.
      const z = zeroCutPlan(part, pr);
      const use = z?.plan ?? part;
      const elements = use.logical.shapes.reduce((n, s) => n + s.reduce((x, y) => x * y, 1), 0) + [...Array(use.mesh.size).keys()].reduce((n, r) => n + use.view(r).shapes.reduce((m, s) => m + (s ?? []).reduce((x, y) => x * y, 1), 0), 0);
      if (elements > MAX_REPLICA_ELEMENTS) {
        whys.push(`rank ${b}: the part holds ${elements.toLocaleString('en-US')} elements${z === undefined ? ' (no zero-extension cut)' : ' after its zero-extension cut'} (at most ${MAX_REPLICA_ELEMENTS.toLocaleString('en-US')})`);
        continue;
      }
      const first = disagreements(use, target, seed, ranks);
      const second = first.length === 0 ? [] : disagreements(use, target, seed + 1, ranks);
      if (first.length === 0 || second.length === 0) {
        whys.push(`rank ${b}: the replicas agree on ${first.length === 0 ? 'the first draw' : 'the second draw'}`);
        continue;
      }
      const w = first[0] as Mismatch;
      const cut = z === undefined ? '' : `; cut for a witness by zero extension (${cutList(z.cut)}; the inputs are zero at the positions cut), witness values at the cut part's shapes`;
      return {
        rank,
        ranks,
        result: {
          stage,
          status: 'differs',
          reason: `replicas disagree on two draws (seeds ${seed}, ${seed + 1}): ranks ${rank} and ${b} hold complete claims of the same elements of '${target}' and compute ${w.expected} and ${w.parallel} at the first draw's inputs (element [${w.element.join(', ')}]), so at least one claim is false there, whatever the logical value (docs/engine.md, "Replicas that disagree")${cut}`,
          failingRanks: [rank, b],
          logicalOps: 0,
          parallelOps: 0,
          terms: 0,
          ms: performance.now() - t0,
        },
        witness: first,
        reduced: z !== undefined,
        raw: z?.raw ?? pr,
      };
    } catch (e) {
      if (e instanceof PartError || e instanceof ReductionError) {
        whys.push(`rank ${b}: ${e.message.slice(0, 200)}`);
        continue;
      }
      throw e;
    }
  }
  return { why: `replicas: ${whys.join('; ')}` };
}

/**
 * The witness search's part prover: replicas first (no logical side, so cheap where a part's
 * would be the whole model), then the rank's part (stages/shrink/part.ts), the part cut at
 * earlier claims, and the part at one period. Each refutes only with a witness; a stage none
 * refutes keeps their reasons.
 */
export const provePartOrReplicas: ProvePart = (plan, raw, stage, rank, tensor, seed) => {
  const r = replicaWitness(plan, raw, stage, rank, tensor, seed);
  if (!('why' in r)) return r;
  const p = provePart(plan, raw, stage, rank, tensor, seed);
  if (!('why' in p) && p.result.status === 'differs' && p.witness.length > 0) return p;
  // Not refuted there: the part cut at earlier claims (stages/shrink/deepen.ts), whose logical
  // side may be a layer where the part's was the whole model.
  const d = provePartDeep(plan, raw, stage, rank, tensor, seed);
  if (!('why' in d) && d.result.status === 'differs' && d.witness.length > 0) return d;
  // Not refuted there: the part at one period of a dim class its ranks hold in blocks
  // (stages/shrink/periodic.ts), one rank per class of copies, where the part held them all.
  const q = provePartPeriodic(plan, raw, stage, rank, tensor, seed);
  if (!('why' in q)) return q;
  return 'why' in p ? { why: `${p.why}; ${r.why}; ${'why' in d ? d.why : `cut at earlier claims: ${d.result.status}`}; ${q.why}` } : { ...p, result: { ...p.result, reason: `${p.result.reason ?? ''}; ${q.why}` } };
};
