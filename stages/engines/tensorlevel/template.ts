/**
 * Tensor-level proofs per template (docs/engine.md, "Tensor level per template"): a stage
 * decomposed per template (stages/decompose/template.ts) derived once at each program's base
 * rank, rank-dependent quantities affine in the mesh coordinates (sym.ts), claims fitted over
 * the coordinates they depend on, collectives on groups inside a program read at the base.
 */
import { evalLineage, groupKey, type LineageNF } from '../../../lineage/model.js';
import { registry } from '../../../ops/registry.js';
import { type AttrSpec, type IntSpec, type LineageSpec, placementStr, type Program } from '../../../plans/model.js';
import { checkRunClock } from '../../clock.js';
import { CollectiveRules } from './collectives.js';
import { axisSites, type TemplateStageRef, type TemplateFrame, everyPoint, sameSetsOutside, setId, substValue } from './frames.js';
import { type Range, type Frac, frac, fmul, feq, type Comp, type Relation, type Value, type Derived, regionKey, sameRel, sameAddend, attrsKey, MAX_LIFT_POINTS, evenPlacements, type StageRef, type Ctx, type Shared } from './relations.js';
import { AddendGroups } from './addends.js';
import { badRange, rangeAxes, restripe, stripeRange } from './stripes.js';
import { cutAlong, cutAxis, splits } from './pieces.js';
import { iadd, iaxes, icmp, ieval, ikey, Sym, type Int } from './sym.js';

const NOT_AFFINE = 'a claim that is not affine in the coordinates';

/** A claim fitted and checked over a frame's coordinates: its flattened affine values, range counts per dim, value map. */
interface WalkedClaim {
  readonly sym: readonly Int[];
  readonly lens: readonly number[];
  readonly value: LineageNF['value'];
}

const intKey = (x: IntSpec): string => (typeof x === 'number' ? String(x) : `(${x.source})`);
/**
 * Everything a claim's walk reads but the logical tensor's id: the spec as written (expressions
 * by their source, evaluated in the rank's environment only), the logical and local shapes.
 */
function walkKey(spec: LineageSpec, lshape: readonly number[], local: readonly number[]): string {
  const body = spec.kind === 'placements' ? `P${spec.placements.map(placementStr).join(',')}` : `I${spec.dims === undefined ? 'all' : spec.dims.map((d) => (d === undefined ? '*' : d.map(intKey).join(','))).join(';')}|${intKey(spec.idx)}|${spec.n}|${spec.reduce}|${spec.divisor}|${spec.split}`;
  return `${body}|${lshape.join(',')}|${local.join(',')}`;
}

export abstract class TemplateRules extends CollectiveRules {
  /**
   * A stage decomposed per template (stages/decompose/template.ts): each part (program, tensor) is
   * derived once at the program's base rank, with rank-dependent quantities affine in the
   * coordinates, and must equal its claim as affine functions, hence at every rank. Addend
   * claims are checked per coordinate of the axes their index and the derived addends depend
   * on: the derived addends of each claimed region must partition its value, as prove() checks
   * rank by rank.
   */
  proveTemplate(stage: TemplateStageRef): { proved: true } | { why: string; part?: number } {
    // A claim found not affine on its program's box asks for the program cut into pieces
    // (templateClaim): installed, the stage is derived again from scratch (a few times at most).
    for (let tries = 0; ; tries++) {
      const res = this.proveTemplateOnce(stage);
      if ('proved' in res || this.wantPieces.size === 0 || tries >= 3) {
        this.wantPieces.clear();
        return res;
      }
      // The same cut on every program with the same coordinates along its axis, so that
      // groups and transfers between programs still meet frames with equal sets (groupInputs).
      for (const [pi, ps] of this.wantPieces) {
        const whole = this.tmpl?.[pi] as TemplateFrame;
        const a = cutAxis(whole, ps);
        for (const [qi, f] of (this.tmpl ?? []).entries()) {
          if (typeof f === 'string' || this.pieces.has(qi) || !sameSetsOutside(f, whole, whole.sets.map((_, b) => b).filter((b) => b !== a))) continue;
          const cut = cutAlong(this.plan, f, a, ps.length);
          if (cut !== undefined) this.pieces.set(qi, cut);
        }
      }
      this.wantPieces.clear();
      // Caches that may hold a whole box's answer for a piece's base rank or call site.
      this.claimCache.clear();
      this.across.clear();
      for (const [k, v] of this.pure) if (typeof v === 'string') this.pure.delete(k);
    }
  }

