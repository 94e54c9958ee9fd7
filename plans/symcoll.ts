/**
 * Collective matching per template. The per-rank matcher (collectives.ts) queues every call of
 * every rank per communicator and compares the queues member by member; here:
 *  - a group call of program P over mesh axes A, where P's ranks are a box that spans A whole
 *    and P names no group by rank list, has every member of every A-group running P. Every
 *    member's queue on that communicator is then P's A-sites in program order: counts and op
 *    kinds agree by construction, and attributes and shapes agree across members when they do
 *    not depend on A's coordinates (or on `rank`). They are checked once per distinct value of
 *    the coordinates they do depend on; sites whose attributes or shapes vary inside a group are
 *    matched group by group (collectives.ts's own makeInstance/checkInstance).
 *  - send/recv peers given as mesh shifts pair P's sends with shift d to Q's receives with
 *    shift -d, where Q runs the ranks P's ranks shift onto. Each (P, d, Q) class is checked
 *    once (counts, order, shapes); which class each rank falls in is integer arithmetic over
 *    the ranks, no queue objects.
 * Other calls (rank-list groups, boxes that cut a group, peers given by expressions) are
 * matched rank by rank as before. A failure found here is re-run through the per-rank matcher
 * so the message is the one it gives (ranks, call numbers).
 */
import { registry } from '../ops/registry.js';
import { type Attrs, sameShape, type Shape, ShapeError } from '../ops/types.js';
import { IssueSink } from './errors.js';
import type { Mesh } from './mesh.js';
import type { CollectiveInstance, Program, RankView } from './model.js';
import type { RawPlan } from './raw.js';
import { canonicalJson, checkInstance, type Ctx, makeInstance, multiRankCollectives, perRankCollectives } from './collectives.js';
import { evalInt, instantiateAttrs, specVars } from './programs.js';
import { rankEnv } from './mesh.js';
import type { Box } from './mesh.js';
import { ExprError, exprIssue } from './expr.js';

export interface CollectiveKind {
  readonly op: string;
  readonly over: string;
  readonly groupSize: number;
  readonly instances: number;
}

export interface CollectiveStats {
  /** Group call sites matched once per template, and rank by rank. */
  symbolicSites: number;
  perRankSites: number;
  /** Point-to-point calls: per (program, shift, program) class, or rank by rank. */
  p2p: 'symbolic' | 'per-rank' | 'none';
  p2pClasses: number;
}

interface CollectiveCheck {
  /** One record per distinct template instance (for the dataflow quotient graph); real instances for the rest. */
  readonly quotient: CollectiveInstance[];
  readonly kinds: CollectiveKind[];
  readonly stats: CollectiveStats;
}

/** Representative ranks of a program: one per distinct coordinates on `axes` (-1: rank). */
export type Reps = (p: Program, axes: readonly number[]) => Int32Array;

