"""Megatron-style tensor-parallel MLP training step (issue 15), for `planproof capture`.

fc1 is column-parallel (w1 split on its output dim), fc2 row-parallel (w2 split on its input
dim) with an all-reduce of its partial output, dropout between them (its mask a plan input
sharded like the activation); the backward runs through autograd and SGD
updates the shards. `--bug` drops the all-reduce (Megatron's reduce_from_tensor_model_parallel
region), which planproof must refute.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv


_GROUP = []


def _tp_group(ws):
    """Megatron's tensor-parallel group, created once per process (as Megatron's initialize does)."""
    if not _GROUP:
        _GROUP.append(dist.new_group(list(range(ws))))
    return _GROUP[0]


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    W1, W2 = torch.randn(16, 8, generator=g), torch.randn(8, 16, generator=g)
    x = cap.replicate(X.clone(), name="x")
    y = cap.replicate(Y.clone(), name="y")
    # Megatron marks its sharded weights (ColumnParallelLinear: partition_dim 0,
    # RowParallelLinear: 1); cap.param reads the marks. cap.shard states the same explicitly.
    w1 = W1.chunk(ws, 0)[rank].clone().requires_grad_()
    w1.tensor_model_parallel, w1.partition_dim = True, 0
    w1 = cap.param(w1, name="w1")
    w2 = cap.shard(W2.chunk(ws, 1)[rank].clone().requires_grad_(), 1, "tp", name="w2", role="param")
    tp_group = _tp_group(ws)
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    with cap.trace():
        h = F.gelu(F.linear(x, w1))
        cap.mask_placement("S(1)")  # the mask of this rank's columns of h
        h = F.dropout(h, p=0.1)
        out = F.linear(h, w2)
        if not BUG:
            dist.all_reduce(out, group=tp_group)
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
    cap.output("loss", loss, "R")
    cap.output("w1_new", w1, "S(0)")
    cap.output("w2_new", w2, "S(1)")
