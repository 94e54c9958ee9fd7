/**
 * Canonical form of a stage, for proving equal stages once (docs/engine.md, "Stage
 * deduplication"). The form is a text that determines everything StageBuilder.build reads:
 *  - the obligations in order: canonical rank, canonical tensor, lineage ranges and value map;
 *  - the parallel closure in the builder's own walk order: every input with its lineage
 *    (against the canonical id of its logical tensor) and shape; every op with its kind,
 *    attributes as instantiated for its rank, and canonical input / output tensors; every
 *    collective with its kind, attributes (a broadcast's `src` as a canonical rank), group
 *    (canonical ranks, in group order) and members' inputs and outputs;
 *  - the logical side in the builder's evaluation order: ops with kind and attributes, the
 *    logical tensors the inputs name and the contract inputs read, with shape and id domain.
 * Tensors, logical tensors and ranks are numbered in order of first appearance, so two
 * stages that differ only by names (layers, micro-batches) or by rank numbers (pipeline
 * stages) get equal forms. Equal forms mean the builder builds the same equalities up to a
 * bijective renaming of symbols and ranks, so one proof covers both.
 */
import { createHash } from 'node:crypto';
import { registry } from '../../ops/registry.js';
import type { AttrValue, Attrs } from '../../ops/types.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { CollectiveInstance, Program, RankView } from '../../plans/model.js';
import { evalLineage, type LineageNF } from '../../lineage/model.js';
import { numel } from '../../ops/types.js';
import { MAX_STAGE_ELEMENTS, producers, type ProducerLookup, type Stage } from '../decompose/prove.js';

export { canonJson } from './canon-json.js';
import { canonJson } from './canon-json.js';

/** Bumped when the form's meaning changes: cached proofs of an older form are not reused. */
export const CANON_VERSION = 1;

export class StageCanonizer {
  private readonly prod: ProducerLookup;
  private readonly instance: (inst: number) => CollectiveInstance | undefined;
  private readonly lineageCache = new Map<string, LineageNF | undefined>();
  /** Attributes as canonical text, per attribute object (views share them across ranks). */
  private readonly attrText = new WeakMap<object, string>();
  private readonly views = new Map<number, RankView>();
  /** `prod`: producers by "rank:tensor" (default: the plan-wide map of stages/decompose/prove.ts; stages/decompose/template.ts passes one read from the templates). */
  constructor(
    readonly plan: LoadedPlan,
    prod?: ProducerLookup,
  ) {
    this.instance = prod?.instance?.bind(prod) ?? ((i) => plan.collectives[i]);
    if (prod !== undefined) {
      this.prod = prod;
      return;
    }
    // The plan-wide producer map the stage builder uses (built once per plan).
    this.prod = producers(plan);
  }

  private view(r: number): RankView {
    let v = this.views.get(r);
    if (v === undefined) this.views.set(r, (v = this.plan.view(r)));
    return v;
  }

  private attrs(a: Attrs | undefined): string {
    if (a === undefined) return 'u';
    let t = this.attrText.get(a);
    if (t === undefined) this.attrText.set(a, (t = canonJson(a)));
    return t;
  }

  private lineage(r: number, t: number): LineageNF | undefined {
    const key = `${r}:${t}`;
    if (this.lineageCache.has(key)) return this.lineageCache.get(key);
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    const nf = spec === undefined ? undefined : evalLineage(spec, this.plan.mesh, r, this.plan.logical.shapes[spec.logical] ?? [], this.view(r).shapes[t] ?? []);
    this.lineageCache.set(key, nf);
    return nf;
  }