export function checkCollectivesSymbolic(raw: RawPlan, mesh: Mesh, programs: Program[], rankProgram: Int32Array, view: (r: number) => RankView, sink: IssueSink, boxes: readonly Box[], reps: Reps): CollectiveCheck {
  const ctx: Ctx = { mesh, programs, rankProgram, view, sink };
  const stats: CollectiveStats = { symbolicSites: 0, perRankSites: 0, p2p: 'none', p2pClasses: 0 };
  const quotient: CollectiveInstance[] = multiRankCollectives(raw, ctx);
  const kinds = new Map<string, { op: string; over: string; groupSize: number; instances: number }>();
  const count = (op: string, over: string, groupSize: number, n: number): void => {
    const key = `${op}|${over}`;
    const e = kinds.get(key);
    if (e === undefined) kinds.set(key, { op, over, groupSize, instances: n });
    else e.instances += n;
  };
  const axesLabel = (axes: readonly number[], r0: number): string => {
    const varying = axes.filter((a) => (mesh.sizes[a] as number) > 1).map((a) => mesh.axes[a] as string);
    return varying.length > 0 ? varying.join('+') : `ranks [${r0}]`;
  };
  for (const c of quotient) count(registry.get(c.kind).name, groupText(mesh, c.group), c.group.length, 1);

  const isP2p = (p: Program, op: number): boolean => registry.get(p.ops.kind[op] as number).collective?.pattern === 'p2p';
  const symbolicGroup = programs.map((p, pi) => {
    const box = boxes[pi] as Box;
    const out = new Uint8Array(p.ops.size);
    if (p.collectiveSites.some((op) => p.groups[op]?.kind === 'ranks')) return out;
    for (const op of p.collectiveSites) {
      const g = p.groups[op];
      if (g === undefined || g.kind !== 'axes' || !box.isBox) continue;
      if (g.axes.every((a) => (box.sets[a] as Int32Array).length === (mesh.sizes[a] as number))) out[op] = 1;
    }
    return out;
  });
  // Groups that span several programs (one program per cp coordinate, a call over cp): matched
  // once per family and call when every member's call is the same, with constant attributes
  // and shapes (spanningFamilies); anything else stays rank by rank below.
  const families = spanningFamilies(ctx, boxes, symbolicGroup);
  let p2pSites = 0;
  let shiftSites = 0;
  for (const p of programs) {
    for (const op of p.collectiveSites) {
      if (!isP2p(p, op)) continue;
      p2pSites++;
      if (p.peers[op]?.kind === 'shift') shiftSites++;
    }
  }
  const p2pSymbolic = p2pSites > 0 && shiftSites === p2pSites;
  stats.p2p = p2pSites === 0 ? 'none' : p2pSymbolic ? 'symbolic' : 'per-rank';

  // Rank by rank: everything the symbolic rules do not cover.
  const before = sink.size;
  const fallback = perRankCollectives(ctx, (p, op) => (isP2p(p, op) ? !p2pSymbolic : symbolicGroup[p.index]?.[op] !== 1 && families.marked[p.index]?.[op] !== 1));
  for (const c of fallback) count(registry.get(c.kind).name, groupText(mesh, c.group), c.group.length, 1);
  for (const c of fallback) quotient.push(c);
  for (const p of programs) {
    for (const op of p.collectiveSites) {
      if (isP2p(p, op)) continue;
      if (symbolicGroup[p.index]?.[op] === 1 || families.marked[p.index]?.[op] === 1) stats.symbolicSites++;
      else stats.perRankSites++;
    }
  }
  if (sink.size > before) return { quotient, kinds: [...kinds.values()], stats };

  // Groups across programs: the base group's instance stands for every group of the family
  // (each has one member per A-coordinate, running the same program and call site).
  for (const f of families.list) {
    for (let k = 0; k < f.calls; k++) {
      quotient.push(makeInstance(ctx, f.members, Int32Array.from(f.memberSites, (ss) => (ss[k] as number)), k));
      count(registry.get(f.kind[k] as number).name, axesLabel(f.axes, f.members[0] as number), f.members.length, f.ranks / f.members.length);
    }
  }

  // Group calls, once per template site.
  programs.forEach((p, pi) => {
    const sym = symbolicGroup[pi] as Uint8Array;
    const callNo = new Map<string, number>();
    const ranks = p.ranks;
    for (const op of p.collectiveSites) {
      if (sym[op] !== 1 || sink.size > before) continue;
      const spec = p.groups[op];
      if (spec === undefined || spec.kind !== 'axes') continue;
      const A = spec.axes;
      const k = callNo.get(A.join('.')) ?? 0;
      callNo.set(A.join('.'), k + 1);
      const kind = p.ops.kind[op] as number;
      const def = registry.get(kind);
      const coll = def.collective;
      if (coll === undefined) continue;
      const g = A.reduce((s, a) => s * (mesh.sizes[a] as number), 1);
      const tin = p.ops.opInputs(op)[0] ?? -1;
      const tout = p.ops.opOutputs(op)[0] ?? -1;
      const vars = new Set<number>();
      const note = (v: string): void => void vars.add(v === 'rank' ? -1 : mesh.axisIndex(v));
      for (const [, e] of p.attrSpecs[op]?.exprs ?? []) for (const v of e.vars) note(v);
      for (const t of [tin, tout]) if (t >= 0) for (const d of p.shapeSpecs[t] ?? []) for (const v of specVars(d)) note(v);
      const insideGroup = [...vars].some((a) => a < 0 || A.includes(a));
      const r0 = ranks[0] as number;
      // Every group of this site, as the per-rank matcher builds and checks it.
      const perGroup = (): void => {
        const seen = new Uint8Array(mesh.size);
        for (const r of ranks) {
          if (seen[r] || sink.size >= sink.cap) continue;
          const members = mesh.groupAlong(r, A);
          for (const m of members) seen[m] = 1;
          try {
            checkInstance(ctx, makeInstance(ctx, members, new Int32Array(members.length).fill(op), k));
          } catch (e) {
            if (!(e instanceof ExprError)) throw e;
            exprIssue(sink, e, p.ops.ids.paths[op] as string, r);
          }
        }
      };
      let attrs0: Attrs = p.attrSpecs[op]?.attrs ?? {};
      if (insideGroup || coll.pattern !== 'symmetric') perGroup();
      else {
        let bad = false;
        try {
          for (const r of reps(p, [...vars].sort((a, b) => a - b))) {
            const env = rankEnv(mesh, r);
            const attrs = instantiateAttrs(p.attrSpecs[op] ?? { attrs: {}, exprs: [] }, env);
            if (r === r0) attrs0 = attrs;
            if (registry.checkAttrs(kind, attrs) !== undefined || tin < 0 || tout < 0) {
              bad = true;
              break;
            }
            const sin = (p.shapeSpecs[tin] ?? []).map((d) => evalInt(d, env));
            const sout = (p.shapeSpecs[tout] ?? []).map((d) => evalInt(d, env));
            let expect: Shape;
            try {
              expect = coll.outShape(sin, attrs, g);
            } catch (e) {
              if (!(e instanceof ShapeError)) throw e;
              bad = true;
              break;
            }
            if (!sameShape(sout, expect)) {
              bad = true;
              break;
            }
          }
        } catch (e) {
          if (!(e instanceof ExprError)) throw e;
          bad = true;
        }
        if (bad) perGroup();
      }
      count(def.name, axesLabel(A, r0), g, ranks.length / g);
      // One member stands for all: in the quotient graph every member is (this program, this
      // site), so the others would only repeat its edges.
      quotient.push({
        id: p.ops.ids.name(op),
        kind,
        attrs: attrs0,
        group: Int32Array.of(r0),
        inputs: Int32Array.of(tin),
        outputs: Int32Array.of(tout),
        sites: Int32Array.of(op),
        path: p.ops.ids.paths[op] as string,
        microbatch: p.microbatch[op] as number,
      });
    }
  });
  if (sink.size > before) return { quotient, kinds: [...kinds.values()], stats };
  if (p2pSymbolic) p2pClasses(ctx, programs, rankProgram, quotient, count, stats, isP2p);
  return { quotient, kinds: [...kinds.values()], stats };
}

