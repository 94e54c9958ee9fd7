"""Evidence for the catalog's load-refused entries (plans/gen/bugs.ts, `detect: load`): each
injection written as the PyTorch code it stands for, on two gloo ranks on the CPU, as a
Megatron-style sequence-parallel block and a hand-rolled data-parallel step. Each buggy variant
raises before any training step completes, so there is no run whose values could differ: the
loader's refusal naming the op is the detection. The correct twin of each runs.

Usage: python3 bench/load-refusals.py    (torch with gloo; prints one line per case)
"""
import os
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TP = 2
SEQ, BATCH, HIDDEN, FFN = 8, 2, 4, 8


def gather_seq(x):
    """Megatron's gather_from_sequence_parallel_region: all-gather along the sequence dim."""
    parts = [torch.empty_like(x) for _ in range(TP)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=0)


def gather_hidden(x):
    """sp-gather-before-norm: the same all-gather, concatenated on the hidden dim."""
    parts = [torch.empty_like(x) for _ in range(TP)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=-1)


def allreduce_instead(x):
    """allgather-to-allreduce: the sequence all-gather written as an all-reduce."""
    y = x.clone()
    dist.all_reduce(y)
    return y


def reduce_scatter_seq(y):
    """Megatron's reduce_scatter_to_sequence_parallel_region (all-reduce, then this rank's chunk)."""
    dist.all_reduce(y)
    return y.chunk(TP, dim=0)[dist.get_rank()].contiguous()


def sp_block(gather):
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(HIDDEN)
    w_in = torch.randn(HIDDEN, FFN // TP)   # column-parallel
    w_out = torch.randn(FFN // TP, HIDDEN)  # row-parallel
    x = torch.randn(SEQ // TP, BATCH, HIDDEN)  # this rank's sequence shard
    h = gather(norm(x))
    out = reduce_scatter_seq(torch.relu(h @ w_in) @ w_out)
    # Forward only: the raw collectives carry no autograd, and each bug raises in the forward.
    y = x + out
    assert y.shape == x.shape


def dp_step(sync):
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Linear(HIDDEN, HIDDEN)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(BATCH, HIDDEN)).pow(2).mean().backward()
    for p in model.parameters():
        sync(p)
    opt.step()


def allreduce_grad(p):
    dist.all_reduce(p.grad)
    p.grad /= dist.get_world_size()


def allgather_grad(p):
    """allreduce-to-allgather: the gradient all-reduce written as an all-gather."""
    parts = [torch.empty_like(p.grad) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, p.grad)
    p.grad = torch.cat(parts, dim=0)


CASES = [
    ('correct SP block', lambda: sp_block(gather_seq)),
    ('sp-gather-before-norm', lambda: sp_block(gather_hidden)),
    ('allgather-to-allreduce', lambda: sp_block(allreduce_instead)),
    ('correct DP step', lambda: dp_step(allreduce_grad)),
    ('allreduce-to-allgather', lambda: dp_step(allgather_grad)),
]


def worker(rank):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29517')
    dist.init_process_group('gloo', rank=rank, world_size=TP)
    for name, run in CASES:
        try:
            run()
            msg = 'runs'
        except RuntimeError as e:
            msg = 'RuntimeError: ' + str(e).splitlines()[0]
        except Exception:  # noqa: BLE001 (any other failure is reported as it is)
            msg = traceback.format_exc().splitlines()[-1]
        dist.barrier()
        if rank == 0:
            print(f'{name}: {msg}', flush=True)
    dist.destroy_process_group()


if __name__ == '__main__':
    mp.spawn(worker, nprocs=TP)
