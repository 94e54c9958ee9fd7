/**
 * Periodic witnesses of parts (docs/engine.md, "Periodic witnesses").
 *
 * A part whose ranks hold consecutive blocks of one dim class (L1's loss: 512 ranks, 128 rows
 * each of 65,536) cannot be boxed when its logical side reduces over that class (a mean over
 * rows), and may be far too large to evaluate. For a witness a smaller part serves: draw every
 * logical input periodic along the class, its period a block. Then every rank whose program and
 * claims are those of another rank moved by whole periods computes that rank's values, an
 * all-reduce among such ranks is a multiple of one contribution, an addend group of them is a
 * multiple of one addend, and the logical side, op by op, computes either one period of a
 * periodic tensor (an op SIMD along the class) or, where it reduces over the class, a multiple
 * (a plain sum: the number of periods), the same value (a max, a min) or, through the op's own
 * rescaling identity, a multiple of a sum (a mean). An op with no such rule, a claim that does
 * not sit inside one period, a collective or addend group whose members are not copies of one
 * another, and the route does not apply. The part at one period is a witness only: a
 * difference there, with its inputs repeated over the periods, is a difference of the part at
 * full size; a proof there proves nothing and is never used.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { RawDimIndex, RawLineage, RawOp, RawParallelOp, RawParallelTensor, RawPlan } from '../../plans/raw.js';
import { registry } from '../../ops/registry.js';
import type { AttrValue, DimSig, Shape } from '../../ops/types.js';
import type { ProvePart } from '../decompose/prove.js';
import { closure, PartError, provePartOf, type PartRewrite } from './part.js';
import { dimClasses } from './dim-classes.js';

/** Milliseconds the exact engine may take on the periodic part before the numeric run looks for the witness. */
const PERIODIC_EXACT_MS = 5_000;
/** The exact engine's work budget there (a witness only: the numeric run on two draws follows). */
const PERIODIC_TERM_BUDGET = 100_000;

const gcd = (a: bigint, b: bigint): bigint => {
  a = a < 0n ? -a : a;
  b = b < 0n ? -b : b;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
};

/** `k` times a rational attribute ("p/q" or a number given as an integer), as "p/q"; undefined if not exact. */
function times(k: number, factor: string | number): string | undefined {
  const m = /^(-?[0-9]+)(?:\/([0-9]+))?$/.exec(String(factor));
  if (m === null) return undefined;
  let p = BigInt(m[1] as string) * BigInt(k);
  let q = BigInt(m[2] ?? '1');
  if (q === 0n) return undefined;
  const g = gcd(p, q);
  if (g > 1n) [p, q] = [p / g, q / g];
  return q === 1n ? `${p}` : `${p}/${q}`;
}

/** Integer or boolean dtypes: no scale is written on them. */
const integral = (dtype: string | undefined): boolean => dtype !== undefined && /^(u?int|bool)/.test(dtype);

/** What each logical op becomes at one period: kept as is, or followed by scales of some outputs (maybe rewritten first). */
interface OpRule {
  readonly scale: ReadonlyMap<number, string>;
  readonly op?: string;
  readonly attrs?: Record<string, AttrValue>;
}

interface ClassInfo {
  readonly size: number;
  /** Logical tensor index -> its one dim in the class. */
  readonly dims: Map<number, number>;
}

/**
 * The part at one period of some dim class of its logical side, its inputs repeated over the
 * periods, with one rank per class of ranks that are copies of one another; or why not.
 * `target`: the stage's logical tensor (the part's obligations).
 */
export function periodicPart(pr: RawPlan, target: string): PartRewrite | string {
  // Dim classes of the logical side (dims sharing a label in some op), as box.ts finds them.
  const dc = dimClasses(pr);
  if (typeof dc === 'string') return dc === 'the part does not load' ? 'the part does not load for the periodic route' : dc;
  const { part, base, find, sigs } = dc;
  const lg = part.logical;
  const classes = new Map<number, ClassInfo>();
  const twice = new Set<number>();
  for (let t = 0; t < lg.tensors.size; t++) {
    (lg.shapes[t] ?? []).forEach((size, d) => {
      const k = find((base[t] as number) + d);
      let c = classes.get(k);
      if (c === undefined) classes.set(k, (c = { size, dims: new Map() }));
      if (c.dims.has(t)) twice.add(k);
      c.dims.set(t, d);
    });
  }
  const names = new Map<string, number>();
  for (let t = 0; t < lg.tensors.size; t++) names.set(lg.tensors.name(t), t);
  const whys: string[] = [];
  // Classes with the most periods first: the one that shrinks the part most.
  const tries: { root: number; c: ClassInfo; p: number }[] = [];
  for (const [root, c] of classes) {
    if (twice.has(root) || c.size < 2) continue;
    const p = periodOf(pr, names, c);
    if (typeof p === 'string') {
      whys.push(p);
      continue;
    }
    if (c.size / p >= 2) tries.push({ root, c, p });
  }
  tries.sort((a, b) => b.c.size / b.p - a.c.size / a.p);
  for (const { c, p } of tries) {
    const rules = opRules(part, sigs, c, c.size / p);
    if (typeof rules === 'string') {
      whys.push(rules);
      continue;
    }
    const out = rewrite(pr, part, names, target, c, p, rules);
    if (typeof out === 'string') {
      whys.push(out);
      continue;
    }
    return out;
  }
  return tries.length === 0 && whys.length === 0 ? 'no dim class whose claims sit in blocks of a period' : whys.slice(0, 3).join('; ');
}

