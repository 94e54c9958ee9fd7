/**
 * Normalizes both spellings of communication into CollectiveInstance records:
 *  - a multi-rank entry in $.parallel.collectives (one instance, or one per group for axes);
 *  - per-rank calls in programs, matched across the group by call order per group (as NCCL
 *    matches calls on one communicator); send/recv matched per ordered (src, dst) pair.
 * Calls that do not line up (count, op, attributes, shapes) are plan errors.
 */
import { registry } from '../ops/registry.js';
import { type Attrs, type AttrValue, ShapeError, type Shape, sameShape, shapeStr } from '../ops/types.js';
import { jpath, type IssueSink } from './errors.js';
import type { Mesh } from './mesh.js';
import type { CollectiveInstance, GroupSpec, PeerSpec, Program, RankView } from './model.js';
import type { RawCollective, RawIo, RawPlan } from './raw.js';
import { evalInt, selectRanks } from './programs.js';
import { rankEnv } from './mesh.js';
import { ExprError, exprIssue } from './expr.js';

export function canonicalJson(v: AttrValue | Attrs | undefined): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map((x) => canonicalJson(x)).join(',')}]`;
  return `{${Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, AttrValue>)[k])}`)
    .join(',')}}`;
}

export interface Ctx {
  mesh: Mesh;
  programs: Program[];
  rankProgram: Int32Array;
  view: (rank: number) => RankView;
  sink: IssueSink;
}

function opLabel(ctx: Ctx, rank: number, op: number): string {
  const p = ctx.programs[ctx.rankProgram[rank] as number] as Program;
  return `rank ${rank} op '${p.ops.ids.name(op)}'`;
}

/** Members of a per-rank call's group, or undefined after reporting why not. */
function resolveGroup(ctx: Ctx, g: GroupSpec, rank: number, path: string): Int32Array | undefined {
  if (g.kind === 'axes') return ctx.mesh.groupAlong(rank, g.axes);
  const env = rankEnv(ctx.mesh, rank);
  const rs = g.ranks.map((s) => evalInt(s, env));
  const bad = rs.find((r) => r < 0 || r >= ctx.mesh.size);
  if (bad !== undefined) {
    ctx.sink.add(jpath(path, 'group'), `group rank ${bad} is outside the mesh`, `rank ${rank}`);
    return undefined;
  }
  if (new Set(rs).size !== rs.length) {
    ctx.sink.add(jpath(path, 'group'), `group [${rs.join(', ')}] lists a rank twice`, `rank ${rank}`);
    return undefined;
  }
  return Int32Array.from(rs.sort((a, b) => a - b));
}

/** Flat mesh index of `rank` with the group axes' coordinates set to 0: names the group. */
export function groupBase(mesh: Mesh, rank: number, axes: readonly number[]): number {
  let flat = mesh.flatOf[rank] as number;
  let stride = 1;
  for (let a = mesh.axes.length - 1; a >= 0; a--) {
    if (axes.includes(a)) flat -= mesh.coord(rank, a) * stride;
    stride *= mesh.sizes[a] as number;
  }
  return flat;
}

/** The axis-group key of an explicit member list, if it is exactly one axis group in its order. */
function sameAsAxes(mesh: Mesh, members: Int32Array): string | undefined {
  const first = members[0] as number;
  const axes = mesh.axes.map((_, a) => a).filter((a) => members.some((m) => mesh.coord(m, a) !== mesh.coord(first, a)));
  if (axes.length === 0) return undefined;
  const g = mesh.groupAlong(first, axes);
  if (g.length !== members.length || g.some((m, i) => m !== members[i])) return undefined;
  return `a${axes.join('.')}|${groupBase(mesh, first, axes)}`;
}

function guard<T>(ctx: Ctx, rank: number, path: string, f: () => T | undefined): T | undefined {
  try {
    return f();
  } catch (e) {
    if (!(e instanceof ExprError)) throw e;
    exprIssue(ctx.sink, e, path, rank);
    return undefined;
  }
}

