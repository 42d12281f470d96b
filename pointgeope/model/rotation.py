"""Memory-lean GeoPE rotations of gathered neighbour features, for vector attention.

The math is ``pointgeope.geope``'s (``GEOPE_SPEC.md``): channels are cut into ``n = C // 3`` blocks
(the last ``C mod 3`` channels pass through) and block ``b`` of a point at ``p`` is rotated by
``R(t_b(p))`` with phases ``t_b(p) = pos_scale * w_b * p`` (``A = 3`` axes, angle ``|t_b| / 3``)::

    # channels: [ v0x v0y v0z | v1x v1y v1z | ... | v(n-1)z | pass-through ]

Attention needs, for a query ``i`` and its neighbours ``j = idx[i, :]`` (``k`` of them):

- standard: ``R(t_i)^T R(t_j) x_j``. Every point is rotated once (``N`` rotations), the result is
  gathered, and each pair is rotated back with its **query's** matrices ``R(t_i)^T``: ``n`` 3x3 matrices
  per point, ``(N, n, 3, 3)``, applied as five shifted multiply-adds over channel rows (``shift_tables``);
  ``query_frame`` gathers, rotates back and subtracts the query in one pass.
- linear: ``R(t_j - t_i) x_j = R(t(p_j - p_i)) x_j`` by Rodrigues' formula on contiguous planes of block
  components ``(3, N k, n)`` (``_turn_planes``); ``relative_frame`` gathers, rotates and subtracts.

The autograd Functions save only positions ``(N, 3)``, displacements ``(N, k, 3)`` or indices ``(N, k)``
and no tensor of the size of the ``(N, k, C)`` pairs: the gradient of a rotation is the inverse rotation of
the incoming gradient (orthogonality), whose matrices or angles are recomputed in backward. They need the
rotations to be constants (fixed frequencies, positions without gradient); with learnable frequencies
the same formulas run under plain autograd, which saves the pair tensors and costs more memory.

Products and angles are computed in float32 at least (``geometry_dtype``) and rounded once to the
features' dtype, so half-precision features (autocast) lose nothing to the rotation.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope import rotate
from pointgeope.model.ops import gather

__all__ = ["geometry_dtype", "block_rotations", "rotate_blocks", "query_frame", "rotate_relative", "relative_frame",
           "apply_blocks", "relative_blocks", "shift_tables", "apply_shifted"]


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


def shift_tables(mats: Tensor, channels: int) -> Tensor:
    """The block rotations ``mats (..., n, 3, 3)`` as coefficients of five channel shifts, ``(5, ..., C)``.

    ``(R v)_d = sum_e R[d, e] v_e`` inside block ``b`` reads channel ``3b + e = c + (e - d)`` for output
    channel ``c = 3b + d``: an offset ``o = e - d`` in ``-2 .. 2``. So ``R`` applied to every block is

        out[c] = sum_o  T_o[c] * x[c + o],      T_{e-d}[3b + d] = R_b[d, e]   (0 where c + o leaves the block)

    five multiply-adds over whole channel rows (``apply_shifted``) instead of nine products of strided
    components: 3-4x faster on the CPU for ``(N, k, C)`` pairs. Pass-through channels have ``T_0 = 1``::

        # block b of each table (R = R_b), then the pass-through channels:
        # T_{-2}: [ 0    0    R20 | ... | 0 ]      T_{-1}: [ 0    R10  R21 | ... | 0 ]
        # T_0:    [ R00  R11  R22 | ... | 1 ]
        # T_{+1}: [ R01  R12  0   | ... | 0 ]      T_{+2}: [ R02  0    0   | ... | 0 ]
    """
    n = mats.shape[-3]
    tables = mats.new_zeros(5, *mats.shape[:-3], channels)
    blocks = tables[..., : 3 * n].unflatten(-1, (n, 3))                    # (5, ..., n, 3)
    for d in range(3):
        for e in range(3):
            blocks[e - d + 2, ..., d] = mats[..., d, e]
    tables[2, ..., 3 * n:] = 1
    return tables


def apply_shifted(x: Tensor, tables: Tensor, minus: Tensor | None = None) -> Tensor:
    """``sum_o T_o[c] x[c + o]`` (``- minus``) for ``x (..., C)`` and ``tables (5, ..., C)`` from
    ``shift_tables``, broadcast against ``x`` (e.g. ``(5, N, 1, C)`` over neighbours); ``minus`` broadcasts
    the same way. Computed in the tables' dtype (``x`` may be half precision: one rounding, by the caller)."""
    out = torch.mul(tables[2], x) if minus is None else torch.addcmul(-minus, tables[2], x)
    for o in (1, 2):
        out[..., :-o].addcmul_(tables[2 + o][..., :-o], x[..., o:])
        out[..., o:].addcmul_(tables[2 - o][..., o:], x[..., :-o])
    return out