/** Call sites of a program on groups along these axes as written (the per-rank matcher's queue key), in program order. */
function sitesAlong(p: Program, key: string): number[] {
  return [...p.collectiveSites].filter((op) => {
    const g = p.groups[op];
    return g?.kind === 'axes' && g.axes.join('.') === key;
  });
}

/** Group calls along `axes` whose groups span several programs, matched once (spanningFamilies). */
interface Family {
  readonly axes: readonly number[];
  /** The base group: the members of the lowest-coordinate rank's group, in the matcher's order. */
  readonly members: Int32Array;
  /** Per member: its program's sites along the axes, in program order. */
  readonly memberSites: readonly (readonly number[])[];
  /** Per call: its op kind. */
  readonly kind: readonly number[];
  readonly calls: number;
  /** Ranks of the family's programs. */
  readonly ranks: number;
}

/**
 * Group calls over axes A that no program's box spans (a program per cp coordinate, a call over
 * cp): per (A as written, set of programs) a *family*, matched once when
 *  - the programs F met by the A-group of one program's base rank are boxes, name no group by
 *    rank list, have the same coordinate sets off A, and their sets on A add up to the whole
 *    A-grid (so they partition it: two programs share no rank). Then every A-group through a
 *    rank of F has one member per A-coordinate g, and that member runs the program whose box
 *    holds g; its queue on the communicator (the per-rank matcher's key: A as written and the
 *    coordinates off A) is its program's A-sites in program order, the same for every group;
 *  - the programs have equally many A-sites, and each call k is symmetric, of one op kind, with
 *    attributes written without expressions and equal, and input and output shapes without
 *    coordinates, equal inputs and outputs what the collective gives.
 * Then the per-rank matcher would build, for every group, an instance equal member by member
 * to the base group's (same programs, sites, attributes and shapes), which passes its checks:
 * checking the base group's (checkInstance) decides them all. A family failing any condition is
 * left to the per-rank matcher whole, which finds and words any error.
 */