function resolvePeer(ctx: Ctx, p: PeerSpec, rank: number, path: string): number | undefined {
  let peer: number;
  if (p.kind === 'rank') peer = evalInt(p.rank, rankEnv(ctx.mesh, rank));
  else {
    const c = ctx.mesh.coords(rank);
    for (const [a, d] of p.shift) {
      const v = (c[a] as number) + d;
      if (v < 0 || v >= (ctx.mesh.sizes[a] as number)) {
        ctx.sink.add(jpath(path, 'peer'), `shifting ${ctx.mesh.axes[a]} by ${d} leaves the mesh`, `rank ${rank}`);
        return undefined;
      }
      c[a] = v;
    }
    peer = ctx.mesh.rankOf(c);
  }
  if (peer < 0 || peer >= ctx.mesh.size) {
    ctx.sink.add(jpath(path, 'peer'), `peer ${peer} is outside the mesh`, `rank ${rank}`);
    return undefined;
  }
  if (peer === rank) {
    ctx.sink.add(jpath(path, 'peer'), 'a rank cannot send to itself', `rank ${rank}`);
    return undefined;
  }
  return peer;
}

export function buildCollectives(raw: RawPlan, mesh: Mesh, programs: Program[], rankProgram: Int32Array, view: (rank: number) => RankView, sink: IssueSink): CollectiveInstance[] {
  const ctx: Ctx = { mesh, programs, rankProgram, view, sink };
  const out: CollectiveInstance[] = [];
  const ids = new Map<string, number>();
  (raw.parallel.collectives ?? []).forEach((c, i) => {
    const prev = ids.get(c.id);
    if (prev !== undefined) sink.add(jpath('$.parallel.collectives', i, 'id'), `collective id '${c.id}' is used twice (first at $.parallel.collectives[${prev}])`);
    else ids.set(c.id, i);
    multiRank(ctx, c, jpath('$.parallel.collectives', i), out);
  });
  matchPerRankCalls(ctx, out);
  for (const inst of out) checkInstance(ctx, inst);
  return out;
}

/** The multi-rank entries of $.parallel.collectives, as instances (checked). */
export function multiRankCollectives(raw: RawPlan, ctx: Ctx): CollectiveInstance[] {
  const out: CollectiveInstance[] = [];
  const ids = new Map<string, number>();
  (raw.parallel.collectives ?? []).forEach((c, i) => {
    const prev = ids.get(c.id);
    if (prev !== undefined) ctx.sink.add(jpath('$.parallel.collectives', i, 'id'), `collective id '${c.id}' is used twice (first at $.parallel.collectives[${prev}])`);
    else ids.set(c.id, i);
    multiRank(ctx, c, jpath('$.parallel.collectives', i), out);
  });
  for (const inst of out) checkInstance(ctx, inst);
  return out;
}

/** Per-rank calls matched rank by rank (only the call sites `only` accepts), checked. */
export function perRankCollectives(ctx: Ctx, only: (p: Program, op: number) => boolean): CollectiveInstance[] {
  const out: CollectiveInstance[] = [];
  matchPerRankCalls(ctx, out, only);
  for (const inst of out) checkInstance(ctx, inst);
  return out;
}

