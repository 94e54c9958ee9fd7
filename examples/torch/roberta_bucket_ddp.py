"""A RoBERTa-style sentence classifier fine-tuned under DDP with a metrics block, as NLP training
scripts write it (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

Padded token ids (`<s>` = 1 first, pad id 0, `nn.Embedding(padding_idx=0)`), position ids made
from the padding mask as fairseq / Hugging Face's RoBERTa do (`torch.cumsum(mask, dim=1) * mask +
padding_idx`), the Annotated Transformer's hand-written LayerNorm (`x.std(-1, keepdim=True)`),
attention with Hugging Face's extended mask (`(1.0 - mask) * torch.finfo(dtype).min`), a gated FFN
(`nn.GLU`), `RobertaClassificationHead` on the `<s>` token, `F.cross_entropy`,
`clip_grad_norm_`, AdamW. The batch sampler buckets sentences by their dataset sizes (longest
first, in Python, before the step). After the step, the usual metrics block: correct and total
counts all-reduced as one tensor, accuracy = correct / total via `.item()`, the loss all-reduced
and read with `.item()` for `ReduceLROnPlateau(opt).step(val_loss)`, each rank's shard size and
lr gathered with `dist.all_gather_object` for the log, and rank 0's divergence check sent to
every rank with `dist.broadcast_object_list`.

Sizes are tiny (5 token ids, 5 positions): the ids reach the positions through `cumsum` of a
padding test, and the exact normal form enumerates the ids' joint values (at most 4,096).

`--bug`: the labels taken `labels[rank::world]` (a DistributedSampler-style stride) while the
ids are chunked, so each rank trains on mismatched pairs.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, HIDDEN, HEADS, FFN, MAX_LEN, CLASSES = 5, 8, 2, 16, 5, 3
PAD = 0
BATCH = 4


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = torch.cumsum(mask, dim=1).type_as(mask) * mask
    return incremental_indices.long() + padding_idx


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD)
        self.embed_positions = nn.Embedding(MAX_LEN + 1, HIDDEN, padding_idx=PAD)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out_proj = nn.Linear(HIDDEN, HIDDEN)
        self.norm1 = LayerNorm(HIDDEN)
        self.ffn = nn.Sequential(nn.Linear(HIDDEN, 2 * FFN), nn.GLU(), nn.Linear(FFN, HIDDEN))
        self.norm2 = LayerNorm(HIDDEN)
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids):
        padding_mask = input_ids.eq(PAD)
        positions = create_position_ids_from_input_ids(input_ids, PAD)
        x = self.embed_tokens(input_ids) + self.embed_positions(positions)
        bsz, seq_len, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(bsz, seq_len, HEADS, -1).transpose(1, 2)
        k = k.view(bsz, seq_len, HEADS, -1).transpose(1, 2)
        v = v.view(bsz, seq_len, HEADS, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(HIDDEN // HEADS)
        # (the extended attention mask of Hugging Face's get_extended_attention_mask)
        extended = (1.0 - (~padding_mask)[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        attn = F.softmax(scores + extended, dim=-1)
        ctx = (attn @ v).transpose(1, 2).reshape(bsz, seq_len, HIDDEN)
        x = self.norm1(x + self.out_proj(ctx))
        x = self.norm2(x + self.ffn(x))
        pooled = torch.tanh(self.dense(x[:, 0, :]))  # RobertaClassificationHead: the <s> token
        return self.classifier(pooled)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Encoder()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    # the dataset's sentences (<s> = 1 first) and their sizes (fairseq's `sizes`); the batch
    # sampler buckets by length: longest first, in a stable order
    dataset_sizes = [3, 5, 2, 4]
    order = sorted(range(BATCH), key=lambda i: -dataset_sizes[i])
    ids = torch.randint(2, VOCAB, (BATCH, MAX_LEN), generator=g)
    ids[:, 0] = 1
    for row, i in enumerate(order):
        ids[row, dataset_sizes[i]:] = PAD
    input_ids = cap.replicate(ids, name="input_ids", values=(0, VOCAB))
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g)[order], name="labels", values=(0, CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
    with cap.trace():
        batch_ids = input_ids.chunk(ws)[rank]
        batch_labels = labels[rank::ws] if BUG else labels.chunk(ws)[rank]
        optimizer.zero_grad()
        logits = model(batch_ids)
        loss = F.cross_entropy(logits, batch_labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        # metrics
        with torch.no_grad():
            preds = logits.argmax(dim=-1)
            stats = torch.stack([(preds == batch_labels).sum(), torch.tensor(batch_labels.numel())]).float()
            dist.all_reduce(stats)
            accuracy = stats[0].item() / stats[1].item()
            reduced_loss = loss.detach().clone()
            dist.all_reduce(reduced_loss)
            val_loss = reduced_loss.item() / ws
            scheduler.step(val_loss)
            # who trained on what, for the log (rank 0 writes it)
            shards = [None] * ws
            dist.all_gather_object(shards, {"rank": rank, "examples": batch_labels.numel(), "lr": optimizer.param_groups[0]["lr"]})
            status = [{"stop": val_loss > 10.0, "epoch": 0}] if rank == 0 else [None]
            dist.broadcast_object_list(status, src=0)
            if rank == 0:
                print(f"loss {val_loss:.4f} acc {accuracy:.3f} shards {shards}")
            if status[0]["stop"]:
                print("diverged, stopping")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
    cap.output("correct_total", stats, "R")
