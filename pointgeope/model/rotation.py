"""Memory-lean GeoPE rotations of gathered neighbour features, for vector attention.

The math is ``pointgeope.geope``'s (``GEOPE_SPEC.md``): channels are cut into ``n = C // 3`` blocks
(the last ``C mod 3`` channels pass through) and block ``b`` of a point at ``p`` is rotated by
``R(t_b(p))`` with phases ``t_b(p) = pos_scale * w_b * p`` (``A = 3`` axes, angle ``|t_b| / 3``)::

    # channels: [ v0x v0y v0z | v1x v1y v1z | ... | v(n-1)z | pass-through ]

Attention needs, for a query ``i`` and its neighbours ``j = idx[i, :]`` (``k`` of them):

- standard: ``R(t_i)^T R(t_j) x_j``. Every point is rotated once (``N`` rotations), the result is
  gathered, and each pair is rotated back with its **query's** matrices ``R(t_i)^T``: ``n`` 3x3 matrices
  per point, ``(N, n, 3, 3)``; nothing per pair but the ``(N, k, C)`` output.
- linear: ``R(t_j - t_i) x_j = R(t(p_j - p_i)) x_j`` by Rodrigues' formula with per-pair coefficients of
  shape ``(N, k, n)``.

Both are autograd Functions that save only positions ``(N, 3)`` or displacements ``(N, k, 3)`` and no
tensor of the size of the ``(N, k, C)`` pairs: the gradient of a rotation is the inverse rotation of the
incoming gradient (orthogonality), whose matrices or angles are recomputed in backward. They need the
rotations to be constants (fixed frequencies, positions without gradient); with learnable frequencies
the same formulas run under plain autograd, which saves the pair tensors and costs more memory.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope import rotate, rotate_blocks_inplace

__all__ = ["geometry_dtype", "block_rotations", "rotate_blocks", "rotate_relative", "apply_blocks", "relative_blocks"]


def geometry_dtype(dtype: torch.dtype) -> torch.dtype:
    """Rotations are built in float32 at least: phases reach hundreds of radians (metres / grid size)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def block_rotations(pos: Tensor, phase_scale: Tensor) -> Tensor:
    """Matrices ``R(t_b(p))`` of every point and block: ``pos (N, 3)``, ``phase_scale (n,)`` holding
    ``pos_scale * w_b`` -> ``(N, n, 3, 3)``. ``R^T`` (the inverse) is ``.transpose(-1, -2)``.

    All blocks of a point share the axis ``u = p / |p|``; only the angle ``phi_b = phase_scale_b |p| / 3``
    changes, so ``R_b = cos(phi_b) I + sin(phi_b) [u]_x + (1 - cos(phi_b)) u u^T`` costs two
    trigonometric calls per block and three broadcast products (the same matrix as
    ``pointgeope.geope.rotation_matrix``; at ``p = 0``, ``u = 0`` and ``R = I`` exactly).
    """
    radius = pos.norm(dim=-1, keepdim=True)                                    # (N, 1)
    u = pos / radius.clamp_min(torch.finfo(pos.dtype).tiny)                    # (N, 3), 0 at the origin
    ux, uy, uz = u.unbind(-1)
    zero = torch.zeros_like(ux)
    cross = torch.stack([zero, -uz, uy, uz, zero, -ux, -uy, ux, zero], dim=-1).view(-1, 1, 3, 3)
    outer = (u.unsqueeze(-1) * u.unsqueeze(-2)).unsqueeze(1)                  # (N, 1, 3, 3)
    phi = (radius * phase_scale / 3)[..., None, None]                          # (N, n, 1, 1)
    cos, sin = phi.cos(), phi.sin()
    eye = torch.eye(3, dtype=pos.dtype, device=pos.device)
    return torch.addcmul(outer, cos, eye - outer).addcmul_(sin, cross)


def apply_blocks(x: Tensor, mats: Tensor) -> Tensor:
    """``R_b v_b`` for every block of ``x (..., C)`` with ``mats (..., n, 3, 3)`` broadcast to ``x``'s
    leading dims (e.g. ``x (N, k, C)`` with ``mats (N, 1, n, 3, 3)``). Three multiply-adds of column
    ``c`` of ``R`` with component ``c`` of ``v``; no per-pair matrix."""
    work = geometry_dtype(x.dtype)
    if x.dtype != work:                       # half precision: rotate in float32, round once at the end
        return apply_blocks(x.to(work), mats).to(x.dtype)
    n = mats.shape[-3]
    mats = mats.to(work)
    v = x[..., : 3 * n].unflatten(-1, (n, 3))
    shape = torch.broadcast_shapes(v.shape, mats.shape[:-1])
    out = x.new_empty(*shape[:-2], x.shape[-1])
    rot = out[..., : 3 * n].unflatten(-1, (n, 3))
    torch.mul(mats[..., 0], v[..., 0:1], out=rot)
    rot.addcmul_(mats[..., 1], v[..., 1:2])
    rot.addcmul_(mats[..., 2], v[..., 2:3])
    if 3 * n < x.shape[-1]:
        out[..., 3 * n:] = x[..., 3 * n:]
    return out


