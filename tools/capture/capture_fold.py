"""Folding of constant subgraphs while `planproof capture` traces (docs/capture.md, "Constant
folding").

A tensor is *constant-derived* when every value it holds is a function of trace constants only:
the exact constants the capture writes into the graph (small module buffers, `torch.tensor`
data), the outputs of deterministic factories (`arange`, `full`, `zeros`, ...) and of
deterministic ops all of whose tensor operands are constant-derived. No plan input, parameter,
collective, sampled value (RNG) or value read into Python reaches it, so it is the same tensor
in every run of the program whatever the inputs: a function of shapes and literals only.

Such a tensor's truncation (a float-to-integer cast, `floor`, `round`, ...) has no exact rule in
the importer (an exact-real lowering could truncate differently from PyTorch's float32 where the
formula is an integer). Folded, the truncation's result is written as the constant the run
computed: exactly what the program computes on every input. T5's relative position buckets
(`torch.log` of `arange` positions, `.to(torch.long)`) are the case.

Conservative where unsure: a write in place by anything that is not itself constant-derived
(a collective, `p.data` assignment, an op reading an input) removes the mark from every tensor
sharing that storage; after a value has been read into Python, ops taking numbers propagate
no mark (the number may come from the read); uninitialized memory (`empty`) is never marked.
"""
import torch

# Truncations folded when their operand is constant-derived (each has no exact rule).
FOLD = ("aten._to_copy.default", "aten.floor.default", "aten.ceil.default", "aten.round.default",
        "aten.trunc.default", "aten.floor_divide.default", "aten.remainder.Tensor", "aten.remainder.Scalar")
# Factories whose values are not a function of their arguments.
_NOT_FACTORY = ("empty", "rand", "bernoulli", "normal", "uniform", "multinomial", "dropout", "exponential",
                "cauchy", "geometric", "log_normal", "poisson", "randperm", "set_")


def _storage(t):
    """The address of t's storage, or None where it has none to read (a wrapper subclass)."""
    try:
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        return s.data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def mark(cap, t):
    """`t` (an exact constant of the graph, or a constant-derived op output) is constant-derived."""
    key = _storage(t)
    if key is not None:
        cap.constlike[id(t)] = (t, key)


def _marked(cap, t):
    """Marked, and still over the storage it was marked with (`t.data = other` swaps it unseen)."""
    e = cap.constlike.get(id(t))
    return e is not None and e[0] is t and e[1] == _storage(t)


def invalidate(cap, t):
    """A write into `t` by something not constant-derived: no tensor sharing its storage stays marked."""
    if not cap.constlike or not isinstance(t, torch.Tensor):
        return
    key = _storage(t)
    if key is None:
        # (no storage to compare: every mark goes, conservatively)
        cap.constlike.clear()
        return
    for k in [k for k, (v, _) in cap.constlike.items() if _storage(v) == key]:
        del cap.constlike[k]


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _numbers(x):
    if isinstance(x, (list, tuple)):
        return any(_numbers(y) for y in x)
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def derived(cap, func, args, kwargs):
    """Is the op's result constant-derived? (Every tensor operand is, the op is deterministic
    and reads no uninitialized memory, and no number it takes may come from a read.)"""
    name = str(func)
    if not name.startswith("aten.") or any(w in name for w in _NOT_FACTORY):
        return False
    ops = list(args) + list(kwargs.values())
    if not all(_marked(cap, t) for t in _tensors(ops)):
        return False
    return not (cap.read_notes and any(_numbers(a) for a in ops))


def foldable(cap, func, args, kwargs, out):
    """A truncation of a constant-derived tensor to write as the run's constant."""
    name = str(func)
    if name not in FOLD or not isinstance(out, torch.Tensor) or not derived(cap, func, args, kwargs):
        return False
    src = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name == "aten._to_copy.default":
        # Only a cast that truncates (float to integer); other casts have exact rules.
        return src is not None and src.dtype.is_floating_point and not out.dtype.is_floating_point and out.dtype != torch.bool
    return True


def after(cap, func, args, kwargs, out, derived_op):
    """Keeps the marks right after an op was recorded: its outputs are marked when the op is
    constant-derived; an in-place write (or `out=`) by any other op clears its target's storage."""
    written = []
    schema = func._schema.arguments
    if schema and schema[0].alias_info is not None and schema[0].alias_info.is_write and args and isinstance(args[0], torch.Tensor):
        written.append(args[0])
    if isinstance(kwargs.get("out"), torch.Tensor):
        written.append(kwargs["out"])
    if derived_op:
        for t in list(_tensors(out)) + written:
            mark(cap, t)
    else:
        for t in written:
            invalidate(cap, t)
