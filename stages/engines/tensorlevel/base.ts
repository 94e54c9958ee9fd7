/**
 * The state every tensor-level rule shares (stages/engines/tensorlevel/prover.ts is the whole
 * prover): producers, caches, the logical world, claims as relations, and how relations are
 * shown in reasons. The rules are split by what they derive, one class each, in a chain ending
 * in TensorLevelProver: slices.ts, routed.ts, collectives.ts, template.ts.
 */
import type { LoadedPlan } from '../../../lineage/load.js';
import type { LineageNF } from '../../../lineage/model.js';
import { registry } from '../../../ops/registry.js';
import type { Attrs, OpDef, Shape } from '../../../ops/types.js';
import type { Program } from '../../../plans/model.js';
import { type TemplateFrame, templateFrame, evalNF } from './frames.js';
import { pieceOf } from './pieces.js';
import { type Range, type Frac, ONE, fmul, feq, type Relation, type Value, type Derived, isSum, isRouted, isSoftmax, isPack, valueKey, regionKey, type StageRef, type Ctx, type Shared, type Sig } from './relations.js';
import type { Int } from './sym.js';
import { showRange } from './stripes.js';
import { AttrUse, LogicalWorld } from './world.js';

export abstract class ProverBase {
  protected readonly localProd: Int32Array[];
  protected readonly collProd = new Map<number, number>();
  /** A claim's relation per (rank, tensor): the same in every stage that assumes it. */
  protected readonly claimCache = new Map<number, Relation | string>();
  /**
   * deriveOp results by content: the rank's view (shapes, attributes), the op, the output and
   * the input values. Ranks that hold the same values (dp replicas of a parameter) derive once.
   */
  protected readonly opMemo = new Map<string, Derived>();
  /** Per view shape table: per op, the id of its signature text (attributes and shapes it reads). */
  protected readonly opSigs = new WeakMap<object, Map<number, number>>();
  protected readonly sigIds = new Map<string, number>();
  /** Values interned by content: an object seen before costs a lookup, not a key. */
  protected readonly valueIds = new WeakMap<object, number>();
  protected readonly valueByKey = new Map<string, number>();
  /**
   * The next value id. Ids are never reused: the content keys are forgotten with the memo they
   * serve (deriveOp), and a value seen again after that gets a new id, which can cost a memo
   * miss but never names two contents alike.
   */
  private nextValueId = 0;
  protected valueId(v: Value): number {
    const hit = this.valueIds.get(v);
    if (hit !== undefined) return hit;
    const k = valueKey(v);
    let id = this.valueByKey.get(k);
    if (id === undefined) this.valueByKey.set(k, (id = this.nextValueId++));
    this.valueIds.set(v, id);
    return id;
  }
  /**
   * (rank, tensor) as one number: rank * tensorKey + tensor. tensorKey is the largest program's
   * tensor count, so keys stay small integers (Maps of doubles allocate on every lookup).
   */
  protected readonly tensorKey: number;
  /** Collective call sites per template as keys: -1 - (program * opKey + op). */
  protected readonly opKey: number;
  /** Collective instances derived once for every stage that assumes none of their claims. */
  protected readonly across = new Map<number, { shared: Shared | string; assumes: Set<number> }>();
  protected readonly world: LogicalWorld;
  /** Records the value-only attribute equalities derivations rely on (AttrUse), when asked. */
  protected readonly use: AttrUse | undefined;
  protected readonly dimsCache = new Map<number, Sig | null>();
  protected readonly scaleKind: number;
  protected readonly addKind: number;
  protected readonly identityKind: number;
  protected readonly reshapeKind: number;
  protected readonly subKind: number;
  protected readonly whereKind: number;
  protected readonly compareKind: number;
  protected readonly expandKind: number;
  protected readonly mulKind: number;
  protected readonly splitKind: number;
  protected readonly sliceKind: number;
  protected readonly concatKind: number;
  /** Per program, per template (stages/decompose/template.ts plans): its base rank, coordinates and box. */
  protected readonly tmpl: readonly (TemplateFrame | string)[] | undefined;
  /** Per program cut into pieces (pieces.ts): its sub-boxes, each derived as its own template. */
  protected readonly pieces = new Map<number, readonly TemplateFrame[]>();
  /** Cuts found by templateClaim for a claim not affine on its box, installed by proveTemplate. */
  protected readonly wantPieces = new Map<number, readonly TemplateFrame[]>();
  /** Per template: rank r's frame: its program's box, or the piece holding r when it is cut. */
  protected frameAt(r: number): TemplateFrame | string | undefined {
    const pi = this.plan.rankProgram[r] as number;
    const ps = this.pieces.get(pi);
    if (ps === undefined) return this.tmpl?.[pi];
    return ps[pieceOf(ps, this.plan.mesh.coords(r))] ?? 'per template: a rank in no piece of its program';
  }
  /** A number per frame (program, or program and piece) for keys of call sites per template. */
  protected frameNo(r: number): number {
    const pi = this.plan.rankProgram[r] as number;
    const ps = this.pieces.get(pi);
    if (ps === undefined) return pi;
    return pi + this.plan.programs.length * (1 + pieceOf(ps, this.plan.mesh.coords(r)));
  }
  /** Per program: the collective call site writing each tensor, or -1 (per template only). */
  protected readonly siteProd: Int32Array[] = [];
  constructor(
    readonly plan: LoadedPlan,
    opts: { readonly perTemplate?: boolean; readonly attrUse?: AttrUse } = {},
  ) {
    this.use = opts.attrUse;
    if (opts.perTemplate === true) {
      this.tmpl = plan.programs.map((p) => templateFrame(plan, p));
      this.siteProd = plan.programs.map((p) => {
        const a = new Int32Array(p.tensors.size).fill(-1);
        for (const op of p.collectiveSites) for (const t of p.ops.opOutputs(op)) a[t] = op;
        return a;
      });
    }
    // Producers without per-rank string keys: a local op per (program, tensor), and the
    // collective instance per (rank, output) (L1: 512 ranks x 15k tensors would be 7M strings).
    this.tensorKey = Math.max(1, ...plan.programs.map((p) => p.tensors.size));
    this.opKey = Math.max(1, ...plan.programs.map((p) => p.ops.size));
    this.localProd = plan.programs.map((p) => {
      const a = new Int32Array(p.tensors.size).fill(-1);
      const sites = new Set(p.collectiveSites);
      for (let op = 0; op < p.ops.size; op++) if (!sites.has(op)) for (const t of p.ops.opOutputs(op)) a[t] = op;
      return a;
    });
    if (opts.perTemplate !== true) plan.collectives.forEach((c, ci) => c.group.forEach((r, i) => {
      const o = c.outputs[i] as number;
      if (o >= 0) this.collProd.set(r * this.tensorKey + o, ci);
    }));
    this.world = new LogicalWorld(plan, opts.attrUse);
    this.scaleKind = registry.id('scale');
    this.addKind = registry.id('add');
    this.identityKind = registry.id('identity');
    this.reshapeKind = registry.id('reshape');
    this.subKind = registry.id('sub');
    this.whereKind = registry.id('where');
    this.compareKind = registry.id('compare');
    this.expandKind = registry.id('expand');
    this.mulKind = registry.id('mul');
    this.splitKind = registry.id('split');
    this.sliceKind = registry.id('slice');
    this.concatKind = registry.id('concat');
  }

