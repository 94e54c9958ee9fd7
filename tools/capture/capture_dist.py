"""torch.distributed as `planproof capture` runs it (docs/capture.md): the collectives a
training script calls, wrapped so that each call is recorded in the trace with its group,
reduce op and order, and run on gloo (emulated where gloo under torch 1.13 has none); and
torch DDP's C++ reducer replaced by a Python module with DDP's semantics (and SyncBatchNorm,
GPU-only in torch 1.13, by capture_syncbn.py's stand-in).

Installed into the capture module (planproof_capture.py) by `install(module)`: the trace in
progress (`_CURRENT`), the named groups (`_GROUPS`) and the error type are that module's.
"""
import contextlib

import torch
import torch.distributed as dist

import capture_objects
import capture_sched
import capture_syncbn

_CURRENT = _GROUPS = UserError = DT = ann = None
_REAL_ALL_REDUCE = []   # torch's own all_reduce, for the capture's untraced exchanges


def install(m):
    """Wraps torch.distributed's collectives, installs the DDP module and the SyncBatchNorm
    stand-in (once per process)."""
    global _CURRENT, _GROUPS, UserError, DT, ann
    _CURRENT, _GROUPS, UserError, DT, ann = m._CURRENT, m._GROUPS, m.UserError, m.DT, m.ann
    real_all_reduce = dist.all_reduce
    _REAL_ALL_REDUCE[:] = [real_all_reduce]
    _wrap_collectives()
    _install_ddp()
    capture_syncbn.install(_CURRENT, real_all_reduce)
    capture_objects.install(_CURRENT)
    capture_sched.install()


class _Done:
    """The Work of a call run eagerly (an emulated collective, an isend / irecv, an all-reduce
    asked for with async_op=True). `result`: the tensors its future holds (all_reduce's)."""

    def __init__(self, result=None):
        self._result = result

    def wait(self, *a, **k):
        return True

    def result(self):
        return list(self._result or [])

    def get_future(self):
        # Already completed, so a `.then(callback)` runs the callback at once on this thread,
        # where the tracer sees its ops (a real gloo future may run it on gloo's thread).
        if self._result is None:
            raise UserError("get_future() of this emulated collective is not supported: wait on it instead")
        fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut

    def is_completed(self):
        return True


def _size(group):
    return dist.get_world_size(group) if group is not None else dist.get_world_size()


def _is_avg(op):
    return hasattr(dist.ReduceOp, "AVG") and op == dist.ReduceOp.AVG


def _product(cap, gathered, t, size):
    """The product of the `size` slices along dim 0 of the traced `gathered`, in group order."""
    n = t.shape[0] if t.dim() > 0 else 1
    whole = gathered
    acc = None
    for i in range(size):
        s = cap.fresh("slice")
        cap.lines.append("%s: %s = torch.ops.aten.slice.Tensor(%s, 0, %d, %d)" % (s, '"%s[%s]"' % (DT.get(t.dtype, "f32"), ", ".join(str(d) for d in ((n,) + tuple(t.shape[1:])))), whole, i * n, (i + 1) * n))
        if acc is None:
            acc = s
            continue
        m = cap.fresh("mul")
        cap.lines.append("%s: %s = torch.ops.aten.mul.Tensor(%s, %s)" % (m, '"%s[%s]"' % (DT.get(t.dtype, "f32"), ", ".join(str(d) for d in ((n,) + tuple(t.shape[1:])))), acc, s))
        acc = m
    if t.dim() == 0:
        v = cap.fresh("view")
        cap.lines.append("%s: %s = torch.ops.aten.view.default(%s, [])" % (v, ann(t), acc))
        acc = v
    return acc


