"""A tiny FX-graph IR that prints what torch.fx's print_readable() prints.

Plain Python 3 (no torch). Used by megatron_fx.py. It knows:
  * torch.fx's node naming (the _Namespace rules: `view`, `view_1`, ...; names
    that shadow Python builtins such as `max`, `sum`, `slice` start at `_1`),
  * the `;  a = b = None` deletions print_readable writes after the last use
    of a value (and after a node nobody uses),
  * tensor shapes and strides (to know that every `view` is a legal view),
  * AOTAutograd's partition of a joint graph into a forward and a backward
    graph (node names are kept, the backward's inputs are named after the
    forward nodes it saves, then `tangents_N`).
"""

import builtins
import keyword
import re

INT_MAX = 9223372036854775807


class Raw(str):
    """Printed verbatim (torch.float32, device(type='cuda', index=0), ...)."""


def contiguous_strides(shape):
    st = []
    acc = 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return list(reversed(st))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def compute_view_strides(oldshape, oldstride, newshape):
    """ATen's computeStride: the strides of `view(newshape)`, or None if the
    view is not possible without a copy."""
    if numel(oldshape) == 0:
        return contiguous_strides(newshape)
    newstride = [0] * len(newshape)
    view_d = len(newshape) - 1
    chunk_base_stride = oldstride[-1] if oldstride else 1
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[tensor_d]
        if tensor_d == 0 or (oldshape[tensor_d - 1] != 1 and
                             oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk_base_stride
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = oldstride[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return newstride


def resolve_shape(shape, n):
    shape = list(shape)
    if -1 in shape:
        i = shape.index(-1)
        rest = numel([d for j, d in enumerate(shape) if j != i])
        shape[i] = n // rest
    assert numel(shape) == n, (shape, n)
    return shape


def broadcast(a, b):
    out = []
    la, lb = len(a), len(b)
    for i in range(max(la, lb)):
        da = a[la - 1 - i] if i < la else 1
        db = b[lb - 1 - i] if i < lb else 1
        assert da == db or da == 1 or db == 1, (a, b)
        out.append(max(da, db))
    return list(reversed(out))


def is_dense(shape, strides):
    """Non-overlapping and dense (some permutation of a contiguous layout)."""
    dims = sorted([i for i in range(len(shape)) if shape[i] != 1], key=lambda i: strides[i])
    acc = 1
    for i in dims:
        if strides[i] != acc:
            return False
        acc *= shape[i]
    return True


class Namespace:
    _suffix = re.compile(r"(.*)_(\d+)$")

    def __init__(self):
        self.used = set()
        self.base_count = {}

    @staticmethod
    def illegal(name):
        return keyword.iskeyword(name) or name in dir(builtins)

    def create(self, candidate):
        m = self._suffix.match(candidate)
        if m is None:
            base, num = candidate, None
        else:
            base, num = m.group(1), int(m.group(2))
        cand = base if num is None else "%s_%d" % (base, num)
        if not num:
            num = self.base_count.get(base, 0)
        while cand in self.used or self.illegal(cand):
            num += 1
            cand = "%s_%d" % (base, num)
        self.used.add(cand)
        self.base_count[base] = num
        return cand


class Node:
    def __init__(self, name, kind, target=None, args=(), kwargs=(), dtype=None, shape=None,
                 strides=None, items=None, section="fw", loc=None, annot=True):
        self.name = name
        self.kind = kind          # placeholder | call | getitem | getattr
        self.target = target      # 'aten.view.default' (printed as torch.ops.<target>)
        self.args = list(args)
        self.kwargs = list(kwargs)
        self.dtype = dtype
        self.shape = list(shape) if shape is not None else None
        self.strides = list(strides) if strides is not None else None
        self.items = items        # multi-output: [(dtype, shape, strides)]
        self.section = section
        self.loc = loc
        self.annot = annot

    def __repr__(self):
        return self.name

    def ann(self):
        return '"%s[%s]"' % (self.dtype, ", ".join(str(d) for d in self.shape))


def node_inputs(args):
    out = []

    def walk(a):
        if isinstance(a, Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
    walk(args)
    return out


def fmt(a):
    if isinstance(a, Node):
        return a.name
    if isinstance(a, Raw):
        return str(a)
    if a is None:
        return "None"
    if isinstance(a, bool):
        return "True" if a else "False"
    if isinstance(a, float):
        if a == float("-inf"):
            return "-inf"
        return repr(a)
    if isinstance(a, int):
        return str(a)
    if isinstance(a, str):
        return "'" + a + "'"
    if isinstance(a, list):
        return "[" + ", ".join(fmt(x) for x in a) + "]"
    if isinstance(a, tuple):
        return "(" + ", ".join(fmt(x) for x in a) + ("," if len(a) == 1 else "") + ")"
    raise TypeError(a)


def call_text(n):
    parts = [fmt(a) for a in n.args] + ["%s = %s" % (k, fmt(v)) for k, v in n.kwargs]
    return "torch.ops.%s(%s)" % (n.target, ", ".join(parts))


class Graph:
    """A joint graph under construction: placeholders first, then nodes."""

    def __init__(self):
        self.ns = Namespace()
        self.nodes = []
        self.section = "fw"
        self.loc = None

    def placeholder(self, name, dtype, shape, section="fw"):
        n = Node(self.ns.create(name), "placeholder", dtype=dtype, shape=shape,
                 strides=contiguous_strides(shape), section=section)
        self.nodes.append(n)
        return n

    def add(self, base, target, args, kwargs=(), dtype=None, shape=None, strides=None,
            items=None, annot=True):
        n = Node(self.ns.create(base), "call", target, args, kwargs, dtype, shape,
                 strides if strides is not None or shape is None else contiguous_strides(shape),
                 items, self.section, self.loc, annot)
        self.nodes.append(n)
        return n

    def getitem(self, node, i):
        dt, sh, st = node.items[i]
        n = Node(self.ns.create("getitem"), "getitem", None, [node, i], (), dt, sh, st,
                 None, self.section, self.loc)
        self.nodes.append(n)
        return n

    def getattr(self, attr, dtype, annot):
        n = Node(self.ns.create(attr), "getattr", attr, (), (), dtype, [], [], None,
                 self.section, self.loc, annot)
        self.nodes.append(n)
        return n


# ---------------------------------------------------------------- printing

def last_uses(nodes, outputs):
    """user node -> [inputs whose last use it is], as torch.fx's codegen."""
    seen = set()
    user_to = {}
    for u in [None] + list(reversed(nodes)):
        ins = node_inputs(outputs) if u is None else node_inputs(u.args) + node_inputs([v for _, v in u.kwargs])
        for n in ins:
            if id(n) not in seen:
                seen.add(id(n))
                if u is not None:
                    user_to.setdefault(id(u), []).append(n)
    return user_to


def users_of(nodes, outputs):
    cnt = {}
    for u in nodes:
        for n in node_inputs(u.args) + node_inputs([v for _, v in u.kwargs]):
            cnt[id(n)] = cnt.get(id(n), 0) + 1
    for n in node_inputs(outputs):
        cnt[id(n)] = cnt.get(id(n), 0) + 1
    return cnt


def render(header, class_name, placeholders, body, outputs, joint=False, ret_list=True):
    """placeholders: [Node]; body: [Node]; outputs: list of Node/None."""
    lines = list(header)
    lines.append("class %s(torch.nn.Module):" % class_name)
    if joint:
        lines.append("    def forward(self, primals, tangents):")
        lines.append("        " + " ".join("%s: %s;" % (p.name, p.ann()) for p in placeholders) + " ")
        lines.append("    ")
        lines.append("        " + ", ".join(p.name for p in placeholders) +
                     ", = fx_pytree.tree_flatten_spec([primals, tangents], self._in_spec)")
    else:
        sig = ", ".join("%s: %s" % (p.name, p.ann()) for p in placeholders)
        lines.append("    def forward(self, %s):" % sig)
    all_nodes = list(placeholders) + list(body)
    lu = last_uses(all_nodes, outputs)
    uc = users_of(all_nodes, outputs)
    cur_loc = None
    first = True
    for n in body:
        if n.loc != cur_loc:
            if not first or joint:
                lines.append("        ")
            f, line, fn, code = n.loc
            lines.append("        # File: %s:%d in %s, code: %s" % (f, line, fn, code))
            cur_loc = n.loc
        first = False
        if n.kind == "call":
            rhs = call_text(n)
        elif n.kind == "getitem":
            rhs = "%s[%d]" % (n.args[0].name, n.args[1])
        elif n.kind == "getattr":
            rhs = "self.%s" % n.target
        else:
            raise ValueError(n.kind)
        lhs = n.name + (": " + n.ann() if (n.annot and n.items is None) else "")
        dels = list(lu.get(id(n), []))
        if uc.get(id(n), 0) == 0:
            dels.append(n)
        stmt = "        %s = %s" % (lhs, rhs)
        if dels:
            stmt += ";  " + " = ".join(d.name for d in dels) + " = None"
        lines.append(stmt)
    outs = "[" + ", ".join("None" if o is None else o.name for o in outputs) + "]"
    if joint:
        lines.append("        return pytree.tree_unflatten(%s, self._out_spec)" % outs)
    else:
        lines.append("        return %s" % outs)
    lines.append("        ")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- partition

def ancestors(roots, allowed):
    seen = set()
    order = []
    stack = [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if id(n) in seen or id(n) not in allowed:
            continue
        seen.add(id(n))
        order.append(n)
        stack.extend(node_inputs(n.args) + node_inputs([v for _, v in n.kwargs]))
    return seen


def partition(g, fw_outputs, bw_outputs):
    """AOTAutograd-style split of a joint graph. Forward-section nodes that
    only the backward needs move to the backward graph (names kept).
    Returns (fw_placeholders, fw_body, saved, bw_placeholders, bw_body)."""
    allowed = {id(n) for n in g.nodes}
    fw_nodes = [n for n in g.nodes if n.section == "fw"]
    fw_ids = {id(n) for n in fw_nodes}
    need_fw = ancestors(fw_outputs, fw_ids)
    need_bw = ancestors(bw_outputs, allowed)
    for n in g.nodes:  # a getitem stays with its multi-output node
        if n.kind == "getitem" and id(n.args[0]) in need_fw and id(n) in need_bw:
            need_fw.add(id(n))
    fw_ph = [n for n in g.nodes if n.kind == "placeholder" and n.section == "fw"]
    fw_body = [n for n in g.nodes if n.kind != "placeholder" and id(n) in need_fw]
    bw_body = [n for n in g.nodes if n.kind != "placeholder" and id(n) in need_bw and id(n) not in need_fw]
    bw_body_ids = {id(n) for n in bw_body}
    saved_ids = set()
    for n in bw_body:
        for i in node_inputs(n.args) + node_inputs([v for _, v in n.kwargs]):
            if id(i) not in bw_body_ids and i.section == "fw":
                saved_ids.add(id(i))
    for o in bw_outputs:
        if o is not None and id(o) not in bw_body_ids and o.section == "fw":
            saved_ids.add(id(o))
    # a multi-output node cannot be saved as such: save its getitems instead
    saved = [n for n in fw_ph if id(n) in saved_ids] + \
            [n for n in fw_body if id(n) in saved_ids]
    for n in saved:
        assert n.items is None, "saving a multi-output node %s" % n.name
    bw_ph = list(saved) + [n for n in g.nodes if n.kind == "placeholder" and n.section == "bw"]
    return fw_ph, fw_body, saved, bw_ph, bw_body
