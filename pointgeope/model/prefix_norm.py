"""Training batch norm over a padded batch's real rows in torch ops: :func:`prefix_batch_norm`.

Inside :func:`pointgeope.model.padding.batch_rows` a batch norm in training takes its statistics over the first
``n = valid`` rows of ``x (R, C)`` (the real prefix) and normalises every row by them. ``norm.py`` runs this where
its Triton kernels do not (the CPU, ``POINTGEOPE_KERNELS=torch``, inputs they do not take, a cumulative
``momentum=None``) and as their fallback: about 11 passes over the rows forward and 15 backward, where the
kernels make 2 and 3. No value is read on the host (a CUDA graph records it).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.first_order import first_order_only

__all__ = ["prefix_batch_norm"]


class _PrefixBatchNorm(torch.autograd.Function):
    """Training batch norm of ``x (R, C)`` with the statistics of its first ``n = valid`` rows (a padded batch's
    real rows, :mod:`pointgeope.model.padding`), every row normalised by them::

        mean = sum_{r < n} x_r / n,   var = sum_{r < n} (x_r - mean)^2 / n,   s = 1 / sqrt(var + eps)
        y_r = w (x_r - mean) s + b                                           (all R rows)

    in float32 (float64 for float64 ``x``), ``y`` in ``x``'s dtype. Saves ``x`` as it came (bf16 stays bf16) and
    the ``(C,)`` mean and ``s``, like torch's; the backward recomputes ``xh = (x - mean) s``. With ``g = dL/dy w``,
    ``S1 = sum_all g``, ``S2 = sum_all g xh``: ``dx_r = s (g_r - (S1 + xh_r S2) / n)`` for ``r < n`` (they move the
    statistics), ``dx_r = s g_r`` after; ``dw = sum_all dL/dy xh``, ``db = sum_all dL/dy``. The running buffers
    move by ``momentum`` towards the mean and the unbiased ``var n / (n - 1)``, as torch's. No value is read
    on the host."""

    @staticmethod
    def forward(ctx, x, valid, weight, bias, running_mean, running_var, momentum, eps):
        xf = x if x.dtype == torch.float64 else x.float()
        real = (torch.arange(x.shape[0], device=x.device) < valid).unsqueeze(1)             # (R, 1)
        n = valid.to(xf.dtype)
        mean = torch.where(real, xf, 0).sum(0) / n
        var = torch.where(real, (xf - mean).square(), 0).sum(0) / n
        invstd = torch.rsqrt(var + eps)
        y = (xf - mean) * invstd
        if weight is not None:
            y = y * weight + bias
        if running_mean is not None:
            running_mean.lerp_(mean.to(running_mean.dtype), momentum)
            running_var.lerp_((var * n / (n - 1).clamp_min(1)).to(running_var.dtype), momentum)
        ctx.save_for_backward(x, valid, mean, invstd, weight)
        return y.to(x.dtype)

    @staticmethod
    @first_order_only("batch norm over a padded batch (train.cuda_graphs) is first-order: train unpadded "
                      "(train.cuda_graphs: false), whose batch norm is torch's")
    def backward(ctx, gy):
        x, valid, mean, invstd, weight = ctx.saved_tensors
        xh = ((x if x.dtype == torch.float64 else x.float()) - mean) * invstd
        gy = gy.to(xh.dtype)
        g = gy * weight if weight is not None else gy
        real = (torch.arange(x.shape[0], device=x.device) < valid).unsqueeze(1)
        shared = (g.sum(0) + xh * (g * xh).sum(0)) / valid.to(xh.dtype)
        dx = (invstd * (g - torch.where(real, shared, 0))).to(x.dtype)
        needs_w = weight is not None and ctx.needs_input_grad[2]
        dw = (gy * xh).sum(0).to(weight.dtype) if needs_w else None
        db = gy.sum(0).to(weight.dtype) if weight is not None and ctx.needs_input_grad[3] else None
        return dx, None, dw, db, None, None, None, None


def prefix_batch_norm(x: Tensor, valid: Tensor, weight: Tensor | None, bias: Tensor | None,
                      running_mean: Tensor | None, running_var: Tensor | None, momentum: float | Tensor,
                      eps: float) -> Tensor:
    """Training batch norm of ``x (R, C)`` over the statistics of its first ``valid`` rows (0-dim int64 tensor on
    ``x``'s device), by :class:`_PrefixBatchNorm`."""
    return _PrefixBatchNorm.apply(x, valid, weight, bias, running_mean, running_var, momentum, eps)
