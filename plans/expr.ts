/**
 * Integer expressions for SPMD templates: `{"expr": "tp*4 + 1"}` in a shape, index map,
 * attribute, group or peer. Variables are mesh axis names (this rank's coordinate on that
 * axis) and `rank`. Operators: + - * / (exact division) // (floor) % and min(a,b), max(a,b).
 * A small parser rather than a general math library: the language must stay integer-only
 * and side-effect free because plan files are untrusted.
 */

export interface CompiledExpr {
  readonly source: string;
  /** Variables used; empty means the value is a constant. */
  readonly vars: readonly string[];
  /** Evaluates with `env(name)` giving each variable's value. Throws ExprError. */
  eval(env: (name: string) => number): number;
  /**
   * The expression as `c + sum k_v * v`, when it is built from literals, variables, + - and
   * products with a constant, and no sub-expression can leave the safe integer range for
   * variables in their bounds (so evaluation can never throw). Undefined otherwise.
   */
  readonly affine?: Affine;
}

/** An affine integer function of named variables. */
interface Affine {
  readonly c: number;
  readonly k: ReadonlyMap<string, number>;
}

type Bound = readonly [number, number];

import type { IssueSink } from './errors.js';

export class ExprError extends Error {
  /** JSON path of the expression, when known. */
  path?: string;
}

type Node =
  | { k: 'num'; v: number }
  | { k: 'var'; name: string }
  | { k: 'neg'; a: Node }
  | { k: 'bin'; op: string; a: Node; b: Node }
  | { k: 'call'; fn: 'min' | 'max'; args: Node[] };

const MAX_EXPR_LEN = 1000;

export function compileExpr(source: string, allowedVars: ReadonlySet<string>, bounds?: (name: string) => Bound): CompiledExpr {
  if (source.length > MAX_EXPR_LEN) throw new ExprError(`expression longer than ${MAX_EXPR_LEN} characters`);
  const toks = tokenize(source);
  let i = 0;
  let depth = 0;
  const peek = (): string | undefined => toks[i];
  const next = (): string => {
    const t = toks[i++];
    if (t === undefined) throw new ExprError(`unexpected end of expression '${source}'`);
    return t;
  };
  const expect = (t: string): void => {
    const got = next();
    if (got !== t) throw new ExprError(`expected '${t}' but found '${got}' in '${source}'`);
  };
  const vars = new Set<string>();
  const parseExpr = (): Node => {
    if (++depth > 64) throw new ExprError(`expression nested too deeply: '${source}'`);
    let a = parseTerm();
    while (peek() === '+' || peek() === '-') {
      const op = next();
      a = { k: 'bin', op, a, b: parseTerm() };
    }
    depth--;
    return a;
  };
  const parseTerm = (): Node => {
    let a = parseUnary();
    while (peek() === '*' || peek() === '/' || peek() === '//' || peek() === '%') {
      const op = next();
      a = { k: 'bin', op, a, b: parseUnary() };
    }
    return a;
  };
  const parseUnary = (): Node => {
    if (peek() === '-') {
      next();
      return { k: 'neg', a: parseUnary() };
    }
    return parsePrimary();
  };
  const parsePrimary = (): Node => {
    const t = next();
    if (/^[0-9]+$/.test(t)) {
      const v = Number(t);
      if (!Number.isSafeInteger(v)) throw new ExprError(`integer literal too large in '${source}'`);
      return { k: 'num', v };
    }
    if (t === '(') {
      const e = parseExpr();
      expect(')');
      return e;
    }
    if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(t)) {
      if (peek() === '(') {
        if (t !== 'min' && t !== 'max') throw new ExprError(`unknown function '${t}' in '${source}'`);
        next();
        const args = [parseExpr()];
        while (peek() === ',') {
          next();
          args.push(parseExpr());
        }
        expect(')');
        return { k: 'call', fn: t, args };
      }
      if (!allowedVars.has(t)) {
        throw new ExprError(`unknown variable '${t}' in '${source}' (known: ${[...allowedVars].join(', ')})`);
      }
      vars.add(t);
      return { k: 'var', name: t };
    }
    throw new ExprError(`unexpected '${t}' in '${source}'`);
  };
  const root = parseExpr();
  if (i !== toks.length) throw new ExprError(`unexpected '${toks[i] ?? ''}' in '${source}'`);
  const affine = bounds === undefined ? undefined : affineOf(root, bounds);
  return {
    source,
    vars: [...vars],
    eval: (env) => evalNode(root, env, source),
    ...(affine === undefined ? {} : { affine: affine.f }),
  };
}

const safe = (b: Bound): boolean => Number.isSafeInteger(b[0]) && Number.isSafeInteger(b[1]);

/**
 * Affine form of a node with the interval of values it takes for variables in `bounds`. Every
 * sub-expression's interval must be safe: then evalNode's overflow checks can never fire.
 */
