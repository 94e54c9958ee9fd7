"""A minGPT-style model (Karpathy's CausalSelfAttention, Block, GPT) trained with torch DDP, as
written: nn.Dropout everywhere (p = 0.1), a causal mask kept as a `tril` buffer and applied with
`masked_fill(... == 0, -inf)`, cross-entropy with `ignore_index=-1`, AdamW with betas
(0.9, 0.95), `clip_grad_norm_`. For `planproof capture --nproc 2 --axis dp`.

Each rank takes its contiguous chunk of the batch. The dropout masks are paired with the
single-process run's by order and split like the batch (docs/capture.md, "Dropout").

`--bug`: every rank trains on the first chunk (the sampler was not made per rank), so the
averaged gradient is the first chunk's, not the batch's.
"""
import math
import sys
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=8, n_head=2, block_size=6, pdrop=0.1):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(pdrop)
        self.resid_dropout = nn.Dropout(pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(8)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, 8)
        self.wpe = nn.Embedding(6, 8)
        self.h = Block()
        self.ln_f = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, vocab, bias=False)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        x = self.ln_f(self.h(x))
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = GPT()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    idx = cap.replicate(torch.randint(0, 16, (4, 6), generator=g), name="idx", values=(0, 16))
    tgt = cap.replicate(torch.randint(0, 16, (4, 6), generator=g), name="tgt", values=(0, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95))
    with cap.trace():
        shard = 0 if BUG else rank
        x, y = idx.chunk(ws)[shard], tgt.chunk(ws)[shard]
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
