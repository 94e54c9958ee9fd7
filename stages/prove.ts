/**
 * Stage decomposition and exact proof.
 *
 * Obligations are the parallel tensors with lineage that some op or collective produces, on
 * every rank (so each replica is proved, not just one). A stage gathers the obligations of
 * one logical tensor. Walking back from them through the parallel dataflow, every tensor with
 * lineage that is reached is a stage input: its relation to its logical tensor is assumed
 * (it is an obligation of an earlier stage, or a contract input). The logical value is
 * computed from the same logical tensors. Assumptions are encoded by substitution: each
 * logical element is one symbol shared by all complete copies; elements held as partial
 * addends get one free symbol per addend and the logical element is their combination.
 *
 * A stage is proved when every obligation element equals its logical counterpart in the
 * exact normal form and every division the parallel side performs is by a value that is
 * evidently nonzero or that the logical side divides by as well. A normal-form difference is
 * not a refutation: the caller pairs it with a numeric witness or reports "unknown".
 */
import type { Dense } from '../ops/algebra.js';
import { registry } from '../ops/registry.js';
import { type Attrs, numel } from '../ops/types.js';
import { termAlgebra } from '../sdfg/algebras.js';
import { logicalIndexer } from '../sdfg/execute.js';
import { TermStore, type TermId } from '../sdfg/terms.js';
import type { LoadedPlan } from '../plans/loader.js';
import type { Program } from '../plans/model.js';
import { evalLineage, type LineageNF } from '../lineage/model.js';

export interface Obligation {
  readonly rank: number;
  readonly tensor: number;
  readonly nf: LineageNF;
}

export interface Stage {
  readonly index: number;
  /** The logical tensor whose claims this stage proves. */
  readonly logical: number;
  readonly obligations: Obligation[];
}

export type StageStatus = 'proved' | 'differs' | 'unknown';

export interface StageResult {
  readonly stage: Stage;
  readonly status: StageStatus;
  /** For 'differs' / 'unknown': why, with the first residual. */
  readonly reason?: string;
  /** Ranks whose obligations are not proved. */
  readonly failingRanks: number[];
  readonly logicalOps: number;
  readonly parallelOps: number;
  readonly terms: number;
  readonly ms: number;
}

/** One stage per logical tensor with produced claims, in topological order of the logical graph. */
export function decompose(plan: LoadedPlan, order: readonly number[]): Stage[] {
  const byLogical = new Map<number, Obligation[]>();
  const produced = producedSets(plan);
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let t = 0; t < p.tensors.size; t++) {
      const spec = p.lineage[t];
      if (spec === undefined || !(produced[r] as Uint8Array)[t]) continue;
      const nf = evalLineage(spec, plan.mesh, r, plan.logical.shapes[spec.logical] ?? [], plan.view(r).shapes[t] ?? []);
      let l = byLogical.get(nf.logical);
      if (l === undefined) byLogical.set(nf.logical, (l = []));
      l.push({ rank: r, tensor: t, nf });
    }
  }
  const pos = new Int32Array(plan.logical.tensors.size).fill(-1);
  order.forEach((op, i) => {
    for (const t of plan.logical.ops.opOutputs(op)) pos[t] = i;
  });
  return [...byLogical.entries()]
    .sort((a, b) => (pos[a[0]] as number) - (pos[b[0]] as number) || a[0] - b[0])
    .map(([logical, obligations], index) => ({ index, logical, obligations }));
}

/** produced[rank][tensor]: some local op or collective writes the tensor on that rank. */
export function producedSets(plan: LoadedPlan): Uint8Array[] {
  const out = Array.from({ length: plan.mesh.size }, (_, r) => new Uint8Array((plan.programs[plan.rankProgram[r] as number] as Program).tensors.size));
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) (out[r] as Uint8Array)[t] = 1;
  }
  for (const c of plan.collectives) c.group.forEach((r, i) => {
    const o = c.outputs[i] as number;
    if (o >= 0) (out[r] as Uint8Array)[o] = 1;
  });
  return out;
}

interface Producer {
  /** Local op index, or -1. */
  op: number;
  /** Collective instance index, or -1. */
  inst: number;
}