def _wrap_collectives():
    real_all_reduce = dist.all_reduce
    real_new_group = dist.new_group

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        cap = _CURRENT[-1]
        size = _size(group)
        if cap.tracing and size > 1:
            cap.note_loc()
            if op == dist.ReduceOp.PRODUCT:
                # No product reduction in the plan: the product of the gathered members, in group order.
                cap.bind(tensor, _product(cap, cap.gathered(tensor, group, size), tensor, size))
            else:
                cap.collective("all_reduce", tensor, op, group)
        # The real call is not recorded: its internals are not the program's ops.
        cap.suspended += 1
        try:
            if _is_avg(op):
                # gloo has no AVG: the sum, divided by the group size.
                work = real_all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
                with torch.no_grad():
                    tensor.div_(size)
                return _Done([tensor]) if async_op else work
            if async_op:
                # Run to completion here: the traced value is the reduced one at once, and a
                # continuation (`work.get_future().then(...)`, DDP communication hooks) runs on
                # this thread, where its ops are traced.
                real_all_reduce(tensor, op=op, group=group)
                return _Done([tensor])
            return real_all_reduce(tensor, op=op, group=group)
        finally:
            cap.suspended -= 1

    real_all_gather = dist.all_gather

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        cap = _CURRENT[-1]
        # The real call is not recorded (its copies into the list are not the program's ops);
        # the list entries are then bound to slices of the gathered tensor.
        cap.suspended += 1
        try:
            r = real_all_gather(tensor_list, tensor, group=group, async_op=async_op)
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.gather(tensor_list, tensor, group)
        return r

    def new_group(ranks=None, *a, **k):
        g = real_new_group(ranks, *a, **k)
        rs = sorted(ranks) if ranks is not None else list(range(dist.get_world_size()))
        if g is not None and g is not dist.GroupMember.NON_GROUP_MEMBER:
            # Named by membership: every process names a group alike, whichever groups it is in.
            _GROUPS[id(g)] = ("g" + "_".join(str(r) for r in rs), rs)
        return g

    real_broadcast = dist.broadcast

    def broadcast(tensor, src, group=None, async_op=False):
        cap = _CURRENT[-1]
        size = dist.get_world_size(group) if group is not None else dist.get_world_size()
        if cap.tracing and size > 1:
            cap.note_loc()
            name = cap.fresh("broadcast")
            cap.lines.append("%s: %s = torch.ops._c10d_functional.broadcast.default(%s, %d, '%s')" % (name, ann(tensor), cap.fmt(tensor), src, cap.group_name(group)))
            cap.bind(tensor, name)
        cap.suspended += 1
        try:
            return real_broadcast(tensor, src, group=group, async_op=async_op)
        finally:
            cap.suspended -= 1

    def _group_rank(group):
        return dist.get_rank(group) if group is not None else dist.get_rank()

    def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
        """gloo under torch 1.13 has no reduce-scatter: all-reduce of the concatenated inputs,
        this rank's chunk taken (said in docs/capture.md); traced as one reduce_scatter_tensor."""
        cap = _CURRENT[-1]
        size = len(input_list)
        if cap.tracing and size > 1:
            cap.note_loc()
            flat = cap.concat(input_list)
            name = cap.fresh("reduce_scatter")
            cap.lines.append("%s: %s = torch.ops._c10d_functional.reduce_scatter_tensor.default(%s, '%s', %d, '%s')" % (name, ann(output), flat, cap.reduce_name(op), size, cap.group_name(group)))
        cap.suspended += 1
        try:
            buf = torch.cat([t.detach() for t in input_list]).clone()
            real_all_reduce(buf, op=op, group=group)
            with torch.no_grad():
                output.copy_(buf.chunk(size)[_group_rank(group)])
        finally:
            cap.suspended -= 1
        if cap.tracing and size > 1:
            cap.bind(output, name)
        elif cap.tracing:
            cap.copy_into(output, input_list[0])
        return None

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        size = dist.get_world_size(group) if group is not None else dist.get_world_size()
        return reduce_scatter(output, list(input.chunk(size)), op=op, group=group, async_op=async_op)

    def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
        """Emulated with all_gather (gloo under torch 1.13 has no all-to-all); traced as one
        all_to_all_single of the concatenated inputs, each output a slice of its result."""
        cap = _CURRENT[-1]
        size = len(input_tensor_list)
        if cap.tracing and size > 1:
            cap.note_loc()
            if len({t.shape for t in input_tensor_list}) != 1:
                raise UserError("all_to_all with uneven pieces at %s is not supported" % (cap.loc or "the step"))
            flat = cap.concat(input_tensor_list)
            name = cap.fresh("all_to_all")
            whole = sum(t.shape[0] for t in input_tensor_list)
            shape = (whole,) + tuple(input_tensor_list[0].shape[1:])
            cap.lines.append('%s: "%s[%s]" = torch.ops._c10d_functional.all_to_all_single.default(%s, None, None, \'%s\')' % (name, DT.get(input_tensor_list[0].dtype, "f32"), ", ".join(str(d) for d in shape), flat, cap.group_name(group)))
        cap.suspended += 1
        try:
            me = _group_rank(group)
            flat_in = torch.cat([t.detach() for t in input_tensor_list]).contiguous()
            everyone = [torch.empty_like(flat_in) for _ in range(size)]
            real_all_gather(everyone, flat_in, group=group)
            with torch.no_grad():
                for j, o in enumerate(output_tensor_list):
                    o.copy_(everyone[j].chunk(size)[me])
        finally:
            cap.suspended -= 1
        if cap.tracing and size > 1:
            cap.pieces(output_tensor_list, name)
        elif cap.tracing:
            cap.copy_into(output_tensor_list[0], input_tensor_list[0])
        return None

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        """Emulated with all_gather (gloo under torch 1.13 fails alltoall_base). Uneven split
        sizes (Python ints, e.g. read with .tolist(): the plan is then specialized to them) are
        traced exactly as an even all_to_all_single of chunks padded with zero rows to the
        largest split of any member, the received rows sliced out of each padded chunk."""
        cap = _CURRENT[-1]
        size = _size(group)
        n = input.shape[0]
        ins = list(input_split_sizes) if input_split_sizes else [n // size] * size
        m = output.shape[0]
        outs = list(output_split_sizes) if output_split_sizes else [m // size] * size
        if len(ins) != size or len(outs) != size or sum(ins) != n or sum(outs) != m:
            raise UserError("all_to_all_single at %s: split sizes %r / %r do not match the tensors' %d / %d rows on %d members" % (cap.loc or "the step", ins, outs, n, m, size))
        if cap.tracing and size == 1:
            cap.copy_into(output, input)
        cap.suspended += 1
        try:
            me = _group_rank(group)
            peak = torch.tensor([max(ins)], dtype=torch.int64)
            real_all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
            c = int(peak[0])
            rest = tuple(input.shape[1:])
            pad = [torch.cat([p, p.new_zeros((c - p.shape[0],) + rest)]) for p in input.detach().split(ins)]
            flat_in = torch.cat(pad).contiguous()
            everyone = [torch.empty_like(flat_in) for _ in range(size)]
            real_all_gather(everyone, flat_in, group=group)
            with torch.no_grad():
                output.copy_(torch.cat([everyone[j][me * c:me * c + outs[j]] for j in range(size)]))
        finally:
            cap.suspended -= 1
        if cap.tracing and size > 1:
            cap.note_loc()
            _trace_uneven(cap, output, input, ins, outs, c, size, group)
        return _Done() if async_op else None

    real_send, real_recv = dist.send, dist.recv

    def send(tensor, dst, group=None, tag=0):
        cap = _CURRENT[-1]
        if cap.tracing:
            cap.note_loc()
            cap.lines.append("%s = torch.ops.planproof.send.default(%s, %d)" % (cap.fresh("send"), cap.fmt(tensor), dst))
        cap.suspended += 1
        try:
            return real_send(tensor, dst, group=group, tag=tag)
        finally:
            cap.suspended -= 1

    def recv(tensor, src=None, group=None, tag=0):
        cap = _CURRENT[-1]
        if src is None:
            raise UserError("dist.recv without src (from any rank) is not supported: name the sender")
        cap.suspended += 1
        try:
            r = real_recv(tensor, src, group=group, tag=tag)
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.note_loc()
            name = cap.fresh("recv")
            cap.lines.append("%s: %s = torch.ops.planproof.recv.default(%d)" % (name, ann(tensor), src))
            cap.bind(tensor, name)
        return r

    # Eager isend/irecv would deadlock when both peers send first: run them as the blocking pair
    # in an order gloo accepts, send-first ranks by rank order (docs/capture.md).
    def isend(tensor, dst, group=None, tag=0):
        send(tensor, dst, group=group, tag=tag)
        return _Done()

    def irecv(tensor, src=None, group=None, tag=0):
        recv(tensor, src, group=group, tag=tag)
        return _Done()

    dist.all_reduce = all_reduce
    dist.all_gather = all_gather
    dist.new_group = new_group
    dist.broadcast = broadcast
    dist.reduce_scatter = reduce_scatter
    if hasattr(dist, "reduce_scatter_tensor"):
        dist.reduce_scatter_tensor = reduce_scatter_tensor
    if hasattr(dist, "_reduce_scatter_base"):
        dist._reduce_scatter_base = reduce_scatter_tensor
    dist.all_to_all = all_to_all
    dist.all_to_all_single = all_to_all_single
    real_isend, real_irecv = dist.isend, dist.irecv
    ours = (isend, irecv, real_isend, real_irecv)

    def _check_op(op):
        # P2POp checks its op against torch's own isend / irecv: the wrapped ones are those too.
        if op not in ours:
            raise RuntimeError("Invalid ``op``. Expected ``op`` to be of type ``torch.distributed.isend`` or ``torch.distributed.irecv``.")

    def batch_isend_irecv(p2p_op_list):
        """Megatron's pipeline exchange: every send posted (recorded as planproof.send, in list
        order), every receive posted, all waited on; then each receive recorded as planproof.recv
        (matched in order per pair, as the loader matches them). Ranks that both send first do
        not block: the real isend / irecv run asynchronously."""
        cap = _CURRENT[-1]
        works, received = [], []
        cap.suspended += 1
        try:
            for p in p2p_op_list:
                if p.op in (isend, real_isend):
                    if cap.tracing:
                        cap.suspended -= 1
                        try:
                            cap.note_loc()
                            cap.lines.append("%s = torch.ops.planproof.send.default(%s, %d)" % (cap.fresh("send"), cap.fmt(p.tensor), p.peer))
                        finally:
                            cap.suspended += 1
                    works.append(real_isend(p.tensor, p.peer, group=p.group, tag=p.tag))
                else:
                    works.append(real_irecv(p.tensor, p.peer, group=p.group, tag=p.tag))
                    received.append(p)
            for w in works:
                w.wait()
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.note_loc()
            for p in received:
                name = cap.fresh("recv")
                cap.lines.append("%s: %s = torch.ops.planproof.recv.default(%d)" % (name, ann(p.tensor), p.peer))
                cap.bind(p.tensor, name)
        return [_Done() for _ in p2p_op_list]

    dist.send, dist.recv, dist.isend, dist.irecv = send, recv, isend, irecv
    dist.distributed_c10d._check_op = _check_op
    dist.batch_isend_irecv = batch_isend_irecv
    _wrap_rooted(real_all_reduce, real_all_gather)


class _DDP(torch.nn.Module):
    """torch.nn.parallel.DistributedDataParallel as the capture runs it: its all-reduce runs in
    C++ (the reducer), which no Python tracer sees, so the capture puts this module in its place.
    Same semantics, as DDP documents them: parameters broadcast from rank 0 at construction;
    after a backward whose forward ran outside `no_sync()`, every gradient is all-reduced over
    the process group and divided by its size (buckets change the grouping, not the values);
    inside `no_sync()` gradients accumulate locally. The all-reduces go through the traced
    dist.all_reduce, so the plan has them. Said in docs/capture.md."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False):
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.require_backward_grad_sync = True
        self._find_unused = find_unused_parameters
        self._sync_this_backward = False
        self._queued = False
        # As DDP's _sync_module_states: parameters and buffers from the group's first member
        # (its rank 0 in the group, which is global rank 0 only for the whole world: a DDP over
        # a data-parallel group [1, 3] of a dp x tp mesh broadcasts from rank 1).
        src = 0 if process_group is None else dist.get_global_rank(process_group, 0)
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                if t.dtype == torch.bool:
                    # gloo carries no bool ("Invalid scalar type": GPT-2's causal-mask buffer):
                    # the same values as bytes, copied back.
                    b = t.data.to(torch.uint8)
                    dist.broadcast(b, src=src, group=process_group)
                    t.data.copy_(b.to(torch.bool))
                else:
                    dist.broadcast(t.data, src=src, group=process_group)
        # As DDP's reducer: the parameters it averages are those the module had at construction.
        # A parameter assigned to the module afterwards is not averaged (iterating
        # module.parameters() at sync time averaged it, and a real bug was VERIFIED).
        self._names = [n for n, p in module.named_parameters() if p.requires_grad]
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._hook = None
        self._ready = []          # indices of self._params in the order their gradients came
        self._rebuilt = None      # the bucket order after the first synced backward
        for i, p in enumerate(self._params):
            p.register_hook(lambda grad, i=i: self._grad_hook(grad, i))

    def register_comm_hook(self, state, hook):
        # torch's allreduce_hook is what the stand-in does without a hook (sum, then divide by
        # the group size). torch's compression hooks round the gradients on purpose, and PowerSGD
        # approximates them: refused by name. Any other hook is run on the stand-in's bucket
        # (_sync), its ops traced like the program's.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        if hook is default_hooks.allreduce_hook and state in (None, self.process_group):
            return
        name = getattr(hook, "__name__", repr(hook))
        module = getattr(hook, "__module__", "") or ""
        if self._hook is not None:
            raise UserError("DistributedDataParallel.register_comm_hook(%s): a communication hook is already registered "
                            "(torch allows one)" % name)
        if module.startswith("torch.distributed.algorithms.ddp_comm_hooks") or "compress" in name:
            raise UserError("DistributedDataParallel.register_comm_hook(%s): of torch's own hooks only default_hooks.allreduce_hook "
                            "is captured: the compression, quantization and PowerSGD hooks round or approximate the gradients, "
                            "which no exact rule states, and the others (ZeRO's overlap hooks, noop) run on reducer internals the "
                            "capture does not model; capture without the hook (or with default_hooks.allreduce_hook)" % name)
        dtypes = {p.dtype for p in self._params}
        if len(dtypes) != 1 or self._find_unused:
            raise UserError("DistributedDataParallel.register_comm_hook(%s): with %s the reducer splits the gradients into "
                            "several buckets, whose assignment the capture does not model; a hook is captured for parameters of "
                            "one dtype with find_unused_parameters=False" % (
                                name, "parameters of dtypes %s" % sorted(str(d) for d in dtypes) if len(dtypes) != 1
                                else "find_unused_parameters=True"))
        self._hook = (state, hook, name)

    def forward(self, *args, **kwargs):
        # As DDP: whether this iteration's backward syncs is decided by its forward.
        self._sync_this_backward = self.require_backward_grad_sync
        # (the reducer records the ready order only in a synced backward: reset at each forward)
        self._ready = []
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def _grad_hook(self, grad, i):
        self._ready.append(i)
        if self._sync_this_backward and not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._sync)
        return grad

    def _sync(self):
        self._queued = False
        ws = dist.get_world_size(self.process_group) if self.process_group is not None else dist.get_world_size()
        # A wrapped parameter without a gradient (unused in the forward). Real DDP with
        # find_unused_parameters=False launches a bucket's all-reduce only when every parameter
        # in it is ready, so that bucket is never reduced: its gradients stay each rank's own
        # (and the next iteration raises). A model within DDP's first bucket (1 MiB) is one
        # bucket: then no gradient is averaged, which the stand-in does too. Larger models (the
        # bucket assignment is the reducer's) and find_unused_parameters=True (a locally unused
        # parameter averaged with the ranks that used it) are refused.
        if self._find_unused:
            self._sync_find_unused(ws)
            return
        unused = [n for n, p in zip(self._names, self._params) if p.grad is None]
        if unused:
            nbytes = sum(p.numel() * p.element_size() for p in self._params)
            first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024)
            if self._find_unused or nbytes > first:
                raise UserError("DistributedDataParallel: parameter '%s' got no gradient in this backward (unused in the forward); "
                                "with find_unused_parameters=%s and %d bytes of parameters (DDP's first bucket holds %d), the capture "
                                "does not model which gradients torch's reducer averages: remove the unused parameter or keep it "
                                "out of the wrapped module" % (unused[0], self._find_unused, nbytes, first))
            return
        if self._hook is not None:
            self._run_hook()
            return
        for p in self._params:
            dist.all_reduce(p.grad, group=self.process_group)
            p.grad.div_(ws)

    def _sync_find_unused(self, ws):
        """find_unused_parameters=True as torch 1.13's reducer runs it (checked against torch on
        2 gloo processes, docs/capture.md): a parameter whose gradient hook fired in this synced
        backward on some member is averaged over the group, a member that did not use it adding
        its gradient if it has one (accumulated under no_sync()) and zeros otherwise, and getting
        the average; a parameter no member used keeps its gradient (None). Who used what is
        exchanged untraced: it is the trace's structure, not a value."""
        fired = set(self._ready)
        cap = _CURRENT[-1]
        cap.suspended += 1
        try:
            flags = torch.tensor([[int(i in fired), int(p.grad is not None)] for i, p in enumerate(self._params)],
                                 dtype=torch.int64)
            _REAL_ALL_REDUCE[0](flags, op=dist.ReduceOp.SUM, group=self.process_group)
            flags = flags.tolist()
        finally:
            cap.suspended -= 1
        for i, p in enumerate(self._params):
            if flags[i][0] == 0:
                # Used by no member: torch keeps the gradient untouched without
                # gradient_as_bucket_view and averages it with one (tried), so only None is sure.
                if flags[i][1] != 0:
                    raise UserError("DistributedDataParallel(find_unused_parameters=True): parameter '%s' was used by no rank "
                                    "in this backward but has a gradient from an earlier one on some rank; torch's reducer "
                                    "then keeps or averages it depending on gradient_as_bucket_view, which the capture does "
                                    "not model: zero_grad(set_to_none=True) before the step, or use it in every "
                                    "synchronized backward" % self._names[i])
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=self.process_group)
            p.grad.div_(ws)

    def _run_hook(self):
        """The registered hook on DDP's bucket, as torch 1.13's reducer runs it (checked against
        torch: docs/capture.md): in the first synced backward every parameter is in one bucket,
        in parameter order (find_unused_parameters=False makes the first bucket unbounded);
        afterwards the reducer rebuilds the buckets in the order the first synced backward's
        gradients came (a backward under no_sync() records nothing), the first bucket bounded
        by 1 MiB. The bucket's buffer holds the
        gradients flattened and concatenated (traced: the copy is the program's); the hook's
        result is copied back into them, and DDP divides by nothing itself."""
        state, hook, name = self._hook
        order = list(range(len(self._params)))
        if self._rebuilt is not None:
            nbytes = sum(p.numel() * p.element_size() for p in self._params)
            first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024)
            if nbytes > first:
                raise UserError("DistributedDataParallel communication hook %s: after the first iteration torch's reducer "
                                "splits %d bytes of gradients into buckets of at most %d bytes, whose assignment the capture "
                                "does not model; capture one iteration" % (name, nbytes, first))
            order = self._rebuilt
        ready = self._ready
        if self._rebuilt is None:
            seen, first_order = set(), []
            for i in ready:
                if i not in seen:
                    seen.add(i)
                    first_order.append(i)
            self._rebuilt = first_order
        params = [self._params[i] for i in order]
        cap = _CURRENT[-1]
        before = len(cap.lines)
        buffer = torch.cat([p.grad.reshape(-1) for p in params])
        fut = hook(state, _GradBucket(buffer, params))
        if not isinstance(fut, (torch.futures.Future, torch._C.Future)):
            raise UserError("DistributedDataParallel communication hook %s returned %s, not a torch.futures.Future" % (name, type(fut).__name__))
        if not fut.done():
            raise UserError("DistributedDataParallel communication hook %s returned a future the capture cannot complete "
                            "on this thread (its ops would not be traced): chain it on a collective's get_future()" % name)
        result = fut.wait()
        if isinstance(result, (list, tuple)) and len(result) == 1:
            result = result[0]
        if not isinstance(result, torch.Tensor) or result.shape != buffer.shape:
            raise UserError("DistributedDataParallel communication hook %s: its future holds %s, not a tensor shaped like the "
                            "bucket [%d]" % (name, type(result).__name__ if not isinstance(result, torch.Tensor) else list(result.shape), buffer.numel()))
        if any(("f16[" in line or "bf16[" in line) for line in cap.lines[before:]):
            raise UserError("DistributedDataParallel communication hook %s casts the gradients to half precision: it rounds "
                            "them, which no exact rule states" % name)
        at = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                p.grad.copy_(result[at:at + n].view_as(p.grad))
                at += n


