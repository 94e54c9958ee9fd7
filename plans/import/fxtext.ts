/**
 * Reader of the text torch 2.x prints for an ATen-level GraphModule (`print_readable`,
 * AOTAutograd's fw/bw graphs, torch.export, make_fx), see docs/import.md:
 *
 *     def forward(self, primals_1: "f32[8, 16]", primals_2: "f32[16]"):
 *         # File: model.py:12 in forward, code: return self.fc(x)
 *         mm: "f32[4, 8]" = torch.ops.aten.mm.default(primals_1, t);  t = None
 *         native_dropout = torch.ops.aten.native_dropout.default(x, 0.1, True)
 *         getitem: "f32[4, 8]" = native_dropout[0]
 *         return (mm, getitem)
 *
 * Each statement is tokenized and parsed by a small recursive-descent grammar (below); no
 * regular expression ever runs over a whole file. Everything the reader does not know is an
 * ImportError naming the file and line, never a guess.
 */

/** A located error of the importer (the CLI prints it and exits 2). */
export class ImportError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    readonly reason: string,
  ) {
    super(line > 0 ? `${file}:${line}: ${reason}` : `${file}: ${reason}`);
    this.name = 'ImportError';
  }
}

/** An argument value as printed. */
export type FxArg =
  | { readonly kind: 'name'; readonly name: string }
  | { readonly kind: 'num'; readonly value: number; readonly text: string }
  | { readonly kind: 'str'; readonly value: string }
  | { readonly kind: 'bool'; readonly value: boolean }
  | { readonly kind: 'none' }
  | { readonly kind: 'list'; readonly items: readonly FxArg[] }
  /** A dotted constant such as `torch.float32` or `torch.contiguous_format`. */
  | { readonly kind: 'dotted'; readonly text: string }
  /** A call used as a value, such as `device(type='cpu')`. */
  | { readonly kind: 'call'; readonly callee: string; readonly args: readonly FxArg[]; readonly kwargs: Readonly<Record<string, FxArg>> };

/** A tensor type annotation: `"f32[4, 8]"`. */
export interface FxType {
  readonly dtype: string;
  readonly shape: readonly number[];
  /**
   * Per dim, the symbol of a data-dependent size (`u0` in `"f16[u0, 1536]"`, the row count of
   * a `nonzero`); the shape holds 0 there. Only node annotations may have them (dynsize.ts).
   */
  readonly dyn?: readonly (string | undefined)[];
  /** A `"Sym(...)"` annotation's expression (dtype `sym`, no shape): a symbolic size or a condition on one. */
  readonly sym?: string;
}

export interface FxNode {
  readonly name: string;
  readonly type?: FxType;
  /**
   * `aten.mm.default`, `_c10d_functional.all_reduce.default`, ... (the `torch.ops.` prefix
   * removed); `getitem` for `x = y[i]`; `getattr` for `x = self.attr`.
   */
  readonly target: string;
  readonly args: readonly FxArg[];
  readonly kwargs: Readonly<Record<string, FxArg>>;
  readonly line: number;
  /** The user's source location from the last `# File: ...` comment, if any. */
  readonly loc?: string;
}

export interface FxGraph {
  readonly file: string;
  readonly inputs: readonly { readonly name: string; readonly type?: FxType; readonly line: number }[];
  readonly nodes: readonly FxNode[];
  readonly outputs: readonly FxArg[];
  readonly returnLine: number;
}

/** Bounds for untrusted text. */
export const FX_LIMITS = { bytes: 64 * 1024 * 1024, lineChars: 1_000_000, nodes: 2_000_000, depth: 32 } as const;

type Tok = { t: 'name' | 'num' | 'str' | 'punct'; v: string; p: number };

const DTYPES: Record<string, string> = {
  f64: 'float64', f32: 'float32', f16: 'float16', bf16: 'bfloat16', i64: 'int64', i32: 'int32', i16: 'int16', i8: 'int8', u8: 'uint8', b8: 'bool',
  'f8e4m3fn': 'float8_e4m3', 'f8e5m2': 'float8_e5m2',
  // (complex values are read as pairs of reals: plans/import/aten-complex.ts)
  c32: 'complex32', c64: 'complex64', c128: 'complex128',
};

function isIdStart(c: string): boolean {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_';
}
function isDigit(c: string): boolean {
  return c >= '0' && c <= '9';
}

