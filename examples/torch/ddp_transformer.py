"""A sequence classifier built from torch's own nn.TransformerEncoderLayer (pre-norm, GELU),
trained with torch DDP, AdamW and clip_grad_norm_, as the PyTorch tutorials write it. For
`planproof capture --nproc 2 --axis dp`.

`--bug`: only the backbone is wrapped in DDP (fine-tuning code that wraps the pretrained part
and adds a head after), so the head's gradients are never averaged and the ranks' heads drift
apart.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv


class Backbone(nn.Module):
    def __init__(self, vocab=20, d=8, nhead=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead, dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, num_layers=1)

    def forward(self, ids):
        return self.enc(self.emb(ids)).mean(dim=1)


class Classifier(nn.Module):
    def __init__(self, backbone, d=8, ncls=3):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(d, ncls)

    def forward(self, ids):
        return self.head(self.backbone(ids))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Classifier(Backbone())
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    if BUG:
        net.backbone = DDP(net.backbone)
        model = net
    else:
        model = DDP(net)
    g = torch.Generator().manual_seed(1)
    ids = cap.replicate(torch.randint(0, 20, (4, 6), generator=g), name="ids", values=(0, 20))
    labels = cap.replicate(torch.randint(0, 3, (4,), generator=g), name="labels", values=(0, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    with cap.trace():
        per = ids.shape[0] // ws
        x = ids[rank * per:(rank + 1) * per]
        y = labels[rank * per:(rank + 1) * per]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".module.", ".").replace(".", "_") + "_new", p, "R")