function multiRank(ctx: Ctx, c: RawCollective, path: string, out: CollectiveInstance[]): void {
  const { sink, mesh } = ctx;
  const where = `collective '${c.id}'`;
  const kind = registry.id(c.op);
  if (kind < 0) {
    sink.add(jpath(path, 'op'), `unknown op '${c.op}'`, where);
    return;
  }
  const def = registry.get(kind);
  const coll = def.collective;
  if (coll === undefined) {
    sink.add(jpath(path, 'op'), `'${c.op}' is not a collective`, where);
    return;
  }
  const attrs: Attrs = c.attrs ?? {};
  const bad = registry.checkAttrs(kind, attrs);
  if (bad !== undefined) sink.add(jpath(path, 'attrs'), bad, where);
  const groups: Int32Array[] = [];
  if (coll.pattern === 'p2p') {
    if (coll.side !== undefined) {
      sink.add(jpath(path, 'op'), `'${c.op}' is a per-rank call; the multi-rank spelling is 'send_recv' with src and dst`, where);
      return;
    }
    if (c.src === undefined || c.dst === undefined) {
      sink.add(path, 'send_recv needs src and dst', where);
      return;
    }
    if (c.group !== undefined || c.ranks !== undefined) sink.add(path, 'send_recv takes src and dst, not a group', where);
    if (c.src >= mesh.size || c.dst >= mesh.size || c.src === c.dst) {
      sink.add(path, `src ${c.src} and dst ${c.dst} must be two different ranks of the mesh`, where);
      return;
    }
    groups.push(Int32Array.of(c.src, c.dst));
  } else {
    if (c.src !== undefined || c.dst !== undefined) sink.add(path, `'${c.op}' takes a group, not src/dst`, where);
    const g = c.group;
    if (g === undefined) {
      sink.add(path, `collective '${c.op}' needs a group`, where);
      return;
    }
    if (Array.isArray(g) || 'ranks' in g) {
      if (c.ranks !== undefined) sink.add(jpath(path, 'ranks'), 'a rank selector only applies to axis groups', where);
      const list = Array.isArray(g) ? g : g.ranks;
      if (list.some((r) => typeof r !== 'number')) {
        sink.add(jpath(path, 'group'), 'expressions are only allowed in per-rank calls', where);
        return;
      }
      const rs = (list as number[]).slice().sort((a, b) => a - b);
      if (rs.some((r) => r >= mesh.size) || new Set(rs).size !== rs.length) {
        sink.add(jpath(path, 'group'), `group [${list.join(', ')}] has a rank outside the mesh or twice`, where);
        return;
      }
      groups.push(Int32Array.from(rs));
    } else {
      const axes = g.axes.map((a) => mesh.axisIndex(a));
      if (axes.some((a) => a < 0)) {
        sink.add(jpath(path, 'group', 'axes'), `unknown mesh axis in [${g.axes.join(', ')}]`, where);
        return;
      }
      const sel = selectRanks(c.ranks ?? 'all', mesh, jpath(path, 'ranks'), sink);
      const inSel = new Uint8Array(mesh.size);
      for (const r of sel) inSel[r] = 1;
      const seen = new Uint8Array(mesh.size);
      for (const r of sel) {
        if (seen[r]) continue;
        const members = mesh.groupAlong(r, axes);
        for (const m of members) seen[m] = 1;
        const outside = [...members].find((m) => !inSel[m]);
        if (outside !== undefined) {
          sink.add(jpath(path, 'ranks'), `the ${g.axes.join('+')} group of rank ${r} includes rank ${outside}, which the selector leaves out`, where);
          return;
        }
        groups.push(members);
      }
    }
  }
  const src = coll.pattern === 'broadcast' ? (typeof attrs['src'] === 'number' ? attrs['src'] : -1) : -1;
  for (const group of groups) {
    const n = group.length;
    const inputs = new Int32Array(n).fill(-1);
    const outputs = new Int32Array(n).fill(-1);
    const takesInput = (i: number): boolean => (coll.pattern === 'symmetric' ? true : coll.pattern === 'broadcast' ? group[i] === src : i === 0);
    const givesOutput = (i: number): boolean => (coll.pattern === 'p2p' ? i === 1 : true);
    const fill = (io: RawIo, field: string, arr: Int32Array, applies: (i: number) => boolean): void => {
      const fieldPath = jpath(path, field);
      if (!Array.isArray(io)) {
        for (const key of Object.keys(io)) {
          if (!group.includes(Number(key))) sink.add(jpath(fieldPath, key), `rank ${key} is not a member of the group [${[...group].join(', ')}]`, where);
        }
      }
      group.forEach((r, i) => {
        const names = Array.isArray(io) ? (applies(i) ? io : []) : (io[String(r)] ?? []);
        if (names.length > 1) {
          sink.add(fieldPath, `a member has at most one ${field === 'inputs' ? 'input' : 'output'} in '${c.op}'`, where);
          return;
        }
        const name = names[0];
        if (name === undefined) return;
        const prog = ctx.programs[ctx.rankProgram[r] as number];
        if (prog === undefined) return;
        const t = prog.tensors.id(name);
        if (t < 0) sink.add(fieldPath, `rank ${r} has no tensor '${name}' (program ${prog.path})`, where);
        arr[i] = t;
      });
    };
    fill(c.inputs, 'inputs', inputs, takesInput);
    fill(c.outputs, 'outputs', outputs, givesOutput);
    out.push({ id: c.id, kind, attrs, group, inputs, outputs, sites: new Int32Array(n).fill(-1), path, microbatch: c.microbatch ?? -1 });
  }
}

