/**
 * The logical world of tensor-level proofs: the logical graph grown with virtual tensors (one
 * value per op kind, attributes and canonical inputs; rescaling identities; decompositions;
 * virtual ops for parallel ops with no logical counterpart), and AttrUse, the record of which
 * value-only attributes a derivation relied on being equal (incremental re-verification).
 */
import type { LoadedPlan } from '../../../lineage/load.js';
import { registry } from '../../../ops/registry.js';
import { attrScalar, numel, type Attrs, type DecompExpr, type Shape } from '../../../ops/types.js';
import { logicalOrder } from '../../../sdfg/execute.js';
import { outsideMask } from './vocabforms.js';
import { type Frac, ONE, frac, fmul, feq, fkey, parseFrac, attrsKey } from './relations.js';

/**
 * Which ops' value-only attributes (OpDef.valueAttrs) a derivation relied on being equal
 * (docs/engine.md, "Incremental re-verification"). Such attributes enter tensor-level rules
 * only through equality of whole attribute sets (a world op found by its key, a parallel op
 * matched to a logical one); every comparison that comes out equal is recorded here as a
 * union of the two ops. A derivation stays valid under any change of those values that keeps
 * each class's values equal. An attribute set of such an op kind that is not one of the plan's
 * own objects (instantiated per rank from an expression, or built by a rule) cannot be traced
 * back to an op: comparing it equal marks the record unusable (`poisoned`).
 */
export class AttrUse {
  private readonly occ = new WeakMap<object, number>();
  private readonly up: number[] = [];
  /** Per occurrence: 'L<op>' (logical op) or 'P<program>:<op>' (an op of a program). */
  readonly refs: string[] = [];
  poisoned: string | undefined;
  /** Op kinds with value-only attributes (same() is called on every world lookup that hits). */
  private readonly valuedKinds: ReadonlySet<number>;
  constructor(plan: LoadedPlan) {
    this.valuedKinds = new Set(registry.defs.flatMap((d, id) => ((d.valueAttrs?.length ?? 0) > 0 ? [id] : [])));
    const valued = (kind: number): boolean => this.valuedKinds.has(kind);
    const add = (a: object | undefined, ref: string): void => {
      const id = this.refs.length;
      this.refs.push(ref);
      this.up.push(id);
      if (a === undefined) return;
      const prev = this.occ.get(a);
      // One object shared by two ops: their values are one value, so they are one class.
      if (prev !== undefined) this.union(prev, id);
      else this.occ.set(a, id);
    };
    const lg = plan.logical;
    for (let op = 0; op < lg.ops.size; op++) if (valued(lg.ops.kind[op] as number)) add(lg.attrs[op], `L${op}`);
    plan.programs.forEach((p, pi) => {
      for (let op = 0; op < p.ops.size; op++) {
        if (!valued(p.ops.kind[op] as number)) continue;
        const spec = p.attrSpecs[op];
        // Attributes with expressions are instantiated per rank: those objects are no op's.
        add(spec !== undefined && spec.exprs.length === 0 ? spec.attrs : undefined, `P${pi}:${op}`);
      }
    });
  }
  private find(i: number): number {
    let r = i;
    while (this.up[r] !== r) r = this.up[r] as number;
    while (this.up[i] !== r) {
      const n = this.up[i] as number;
      this.up[i] = r;
      i = n;
    }
    return r;
  }
  private union(a: number, b: number): void {
    const [ra, rb] = [this.find(a), this.find(b)];
    if (ra !== rb) this.up[Math.max(ra, rb)] = Math.min(ra, rb);
  }
  /** Attribute sets `a` and `b` of op kind `kind` compared equal, and a rule relies on it. */
  same(kind: number, a: Attrs | undefined, b: Attrs | undefined): void {
    if (!this.valuedKinds.has(kind)) return;
    const oa = a === undefined ? undefined : this.occ.get(a);
    const ob = b === undefined ? undefined : this.occ.get(b);
    if (oa === undefined || ob === undefined) {
      this.poisoned ??= `'${registry.get(kind).name}' attributes compared that are not a plan op's own`;
      return;
    }
    this.union(oa, ob);
  }
  /** The classes of two or more ops, each a list of occurrence refs. */
  classes(): string[][] {
    const by = new Map<number, string[]>();
    this.refs.forEach((ref, i) => {
      const r = this.find(i);
      const l = by.get(r);
      if (l === undefined) by.set(r, [ref]);
      else l.push(ref);
    });
    return [...by.values()].filter((l) => l.length > 1);
  }
}

