/**
 * The shell commands a Markdown document shows and the output it says they print
 * (test/docs.test.ts runs them): a ```sh block followed by a bare ``` block of its output, a bare
 * block of `$ command` lines each followed by its output, and a command line whose trailing
 * comment states its verdict (`# NOT EQUIVALENT at w2_new (...)`, `# VERIFIED, exit 0`).
 */

/** A ```sh block: run as one script; `shown` is the output block after it, if any. */
export interface ShellBlock {
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly script: string;
  readonly shown?: readonly string[];
}

/** A `$ command` of a transcript block, with the lines shown after it. */
export interface TranscriptCommand {
  readonly line: number;
  readonly command: string;
  readonly shown: readonly string[];
}

/** A command line with its claim in a trailing comment. */
export interface ClaimedCommand {
  readonly line: number;
  readonly command: string;
  readonly verdict: 'VERIFIED' | 'NOT EQUIVALENT';
  /** What the verdict line says after the verdict, before its colon: '' or ` (for the values the program read into Python)`. */
  readonly qualifier: string;
  /** The first failing stage's tensor ("at T"). */
  readonly at?: string;
  readonly exit?: number;
}

export interface DocCommands {
  readonly blocks: readonly ShellBlock[];
  readonly transcripts: readonly TranscriptCommand[];
  readonly claimed: readonly ClaimedCommand[];
}

const CLAIM = /^(.*?\S)\s+#\s*(VERIFIED|NOT EQUIVALENT)( \(for the values the program read into Python\))?(?: at (\S+))?(?:.*?exit (\d+))?/;

/** Every fenced block of `markdown`, classified; a ```sh block whose lines all carry claims is claimed commands. */
export function docCommands(markdown: string): DocCommands {
  const lines = markdown.split(/\r?\n/);
  const fences: { line: number; lang: string; body: string[] }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i] ?? '');
    if (open === null) continue;
    const body: string[] = [];
    let k = i + 1;
    while (k < lines.length && (lines[k] ?? '').trim() !== '```') body.push(lines[k++] ?? '');
    if (k >= lines.length) throw new Error(`line ${i + 1}: the fenced block is not closed`);
    fences.push({ line: i + 1, lang: open[1] ?? '', body });
    i = k;
  }
  const blocks: ShellBlock[] = [];
  const transcripts: TranscriptCommand[] = [];
  const claimed: ClaimedCommand[] = [];
  fences.forEach((f, n) => {
    if (f.lang === 'sh' || f.lang === 'bash') {
      const claims = f.body.map((l, k) => ({ m: CLAIM.exec(l), k }));
      if (claims.length > 0 && claims.every((c) => c.m !== null)) {
        for (const { m, k } of claims) {
          const c = m as RegExpExecArray;
          claimed.push({ line: f.line + 1 + k, command: c[1] as string, verdict: c[2] as ClaimedCommand['verdict'], qualifier: c[3] ?? '', ...(c[4] === undefined ? {} : { at: c[4] }), ...(c[5] === undefined ? {} : { exit: Number(c[5]) }) });
        }
        return;
      }
      // Its output: the next block, when it is a bare one right after (blank lines between).
      const next = fences[n + 1];
      const end = f.line + f.body.length + 1;
      const between = next === undefined ? [] : lines.slice(end, next.line - 1);
      const shown = next !== undefined && next.lang === '' && !(next.body[0] ?? '').startsWith('$ ') && between.every((l) => l.trim() === '') ? next.body : undefined;
      blocks.push({ line: f.line, script: f.body.join('\n'), ...(shown === undefined ? {} : { shown }) });
    } else if (f.lang === '' && (f.body[0] ?? '').startsWith('$ ')) {
      let cur: { line: number; command: string; shown: string[] } | undefined;
      f.body.forEach((l, k) => {
        if (l.startsWith('$ ')) {
          if (cur !== undefined) transcripts.push(cur);
          cur = { line: f.line + 1 + k, command: l.slice(2), shown: [] };
        } else cur?.shown.push(l);
      });
      if (cur !== undefined) transcripts.push(cur);
    }
  });
  return { blocks, transcripts, claimed };
}

/** Durations differ from run to run: `0.68 s`, `12 ms` read as one token. */
const timeless = (s: string): string => s.replace(/\b\d+(\.\d+)? (s|ms)\b/g, '<time> $2');

/**
 * The shown lines that the printed output does not hold, in order: each shown line (blank lines
 * and `...` lines aside) must be a printed line, later than the one before it; `...` inside a
 * line stands for any text, and durations may differ.
 */
export function unprinted(shown: readonly string[], printed: readonly string[]): string[] {
  const want = shown.map((l) => l.trimEnd()).filter((l) => l.trim() !== '' && l.trim() !== '...');
  const got = printed.map((l) => timeless(l.trimEnd()));
  const missing: string[] = [];
  let at = 0;
  for (const w of want) {
    const re = new RegExp(`^${timeless(w).split('...').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
    const k = got.findIndex((g, i) => i >= at && re.test(g));
    if (k < 0) missing.push(w);
    else at = k + 1;
  }
  return missing;
}