def apply_blocks(x: Tensor, mats: Tensor) -> Tensor:
    """``R_b v_b`` for every block of ``x (..., C)`` with ``mats (..., n, 3, 3)`` broadcast to ``x``'s
    leading dims (e.g. ``x (N, k, C)`` with ``mats (N, 1, n, 3, 3)``), in the float32 (or float64) of the
    geometry and rounded once to ``x``'s dtype. No per-pair matrix: ``apply_shifted``."""
    tables = shift_tables(mats.to(geometry_dtype(x.dtype)), x.shape[-1])
    return apply_shifted(x, tables).to(x.dtype)


def relative_blocks(x: Tensor, disp: Tensor, phase_scale: Tensor) -> Tensor:
    """``R(t_b(disp)) v_b`` for ``x (..., C)`` and per-row displacements ``disp (..., 3)`` (e.g. ``(N, k, C)``
    pairs with ``(N, k, 3)``), in float32 at least and rounded once to ``x``'s dtype (``_turn_planes``)."""
    n = phase_scale.shape[0]
    work = geometry_dtype(x.dtype)
    rows = x.reshape(-1, x.shape[-1])
    turned = _turn_planes(_planes(rows, n, work), disp.reshape(-1, 3).to(work), phase_scale.to(work) / 3)
    out = torch.empty_like(rows)
    _unplane(turned, out)
    if 3 * n < x.shape[-1]:
        out[:, 3 * n:] = rows[:, 3 * n:]
    return out.view(x.shape)


