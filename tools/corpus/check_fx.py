#!/usr/bin/env python3
"""Checks the printed FX graphs of a corpus directory (or several).

    python3 tools/corpus/check_fx.py test/fixtures/megatron-fx/*/

For each config directory (logical*.py, rank*.py, relations.json) it
  1. parses every statement independently of the generator: names are unique,
     defined before use, never read after their `;  x = None` deletion, and the
     deletions are exactly the ones torch.fx's codegen writes (last uses);
  2. runs every program on numbers (numpy, float64) with ATen's semantics for
     each op it meets, checking that every annotation is the dtype and shape
     the op computes and that every `view` is a legal view of its input's
     strides; the ranks run in lockstep and their functional collectives are
     carried out across ranks (the tp 1 graph's one-rank group is the identity);
  3. gives the ranks the inputs the relations describe (the logical tensor cut
     by its placement), the dropout masks of the logical run cut by shape, and
     compares each output the relations name with the logical value.
Prints one line per config: 'equivalent', or the outputs that differ.

    python3 tools/corpus/check_fx.py --gradcheck DIR...

checks the single-device backward against central differences instead.
Needs numpy.
"""

import glob
import json
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fxir import compute_view_strides  # noqa: E402

DT = {"f32": np.float64, "i64": np.int64, "b8": np.bool_, "i32": np.int32}
NP2DT = {np.dtype(np.float64): "f32", np.dtype(np.int64): "i64", np.dtype(np.bool_): "b8", np.dtype(np.int32): "i32"}
ANN = re.compile(r'^"(\w+)\[([\d, ]*)\]"$')


class Sym:
    def __init__(self, s):
        self.s = s

    def __repr__(self):
        return self.s


class TorchNS:
    float32 = Sym("f32")
    int64 = Sym("i64")
    bool = Sym("b8")
    int32 = Sym("i32")
    strided = Sym("strided")
    contiguous_format = Sym("contiguous_format")


def device(type=None, index=None):
    return ("device", type, index)


# ---------------------------------------------------------------- parsing

class Stmt:
    def __init__(self, lineno, name, ann, rhs, dels):
        self.lineno, self.name, self.ann, self.rhs, self.dels = lineno, name, ann, rhs, dels


class GraphText:
    def __init__(self, path):
        self.path = path
        self.placeholders = []   # (name, ann)
        self.stmts = []
        self.ret = None
        self.joint = False
        lines = open(path).read().split("\n")
        i = 0
        while not lines[i].strip().startswith("def forward("):
            i += 1
        sig = lines[i].strip()
        if sig == "def forward(self, primals, tangents):":
            self.joint = True
            i += 1
            decl = lines[i].strip()
            for part in decl.split(";"):
                part = part.strip()
                if part:
                    n, a = part.split(":", 1)
                    self.placeholders.append((n.strip(), a.strip()))
            i += 1
            while not lines[i].strip():
                i += 1
            flat = lines[i].strip()
            names = [x.strip() for x in flat.split("=")[0].split(",") if x.strip()]
            assert names == [p[0] for p in self.placeholders], "tree_flatten_spec names differ from the declarations"
            assert flat.endswith("= fx_pytree.tree_flatten_spec([primals, tangents], self._in_spec)")
        else:
            inner = sig[len("def forward(self, "):-2]
            for m in re.finditer(r'(\w+): ("[^"]*")', inner):
                self.placeholders.append((m.group(1), m.group(2)))
        i += 1
        for j in range(i, len(lines)):
            s = lines[j].strip()
            if not s or s.startswith("#"):
                continue
            if s.startswith("return "):
                r = s[len("return "):]
                if self.joint:
                    assert r.startswith("pytree.tree_unflatten(") and r.endswith(", self._out_spec)")
                    r = r[len("pytree.tree_unflatten("):-len(", self._out_spec)")]
                self.ret = [x.strip() for x in r.strip("[]()").split(",") if x.strip()]
                break
            stmt, _, dels = s.partition(";")
            lhs, _, rhs = stmt.partition(" = ")
            name, _, ann = lhs.partition(": ")
            d = []
            if dels.strip():
                parts = [p.strip() for p in dels.split("=")]
                assert parts[-1] == "None", s
                d = parts[:-1]
            self.stmts.append(Stmt(j + 1, name.strip(), ann.strip() or None, rhs.strip(), d))
        assert self.ret is not None, "%s: no return" % path


