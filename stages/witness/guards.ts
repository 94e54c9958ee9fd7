/**
 * Witnesses of specialized plans: a "not equivalent" only at inputs where the program reads
 * into Python what the captured run read (docs/engine.md, "Witnesses of specialized plans").
 *
 * A captured program that reads a tensor's value into Python (`.item()`, `bool(t)`, `if t:`,
 * `.tolist()`) and branches on it, or bakes it into later ops, is traced for that value only:
 * the plan's graphs are the program on the inputs where every read gives what the run read (or
 * where every comparison Python made comes out the same), and something else elsewhere. A stage
 * witness draws inputs at random, so it may change a read (a rank whose batch held no auxiliary
 * label at capture holds one in the draw) and refute a correct program: the captured rank graph
 * skipped the auxiliary loss there, the program would not. So on a plan with reads, a "not
 * equivalent" stands only when a whole-plan run at some draw certainly keeps every guard (the
 * importer's record of each read, `x-planproof-guards`) on every program and certainly
 * separates a contract output (interval arithmetic: a witness in exact arithmetic); otherwise
 * the failing stages become "unknown", saying which read the draws changed.
 */
import type { LoadedPlan } from '../../lineage/load.js';
import type { PlanGuard, Program } from '../../plans/model.js';
import type { Dense } from '../../ops/algebra.js';
import { numel } from '../../ops/types.js';
import type { LogicalValues, RankValues } from '../../sdfg/execute.js';
import { certifiedReason, certifyWitness, type Iv } from '../engines/interval.js';
import type { StageReport, VerifyReport } from '../report.js';
import { alreadyPinned, guardPins, withPins, type GuardPins } from './pins.js';

const CONFIRMED = 'a whole-plan witness keeps every value the program read into Python';

/** Draws tried for a whole-plan witness, and the time they may take. */
const SEEDS = 16;
const BUDGET_MS = 20_000;

/** A read that is not a routing pin (a pin is justified by analyticity, stages' "Routing pinned"). */
const isRead = (note: string): boolean => / read into Python$/.test(note);

/** Why the guard does not certainly hold at these values, or undefined when it does. */
function guardFails(plan: LoadedPlan, g: PlanGuard, lv: LogicalValues<Iv>, pv: RankValues<Iv>): string | undefined {
  const what = `the value read into Python at ${g.where}`;
  if (g.values === null) return `${what} is not recorded (too many elements, or not written by the capture)`;
  const valueOf = (id: string): Dense<Iv> | undefined => {
    if (g.program < 0) {
      const t = plan.logical.tensors.id(id);
      return t < 0 ? undefined : lv[t];
    }
    if (g.program >= plan.mesh.size) return undefined;
    const prog = plan.programs[plan.rankProgram[g.program] as number] as Program;
    const t = prog.tensors.id(id);
    return t < 0 ? undefined : pv[g.program]?.[t];
  };
  const a = valueOf(g.tensor);
  if (a === undefined) return `${what}: its tensor '${g.tensor}' is not in the plan`;
  if (g.values !== undefined) {
    if (g.values.length !== a.data.length) return `${what}: ${g.values.length} values recorded for ${a.data.length} elements`;
    for (let i = 0; i < a.data.length; i++) {
      const x = a.data[i] as Iv;
      const v = g.values[i] as number;
      if (!(x.lo === v && x.hi === v)) return `${what} (${v}${a.data.length > 1 ? ` at element ${i}` : ''}) is ${x.lo === x.hi ? x.lo : `in [${x.lo}, ${x.hi}]`} at these inputs`;
    }
    return undefined;
  }
  const b = typeof g.other === 'string' ? valueOf(g.other) : undefined;
  if (typeof g.other === 'string' && b === undefined) return `${what}: its tensor '${g.other}' is not in the plan`;
  const x = a.data[0] as Iv;
  const y: Iv = typeof g.other === 'number' ? { lo: g.other, hi: g.other } : ((b as Dense<Iv>).data[0] as Iv);
  if (a.data.length !== 1 || (b !== undefined && b.data.length !== 1)) return `${what}: a comparison of more than one element`;
  const same = g.other === g.tensor;
  // Certainly true / certainly false of `x cmp y` (NaN never appears in exact runs; a NaN bound is undecided).
  const lt = x.hi < y.lo;
  const ge = x.lo >= y.hi;
  const gt = x.lo > y.hi;
  const le = x.hi <= y.lo;
  const eq = same || (x.lo === x.hi && y.lo === y.hi && x.lo === y.lo);
  const ne = !same && (lt || gt);
  const certain: Record<PlanGuard['cmp'], [boolean, boolean]> = { lt: [lt, ge], le: [le, gt], gt: [gt, le], ge: [ge, lt], eq: [eq, ne], ne: [ne, eq] };
  const [isTrue, isFalse] = certain[g.cmp];
  if (g.outcome === true ? isTrue : isFalse) return undefined;
  return `${what} (a comparison '${g.cmp}' that came out ${String(g.outcome)}) is not certainly the same at these inputs`;
}