function spanningFamilies(ctx: Ctx, boxes: readonly Box[], symbolicGroup: readonly Uint8Array[]): { marked: Uint8Array[]; list: Family[] } {
  const { mesh, programs, rankProgram } = ctx;
  const marked = programs.map((p) => new Uint8Array(p.ops.size));
  const list: Family[] = [];
  const byRanks = programs.map((p) => p.collectiveSites.some((op) => p.groups[op]?.kind === 'ranks'));
  const tried = new Set<string>();
  const sameOff = (a: Box, b: Box, axes: readonly number[]): boolean =>
    a.sets.every((s, x) => axes.includes(x) || (s.length === (b.sets[x] as Int32Array).length && s.every((v, i) => v === (b.sets[x] as Int32Array)[i])));
  programs.forEach((p, pi) => {
    const box = boxes[pi] as Box;
    if (byRanks[pi] || !box.isBox) return;
    for (const op of p.collectiveSites) {
      const spec = p.groups[op];
      if (spec === undefined || spec.kind !== 'axes' || symbolicGroup[pi]?.[op] === 1 || marked[pi]?.[op] === 1) continue;
      if (registry.get(p.ops.kind[op] as number).collective?.pattern === 'p2p') continue;
      const A = spec.axes;
      const key = A.join('.');
      if (tried.has(`${pi}|${key}`)) continue;
      const members = mesh.groupAlong(mesh.rankOf(Array.from(box.lo)), A);
      const progs = [...new Set(Array.from(members, (m) => rankProgram[m] as number))];
      for (const q of progs) tried.add(`${q}|${key}`);
      if (progs.length < 2) continue;
      const g = members.length;
      let cells = 0;
      let ok = true;
      for (const q of progs) {
        const qb = boxes[q] as Box;
        if (byRanks[q] || !qb.isBox || !sameOff(box, qb, A)) ok = false;
        else cells += A.reduce((n, a) => n * (qb.sets[a] as Int32Array).length, 1);
      }
      if (!ok || cells !== g) continue;
      const sites = new Map(progs.map((q) => [q, sitesAlong(programs[q] as Program, key)]));
      const calls = (sites.get(pi) as number[]).length;
      if (progs.some((q) => (sites.get(q) as number[]).length !== calls)) continue;
      const memberSites = Array.from(members, (m) => sites.get(rankProgram[m] as number) as number[]);
      const kinds: number[] = [];
      for (let k = 0; k < calls && ok; k++) ok = callAgrees(ctx, progs, sites, k, g, kinds);
      if (!ok) continue;
      // The base group's instance: the checks every group's would make.
      const probe = new IssueSink('');
      for (let k = 0; k < calls && probe.size === 0; k++) checkInstance({ ...ctx, sink: probe }, makeInstance({ ...ctx, sink: probe }, members, Int32Array.from(memberSites, (ss) => ss[k] as number), k));
      if (probe.size > 0) continue;
      for (const [q, ss] of sites) for (const s of ss) (marked[q] as Uint8Array)[s] = 1;
      list.push({ axes: A, members, memberSites, kind: kinds, calls, ranks: progs.reduce((n, q) => n + (programs[q] as Program).ranks.length, 0) });
    }
  });
  return { marked, list };
}