def referenced_names(rhs):
    if rhs.startswith("self."):
        return []
    m = re.match(r"^(\w+)\[(\d+)\]$", rhs)
    if m:
        return [m.group(1)]
    body = rhs[rhs.index("(") + 1:-1]
    body = re.sub(r"'[^']*'", "", body)
    body = re.sub(r"device\([^)]*\)", "", body)
    body = re.sub(r"(?<![\w.])\d+(\.\d*)?(e[-+]?\d+)?", "", body)
    out = []
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*\s*=?", body):
        t = tok.strip()
        if t.endswith("="):
            continue
        if "." in t or t in ("True", "False", "None", "inf", "nan"):
            continue
        if t not in out:
            out.append(t)
    return out


def structural_check(gt, extra_defined=()):
    errs = []
    defined = {n for n, _ in gt.placeholders}
    if len(defined) != len(gt.placeholders):
        errs.append("duplicate placeholder")
    deleted = {}
    uses = []  # (stmt index, names)
    for k, st in enumerate(gt.stmts):
        refs = referenced_names(st.rhs)
        for r in refs:
            if r not in defined:
                errs.append("%s:%d: '%s' used before definition" % (gt.path, st.lineno, r))
            if r in deleted:
                errs.append("%s:%d: '%s' used after its deletion at line %d" % (gt.path, st.lineno, r, deleted[r]))
        if st.name in defined:
            errs.append("%s:%d: '%s' defined twice" % (gt.path, st.lineno, st.name))
        defined.add(st.name)
        for d in st.dels:
            if d not in defined:
                errs.append("%s:%d: deletes undefined '%s'" % (gt.path, st.lineno, d))
            deleted[d] = st.lineno
        uses.append(refs)
    for r in gt.ret:
        if r != "None" and (r not in defined or r in deleted):
            errs.append("%s: returns '%s' (undefined or deleted)" % (gt.path, r))
    # the deletions must be torch.fx's: values whose last use is this statement (+ unused nodes)
    seen = set(r for r in gt.ret if r != "None")
    expect = [None] * len(gt.stmts)
    for k in range(len(gt.stmts) - 1, -1, -1):
        lst = []
        for r in uses[k]:
            if r not in seen:
                seen.add(r)
                lst.append(r)
        expect[k] = lst
    used_anywhere = set(seen)
    for k, st in enumerate(gt.stmts):
        e = list(expect[k])
        if st.name not in used_anywhere:
            e.append(st.name)
        if e != st.dels:
            errs.append("%s:%d: deletions %s, torch.fx would write %s" % (gt.path, st.lineno, st.dels, e))
    return errs


# ---------------------------------------------------------------- numbers

def ann_parse(a):
    m = ANN.match(a)
    assert m, a
    dims = [int(x) for x in m.group(2).split(",") if x.strip()]
    return m.group(1), dims


