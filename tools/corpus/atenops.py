"""ATen op emitters: each computes the result's dtype, shape and strides the
way ATen does and appends the node to an fxir.Graph."""

from fxir import (INT_MAX, Raw, broadcast, compute_view_strides, contiguous_strides,
                  is_dense, numel, resolve_shape)

F32, I64, B8, I32 = "f32", "i64", "b8", "i32"
TORCH_DT = {F32: "torch.float32", I64: "torch.int64", B8: "torch.bool", I32: "torch.int32"}


def dev(index):
    if index is None:
        return Raw("device(type='cuda')")
    return Raw("device(type='cuda', index=%d)" % index)


class Ops:
    def __init__(self, g, device_index=0, view_name="view"):
        self.g = g
        self.dev = device_index

    # ---- views
    def view(self, x, shape, base="view", target="aten.view.default"):
        out = resolve_shape(shape, numel(x.shape))
        st = compute_view_strides(x.shape, x.strides, out)
        assert st is not None, "illegal view of %s %s/%s to %s" % (x.name, x.shape, x.strides, out)
        return self.g.add(base, target, [x, list(shape)], dtype=x.dtype, shape=out, strides=st)

    def unsafe_view(self, x, shape):
        out = resolve_shape(shape, numel(x.shape))
        assert compute_view_strides(x.shape, x.strides, out) is not None
        return self.g.add("_unsafe_view", "aten._unsafe_view.default", [x, list(shape)],
                          dtype=x.dtype, shape=out)

    def t(self, x):
        assert len(x.shape) == 2
        return self.g.add("t", "aten.t.default", [x], dtype=x.dtype,
                          shape=[x.shape[1], x.shape[0]], strides=[x.strides[1], x.strides[0]])

    def transpose(self, x, a, b):
        sh, st = list(x.shape), list(x.strides)
        sh[a], sh[b] = sh[b], sh[a]
        st[a], st[b] = st[b], st[a]
        return self.g.add("transpose", "aten.transpose.int", [x, a, b], dtype=x.dtype, shape=sh, strides=st)

    def permute(self, x, dims):
        return self.g.add("permute", "aten.permute.default", [x, list(dims)], dtype=x.dtype,
                          shape=[x.shape[d] for d in dims], strides=[x.strides[d] for d in dims])

    def unsqueeze(self, x, d):
        nd = len(x.shape) + 1
        dd = d % nd
        sh = list(x.shape)
        st = list(x.strides)
        ins = st[dd] * sh[dd] if dd < len(sh) else 1
        sh.insert(dd, 1)
        st.insert(dd, ins)
        return self.g.add("unsqueeze", "aten.unsqueeze.default", [x, d], dtype=x.dtype, shape=sh, strides=st)

    def squeeze_dim(self, x, d):
        assert x.shape[d] == 1
        sh = list(x.shape)
        st = list(x.strides)
        del sh[d]
        del st[d]
        return self.g.add("squeeze", "aten.squeeze.dim", [x, d], dtype=x.dtype, shape=sh, strides=st)

    def expand(self, x, shape):
        sh = list(shape)
        off = len(sh) - len(x.shape)
        st = [0] * off + [x.strides[i] if x.shape[i] == sh[off + i] else 0 for i in range(len(x.shape))]
        return self.g.add("expand", "aten.expand.default", [x, list(shape)], dtype=x.dtype, shape=sh, strides=st)

    def slice(self, x, dim, start, end):
        n = x.shape[dim]
        s0 = max(0, min(start, n))
        e0 = max(s0, min(end, n))
        sh = list(x.shape)
        sh[dim] = e0 - s0
        return self.g.add("slice", "aten.slice.Tensor", [x, dim, start, end], dtype=x.dtype,
                          shape=sh, strides=list(x.strides))

    def slice_scatter(self, x, src, dim, start, end):
        return self.g.add("slice_scatter", "aten.slice_scatter.default", [x, src, dim, start, end],
                          dtype=x.dtype, shape=x.shape)

    def split_with_sizes(self, x, sizes, dim):
        assert sum(sizes) == x.shape[dim]
        items = []
        for s in sizes:
            sh = list(x.shape)
            sh[dim] = s
            items.append((x.dtype, sh, list(x.strides)))
        n = self.g.add("split_with_sizes", "aten.split_with_sizes.default", [x, list(sizes), dim],
                       items=items, strides=[])
        return [self.g.getitem(n, i) for i in range(len(sizes))]

    def clone(self, x, contiguous=False):
        if contiguous:
            return self.g.add("clone", "aten.clone.default", [x],
                              [("memory_format", Raw("torch.contiguous_format"))], dtype=x.dtype, shape=x.shape)
        st = list(x.strides) if is_dense(x.shape, x.strides) else contiguous_strides(x.shape)
        return self.g.add("clone", "aten.clone.default", [x], dtype=x.dtype, shape=x.shape, strides=st)

    def detach(self, x):
        return self.g.add("detach", "aten.detach.default", [x], dtype=x.dtype, shape=x.shape, strides=x.strides)

    def copy(self, dst, src):
        return self.g.add("copy", "aten.copy.default", [dst, src], dtype=dst.dtype, shape=dst.shape,
                          strides=dst.strides)

    def to_copy(self, x, dtype, device=True, non_blocking=False):
        kw = [("dtype", Raw(TORCH_DT[dtype]))]
        if device:
            kw += [("layout", Raw("torch.strided")), ("device", dev(self.dev))]
        if non_blocking:
            kw.append(("non_blocking", True))
        return self.g.add("_to_copy", "aten._to_copy.default", [x], kw, dtype=dtype, shape=x.shape)

    # ---- factories
    def empty(self, shape, dtype=F32):
        return self.g.add("empty", "aten.empty.memory_format", [list(shape)],
                          [("dtype", Raw(TORCH_DT[dtype])), ("device", dev(self.dev)), ("pin_memory", False)],
                          dtype=dtype, shape=shape)

    def zeros(self, shape, dtype, device=None, layout=False, cpu=False):
        kw = [("dtype", Raw(TORCH_DT[dtype]))]
        if layout:
            kw.append(("layout", Raw("torch.strided")))
        if cpu:
            kw.append(("device", Raw("device(type='cpu')")))
        else:
            kw.append(("device", dev(device)))
            kw.append(("pin_memory", False))
        return self.g.add("zeros", "aten.zeros.default", [list(shape)], kw, dtype=dtype, shape=shape)

    def new_zeros(self, x, shape):
        return self.g.add("new_zeros", "aten.new_zeros.default", [x, list(shape)],
                          [("dtype", Raw(TORCH_DT[x.dtype])), ("layout", Raw("torch.strided")),
                           ("device", dev(self.dev)), ("pin_memory", False)],
                          dtype=x.dtype, shape=shape)

    def zeros_like(self, x):
        return self.g.add("zeros_like", "aten.zeros_like.default", [x], [("pin_memory", False)],
                          dtype=x.dtype, shape=x.shape)

    def arange(self, n):
        return self.g.add("arange", "aten.arange.start", [0, n],
                          [("device", dev(self.dev)), ("pin_memory", False)], dtype=I64, shape=[n])

    def lift_fresh_copy(self, c):
        return self.g.add("lift_fresh_copy", "aten.lift_fresh_copy.default", [c], dtype=c.dtype, shape=[])

    # ---- math
    def _bin(self, base, target, a, b, dtype=None):
        sa = a.shape if hasattr(a, "shape") else []
        sb = b.shape if hasattr(b, "shape") else []
        dt = dtype or (a.dtype if hasattr(a, "dtype") else b.dtype)
        if hasattr(a, "dtype") and hasattr(b, "dtype") and a.dtype != b.dtype:
            order = [B8, I32, I64, F32]
            dt = max(a.dtype, b.dtype, key=order.index)
        sh = broadcast(sa, sb)
        st = None
        if hasattr(a, "shape") and list(a.shape) == sh and is_dense(a.shape, a.strides):
            st = list(a.strides)
        return self.g.add(base, target, [a, b], dtype=dt, shape=sh, strides=st)

    def add(self, a, b):
        return self._bin("add", "aten.add.Tensor", a, b)

    def sub(self, a, b):
        return self._bin("sub", "aten.sub.Tensor", a, b)

    def mul(self, a, b):
        return self._bin("mul", "aten.mul.Tensor", a, b)

    def mul_scalar(self, a, v):
        return self._bin("mul", "aten.mul.Scalar", a, v)

    def div(self, a, b):
        return self._bin("div", "aten.div.Tensor", a, b)

    def rsub_scalar(self, a, v):
        return self._bin("rsub", "aten.rsub.Scalar", a, v)

    def cmp_scalar(self, op, x, v):
        return self.g.add(op, "aten.%s.Scalar" % op, [x, v], dtype=B8, shape=x.shape)

    def bitwise_or(self, a, b):
        return self.g.add("bitwise_or", "aten.bitwise_or.Tensor", [a, b], dtype=B8, shape=broadcast(a.shape, b.shape))

    def unary(self, op, x):
        return self.g.add(op, "aten.%s.default" % op, [x], dtype=x.dtype, shape=x.shape)

    def gelu(self, x):
        return self.unary("gelu", x)

    def gelu_backward(self, g, x):
        return self.g.add("gelu_backward", "aten.gelu_backward.default", [g, x], dtype=g.dtype, shape=g.shape)

    def softmax(self, x, dim):
        return self.g.add("_softmax", "aten._softmax.default", [x, dim, False], dtype=x.dtype, shape=x.shape)

    def softmax_backward(self, g, out, dim):
        return self.g.add("_softmax_backward_data", "aten._softmax_backward_data.default",
                          [g, out, dim, Raw(TORCH_DT[g.dtype])], dtype=g.dtype, shape=g.shape)

    def masked_fill(self, x, mask, v):
        return self.g.add("masked_fill", "aten.masked_fill.Scalar", [x, mask, v], dtype=x.dtype, shape=x.shape)

    def sum_dims(self, x, dims, keepdim=False):
        nd = len(x.shape)
        ds = {d % nd for d in dims}
        if keepdim:
            sh = [1 if i in ds else x.shape[i] for i in range(nd)]
        else:
            sh = [x.shape[i] for i in range(nd) if i not in ds]
        args = [x, list(dims)] + ([True] if keepdim else [])
        return self.g.add("sum", "aten.sum.dim_IntList", args, dtype=x.dtype, shape=sh)

    def sum_all(self, x):
        return self.g.add("sum", "aten.sum.default", [x], dtype=x.dtype, shape=[])

    def max_dim(self, x, dim):
        nd = len(x.shape)
        sh = [x.shape[i] for i in range(nd) if i != dim % nd]
        n = self.g.add("max", "aten.max.dim", [x, dim], items=[(x.dtype, sh, contiguous_strides(sh)),
                                                             (I64, sh, contiguous_strides(sh))], strides=[])
        return n

    def mm(self, a, b):
        assert a.shape[1] == b.shape[0], (a, a.shape, b, b.shape)
        return self.g.add("mm", "aten.mm.default", [a, b], dtype=a.dtype, shape=[a.shape[0], b.shape[1]])

    def bmm(self, a, b):
        assert a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
        return self.g.add("bmm", "aten.bmm.default", [a, b], dtype=a.dtype, shape=[a.shape[0], a.shape[1], b.shape[2]])

    def baddbmm(self, inp, a, b, beta, alpha):
        sh = [a.shape[0], a.shape[1], b.shape[2]]
        assert broadcast(inp.shape, sh) == sh
        return self.g.add("baddbmm", "aten.baddbmm.default", [inp, a, b], [("beta", beta), ("alpha", alpha)],
                          dtype=a.dtype, shape=sh)

    def cat(self, xs, dim):
        sh = list(xs[0].shape)
        sh[dim] = sum(x.shape[dim] for x in xs)
        return self.g.add("cat", "aten.cat.default", [list(xs), dim], dtype=xs[0].dtype, shape=sh)

    # ---- indexing
    def index(self, x, idx):
        bs = []
        for i in idx:
            bs = broadcast(bs, i.shape)
        sh = bs + list(x.shape[len(idx):])
        return self.g.add("index", "aten.index.Tensor", [x, list(idx)], dtype=x.dtype, shape=sh)

    def index_put(self, x, idx, v, accumulate=False):
        args = [x, list(idx), v] + ([True] if accumulate else [])
        return self.g.add("index_put", "aten.index_put.default", args, dtype=x.dtype, shape=x.shape)

    def embedding(self, w, idx):
        return self.g.add("embedding", "aten.embedding.default", [w, idx], dtype=w.dtype,
                          shape=list(idx.shape) + [w.shape[1]])

    def embedding_dense_backward(self, g, idx, n):
        return self.g.add("embedding_dense_backward", "aten.embedding_dense_backward.default",
                          [g, idx, n, -1, False], dtype=g.dtype, shape=[n, g.shape[-1]])

    # ---- dropout / layer norm
    def native_dropout(self, x, p):
        n = self.g.add("native_dropout", "aten.native_dropout.default", [x, p, True],
                       items=[(x.dtype, x.shape, contiguous_strides(x.shape)), (B8, x.shape, contiguous_strides(x.shape))],
                       strides=[])
        return self.g.getitem(n, 0), self.g.getitem(n, 1)

    def native_dropout_backward(self, g, mask, scale):
        return self.g.add("native_dropout_backward", "aten.native_dropout_backward.default", [g, mask, scale],
                          dtype=g.dtype, shape=g.shape)

    def fused_ln_fwd(self, x, w, b, h, eps):
        rows = numel(x.shape) // h
        n = self.g.add("fused_layer_norm_affine_fwd", "apex.fused_layer_norm_affine_fwd.default",
                       [x, w, b, [h], eps],
                       items=[(x.dtype, x.shape, contiguous_strides(x.shape)), (F32, [rows], [1]), (F32, [rows], [1])],
                       strides=[])
        return [self.g.getitem(n, i) for i in range(3)]

    def fused_ln_bwd(self, g, mean, invvar, x, h, w, b, eps):
        n = self.g.add("fused_layer_norm_affine_bwd", "apex.fused_layer_norm_affine_bwd.default",
                       [g, mean, invvar, x, [h], w, b, eps],
                       items=[(x.dtype, x.shape, contiguous_strides(x.shape)), (w.dtype, w.shape, [1]),
                              (b.dtype, b.shape, [1])], strides=[])
        return [self.g.getitem(n, i) for i in range(3)]

    # ---- collectives
    def all_reduce(self, x, op, group):
        return self.g.add("all_reduce", "_c10d_functional.all_reduce.default", [x, op, group],
                          dtype=x.dtype, shape=x.shape)

    def all_gather(self, x, size, group):
        sh = list(x.shape)
        sh[0] *= size
        return self.g.add("all_gather_into_tensor", "_c10d_functional.all_gather_into_tensor.default",
                          [x, size, group], dtype=x.dtype, shape=sh)

    def reduce_scatter(self, x, op, size, group):
        sh = list(x.shape)
        assert sh[0] % size == 0
        sh[0] //= size
        return self.g.add("reduce_scatter_tensor", "_c10d_functional.reduce_scatter_tensor.default",
                          [x, op, size, group], dtype=x.dtype, shape=sh)

    def wait(self, x):
        return self.g.add("wait_tensor", "_c10d_functional.wait_tensor.default", [x], dtype=x.dtype, shape=x.shape)
