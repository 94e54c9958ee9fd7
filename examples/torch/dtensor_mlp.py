"""A tensor-parallel MLP whose weights are DTensors (issue 15), for `planproof capture`.

The weights are declared by their DTensor placements (cap.param reads them: Shard(0) for the
column-parallel w1, Shard(1) for the row-parallel w2), and each rank computes with the local
shards, all-reducing the row-parallel output as DTensor's Partial -> Replicate redistribution
does. torch >= 2.0 builds real DTensors (distribute_tensor over a 1-D DeviceMesh); torch 1.13,
which has no DTensor, gets a stand-in with DTensor's attribute names (`placements`,
`to_local()`, Shard(dim) / Replicate() placement classes), so the same reading is exercised.
`--bug` drops the all-reduce (the Partial output used as if it were replicated).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv

try:  # torch >= 2.4 spells it torch.distributed.tensor, 2.0-2.3 torch.distributed._tensor
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor
except ImportError:
    try:
        from torch.distributed._tensor import DeviceMesh, Replicate, Shard, distribute_tensor
    except ImportError:
        DeviceMesh = None

        class Shard:
            def __init__(self, dim):
                self.dim = dim

        class Replicate:
            pass

        class _DTensor:
            """DTensor's attribute names over this rank's shard (torch 1.13 has no DTensor)."""

            def __init__(self, local, placements):
                self._local, self.placements = local, list(placements)
                self.requires_grad = local.requires_grad

            def to_local(self):
                return self._local

        def distribute_tensor(t, mesh, placements):
            ws, rank = dist.get_world_size(), dist.get_rank()
            p = placements[0]
            t = t.detach()
            local = t.chunk(ws, p.dim)[rank].clone() if isinstance(p, Shard) else t.clone()
            return _DTensor(local.requires_grad_(), placements)


def step(cap):
    ws = dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    W1, W2 = torch.randn(16, 8, generator=g), torch.randn(8, 16, generator=g)
    mesh = DeviceMesh("cpu", list(range(ws))) if DeviceMesh is not None else None
    x = cap.replicate(X.clone(), name="x")
    y = cap.replicate(Y.clone(), name="y")
    w1 = cap.param(distribute_tensor(W1.requires_grad_(), mesh, [Shard(0)]), name="w1")
    w2 = cap.param(distribute_tensor(W2.requires_grad_(), mesh, [Shard(1)]), name="w2")
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    with cap.trace():
        out = F.linear(F.gelu(F.linear(x, w1)), w2)
        if not BUG:
            dist.all_reduce(out)
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
    cap.output("loss", loss, "R")
    cap.output("w1_new", w1, "S(0)")
    cap.output("w2_new", w2, "S(1)")
