"""ZeRO-2-style data parallelism with the collectives as torch.distributed spells them
(issue 33), for `planproof capture --nproc 2 --axis dp`.

Each rank takes its rows of the batch; the gradient is reduce-scattered (`dist.reduce_scatter`,
emulated on gloo, which has none under torch 1.13), each rank updates its rows of the weight
with SGD, the updated rows are all-gathered (`dist.all_gather`) and the result broadcast from
rank 0 (`dist.broadcast`), as a checkpointing rank would.

`--bug`: the gradient pieces are passed to reduce_scatter in reverse order, so each rank
updates its rows with another rank's gradient.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    W = torch.randn(4, 6, generator=g)
    X, Y = torch.randn(8, 6, generator=g), torch.randn(8, 4, generator=g)
    w = cap.replicate(W.clone().requires_grad_(), name="w", role="param")
    x = cap.replicate(X, name="x")
    y = cap.replicate(Y, name="y")
    with cap.trace():
        n = x.shape[0] // ws
        loss = F.mse_loss(F.linear(x[rank * n:(rank + 1) * n], w), y[rank * n:(rank + 1) * n])
        loss.backward()
        rows = w.shape[0] // ws
        grad_shard = torch.empty(rows, w.shape[1])
        pieces = list(w.grad.chunk(ws))
        if BUG:
            pieces = pieces[::-1]
        dist.reduce_scatter(grad_shard, pieces)
        grad_shard /= ws
        with torch.no_grad():
            new_rows = w.detach()[rank * rows:(rank + 1) * rows] - 0.1 * grad_shard
        gathered = [torch.empty_like(new_rows) for _ in range(ws)]
        dist.all_gather(gathered, new_rows)
        new_w = torch.cat(gathered)
        dist.broadcast(new_w, src=0)
    cap.output("w_new", new_w, "R")
