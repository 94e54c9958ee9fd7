"""A GRU text classifier under DDP, as PyTorch's tutorials and text-classification examples
write it (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

`nn.Embedding(padding_idx=0)`, `nn.GRU(batch_first=True)` over the embedded tokens, the output
at the last step `output[:, -1, :]` into `nn.Linear`, `F.cross_entropy`; weights initialized
in `__init__` with `nn.init.xavier_uniform_` / `nn.init.zeros_`; torch DDP, Adam, and
`clip_grad_norm_(model.parameters(), 1.0)` after backward as the tutorials clip RNNs.

`--bug`: the loss is `F.cross_entropy(..., reduction='sum')` on each rank's batch: DDP averages
the ranks' summed gradients, half of the single-device sum's (the classic sum-vs-mean mistake).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, EMBED, HIDDEN, CLASSES, SEQ, BATCH = 16, 8, 12, 3, 6, 8


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.gru = nn.GRU(EMBED, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, CLASSES)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, text):
        embedded = self.embedding(text)
        output, _ = self.gru(embedded)
        return self.fc(output[:, -1, :])


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = GRUClassifier()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    text = cap.replicate(torch.randint(1, VOCAB, (BATCH, SEQ), generator=g), name="text", values=(0, VOCAB))
    label = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="label", values=(0, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with cap.trace():
        x, y = text.chunk(ws)[rank], label.chunk(ws)[rank]
        optimizer.zero_grad()
        predictions = model(x)
        loss = F.cross_entropy(predictions, y, reduction="sum" if BUG else "mean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
