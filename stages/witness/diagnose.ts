/**
 * What a refuted stage's witness looks like: one rule per cause (docs/reports.md, "Diagnoses").
 *
 * A rule reads the evidence and either names its cause or stays silent; the first rule that
 * speaks is the diagnosis, and where none does the diagnosis says so (rule 'none') rather than
 * guess. The evidence is the witness (a few differing elements) and, where the plan was
 * evaluated numerically, every rank's values of the failing tensor at the witness draw: a
 * constant ratio or a matching slice must hold on all of them, not on the four printed.
 * Ranks are named only where the values show them wrong (or right), never from the proof's
 * obligations, so a diagnosis never calls one rank the only wrong one while the witness shows
 * another.
 */
import type { Dense } from '../../ops/algebra.js';
import { registry } from '../../ops/registry.js';
import type { Attrs } from '../../ops/types.js';
import { floatAlgebra } from '../../sdfg/algebras.js';
import { logicalIndexer } from '../../sdfg/execute.js';
import type { LoadedPlan } from '../../lineage/load.js';
import type { CollectiveInstance, Program } from '../../plans/model.js';
import { differs, evaluateBoth, type BothValues, type InputDraw, type Mismatch } from './numeric.js';

/** The causes a diagnosis can name ('none': no rule fits). */
export type Cause = 'reduce-kind' | 'missing-reduction' | 'scale' | 'wrong-slice' | 'stale-value' | 'wrong-send' | 'other-tensor' | 'zero' | 'divergence' | 'none';

export interface Diagnosis {
  readonly rule: Cause;
  readonly text: string;
  /** The ranks the text names wrong: each one shown wrong by the values. */
  readonly ranks: number[];
}

/** One rank's complete claim on the failing tensor, its values at the witness draw (a prefix of its elements). */
interface Holder {
  readonly rank: number;
  readonly local: number;
  readonly name: string;
  /** Logical flat index of each sampled local element. */
  readonly idx: Int32Array;
  readonly values: Float64Array;
  /** Sampled elements that differ from the logical value. */
  readonly wrong: number;
}

/** Every rank's values of one logical tensor, and what the plan offers to compare them with. */
export interface TensorValues {
  readonly plan: LoadedPlan;
  readonly both: BothValues;
  readonly logical: number;
  readonly holders: readonly Holder[];
  /** Distinct rank groups of the plan's collectives (size 2 or more). */
  readonly groups: readonly (readonly number[])[];
  /** The plan's group sizes: mesh axes and collective groups. */
  readonly sizes: readonly number[];
  readonly collectiveOf: (rank: number, local: number) => { inst: CollectiveInstance; member: number } | undefined;
}

interface Evidence {
  readonly witness: readonly Mismatch[];
  /** The proof's normal-form difference (may name partial addends). */
  readonly residual: string;
  /** Absent where the plan was not evaluated (too large, or a part of one). */
  readonly values?: TensorValues;
}

interface Rule {
  readonly name: Exclude<Cause, 'none'>;
  /** What the cause is, for docs and tests. */
  readonly cause: string;
  /** The diagnosis when the evidence shows this cause, else undefined. */
  readonly test: (e: Evidence) => { text: string; ranks: number[] } | undefined;
}

/** Elements of a holder compared (a prefix): enough to see a ratio or a slice, bounded for large tensors. */
const SAMPLE = 4096;

const wrongHolders = (v: TensorValues): Holder[] => v.holders.filter((h) => h.wrong > 0);
const logicalData = (v: TensorValues, t = v.logical): ArrayLike<number> => (v.both.logical[t] as Dense<number>).data;
const same = (a: number, b: number): boolean => !differs(a, b);
const sorted = (xs: Iterable<number>): number[] => [...new Set(xs)].sort((a, b) => a - b);

