/**
 * Scaled dot-product attention over [..., heads, seq, head_dim] tensors, with grouped-query
 * heads (q heads = g * kv heads; q head h reads kv head floor(h / g)) and an exact causal
 * mask: masked positions are left out of the softmax sums, not given a large negative score.
 *
 * For flash / ring attention, `attention_partial` computes one key block's contribution as
 * (o, m, l): the block-normalized output, the row max of the scores and the row sum of
 * exp(score - m). `attention_combine` merges two partials by rescaling with exp of max
 * differences. The combination of all blocks equals full attention exactly, which the engine
 * proves because exp(a + b) = exp(a) exp(b) is built into its normal form. Backward, each
 * block's `attention_partial_backward` uses the combined output and statistics (flash
 * attention keeps the log-sum-exp; the pair (m, l) is the same information without a log),
 * so its dq addends sum to the full dq and its dk, dv are the block's rows of the full ones.
 *
 * Causal masking with an offset: key position j is visible from query position i when
 * j + k_offset <= i + q_offset (global positions), so a ring step over a remote key chunk
 * passes the chunks' offsets.
 */
import type { Algebra, Dense } from './algebra.js';
import { arg, at } from './dense.js';
import { batchDim, dimLabels } from './dims.js';
import { NO_BACKWARD, type GradRef } from './grad.js';
import { type Attrs, type DimLabel, type DimRole, type OpDef, attrNum, attrObject, fixed, sameShape, scalarSchema, ShapeError, type Shape, shapeStr, attrScalar } from './types.js';

const attnAttrs = attrObject({
  scale: scalarSchema,
  causal: { type: 'boolean' },
  q_offset: { type: 'integer', minimum: 0 },
  k_offset: { type: 'integer', minimum: 0 },
});

interface Dims {
  readonly batch: number[];
  readonly hq: number;
  readonly hk: number;
  readonly sq: number;
  readonly sk: number;
  readonly d: number;
  readonly dv: number;
}

function dims(q: Shape, k: Shape, v: Shape): Dims {
  if (q.length < 3 || k.length !== q.length || v.length !== q.length) throw new ShapeError(`q ${shapeStr(q)}, k ${shapeStr(k)} and v ${shapeStr(v)} must be [..., heads, seq, dim] of one rank`);
  const r = q.length;
  const batch = q.slice(0, r - 3);
  if (!sameShape(batch, k.slice(0, r - 3)) || !sameShape(batch, v.slice(0, r - 3))) throw new ShapeError(`batch dims differ: ${shapeStr(q)}, ${shapeStr(k)}, ${shapeStr(v)}`);
  const [hq, sq, d] = q.slice(r - 3) as [number, number, number];
  const [hk, sk, dk] = k.slice(r - 3) as [number, number, number];
  const [hv, sv, dv] = v.slice(r - 3) as [number, number, number];
  if (dk !== d) throw new ShapeError(`q head dim ${d} and k head dim ${dk} differ`);
  if (hv !== hk || sv !== sk) throw new ShapeError(`k ${shapeStr(k)} and v ${shapeStr(v)} disagree on heads or sequence`);
  if (hq % hk !== 0) throw new ShapeError(`${hq} query heads are not a multiple of ${hk} key/value heads`);
  return { batch, hq, hk, sq, sk, d, dv };
}

/** The score scale: the `scale` attribute, or 1/sqrt(head dim) as PyTorch defaults. */
function attnScale<S>(alg: Algebra<S>, a: Attrs, d: number): S {
  return a['scale'] === undefined ? alg.div(alg.one, alg.fn('sqrt', alg.constant(d))) : alg.constant(attrScalar(a, 'scale'));
}

const visible = (a: Attrs, i: number, j: number): boolean => a['causal'] !== true || j + attrNum(a, 'k_offset', 0) <= i + attrNum(a, 'q_offset', 0);