/** Why some guard does not certainly hold at these values, or undefined when every one does. */
export function guardsFail(plan: LoadedPlan, lv: LogicalValues<Iv>, pv: RankValues<Iv>): string | undefined {
  for (const g of plan.guards ?? []) {
    const why = guardFails(plan, g, lv, pv);
    if (why !== undefined) return why;
  }
  return undefined;
}

/** Whether a "not equivalent" of this plan needs a whole-plan witness that keeps its reads. */
export function needsGuardedWitness(plan: LoadedPlan): boolean {
  return (plan.guards?.length ?? 0) > 0 || (plan.specialized ?? []).some(isRead);
}

export type GuardedWitness = { readonly seed: number; readonly reason: string } | { readonly none: string };

/**
 * Contract inputs a program reads into Python whole (an optimizer's step counter declared as
 * an input, read by torch 1.13's AdamW): drawn as the value read, since a random draw would
 * break that guard at every seed. A rank's tensor stands for the logical input of its name.
 * Inputs two guards want different values of are left to the draw (the guards then fail).
 */
function fixedInputs(plan: LoadedPlan): Map<number, readonly number[]> {
  const inputs = new Set(plan.contract.inputs);
  const fixed = new Map<number, readonly number[]>();
  const clash = new Set<number>();
  for (const g of plan.guards ?? []) {
    if (g.values === undefined || g.values === null) continue;
    const t = plan.logical.tensors.id(g.tensor);
    if (t < 0 || !inputs.has(t) || numel(plan.logical.shapes[t] ?? []) !== g.values.length) continue;
    const had = fixed.get(t);
    if (had !== undefined && had.some((v, i) => v !== g.values?.[i])) clash.add(t);
    fixed.set(t, g.values);
  }
  for (const t of clash) fixed.delete(t);
  return fixed;
}

/**
 * A whole-plan witness at a draw where every guard certainly holds: the first of seeds 1..16
 * (within 20 s) whose interval run keeps every read and separates a contract output.
 */
export function guardedWitness(plan: LoadedPlan): GuardedWitness {
  // Reads the graphs do not record (a plan written before guards, another tool's graph): no
  // draw can be shown to keep them.
  const unrecorded = (plan.guards?.length ?? 0) === 0 ? (plan.specialized ?? []).find(isRead) : undefined;
  if (unrecorded !== undefined) return { none: `${unrecorded}, and the plan records no guard for it (x-planproof-guards), so no input can be shown to keep it` };
  const outputs = [...plan.contract.outputs];
  const fixed = fixedInputs(plan);
  // First the run's own values of the inputs the reads depend on (every read gave what it gave
  // there; the other inputs drawn), then draws without them.
  const run = new Map(fixed);
  for (const [name, v] of Object.entries(plan.runInputs ?? {})) {
    const t = plan.logical.tensors.id(name);
    if (t >= 0 && !fixed.has(t) && numel(plan.logical.shapes[t] ?? []) === v.length) run.set(t, v);
  }
  const tries = [...(run.size > fixed.size ? Array.from({ length: SEEDS / 2 }, (_, i) => ({ seed: i + 1, fix: run })) : []), ...Array.from({ length: SEEDS }, (_, i) => ({ seed: i + 1, fix: fixed }))];
  const t0 = performance.now();
  let broke: string | undefined;
  let keptAll = 0;
  let tried = 0;
  for (const { seed, fix } of tries) {
    if (performance.now() - t0 >= BUDGET_MS) break;
    tried++;
    let why: string | undefined;
    let checked = false;
    const c = certifyWitness(plan, seed, outputs, () => true, undefined, (lv, pv) => ((checked = true), (why = guardsFail(plan, lv, pv))), fix);
    const at = fix === run ? `with the captured run's values of ${[...run.keys()].filter((t) => !fixed.has(t)).map((t) => plan.logical.tensors.name(t)).join(', ')} (the inputs the reads depend on), ` : '';
    if ('certified' in c && c.logical !== undefined) return { seed, reason: `${at}${certifiedReason(plan.logical.tensors.name(c.logical), c.certified)}` };
    if (checked && why === undefined) keptAll++;
    else broke ??= why ?? ('undecided' in c ? c.undecided : undefined);
  }
  const kept = keptAll > 0 ? `${keptAll} of ${tried} draws keep every read and separate no output` : '';
  return { none: [kept, broke === undefined ? '' : `${keptAll > 0 ? 'the others' : `each of ${tried} draws`}: ${broke}`].filter((x) => x !== '').join('; ') || 'no draw was tried' };
}