/** Call k of a family: one symmetric kind, constant equal attributes, constant shapes that fit. */
function callAgrees(ctx: Ctx, progs: readonly number[], sites: ReadonlyMap<number, readonly number[]>, k: number, g: number, kinds: number[]): boolean {
  let kind = -1;
  let attrs = '';
  let sin: Shape | undefined;
  for (const q of progs) {
    const p = ctx.programs[q] as Program;
    const op = (sites.get(q) as readonly number[])[k] as number;
    const kq = p.ops.kind[op] as number;
    const coll = registry.get(kq).collective;
    if (coll?.pattern !== 'symmetric' || (kind >= 0 && kq !== kind)) return false;
    kind = kq;
    const a = p.attrSpecs[op] ?? { attrs: {}, exprs: [] };
    if (a.exprs.length > 0 || registry.checkAttrs(kq, a.attrs) !== undefined) return false;
    const aj = canonicalJson(a.attrs);
    if (attrs !== '' && aj !== attrs) return false;
    attrs = aj;
    const tin = p.ops.opInputs(op)[0] ?? -1;
    const tout = p.ops.opOutputs(op)[0] ?? -1;
    if (tin < 0 || tout < 0) return false;
    const dims = [...(p.shapeSpecs[tin] ?? []), ...(p.shapeSpecs[tout] ?? [])];
    if (dims.some((d) => specVars(d).length > 0)) return false;
    // No coordinates in them: one evaluation stands for every rank.
    const env = rankEnv(ctx.mesh, p.ranks[0] as number);
    const si = (p.shapeSpecs[tin] ?? []).map((d) => evalInt(d, env));
    const so = (p.shapeSpecs[tout] ?? []).map((d) => evalInt(d, env));
    if (sin !== undefined && !sameShape(sin, si)) return false;
    sin = si;
    try {
      if (!sameShape(so, coll.outShape(si, a.attrs, g))) return false;
    } catch (e) {
      if (!(e instanceof ShapeError)) throw e;
      return false;
    }
  }
  kinds.push(kind);
  return true;
}

export function groupText(mesh: Mesh, group: Int32Array): string {
  const varying = mesh.axes.filter((_, a) => new Set([...group].map((r) => mesh.coord(r, a))).size > 1);
  const size = varying.reduce((p, a) => p * (mesh.sizes[mesh.axisIndex(a)] as number), 1);
  if (varying.length > 0 && size === group.length) return varying.join('+');
  return `ranks [${[...group].join(', ')}]`;
}