/** Producer of each (rank, tensor). */
function producers(plan: LoadedPlan): Map<string, Producer> {
  const m = new Map<string, Producer>();
  plan.collectives.forEach((c, ci) => c.group.forEach((r, i) => {
    const o = c.outputs[i] as number;
    if (o >= 0) m.set(`${r}:${o}`, { op: -1, inst: ci });
  }));
  for (let r = 0; r < plan.mesh.size; r++) {
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const sites = new Set(p.collectiveSites);
    for (let op = 0; op < p.ops.size; op++) {
      if (sites.has(op)) continue;
      for (const t of p.ops.opOutputs(op)) m.set(`${r}:${t}`, { op, inst: -1 });
    }
  }
  return m;
}

export class Prover {
  private readonly prod: Map<string, Producer>;
  private readonly lineageCache = new Map<string, LineageNF | undefined>();
  constructor(private readonly plan: LoadedPlan) {
    this.prod = producers(plan);
  }

  private lineage(r: number, t: number): LineageNF | undefined {
    const key = `${r}:${t}`;
    if (this.lineageCache.has(key)) return this.lineageCache.get(key);
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    const nf = spec === undefined ? undefined : evalLineage(spec, this.plan.mesh, r, this.plan.logical.shapes[spec.logical] ?? [], this.plan.view(r).shapes[t] ?? []);
    this.lineageCache.set(key, nf);
    return nf;
  }

  private tensorName(r: number, t: number): string {
    return (this.plan.programs[this.plan.rankProgram[r] as number] as Program).tensors.name(t);
  }

