"""Neighbour gather ``x[idx]`` whose backward is one ``index_add_``.

Autograd's backward of advanced indexing (``index_put_`` with accumulation) took 84 ms where
``index_add_`` takes 24 ms for ``(16k x 16, 64)`` rows on one CPU thread; every attention layer gathers
keys and values, so the gather is worth its own function::

    forward:   out[i, j, :] = x[idx[i, j], :]                      (N, k, C) from (N_s, C)
    backward:  grad_x[r, :] = sum_{(i, j): idx[i, j] = r} grad[i, j, :]
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["gather"]


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.rows = x.shape[0]
        return _select(x, idx)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (idx,) = ctx.saved_tensors
        flat = grad.reshape(-1, *grad.shape[idx.dim():])
        grad_x = grad.new_zeros(ctx.rows, *flat.shape[1:]).index_add_(0, idx.reshape(-1), flat)
        return grad_x, None


def _select(x: Tensor, idx: Tensor) -> Tensor:
    """``x[idx]`` as one ``index_select`` of rows: 2.5-3x faster than advanced indexing on the CPU for
    ``(N k, C)`` rows (2.3 vs 5.9 ms at 8k x 16 x 64, 2.6 vs 7.6 ms at 32k x 8 x 32, one thread)."""
    return x.index_select(0, idx.reshape(-1)).view(*idx.shape, *x.shape[1:])


def gather(x: Tensor, idx: Tensor) -> Tensor:
    """``x[idx]`` for ``x (N_s, ...)`` and integer ``idx`` of any shape, with an ``index_add_`` backward."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _Gather.apply(x, idx)
    return _select(x, idx)