function matchPerRankCalls(ctx: Ctx, out: CollectiveInstance[], only?: (p: Program, op: number) => boolean): void {
  const { mesh, programs, rankProgram, sink } = ctx;
  // Group calls: key = members in group order; per member, its call sites in program order.
  const groupCalls = new Map<string, { members: Int32Array; calls: Map<number, number[]> }>();
  const p2p = new Map<string, { sends: number[]; recvs: number[] }>();
  const issuesBefore = ctx.sink.size;
  // Programs with no call site to match here are skipped without looking at their sites.
  const any = programs.map((p) => only === undefined || p.collectiveSites.some((op) => only(p, op)));
  for (let r = 0; r < mesh.size && any.includes(true); r++) {
    const p = programs[rankProgram[r] as number];
    if (p === undefined || any[p.index] !== true) continue;
    for (const op of p.collectiveSites) {
      if (only !== undefined && !only(p, op)) continue;
      const kind = p.ops.kind[op] as number;
      const path = p.ops.ids.paths[op] as string;
      const coll = registry.get(kind).collective;
      if (coll?.pattern === 'p2p') {
        const spec = p.peers[op];
        if (spec === undefined) continue;
        const peer = guard(ctx, r, path, () => resolvePeer(ctx, spec, r, path));
        if (peer === undefined) continue;
        const send = coll.side === 'send';
        const key = send ? `${r}>${peer}` : `${peer}>${r}`;
        let q = p2p.get(key);
        if (q === undefined) p2p.set(key, (q = { sends: [], recvs: [] }));
        (send ? q.sends : q.recvs).push(op);
        continue;
      }
      const spec = p.groups[op];
      if (spec === undefined) continue;
      // Each distinct group is resolved and keyed once: per-call work must not grow with the
      // group size, or matching a 1024-rank data-parallel group is quadratic.
      let g: { members: Int32Array; calls: Map<number, number[]> } | undefined;
      if (spec.kind === 'axes') {
        const gk = `a${spec.axes.join('.')}|${groupBase(mesh, r, spec.axes)}`;
        g = groupCalls.get(gk);
        if (g === undefined) groupCalls.set(gk, (g = { members: mesh.groupAlong(r, spec.axes), calls: new Map() }));
      } else {
        const members = guard(ctx, r, path, () => resolveGroup(ctx, spec, r, path));
        if (members === undefined) continue;
        if (!members.includes(r)) {
          sink.add(jpath(path, 'group'), `the group [${[...members].join(', ')}] does not contain the calling rank`, `rank ${r} op '${p.ops.ids.name(op)}'`);
          continue;
        }
        // Rank lists share queues with axis groups of the same members (one communicator).
        const gk = sameAsAxes(mesh, members) ?? `r${members.join(',')}`;
        g = groupCalls.get(gk);
        if (g === undefined) groupCalls.set(gk, (g = { members, calls: new Map() }));
      }
      let list = g.calls.get(r);
      if (list === undefined) g.calls.set(r, (list = []));
      list.push(op);
    }
  }
  // A call whose group or peer failed to resolve is missing from its queue: matching the
  // rest would report false mismatches, so stop at the real error.
  if (ctx.sink.size > issuesBefore) return;
  for (const g of groupCalls.values()) {
    const members = [...g.members];
    const counts = members.map((m) => g.calls.get(m)?.length ?? 0);
    // Loops, not Math.max(...counts): a group can have a million members (a spread of that
    // many arguments overflows the stack).
    let n = 0;
    let least = Infinity;
    for (const c of counts) {
      if (c > n) n = c;
      if (c < least) least = c;
    }
    if (least !== n) {
      const first = members.find((m) => (g.calls.get(m)?.length ?? 0) === n) as number;
      const op0 = (g.calls.get(first) as number[])[least] as number;
      const p0 = programs[rankProgram[first] as number] as Program;
      const shown = members.slice(0, 16);
      const more = members.length > shown.length ? `, ... (${members.length} ranks)` : '';
      sink.add(
        p0.ops.ids.paths[op0] as string,
        `collective calls on group [${shown.join(', ')}${more}] do not match: ${shown.map((m, i) => `rank ${m} makes ${counts[i]}`).join(', ')}${more}`,
        `${opLabel(ctx, first, op0)} (call ${least + 1} on this group)`,
      );
      continue;
    }
    for (let k = 0; k < n; k++) {
      const sites = Int32Array.from([...g.members].map((m) => (g.calls.get(m) as number[])[k] as number));
      out.push(makeInstance(ctx, g.members, sites, k));
    }
  }
  for (const [key, q] of p2p) {
    const [src, dst] = key.split('>').map(Number) as [number, number];
    if (q.sends.length !== q.recvs.length) {
      const more = q.sends.length > q.recvs.length;
      const r = more ? src : dst;
      const op = (more ? q.sends : q.recvs)[Math.min(q.sends.length, q.recvs.length)] as number;
      const p = programs[rankProgram[r] as number] as Program;
      sink.add(
        p.ops.ids.paths[op] as string,
        `rank ${src} sends ${q.sends.length} tensor(s) to rank ${dst}, which receives ${q.recvs.length} from it: this ${more ? 'send' : 'recv'} has no match`,
        opLabel(ctx, r, op),
      );
      continue;
    }
    q.sends.forEach((s, k) => out.push(makeInstance(ctx, Int32Array.of(src, dst), Int32Array.of(s, q.recvs[k] as number), k)));
  }
}