  private proveTemplateOnce(stage: TemplateStageRef): { proved: true } | { why: string; part?: number } {
    checkRunClock();
    const tmpl = this.tmpl;
    if (tmpl === undefined) return { why: 'not a per-template prover' };
    const derive = this.deriver(stage, { memo: new Map(), coll: new Map(), collImpure: new Set() });
    const groups = new AddendGroups();
    // Each part once per frame: its program's box, or each piece of it (pieces.ts).
    const frames = stage.parts.flatMap((part, pix) => (this.pieces.get(part.program) ?? [tmpl[part.program]]).map((frame) => ({ part, pix, frame })));
    for (const { part, pix, frame } of frames) {
      const prog = this.plan.programs[part.program] as Program;
      if (frame === undefined || typeof frame === 'string') return { why: frame ?? 'no template' };
      if (part.ranks !== prog.ranks.length) return { why: `per template: ${part.ranks} of the ${prog.ranks.length} ranks of '${prog.name}' hold '${prog.tensors.name(part.tensor)}'` };
      this.frame = frame;
      const r0 = frame.r0;
      const name = `'${prog.name}' '${prog.tensors.name(part.tensor)}'`;
      const claim = this.canonical(this.templateClaim(r0, part.tensor));
      if (typeof claim === 'string') return { why: `${name}: the claim is ${claim}`, part: pix };
      const d0 = derive(r0, part.tensor, 0);
      const d = typeof d0 === 'string' ? d0 : this.materialize(d0);
      if (typeof d === 'string') return { why: `${name}: ${d}`, part: pix };
      if (claim.part === undefined) {
        if (d.part !== undefined || !sameRel(d, claim)) return { why: `${name}: derived ${this.show(d)}, claimed ${this.show(claim)}`, part: pix };
        continue;
      }
      if (d.part === undefined || regionKey(d) !== regionKey(claim) || !feq(d.scale, claim.scale)) return { why: `${name}: derived ${this.show(d)}, claimed addend ${this.show(claim)}`, part: pix };
      const idx0 = (claim.part.comps[0] as Comp).cover[0] as Int;
      const n = (claim.part.comps[0] as Comp).total;
      // The axes the index and the addends move with; the region's other axes stay symbolic in
      // the group key: along them every region sees the same addends (docs/engine.md).
      const axes = [...new Set([...iaxes(idx0), ...d.part.comps.flatMap((c) => c.cover.flatMap(iaxes))])].sort((a, b) => a - b);
      const points = axes.reduce((q, a) => q * (frame.sets[a] as Int32Array).length, 1);
      if (points > MAX_LIFT_POINTS) {
        // Too many coordinates to walk: proved without the walk when the derived addend equals
        // the claimed one as affine functions of the coordinates (so at every rank) and the
        // claim is of placements (affine, templateClaim) whose every partial axis this program
        // spans whole: then every addend of every group is claimed by a rank of this part, the
        // partial index idx * m + c runs over 0..n-1 once per group, and the derived addends
        // partition each value as the walk would find (docs/engine.md, "Tensor level per template").
        const spec = prog.lineage[part.tensor];
        const whole = spec?.kind === 'placements' && spec.placements.every((pl, a) => pl.k !== 'P' || (frame.sets[a]?.length ?? 0) === (this.plan.mesh.sizes[a] as number));
        if (whole && sameAddend(d, claim)) continue;
        return { why: `${name}: addends over ${points} coordinates`, part: pix };
      }
      const bad = groups.walk(claim, d, axes, frame, n);
      if (bad !== undefined) return { why: `${name}: ${bad}`, part: pix };
    }
    const bad = groups.check();
    if (bad !== undefined) return { why: bad };
    return { proved: true };
  }