/** For every (batch, head, query row): the visible keys' scores. Calls f with row context. */
function forRows<S>(
  alg: Algebra<S>,
  q: Dense<S>,
  k: Dense<S>,
  a: Attrs,
  dm: Dims,
  f: (b: number[], h: number, i: number, keys: number[], scores: S[]) => void,
): void {
  const scale = attnScale(alg, a, dm.d);
  const group = dm.hq / dm.hk;
  const nb = dm.batch.reduce((p, x) => p * x, 1);
  for (let bf = 0; bf < nb; bf++) {
    const b: number[] = [];
    let rem = bf;
    for (let t = dm.batch.length - 1; t >= 0; t--) {
      b[t] = rem % (dm.batch[t] as number);
      rem = Math.floor(rem / (dm.batch[t] as number));
    }
    for (let h = 0; h < dm.hq; h++) {
      const hk = Math.floor(h / group);
      for (let i = 0; i < dm.sq; i++) {
        const keys: number[] = [];
        const scores: S[] = [];
        for (let j = 0; j < dm.sk; j++) {
          if (!visible(a, i, j)) continue;
          const terms: S[] = [];
          for (let c = 0; c < dm.d; c++) terms.push(alg.mul(at(q, [...b, h, i, c]), at(k, [...b, hk, j, c])));
          keys.push(j);
          scores.push(alg.mul(alg.sum(terms), scale));
        }
        f(b, h, i, keys, scores);
      }
    }
  }
}

/**
 * Labels of q, k, v, the output and the row statistics. Batch dims are SIMD. Heads are SIMD
 * when q and kv heads are equal; grouped-query heads pair h with floor(h / g), so both head
 * dims are fixed. A causal mask compares positions (j + k_offset <= i + q_offset), so both
 * sequence dims are fixed under it; otherwise query rows are SIMD (contracted in the
 * backward, which sums over them for dk and dv) and keys are contracted. The head dim is
 * contracted, or fixed when the scale defaults to 1/sqrt(d) (its size is then a constant).
 * The value dim is SIMD forward and contracted backward (dS sums g v^T over it).
 */
function attnLabels(q: Shape, k: Shape, v: Shape, a: Attrs, backward: boolean): { q: DimLabel[]; k: DimLabel[]; v: DimLabel[]; o: DimLabel[]; rows: DimLabel[] } {
  const dm = dims(q, k, v);
  const causal = a['causal'] === true;
  const b = dimLabels(dm.batch, 'b', 'batch');
  const lab = (label: string, role: DimRole): DimLabel => ({ label, role });
  const [hq, hk] = dm.hq === dm.hk ? [batchDim('h'), batchDim('h')] : [lab('hq', 'fixed'), lab('hk', 'fixed')];
  const sq = lab('sq', causal ? 'fixed' : backward ? 'contracted' : 'batch');
  const sk = lab('sk', causal ? 'fixed' : 'contracted');
  const d = lab('d', a['scale'] === undefined ? 'fixed' : 'contracted');
  const dv = lab('dv', backward ? 'contracted' : 'batch');
  return { q: [...b, hq, sq, d], k: [...b, hk, sk, d], v: [...b, hk, sk, dv], o: [...b, hq, sq, dv], rows: [...b, hq, sq] };
}

/** Grouped-query heads: q head h reads kv head floor(h / g) (DimSig.grouped). */
function headGroups(q: Shape, k: Shape, v: Shape): { grouped?: { label: string; of: string; ratio: number }[] } {
  const dm = dims(q, k, v);
  return dm.hq === dm.hk ? {} : { grouped: [{ label: 'hq', of: 'hk', ratio: dm.hq / dm.hk }] };
}