/** The ranks shown wrong: every holder with a differing value, else the witness's. */
function wrongRanks(e: Evidence): number[] {
  const deep = e.values === undefined ? [] : wrongHolders(e.values).map((h) => h.rank);
  return sorted(deep.length > 0 ? deep : e.witness.map((m) => m.rank));
}

/** A rank list for a sentence: the first few and how many (a part may reach 512 ranks). */
function rankList(rs: readonly number[]): string {
  return rs.length <= 8 ? rs.join(', ') : `${rs.slice(0, 6).join(', ')}, ... (${rs.length} ranks)`;
}

function fmt(x: number): string {
  return String(Math.round(x * 1e6) / 1e6);
}

/** p/q with p and q 1, a group size or a product of two, when x is one (1 excluded). */
function simpleFraction(x: number, sizes: readonly number[]): string | undefined {
  const base = sorted(sizes.filter((s) => s > 1));
  const parts = sorted([1, ...base, ...base.flatMap((a) => base.map((b) => a * b))]);
  for (const q of parts) for (const p of parts) if (p !== q && Math.abs(x - p / q) <= 1e-6 * Math.max(1, Math.abs(x))) return q === 1 ? String(p) : `${p}/${q}`;
  return undefined;
}

/** parallel / logical when it is the same on every compared element of the wrong ranks. */
function constantRatio(e: Evidence): number | undefined {
  const pairs: [number, number][] = [];
  if (e.values !== undefined && wrongHolders(e.values).length > 0) {
    const lv = logicalData(e.values);
    for (const h of wrongHolders(e.values)) h.values.forEach((x, f) => pairs.push([x, lv[h.idx[f] as number] as number]));
  } else for (const m of e.witness) if (m.kind !== 'replica') pairs.push([m.parallel, m.expected]);
  const ratios = pairs.filter(([, l]) => Math.abs(l) > 1e-9).map(([p, l]) => p / l);
  if (ratios.length < 2) return undefined;
  const c = ratios[0] as number;
  return ratios.every((r) => Math.abs(r - c) <= 1e-6 * Math.max(1, Math.abs(c))) ? c : undefined;
}

/** The collective's output on one member with another reduce op, or undefined. */
function reduceWith(v: TensorValues, inst: CollectiveInstance, member: number, reduce: string): Dense<number> | undefined {
  const rule = registry.get(inst.kind).collective;
  if (rule === undefined) return undefined;
  const inputs = Array.from(inst.group, (r, i) => (i < inst.inputs.length && (inst.inputs[i] as number) >= 0 ? (v.both.parallel[r] as (Dense<number> | undefined)[])[inst.inputs[i] as number] : undefined));
  const attrs: Attrs = { ...inst.attrs, reduce };
  return rule.applyGroup(floatAlgebra, inputs, attrs, inst.group)[member];
}

/** Whether every member's input to the collective holds the same values (replicas of a complete value). */
function inputsAgree(v: TensorValues, inst: CollectiveInstance): boolean {
  const xs = Array.from(inst.group, (r, i) => (v.both.parallel[r] as (Dense<number> | undefined)[])[inst.inputs[i] as number]?.data);
  const first = xs[0];
  return first !== undefined && xs.every((x) => x !== undefined && x.length === first.length && Array.prototype.every.call(x, (y: number, k: number) => same(y, first[k] as number)));
}

