"""Sequence/data-sharded input gathered before a replicated MLP (issue 15), for
`planproof capture --axis dp`.

Each rank holds its rows of the batch (sharded on dim 0), all-gathers them (the list form of
torch.distributed.all_gather, as sequence parallelism does before a non-parallel layer),
concatenates the pieces and runs the whole batch through replicated weights, so every rank
computes the full-batch gradient and SGD step without a gradient all-reduce. `--bug`
concatenates the gathered pieces in reverse rank order, which planproof must refute.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    W1, W2 = torch.randn(16, 8, generator=g), torch.randn(8, 16, generator=g)
    x = cap.shard(X.chunk(ws, 0)[rank].clone(), 0, "dp", name="x")
    y = cap.replicate(Y.clone(), name="y")
    w1 = cap.replicate(W1.clone().requires_grad_(), name="w1", role="param")
    w2 = cap.replicate(W2.clone().requires_grad_(), name="w2", role="param")
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    # The gather buffers are allocated ahead (as Megatron's are); all_gather fills them.
    parts = [torch.empty_like(x) for _ in range(ws)]
    with cap.trace():
        dist.all_gather(parts, x)
        if BUG:
            parts = parts[::-1]
        xf = torch.cat(parts, 0)
        out = F.linear(F.gelu(F.linear(xf, w1)), w2)
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
    cap.output("loss", loss, "R")
    cap.output("w1_new", w1, "R")
    cap.output("w2_new", w2, "R")