def torch_strides(x):
    if x.ndim == 0:
        return []
    return [s // x.itemsize for s in x.strides]


def erf(x):
    return np.vectorize(math.erf)(x)


def to_dtype(sym):
    return DT[sym.s]


class Collective(Exception):
    pass


def run_program(graphs, inputs, dropout_mask, constants, rank):
    """A generator: yields ('coll', op, group, arrays...) and gets results back;
    finally returns (env, errors)."""
    env = {}
    errs = []
    for gi, gt in enumerate(graphs):
        genv = {}
        for n, a in gt.placeholders:
            if n in env and gi > 0:
                v = env[n]
            elif n in inputs:
                v = inputs[n]
            else:
                errs.append("%s: no value for input '%s'" % (gt.path, n))
                return env, errs
            dt, sh = ann_parse(a)
            if list(v.shape) != sh or NP2DT[v.dtype] != dt:
                errs.append("%s: input %s is %s%s, annotated %s" % (gt.path, n, NP2DT[v.dtype], list(v.shape), a))
            genv[n] = v

        for st in gt.stmts:
            try:
                val = yield from eval_stmt(st, genv, dropout_mask, constants, rank)
            except AssertionError as e:
                errs.append("%s:%d: %s" % (gt.path, st.lineno, e))
                return env, errs
            genv[st.name] = val
            if st.ann is not None:
                dt, sh = ann_parse(st.ann)
                if not isinstance(val, np.ndarray):
                    errs.append("%s:%d: annotated %s but not a tensor" % (gt.path, st.lineno, st.ann))
                elif list(val.shape) != sh or NP2DT.get(val.dtype) != dt:
                    errs.append("%s:%d: %s computes %s%s, annotated %s" % (gt.path, st.lineno, st.name,
                                                                          NP2DT.get(val.dtype), list(val.shape), st.ann))
        for r in gt.ret:
            if r != "None":
                env[r] = genv[r]
        env.update({k: v for k, v in genv.items()})
        env["__returns_%d" % gi] = [None if r == "None" else genv[r] for r in gt.ret]
    return env, errs


def eval_stmt(st, env, dropout_mask, constants, rank):
    rhs = st.rhs
    if rhs.startswith("self."):
        c = constants[rhs[5:]]
        return np.array(c, dtype=np.int64 if isinstance(c, int) else np.float64)
    m = re.match(r"^(\w+)\[(\d+)\]$", rhs)
    if m:
        return env[m.group(1)][int(m.group(2))]
    m = re.match(r"^torch\.ops\.(\w+)\.(\w+)\.(\w+)\((.*)\)$", rhs)
    assert m, "cannot parse %s" % rhs
    ns, op, ov = m.group(1), m.group(2), m.group(3)
    cap = {}

    def capture(*a, **k):
        cap["a"], cap["k"] = a, k
    scope = dict(env)
    scope.update({"torch": TorchNS, "device": device, "__c": capture, "inf": float("inf")})
    eval("__c(%s)" % m.group(4), {"__builtins__": {}}, scope)
    a, k = cap["a"], cap["k"]
    if ns == "_c10d_functional":
        if op == "wait_tensor":
            return a[0]
        res = yield ("coll", op, a, st)
        return res
    return apply(ns, op, ov, a, k, dropout_mask, st)


def bshape(x):
    return list(np.shape(x))


def apply(ns, op, ov, a, k, dropout_mask, st):
    if ns == "apex":
        if op == "fused_layer_norm_affine_fwd":
            x, w, b, nshape, eps = a
            h = nshape[0]
            xs = x.reshape(-1, h)
            mean = xs.mean(1)
            var = ((xs - mean[:, None]) ** 2).mean(1)
            inv = 1.0 / np.sqrt(var + eps)
            out = ((xs - mean[:, None]) * inv[:, None] * w + b).reshape(x.shape)
            return (out, mean, inv)
        if op == "fused_layer_norm_affine_bwd":
            g, mean, inv, x, nshape, w, b, eps = a
            h = nshape[0]
            xs = x.reshape(-1, h)
            gs = g.reshape(-1, h)
            xhat = (xs - mean[:, None]) * inv[:, None]
            gw = (gs * xhat).sum(0)
            gb = gs.sum(0)
            dxh = gs * w
            dx = inv[:, None] * (dxh - dxh.mean(1, keepdims=True) - xhat * (dxh * xhat).mean(1, keepdims=True))
            return (dx.reshape(x.shape), gw, gb)
        raise AssertionError("unknown apex op %s" % op)
    assert ns == "aten", ns
    x = a[0] if a else None
    if op in ("view", "_unsafe_view"):
        shape = list(a[1])
        n = x.size
        if -1 in shape:
            i = shape.index(-1)
            shape[i] = n // int(np.prod([d for j, d in enumerate(shape) if j != i]))
        assert int(np.prod(shape)) == n, "view %s of %s" % (shape, x.shape)
        if op == "view":
            st_ = compute_view_strides(list(x.shape), torch_strides(x), shape)
            assert st_ is not None, "illegal view of %s (strides %s) to %s" % (list(x.shape), torch_strides(x), shape)
        return np.reshape(x, shape)
    if op == "t":
        assert x.ndim <= 2
        return x.T
    if op == "transpose":
        return np.swapaxes(x, a[1], a[2])
    if op == "permute":
        return np.transpose(x, a[1])
    if op == "unsqueeze":
        return np.expand_dims(x, a[1] if a[1] >= 0 else x.ndim + 1 + a[1])
    if op == "squeeze":
        assert x.shape[a[1]] == 1
        return np.squeeze(x, a[1])
    if op == "expand":
        return np.broadcast_to(x, a[1])
    if op == "slice":
        dim, s0, e0 = a[1], a[2], a[3]
        idx = [slice(None)] * x.ndim
        idx[dim] = slice(s0, min(e0, x.shape[dim]))
        return x[tuple(idx)]
    if op == "slice_scatter":
        src, dim, s0, e0 = a[1], a[2], a[3], a[4]
        out = np.array(x, copy=True)
        idx = [slice(None)] * x.ndim
        idx[dim] = slice(s0, min(e0, x.shape[dim]))
        assert list(out[tuple(idx)].shape) == list(src.shape)
        out[tuple(idx)] = src
        return out
    if op == "split_with_sizes":
        sizes, dim = a[1], a[2]
        assert sum(sizes) == x.shape[dim]
        out, off = [], 0
        for s in sizes:
            idx = [slice(None)] * x.ndim
            idx[dim] = slice(off, off + s)
            out.append(x[tuple(idx)])
            off += s
        return tuple(out)
    if op == "clone":
        if k.get("memory_format") is not None:
            return np.ascontiguousarray(x).copy()
        return np.array(x, order="K", copy=True)
    if op in ("detach", "lift_fresh_copy"):
        return x
    if op == "copy":
        src = a[1]
        return np.ascontiguousarray(np.broadcast_to(src, x.shape).astype(x.dtype))
    if op == "_to_copy":
        return np.array(x, dtype=to_dtype(k["dtype"]), copy=True)
    if op in ("empty",):
        dt = to_dtype(k["dtype"])  # garbage: a read of it shows in the results
        return np.full(a[0], np.nan if dt == np.float64 else -987654321, dtype=dt)
    if op == "zeros":
        return np.zeros(a[0], dtype=to_dtype(k["dtype"]))
    if op == "new_zeros":
        return np.zeros(a[1], dtype=to_dtype(k["dtype"]) if "dtype" in k else x.dtype)
    if op == "zeros_like":
        return np.zeros_like(x)
    if op == "arange":
        return np.arange(a[0], a[1], dtype=np.int64)
    if op in ("add", "sub", "mul", "div", "rsub"):
        y = a[1]
        if op == "rsub":
            x, y = y, x
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "rsub": np.subtract}[op](x, y)
        r = np.asarray(r)
        xs = [v for v in (a[0], a[1]) if isinstance(v, np.ndarray)]
        dts = [v.dtype for v in xs]
        if op == "div" or any(d == np.float64 for d in dts) or any(isinstance(v, float) for v in (a[0], a[1])):
            r = r.astype(np.float64)
        elif dts:
            r = r.astype(max(dts, key=lambda d: [np.bool_, np.int32, np.int64].index(d.type)))
        return r
    if op in ("lt", "ge", "eq", "gt", "le"):
        f = {"lt": np.less, "ge": np.greater_equal, "eq": np.equal, "gt": np.greater, "le": np.less_equal}[op]
        return np.asarray(f(x, a[1]))
    if op == "bitwise_or":
        assert x.dtype == np.bool_ and a[1].dtype == np.bool_
        return np.logical_or(x, a[1])
    if op == "exp":
        return np.exp(x)
    if op == "log":
        return np.log(x)
    if op == "gelu":
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    if op == "gelu_backward":
        g, xx = a[0], a[1]
        cdf = 0.5 * (1 + erf(xx / math.sqrt(2)))
        pdf = np.exp(-0.5 * xx * xx) / math.sqrt(2 * math.pi)
        return g * (cdf + xx * pdf)
    if op == "_softmax":
        dim = a[1]
        e = np.exp(x - x.max(axis=dim, keepdims=True))
        return e / e.sum(axis=dim, keepdims=True)
    if op == "_softmax_backward_data":
        g, y, dim = a[0], a[1], a[2]
        return y * (g - (g * y).sum(axis=dim, keepdims=True))
    if op == "masked_fill":
        mask, v = a[1], a[2]
        assert mask.dtype == np.bool_
        return np.where(mask, v, x).astype(x.dtype)
    if op == "sum":
        if ov == "default":
            return np.asarray(x.sum())
        dims = tuple(d % x.ndim for d in a[1])
        keep = a[2] if len(a) > 2 else False
        return np.asarray(x.sum(axis=dims, keepdims=keep))
    if op == "max":
        dim = a[1]
        return (x.max(axis=dim), x.argmax(axis=dim).astype(np.int64))
    if op == "mm":
        assert x.ndim == 2 and a[1].ndim == 2
        return x @ a[1]
    if op == "bmm":
        assert x.ndim == 3 and a[1].ndim == 3
        return np.matmul(x, a[1])
    if op == "baddbmm":
        inp, m1, m2 = a
        r = k.get("alpha", 1) * np.matmul(m1, m2)
        if k.get("beta", 1) != 0:
            r = r + k.get("beta", 1) * inp
        return np.broadcast_to(r, np.broadcast_shapes(inp.shape, r.shape)).copy()
    if op == "cat":
        return np.ascontiguousarray(np.concatenate(a[0], axis=a[1]))
    if op == "index":
        idx = a[1]
        return np.asarray(x[tuple(idx)])
    if op == "index_put":
        idx, v = a[1], a[2]
        acc = a[3] if len(a) > 3 else False
        out = np.array(x, copy=True)
        if len(idx) == 1 and idx[0].dtype == np.bool_:
            assert not acc
            out[idx[0]] = v
            return out
        if acc:
            np.add.at(out, tuple(idx), v)
        else:
            out[tuple(idx)] = v
        return out
    if op == "embedding":
        return x[a[1]]
    if op == "embedding_dense_backward":
        g, idx, n = a[0], a[1], a[2]
        out = np.zeros((n, g.shape[-1]))
        np.add.at(out, idx.reshape(-1), g.reshape(-1, g.shape[-1]))
        return out
    if op == "native_dropout":
        p = a[1]
        m = dropout_mask(list(x.shape))
        return (x * m / (1.0 - p), m)
    if op == "native_dropout_backward":
        return a[0] * a[1] * a[2]
    raise AssertionError("the checker does not know aten.%s.%s" % (op, ov))