def relative_blocks(x: Tensor, disp: Tensor, phase_scale: Tensor) -> Tensor:
    """``R(t_b(disp)) v_b`` for ``x (N, k, C)``, per-pair displacements ``disp (N, k, 3)``.

    All blocks of a pair share the axis ``u = d / |d|``; block ``b`` turns by ``phi_b = phase_scale_b |d| / 3``
    (Rodrigues, ``pointgeope.geope.rotate_blocks_inplace``), written per component so that only
    ``(N, k, n)`` tensors exist besides the output.
    """
    n = phase_scale.shape[0]
    geometry = geometry_dtype(x.dtype)                   # angles and products never in half precision
    if x.dtype != geometry:
        return relative_blocks(x.to(geometry), disp, phase_scale).to(x.dtype)
    out = torch.empty_like(x)
    rotate_blocks_inplace(x[..., : 3 * n].unflatten(-1, (n, 3)), disp.to(geometry).unsqueeze(-2),
                          (phase_scale.to(geometry) / 3).unsqueeze(-1), out=out[..., : 3 * n].unflatten(-1, (n, 3)))
    if 3 * n < x.shape[-1]:
        out[..., 3 * n:] = x[..., 3 * n:]
    return out


class _RotateBlocks(torch.autograd.Function):
    """``apply_blocks`` with a gradient for ``x`` only. Saves the positions ``(N, 3)`` and recomputes the
    matrices in backward (``N n`` rotations, cheap next to the ``N k C`` pairs)."""

    @staticmethod
    def forward(ctx, x: Tensor, mats: Tensor, pos: Tensor, phase_scale: Tensor, inverse: bool, per_pair: bool) -> Tensor:
        ctx.save_for_backward(pos, phase_scale)
        ctx.inverse, ctx.per_pair, ctx.x_shape = inverse, per_pair, x.shape
        return apply_blocks(x, _orient(mats, inverse, per_pair))

    @staticmethod
    def backward(ctx, grad: Tensor):
        pos, phase_scale = ctx.saved_tensors
        mats = _orient(block_rotations(pos, phase_scale), not ctx.inverse, ctx.per_pair)   # R^T g
        grad_x = apply_blocks(grad.contiguous(), mats)
        return grad_x.sum_to_size(ctx.x_shape), None, None, None, None, None


def _orient(mats: Tensor, inverse: bool, per_pair: bool) -> Tensor:
    """``R`` or ``R^T`` ``(N, n, 3, 3)``, as ``(N, 1, n, 3, 3)`` to broadcast over neighbours if ``per_pair``."""
    mats = mats.transpose(-1, -2) if inverse else mats
    return mats.unsqueeze(1) if per_pair else mats


class _RotateRelative(torch.autograd.Function):
    """``relative_blocks`` with a gradient for ``x`` only; saves the displacements ``(N, k, 3)``."""

    @staticmethod
    def forward(ctx, x: Tensor, disp: Tensor, phase_scale: Tensor) -> Tensor:
        ctx.save_for_backward(disp, phase_scale)
        return relative_blocks(x, disp, phase_scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        disp, phase_scale = ctx.saved_tensors
        return relative_blocks(grad.contiguous(), -disp, phase_scale), None, None   # R(-w) g = R^T g


def _constant(*tensors: Tensor) -> bool:
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def rotate_blocks(x: Tensor, mats: Tensor, pos: Tensor, phase_scale: Tensor, inverse: bool = False) -> Tensor:
    """Differentiable rotation of every block of ``x`` by its point's ``R(t(pos))`` (``R^T`` if ``inverse``).

    ``x (N, C)`` with ``mats = block_rotations(pos, phase_scale)`` of the same points, or ``x (N, k, C)``
    (neighbours) rotated with the matrices of their query ``i``. Memory-lean unless the phases need a
    gradient (learnable frequencies), where plain autograd differentiates through ``mats``.
    """
    per_pair = x.dim() == 3
    if _constant(mats, pos, phase_scale):
        return _RotateBlocks.apply(x, mats, pos, phase_scale, inverse, per_pair)
    mats = _orient(mats, inverse, per_pair).to(geometry_dtype(x.dtype))
    n = mats.shape[-3]
    v = x[..., : 3 * n].unflatten(-1, (n, 3))
    # column c of R times component c of v: (..., n, 3) tensors only, never (..., n, 3, 3) per pair
    rot = (mats[..., 0] * v[..., 0:1] + mats[..., 1] * v[..., 1:2] + mats[..., 2] * v[..., 2:3]).flatten(-2)
    return torch.cat([rot.to(x.dtype), x[..., 3 * n:].expand(*rot.shape[:-1], -1)], dim=-1)


def rotate_relative(x: Tensor, disp: Tensor, phase_scale: Tensor) -> Tensor:
    """Differentiable ``relative_blocks``; memory-lean unless ``disp`` or ``phase_scale`` need a gradient."""
    if _constant(disp, phase_scale):
        return _RotateRelative.apply(x, disp, phase_scale)
    n = phase_scale.shape[0]
    w = disp.unsqueeze(-2) * phase_scale[:, None]                        # (N, k, n, 3) phases
    v = x[..., : 3 * n].unflatten(-1, (n, 3)).to(geometry_dtype(x.dtype))
    rot = rotate(v, w).flatten(-2)                                       # pointgeope.geope's autograd formula
    return torch.cat([rot.to(x.dtype), x[..., 3 * n:]], dim=-1)