function attentionApply<S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs, partial: boolean): Dense<S>[] {
  const [q, k, v] = [arg(ins, 0), arg(ins, 1), arg(ins, 2)];
  const dm = dims(q.shape, k.shape, v.shape);
  const group = dm.hq / dm.hk;
  const o: S[] = [];
  const ms: S[] = [];
  const ls: S[] = [];
  forRows(alg, q, k, a, dm, (b, h, _i, keys, scores) => {
    if (keys.length === 0) throw new Error('a query row sees no key (causal offsets leave it empty)');
    const m = alg.max(scores);
    const p = scores.map((s) => alg.exp(alg.sub(s, m)));
    const l = alg.sum(p);
    for (let c = 0; c < dm.dv; c++) {
      const acc = p.map((pj, t) => alg.mul(pj, at(v, [...b, Math.floor(h / group), keys[t] as number, c])));
      o.push(alg.div(alg.sum(acc), l));
    }
    ms.push(m);
    ls.push(l);
  });
  const oshape = [...dm.batch, dm.hq, dm.sq, dm.dv];
  if (!partial) return [{ shape: oshape, data: o }];
  const sshape = [...dm.batch, dm.hq, dm.sq];
  return [
    { shape: oshape, data: o },
    { shape: sshape, data: ms },
    { shape: sshape, data: ls },
  ];
}

/** Shapes of (dq, dk, dv); checks the gradient, the output and any row statistics against q, k, v. */
function backwardShapes(g: Shape, q: Shape, k: Shape, v: Shape, o: Shape, stats: readonly Shape[] = []): Shape[] {
  const dm = dims(q, k, v);
  const os = [...dm.batch, dm.hq, dm.sq, dm.dv];
  const rows = os.slice(0, -1);
  if (!sameShape(g, os) || !sameShape(o, os)) throw new ShapeError(`grad ${shapeStr(g)} and output ${shapeStr(o)} must be ${shapeStr(os)}`);
  for (const st of stats) if (!sameShape(st, rows)) throw new ShapeError(`row statistics ${shapeStr(st)} must be ${shapeStr(rows)}`);
  return [q, k, v];
}

/**
 * The attention backward given each row's softmax probabilities over its visible keys
 * (`probs(row, scores)`, row the flat (batch, head, query) index): dv = P^T g, dS = P (g v^T -
 * rowsum(g * out)), dq = dS k scale, dk = dS^T q scale. Rows with no visible key add nothing.
 */
function backwardApply<S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs, probs: (row: number, scores: S[]) => S[]): Dense<S>[] {
  const [g, q, k, v, o] = [arg(ins, 0), arg(ins, 1), arg(ins, 2), arg(ins, 3), arg(ins, 4)];
  const dm = dims(q.shape, k.shape, v.shape);
  const group = dm.hq / dm.hk;
  const scale = attnScale(alg, a, dm.d);
  const acc = (shape: Shape): S[][] => Array.from({ length: shape.reduce((p, x) => p * x, 1) }, () => []);
  const dq = acc(q.shape);
  const dk = acc(k.shape);
  const dv = acc(v.shape);
  const flat = (shape: Shape, idx: number[]): number => idx.reduce((f, x, t) => f * (shape[t] as number) + x, 0);
  forRows(alg, q, k, a, dm, (b, h, i, keys, scores) => {
    if (keys.length === 0) return;
    const hk = Math.floor(h / group);
    const p = probs(flat([...dm.batch, dm.hq, dm.sq], [...b, h, i]), scores);
    const gi = Array.from({ length: dm.dv }, (_, c) => at(g, [...b, h, i, c]));
    const delta = alg.sum(gi.map((x, c) => alg.mul(x, at(o, [...b, h, i, c]))));
    keys.forEach((j, t) => {
      const pj = p[t] as S;
      for (let c = 0; c < dm.dv; c++) (dv[flat(v.shape, [...b, hk, j, c])] as S[]).push(alg.mul(pj, gi[c] as S));
      const dp = alg.sum(gi.map((x, c) => alg.mul(x, at(v, [...b, hk, j, c]))));
      const ds = alg.mul(alg.mul(pj, alg.sub(dp, delta)), scale);
      for (let c = 0; c < dm.d; c++) {
        (dq[flat(q.shape, [...b, h, i, c])] as S[]).push(alg.mul(ds, at(k, [...b, hk, j, c])));
        (dk[flat(k.shape, [...b, hk, j, c])] as S[]).push(alg.mul(ds, at(q, [...b, h, i, c])));
      }
    });
  });
  return [
    { shape: q.shape, data: dq.map((x) => alg.sum(x)) },
    { shape: k.shape, data: dk.map((x) => alg.sum(x)) },
    { shape: v.shape, data: dv.map((x) => alg.sum(x)) },
  ];
}

