"""A CLIP-style contrastive loss under data parallelism (issue 33), for
`planproof capture --nproc 2 --axis dp`.

Each rank encodes its rows of image and text features (a linear projection each,
`F.normalize`); the text embeddings of every rank are gathered with the differentiable
`torch.distributed.nn.functional.all_gather` (its backward on gloo is torch's all-to-all made
of `dist.scatter` calls); each rank's image embeddings are scored against all of them,
`F.cross_entropy` with the rank's own positions as labels; gradients all-reduced and averaged;
SGD.

`--bug`: the labels are `torch.arange(n)` on every rank (the rank's offset into the gathered
batch forgotten).
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BATCH, TEMPERATURE = 8, 0.07


class Encoder(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return F.normalize(self.proj(x), dim=-1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    image_encoder, text_encoder = Encoder(6, 4), Encoder(5, 4)
    for prefix, enc in (("image", image_encoder), ("text", text_encoder)):
        for name, p in enc.named_parameters():
            cap.replicate(p, name=prefix + "_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(BATCH, 6, generator=g), name="images")
    texts = cap.replicate(torch.randn(BATCH, 5, generator=g), name="texts")
    params = list(image_encoder.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    with cap.trace():
        n = BATCH // ws
        img = image_encoder(images[rank * n:(rank + 1) * n])
        txt = text_encoder(texts[rank * n:(rank + 1) * n])
        all_txt = torch.cat(dist_fn.all_gather(txt), dim=0)
        logits = img @ all_txt.t() / TEMPERATURE
        labels = torch.arange(n) if BUG else torch.arange(n) + rank * n
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
    for prefix, enc in (("image", image_encoder), ("text", text_encoder)):
        for name, p in enc.named_parameters():
            cap.output(prefix + "_" + name.replace(".", "_") + "_new", p, "R")