export function makeInstance(ctx: Ctx, members: Int32Array, sites: Int32Array, k: number): CollectiveInstance {
  const m0 = members[0] as number;
  const p0 = ctx.programs[ctx.rankProgram[m0] as number] as Program;
  const op0 = sites[0] as number;
  const attrs = ctx.view(m0).attrs[op0] as Attrs;
  const inputs = new Int32Array(members.length).fill(-1);
  const outputs = new Int32Array(members.length).fill(-1);
  let kind = p0.ops.kind[op0] as number;
  const a0 = canonicalJson(attrs);
  members.forEach((m, i) => {
    const p = ctx.programs[ctx.rankProgram[m] as number] as Program;
    const op = sites[i] as number;
    inputs[i] = p.ops.opInputs(op)[0] ?? -1;
    outputs[i] = p.ops.opOutputs(op)[0] ?? -1;
    const mk = p.ops.kind[op] as number;
    const isP2p = registry.get(mk).collective?.pattern === 'p2p';
    if (i > 0 && mk !== kind && !isP2p) {
      ctx.sink.add(p.ops.ids.paths[op] as string, `call ${k + 1} on group [${[...members].join(', ')}] is '${registry.get(mk).name}' here but '${registry.get(kind).name}' on rank ${m0} (calls are matched by order)`, opLabel(ctx, m, op));
    } else if (i > 0 && !isP2p && canonicalJson(ctx.view(m).attrs[op]) !== a0) {
      ctx.sink.add(p.ops.ids.paths[op] as string, `attributes ${canonicalJson(ctx.view(m).attrs[op])} differ from rank ${m0}'s ${a0} for call ${k + 1} on this group`, opLabel(ctx, m, op));
    }
  });
  if (registry.get(kind).collective?.pattern === 'p2p') kind = registry.id('send_recv');
  return { id: p0.ops.ids.name(op0), kind, attrs, group: members, inputs, outputs, sites, path: p0.ops.ids.paths[op0] as string, microbatch: p0.microbatch[op0] as number };
}

