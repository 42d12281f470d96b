"""What the batch norm functions accept, and what the Triton kernels take, for :mod:`pointgeope.model.norm`.

- :func:`check_arguments`: what ``F.batch_norm`` refuses is refused here too, in one line
  (:class:`~pointgeope.model.kernels.KernelArgumentError`), before any kernel, so that a caller's mistake
  never turns the kernel off as a failure would;
- :func:`kernel_takes`: the inputs the kernels take; the others (not 2-D, no affine parameters, other
  dtypes, too few rows) run on torch's path, for the modules and the functions alike (one rule).

Both read shapes, dtypes and devices only: no pass over the data, no host read.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model import kernels

__all__ = ["check_arguments", "kernel_takes"]


def check_arguments(x: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                    running_var: Tensor | None, batch_stats: bool) -> None:
    """Raise :class:`~pointgeope.model.kernels.KernelArgumentError` (one line) for ``x`` not ``(R, C)`` (the
    functions take rows only, ``F.batch_norm`` also ``(N, C, L)``) and for what ``F.batch_norm`` refuses:

    - a dtype that is not floating point;
    - ``weight``, ``bias`` and the running buffers (where given) of another shape than ``(C,)`` or on
      another device;
    - no running buffers without batch statistics;
    - one row with batch statistics (torch: "Expected more than 1 value per channel").

    Shapes, dtypes and devices only: no pass over the data, no host read.
    """
    fail = kernels.KernelArgumentError
    if x.dim() != 2 or not x.is_floating_point():
        raise fail(f"batch norm: expected x of shape (R, C) and a floating dtype, got {tuple(x.shape)} {x.dtype}")
    given = {"weight": weight, "bias": bias, "running_mean": running_mean, "running_var": running_var}
    for name, t in given.items():
        if t is not None and (t.shape != x.shape[1:] or not t.is_floating_point() or t.device != x.device):
            raise fail(f"batch norm: expected {name} of shape ({x.shape[1]},) (x's channels), floating, on "
                       f"{x.device}, got {tuple(t.shape)} {t.dtype} on {t.device}")
    if not batch_stats and (running_mean is None or running_var is None):
        raise fail("batch norm: batch_stats=False normalises by the running buffers: pass running_mean and "
                   "running_var")
    if batch_stats and x.shape[0] == 1:
        raise fail(f"batch norm: expected more than 1 row per channel for batch statistics, got x of shape "
                   f"{tuple(x.shape)}: batch more rows, or batch_stats=False (eval)")


def kernel_takes(x: Tensor, weight: Tensor | None, bias: Tensor | None, batch_stats: bool) -> bool:
    """Whether the kernel takes ``x`` with ``weight`` and ``bias``: 2-D, affine, float32 parameters with float32,
    bfloat16 or float16 rows, or float64 with float64; more than one row for batch statistics, one or more
    without (else the torch path runs: the modules' and the functions' one rule)."""
    if weight is None or bias is None or x.dim() != 2 or x.shape[1] != weight.shape[0] or bias.dtype != weight.dtype:
        return False
    if x.shape[0] <= int(batch_stats):
        return False
    return x.dtype == weight.dtype or (weight.dtype == torch.float32 and x.dtype in (torch.bfloat16, torch.float16))
