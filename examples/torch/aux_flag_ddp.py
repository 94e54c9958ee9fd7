"""An auxiliary loss computed only when the batch carries auxiliary labels, with the check
written the usual way, on a per-sample 0/1 tensor of the batch: `if has_aux.any():` (rows 0-1
carry a label; rows 2-3, which rank 1 holds, do not). The branch reads a tensor's value into
Python, so each run is traced for the value it read: rank 1 skips the auxiliary head, which DDP
(find_unused_parameters=True) averages with zeros, the single device computes it. Correct: the
auxiliary loss is the masked squared error summed over the rank's rows and divided by the rank's
batch (DDP's average then gives the single device's sum over the global batch). `--bug`: divided
by the rank's count of labelled rows (`has_aux.sum()`): rank 0's mean, averaged with rank 1's
zeros, is half the single device's mean over the labelled rows.
verify proves it where the reads come out as in this run (rows 2-3 of has_aux are 0 there:
docs/engine.md, "Proofs under the reads"); a draw where rank 1's read is True is no run."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)
        self.aux = nn.Linear(4, 1)

    def forward(self, x, y, aux_y, has_aux):
        h = torch.tanh(self.body(x))
        loss = F.mse_loss(self.head(h), y)
        if has_aux.any():
            err = (self.aux(h).squeeze(-1) - aux_y) ** 2 * has_aux
            loss = loss + err.sum() / (has_aux.sum() if BUG else x.shape[0])
        return loss


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(4, 3, generator=g), name="x")
    y = cap.replicate(torch.randn(4, 2, generator=g), name="y")
    aux_y = cap.replicate(torch.randn(4, generator=g), name="aux_y")
    has_aux = cap.replicate(torch.tensor([1.0, 1.0, 0.0, 0.0]), name="has_aux", values=(0, 2))
    with cap.trace():
        model = DDP(net, find_unused_parameters=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        lo, hi = rank * 4 // ws, (rank + 1) * 4 // ws
        opt.zero_grad()
        model(x[lo:hi], y[lo:hi], aux_y[lo:hi], has_aux[lo:hi]).backward()
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
