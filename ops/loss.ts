/** Losses and their backward ops. */
import type { Algebra, Dense } from './algebra.js';
import { arg } from './dense.js';
import { dimLabels } from './dims.js';
import { type GradRef, NO_BACKWARD, one } from './grad.js';
import { type Attrs, type DecompExpr, type DimLabel, type DimRole, type OpDef, attrObject, fixed, sameShape, ShapeError, type Shape, shapeStr } from './types.js';

const reduction = attrObject({ reduction: { enum: ['mean', 'sum'] } });

const ceAttrs = attrObject({ reduction: { enum: ['mean', 'sum', 'none'] }, ignore_index: { type: 'integer' } });

function ceShape([x, t]: readonly Shape[]): void {
  if ((x as Shape).length !== 2) throw new ShapeError(`logits must be [N, C], got ${shapeStr(x as Shape)}`);
  if (!sameShape([(x as Shape)[0] as number], t as Shape)) throw new ShapeError(`labels ${shapeStr(t as Shape)} must be [${(x as Shape)[0]}] for logits ${shapeStr(x as Shape)}`);
}

/**
 * Per row: the loss terms of torch.nn.functional.cross_entropy. w = [label != ignore_index]
 * (PyTorch's default ignore_index is -100), target = x[label] (rows of ignored labels read
 * nothing), lse = m + log(sum exp(x - m)) with m the row max, p = softmax.
 */
function ceRows<S>(alg: Algebra<S>, x: Dense<S>, labels: Dense<S>, at: Attrs, what: string): { w: S[]; loss: S[]; p: S[][]; onehot: S[][] } {
  const [N, C] = x.shape as [number, number];
  const ignore = typeof at['ignore_index'] === 'number' ? at['ignore_index'] : -100;
  const out = { w: [] as S[], loss: [] as S[], p: [] as S[][], onehot: [] as S[][] };
  for (let i = 0; i < N; i++) {
    const row = x.data.slice(i * C, (i + 1) * C) as S[];
    const label = labels.data[i] as S;
    const w = alg.test(label, (v) => v !== ignore);
    alg.require(alg.test(label, (v) => v === ignore || (Number.isInteger(v) && v >= 0 && v < C)), `${what}: label within [0, ${C}) or the ignore index ${ignore}`);
    const onehot = row.map((_, c) => alg.test(label, (v) => v === c));
    const m = alg.max(row);
    const e = row.map((v) => alg.exp(alg.sub(v, m)));
    const z = alg.sum(e);
    const target = alg.sum(onehot.map((h, c) => alg.mul(h, row[c] as S)));
    out.w.push(w);
    const kl = alg.known(label);
    // PyTorch raises on such a label; numerically that shows as NaN.
    const bad = !alg.exact && kl !== undefined && kl !== ignore && !(Number.isInteger(kl) && kl >= 0 && kl < C);
    out.loss.push(bad ? alg.constant(Number.NaN) : alg.mul(w, alg.sub(alg.add(m, alg.fn('log', z)), target)));
    out.p.push(e.map((v) => alg.div(v, z)));
    out.onehot.push(onehot);
  }
  return out;
}

/**
 * Rows N and classes C of cross-entropy. Classes are compared across (max, sum of exp, the
 * label's one-hot): contracted, unless a non-negative ignore_index names a position on them.
 * Rows: 'mean' divides by the number of non-ignored labels, which is N itself whenever no
 * label can be ignored (a size as a constant, as in mean), so they are fixed; otherwise they
 * are `sumRole` ('contracted' for the summed loss, 'batch' where each row stands alone).
 */
function ceLabels(at: Attrs, sumRole: DimRole): { N: DimLabel; C: DimLabel } {
  const ignore = typeof at['ignore_index'] === 'number' ? at['ignore_index'] : -100;
  const rows: DimRole = at['reduction'] === 'none' ? 'batch' : at['reduction'] === 'sum' ? sumRole : 'fixed';
  return { N: { label: 'n', role: rows }, C: { label: 'c', role: ignore >= 0 ? 'fixed' : 'contracted' } };
}

