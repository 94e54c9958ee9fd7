"""Data-parallel MLP trained by one AdamW step (issue 15), for `planproof capture --axis dp`.

Each rank runs its rows of the batch, all-reduces the weight gradients (sum) and divides them
by the world size, as DDP does; torch.optim.AdamW then updates the replicated weights with
decoupled weight decay (its single-tensor path: mul_, add_, addcmul_, sqrt, div, addcdiv_).
`--bug` leaves w2's gradient un-reduced (a parameter missing from DDP's buckets, so each rank
steps with its own rows' gradient), which planproof must refute.
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
    x = cap.replicate(X.clone(), name="x")
    y = cap.replicate(Y.clone(), name="y")
    w1 = cap.replicate(W1.clone().requires_grad_(), name="w1", role="param")
    w2 = cap.replicate(W2.clone().requires_grad_(), name="w2", role="param")
    # foreach=False: the per-tensor update every torch version has (the _foreach path is
    # the same arithmetic over lists).
    opt = torch.optim.AdamW([w1, w2], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=False)
    # The optimizer state, as AdamW's first step would create it, declared like the weights:
    # its moments replicated (any values: the plan is proved for every state, not only zeros).
    for p, n in ((w1, "w1"), (w2, "w2")):
        opt.state[p] = {
            "step": cap.replicate(torch.tensor(0.0), name=n + "_step", role="optimizer_state"),
            "exp_avg": cap.replicate(torch.zeros_like(p), name=n + "_m", role="optimizer_state"),
            "exp_avg_sq": cap.replicate(torch.zeros_like(p), name=n + "_v", role="optimizer_state"),
        }
    with cap.trace():
        xr, yr = x.chunk(ws, 0)[rank], y.chunk(ws, 0)[rank]
        out = F.linear(F.gelu(F.linear(xr, w1)), w2)
        loss = F.mse_loss(out, yr)
        loss.backward()
        for p in (w1, w2):
            if BUG and p is w2:
                continue
            dist.all_reduce(p.grad)
            p.grad.div_(ws)
        opt.step()
    cap.output("w1_new", w1, "R")
    cap.output("w2_new", w2, "R")
    for p, n in ((w1, "w1"), (w2, "w2")):
        cap.output(n + "_m_new", opt.state[p]["exp_avg"], "R")
        cap.output(n + "_v_new", opt.state[p]["exp_avg_sq"], "R")