/** A logical op, or a virtual one (defined by the rules, never in the plan). */
export interface OpRef {
  readonly kind: number;
  readonly attrs: Attrs;
  /** Canonical tensor ids, and the factor each input is of them (logical input = factor x id). */
  readonly inputs: readonly number[];
  readonly factors: readonly Frac[];
  /** Tensor ids it defines: logical ones for a logical op, virtual ones (>= the logical count) otherwise. */
  readonly outputs: readonly number[];
}

/**
 * The logical graph as the rules see it, grown with virtual tensors:
 *  - logical tensors computed by the same op kind, attributes and (canonical) inputs are one
 *    value (each maps to the first);
 *  - an op with a rescaling identity (OpDef.rescale: a mean over N rows is 1/N times their sum)
 *    maps its outputs to factor x the outputs of the rescaled op, a virtual op when the plan
 *    has none;
 *  - a parallel op with no logical counterpart defines a virtual op: the same op applied to
 *    the whole logical inputs (its value is well defined; a slice of it is what the rules
 *    derive for the parallel op).
 * canon[t] = (id, factor): logical tensor t equals factor x tensor id.
 */
export class LogicalWorld {
  readonly nLogical: number;
  readonly ops: OpRef[] = [];
  /** kind|inputs -> op indices. */
  readonly index = new Map<string, number[]>();
  private readonly byKey = new Map<string, number>();
  private readonly canonId: Int32Array;
  private readonly canonScale: Frac[];
  private readonly vShapes: Shape[] = [];
  /** Per virtual tensor: the op kind and inputs that name it (names are built only when shown). */
  private readonly vDefs: { kind: number; inputs: readonly number[] }[] = [];
  private readonly vNames = new Map<number, string>();
  private readonly domains: (readonly number[] | undefined)[];
  constructor(
    readonly plan: LoadedPlan,
    readonly use?: AttrUse,
  ) {
    const lg = plan.logical;
    this.nLogical = lg.tensors.size;
    this.canonId = Int32Array.from({ length: lg.tensors.size }, (_, i) => i);
    this.canonScale = Array.from({ length: lg.tensors.size }, () => ONE);
    this.domains = [...lg.domains];
    const prod = new Int32Array(lg.tensors.size).fill(-1);
    for (const op of logicalOrder(plan)) {
      const kind = lg.ops.kind[op] as number;
      const def = registry.get(kind);
      const attrs = (lg.attrs[op] ?? {}) as Attrs;
      const inputs = [...lg.ops.opInputs(op)].map((x) => this.canonId[x] as number);
      const factors = [...lg.ops.opInputs(op)].map((x) => this.canonScale[x] as Frac);
      const outs = [...lg.ops.opOutputs(op)];
      // Integer values keep their range through layout ops.
      if (def.movesValues === true) {
        const ds = [...lg.ops.opInputs(op)].map((x) => this.domains[x]);
        if (ds.every((d) => d !== undefined)) outs.forEach((t) => (this.domains[t] = [...new Set(ds.flat() as number[])].sort((x, y) => x - y)));
      }
      for (const t of outs) prod[t] = op;
      // A logical identity is its input (a copy).
      if (def.name === 'identity' && outs.length === 1 && inputs.length === 1) {
        this.alias(outs[0] as number, lg.ops.opInputs(op)[0] as number, ONE);
        continue;
      }
      const kept = this.keeps(op, def.name, attrs, prod);
      if (kept !== undefined) {
        this.alias(outs[0] as number, kept, ONE);
        continue;
      }
      if (def.name === 'where') {
        const k = this.oneHotKey(op, prod);
        if (k !== undefined && !this.oneHot.has(k)) this.oneHot.set(k, outs[0] as number);
      }
      const key = `${kind}|${attrsKey(attrs)}|${inputs.map((x, i) => `${x}*${fkey(factors[i] as Frac)}`).join(',')}`;
      const prev = this.byKey.get(key);
      if (prev !== undefined) {
        this.use?.same(kind, attrs, (this.ops[prev] as OpRef).attrs);
        const a = (this.ops[prev] as OpRef).outputs;
        outs.forEach((t, i) => this.alias(t, a[i] as number, ONE));
        continue;
      }
      this.register(key, { kind, attrs, inputs, factors, outputs: outs });
      const inShapes = [...lg.ops.opInputs(op)].map((x) => lg.shapes[x] ?? []);
      // A decomposition (clip_grad_norm as its parts): each output is the expression's value.
      const dec = factors.every((f) => feq(f, ONE)) ? def.decompose?.(inputs.length, attrs, inShapes, [...lg.ops.opInputs(op)].map((x) => this.domains[x])) : undefined;
      if (dec !== undefined) {
        const seen = new Map<DecompExpr, number | undefined>();
        const ids = dec.map((e) => this.build(e, inputs, seen));
        if (ids.every((x) => x !== undefined)) outs.forEach((t, i) => this.alias(t, ids[i] as number, ONE));
        continue;
      }
      const re = def.rescale?.(inShapes, attrs, [...lg.ops.opInputs(op)].map((x) => this.domains[x]));
      const f = re === undefined ? undefined : parseFrac(re.factor);
      if (re === undefined || f === undefined) continue;
      const other = re.op === undefined ? kind : registry.id(re.op);
      const v = this.opFor(other, re.attrs, inputs, factors);
      if (v === undefined) continue;
      outs.forEach((t, i) => this.alias(t, (this.ops[v] as OpRef).outputs[i] as number, f));
    }
  }