  /** The canonical form of a stage and the number of tensor elements it holds (its size). */
  form(stage: Stage): { text: string | undefined; elements: number } {
    const plan = this.plan;
    const lg = plan.logical;
    const out: string[] = [`v${CANON_VERSION}`];
    const ranks = new Map<number, number>();
    const rk = (r: number): number => {
      let c = ranks.get(r);
      if (c === undefined) ranks.set(r, (c = ranks.size));
      return c;
    };
    const logIds = new Map<number, number>();
    const lid = (l: number): number => {
      let c = logIds.get(l);
      if (c === undefined) logIds.set(l, (c = logIds.size));
      return c;
    };
    const parIds = new Map<string, number>();
    const pid = (r: number, t: number): number => {
      const key = `${r}:${t}`;
      let c = parIds.get(key);
      if (c === undefined) parIds.set(key, (c = parIds.size));
      return c;
    };
    const nfText = (nf: LineageNF): string => `L${lid(nf.logical)}${JSON.stringify(nf.ranges)}${nf.value.idx}/${nf.value.n}/${nf.value.reduce}/${nf.value.divisor}/${JSON.stringify(nf.value.split)}`;
    lid(stage.logical);

    // The stage's own tensor and its obligations are part of what the builder counts: past
    // the size limit on them alone, skip the walk (a lower bound of the builder's count).
    let lower = numel(lg.shapes[stage.logical] ?? []);
    const counted = new Set<string>();
    for (const o of stage.obligations) {
      const key = `${o.rank}:${o.tensor}`;
      if (counted.has(key)) continue;
      counted.add(key);
      lower += numel(this.view(o.rank).shapes[o.tensor] ?? []);
    }
    if (lower > MAX_STAGE_ELEMENTS) return { text: undefined, elements: lower };

    // 1. The builder's closure walk (same stack order), so inputs are listed in its order.
    const inputs: [number, number, LineageNF][] = [];
    const stack = stage.obligations.map((o) => [o.rank, o.tensor] as [number, number]);
    const seen = new Set<string>();
    const seenList: [number, number][] = [];
    while (stack.length > 0) {
      const [r, t] = stack.pop() as [number, number];
      const key = `${r}:${t}`;
      if (seen.has(key)) continue;
      seen.add(key);
      seenList.push([r, t]);
      const nf = this.lineage(r, t);
      const pr = this.prod.get(key);
      if (nf !== undefined && (nf.logical !== stage.logical || pr === undefined)) {
        inputs.push([r, t, nf]);
        continue;
      }
      if (pr === undefined) continue;
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      if (pr.op >= 0) for (const x of p.ops.opInputs(pr.op)) stack.push([r, x]);
      else {
        const c = this.instance(pr.inst);
        c?.group.forEach((m, i) => {
          const x = c.inputs[i] as number;
          if (x >= 0) stack.push([m, x]);
        });
      }
    }
    let elements = numel(lg.shapes[stage.logical] ?? []);
    const inputLogical = new Set(inputs.map((x) => x[2].logical));
    for (const L of inputLogical) elements += numel(lg.shapes[L] ?? []);
    for (const [r, t] of seenList) elements += numel(this.view(r).shapes[t] ?? []);
    // Past the builder's size limit the stage is "unknown (too large)" before any term is
    // built: nothing to share, so no form (it stays a class of its own).
    if (elements > MAX_STAGE_ELEMENTS) return { text: undefined, elements };
    // The walk itself (which nodes, in which order, on which ranks) is part of the form.
    out.push(`S${seenList.map(([r, t]) => `${rk(r)}.${pid(r, t)}:${(this.view(r).shapes[t] ?? []).join('x')}`).join(' ')}`);
    for (const [r, t, nf] of inputs) out.push(`I${rk(r)}.${pid(r, t)}=${nfText(nf)}`);
    for (const L of inputLogical) out.push(`LI${lid(L)}:${(lg.shapes[L] ?? []).join('x')}:${JSON.stringify(lg.domains[L] ?? null)}`);

    // 2. Logical side, in the builder's evaluation order.
    const lseen = new Set<number>(inputLogical);
    const evalLogical = (x: number): void => {
      if (lseen.has(x)) return;
      lseen.add(x);
      const op = lg.producer[x] as number;
      if (op < 0) {
        out.push(`LF${lid(x)}:${(lg.shapes[x] ?? []).join('x')}:${JSON.stringify(lg.domains[x] ?? null)}`);
        return;
      }
      const ins = [...lg.ops.opInputs(op)];
      ins.forEach(evalLogical);
      const outs = [...lg.ops.opOutputs(op)];
      for (const t of outs) lseen.add(t);
      out.push(`LO${registry.get(lg.ops.kind[op] as number).name}${this.attrs(lg.attrs[op])}(${ins.map(lid).join(',')})->(${outs.map((t) => `${lid(t)}:${(lg.shapes[t] ?? []).join('x')}`).join(',')})`);
    };
    evalLogical(stage.logical);
    out.push(`LT${lid(stage.logical)}:${(lg.shapes[stage.logical] ?? []).join('x')}`);

    // 3. Parallel side, in the builder's evaluation order.
    const pdone = new Set<string>(inputs.map(([r, t]) => `${r}:${t}`));
    const evalPar = (r: number, t: number): void => {
      const key = `${r}:${t}`;
      if (pdone.has(key)) return;
      pdone.add(key);
      const pr = this.prod.get(key);
      if (pr === undefined) {
        out.push(`X${rk(r)}.${pid(r, t)}`);
        return;
      }
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      if (pr.op >= 0) {
        const ins = [...p.ops.opInputs(pr.op)];
        for (const x of ins) evalPar(r, x);
        const outs = [...p.ops.opOutputs(pr.op)];
        for (const x of outs) pdone.add(`${r}:${x}`);
        const v = this.view(r);
        out.push(`PO${rk(r)}:${registry.get(p.ops.kind[pr.op] as number).name}${this.attrs(v.attrs[pr.op])}(${ins.map((x) => pid(r, x)).join(',')})->(${outs.map((x) => `${pid(r, x)}:${(v.shapes[x] ?? []).join('x')}`).join(',')})`);
        return;
      }
      const c = this.instance(pr.inst);
      if (c === undefined) throw new Error('missing collective');
      c.group.forEach((m, i) => {
        const x = c.inputs[i] as number;
        if (x >= 0) evalPar(m, x);
      });
      c.group.forEach((m, i) => {
        const o = c.outputs[i] as number;
        if (o >= 0) pdone.add(`${m}:${o}`);
      });
      const attrs: Record<string, AttrValue> = { ...c.attrs };
      if (typeof attrs['src'] === 'number') attrs['src'] = `rank#${rk(attrs['src'])}`;
      const members = [...c.group].map((m, i) => {
        const x = c.inputs[i] as number;
        const o = c.outputs[i] as number;
        return `${rk(m)}:${x >= 0 ? pid(m, x) : '-'}>${o >= 0 ? `${pid(m, o)}:${(this.view(m).shapes[o] ?? []).join('x')}` : '-'}`;
      });
      out.push(`PC${registry.get(c.kind).name}${canonJson(attrs)}[${members.join(' ')}]`);
    };
    for (const o of stage.obligations) {
      evalPar(o.rank, o.tensor);
      out.push(`O${rk(o.rank)}.${pid(o.rank, o.tensor)}=${nfText(o.nf)}`);
    }
    return { text: out.join('\n'), elements };
  }
}