/** Shape and arity agreement across the members of one instance. */
export function checkInstance(ctx: Ctx, inst: CollectiveInstance): void {
  const def = registry.get(inst.kind);
  const coll = def.collective;
  if (coll === undefined) return;
  const g = inst.group.length;
  const label = (i: number): string => {
    const r = inst.group[i] as number;
    const s = inst.sites[i] as number;
    return s >= 0 ? opLabel(ctx, r, s) : `collective '${inst.id}' on rank ${r}`;
  };
  const shapeOf = (i: number, t: number): Shape => ctx.view(inst.group[i] as number).shapes[t] as Shape;
  const pathOf = (i: number): string => {
    const s = inst.sites[i] as number;
    if (s < 0) return inst.path;
    const p = ctx.programs[ctx.rankProgram[inst.group[i] as number] as number] as Program;
    return p.ops.ids.paths[s] as string;
  };
  if (inst.sites[0] !== -1) {
    const bad = registry.checkAttrs(inst.kind, inst.attrs);
    if (bad !== undefined) {
      ctx.sink.add(pathOf(0), bad, label(0));
      return;
    }
  }
  if (coll.pattern === 'p2p') {
    const i = inst.inputs[0] as number;
    const o = inst.outputs[1] as number;
    if (i < 0 || o < 0) {
      ctx.sink.add(pathOf(i < 0 ? 0 : 1), i < 0 ? 'the sender passes no tensor' : 'the receiver names no output tensor', label(i < 0 ? 0 : 1));
      return;
    }
    if (!sameShape(shapeOf(0, i), shapeOf(1, o))) {
      ctx.sink.add(pathOf(1), `receives ${shapeStr(shapeOf(1, o))} but rank ${inst.group[0]} sends ${shapeStr(shapeOf(0, i))}`, label(1));
    }
    return;
  }
  let srcIdx = 0;
  if (coll.pattern === 'broadcast') {
    const src = inst.attrs['src'];
    srcIdx = inst.group.indexOf(typeof src === 'number' ? src : -1);
    if (srcIdx < 0) {
      ctx.sink.add(pathOf(0), `broadcast source rank ${String(src)} is not in the group [${[...inst.group].join(', ')}]`, label(0));
      return;
    }
  }
  let ref: Shape | undefined;
  for (let i = 0; i < g; i++) {
    const t = inst.inputs[i] as number;
    const needs = coll.pattern === 'symmetric' || i === srcIdx;
    if (needs && t < 0) {
      ctx.sink.add(pathOf(i), `member rank ${inst.group[i]} passes no input to '${def.name}'`, label(i));
      return;
    }
    // A non-source member may pass a receive buffer (torch.distributed.broadcast's in-place
    // tensor); its value is ignored but its shape must agree.
    if (inst.outputs[i] as number < 0) {
      ctx.sink.add(pathOf(i), `member rank ${inst.group[i]} receives no output from '${def.name}'`, label(i));
      return;
    }
    if (t < 0) continue;
    const s = shapeOf(i, t);
    if (ref === undefined) ref = s;
    else if (!sameShape(ref, s)) {
      ctx.sink.add(pathOf(i), `input ${shapeStr(s)} differs from ${shapeStr(ref)} on rank ${inst.group[0]}: members of '${def.name}' must pass equal shapes`, label(i));
      return;
    }
  }
  if (ref === undefined) return;
  let expect: Shape;
  try {
    expect = coll.outShape(ref, inst.attrs, g);
  } catch (e) {
    if (e instanceof ShapeError) {
      ctx.sink.add(pathOf(0), `shape error: ${e.message}`, label(0));
      return;
    }
    throw e;
  }
  for (let i = 0; i < g; i++) {
    const s = shapeOf(i, inst.outputs[i] as number);
    if (!sameShape(s, expect)) {
      ctx.sink.add(pathOf(i), `output is declared ${shapeStr(s)} but ${def.name} over ${g} ranks of ${shapeStr(ref)} gives ${shapeStr(expect)}`, label(i));
    }
  }
}