/** Send/recv by mesh shifts, per (sending program, shift, receiving program) class. */
function p2pClasses(
  ctx: Ctx,
  programs: Program[],
  rankProgram: Int32Array,
  quotient: CollectiveInstance[],
  count: (op: string, over: string, groupSize: number, n: number) => void,
  stats: CollectiveStats,
  isP2p: (p: Program, op: number) => boolean,
): void {
  const { mesh, sink } = ctx;
  const n = mesh.axes.length;
  const strides = mesh.sizes.map((_, a) => mesh.sizes.slice(a + 1).reduce((x, y) => x * y, 1));
  // The per-rank matcher, for its messages.
  const explain = (): void => {
    const before = sink.size;
    perRankCollectives(ctx, isP2p);
    if (sink.size === before) throw new Error('internal inconsistency: the per-template send/recv check failed but the per-rank check passed');
  };
  // Per program: sites by shift d of the data (a receive's d is minus its peer shift).
  const sends = programs.map(() => new Map<string, { d: Int32Array; sites: number[] }>());
  const recvs = programs.map(() => new Map<string, { d: Int32Array; sites: number[] }>());
  programs.forEach((p, pi) => {
    for (const op of p.collectiveSites) {
      if (!isP2p(p, op)) continue;
      const spec = p.peers[op];
      if (spec?.kind !== 'shift') continue;
      const send = registry.get(p.ops.kind[op] as number).collective?.side === 'send';
      const d = new Int32Array(n);
      for (const [a, x] of spec.shift) d[a] = (d[a] as number) + (send ? x : -x);
      const key = d.join(',');
      const m = (send ? sends : recvs)[pi] as Map<string, { d: Int32Array; sites: number[] }>;
      let e = m.get(key);
      if (e === undefined) m.set(key, (e = { d, sites: [] }));
      e.sites.push(op);
    }
  });
  // Which (P, d, Q) classes occur: integer arithmetic per rank, no per-rank records.
  const classes = new Map<string, { P: number; Q: number; key: string; d: Int32Array; src: number; dst: number; pairs: number }>();
  let failed = false;
  const visit = (pi: number, side: 'send' | 'recv'): void => {
    const p = programs[pi] as Program;
    for (const [key, { d }] of (side === 'send' ? sends : recvs)[pi] as Map<string, { d: Int32Array; sites: number[] }>) {
      if (d.every((x) => x === 0)) {
        failed = true;
        return;
      }
      for (const r of p.ranks) {
        if (rankProgram[r] !== pi) continue;
        let flat = mesh.flatOf[r] as number;
        for (let a = 0; a < n; a++) {
          const x = d[a] as number;
          if (x === 0) continue;
          const c = mesh.coord(r, a) + (side === 'send' ? x : -x);
          if (c < 0 || c >= (mesh.sizes[a] as number)) {
            failed = true;
            return;
          }
          flat += (side === 'send' ? x : -x) * (strides[a] as number);
        }
        const other = mesh.rankAt[flat] as number;
        const [src, dst] = side === 'send' ? [r, other] : [other, r];
        const P = rankProgram[src] as number;
        const Q = rankProgram[dst] as number;
        const ck = `${P}|${key}|${Q}`;
        const e = classes.get(ck);
        if (e === undefined) classes.set(ck, { P, Q, key, d, src, dst, pairs: side === 'send' ? 1 : 0 });
        else if (side === 'send') e.pairs++;
      }
    }
  };
  for (let pi = 0; pi < programs.length && !failed; pi++) {
    visit(pi, 'send');
    if (!failed) visit(pi, 'recv');
  }
  if (failed) return explain();
  stats.p2pClasses = classes.size;
  const sendRecv = registry.id('send_recv');
  for (const c of classes.values()) {
    const P = programs[c.P] as Program;
    const Q = programs[c.Q] as Program;
    const S = sends[c.P]?.get(c.key)?.sites ?? [];
    const R = recvs[c.Q]?.get(c.key)?.sites ?? [];
    if (S.length !== R.length) return explain();
    for (let k = 0; k < S.length; k++) {
      const s = S[k] as number;
      const o = R[k] as number;
      const tin = P.ops.opInputs(s)[0] ?? -1;
      const tout = Q.ops.opOutputs(o)[0] ?? -1;
      if (tin < 0 || tout < 0) return explain();
      const sIn = P.shapeSpecs[tin] ?? [];
      const sOut = Q.shapeSpecs[tout] ?? [];
      const dependent = [...sIn, ...sOut].some((x) => specVars(x).length > 0);
      try {
        if (!dependent) {
          if (!sameShape(sIn as Shape, sOut as Shape)) return explain();
        } else {
          // Shapes vary with the coordinates: compare on every pair of the class.
          for (const r of P.ranks) {
            if (rankProgram[r] !== c.P) continue;
            const coords = mesh.coords(r);
            c.d.forEach((x, a) => (coords[a] = (coords[a] as number) + x));
            if (coords.some((x, a) => x < 0 || x >= (mesh.sizes[a] as number))) continue;
            const dst = mesh.rankOf(coords);
            if (rankProgram[dst] !== c.Q) continue;
            const a = sIn.map((x) => evalInt(x, rankEnv(mesh, r)));
            const b = sOut.map((x) => evalInt(x, rankEnv(mesh, dst)));
            if (!sameShape(a, b)) return explain();
          }
        }
      } catch (e) {
        if (!(e instanceof ExprError)) throw e;
        return explain();
      }
      quotient.push({
        id: P.ops.ids.name(s),
        kind: sendRecv,
        attrs: {},
        group: Int32Array.of(c.src, c.dst),
        inputs: Int32Array.of(tin, -1),
        outputs: Int32Array.of(-1, tout),
        sites: Int32Array.of(s, o),
        path: P.ops.ids.paths[s] as string,
        microbatch: P.microbatch[s] as number,
      });
    }
    const shift = [...c.d].map((x, a) => (x === 0 ? '' : `${mesh.axes[a]}${x > 0 ? '+' : ''}${x}`)).filter((x) => x !== '').join(',');
    count('send_recv', `shift ${shift} (${P.name} -> ${Q.name})`, 2, c.pairs * S.length);
  }
}
