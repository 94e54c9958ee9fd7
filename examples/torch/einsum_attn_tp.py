"""Causal self-attention written with `torch.einsum`, under Megatron-style tensor parallelism
written by hand, optionally data parallel with torch DDP over the other mesh axis (issue 33).

    planproof capture --nproc 2 --mesh tp=2 -- examples/torch/einsum_attn_tp.py
    planproof capture --nproc 4 --mesh dp=2,tp=2 -- examples/torch/einsum_attn_tp.py
    planproof capture --nproc 2 --mesh dp=2 -- examples/torch/einsum_attn_tp.py --tp 1

Many research codebases write attention with einsum rather than matmul:
`torch.einsum('bhqd,bhkd->bhqk', q, k) * scale`, a causal mask from
`torch.tril(torch.ones(T, T))` applied with `masked_fill(mask == 0, float('-inf'))`, softmax,
`torch.einsum('bhqk,bhkd->bhqd', att, v)`, and an einsum MLP
(`torch.einsum('btd,fd->btf', x, w)`). The projections are ColumnParallelLinear /
RowParallelLinear modules written the way people write them without Megatron installed:
each rank holds its slice of the full weight (`tensor_model_parallel` / `partition_dim`
attributes set, as Megatron sets them), the column-parallel input goes through an identity
whose backward all-reduces the gradient, the row-parallel output is all-reduced with
`dist.all_reduce` inside an autograd Function. Heads are split across the TP group. Groups
are made as Megatron's `initialize_model_parallel` makes them (tensor-parallel ranks
consecutive); the model is wrapped in `DistributedDataParallel(process_group=dp_group)`.
AdamW(weight_decay=0.1), MSE against a regression target.

`--tp N` (default 2): the tensor-parallel size (the mesh's tp axis); `--tp 1` is plain DDP.
`--bug`: the row-parallel output projection of the attention adds its bias on every TP rank
before the all-reduce (a Megatron `skip_bias_add` mistake: the bias counted tp times).
`--bug-ddp`: the DDP wrapper made over the whole world instead of the data-parallel group
(gradients averaged across tensor-parallel shards too).
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
BUG_DDP = "--bug-ddp" in sys.argv
TP = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 2
D_MODEL, N_HEAD, SEQ, BATCH, FFN = 8, 4, 5, 4, 16

_GROUPS = {}


def initialize_model_parallel(tp):
    world, rank = dist.get_world_size(), dist.get_rank()
    tp = min(tp, world)
    for i in range(world // tp):
        ranks = list(range(i * tp, (i + 1) * tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["tp"] = g
    for j in range(tp):
        ranks = list(range(j, world, tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["dp"] = g


def tp_world():
    return dist.get_world_size(_GROUPS["tp"])


def tp_rank():
    return dist.get_rank(_GROUPS["tp"])


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        if tp_world() > 1:
            dist.all_reduce(grad, group=_GROUPS["tp"])
        return grad


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if tp_world() > 1:
            dist.all_reduce(x, group=_GROUPS["tp"])
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear):
        super().__init__()
        n, r = tp_world(), tp_rank()
        self.weight = nn.Parameter(full.weight.detach().chunk(n, 0)[r].clone())
        self.bias = nn.Parameter(full.bias.detach().chunk(n, 0)[r].clone())
        for p in (self.weight, self.bias):
            p.tensor_model_parallel, p.partition_dim = True, 0

    def forward(self, x):
        return F.linear(_CopyToTP.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear, bug=False):
        super().__init__()
        n, r = tp_world(), tp_rank()
        self.weight = nn.Parameter(full.weight.detach().chunk(n, 1)[r].clone())
        self.weight.tensor_model_parallel, self.weight.partition_dim = True, 1
        self.bias = nn.Parameter(full.bias.detach().clone())
        self.bug = bug

    def forward(self, x):
        if self.bug:
            return _ReduceFromTP.apply(F.linear(x, self.weight, self.bias))
        out = _ReduceFromTP.apply(F.linear(x, self.weight))
        return out + self.bias


class EinsumAttention(nn.Module):
    def __init__(self, d_model, n_head, max_len):
        super().__init__()
        self.n_head_local = n_head // tp_world()
        self.head_dim = d_model // n_head
        self.q_proj = ColumnParallelLinear(nn.Linear(d_model, d_model))
        self.k_proj = ColumnParallelLinear(nn.Linear(d_model, d_model))
        self.v_proj = ColumnParallelLinear(nn.Linear(d_model, d_model))
        self.o_proj = RowParallelLinear(nn.Linear(d_model, d_model), bug=BUG)
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len)))

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head_local, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_head_local, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head_local, self.head_dim).transpose(1, 2)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.causal[:T, :T] == 0, float("-inf"))
        att = F.softmax(scores, dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", att, v)
        out = out.transpose(1, 2).contiguous().view(B, T, self.n_head_local * self.head_dim)
        return self.o_proj(out)


class EinsumMLP(nn.Module):
    """The MLP with its weights applied by einsum (column- then row-parallel)."""

    def __init__(self, d_model, ffn):
        super().__init__()
        n, r = tp_world(), tp_rank()
        w_in = nn.init.normal_(torch.empty(ffn, d_model), std=0.3)
        w_out = nn.init.normal_(torch.empty(d_model, ffn), std=0.3)
        self.w_in = nn.Parameter(w_in.chunk(n, 0)[r].clone())
        self.w_out = nn.Parameter(w_out.chunk(n, 1)[r].clone())
        self.w_in.tensor_model_parallel, self.w_in.partition_dim = True, 0
        self.w_out.tensor_model_parallel, self.w_out.partition_dim = True, 1

    def forward(self, x):
        h = F.gelu(torch.einsum("btd,fd->btf", _CopyToTP.apply(x), self.w_in))
        return _ReduceFromTP.apply(torch.einsum("btf,df->btd", h, self.w_out))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.attn = EinsumAttention(D_MODEL, N_HEAD, SEQ)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = EinsumMLP(D_MODEL, FFN)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def step(cap):
    if not _GROUPS:
        initialize_model_parallel(TP)
    world, rank = dist.get_world_size(), dist.get_rank()
    tp = tp_world()
    dp, dp_rank = world // tp, rank // tp
    torch.manual_seed(0)
    block = Block()
    for name, p in block.named_parameters():
        cap.param(p, name=name.replace(".", "_"))
    model = DDP(block, process_group=None if BUG_DDP else _GROUPS["dp"])
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, SEQ, D_MODEL, generator=g), name="x")
    target = cap.replicate(torch.randn(BATCH, SEQ, D_MODEL, generator=g), name="y")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    with cap.trace():
        x, y = data.chunk(dp)[dp_rank], target.chunk(dp)[dp_rank]
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported, group=_GROUPS["dp"])
        reported /= dp
    cap.output("loss", reported, "R")
    for name, p in block.named_parameters():
        placement = {"tp": "S(%d)" % p.partition_dim} if getattr(p, "tensor_model_parallel", False) else "R"
        cap.output(name.replace(".", "_") + "_new", p, placement)