  /**
   * deriveOne per template: r is the program's base rank and every rank-dependent quantity is
   * affine in the coordinates (stages/engines/tensorlevel/sym.ts). Claims are fitted over the coordinates they
   * depend on and checked at each; a collective whose group lies inside the program reads its
   * members' inputs as the base's input with the group's coordinates substituted.
   */
  protected deriveOneTemplate(stage: StageRef, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, ctx: Ctx): Derived {
    if (this.pieces.size === 0) return this.deriveOneTemplateIn(stage, r, t, depth, derive, ctx);
    // With pieces, checks over the box (lifted, bounds) read r's own frame, not the part's.
    const saved = this.frame;
    const f = this.frameAt(r);
    if (f === undefined || typeof f === 'string') return f ?? 'no template';
    this.frame = f;
    try {
      return this.deriveOneTemplateIn(stage, r, t, depth, derive, ctx);
    } finally {
      this.frame = saved;
    }
  }

  private deriveOneTemplateIn(stage: StageRef, r: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived, ctx: Ctx): Derived {
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const lop = (this.localProd[pi] as Int32Array)[t] as number;
    const site = lop >= 0 ? -1 : ((this.siteProd[pi] as Int32Array)[t] as number);
    const produced = lop >= 0 || site >= 0;
    const spec = p.lineage[t];
    if (spec !== undefined && produced) {
      this.impure++;
      if (spec.logical === stage.logical) ctx.seen?.recomputes.add(spec.logical);
      else ctx.seen?.assumes.add(spec.logical);
    }
    if (spec !== undefined && (spec.logical !== stage.logical || !produced)) {
      // A hint (lineage marked inferred) is proved where it is produced; on a tensor no op
      // writes nothing proves it, so it is never assumed.
      if (!produced && p.inferred?.has(t) === true) return `'${p.tensors.name(t)}' has only an inferred hint and no producer`;
      const ck = r * this.tensorKey + t;
      const hit = this.claimCache.get(ck);
      if (hit !== undefined) return hit;
      const rel = this.canonical(this.templateClaim(r, t));
      this.claimCache.set(ck, rel);
      return rel;
    }
    if (!produced) return `'${p.tensors.name(t)}' has no producer and no lineage`;
    if (lop >= 0) {
      const a = p.attrSpecs[lop];
      if (a !== undefined && !this.fixedOnFrame(r, a)) return `per template: op '${p.ops.ids.name(lop)}' has attributes that depend on the coordinates`;
      return this.deriveOp(r, lop, t, depth, derive);
    }
    const frame = this.frameAt(r);
    if (frame === undefined || typeof frame === 'string') return frame ?? 'no template';
    const attrSpec = p.attrSpecs[site];
    if (attrSpec !== undefined && !this.fixedOnFrame(r, attrSpec)) return `per template: collective '${p.ops.ids.name(site)}' has attributes that depend on the coordinates`;
    const g = p.groups[site];
    if (g === undefined) return this.p2pTemplate(r, pi, site, depth, derive);
    if (g.kind !== 'axes') return `per template: collective '${p.ops.ids.name(site)}' has a group given by ranks (derived rank by rank)`;
    const axes = [...g.axes].sort((a, b) => a - b);
    const mesh = plan.mesh;
    const members = axes.reduce((q, a) => q * (mesh.sizes[a] as number), 1);
    if (members > MAX_LIFT_POINTS) return this.bigGroupSum(r, pi, site, t, axes, members, depth, derive);
    const key = -1 - (this.frameNo(r) * this.opKey + site);
    const shared = this.sharedCall(key, stage, ctx, (sub) => this.groupInputs(r, pi, site, g.axes, axes, depth, sub));
    if (typeof shared === 'string') return shared;
    // This rank's place in its group, affine in the group's coordinates.
    let stride = 1;
    let pos = 0;
    const k = Array<number>(mesh.axes.length).fill(0);
    for (let j = axes.length - 1; j >= 0; j--) {
      const a = axes[j] as number;
      pos += (frame.x0[a] as number) * stride;
      k[a] = stride;
      stride *= mesh.sizes[a] as number;
    }
    const kind = registry.get(p.ops.kind[site] as number).name;
    if (kind === 'broadcast') return 'per template: a broadcast (its source is a rank, not a place in the group)';
    return restripe(this.deriveCollective(kind, plan.view(r).attrs[site] ?? {}, shared, Sym.of(pos, k), shared.ins.length, plan.view(r).shapes[t] ?? [], -1));
  }

