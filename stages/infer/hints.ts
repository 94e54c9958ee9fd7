/**
 * Inferred claims as hints (stages/infer/boundary.ts): the hints a plan file carries (claims
 * marked `"inferred": true`), a plan with hints written in and loaded, which claims load at all,
 * and stages split where a hint did not prove.
 */
import { type LoadedPlan, loadPlanObject } from '../../lineage/load.js';
import { PlanError } from '../../plans/errors.js';
import type { Program } from '../../plans/model.js';
import type { Stage } from '../decompose/prove.js';
import { withClaims, type InferredClaim } from './infer.js';

export type Json = Record<string, unknown>;

export interface Hint {
  readonly program: number;
  readonly tensor: string;
  lineage: Json;
  readonly alternatives: Json[];
}

/** A hint from an inferred claim (its alternatives copied: the rounds consume them). */
export const hintOf = (c: InferredClaim): Hint => ({ program: c.program, tensor: c.tensor, lineage: c.lineage, alternatives: [...c.alternatives] });

/** The hints of a plan object: its claims marked inferred (with no alternatives). */
export function fileHints(plan: Json): Hint[] {
  const out: Hint[] = [];
  const progs = (plan['parallel'] as { programs?: { tensors?: Json[] }[] } | undefined)?.programs ?? [];
  progs.forEach((p, pi) => {
    for (const t of p.tensors ?? []) {
      const l = t['lineage'] as Json | undefined;
      if (l?.['inferred'] === true) out.push({ program: pi, tensor: String(t['id']), lineage: l, alternatives: [] });
    }
  });
  return out;
}

export function withHints(plan: Json, hints: readonly Hint[]): Json {
  const out = structuredClone(plan);
  const progs = (out['parallel'] as { programs: { tensors: Json[] }[] }).programs;
  // Inferred marks from the file are replaced by the current hint set.
  for (const p of progs) for (const t of p.tensors) if ((t['lineage'] as Json | undefined)?.['inferred'] === true) delete t['lineage'];
  const claims: InferredClaim[] = hints.map((h) => ({ program: h.program, tensor: h.tensor, logical: String(h.lineage['logical']), kind: 'slice', lineage: h.lineage, alternatives: [] }));
  return withClaims(out, claims);
}

/** Which hints, with which relations: equal keys load the same plan. */
export const hintsKey = (hints: readonly Hint[]): string => hints.map((h) => `${h.program}|${h.tensor}|${JSON.stringify(h.lineage)}`).join('\n');

export const isHint = (plan: LoadedPlan) => (r: number, t: number): boolean => (plan.programs[plan.rankProgram[r] as number] as Program).inferred?.has(t) === true;

/**
 * The hints of one logical tensor form one stage, apart from the user's claims of it; after
 * that stage fails, one stage per hinted tensor (its replicas on every rank; addends of one
 * decomposition together), so that a hint that fails names itself and the others keep their
 * cut; after such a stage goes past its work budget (`splitRanks`), one per rank.
 * Each stage proves its obligations from the same assumed boundaries, so splitting a stage
 * changes nothing in the argument.
 */
export function splitHints(stages: readonly Stage[], hinted: (r: number, t: number) => boolean, split: ReadonlySet<number>, splitRanks: ReadonlySet<number> = new Set()): Stage[] {
  const out: Stage[] = [];
  for (const s of stages) {
    const user = s.obligations.filter((o) => !hinted(o.rank, o.tensor));
    const byGroup = new Map<string, Stage['obligations']>();
    for (const o of s.obligations) {
      if (!hinted(o.rank, o.tensor)) continue;
      // (Addends of one decomposition stay together across ranks: their sum is the obligation.)
      const k = `${split.has(s.logical) ? groupOf(o) : ''}${splitRanks.has(s.logical) && o.nf.value.n === 1 ? `|r${o.rank}` : ''}`;
      const l = byGroup.get(k);
      if (l === undefined) byGroup.set(k, [o]);
      else l.push(o);
    }
    for (const obl of byGroup.values()) out.push({ index: out.length, logical: s.logical, obligations: obl });
    if (user.length > 0) out.push({ index: out.length, logical: s.logical, obligations: user });
  }
  return out;
}

