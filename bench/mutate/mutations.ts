/**
 * Semantic mutations of a plan's parallel graph and equivalence-preserving rewrites, on the
 * plan as written (JSON). Each mutation changes one thing; whether it changes what the plan
 * computes is for the ground truth (truth.ts) to say, never assumed here (an operand swap of
 * an add is neutral, a moved claim onto an equal tensor too).
 */
import type { LoadedPlan } from '../../lineage/load.js';
import { qParse } from '../../ops/rational.js';

export type Json = Record<string, unknown>;
type Op = Json & { id: string; op: string; inputs?: unknown; outputs?: unknown; attrs?: Json; group?: unknown; peer?: unknown };
type Tensor = Json & { id: string; shape: unknown; lineage?: Json };
type ProgramJ = Json & { name?: string; ranks: unknown; tensors: Tensor[]; ops: Op[] };

export const MUTATION_KINDS = ['reduce-op', 'group-axes', 'source-peer', 'operand-swap', 'attr-all-ranks', 'attr-one-rank', 'slice-offset', 'input-replace', 'logical-input-replace', 'collective-bypass', 'send-recv-swap', 'lineage-move'] as const;
export type MutationKind = (typeof MUTATION_KINDS)[number];
export const REWRITE_KINDS = ['swap-collectives', 'reorder-local', 'split-concat', 'allreduce-rs-ag'] as const;
export type RewriteKind = (typeof REWRITE_KINDS)[number];