  /**
   * The op's attributes are the same on every rank of r's frame: each expression in them reads
   * only mesh axes that the frame holds at one coordinate (a CP program's zig-zag slice of the
   * rope tables, `2048*cp`, in a program per cp coordinate). An expression is a function of the
   * variables it reads, so r's attributes are every rank's; anything reading `rank` or an axis
   * the frame varies is refused, as before (docs/engine.md, "Tensor level per template").
   */
  private fixedOnFrame(r: number, a: AttrSpec): boolean {
    if (a.exprs.length === 0) return true;
    const f = this.frameAt(r);
    if (f === undefined || typeof f === 'string') return false;
    const mesh = this.plan.mesh;
    return a.exprs.every(([, e]) =>
      e.vars.every((v) => {
        const ax = v === 'rank' ? -1 : mesh.axisIndex(v);
        return ax >= 0 && (f.sets[ax]?.length ?? 0) === 1;
      }),
    );
  }

  /**
   * An all-reduce (sum or avg) over a group too large to list (past MAX_LIFT_POINTS members) as
   * one symbolic sum (docs/engine.md, "Tensor level per template"). Taken only when the group's
   * members are exactly this program's ranks along the group axes (its box spans them whole and
   * no other program runs one of its ranks), and the base's input, derived once with affine
   * coordinates, is one addend of a decomposition into as many addends as members whose index
   * is the member's position in the group (plans/mesh.ts groupAlong: the written axes in order,
   * the last fastest), over a region and a scale the group axes do not move. Then the members
   * hold the addends 0..n-1 once each, and their sum is the whole region (avg: over n).
   */
  protected bigGroupSum(r: number, pi: number, site: number, t: number, written: readonly number[], n: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.frameAt(r) as TemplateFrame;
    const kind = registry.get(p.ops.kind[site] as number).name;
    const red = String((plan.view(r).attrs[site] ?? {})['reduce']);
    const no = (why: string): string => `per template: a ${kind} over a group of ${n} members: ${why}`;
    if (kind !== 'all_reduce' || (red !== 'sum' && red !== 'avg')) return no('only a sum or avg all-reduce is taken as one symbolic sum');
    if (!written.every((a) => frame.full[a] === true)) return no(`program '${p.name}' does not span the group axes whole`);
    const boxRanks = frame.sets.reduce((q, s) => q * s.length, 1);
    if (p.ranks.length !== boxRanks || p.ranks.some((x) => plan.rankProgram[x] !== pi)) return no(`another program runs some of the ranks of '${p.name}'`);
    const x = p.ops.opInputs(site)[0];
    if (x === undefined) return 'a collective with no input';
    const d0 = derive(frame.r0, x, depth + 1);
    if (typeof d0 === 'string') return d0;
    const d = this.materialize(d0);
    if (typeof d === 'string') return d;
    const comp = d.part?.comps[0];
    if (d.part === undefined || d.part.max === true || d.part.comps.length !== 1 || comp === undefined || d.bcast !== undefined || comp.total !== n) return no('its input is not one addend of a decomposition into as many addends as members');
    // The member's position: the written axes in order, the last fastest (groupAlong).
    const k = Array<number>(mesh.axes.length).fill(0);
    let stride = 1;
    for (let j = written.length - 1; j >= 0; j--) {
      const a = written[j] as number;
      k[a] = stride;
      stride *= mesh.sizes[a] as number;
    }
    const pos = Sym.of(written.reduce((q, a) => q + (frame.x0[a] as number) * (k[a] as number), 0), k);
    const c = comp.cover[0] as Int;
    const one = comp.kind === 'idx' ? comp.cover.length === 1 : comp.cover.length === 2 && icmp(comp.cover[1] as Int, iadd(c, 1)) === 0;
    if (!one || icmp(c, pos) !== 0) return no("its addend index is not the member's position in the group");
    if (d.ranges.some((rg) => rangeAxes(rg).some((a) => written.includes(a)))) return no('its region moves along the group axes');
    const scale = red === 'avg' ? fmul(d.scale, frac(1, n) as Frac) : d.scale;
    if (scale === undefined) return 'scale overflow';
    return this.checked({ logical: d.logical, ranges: d.ranges, scale }, plan.view(r).shapes[t] ?? []);
  }

