"""Megatron-style data x tensor parallelism on a 2-D mesh (issue 33), for
`planproof capture --mesh dp=2,tp=2`.

Process groups are made as Megatron's `initialize_model_parallel` makes them: every process
creates every group, tensor-parallel groups of consecutive ranks and data-parallel groups of
ranks `tp` apart, and keeps the ones it belongs to. A column- then row-parallel MLP with
Megatron's `copy_to`/`reduce_from` autograd Functions in the TP group; each data-parallel rank
takes its rows of the batch; gradients all-reduced in the DP group and averaged; the reported
loss averaged over DP; SGD.

`--bug`: the gradients are all-reduced over the tensor-parallel group instead of the
data-parallel one.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
TP = 2


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


_GROUPS = {}


def initialize_model_parallel(tp):
    world, rank = dist.get_world_size(), dist.get_rank()
    tp = min(tp, world)
    dp = world // tp
    for i in range(dp):
        ranks = list(range(i * tp, (i + 1) * tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["tp"] = g
    for j in range(tp):
        ranks = list(range(j, world, tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["dp"] = g
    return dp, tp


def step(cap):
    if not _GROUPS:
        initialize_model_parallel(TP)
    world, rank = dist.get_world_size(), dist.get_rank()
    tp = min(TP, world)
    dp = world // tp
    tp_rank, dp_rank = rank % tp, rank // tp
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g)
    W1, W2 = torch.randn(8, 6, generator=g), torch.randn(6, 8, generator=g)
    x_all = cap.replicate(X.clone(), name="x")
    y_all = cap.replicate(Y.clone(), name="y")
    w1 = cap.shard(W1.chunk(tp, 0)[tp_rank].clone().requires_grad_(), 0, "tp", name="w1", role="param")
    w2 = cap.shard(W2.chunk(tp, 1)[tp_rank].clone().requires_grad_(), 1, "tp", name="w2", role="param")
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    with cap.trace():
        n = x_all.shape[0] // dp
        x, y = x_all[dp_rank * n:(dp_rank + 1) * n], y_all[dp_rank * n:(dp_rank + 1) * n]
        h = F.relu(F.linear(_CopyToTP.apply(x, _GROUPS["tp"]), w1))
        out = _ReduceFromTP.apply(F.linear(h, w2), _GROUPS["tp"])
        loss = F.mse_loss(out, y)
        loss.backward()
        for p in (w1, w2):
            dist.all_reduce(p.grad, group=_GROUPS["tp" if BUG else "dp"])
            p.grad /= dp
        opt.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported, group=_GROUPS["dp"])
        reported /= dp
    cap.output("loss", reported, "R")
    cap.output("w1_new", w1, {"tp": "S(0)"})
    cap.output("w2_new", w2, {"tp": "S(1)"})
