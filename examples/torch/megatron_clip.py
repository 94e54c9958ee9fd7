"""Data parallelism with gradient clipping written as Megatron's `clip_grad_norm_fp32` writes it
(issue 33), for `planproof capture --nproc 2 --axis dp`.

Each rank runs its rows; the gradients are all-reduced and averaged; the total norm is summed
from each gradient's `torch.norm(grad) ** 2`, read into Python with `.item()`, and the clip
coefficient computed in Python: `clip_coeff = max_norm / (total_norm + 1.0e-6)`; when it is
below 1 every gradient is scaled by it with `grad.mul_(clip_coeff)`; SGD. The coefficient
flows from the read back into the tensors: the capture keeps that dependency (the traced ops
of the norm, not a constant that differs in its last digits between the 1-process and the
2-process run); the branch on `clip_coeff < 1.0` specializes the plan to its outcome, and the
verdict says so.

`--bug`: the norm is taken and the gradients clipped before the all-reduce (each rank clips
with its own norm).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
MAX_NORM = 0.5


def clip_grad_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = 0.0
    for grad in grads:
        grad_norm = torch.norm(grad, 2)
        total_norm += grad_norm ** 2
    total_norm = total_norm.item() ** 0.5
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0:
        for grad in grads:
            grad.mul_(clip_coeff)
    return total_norm


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(8, 6, generator=g), name="x")
    y = cap.replicate(torch.randn(8, 3, generator=g), name="y")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        rows = x.shape[0] // ws
        loss = F.mse_loss(model(x[rank * rows:(rank + 1) * rows]), y[rank * rows:(rank + 1) * rows])
        loss.backward()
        if BUG:
            clip_grad_norm(model.parameters(), MAX_NORM)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
        if not BUG:
            clip_grad_norm(model.parameters(), MAX_NORM)
        opt.step()
    for name, p in model.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