def collective(op, calls, T):
    """calls: per rank (args); returns per-rank results."""
    if op == "all_reduce":
        red = calls[0][1]
        vals = [c[0] for c in calls]
        if red == "sum":
            r = np.sum(vals, axis=0)
        elif red == "max":
            r = np.max(vals, axis=0)
        else:
            raise AssertionError(red)
        return [np.array(r, dtype=vals[0].dtype) for _ in calls]
    if op == "all_gather_into_tensor":
        assert calls[0][1] == T, "group_size %s != %d" % (calls[0][1], T)
        r = np.concatenate([c[0] for c in calls], axis=0)
        return [r.copy() for _ in calls]
    if op == "reduce_scatter_tensor":
        assert calls[0][2] == T
        s = np.sum([c[0] for c in calls], axis=0)
        return [np.ascontiguousarray(x) for x in np.split(s, T, axis=0)]
    raise AssertionError(op)


def run_lockstep(progs, inputs, masks, constants):
    """progs: per rank list of GraphText. Runs all together."""
    T = len(progs)
    gens = [run_program(progs[r], inputs[r], masks[r], constants, r) for r in range(T)]
    results = [None] * T
    pending = [None] * T
    sendv = [None] * T
    alive = list(range(T))
    while alive:
        for r in list(alive):
            try:
                pending[r] = gens[r].send(sendv[r])
            except StopIteration as e:
                results[r] = e.value
                alive.remove(r)
                pending[r] = None
        if not alive:
            break
        if len(alive) != T:
            raise AssertionError("ranks finished at different collectives")
        ops = {pending[r][1] for r in range(T)}
        assert len(ops) == 1, "ranks call different collectives %s" % ops
        out = collective(pending[0][1], [pending[r][2] for r in range(T)], T)
        sendv = out
    return results