def _planes(rows: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """Block components of ``rows (M, C)`` as three contiguous planes ``(3, M, n)``: plane ``d`` row ``m`` holds
    component ``d`` of every block of row ``m``."""
    return rows[:, : 3 * n].reshape(-1, n, 3).permute(2, 0, 1).to(dtype).contiguous()


def _unplane(planes: Tensor, out: Tensor) -> None:
    """Write planes ``(3, M, n)`` back into the block channels of ``out (M, C)`` (rounded to its dtype)."""
    n = planes.shape[-1]
    for d in range(3):
        out[:, d: 3 * n: 3].copy_(planes[d])


def _turn_planes(v: Tensor, disp: Tensor, half_scale: Tensor) -> Tensor:
    """``R(w) v`` for every block of every row: ``v (3, M, n)`` planes, ``disp (M, 3)``, ``w = half_scale_b
    disp`` (``half_scale = phase_scale / 3``). Rodrigues with the row's axis ``u = d / |d|`` and the block's
    angle ``phi_b = half_scale_b |d|``::

        R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi)) (u . v) u

    Every operand is a whole contiguous ``(M, n)`` plane (the row's axis expanded once), so each of the ~20
    elementwise operations is one flat loop: 2x faster on the CPU than per-component views of interleaved
    channels, whose short strided rows cost more than their arithmetic. At ``d = 0``, ``u = 0`` and
    ``R = I`` exactly."""
    rows, n = v.shape[1], v.shape[2]
    radius = disp.norm(dim=1, keepdim=True)                                          # (M, 1)
    u = (disp / radius.clamp_min(torch.finfo(disp.dtype).tiny)).T.contiguous()      # (3, M)
    axis = u.unsqueeze(-1).expand(3, rows, n).contiguous()                         # (3, M, n)
    phi = radius * half_scale                                                        # (M, n)
    cos, sin = phi.cos(), phi.sin()
    along = torch.mul(axis[0], v[0]).addcmul_(axis[1], v[1]).addcmul_(axis[2], v[2]).mul_(1 - cos)
    out = torch.empty_like(v)
    for d in range(3):
        e, f = (d + 1) % 3, (d + 2) % 3                                              # (u x v)_d = u_e v_f - u_f v_e
        torch.mul(axis[e], v[f], out=out[d]).addcmul_(axis[f], v[e], value=-1).mul_(sin)
        out[d].addcmul_(cos, v[d]).addcmul_(along, axis[d])
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


class _QueryFrame(torch.autograd.Function):
    """``R(t_i)^T y[idx[i, j]] - m_i`` in one pass over the pairs, with a gradient for ``y`` and ``m``.

    Forward: gather, rotate back with the query's tables, subtract (``apply_shifted``'s first product
    starts from ``-m``). Backward: ``R_i g`` (orthogonality), one ``index_add_`` into ``y``'s rows and
    ``-sum_j g`` for ``m``. Saves ``idx (N, k)`` and the positions; the tables are recomputed."""

    @staticmethod
    def forward(ctx, y: Tensor, idx: Tensor, mats: Tensor, pos: Tensor, phase_scale: Tensor,
                minus: Tensor | None) -> Tensor:
        ctx.save_for_backward(idx, pos, phase_scale)
        ctx.rows, ctx.y_dtype = y.shape[0], y.dtype
        ctx.minus_dtype = None if minus is None else minus.dtype
        tables = shift_tables(mats.transpose(-1, -2).to(geometry_dtype(y.dtype)), y.shape[-1]).unsqueeze(-2)
        out = apply_shifted(y[idx], tables, None if minus is None else minus.unsqueeze(1))
        return out.to(y.dtype if minus is None else torch.promote_types(y.dtype, minus.dtype))

    @staticmethod
    def backward(ctx, grad: Tensor):
        idx, pos, phase_scale = ctx.saved_tensors
        grad_y = grad_minus = None
        if ctx.needs_input_grad[0]:
            tables = shift_tables(block_rotations(pos, phase_scale), grad.shape[-1]).unsqueeze(-2)
            turned = apply_shifted(grad, tables)                                      # R_i g, (N, k, C)
            grad_y = turned.new_zeros(ctx.rows, turned.shape[-1])
            grad_y = grad_y.index_add_(0, idx.reshape(-1), turned.reshape(-1, turned.shape[-1])).to(ctx.y_dtype)
        if ctx.minus_dtype is not None and ctx.needs_input_grad[5]:
            grad_minus = grad.sum(1).neg_().to(ctx.minus_dtype)
        return grad_y, None, None, None, None, grad_minus


class _RelativeFrame(torch.autograd.Function):
    """``R(t(d_ij)) x[idx[i, j]] - m_i`` for linear GeoPE in one pass, with gradients for ``x`` and ``m``.

    Forward: gather the block planes of ``x`` (``index_select`` on ``(3, N_s, n)``), turn them
    (``_turn_planes``), write them into the interleaved output, subtract. Backward: turn the gradient's planes
    by ``-d`` (``R^T``) and ``index_add_`` them into ``x``'s planes. Saves ``idx`` and ``disp (N, k, 3)``."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, disp: Tensor, phase_scale: Tensor, minus: Tensor | None) -> Tensor:
        ctx.save_for_backward(idx, disp, phase_scale)
        ctx.rows, ctx.x_dtype = x.shape[0], x.dtype
        ctx.minus_dtype = None if minus is None else minus.dtype
        n, work, flat = phase_scale.shape[0], geometry_dtype(x.dtype), idx.reshape(-1)
        turned = _turn_planes(_planes(x, n, work).index_select(1, flat), disp.reshape(-1, 3).to(work),
                              phase_scale.to(work) / 3)
        dtype = x.dtype if minus is None else torch.promote_types(x.dtype, minus.dtype)
        out = x.new_empty(*idx.shape, x.shape[1], dtype=dtype)
        _unplane(turned, out.view(-1, x.shape[1]))
        if 3 * n < x.shape[1]:
            out.view(-1, x.shape[1])[:, 3 * n:] = x[:, 3 * n:].index_select(0, flat)
        return out if minus is None else out.sub_(minus.unsqueeze(1))

    @staticmethod
    def backward(ctx, grad: Tensor):
        idx, disp, phase_scale = ctx.saved_tensors
        grad_x = grad_minus = None
        if ctx.needs_input_grad[0]:
            n, flat, channels = phase_scale.shape[0], idx.reshape(-1), grad.shape[-1]
            rows = grad.reshape(-1, channels)
            turned = _turn_planes(_planes(rows, n, phase_scale.dtype), -disp.reshape(-1, 3), phase_scale / 3)
            planes = turned.new_zeros(3, ctx.rows, n).index_add_(1, flat, turned)           # R^T g per row of x
            grad_x = rows.new_empty(ctx.rows, channels, dtype=ctx.x_dtype)
            grad_x[:, : 3 * n] = planes.permute(1, 2, 0).reshape(ctx.rows, 3 * n)
            if 3 * n < channels:
                grad_x[:, 3 * n:] = rows.new_zeros(ctx.rows, channels - 3 * n).index_add_(0, flat, rows[:, 3 * n:])
        if ctx.minus_dtype is not None and ctx.needs_input_grad[4]:
            grad_minus = grad.sum(1).neg_().to(ctx.minus_dtype)
        return grad_x, None, None, None, grad_minus


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


def query_frame(y: Tensor, idx: Tensor, mats: Tensor, pos: Tensor, phase_scale: Tensor,
                minus: Tensor | None = None) -> Tensor:
    """Neighbour rows ``y[idx]`` taken into their query's frame, minus the query's ``minus`` row:
    ``out[i, j] = R(t_i)^T y[idx[i, j]] - minus[i]``, ``(N, k, C)``.

    With ``y = rotate_blocks(x, mats, ...)`` this is standard GeoPE's ``R(t_i)^T R(t_j) x_j`` (and with
    ``minus = q`` the attention's relation). ``y (N_s, C)``, ``idx (N, k)``, ``mats (N, n, 3, 3)`` of the
    queries, ``minus (N, C)`` or ``None``. Memory-lean (one fused autograd Function) unless the rotations
    need a gradient (learnable frequencies), where plain autograd composes gather, rotation and subtraction.
    """
    if _constant(mats, pos, phase_scale):
        return _QueryFrame.apply(y, idx, mats, pos, phase_scale, minus)
    out = rotate_blocks(gather(y, idx), mats, pos, phase_scale, inverse=True)
    return out if minus is None else out - minus.unsqueeze(1)


def relative_frame(x: Tensor, idx: Tensor, disp: Tensor, phase_scale: Tensor, minus: Tensor | None = None) -> Tensor:
    """Linear GeoPE's relation: ``out[i, j] = R(t(d_ij)) x[idx[i, j]] - minus[i]``, ``(N, k, C)``, with
    ``d_ij = p_j - p_i`` (``disp (N, k, 3)``), ``x (N_s, C)``, ``minus (N, C)`` or ``None``. Memory-lean
    (``_RelativeFrame``) unless ``disp`` or the frequencies need a gradient, where plain autograd composes
    gather, ``rotate_relative`` and subtraction."""
    if _constant(disp, phase_scale):
        return _RelativeFrame.apply(x, idx, disp, phase_scale, minus)
    out = rotate_relative(gather(x, idx), disp, phase_scale)
    return out if minus is None else out - minus.unsqueeze(1)


def rotate_relative(x: Tensor, disp: Tensor, phase_scale: Tensor) -> Tensor:
    """Differentiable ``relative_blocks``; memory-lean unless ``disp`` or ``phase_scale`` need a gradient."""
    if _constant(disp, phase_scale):
        return _RotateRelative.apply(x, disp, phase_scale)
    n = phase_scale.shape[0]
    w = disp.unsqueeze(-2) * phase_scale[:, None]                        # (N, k, n, 3) phases
    v = x[..., : 3 * n].unflatten(-1, (n, 3)).to(geometry_dtype(x.dtype))
    rot = rotate(v, w).flatten(-2)                                       # pointgeope.geope's autograd formula
    return torch.cat([rot.to(x.dtype), x[..., 3 * n:]], dim=-1)
