"""A nanoGPT-style training step under torch DDP, written as nanoGPT's train.py writes it, for
`planproof capture --nproc 2 --axis dp`.

GPT with token and position embeddings (`torch.arange`), a fused `c_attn` split into q, k, v,
heads by `view` + `transpose`, a causal mask buffer applied with
`masked_fill(bias[:, :, :T, :T] == 0, float('-inf'))`, GELU(approximate='tanh'), weight tying
(`wte.weight = lm_head.weight`), `F.cross_entropy(..., ignore_index=-1)`; DDP with gradient
accumulation by `model.require_backward_grad_sync` on all but the last micro-step,
`clip_grad_norm_`, AdamW with decay and no-decay parameter groups.

`--bug`: rank 1 does not divide its micro-step losses by the number of micro-steps (a
rank-dependent accumulation factor: the ranks' gradients are weighted differently).
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv

VOCAB, BLOCK, N_EMBD, N_HEAD, N_LAYER = 16, 4, 8, 2, 1
BATCH, GRAD_ACCUM = 2, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.n_head, self.n_embd = N_HEAD, N_EMBD
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


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
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def configure_optimizers(model, weight_decay, learning_rate, betas):
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
    nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [
        {"params": decay_params, "weight_decay": weight_decay},
        {"params": nodecay_params, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(1337)
    raw = GPT()
    for name, p in raw.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(raw)
    g = torch.Generator().manual_seed(7)
    # As nanoGPT does: the accumulation steps are divided among the ranks, so the global batch
    # (GRAD_ACCUM x BATCH sequences) is the same at every world size.
    accum = GRAD_ACCUM // ws
    data = cap.replicate(torch.randint(0, VOCAB, (GRAD_ACCUM * BATCH, BLOCK + 1), generator=g), name="data", values=(0, VOCAB))
    optimizer = configure_optimizers(raw, weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95))
    with cap.trace():
        for micro_step in range(accum):
            # This rank's sequences of this micro-step, as a sharded data loader gives them.
            start = (micro_step * ws + rank) * BATCH
            x = data[start:start + BATCH, :-1]
            y = data[start:start + BATCH, 1:].contiguous()
            model.require_backward_grad_sync = micro_step == accum - 1
            logits, loss = model(x, y)
            loss = loss / accum if not (BUG and rank == 1) else loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    for name, p in raw.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