/**
 * 'mean' is 1/N times 'sum' when no label can be ignored: the labels' values are known
 * (`domains`, the values each may take) and ignore_index is not among them, so the count of
 * non-ignored labels is N itself.
 */
function ceRescale(ins: readonly Shape[], at: Attrs, logitsAt: number, domains: readonly (readonly number[] | undefined)[]): { attrs: Attrs; factor: string } | undefined {
  const x = ins[logitsAt] as Shape;
  const ignore = typeof at['ignore_index'] === 'number' ? at['ignore_index'] : -100;
  const labels = domains[logitsAt + 1];
  const n = x[0] as number;
  if ((at['reduction'] ?? 'mean') !== 'mean' || labels === undefined || labels.includes(ignore) || !(n > 0)) return undefined;
  return { attrs: { ...at, reduction: 'sum' }, factor: `1/${n}` };
}

/** Every label is a class index (none is ignore_index): the labels' known values lie in [0, C). */
function labelsIn(dom: readonly number[] | undefined, C: number, at: Attrs): boolean {
  const ignore = typeof at['ignore_index'] === 'number' ? at['ignore_index'] : -100;
  return dom !== undefined && dom.length > 0 && !dom.includes(ignore) && (dom[0] as number) >= 0 && (dom[dom.length - 1] as number) < C;
}

/** 'mean' is 1/numel times 'sum'. */
function mseRescale(p: Shape, at: Attrs): { attrs: Attrs; factor: string } | undefined {
  const n = p.reduce((a, b) => a * b, 1);
  if ((at['reduction'] ?? 'mean') !== 'mean' || !(n > 0)) return undefined;
  return { attrs: { ...at, reduction: 'sum' }, factor: `1/${n}` };
}

/** mse's dims: mean divides by numel (a size as a constant, so fixed); sum is `sumRole`. */
function mseRole(at: Attrs, sumRole: DimRole): DimRole {
  return at['reduction'] === 'sum' ? sumRole : 'fixed';
}

