"""torch.distributed's object collectives as `planproof capture` runs them (issue 33):
`all_gather_object`, `broadcast_object_list`, `gather_object`, `scatter_object_list`, which
training scripts use in their metrics and logging blocks.

An object collective pickles Python values and exchanges bytes: nothing in it is a tensor op
of the program, so the exchange runs untraced (torch's own code, the capture suspended). What
the trace must account for is what the objects carry:

- A traced float read (`loss.item()`, a `capture_reads.Tracked`) sent in an object leaves the
  process: the receiver's Python may compare it, compute with it or bake it into an op, and no
  tracer of the sender sees that. Its reads are marked by value (the verdict holds for the
  values read, `guard(t, 'eq', [v])`), the sound choice; the object is sent with plain floats.
  A plan whose twin differs only where such a read changes is then UNKNOWN, never refuted.
- A tensor inside an object is its values read into Python (pickling reads them): recorded as
  a `.tolist()` read (an `eq` guard on its values), and the receiver's copy, made by unpickling
  outside the trace, is a constant of its graph (docs/capture.md, "Tensors nobody declared").
- Plain Python values (ints, strings, bools such as a comparison's outcome, whose guard the
  comparison wrote) carry nothing traced.

The objects each rank receives are then ordinary Python values of that rank's run.
"""
import torch
import torch.distributed as dist

import capture_reads

_CURRENT = None


def install(current):
    global _CURRENT
    _CURRENT = current
    c10d = dist.distributed_c10d
    for name in ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list"):
        real = getattr(c10d, name, None)
        if real is not None:
            setattr(dist, name, _wrap(real, name))


def _plain(cap, obj, seen):
    """obj with each traced float made a plain float (its reads marked by value) and each tensor
    read (recorded when tracing); containers rebuilt, anything else as it is."""
    if id(obj) in seen:
        return obj
    if isinstance(obj, capture_reads.Tracked):
        obj._mark()
        return float.__float__(obj)
    if isinstance(obj, torch.Tensor):
        if cap.tracing:
            obj.tolist()  # the wrapped read: `_local_scalar_dense` and its eq guard
        cap.suspended += 1
        try:
            return obj.detach().clone()
        finally:
            cap.suspended -= 1
    seen = seen | {id(obj)}
    if isinstance(obj, dict):
        d = {_plain(cap, k, seen): _plain(cap, v, seen) for k, v in obj.items()}
        if type(obj) is not dict:
            try:
                return type(obj)(d)  # (an OrderedDict stays one)
            except TypeError:
                pass
        return d
    if isinstance(obj, list):
        return [_plain(cap, v, seen) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_plain(cap, v, seen) for v in obj)
    if isinstance(obj, (set, frozenset)):
        return type(obj)(_plain(cap, v, seen) for v in obj)
    if hasattr(obj, "__dict__") and any(isinstance(v, (capture_reads.Tracked, torch.Tensor)) for v in vars(obj).values()):
        # (an object of the user's class holding reads: its attributes are what gets pickled)
        for k, v in list(vars(obj).items()):
            setattr(obj, k, _plain(cap, v, seen))
    return obj


def _wrap(real, name):
    def run(*args, **kwargs):
        cap = _CURRENT[-1]
        if cap.tracing:
            cap.note_loc()
        # What this rank sends: the object (all_gather_object, gather_object), the list on src
        # (broadcast_object_list, scatter_object_list's inputs). Plain on every rank: receivers'
        # lists are overwritten anyway.
        args = list(args)
        if name in ("all_gather_object", "gather_object"):
            pos = 1 if name == "all_gather_object" else 0
            key = "obj"
        elif name == "broadcast_object_list":
            pos, key = 0, "object_list"
        else:
            pos, key = 1, "scatter_object_input_list"
        if len(args) > pos:
            args[pos] = _send(cap, args[pos], name)
        elif key in kwargs:
            kwargs[key] = _send(cap, kwargs[key], name)
        cap.suspended += 1
        try:
            return real(*args, **kwargs)
        finally:
            cap.suspended -= 1
    run.__name__ = name
    run.__wrapped__ = real
    return run


def _send(cap, obj, name):
    if obj is None:
        return obj
    plain = _plain(cap, obj, frozenset())
    if name in ("broadcast_object_list", "scatter_object_list") and isinstance(obj, list):
        # (the list is the caller's: filled in place on the receivers, read on the sender)
        obj[:] = plain
        return obj
    return plain
