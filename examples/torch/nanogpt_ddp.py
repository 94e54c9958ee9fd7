"""A nanoGPT-style model trained with torch DDP (issue 33), for
`planproof capture --nproc 2 --axis dp`.

Written as nanoGPT writes it: a fused `c_attn` projection split into q, k, v; the causal mask
a `torch.tril` buffer applied with `att.masked_fill(self.bias[:, :, :T, :T] == 0,
float('-inf'))` before `F.softmax`; GELU MLP; pre-LayerNorm blocks; learned position
embeddings; the LM head's weight tied to the token embedding; `F.cross_entropy` on integer
targets; `DistributedDataParallel`; each rank its rows of the batch; SGD.

`--bug`: the targets are the first rows on every rank while the inputs are this rank's rows
(the batch and its labels split differently).
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv

VOCAB, BLOCK, N_EMBD, N_HEAD, N_LAYER, BATCH = 16, 4, 8, 2, 1, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.n_head = N_HEAD
        self.n_embd = N_EMBD
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=nn.LayerNorm(N_EMBD),
        ))
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = GPT()
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    model = DDP(model)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randint(0, VOCAB, (64,), generator=g), name="data", values=(0, VOCAB))
    # The batch's offsets into the token stream (nanoGPT's get_batch), split across the ranks.
    ix = torch.randint(len(data) - BLOCK, (BATCH,), generator=g).tolist()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        bs = BATCH // ws
        mine = ix[rank * bs:(rank + 1) * bs]
        x = torch.stack([data[i:i + BLOCK] for i in mine])
        y = torch.stack([data[i + 1:i + 1 + BLOCK] for i in (mine if not BUG else ix[:bs])])
        loss = model(x, y)
        loss.backward()
        opt.step()
    for name, p in model.module.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