  /**
   * The members' inputs of a group call per template, in coordinate order (plans/mesh.ts
   * groupAlong: the last group axis fastest). A member in this program is the base's input with
   * the group's coordinates substituted; a member in another program (a group along an axis
   * the program does not vary, as pipeline stages) runs the call that the loader's matching
   * pairs with this one: the same position among its calls on the same group axes. The other
   * axes' coordinates must be the same sets in both programs, so affine values carry over.
   */
  protected groupInputs(r: number, pi: number, site: number, written: readonly number[], axes: readonly number[], depth: number, derive: (r: number, t: number, depth: number) => Derived): Shared | string {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.frameAt(r) as TemplateFrame;
    const n = axes.reduce((q, a) => q * (mesh.sizes[a] as number), 1);
    if (n > MAX_LIFT_POINTS) return `per template: a group of ${n} members`;
    const k = this.sitesOn(pi, written).indexOf(site);
    const ins: Value[] = [];
    // The members of the base rank's group, in the order the loader matches them.
    for (const m of mesh.groupAlong(frame.r0, axes)) {
      const at = mesh.coords(m);
      const qi = plan.rankProgram[m] as number;
      const qf = this.frameAt(m);
      if (qf === undefined || typeof qf === 'string') return qf ?? 'no template';
      // A member in another piece (of this program or of one cut the same way): its input is
      // derived at that piece's base and substituted at its coordinates on the group axes, so
      // the sets may differ there (and only there: elsewhere the residual affine values must
      // mean the same, as between programs).
      const skip = qf !== frame && (this.pieces.has(pi) || this.pieces.has(qi)) ? [...axes] : [];
      // Only axes neither program varies may differ (pipeline stages): where either varies, the
      // two bases agree, so affine values (and region maps checked on this frame) mean the same.
      if (!sameSetsOutside(frame, qf, [...skip, ...axes.filter((a) => (frame.sets[a]?.length ?? 0) === 1 && (qf.sets[a]?.length ?? 0) === 1)])) return `per template: the group of '${p.ops.ids.name(site)}' reaches program '${(plan.programs[qi] as Program).name}', whose ranks differ outside the group`;
      const q = plan.programs[qi] as Program;
      let qs = site;
      if (qi !== pi) {
        qs = this.sitesOn(qi, written)[k] ?? -1;
        if (qs < 0 || q.ops.kind[qs] !== p.ops.kind[site] || attrsKey(plan.view(qf.r0).attrs[qs]) !== attrsKey(plan.view(r).attrs[site]) || (q.attrSpecs[qs]?.exprs.length ?? 0) > 0) return `per template: no matching call of '${p.ops.ids.name(site)}' in program '${q.name}'`;
        this.use?.same(p.ops.kind[site] as number, plan.view(qf.r0).attrs[qs], plan.view(r).attrs[site]);
      }
      const x = q.ops.opInputs(qs)[0];
      if (x === undefined) return 'a collective with no input';
      const d = derive(qf.r0, x, depth + 1);
      if (typeof d === 'string') return d;
      ins.push(substValue(d, axes, at, qf.x0));
    }
    return { ins, memo: new Map() };
  }

  /** Per program: its call sites on groups along these axes (as written), in program order. */
  protected sitesOn(pi: number, axes: readonly number[]): number[] {
    const key = `${pi}|${axes.join('.')}`;
    let hit = this.siteLists.get(key);
    if (hit === undefined) {
      hit = [...(axisSites(this.plan.programs[pi] as Program, axes) ?? [])];
      this.siteLists.set(key, hit);
    }
    return hit;
  }
  protected readonly siteLists = new Map<string, number[]>();
  /** p2pTemplate's pairings: receive site -> the send it pairs with (undefined: none). */
  private readonly p2pPairs = new Map<string, Map<number, number | undefined>>();

