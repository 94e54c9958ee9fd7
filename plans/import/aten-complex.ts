/**
 * Complex tensors (issue 33: Meta's llama and torchtitan apply RoPE with complex numbers:
 * `view_as_complex(x.reshape(..., -1, 2)) * freqs_cis`, then `view_as_real(...)`).
 *
 * A complex tensor z of shape S is its pairs: the real tensor p of shape [...S, 2] with
 * p[..., 0] = Re z and p[..., 1] = Im z (what `torch.view_as_real(z)` holds). The map is a
 * bijection, so each rule below computes the pairs of the op's result from the pairs of its
 * operands exactly, in the same exact real arithmetic as every other op:
 *
 *   view_as_complex(x)             = x                        (x: [...S, 2])
 *   view_as_real(z)                = p                        (both views: the same values)
 *   conj(z), _conj(z)              = (re, -im)
 *   resolve_conj / resolve_neg / clone / detach / alias / a complex-to-complex copy = p
 *   view / reshape / _unsafe_view  = reshape of p to [...S', 2] (row-major order keeps each pair)
 *   slice / unsqueeze / squeeze / expand / transpose / permute / select / sum
 *                                  = the op on p over S's dims (dims counted on S), the pair
 *                                    dim carried along
 *   z * w                          = (a·c − b·d, a·d + b·c)   (z = a + bi, w = c + di, broadcast)
 *   z * r, r * z (r real)          = (a·r, b·r)
 *   z ± w                          = p ± q
 *   complex(re, im)                = concat of the two as the last dim
 *   real(z), imag(z)               = p[..., 0], p[..., 1]
 *
 * A complex value is not a tensor to any other rule: anything else reading it (a cast to a real
 * dtype, which drops the imaginary part; a collective; an output; `torch.polar`, which needs
 * cos and sin) is an import error naming the line. torch's autograd of these ops (the product's
 * gradient `g * conj(w)`) is these same ops, so the backward needs nothing more; the committed
 * capture of examples/torch/llama_meta_tp.py checks the mapping against PyTorch's gradients.
 */
import { strides as rowMajor } from '../../ops/dense.js';
import type { FxArg, FxNode } from './fxtext.js';
import { sameStrides, type Lowerer, type OpaqueVal, type Rule, type TensorVal, type Val } from './lower.js';

const WHAT = 'a complex tensor';
/** The real dtype of each complex dtype's parts. */
const PARTS: Readonly<Record<string, string>> = { complex64: 'float32', complex128: 'float64', complex32: 'float16' };

export const isComplexDtype = (dtype: string): boolean => PARTS[dtype] !== undefined;

interface Complex {
  /** [...S, 2]: real and imaginary parts. */
  readonly pairs: TensorVal;
  readonly dtype: string;
  /** The pairs' memory strides where known (a view of a strided tensor), for `_reshape_alias` after view_as_real. */
  readonly strides: readonly number[] | undefined;
  readonly origin: string;
}

const parts = new WeakMap<OpaqueVal, Complex>();

function complexVal(l: Lowerer, c: Complex): OpaqueVal {
  const v: OpaqueVal = {
    kind: 'opaque',
    what: WHAT,
    data: { shape: JSON.stringify(c.pairs.shape.slice(0, -1)), dtype: c.dtype, origin: c.origin, ...(c.strides === undefined ? {} : { pairStrides: JSON.stringify(c.strides) }) },
    tensors: { pairs: c.pairs },
    materialize: () =>
      l.fail(`the complex tensor made at ${c.origin} is read by an op without a complex rule: complex values are read only by view_as_real, conj, layout ops, products, sums and copies (docs/import.md, "Complex tensors"); a cast to a real dtype (which drops the imaginary part), a collective or an output of a complex value is not supported`),
  };
  parts.set(v, c);
  return v;
}

function complexOf(l: Lowerer, a: FxArg | undefined): Complex | undefined {
  if (a?.kind !== 'name') return undefined;
  const v = l.val(a, 'self');
  return v.kind === 'opaque' ? parts.get(v) : undefined;
}

/** S: the complex tensor's shape. */
const shapeOf = (c: Complex): readonly number[] => c.pairs.shape.slice(0, -1);