/** The period along class `c`: the gcd of its size and every claim's bounds, when every claim holds one block of it at most. */
function periodOf(pr: RawPlan, names: ReadonlyMap<string, number>, c: ClassInfo): number | string {
  let g = c.size;
  const gcdN = (a: number, b: number): number => (b === 0 ? a : gcdN(b, a % b));
  const ranges: [number, number][] = [];
  for (const prog of pr.parallel.programs) {
    for (const t of prog.tensors ?? []) {
      const lin = t.lineage;
      if (lin === undefined) continue;
      const l = names.get(lin.logical);
      if (l === undefined) continue;
      const d = c.dims.get(l);
      if (d === undefined) continue;
      if (!('index' in lin)) return `'${t.id}' is claimed by placements`;
      const r = plainRange(lin.index?.[d], c.size);
      if (r === undefined) return `'${t.id}' holds no plain range of a dim`;
      ranges.push(r);
      g = gcdN(g, gcdN(r[0], r[1]));
    }
  }
  if (ranges.length === 0) return 'no claim along the class';
  for (const [lo, hi] of ranges) if (hi - lo > g) return `a claim holds ${hi - lo} positions of a dim of ${c.size} whose blocks are ${g}`;
  return g;
}

function plainRange(e: RawDimIndex | undefined, size: number): [number, number] | undefined {
  if (e === undefined || e === '*') return [0, size];
  if (Array.isArray(e) && e.length === 2 && typeof e[0] === 'number' && typeof e[1] === 'number') return [e[0], e[1]];
  return undefined;
}

/**
 * Per logical op, what it is at one period of class `c` (k periods in all), or why there is no
 * periodic rule. The rules read the ops' own declarations (OpDef.dims): a dim labelled `batch`
 * on every input and output (SIMD: output position i from input position i by one rule, so a
 * periodic input gives a periodic output, and one period of it from one period of the input);
 * a label the op sums plainly (DimSig.sums: each output lacking it is a sum of per-position
 * terms, so k times the sum over one period); one it max-reduces plainly (DimSig.maxes: the
 * max over repeated values is the max over one period); else the op's rescaling identity
 * (OpDef.rescale: a mean over N rows is 1/N times their plain sum), at the full shapes.
 */
