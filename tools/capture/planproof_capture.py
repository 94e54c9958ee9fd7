"""Live capture of a torch.distributed training step for planproof (issue 15, docs/capture.md).

A user script defines ``step(cap)``; the driver (``python3 planproof_capture.py --nproc N
--out DIR script.py``) runs it once with world size 1 (the logical graph) and once on N gloo
processes on CPU (one graph per rank). Each run is traced at the ATen level with a
TorchDispatchMode (forward, autograd backward, optimizer step); torch.distributed collectives
are wrapped so that their group, reduce op and order are recorded. Every graph is written in
the text torch 2.x prints for a GraphModule, so ``planproof import-graphs`` reads it, with the
relations file built from the placements the script declared::

    x = cap.replicate(torch.randn(4, 8), name="x")
    w1 = cap.shard(W1.chunk(ws, 0)[rank], 0, "tp", name="w1", role="param")
    with cap.trace():
        ...
    cap.output("loss", loss, cap.R)

Written against APIs torch 2.x keeps (torch.utils._python_dispatch.TorchDispatchMode,
OpOverload names); tested with Debian's python3-torch 1.13.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

import capture_dist
import capture_fold
import capture_reads

DT = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
      torch.int64: "i64", torch.int32: "i32", torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8",
      torch.complex64: "c64", torch.complex128: "c128"}
REDUCE = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.MAX: "max", dist.ReduceOp.MIN: "min"}
if hasattr(dist.ReduceOp, "AVG"):
    REDUCE[dist.ReduceOp.AVG] = "avg"


def _is_dtensor(t):
    return hasattr(t, "placements") and callable(getattr(t, "to_local", None))


def _local_of(t):
    """This rank's shard as a leaf tensor: a parameter is then optimized where it is computed
    with (DTensor's to_local() of a parameter is a non-leaf view)."""
    local = t.to_local()
    if getattr(t, "requires_grad", False) and not (local.is_leaf and local.requires_grad):
        local = local.detach().clone().requires_grad_()
    return local


def dtensor_placement(t):
    """planproof's placement of a DTensor on a 1-D mesh (DTensor's own vocabulary: Shard(dim),
    Replicate(), Partial(reduce_op)); anything else is refused with the reason."""
    pls = list(t.placements)
    if len(pls) != 1:
        raise ValueError("DTensor on a %d-D mesh: capture supports 1-D meshes (one placement), got %r" % (len(pls), pls))
    p = pls[0]
    kind = type(p).__name__
    if kind == "Shard" or hasattr(p, "dim") and callable(getattr(p, "is_shard", None)) and p.is_shard():
        return "S(%d)" % int(p.dim)
    if kind == "Replicate":
        return "R"
    if kind in ("Partial", "_Partial"):
        op = str(getattr(p, "reduce_op", "sum")).lower()
        if "premul" in op:  # a scaled sum: not one of planproof's reductions
            raise ValueError("DTensor Partial with reduce op %r is not supported" % (op,))
        for k in ("sum", "avg", "max", "min"):
            if k in op:
                return "P(%s)" % k
        raise ValueError("DTensor Partial with reduce op %r is not supported" % (op,))
    raise ValueError("DTensor placement %r is not supported (Shard, Replicate, Partial)" % (p,))


def ann(t):
    return '"%s[%s]"' % (DT.get(t.dtype, "f32"), ", ".join(str(d) for d in t.shape))


class Capture:
    """One run's trace: tensors named by identity, lines in the printed-graph format."""

    R = "R"

    def __init__(self, world, rank, enabled=True):
        self.world, self.rank, self.enabled = world, rank, enabled
        self.names = {}          # id(tensor) -> name
        self.keep = []           # keeps traced tensors alive so ids stay unique
        self.inputs = []         # (name, tensor)
        self.relations = {}      # name -> relation entry
        self.outputs = []        # (name, tensor name, placements)
        self.values = {}         # input and output name -> values (float64, flattened)
        self.masks = []          # placements of the next dropout masks, in order
        self.auto_masks = 0      # masks sampled with no cap.mask_placement: paired by order
        self.lines = []
        self.counts = {}
        self.tracing = False
        self.suspended = 0
        self.ops = 0
        self.consts = {}         # name -> {"shape", "values", "where"}: undeclared tensors (see fmt)
        self.alias = {}          # id(t.data) -> t: `p.data` names p's storage (capture_reads)
        self.tracked = {}        # float value -> capture_reads.Tracked: numbers computed from reads
        self.tracked_all = {}    # every value a Tracked took (literal-looking ones too) -> the reads it derives from
        self.read_notes = []     # capture_reads.ReadNote of each tracked read, in order
        self.constlike = {}      # id -> tensor: constant-derived tensors (capture_fold)
        self.loc = None          # the user's source line of the op being recorded
        self.last_loc = None
        # The mesh axes, slowest first (--mesh; a 1-D mesh of --axis otherwise): placements are per axis.
        self.axes = [p.split("=")[0] for p in os.environ.get("PLANPROOF_MESH", "tp=%d" % world).split(",")]

    # ---- placements (DTensor vocabulary), declared on inputs and parameters
    def _declare(self, t, name, placement, role, values):
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError("the name %r given at %s is not a Python identifier (graph inputs are named by it): for nn.Module parameters, name.replace('.', '_') with a letter first, e.g. 'p_' + name" % (name, _user_loc() or "the step"))
        if id(t) in self.names:
            raise ValueError("tensor %s declared twice" % name)
        self.names[id(t)] = name
        self.keep.append(t)
        self.inputs.append((name, t))
        self.values[name] = t.detach().double().flatten().tolist()
        rel = {"placements": self.placements(placement, "input %s" % name)}
        if role != "input":
            rel["role"] = role
        if isinstance(values, dict):
            # {"range": [lo, hi], "also": [-100]}: an ignore index besides the range (docs/plan-format.md).
            rel["values"] = {k: list(v) for k, v in values.items()}
        elif values is not None:
            rel["values"] = {"range": list(values)}
        self.relations[name] = rel
        return t

    def placements(self, p, what):
        """One placement per mesh axis from a list, a dict {axis: placement} (other axes R), or a
        string: the placement on a 1-D mesh, or "R" on any mesh."""
        n = len(self.axes)
        if isinstance(p, dict):
            bad = [k for k in p if k not in self.axes]
            if bad:
                raise UserError("%s: axis %r is not an axis of the mesh %s" % (what, bad[0], ",".join(self.axes)))
            return [p.get(a, "R") for a in self.axes]
        if isinstance(p, (list, tuple)):
            if len(p) != n:
                raise UserError("%s: %d placement(s) for a mesh of %d axes (%s)" % (what, len(p), n, ",".join(self.axes)))
            return list(p)
        if n == 1 or p == "R":
            return [p] * n
        raise UserError("%s: on the mesh %s give one placement per axis, as a list or {axis: placement}, not %r" % (what, ",".join(self.axes), p))

    def _on(self, axis, p, what):
        if len(self.axes) == 1 and axis not in self.axes:
            # A 1-D mesh: the axis named in the script is that axis, whatever --axis called it.
            return {self.axes[0]: p}
        if axis not in self.axes:
            raise UserError("%s: axis %r is not an axis of the mesh %s" % (what, axis, ",".join(self.axes)))
        return {axis: p}

    def shard(self, t, dim, axis, name, role="input", values=None):
        return self._declare(t, name, self._on(axis, "S(%d)" % dim, "input %s" % name), role, values)

    def replicate(self, t, name, role="input", values=None):
        return self._declare(t, name, "R", role, values)

    def partial(self, t, axis, name, role="input", values=None):
        return self._declare(t, name, self._on(axis, "P(sum)", "input %s" % name), role, values)

    def param(self, t, name, role="param"):
        """A parameter whose placement Megatron's attributes give (set_tensor_model_parallel_attributes):
        tensor_model_parallel=True with partition_dim=d is S(d) on the mesh axis, otherwise R;
        a DTensor parameter's placements give it (cap.dtensor; its local tensor is returned)."""
        if _is_dtensor(t):
            return self.dtensor(t, name, role)
        if getattr(t, "tensor_model_parallel", False):
            return self._declare(t, name, self._on("tp", "S(%d)" % int(getattr(t, "partition_dim")), "parameter %s" % name), role, None)
        return self._declare(t, name, "R", role, None)

    def dtensor(self, t, name, role="input", values=None):
        """A DTensor (torch >= 2.0, torch.distributed._tensor / torch.distributed.tensor): its
        placements on a 1-D mesh give the relation (Shard(d) -> S(d), Replicate() -> R,
        Partial() -> P(sum)), and its local tensor is what this rank computes with; returns
        the local tensor. Read by duck typing (`placements`, `to_local()`), as every torch
        version that has DTensor spells them."""
        return self._declare(_local_of(t), name, dtensor_placement(t), role, values)

    def mask_placement(self, placement):
        """The placement of the next dropout's mask (a plan input, `<dropout node>.mask`): the
        placement of the activation it masks, e.g. "S(1)" after a column-parallel linear."""
        self.masks.append(placement)

    def mask_relation(self, mask):
        """A dropout mask's relation: the placement cap.mask_placement stated, else none here and
        the masks are paired by order with placements read from the shapes ("dropout": "auto",
        docs/import.md), as torch DDP with nn.Dropout needs (the mask is split like the batch)."""
        if self.masks:
            self.relations[mask] = {"placements": self.placements(self.masks.pop(0), "dropout mask")}
        else:
            self.auto_masks += 1

    def output(self, name, t, placement):
        if not self.enabled:
            return
        if id(t) not in self.names:
            raise ValueError("output %s is not a traced tensor" % name)
        self.outputs.append((name, self.names[id(t)], self.placements(placement, "output %s" % name)))
        self.values[name] = t.detach().double().flatten().tolist()

    # ---- naming
    def fresh(self, base):
        k = self.counts.get(base, 0)
        self.counts[base] = k + 1
        return base if k == 0 else "%s_%d" % (base, k)

    def bind(self, t, name, written=True):
        self.names[id(t)] = name
        self.keep.append(t)
        if written:
            # A collective's result or a write outside dispatch: not a constant any more.
            capture_fold.invalidate(self, t)
        base = self.alias.get(id(t))
        if base is not None:
            # A collective into `p.data` (dist.broadcast(p.data, src=0)) writes p.
            self.names[id(base)] = name
            if written:
                capture_fold.invalidate(self, base)

    def fmt_arg(self, func, key, a):
        """An op's argument; a float computed from a value read into Python is that traced
        value where the op takes a tensor (capture_reads)."""
        if isinstance(a, float):
            schema = func._schema.arguments
            spec = schema[key] if isinstance(key, int) and key < len(schema) else next((x for x in schema if x.name == key), None)
            name = capture_reads.arg(self, a, spec is not None and str(spec.type).startswith("Tensor"))
            if name is not None:
                return name
        return self.fmt(a)

    def fmt(self, a):
        if isinstance(a, torch.Tensor):
            n = self.names.get(id(a))
            if n is None:
                n = self.undeclared(a)
            return n
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(self.fmt(x) for x in a) + "]"
        if isinstance(a, bool) or a is None:
            return repr(a)
        if isinstance(a, (int, float)):
            return repr(a)
        if isinstance(a, str):
            return repr(a)
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            return "device(type='%s')" % a.type
        if isinstance(a, torch.memory_format) or isinstance(a, torch.layout):
            return str(a)
        raise RuntimeError("cannot print argument %r" % (a,))

    def undeclared(self, a):
        """A tensor the step reads that no cap.* call declared and no traced op made: a module
        buffer (RoPE tables), a tensor torch made from Python data inside the step (an
        optimizer's step counter, a constant). A parameter (a leaf that requires grad) must be
        declared: its placement is the user's to state. Anything else is a constant of the
        program, `const<k>` (k in order of first use), read before the op that first uses it
        runs: up to EXACT_CONST elements it is written into the graph with its exact values (a
        fill value, a step counter, a small table), which is what the program computes with;
        a larger one becomes a replicated input, and the driver checks that every rank read the
        very values the logical run read (the relation is a fact; the proof covers every value
        of it, so a program whose correctness needs these exact values may be refuted)."""
        where = self.loc or "the traced step"
        if a.requires_grad and a.is_leaf:
            raise UserError("a parameter of shape %s is used at %s but not declared: declare it with cap.param, cap.shard or cap.replicate(..., role=\"param\")" % (list(a.shape), where))
        if a.dtype not in DT:
            raise UserError("a tensor of dtype %s (shape %s) is used at %s: not supported" % (a.dtype, list(a.shape), where))
        if a.is_complex():
            # A complex buffer (Llama's freqs_cis): its (re, im) pairs as a real constant, viewed
            # as complex in the graph, view_as_complex(view_as_real(a)) being a itself. (Made
            # untraced: the capture's work; resolve_conj gives the values of a conjugate view.)
            self.suspended += 1
            try:
                pairs = torch.view_as_real(a.detach().resolve_conj()).clone()
            finally:
                self.suspended -= 1
            real = self.undeclared(pairs)
            name = "const%d" % len(self.consts)
            self.names[id(a)] = name
            self.keep.append(a)
            self.consts[name] = {"shape": list(a.shape), "values": [], "where": where, "embedded": True}
            self.lines.append('%s: %s = torch.ops.aten.view_as_complex.default(%s)' % (name, ann(a), real))
            self.constant_derived(a)
            return name
        name = "const%d" % len(self.consts)
        self.names[id(a)] = name
        self.keep.append(a)
        # Reading its values is the capture's work, not the program's: not traced.
        self.suspended += 1
        try:
            vals = a.detach().double().flatten().tolist()
        finally:
            self.suspended -= 1
        self.consts[name] = {"shape": list(a.shape), "values": vals, "where": where}
        if self.read_notes and any(not capture_reads.simple(v) or v in self.tracked_all for v in vals[:EXACT_CONST]):
            # A tensor made from Python numbers after a read (torch.tensor([x])): it may hold one.
            capture_reads.escape(self)
        if any(math.isnan(v) or v == math.inf for v in vals) or (len(vals) > EXACT_CONST and -math.inf in vals):
            raise UserError("a constant of shape %s used at %s holds NaN, +inf, or -inf in more than %d elements: not exact real values (only a small 0/-inf mask added to scores before a softmax is supported)" % (list(a.shape), where, EXACT_CONST))
        if -math.inf in vals:
            # An additive mask buffer (0 and -inf, `torch.full(..., -inf).triu(1)`): written as
            # its finite part with -inf filled where it holds -inf, the same values in a form
            # the import reads (only softmax may read it, docs/import.md).
            # (made untraced: they are the capture's, not the program's)
            self.suspended += 1
            try:
                parts = (torch.tensor([0.0 if v == -math.inf else v for v in vals], dtype=a.dtype).view(a.shape),
                         torch.tensor([v == -math.inf for v in vals]).view(a.shape))
            finally:
                self.suspended -= 1
            fin, inf = (self.undeclared(t) for t in parts)
            self.names[id(a)] = name
            self.consts[name] = {"shape": list(a.shape), "values": vals, "where": where, "embedded": True}
            dims = ", ".join(str(d) for d in a.shape)
            self.lines.append('%s: "%s[%s]" = torch.ops.aten.masked_fill.Scalar(%s, %s, -inf)' % (name, DT[a.dtype], dims, fin, inf))
            self.constant_derived(a)
            return name
        if 0 < len(vals) <= EXACT_CONST:
            self.consts[name]["embedded"] = True
            dt = DT[a.dtype]
            num = (lambda v: repr(int(v))) if not a.dtype.is_floating_point else (lambda v: repr(float(v)))
            dims = ", ".join(str(d) for d in a.shape)
            if all(v == vals[0] for v in vals):
                self.lines.append('%s: "%s[%s]" = torch.ops.aten.full.default([%s], %s)' % (name, dt, dims, dims, num(vals[0])))
            else:
                parts = []
                for i, v in enumerate(vals):
                    parts.append("%s_e%d" % (name, i))
                    self.lines.append('%s: "%s[1]" = torch.ops.aten.full.default([1], %s)' % (parts[-1], dt, num(v)))
                self.lines.append('%s_flat: "%s[%d]" = torch.ops.aten.cat.default([%s])' % (name, dt, len(vals), ", ".join(parts)))
                self.lines.append('%s: "%s[%s]" = torch.ops.aten.view.default(%s_flat, [%s])' % (name, dt, dims, name, dims))
            self.constant_derived(a)
            return name
        self.inputs.append((name, a))
        self.relations[name] = {"placements": ["R"] * len(self.axes)}
        if not a.dtype.is_floating_point and vals:
            # An integer constant: the plan needs the ids it may take; its own values, at least.
            self.relations[name]["values"] = {"range": [int(min(vals)), int(max(vals)) + 1]}
        self.values[name] = self.consts[name]["values"]
        return name

    def constant_derived(self, a):
        """An exact constant written into the graph: constant-derived unless autograd tracks it
        (computed from a parameter outside the step)."""
        if not a.requires_grad:
            capture_fold.mark(self, a)

    def name_undeclared(self, xs):
        for x in xs:
            if isinstance(x, torch.Tensor) and id(x) not in self.names:
                self.note_loc()
                self.undeclared(x)
            elif isinstance(x, (list, tuple)):
                self.name_undeclared(x)

    def routing_choices(self, ix):
        """Writes planproof.routing after a top-k / top-1 choice: the indices as the run chose them."""
        r = self.fresh("routing")
        self.suspended += 1
        try:
            chosen = [int(v) for v in ix.flatten().tolist()]
        finally:
            self.suspended -= 1
        self.lines.append("%s: %s = torch.ops.planproof.routing.default(%s, %s)" % (r, ann(ix), self.names[id(ix)], repr(chosen)))
        self.bind(ix, r)

    def positions(self, mask):
        """The positions of a mask's nonzero elements as the run found them (nonzero's result), or
        None past MASK_POSITIONS elements. The importer uses them only where it can show the mask
        is a function of constants and pinned routing choices (docs/capture.md, "Dispatch by mask")."""
        if mask.numel() > MASK_POSITIONS:
            return None
        self.suspended += 1
        try:
            return [int(v) for v in torch.nonzero(mask).flatten().tolist()]
        finally:
            self.suspended -= 1

    def record(self, func, args, kwargs, out):
        self.ops += 1
        self.note_loc()
        name = self.fresh(func.__name__.split(".")[0] if hasattr(func, "__name__") else "op")
        call = "torch.ops.%s(%s)" % (str(func), ", ".join([self.fmt_arg(func, i, a) for i, a in enumerate(args)] + ["%s = %s" % (k, self.fmt_arg(func, k, v)) for k, v in kwargs.items()]))
        if str(func) == "aten.nonzero.default" and isinstance(args[0], torch.Tensor):
            # A size that depends on the data: written with the positions the run found.
            pos = self.positions(args[0])
            if pos is not None:
                call = "torch.ops.planproof.positions.default(%s, %s)" % (self.fmt_arg(func, 0, args[0]), repr(pos))
        if str(func) in MASK_INDEXING and len(args) > 1 and isinstance(args[1], (list, tuple)):
            # x[mask], x[mask] = v: each boolean index's positions, for the importer to index by.
            for m in args[1]:
                if isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.dim() > 0 and id(m) in self.names:
                    pos = self.positions(m)
                    if pos is not None:
                        self.lines.append("%s: \"i64[%d, %d]\" = torch.ops.planproof.positions.default(%s, %s)" % (self.fresh("positions"), len(pos) // max(1, m.dim()), m.dim(), self.names[id(m)], repr(pos)))
        derived = capture_fold.derived(self, func, args, kwargs)
        if capture_fold.foldable(self, func, args, kwargs, out) and 0 < out.numel() <= EXACT_CONST:
            # A truncation of constants only (T5's buckets): the run's values, exact on every input.
            self.consts[self.undeclared(out)]["folded"] = str(func)
            return
        try:
            self.record_op(func, args, kwargs, out, name, call)
        finally:
            capture_fold.after(self, func, args, kwargs, out, derived)

    def record_op(self, func, args, kwargs, out, name, call):
        if str(func) in ("aten.bernoulli_.float", "aten.bernoulli_.Tensor"):
            # CPU dropout's mask: a plan input (docs/import.md), with its relation and values.
            self.mask_relation(name + ".mask")
            self.values[name + ".mask"] = out.detach().double().flatten().tolist()
        if str(func) in SAMPLES:
            # Noise drawn in the step (a VAE's randn_like): a plan input like a dropout mask,
            # paired by order; its values for the golden check (plans/import/aten-sample.ts).
            self.mask_relation(name + ".sample")
            self.values[name + ".sample"] = out.detach().double().flatten().tolist()
        if isinstance(out, torch.Tensor):
            if func._schema.arguments and func._schema.arguments[0].alias_info is not None and func._schema.arguments[0].alias_info.is_write and isinstance(args[0], torch.Tensor):
                # In-place: the written tensor keeps its name (the reader rebinds it).
                self.lines.append("%s: %s = %s" % (name, ann(out), call))
                if out is not args[0]:
                    self.bind(out, name, written=False)
                return
            self.lines.append("%s: %s = %s" % (name, ann(out), call))
            self.bind(out, name, written=False)
            if str(func) == "aten.argmax.default" and _last_dim(args) and out.numel() <= 4096:
                # A top-1 routing choice (Switch's argmax), recorded as topk's are.
                self.routing_choices(out)
        elif isinstance(out, (tuple, list)):
            self.lines.append("%s = %s" % (name, call))
            if str(func) == "aten.native_dropout.default" and len(out) == 2:
                # The sampled mask is a plan input (docs/import.md): its relation and its values.
                self.mask_relation(name + ".mask")
                self.values[name + ".mask"] = out[1].detach().double().flatten().tolist()
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    g = self.fresh("getitem")
                    self.lines.append("%s: %s = %s[%d]" % (g, ann(o), name, i))
                    self.bind(o, g, written=False)
            if (str(func) == "aten.topk.default" or (str(func) == "aten.max.dim" and _last_dim(args))) and len(out) == 2 and out[1].numel() <= 4096:
                # The routing choices as chosen: the importer pins them where a value read into
                # Python (split sizes from .tolist()) depends on them (docs/capture.md).
                self.routing_choices(out[1])
        elif out is None:
            self.lines.append("%s = %s" % (name, call))

    # ---- collectives
    def group_name(self, group):
        if group is None or group is dist.group.WORLD:
            return "world"
        return _GROUPS[id(group)][0]

    def reduce_name(self, op):
        r = REDUCE.get(op, None) if op is not None else None
        if r is None:
            raise UserError("reduce op %s at %s is not supported (SUM, AVG, MAX, MIN)" % (op, _user_loc() or "the step"))
        return r

    def collective(self, kind, t, op, group):
        if kind == "all_reduce":
            self.lines.append("%s: %s = torch.ops._c10d_functional.all_reduce_.default(%s, '%s', '%s')" % (self.fresh("all_reduce"), ann(t), self.fmt(t), self.reduce_name(op), self.group_name(group)))
        # (after fmt, which may have named t as a constant)
        capture_fold.invalidate(self, t)

    def note_loc(self):
        """The user's line of what is recorded next, as a `# File:` comment (as torch 2.x's
        print_readable writes it) when it changed; the importer names it in errors."""
        self.loc = _user_loc()
        if self.loc is not None and self.loc != self.last_loc:
            self.lines.append("# File: %s" % self.loc)
            self.last_loc = self.loc

    def concat(self, ts):
        """A traced torch.cat of `ts` along dim 0 (the flat input of an emulated collective)."""
        if len(ts) == 1:
            return self.fmt(ts[0])
        shape = (sum(t.shape[0] for t in ts),) + tuple(ts[0].shape[1:])
        name = self.fresh("cat")
        self.lines.append('%s: "%s[%s]" = torch.ops.aten.cat.default(%s)' % (name, DT.get(ts[0].dtype, "f32"), ", ".join(str(d) for d in shape), self.fmt(list(ts))))
        return name

    def copy_into(self, out, src):
        """`out` now holds a copy of the traced `src` (a collective over a group of one)."""
        name = self.fresh("clone")
        self.lines.append("%s: %s = torch.ops.aten.clone.default(%s)" % (name, ann(out), self.fmt(src)))
        self.bind(out, name)

    def pieces(self, outs, whole):
        """Binds each of `outs` to its slice along dim 0 of the traced tensor `whole` (a 0-d
        entry to its element)."""
        at = 0
        for o in outs:
            k = o.shape[0] if o.dim() > 0 else 1
            s = self.fresh("slice")
            self.lines.append('%s: "%s[%s]" = torch.ops.aten.slice.Tensor(%s, 0, %d, %d)' % (s, DT.get(o.dtype, "f32"), ", ".join(str(d) for d in (k,) + tuple(o.shape[1:])), whole, at, at + k))
            if o.dim() == 0:
                v = self.fresh("view")
                self.lines.append("%s: %s = torch.ops.aten.view.default(%s, [])" % (v, ann(o), s))
                s = v
            self.bind(o, s)
            at += k

    def gathered(self, t, group, size):
        """One traced all_gather_into_tensor of `t` along dim 0 over `group` (a 0-d `t` as [1]):
        the name of the gathered tensor."""
        src = self.fmt(t)
        n = t.shape[0] if t.dim() > 0 else 1
        if t.dim() == 0:
            v = self.fresh("view")
            self.lines.append('%s: "%s[1]" = torch.ops.aten.view.default(%s, [1])' % (v, DT.get(t.dtype, "f32"), src))
            src = v
        name = self.fresh("all_gather")
        full = '"%s[%s]"' % (DT.get(t.dtype, "f32"), ", ".join(str(d) for d in (n * size,) + tuple(t.shape[1:])))
        self.lines.append("%s: %s = torch.ops._c10d_functional.all_gather_into_tensor.default(%s, %d, '%s')" % (name, full, src, size, self.group_name(group)))
        return name

    def gather(self, tensor_list, t, group):
        """dist.all_gather(list, t): one all_gather_into_tensor along dim 0, each list entry a slice of it."""
        ws = len(tensor_list)
        if ws == 1:
            # World size 1 (the logical run): the entry is the tensor itself.
            self.bind(tensor_list[0], self.fmt(t))
            return
        self.pieces(tensor_list, self.gathered(t, group, ws))

    def trace(self):
        # An untraced capture (the overhead benchmark's baseline) runs the step as it is.
        return _Mode(self) if self.enabled else contextlib.nullcontext()

    def text(self):
        sig = ", ".join("%s: %s" % (n, ann(t)) for n, t in self.inputs)
        body = ["class train_step(torch.nn.Module):", "    def forward(self, %s):" % sig]
        # A read whose value stayed in traced arithmetic leaves no mark (capture_reads).
        body += ["        " + (l if isinstance(l, str) else l.line()) for l in self.lines if isinstance(l, str) or l.escaped]
        body.append("        return (%s,)" % ", ".join(n for _, n, _ in self.outputs))
        return "\n".join(body) + "\n"


EXACT_CONST = 4096  # elements up to which an undeclared tensor is written into the graph exactly
# Sampling ops whose draws become plan inputs (plans/import/aten-sample.ts).
SAMPLES = ("aten.randn_like.default", "aten.rand_like.default", "aten.randn.default", "aten.rand.default",
           # in place: F.gumbel_softmax's empty_like(x).exponential_(), noise by .normal_() / .uniform_()
           "aten.exponential_.default", "aten.normal_.default", "aten.uniform_.default")
MASK_POSITIONS = 4096  # elements of a mask up to which nonzero's positions are written (docs/capture.md)
MASK_INDEXING = ("aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default", "aten._index_put_impl_.default")


def _last_dim(args):
    """Is the op's dim argument (args[1]) the last dim of args[0]? (a top-1 choice over experts)"""
    return len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], int) and args[1] in (-1, args[0].dim() - 1)


class UserError(Exception):
    """A mistake in the user's script or declarations: printed as one line, exit 2."""


# (this file and capture_dist.py, which wraps torch.distributed)
_SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)) + os.sep, "<frozen", os.path.dirname(contextlib.__file__))


