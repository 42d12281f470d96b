"""Linear GeoPE for vector attention: ``R(t(p_j) - t(p_i)) x_j = R(t(d_ij)) x_j`` of gathered neighbours.

The rotation of pair ``(i, j)`` depends on the displacement ``d_ij = p_j - p_i`` alone (phases are linear in
the position): block ``b`` turns by ``phi_b = k_b |d|`` about ``u = d / |d|``, ``k_b`` the block scale
(``block_scale``; Rodrigues, ``pointgeope.geope``, ``docs/GEOPE_SPEC.md``). Every pair has its own axis and
angles, so nothing is shared per point as in standard GeoPE (``rotation.py``); the arithmetic runs on
contiguous planes of block components::

    # rows (M, C):  [ v0x v0y v0z | v1x v1y v1z | ... | pass-through ]
    # planes (3, M, n): plane d = [ v0d v1d ... v(n-1)d ] of every row

where each elementwise operation is one flat loop (``_turn_planes``). ``relative_frame`` gathers, rotates
and subtracts the query in one autograd Function that saves the indices and displacements only; the
gradient is the rotation by ``-d`` (orthogonality). Angles and products in float32 at least, rounded once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope import rodrigues, rotation_terms
from pointgeope.model import geope_pairs
from pointgeope.model.first_order import ROTATION_WAY, first_order_only
from pointgeope.model.ops import gather
from pointgeope.model.rotation import (
    channel_planes,
    constant,
    geometry_dtype,
    query_steps,
    turned_neighbours,
    write_planes,
)

__all__ = ["relative_blocks", "rotate_relative", "relative_frame"]


def relative_blocks(x: Tensor, disp: Tensor, block_scale: Tensor) -> Tensor:
    """``R(t_b(disp)) v_b`` for ``x (..., C)`` and per-row displacements ``disp (..., 3)`` (e.g. ``(N, k, C)``
    pairs with ``(N, k, 3)``), in float32 at least and rounded once to ``x``'s dtype (``_turn_planes``)."""
    n, channels = block_scale.shape[0], x.shape[-1]
    work = geometry_dtype(x.dtype)
    rows, d, scale = x.reshape(-1, channels), disp.reshape(-1, 3).to(work), block_scale.to(work)
    out = torch.empty_like(rows)
    for part in query_steps(rows.shape[0], 1, channels, x.device):   # rows in cache-sized steps
        write_planes(_turn_planes(channel_planes(rows[part], n, 3, work), d[part], scale), out[part])
    if 3 * n < channels:
        out[:, 3 * n:] = rows[:, 3 * n:]
    return out.view(x.shape)


def _turn_planes(v: Tensor, disp: Tensor, block_scale: Tensor) -> Tensor:
    """``R(k_b d) v`` for every block ``b`` of every row: ``v (3, M, n)`` planes, ``disp (M, 3)``, ``block_scale
    (n,)`` holding ``k_b``. Rodrigues with the row's axis ``u = d / |d|`` and the block's angle
    ``phi_b = k_b |d|``::

        R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi)) (u . v) u

    Every operand is a contiguous ``(M, n)`` plane or a row's scalar, so each of the ~20 elementwise
    operations is one loop over whole rows (per-component views of interleaved channels, with their short
    strided rows, were 2x slower). At ``d = 0``, ``u = 0`` and ``R = I`` exactly."""
    axis, cos, sin, versine = rotation_terms(disp, block_scale)                      # (M, 3), 3 x (M, n)
    u = [c.unsqueeze(1) for c in axis.unbind(1)]                                     # 3 x (M, 1)
    along = torch.mul(v[0], u[0]).addcmul_(v[1], u[1]).addcmul_(v[2], u[2]).mul_(versine)
    out = torch.empty_like(v)
    for d in range(3):
        e, f = (d + 1) % 3, (d + 2) % 3                                              # (u x v)_d = u_e v_f - u_f v_e
        torch.mul(v[f], u[e], out=out[d]).addcmul_(v[e], u[f], value=-1).mul_(sin)
        out[d].addcmul_(cos, v[d]).addcmul_(along, u[d])
    return out


class _RotateRelative(torch.autograd.Function):
    """``relative_blocks`` with a gradient for ``x`` only; saves the displacements ``(N, k, 3)``."""

    @staticmethod
    def forward(ctx, x: Tensor, disp: Tensor, block_scale: Tensor) -> Tensor:
        ctx.save_for_backward(disp, block_scale)
        return relative_blocks(x, disp, block_scale)

    @staticmethod
    @first_order_only(ROTATION_WAY)
    def backward(ctx, grad: Tensor):
        disp, block_scale = ctx.saved_tensors
        return relative_blocks(grad.contiguous(), -disp, block_scale), None, None   # R(-w) g = R^T g