  /**
   * The input an op returns unchanged, by the values the plan declares (docs/engine.md,
   * "Vocab-parallel rules", Compare forms): x - c and x x 1 for a constant 0 and a scale by 1;
   * where(c, y, x) when c never holds. Megatron's single-device graph keeps the vocab masking
   * of its parallel code with the whole range [0, V): with ids declared in [0, V) that mask is
   * never set, so the masked ids and the masked target logits are the unmasked ones.
   */
  private keeps(op: number, name: string, attrs: Attrs, prod: Int32Array): number | undefined {
    const lg = this.plan.logical;
    const ins = [...lg.ops.opInputs(op)];
    const out = lg.ops.opOutputs(op)[0] as number;
    const same = (x: number): boolean => (lg.shapes[x] ?? []).join(',') === (lg.shapes[out] ?? []).join(',');
    if (name === 'scale' && ins.length === 1) {
      const f = parseFrac(attrScalar(attrs, 'factor'));
      return f !== undefined && f.num === f.den && same(ins[0] as number) ? ins[0] : undefined;
    }
    if (name === 'sub' && ins.length === 2) return this.constOf(ins[1] as number) === 0 && same(ins[0] as number) ? ins[0] : undefined;
    if (name === 'where' && ins.length === 3) return this.neverHolds(ins[0] as number, prod) && same(ins[2] as number) ? ins[2] : undefined;
    return undefined;
  }
  /**
   * Logical tensors Y - onehot(ids) as Megatron's vocab-parallel cross-entropy backward spells
   * them over the whole vocabulary (docs/engine.md, rule 10, One-hot update), by
   * `onehot|<Y>|<ids>` (canonical ids): where([iota_1 == ids], Y[., ids] - (1 - m), Y) with
   * iota_1 the column positions of Y (from 0, step 1), ids read through reshapes, and m a mask
   * that never holds (compare form of outside(ids, 0, V), by the declared values).
   */
  readonly oneHot = new Map<string, number>();
  private oneHotKey(op: number, prod: Int32Array): string | undefined {
    const lg = this.plan.logical;
    const name = (o: number): string | undefined => (o >= 0 ? registry.get(lg.ops.kind[o] as number).name : undefined);
    const shp = (x: number): Shape => lg.shapes[x] ?? [];
    // Back through reshapes and identities (flat positions kept).
    const base = (x: number): number => {
      for (let i = 0; i < 16 && (name(prod[x] as number) === 'reshape' || name(prod[x] as number) === 'identity'); i++) x = lg.ops.opInputs(prod[x] as number)[0] as number;
      return x;
    };
    const [c, a, y] = [...lg.ops.opInputs(op)] as [number, number, number];
    const ys = shp(y);
    if (ys.length !== 2 || shp(lg.ops.opOutputs(op)[0] as number).join(',') !== ys.join(',')) return undefined;
    const cop = prod[c] as number;
    if (name(cop) !== 'compare' || (lg.attrs[cop] ?? {})['rel'] !== 'eq') return undefined;
    const [u, v] = [...lg.ops.opInputs(cop)] as [number, number];
    const [io, li] = name(prod[u] as number) === 'iota' ? [u, v] : [v, u];
    const iop = prod[io] as number;
    const at = lg.attrs[iop] ?? {};
    if (name(iop) !== 'iota' || at['dim'] !== 1 || Number(at['step']) !== 1 || shp(io).join(',') !== ys.join(',') || this.constOf(lg.ops.opInputs(iop)[0] as number) !== 0) return undefined;
    const ids = base(li);
    // Row i compares with id i: a column [N, 1] (a row vector would broadcast along the columns).
    const column = (x: number): boolean => shp(x).join(',') === `${ys[0]},1`;
    if (numel(shp(ids)) !== ys[0] || !column(li)) return undefined;
    // a = expand(Y[., ids] - (1 - m)) through reshapes, from a column.
    const eop = prod[a] as number;
    if (name(eop) !== 'expand' || !column(lg.ops.opInputs(eop)[0] as number)) return undefined;
    const sop = prod[base(lg.ops.opInputs(eop)[0] as number)] as number;
    if (name(sop) !== 'sub') return undefined;
    const [gv, rs] = [...lg.ops.opInputs(sop)] as [number, number];
    const gop = prod[base(gv)] as number;
    if (name(gop) !== 'gather') return undefined;
    const [tab, gi] = [...lg.ops.opInputs(gop)] as [number, number];
    if (tab !== y || base(gi) !== ids || numel(shp(gv)) !== ys[0] || numel(shp(rs)) !== ys[0]) return undefined;
    const rop = prod[rs] as number;
    if (name(rop) !== 'sub') return undefined;
    const [one, mk] = [...lg.ops.opInputs(rop)] as [number, number];
    if (this.constOf(one) !== 1 || !this.neverHolds(base(mk), prod)) return undefined;
    const [cy, fy] = this.canon(y);
    const [ci, fi] = this.canon(ids);
    return feq(fy, ONE) && feq(fi, ONE) ? `onehot|${cy}|${ci}` : undefined;
  }

