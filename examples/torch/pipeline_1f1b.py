"""A two-stage 1F1B pipeline with Megatron's point-to-point helpers (issue 33), for
`planproof capture --nproc 2 --axis pp`.

Written as Megatron's `p2p_communication` and `forward_backward_pipelining_without_interleaving`
write it: each exchange is a list of `dist.P2POp(dist.isend / dist.irecv, ...)` run with
`dist.batch_isend_irecv` (`send_forward`, `send_forward_recv_backward`,
`send_backward_recv_forward`, `recv_backward`: in the steady state both stages send first);
two micro-batches, one warm-up forward on the first stage; the loss of each micro-batch
divided by their number on the last stage; each stage steps its own SGD. The 1-process run is
the same model without the pipeline.

`--bug`: the last stage does not divide the loss by the number of micro-batches.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
MICRO, HIDDEN = 2, 8


def _communicate(tensor_send_next=None, tensor_send_prev=None, recv_prev_shape=None, recv_next_shape=None):
    rank, ws = dist.get_rank(), dist.get_world_size()
    ops, recv_prev, recv_next = [], None, None
    if tensor_send_prev is not None:
        ops.append(dist.P2POp(dist.isend, tensor_send_prev, rank - 1))
    if recv_prev_shape is not None:
        recv_prev = torch.empty(recv_prev_shape)
        ops.append(dist.P2POp(dist.irecv, recv_prev, rank - 1))
    if tensor_send_next is not None:
        ops.append(dist.P2POp(dist.isend, tensor_send_next, (rank + 1) % ws))
    if recv_next_shape is not None:
        recv_next = torch.empty(recv_next_shape)
        ops.append(dist.P2POp(dist.irecv, recv_next, (rank + 1) % ws))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return recv_prev, recv_next


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    stage0 = nn.Sequential(nn.Linear(6, HIDDEN), nn.Tanh())
    stage1 = nn.Linear(HIDDEN, 4)
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
    shape = (8 // MICRO, HIDDEN)
    with cap.trace():
        if ws == 1:
            total = 0
            for xb, yb in zip(x.chunk(MICRO), y.chunk(MICRO)):
                loss = F.mse_loss(stage1(stage0(xb)), yb) / MICRO
                loss.backward()
                total = total + loss.detach()
        elif first:
            xs = x.chunk(MICRO)
            h0 = stage0(xs[0])
            _communicate(tensor_send_next=h0.detach())                          # send_forward
            h1 = stage0(xs[1])
            _, g0 = _communicate(tensor_send_next=h1.detach(), recv_next_shape=shape)  # send_forward_recv_backward
            h0.backward(g0)
            _, g1 = _communicate(recv_next_shape=shape)                          # recv_backward
            h1.backward(g1)
        else:
            ys = y.chunk(MICRO)
            h, _ = _communicate(recv_prev_shape=shape)                           # recv_forward
            total = 0
            for i in range(MICRO):
                h.requires_grad_()
                loss = F.mse_loss(stage1(h), ys[i])
                if not BUG:
                    loss = loss / MICRO
                loss.backward()
                total = total + loss.detach()
                if i < MICRO - 1:
                    h, _ = _communicate(tensor_send_prev=h.grad, recv_prev_shape=shape)  # send_backward_recv_forward
                else:
                    _communicate(tensor_send_prev=h.grad)                        # send_backward
        opt.step()
    if first:
        cap.output("w0_new", stage0[0].weight, "R")
        cap.output("b0_new", stage0[0].bias, "R")
    if last:
        cap.output("loss", total, "R")
        cap.output("w1_new", stage1.weight, "R")
        cap.output("b1_new", stage1.bias, "R")
