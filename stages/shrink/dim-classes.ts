/**
 * Dim classes of a part's logical side: the dims of its logical tensors joined wherever an op
 * gives two of them one label (ops' `dims` declarations), by union-find over flat dim nodes.
 * The box (box.ts) and the periodic route (periodic.ts) both decide per class, so both start here.
 */
import { loadPartObject, type LoadedPlan } from '../../lineage/load.js';
import type { RawPlan } from '../../plans/raw.js';
import { registry } from '../../ops/registry.js';
import type { DimSig } from '../../ops/types.js';

export interface DimClasses {
  readonly part: LoadedPlan;
  /** base[t] + d: the node of dim d of logical tensor t. */
  readonly base: readonly number[];
  /** Number of dim nodes. */
  readonly n: number;
  /** The class (root node) of a dim node. */
  find(x: number): number;
  /** Each logical op's dim labels. */
  readonly sigs: ReadonlyMap<number, DimSig>;
}

type Label = DimSig['inputs'][number][number];

/**
 * The part loaded and its dim classes, or why not (it does not load; an op declares no dim
 * labels). `each` sees every labelled dim node with its label and the op's labels.
 */
export function dimClasses(pr: RawPlan, each?: (node: number, lab: Label, sig: DimSig) => void): DimClasses | string {
  let part: LoadedPlan;
  try {
    part = loadPartObject('part', JSON.parse(JSON.stringify(pr)));
  } catch {
    return 'the part does not load';
  }
  const lg = part.logical;
  const base: number[] = [];
  let n = 0;
  for (let t = 0; t < lg.tensors.size; t++) {
    base.push(n);
    n += (lg.shapes[t] ?? []).length;
  }
  const parent = Array.from({ length: n }, (_, i) => i);
  const find = (x: number): number => {
    while (parent[x] !== x) x = parent[x] = parent[parent[x] as number] as number;
    return x;
  };
  const sigs = new Map<number, DimSig>();
  for (const op of lg.order) {
    const def = registry.get(lg.ops.kind[op] as number);
    const ins = [...lg.ops.opInputs(op)];
    let sig: DimSig;
    try {
      sig = def.dims(ins.map((t) => lg.shapes[t] ?? ([] as number[])), lg.attrs[op] ?? {});
    } catch {
      return `'${lg.ops.ids.name(op)}' has no dim labels`;
    }
    sigs.set(op, sig);
    const byLabel = new Map<string, number>();
    const visit = (ts: readonly number[], labels: DimSig['inputs']): void => {
      ts.forEach((t, i) => {
        (labels[i] ?? []).forEach((lab, d) => {
          const node = (base[t] as number) + d;
          each?.(node, lab, sig);
          const first = byLabel.get(lab.label);
          if (first === undefined) byLabel.set(lab.label, node);
          else parent[find(node)] = find(first);
        });
      });
    };
    visit(ins, sig.inputs);
    visit([...lg.ops.opOutputs(op)], sig.outputs);
  }
  return { part, base, n, find, sigs };
}