class _GradBucket:
    """dist.GradBucket as a hook sees it: the flat buffer of the bucket's gradients."""

    def __init__(self, buffer, params):
        self._buffer, self._params = buffer, params

    def buffer(self):
        return self._buffer

    def gradients(self):
        out, at = [], 0
        for p in self._params:
            out.append(self._buffer[at:at + p.numel()].view_as(p))
            at += p.numel()
        return out

    def parameters(self):
        return list(self._params)

    def index(self):
        return 0

    def is_last(self):
        return True

    def set_buffer(self, tensor):
        self._buffer.copy_(tensor)


def _install_ddp():
    torch.nn.parallel.DistributedDataParallel = _DDP
    torch.nn.parallel.distributed.DistributedDataParallel = _DDP


def _trace_uneven(cap, output, input, ins, outs, c, size, group):
    """all_to_all_single with split sizes `ins` / `outs` (this member's) as planproof reads it:
    each input chunk padded with zero rows to `c` (the largest split of any member), an even
    all_to_all_single, and each received chunk's first `outs[j]` rows. Exact: the received
    block j is member j's padded chunk for this member, whose first rows are the data."""
    rest = tuple(input.shape[1:])
    dt = DT.get(input.dtype, "f32")

    def typ(rows):
        return '"%s[%s]"' % (dt, ", ".join(str(d) for d in (rows,) + rest))
    src = cap.fmt(input)
    parts, at = [], 0
    for k in ins:
        if k > 0:
            s = cap.fresh("slice")
            cap.lines.append("%s: %s = torch.ops.aten.slice.Tensor(%s, 0, %d, %d)" % (s, typ(k), src, at, at + k))
            parts.append(s)
        if k < c:
            z = cap.fresh("zeros")
            cap.lines.append("%s: %s = torch.ops.aten.zeros.default([%s], dtype = %s)" % (z, typ(c - k), ", ".join(str(d) for d in (c - k,) + rest), input.dtype))
            parts.append(z)
        at += k
    flat = cap.fresh("cat")
    cap.lines.append("%s: %s = torch.ops.aten.cat.default([%s])" % (flat, typ(c * size), ", ".join(parts)))
    a2a = cap.fresh("all_to_all")
    cap.lines.append("%s: %s = torch.ops._c10d_functional.all_to_all_single.default(%s, None, None, '%s')" % (a2a, typ(c * size), flat, cap.group_name(group)))
    got = []
    for j, k in enumerate(outs):
        if k > 0:
            s = cap.fresh("slice")
            cap.lines.append("%s: %s = torch.ops.aten.slice.Tensor(%s, 0, %d, %d)" % (s, typ(k), a2a, j * c, j * c + k))
            got.append(s)
    if not got:
        raise UserError("all_to_all_single at %s receives no rows: empty tensors are not supported" % (cap.loc or "the step"))
    if len(got) == 1:
        cap.bind(output, got[0])
        return
    name = cap.fresh("cat")
    cap.lines.append("%s: %s = torch.ops.aten.cat.default([%s])" % (name, typ(sum(outs)), ", ".join(got)))
    cap.bind(output, name)