const reduceKind: Rule = {
  name: 'reduce-kind',
  cause: 'a collective reduces with the wrong op (sum, avg, max, min): with another op its output is the logical value',
  test: (e) => {
    const v = e.values;
    if (v === undefined) return undefined;
    const lv = logicalData(v);
    for (const h of wrongHolders(v).slice(0, 8)) {
      const c = v.collectiveOf(h.rank, h.local);
      const k = c?.inst.attrs['reduce'];
      if (c === undefined || typeof k !== 'string') continue;
      for (const alt of ['sum', 'avg', 'max', 'min'].filter((x) => x !== k)) {
        const out = reduceWith(v, c.inst, c.member, alt);
        if (out === undefined || !Array.from(h.idx, (g, f) => same(out.data[f] as number, lv[g] as number)).every(Boolean)) continue;
        const op = registry.get(c.inst.kind).name;
        const members = Array.from(c.inst.group);
        const ranks = sorted(wrongHolders(v).filter((w) => members.includes(w.rank)).map((w) => w.rank));
        // A reduction over replicas multiplies a complete value: the fix is no reduction, not another op.
        if (k === 'sum' && alt === 'avg' && inputsAgree(v, c.inst)) {
          const fix = op === 'reduce_scatter' ? 'a split (each rank keeps its chunk of its own input)' : 'a copy (no reduction)';
          return { ranks, text: `'${c.inst.id}' (${op} over ranks ${rankList(members)}) sums values that are already complete (every member's input is the same), so rank(s) ${rankList(ranks)} hold ${members.length} x the logical value: ${fix}, or reduce 'avg', is due` };
        }
        return { ranks, text: `'${c.inst.id}' (${op} over ranks ${rankList(members)}) reduces with '${k}' where '${alt}' is due: with '${alt}' rank(s) ${rankList(ranks)} would hold the logical values` };
      }
    }
    return undefined;
  },
};

/**
 * A partial claim (one addend of a sum over ranks) the holder's value is computed from on its
 * rank with no collective on the way: a value used as complete before it is reduced.
 */
function partialSource(v: TensorValues, h: Holder): string | undefined {
  const p = v.plan.programs[v.plan.rankProgram[h.rank] as number] as Program;
  const producer = new Map<number, number>();
  for (let op = 0; op < p.ops.size; op++) for (const t of p.ops.opOutputs(op)) producer.set(t, op);
  const seen = new Set<number>([h.local]);
  const stack = [h.local];
  while (stack.length > 0 && seen.size < 10_000) {
    const op = producer.get(stack.pop() as number);
    // A collective on the way may be the reduction (or the wrong one): other rules speak for it.
    if (op === undefined || registry.get(p.ops.kind[op] as number).collective !== undefined) continue;
    for (const i of p.ops.opInputs(op)) {
      if (seen.has(i)) continue;
      seen.add(i);
      const nf = p.lineage[i] === undefined ? undefined : v.both.lineageOf(h.rank, i);
      if (nf === undefined) stack.push(i);
      else if (nf.value.n > 1 && nf.value.reduce === 'sum') return p.tensors.name(i);
    }
  }
  return undefined;
}