/** Python tokens of one logical line (names, numbers, quoted strings, punctuation). */
function tokenize(s: string, fail: (why: string) => never): Tok[] {
  const out: Tok[] = [];
  let i = 0;
  while (i < s.length) {
    const c = s[i] as string;
    if (c === ' ' || c === '\t' || c === '\r') {
      i++;
      continue;
    }
    if (c === '#') break;
    if (isIdStart(c)) {
      let j = i + 1;
      while (j < s.length && (isIdStart(s[j] as string) || isDigit(s[j] as string))) j++;
      out.push({ t: 'name', v: s.slice(i, j), p: i });
      i = j;
      continue;
    }
    if (isDigit(c) || (c === '.' && isDigit(s[i + 1] ?? ''))) {
      let j = i;
      while (j < s.length && (isDigit(s[j] as string) || s[j] === '.')) j++;
      if (s[j] === 'e' || s[j] === 'E') {
        j++;
        if (s[j] === '+' || s[j] === '-') j++;
        while (j < s.length && isDigit(s[j] as string)) j++;
      }
      out.push({ t: 'num', v: s.slice(i, j), p: i });
      i = j;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      let v = '';
      while (j < s.length && s[j] !== c) {
        if (s[j] === '\\' && j + 1 < s.length) j++;
        v += s[j];
        j++;
      }
      if (j >= s.length) fail('unterminated string');
      out.push({ t: 'str', v, p: i });
      i = j + 1;
      continue;
    }
    if ('()[]{},:=.;-+*<>'.includes(c)) {
      out.push({ t: 'punct', v: c, p: i });
      i++;
      continue;
    }
    fail(`unexpected character '${c}'`);
  }
  return out;
}

/** Recursive-descent parser over the tokens of one statement. */
class Cursor {
  i = 0;
  constructor(
    readonly toks: Tok[],
    readonly fail: (why: string) => never,
  ) {}
  peek(): Tok | undefined {
    return this.toks[this.i];
  }
  at(v: string): boolean {
    const t = this.peek();
    return t !== undefined && t.t === 'punct' && t.v === v;
  }
  eat(v: string): void {
    if (!this.at(v)) this.fail(`expected '${v}'${this.peek() === undefined ? ' before the end of the line' : `, found '${(this.peek() as Tok).v}'`}`);
    this.i++;
  }
  name(): string {
    const t = this.peek();
    if (t === undefined || t.t !== 'name') this.fail(`expected a name${t === undefined ? '' : `, found '${t.v}'`}`);
    this.i++;
    return t.v;
  }
  done(): boolean {
    return this.i >= this.toks.length;
  }
  /** NAME ('.' NAME)* */
  dotted(): string {
    let s = this.name();
    while (this.at('.')) {
      this.i++;
      s += '.' + this.name();
    }
    return s;
  }
  /** value := ['-'] NUMBER | STRING | list | tuple | dotted [call] */
  value(depth: number): FxArg {
    if (depth > FX_LIMITS.depth) this.fail('arguments nested too deeply');
    const t = this.peek();
    if (t === undefined) this.fail('expected a value before the end of the line');
    if (t.t === 'punct' && t.v === '-') {
      this.i++;
      const v = this.value(depth + 1);
      if (v.kind !== 'num') this.fail('expected a number after -');
      return { kind: 'num', value: -v.value, text: '-' + v.text };
    }
    if (t.t === 'num') {
      this.i++;
      const value = Number(t.v);
      if (!Number.isFinite(value)) this.fail(`bad number '${t.v}'`);
      return { kind: 'num', value, text: t.v };
    }
    if (t.t === 'str') {
      this.i++;
      return { kind: 'str', value: t.v };
    }
    if (t.t === 'punct' && (t.v === '[' || t.v === '(')) {
      const close = t.v === '[' ? ']' : ')';
      this.i++;
      const items: FxArg[] = [];
      while (!this.at(close)) {
        items.push(this.value(depth + 1));
        if (!this.at(close)) this.eat(',');
      }
      this.i++;
      return { kind: 'list', items };
    }
    if (t.t !== 'name') this.fail(`unexpected '${t.v}'`);
    const d = this.dotted();
    if (d === 'None') return { kind: 'none' };
    if (d === 'True' || d === 'False') return { kind: 'bool', value: d === 'True' };
    if (d === 'inf' || d === 'nan') return { kind: 'num', value: d === 'inf' ? Infinity : NaN, text: d };
    if (this.at('(')) {
      const { args, kwargs } = this.callArgs(depth + 1);
      return { kind: 'call', callee: d, args, kwargs };
    }
    return d.includes('.') ? { kind: 'dotted', text: d } : { kind: 'name', name: d };
  }
  /** '(' [arg (',' arg)*] ')' with arg := NAME '=' value | value */
  callArgs(depth: number): { args: FxArg[]; kwargs: Record<string, FxArg> } {
    this.eat('(');
    const args: FxArg[] = [];
    const kwargs: Record<string, FxArg> = Object.create(null) as Record<string, FxArg>;
    while (!this.at(')')) {
      const t = this.peek();
      const n = this.toks[this.i + 1];
      if (t?.t === 'name' && n?.t === 'punct' && n.v === '=') {
        this.i += 2;
        kwargs[t.v] = this.value(depth);
      } else {
        if (Object.keys(kwargs).length > 0) this.fail('positional argument after a keyword argument');
        args.push(this.value(depth));
      }
      if (!this.at(')')) this.eat(',');
    }
    this.i++;
    return { args, kwargs };
  }
}

