/** A summary of a loaded plan, for `planproof inspect` (human text or JSON). */
import { registry } from '../ops/registry.js';
import type { LoadedPlan } from '../lineage/load.js';

interface PlanSummary {
  file: string;
  name: string;
  description: string;
  mesh: { axes: { name: string; size: number }[]; ranks: number };
  programs: { name: string; ranks: number; template: boolean; ops: number; tensors: number }[];
  logical: { tensors: number; ops: number; opsByKind: Record<string, number> };
  parallel: { ops: number; opsByKind: Record<string, number> };
  collectives: { op: string; over: string; groupSize: number; instances: number }[];
  lineage: { logical: string; role: string; claims: number; holders: number; coverage: 'complete' | 'partial' | 'mixed'; partials: boolean }[];
  logicalWithoutLineage: string[];
  /** Tensor declarations with lineage in the program templates: given by the user, or marked inferred. */
  claims: { given: number; inferred: number };
  contract: { inputs: string[]; outputs: string[] };
  warnings: string[];
  /** Which path each check took (per template or per rank), and how long each phase took. */
  checks: { mode: 'template' | 'rank'; text: string[]; ms: Record<string, number> };
}

function checksOf(plan: LoadedPlan): PlanSummary['checks'] {
  const st = plan.stats;
  const c = st.collectives;
  const l = st.lineage;
  return {
    mode: st.checks,
    text: [
      `programs: ${st.boxPrograms} of ${plan.programs.length} run on a box of mesh coordinates`,
      `shapes: ${st.shapeChecks} tensor and op checks (each once per distinct coordinates it depends on)`,
      `collectives: ${c.symbolicSites} group call sites matched per template, ${c.perRankSites} rank by rank; send/recv ${c.p2p === 'symbolic' ? `per template (${c.p2pClasses} program-to-program classes)` : c.p2p}`,
      `lineage: ${l.symbolicTensors} tensors checked per template (${l.piecewiseTensors} of their boxes cut into pieces), ${l.enumeratedTensors} per distinct coordinates (${l.enumeratedClaims} claims)`,
    ],
    ms: st.ms,
  };
}

function countBy(map: Record<string, number>, key: string, n = 1): void {
  map[key] = (map[key] ?? 0) + n;
}

export function summarize(plan: LoadedPlan): PlanSummary {
  const lg = plan.logical;
  const lk: Record<string, number> = {};
  for (let op = 0; op < lg.ops.size; op++) countBy(lk, registry.get(lg.ops.kind[op] as number).name);
  const pk: Record<string, number> = {};
  let pops = 0;
  const assigned = plan.programs.map((p) => [...p.ranks].filter((r) => plan.rankProgram[r] === p.index).length);
  plan.programs.forEach((p, i) => {
    const n = assigned[i] as number;
    for (let op = 0; op < p.ops.size; op++) {
      const def = registry.get(p.ops.kind[op] as number);
      if (def.collective !== undefined) continue;
      countBy(pk, def.name, n);
      pops += n;
    }
  });
  const held = new Set(plan.coverage.map((c) => c.logical));
  const without: string[] = [];
  for (let t = 0; t < lg.tensors.size; t++) if (!held.has(t)) without.push(lg.tensors.name(t));
  return {
    file: plan.file,
    name: plan.name,
    description: plan.description,
    mesh: { axes: plan.mesh.axes.map((a, i) => ({ name: a, size: plan.mesh.sizes[i] as number })), ranks: plan.mesh.size },
    programs: plan.programs.map((p, i) => ({ name: p.name, ranks: assigned[i] as number, template: (assigned[i] as number) > 1, ops: p.ops.size, tensors: p.tensors.size })),
    logical: { tensors: lg.tensors.size, ops: lg.ops.size, opsByKind: lk },
    parallel: { ops: pops, opsByKind: pk },
    collectives: plan.collectiveKinds.map((c) => ({ ...c })),
    checks: checksOf(plan),
    lineage: plan.coverage.map((c) => ({
      logical: lg.tensors.name(c.logical),
      role: lg.roles[c.logical] as string,
      claims: c.claims,
      holders: c.holders,
      coverage: c.complete ? 'complete' : c.partialOnly && !c.complete ? 'partial' : 'mixed',
      partials: c.hasPartials,
    })),
    logicalWithoutLineage: without,
    claims: {
      given: plan.programs.reduce((n, p) => n + p.lineage.filter((l, t) => l !== undefined && p.inferred?.has(t) !== true).length, 0),
      inferred: plan.programs.reduce((n, p) => n + (p.inferred?.size ?? 0), 0),
    },
    contract: { inputs: [...plan.contract.inputs].map((t) => lg.tensors.name(t)), outputs: [...plan.contract.outputs].map((t) => lg.tensors.name(t)) },
    warnings: plan.warnings.map((w) => `${w.path} ${w.where ?? ''}: ${w.message}`),
  };
}

