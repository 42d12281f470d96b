"""Standard GeoPE's fused relation with the points' turn folded into its kernel: one launch each way, not two.

``fused_attention.frame_relation`` computes ``r_ij = R_i^T R_j x[idx[i, j]] - q_i (+ delta_ij)`` (``R`` the points'
constant rotations, their shift tables ``(5, N, C)``). Its default path turns the points once (``R_j x_j``,
``rotation.apply_shifted``: a launch) before its kernel, and turns the summed gradients back (``R_j^T``, a launch)
after its backward kernel: 2 launches a layer more than ``rpe``'s relation. Here (:class:`FoldedFrame`, kernel
``frame_relation_fold``) the relation's kernel turns every pair by both rotations (``triton_frame_fold.py``)::

    forward    r_ij   = R_i^T (R_j x_j) - q_i (+ delta_ij)          one launch
    backward   gx_j  += R_j^T R_i g_ij   (atomics),  gq_i = -sum_j g_ij,  gdelta = g

Both rotations are orthogonal 3x3 blocks, so the adjoint of ``x -> R_i^T R_j x`` is ``g -> R_j^T R_i g``. The tables
must be block diagonal in blocks of three channels (``rotation.rotation_tables``' are; ``frame_relation`` is
documented for those): the kernel reads each block's nine entries, not the five shifts of a banded matrix.

What it costs: every pair reads its source point's nine coefficients a block and does 18 multiply-adds a block, where
the default path reads the turned point (3 values a block) and does 15 (five shifts a channel): on a GPU it pays
where launches, not the pairs, set the step's time (2 x 80k points), and may not where the pairs do (16 x 80k).
No GPU has timed it yet, so it is off by default: ``POINTGEOPE_FRAME_FOLD=1`` (a switch, read at each call by
:func:`folds`, as ``kernel_choice``'s are), or :data:`FOLD` set in code (:func:`folding` for a block), turns it on for
the process, as ``gather_backward.SCATTER`` chooses that op's sums; ``bench_train_step.py --kernels default frame_fold``
times both on a GPU to decide (docs/gpu.md). Where it is on, its registry entry decides as the other fused ops' do
(Triton on CUDA, ``POINTGEOPE_KERNELS``, failures). It sums with atomics, so under
``torch.use_deterministic_algorithms(True)`` or ``gather_backward.SCATTER = "sorted"`` the default path runs (its sums
by source point). A kernel that fails falls back to the torch reference, as every fused op does.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import Tensor

from pointgeope.model.attention_reference import out_dtype
from pointgeope.model.first_order import KERNEL_WAY, first_order_only
from pointgeope.model.kernel_choice import kernel_module, parse_switch

__all__ = ["FoldedFrame", "NAME", "ENV", "FOLD", "folds", "folding", "blocks"]

NAME = "frame_relation_fold"        # its entry in fused_attention.KERNELS and the registry
ENV = "POINTGEOPE_FRAME_FOLD"       # the environment's switch (default off)
FOLD: bool | None = None            # set in code: whether frame_relation folds; None: the environment's switch


def folds() -> bool:
    """Whether ``frame_relation`` folds the points' turn into its kernel: :data:`FOLD` where set, else
    ``POINTGEOPE_FRAME_FOLD`` (off when unset; a value other than a switch's words: one line, ``KernelChoiceError``)."""
    return FOLD if FOLD is not None else parse_switch(ENV, os.environ.get(ENV), False)


@contextlib.contextmanager
def folding(on: bool = True) -> Iterator[None]:
    """:data:`FOLD` set to ``on`` inside the block, then restored (tests): a setting of the process."""
    global FOLD  # noqa: PLW0603 - the process-wide setting this block sets and restores
    saved, FOLD = FOLD, on
    try:
        yield
    finally:
        FOLD = saved


def blocks(channels: int) -> int:
    """Blocks of three channels a row, the last one partial where ``channels`` is not a multiple of 3."""
    return (channels + 2) // 3


def _f64(*tensors: Tensor) -> bool:
    """Whether the kernels accumulate in float64 (any of ``tensors`` float64, the tables' or the features')."""
    return any(t.dtype == torch.float64 for t in tensors)


class FoldedFrame(torch.autograd.Function):
    """``R_i^T R_j x[idx] - q (+ delta)`` by one launch forward and one backward (module docstring); saves ``idx``
    and the tables (no ``(N, k, C)`` pairs), as the unfolded ``_FrameRelation``."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, tables: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
        from pointgeope.model.fused_attention import _launch, tiles

        x, idx, tables, q = x.contiguous(), idx.contiguous(), tables.contiguous(), q.contiguous()
        delta = None if delta is None else delta.contiguous()
        ctx.save_for_backward(idx, tables)
        ctx.dtypes = (x.dtype, q.dtype, None if delta is None else delta.dtype)
        (n, k), c = idx.shape, x.shape[1]
        out = torch.empty(n, k, c, dtype=out_dtype(x, q, delta), device=x.device)
        f64 = _f64(x, tables)
        bm, bk, bb = tiles(NAME, k, min(blocks(c), 32), f64=f64)
        _launch(kernel_module("pointgeope.model.triton_frame_fold").fold_forward, [(n, bm), (blocks(c), bb)],
                x, idx, tables, q, q if delta is None else delta, out, n, k, c, blocks(c),
                HAS_DELTA=delta is not None, F64=f64, BLOCK_M=bm, BLOCK_K=bk, BLOCK_B=bb, device=x.device)
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        from pointgeope.model.fused_attention import frame_backward

        return frame_backward(NAME, ctx, g, lambda *args: _backward(ctx.dtypes, *args))


def _backward(dtypes: tuple, idx: Tensor, tables: Tensor, g: Tensor, needs: list[bool]) -> tuple:
    """``(gx, gq, gdelta)`` by the folded backward kernel (``None`` where ``needs`` says no)."""
    from pointgeope.model.fused_attention import _launch, tiles

    x_dtype, q_dtype, delta_dtype = dtypes
    (n, k), c = idx.shape, g.shape[-1]
    grad_x, grad_q, grad_delta = needs
    f64 = _f64(g, tables) or x_dtype == torch.float64
    gx = torch.zeros(n, c, dtype=torch.float64 if f64 else torch.float32, device=g.device) if grad_x else g
    gq = torch.empty(n, c, dtype=q_dtype, device=g.device) if grad_q else g
    bm, bk, bb = tiles(NAME, k, min(blocks(c), 32), backward=True, f64=f64)
    if grad_x or grad_q:
        _launch(kernel_module("pointgeope.model.triton_frame_fold").fold_backward, [(n, bm), (blocks(c), bb)],
                g, idx, tables, gx, gq, n, k, c, blocks(c), GRAD_X=grad_x, GRAD_Q=grad_q, F64=f64, BLOCK_M=bm,
                BLOCK_K=bk, BLOCK_B=bb, device=g.device)
    return gx.to(x_dtype) if grad_x else None, gq if grad_q else None, g.to(delta_dtype) if grad_delta else None