function opRules(part: LoadedPlan, sigs: ReadonlyMap<number, DimSig>, c: ClassInfo, k: number): Map<number, OpRule> | string {
  const lg = part.logical;
  const rules = new Map<number, OpRule>();
  for (const op of lg.order) {
    const def = registry.get(lg.ops.kind[op] as number);
    const ins = [...lg.ops.opInputs(op)];
    const outs = [...lg.ops.opOutputs(op)];
    const sig = sigs.get(op) as DimSig;
    const what = `'${lg.ops.ids.name(op)}' (${def.name})`;
    const labelsIn = (s: DimSig): Set<string> | string => {
      const ls = new Set<string>();
      const visit = (ts: readonly number[], labels: DimSig['inputs']): void =>
        ts.forEach((t, i) => {
          const d = c.dims.get(t);
          const lab = d === undefined ? undefined : labels[i]?.[d];
          if (lab !== undefined) ls.add(lab.label);
        });
      visit(ins, s.inputs);
      visit(outs, s.outputs);
      if (ls.size > 1) return `${what} gives the class two labels`;
      const values = new Set([...Object.values(s.inputValues ?? {}), ...Object.values(s.outputValues ?? {})].map((x) => x.label));
      for (const x of ls) if (values.has(x)) return `${what} indexes the class by values`;
      return ls;
    };
    const ls = labelsIn(sig);
    if (typeof ls === 'string') return ls;
    const label = [...ls][0];
    if (label === undefined) continue;
    const roles = [...sig.inputs, ...sig.outputs].flat().filter((x) => x.label === label).map((x) => x.role);
    const lacking = outs.map((t, i) => ((sig.outputs[i] ?? []).some((x) => x.label === label) ? -1 : t)).filter((t) => t >= 0);
    const dtypeOk = (ts: readonly number[]): boolean => ts.every((t) => !integral(lg.dtypes[t]));
    if (roles.every((r) => r === 'batch') && lacking.length === 0) continue;
    // A size or position along the class spelled by an attribute or entering the values (mean's
    // 1/n): only the rescaling identity below may remove it.
    const fixed = roles.includes('fixed');
    if (!fixed && sig.sums?.includes(label) === true) {
      if (!dtypeOk(lacking)) return `${what} sums integers over the class`;
      rules.set(op, { scale: new Map(lacking.map((t) => [t, `${k}`])) });
      continue;
    }
    if (!fixed && sig.maxes?.includes(label) === true) continue;
    const inShapes: Shape[] = ins.map((t) => lg.shapes[t] ?? []);
    const re = def.rescale?.(inShapes, lg.attrs[op] ?? {}, ins.map((t) => lg.domains[t]));
    if (re !== undefined) {
      const bid = registry.id(re.op ?? def.name);
      if (bid < 0) return `${what} rescales to an unknown op`;
      let s2: DimSig;
      try {
        s2 = registry.get(bid).dims(inShapes, re.attrs);
      } catch {
        return `${what}'s rescaled op has no dim labels`;
      }
      const l2 = labelsIn(s2);
      if (typeof l2 === 'string') return l2;
      const lab2 = [...l2][0];
      const allLack = outs.every((_, i) => !(s2.outputs[i] ?? []).some((x) => x.label === lab2));
      const f = times(k, String(re.factor));
      const fixed2 = [...s2.inputs, ...s2.outputs].flat().some((x) => x.label === lab2 && x.role === 'fixed');
      if (lab2 !== undefined && !fixed2 && s2.sums?.includes(lab2) === true && allLack && f !== undefined && dtypeOk(outs)) {
        rules.set(op, { scale: new Map(outs.map((t) => [t, f])), op: registry.get(bid).name, attrs: structuredClone(re.attrs) as Record<string, AttrValue> });
        continue;
      }
    }
    return `${what} has no periodic rule along the class (neither SIMD, a plain sum or max, nor a rescaled sum)`;
  }
  return rules;
}