export function formHash(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export interface StageClass {
  /** Index (into the decomposition) of the stage that is proved. */
  readonly rep: number;
  /** Every stage with this form, rep included. */
  readonly members: number[];
  /** '' for a stage past the size limit: never shared, never cached. */
  readonly form: string;
  readonly hash: string;
  readonly elements: number;
}

/**
 * Groups stages by canonical form. A hash hit is confirmed by comparing the full forms; two
 * forms with one hash (a collision) stay two classes. `hash` can be replaced (tests).
 */
export function groupStages(plan: LoadedPlan, stages: readonly Stage[], hash: (text: string) => string = formHash): StageClass[] {
  const canon = new StageCanonizer(plan);
  const byHash = new Map<string, { rep: number; members: number[]; form: string; hash: string; elements: number }[]>();
  const classes: { rep: number; members: number[]; form: string; hash: string; elements: number }[] = [];
  stages.forEach((s, i) => {
    const { text, elements } = canon.form(s);
    if (text === undefined) {
      classes.push({ rep: i, members: [i], form: '', hash: '', elements });
      return;
    }
    const h = hash(text);
    let list = byHash.get(h);
    if (list === undefined) byHash.set(h, (list = []));
    const hit = list.find((c) => c.form === text);
    if (hit !== undefined) {
      hit.members.push(i);
      return;
    }
    const c = { rep: i, members: [i], form: text, hash: h, elements };
    list.push(c);
    classes.push(c);
  });
  return classes;
}
