/**
 * Where the bug of a plan with inferred boundaries lies (docs/engine.md, "Localization"): the span
 * of the first failing stage, from the boundaries it assumes to the claim that fails, narrowed to
 * the first ops whose outputs hold no value of the logical world. Numbers only: this names where
 * to look, never the verdict (stages/infer/boundary.ts decides that).
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { Program } from '../../plans/model.js';
import { regionStr, valueStr, type LineageNF } from '../../lineage/model.js';
import { producers, StageBuilder, type StageResult } from '../decompose/prove.js';
import { valueMatcher } from './infer.js';
import { registry } from '../../ops/registry.js';
import type { VerifyReport } from '../report.js';

/** The smallest span of parallel ops that holds the first failure. */
export interface Span {
  /** The stage whose obligation fails (a user claim or the contract). */
  readonly stage: number;
  /** The proved boundaries it starts from: "rank r 'tensor' = <logical> <region> (<value>)", inferred ones marked. */
  readonly from: string[];
  /** The claim that fails. */
  readonly to: string;
  /**
   * Parallel ops inside the span as "rank:op id": every op the failing claim (on its failing
   * ranks) depends on back to the proved boundaries, with the producers of the inferred
   * boundaries it starts from. Only proved relations bound it (localize).
   */
  readonly ops: string[];
  /** Where the numbers say to look first (narrowSpan), a subset of `ops` when narrowed. */
  readonly suspects?: string[];
  /** Parallel tensors inside the span, as "rank:tensor id". */
  readonly tensors: string[];
  readonly likelyCause?: string;
  /** Whether the span was narrowed to the first ops whose values stop holding (else the whole failing stage). */
  readonly narrowed?: boolean;
}

function claimText(plan: LoadedPlan, key: string, nf: LineageNF, hinted: boolean): string {
  const [r, t] = key.split(':').map(Number) as [number, number];
  const name = (plan.programs[plan.rankProgram[r] as number] as Program).tensors.name(t);
  return `rank ${r} '${name}' = ${plan.logical.tensors.name(nf.logical)}${regionStr(nf.ranges)} (${valueStr(nf.value)})${hinted ? ' [inferred, proved]' : ''}`;
}

/**
 * The span of the first failing stage: its parallel ops, from the boundaries it assumes
 * (each proved) to the claim that fails. An inferred boundary holds, but the user never said
 * it should: the op that produced it is a suspect too (a missing all-reduce leaves a correct
 * partial value that a later op uses as complete), so the span includes it.
 */