  /** A sum as one relation: complete terms of one region are the region of their tensor sum. */
  protected materialize(v: Value): Relation | string {
    if (isRouted(v)) return `a routed MoE buffer (${this.world.name(v.of)}: its rows are a routing-dependent permutation of the tokens' slots) read by an op with no routing rule`;
    if (isSoftmax(v)) return `ring attention's softmax statistics of ${this.world.name(v.op)} read as a tensor region`;
    if (isPack(v)) return 'a concat of values that are not one region, read other than by a split at its pieces';
    if (!isSum(v)) return v;
    const first = v.terms[0] as Relation;
    if (v.terms.some((t) => t.part !== undefined || t.bcast !== undefined || regionKey({ ...t, logical: first.logical }) !== regionKey(first))) return `a sum of ${v.terms.length} values that are not all whole, or not one region`;
    // A factor common to every term stays outside the sum (c a + c b is c x (a + b)).
    const common = v.terms.every((t) => feq(t.scale, first.scale));
    const coefs = v.terms.map((t) => (common ? ONE : t.scale));
    if (coefs.some((c) => c === undefined)) return 'scale overflow';
    const id = this.world.sumOf(v.terms.map((t, i) => ({ id: t.logical, coef: coefs[i] as Frac })));
    if (id === undefined) return `a sum of ${v.terms.length} values of different shapes`;
    const [cid, f] = this.world.canon(id);
    const scale = common ? fmul(f, first.scale) : f;
    if (scale === undefined) return 'scale overflow';
    return { logical: cid, ranges: first.ranges, scale };
  }