  /** The one value of a single-element tensor whose declared values are one value. */
  private constOf(t: number): number | undefined {
    const d = this.domains[t];
    return d !== undefined && d.length === 1 && numel(this.plan.logical.shapes[t] ?? []) === 1 ? d[0] : undefined;
  }
  /** c = [[ids < s] + [ids >= e] > 0] with every declared value of the ids in [s, e): 0 everywhere. */
  private neverHolds(c: number, prod: Int32Array): boolean {
    const lg = this.plan.logical;
    const name = (o: number): string => registry.get(lg.ops.kind[o] as number).name;
    const m = outsideMask(
      {
        producer: (x) => prod[x] as number,
        isAdd: (o) => name(o) === 'add',
        isMul: (o) => name(o) === 'mul',
        isSub: (o) => name(o) === 'sub',
        scaled: (o) => {
          if (name(o) !== 'scale') return undefined;
          const f = parseFrac(attrScalar(lg.attrs[o] ?? {}, 'factor'));
          return f === undefined || f.den !== 1 || !Number.isSafeInteger(f.num) ? undefined : { x: lg.ops.opInputs(o)[0] as number, f: f.num };
        },
        compareRel: (o) => (name(o) === 'compare' ? String((lg.attrs[o] ?? {})['rel']) : undefined),
        inputs: (o) => [...lg.ops.opInputs(o)],
        constant: (x) => this.constOf(x),
        shapeKey: (x) => (lg.shapes[x] ?? []).join(','),
      },
      c,
    );
    const d = m === undefined ? undefined : this.domains[m.ids];
    return m !== undefined && d !== undefined && d.length > 0 && (d[0] as number) >= m.s && (d[d.length - 1] as number) < m.e;
  }


