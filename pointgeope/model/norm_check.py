"""``pointgeope info --check`` of the batch norm kernels (:mod:`pointgeope.model.kernel_check`): the Triton
op against torch's, training mode, forward and backward, float32 and bfloat16; eval mode (``eval``: the running
buffers, the forward's one launch that makes its scale and shift from them, as the test of a trained model runs),
float32 and bfloat16; and float32 in a padded batch (``padded``: the statistics of the first ``valid`` rows, the
last 1/32 dummy, as a CUDA graph's step runs both norms, against the torch ops' prefix statistics).

:data:`~pointgeope.model.norm.KERNEL` (with its ReLU) is checked on the pair MLP's first norm
(``pairs x 16`` rows of width 64), :data:`~pointgeope.model.norm.PLAIN_KERNEL` on a block's third norm
(``points`` rows of width 64), and :data:`~pointgeope.model.residual_norm.EVAL_KERNEL` (the block's third norm,
residual add and ReLU in eval) on the same rows with an identity, float32 and bfloat16, forward and backward (the
gradients of ``x``, the identity, ``weight`` and ``bias``); the figure is the largest difference relative to the
largest value.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model import kernels

__all__ = ["check_cases", "residual_cases"]


def _check_rows(rows: int, width: int, margin: float = 0.05) -> tuple[Tensor, Tensor, Tensor]:
    """Rows ``(rows, width)``, weight and bias of the check, float64, every pre-activation (batch statistics)
    at least about ``margin`` from the ReLU's kink: of millions of values a few would otherwise sit where
    rounding alone decides the mask, and the check would compare two roundings, not two batch norms."""
    g = torch.Generator().manual_seed(3)
    w = torch.rand(width, generator=g, dtype=torch.float64) + 0.5
    b = torch.randn(width, generator=g, dtype=torch.float64)
    x = torch.randn(rows, width, generator=g, dtype=torch.float64) * 2 + 0.5
    scale = w / (x.var(0, unbiased=False) + 1e-5).sqrt()
    pre = (x - x.mean(0)) * scale + b
    return torch.where(pre.abs() < margin, x + torch.where(pre >= 0, 2 * margin, -2 * margin) / scale, x), w, b


def check_cases(relu: bool, device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    """The cases of the norm with its ReLU (``relu``: :data:`~pointgeope.model.norm.KERNEL`) or without it
    (:data:`~pointgeope.model.norm.PLAIN_KERNEL`), as the module docstring says, on ``device``."""
    from pointgeope.model.kernel_check import _grads
    from pointgeope.model.norm import KERNEL, PLAIN_KERNEL  # norm registers its kernels with these cases

    kernel = KERNEL if relu else PLAIN_KERNEL
    rows, width = (pairs * 16 if relu else points), 64
    x, w, b = (t.float().to(device) for t in _check_rows(rows, width))

    def compare(got, want):
        return max(float((a.float() - v.float()).abs().max() / v.float().abs().max())
                   for a, v in zip(got, want, strict=True)), \
            f"rows={rows} width={width}, relative"
    cases = []
    valid = torch.tensor(rows - rows // 32, device=device)       # a padded batch: the last 1/32 rows dummy
    running = (x.mean(0), x.var(0, unbiased=False))             # eval: the rows' own statistics, the margin kept
    for dtype, tol, prefix, evaluated in ((torch.float32, 1e-4, None, False), (torch.bfloat16, 2e-2, None, False),
                                          (torch.float32, 1e-4, None, True), (torch.bfloat16, 2e-2, None, True),
                                          (torch.float32, 1e-4, valid, False)):
        # this iteration's input, buffers and mode, bound when run is made
        def run(fn, xd=x.to(dtype), v=prefix, buffers=running if evaluated else (None, None),  # noqa: B008
                batch=not evaluated):
            return _grads(lambda a, wt, bs: fn(a, wt, bs, *buffers, batch, 0.1, 1e-5, v), [xd, w, b])
        label = f"fwd+bwd {str(dtype)[6:]}" + ("" if prefix is None else " padded") + (" eval" if evaluated else "")
        cases.append(kernels.CheckCase(label, lambda r=run: r(lambda *a: kernel(device, *a)),
                                       lambda r=run: r(kernel.torch), compare, tol))
    return cases


def residual_cases(train: bool, device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    """The cases of the block's third norm, residual add and ReLU on ``device``: ``train``,
    :data:`~pointgeope.model.residual_norm.KERNEL` (batch statistics, float32 and bfloat16, and float32 padded), else
    :data:`~pointgeope.model.residual_norm.EVAL_KERNEL` (the running buffers the rows' own statistics, float32 and
    bfloat16); the identity shifted so that every sum stays about 0.05 from the ReLU's kink."""
    from pointgeope.model.kernel_check import _grads
    from pointgeope.model.residual_norm import EVAL_KERNEL, KERNEL

    del pairs
    kernel = KERNEL if train else EVAL_KERNEL
    x, w, b = _check_rows(points, 64)
    mean, var = x.mean(0), x.var(0, unbiased=False)
    identity = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    pre = (x - mean) * w / (var + 1e-5).sqrt() + b + identity
    identity = torch.where(pre.abs() < 0.05, identity + torch.where(pre >= 0, 0.1, -0.1), identity)
    x, w, b, identity, mean, var = (t.float().to(device) for t in (x, w, b, identity, mean, var))
    valid = torch.tensor(points - points // 32, device=device)   # a padded batch: the last 1/32 rows dummy

    def compare(got, want):
        return max(float((a.float() - v.float()).abs().max() / v.float().abs().max())
                   for a, v in zip(got, want, strict=True)), f"rows={points} width=64, relative"
    cases = []
    settings = (((torch.float32, 1e-4, None), (torch.bfloat16, 2e-2, None), (torch.float32, 1e-4, valid)) if train
                else ((torch.float32, 1e-4, None), (torch.bfloat16, 2e-2, None)))
    for dtype, tol, prefix in settings:
        def run(fn, rows=(x.to(dtype), identity.to(dtype)), v=prefix):  # noqa: B008 - this iteration's, bound here
            buffers = (None, None) if train else (mean, var)
            return _grads(lambda a, i, wt, bs: fn(a, i, wt, bs, *buffers, train, 0.1, 1e-5, v), [*rows, w, b])
        label = f"fwd+bwd {str(dtype)[6:]}" + ("" if prefix is None else " padded") + ("" if train else " eval")
        cases.append(kernels.CheckCase(label, lambda r=run: r(lambda *a: kernel(device, *a)),
                                       lambda r=run: r(kernel.torch), compare, tol))
    return cases
