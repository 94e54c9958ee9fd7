/**
 * Usage errors as a user reads them: yargs' failures turned into one line that names what was
 * typed and, for a mistyped command or option, the nearest one ("did you mean"); and a number
 * option given something else (`--seed abc`: "got 'abc'", where yargs gives NaN).
 * yargs suggests commands itself (recommendCommands); it has no suggestion for options and does
 * not export its edit distance, so options are matched here against the command's own list.
 */

/** Edit distance with adjacent transpositions (optimal string alignment): "jsno" is 1 from "json". */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = d[i] as number[];
      const up = d[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min((up[j] as number) + 1, (row[j - 1] as number) + 1, (up[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) row[j] = Math.min(row[j] as number, ((d[i - 2] as number[])[j - 2] as number) + 1);
    }
  }
  return (d[a.length] as number[])[b.length] as number;
}

/** The candidate nearest to `typed` (case-insensitive), when it is near enough to be a typo. */
export function nearest(typed: string, candidates: readonly string[]): string | undefined {
  const t = typed.toLowerCase();
  // One edit for short names, up to three for long ones (yargs' threshold for commands).
  const limit = Math.min(3, Math.max(1, Math.floor(t.length / 3)));
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = editDistance(t, c.toLowerCase());
    if (d <= limit && d < bestD) [best, bestD] = [c, d];
  }
  return best;
}

/** `--name` or `-n` as typed on the command line. */
const dashed = (name: string): string => (name.length === 1 ? `-${name}` : `--${name}`);

/** The index of the last `--name`/`--name=...` (or an alias) in argv, and the text given as its value. */
function lastUse(argv: readonly string[], names: readonly string[]): { at: number; value: string | undefined } | undefined {
  for (let i = argv.length - 1; i >= 0; i--) {
    const a = argv[i] as string;
    for (const n of names.map(dashed)) {
      if (a === n) return { at: i, value: argv[i + 1] };
      if (a.startsWith(`${n}=`)) return { at: i, value: a.slice(n.length + 1) };
    }
  }
  return undefined;
}

/** The option spec fields the checks below read (a subset of yargs' Options). */
interface Spec {
  readonly type?: string;
  readonly alias?: string | readonly string[];
}

/**
 * A number option given no value (`--seed` last, or before another option: yargs then takes the
 * default without a word), or a value that is not a number (`--layers ten`, which yargs reads
 * as NaN). `ranged` is checked in between: the options with a range say it, with the text given.
 */
export function numberOptionError(argv: readonly string[], specs: Readonly<Record<string, Spec>>, parsed: Readonly<Record<string, unknown>>, ranged: (got: (flag: string, v: unknown) => string) => string | undefined): string | undefined {
  const uses = new Map<string, { at: number; value: string | undefined }>();
  for (const [name, spec] of Object.entries(specs)) {
    if (spec.type !== 'number') continue;
    const aliases = spec.alias === undefined ? [] : typeof spec.alias === 'string' ? [spec.alias] : [...spec.alias];
    const use = lastUse(argv, [name, ...aliases]);
    if (use === undefined) continue;
    uses.set(name, use);
    const v = use.value;
    if (!(argv[use.at] as string).includes('=') && (v === undefined || (v.startsWith('-') && Number.isNaN(Number(v))))) return `${dashed(name)} needs a number`;
  }
  const got = (flag: string, v: unknown): string => (typeof v === 'number' && Number.isNaN(v) ? `'${uses.get(flag)?.value ?? ''}'` : String(v));
  const r = ranged(got);
  if (r !== undefined) return r;
  for (const name of uses.keys()) {
    const p = parsed[name];
    if (typeof p === 'number' && Number.isNaN(p)) return `${dashed(name)} must be a number, got ${got(name, p)}`;
  }
  return undefined;
}

/**
 * One usage message from what yargs failed with (all of it, in order: an unknown command's
 * "Did you mean X?" comes before the strict mode's "Unknown arguments"), with the commands and
 * each command's option names (and aliases) to suggest from.
 */
export function usageMessage(messages: readonly string[], argv: readonly string[], commands: Readonly<Record<string, readonly string[]>>): string {
  // The command: the first word that names one, else the first word (a typo of one).
  const cmd = argv.find((a) => a in commands) ?? argv.find((a) => !a.startsWith('-'));
  if (cmd !== undefined && !(cmd in commands)) {
    const rec = /^Did you mean (\S+)\?$/.exec(messages.find((m) => m.startsWith('Did you mean')) ?? '')?.[1] ?? nearest(cmd, Object.keys(commands));
    return `Unknown command: ${cmd}${rec === undefined ? ` (commands: ${Object.keys(commands).join(', ')})` : ` (did you mean ${rec}?)`}`;
  }
  const known = cmd === undefined ? [] : (commands[cmd] ?? []);
  const out: string[] = [];
  for (const m of messages) {
    const u = /^Unknown arguments?: (.*)$/.exec(m);
    if (u === null) {
      if (!m.startsWith('Did you mean') && !out.includes(m)) out.push(m);
      continue;
    }
    const names = (u[1] ?? '').split(', ');
    // yargs lists a kebab name's camelCase form too (max-opz, maxOpz): once is enough.
    const typed = names.filter((n) => !names.some((o) => o !== n && o.includes('-') && o.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()) === n));
    for (const n of typed) {
      // `--no-x` is yargs' negation of `--x`: it names x.
      const no = lastUse(argv, [n]) === undefined && lastUse(argv, [`no-${n}`]) !== undefined ? 'no-' : '';
      if (no === '' && lastUse(argv, [n]) === undefined) {
        out.push(`Unexpected argument: ${n}`);
        continue;
      }
      const rec = nearest(n, known);
      out.push(`Unknown argument: ${dashed(no + n)}${rec === undefined ? '' : ` (did you mean ${dashed(no + rec)}?)`}`);
    }
  }
  return out.join('; ');
}
