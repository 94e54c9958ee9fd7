"""Values read into Python while `planproof capture` traces (docs/capture.md), and `p.data`.

torch 1.13's dispatch mode does not see `.item()`, `float(t)`, `int(t)`, `bool(t)`, `if t:` or
`.tolist()`, so torch.Tensor's methods are wrapped while tracing. A read of a floating tensor's
one element by `.item()` or `float(t)` returns a `Tracked` float: Python arithmetic on it with
numbers (`+ - * / **`, unary minus) is recorded as ATen ops on the 0-d tensor it was read from,
and a number it becomes that an op then takes as a tensor operand (`g.mul_(clip_coef)`) is
written as that traced value, not as a constant: the dependency is kept. The read is marked
`aten._local_scalar_dense` (the plan is specialized to the value read, and every verdict says
so) when the value escapes that arithmetic: a comparison or branch on it (`if clip_coef < 1`),
`int()`, `round()`, a Scalar argument (`alpha=`), a tensor made from it (`torch.tensor([x])`),
a number an op takes that equals a read value but looks like a literal (8 characters or
fewer, such as a token count 12.0: never substituted), or any longer number in an op after
the read that is not such a traced value (`math.sqrt(x)` reads the float directly, unseen):
kept conservatively. A read whose value looks like a literal
(a count such as 12.0), and every other read (`int(t)`, `bool(t)`, `.tolist()`, an integer
tensor's `.item()`), is marked at once.
"""
import sys

import torch

_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")
_SAVED = {}
DT = None


class ReadNote:
    """The place of a read in the trace: written as `_local_scalar_dense` if the value escapes."""

    def __init__(self, name, tensor_name):
        self.name, self.tensor_name, self.escaped = name, tensor_name, False

    def line(self):
        return "%s = torch.ops.aten._local_scalar_dense.default(%s)" % (self.name, self.tensor_name)


def simple(v):
    """A number a program writes as a literal (1.0, 0.1, 1e-06): not matched to read values."""
    return float(v).is_integer() or len(repr(float(v))) <= 8


def escape(cap):
    """A number that may derive from a read reached an op as a constant: every read is marked."""
    for n in cap.read_notes:
        n.escaped = True


def arg(cap, a, is_tensor_arg):
    """An op's float argument: the traced value it was computed as when it is one (and the
    argument is a tensor operand); else the number, marking the reads when it may derive from one."""
    if not isinstance(a, float) or not cap.read_notes:
        return None
    v = float.__float__(a)
    if simple(v):
        # A literal-looking number (a token count read as 12.0): never substituted, since the
        # program may have written it; if a read gave it, the read is marked.
        if v in cap.tracked_all:
            escape(cap)
        return None
    t = cap.tracked.get(v)
    if t is not None and is_tensor_arg:
        return t.name
    escape(cap)
    return None