def program_files(d):
    files = sorted(glob.glob(os.path.join(d, "*.py")))
    progs = {}
    for f in files:
        b = os.path.basename(f)[:-3]
        m = re.match(r"^(logical|rank(\d+))(?:\.(\d+))?$", b)
        if not m:
            continue
        key = m.group(1)
        progs.setdefault(key, []).append((int(m.group(3) or 0), f))
    return {k: [GraphText(f) for _, f in sorted(v)] for k, v in progs.items()}


def make_logical_inputs(graphs, rel, rng):
    vals = {}
    seen_saved = set()
    for gi, gt in enumerate(graphs):
        for n, a in gt.placeholders:
            if gi > 0 and n in seen_saved:
                continue
            dt, sh = ann_parse(a)
            r = rel["inputs"].get(n, {})
            if dt == "b8":
                s = sh[-1]
                causal = np.triu(np.ones((s, s), dtype=bool), 1)
                vals[n] = np.broadcast_to(causal, sh).copy()
            elif dt in ("i64", "i32"):
                lo, hi = r.get("values", {}).get("range", [0, 2])
                if sh and hi == sh[-1]:  # position ids
                    vals[n] = np.broadcast_to(np.arange(hi), sh).astype(DT[dt]).copy()
                else:
                    vals[n] = rng.integers(lo, hi, size=sh).astype(DT[dt])
            else:
                if n == "tangents_1" and sh == []:
                    vals[n] = np.array(1.0)
                elif r.get("role") == "param" or n.startswith("tangents"):
                    vals[n] = rng.normal(0, 0.5, size=sh)
                else:  # loss mask / activations
                    vals[n] = (rng.random(size=sh) < 0.75).astype(np.float64) if len(sh) == 2 else \
                        rng.normal(0, 1.0, size=sh)
        for r_ in gt.ret:
            seen_saved.add(r_)
    return vals


