"""A data-parallel CNN classifier as PyTorch's MNIST example writes it (issue 33), for
`planproof capture --nproc 2 --axis dp`.

`nn.Conv2d` layers with `F.relu`, `F.max_pool2d`, `torch.flatten`, `nn.Linear`,
`F.log_softmax` and `F.nll_loss`, wrapped in `torch.nn.parallel.DistributedDataParallel`;
each rank takes its contiguous share of the batch, `data.chunk(world)[rank]` (or strided
rows, `--rows strided`, see the end);
`torch.optim.SGD(momentum=0.9, weight_decay=5e-4)` as-is (its momentum buffers made inside the
step, so the plan is the first step). 1x8x8 images, 4 per rank; conv 1-4-6, Linear 54-16-10.

`--bug`: conv1 is built outside the DDP-wrapped module and applied in front of it (a stem
kept out of the wrapper, or a preprocessing layer someone made trainable), so DDP never
all-reduces conv1's gradient: each rank steps it with its own rows' gradient.

Variants that exercise the mapping (plans/import/aten-conv.ts; their fixtures check it against
PyTorch's numbers): `--geometry`: conv1 with stride 2 and padding 1, conv2 with dilation 2,
overlapping max pooling (kernel 3, stride 1), `F.avg_pool2d` with padding and
`F.adaptive_avg_pool2d`; `--ties`: integer images and conv weights, so max pooling windows
hold equal maxima (the gradient goes to the first, as ATen's CPU kernel sends it).

`--bn`: an `nn.BatchNorm2d` after conv1, as written, under DDP without `SyncBatchNorm`: each
rank normalizes by its own rows' mean and variance, which is not what the single-device step
computes on the whole batch. verify says NOT EQUIVALENT, first at the running mean (the
average over the ranks of their batch means is the logical one: an all-reduce is missing,
which is what SyncBatchNorm adds); the parameters differ too. A correct answer, not a bug twin.

`--rows strided`: rank r takes rows r, r + world, r + 2·world, ... (`data[rank::world]`, as
DistributedSampler without shuffling hands them out) instead of its chunk. Each rank's
activation gradients are then twice a strided selection of the logical ones (its loss is a
mean over 4 rows, the logical one over 8; DDP's average restores the parameter gradients):
verify --infer proposes them as scaled striped slices, proves them and says VERIFIED; with
`--bug` too, NOT EQUIVALENT at conv1's parameters.

`--batch N`: the global batch (default 8); `--batch 64 --rows strided` gives each of 2 ranks 32
rows, as a DistributedSampler hands out a real batch.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
GEOMETRY = "--geometry" in sys.argv
TIES = "--ties" in sys.argv
BN = "--bn" in sys.argv
STRIDED = "--rows" in sys.argv and sys.argv[sys.argv.index("--rows") + 1] == "strided"
BATCH = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 8  # 4 rows per rank on 2 processes
C1, C2, HIDDEN, CLASSES = 4, 6, 16, 10


class Net(nn.Module):
    def __init__(self, conv1):
        super().__init__()
        self.conv1 = conv1
        self.bn1 = nn.BatchNorm2d(C1) if BN else None
        self.conv2 = nn.Conv2d(C1, C2, 3, padding=2, dilation=2) if GEOMETRY else nn.Conv2d(C1, C2, 3, stride=1, padding=1)
        self.fc1 = nn.Linear(C2 * (1 if GEOMETRY else 3 * 3), HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        if self.conv1 is not None:
            x = self.conv1(x)
            x = F.relu(self.bn1(x) if BN else x)
        x = F.relu(self.conv2(x))
        if GEOMETRY:  # 4x4 -> 2x2 -> 3x3 -> 1x1
            x = F.avg_pool2d(F.max_pool2d(x, 3, stride=1), 2, stride=1, padding=1)
            x = F.adaptive_avg_pool2d(x, (1, 1))
        else:  # 6x6 -> 3x3
            x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    conv1 = nn.Conv2d(1, C1, 3, stride=2, padding=1) if GEOMETRY else nn.Conv2d(1, C1, 3, stride=1)  # 8x8 -> 4x4 or 6x6
    net = Net(None if BUG else conv1)
    g = torch.Generator().manual_seed(1)
    if TIES:
        with torch.no_grad():
            for c in (conv1, net.conv2):
                c.weight.copy_(torch.randint(-1, 2, c.weight.shape, generator=g))
                c.bias.copy_(torch.randint(-1, 2, c.bias.shape, generator=g))
    for name, p in conv1.named_parameters():
        cap.replicate(p, name="conv1_" + name, role="param")
    for name, p in net.named_parameters():
        if not name.startswith("conv1."):
            cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    params = list(model.parameters()) + (list(conv1.parameters()) if BUG else [])
    images = torch.randint(-2, 3, (BATCH, 1, 8, 8), generator=g).float() if TIES else torch.randn(BATCH, 1, 8, 8, generator=g)
    data = cap.replicate(images, name="data")
    target = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="target", values=(0, CLASSES))
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
    with cap.trace():
        if STRIDED:  # DistributedSampler's rows (shuffle=False): r, r + ws, r + 2·ws, ...
            x, y = data[rank::ws], target[rank::ws]
        else:
            x, y = data.chunk(ws)[rank], target.chunk(ws)[rank]
        opt.zero_grad()
        if BUG:
            x = F.relu(conv1(x))
        output = model(x)
        loss = F.nll_loss(output, y)
        loss.backward()
        opt.step()
    for name, p in conv1.named_parameters():
        cap.output("conv1_" + name + "_new", p, "R")
    if BN:
        cap.output("bn1_running_mean_new", net.bn1.running_mean, "R")
        cap.output("bn1_running_var_new", net.bn1.running_var, "R")
    for name, p in net.named_parameters():
        if not name.startswith("conv1."):
            cap.output(name.replace(".", "_") + "_new", p, "R")