/** What to do about a symbolic size: the proof is about concrete shapes. */
const SYMBOLIC = 'a symbolic size: the graph was traced with dynamic shapes or through a data-dependent op such as nonzero; export it with static shapes (torch.export without dynamic_shapes, torch.compile(dynamic=False)), or capture the run with `planproof capture`, which records the sizes MoE routing took (docs/import.md)';

/**
 * `"f32[4, 8]"` to a dtype and shape. With `dynamic` (a node's annotation), unbacked sizes
 * (`u0`, data-dependent: nonzero's row count) and `Sym(...)` are read for plans/import/dynsize.ts;
 * otherwise, and for any other symbol (`s0`, a dynamic-shape input), refused.
 */
function parseType(s: string, fail: (why: string) => never, dynamic = false): FxType {
  if (dynamic && /^Sym\(.*\)$/.test(s)) return { dtype: 'sym', shape: [], sym: s.slice(4, -1).trim() };
  const b = s.indexOf('[');
  if (b < 0 || !s.endsWith(']')) fail(`unsupported type annotation "${s}" (expected a tensor type such as "f32[4, 8]"${/^Sym\(/.test(s) ? `; ${SYMBOLIC}` : ''})`);
  const dtype = DTYPES[s.slice(0, b)];
  if (dtype === undefined) fail(`unsupported dtype '${s.slice(0, b)}' in "${s}"`);
  const inner = s.slice(b + 1, -1).trim();
  const shape: number[] = [];
  const dyn: (string | undefined)[] = [];
  if (inner !== '') {
    for (const part of inner.split(',')) {
      const p = part.trim();
      if (dynamic && /^u[0-9]{1,6}$/.test(p)) {
        dyn[shape.length] = p;
        shape.push(0);
        continue;
      }
      if (!/^[0-9]{1,10}$/.test(p)) fail(`unsupported size '${p}' in "${s}" (${SYMBOLIC})`);
      shape.push(Number(p));
    }
  }
  return dyn.length > 0 ? { dtype, shape, dyn: shape.map((_, i) => dyn[i]) } : { dtype, shape };
}

/** Strips `torch.ops.`; refuses callees that are not operator overloads. */
function target(callee: string, fail: (why: string) => never): string {
  if (callee.startsWith('torch.ops.')) return callee.slice('torch.ops.'.length);
  if (callee === 'operator.getitem') return 'getitem';
  fail(`unsupported call '${callee}' (expected an ATen operator, torch.ops.<namespace>.<op>.<overload>)`);
}

/** `NAME ':' STRING (';' NAME ':' STRING)* [';']`: type declarations only, no assignment. */
function isDeclarationLine(toks: readonly Tok[]): boolean {
  if (toks.length < 3) return false;
  for (let k = 0; k < toks.length; k += 4) {
    const [n, colon, str, semi] = [toks[k], toks[k + 1], toks[k + 2], toks[k + 3]];
    if (n?.t !== 'name' || colon?.t !== 'punct' || colon.v !== ':' || str?.t !== 'str') return false;
    if (semi !== undefined && (semi.t !== 'punct' || semi.v !== ';')) return false;
  }
  return true;
}

/** `NAME (>=|<=|>|<|==) [-]NUMBER` (the rest of the statement): a comparison of a symbolic size, as Sym nodes print it. */
function symCompare(c: Cursor): { op: string; name: string; value: FxArg } | undefined {
  const [n, a, b] = [c.toks[c.i], c.toks[c.i + 1], c.toks[c.i + 2]];
  if (n?.t !== 'name' || a?.t !== 'punct' || !'<>='.includes(a.v)) return undefined;
  const two = b?.t === 'punct' && b.v === '=';
  const op = { '>=': 'ge', '<=': 'le', '==': 'eq', '>': 'gt', '<': 'lt' }[a.v + (two ? '=' : '')];
  if (op === undefined) return undefined;
  c.i += two ? 3 : 2;
  return { op, name: n.v, value: c.value(0) };
}