/** A seeded generator (mulberry32) with the picks the mutations need. */
export class Rng {
  private a: number;
  constructor(seed: number) {
    this.a = seed >>> 0;
  }
  next(): number {
    this.a = (this.a + 0x6d2b79f5) >>> 0;
    let t = this.a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(xs: readonly T[]): T | undefined {
    return xs.length === 0 ? undefined : xs[this.int(xs.length)];
  }
}

const GROUP_OPS = new Set(['all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all', 'broadcast']);
const COMM_OPS = new Set([...GROUP_OPS, 'send', 'recv', 'send_recv']);
/** Ops whose operands commute: swapping them is not the mutation the issue asks for. */
const COMMUTATIVE = new Set(['add', 'mul', 'maximum', 'minimum']);
const REDUCES = ['sum', 'avg', 'max', 'min'];

const programs = (p: Json): ProgramJ[] => ((p['parallel'] as Json)['programs'] as ProgramJ[] | undefined) ?? [];
const multiRank = (p: Json): Op[] => ((p['parallel'] as Json)['collectives'] as Op[] | undefined) ?? [];
const strs = (x: unknown): string[] => (Array.isArray(x) ? x.filter((v): v is string => typeof v === 'string') : []);
const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
const numericShape = (s: unknown): number[] | undefined => (Array.isArray(s) && s.every((d) => typeof d === 'number') ? (s as number[]) : undefined);

interface Site {
  prog: ProgramJ;
  pi: number;
  op: Op;
  oi: number;
}
function localSites(p: Json, f: (o: Op) => boolean): Site[] {
  const out: Site[] = [];
  programs(p).forEach((prog, pi) => prog.ops.forEach((op, oi) => f(op) && out.push({ prog, pi, op, oi })));
  return out;
}

/** `rank`-dependent integer expression or number plus k. */
function shiftExpr(v: unknown, k: number): unknown {
  if (typeof v === 'number') return v + k;
  if (v !== null && typeof v === 'object' && typeof (v as Json)['expr'] === 'string') return { expr: `(${String((v as Json)['expr'])}) + ${k}` };
  return undefined;
}

/** Ranks that run program `pi` (the loader's assignment). */
function ranksOf(base: LoadedPlan, pi: number): number[] {
  const out: number[] = [];
  base.rankProgram.forEach((p, r) => p === pi && out.push(r));
  return out;
}

/** Splits program `pi` so that rank `r` runs its own copy; returns the copy. */
function splitProgram(p: Json, base: LoadedPlan, pi: number, r: number): ProgramJ | undefined {
  const ranks = ranksOf(base, pi);
  if (ranks.length < 2) return programs(p)[pi];
  const orig = programs(p)[pi] as ProgramJ;
  const copy = JSON.parse(JSON.stringify(orig)) as ProgramJ;
  copy.ranks = [r];
  if (copy.name !== undefined) copy.name = `${copy.name}@rank${r}`;
  orig.ranks = ranks.filter((x) => x !== r);
  programs(p).push(copy);
  return copy;
}

/** Numeric attributes of an op: [key, new value] candidates. */
function attrChanges(op: Op, rng: Rng): [string, unknown][] {
  const out: [string, unknown][] = [];
  for (const [k, v] of Object.entries(op.attrs ?? {})) {
    if (typeof v === 'number') out.push([k, Number.isInteger(v) ? v + (rng.int(2) === 0 ? 1 : -1) : v * 2]);
    else if (typeof v === 'string' && /^-?\d+(\/\d+)?$/.test(v)) {
      const q = qParse(v);
      const c = rng.int(3);
      out.push([k, c === 0 ? `${q.n * 2n}/${q.d}` : c === 1 ? `${q.n + q.d}/${q.d}` : `${-q.n}/${q.d}`]);
    } else if (v !== null && typeof v === 'object' && typeof (v as Json)['expr'] === 'string') out.push([k, shiftExpr(v, 1)]);
  }
  return out;
}

/**
 * Applies one random mutation of `kind` to `p` (in place); returns what it did, or undefined
 * when the plan has no site for it. `base` is the loaded original (program ranks, groups).
 */
export function mutate(p: Json, kind: MutationKind, rng: Rng, base: LoadedPlan): string | undefined {
  const meshAxes = (((p['mesh'] as Json)['axes'] as Json[]) ?? []).map((a) => ({ name: String(a['name']), size: Number(a['size']) }));
  switch (kind) {
    case 'reduce-op': {
      const sites: Op[] = [...localSites(p, (o) => GROUP_OPS.has(o.op) && typeof o.attrs?.['reduce'] === 'string').map((s) => s.op), ...multiRank(p).filter((o) => typeof o.attrs?.['reduce'] === 'string')];
      const op = rng.pick(sites);
      if (op === undefined) return undefined;
      const old = String(op.attrs?.['reduce']);
      const now = rng.pick(REDUCES.filter((x) => x !== old)) as string;
      (op.attrs as Json)['reduce'] = now;
      return `${op.id}: reduce ${old} -> ${now}`;
    }
    case 'group-axes': {
      const sites = [...localSites(p, (o) => GROUP_OPS.has(o.op)).map((s) => s.op), ...multiRank(p)].filter((o) => o.group !== null && typeof o.group === 'object' && Array.isArray((o.group as Json)['axes']));
      const op = rng.pick(sites);
      if (op === undefined) return undefined;
      const old = strs((op.group as Json)['axes']);
      const subsets: string[][] = [];
      const axes = meshAxes.filter((a) => a.size > 1).map((a) => a.name);
      for (let m = 1; m < 1 << axes.length; m++) {
        const s = axes.filter((_, i) => (m >> i) & 1);
        if (!same([...s].sort(), [...old].sort())) subsets.push(s);
      }
      const now = rng.pick(subsets);
      if (now === undefined) return undefined;
      (op.group as Json)['axes'] = now;
      return `${op.id}: group axes [${old.join(',')}] -> [${now.join(',')}]`;
    }
    case 'source-peer': {
      const sites = [...localSites(p, (o) => ((o.op === 'send' || o.op === 'recv') && o.peer !== undefined) || (o.op === 'broadcast' && o.attrs?.['src'] !== undefined)).map((s) => s.op), ...multiRank(p).filter((o) => o.op === 'broadcast' || o.op === 'send_recv')];
      const op = rng.pick(sites);
      if (op === undefined) return undefined;
      const size = base.mesh.size;
      if (op.op === 'broadcast') {
        const old = op.attrs?.['src'];
        const now = typeof old === 'number' ? (old + 1 + rng.int(Math.max(1, size - 1))) % size : shiftExpr(old, 1);
        (op.attrs as Json)['src'] = now;
        return `${op.id}: broadcast src ${JSON.stringify(old)} -> ${JSON.stringify(now)}`;
      }
      if (op.op === 'send_recv') {
        const key = rng.int(2) === 0 ? 'src' : 'dst';
        const old = Number(op[key]);
        op[key] = (old + 1 + rng.int(Math.max(1, size - 1))) % size;
        return `${op.id}: ${key} ${old} -> ${String(op[key])}`;
      }
      const old = op.peer;
      let now: unknown;
      if (typeof old === 'number') now = (old + 1 + rng.int(Math.max(1, size - 1))) % size;
      else if (old !== null && typeof old === 'object' && (old as Json)['shift'] !== undefined) {
        const sh = { ...((old as Json)['shift'] as Record<string, number>) };
        const ax = rng.pick(meshAxes.filter((a) => a.size > 1));
        if (ax === undefined) return undefined;
        sh[ax.name] = (sh[ax.name] ?? 0) + (rng.int(2) === 0 ? 1 : -1);
        if (sh[ax.name] === 0) delete sh[ax.name];
        now = { shift: sh };
      } else now = shiftExpr(old, 1 + rng.int(Math.max(1, size - 1)));
      op.peer = now;
      return `${op.id}: peer ${JSON.stringify(old)} -> ${JSON.stringify(now)}`;
    }
    case 'operand-swap': {
      const sites = localSites(p, (o) => !COMM_OPS.has(o.op) && !COMMUTATIVE.has(o.op) && strs(o.inputs).length >= 2 && new Set(strs(o.inputs)).size >= 2);
      const s = rng.pick(sites);
      if (s === undefined) return undefined;
      const ins = strs(s.op.inputs);
      const i = rng.int(ins.length);
      const js = ins.map((_, j) => j).filter((j) => ins[j] !== ins[i]);
      const j = rng.pick(js) as number;
      [ins[i], ins[j]] = [ins[j] as string, ins[i] as string];
      s.op.inputs = ins;
      return `${s.prog.name ?? s.pi}/${s.op.id} (${s.op.op}): inputs ${i} and ${j} swapped`;
    }
    case 'attr-all-ranks':
    case 'attr-one-rank': {
      const sites = localSites(p, (o) => !COMM_OPS.has(o.op) && attrChanges(o, rng).length > 0);
      // Value-like attributes (rationals: learning rate, eps, scales) first, most of the time.
      const valueLike = sites.filter((s) => Object.values(s.op.attrs ?? {}).some((v) => typeof v === 'string' && /^-?\d+(\/\d+)?$/.test(v)));
      const s = rng.pick(valueLike.length > 0 && rng.next() < 0.7 ? valueLike : sites);
      if (s === undefined) return undefined;
      let op = s.op;
      let who = 'all ranks';
      if (kind === 'attr-one-rank') {
        const r = rng.pick(ranksOf(base, s.pi)) as number;
        const copy = splitProgram(p, base, s.pi, r);
        if (copy === undefined) return undefined;
        op = copy.ops[s.oi] as Op;
        who = `rank ${r}`;
      }
      const [k, v] = rng.pick(attrChanges(op, rng)) as [string, unknown];
      const old = (op.attrs as Json)[k];
      (op.attrs as Json)[k] = v;
      return `${op.id} (${op.op}) on ${who}: ${k} ${JSON.stringify(old)} -> ${JSON.stringify(v)}`;
    }
    case 'slice-offset': {
      const s = rng.pick(localSites(p, (o) => o.op === 'slice' || o.op === 'narrow'));
      if (s === undefined) return undefined;
      const a = s.op.attrs as Json;
      const st = a['start'];
      const en = a['end'];
      const k = rng.pick([1, -1, 2, -2]) as number;
      a['start'] = shiftExpr(st, k);
      a['end'] = shiftExpr(en, k);
      return `${s.op.id}: slice [${JSON.stringify(st)}, ${JSON.stringify(en)}) shifted by ${k}`;
    }
    case 'input-replace': {
      const s = rng.pick(localSites(p, (o) => !COMM_OPS.has(o.op) && strs(o.inputs).length > 0));
      if (s === undefined) return undefined;
      const ins = strs(s.op.inputs);
      const i = rng.int(ins.length);
      const shapeOf = new Map(s.prog.tensors.map((t) => [t.id, JSON.stringify(t.shape)]));
      const outs = new Set(strs(s.op.outputs));
      const cands = s.prog.tensors.filter((t) => t.id !== ins[i] && !outs.has(t.id) && JSON.stringify(t.shape) === shapeOf.get(ins[i] as string)).map((t) => t.id);
      const now = rng.pick(cands);
      if (now === undefined) return undefined;
      const old = ins[i] as string;
      ins[i] = now;
      s.op.inputs = ins;
      return `${s.prog.name ?? s.pi}/${s.op.id} (${s.op.op}): input ${i} '${old}' -> '${now}'`;
    }
    case 'logical-input-replace': {
      // One-sided: the single-device model changes, the parallel program does not.
      const lg = p['logical'] as Json & { tensors: Tensor[]; ops: Op[] };
      const ops = lg.ops.filter((o) => strs(o.inputs).length > 0);
      const op = rng.pick(ops);
      if (op === undefined) return undefined;
      const ins = strs(op.inputs);
      const i = rng.int(ins.length);
      const shapeOf = new Map(lg.tensors.map((t) => [t.id, JSON.stringify(t.shape)]));
      const dtypeOf = new Map(lg.tensors.map((t) => [t.id, String(t['dtype'] ?? 'float')]));
      // Tensors defined before the op (no cycle) with the same shape and dtype.
      const produced = new Set(lg.ops.flatMap((o) => strs(o.outputs)));
      const before = new Set(lg.tensors.filter((t) => !produced.has(t.id)).map((t) => t.id));
      for (const o of lg.ops) {
        if (o === op) break;
        for (const t of strs(o.outputs)) before.add(t);
      }
      const old = ins[i] as string;
      const cands = [...before].filter((t) => t !== old && shapeOf.get(t) === shapeOf.get(old) && dtypeOf.get(t) === dtypeOf.get(old));
      const now = rng.pick(cands);
      if (now === undefined) return undefined;
      ins[i] = now;
      op.inputs = ins;
      return `logical/${op.id} (${op.op}): input ${i} '${old}' -> '${now}'`;
    }
    case 'collective-bypass': {
      const sites = localSites(p, (o) => (o.op === 'all_reduce' || (o.op === 'broadcast' && strs(o.inputs).length === 1)) && strs(o.outputs).length === 1);
      const entries = multiRank(p).filter((o) => o.op === 'all_reduce' && Array.isArray(o.inputs) && Array.isArray(o.outputs) && strs(o.inputs).length === 1);
      const c = rng.int(sites.length + entries.length);
      if (sites.length + entries.length === 0) return undefined;
      if (c < sites.length) {
        const op = (sites[c] as Site).op;
        const was = op.op;
        op.op = 'identity';
        delete op.group;
        delete op.attrs;
        return `${op.id}: ${was} replaced by a local copy`;
      }
      const e = entries[c - sites.length] as Op;
      multiRank(p).splice(multiRank(p).indexOf(e), 1);
      const members = Array.isArray(e.group) ? (e.group as number[]) : [...base.mesh.rankAt];
      for (const pi of new Set(members.map((r) => base.rankProgram[r] as number))) (programs(p)[pi] as ProgramJ).ops.push({ id: `${e.id}@bypass`, op: 'identity', inputs: strs(e.inputs), outputs: strs(e.outputs) });
      return `${e.id}: multi-rank ${e.op} replaced by local copies`;
    }
    case 'send-recv-swap': {
      const cands: (() => string)[] = [];
      for (const prog of programs(p)) {
        for (const kindOp of ['send', 'recv'] as const) {
          const byPeer = new Map<string, Op[]>();
          for (const o of prog.ops.filter((x) => x.op === kindOp)) {
            const k = JSON.stringify(o.peer);
            byPeer.set(k, [...(byPeer.get(k) ?? []), o]);
          }
          for (const ops of byPeer.values()) {
            if (ops.length < 2) continue;
            cands.push(() => {
              const i = rng.int(ops.length);
              const j = (i + 1 + rng.int(ops.length - 1)) % ops.length;
              const [a, b] = [ops[i] as Op, ops[j] as Op];
              const f = kindOp === 'send' ? 'inputs' : 'outputs';
              [a[f], b[f]] = [b[f], a[f]];
              return `${prog.name ?? ''}: ${kindOp} '${a.id}' and '${b.id}' swapped their tensors`;
            });
          }
        }
      }
      const byPair = new Map<string, Op[]>();
      for (const o of multiRank(p).filter((x) => x.op === 'send_recv')) byPair.set(`${String(o['src'])}>${String(o['dst'])}`, [...(byPair.get(`${String(o['src'])}>${String(o['dst'])}`) ?? []), o]);
      for (const ops of byPair.values()) {
        if (ops.length >= 2)
          cands.push(() => {
            const [a, b] = [ops[0] as Op, ops[1] as Op];
            [a.inputs, b.inputs] = [b.inputs, a.inputs];
            return `send_recv '${a.id}' and '${b.id}' swapped their inputs`;
          });
      }
      const f = rng.pick(cands);
      return f === undefined ? undefined : f();
    }
    case 'lineage-move':
      return moveLineage(p, rng);
  }
}

function moveLineage(p: Json, rng: Rng): string | undefined {
  const logicalShape = new Map(((p['logical'] as Json)['tensors'] as Tensor[]).map((t) => [t.id, JSON.stringify(t.shape)]));
  const claimed: { prog: ProgramJ; t: Tensor }[] = [];
  for (const prog of programs(p)) for (const t of prog.tensors) if (t.lineage !== undefined) claimed.push({ prog, t });
  const s = rng.pick(claimed);
  if (s === undefined) return undefined;
  const lin = s.t.lineage as Json;
  const variants: (() => string | undefined)[] = [];
  // Retarget to another logical tensor of the same shape.
  const lshape = logicalShape.get(String(lin['logical']));
  const others = [...logicalShape].filter(([id, sh]) => id !== lin['logical'] && sh === lshape).map(([id]) => id);
  if (others.length > 0)
    variants.push(() => {
      const old = String(lin['logical']);
      lin['logical'] = rng.pick(others);
      return `'${s.t.id}': claim retargeted from logical '${old}' to '${String(lin['logical'])}'`;
    });
  // Move (or swap) the claim onto another local tensor of the same shape.
  const mates = s.prog.tensors.filter((t) => t !== s.t && same(t.shape, s.t.shape));
  if (mates.length > 0)
    variants.push(() => {
      const m = rng.pick(mates) as Tensor;
      const theirs = m.lineage;
      m.lineage = lin;
      if (theirs === undefined) delete s.t.lineage;
      else s.t.lineage = theirs;
      return `claim of '${s.t.id}' moved to '${m.id}'${theirs === undefined ? '' : ' (claims swapped)'}`;
    });
  // Shift one index range.
  const index = lin['index'];
  if (Array.isArray(index)) {
    const dims = index.map((r, d) => (Array.isArray(r) && r.length === 2 ? d : -1)).filter((d) => d >= 0);
    if (dims.length > 0)
      variants.push(() => {
        const d = rng.pick(dims) as number;
        const r = index[d] as unknown[];
        const k = rng.pick([1, -1, 2, -2]) as number;
        index[d] = [shiftExpr(r[0], k), shiftExpr(r[1], k)];
        return `'${s.t.id}': index range of dim ${d} shifted by ${k}`;
      });
  }
  // Another addend of the value map.
  const value = lin['value'];
  if (Array.isArray(value) && value.length >= 2 && typeof value[1] === 'number' && value[1] > 1) {
    const n = value[1];
    variants.push(() => {
      const old = value[0];
      value[0] = typeof old === 'number' ? (old + 1) % n : { expr: `((${String((old as Json)['expr'])}) + 1) % ${n}` };
      return `'${s.t.id}': value chunk ${JSON.stringify(old)} -> ${JSON.stringify(value[0])} of ${n}`;
    });
  }
  // One placement changed.
  const pl = lin['placements'];
  if (Array.isArray(pl) && pl.length > 0)
    variants.push(() => {
      const i = rng.int(pl.length);
      const old = String(pl[i]);
      const rank = (JSON.parse(lshape ?? '[]') as unknown[]).length;
      const opts = ['R', 'P(sum)', 'P(avg)', ...Array.from({ length: rank }, (_, d) => `S(${d})`)].filter((x) => x !== old);
      pl[i] = rng.pick(opts);
      return `'${s.t.id}': placement ${i} ${old} -> ${String(pl[i])}`;
    });
  const v = rng.pick(variants);
  return v === undefined ? undefined : v();
}

/** Instances touching (program pi, op oi) have every member in program pi (a swap there is seen by all). */
function allMembersIn(base: LoadedPlan, pi: number, oi: number): boolean {
  for (const c of base.collectives) {
    let touches = false;
    c.group.forEach((r, i) => {
      if (base.rankProgram[r] === pi && c.sites[i] === oi) touches = true;
    });
    if (touches && [...c.group].some((r) => base.rankProgram[r] !== pi)) return false;
  }
  return true;
}

/** Tensors computed from `from` by the program's ops (forward closure within the program). */
function downstream(prog: ProgramJ, from: readonly string[]): Set<string> {
  const seen = new Set(from);
  for (let changed = true; changed; ) {
    changed = false;
    for (const o of prog.ops) {
      if (strs(o.inputs).some((t) => seen.has(t))) {
        for (const t of strs(o.outputs))
          if (!seen.has(t)) {
            seen.add(t);
            changed = true;
          }
      }
    }
  }
  return seen;
}

const fresh = (prog: ProgramJ, base: string): string => {
  const used = new Set([...prog.tensors.map((t) => t.id), ...prog.ops.map((o) => o.id)]);
  let k = 0;
  while (used.has(`${base}@rw${k}`)) k++;
  return `${base}@rw${k}`;
};

/** Applies one equivalence-preserving rewrite of `kind` in place; undefined when no site. */
export function rewrite(p: Json, kind: RewriteKind, rng: Rng, base: LoadedPlan): string | undefined {
  switch (kind) {
    case 'swap-collectives': {
      const cands: [ProgramJ, number, number][] = [];
      programs(p).forEach((prog, pi) => {
        const idx = prog.ops.map((o, i) => (GROUP_OPS.has(o.op) && o.group !== undefined ? i : -1)).filter((i) => i >= 0);
        for (let k = 0; k + 1 < idx.length; k++) {
          const [i, j] = [idx[k] as number, idx[k + 1] as number];
          const a = prog.ops[i] as Op;
          const b = prog.ops[j] as Op;
          if (strs(b.inputs).some((t) => downstream(prog, strs(a.outputs)).has(t))) continue;
          if (!allMembersIn(base, pi, i) || !allMembersIn(base, pi, j)) continue;
          cands.push([prog, i, j]);
        }
      });
      const c = rng.pick(cands);
      if (c === undefined) return undefined;
      const [prog, i, j] = c;
      const a = prog.ops[i] as Op;
      const b = prog.ops[j] as Op;
      prog.ops[i] = b;
      prog.ops[j] = a;
      return `${prog.name ?? ''}: collectives '${a.id}' and '${b.id}' issued in the other order`;
    }
    case 'reorder-local': {
      const cands: [ProgramJ, number][] = [];
      for (const prog of programs(p))
        for (let i = 0; i + 1 < prog.ops.length; i++) {
          const a = prog.ops[i] as Op;
          const b = prog.ops[i + 1] as Op;
          if (COMM_OPS.has(a.op) || COMM_OPS.has(b.op)) continue;
          if (strs(b.inputs).some((t) => strs(a.outputs).includes(t))) continue;
          cands.push([prog, i]);
        }
      const c = rng.pick(cands);
      if (c === undefined) return undefined;
      const [prog, i] = c;
      const a = prog.ops[i] as Op;
      prog.ops[i] = prog.ops[i + 1] as Op;
      prog.ops[i + 1] = a;
      return `${prog.name ?? ''}: local ops '${a.id}' and '${(prog.ops[i] as Op).id}' reordered`;
    }
    case 'split-concat': {
      const cands: [ProgramJ, Tensor, number][] = [];
      for (const prog of programs(p)) {
        const produced = new Set(prog.ops.filter((o) => !COMM_OPS.has(o.op)).flatMap((o) => strs(o.outputs)));
        for (const t of prog.tensors) {
          const sh = numericShape(t.shape);
          if (!produced.has(t.id) || sh === undefined) continue;
          sh.forEach((n, d) => n >= 2 && cands.push([prog, t, d]));
        }
      }
      const c = rng.pick(cands);
      if (c === undefined) return undefined;
      const [prog, t, d] = c;
      const sh = numericShape(t.shape) as number[];
      const n = sh[d] as number;
      const k = 1 + rng.int(n - 1);
      const [ta, tb, tc] = [fresh(prog, `${t.id}.a`), fresh(prog, `${t.id}.b`), fresh(prog, `${t.id}.cat`)];
      // Every reader of t (local ops and communication in this program) reads the concatenation.
      for (const o of prog.ops) if (Array.isArray(o.inputs)) o.inputs = (o.inputs as unknown[]).map((x) => (x === t.id ? tc : x));
      prog.tensors.push({ id: ta, shape: sh.map((v, i) => (i === d ? k : v)) }, { id: tb, shape: sh.map((v, i) => (i === d ? n - k : v)) }, { id: tc, shape: [...sh] });
      prog.ops.push(
        { id: `${ta}#op`, op: 'slice', inputs: [t.id], outputs: [ta], attrs: { dim: d, start: 0, end: k } },
        { id: `${tb}#op`, op: 'slice', inputs: [t.id], outputs: [tb], attrs: { dim: d, start: k, end: n } },
        { id: `${tc}#op`, op: 'concat', inputs: [ta, tb], outputs: [tc], attrs: { dim: d } },
      );
      return `${prog.name ?? ''}: '${t.id}' read through slice [0,${k}) + [${k},${n}) and concat on dim ${d}`;
    }
    case 'allreduce-rs-ag': {
      const cands: [ProgramJ, number, number][] = [];
      const sizeOf = new Map(base.mesh.axes.map((a, i) => [a, base.mesh.sizes[i] as number]));
      programs(p).forEach((prog, pi) =>
        prog.ops.forEach((o, oi) => {
          if (o.op !== 'all_reduce' || o.group === null || typeof o.group !== 'object' || !Array.isArray((o.group as Json)['axes'])) return;
          // Every member must run this program (CP ranks have their own): else the others still call all_reduce.
          if (!allMembersIn(base, pi, oi)) return;
          const g = strs((o.group as Json)['axes']).reduce((acc, a) => acc * (sizeOf.get(a) ?? 1), 1);
          const inT = prog.tensors.find((t) => t.id === strs(o.inputs)[0]);
          const sh = numericShape(inT?.shape);
          if (g < 2 || sh === undefined) return;
          sh.forEach((n, d) => n % g === 0 && cands.push([prog, oi, d]));
        }),
      );
      const c = rng.pick(cands);
      if (c === undefined) return undefined;
      const [prog, oi, d] = c;
      const o = prog.ops[oi] as Op;
      const inT = prog.tensors.find((t) => t.id === strs(o.inputs)[0]) as Tensor;
      const sh = numericShape(inT.shape) as number[];
      const g = strs((o.group as Json)['axes']).reduce((acc, a) => acc * (base.mesh.sizes[base.mesh.axes.indexOf(a)] ?? 1), 1);
      const mid = fresh(prog, `${String(strs(o.outputs)[0])}.rs`);
      prog.tensors.push({ id: mid, shape: sh.map((v, i) => (i === d ? v / g : v)) });
      const rs: Op = { id: `${o.id}#rs`, op: 'reduce_scatter', inputs: o.inputs, outputs: [mid], attrs: { dim: d, reduce: o.attrs?.['reduce'] ?? 'sum' }, group: o.group };
      const ag: Op = { id: `${o.id}#ag`, op: 'all_gather', inputs: [mid], outputs: o.outputs, attrs: { dim: d }, group: o.group };
      if (o['microbatch'] !== undefined) rs['microbatch'] = ag['microbatch'] = o['microbatch'];
      prog.ops.splice(oi, 1, rs, ag);
      return `${o.id}: all_reduce over [${strs((o.group as Json)['axes']).join(',')}] as reduce_scatter + all_gather on dim ${d}`;
    }
  }
}