  /**
   * A receive per template from a peer given by a shift along axes the program does not vary
   * (pipeline stages): every rank of the box receives from the same program, at the same
   * coordinates elsewhere. The send it pairs with is the same position among the sender's sends
   * to this rank as this receive among its receives from the sender (plans/collectives.ts).
   */
  protected p2pTemplate(r: number, pi: number, site: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const mesh = plan.mesh;
    const p = plan.programs[pi] as Program;
    const frame = this.frameAt(r) as TemplateFrame;
    const name = registry.get(p.ops.kind[site] as number).name;
    const peerOf = (q: Program, op: number, x0: readonly number[]): number | undefined => {
      const spec = q.peers[op];
      if (spec === undefined || spec.kind !== 'shift') return undefined;
      const c = [...x0];
      for (const [a, d] of spec.shift) {
        const v = (c[a] as number) + d;
        if (v < 0 || v >= (mesh.sizes[a] as number)) return undefined;
        c[a] = v;
      }
      return mesh.rankOf(c);
    };
    if (name !== 'recv') return `per template: '${name}' between ranks is derived rank by rank`;
    const spec = p.peers[site];
    if (spec === undefined || spec.kind !== 'shift') return `per template: '${p.ops.ids.name(site)}' has a peer given by a rank`;
    if (spec.shift.some(([a]) => (frame.sets[a]?.length ?? 0) !== 1)) return `per template: '${p.ops.ids.name(site)}' shifts along an axis the program varies`;
    const peer = peerOf(p, site, frame.x0);
    if (peer === undefined) return `per template: '${p.ops.ids.name(site)}' has no peer`;
    const qi = plan.rankProgram[peer] as number;
    const qf = this.frameAt(peer);
    if (qf === undefined || typeof qf === 'string') return qf ?? 'no template';
    const shifted = spec.shift.map(([a]) => a);
    if (shifted.some((a) => (qf.sets[a]?.length ?? 0) !== 1) || !sameSetsOutside(frame, qf, shifted) || qf.r0 !== peer) return `per template: '${p.ops.ids.name(site)}' receives from program '${(plan.programs[qi] as Program).name}', whose ranks differ`;
    const q = plan.programs[qi] as Program;
    // The pairing of this frame's receives from `peer` with the peer's sends to the base, built
    // once per (program, base coordinates, peer): it is a function of those alone, and ring
    // attention asks for it at every one of a program's thousands of receives, every stage.
    const pk = `${pi}|${frame.x0.join(',')}|${peer}`;
    let pairs = this.p2pPairs.get(pk);
    if (pairs === undefined) {
      const mine = [...p.collectiveSites].filter((op) => registry.get(p.ops.kind[op] as number).name === 'recv' && peerOf(p, op, frame.x0) === peer);
      const theirs = [...q.collectiveSites].filter((op) => registry.get(q.ops.kind[op] as number).name === 'send' && peerOf(q, op, qf.x0) === frame.r0);
      pairs = new Map(mine.map((op, i) => [op, theirs[i]]));
      this.p2pPairs.set(pk, pairs);
    }
    const sendOp = pairs.get(site);
    if (sendOp === undefined) return `per template: no send pairs with '${p.ops.ids.name(site)}'`;
    const x = q.ops.opInputs(sendOp)[0];
    if (x === undefined) return 'a send with no input';
    return derive(qf.r0, x, depth + 1);
  }

  /**
   * A claim per template: its normal form at every coordinate of the axes its spec reads (the
   * loader's `axes`), fitted as affine functions at the base and one step per axis and checked
   * at every point; constant parts (factor, addend count, reduction) must not vary.
   */
  protected templateClaim(r: number, t: number): Relation | string {
    const pi = this.plan.rankProgram[r] as number;
    const frame = this.frameAt(r);
    if (frame === undefined || typeof frame === 'string') return frame ?? 'no template';
    const rel = this.claimOn(frame, r, t);
    if (rel !== NOT_AFFINE || this.pieces.has(pi) || this.wantPieces.has(pi)) return rel;
    // Not affine on the whole box: the first cut (fewest pieces) on which this claim is
    // affine on every piece, fitted and checked there as on a box (pieces.ts). proveTemplate
    // installs it and derives the stage again; the claim stays refused on the whole box.
    for (const ps of splits(this.plan, frame)) {
      if (ps.every((f) => typeof this.claimOn(f, f.r0, t) !== 'string')) {
        this.wantPieces.set(pi, ps);
        break;
      }
    }
    return rel;
  }

