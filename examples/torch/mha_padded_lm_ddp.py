"""A small causal LM on right-padded batches with `nn.MultiheadAttention(batch_first=True)`,
`key_padding_mask` and a causal `attn_mask`, under DDP, the loss averaged over the tokens of
the whole global batch as Hugging Face's Trainer does (`average_tokens_across_devices`)
(issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

Token and position embeddings, one pre-norm block: `nn.LayerNorm`, `nn.MultiheadAttention(D,
H, batch_first=True)` called with `attn_mask=torch.triu(torch.ones(T, T, dtype=torch.bool),
diagonal=1)` and `key_padding_mask=(input_ids == PAD)`, a GELU MLP; the LM head. Labels are the
ids shifted left with padding set to -100. The loss, as transformers >= 4.46 computes it under
DDP: the number of label tokens `num_items_in_batch` all-reduced over the ranks,
`F.cross_entropy(..., ignore_index=-100, reduction="sum") / num_items_in_batch`, multiplied by
the world size (DDP averages the gradients). Sequences have different lengths, so the ranks
hold different numbers of tokens. AdamW.

`--bug`: the plain per-rank mean `F.cross_entropy(..., ignore_index=-100)`, the well-known
mistake: DDP then averages per-rank means, which weights a token by the inverse of its rank's
token count, not the global batch's.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, D, HEADS, T, BATCH, PAD = 11, 8, 2, 6, 4, 0
LENGTHS = [6, 5, 3, 2]  # the sentences' lengths before padding (rank 1's two are short)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = nn.Embedding(T, D)
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.lm_head = nn.Linear(D, VOCAB)

    def forward(self, input_ids):
        b, t = input_ids.shape
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.tok(input_ids) + self.pos(pos)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=causal, key_padding_mask=(input_ids == PAD), need_weights=False)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return self.lm_head(x)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = TinyLM()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (BATCH, T), generator=g)
    for i, n in enumerate(LENGTHS):
        ids[i, n:] = PAD
    input_ids = cap.replicate(ids, name="input_ids", values=(0, VOCAB))
    with cap.trace():
        batch = input_ids.chunk(ws)[rank]
        labels = batch.clone()
        labels[labels == PAD] = -100
        labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
        logits = model(batch)
        if BUG:
            loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
        else:
            num_items_in_batch = (labels != -100).sum()
            dist.all_reduce(num_items_in_batch)
            loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100, reduction="sum")
            loss = loss / num_items_in_batch * ws
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
