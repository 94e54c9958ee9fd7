/**
 * Tensor-level rules for local ops: the same op on a slice (by the op record's `dims` labels),
 * plain sums along a summed label, layout (reshape, narrow, pad), broadcasts, adds of addends
 * and scales (docs/engine.md, "Tensor-level proofs").
 */
import { registry } from '../../../ops/registry.js';
import { attrScalar, numel, type AttrValue, type Attrs, type DimLabel, type OpDef, type Shape } from '../../../ops/types.js';
import type { Program } from '../../../plans/model.js';
import { ProverBase } from './base.js';
import { type Range, ONE, fmul, feq, fkey, fdiv, parseFrac, type Comp, type Part, isMaxPart, type Relation, type Sum, type Value, type Derived, isSum, isSoftmax, isPack, termsOf, addTerms, attrsKey, dimAttr, PRODUCT, isProduct, type Sig, trailingUnits } from './relations.js';
import { concatStripes, mergedLayout, restripe, stripeOf, stripedLayout, windowOf, type LocalMap, type LogicalMap } from './stripes.js';
import { iadd, icmp, iconst, iscale, isub, Sym, type Int } from './sym.js';
import { maskedLocalIds, outsideMask, type MaskGraph } from './vocabforms.js';
import { LogicalPieces } from './logicalpieces.js';
import type { OpRef } from './world.js';

export abstract class SliceRules extends ProverBase {
  /** Regions restated on the logical graph's own pieces (logicalpieces.ts), made on first use. */
  private piecesOf: LogicalPieces | undefined;
  protected get logPieces(): LogicalPieces {
    this.piecesOf ??= new LogicalPieces(this.world, { split: this.splitKind, slice: this.sliceKind, concat: this.concatKind, expand: this.expandKind }, (r, sh) => this.checked(r, sh));
    return this.piecesOf;
  }
  protected normDim(v: AttrValue | undefined, rank: number): number {
    const d = typeof v === 'number' ? v : 0;
    return d < 0 ? d + rank : d;
  }

  /**
   * Input relation x (a plain scaled region: no addend, no broadcast) narrowed along dim to
   * [start, end) of the local input: the same logical tensor, that sub-region. Undefined when
   * the attributes are not integers (per template: affine in the coordinates).
   */
  protected narrowed(r: number, op: number, x: Relation, inShape: Shape, attrs: Attrs, n: NonNullable<OpDef['narrows']>, outShape: Shape): Relation | undefined {
    if (x.part !== undefined || x.bcast !== undefined || inShape.length !== x.ranges.length) return undefined;
    const d = dimAttr(attrs, n.dim, inShape.length);
    if (d === undefined) return undefined;
    const s = this.attrInt(r, op, n.start);
    const e = this.attrInt(r, op, n.end);
    const rg = x.ranges[d];
    if (s === undefined || e === undefined || rg === undefined) return undefined;
    // A striped range: the pieces the local window [s, e) keeps, in order (a fused QKV
    // projection's columns per rank, sliced back apart).
    if (stripeOf(rg) !== undefined) {
      if (typeof s !== 'number' || typeof e !== 'number') return undefined;
      const w = windowOf(rg, s, e - s);
      if (w === undefined) return undefined;
      const c = this.checked({ ...x, ranges: x.ranges.map((q, i) => (i === d ? w : q)) }, outShape);
      return typeof c === 'string' ? undefined : c;
    }
    const ranges = x.ranges.map((q, i): Range => (i === d ? [iadd(q[0], s), iadd(q[0], e)] : q));
    const c = this.checked({ ...x, ranges }, outShape);
    return typeof c === 'string' ? undefined : c;
  }

  /**
   * Input relation x (a plain scaled region [a, b) along dim of logical L, no addend, no
   * broadcast) padded with `before` = a zeros ahead and `after` = |L| - b behind: the chunk at its
   * own place in a tensor of L's extent, zero elsewhere. That is the addend over [a, b) of the
   * whole of L along dim (key pad|L|dim): pads of chunks that partition L along dim sum to L.
   */
  protected padded(r: number, op: number, x: Relation, inShape: Shape, attrs: Attrs, z: NonNullable<OpDef['zeroPads']>, outShape: Shape): Relation | undefined {
    if (x.bcast !== undefined || inShape.length !== x.ranges.length) return undefined;
    // An addend of one decomposition (a micro-batch's or a data-parallel rank's gradient): the
    // pad is the cell (its addend, this chunk) of the product of that decomposition and the
    // chunks; a product of products, or of a sum of decompositions, is refused.
    if (x.part !== undefined && (x.part.max === true || x.part.comps.length !== 1 || isProduct(x.part))) return undefined;
    const d = dimAttr(attrs, z.dim, inShape.length);
    if (d === undefined) return undefined;
    const before = this.attrInt(r, op, z.before);
    const after = this.attrInt(r, op, z.after);
    const rg = x.ranges[d];
    const size = this.world.shape(x.logical)[d];
    if (before === undefined || after === undefined || rg === undefined || size === undefined) return undefined;
    // The chunk goes back to its own place, and the result spans L's whole extent along dim.
    if (icmp(before, rg[0]) !== 0 || icmp(iadd(rg[1], after), size) !== 0) return undefined;
    const ranges = x.ranges.map((q, i): Range => (i === d ? [0, size] : q));
    const chunk: Comp = { kind: 'range', cover: [rg[0], rg[1]], total: size };
    const part: Part = x.part === undefined ? { key: `pad|${x.logical}|${d}`, comps: [chunk] } : { key: `${PRODUCT}pad|${x.logical}|${d}|${x.part.key}`, comps: [...x.part.comps, chunk] };
    const c = this.checked({ ...x, ranges, part }, outShape);
    return typeof c === 'string' ? undefined : c;
  }