const missingReduction: Rule = {
  name: 'missing-reduction',
  cause: 'ranks hold their own partial values where the reduced value is due: an all-reduce (or the reduction of a partial value) is missing',
  test: (e) => {
    const v = e.values;
    if (v !== undefined && wrongHolders(v).length > 0) {
      const lv = logicalData(v);
      // Per logical element, each rank's value (complete claims).
      const at = new Map<number, Map<number, number>>();
      for (const h of v.holders) h.idx.forEach((g, f) => {
        let m = at.get(g);
        if (m === undefined) at.set(g, (m = new Map()));
        if (!m.has(h.rank)) m.set(h.rank, h.values[f] as number);
      });
      const wrong = new Set(wrongHolders(v).map((h) => h.rank));
      const holderRanks = sorted(v.holders.map((h) => h.rank));
      for (const g of [...v.groups, holderRanks]) {
        if (g.length < 2 || !g.some((r) => wrong.has(r))) continue;
        const elems = [...at].filter(([, m]) => g.every((r) => m.has(r)));
        if (elems.length === 0) continue;
        // The members must disagree somewhere: equal values summed is a scale, not a missing reduction.
        if (!elems.some(([, m]) => g.some((r) => !same(m.get(r) as number, m.get(g[0] as number) as number)))) continue;
        for (const mode of ['sum', 'avg'] as const) {
          const ok = elems.every(([el, m]) => {
            const s = g.reduce((a, r) => a + (m.get(r) as number), 0);
            return same(mode === 'sum' ? s : s / g.length, lv[el] as number);
          });
          if (!ok) continue;
          const ranks = sorted(g.filter((r) => wrong.has(r)));
          return { ranks, text: `rank(s) ${rankList(ranks)} each hold their own partial value of '${v.plan.logical.tensors.name(v.logical)}': the ${mode} over ranks ${rankList(g)} is the logical value, so an all-reduce (${mode}) over those ranks is missing, on it or on a value it is computed from` };
        }
      }
    }
    if (v !== undefined) {
      const from = wrongHolders(v).map((h) => [h, partialSource(v, h)] as const).filter(([, x]) => x !== undefined);
      if (from.length > 0 && from.length === wrongHolders(v).length) {
        const [h, x] = from[0] as readonly [Holder, string];
        const ranks = sorted(from.map(([w]) => w.rank));
        return { ranks, text: `rank(s) ${rankList(ranks)} compute '${v.plan.logical.tensors.name(v.logical)}' from a partial value (rank ${h.rank}'s '${x}': one addend of a sum over ranks) with no collective between: a reduction (all-reduce) of it is missing` };
      }
    }
    // Addend symbols (name[e]#i/n) in the proof's difference: a partial value used as if complete.
    const addend = /([A-Za-z0-9_.:/@[\]-]+?)\[\d+\]#\d+\/\d+/.exec(e.residual);
    if (addend !== null) return { ranks: [], text: `the result depends on individual partial addends of '${addend[1] ?? ''}': a reduction (all-reduce / reduce-scatter) of a partial value is missing` };
    return undefined;
  },
};

const scale: Rule = {
  name: 'scale',
  cause: 'the wrong ranks hold one constant multiple of the logical value, a ratio of the plan group sizes (1/2, 2, 1/4, ...)',
  test: (e) => {
    const c = constantRatio(e);
    const sizes = e.values?.sizes;
    if (c === undefined || sizes === undefined) return undefined;
    const frac = simpleFraction(c, sizes);
    if (frac === undefined) return undefined;
    const ranks = wrongRanks(e);
    return { ranks, text: `rank(s) ${rankList(ranks)} hold ${frac} x the logical value on every element (a ratio of the group sizes ${sorted(sizes.filter((s) => s > 1)).join(', ')}): a sum where an average is due or the reverse, or a scale applied twice or left out` };
  },
};

/** Row-major coordinates of a flat index. */
function coordsOf(flat: number, shape: readonly number[]): number[] {
  const out = new Array<number>(shape.length);
  for (let d = shape.length - 1; d >= 0; d--) {
    out[d] = flat % (shape[d] as number);
    flat = Math.floor(flat / (shape[d] as number));
  }
  return out;
}

/** `T[a:b, c:d]`: the box the sampled indices span, shifted by `delta` along `dim`. */
function region(name: string, idx: Int32Array, shape: readonly number[], dim = -1, delta = 0): string {
  const lo = shape.map(() => Infinity);
  const hi = shape.map(() => -Infinity);
  for (const g of idx) {
    const c = coordsOf(g, shape);
    if (dim >= 0) c[dim] = (c[dim] as number) + delta;
    c.forEach((x, d) => {
      lo[d] = Math.min(lo[d] as number, x);
      hi[d] = Math.max(hi[d] as number, x);
    });
  }
  return shape.length === 0 ? `'${name}'` : `'${name}'[${shape.map((_, d) => `${lo[d]}:${(hi[d] as number) + 1}`).join(', ')}]`;
}