  /** Logical tensor t equals factor x tensor `to` (itself canonical, or mapped through). */
  private alias(t: number, to: number, factor: Frac): void {
    const [base, f0] = this.canon(to);
    const s = fmul(factor, f0);
    if (s === undefined) return;
    this.canonId[t] = base;
    this.canonScale[t] = s;
  }

  /** Virtual tensors equal to another tensor (a decomposed op's output is its expression's value). */
  private readonly vAlias = new Map<number, number>();
  private register(key: string, op: OpRef): number {
    const i = this.ops.length;
    this.ops.push(op);
    this.byKey.set(key, i);
    const k = `${op.kind}|${op.inputs.join(',')}`;
    const l = this.index.get(k);
    if (l === undefined) this.index.set(k, [i]);
    else l.push(i);
    return i;
  }

  /** The op computing `kind(attrs)` of these canonical inputs: the plan's, or a new virtual one. */
  opFor(kind: number, attrs: Attrs, inputs: readonly number[], factors: readonly Frac[] = inputs.map(() => ONE)): number | undefined {
    const key = `${kind}|${attrsKey(attrs)}|${inputs.map((x, i) => `${x}*${fkey(factors[i] as Frac)}`).join(',')}`;
    const hit = this.byKey.get(key);
    if (hit !== undefined) {
      this.use?.same(kind, attrs, (this.ops[hit] as OpRef).attrs);
      return hit;
    }
    // An op that has no value (bad attributes, shapes, scaled inputs) stays so: asked again, it
    // is not re-checked and grows no new virtual tensors.
    if (this.noOp.has(key)) return undefined;
    const def = registry.get(kind);
    let outShapes: Shape[];
    try {
      if (registry.checkAttrs(kind, attrs) !== undefined) return this.none(key);
      outShapes = def.shape(inputs.map((x) => this.shape(x)), attrs);
    } catch {
      return this.none(key);
    }
    const outputs = outShapes.map((sh) => {
      this.vShapes.push(sh);
      this.vDefs.push({ kind, inputs });
      return this.nLogical + this.vShapes.length - 1;
    });
    // A virtual op reads factor x its canonical inputs: only unscaled ones have a shape rule to trust.
    if (factors.some((f) => !feq(f, ONE))) return this.none(key);
    const q = this.register(key, { kind, attrs, inputs, factors, outputs });
    // A single-output op with a decomposition: its output is the decomposition's value (the op
    // stays registered, so the same op on a slice still finds it).
    const dec = def.decompose?.(inputs.length, attrs, inputs.map((x) => this.shape(x)), inputs.map((x) => this.domain(x)));
    const root = dec?.length === 1 && outputs.length === 1 ? dec[0] : undefined;
    if (root !== undefined && !('input' in root)) {
      const id = this.build(root, inputs);
      if (id !== undefined) this.vAlias.set(outputs[0] as number, id);
    }
    return q;
  }

  private readonly noOp = new Set<string>();
  private none(key: string): undefined {
    this.noOp.add(key);
    return undefined;
  }