def cut(v, pl, r, T):
    if pl == "R":
        return v
    m = re.match(r"^S\((\d+)\)$", pl)
    assert m, pl
    return np.ascontiguousarray(np.split(v, T, axis=int(m.group(1)))[r])


def check_dir(d, verbose=False):
    rel = json.load(open(os.path.join(d, "relations.json")))
    T = rel["mesh"]["axes"][0]["size"]
    progs = program_files(d)
    errs = []
    for key, gs in progs.items():
        for gt in gs:
            errs += structural_check(gt)
    rng = np.random.default_rng(1234)
    lin = make_logical_inputs(progs["logical"], rel, rng)
    logical_masks = []

    def lmask(shape):
        m = rng.random(size=shape) < 0.9
        logical_masks.append(m)
        return m
    consts = rel.get("constants", {})
    (lres,) = run_lockstep([progs["logical"]], [lin], [lmask], consts)
    lenv, lerr = lres
    errs += lerr
    rin = []
    rmasks = []
    for r in range(T):
        ri = {}
        for n, v in lin.items():
            e = rel["inputs"].get(n)
            if e is None:
                errs.append("no relation for input %s" % n)
                continue
            ri[n] = cut(v, e["placements"][0], r, T)
        rin.append(ri)
        cnt = [0]

        def rmask(shape, r=r, cnt=cnt):
            m = logical_masks[cnt[0]]
            cnt[0] += 1
            for dd in range(m.ndim):
                if m.shape[dd] != shape[dd]:
                    assert m.shape[dd] == shape[dd] * T
                    return np.split(m, T, axis=dd)[r]
            return m
        rmasks.append(rmask)
    rres = run_lockstep([progs["rank%d" % r] for r in range(T)], rin, rmasks, consts)
    for env, e in rres:
        errs += e
    if errs:
        return errs, None
    bad = []
    for o in rel["outputs"]:
        lv = lenv[o.get("logicalNode", o["node"])]
        pl = o["placements"][0]
        parts = [rres[r][0][o["node"]] for r in range(T)]
        if pl == "R":
            ok = all(np.allclose(p, lv, rtol=1e-9, atol=1e-9) for p in parts)
        else:
            dd = int(pl[2:-1])
            ok = np.allclose(np.concatenate(parts, axis=dd), lv, rtol=1e-9, atol=1e-9)
        if not ok:
            bad.append(o["name"])
    return errs, bad