def _wrap_rooted(real_all_reduce, real_all_gather):
    """all_gather_into_tensor / _all_gather_base (emulated: gloo under torch 1.13 has no
    _allgather_base), and the collectives to or from one rank: reduce, gather, scatter."""

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        """Run as the list all_gather; traced as the functional all_gather_into_tensor, the
        output its concatenation (`[n * size, ...]`) or its stack (`[size, n, ...]`)."""
        cap = _CURRENT[-1]
        size = _size(group)
        cap.suspended += 1
        try:
            pieces = [torch.empty_like(input_tensor) for _ in range(size)]
            real_all_gather(pieces, input_tensor.detach().contiguous(), group=group)
            with torch.no_grad():
                output_tensor.copy_(torch.cat([p.reshape((-1,) + tuple(input_tensor.shape[1:])) for p in pieces]).view(output_tensor.shape))
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.note_loc()
            whole = cap.gathered(input_tensor, group, size) if size > 1 else cap.fmt(input_tensor)
            name = cap.fresh("view")
            cap.lines.append("%s: %s = torch.ops.aten.view.default(%s, [%s])" % (name, ann(output_tensor), whole, ", ".join(str(d) for d in output_tensor.shape)))
            cap.bind(output_tensor, name)
        return _Done() if async_op else None

    def reduce(tensor, dst, op=dist.ReduceOp.SUM, group=None, async_op=False):
        """Traced as an all-reduce (every member makes the same call), its result kept on dst;
        on every other member the tensor's value is unspecified (torch documents only dst's; gloo
        leaves partial sums there): `planproof.unspecified`, a value no other value determines."""
        cap = _CURRENT[-1]
        size = _size(group)
        whole = None
        if cap.tracing and size > 1:
            # Recorded before it runs (an untraced tensor is read as the constant it was).
            cap.note_loc()
            if op == dist.ReduceOp.PRODUCT:
                whole = _product(cap, cap.gathered(tensor, group, size), tensor, size)
            else:
                whole = cap.fresh("reduce")
                cap.lines.append("%s: %s = torch.ops._c10d_functional.all_reduce.default(%s, '%s', '%s')" % (whole, ann(tensor), cap.fmt(tensor), cap.reduce_name(op), cap.group_name(group)))
        cap.suspended += 1
        try:
            if _is_avg(op):
                real_all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
                with torch.no_grad():
                    tensor.div_(size)
            else:
                dist.distributed_c10d.reduce(tensor, dst, op=op, group=group)
        finally:
            cap.suspended -= 1
        if whole is not None:
            if dist.get_rank() == dst:
                cap.bind(tensor, whole)
            else:
                k = cap.counts.get("unspecified", 0)
                cap.counts["unspecified"] = k + 1
                u = "unspecified_r%d_%d" % (dist.get_rank(), k)
                cap.lines.append("%s: %s = torch.ops.planproof.unspecified.default(%s)" % (u, ann(tensor), whole))
                cap.bind(tensor, u)
        return _Done() if async_op else None

    def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
        """Traced as an all_gather_into_tensor (the same call on every member), each entry of
        dst's gather_list a slice of it; the other members receive nothing."""
        cap = _CURRENT[-1]
        size = _size(group)
        cap.suspended += 1
        try:
            dist.distributed_c10d.gather(tensor, gather_list, dst=dst, group=group)
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.note_loc()
            mine = dist.get_rank() == dst
            if size == 1:
                cap.copy_into(gather_list[0], tensor)
            else:
                whole = cap.gathered(tensor, group, size)
                if mine:
                    cap.pieces(gather_list, whole)
        return _Done() if async_op else None

    def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
        """Traced as a broadcast of src's concatenated scatter_list (the other members pass zeros
        of its shape, which a broadcast ignores), each member taking its own slice."""
        cap = _CURRENT[-1]
        size = _size(group)
        if cap.tracing and not tensor.is_contiguous():
            # gloo (torch 1.13) writes the received elements into the output's memory in
            # row-major order, ignoring its strides: the tensor then holds a permutation of what
            # was scattered, not the scatter this traces. torch.distributed.nn.functional.
            # all_gather's gloo backward (an all-to-all of scatters into empty_like of each
            # gradient) does this whenever a gathered tensor's gradient is not contiguous.
            cap.note_loc()
            raise UserError("dist.scatter into a non-contiguous tensor (shape %s, strides %s) at %s: gloo writes the received elements in row-major order into its memory, ignoring its strides, so the tensor does not hold what was scattered (a torch bug; torch.distributed.nn.functional.all_gather's backward on gloo hits it when the gathered tensor's gradient is not contiguous). Scatter into a contiguous tensor, or gather with an autograd Function whose backward is an all-reduce and this rank's chunk (as Megatron's sequence-parallel gather is written)" % (list(tensor.shape), list(tensor.stride()), cap.loc or "the step"))
        cap.suspended += 1
        try:
            dist.distributed_c10d.scatter(tensor, scatter_list, src=src, group=group)
        finally:
            cap.suspended -= 1
        if cap.tracing:
            cap.note_loc()
            if size == 1:
                cap.copy_into(tensor, scatter_list[0])
                return _Done() if async_op else None
            if tensor.dim() == 0:
                raise UserError("dist.scatter of 0-d tensors at %s is not supported (scatter tensors of shape [1])" % (cap.loc or "the step"))
            n = tensor.shape[0]
            shape = (n * size,) + tuple(tensor.shape[1:])
            dims = ", ".join(str(d) for d in shape)
            typ = '"%s[%s]"' % (DT.get(tensor.dtype, "f32"), dims)
            if dist.get_rank() == src:
                flat = cap.concat(scatter_list)
            else:
                flat = cap.fresh("zeros")
                cap.lines.append("%s: %s = torch.ops.aten.zeros.default([%s])" % (flat, typ, dims))
            b = cap.fresh("scatter")
            cap.lines.append("%s: %s = torch.ops._c10d_functional.broadcast.default(%s, %d, '%s')" % (b, typ, flat, src, cap.group_name(group)))
            me = dist.get_rank(group) if group is not None else dist.get_rank()
            s = cap.fresh("slice")
            cap.lines.append("%s: %s = torch.ops.aten.slice.Tensor(%s, 0, %d, %d)" % (s, ann(tensor), b, me * n, (me + 1) * n))
            cap.bind(tensor, s)
        return _Done() if async_op else None

    dist.all_gather_into_tensor = all_gather_into_tensor
    dist._all_gather_base = all_gather_into_tensor
    dist.reduce, dist.gather, dist.scatter = reduce, gather, scatter