export function localize(plan: LoadedPlan, builder: StageBuilder, report: VerifyReport, results: readonly StageResult[], hinted: (r: number, t: number) => boolean, seed: number): Span | undefined {
  const first = report.stages.find((s) => s.status === 'not_equivalent');
  if (first === undefined) return undefined;
  const r = results[first.index - 1];
  if (r === undefined) return undefined;
  const c = builder.closure(r.stage);
  const ops = new Set(c.ops);
  const tensors = new Set(c.seen);
  const from: string[] = [];
  let partialIn: string | undefined;
  for (const [key, nf] of c.inputs) {
    const [rk, t] = key.split(':').map(Number) as [number, number];
    const h = hinted(rk, t);
    from.push(claimText(plan, key, nf, h));
    if (!h) continue;
    // The producer of an inferred boundary joins the span.
    const p = plan.programs[plan.rankProgram[rk] as number] as Program;
    for (let op = 0; op < p.ops.size; op++) if (p.ops.opOutputs(op).includes(t)) ops.add(`${rk}:${p.ops.ids.name(op)}`);
    if (nf.value.n > 1 && partialIn === undefined) partialIn = claimText(plan, key, nf, true);
  }
  const o = r.stage.obligations.find((x) => r.failingRanks.includes(x.rank)) ?? r.stage.obligations[0];
  const to = o === undefined ? first.logical : claimText(plan, `${o.rank}:${o.tensor}`, o.nf, false);
  const narrow = narrowSpan(plan, builder, c, results, r, seed);
  if (narrow !== undefined) {
    // The span proper is bounded by proved relations only. A value that holds at the numeric
    // inputs is evidence, not a boundary: a wrong value can equal another logical value there
    // (a reset accumulation is the last micro-batch's gradient), so the first op where values
    // stop holding can sit downstream of the bug (19 of 46 catalog bugs). The span is the
    // failing claim's cone on its failing ranks back to the proved boundaries (collectives
    // pull in their members), plus the producers of the inferred boundaries it starts from;
    // the narrowed ops are reported as suspects inside it.
    const failingObl = r.stage.obligations.filter((x) => r.failingRanks.includes(x.rank));
    const cone = builder.closure({ ...r.stage, obligations: failingObl.length > 0 ? failingObl : r.stage.obligations });
    const spanOps = new Set(cone.ops);
    const prod = producers(plan);
    const progName = (rk: number, op: number): string => (plan.programs[plan.rankProgram[rk] as number] as Program).ops.ids.name(op);
    for (const key of cone.inputs.keys()) {
      const [rk, t] = key.split(':').map(Number) as [number, number];
      if (!hinted(rk, t)) continue;
      const pr = prod.get(key);
      if (pr === undefined) continue;
      if (pr.op >= 0) spanOps.add(`${rk}:${progName(rk, pr.op)}`);
      else {
        // A received boundary: the send that fed it (another rank's op) is a suspect too (a
        // pipeline stage sending the wrong tensor).
        const c = plan.collectives[pr.inst];
        c?.group.forEach((m, i) => {
          const site = c.sites[i] as number;
          spanOps.add(`${m}:${site >= 0 ? progName(m, site) : c.id}`);
        });
      }
    }
    // An inferred boundary can hold and still be the wrong value: a layer recomputed from the
    // previous micro-batch's saved input is that micro-batch's activation, and a hint proves
    // it. An op of the cone that reads boundaries of logical tensors no logical op of its kind
    // reads together flags its inferred inputs: the ops behind them, back to user claims, join
    // (up to MAX_SPAN_OPS per flagged input).
    const lg = plan.logical;
    const byKind = new Map<number, Set<number>[]>();
    for (let op = 0; op < lg.ops.size; op++) {
      const k = lg.ops.kind[op] as number;
      const l = byKind.get(k) ?? [];
      l.push(new Set(lg.ops.opInputs(op)));
      byKind.set(k, l);
    }
    const suspectInputs = new Set<string>();
    for (const key of cone.ops) {
      const i = key.indexOf(':');
      const rk = Number(key.slice(0, i));
      const p = plan.programs[plan.rankProgram[rk] as number] as Program;
      const op = p.ops.ids.id(key.slice(i + 1));
      if (op < 0) continue;
      const twins = byKind.get(p.ops.kind[op] as number);
      if (twins === undefined) continue;
      const ins = [...new Set(p.ops.opInputs(op))].flatMap((x) => {
        const nf = cone.inputs.get(`${rk}:${x}`);
        return nf === undefined ? [] : [{ k: `${rk}:${x}`, logical: nf.logical, hint: hinted(rk, x) }];
      });
      if (!ins.some((x) => x.hint)) continue;
      // Rows of different micro-batches (or batch shards) read together: the logical graph has
      // no micro-batches, so the same logical tensor at other rows is the tell.
      const rows = (x: (typeof ins)[number]): string | undefined => {
        const nf = cone.inputs.get(x.k) as LineageNF;
        const r0 = nf.ranges[0];
        const full = lg.shapes[x.logical]?.[0];
        return r0 === undefined || full === undefined || (r0.length === 2 && r0[0] === 0 && r0[1] === full) ? undefined : r0.join(',');
      };
      const rowSets = new Set(ins.flatMap((x) => {
        const r = rows(x);
        return r === undefined ? [] : [r];
      }));
      const ls = new Set(ins.map((x) => x.logical));
      const mixedRows = rowSets.size > 1;
      if (!mixedRows && (ls.size < 2 || twins.some((t) => [...ls].every((l) => t.has(l))))) continue;
      for (const x of ins) if (x.hint) suspectInputs.add(x.k);
    }
    for (const k0 of suspectInputs) {
      const queue = [k0];
      const done = new Set<string>();
      let added = 0;
      while (queue.length > 0 && added < MAX_SPAN_OPS) {
        const k = queue.shift() as string;
        if (done.has(k)) continue;
        done.add(k);
        const [rk, t] = k.split(':').map(Number) as [number, number];
        // A user claim is where the walk stops: only it says what the value should be.
        if (k !== k0 && builder.lineage(rk, t) !== undefined && !hinted(rk, t)) continue;
        const pr = prod.get(k);
        if (pr === undefined) continue;
        if (pr.op >= 0) {
          const name = `${rk}:${progName(rk, pr.op)}`;
          if (!spanOps.has(name)) added++;
          spanOps.add(name);
          for (const x of (plan.programs[plan.rankProgram[rk] as number] as Program).ops.opInputs(pr.op)) queue.push(`${rk}:${x}`);
          continue;
        }
        // A collective (tensor parallelism's f is one): on through this rank's call site.
        const c = plan.collectives[pr.inst];
        const i = c?.group.indexOf(rk) ?? -1;
        if (c === undefined || i < 0) continue;
        const site = c.sites[i] as number;
        const name = `${rk}:${site >= 0 ? progName(rk, site) : c.id}`;
        if (!spanOps.has(name)) added++;
        spanOps.add(name);
        const x = c.inputs[i] as number;
        if (x >= 0) queue.push(`${rk}:${x}`);
      }
    }
    for (const x of narrow.ops) spanOps.add(x);
    const spanTensors = new Set([...cone.seen].map((k) => {
      const [rk, t] = k.split(':').map(Number) as [number, number];
      return `${rk}:${(plan.programs[plan.rankProgram[rk] as number] as Program).tensors.name(t)}`;
    }));
    for (const x of narrow.tensors) spanTensors.add(x);
    return { stage: first.index, from: narrow.from, to, ops: [...spanOps].sort(), suspects: narrow.ops, tensors: [...spanTensors].sort(), likelyCause: narrow.cause + (first.diagnosis === undefined ? '' : `; the values: ${first.diagnosis}`), narrowed: true };
  }
  const cause = (first.diagnosisRule === 'none' ? undefined : first.diagnosis) ?? (partialIn !== undefined ? `the span starts from a partial value (${partialIn}); if a later op uses it as complete, a reduction (all-reduce / reduce-scatter) is missing` : undefined);
  return { stage: first.index, from, to, ops: [...ops].sort(), tensors: [...tensors].sort(), ...(cause === undefined ? {} : { likelyCause: cause }), narrowed: false };
}

