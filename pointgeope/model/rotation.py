"""Memory-lean GeoPE rotations of gathered neighbour features, for vector attention.

The math is ``pointgeope.geope``'s (``docs/GEOPE_SPEC.md``): channels are cut into ``n = C // 3`` blocks
(the last ``C mod 3`` channels pass through) and block ``b`` of a point at ``p`` is rotated by
``R(t_b(p))`` with phases ``t_b(p) = pos_scale * w_b * p`` (``A = 3`` axes): the angle ``phi_b = k_b |p|`` about
``u = p / |p|``, with the block scale ``k_b = pos_scale * w_b / 3`` (``block_scale``, ``pointgeope.geope``)::

    # channels: [ v0x v0y v0z | v1x v1y v1z | ... | v(n-1)z | pass-through ]

Attention needs, for a query ``i`` and its neighbours ``j = idx[i, :]`` (``k`` of them):

- standard (this module): ``R(t_i)^T R(t_j) x_j``. Every point is rotated once (``N`` rotations), the
  result is gathered, and each pair is rotated back with its **query's** rotations ``R(t_i)^T``: ``n``
  3x3 matrices per point, applied as five shifted multiply-adds over whole channel rows with per-point
  coefficient tables ``(5, N, C)`` (``rotation_tables``); ``query_frame`` does all of it and subtracts
  the query in one autograd Function.
- linear (``linear_rotation.py``): ``R(t_j - t_i) x_j = R(t(p_j - p_i)) x_j``, per-pair rotations.

The autograd Functions save only positions ``(N, 3)``, displacements ``(N, k, 3)`` or indices ``(N, k)``
and no tensor of the size of the ``(N, k, C)`` pairs: the gradient of a rotation is the inverse rotation of
the incoming gradient (orthogonality), whose matrices or angles are recomputed in backward. They need the
rotations to be constants (fixed frequencies, positions without gradient); with learnable frequencies
the same formulas run under plain autograd, which saves the pair tensors and costs more memory.

Products and angles are computed in float32 at least (``geometry_dtype``) and rounded once to the
features' dtype, so half-precision features (autocast) lose nothing to the rotation.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from pointgeope.geope import geometry_dtype, rotation_terms
from pointgeope.model import geope_pairs, shifted_kernel, stage_memo
from pointgeope.model.first_order import ROTATION_WAY, first_order_only
from pointgeope.model.ops import gather

__all__ = ["geometry_dtype", "block_rotations", "rotation_tables", "shift_tables", "apply_shifted",
           "apply_blocks", "rotate_blocks", "query_frame", "constant", "query_steps", "turned_neighbours",
           "channel_planes", "write_planes"]

# Pair elements per step of the fused Functions on the CPU: ~4 MB of float32 per intermediate, so that the
# several passes of a rotation over a step's pairs run in the CPU's cache instead of memory (relation of
# 32k x 8 x 32 and 8k x 16 x 64 pairs, one thread: 39 -> 21 and 35 -> 14 ms). A GPU takes everything at once
# (its kernel launches, not its memory, are what small steps would cost).
_STEP_ELEMENTS = 1 << 20


def query_steps(queries: int, k: int, channels: int, device: torch.device,
                elements: int | None = None) -> list[slice]:
    """Consecutive ranges of queries whose ``k`` pairs of ``channels`` hold about ``elements`` values (default
    ``_STEP_ELEMENTS``; one range on other devices than the CPU). The one owner of the CPU's cache-sized steps
    (``qk_kernels`` steps over batch rows with ``k = 1`` and its own budget)."""
    if device.type != "cpu":
        return [slice(0, queries)]
    step = max(1, (_STEP_ELEMENTS if elements is None else elements) // max(1, k * channels))
    return [slice(a, min(a + step, queries)) for a in range(0, queries, step)]


def turned_neighbours(x: Tensor, idx: Tensor, minus: Tensor | None, width: int,
                      turn_into: Callable[[slice, Tensor], None]) -> Tensor:
    """The relation's loop of the pair kernels (linear GeoPE, RoPE): ``out[i, j] = turn(x[idx[i, j]]) -
    minus[i]``, ``(N, k, C)`` from ``x (N_s, C)``, ``idx (N, k)``, ``minus (N, C)`` or ``None``.

    Per step of whole queries (``query_steps``), ``turn_into(part, rows)`` writes the turned first ``width``
    channels of the flat pairs ``part`` (``idx.reshape(-1)[part]``) into ``rows (len(part), C)``; the channels
    past ``width`` are gathered unchanged and the query's ``minus`` row is subtracted, in the result's dtype
    (``x``'s promoted with ``minus``'s)."""
    (queries, k), channels, flat = idx.shape, x.shape[1], idx.reshape(-1)
    dtype = x.dtype if minus is None else torch.promote_types(x.dtype, minus.dtype)
    out = x.new_empty(queries * k, channels, dtype=dtype)
    for step in query_steps(queries, k, channels, x.device):
        part = slice(step.start * k, step.stop * k)                                 # the step's pairs
        turn_into(part, out[part])
        if width < channels:
            out[part, width:] = x[:, width:].index_select(0, flat[part])
        if minus is not None:
            out[part].view(-1, k, channels).sub_(minus[step].unsqueeze(1))
    return out.view(queries, k, channels)


def channel_planes(rows: Tensor, groups: int, size: int, dtype: torch.dtype) -> Tensor:
    """The first ``groups`` groups of ``size`` channels of ``rows (M, C)`` as ``size`` contiguous planes
    ``(size, M, groups)`` in ``dtype``: plane ``d`` row ``m`` holds component ``d`` of every group of row ``m``
    (RoPE's pairs, ``size`` 2; GeoPE's blocks, ``size`` 3). Elementwise kernels then loop over whole rows."""
    return rows[:, : size * groups].reshape(-1, groups, size).permute(2, 0, 1).to(dtype).contiguous()


def write_planes(planes: Tensor, out: Tensor) -> None:
    """Write :func:`channel_planes`' ``(size, M, groups)`` back into the group channels of ``out (M, C)``
    (rounded to its dtype); the other channels are left as they are."""
    size, _, groups = planes.shape
    for d in range(size):
        out[:, d: size * groups: size].copy_(planes[d])


def block_rotations(pos: Tensor, block_scale: Tensor) -> Tensor:
    """Matrices ``R(t_b(p))`` of every point and block: ``pos (N, 3)``, ``block_scale (n,)`` holding
    ``k_b = pos_scale * w_b / 3`` -> ``(N, n, 3, 3)``. ``R^T`` (the inverse) is ``.transpose(-1, -2)``.

    All blocks of a point share the axis ``u = p / |p|``; only the angle ``phi_b = k_b |p|``
    changes, so ``R_b = cos(phi_b) I + sin(phi_b) [u]_x + (1 - cos(phi_b)) u u^T`` costs two
    trigonometric calls per block and three broadcast products (the same matrix as
    ``pointgeope.geope.rotation_matrix``; at ``p = 0``, ``u = 0`` and ``R = I`` exactly).
    """
    u, cos, sin, _ = rotation_terms(pos, block_scale)                          # (N, 3), (N, n): 0 at the origin
    ux, uy, uz = u.unbind(-1)
    zero = torch.zeros_like(ux)
    cross = torch.stack([zero, -uz, uy, uz, zero, -ux, -uy, ux, zero], dim=-1).view(-1, 1, 3, 3)
    outer = (u.unsqueeze(-1) * u.unsqueeze(-2)).unsqueeze(1)                  # (N, 1, 3, 3)
    cos, sin = cos[..., None, None], sin[..., None, None]                      # (N, n, 1, 1)
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


def apply_shifted(x: Tensor, tables: Tensor, minus: Tensor | None = None, transpose: bool = False,
                  out: Tensor | None = None) -> Tensor:
    """``sum_o T_o[c] x[c + o]`` (``- minus``) for ``x (..., C)`` and ``tables (5, ..., C)`` of ``R``,
    broadcast against ``x`` (e.g. ``(5, N, 1, C)`` over neighbours); ``minus`` broadcasts the same way.
    ``transpose`` applies ``R^T`` with the same tables: ``R^T[d, e] = R[e, d]`` reads ``T_{-o}[c + o]``.
    Computed in the tables' dtype, or written into ``out`` (``x`` may be half precision: one rounding), which must
    not overlap ``x`` (unchecked: channels ``c +- o`` would be read after they are written).

    Five kernels (a product, four multiply-adds) on torch's path; one Triton launch where the kernel
    ``apply_shifted`` runs (CUDA by default) and takes the call (``shifted_kernel.py``), the same sums."""
    if KERNEL.enabled(x.device) and shifted_kernel.takes(x, tables, minus, out):
        return KERNEL(x.device, x, tables, minus, transpose, out)
    return _shifted_torch(x, tables, minus, transpose, out)


def _shifted_torch(x: Tensor, tables: Tensor, minus: Tensor | None, transpose: bool, out: Tensor | None) -> Tensor:
    """``apply_shifted`` by torch ops: the product of ``o = 0`` (from ``-minus``), then ``o = +1, -1, +2, -2``."""
    if minus is None:
        out = torch.mul(tables[2], x, out=out)
    else:
        out = torch.addcmul(-minus, tables[2], x, out=out)
    for o in (1, 2):
        ahead, behind = (tables[2 - o][..., o:], tables[2 + o][..., :-o]) if transpose else \
                        (tables[2 + o][..., :-o], tables[2 - o][..., o:])
        out[..., :-o].addcmul_(ahead, x[..., o:])              # reads channel c + o
        out[..., o:].addcmul_(behind, x[..., :-o])             # reads channel c - o
    return out


def rotation_tables(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """``shift_tables(block_rotations(pos, block_scale), channels)``, ``(5, N, C)``, for ``pos (N, 3)`` and
    ``block_scale (n,)`` without gradient; inside ``stage_memo.shared()``'s block built once per inputs
    (the same ``pos`` and ``block_scale`` objects, unchanged since, and width: one table per PTv1 stage, as
    ``BlockScale`` gives the layers of equal settings one tensor)."""
    return stage_memo.memoized(("rotation_tables", channels), (pos, block_scale),
                               lambda: _build_tables(pos, block_scale, channels))


def _build_tables(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """``rotation_tables`` by one Triton launch where the kernel ``rotation_tables`` runs (CUDA by default) and
    takes the call (``shifted_kernel.tables_take``), else by torch's 20 kernels (:func:`_tables_torch`)."""
    if TABLES_KERNEL.enabled(pos.device) and shifted_kernel.tables_take(pos, block_scale, channels):
        return TABLES_KERNEL(pos.device, pos, block_scale, channels)
    return _tables_torch(pos, block_scale, channels)