  /** The derived region must be what the parallel tensor holds: its local shape. */
  protected checked(rel: Relation, shape: Shape): Relation | string {
    if (shape.length !== rel.ranges.length) return `derived ${this.show(rel)} for a tensor of rank ${shape.length}`;
    for (let i = 0; i < shape.length; i++) {
      const [a, b] = rel.ranges[i] as Range;
      const n = iconst(isub(b, a));
      if (n !== shape[i] && !(n === 1 && rel.bcast?.includes(i) === true)) return `derived ${this.show(rel)} for a tensor of shape [${shape.join(',')}]`;
    }
    return rel;
  }

  protected sig(op: number): Sig | null {
    const hit = this.dimsCache.get(op);
    if (hit !== undefined) return hit;
    const o = this.world.ops[op] as OpRef;
    let s: Sig | null;
    try {
      const d = registry.get(o.kind).dims(
        o.inputs.map((x) => this.world.shape(x)),
        o.attrs,
      );
      s = { inputs: d.inputs, outputs: d.outputs, sums: new Set(d.sums ?? []), maxes: new Set(d.maxes ?? []), grouped: d.grouped ?? [] };
    } catch {
      s = null;
    }
    this.dimsCache.set(op, s);
    return s;
  }

  protected deriveOp(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const vocab = this.vocabRule(r, op, t, depth, derive);
    if (vocab !== undefined) return restripe(vocab);
    const vals: Value[] = [];
    for (const x of p.ops.opInputs(op)) {
      const d = derive(r, x, depth + 1);
      if (typeof d === 'string') return d;
      vals.push(d);
    }
    // What the op reads from the rank's view: its attributes and its tensors' shapes (views
    // differ per coordinates; replicas that agree on these derive alike).
    // Keyed by the view's shape table: plan.view(r) copies a shared view per rank ({ ...v, rank }),
    // and its tables (built fresh per instantiated view, plans/programs.ts) are what the signature reads.
    let sigs = this.opSigs.get(view.shapes);
    if (sigs === undefined) this.opSigs.set(view.shapes, (sigs = new Map()));
    let osig = sigs.get(op);
    if (osig === undefined) {
      const sh = (x: number): string => (view.shapes[x] ?? []).join(',');
      const text = `${attrsKey(view.attrs[op])}|${[...p.ops.opInputs(op)].map(sh).join(';')}|${[...p.ops.opOutputs(op)].map(sh).join(';')}`;
      osig = this.sigIds.get(text);
      if (osig === undefined) this.sigIds.set(text, (osig = this.sigIds.size));
      sigs.set(op, osig);
    }
    const mkey = `${plan.rankProgram[r] as number}|${op}|${t}|${osig}|${vals.map((v) => this.valueId(v)).join(',')}`;
    const hit = this.opMemo.get(mkey);
    if (hit !== undefined) return hit;
    const d = restripe(this.deriveOpFrom(r, op, t, vals));
    if (this.opMemo.size > 500_000) {
      // The content keys go with the memo: they only name values in its keys (at 405B scale
      // they grew to over a million texts kept to the end of the run).
      this.opMemo.clear();
      this.valueByKey.clear();
    }
    this.opMemo.set(mkey, d);
    return d;
  }

  /** The local op writing tensor t on rank r, or -1 (inputs and collective outputs). */
  protected prodOp(r: number, t: number): number {
    return (this.localProd[this.plan.rankProgram[r] as number] as Int32Array)[t] ?? -1;
  }

  /**
   * Back through reshapes that only add or drop trailing unit dims: they keep every element
   * at its flat position, so positions line up with the tensor they start from.
   */
  protected unitBase(r: number, t: number): number {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const shapes = this.plan.view(r).shapes;
    for (let i = 0; i < 16; i++) {
      const op = this.prodOp(r, t);
      if (op < 0 || p.ops.kind[op] !== this.reshapeKind) return t;
      const x = p.ops.opInputs(op)[0] as number;
      if (trailingUnits(shapes[x] ?? [], shapes[t] ?? []) === undefined) return t;
      t = x;
    }
    return t;
  }

  /**
   * Back through reshapes of any kind (each keeps every element at its flat position): the
   * tensor they start from and the reshape ops, innermost first.
   */
  protected reshapeChain(r: number, t: number): { base: number; ops: number[] } {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const ops: number[] = [];
    for (let i = 0; i < 16; i++) {
      const op = this.prodOp(r, t);
      if (op < 0 || p.ops.kind[op] !== this.reshapeKind) break;
      ops.push(op);
      t = p.ops.opInputs(op)[0] as number;
    }
    return { base: t, ops: ops.reverse() };
  }

  /** A relation carried through reshape ops of the rank (reshapeChain's), by the reshape rule. */
  protected alongChain(r: number, rel: Relation, ops: readonly number[]): Relation | string {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    let v = rel;
    for (const op of ops) {
      const d = this.deriveOpFrom(r, op, p.ops.opOutputs(op)[0] as number, [v]);
      const m = typeof d === 'string' ? d : this.materialize(d);
      if (typeof m === 'string') return m;
      v = m;
    }
    return v;
  }