/** Parses the printed graph. `file` names it in errors. */
export function parseFxGraph(file: string, text: string): FxGraph {
  if (text.length > FX_LIMITS.bytes) throw new ImportError(file, 0, `larger than ${FX_LIMITS.bytes / (1024 * 1024)} MiB`);
  const lines = text.split('\n');
  let at = 0;
  const failAt = (line: number) => (why: string): never => {
    throw new ImportError(file, line, why);
  };
  // The header: everything up to `def forward(` (imports, class lines, type stubs) is skipped.
  while (at < lines.length && !(lines[at] as string).trimStart().startsWith('def forward(')) at++;
  if (at >= lines.length) throw new ImportError(file, 0, "no 'def forward(' found: not a printed GraphModule");
  // The signature may wrap: join lines until its closing '):'.
  const sigLine = at + 1;
  let sig = (lines[at] as string).trim();
  while (!sig.endsWith(':') && at + 1 < lines.length && sig.length < FX_LIMITS.lineChars) sig += ' ' + (lines[++at] as string).trim();
  at++;
  const inputs: { name: string; type?: FxType; line: number }[] = [];
  {
    const fail: (why: string) => never = failAt(sigLine);
    const c = new Cursor(tokenize(sig, fail), fail);
    if (c.name() !== 'def' || c.name() !== 'forward') fail("expected 'def forward('");
    c.eat('(');
    let first = true;
    while (!c.at(')')) {
      const n = c.name();
      if (first && n === 'self') {
        first = false;
        if (!c.at(')')) c.eat(',');
        continue;
      }
      first = false;
      if (n === 'self') fail("'self' is not the first parameter");
      let type: FxType | undefined;
      if (c.at(':')) {
        c.i++;
        const t = c.peek();
        if (t?.t !== 'str') fail(`parameter '${n}': expected a quoted type annotation such as "f32[4, 8]"`);
        c.i++;
        type = parseType(t.v, fail);
      }
      if (c.at('=')) fail(`parameter '${n}': default values are not supported`);
      inputs.push(type === undefined ? { name: n, line: sigLine } : { name: n, type, line: sigLine });
      if (!c.at(')')) c.eat(',');
    }
    c.eat(')');
    c.eat(':');
    if (!c.done()) fail('unexpected text after the signature');
  }
  const nodes: FxNode[] = [];
  const declared = new Map<string, FxType>();
  let flattened = false;
  let loc: string | undefined;
  let outputs: FxArg[] | undefined;
  let returnLine = 0;
  for (; at < lines.length; at++) {
    const raw = lines[at] as string;
    const lineNo = at + 1;
    if (raw.length > FX_LIMITS.lineChars) throw new ImportError(file, lineNo, `line longer than ${FX_LIMITS.lineChars} characters`);
    const s = raw.trim();
    if (s === '') continue;
    if (s.startsWith('#')) {
      // `# File: /path/model.py:17 in forward, code: ...`: the user's source line for reports.
      const m = s.startsWith('# File: ') ? s.slice(8) : undefined;
      if (m !== undefined) loc = m.split(' in ')[0]?.slice(0, 1000);
      continue;
    }
    const fail: (why: string) => never = failAt(lineNo);
    if (outputs !== undefined) {
      // Text after the return: another method or class of the module (submodules of
      // higher-order ops) would be code this reader does not follow.
      if (/^(def|class) /.test(s)) fail('a graph with submodules or more than one method is not supported');
      fail('unexpected text after return');
    }
    const toks = tokenize(s, fail);
    // Statements end at the first top-level ';' (the `x = y = None` deletions that follow are
    // memory bookkeeping, not computation).
    let depth = 0;
    let end = toks.length;
    for (let k = 0; k < toks.length; k++) {
      const t = toks[k] as Tok;
      if (t.t !== 'punct') continue;
      if (t.v === '(' || t.v === '[' || t.v === '{') depth++;
      else if (t.v === ')' || t.v === ']' || t.v === '}') depth--;
      else if (t.v === ';' && depth === 0) {
        end = k;
        break;
      }
    }
    // A joint graph's declarations (`primals_1: "f32[4]"; primals_2: "i64[2]"`, AOTAutograd's
    // `def forward(self, primals, tangents)`): types of the names its flatten statement binds.
    if (isDeclarationLine(toks)) {
      for (let k = 0; k < toks.length; k += 4) declared.set((toks[k] as Tok).v, parseType((toks[k + 2] as Tok).v, fail));
      continue;
    }
    const c = new Cursor(toks.slice(0, end), fail);
    const head = c.name();
    if (head === 'return') {
      let v = c.done() ? ({ kind: 'list', items: [] } as FxArg) : c.value(0);
      if (!c.done()) fail('unexpected text after the returned value');
      // `return pytree.tree_unflatten([...], self._out_spec)`: the flat list is what is returned.
      if (v.kind === 'call' && v.callee === 'pytree.tree_unflatten' && v.args[0]?.kind === 'list') v = v.args[0];
      outputs = v.kind === 'list' ? [...v.items] : [v];
      returnLine = lineNo;
      continue;
    }
    if (c.at(',')) {
      // `a, b, = fx_pytree.tree_flatten_spec([primals, tangents], self._in_spec)`: the graph's
      // real inputs, flattened from the pytree parameters of the signature.
      const names = [head];
      while (c.at(',')) {
        c.i++;
        if (c.at('=')) break;
        names.push(c.name());
      }
      c.eat('=');
      const callee = c.dotted();
      if (callee !== 'fx_pytree.tree_flatten_spec') fail(`unsupported tuple assignment from '${callee}' (only fx_pytree.tree_flatten_spec of the signature's parameters)`);
      c.callArgs(0);
      if (!c.done()) fail('unexpected text after the call');
      if (flattened) fail('a second tree_flatten_spec statement');
      flattened = true;
      const params = new Set(inputs.map((x) => x.name));
      for (const x of inputs) if (x.type !== undefined) fail(`parameter '${x.name}' is typed: a graph with tree_flatten_spec takes pytree parameters`);
      inputs.length = 0;
      for (const n of names) {
        if (params.has(n)) fail(`'${n}' is both a parameter and a flattened input`);
        const type = declared.get(n);
        if (type === undefined) fail(`flattened input '${n}' has no type declaration (expected '${n}: "f32[...]"' before this line)`);
        inputs.push({ name: n, type, line: lineNo });
      }
      continue;
    }
    let type: FxType | undefined;
    if (c.at(':')) {
      c.i++;
      const t = c.peek();
      if (t?.t !== 'str') fail(`'${head}': expected a quoted type annotation`);
      c.i++;
      type = parseType(t.v, fail, true);
    }
    c.eat('=');
    let node: FxNode;
    const base = { name: head, line: lineNo, ...(type === undefined ? {} : { type }), ...(loc === undefined ? {} : { loc }) };
    const t0 = c.peek();
    const t1 = c.toks[c.i + 1];
    const cmp = type?.sym === undefined ? undefined : symCompare(c);
    if (cmp !== undefined) {
      // `ge: "Sym(u0 >= 0)" = sym_size_int >= 0`: a condition on a symbolic size (dynsize.ts).
      node = { ...base, target: `sym.${cmp.op}`, args: [{ kind: 'name', name: cmp.name }, cmp.value], kwargs: {} };
    } else if (t0?.t === 'name' && t1?.t === 'punct' && t1.v === '[') {
      // x = y[i]
      const src = c.name();
      c.eat('[');
      const idx = c.value(0);
      c.eat(']');
      if (idx.kind !== 'num' || !Number.isInteger(idx.value) || idx.value < 0) fail('expected a non-negative integer index');
      node = { ...base, target: 'getitem', args: [{ kind: 'name', name: src }, idx], kwargs: {} };
    } else {
      const callee = c.dotted();
      if (callee.startsWith('self.') && c.done()) {
        node = { ...base, target: 'getattr', args: [{ kind: 'str', value: callee.slice(5) }], kwargs: {} };
      } else {
        if (!c.at('(')) fail(`expected a call after '='`);
        const { args, kwargs } = c.callArgs(0);
        node = { ...base, target: target(callee, fail), args, kwargs };
      }
    }
    if (!c.done()) fail('unexpected text after the call');
    nodes.push(node);
    if (nodes.length > FX_LIMITS.nodes) fail(`more than ${FX_LIMITS.nodes} nodes`);
  }
  if (outputs === undefined) throw new ImportError(file, lines.length, "no 'return' statement: the graph is incomplete");
  return { file, inputs, nodes, outputs, returnLine };
}