/** Binds the node to the complex value, checking the graph's annotation (dtype and shape S). */
function bindComplex(l: Lowerer, n: FxNode, c: Omit<Complex, 'origin'> & { origin?: string }, viewOf?: boolean): Val {
  const s = c.pairs.shape.slice(0, -1);
  if (n.type !== undefined) {
    if (!isComplexDtype(n.type.dtype)) l.fail(`${n.target}: the graph says ${n.name} is ${n.type.dtype}, the mapped op gives a complex tensor`);
    if (n.type.shape.length !== s.length || n.type.shape.some((d, i) => d !== s[i])) l.fail(`${n.target}: the graph says ${n.name} has shape [${n.type.shape.join(', ')}], the mapped op gives [${s.join(', ')}]`);
  }
  const origin = c.origin ?? `${l.g.file}:${n.line}`;
  return l.bind(n, complexVal(l, { ...c, origin }), viewOf === true ? (n.args[0] as { name?: string }).name : undefined);
}

const num = (value: number): FxArg => ({ kind: 'num', value, text: String(value) });
const ints = (xs: readonly number[]): FxArg => ({ kind: 'list', items: xs.map(num) });

/** A dim of S (negative counted from S's end) as a non-negative dim of the pairs. */
function dimOf(l: Lowerer, a: FxArg | undefined, rank: number, what: string, dflt?: number): number {
  let d = l.int(a, what, dflt);
  if (d < 0) d += rank;
  if (d < 0 || d >= rank) l.fail(`${what} ${d} out of range for a complex tensor of ${rank} dims`);
  return d;
}

/** Runs the real rule on the pairs (bound in place of the complex operand), with the arguments given. */
function onPairs(l: Lowerer, n: FxNode, rule: Rule, c: Complex, args: readonly FxArg[], kwargs: FxNode['kwargs'] = {}): TensorVal {
  const name = (n.args[0] as { name: string }).name;
  const r = l.withValue(name, c.pairs, () => rule(l, { ...n, name: `${n.name}.ri`, type: undefined, args: [n.args[0] as FxArg, ...args], kwargs }));
  return r.kind === 'tensor' ? r : l.fail(`${n.target} of a complex tensor: not a tensor`);
}

/** The real part, imaginary part ([...S, 1] each) of the pairs. */
function reIm(l: Lowerer, p: TensorVal): [TensorVal, TensorVal] {
  const k = p.shape.length - 1;
  return [l.one('slice', [p], { dim: k, start: 0, end: 1 }), l.one('slice', [p], { dim: k, start: 1, end: 2 })];
}

const pairsOf = (l: Lowerer, re: TensorVal, im: TensorVal, out?: string): TensorVal => l.one('concat', [re, im], { dim: re.shape.length - 1 }, out);

/** The strides a reshape of row-major pairs keeps (row-major), or unknown. */
function reshapedStrides(c: Complex, shape: readonly number[]): readonly number[] | undefined {
  return c.strides !== undefined && sameStrides(c.pairs.shape, c.strides, rowMajor(c.pairs.shape)) ? rowMajor(shape) : undefined;
}

