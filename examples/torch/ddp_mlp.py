"""Data-parallel MLP with gradient accumulation (issue 15), for `planproof capture --axis dp`.

Each rank runs its rows of each of 2 micro-batches, accumulates the weight gradients of the
micro-batch mean losses (each scaled by 1/2), then all-reduces them (sum) and divides by the
world size, as DDP's bucketed all-reduce does; SGD then updates the replicated weights.
`--bug` divides by the world size twice (the gradient averaged twice), which planproof must
refute.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_SHARD = "--bug-shard" in sys.argv
MICRO = 2


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(MICRO, 4, 8, generator=g), torch.randn(MICRO, 4, 8, generator=g)
    W1, W2 = torch.randn(16, 8, generator=g), torch.randn(8, 16, generator=g)
    xs = [cap.replicate(X[m].clone(), name="x%d" % m) for m in range(MICRO)]
    ys = [cap.replicate(Y[m].clone(), name="y%d" % m) for m in range(MICRO)]
    mine = 0 if BUG_SHARD else rank
    w1 = cap.replicate(W1.clone().requires_grad_(), name="w1", role="param")
    w2 = cap.replicate(W2.clone().requires_grad_(), name="w2", role="param")
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    with cap.trace():
        for m in range(MICRO):
            x, y = xs[m].chunk(ws, 0)[mine], ys[m].chunk(ws, 0)[mine]
            out = F.linear(F.gelu(F.linear(x, w1)), w2)
            loss = F.mse_loss(out, y) / MICRO
            loss.backward()
        for p in (w1, w2):
            dist.all_reduce(p.grad)
            p.grad.div_(ws)
            if BUG:
                p.grad.div_(ws)
        opt.step()
    cap.output("w1_new", w1, "R")
    cap.output("w2_new", w2, "R")