/** The shift along one dim at which the logical tensor holds the holder's values, if any. */
function shiftedMatch(v: TensorValues, h: Holder): { dim: number; delta: number } | undefined {
  const shape = v.plan.logical.shapes[v.logical] ?? [];
  const lv = logicalData(v);
  const strides = shape.map((_, d) => shape.slice(d + 1).reduce((a, b) => a * b, 1));
  const cs = Array.from(h.idx, (g) => coordsOf(g, shape));
  for (let d = 0; d < shape.length; d++) {
    const n = shape[d] as number;
    for (let delta = -(n - 1); delta < n; delta++) {
      if (delta === 0) continue;
      const ok = cs.every((c, f) => {
        const x = (c[d] as number) + delta;
        return x >= 0 && x < n && same(h.values[f] as number, lv[(h.idx[f] as number) + delta * (strides[d] as number)] as number);
      });
      if (ok) return { dim: d, delta };
    }
  }
  return undefined;
}

/** Whether logical tensor `a` is computed, directly or not, into `b`. */
function isAncestor(plan: LoadedPlan, a: number, b: number): boolean {
  const lg = plan.logical;
  const seen = new Set<number>();
  const stack = [b];
  while (stack.length > 0) {
    const t = stack.pop() as number;
    const op = lg.producer[t] as number;
    if (op < 0) continue;
    for (const i of lg.ops.opInputs(op)) {
      if (i === a) return true;
      if (seen.has(i)) continue;
      seen.add(i);
      stack.push(i);
    }
  }
  return false;
}

/** Whether the holder's tensor is what a point-to-point receive wrote on its rank. */
function received(plan: LoadedPlan, h: Holder): boolean {
  const p = plan.programs[plan.rankProgram[h.rank] as number] as Program;
  for (let op = 0; op < p.ops.size; op++) if (p.ops.opOutputs(op).includes(h.local)) return registry.get(p.ops.kind[op] as number).collective?.pattern === 'p2p';
  return false;
}

/** Another logical tensor of the same shape that holds the holder's values at its indices. */
function otherTensorMatch(v: TensorValues, h: Holder): number | undefined {
  const lg = v.plan.logical;
  const shape = (lg.shapes[v.logical] ?? []).join(',');
  for (let t = 0; t < lg.tensors.size; t++) {
    const d = v.both.logical[t];
    if (t === v.logical || d === undefined || (lg.shapes[t] ?? []).join(',') !== shape) continue;
    if (Array.from(h.idx, (g, f) => same(h.values[f] as number, d.data[g] as number)).every(Boolean)) return t;
  }
  return undefined;
}

type MatchKind = 'wrong-slice' | 'stale-value' | 'wrong-send' | 'other-tensor';

/** What a wrong holder's values match, for one kind of match: a key to compare holders by and the sentence. */
function matchOf(v: TensorValues, h: Holder, kind: MatchKind): { key: string; say: (who: string) => string } | undefined {
  const lg = v.plan.logical;
  const tn = lg.tensors.name(v.logical);
  const shape = lg.shapes[v.logical] ?? [];
  if (kind === 'wrong-slice') {
    const s = shiftedMatch(v, h);
    if (s === undefined) return undefined;
    return { key: `${s.dim}:${s.delta}`, say: (who) => `${who} holds another slice of '${tn}' (rank ${h.rank}: ${region(tn, h.idx, shape, s.dim, s.delta)} where its claim is ${region(tn, h.idx, shape)}): a wrong slice or offset (off by ${s.delta} along dim ${s.dim})` };
  }
  const t = otherTensorMatch(v, h);
  if (t === undefined) return undefined;
  const other = lg.tensors.name(t);
  const recv = received(v.plan, h);
  if (kind === 'wrong-send') return recv ? { key: other, say: (who) => `${who}, received from another rank, holds '${other}' where '${tn}' is due: the wrong tensor is sent on that edge` } : undefined;
  if (recv) return undefined;
  const earlier = isAncestor(v.plan, t, v.logical);
  if (kind === 'stale-value' && earlier) return { key: other, say: (who) => `${who} holds '${other}', an earlier value that '${tn}' is computed from: a stale value (an update, a step or a buffer swap not applied)` };
  if (kind === 'other-tensor' && !earlier) return { key: other, say: (who) => `${who} holds the values of '${other}' where '${tn}' is due: the wrong tensor is read (a wrong buffer, micro-batch or operand)` };
  return undefined;
}