  /**
   * The tensor an expression names over these inputs. `seen` holds the subexpressions already
   * built over the same inputs: a decomposition shares them between its outputs (clip_grad_norm's
   * sum of squares, one object in each of its n outputs), and building that sum again per output
   * was n^2 lookups (10^6 at 405B, ~12 s). A subexpression over the same inputs names the same
   * tensor the second time (opFor finds the op it registered), so the memo changes no id.
   */
  private build(e: DecompExpr, inputs: readonly number[], seen = new Map<DecompExpr, number | undefined>()): number | undefined {
    if ('input' in e) return inputs[e.input];
    if (seen.has(e)) return seen.get(e);
    let id: number | undefined;
    if ('sum' in e) {
      const ids = e.sum.map((x) => this.build(x, inputs, seen));
      id = ids.some((x) => x === undefined) ? undefined : this.sumOf(ids.map((x) => ({ id: x as number, coef: ONE })));
    } else {
      const args = e.args.map((x) => this.build(x, inputs, seen));
      const q = args.some((x) => x === undefined) ? undefined : this.opFor(registry.id(e.op), e.attrs, args as number[]);
      id = q === undefined ? undefined : (this.ops[q] as OpRef).outputs[e.output ?? 0];
    }
    seen.set(e, id);
    return id;
  }

  /**
   * The tensor sum of coef x id, in one normal form (terms merged and sorted by id, scales
   * then left-nested adds), so two spellings of one sum get one id.
   */
  sumOf(terms: readonly { id: number; coef: Frac }[]): number | undefined {
    const m = new Map<number, Frac>();
    for (const t of terms) {
      const prev = m.get(t.id);
      const c = prev === undefined ? t.coef : frac(prev.num * t.coef.den + t.coef.num * prev.den, prev.den * t.coef.den);
      if (c === undefined) return undefined;
      m.set(t.id, c);
    }
    const ids = [...m.keys()].filter((id) => (m.get(id) as Frac).num !== 0).sort((a, b) => a - b);
    let acc: number | undefined;
    for (const id of ids) {
      const c = m.get(id) as Frac;
      let x: number | undefined = id;
      if (!feq(c, ONE)) {
        const q = this.opFor(registry.id('scale'), { factor: fkey(c) }, [id]);
        x = q === undefined ? undefined : (this.ops[q] as OpRef).outputs[0];
      }
      if (x === undefined) return undefined;
      if (acc === undefined) acc = x;
      else {
        if (this.shape(acc).join(',') !== this.shape(x).join(',')) return undefined;
        const q = this.opFor(registry.id('add'), {}, [acc, x]);
        acc = q === undefined ? undefined : (this.ops[q] as OpRef).outputs[0];
        if (acc === undefined) return undefined;
      }
    }
    return acc;
  }

  shape(id: number): Shape {
    return id < this.nLogical ? (this.plan.logical.shapes[id] ?? []) : (this.vShapes[id - this.nLogical] ?? []);
  }
  name(id: number): string {
    if (id < this.nLogical) return this.plan.logical.tensors.name(id);
    const hit = this.vNames.get(id);
    if (hit !== undefined) return hit;
    const v = this.vDefs[id - this.nLogical];
    if (v === undefined) return `#${id}`;
    let n = `${registry.get(v.kind).name}(${v.inputs.map((x) => this.name(x)).join(', ')})`;
    // Deep sums (hundreds of squared norms) would spell megabytes: messages keep the start.
    if (n.length > 2000) n = `${n.slice(0, 2000)}...)`;
    this.vNames.set(id, n);
    return n;
  }
  /** The values an integer tensor may hold (ascending), when the plan says. */
  domain(id: number): readonly number[] | undefined {
    return id < this.nLogical ? this.domains[id] : undefined;
  }
  /** (canonical id, factor) of a tensor id. */
  canon(id: number): [number, Frac] {
    if (id < this.nLogical) return [this.canonId[id] as number, this.canonScale[id] as Frac];
    const a = this.vAlias.get(id);
    return a === undefined ? [id, ONE] : this.canon(a);
  }
}
