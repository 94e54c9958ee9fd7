/**
 * A canonical, printable dump of a loaded plan's normal form (PyTorch-FX style: an IR you can
 * read). Two spellings of one plan (DTensor vs index maps, template vs explicit per-rank,
 * multi-rank vs per-rank collectives) produce identical dumps. Expands every rank: meant for
 * tests and small plans, not for 8192-rank plans.
 */
import { registry } from '../ops/registry.js';
import type { LoadedPlan } from './load.js';
import { canonicalJson } from '../plans/collectives.js';
import { regionStr, valueStr } from './model.js';
import { evalLineage } from './model.js';
import type { Program } from '../plans/model.js';

interface NormalForm {
  mesh: string;
  rankOrder: number[];
  logical: string[];
  ranks: string[][];
  collectives: string[];
  contract: string;
}

export function normalForm(plan: LoadedPlan): NormalForm {
  const lg = plan.logical;
  const logical: string[] = [];
  for (let t = 0; t < lg.tensors.size; t++) logical.push(`tensor ${lg.tensors.name(t)} [${(lg.shapes[t] ?? []).join(',')}] ${lg.roles[t]}`);
  for (let op = 0; op < lg.ops.size; op++) {
    logical.push(
      `${[...lg.ops.opOutputs(op)].map((t) => lg.tensors.name(t)).join(', ')} = ${registry.get(lg.ops.kind[op] as number).name}(${[...lg.ops.opInputs(op)].map((t) => lg.tensors.name(t)).join(', ')}) ${canonicalJson(lg.attrs[op])}`,
    );
  }
  const ranks: string[][] = [];
  for (let r = 0; r < plan.mesh.size; r++) {
    const v = plan.view(r);
    const p: Program = v.program;
    const lines: string[] = [];
    for (let t = 0; t < p.tensors.size; t++) {
      const spec = p.lineage[t];
      let lin = '';
      if (spec !== undefined) {
        const nf = evalLineage(spec, plan.mesh, r, lg.shapes[spec.logical] ?? [], v.shapes[t] ?? []);
        lin = ` <- ${lg.tensors.name(nf.logical)}${regionStr(nf.ranges)} ${valueStr(nf.value)}`;
      }
      lines.push(`tensor ${p.tensors.name(t)} [${(v.shapes[t] ?? []).join(',')}]${lin}`);
    }
    for (let op = 0; op < p.ops.size; op++) {
      const kind = p.ops.kind[op] as number;
      if (registry.get(kind).collective !== undefined) continue;
      const mb = p.microbatch[op] as number;
      lines.push(
        `${[...p.ops.opOutputs(op)].map((t) => p.tensors.name(t)).join(', ')} = ${registry.get(kind).name}(${[...p.ops.opInputs(op)].map((t) => p.tensors.name(t)).join(', ')}) ${canonicalJson(v.attrs[op])}${mb >= 0 ? ` mb=${mb}` : ''}`,
      );
    }
    ranks.push(lines);
  }
  const collectives = plan.collectives
    .map((c) => {
      const members = [...c.group].map((r, i) => {
        const p = plan.programs[plan.rankProgram[r] as number] as Program;
        const nm = (t: number): string => (t >= 0 ? p.tensors.name(t) : '-');
        return `${r}:${nm(c.inputs[i] as number)}->${nm(c.outputs[i] as number)}`;
      });
      return `${registry.get(c.kind).name} ${canonicalJson(c.attrs)} [${members.join(' ')}]${c.microbatch >= 0 ? ` mb=${c.microbatch}` : ''}`;
    })
    .sort();
  const contract = `inputs ${[...plan.contract.inputs].map((t) => lg.tensors.name(t)).join(',')}; outputs ${[...plan.contract.outputs].map((t) => lg.tensors.name(t)).join(',')}`;
  return { mesh: plan.mesh.describe(), rankOrder: [...plan.mesh.rankAt], logical, ranks, collectives, contract };
}