export const ops: OpDef[] = [
  {
    name: 'attention',
    family: 'attention',
    doc: 'softmax(q k^T * scale, masked) v over [..., heads, seq, dim]; scale defaults to 1/sqrt(dim); causal masking excludes future keys exactly; grouped-query heads',
    inputs: fixed(3),
    outputs: fixed(1),
    attrSchema: attnAttrs,
    shape: ([q, k, v]) => {
      const dm = dims(q as Shape, k as Shape, v as Shape);
      return [[...dm.batch, dm.hq, dm.sq, dm.dv]];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => attentionApply(alg, ins, a, false),
    backward: (b, { inputs: [q, k, v], outputs: [o], grads: [g], attrs }) => b.op('attention_backward', [g as GradRef, q as GradRef, k as GradRef, v as GradRef, o as GradRef], attrs),
    dims: ([q, k, v], a) => {
      const l = attnLabels(q as Shape, k as Shape, v as Shape, a, false);
      return { inputs: [l.q, l.k, l.v], outputs: [l.o], ...headGroups(q as Shape, k as Shape, v as Shape) };
    },
  },
  {
    name: 'attention_backward',
    family: 'attention',
    linearIn: () => [0],
    doc: 'grad of attention: (grad_out, q, k, v, out) -> (dq, dk, dv); P = softmax, dv = P^T g, dS = P (g v^T - rowsum(g * out)), dq = dS k scale, dk = dS^T q scale (kv heads summed over their query group)',
    inputs: fixed(5),
    outputs: fixed(3),
    attrSchema: attnAttrs,
    shape: ([g, q, k, v, o]) => backwardShapes(g as Shape, q as Shape, k as Shape, v as Shape, o as Shape),
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] =>
      backwardApply(alg, ins, a, (_row, scores) => {
        const m = alg.max(scores);
        const e = scores.map((s) => alg.exp(alg.sub(s, m)));
        const l = alg.sum(e);
        return e.map((x) => alg.div(x, l));
      }),
    backward: NO_BACKWARD,
    dims: ([, q, k, v], a) => {
      const l = attnLabels(q as Shape, k as Shape, v as Shape, a, true);
      return { inputs: [l.o, l.q, l.k, l.v, l.o], outputs: [l.q, l.k, l.v], ...headGroups(q as Shape, k as Shape, v as Shape) };
    },
  },
  {
    name: 'attention_partial',
    family: 'attention',
    doc: 'one key block of flash / ring attention: (q, k, v) -> (o, m, l) with o the block-normalized output, m the row max of the (masked) scores, l = sum exp(score - m)',
    inputs: fixed(3),
    outputs: fixed(3),
    attrSchema: attnAttrs,
    shape: ([q, k, v]) => {
      const dm = dims(q as Shape, k as Shape, v as Shape);
      const rows = [...dm.batch, dm.hq, dm.sq];
      return [[...rows, dm.dv], rows, rows];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => attentionApply(alg, ins, a, true),
    backward: NO_BACKWARD,
    dims: ([q, k, v], a) => {
      const l = attnLabels(q as Shape, k as Shape, v as Shape, a, false);
      return { inputs: [l.q, l.k, l.v], outputs: [l.o, l.rows, l.rows], ...headGroups(q as Shape, k as Shape, v as Shape) };
    },
  },
  {
    name: 'attention_partial_backward',
    family: 'attention',
    doc: "one key block's share of the attention backward (flash / ring): (grad_out, q, k, v, out, m, l) -> (dq, dk, dv) with out, m, l the combined output and row statistics of all blocks, P = exp(score - m) / l; dq is this block's addend, dk and dv are the block's keys' gradients from these queries",
    inputs: fixed(7),
    outputs: fixed(3),
    attrSchema: attnAttrs,
    shape: ([g, q, k, v, o, m, l]) => backwardShapes(g as Shape, q as Shape, k as Shape, v as Shape, o as Shape, [m as Shape, l as Shape]),
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[], a: Attrs): Dense<S>[] => {
      const [m, l] = [arg(ins, 5), arg(ins, 6)];
      return backwardApply(alg, ins, a, (row, scores) => {
        const [mi, li] = [m.data[row] as S, l.data[row] as S];
        return scores.map((s) => alg.div(alg.exp(alg.sub(s, mi)), li));
      });
    },
    backward: NO_BACKWARD,
    dims: ([, q, k, v], a) => {
      const l = attnLabels(q as Shape, k as Shape, v as Shape, a, true);
      return { inputs: [l.o, l.q, l.k, l.v, l.o, l.rows, l.rows], outputs: [l.q, l.k, l.v], ...headGroups(q as Shape, k as Shape, v as Shape) };
    },
  },
  {
    name: 'attention_combine',
    family: 'attention',
    doc: 'merge two attention partials (o1, m1, l1, o2, m2, l2) -> (o, m, l): m = max(m1, m2), li\' = li exp(mi - m), l = l1\' + l2\', o = (o1 l1\' + o2 l2\') / l',
    inputs: fixed(6),
    outputs: fixed(3),
    attrSchema: attrObject({}),
    shape: ([o1, m1, l1, o2, m2, l2]) => {
      for (const [x, y, what] of [
        [o1, o2, 'outputs'],
        [m1, m2, 'maxima'],
        [l1, l2, 'sums'],
      ] as const) {
        if (!sameShape(x as Shape, y as Shape)) throw new ShapeError(`the partials' ${what} differ: ${shapeStr(x as Shape)} vs ${shapeStr(y as Shape)}`);
      }
      if (!sameShape(m1 as Shape, l1 as Shape) || !sameShape((o1 as Shape).slice(0, -1), m1 as Shape)) throw new ShapeError(`output ${shapeStr(o1 as Shape)} and row statistics ${shapeStr(m1 as Shape)} do not fit`);
      return [o1 as Shape, m1 as Shape, l1 as Shape];
    },
    apply: <S>(alg: Algebra<S>, ins: readonly Dense<S>[]): Dense<S>[] => {
      const [o1, m1, l1, o2, m2, l2] = [0, 1, 2, 3, 4, 5].map((i) => arg(ins, i));
      const dv = (o1 as Dense<S>).shape[(o1 as Dense<S>).shape.length - 1] as number;
      const m: S[] = [];
      const l: S[] = [];
      const o: S[] = [];
      (m1 as Dense<S>).data.forEach((a1, r) => {
        const a2 = (m2 as Dense<S>).data[r] as S;
        const mm = alg.max([a1, a2]);
        const w1 = alg.mul((l1 as Dense<S>).data[r] as S, alg.exp(alg.sub(a1, mm)));
        const w2 = alg.mul((l2 as Dense<S>).data[r] as S, alg.exp(alg.sub(a2, mm)));
        const ll = alg.add(w1, w2);
        m.push(mm);
        l.push(ll);
        for (let c = 0; c < dv; c++) {
          const x1 = (o1 as Dense<S>).data[r * dv + c] as S;
          const x2 = (o2 as Dense<S>).data[r * dv + c] as S;
          o.push(alg.div(alg.add(alg.mul(x1, w1), alg.mul(x2, w2)), ll));
        }
      });
      return [
        { shape: (o1 as Dense<S>).shape, data: o },
        { shape: (m1 as Dense<S>).shape, data: m },
        { shape: (l1 as Dense<S>).shape, data: l },
      ];
    },
    backward: NO_BACKWARD,
    // Row by row and, within a row, column by column: SIMD everywhere.
    dims: ([, m]) => {
      const rows = dimLabels(m as Shape, 'r', 'batch');
      const o = [...rows, batchDim('dv')];
      return { inputs: [o, rows, rows, o, rows, rows], outputs: [o, rows, rows] };
    },
  },
];