  /** Claims walked over the coordinates, per frame and walkKey (see claimOn). */
  private readonly walks = new Map<string, WalkedClaim | string>();
  /** Whether a lineage spec is affine by construction (claimOn). */
  private readonly affineSpecs = new WeakMap<object, boolean>();

  /** templateClaim on one frame (a program's box or a piece of it); r is a rank of it. */
  private claimOn(frame: TemplateFrame, r: number, t: number): Relation | string {
    const plan = this.plan;
    const pi = plan.rankProgram[r] as number;
    const p = plan.programs[pi] as Program;
    const spec = p.lineage[t];
    if (spec === undefined) return 'no lineage';
    if (spec.axes.includes(-1)) return 'a claim that reads the rank number';
    // An index map of numbers and affine expressions (plans/expr.ts: built from literals, axes,
    // + - and constant products, never out of range) is affine by construction: fitted along
    // every axis the program varies, it is exact, and the walk below would only repeat it.
    // Placements (torch.chunk sizes) and other expressions are walked over the axes they read.
    // Placements are affine too when every Shard splits its piece evenly (lineage/model.ts
    // expandPlacements: offsets lo + c * L/m, partial indices idx * m + c): nothing is clamped.
    // Per spec object, once: the answer reads only the spec, the mesh and its logical shape.
    let affineSpec = this.affineSpecs.get(spec);
    if (affineSpec === undefined) {
      const lshape0 = plan.logical.shapes[spec.logical] ?? [];
      affineSpec = spec.kind === 'index' ? [...(spec.dims ?? []).flatMap((d) => d ?? []), spec.idx].every((x) => typeof x === 'number' || x.affine !== undefined) : evenPlacements(spec.placements, plan.mesh.sizes, lshape0);
      this.affineSpecs.set(spec, affineSpec);
    }
    const mesh = plan.mesh;
    // Shapes do not depend on the coordinates (templateFrame): the base view's, never a view per rank.
    const lshape = plan.logical.shapes[spec.logical] ?? [];
    const local = plan.view(r).shapes[t] ?? [];
    const axes = (affineSpec ? frame.sets.map((_, a) => a) : [...spec.axes]).filter((a) => (frame.sets[a]?.length ?? 0) > 1).sort((a, b) => a - b);
    const points = axes.reduce((q, a) => q * (frame.sets[a] as Int32Array).length, 1);
    // The walk reads the spec's expressions, the shapes and the frame, never the logical
    // tensor's identity: tensors with the same pattern (every layer's) share it (walkKey). Of
    // the frame it reads the base on the axes the spec reads (evalLineage reads no other
    // coordinate) and the sets of the axes it walks (a subset): frames that agree there
    // (every pipeline stage's program) share it too.
    // An affine spec is fitted, not walked: from the base and one step along each axis in
    // `axes`, which the same key holds, so its fit is shared the same way.
    // The sets as interned ids (frames.ts setId): a set of 128 coordinates is ~400 characters
    // of text. (Built per call: a cache per spec object cost more memory than it saved, since
    // claims are asked for about once per tensor and frame.)
    const key = `${affineSpec ? 'A' : 'W'}|${walkKey(spec, lshape, local)}|${spec.axes.map((a) => `${a}=${frame.x0[a] ?? ''}`).join(',')}|${axes.map((a) => `${a}:${setId(frame.sets[a])}`).join(',')}`;
    if (!affineSpec && points > MAX_LIFT_POINTS) return `a claim over ${points} coordinates (at most ${MAX_LIFT_POINTS})`;
    const nfAt = (x: readonly number[]): LineageNF => evalLineage(spec, mesh, mesh.rankOf(x), lshape, local);
    // Flattened to numbers: [ranges..., idx], with the constant parts as text.
    // Striped dims (several ranges) are fitted piece by piece; the piece counts are part of the fixed text.
    const flat = (nf: LineageNF): { nums: number[]; fixed: string } | string => {
      const nums: number[] = [];
      for (const rg of nf.ranges) for (const x of rg) nums.push(x);
      const v = nf.value;
      nums.push(v.n === 1 ? 0 : v.idx);
      return { nums, fixed: `${nf.logical}|${v.divisor}|${v.n}|${v.reduce}|${groupKey(v)}|${nf.ranges.map((rg) => rg.length).join(',')}` };
    };
    const memo = this.walks;
    if (memo.size > 200_000) memo.clear();
    const hit = memo.get(key);
    if (typeof hit === 'string') return hit;
    if (hit !== undefined) return this.claimRelation(spec.logical, hit.sym, hit.lens, hit.value);
    const x0 = [...frame.x0];
    const nf0 = nfAt(x0);
    const b = flat(nf0);
    if (typeof b === 'string') return b;
    const coefs = b.nums.map(() => Array<number>(x0.length).fill(0));
    for (const a of axes) {
      const next = (frame.sets[a] as Int32Array).find((c) => c > (x0[a] as number));
      if (next === undefined) continue;
      const x = [...x0];
      x[a] = next;
      const f = flat(nfAt(x));
      if (typeof f === 'string') return f;
      if (f.fixed !== b.fixed || f.nums.length !== b.nums.length) return 'a claim whose factor, addends or reduction depend on the coordinates';
      const step = next - (x0[a] as number);
      for (let i = 0; i < b.nums.length; i++) {
        const diff = ((f.nums[i] as number) - (b.nums[i] as number)) / step;
        if (!Number.isInteger(diff)) return NOT_AFFINE;
        (coefs[i] as number[])[a] = diff;
      }
    }
    const sym = b.nums.map((v, i) => Sym.of(v, coefs[i] as number[]));
    // Checked at every coordinate of its axes (the others stay at the base).
    const bad = affineSpec
      ? undefined
      : everyPoint(axes, frame.sets, x0, (x) => {
          const f = flat(nfAt(x));
          if (typeof f === 'string') return f;
          return f.fixed !== b.fixed || f.nums.some((v, i) => v !== ieval(sym[i] as Int, x, x0)) ? NOT_AFFINE : undefined;
        });
    if (bad !== undefined) {
      memo.set(key, bad);
      return bad;
    }
    const lens = nf0.ranges.map((rg) => rg.length);
    memo.set(key, { sym, lens, value: nf0.value });
    return this.claimRelation(nf0.logical, sym, lens, nf0.value);
  }

