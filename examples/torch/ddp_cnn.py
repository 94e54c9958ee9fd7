"""A data-parallel CNN classifier as PyTorch's MNIST example writes it (issue 33), for
`planproof capture --nproc 2 --axis dp`.

`nn.Conv2d` layers with `F.relu`, `F.max_pool2d`, `torch.flatten`, `nn.Linear`,
`F.log_softmax` and `F.nll_loss`, wrapped in `torch.nn.parallel.DistributedDataParallel`;
each rank takes its rows `rank::world` of the batch (as `DistributedSampler` gives them);
`torch.optim.SGD(momentum=0.9, weight_decay=5e-4)` as-is (its momentum buffers made inside the
step, so the plan is the first step). Small sizes: 1x8x8 images, batch 4 per rank.

`--bug`: conv1 is built outside the DDP-wrapped module and applied in front of it (a stem
"shared" between models, or a preprocessing layer someone made trainable), so DDP never
all-reduces conv1's gradient: each rank steps it with its own rows' gradient.
`--pool-stride`: max pooling with overlapping windows (kernel 3, stride 2, padding 1, as
ResNet's stem pools) instead of 2x2.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
POOL_STRIDE = "--pool-stride" in sys.argv
BATCH = 8  # 4 rows per rank on 2 processes
C1, C2, HIDDEN, CLASSES = 2, 3, 8, 4


class Net(nn.Module):
    def __init__(self, conv1):
        super().__init__()
        self.conv1 = conv1
        self.conv2 = nn.Conv2d(C1, C2, 3, stride=1, padding=1)
        self.fc1 = nn.Linear(C2 * 3 * 3, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        if self.conv1 is not None:
            x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 3, 2, 1) if POOL_STRIDE else F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    conv1 = nn.Conv2d(1, C1, 3, stride=1)  # 8x8 -> 6x6
    net = Net(None if BUG else conv1)
    for name, p in conv1.named_parameters():
        cap.replicate(p, name="conv1_" + name, role="param")
    for name, p in net.named_parameters():
        if not name.startswith("conv1."):
            cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    params = list(model.parameters()) + (list(conv1.parameters()) if BUG else [])
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, 1, 8, 8, generator=g), name="data")
    target = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="target", values=(0, CLASSES))
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
    with cap.trace():
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
    for name, p in net.named_parameters():
        if not name.startswith("conv1."):
            cap.output(name.replace(".", "_") + "_new", p, "R")