/** One rule per kind of value match: the holder's values are another slice, an earlier value, or another tensor. */
function valueMatch(name: MatchKind, cause: string): Rule {
  return {
    name,
    cause,
    test: (e) => {
      const v = e.values;
      if (v === undefined) return undefined;
      // Values all zero match any zero region: the zero rule speaks for them.
      const cands = wrongHolders(v).filter((x) => x.values.some((y) => Math.abs(y) > 1e-12));
      for (const h of cands.slice(0, 4)) {
        const found = matchOf(v, h, name);
        if (found === undefined) continue;
        // Every wrong rank the same match explains is named; the rest are said to differ otherwise.
        const ranks = sorted(cands.slice(0, 64).filter((x) => x === h || matchOf(v, x, name)?.key === found.key).map((x) => x.rank));
        // A match that leaves wrong ranks unexplained is not the cause (a missing sum across
        // stages leaves one side holding an earlier addend): another rule speaks.
        if (wrongRanks(e).some((r) => !ranks.includes(r))) continue;
        const who = `'${h.name}' on rank(s) ${rankList(ranks)}`;
        return { ranks, text: found.say(who) };
      }
      return undefined;
    },
  };
}

const zero: Rule = {
  name: 'zero',
  cause: 'the wrong ranks hold 0 where the logical value is not: a contribution never arrives',
  test: (e) => {
    const v = e.values;
    const xs = v !== undefined && wrongHolders(v).length > 0 ? wrongHolders(v).flatMap((h) => Array.from(h.idx, (g, f) => (same(h.values[f] as number, logicalData(v)[g] as number) ? 0 : (h.values[f] as number)))) : e.witness.filter((m) => m.kind !== 'replica').map((m) => m.parallel);
    if (xs.length === 0 || xs.some((x) => Math.abs(x) > 1e-12)) return undefined;
    const ranks = wrongRanks(e);
    return { ranks, text: `rank(s) ${rankList(ranks)} hold 0 where the logical values are not: a contribution never arrives (a dropped addend or communication, a padding row read)` };
  },
};

const divergence: Rule = {
  name: 'divergence',
  cause: 'ranks that hold the same elements disagree: some hold the logical values, others do not',
  test: (e) => {
    const v = e.values;
    if (v !== undefined) {
      const lv = logicalData(v);
      // Per logical element, which ranks hold it right and which wrong.
      const right = new Map<number, Set<number>>();
      const wrong = new Map<number, Set<number>>();
      for (const h of v.holders) h.idx.forEach((g, f) => {
        const m = same(h.values[f] as number, lv[g] as number) ? right : wrong;
        let s = m.get(g);
        if (s === undefined) m.set(g, (s = new Set()));
        s.add(h.rank);
      });
      const shared = [...wrong.keys()].filter((g) => right.has(g));
      if (shared.length === 0) return undefined;
      const bad = wrongRanks(e);
      const good = sorted(shared.flatMap((g) => [...(right.get(g) as Set<number>)]).filter((r) => !bad.includes(r)));
      if (good.length === 0) return undefined;
      return { ranks: bad, text: `ranks that hold the same elements disagree: rank(s) ${rankList(bad)} hold wrong values where rank(s) ${rankList(good)} hold the logical ones (a replica computed differently: a constant, an op or an input on the wrong ranks)` };
    }
    const rep = e.witness.filter((m) => m.kind === 'replica');
    if (rep.length === 0) return undefined;
    const ranks = sorted(rep.map((m) => m.rank));
    return { ranks, text: `rank(s) ${rankList(ranks)} hold an addend that another rank holds with other values: replicas of one addend diverge` };
  },
};