/**
 * The smallest span inside the failing stage: the first ops whose outputs hold no value of the
 * logical world while their inputs do. A tensor "holds" when it is a boundary the stage starts
 * from, lies inside a proved stage (it computed a proved obligation), or its value at the
 * numeric run's inputs equals a block of a logical tensor, a sum of one over a group of ranks
 * (a partial value), or a group size times one (stages/infer/infer.ts valueMatcher). Only tensors
 * that do not hold and lead to the failing claim through tensors that do not hold count (a
 * correct intermediate with no logical twin, such as a gradient's square in the clip norm,
 * turns back into held values downstream). Among those first ops, the one earliest in program
 * order, on every rank where it is first; the span is it and the producers of its inputs (the
 * last values that hold), and for a partial input the chain of partial values behind it (the
 * missing reduction may sit a few ops up). Numbers only: this names where to look, never the
 * verdict.
 */
const COLLECTIVE = /^(all_reduce|reduce_scatter|all_gather|all_to_all|broadcast|send|recv|send_recv)/;
/** Ops a weakly localized span may run on to (docs/engine.md, "Localization"). */
const MAX_SPAN_OPS = 40;

function narrowSpan(plan: LoadedPlan, builder: StageBuilder, c: ReturnType<StageBuilder['closure']>, results: readonly StageResult[], failing: StageResult, seed: number): { from: string[]; ops: string[]; tensors: string[]; cause: string } | undefined {
  const match = valueMatcher(plan, seed);
  const proved = new Set<string>();
  for (const x of results) if (x.status === 'proved') for (const k of builder.closure(x.stage).seen) proved.add(k);
  const prog = (rk: number): Program => plan.programs[plan.rankProgram[rk] as number] as Program;
  const split = (k: string): [number, number] => k.split(':').map(Number) as [number, number];
  const producer = (rk: number, t: number): number => {
    const p = prog(rk);
    for (let op = 0; op < p.ops.size; op++) if (p.ops.opOutputs(op).includes(t)) return op;
    return -1;
  };
  /** The relation a held tensor has: a boundary's claim, else its numeric match. */
  const kindOf = (k: string): string | undefined => {
    const nf = c.inputs.get(k);
    if (nf !== undefined) return nf.value.n > 1 ? 'addend' : nf.value.divisor !== 1 ? 'scaled' : 'slice';
    if (proved.has(k)) return 'slice';
    return match(...split(k))?.kind;
  };
  const holds = (k: string): boolean => {
    if (c.inputs.has(k) || proved.has(k)) return true;
    const [rk, t] = split(k);
    if (producer(rk, t) < 0) return true;
    return match(rk, t) !== undefined;
  };
  // Tensors that do not hold and reach the failing claim through tensors that do not hold.
  const consumers = new Map<string, string[]>();
  for (const k of c.seen) {
    const [rk, t] = split(k);
    const op = producer(rk, t);
    if (op < 0) continue;
    for (const x of prog(rk).ops.opInputs(op)) {
      const ik = `${rk}:${x}`;
      const l = consumers.get(ik);
      if (l === undefined) consumers.set(ik, [k]);
      else l.push(k);
    }
  }
  // A collective's output on one rank depends on every member's input: SPMD members run the op
  // of the same id, so the inputs of that op on every rank count as its inputs (a superset).
  const byOpId = new Map<string, number[]>();
  for (const k of c.ops) {
    const i = k.indexOf(':');
    const l = byOpId.get(k.slice(i + 1));
    if (l === undefined) byOpId.set(k.slice(i + 1), [Number(k.slice(0, i))]);
    else l.push(Number(k.slice(0, i)));
  }
  for (const k of c.seen) {
    const [rk, t] = split(k);
    const op = producer(rk, t);
    if (op < 0 || !COLLECTIVE.test(registry.get(prog(rk).ops.kind[op] as number).name)) continue;
    const id = prog(rk).ops.ids.name(op);
    for (const m of byOpId.get(id) ?? []) {
      if (m === rk) continue;
      const pm = prog(m);
      const mop = pm.ops.ids.id(id);
      if (mop < 0) continue;
      for (const x of pm.ops.opInputs(mop)) {
        const ik = `${m}:${x}`;
        const l = consumers.get(ik);
        if (l === undefined) consumers.set(ik, [k]);
        else if (!l.includes(k)) l.push(k);
      }
    }
  }
  // Every obligation of the failing stage is a root (a decomposition's addends fail together).
  const obligations = new Set(failing.stage.obligations.map((o) => `${o.rank}:${o.tensor}`));
  const chain = new Set<string>();
  const onChain = (k: string, depth = 0): boolean => {
    if (chain.has(k)) return true;
    if (holds(k) && !obligations.has(k)) return false;
    if (obligations.has(k) || (consumers.get(k) ?? []).some((u) => depth < 10_000 && onChain(u, depth + 1))) {
      chain.add(k);
      return true;
    }
    return false;
  };
  const firsts: { rk: number; op: number }[] = [];
  for (const k of c.seen) {
    if (!onChain(k)) continue;
    const [rk, t] = split(k);
    const op = producer(rk, t);
    if (op < 0) continue;
    if ([...prog(rk).ops.opInputs(op)].every((x) => holds(`${rk}:${x}`))) firsts.push({ rk, op });
  }
  if (firsts.length === 0) return undefined;
  const name = (f: { rk: number; op: number }): string => prog(f.rk).ops.ids.name(f.op);
  // Which first op is the likeliest: one reading a partial or scaled value (a collective's
  // fault); then one whose kind the logical graph applies to the logical tensors its inputs
  // hold (it should compute a logical value and does not); then any (a correct intermediate
  // with no logical twin, such as a vocab-parallel cross-entropy's shifted logits, looks alike).
  const lg = plan.logical;
  const score = (f: { rk: number; op: number }): number => {
    const p = prog(f.rk);
    const ins = [...p.ops.opInputs(f.op)].map((x) => `${f.rk}:${x}`);
    if (ins.some((k) => kindOf(k) === 'addend' || kindOf(k) === 'scaled')) return 3;
    const ms = ins.map((k) => (c.inputs.has(k) || proved.has(k) ? undefined : match(...split(k))));
    const ls = new Set<number>();
    ins.forEach((k, i) => {
      const nf = c.inputs.get(k);
      if (nf !== undefined) ls.add(nf.logical);
      for (const L of ms[i]?.logical ?? []) ls.add(L);
    });
    for (let op = 0; op < lg.ops.size; op++) if (lg.ops.kind[op] === p.ops.kind[f.op] && [...lg.ops.opInputs(op)].some((x) => ls.has(x))) return 2;
    return 1;
  };
  const best = Math.max(...firsts.map(score));
  const top = firsts.filter((f) => score(f) === best);
  const onFailing = top.filter((f) => failing.failingRanks.includes(f.rk));
  const pick = (onFailing.length > 0 ? onFailing : top).reduce((a, b) => (b.op < a.op ? b : a));
  const at = firsts.filter((f) => name(f) === name(pick));
  const ops = new Set<string>();
  const tensors = new Set<string>();
  const from: string[] = [];
  const kinds = new Map<string, string | undefined>();
  for (const f of at) {
    const p = prog(f.rk);
    ops.add(`${f.rk}:${name(f)}`);
    for (const x of p.ops.opOutputs(f.op)) tensors.add(`${f.rk}:${p.tensors.name(x)}`);
    for (const x of new Set(p.ops.opInputs(f.op))) {
      tensors.add(`${f.rk}:${p.tensors.name(x)}`);
      const pop = producer(f.rk, x);
      if (pop >= 0) ops.add(`${f.rk}:${p.ops.ids.name(pop)}`);
      const k = `${f.rk}:${x}`;
      const m = kindOf(k);
      // A partial value: the reduction that is missing may be any op of the chain of partial
      // values that made it (a reduction over one axis replaced by a copy, then one over
      // another axis): those producers join the span.
      // Integer values (masks, local ids) say nothing at the numeric inputs: the ops that
      // computed them, back to values that are not integers, join the span.
      if (m === 'integer') {
        const back = [x];
        const done = new Set<number>();
        while (back.length > 0 && done.size < 8) {
          const y = back.shift() as number;
          const op = producer(f.rk, y);
          if (op < 0 || done.has(op)) continue;
          done.add(op);
          ops.add(`${f.rk}:${p.ops.ids.name(op)}`);
          for (const z of p.ops.opInputs(op)) if (kindOf(`${f.rk}:${z}`) === 'integer') back.push(z);
        }
      }
      if (m === 'addend') {
        let op = pop;
        for (let step = 0; step < 6 && op >= 0; step++) {
          // Back through ops with one distinct input (collectives, copies: where reductions
          // sit) and through partial values.
          const ins = [...new Set(p.ops.opInputs(op))];
          const part = ins.length === 1 ? ins[0] : ins.find((y) => kindOf(`${f.rk}:${y}`) === 'addend');
          if (part === undefined) break;
          op = producer(f.rk, part);
          if (op >= 0) ops.add(`${f.rk}:${p.ops.ids.name(op)}`);
        }
      }
      kinds.set(p.tensors.name(x), m);
      const rel = m === 'addend' ? 'a partial value: its sum over a group of ranks is a logical block' : m === 'scaled' ? 'a group size times (or a group size-th of) a logical block' : m === 'integer' ? 'integer values' : 'a logical block';
      if (from.length < 16) from.push(`rank ${f.rk} '${p.tensors.name(x)}' (${c.inputs.has(k) ? `a proved boundary: ${rel}` : proved.has(k) ? 'inside a proved stage' : `${rel}, at the numeric inputs`})`);
    }
  }
  // Weaker evidence (no partial or scaled input): the first op may be
  // a correct intermediate with no logical twin, and the fault further down the values that
  // do not hold (a loss normalized per rank after a vocab-parallel cross-entropy's internals, a
  // clip norm reduced over the wrong group). The span then runs on, breadth first, along those
  // values to the failing claim, up to MAX_SPAN_OPS.
  if (best < 3) {
    const queue: string[] = [];
    // On the picked op's rank only: depth matters more than the other ranks' copies.
    for (const x of prog(pick.rk).ops.opOutputs(pick.op)) queue.push(`${pick.rk}:${x}`);
    const visited = new Set<string>(queue);
    const cap = best === 2 ? MAX_SPAN_OPS / 2 : MAX_SPAN_OPS;
    while (queue.length > 0 && ops.size < cap) {
      const k = queue.shift() as string;
      for (const u of consumers.get(k) ?? []) {
        if (visited.has(u) || !chain.has(u) || !u.startsWith(`${pick.rk}:`)) continue;
        visited.add(u);
        const [rk, t] = split(u);
        const op = producer(rk, t);
        if (op >= 0 && ops.size < cap) {
          ops.add(`${rk}:${prog(rk).ops.ids.name(op)}`);
          // With the integer values it reads (a mask): they say nothing at the numeric inputs.
          for (const z of prog(rk).ops.opInputs(op)) {
            const zop = producer(rk, z);
            if (zop >= 0 && kindOf(`${rk}:${z}`) === 'integer' && ops.size < cap) ops.add(`${rk}:${prog(rk).ops.ids.name(zop)}`);
          }
        }
        tensors.add(`${rk}:${prog(rk).tensors.name(t)}`);
        queue.push(u);
      }
    }
  }
  const opName = name(pick);
  const kind = prog(pick.rk).ops.kind[pick.op] as number;
  const partial = [...kinds].filter(([, m]) => m === 'addend').map(([n]) => n);
  const scaled = [...kinds].filter(([, m]) => m === 'scaled').map(([n]) => n);
  const cause =
    partial.length > 0
      ? `op '${opName}' reads ${partial.map((n) => `'${n}'`).join(', ')} as a complete value, but ${partial.length > 1 ? 'they hold' : 'it holds'} only a partial sum over ranks: a reduction (all-reduce / reduce-scatter) is missing or was replaced before it`
      : scaled.length > 0
        ? `op '${opName}' reads ${scaled.map((n) => `'${n}'`).join(', ')}, a group size times (or a group size-th of) the value it needs: a sum where an average is due, or the reverse`
        : best === 2
          ? `op '${opName}' (${registry.get(kind).name}) computes a value no logical tensor holds from inputs that hold, where the logical graph applies ${registry.get(kind).name} to those inputs' values: the op itself (its attributes, group or inputs) is the likely cause`
          : `op '${opName}' (${registry.get(kind).name}) is the first whose value no logical tensor holds (it may be a correct intermediate with no logical twin); the span runs on along values that do not hold to the failing claim`;
  return { from, ops: [...ops].sort(), tensors: [...tensors].sort(), cause };
}