  /** A walked claim as a relation: ranges (striped dims as their placeholder), scale and addend. */
  private claimRelation(logical: number, sym: readonly Int[], lens: readonly number[], v: LineageNF['value']): Relation | string {
    const ranges: Range[] = [];
    let at = 0;
    for (const n of lens) {
      const pieces: Range[] = [];
      for (let i = 0; i < n; i += 2, at += 2) pieces.push([sym[at] as Int, sym[at + 1] as Int]);
      // A striped dim as its placeholder (stages/engines/tensorlevel/stripes.ts).
      const one = pieces.length === 1 ? (pieces[0] as Range) : stripeRange(pieces);
      if (typeof one === 'string') return `the claim is ${one}`;
      ranges.push(one);
    }
    if (ranges.some(badRange)) return 'a region out of range';
    const scale = frac(v.divisor, 1);
    if (scale === undefined) return 'a divisor that is not an integer';
    if (v.n === 1) return { logical, ranges, scale };
    if (v.reduce !== 'sum') return `addends combined by ${v.reduce}`;
    const idx = sym[sym.length - 1] as Int;
    return { logical, ranges, scale, part: { key: `claim|${groupKey(v)}|${logical}|${ranges.map(([a, c]) => `${ikey(a)}:${ikey(c)}`).join(';')}`, comps: [{ kind: 'idx', cover: [idx], total: v.n }] } };
  }

}