class Tracked(float):
    """A float read from a tensor that remembers the traced 0-d tensor holding it."""

    def __new__(cls, value, cap, name, dtype, notes):
        self = float.__new__(cls, value)
        self.cap, self.name, self.dtype, self.notes = cap, name, dtype, notes
        cap.tracked_all.add(float(value))
        if not simple(value):
            cap.tracked[float(value)] = self
        return self

    def _mark(self):
        for n in self.notes:
            n.escaped = True

    def _emit(self, value, op, *operands):
        cap = self.cap
        if not cap.tracing:
            self._mark()
            return value
        notes = set(self.notes)
        parts = []
        for o in operands:
            if isinstance(o, Tracked):
                notes |= o.notes
                parts.append(o.name)
            else:
                parts.append(repr(float(o)))
        cap.note_loc()
        name = cap.fresh("pyval")
        cap.lines.append('%s: "%s[]" = torch.ops.%s(%s)' % (name, self.dtype, op, ", ".join(parts)))
        return Tracked(value, cap, name, self.dtype, notes)

    @staticmethod
    def _num(o):
        return isinstance(o, (int, float)) and not isinstance(o, bool)

    def __add__(self, o):
        return self._emit(float.__add__(self, o), "aten.add.Tensor", self, o) if self._num(o) else NotImplemented

    def __radd__(self, o):
        return self._emit(float.__radd__(self, o), "aten.add.Tensor", self, o) if self._num(o) else NotImplemented

    def __sub__(self, o):
        return self._emit(float.__sub__(self, o), "aten.sub.Tensor", self, o) if self._num(o) else NotImplemented

    def __rsub__(self, o):
        return self._emit(float.__rsub__(self, o), "aten.rsub.Scalar", self, o) if self._num(o) else NotImplemented

    def __mul__(self, o):
        return self._emit(float.__mul__(self, o), "aten.mul.Tensor", self, o) if self._num(o) else NotImplemented

    def __rmul__(self, o):
        return self._emit(float.__rmul__(self, o), "aten.mul.Tensor", self, o) if self._num(o) else NotImplemented

    def __truediv__(self, o):
        return self._emit(float.__truediv__(self, o), "aten.div.Tensor", self, o) if self._num(o) else NotImplemented

    def __rtruediv__(self, o):
        if not self._num(o):
            return NotImplemented
        r = self._emit(float.__rtruediv__(self, 1.0), "aten.reciprocal.default", self)
        return r._emit(float.__rtruediv__(self, o), "aten.mul.Tensor", r, o) if isinstance(r, Tracked) else float.__rtruediv__(self, o)

    def __pow__(self, o, mod=None):
        if mod is not None or not self._num(o) or isinstance(o, Tracked):
            self._mark()
            return float.__pow__(self, o, mod) if mod is not None else float.__pow__(self, o)
        return self._emit(float.__pow__(self, o), "aten.pow.Tensor_Scalar", self, o)

    def __rpow__(self, o):
        if not self._num(o):
            return NotImplemented
        return self._emit(float.__rpow__(self, o), "aten.pow.Scalar", o, self)

    def __neg__(self):
        return self._emit(float.__neg__(self), "aten.neg.default", self)

    def __pos__(self):
        return self

    # Anything else leaves the traced arithmetic: the plan is specialized to the value read.
    def _leave(name):
        real = getattr(float, name)

        def f(self, *a):
            self._mark()
            return real(self, *a)
        f.__name__ = name
        return f

    for _m in ("__float__", "__int__", "__bool__", "__round__", "__trunc__", "__floor__", "__ceil__",
               "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__abs__", "__mod__",
               "__rmod__", "__floordiv__", "__rfloordiv__", "__divmod__", "__rdivmod__"):
        locals()[_m] = _leave(_m)
    del _m, _leave
    __hash__ = float.__hash__


def watch(cap):
    """Installs the read and `p.data` wrappers while `cap` traces."""
    global DT
    DT = sys.modules[type(cap).__module__].DT
    _watch_reads(cap)
    _watch_data(cap)


def unwatch():
    for m, real in _SAVED.items():
        setattr(torch.Tensor, m, real)
    _SAVED.clear()
    if "data" in torch.Tensor.__dict__:
        del torch.Tensor.data


def _watch_reads(cap):
    for m in _READS:
        real = getattr(torch.Tensor, m)
        _SAVED[m] = real

        def read(t, *a, _real=real, _m=m, **k):
            if not (cap.tracing and cap.suspended == 0 and isinstance(t, torch.Tensor)):
                return _real(t, *a, **k)
            # The capture's own reads (an undeclared tensor's values) are not the program's.
            cap.suspended += 1
            try:
                cap.note_loc()
                if _m in ("item", "__float__") and t.is_floating_point() and t.numel() == 1:
                    src = cap.fmt(t)
                    if t.dim() > 0:
                        v = cap.fresh("view")
                        cap.lines.append('%s: "%s[]" = torch.ops.aten.view.default(%s, [])' % (v, DT.get(t.dtype, "f32"), src))
                        src = v
                    note = ReadNote(cap.fresh("read"), src)
                    value = _real(t, *a, **k)
                    # A literal-looking value (a count, 1.0) may reach an op through Python the
                    # capture does not see (math.sqrt(4.0) is 2.0, a literal too): marked at once.
                    note.escaped = simple(value)
                    cap.lines.append(note)
                    cap.read_notes.append(note)
                    return Tracked(value, cap, src, DT.get(t.dtype, "f32"), {note})
                cap.lines.append("%s = torch.ops.aten._local_scalar_dense.default(%s)" % (cap.fresh("read"), cap.fmt(t)))
                return _real(t, *a, **k)
            finally:
                cap.suspended -= 1
        setattr(torch.Tensor, m, read)


def _watch_data(cap):
    """`p.data` (a new tensor object on every read, sharing p's storage; the dispatcher never
    sees it) names p's value, and a collective or `copy_` into it writes p; `p.data = t` makes p
    hold t. Installed while tracing (torch.Tensor's own attribute shadows the C one)."""
    real = torch._C._TensorBase.data

    def get(t):
        d = real.__get__(t)
        if cap.tracing and id(t) in cap.names:
            cap.names[id(d)] = cap.names[id(t)]
            cap.keep.append(d)
            cap.alias[id(d)] = t
        return d

    def put(t, v):
        real.__set__(t, v)
        if cap.tracing and id(v) in cap.names:
            cap.names[id(t)] = cap.names[id(v)]

    torch.Tensor.data = property(get, put)