/** Layout ops over S's dims: each rewrites its arguments for the pairs and keeps (or drops) the strides. */
const LAYOUT: Record<string, (l: Lowerer, n: FxNode, c: Complex) => { args: FxArg[]; kwargs?: FxNode['kwargs']; strides?: 'keep' }> = {
  'aten.slice': (l, n, c) => ({ args: [num(dimOf(l, n.args[1], shapeOf(c).length, 'dim', 0)), ...n.args.slice(2)], strides: 'keep' }),
  'aten.unsqueeze': (l, n, c) => ({ args: [num(dimOf(l, n.args[1], shapeOf(c).length + 1, 'dim'))] }),
  'aten.squeeze': (l, n, c) => {
    const rank = shapeOf(c).length;
    const dims = n.args[1] === undefined ? shapeOf(c).map((_, i) => i) : l.ints(n.args[1], 'dim').map((d) => (d < 0 ? d + rank : d));
    return { args: [ints(dims)] };
  },
  'aten.expand': (l, n) => ({ args: [ints([...l.ints(n.args[1], 'size'), 2])] }),
  'aten.transpose': (l, n, c) => ({ args: [num(dimOf(l, n.args[1], shapeOf(c).length, 'dim0')), num(dimOf(l, n.args[2], shapeOf(c).length, 'dim1'))] }),
  'aten.permute': (l, n, c) => {
    const rank = shapeOf(c).length;
    const dims = l.ints(n.args[1], 'dims').map((d) => (d < 0 ? d + rank : d));
    return { args: [ints([...dims, rank])] };
  },
  'aten.sum': (l, n, c) => {
    const rank = shapeOf(c).length;
    const d = n.args[1];
    const dims = d === undefined || d.kind === 'none' ? shapeOf(c).map((_, i) => i) : l.ints(d, 'dim').map((x) => (x < 0 ? x + rank : x));
    return { args: [ints(dims), l.arg(n, 2, 'keepdim') ?? { kind: 'bool', value: false }] };
  },
};

/** A layout op (or a sum) of a complex tensor: the real rule on the pairs, the pair dim carried. */
function layout(base: Rule, key: string): Rule {
  const how = LAYOUT[key] as (l: Lowerer, n: FxNode, c: Complex) => { args: FxArg[]; strides?: 'keep' };
  return (l, n) => {
    const c = complexOf(l, n.args[0]);
    if (c === undefined) return base(l, n);
    const { args, strides } = how(l, n, c);
    // (sum.default has no dim argument: the sum over every dim of S, as sum.dim_IntList)
    const node = key === 'aten.sum' ? { ...n, target: 'aten.sum.dim_IntList' } : n;
    const p = onPairs(l, node, base, c, args);
    return bindComplex(l, n, { pairs: p, dtype: c.dtype, strides: strides === 'keep' ? c.strides : undefined }, key !== 'aten.sum');
  };
}

/** view / reshape of a complex tensor: the pairs to [...S', 2] (a -1 resolved on S). */
function reshapeRule(base: Rule): Rule {
  return (l, n) => {
    const c = complexOf(l, n.args[0]);
    if (c === undefined) return base(l, n);
    const s = shapeOf(c);
    const total = s.reduce((a, b) => a * b, 1);
    const size = l.ints(n.args[1], 'size');
    const known = size.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
    const tgt = size.map((d) => (d === -1 ? total / known : d));
    if (size.filter((d) => d === -1).length > 1 || tgt.some((d) => !Number.isInteger(d) || d < 0) || tgt.reduce((a, b) => a * b, 1) !== total) l.fail(`cannot view complex [${s.join(', ')}] as [${size.join(', ')}]`);
    if (n.target.startsWith('aten._reshape_alias')) {
      // A view with explicit strides (complex elements): a reshape only where both are row-major.
      const stride = l.ints(n.args[2], 'stride');
      if (reshapedStrides(c, [...tgt, 2]) === undefined || !sameStrides(tgt, stride, rowMajor(tgt))) l.fail(`_reshape_alias of a complex tensor with strides [${stride.join(', ')}]: only a row-major reshape of row-major memory is supported`);
    }
    const shape = [...tgt, 2];
    const same = shape.every((d, i) => d === c.pairs.shape[i]) && shape.length === c.pairs.shape.length;
    const p = same ? c.pairs : l.one('reshape', [c.pairs], { shape }, `${l.out(n)}.ri`);
    return bindComplex(l, n, { pairs: p, dtype: c.dtype, strides: reshapedStrides(c, shape) }, true);
  };
}

/** Ops that keep every value (copies, views, resolving the conjugate or negative bit). */
function same(base: Rule | undefined, view: boolean): Rule {
  return (l, n) => {
    const c = complexOf(l, n.args[0]);
    if (c === undefined) {
      if (base !== undefined) return base(l, n);
      // resolve_conj / resolve_neg of a real tensor: itself.
      return l.bind(n, l.tensor(n.args[0], 'self'), (n.args[0] as { name?: string }).name);
    }
    const mf = n.kwargs['memory_format'];
    const fresh = n.target.startsWith('aten.clone') && mf !== undefined && JSON.stringify(mf).includes('contiguous_format');
    return bindComplex(l, n, { pairs: c.pairs, dtype: c.dtype, strides: fresh ? rowMajor(c.pairs.shape) : c.strides }, view);
  };
}