/** The part at one period: logical side by `rules`, one rank per class of copies; or why not. */
function rewrite(pr: RawPlan, part: LoadedPlan, names: ReadonlyMap<string, number>, target: string, c: ClassInfo, p: number, rules: ReadonlyMap<number, OpRule>): PartRewrite | string {
  const lg = part.logical;
  const k = c.size / p;
  const out = structuredClone(pr);
  const taken = new Set<string>([...out.logical.tensors.map((t) => t.id), ...out.logical.ops.map((o) => o.id)]);
  const fresh = (b: string): string => {
    let x = b;
    for (let i = 1; taken.has(x); i++) x = `${b}#${i}`;
    taken.add(x);
    return x;
  };
  for (const t of out.logical.tensors) {
    const l = names.get(t.id);
    const d = l === undefined ? undefined : c.dims.get(l);
    if (d !== undefined) t.shape = t.shape.map((s, i) => (i === d ? p : s));
  }
  const byName = new Map(out.logical.tensors.map((t) => [t.id, t]));
  const ops: RawOp[] = [];
  for (const o of out.logical.ops) {
    const rule = rules.get(lg.ops.ids.id(o.id));
    if (rule === undefined) {
      ops.push(o);
      continue;
    }
    if (rule.op !== undefined) o.op = rule.op;
    if (rule.attrs !== undefined) o.attrs = rule.attrs;
    const after: RawOp[] = [];
    o.outputs = o.outputs.map((y) => {
      const f = rule.scale.get(names.get(y) ?? -1);
      if (f === undefined) return y;
      const src = byName.get(y);
      const z = fresh(`${y}@period`);
      out.logical.tensors.push({ id: z, shape: [...(src?.shape ?? [])], role: 'activation', ...(src?.dtype === undefined ? {} : { dtype: src.dtype }) });
      after.push({ id: fresh(`periodic/${y}`), op: 'scale', inputs: [z], outputs: [y], attrs: { factor: f } });
      return z;
    });
    ops.push(o, ...after);
  }
  out.logical.ops = ops;
  // The parallel side: each rank's claims moved into the first period; ranks whose programs are
  // then the same (addend chunks and group lists aside) compute the same values.
  const progs = out.parallel.programs;
  const produced = progs.map((pg) => new Set(pg.ops.flatMap((o) => o.outputs)));
  const sigOf: string[] = [];
  for (const [i, pg] of progs.entries()) {
    for (const t of pg.tensors ?? []) {
      const lin = t.lineage;
      if (lin === undefined || !('index' in lin)) continue;
      const l = names.get(lin.logical);
      const d = l === undefined ? undefined : c.dims.get(l);
      if (d !== undefined) {
        const r = plainRange(lin.index?.[d], c.size) as [number, number];
        const b = Math.floor(r[0] / p) * p;
        if (r[1] - b > p) return `'${t.id}' on rank ${i} crosses a period`;
        const index = [...(lin.index ?? lg.shapes[l as number]?.map((): RawDimIndex => '*') ?? [])];
        index[d] = [r[0] - b, r[1] - b];
        lin.index = index;
      }
      if (lin.value !== undefined && (lin.logical !== target || !produced[i]?.has(t.id))) return `'${t.id}' on rank ${i} is an addend input (its split is not periodic)`;
    }
    for (const o of pg.ops) {
      const def = registry.get(registry.id(o.op));
      if (o.peer !== undefined) return `'${o.id}' sends or receives`;
      if (def.collective === undefined) continue;
      if (def.name !== 'all_reduce' || !['sum', 'avg', 'max', 'min'].includes(String(o.attrs?.['reduce']))) return `'${o.id}' (${def.name}) has no periodic rule`;
    }
    const strip = (lin: RawLineage | undefined): unknown => (lin === undefined || !('index' in lin) ? lin : { ...lin, value: lin.value === undefined ? undefined : { ...(lin.value as object), chunk: 0 } });
    sigOf.push(JSON.stringify({ ops: pg.ops.map((o) => ({ ...o, group: undefined, loc: undefined })), tensors: (pg.tensors ?? []).map((t) => ({ ...t, lineage: strip(t.lineage), loc: undefined })) }));
  }
  const classOf: number[] = [];
  const reps: number[] = [];
  const first = new Map<string, number>();
  sigOf.forEach((s, i) => {
    let cl = first.get(s);
    if (cl === undefined) {
      first.set(s, (cl = reps.length));
      reps.push(i);
    }
    classOf.push(cl);
  });
  // An all-reduce among copies: k identical contributions (sum: m times one; avg, max, min: one).
  const groupScale = new Map<string, string>();
  for (const [i, pg] of progs.entries()) {
    for (const o of pg.ops) {
      if (registry.get(registry.id(o.op)).collective === undefined) continue;
      const g = o.group;
      if (!Array.isArray(g) || !g.every((m) => typeof m === 'number')) return `'${o.id}' has no rank list`;
      if (!g.every((m) => classOf[m as number] === classOf[i])) return `'${o.id}' on rank ${i} reduces over ranks that are not copies of one another`;
      groupScale.set(`${i}:${o.id}`, o.attrs?.['reduce'] === 'sum' ? `${g.length}` : '1');
    }
  }
  // Addend obligations: per group (same claim apart from the chunk), each class's count; every
  // chunk present once. Groups that land on the same claim at one period must agree on counts.
  const groups = new Map<string, { of: number; chunks: Set<number>; count: Map<number, number>; moved: string }>();
  for (const [i, pg] of progs.entries()) {
    for (const t of pg.tensors ?? []) {
      const lin = t.lineage;
      if (lin === undefined || !('index' in lin) || lin.logical !== target || lin.value === undefined) continue;
      const v = lin.value;
      if (Array.isArray(v) || v.reduce !== undefined || v.divisor !== undefined || v.split !== undefined || typeof v.chunk !== 'number') return `'${t.id}' is an addend of another kind than a plain sum`;
      const orig = pr.parallel.programs[i]?.tensors?.find((x) => x.id === t.id)?.lineage;
      const key = JSON.stringify([orig !== undefined && 'index' in orig ? orig.index : undefined, v.of]);
      let gr = groups.get(key);
      if (gr === undefined) groups.set(key, (gr = { of: v.of, chunks: new Set(), count: new Map(), moved: JSON.stringify([lin.index, v.of]) }));
      if (gr.chunks.has(v.chunk)) return `addend ${v.chunk} of '${target}' is held twice`;
      gr.chunks.add(v.chunk);
      gr.count.set(classOf[i] as number, (gr.count.get(classOf[i] as number) ?? 0) + 1);
    }
  }
  const counts = new Map<string, Map<number, number>>();
  for (const gr of groups.values()) {
    if (gr.chunks.size !== gr.of) return `an addend group of '${target}' has ${gr.chunks.size} of its ${gr.of} holders in the part`;
    const had = counts.get(gr.moved);
    if (had === undefined) counts.set(gr.moved, gr.count);
    else if (JSON.stringify([...had].sort()) !== JSON.stringify([...gr.count].sort())) return `addend groups of '${target}' land on one claim with other copies`;
  }
  let obligations = 0;
  const programs = reps.map((i, j) => {
    const pg = structuredClone(progs[i]) as (typeof progs)[number];
    pg.ranks = [j];
    const tensors = pg.tensors ?? [];
    const tnames = new Set(tensors.map((t) => t.id));
    const tfresh = (b: string): string => {
      let x = b;
      for (let q = 1; tnames.has(x); q++) x = `${b}#${q}`;
      tnames.add(x);
      return x;
    };
    const ops: RawParallelOp[] = pg.ops.map((o) => {
      const f = groupScale.get(`${i}:${o.id}`);
      if (f === undefined) return o;
      return { id: o.id, op: 'scale', inputs: [o.inputs[0] as string], outputs: [...o.outputs], attrs: { factor: f } };
    });
    const extra: RawParallelTensor[] = [];
    for (const t of tensors) {
      const lin = t.lineage;
      if (lin === undefined || !('index' in lin) || lin.logical !== target) continue;
      if (produced[i]?.has(t.id) === true) obligations++;
      if (lin.value === undefined) continue;
      const cnt = counts.get(JSON.stringify([lin.index, (lin.value as { of: number }).of])) as Map<number, number>;
      const present = [...cnt.keys()].sort((a, b) => a - b);
      const mine = cnt.get(j) ?? 0;
      const z = tfresh(`${t.id}@periodic`);
      extra.push({ id: z, shape: [...t.shape], ...(t.dtype === undefined ? {} : { dtype: t.dtype }), lineage: present.length === 1 ? { logical: lin.logical, index: lin.index ?? [] } : { logical: lin.logical, index: lin.index ?? [], value: { chunk: present.indexOf(j), of: present.length } } });
      ops.push({ id: tfresh(`periodic/${t.id}`), op: 'scale', inputs: [t.id], outputs: [z], attrs: { factor: `${mine}` } });
      delete t.lineage;
    }
    pg.tensors = [...tensors, ...extra];
    pg.ops = ops;
    return pg;
  });
  out.parallel.programs = programs;
  out.mesh = { axes: [{ name: 'part', size: programs.length }] };
  const cls = [...c.dims].slice(0, 2).map(([l, d]) => `'${lg.tensors.name(l)}' dim ${d}`).join(', ');
  const note = `periodic witness (docs/engine.md, "Periodic witnesses"): the inputs repeat every ${p} positions of the dim class of ${cls} (${k} periods of ${c.size}); the ${progs.length} rank(s) are copies of ${reps.length} (ranks kept: ${reps.slice(0, 6).join(', ')}${reps.length > 6 ? ', ...' : ''}), witness values at one period's shapes`;
  return { raw: out, kept: reps, obligations, note };
}

/**
 * The obligation of `tensor` on `rank` refuted, when it can be, on its part at one period
 * (periodicPart); a part that is not refuted there stays open with the reason (never a proof).
 */
export const provePartPeriodic: ProvePart = (plan, raw, stage, rank, tensor, seed) => {
  try {
    const target = plan.logical.tensors.name(stage.logical);
    const c = closure(plan, stage.logical, rank, tensor);
    const r = provePartOf(plan, raw, stage, rank, c, seed, { termBudget: PERIODIC_TERM_BUDGET, exactMs: PERIODIC_EXACT_MS }, undefined, (pr) => periodicPart(pr, target));
    if ('why' in r) return { why: `periodic: ${r.why}` };
    if (r.result.status !== 'differs' || r.witness.length === 0) return { why: `periodic: ${r.result.status} at one period (a witness only; ${(r.result.reason ?? '').slice(0, 200)})` };
    // The claim a kept rank makes for its addend group is written on a new tensor: name the rank's own.
    return { ...r, witness: r.witness.map((m) => ({ ...m, tensor: m.tensor.replace(/@periodic(#\d+)?$/, '') })) };
  } catch (e) {
    if (e instanceof PartError) return { why: `periodic: ${e.message}` };
    throw e;
  }
};