/** The rules in the order they are tried: the most specific evidence first. */
export const RULES: readonly Rule[] = [
  reduceKind,
  scale,
  valueMatch('wrong-slice', 'a rank holds another slice of the logical tensor (named) than it claims'),
  valueMatch('wrong-send', 'a received tensor holds another logical tensor than the one due: the wrong tensor is sent'),
  valueMatch('stale-value', 'a rank holds an earlier value of the tensor (one it is computed from)'),
  valueMatch('other-tensor', 'a rank holds another logical tensor of the same shape (not an earlier value)'),
  zero,
  missingReduction,
  divergence,
];

/** The diagnosis: the first rule that fits, else 'none' with the facts seen. */
export function diagnose(e: Evidence): Diagnosis {
  for (const r of RULES) {
    const d = r.test(e);
    if (d !== undefined) return { rule: r.name, ...d };
  }
  const ranks = wrongRanks(e);
  const c = constantRatio(e);
  const ratio = c === undefined ? '' : `; parallel = ${fmt(c)} x logical on every element, not a ratio of the group sizes`;
  return { rule: 'none', ranks, text: `no rule fits: rank(s) ${rankList(ranks)} hold values no rule explains (not a missing or wrong reduction, a scale by group sizes, another slice, an earlier or another tensor, nor ranks that disagree)${ratio}` };
}

/**
 * Every rank's values of failing tensors at one draw: evaluated once, on first use, for all the
 * stages of a report.
 */
export function tensorValues(plan: LoadedPlan, seed: number, draw: InputDraw = 'uniform'): (logical: number) => TensorValues {
  let both: BothValues | undefined;
  let byOutput: Map<string, { inst: CollectiveInstance; member: number }> | undefined;
  let groups: number[][] | undefined;
  const setup = (): void => {
    byOutput = new Map();
    const seen = new Map<string, number[]>();
    for (const inst of plan.collectives) {
      inst.group.forEach((r, i) => {
        const o = inst.outputs[i] as number;
        if (o >= 0) byOutput?.set(`${r}:${o}`, { inst, member: i });
      });
      const g = sorted(inst.group);
      if (g.length >= 2) seen.set(g.join(','), g);
    }
    groups = [...seen.values()];
  };
  return (logical) => {
    both ??= evaluateBoth(plan, seed, draw);
    if (byOutput === undefined) setup();
    const b = both;
    const lv = (b.logical[logical] as Dense<number>).data;
    const holders: Holder[] = [];
    for (let r = 0; r < plan.mesh.size; r++) {
      const p = plan.programs[plan.rankProgram[r] as number] as Program;
      for (let t = 0; t < p.tensors.size; t++) {
        if (p.lineage[t]?.logical !== logical) continue;
        const nf = b.lineageOf(r, t);
        const val = (b.parallel[r] as (Dense<number> | undefined)[])[t];
        if (nf === undefined || val === undefined || nf.value.n !== 1 || nf.value.divisor !== 1) continue;
        const at = logicalIndexer(nf, plan.logical.shapes[logical] ?? []);
        const n = Math.min(SAMPLE, val.data.length);
        const idx = Int32Array.from({ length: n }, (_, f) => at(f));
        const values = Float64Array.from({ length: n }, (_, f) => val.data[f] as number);
        const wrong = values.reduce((a, x, f) => a + (differs(x, lv[idx[f] as number] as number) ? 1 : 0), 0);
        holders.push({ rank: r, local: t, name: p.tensors.name(t), idx, values, wrong });
      }
    }
    const sizes = sorted([...plan.mesh.sizes, ...(groups ?? []).map((g) => g.length)]);
    return { plan, both: b, logical, holders, groups: groups ?? [], sizes, collectiveOf: (r, t) => byOutput?.get(`${r}:${t}`) };
  };
}
