"""The single-device training step examples/torch/ddp_accum.py parallelizes: one full-batch
step of the same model, for `planproof capture --reference` (issue 33). It declares the same
inputs and outputs by name; torch.distributed is not used."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def step(cap):
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    cap.replicate(model.weight, name="weight", role="param")
    cap.replicate(model.bias, name="bias", role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(8, 6, generator=g), name="data")
    target = cap.replicate(torch.randn(8, 4, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        loss = F.mse_loss(model(data), target)
        loss.backward()
        opt.step()
    cap.output("weight_new", model.weight, "R")
    cap.output("bias_new", model.bias, "R")
