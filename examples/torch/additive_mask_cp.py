"""Causal self-attention under context (sequence) parallelism with an additive -inf mask
(issue 33), for `planproof capture --nproc 2 --axis cp`.

Each rank holds a contiguous chunk of every sequence: its positions' tokens, position
embeddings and targets. Keys and values of every chunk are gathered along the sequence with an
autograd Function as Megatron's sequence-parallel gather is written (forward all-gather,
backward the reduce-scatter of the gradient: gloo under torch 1.13 has none, so an all-reduce
and this rank's chunk, the same values). (Not `torch.distributed.nn.functional.all_gather`: its
gloo backward scatters into `empty_like` of each gradient, and torch 1.13's gloo scatter
ignores a non-contiguous output's strides, permuting the key gradient; capture refuses it.)
The rank's queries are scored against every key and the causal mask's rows for the rank's
positions are added,

    att = q @ k.transpose(-2, -1) * scale + self.mask[start:start + n, :T]

with the mask the usual buffer `torch.full((BLOCK, BLOCK), float('-inf')).triu(1)`; softmax,
the output projection, LM head and `F.cross_entropy` over the rank's tokens. Every rank's
loss is a mean over as many tokens, so the gradients are all-reduced and divided by the world
size; then SGD.

`--bug`: the mask rows are `self.mask[:n, :T]` on every rank (the rank's offset into the
sequence forgotten): right on rank 0, while rank 1's queries see the keys of the first
positions only.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
VOCAB, BLOCK, N_EMBD, N_HEAD, BATCH = 16, 4, 8, 2, 2


class GatherSeq(torch.autograd.Function):
    """Every rank's chunk of the sequence (dim 1), in rank order; backward: this rank's chunk of the summed gradient."""

    @staticmethod
    def forward(ctx, x):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, 1)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g.chunk(dist.get_world_size(), 1)[dist.get_rank()]


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.proj = nn.Linear(N_EMBD, N_EMBD)
        self.n_head = N_HEAD
        self.register_buffer("mask", torch.full((BLOCK, BLOCK), float("-inf")).triu(1))

    def forward(self, x, start):
        B, n, C = x.shape  # this rank's n positions of each sequence, from position `start`
        q, k, v = self.qkv(x).split(C, dim=2)
        # Every position's keys and values, in sequence order.
        k = GatherSeq.apply(k)
        v = GatherSeq.apply(v)
        T = k.size(1)
        hs = C // self.n_head
        q = q.view(B, n, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        mask = self.mask[:n, :T] if BUG else self.mask[start:start + n, :T]
        att = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hs)) + mask
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, n, C)
        return self.proj(y)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Parameter(torch.randn(BLOCK, N_EMBD) * 0.02)
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, idx, targets, start):
        n = idx.size(1)
        x = self.wte(idx) + self.wpe[start:start + n]
        x = x + self.attn(self.ln_1(x), start)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = GPT()  # the same initial weights on every process
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randint(0, VOCAB, (BATCH, BLOCK + 1), generator=g), name="data", values=(0, VOCAB))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        idx, targets = data[:, :-1], data[:, 1:]
        # This rank's chunk of every sequence.
        n = BLOCK // ws
        start = rank * n
        loss = model(idx[:, start:start + n], targets[:, start:start + n], start)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
        opt.zero_grad(set_to_none=True)
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