def _user_loc():
    """`file:line in function, code: text` of the innermost frame outside torch, the Python
    library and this file: the line of the user's script that made the op being recorded."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP):
            import linecache
            code = linecache.getline(fn, f.f_lineno).strip()
            rel = os.path.relpath(fn)
            return "%s:%d in %s, code: %s" % (fn if rel.startswith("..") else rel, f.f_lineno, f.f_code.co_name, code[:200])
        f = f.f_back
    return None


class _Mode(TorchDispatchMode):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.cap.suspended == 0 and not str(func).startswith("profiler."):
            # Constants are read before the op runs (an in-place op would change them first).
            self.cap.suspended += 1
            try:
                self.cap.name_undeclared(list(args) + list(kwargs.values()))
            finally:
                self.cap.suspended -= 1
        out = func(*args, **kwargs)
        # Profiler markers (Optimizer.step's record_function) are not computation.
        if self.cap.suspended == 0 and not str(func).startswith("profiler."):
            # What record() reads (a dropout mask's values) is the capture's, not the program's.
            self.cap.suspended += 1
            try:
                self.cap.record(func, args, kwargs, out)
            finally:
                self.cap.suspended -= 1
        return out

    def __enter__(self):
        self.cap.tracing = True
        capture_reads.watch(self.cap)
        return super().__enter__()

    def __exit__(self, *a):
        self.cap.tracing = False
        capture_reads.unwatch()
        return super().__exit__(*a)


_CURRENT = []
_GROUPS = {}  # id(process group) -> (name, sorted ranks), in creation order (the same on every rank)


def _run_one(rank, world, script, outdir, port, args, bench, values):
    try:
        _run_one_traced(rank, world, script, outdir, port, args, bench, values)
    except UserError as e:
        # Told to the driver through a file: mp.spawn turns a child's exception into a traceback.
        with open(os.path.join(outdir, "error.%s.txt" % ("logical" if world == 1 else rank)), "w") as f:
            f.write(str(e))
        sys.exit(2)


def _run_one_traced(rank, world, script, outdir, port, args, bench, values):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    capture_dist.install(sys.modules[__name__])
    sys.argv = [script] + args
    mod = capture_reads.load_script(script)

    def run(enabled):
        cap = Capture(world, rank, enabled)
        _CURRENT.append(cap)
        dist.barrier()
        t0 = time.perf_counter()
        mod.step(cap)
        ms = (time.perf_counter() - t0) * 1000
        _CURRENT.pop()
        return cap, ms

    cap, ms = run(True)
    timing = {}
    if bench > 0:
        # Overhead: the median step time traced and untraced (each run starts from a barrier).
        plain = sorted(run(False)[1] for _ in range(bench))
        traced = sorted(run(True)[1] for _ in range(bench))
        timing = {"plain_ms": plain[bench // 2], "traced_ms": traced[bench // 2]}
    name = "logical.py" if world == 1 else "rank%d.py" % rank
    text = cap.text()
    with open(os.path.join(outdir, name), "w") as f:
        f.write(text)
    if world == 1 and not values:
        # (values.json below holds the same inputs; the importer reads either)
        capture_reads.write_run_inputs(cap, text, os.path.join(outdir, "inputs.json"))
    meta = {"relations": cap.relations, "outputs": [[n, p, t] for n, t, p in cap.outputs], "ops": cap.ops, "ms": ms,
            "groups": {v[0]: v[1] for v in _GROUPS.values()}, "consts": cap.consts, "auto_masks": cap.auto_masks}
    meta.update(timing)
    if world == 1 and values:
        # The logical run's input and output values: what the imported logical graph must compute.
        with open(os.path.join(outdir, "values.json"), "w") as f:
            json.dump(cap.values, f)
    with open(os.path.join(outdir, "meta.%s.json" % ("logical" if world == 1 else rank)), "w") as f:
        json.dump(meta, f)
    dist.destroy_process_group()


def _spawn(world, script, outdir, args, bench=0, values=False):
    import torch.multiprocessing as mp
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    try:
        mp.spawn(_run_one, args=(world, script, outdir, port, args, bench, values), nprocs=world, join=True)
    except Exception:
        for name in ["error.logical.txt"] + ["error.%d.txt" % r for r in range(world)]:
            p = os.path.join(outdir, name)
            if os.path.exists(p):
                raise UserError(("" if world == 1 else "(%s) " % name[6:-4].replace("logical", "1 process")) + open(p).read())
        raise


def _merged_outputs(outdir, logical, metas):
    """The contract outputs, in the 1-process run's order, each with its placements from the ranks
    that hold it (a pipeline's loss is on its last stage only): each rank's graph returns them in
    that order, None where the rank does not hold one."""
    order = [n for n, _, _ in logical["outputs"]]
    placements = {}
    for r, m in enumerate(metas):
        for n, p, _ in m["outputs"]:
            if n not in order:
                raise UserError("rank %d states the output %s, which the 1-process run does not" % (r, n))
            if n in placements and placements[n][1] != p:
                raise UserError("output %s is stated as %s on rank %d and %s on rank %d" % (n, placements[n][1], placements[n][0], p, r))
            placements.setdefault(n, (r, p))
    missing = [n for n in order if n not in placements]
    if missing:
        raise UserError("output %s is stated by the 1-process run but by no rank (cap.output on the rank that holds it)" % missing[0])
    for r, m in enumerate(metas):
        held = {n: t for n, _, t in m["outputs"]}
        path = os.path.join(outdir, "rank%d.py" % r)
        lines = open(path).read().rstrip("\n").split("\n")
        lines[-1] = "        return (%s,)" % ", ".join(held.get(n, "None") for n in order)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    return [{"name": n, "placements": placements[n][1]} for n in order]


def _merged_relations(metas):
    """Every rank's declarations (a pipeline declares each input on the rank that holds it): a
    name declared on several ranks must be declared alike."""
    out = {}
    for r, m in enumerate(metas):
        for name, rel in m["relations"].items():
            prev = out.get(name)
            if prev is not None and prev[1] != rel:
                raise UserError("input %s is declared differently on rank %d (%s) and rank %d (%s)" % (name, prev[0], json.dumps(prev[1]), r, json.dumps(rel)))
            out.setdefault(name, (r, rel))
    return {k: v[1] for k, v in out.items()}


def _check_consts(logical, metas):
    """Undeclared tensors (Capture.undeclared) are replicated inputs only if every rank read
    exactly what the logical run read; otherwise the user must state their placement."""
    for r, m in enumerate(metas):
        for name, c in m["consts"].items():
            if c.get("embedded"):
                continue  # its exact values are in the rank's graph: compared by the proof itself
            ref = logical["consts"].get(name)
            if ref is None or ref["shape"] != c["shape"] or ref["values"] != c["values"]:
                what = "has no counterpart in the 1-process run" if ref is None else "differs from what the 1-process run read there (%s)" % ref["where"]
                raise UserError("rank %d reads a tensor no cap.* call declared (shape %s) at %s; it %s: declare it with cap.shard or cap.replicate so its placement is stated" % (r, c["shape"], c["where"], what))
    for name, c in logical["consts"].items():
        if not c.get("embedded") and any(name not in m["consts"] for m in metas):
            raise UserError("the 1-process run reads a tensor no cap.* call declared (shape %s) at %s that the ranks do not read in the same order: declare it with cap.replicate or cap.shard" % (c["shape"], c["where"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--axis", default="tp")
    ap.add_argument("--reference", help="the user's single-device script: the logical run (default: the script at world size 1)")
    ap.add_argument("--mesh", help="axes slowest first, e.g. dp=2,tp=2 (default: a 1-D mesh of --axis)")
    ap.add_argument("--out", required=True, help="directory for logical.py, rank*.py, relations.json")
    ap.add_argument("--bench", type=int, default=0, help="also time the step this many times untraced and traced (capture-stats.json)")
    ap.add_argument("--values", action="store_true", help="write the logical run's input and output values (values.json)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    mesh = [(p.split("=")[0], int(p.split("=")[1])) for p in (a.mesh or "%s=%d" % (a.axis, a.nproc)).split(",")]
    if math.prod(s for _, s in mesh) != a.nproc:
        raise UserError("--mesh %s is not %d processes" % (a.mesh, a.nproc))
    os.environ["PLANPROOF_MESH"] = ",".join("%s=%d" % m for m in mesh)
    _spawn(1, a.reference or a.script, a.out, a.args, 0, a.values)
    _spawn(a.nproc, a.script, a.out, a.args, a.bench)
    metas = [json.load(open(os.path.join(a.out, "meta.%d.json" % r))) for r in range(a.nproc)]
    logical = json.load(open(os.path.join(a.out, "meta.logical.json")))
    _check_consts(logical, metas)
    rel = {"format": "planproof-relations/v1", "mesh": {"axes": [{"name": n, "size": s} for n, s in mesh]},
           "inputs": _merged_relations(metas),
           "outputs": _merged_outputs(a.out, logical, metas)}
    groups = {"world": list(range(a.nproc))}
    for m in metas:
        groups.update(m["groups"])
    rel["groups"] = {k: {"ranks": v} for k, v in groups.items()}
    if any(m.get("auto_masks", 0) > 0 for m in metas + [logical]):
        rel["dropout"] = "auto"
    with open(os.path.join(a.out, "relations.json"), "w") as f:
        json.dump(rel, f, indent=1)
    stats = {"seconds": time.perf_counter() - t0, "logical_ops": logical["ops"], "rank_ops": [m["ops"] for m in metas],
             "logical_ms": logical["ms"], "rank_ms": [m["ms"] for m in metas]}
    if a.bench > 0:
        stats["plain_ms"] = [m["plain_ms"] for m in metas]
        stats["traced_ms"] = [m["traced_ms"] for m in metas]
    with open(os.path.join(a.out, "capture-stats.json"), "w") as f:
        json.dump(stats, f)
    print(json.dumps(stats))


if __name__ == "__main__":
    try:
        main()
    except UserError as e:
        print("planproof capture: %s" % e, file=sys.stderr)
        sys.exit(2)
