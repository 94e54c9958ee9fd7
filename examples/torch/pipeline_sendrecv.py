"""A two-stage GPipe pipeline written with `dist.send` / `dist.recv` (issue 33), for
`planproof capture --nproc 2 --axis pp`.

Stage 0 (rank 0) runs Linear+ReLU, stage 1 (rank 1) a Linear and the loss; two micro-batches:
stage 0 sends both forward activations, stage 1 receives them, runs its forward and loss, then
the backwards in reverse order, sending each activation gradient back; each stage steps its
own SGD. Every input is declared on the rank that holds it (the batch on stage 0, the targets
on stage 1); the 1-process run is the same model without the pipeline.

`--bug`: stage 0 applies the gradients it receives to the wrong micro-batch (received in
forward order while stage 1 sends them in reverse).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
MICRO = 2


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    stage0 = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
    stage1 = nn.Linear(8, 4)
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(8, 6, generator=g), torch.randn(8, 4, generator=g)
    first, last = ws == 1 or rank == 0, ws == 1 or rank == ws - 1
    params = []
    if first:
        x = cap.replicate(X, name="x")
        cap.replicate(stage0[0].weight, name="w0", role="param")
        cap.replicate(stage0[0].bias, name="b0", role="param")
        params += list(stage0.parameters())
    if last:
        y = cap.replicate(Y, name="y")
        cap.replicate(stage1.weight, name="w1", role="param")
        cap.replicate(stage1.bias, name="b1", role="param")
        params += list(stage1.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    with cap.trace():
        if ws == 1:
            total = 0
            for xb, yb in zip(x.chunk(MICRO), y.chunk(MICRO)):
                loss = F.mse_loss(stage1(stage0(xb)), yb) / MICRO
                loss.backward()
                total = total + loss.detach()
        elif rank == 0:
            acts = []
            for xb in x.chunk(MICRO):
                h = stage0(xb)
                dist.send(h.detach(), 1)
                acts.append(h)
            order = acts if BUG else list(reversed(acts))
            for h in order:
                grad = torch.empty_like(h)
                dist.recv(grad, 1)
                h.backward(grad)
        else:
            inputs, losses = [], []
            for yb in y.chunk(MICRO):
                h = torch.empty(yb.shape[0], 8)
                dist.recv(h, 0)
                h.requires_grad_()
                inputs.append(h)
                losses.append(F.mse_loss(stage1(h), yb) / MICRO)
            for h, loss in reversed(list(zip(inputs, losses))):
                loss.backward()
                dist.send(h.grad, 0)
            total = losses[0].detach() + losses[1].detach()
        opt.step()
    if first:
        cap.output("w0_new", stage0[0].weight, "R")
        cap.output("b0_new", stage0[0].bias, "R")
    if last:
        cap.output("loss", total, "R")
        cap.output("w1_new", stage1.weight, "R")
        cap.output("b1_new", stage1.bias, "R")