def gradcheck(d, eps=1e-6, per_input=3):
    """Central differences on the single-device program: checks that its
    backward (AOT backward graph, or the joint graph's gradients) is the
    derivative of sum(output * tangents_1). Returns a list of mismatches."""
    rel = json.load(open(os.path.join(d, "relations.json")))
    lg = program_files(d)["logical"]
    if "tangents_1" not in [n for gt in lg for n, _ in gt.placeholders]:
        return None
    rng = np.random.default_rng(99)
    lin = make_logical_inputs(lg, rel, rng)
    masks = []

    def rec(shape):
        m = rng.random(size=shape) < 0.9
        masks.append(m)
        return m
    consts = rel.get("constants", {})
    ((env, errs),) = run_lockstep([lg], [lin], [rec], consts)
    assert not errs, errs
    prim = [n for n, _ in lg[0].placeholders if not n.startswith("tangents")]
    if len(lg) == 2:
        grads = env["__returns_1"]
        fwg = [lg[0]]
    else:
        rets = env["__returns_0"]
        grads = rets[len(rets) - len(prim):]
        fwg = lg
    assert len(grads) == len(prim)

    def L(inp):
        k = [0]

        def replay(shape):
            m = masks[k[0]]
            k[0] += 1
            return m
        ((e, er),) = run_lockstep([fwg], [inp], [replay], consts)
        assert not er, er
        return float(np.sum(e["__returns_0"][0] * inp["tangents_1"]))
    bad = []
    for name, gval in zip(prim, grads):
        if gval is None or lin[name].dtype != np.float64:
            continue
        for _ in range(per_input):
            i = tuple(int(rng.integers(0, n)) for n in lin[name].shape)
            up = dict(lin)
            dn = dict(lin)
            up[name] = lin[name].copy()
            dn[name] = lin[name].copy()
            up[name][i] += eps
            dn[name][i] -= eps
            fd = (L(up) - L(dn)) / (2 * eps)
            if abs(fd - gval[i]) > 1e-5 * max(1.0, abs(fd)):
                bad.append("%s%s: backward %.9g, central difference %.9g" % (name, list(i), gval[i], fd))
    return bad


def main():
    if sys.argv[1:2] == ["--gradcheck"]:
        rc = 0
        for d in sys.argv[2:]:
            bad = gradcheck(d.rstrip("/"))
            if bad is None:
                continue
            print("%s: single-device backward %s" % (os.path.basename(d.rstrip("/")),
                                                    "matches central differences" if not bad else "WRONG"))
            for b in bad:
                rc = 1
                print("   ", b)
        sys.exit(rc)
    dirs = [d.rstrip("/") for d in sys.argv[1:]] or \
        sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "megatron-fx", "*")))
    rc = 0
    for d in dirs:
        if not os.path.isdir(d):
            continue
        errs, bad = check_dir(d)
        name = os.path.basename(d)
        if errs:
            rc = 1
            print("%s: %d problems" % (name, len(errs)))
            for e in errs[:20]:
                print("   ", e)
        elif bad:
            print("%s: consistent graphs; NOT equivalent at %d outputs: %s" % (name, len(bad), ", ".join(bad)))
        else:
            print("%s: consistent graphs; equivalent (all %s outputs)" % (name, "named"))
    sys.exit(rc)


if __name__ == "__main__":
    main()