  prove(stage: Stage): StageResult {
    const t0 = performance.now();
    const plan = this.plan;
    const lg = plan.logical;
    const T = new TermStore();
    const alg = termAlgebra(T);

    // 1. Parallel closure: the ops and instances the obligations depend on, and the inputs.
    const inputs = new Map<string, LineageNF>();
    // Claims of the stage's own logical tensor are recomputed, never assumed (unless no op
    // produces them: claims of a contract input).
    const stack = stage.obligations.map((o) => [o.rank, o.tensor] as [number, number]);
    const seen = new Set<string>();
    while (stack.length > 0) {
      const [r, t] = stack.pop() as [number, number];
      const key = `${r}:${t}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const nf = this.lineage(r, t);
      const pr = this.prod.get(key);
      if (nf !== undefined && (nf.logical !== stage.logical || pr === undefined)) {
        inputs.set(key, nf);
        continue;
      }
      if (pr === undefined) continue;
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      if (pr.op >= 0) {
        for (const x of p.ops.opInputs(pr.op)) stack.push([r, x]);
      } else {
        const c = plan.collectives[pr.inst];
        c?.group.forEach((m, i) => {
          const x = c.inputs[i] as number;
          if (x >= 0) stack.push([m, x]);
        });
      }
    }

    // 2. Symbols for the logical tensors named by the inputs (substitution).
    const inputLogical = new Set<number>([...inputs.values()].map((nf) => nf.logical));
    const logicalSyms = new Map<number, TermId[]>();
    const chunkTerms = new Map<string, TermId>();
    let unsupported: string | undefined;
    for (const L of inputLogical) {
      const shape = lg.shapes[L] ?? [];
      const n = numel(shape);
      const name = lg.tensors.name(L);
      // Partial groups among this stage's input claims of L, per element.
      const groupsAt = new Map<number, Map<string, LineageNF>>();
      for (const nf of inputs.values()) {
        if (nf.logical !== L || (nf.value.n === 1 && nf.value.divisor === 1)) continue;
        const idx = logicalIndexer(nf, shape);
        const cnt = nf.ranges.reduce((p, r) => p * r.reduce((s, _, i) => (i % 2 === 0 ? s + ((r[i + 1] as number) - (r[i] as number)) : s), 0), 1);
        const gk = `${nf.value.n}|${nf.value.reduce}|${nf.value.divisor}`;
        for (let f = 0; f < cnt; f++) {
          const e = idx(f);
          let m = groupsAt.get(e);
          if (m === undefined) groupsAt.set(e, (m = new Map()));
          if (!m.has(gk)) m.set(gk, nf);
        }
      }
      const vals: TermId[] = new Array<TermId>(n);
      for (let e = 0; e < n; e++) {
        const gs = groupsAt.get(e);
        if (gs === undefined) {
          vals[e] = T.sym(`${name}[${e}]`);
          continue;
        }
        let value: TermId | undefined;
        let first = true;
        for (const [gk, nf] of gs) {
          const v = nf.value;
          const chunks: TermId[] = [];
          if (first) {
            for (let i = 0; i < v.n; i++) chunks.push(T.sym(`${name}[${e}]#${i}/${v.n}`));
            const comb = v.reduce === 'sum' ? T.scale(T.sum(chunks), { n: 1n, d: BigInt(v.divisor) }) : v.reduce === 'max' ? T.max(chunks) : T.min(chunks);
            value = comb;
            first = false;
          } else {
            if (v.reduce !== 'sum') {
              unsupported = `logical '${name}' is assumed as two partial decompositions, one of them ${v.reduce}`;
              break;
            }
            for (let i = 0; i < v.n - 1; i++) chunks.push(T.sym(`${name}[${e}]#${i}/${v.n}'`));
            chunks.push(T.sub(T.scale(value as TermId, { n: BigInt(v.divisor), d: 1n }), T.sum(chunks)));
          }
          chunks.forEach((c, i) => chunkTerms.set(`${L}|${gk}|${e}|${i}`, c));
        }
        vals[e] = value as TermId;
      }
      logicalSyms.set(L, vals);
    }
    if (unsupported !== undefined) return this.result(stage, 'unknown', `unsupported input relation: ${unsupported}`, stage.obligations.map((o) => o.rank), 0, 0, T, t0);

    // 3. Logical value of the stage's tensor, from the input logical tensors.
    const lvals = new Map<number, Dense<TermId>>();
    for (const [L, v] of logicalSyms) lvals.set(L, { shape: lg.shapes[L] ?? [], data: v });
    let logicalOps = 0;
    const evalLogical = (x: number): Dense<TermId> => {
      const hit = lvals.get(x);
      if (hit !== undefined) return hit;
      const op = lg.producer[x] as number;
      let out: Dense<TermId>;
      if (op < 0) {
        // A contract input the parallel side does not read in this stage: fresh symbols.
        const shape = lg.shapes[x] ?? [];
        out = { shape, data: Array.from({ length: numel(shape) }, (_, e) => T.sym(`${lg.tensors.name(x)}[${e}]`)) };
      } else {
        logicalOps++;
        const ins = [...lg.ops.opInputs(op)].map(evalLogical);
        const outs = registry.get(lg.ops.kind[op] as number).apply(alg, ins, lg.attrs[op] as Attrs);
        lg.ops.opOutputs(op).forEach((t, k) => lvals.set(t, outs[k] as Dense<TermId>));
        out = lvals.get(x) as Dense<TermId>;
      }
      lvals.set(x, out);
      return out;
    };
    const target = evalLogical(stage.logical);
    const logicalConds = new Set(T.conditions);

    // 4. Parallel values: inputs from the symbols, then the closure's ops in dependency order.
    const pvals = new Map<string, Dense<TermId>>();
    for (const [key, nf] of inputs) {
      const [r, t] = key.split(':').map(Number) as [number, number];
      const shape = plan.view(r).shapes[t] ?? [];
      const lshape = lg.shapes[nf.logical] ?? [];
      const idx = logicalIndexer(nf, lshape);
      const src = logicalSyms.get(nf.logical) as TermId[];
      const complete = nf.value.n === 1 && nf.value.divisor === 1;
      const gk = `${nf.value.n}|${nf.value.reduce}|${nf.value.divisor}`;
      pvals.set(key, {
        shape,
        data: Array.from({ length: numel(shape) }, (_, f) => {
          const e = idx(f);
          return complete ? (src[e] as TermId) : (chunkTerms.get(`${nf.logical}|${gk}|${e}|${nf.value.idx}`) as TermId);
        }),
      });
    }
    let parallelOps = 0;
    const evalPar = (r: number, t: number): Dense<TermId> => {
      const key = `${r}:${t}`;
      const hit = pvals.get(key);
      if (hit !== undefined) return hit;
      const pr = this.prod.get(key);
      if (pr === undefined) throw new Error(`rank ${r} tensor '${this.tensorName(r, t)}' has no producer and no lineage`);
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      parallelOps++;
      if (pr.op >= 0) {
        const ins = [...p.ops.opInputs(pr.op)].map((x) => evalPar(r, x));
        const outs = registry.get(p.ops.kind[pr.op] as number).apply(alg, ins, plan.view(r).attrs[pr.op] as Attrs);
        p.ops.opOutputs(pr.op).forEach((x, k) => pvals.set(`${r}:${x}`, outs[k] as Dense<TermId>));
      } else {
        const c = plan.collectives[pr.inst];
        if (c === undefined) throw new Error('missing collective');
        const ins = [...c.group].map((m, i) => ((c.inputs[i] as number) >= 0 ? evalPar(m, c.inputs[i] as number) : undefined));
        const outs = registry.get(c.kind).collective?.applyGroup(alg, ins, c.attrs, c.group) ?? [];
        c.group.forEach((m, i) => {
          const o = c.outputs[i] as number;
          const v = outs[i];
          if (o >= 0 && v !== undefined) pvals.set(`${m}:${o}`, v);
        });
      }
      return pvals.get(key) as Dense<TermId>;
    };

    // 5. Compare every obligation with the logical value.
    const failing = new Set<number>();
    let firstResidual: string | undefined;
    const lshape = lg.shapes[stage.logical] ?? [];
    const partial = new Map<string, Map<number, TermId>>();
    for (const o of stage.obligations) {
      const v = evalPar(o.rank, o.tensor);
      const idx = logicalIndexer(o.nf, lshape);
      const complete = o.nf.value.n === 1 && o.nf.value.divisor === 1;
      v.data.forEach((term, f) => {
        const e = idx(f);
        if (complete) {
          const want = target.data[e] as TermId;
          if (!T.equal(term, want)) {
            failing.add(o.rank);
            firstResidual ??= `rank ${o.rank} '${this.tensorName(o.rank, o.tensor)}' element ${e}: parallel - logical = ${T.render(T.sub(term, want), 300)}`;
          }
          return;
        }
        const gk = `${o.nf.value.n}|${o.nf.value.reduce}|${o.nf.value.divisor}|${e}`;
        let m = partial.get(gk);
        if (m === undefined) partial.set(gk, (m = new Map()));
        const prev = m.get(o.nf.value.idx);
        if (prev === undefined) m.set(o.nf.value.idx, term);
        else if (!T.equal(prev, term)) {
          failing.add(o.rank);
          firstResidual ??= `rank ${o.rank} '${this.tensorName(o.rank, o.tensor)}': replicas of addend ${o.nf.value.idx} differ`;
        }
      });
    }
    for (const [gk, m] of partial) {
      const [n, reduce, divisor, e] = gk.split('|');
      const chunks: TermId[] = [];
      for (let i = 0; i < Number(n); i++) {
        const c = m.get(i) ?? chunkTerms.get(`${stage.logical}|${n}|${reduce}|${divisor}|${e}|${i}`);
        if (c === undefined) {
          firstResidual ??= `element ${e}: addend ${i} of ${n} is not computed in this stage`;
          stage.obligations.forEach((o) => failing.add(o.rank));
          break;
        }
        chunks.push(c);
      }
      if (chunks.length < Number(n)) continue;
      const comb = reduce === 'sum' ? T.scale(T.sum(chunks), { n: 1n, d: BigInt(divisor as string) }) : reduce === 'max' ? T.max(chunks) : T.min(chunks);
      const want = target.data[Number(e)] as TermId;
      if (!T.equal(comb, want)) {
        stage.obligations.filter((o) => o.nf.value.n === Number(n)).forEach((o) => failing.add(o.rank));
        firstResidual ??= `element ${e}: combined addends - logical = ${T.render(T.sub(comb, want), 300)}`;
      }
    }
    if (failing.size > 0) return this.result(stage, 'differs', firstResidual, [...failing], logicalOps, parallelOps, T, t0);

    // 6. Side conditions of the parallel side's divisions.
    for (const c of T.conditions) {
      if (logicalConds.has(c) || T.provablyNonzero(c)) continue;
      if ([...logicalConds].some((l) => T.equal(l, c) || T.equal(l, T.neg(c)))) continue;
      return this.result(stage, 'unknown', `side condition not discharged: ${T.render(c, 200)} != 0 (the parallel plan divides by it, the logical one does not)`, stage.obligations.map((o) => o.rank), logicalOps, parallelOps, T, t0);
    }
    return this.result(stage, 'proved', undefined, [], logicalOps, parallelOps, T, t0);
  }

  private result(stage: Stage, status: StageStatus, reason: string | undefined, failingRanks: number[], logicalOps: number, parallelOps: number, T: TermStore, t0: number): StageResult {
    const r: StageResult = { stage, status, failingRanks: [...new Set(failingRanks)].sort((a, b) => a - b), logicalOps, parallelOps, terms: T.size, ms: performance.now() - t0 };
    return reason === undefined ? r : { ...r, reason };
  }
}