function affineOf(n: Node, bounds: (name: string) => Bound): { f: Affine; b: Bound } | undefined {
  switch (n.k) {
    case 'num':
      return { f: { c: n.v, k: new Map() }, b: [n.v, n.v] };
    case 'var':
      return { f: { c: 0, k: new Map([[n.name, 1]]) }, b: bounds(n.name) };
    case 'neg': {
      const a = affineOf(n.a, bounds);
      return a === undefined ? undefined : scale(a, -1);
    }
    case 'call':
      return undefined;
    case 'bin': {
      const a = affineOf(n.a, bounds);
      const b = affineOf(n.b, bounds);
      if (a === undefined || b === undefined) return undefined;
      if (n.op === '+' || n.op === '-') {
        const s = n.op === '+' ? 1 : -1;
        const k = new Map(a.f.k);
        for (const [v, x] of b.f.k) k.set(v, (k.get(v) ?? 0) + s * x);
        for (const [v, x] of [...k]) if (x === 0) k.delete(v);
        const bb: Bound = s === 1 ? [a.b[0] + b.b[0], a.b[1] + b.b[1]] : [a.b[0] - b.b[1], a.b[1] - b.b[0]];
        const r = { f: { c: a.f.c + s * b.f.c, k }, b: bb };
        return safe(bb) && Number.isSafeInteger(r.f.c) ? r : undefined;
      }
      if (n.op === '*') {
        if (a.f.k.size === 0) return scale(b, a.f.c);
        if (b.f.k.size === 0) return scale(a, b.f.c);
      }
      return undefined;
    }
  }
}

function scale(a: { f: Affine; b: Bound }, m: number): { f: Affine; b: Bound } | undefined {
  const k = new Map<string, number>();
  for (const [v, x] of a.f.k) if (x * m !== 0) k.set(v, x * m);
  const ends = [a.b[0] * m, a.b[1] * m];
  const b: Bound = [Math.min(...ends), Math.max(...ends)];
  if (!safe(b) || [...k.values()].some((x) => !Number.isSafeInteger(x)) || !Number.isSafeInteger(a.f.c * m)) return undefined;
  return { f: { c: a.f.c * m + 0, k }, b };
}

function tokenize(s: string): string[] {
  const out: string[] = [];
  const re = /\s*(\/\/|[0-9]+|[A-Za-z_][A-Za-z0-9_]*|[-+*/%(),])/y;
  let pos = 0;
  while (pos < s.length) {
    if (/^\s*$/.test(s.slice(pos))) break;
    re.lastIndex = pos;
    const m = re.exec(s);
    if (m === null || m[1] === undefined) throw new ExprError(`cannot read expression '${s}' at character ${pos + 1}`);
    out.push(m[1]);
    pos = re.lastIndex;
  }
  if (out.length === 0) throw new ExprError('empty expression');
  return out;
}

function checked(v: number, source: string): number {
  if (!Number.isSafeInteger(v)) throw new ExprError(`'${source}' overflows the safe integer range`);
  return v;
}

function evalNode(n: Node, env: (name: string) => number, src: string): number {
  switch (n.k) {
    case 'num':
      return n.v;
    case 'var':
      return env(n.name);
    case 'neg':
      return checked(-evalNode(n.a, env, src), src);
    case 'call': {
      const vs = n.args.map((a) => evalNode(a, env, src));
      return n.fn === 'min' ? Math.min(...vs) : Math.max(...vs);
    }
    case 'bin': {
      const a = evalNode(n.a, env, src);
      const b = evalNode(n.b, env, src);
      switch (n.op) {
        case '+':
          return checked(a + b, src);
        case '-':
          return checked(a - b, src);
        case '*':
          return checked(a * b, src);
        case '%':
          if (b === 0) throw new ExprError(`modulo by zero in '${src}'`);
          return ((a % b) + b) % b;
        case '//':
          if (b === 0) throw new ExprError(`division by zero in '${src}'`);
          return Math.floor(a / b);
        case '/':
          if (b === 0) throw new ExprError(`division by zero in '${src}'`);
          if (a % b !== 0) throw new ExprError(`'${src}': ${a} / ${b} is not exact (use // for floor division)`);
          return a / b;
      }
      throw new ExprError(`unknown operator '${n.op}'`);
    }
  }
}

const reportedExpr = new WeakMap<IssueSink, Set<string>>();

/** One issue per failing expression (the first failing rank), at the expression's path. */
export function exprIssue(sink: IssueSink, e: ExprError, fallback: string, rank: number): void {
  const path = e.path ?? fallback;
  let seen = reportedExpr.get(sink);
  if (seen === undefined) reportedExpr.set(sink, (seen = new Set()));
  if (seen.has(path)) return;
  seen.add(path);
  sink.add(path, `template does not expand${rank >= 0 ? ` for rank ${rank}` : ''}: ${e.message}`);
}