  /**
   * A vocab-range value writing t through reshapes: its ids and range. Either an op whose
   * record says so (OpDef.vocabRange), or Megatron's mask and local ids as exporters print them
   * (docs/engine.md, "Vocab-parallel rules", Compare forms):
   *  - outside: [[ids < s] + [ids >= e] > 0] (torch's `(ids < s) | (ids >= e)` as imported);
   *  - local: ids - s, with e left to the mask it is paired with; or where(outside(ids), c,
   *    ids - s) for a constant row c in [0, e - s) (`masked_input[mask] = 0`): the lookup then
   *    reads row c where the ids are outside, and the masked lookup zeroes those positions.
   */
  protected vocabOf(r: number, t: number, want: 'outside' | 'local'): { ids: number; s: Int; e?: Int } | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    // Through reshapes: callers check that the value lines up with the ids by flat position.
    const op = this.prodOp(r, this.reshapeChain(r, t).base);
    if (op < 0) return undefined;
    const kind = p.ops.kind[op] as number;
    if (registry.get(kind).vocabRange === want) {
      const s = this.attrInt(r, op, 'start');
      const e = this.attrInt(r, op, 'end');
      if (s === undefined || e === undefined) return undefined;
      return { ids: p.ops.opInputs(op)[0] as number, s, e };
    }
    const ins = [...p.ops.opInputs(op)];
    const sh = (x: number): string => (this.plan.view(r).shapes[x] ?? []).join(',');
    const out = p.ops.opOutputs(op)[0] as number;
    const rel = (o: number): string | undefined => (p.ops.kind[o] === this.compareKind && !this.coordAttrs(r, o) ? String((this.plan.view(r).attrs[o] ?? {}).rel) : undefined);
    const view = this.plan.view(r);
    const graph: MaskGraph = {
      producer: (x) => this.prodOp(r, x),
      isAdd: (o) => p.ops.kind[o] === this.addKind,
      isMul: (o) => p.ops.kind[o] === this.mulKind,
      isSub: (o) => p.ops.kind[o] === this.subKind,
      scaled: (o) => {
        if (p.ops.kind[o] !== this.scaleKind || this.coordAttrs(r, o)) return undefined;
        const f = parseFrac(attrScalar(view.attrs[o] ?? {}, 'factor'));
        return f === undefined || f.den !== 1 || !Number.isSafeInteger(f.num) ? undefined : { x: p.ops.opInputs(o)[0] as number, f: f.num };
      },
      compareRel: rel,
      inputs: (o) => [...p.ops.opInputs(o)],
      constant: (x) => this.constScalar(r, x),
      shapeKey: (x) => (view.shapes[x] ?? []).join(','),
    };
    if (want === 'outside') return outsideMask(graph, out);
    if (kind === this.mulKind) return maskedLocalIds(graph, out);
    if (kind === this.subKind && ins.length === 2) {
      const s = this.constScalar(r, ins[1] as number);
      return s === undefined || sh(ins[0] as number) !== sh(out) ? undefined : { ids: ins[0] as number, s };
    }
    if (kind === this.whereKind && ins.length === 3) {
      const [c, k, x] = ins as [number, number, number];
      const m = this.vocabOf(r, c, 'outside');
      const loc = this.vocabOf(r, x, 'local');
      const row = this.constScalar(r, k);
      if (m === undefined || loc === undefined || loc.e !== undefined || row === undefined || sh(c) !== sh(out) || sh(x) !== sh(out)) return undefined;
      if (loc.ids !== m.ids || loc.s !== m.s || typeof m.s !== 'number' || typeof m.e !== 'number' || row < 0 || row >= m.e - m.s) return undefined;
      return { ids: m.ids, s: m.s, e: m.e };
    }
    return undefined;
  }

  /**
   * A constant scalar: a rank input (no op or collective writes it) claimed as a whole logical
   * scalar with exactly one value (the importer's `const.N`: values [N, N + 1)).
   */
  protected constScalar(r: number, t: number): number | undefined {
    if (this.prodOp(r, t) >= 0 || this.collProd.has(r * this.tensorKey + t)) return undefined;
    if (numel(this.plan.view(r).shapes[t] ?? []) !== 1) return undefined;
    const nf = this.claimNF(r, t);
    if (nf === undefined || nf.value.n !== 1 || nf.value.divisor !== 1 || numel(this.world.shape(nf.logical)) !== 1) return undefined;
    const dom = this.world.domain(nf.logical);
    return dom !== undefined && dom.length === 1 ? dom[0] : undefined;
  }

  /**
   * An integer attribute: per rank its value; per template, an attribute written as an
   * expression of the coordinates is its affine form (plans/expr.ts), else undefined.
   */
  protected attrInt(r: number, op: number, key: string): Int | undefined {
    const pi = this.plan.rankProgram[r] as number;
    const p = this.plan.programs[pi] as Program;
    const e = p.attrSpecs[op]?.exprs.find(([keys]) => keys.length === 1 && keys[0] === key);
    if (this.tmpl === undefined || e === undefined) {
      const v = (this.plan.view(r).attrs[op] ?? {})[key];
      return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
    }
    const frame = this.frameAt(r);
    const aff = e[1].affine;
    if (frame === undefined || typeof frame === 'string' || aff === undefined) return undefined;
    const mesh = this.plan.mesh;
    const k = Array<number>(mesh.axes.length).fill(0);
    let v = aff.c;
    for (const [name, c] of aff.k) {
      const a = mesh.axes.indexOf(name);
      if (a < 0) return undefined;
      k[a] = c;
      v += c * (frame.x0[a] as number);
    }
    // Coefficients on axes the program does not vary along fold into the value.
    for (let a = 0; a < k.length; a++) if ((frame.sets[a]?.length ?? 0) <= 1) k[a] = 0;
    return Sym.of(v, k);
  }

  /** Per template, whether op's attributes depend on the coordinates (then its base values stand for no other rank). */
  protected coordAttrs(r: number, op: number): boolean {
    if (this.tmpl === undefined) return false;
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    return (p.attrSpecs[op]?.exprs.length ?? 0) > 0;
  }

  /** The largest value over the current ranks (the program's box per template). */
  protected maxOver(r: number, a: Int): number | undefined {
    if (typeof a === 'number') return a;
    const frame = this.frameAt(r);
    if (frame === undefined || typeof frame === 'string') return undefined;
    let m = a.v;
    a.k.forEach((c, i) => {
      const set = frame.sets[i] as Int32Array;
      const x0 = frame.x0[i] as number;
      m += Math.max(c * ((set[0] as number) - x0), c * ((set[set.length - 1] as number) - x0));
    });
    return m;
  }

  /** Whether tensor z is 0 x tensor x (a scale by 0 of it), or the constant scalar 0 (broadcast, or expanded). */
  protected zeroOf(r: number, z: number, x: number): boolean {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    if (this.constScalar(r, z) === 0) return true;
    const op = this.prodOp(r, z);
    // A zeros tensor: the constant 0 expanded (autograd's `zeros` of a masked fill's gradient).
    if (op >= 0 && p.ops.kind[op] === this.expandKind && this.constScalar(r, p.ops.opInputs(op)[0] as number) === 0) return true;
    if (op < 0 || p.ops.kind[op] !== this.scaleKind || p.ops.opInputs(op)[0] !== x || this.coordAttrs(r, op)) return false;
    const f = parseFrac(attrScalar(this.plan.view(r).attrs[op] ?? {}, 'factor'));
    return f !== undefined && f.num === 0;
  }

  /**
   * The condition c, read at the positions of a tensor of shape `of`, is the element at the
   * same position of ids: c equals `of` on leading dims and is 1 on trailing ones, and holds
   * as many elements as the ids.
   */
  protected alignedMask(c: Shape, of: Shape, ids: Shape): boolean {
    if (c.length !== of.length || numel(c) !== numel(ids)) return false;
    let lead = true;
    for (let d = 0; d < c.length; d++) {
      if (lead && c[d] === of[d]) continue;
      lead = false;
      if (c[d] !== 1) return false;
    }
    return true;
  }

  /**
   * A relation restated through a reshape that adds or drops trailing unit dims (local shapes
   * `from` -> `to`): the same reshape of the logical tensor (a virtual op when the plan has none).
   */
  protected unitLog(rel: Relation, from: Shape, to: Shape): Relation | string {
    const k = trailingUnits(from, to);
    if (k === undefined) return 'a reshape that is not of trailing unit dims';
    if (isMaxPart(rel)) return 'a reshape of a max-addend';
    if (k === 0) return rel;
    const w = this.world;
    const ls = w.shape(rel.logical);
    let shape: number[];
    let ranges: Range[];
    if (k > 0) {
      shape = [...ls, ...Array<number>(k).fill(1)];
      ranges = [...rel.ranges, ...Array.from({ length: k }, () => [0, 1] as const)];
    } else {
      const n = ls.length + k;
      if (n < 0 || ls.slice(n).some((x) => x !== 1)) return 'a reshape that drops logical dims that are not units';
      shape = ls.slice(0, n);
      ranges = rel.ranges.slice(0, n);
    }
    const q = w.opFor(this.reshapeKind, { shape }, [rel.logical]);
    const out = q === undefined ? undefined : (w.ops[q] as OpRef).outputs[0];
    if (out === undefined) return 'no reshape of the logical tensor';
    const [id, f] = w.canon(out);
    const scale = fmul(rel.scale, f);
    if (scale === undefined) return 'scale overflow';
    const bcast = rel.bcast?.filter((d) => d < ranges.length);
    return { logical: id, ranges, scale, ...(rel.part === undefined ? {} : { part: { key: `lin|${q}|0|0|${rel.part.key}`, comps: rel.part.comps } }), ...(bcast === undefined || bcast.length === 0 ? {} : { bcast }) };
  }

  /**
   * Broadcast dims of an input resolved against a partner input (right-aligned, as
   * broadcasting aligns dims) that holds a range of the same local size there: the input is
   * that range of the logical expand to the partner's size (every index holds the one value).
   */
  protected resolveBcast(ins: readonly Relation[], local: readonly Shape[]): Relation[] {
    if (ins.length < 2 || ins.every((x) => x.bcast === undefined)) return [...ins];
    const w = this.world;
    return ins.map((x, i) => {
      if (x.bcast === undefined || x.part?.max === true) return x;
      const shape = [...w.shape(x.logical)];
      const ranges = [...x.ranges];
      const left: number[] = [];
      for (const d of x.bcast) {
        const n = (local[i] ?? [])[d];
        const fromRight = x.ranges.length - d;
        const partner = ins.find((y, j) => {
          const dj = y.ranges.length - fromRight;
          const rg = y.ranges[dj];
          return j !== i && dj >= 0 && rg !== undefined && y.bcast?.includes(dj) !== true && iconst(isub(rg[1], rg[0])) === n && (w.shape(y.logical)[dj] as number) > 1;
        });
        if (partner === undefined) {
          left.push(d);
          continue;
        }
        const dj = partner.ranges.length - fromRight;
        shape[d] = w.shape(partner.logical)[dj] as number;
        ranges[d] = partner.ranges[dj] as Range;
      }
      if (left.length === x.bcast.length) return x;
      const q = w.opFor(this.expandKind, { shape }, [x.logical]);
      const out = q === undefined ? undefined : (w.ops[q] as OpRef).outputs[0];
      if (out === undefined) return x;
      const [id, f] = w.canon(out);
      const scale = fmul(x.scale, f);
      if (scale === undefined) return x;
      return { logical: id, ranges, scale, ...(x.part === undefined ? {} : { part: { key: `lin|${q}|0|0|${x.part.key}`, comps: x.part.comps } }), ...(left.length === 0 ? {} : { bcast: left }) };
    });
  }

  protected deriveOpFrom(r: number, op: number, t: number, vals: readonly Value[]): Derived {
    const plan = this.plan;
    const p = plan.programs[plan.rankProgram[r] as number] as Program;
    const view = plan.view(r);
    const kind = p.ops.kind[op] as number;
    const outs = [...p.ops.opOutputs(op)];
    const k = outs.indexOf(t);
    const attrs = view.attrs[op] as Attrs;
    const outShape = view.shapes[t] ?? [];
    const def = registry.get(kind);
    const routed = this.routedOp(kind, def, attrs, k, vals, outShape);
    if (routed !== undefined) return routed;
    // Ring attention and the packs around its sends (ring.ts); their values meet no other rule.
    const ring = this.ringOp(r, op, k, def, vals, attrs, outShape);
    if (ring !== undefined) return ring;
    if (vals.some((v) => isSoftmax(v) || isPack(v))) return `'${def.name}' of ring attention's statistics or of a pack`;
    const vals0 = vals as readonly (Relation | Sum)[];
    // Rules that need no logical counterpart.
    if (kind === this.scaleKind && vals.length === 1) {
      const f = parseFrac(attrScalar(attrs, 'factor'));
      const x = vals0[0] as Relation | Sum;
      if (f !== undefined && f.num !== 0 && !termsOf(x).some(isMaxPart)) {
        const ts = termsOf(x).map((tm) => ({ ...tm, scale: fmul(tm.scale, f) }));
        if (ts.some((tm) => tm.scale === undefined)) return 'scale overflow';
        const rs = ts as Relation[];
        return rs.length === 1 ? this.checked(rs[0] as Relation, outShape) : { terms: rs };
      }
    }
    if (kind === this.identityKind && vals.length === 1) {
      const x = vals0[0] as Relation | Sum;
      return isSum(x) ? x : this.checked(x, outShape);
    }
    if (kind === this.addKind && vals.length === 2) {
      const added = this.add(r, op, vals0 as [Relation | Sum, Relation | Sum], attrs, outShape);
      if (added !== undefined) return added;
    }
    const ins: Relation[] = [];
    for (const v of vals) {
      const m = this.materialize(v);
      if (typeof m === 'string') return m;
      ins.push(m);
    }
    if (kind === this.expandKind && ins.length === 1) {
      // Unit dims repeated: the same logical region, broadcast there (resolved by a consumer).
      const x = ins[0] as Relation;
      const xs = view.shapes[p.ops.opInputs(op)[0] as number] ?? [];
      const ls = this.world.shape(x.logical);
      // The logical graph's own expand of the value, first: a region of its output.
      const fewer = this.logPieces.expandRegion(x, xs, outShape);
      if (fewer !== undefined) return fewer;
      if (xs.length === outShape.length && !isMaxPart(x)) {
        const bc = new Set(x.bcast ?? []);
        let ok = true;
        for (let d = 0; d < xs.length; d++) {
          if (xs[d] === outShape[d]) continue;
          const rg = x.ranges[d] as Range;
          if (xs[d] !== 1 || ls[d] !== 1 || rg[0] !== 0 || rg[1] !== 1) ok = false;
          bc.add(d);
        }
        // (An expand to the same shape repeats nothing: left to the logical graph's own expand.)
        if (ok && bc.size > 0) return this.checked({ ...x, bcast: [...bc].sort((a, b) => a - b) }, outShape);
      }
    }
    const local = [...p.ops.opInputs(op)].map((x) => view.shapes[x] ?? []);
    let d = this.sliced(kind, this.resolveBcast(ins, local), attrs, k, outShape, def.name);
    if (typeof d === 'string' || d.logical >= this.world.nLogical) {
      // A region of a repeated dim taken at another index than its partner's (expandRegion), or
      // of a tensor the logical graph reads through its split pieces (inSplitPiece): the plan's
      // own op on the restated inputs.
      const moved = ins.length > 1 ? this.logPieces.alignRepeated(ins) : undefined;
      const homed = ins.map((x) => this.logPieces.inSplitPiece(x) ?? x);
      for (const alt of [moved, homed.some((x, i) => x !== ins[i]) ? homed : undefined]) {
        if (alt === undefined || (typeof d !== 'string' && d.logical < this.world.nLogical)) continue;
        const d2 = this.sliced(kind, this.resolveBcast(alt, local), attrs, k, outShape, def.name, false);
        if (typeof d2 !== 'string') d = d2;
      }
    }
    // A narrowing op (OpDef.narrows) or a zero pad (OpDef.zeroPads) with no logical counterpart:
    // the narrowed region of the same logical tensor, or one addend of its whole, rather than a
    // virtual op consumers cannot match.
    if ((def.narrows !== undefined || def.zeroPads !== undefined) && k === 0 && ins.length === 1 && (typeof d === 'string' || d.logical >= this.world.nLogical)) {
      const x = ins[0] as Relation;
      const n = def.narrows !== undefined ? this.narrowed(r, op, x, local[0] ?? [], attrs, def.narrows, outShape) : this.padded(r, op, x, local[0] ?? [], attrs, def.zeroPads as NonNullable<OpDef['zeroPads']>, outShape);
      if (n !== undefined) return n;
    }
    if ((typeof d === 'string' || d.logical >= this.world.nLogical) && def.name === 'concat' && ins.length > 1) {
      // Regions of a logical concat's own inputs (a rank's fused QKV columns put back together).
      const dim = dimAttr(attrs, 'dim', outShape.length);
      const c = dim === undefined ? undefined : this.logPieces.concatOfLogical(ins, dim, outShape);
      if (c !== undefined) return c;
    }
    if (typeof d === 'string' && def.name === 'concat' && ins.length > 1 && ins.every((x) => x.part === undefined && x.bcast === undefined)) {
      // A concat with no logical counterpart of slices of one value (context parallelism's
      // zig-zag rope tables): the value at their ranges in order, striped where not contiguous.
      const dim = dimAttr(attrs, 'dim', outShape.length);
      const c = dim === undefined ? 'a concat without a dim' : concatStripes(ins, dim);
      if (typeof c !== 'string') return this.checked(c, outShape);
    }
    if (typeof d === 'string' && def.name === 'concat' && ins.length > 1) {
      // Anything else side by side (ring attention's gradient accumulators, one send): a pack.
      const pk = this.packOf(ins, local, attrs, outShape);
      if (typeof pk !== 'string') return pk;
    }
    if (typeof d === 'string' && def.name === 'split' && ins.length === 1) {
      // A split with no logical counterpart (a zig-zag shard into its chunks): windows of the region.
      const sp = this.splitRel(ins[0] as Relation, local[0] ?? [], attrs, k, outShape);
      if (sp !== undefined) return sp;
    }
    if (typeof d === 'string' && kind === this.reshapeKind && ins.length === 1 && trailingUnits(local[0] ?? [], outShape) !== undefined) {
      // Trailing unit dims added or dropped: the same reshape of the logical tensor, on any region.
      const u = this.unitLog(ins[0] as Relation, local[0] ?? [], outShape);
      if (typeof u !== 'string') return this.checked(u, outShape);
    }
    return d;
  }

  /**
   * add: of addends of one decomposition (gradient accumulation), of addends of two values (to
   * the addends of their sum), of whole values (the logical add, when the plan has one); any
   * other add of same-shaped values is a Sum. Undefined: left to the general rule.
   */
  protected add(r: number, op: number, [a, b]: [Relation | Sum, Relation | Sum], attrs: Attrs, outShape: Shape): Derived | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const view = this.plan.view(r);
    // Element-wise of same-shaped local tensors only (no broadcasting).
    const same = [...p.ops.opInputs(op)].every((x) => (view.shapes[x] ?? []).join(',') === outShape.join(','));
    if (!same || Object.keys(attrs).length > 0) return undefined;
    if (!isSum(a) && !isSum(b)) {
      if (a.part === undefined && b.part === undefined) {
        // Whole values: the plan's own add, if it has one for these tensors.
        const d = this.sliced(this.addKind, [a, b], attrs, 0, outShape, 'add', false);
        if (typeof d !== 'string') return d;
      } else if (a.part !== undefined && b.part !== undefined && a.part.key !== b.part.key && feq(a.scale, b.scale) && a.ranges.every((x, i) => x[0] === (b.ranges[i] as Range)[0] && x[1] === (b.ranges[i] as Range)[1]) && this.world.shape(a.logical).join(',') === this.world.shape(b.logical).join(',')) {
        // Addends of two values: the sums of their addends add up to the add of the two values.
        const q = this.world.opFor(this.addKind, {}, [a.logical, b.logical]);
        const lout = q === undefined ? undefined : (this.world.ops[q] as OpRef).outputs[0];
        if (lout !== undefined) {
          const [id, f] = this.world.canon(lout);
          const scale = fmul(a.scale, f);
          // (Never of a product: its rectangles and these separate components would mix.)
          const part: Part | undefined = isProduct(a.part) || isProduct(b.part) ? undefined : { key: `add|${q}|${a.part.key}|${b.part.key}`, comps: [...a.part.comps, ...b.part.comps] };
          if (scale !== undefined && part !== undefined) return this.checked({ logical: id, ranges: a.ranges, scale, part }, outShape);
        }
      }
    }
    // Anything else: a sum of terms (replicas add factors, addends of one value unite).
    return addTerms([...termsOf(a), ...termsOf(b)]);
  }

  /**
   * Same op on a slice (or a plain-sum addend) of a logical op with these logical inputs, or
   * of a virtual op with the parallel op's own attributes.
   */
  protected abstract ringOp(r: number, op: number, k: number, def: OpDef, vals: readonly Value[], attrs: Attrs, outShape: Shape): Derived | undefined;
  protected abstract packOf(ins: readonly Value[], local: readonly Shape[], attrs: Attrs, outShape: Shape): Value | string;
  protected abstract splitRel(x: Value, inShape: Shape, attrs: Attrs, k: number, outShape: Shape): Relation | undefined;

  protected sliced(kind: number, ins0: readonly Relation[], attrs: Attrs, k: number, outShape: Shape, name: string, virtual = true): Relation | string {
    const w = this.world;
    let ins = ins0;
    const def = registry.get(kind);
    const cands = [...(w.index.get(`${kind}|${ins.map((x) => x.logical).join(',')}`) ?? [])];
    let why = '';
    const tryOp = (q: number): Relation | string | undefined => {
      const sig = this.sig(q);
      const o = w.ops[q] as OpRef;
      const out = o.outputs[k];
      if (sig === null || out === undefined) return undefined;
      // The op reads factor x its canonical inputs: restate the parallel inputs against the
      // op's actual inputs (par = s x id = (s / factor) x input).
      const lin0 = def.linearIn?.(ins.length) ?? [];
      const adj: Relation[] = [];
      for (let i = 0; i < ins.length; i++) {
        const x = ins[i] as Relation;
        const f = o.factors[i] ?? ONE;
        if (feq(f, ONE)) {
          adj.push(x);
          continue;
        }
        const sc = fdiv(x.scale, f);
        if (sc === undefined || (!feq(sc, ONE) && !lin0.includes(i))) return `input ${i} is ${fkey(f)} x its canonical value`;
        adj.push({ ...x, scale: sc });
      }
      ins = adj;
      let d: Relation | string;
      if (def.sliceRegions !== undefined) {
        // Layout ops are linear in their one input: scale factors and addends pass through.
        const x = ins[0];
        if (ins.length !== 1 || x === undefined || !(def.linearIn?.(1) ?? []).includes(0)) return `'${name}' on a slice needs one input it is linear in`;
        if (isMaxPart(x)) return `'${name}' of a max-addend`;
        if (x.bcast !== undefined) return `'${name}' of a broadcast value`;
        const slice = def.sliceRegions.bind(def);
        const inShapes = o.inputs.map((y) => w.shape(y));
        const outShapes = o.outputs.map((y) => w.shape(y));
        // Keyed by everything the map reads: the op kind, shapes and both attribute sets.
        const memoKey = `${kind}|${JSON.stringify(inShapes)}|${JSON.stringify(outShapes)}|${attrsKey(o.attrs)}|${attrsKey(attrs)}`;
        const sd = x.ranges.findIndex((rg) => stripeOf(rg) !== undefined);
        // A piece's region through the logical op, and its local positions through the same map
        // over the local shapes (stripes.ts): one output.
        const pieceLogical: LogicalMap = (rs) => {
          const m = this.lifted([rs], (q) => slice(inShapes, outShapes, q, o.attrs, attrs), memoKey);
          return typeof m === 'string' ? m : (m[0] ?? 'no output');
        };
        const pieceLocal: LocalMap = (inShape, rs) => {
          const m = slice([inShape], [outShape], [rs], attrs, attrs);
          return typeof m === 'string' ? m : (m[0] ?? 'no output');
        };
        const regs =
          sd < 0
            ? this.lifted(ins.map((y) => y.ranges), (rs) => slice(inShapes, outShapes, rs, o.attrs, attrs), memoKey)
            : // A striped input, piece by piece (stripes.ts stripedLayout): one output, local shapes as held.
              o.outputs.length !== 1
              ? `'${name}' of a striped region with several outputs`
              : [
                  stripedLayout(x.ranges, sd, outShape, pieceLogical, pieceLocal),
                ];
        // A merge whose inner dim is sliced: the output striped along the merged dim (stripes.ts).
        const merged =
          typeof regs === 'string' && sd < 0 && o.outputs.length === 1 && ins.length === 1
            ? mergedLayout(x.ranges, outShape, pieceLogical, pieceLocal)
            : undefined;
        if (typeof regs === 'string' && merged === undefined) return regs;
        const reg0 = merged ?? (regs as Exclude<typeof regs, string>)[k];
        if (typeof reg0 === 'string') return reg0;
        const reg = reg0;
        if (reg === undefined) return `'${name}' has no output ${k}`;
        d = { logical: out, ranges: reg, scale: x.scale, ...(x.part === undefined ? {} : { part: { key: `lin|${q}|0|${k}|${x.part.key}`, comps: x.part.comps } }) };
      } else {
        if (attrsKey(attrs) !== attrsKey(o.attrs)) return `'${name}' attributes differ from the logical op's`;
        this.use?.same(kind, attrs, o.attrs);
        d = this.bySig(sig, def.linearIn?.(ins.length) ?? [], ins, k, out, outShape, q);
      }
      if (typeof d === 'string') return d;
      // Restated on the canonical tensor (a mean's output is 1/N x the sum's).
      const [id, f] = w.canon(d.logical);
      const scale = fmul(d.scale, f);
      if (scale === undefined) return 'scale overflow';
      return this.checked({ ...d, logical: id, scale }, outShape);
    };
    for (const q of cands) {
      ins = ins0;
      const d = tryOp(q);
      if (d === undefined) continue;
      if (typeof d !== 'string') return d;
      why = d;
    }
    // No logical op fits: the same op on the whole logical inputs defines a virtual value.
    ins = ins0;
    // Layout ops only on whole inputs: their attributes spell the local sizes.
    const whole = ins.every((x) => x.ranges.every(([a, b], d) => a === 0 && b === w.shape(x.logical)[d]));
    if (virtual && (def.sliceRegions === undefined || whole) && def.collective === undefined) {
      const q = w.opFor(kind, attrs, ins.map((x) => x.logical));
      if (q !== undefined && !cands.includes(q)) {
        const d = tryOp(q);
        if (d !== undefined && typeof d !== 'string') return d;
        if (typeof d === 'string') why = d;
      }
    }
    return why === '' ? `no logical '${name}' reads ${ins.map((x) => w.name(x.logical)).join(', ')}` : why;
  }

  /**
   * The op on slices of its inputs, by its labels: `batch` labels sliced alike in every input
   * give that slice of the output; a `sums` label sliced gives one addend of the outputs
   * without it; grouped labels slice in blocks; every other label must be whole. Scale
   * factors and addends pass through inputs the op is linear in (OpDef.linearIn).
   */
  protected bySig(sig: Sig, lin: readonly number[], ins: readonly Relation[], k: number, out: number, outShape: Shape, q: number): Relation | string {
    const w = this.world;
    let scale = ONE;
    let inPart: { i: number; part: Part } | undefined;
    for (let i = 0; i < ins.length; i++) {
      const x = ins[i] as Relation;
      const linear = lin.includes(i);
      if (!feq(x.scale, ONE)) {
        if (!linear) return `'${w.name(out)}' from a scaled value of an input it is not linear in`;
        const s = fmul(scale, x.scale);
        if (s === undefined) return 'scale overflow';
        scale = s;
      }
      if (x.part !== undefined) {
        if (x.part.max === true) return `'${w.name(out)}' from a max-addend`;
        if (!linear || inPart !== undefined) return `'${w.name(out)}' from an addend of an input it is not linear in (or of two inputs)`;
        inPart = { i, part: x.part };
      }
    }
    // Ranges per label, from the inputs; they must agree.
    const at = new Map<string, Range>();
    const role = new Map<string, string>();
    for (let i = 0; i < ins.length; i++) {
      const labels = sig.inputs[i];
      const x = ins[i] as Relation;
      const shape = w.shape(x.logical);
      if (labels === undefined || labels.length !== x.ranges.length) return 'labels do not match the input rank';
      for (let d = 0; d < labels.length; d++) {
        const l = labels[d] as DimLabel;
        const rg = x.ranges[d] as Range;
        role.set(l.label, l.role);
        const prev = at.get(l.label);
        if (prev !== undefined && (prev[0] !== rg[0] || prev[1] !== rg[1])) return `inputs sliced differently along '${l.label}'`;
        at.set(l.label, rg);
        const full = rg[0] === 0 && rg[1] === shape[d];
        const paired = sig.grouped.some((g) => g.label === l.label || g.of === l.label);
        if (!full && !paired && l.role !== 'batch' && !(l.role === 'contracted' && (sig.sums.has(l.label) || sig.maxes.has(l.label)))) return `an input is sliced along '${l.label}' (${l.role})`;
      }
    }
    for (const g of sig.grouped) {
      const a = at.get(g.label);
      const b = at.get(g.of);
      if (a === undefined || b === undefined) return `grouped label '${g.label}' without '${g.of}'`;
      if (a[0] !== iscale(b[0], g.ratio) || a[1] !== iscale(b[1], g.ratio)) return `'${g.label}' sliced [${a[0]}, ${a[1]}) but '${g.of}' [${b[0]}, ${b[1]}) (groups of ${g.ratio})`;
    }
    // Broadcast dims: a label every input holds only as a broadcast stays one on the output.
    const bcastOf = new Map<string, boolean>();
    for (let i = 0; i < ins.length; i++) {
      const x = ins[i] as Relation;
      (sig.inputs[i] ?? []).forEach((l, d) => {
        const b = x.bcast?.includes(d) === true;
        const prev = bcastOf.get(l.label);
        bcastOf.set(l.label, prev === undefined ? b : prev && b);
        if (prev !== undefined && prev !== b && (b || prev)) bcastOf.set(l.label, false);
      });
      // Only SIMD dims may hold copies: a sum or a norm over copies is not the op on one index.
      if (x.bcast !== undefined && x.bcast.some((d) => { const l = (sig.inputs[i] ?? [])[d]; return l === undefined || l.role !== 'batch' || bcastOf.get(l.label) !== true; })) return `'${w.name(out)}' from a broadcast input with no partner`;
    }
    const lshape = w.shape(out);
    const labels = sig.outputs[k];
    if (labels === undefined || labels.length !== lshape.length) return 'labels do not match the output rank';
    const ranges: Range[] = labels.map((l, d) => at.get(l.label) ?? [0, lshape[d] as number]);
    // Plain sums: a summed label sliced in the inputs and absent from this output.
    const own = new Set(labels.map((l) => l.label));
    let part: Part | undefined;
    const summed = new Set<string>();
    const cut: { l: string; comp: Comp; mx: boolean }[] = [];
    for (const [l, rg] of at) {
      const mx = sig.maxes.has(l);
      if (own.has(l) || !(sig.sums.has(l) || mx) || role.get(l) !== 'contracted') continue;
      const total = this.labelSize(sig, ins, l);
      if (rg[0] === 0 && rg[1] === total) continue;
      cut.push({ l, comp: { kind: 'range', cover: [rg[0], rg[1]], total }, mx });
      summed.add(l);
    }
    const c0 = cut[0];
    if (c0 !== undefined && cut.length === 1 && inPart === undefined) {
      part = { key: `${c0.mx ? 'max' : 'sum'}|${q}|${c0.l}|${k}`, comps: [c0.comp], ...(c0.mx ? { max: true as const } : {}) };
    } else if (cut.length > 0) {
      // Two cuts (two summed labels sliced, as SP's sequence chunk of a micro-batch's rows; or one
      // of an addend, through a linear input): the cell of a product of two decompositions
      // (PRODUCT). Never of max-addends, of a product, or of a sum of decompositions.
      const ip = inPart?.part;
      if (cut.length + (ip === undefined ? 0 : 1) !== 2 || cut.some((c) => c.mx) || (ip !== undefined && (ip.max === true || ip.comps.length !== 1 || isProduct(ip)))) return 'sliced along two summed labels, or along one of an addend';
      part = { key: `${PRODUCT}sum|${q}|${cut.map((c) => c.l).join(',')}|${k}${ip === undefined ? '' : `|${inPart?.i}|${ip.key}`}`, comps: [...(ip?.comps ?? []), ...cut.map((c) => c.comp)] };
      inPart = undefined;
    }
    // A label sliced in the inputs that this output lacks and does not sum over: the output reads
    // the whole dim, so a slice is not the logical op on a slice.
    for (const [l, rg] of at) {
      if (own.has(l) || summed.has(l)) continue;
      // A paired label rides on its partner (kv heads with the query heads of their groups).
      if (sig.grouped.some((g) => (g.of === l && own.has(g.label)) || (g.label === l && own.has(g.of)))) continue;
      const total = this.labelSize(sig, ins, l);
      if (!(rg[0] === 0 && rg[1] === total)) return `sliced along '${l}', which output ${k} reads whole`;
    }
    // An addend through a linear input: the addends' images add up to the image of their sum.
    if (inPart !== undefined) part = { key: `lin|${q}|${inPart.i}|${k}|${inPart.part.key}`, comps: inPart.part.comps };
    const bcast = labels.flatMap((l, d) => (bcastOf.get(l.label) === true ? [d] : []));
    return { logical: out, ranges, scale, ...(part === undefined ? {} : { part }), ...(bcast.length === 0 ? {} : { bcast }) };
  }

  protected labelSize(sig: { inputs: readonly (readonly DimLabel[])[] }, ins: readonly Relation[], label: string): number {
    for (let i = 0; i < ins.length; i++) {
      const d = (sig.inputs[i] ?? []).findIndex((l) => l.label === label);
      if (d >= 0) return this.world.shape((ins[i] as Relation).logical)[d] as number;
    }
    return -1;
  }
}