/** conj(z) = (re, -im): a value (the conjugate bit torch keeps is a representation of it). */
function conj(base: Rule | undefined): Rule {
  return (l, n) => {
    const c = complexOf(l, n.args[0]);
    if (c === undefined) {
      if (base !== undefined) return base(l, n);
      return l.bind(n, l.tensor(n.args[0], 'self'), (n.args[0] as { name?: string }).name);
    }
    const [re, im] = reIm(l, c.pairs);
    return bindComplex(l, n, { pairs: pairsOf(l, re, l.one('neg', [im]), `${l.out(n)}.ri`), dtype: c.dtype, strides: rowMajor(c.pairs.shape) });
  };
}

/** z * w, z * r, r * z, z * c (c a Python number): the product of complex numbers on the pairs. */
function mul(base: Rule): Rule {
  return (l, n) => {
    const a = complexOf(l, n.args[0]);
    const b = complexOf(l, n.args[1]);
    if (a === undefined && b === undefined) return base(l, n);
    const dtype = (a ?? b)?.dtype as string;
    let p: TensorVal;
    if (a !== undefined && b !== undefined) {
      const [ar, ai] = reIm(l, a.pairs);
      const [br, bi] = reIm(l, b.pairs);
      const re = l.one('sub', [l.one('mul', [ar, br]), l.one('mul', [ai, bi])]);
      const im = l.one('add', [l.one('mul', [ar, bi]), l.one('mul', [ai, br])]);
      p = pairsOf(l, re, im, `${l.out(n)}.ri`);
    } else {
      const c = (a ?? b) as Complex;
      const other = a === undefined ? n.args[0] : n.args[1];
      if (other?.kind === 'num') p = l.one('scale', [c.pairs], { factor: other.value }, `${l.out(n)}.ri`);
      else {
        // A real tensor r: both parts times r, r given a trailing dim of 1 to broadcast over the pair.
        const r = l.tensor(other, 'other');
        const r1 = l.one('reshape', [r], { shape: [...r.shape, 1] });
        p = l.one('mul', [c.pairs, r1], {}, `${l.out(n)}.ri`, c.pairs.dtype);
      }
    }
    return bindComplex(l, n, { pairs: p, dtype, strides: rowMajor(p.shape) });
  };
}

/** z ± w (alpha 1): the pairs added; a complex and a real operand is refused. */
function addSub(base: Rule, op: 'add' | 'sub'): Rule {
  return (l, n) => {
    const a = complexOf(l, n.args[0]);
    const b = complexOf(l, n.args[1]);
    if (a === undefined && b === undefined) return base(l, n);
    if (a === undefined || b === undefined) return l.fail(`${n.target} of a complex and a real operand is not supported (docs/import.md, "Complex tensors")`);
    const alpha = n.kwargs['alpha'];
    if (alpha !== undefined && l.num(alpha, 'alpha') !== 1) l.fail(`${n.target} of complex tensors with alpha: not supported`);
    const p = l.one(op, [a.pairs, b.pairs], {}, `${l.out(n)}.ri`);
    return bindComplex(l, n, { pairs: p, dtype: a.dtype, strides: rowMajor(p.shape) });
  };
}

/** A copy to a complex dtype keeps the values; to a real dtype it drops the imaginary part: refused. */
function toCopy(base: Rule): Rule {
  return (l, n) => {
    const c = complexOf(l, n.args[0]);
    if (c === undefined) {
      if (n.type !== undefined && isComplexDtype(n.type.dtype)) l.fail(`${n.target}: a cast of a real tensor to ${n.type.dtype} is not supported (make the pairs and use view_as_complex, or torch.complex(re, im))`);
      return base(l, n);
    }
    const to = n.type?.dtype ?? c.dtype;
    if (!isComplexDtype(to)) l.fail(`${n.target}: a cast of a complex tensor to ${to} drops its imaginary part; it is not supported (use view_as_real, or .real)`);
    const p = PARTS[to] === c.pairs.dtype ? c.pairs : l.one('identity', [c.pairs], {}, `${l.out(n)}.ri`, PARTS[to]);
    return bindComplex(l, n, { pairs: p, dtype: to, strides: c.strides });
  };
}