def _tables_torch(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """``rotation_tables`` built from the point's axis ``u`` and the blocks' angles (no ``(N, n, 3, 3)``
    matrices): ``R[d, e] = cos delta_de + sin [u]_x[d, e] + (1 - cos) u_d u_e``, an entry ``(d, e)`` on the
    table of its shift ``e - d + 2``. The entries of one shift (the diagonal ``e - d`` of the 3x3 blocks) are
    written by one op each over all their rows ``d`` (11 kernels, not one per entry: a kernel launch each on a
    GPU), every entry by the same arithmetic as one at a time (``addcmul``, ``mul`` then ``addcmul_``)::

        shift 2 (e = d):     cos + versine u_d^2                 d = 0, 1, 2
        shift 1 (e = d - 1): versine u_d u_e + sin (uz, ux)      (1, 0), (2, 1)
        shift 3 (e = d + 1): versine u_d u_e - sin (uz, ux)      (0, 1), (1, 2)
        shift 0 (e = d - 2): versine u_d u_e - sin uy            (2, 0)
        shift 4 (e = d + 2): versine u_d u_e + sin uy            (0, 2)
    """
    u, cos, sin, versine = rotation_terms(pos, block_scale)                    # (N, 3), 3 x (N, n)
    n = block_scale.shape[0]
    tables = pos.new_zeros(5, pos.shape[0], channels)
    blocks = tables[..., : 3 * n].unflatten(-1, (n, 3))                        # (5, N, n, 3): [shift, i, b, d]
    uu = u.unsqueeze(2) * u.unsqueeze(1)                                       # (N, 3, 3): u_d u_e
    turn = u.roll(1, dims=1)                                                   # (N, 3): uz, ux, uy
    cos, sin, versine = cos.unsqueeze(-1), sin.unsqueeze(-1), versine.unsqueeze(-1)    # (N, n, 1)
    torch.addcmul(cos, versine, uu.diagonal(0, 1, 2).unsqueeze(1), out=blocks[2])
    for shift, rows, cross, sign in ((1, slice(1, 3), turn[:, 0:2], 1), (3, slice(0, 2), turn[:, 0:2], -1),
                                     (0, slice(2, 3), turn[:, 2:3], -1), (4, slice(0, 1), turn[:, 2:3], 1)):
        entry = blocks[shift, :, :, rows]                                       # (N, n, rows)
        torch.mul(versine, uu.diagonal(shift - 2, 1, 2).unsqueeze(1), out=entry).addcmul_(sin, cross.unsqueeze(1),
                                                                                          value=sign)
    tables[2, :, 3 * n:] = 1
    return tables


# pointgeope.model.kernels: switch, fallback, info --check (shifted_kernel.py)
KERNEL, TABLES_KERNEL = shifted_kernel.register(_shifted_torch, _tables_torch)


def apply_blocks(x: Tensor, mats: Tensor) -> Tensor:
    """``R_b v_b`` for every block of ``x (..., C)`` with ``mats (..., n, 3, 3)`` broadcast to ``x``'s
    leading dims (e.g. ``x (N, k, C)`` with ``mats (N, 1, n, 3, 3)``), in the float32 (or float64) of the
    geometry and rounded once to ``x``'s dtype. No per-pair matrix: ``apply_shifted``."""
    tables = shift_tables(mats.to(geometry_dtype(x.dtype)), x.shape[-1])
    return apply_shifted(x, tables).to(x.dtype)


class _RotateBlocks(torch.autograd.Function):
    """``apply_blocks`` with a gradient for ``x`` only. Saves the positions ``(N, 3)`` and recomputes the
    rotations in backward (``rotation_tables``: ``N n`` rotations, cheap next to the ``N k C`` pairs)."""

    @staticmethod
    def forward(ctx, x: Tensor, mats: Tensor, pos: Tensor, block_scale: Tensor, inverse: bool,
                per_pair: bool) -> Tensor:
        ctx.save_for_backward(pos, block_scale)
        ctx.inverse, ctx.per_pair, ctx.x_shape = inverse, per_pair, x.shape
        return apply_blocks(x, _orient(mats, inverse, per_pair))

    @staticmethod
    def backward(ctx, grad: Tensor):
        pos, block_scale = ctx.saved_tensors
        tables = rotation_tables(pos, block_scale, grad.shape[-1])
        tables = tables.unsqueeze(-2) if ctx.per_pair else tables
        grad_x = apply_shifted(grad, tables, transpose=not ctx.inverse).to(grad.dtype)      # R^T g (or R g)
        return grad_x.sum_to_size(ctx.x_shape), None, None, None, None, None


def _orient(mats: Tensor, inverse: bool, per_pair: bool) -> Tensor:
    """``R`` or ``R^T`` ``(N, n, 3, 3)``, as ``(N, 1, n, 3, 3)`` to broadcast over neighbours if ``per_pair``."""
    mats = mats.transpose(-1, -2) if inverse else mats
    return mats.unsqueeze(1) if per_pair else mats


class _QueryFrame(torch.autograd.Function):
    """``R(t_i)^T (R x)[idx[i, j]] - m_i`` with gradients for ``x`` and ``m``; saves ``idx`` and the positions.

    Forward: rotate the points (``N`` rows), then per step of queries (``query_steps``) gather, rotate back
    with the query's tables and subtract (``apply_shifted``'s first product starts from ``-m``), all in the
    geometry's dtype, rounded once.
    Backward (orthogonality): ``R_i g`` per pair, one ``index_add_`` into the points, ``R_j^T`` per point,
    and ``-sum_j g`` for ``m``; the tables are rebuilt from the positions."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, pos: Tensor, block_scale: Tensor, minus: Tensor | None,
                tables: Tensor) -> Tensor:
        ctx.save_for_backward(idx, pos, block_scale)
        ctx.x_dtype, ctx.minus_dtype = x.dtype, None if minus is None else minus.dtype
        (queries, k), channels = idx.shape, x.shape[-1]
        points = apply_shifted(x, tables)                                           # R(t_j) x_j, (N, C)
        dtype = x.dtype if minus is None else torch.promote_types(x.dtype, minus.dtype)
        if geope_pairs.active(x.device):                                               # one fused pass
            return geope_pairs.on_device(geope_pairs.frame_pairs, points, idx, tables, minus, dtype)
        out = x.new_empty(queries, k, channels, dtype=dtype)
        work = out if dtype == tables.dtype else None                               # else: round each step
        for part in query_steps(queries, k, channels, x.device):
            pairs = points.index_select(0, idx[part].reshape(-1)).view(-1, k, channels)
            query = None if minus is None else minus[part].unsqueeze(1)
            step = apply_shifted(pairs, tables[:, part].unsqueeze(-2), query, transpose=True,
                                 out=None if work is None else work[part])
            if work is None:
                out[part] = step
        return out

    @staticmethod
    @first_order_only(ROTATION_WAY, exact=lambda grad: not geope_pairs.active(grad.device))   # torch ops: exact
    def backward(ctx, grad: Tensor):
        idx, pos, block_scale = ctx.saved_tensors
        grad_x = grad_minus = None
        if ctx.needs_input_grad[0]:
            (queries, k), channels = idx.shape, grad.shape[-1]
            tables = rotation_tables(pos, block_scale, channels)
            points = grad.new_zeros(pos.shape[0], channels, dtype=tables.dtype)
            for part in query_steps(queries, k, channels, grad.device):              # R_i g, summed at j
                turned = (geope_pairs.on_device(geope_pairs.turn_pairs, grad, tables)
                          if geope_pairs.active(grad.device)
                          else apply_shifted(grad[part], tables[:, part].unsqueeze(-2)))
                points.index_add_(0, idx[part].reshape(-1), turned.reshape(-1, channels))
            grad_x = apply_shifted(points, tables, transpose=True).to(ctx.x_dtype)     # R_j^T
        if ctx.minus_dtype is not None and ctx.needs_input_grad[4]:
            grad_minus = grad.sum(1).neg_().to(ctx.minus_dtype)
        return grad_x, None, None, None, grad_minus, None


def constant(*tensors: Tensor) -> bool:
    """No gradient flows to these tensors here (the memory-lean Functions apply)."""
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def rotate_blocks(x: Tensor, mats: Tensor, pos: Tensor, block_scale: Tensor, inverse: bool = False) -> Tensor:
    """Differentiable rotation of every block of ``x`` by its point's ``R(t(pos))`` (``R^T`` if ``inverse``).

    ``x (N, C)`` with ``mats = block_rotations(pos, block_scale)`` of the same points, or ``x (N, k, C)``
    (neighbours) rotated with the matrices of their query ``i``. Memory-lean unless the phases need a
    gradient (learnable frequencies), where plain autograd differentiates through ``mats``.
    """
    per_pair = x.dim() == 3
    if constant(mats, pos, block_scale):
        return _RotateBlocks.apply(x, mats, pos, block_scale, inverse, per_pair)
    mats = _orient(mats, inverse, per_pair).to(geometry_dtype(x.dtype))
    n = mats.shape[-3]
    v = x[..., : 3 * n].unflatten(-1, (n, 3))
    # column c of R times component c of v: (..., n, 3) tensors only, never (..., n, 3, 3) per pair
    rot = (mats[..., 0] * v[..., 0:1] + mats[..., 1] * v[..., 1:2] + mats[..., 2] * v[..., 2:3]).flatten(-2)
    return torch.cat([rot.to(x.dtype), x[..., 3 * n:].expand(*rot.shape[:-1], -1)], dim=-1)


def query_frame(x: Tensor, idx: Tensor, pos: Tensor, block_scale: Tensor, minus: Tensor | None = None,
                tables: Tensor | None = None) -> Tensor:
    """Standard GeoPE between every point ``i`` and its neighbours ``j = idx[i, :]`` of the same points,
    minus the query's ``minus`` row: ``out[i, j] = R(t_i)^T R(t_j) x_j - minus_i``, ``(N, k, C)``.

    ``x (N, C)``, ``idx (N, k)``, ``pos (N, 3)`` in the geometry's dtype, ``block_scale (n,)``, ``minus
    (N, C)`` or ``None`` (with ``minus = q`` this is the attention's relation); ``tables``: the points'
    ``rotation_tables``, if already built. Memory-lean (``_QueryFrame``) unless the rotations need a
    gradient (learnable frequencies), where plain autograd composes rotation, gather and subtraction.
    """
    if constant(pos, block_scale):
        if tables is None:
            tables = rotation_tables(pos, block_scale, x.shape[-1])
        return _QueryFrame.apply(x, idx, pos, block_scale, minus, tables)
    mats = block_rotations(pos, block_scale)
    out = rotate_blocks(gather(rotate_blocks(x, mats, pos, block_scale), idx), mats, pos, block_scale, inverse=True)
    return out if minus is None else out - minus.unsqueeze(1)