  /** A relation of a logical tensor, restated on its canonical tensor (claims name logical ones). */
  protected canonical(d: Relation | string): Relation | string {
    if (typeof d === 'string') return d;
    const [id, f] = this.world.canon(d.logical);
    const scale = fmul(d.scale, f);
    return scale === undefined ? 'scale overflow' : { ...d, logical: id, scale };
  }

  protected tensorName(r: number, t: number): string {
    return (this.plan.programs[this.plan.rankProgram[r] as number] as Program).tensors.name(t);
  }

  protected show(r: Relation): string {
    const s = r.scale.num === 1 && r.scale.den === 1 ? '' : `${r.scale.num}/${r.scale.den} x `;
    const f = (a: Int): string => this.showInt(a);
    const p = r.part === undefined ? '' : ` (addends ${r.part.comps.map((c) => `${c.cover.map(f).join(',')} of ${c.total}`).join(' + ')})`;
    return `${s}${this.world.name(r.logical)}[${r.ranges.map((rg) => showRange(rg, f)).join(',')}]${p}`;
  }

  /** A rank-dependent bound in the mesh's words: "16032*tp + 16032" (coordinates from the program's base). */
  protected showInt(a: Int): string {
    if (typeof a === 'number') return String(a);
    const x0 = this.frame?.x0;
    let c = a.v;
    const terms: string[] = [];
    a.k.forEach((k, i) => {
      if (k === 0) return;
      c -= k * (x0?.[i] ?? 0);
      terms.push(`${k === 1 ? '' : `${k}*`}${this.plan.mesh.axes[i] ?? `x${i}`}`);
    });
    return `(${[...terms, ...(c === 0 ? [] : [String(c)])].join(' + ')})`;
  }

  /**
   * Values derived in every stage alike: a derivation that reached no claimed tensor with a
   * producer depends on no stage (the stage decides only whether such a claim is assumed or
   * recomputed: deriveOne), so one derivation serves all. With lineage only at the boundary,
   * every output's stage walks the whole graph: derived once, not once per output.
   */
  protected readonly pure = new Map<number, Derived>();
  /** Counts derivations that reached a claim with a producer (or a depth limit): `pure` is a snapshot test. */
  protected impure = 0;

  protected claimNF(r: number, t: number): LineageNF | undefined {
    const p = this.plan.programs[this.plan.rankProgram[r] as number] as Program;
    const spec = p.lineage[t];
    if (spec === undefined) return undefined;
    return this.nfOf(r, t);
  }

  protected readonly nfCache = new Map<number, LineageNF>();
  protected nfOf(r: number, t: number): LineageNF {
    const key = r * this.tensorKey + t;
    const hit = this.nfCache.get(key);
    if (hit !== undefined) return hit;
    // evalLineage through the stage builder's conventions (plans/loader view shapes).
    const nf = evalNF(this.plan, r, t);
    if (this.nfCache.size > 100_000) this.nfCache.clear();
    this.nfCache.set(key, nf);
    return nf;
  }

  /** Per template: the current program's base coordinates and box (stages/engines/tensorlevel/sym.ts); undefined per rank. */
  protected frame: { readonly x0: readonly number[]; readonly sets: readonly Int32Array[] } | undefined;

  // Rules a later class of the chain defines (the chain ends in TensorLevelProver).
  protected abstract lifted(regs: readonly (readonly Range[])[], f: (rs: (readonly [number, number])[][]) => (readonly [number, number])[][] | string, memoKey?: string): Range[][] | string;
  protected abstract routedOp(kind: number, def: OpDef, attrs: Attrs, k: number, vals: readonly Value[], outShape: Shape): Derived | undefined;
  protected abstract vocabRule(r: number, op: number, t: number, depth: number, derive: (r: number, t: number, depth: number) => Derived): Derived | undefined;
  protected abstract deriver(stage: StageRef, ctx: Ctx): (r: number, t: number, depth: number) => Derived;
  protected abstract sharedCall(key: number, stage: StageRef, ctx: Ctx, derive: (sub: (r: number, t: number, depth: number) => Derived) => Shared | string): Shared | string;
}