/** Addends of one decomposition are proved together (their sum is the obligation); a complete tensor alone. */
export function groupOf(o: Stage['obligations'][number]): string {
  const v = o.nf.value;
  return v.n === 1 ? `t${o.tensor}` : `${v.n}|${v.reduce}|${v.divisor}|${v.split}`;
}

/**
 * The inferred claims that load together with the plan's own lineage: those the loader
 * rejects (a partial group or a tiling left incomplete by a candidate that did not fit every
 * rank) are removed, with the claims that cannot load without them. `infer-lineage` writes
 * only these, so that the file it writes is a plan every command loads.
 */
export function loadableClaims(file: string, raw: Json, claims: readonly InferredClaim[]): InferredClaim[] {
  const hints = claims.map(hintOf);
  for (;;) {
    if (loadHinted(file, withHints(raw, hints), hints) !== undefined) break;
  }
  const kept = new Set(hints.map((h) => `${h.program}|${h.tensor}`));
  return claims.filter((c) => kept.has(`${c.program}|${c.tensor}`));
}

/**
 * Loads the plan with its hints. The loader checks that the claims of a logical tensor tile
 * it: hints that break a check (one micro-batch's copy inferred, the other's not) are
 * dropped, one at a time, and undefined is returned so that the caller counts and retries.
 * An issue that is not about a hint is the plan's own and is thrown.
 */
export function loadHinted(file: string, obj: Json, hints: Hint[]): LoadedPlan | undefined {
  try {
    return loadPlanObject(file, obj);
  } catch (e) {
    if (!(e instanceof PlanError)) throw e;
    const progs = (obj['parallel'] as { programs: { tensors: Json[] }[] }).programs;
    // Every hint an issue names is dropped at once (one reload per hint took 200 rounds on a
    // plan whose one rank runs its own program), and with it every hint of the same logical
    // tensor that the issue is about: the loader names one claim per broken tiling or partial
    // group, and the others of that tiling cannot load without it either (one reload each
    // cost 11 reloads, 0.8 s, on gpt2 cp2). Dropping a hint is always sound.
    let dropped = 0;
    const drop = (i: number, why: string): void => {
      if (process.env['PLANPROOF_TRACE'] === '1') process.stderr.write(`  loader drops hint ${(hints[i] as Hint).tensor}: ${why.slice(0, 200)}\n`);
      hints.splice(i, 1);
      dropped++;
    };
    const partialOf = (l: Json | undefined): boolean => {
      const v = l?.['value'] as Json | undefined;
      return v !== undefined && Number(v['of'] ?? 1) > 1;
    };
    for (const issue of e.issues) {
      const m = /^\$\.parallel\.programs\[(\d+)\]\.tensors\[(\d+)\]\.lineage/.exec(issue.path);
      if (m === null) continue;
      const t = progs[Number(m[1])]?.tensors[Number(m[2])];
      const id = t?.['id'];
      const i = hints.findIndex((h) => h.program === Number(m[1]) && h.tensor === id);
      if (i >= 0) drop(i, issue.message);
      // The issue's logical tensor: a broken partial group takes its partial hints with it, a
      // broken tiling every hint of the tensor (a user claim named by the issue included).
      const l = t?.['lineage'] as Json | undefined;
      const logical = l?.['logical'];
      if (typeof logical !== 'string') continue;
      const group = /partial group is incomplete/.test(issue.message);
      for (let k = hints.length - 1; k >= 0; k--) {
        const h = hints[k] as Hint;
        if (h.lineage['logical'] === logical && (!group || partialOf(h.lineage))) drop(k, `with ${String(id)}: same ${group ? 'partial group' : 'tiling'} of ${logical}`);
      }
    }    if (dropped > 0) return undefined;
    throw e;
  }
}