const COMPLEX_RULES: Record<string, Rule> = {
  'aten.view_as_complex': (l, n) => {
    const x = l.tensor(n.args[0], 'self');
    if (x.shape.at(-1) !== 2) l.fail(`view_as_complex of [${x.shape.join(', ')}]: the last dim must have size 2`);
    const dtype = n.type?.dtype ?? (x.dtype === 'float64' ? 'complex128' : 'complex64');
    return bindComplex(l, n, { pairs: x, dtype, strides: l.stridesAt(n.args[0]) }, true);
  },
  'aten.view_as_real': (l, n) => {
    const c = complexOf(l, n.args[0]) ?? l.fail('view_as_real of a tensor that is not complex');
    return l.bind(n, c.pairs, (n.args[0] as { name?: string }).name);
  },
  'aten.complex': (l, n) => {
    const re = l.tensor(n.args[0], 'real');
    const im = l.tensor(n.args[1], 'imag');
    if (re.shape.length !== im.shape.length || re.shape.some((d, i) => d !== im.shape[i])) l.fail(`torch.complex of [${re.shape.join(', ')}] and [${im.shape.join(', ')}]: only equal shapes are supported`);
    const col = (t: TensorVal): TensorVal => l.one('reshape', [t], { shape: [...t.shape, 1] });
    const p = pairsOf(l, col(re), col(im), `${l.out(n)}.ri`);
    return bindComplex(l, n, { pairs: p, dtype: n.type?.dtype ?? (re.dtype === 'float64' ? 'complex128' : 'complex64'), strides: rowMajor(p.shape) });
  },
  'aten.real': (l, n) => part(l, n, 0),
  'aten.imag': (l, n) => part(l, n, 1),
  'aten.polar': (l, n) =>
    l.fail(`${n.target}: torch.polar computes cos and sin of a traced value, which have no exact rule; compute the table outside the traced step (llama's precompute_freqs_cis at construction, a buffer), so that it is a constant of the program`),
};

function part(l: Lowerer, n: FxNode, k: 0 | 1): Val {
  const c = complexOf(l, n.args[0]) ?? l.fail(`${n.target} of a tensor that is not complex`);
  const s = shapeOf(c);
  const one = l.one('slice', [c.pairs], { dim: s.length, start: k, end: k + 1 });
  return l.bind(n, l.one('reshape', [one], { shape: [...s] }, l.out(n)));
}

/** The rules with complex tensors carried through the ops above (every other rule refuses them). */
export function withComplex(rules: Readonly<Record<string, Rule>>): Record<string, Rule> {
  const r: Record<string, Rule> = { ...rules, ...COMPLEX_RULES };
  const wrap = (key: string, f: (base: Rule) => Rule): void => {
    const base = r[key];
    if (base !== undefined) r[key] = f(base);
  };
  for (const key of Object.keys(LAYOUT)) wrap(key, (b) => layout(b, key));
  for (const key of ['aten.view', 'aten._unsafe_view', 'aten.reshape', 'aten._reshape_alias']) wrap(key, reshapeRule);
  for (const key of ['aten.clone', 'aten.lift_fresh_copy']) wrap(key, (b) => same(b, false));
  for (const key of ['aten.detach', 'aten.alias']) wrap(key, (b) => same(b, true));
  r['aten.resolve_conj'] = same(r['aten.resolve_conj'], false);
  r['aten.resolve_neg'] = same(r['aten.resolve_neg'], false);
  for (const key of ['aten.conj', 'aten._conj', 'aten.conj_physical']) r[key] = conj(r[key]);
  wrap('aten.mul', mul);
  wrap('aten.add', (b) => addSub(b, 'add'));
  wrap('aten.sub', (b) => addSub(b, 'sub'));
  wrap('aten._to_copy', toCopy);
  return r;
}
