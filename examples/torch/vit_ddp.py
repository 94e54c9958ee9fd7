"""A ViT-style image classifier trained under torch DDP, written as timm / torchvision's
`vision_transformer.py` write it, for `planproof capture --nproc 2 --axis dp`.

`nn.Conv2d` patch embedding (kernel = stride = patch), `x.flatten(2).transpose(1, 2)`, a class
token `nn.Parameter(torch.zeros(1, 1, D))` `.expand(B, -1, -1)` and `torch.cat`, a learned
position embedding, pre-norm blocks with `nn.LayerNorm` and `nn.MultiheadAttention(batch_first=True)`,
an MLP with `nn.GELU`, the class token's output pooled (`x[:, 0]`), `F.cross_entropy`; DDP; SGD
with momentum and `torch.optim.lr_scheduler.CosineAnnealingLR`.

`--bug`: the class token is assigned to the model after DDP wrapped it (as when a checkpoint's
tensor is loaded by `model.cls_token = nn.Parameter(...)` instead of `load_state_dict`): DDP's
reducer holds the parameters the module had at construction, so its gradient is never averaged.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv

IMG, PATCH, CHANS, DIM, HEADS, CLASSES = 8, 4, 3, 8, 2, 4
BATCH = 4


class PatchEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(CHANS, DIM, kernel_size=PATCH, stride=PATCH)

    def forward(self, x):
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2)  # BCHW -> BNC


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM, eps=1e-6)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.norm2 = nn.LayerNorm(DIM, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = PatchEmbed()
        num_patches = (IMG // PATCH) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, DIM) * 0.02)
        self.blocks = nn.Sequential(Block())
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)
        nn.init.normal_(self.cls_token, std=0.02)

    def forward(self, x):
        x = self.patch_embed(x)
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_token, x), dim=1)
        x = x + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    raw = VisionTransformer()
    model = DDP(raw)
    if BUG:
        raw.cls_token = nn.Parameter(raw.cls_token.detach().clone())
    for name, p in raw.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(11)
    images = cap.replicate(torch.randn(BATCH, CHANS, IMG, IMG, generator=g), name="images")
    targets = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="targets", values=(0, CLASSES))
    optimizer = torch.optim.SGD(raw.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    per = BATCH // ws
    with cap.trace():
        output = model(images[rank * per:(rank + 1) * per])
        loss = F.cross_entropy(output, targets[rank * per:(rank + 1) * per])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    for name, p in raw.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
