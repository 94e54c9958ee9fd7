/**
 * Helpers for the ops' reduction constraints (OpDef.dims). Not an op family: this module must
 * not export `ops` (the registry discovers families by that export).
 */
import { type Attrs, type DimLabel, type DimRole, type DimSig, type Shape, attrInts, broadcastShapes, normDim, ShapeError } from './types.js';

export const batchDim = (label: string): DimLabel => ({ label, role: 'batch' });
export const contractedDim = (label: string): DimLabel => ({ label, role: 'contracted' });
export const fixedDim = (label: string): DimLabel => ({ label, role: 'fixed' });

/** Labels `${prefix}${d}` for every dim of `shape`, all of one role. */
export function dimLabels(shape: Shape, prefix: string, role: DimRole | ((d: number) => DimRole)): DimLabel[] {
  return shape.map((_, d) => ({ label: `${prefix}${d}`, role: typeof role === 'function' ? role(d) : role }));
}

/**
 * PyTorch broadcasting: output dim i is `o${i}` (role `role(i)`, 'batch' by default); an input
 * dim of the same size shares it, and a size-1 input dim broadcast against a larger one gets a
 * label of its own ('fixed': it stays 1), so it never unifies with the other operands' dim.
 */
export function broadcastLabels(inputs: readonly Shape[], role: (outDim: number) => DimRole = () => 'batch'): { inputs: DimLabel[][]; out: DimLabel[] } {
  const out = inputs.reduce<Shape>((acc, s) => broadcastShapes(acc, s), []);
  const outLabels = out.map((_, i) => ({ label: `o${i}`, role: role(i) }));
  const ins = inputs.map((s, t) =>
    s.map((v, d) => {
      const i = d + out.length - s.length;
      return v === out[i] ? (outLabels[i] as DimLabel) : fixedDim(`o${i}.bcast${t}`);
    }),
  );
  return { inputs: ins, out: outLabels };
}

/** Element-wise over broadcast inputs, one output. */
export function broadcastSig(inputs: readonly Shape[]): DimSig {
  const { inputs: ins, out } = broadcastLabels(inputs);
  return { inputs: ins, outputs: [out] };
}

/** nIn inputs and nOut outputs of one shape, SIMD along every dim (element-wise ops, optimizer steps). */
export function sameShapeSig(shape: Shape, nIn: number, nOut: number): DimSig {
  const l = dimLabels(shape, 'd', 'batch');
  return { inputs: Array.from({ length: nIn }, () => l), outputs: Array.from({ length: nOut }, () => l) };
}

/**
 * One input and one output of the same rank where only dim `d` changes size (slice, pad,
 * all_gather, reduce_scatter): the other dims are shared 'batch' labels, dim d is 'fixed' on
 * each side under its own label (its sizes differ, or are set by an attribute or the group).
 */
export function resizeOneDim(shape: Shape, dim: number, nIn = 1, nOut = 1): DimSig {
  const d = normDim(dim, shape.length);
  const side = (name: string, k: number): DimLabel[] => shape.map((_, i) => (i === d ? fixedDim(`d${i}.${name}${k}`) : batchDim(`d${i}`)));
  return {
    inputs: Array.from({ length: nIn }, (_, k) => side('in', k)),
    outputs: Array.from({ length: nOut }, (_, k) => side('out', k)),
  };
}

/** A `shape` attribute at reduced sizes: every spelled size divided by its output dim's lane factor (-1 stays -1). */
export function shapeAttrAtLanes(attrs: Attrs, outFactors: readonly (readonly number[])[]): Attrs {
  const f = outFactors[0] ?? [];
  const shape = (attrInts(attrs, 'shape') ?? []).map((t, d) => {
    const k = f[d] ?? 1;
    if (t === -1 || k === 1) return t;
    if (t % k !== 0) throw new ShapeError(`shape entry ${d} (${t}) is not a multiple of its lane factor ${k}`);
    return t / k;
  });
  return { ...attrs, shape };
}