/** The report with its unconfirmed "not equivalent" turned "unknown", or undefined when it stands as it is. */
function unconfirmed<R extends VerifyReport>(plan: LoadedPlan, report: R): R | undefined {
  // (idempotent: a report already confirmed says so in its summary)
  if (report.verdict !== 'not_equivalent' || !needsGuardedWitness(plan) || report.summary.includes(CONFIRMED)) return undefined;
  const w = guardedWitness(plan);
  if ('seed' in w) return { ...report, summary: `${report.summary}; ${CONFIRMED}: ${w.reason}` };
  const why = `the stage's witness is at inputs that may change a value the program read into Python, where the captured graphs are not what the program runs, and no whole-plan draw both keeps every read and separates an output (${w.none})`;
  const stages: StageReport[] = report.stages.map((s) => {
    if (s.status !== 'not_equivalent') return s;
    // The stage's witness and diagnosis go: they are about inputs the claim is not about.
    const rest: { -readonly [K in keyof StageReport]?: StageReport[K] } = { ...s };
    delete rest.witness;
    delete rest.diagnosis;
    delete rest.diagnosisRule;
    delete rest.diagnosisRanks;
    return { ...(rest as StageReport), status: 'unknown', reason: `${why}; the stage alone: ${s.reason ?? ''}` };
  });
  const unknown = stages.filter((s) => s.status === 'unknown');
  const u = unknown[0] as StageReport;
  return { ...report, stages, verdict: 'unknown', summary: `${unknown.length} of ${stages.length} stage(s) undecided; first: stage ${u.index} (${u.logical}): ${u.reason ?? ''}` };
}

/**
 * The report with its "not equivalent" confirmed by a whole-plan witness that keeps every
 * read, or turned "unknown" (each failing stage, and the verdict) when none is found.
 */
export function confirmGuarded<R extends VerifyReport>(plan: LoadedPlan, report: R): R {
  return unconfirmed(plan, report) ?? report;
}

/** Verifies the plan again (with pins): its report, or undefined when not run. */
export type Reverify<R> = (plan: LoadedPlan, text: string | undefined) => Promise<R | undefined>;

/** The first report, confirmed, and the pinned plan to verify again when the reads imply pins. */
function pinnedStep<R extends VerifyReport>(plan: LoadedPlan, text: string | undefined, report: R): { first: R; again?: { plan: LoadedPlan; text: string | undefined; pins: GuardPins } } {
  const first = confirmGuarded(plan, report);
  if (first.verdict !== 'unknown' || (plan.guards?.length ?? 0) === 0) return { first };
  // (from the guards alone, not the plan's own pins: a pinned run finds the same pins and stops there)
  const pins = guardPins(plan, undefined, false);
  if (pins === undefined || alreadyPinned(plan, pins)) return { first };
  return { first, again: { ...withPins(plan, text, pins), pins } };
}

/** The second report where it decides (a proof, or a refutation it confirms), else the first. */
function pinnedResult<R extends VerifyReport>(plan: LoadedPlan, first: R, again: { plan: LoadedPlan; pins: GuardPins }, report: R | undefined): R {
  if (report === undefined) return first;
  const second = confirmGuarded(again.plan, report);
  const held = [...again.pins.pins].map(([x, m]) => [...m].map(([e, v]) => `${plan.logical.tensors.name(x)}[${e}] = ${v}`).join(', ')).join('; ');
  const reads = again.pins.reads;
  const about = `the inputs where the values read into Python come out as in the captured run, on which ${held} (implied by the reads at ${reads.slice(0, 3).join(', ')}${reads.length > 3 ? ', ...' : ''}; docs/engine.md, "Proofs under the reads")`;
  if (second.verdict === 'verified') return { ...second, summary: `${second.summary}; proved for ${about}` };
  if (second.verdict === 'not_equivalent') return { ...second, summary: `${second.summary}; drawn among ${about}` };
  return first;
}

/**
 * confirmGuarded, then, on a plan with reads whose report stays "unknown" (undecided, or a
 * refutation no whole-plan witness keeps), a second verification with the input elements the
 * reads imply held at their values (stages/witness/pins.ts): a proof there holds on every input
 * where the reads come out as in the run, so its "verified" stands, with the pins named; so
 * does a refutation confirmed by a witness that keeps the reads. Anything else keeps the first.
 */
export async function confirmGuardedPinned<R extends VerifyReport>(plan: LoadedPlan, text: string | undefined, report: R, reverify: Reverify<R>): Promise<R> {
  const { first, again } = pinnedStep(plan, text, report);
  if (again === undefined) return first;
  return pinnedResult(plan, first, again, await reverify(again.plan, again.text));
}

/** confirmGuardedPinned for the library's in-thread verifyPlan. */
export function confirmGuardedPinnedSync<R extends VerifyReport>(plan: LoadedPlan, report: R, reverify: (plan: LoadedPlan) => R): R {
  const { first, again } = pinnedStep(plan, undefined, report);
  if (again === undefined) return first;
  return pinnedResult(plan, first, again, reverify(again.plan));
}
