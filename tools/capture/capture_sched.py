"""`torch.optim.lr_scheduler.ReduceLROnPlateau.step(val_loss)` as `planproof capture` runs it
(issue 33): the metric a training script passes is usually a traced read (`loss.item()`, the
loss all-reduced and averaged), and torch's step begins with `current = float(metrics)`.
CPython's `float()` strips the `capture_reads.Tracked` subclass, so the read would be marked by
value (the plan specialized to the exact loss), although the scheduler only compares it
(`is_better`: `a < best * (1 - threshold)`) and keeps it as `best`. While the step runs, the
scheduler module's `float` is the user script's (`capture_reads.script_float`): a traced float
stays itself (the same number), a one-element floating tensor is its `.item()` read, anything
else is the builtin's result. The comparisons then write guards with their outcomes
(docs/capture.md, "Guards"); a value the scheduler bakes into an op would still be marked.
"""
import builtins
import sys

from torch.optim import lr_scheduler

import capture_reads


def install():
    real = lr_scheduler.ReduceLROnPlateau.step
    if getattr(real, "__wrapped__", None) is not None:
        return
    module = sys.modules[real.__module__]

    def step(self, metrics, epoch=None):
        module.float = lambda x: capture_reads.script_float(builtins.float, x)
        try:
            return real(self, metrics, epoch)
        finally:
            del module.float

    step.__wrapped__ = real
    lr_scheduler.ReduceLROnPlateau.step = step