class _RelativeFrame(torch.autograd.Function):
    """``R(t(d_ij)) x[idx[i, j]] - m_i`` for linear GeoPE, with gradients for ``x`` and ``m``.

    Forward, a step of whole queries at a time (``query_steps``): gather the block planes of ``x``
    (``index_select`` on ``(3, N_s, n)``), turn them (``_turn_planes``), write them into the interleaved
    output, subtract.
    Backward: turn the gradient's planes by ``-d`` (``R^T``), interleave, ``index_add_`` into ``x``'s rows.
    Saves ``idx`` and ``disp (N, k, 3)``."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, minus: Tensor | None) -> Tensor:
        ctx.save_for_backward(idx, disp, block_scale)
        ctx.rows, ctx.x_dtype = x.shape[0], x.dtype
        ctx.minus_dtype = None if minus is None else minus.dtype
        n, work = block_scale.shape[0], geometry_dtype(x.dtype)
        scale = block_scale.to(work)
        if geope_pairs.active(x.device):                                               # one fused pass
            dtype = x.dtype if minus is None else torch.promote_types(x.dtype, minus.dtype)
            return geope_pairs.on_device(geope_pairs.relative_pairs, x, idx, disp.to(work), scale,
                                      minus, dtype)
        src, d, flat = channel_planes(x, n, 3, work), disp.reshape(-1, 3).to(work), idx.reshape(-1)   # eager: by steps

        def turn_into(part: slice, rows: Tensor) -> None:
            write_planes(_turn_planes(src.index_select(1, flat[part]), d[part], scale), rows)
        return turned_neighbours(x, idx, minus, 3 * n, turn_into)

    @staticmethod
    @first_order_only(ROTATION_WAY)
    def backward(ctx, grad: Tensor):
        idx, disp, block_scale = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            n, flat, channels, work = block_scale.shape[0], idx.reshape(-1), grad.shape[-1], block_scale.dtype
            rows, d = grad.reshape(-1, channels), disp.reshape(-1, 3)
            grad_x = rows.new_zeros(ctx.rows, channels, dtype=work)
            if geope_pairs.active(grad.device):                                    # one fused pass, R^T g = R(-d) g
                turned = geope_pairs.on_device(geope_pairs.rodrigues_rows, rows, -d.to(work), block_scale)
                return grad_x.index_add_(0, flat, turned).to(ctx.x_dtype), None, None, None, _minus_grad(ctx, grad)
            for part in query_steps(rows.shape[0], 1, channels, grad.device):   # R^T g per pair, at its row of x
                turned = torch.empty(part.stop - part.start, channels, dtype=work, device=grad.device)
                write_planes(_turn_planes(channel_planes(rows[part], n, 3, work), -d[part], block_scale), turned)
                turned[:, 3 * n:] = rows[part, 3 * n:]
                grad_x.index_add_(0, flat[part], turned)
            grad_x = grad_x.to(ctx.x_dtype)
        return grad_x, None, None, None, _minus_grad(ctx, grad)


def _minus_grad(ctx, grad: Tensor) -> Tensor | None:
    """``-sum_j g_ij``, the gradient of the subtracted query rows (when they need one)."""
    if ctx.minus_dtype is None or not ctx.needs_input_grad[4]:
        return None
    return grad.sum(1).neg_().to(ctx.minus_dtype)


def relative_frame(x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, minus: Tensor | None = None) -> Tensor:
    """Linear GeoPE's relation: ``out[i, j] = R(t(d_ij)) x[idx[i, j]] - minus[i]``, ``(N, k, C)``, with
    ``d_ij = p_j - p_i`` (``disp (N, k, 3)``), ``x (N_s, C)``, ``minus (N, C)`` or ``None``. Memory-lean
    (``_RelativeFrame``) unless ``disp`` or the frequencies need a gradient, where plain autograd composes
    gather, ``rotate_relative`` and subtraction."""
    if constant(disp, block_scale):
        return _RelativeFrame.apply(x, idx, disp, block_scale, minus)
    out = rotate_relative(gather(x, idx), disp, block_scale)
    return out if minus is None else out - minus.unsqueeze(1)


def rotate_relative(x: Tensor, disp: Tensor, block_scale: Tensor) -> Tensor:
    """Differentiable ``relative_blocks``; memory-lean unless ``disp`` or ``block_scale`` need a gradient."""
    if constant(disp, block_scale):
        return _RotateRelative.apply(x, disp, block_scale)
    n = block_scale.shape[0]
    v = x[..., : 3 * n].unflatten(-1, (n, 3)).to(geometry_dtype(x.dtype))
    rot = rodrigues(v, disp, block_scale).flatten(-2)                    # pointgeope.geope's autograd formula
    return torch.cat([rot.to(x.dtype), x[..., 3 * n:]], dim=-1)
