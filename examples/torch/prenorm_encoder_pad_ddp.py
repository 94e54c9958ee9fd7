"""A sentence classifier built from `nn.TransformerEncoderLayer(batch_first=True,
norm_first=True)` on padded batches with `src_key_padding_mask`, under DDP (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Written as text-classification code with torch's own transformer layers is written: token
embeddings scaled by `math.sqrt(d_model)` plus a learned position embedding, an
`nn.TransformerEncoder` of pre-norm `nn.TransformerEncoderLayer(d_model, nhead,
dim_feedforward, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)` with a final
`nn.LayerNorm`, called with `src_key_padding_mask=(input_ids == pad_id)`; the first token's state
as the sentence's (BERT's [CLS] pooling; `--pool mean`: masked mean pooling over the real tokens,
`(h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)`, as sentence-transformers pools); dropout, a
linear head, `F.cross_entropy`. torch DDP, AdamW with a linear warmup
`LambdaLR`, `clip_grad_norm_`.

`--bug`: the forward goes through `model.module(...)` (the wrapped model, reached to call it with
keyword arguments as a helper unwraps it), which bypasses DDP's forward: the backward then
synchronizes nothing and each rank steps with its own gradients.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
POOL = sys.argv[sys.argv.index("--pool") + 1] if "--pool" in sys.argv else "cls"
VOCAB, D_MODEL, NHEAD, FF, LAYERS, MAX_LEN, CLASSES, PAD_ID = 12, 8, 2, 16, 1, 6, 3, 0
LENGTHS = [6, 4, 5, 2]


class TransformerClassifier(nn.Module):
    def __init__(self, vocab_size, d_model, nhead, dim_feedforward, num_layers, num_classes, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.pos_embedding = nn.Embedding(MAX_LEN, d_model)
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=dropout, activation="gelu",
                                                   batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_layers, norm=nn.LayerNorm(d_model))
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        x = self.embedding(input_ids) * math.sqrt(self.d_model) + self.pos_embedding(positions)
        h = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        if POOL == "mean":
            mask = attention_mask.unsqueeze(-1).type_as(h)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        else:
            pooled = h[:, 0]
        return self.classifier(self.dropout(pooled))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = TransformerClassifier(VOCAB, D_MODEL, NHEAD, FF, LAYERS, CLASSES)
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    warmup_steps = 10
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup_steps))
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(1, VOCAB, (len(LENGTHS), MAX_LEN), generator=g)
    for i, n in enumerate(LENGTHS):
        ids[i, n:] = PAD_ID
    input_ids = cap.replicate(ids, name="input_ids", values=(0, VOCAB))
    labels = cap.replicate(torch.randint(0, CLASSES, (len(LENGTHS),), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        batch_ids, batch_labels = input_ids.chunk(ws)[rank], labels.chunk(ws)[rank]
        attention_mask = (batch_ids != PAD_ID).long()
        model.train()
        forward = model.module if BUG else model
        logits = forward(input_ids=batch_ids, attention_mask=attention_mask)
        loss = F.cross_entropy(logits, batch_labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
