"""A multi-label image classifier under torch DDP (issue 33), for `planproof capture --nproc 2
--axis dp`, as chest-X-ray and attribute-tagging notebooks write it: a `nn.Sequential` CNN
(`Conv2d` - `SiLU` - `Dropout2d(0.1)` - `MaxPool2d(2)` - `Conv2d` - `SiLU` -
`AdaptiveAvgPool2d(1)` - `nn.Flatten()` - `Linear`), `nn.BCEWithLogitsLoss(pos_weight=...)` on
multi-hot targets (rare labels up-weighted by neg/pos counts), SGD with Nesterov momentum,
`CosineAnnealingLR`, and a timm-style `ModelEma` kept with `torch.no_grad()` lerp updates; one
step (`--two-steps`: two).

`--bug`: the gradients all-reduced by hand after `backward()` as well (a leftover from a
pre-DDP training loop): DDP already averaged them, so each update is world-size times too large."""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
LABELS = 3
STEPS = 2 if "--two-steps" in sys.argv else 1


class ModelEma:
    """Keeps a moving average of the model's weights (timm's ModelEmaV2, simplified)."""

    def __init__(self, model, decay=0.9):
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            ema_v.copy_(ema_v * self.decay + (1.0 - self.decay) * model_v)


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.SiLU(),
        nn.Dropout2d(0.1),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, padding=1),
        nn.SiLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, LABELS),
    )


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = build_model()
    ema = ModelEma(net)
    for name, p in net.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    for name, p in ema.module.named_parameters():
        cap.replicate(p, name="ema_" + name.replace(".", "_"), role="optimizer_state")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(8, 1, 6, 6, generator=g), name="images")
    targets = cap.replicate((torch.rand(8, LABELS, generator=g) > 0.6).float(), name="targets")
    with cap.trace():
        model = DDP(net)
        # label frequencies over the whole training set (here: the batch every rank holds)
        pos = targets.sum(0).clamp(min=1)
        pos_weight = (targets.shape[0] - pos) / pos
        criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
        x, y = images.chunk(ws)[rank], targets.chunk(ws)[rank]
        for _ in range(STEPS):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            if BUG:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            optimizer.step()
            scheduler.step()
            ema.update(net)
    for name, p in net.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
    for name, p in ema.module.named_parameters():
        cap.output("ema_" + name.replace(".", "_") + "_new", p, "R")
