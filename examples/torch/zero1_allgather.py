"""A ZeRO-1-style data-parallel step with a flat parameter buffer (issue 33), for
`planproof capture --nproc 2 --axis dp`.

Each rank runs its rows of the batch; the flattened gradients are averaged with
`dist.all_reduce(..., op=dist.ReduceOp.AVG)`; each rank updates only its shard of the flat
parameters (SGD with momentum, its momentum buffer a shard too), and the updated shards are
gathered back with `dist.all_gather_into_tensor` (`--api base`: the older
`dist._all_gather_base`, as Megatron and DeepSpeed call it) and copied into the parameters.
(gloo under torch 1.13 has neither AVG nor _allgather_base: the capture runs them as SUM and
the list all_gather, docs/capture.md.)

`--bug`: every rank updates the shard after its own (an off-by-one shard offset).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BASE = "base" in sys.argv[sys.argv.index("--api") + 1:sys.argv.index("--api") + 2] if "--api" in sys.argv else False
LR, MOMENTUM = 0.1, 0.9


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    params = list(model.parameters())
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    numel = sum(p.numel() for p in params)
    shard = numel // ws
    momentum = cap.shard(torch.zeros(shard), 0, "dp", name="momentum", role="optimizer_state")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(8, 6, generator=g), name="x")
    y = cap.replicate(torch.randn(8, 2, generator=g), name="y")
    full = torch.empty(numel)
    with cap.trace():
        rows = x.shape[0] // ws
        out = model(x[rank * rows:(rank + 1) * rows])
        loss = F.mse_loss(out, y[rank * rows:(rank + 1) * rows])
        loss.backward()
        flat_grad = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat_grad, op=dist.ReduceOp.AVG)
        with torch.no_grad():
            flat_param = torch.cat([p.reshape(-1) for p in params])
            lo = ((rank + 1) % ws if BUG else rank) * shard
            momentum.mul_(MOMENTUM).add_(flat_grad[lo:lo + shard])
            new_shard = flat_param[lo:lo + shard] - LR * momentum
            if BASE:
                dist._all_gather_base(full, new_shard)
            else:
                dist.all_gather_into_tensor(full, new_shard)
            offset = 0
            for p in params:
                p.copy_(full[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    for name, p in model.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
    cap.output("momentum_new", momentum, {"dp": "S(0)"})