/** A list of names, shortened past 20 (plans of thousands of tensors). */
function names(xs: readonly string[]): string {
  return xs.length <= 20 ? xs.join(', ') : `${xs.slice(0, 20).join(', ')}, ... (${xs.length} in all)`;
}

function kinds(m: Record<string, number>): string {
  return Object.entries(m)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
}

export function formatSummary(s: PlanSummary): string {
  const out: string[] = [];
  out.push(`plan        ${s.name === '' ? '(unnamed)' : s.name}  (${s.file})`);
  if (s.description !== '') out.push(`            ${s.description}`);
  out.push(`mesh        ${s.mesh.axes.map((a) => `${a.name}=${a.size}`).join(' x ')}  (${s.mesh.ranks} ranks)`);
  out.push(`programs    ${s.programs.length}: ${s.programs.map((p) => `${p.name} (${p.template ? `template for ${p.ranks} ranks` : '1 rank'}, ${p.ops} ops)`).join('; ')}`);
  out.push(`logical     ${s.logical.tensors} tensors, ${s.logical.ops} ops: ${kinds(s.logical.opsByKind)}`);
  out.push(`parallel    ${s.parallel.ops} local ops over all ranks: ${kinds(s.parallel.opsByKind)}`);
  out.push(`collectives ${s.collectives.length === 0 ? 'none' : s.collectives.map((c) => `${c.op} over ${c.over} (${c.groupSize} ranks) x${c.instances}`).join('; ')}`);
  const by = (c: string): number => s.lineage.filter((l) => l.coverage === c).length;
  out.push(`lineage     ${s.lineage.length} of ${s.lineage.length + s.logicalWithoutLineage.length} logical tensors held by ranks (all tile their logical tensor): ${by('complete')} complete on some rank, ${by('partial')} partial addends only, ${by('mixed')} mixed`);
  const w = Math.max(8, ...s.lineage.map((l) => l.logical.length));
  out.push(`            ${'tensor'.padEnd(w)}  ${'role'.padEnd(15)} claims holders  coverage`);
  for (const l of s.lineage) {
    out.push(`            ${l.logical.padEnd(w)}  ${l.role.padEnd(15)} ${String(l.claims).padStart(6)} ${String(l.holders).padStart(7)}  ${l.coverage === 'complete' ? 'complete value on some rank' : l.coverage === 'partial' ? 'partial addends only' : 'complete in part, partial elsewhere'}${l.partials && l.coverage === 'complete' ? ' (and partial addends)' : ''}`);
  }
  if (s.logicalWithoutLineage.length > 0) out.push(`            no lineage: ${s.logicalWithoutLineage.join(', ')}`);
  out.push(`claims      ${s.claims.given} given, ${s.claims.inferred} inferred (hints: proved before they are relied on)`);
  out.push(`contract    inputs ${names(s.contract.inputs)}; outputs ${names(s.contract.outputs)} (each complete on some rank)`);
  out.push(`warnings    ${s.warnings.length === 0 ? 'none' : s.warnings.join('\n            ')}`);
  out.push(`checks      ${s.checks.mode === 'template' ? 'per template where symbolic, per rank elsewhere' : 'per rank'}`);
  for (const t of s.checks.text) out.push(`            ${t}`);
  out.push(`            load ms: ${Object.entries(s.checks.ms).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  return out.join('\n');
}