export const ops: OpDef[] = [
  {
    name: 'cross_entropy',
    family: 'loss',
    doc: "torch.nn.functional.cross_entropy(logits [N, C], labels [N], reduction='mean'|'sum'|'none', ignore_index=-100): mean divides by the number of non-ignored labels",
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: ceAttrs,
    shape: (ins, at) => {
      ceShape(ins);
      return [at['reduction'] === 'none' ? [(ins[0] as Shape)[0] as number] : []];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const r = ceRows(alg, arg(ins, 0), arg(ins, 1), at, 'cross_entropy');
      if (at['reduction'] === 'none') return [{ shape: [r.loss.length], data: r.loss }];
      const s = alg.sum(r.loss);
      return [{ shape: [], data: [at['reduction'] === 'sum' ? s : alg.div(s, alg.sum(r.w))] }];
    },
    backward: (b, { inputs: [x, t], grads: [g], attrs }) => [one(b, 'cross_entropy_backward', [g as GradRef, x as GradRef, t as GradRef], attrs), undefined],
    dims: (_ins, at) => {
      const none = at['reduction'] === 'none';
      const { N, C } = ceLabels(at, 'contracted');
      // The summed loss adds per-row terms plainly (DimSig.sums).
      return { inputs: [[N, C], [N]], outputs: [none ? [N] : []], inputValues: { 1: C }, ...(at['reduction'] === 'sum' ? { sums: ['n'] } : {}) };
    },
    rescale: (ins, at, doms) => ceRescale(ins, at, 0, doms),
    // The summed loss as vocab-parallel code spells it (shift by the row max, log-sum-exp minus
    // the picked logit): exact for any shift, so the max need not be the max.
    decompose: (_n, at, ins, doms) => {
      const x = ins?.[0];
      if (x === undefined || at['reduction'] !== 'sum' || !labelsIn(doms?.[1], x[1] as number, at)) return undefined;
      const N = x[0] as number;
      const s: DecompExpr = { op: 'sub', attrs: {}, args: [{ input: 0 }, { op: 'amax', attrs: { dims: [1], keepdim: true }, args: [{ input: 0 }] }] };
      const lse: DecompExpr = { op: 'log', attrs: {}, args: [{ op: 'sum', attrs: { dims: [1] }, args: [{ op: 'exp', attrs: {}, args: [s] }] }] };
      const pick: DecompExpr = { op: 'reshape', attrs: { shape: [N] }, args: [{ op: 'gather', attrs: {}, args: [s, { op: 'reshape', attrs: { shape: [N, 1] }, args: [{ input: 1 }] }] }] };
      return [{ op: 'sum', attrs: {}, args: [{ op: 'sub', attrs: {}, args: [lse, pick] }] }];
    },
  },
  {
    name: 'cross_entropy_backward',
    family: 'loss',
    doc: 'grad of cross_entropy: (grad_loss, logits, labels) -> grad_logits = grad_loss * w * (softmax(logits) - onehot(label)) (/ number of non-ignored labels for mean)',
    inputs: fixed(3),
    outputs: fixed(1),
    attrSchema: ceAttrs,
    shape: ([g, x, t], at) => {
      ceShape([x as Shape, t as Shape]);
      const gs = at['reduction'] === 'none' ? [(x as Shape)[0] as number] : [];
      if (!sameShape(g as Shape, gs)) throw new ShapeError(`loss gradient must be ${shapeStr(gs)}, got ${shapeStr(g as Shape)}`);
      return [x as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const g = arg(ins, 0);
      const x = arg(ins, 1);
      const r = ceRows(alg, x, arg(ins, 2), at, 'cross_entropy_backward');
      const none = at['reduction'] === 'none';
      const k = none ? undefined : at['reduction'] === 'sum' ? (g.data[0] as S) : alg.div(g.data[0] as S, alg.sum(r.w));
      const data = r.p.flatMap((p, i) => {
        const gi = alg.mul(none ? (g.data[i] as S) : (k as S), r.w[i] as S);
        return p.map((pc, c) => alg.mul(gi, alg.sub(pc, (r.onehot[i] as S[])[c] as S)));
      });
      return [{ shape: x.shape, data }];
    },
    backward: NO_BACKWARD,
    // 'sum' and 'none' scale each row by the given gradient alone.
    dims: (_ins, at) => {
      const none = at['reduction'] === 'none';
      const { N, C } = ceLabels(at, 'batch');
      return { inputs: [none ? [N] : [], [N, C], [N]], outputs: [[N, C]], inputValues: { 2: C } };
    },
    rescale: (ins, at, doms) => ceRescale(ins, at, 1, doms),
    linearIn: () => [0],
    // The summed loss's gradient as autograd spells it through the vocab-parallel loss above
    // (softmax part: g / sum(exp) times exp of the shifted logits; picked part: -g scattered
    // at the labels), with every broadcast an expand to full size.
    decompose: (_n, at, ins, doms) => {
      const x = ins?.[1];
      if (x === undefined || at['reduction'] !== 'sum' || !labelsIn(doms?.[2], x[1] as number, at)) return undefined;
      const [N, C] = x as [number, number];
      const g1: DecompExpr = { op: 'reshape', attrs: { shape: [1] }, args: [{ input: 0 }] };
      const s: DecompExpr = { op: 'sub', attrs: {}, args: [{ input: 1 }, { op: 'amax', attrs: { dims: [1], keepdim: true }, args: [{ input: 1 }] }] };
      const e: DecompExpr = { op: 'exp', attrs: {}, args: [s] };
      const d: DecompExpr = { op: 'div', attrs: {}, args: [{ op: 'expand', attrs: { shape: [N] }, args: [g1] }, { op: 'sum', attrs: { dims: [1] }, args: [e] }] };
      const soft: DecompExpr = { op: 'mul', attrs: {}, args: [{ op: 'expand', attrs: { shape: [N, C] }, args: [{ op: 'reshape', attrs: { shape: [N, 1] }, args: [d] }] }, e] };
      const neg: DecompExpr = { op: 'expand', attrs: { shape: [N, 1] }, args: [{ op: 'reshape', attrs: { shape: [1, 1] }, args: [{ op: 'neg', attrs: {}, args: [g1] }] }] };
      const pick: DecompExpr = { op: 'gather_backward', attrs: { size: C }, args: [neg, { op: 'reshape', attrs: { shape: [N, 1] }, args: [{ input: 2 }] }] };
      return [{ sum: [soft, pick] }];
    },
  },
  {
    name: 'mse_loss',
    family: 'loss',
    doc: "torch.nn.functional.mse_loss(pred, target, reduction='mean'|'sum') -> scalar",
    inputs: fixed(2),
    outputs: fixed(1),
    attrSchema: reduction,
    shape: ([p, t]) => {
      if (!sameShape(p as Shape, t as Shape)) throw new ShapeError(`prediction ${shapeStr(p as Shape)} and target ${shapeStr(t as Shape)} differ`);
      return [[]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const p = arg(ins, 0);
      const t = arg(ins, 1);
      const sq = p.data.map((v, i) => {
        const d = alg.sub(v, t.data[i] as S);
        return alg.mul(d, d);
      });
      const s = alg.sum(sq);
      return [{ shape: [], data: [at['reduction'] === 'sum' ? s : alg.mul(s, alg.constant(`1/${p.data.length}`))] }];
    },
    backward: (b, { inputs: [p, t], grads: [g], attrs }) => {
      const gp = one(b, 'mse_loss_backward', [p as GradRef, t as GradRef, g as GradRef], attrs);
      return [gp, one(b, 'neg', [gp])];
    },
    dims: ([p], at) => {
      const l = dimLabels(p as Shape, 'd', mseRole(at, 'contracted'));
      // The summed loss adds per-element terms plainly (DimSig.sums).
      return { inputs: [l, l], outputs: [[]], ...(at['reduction'] === 'sum' ? { sums: l.map((x) => x.label) } : {}) };
    },
    rescale: ([p], at) => mseRescale(p as Shape, at),
  },
  {
    name: 'mse_loss_backward',
    family: 'loss',
    doc: 'grad of mse_loss: (pred, target[, grad_loss []]) -> grad_pred = grad_loss * 2 (pred - target) / N (N = numel for mean, 1 for sum; grad_loss defaults to 1)',
    inputs: { min: 2, max: 3 },
    outputs: fixed(1),
    attrSchema: reduction,
    shape: ([p, t, g]) => {
      if (g !== undefined && g.length !== 0) throw new ShapeError(`loss gradient must be a scalar, got ${shapeStr(g)}`);
      if (!sameShape(p as Shape, t as Shape)) throw new ShapeError(`prediction ${shapeStr(p as Shape)} and target ${shapeStr(t as Shape)} differ`);
      return [p as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], at: Attrs): Dense<S>[] => {
      const p = arg(ins, 0);
      const t = arg(ins, 1);
      const g = ins[2];
      let k = alg.constant(at['reduction'] === 'sum' ? 2 : `2/${p.data.length}`);
      if (g !== undefined) k = alg.mul(k, g.data[0] as S);
      return [{ shape: p.shape, data: p.data.map((v, i) => alg.mul(k, alg.sub(v, t.data[i] as S))) }];
    },
    backward: NO_BACKWARD,
    dims: (ins, at) => {
      const l = dimLabels(ins[0] as Shape, 'd', mseRole(at, 'batch'));
      return { inputs: [l, l, ...(ins.length > 2 ? [[]] : [])], outputs: [l] };
    },
    rescale: ([p], at) => mseRescale(p as Shape, at),
    // grad_loss times a function of pred and target.
    linearIn: (n) => (n > 2 ? [2] : []),
  },
];
