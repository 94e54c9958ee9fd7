"""torch.nn.SyncBatchNorm as `planproof capture` runs it (docs/capture.md, "SyncBatchNorm").

torch 1.13 runs SyncBatchNorm on GPUs only (`forward` raises "expected input tensor to be on
GPU" on CPU, and its kernels `batch_norm_stats` / `batch_norm_gather_stats_with_counts` /
`batch_norm_backward_reduce` / `batch_norm_backward_elemt` are CUDA kernels). The capture runs
on CPU, so, as with DDP's reducer, it puts a stand-in with SyncBatchNorm's semantics in its
place, written with ATen ops the importer maps and traced collectives:

- forward (training, a group of more than one): the per-channel mean and biased variance over
  every member's batch, `mean = all_reduce(Σ x) / N`, `var = all_reduce(Σ (x - mean)²) / N`
  (N the group's element count per channel); `y = (x - mean) · rsqrt(var + eps) · w + b`; the
  running statistics updated in place with `momentum`, the variance unbiased by N / (N - 1),
  as `batch_norm_gather_stats_with_counts` does;
- backward, as torch's `SyncBatchNorm.backward`: with `x̂ = (x - mean) · invstd`, `Σ dy` and
  `Σ dy · x̂` all-reduced, `dx = (dy - Σdy/N - x̂ · Σ(dy·x̂)/N) · w · invstd` (torch reduces
  `Σ dy · (x - mean)` and multiplies by invstd² instead: the same number in exact arithmetic),
  and the weight and bias gradients of this member's rows only (`Σ dy · x̂`, `Σ dy`), which DDP
  then averages. The formulas are written in the order the importer's `native_batch_norm` rules
  use, so the proof can cut both sides at the same statistics.

torch combines per-member (mean, invstd, count) with Welford's formulas instead of the two
passes here; in exact arithmetic both are the statistics of the whole batch. Anything else
(eval mode, a group of one, no running statistics tracked, an input without the batch) runs
torch's own code path, which is `F.batch_norm`, as torch's forward does.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

_CURRENT = None
_REAL_ALL_REDUCE = None


def install(current, real_all_reduce):
    """Replaces SyncBatchNorm.forward (once per process); `real_all_reduce` runs untraced."""
    global _CURRENT, _REAL_ALL_REDUCE
    _CURRENT, _REAL_ALL_REDUCE = current, real_all_reduce
    torch.nn.SyncBatchNorm.forward = _forward


def _group_count(n, group):
    """The group's element count per channel: a shape, summed by the capture's own untraced
    all-reduce (the members' batches may differ in size)."""
    cap = _CURRENT[-1]
    cap.suspended += 1
    try:
        t = torch.tensor([n], dtype=torch.int64)
        _REAL_ALL_REDUCE(t, group=group)
        return int(t[0])
    finally:
        cap.suspended -= 1


def _summed(t, group):
    t = t.clone()
    dist.all_reduce(t, group=group)
    return t


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, group, count):
        dims = [0] + list(range(2, input.dim()))
        shape = [1, input.shape[1]] + [1] * (input.dim() - 2)
        mean = _summed(input.sum(dims), group) / count
        xmu = input - mean.view(shape)
        var = _summed((xmu * xmu).sum(dims), group) / count
        invstd = torch.rsqrt(var + eps)
        out = xmu * invstd.view(shape)
        if weight is not None:
            out = out * weight.view(shape) + bias.view(shape)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
            running_var.mul_(1 - momentum).add_(var * count / (count - 1) * momentum)
        # As torch's: the input and the statistics are saved, and the backward centres the
        # input again (batch_norm_backward_reduce takes input and mean).
        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.meta = (dims, shape, group, count)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, invstd = ctx.saved_tensors
        dims, shape, group, count = ctx.meta
        xhat = (input - mean.view(shape)) * invstd.view(shape)
        sum_dy = grad_output.sum(dims, keepdim=True)
        sum_dy_xhat = (grad_output * xhat).sum(dims, keepdim=True)
        grad_weight = grad_bias = None
        if weight is not None:
            # This member's rows only, as batch_norm_backward_reduce returns them (DDP averages them).
            grad_weight = sum_dy_xhat.view(-1)
            grad_bias = sum_dy.view(-1)
        # Each member's share of the means, summed: the all-reduced value is then the group's
        # mean itself, the tensor the logical rule computes (a sum all-reduced first would be
        # the logical bias gradient, and the mean a function of it the proof cannot cut at).
        mean_dy = _summed(sum_dy / count, group)
        mean_dy_xhat = _summed(sum_dy_xhat / count, group)
        grad_input = grad_output - mean_dy - xhat * mean_dy_xhat
        scale = invstd if weight is None else weight * invstd
        return grad_input * scale.view(shape), grad_weight, grad_bias, None, None, None, None, None, None


def _forward(self, input):
    """torch 1.13's SyncBatchNorm.forward without its GPU check, the sync path the stand-in."""
    self._check_input_dim(input)
    self._check_non_zero_input_channels(input)
    factor = 0.0 if self.momentum is None else self.momentum
    if self.training and self.track_running_stats:
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
    bn_training = self.training or (self.running_mean is None and self.running_var is None)
    running_mean = self.running_mean if not self.training or self.track_running_stats else None
    running_var = self.running_var if not self.training or self.track_running_stats else None
    need_sync = bn_training and self.training
    group = None
    if need_sync:
        group = self.process_group if self.process_group else dist.group.WORLD
        need_sync = dist.get_world_size(group) > 1
    if not need_sync:
        return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, bn_training, factor, self.eps)
    count = _group_count(input.numel() // input.shape[1], group)
    if count <= 1:
        raise ValueError("Expected more than 1 value per channel when training, got input size %s" % (list(input.shape),))
    return _SyncBatchNorm.apply(input, self.weight, self.bias, running_mean, running_var, self.eps, factor, group, count)
