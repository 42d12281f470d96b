"""Axial 3D RoPE and RoPE-Mixed for vector attention: 2D rotations of channel pairs, angles linear in position.

Axial 3D RoPE (RoFormer's rotation, Su et al. 2021, applied per axis as in LitePT's PointROPE) turns separate
channel pairs by the phases of x, y and z; RoPE-Mixed (Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer") gives every pair a learnable frequency vector, so that one pair turns by a mix of the axes.
Both are baselines of GeoPE (``pointgeope.geope``), whose one quaternion rotation couples the three axes.

**Channels.** ``m = C // 6`` blocks of three pairs, one pair per axis; pair ``p = 3 j + a`` (block ``j``,
axis ``a``) is channels ``(2p, 2p + 1)``, ``P = 3 m`` pairs; the last ``C mod 6`` channels pass through::

    # channels: [ x0 x0' y0 y0' z0 z0' | x1 x1' y1 y1' z1 z1' | ... | z(m-1) z(m-1)' | pass-through ]

**Rotation.** Pair ``p`` of a point at ``pos`` turns by ``theta_p(pos) = f_p . pos`` (``freq (P, 3)``, radians
per unit of position): ``(v, v') -> (v cos theta - v' sin theta, v sin theta + v' cos theta)``.

- axial at GeoPE's frequencies (``rope3d``; LitePT's PointROPE's form, not its frequencies):
  ``f_{3j+a} = k_{2j} e_a`` with ``k_b = pos_scale * w_b / A`` GeoPE's block scales of the same width
  (``pointgeope.geope.BlockScale``: ``w_b = base ** (-2 b / (3 n))``, ``n = C // 3``, ``A = 3``): channels
  ``6j .. 6j+2`` have the frequency they have in GeoPE (block ``2j``), and a displacement along one axis
  turns the pair of that axis by exactly the angle by which GeoPE turns the block about that axis
  (``k_b |d|``). The only difference to GeoPE is the coupling of the axes.
- PointROPE (``pointrope``, LitePT, Yue et al. 2025, ``libs/pointrope``): axial with its own frequencies,
  ``f_{3q+a} = POINTROPE_BASE ** (-q / Q) e_a`` radians per grid unit, ``Q = C // 6`` pairs per axis
  (``pointrope_frequencies``), on the integer grid coordinates ``g = floor(p / u)`` of the stage's grid
  unit ``u`` (``grid_coordinates``). LitePT pairs channel ``d`` with ``d + Q`` inside each axis' slice of a
  head; the pairing here, like every fixed permutation of channels between two learnt linear maps, is the
  same model. LitePT's heads are 18 channels wide (3 pairs per axis); PTv1's vector attention has no heads,
  so the width of the layer is one head (``Q = C // 6``, the same range of frequencies, sampled densely).
- mixed (``rope-mixed``): ``f_p`` learnable, initialised as RoPE-Mixed does (``mixed_frequencies``,
  random directions at base 10) or as the axial ones of ``rope3d`` (``model.rope_mixed_init``).

**Relative use.** The rotations of one pair commute, so the query's frame is translation invariant::

    R(theta(p_i))^T R(theta(p_j)) = R(theta(p_j) - theta(p_i)) = R(theta(d_ij)),     d_ij = p_j - p_i

and ``pair_frame`` computes either side. With constant frequencies (axial RoPE) it turns every point once by
its own angles and the gathered neighbours back by the query's (``_PointPairFrame``: sines and cosines per
point, as standard GeoPE in ``rotation.py``); when the frequencies learn (RoPE-Mixed) it turns the gathered
neighbours by the angles of the displacements (``_PairFrame``, as linear GeoPE in ``linear_rotation.py``),
which also gives the frequencies' gradient. Both are autograd Functions that save indices and positions or
displacements only (and the features ``(N, C)`` when the frequencies learn): the gradient of a rotation is
the inverse rotation. Angles and products in float32 at least (never autocast's bfloat16), rounded once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.fixed_tables import FixedTables
from pointgeope.model.first_order import GRID_WAY, ROTATION_WAY, first_order_only
from pointgeope.model.ops import gather
from pointgeope.model.rotation import (
    channel_planes,
    constant,
    geometry_dtype,
    query_steps,
    turned_neighbours,
    write_planes,
)

__all__ = ["axial_frequencies", "pointrope_frequencies", "pointrope_table", "mixed_frequencies", "grid_coordinates",
           "pair_angles", "rotate_pairs", "pair_frame", "POINTROPE_BASE", "MIXED_BASE"]

AXES = 3
POINTROPE_BASE = 100.0     # LitePT's ``rope_freq`` (every stage of its models)
MIXED_BASE = 10.0          # RoPE-Mixed's ``rope_theta`` (naver-ai/rope-vit, ``rope_mixed_*`` models)


def axial_frequencies(block_scale: Tensor, channels: int) -> Tensor:
    """The frequency vectors of axial 3D RoPE from GeoPE's block scales ``block_scale (n,)`` of the same
    width, ``(P, 3)``: ``f_{3j+a} = k_{2j} e_a`` (differentiable in ``block_scale``)."""
    blocks = channels // (2 * AXES)
    if blocks == 0 or block_scale.shape[0] < 2 * blocks:
        raise ValueError(f"expected at least {2 * AXES} channels and their {channels // 3} block scales, got "
                         f"{channels} channels and {block_scale.shape[0]} scales")
    eye = torch.eye(AXES, dtype=block_scale.dtype, device=block_scale.device)
    return _pairs_along(block_scale[0: 2 * blocks: 2], eye)


def _pairs_along(scale: Tensor, directions: Tensor) -> Tensor:
    """The pair frequencies ``f_{3q+a} = scale_q directions_a``, ``(3 Q, 3)``, from ``scale (Q,)`` and the
    rows ``directions (3, 3)`` (the axes for axial RoPE, a rotation's rows for RoPE-Mixed)."""
    return (scale[:, None, None] * directions).reshape(AXES * scale.shape[0], AXES)


def _per_axis(channels: int) -> int:
    """``Q = C // 6``, the channel pairs per axis, checked to be at least one."""
    if channels < 2 * AXES:
        raise ValueError(f"expected at least {2 * AXES} channels (one pair per axis), got {channels}")
    return channels // (2 * AXES)


def pointrope_frequencies(channels: int, base: float = POINTROPE_BASE, dtype: torch.dtype = torch.float64,
                          device: torch.device | None = None) -> Tensor:
    """LitePT's PointROPE frequencies, radians per grid unit, ``(P, 3)``: ``f_{3q+a} = base ** (-q / Q) e_a``
    for ``q < Q = C // 6`` (its ``1 / base ** (d / D)`` for pair ``d`` of ``D`` per axis)."""
    per_axis = _per_axis(channels)
    scale = base ** (-torch.arange(per_axis, dtype=torch.float64) / per_axis)
    return _pairs_along(scale, torch.eye(AXES, dtype=torch.float64)).to(device=device, dtype=dtype)


_POINTROPE_TABLES = FixedTables()    # (channels, base, dtype, device) -> pointrope_frequencies, process-wide


def pointrope_table(channels: int, base: float = POINTROPE_BASE, dtype: torch.dtype = torch.float64,
                    device: torch.device | None = None) -> Tensor:
    """``pointrope_frequencies(channels, base, dtype, device)`` ``(P, 3)``, made once per ``(channels, base,
    dtype, device)`` and kept (``pointgeope.fixed_tables.FixedTables``): a copy from the host at every layer and step
    would wait for a GPU's queue to drain. Shared by every caller (PTv1's ``attention.pair_frequencies``, the
    PyG layer, PTv3's ``qk_encodings``); read only."""
    device = torch.device("cpu") if device is None else torch.device(device)
    return _POINTROPE_TABLES.get((channels, base, dtype, device),
                                 lambda: pointrope_frequencies(channels, base, dtype=dtype, device=device))


def mixed_frequencies(channels: int, pos_scale: float, base: float = MIXED_BASE,
                      generator: torch.Generator | None = None) -> Tensor:
    """RoPE-Mixed's initial frequencies in 3D, ``(P, 3)`` float32: ``f_{3q+a} = pos_scale base ** (-q / Q) R e_a``
    with ``R`` a uniformly random rotation (Haar, from the QR of a Gaussian matrix, det +1).

    The original (``init_random_2d_freqs``) draws per layer and head one random angle ``alpha`` and gives the
    head's pairs the magnitudes ``base ** (-q / Q)`` along the unit direction ``alpha`` and along
    ``alpha + pi / 2``: a random rotation of the axial layout. Its 3D form rotates the three axes by one
    random rotation per layer (PTv1's layer is one head). ``pos_scale`` turns radians per grid cell (the
    original's patch) into radians per unit of position."""
    per_axis = _per_axis(channels)
    gauss = torch.randn(AXES, AXES, generator=generator, dtype=torch.float64)
    rot, upper = torch.linalg.qr(gauss)
    rot = rot * torch.sign(torch.diagonal(upper))                   # the Haar measure: Q of a unique QR
    if torch.linalg.det(rot) < 0:
        rot = -rot                                                   # a rotation (3 is odd: -R has det +1)
    scale = pos_scale * base ** (-torch.arange(per_axis, dtype=torch.float64) / per_axis)
    return _pairs_along(scale, rot.T).float()


def grid_coordinates(coord: Tensor, unit: float, dtype: torch.dtype) -> Tensor:
    """PointROPE's positions: the integer grid coordinates ``floor(p / unit)`` of ``coord (N, 3)``, as
    ``dtype`` (exact below ``2 ** 24`` cells in float32). LitePT subtracts each cloud's minimum; the relative
    rotations see ``g_j - g_i`` only, where that shift cancels."""
    with torch.no_grad():
        return torch.floor(coord.to(torch.float64) / unit).to(dtype)


def pair_angles(pos: Tensor, freq: Tensor) -> Tensor:
    """``theta_p(pos) = f_p . pos`` for ``pos (..., 3)`` and ``freq (P, 3)`` -> ``(..., P)``, in their dtype
    also under autocast (which would round a matmul's angles of hundreds of radians to bfloat16)."""
    with torch.autocast(pos.device.type, enabled=False):
        return pos @ freq.transpose(0, 1)


def rotate_pairs(x: Tensor, pos: Tensor, freq: Tensor) -> Tensor:
    """``R(theta(pos)) x`` for ``x (..., C)`` and ``pos (..., 3)`` (broadcast), differentiable in all three
    (plain autograd), computed in float32 at least and rounded once to ``x``'s dtype."""
    pairs, work = freq.shape[0], geometry_dtype(x.dtype)
    theta = pair_angles(pos.to(work), freq.to(work))                                  # (..., P)
    cos, sin = theta.cos(), theta.sin()
    v = x[..., : 2 * pairs].unflatten(-1, (pairs, 2)).to(work)
    even, odd = v[..., 0], v[..., 1]
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(x.dtype)
    rest = x[..., 2 * pairs:]
    return torch.cat([turned, rest.expand(*turned.shape[:-1], rest.shape[-1])], dim=-1)


def _turn(v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``(v cos - v' sin, v sin + v' cos)`` of planes ``v (2, M, P)`` with ``cos, sin (M, P)``; ``-sin``
    turns back. Four multiply-adds over whole contiguous planes."""
    out = torch.empty_like(v)
    torch.mul(v[0], cos, out=out[0]).addcmul_(v[1], sin, value=-1)
    torch.mul(v[0], sin, out=out[1]).addcmul_(v[1], cos)
    return out


class _PairFrame(torch.autograd.Function):
    """``R(theta(d_ij)) x[idx[i, j]] - m_i`` with gradients for ``x``, the frequencies and ``m``.

    Forward, a step of whole queries at a time (``query_steps``, cache-sized on the CPU): gather the pair
    planes of ``x``, turn them by the angles of the step's displacements, write them interleaved, subtract.
    Backward: turn the gradient back (``R^T = R(-theta)``) and ``index_add_`` it into ``x``'s rows; for the
    frequencies, ``dL/dtheta = g' r - g r'`` of the recomputed rotated pair ``r`` and ``dL/df_p = sum_ij
    dL/dtheta_p d_ij`` (one ``(P, M) @ (M, 3)`` product per step). Saves ``idx``, ``disp (N, k, 3)`` and,
    only when the frequencies need a gradient, ``x (N_s, C)``."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, disp: Tensor, freq: Tensor, minus: Tensor | None) -> Tensor:
        ctx.save_for_backward(idx, disp, freq, x if ctx.needs_input_grad[3] else None)
        ctx.rows, ctx.x_dtype = x.shape[0], x.dtype
        ctx.minus_dtype = None if minus is None else minus.dtype
        work, flat, pairs = geometry_dtype(x.dtype), idx.reshape(-1), freq.shape[0]
        src, d, f = channel_planes(x, pairs, 2, work), disp.reshape(-1, 3).to(work), freq.to(work)

        def turn_into(part: slice, rows: Tensor) -> None:
            theta = pair_angles(d[part], f)
            write_planes(_turn(src.index_select(1, flat[part]), theta.cos(), theta.sin()), rows)
        return turned_neighbours(x, idx, minus, 2 * pairs, turn_into)

    @staticmethod
    @first_order_only(ROTATION_WAY)
    def backward(ctx, grad: Tensor):
        idx, disp, freq, x = ctx.saved_tensors
        pairs, flat, channels = freq.shape[0], idx.reshape(-1), grad.shape[-1]
        work = geometry_dtype(ctx.x_dtype)
        rows, d, f = grad.reshape(-1, channels), disp.reshape(-1, 3).to(work), freq.to(work)
        grad_x = rows.new_zeros(ctx.rows, channels, dtype=work) if ctx.needs_input_grad[0] else None
        grad_f = torch.zeros_like(f) if ctx.needs_input_grad[3] else None
        src = channel_planes(x, pairs, 2, work) if grad_f is not None else None
        for part in query_steps(rows.shape[0], 1, channels, grad.device):
            theta = pair_angles(d[part], f)
            cos, sin = theta.cos(), theta.sin()
            g = channel_planes(rows[part], pairs, 2, work)
            if grad_x is not None:                                                  # R^T g, at the row of x
                turned = torch.empty(part.stop - part.start, channels, dtype=work, device=grad.device)
                write_planes(_turn(g, cos, -sin), turned)
                turned[:, 2 * pairs:] = rows[part, 2 * pairs:]
                grad_x.index_add_(0, flat[part], turned)
            if grad_f is not None:
                r = _turn(src.index_select(1, flat[part]), cos, sin)
                grad_f.addmm_(torch.mul(g[1], r[0]).addcmul_(g[0], r[1], value=-1).transpose(0, 1), d[part])
        grad_minus = None
        if ctx.minus_dtype is not None and ctx.needs_input_grad[4]:
            grad_minus = grad.sum(1).neg_().to(ctx.minus_dtype)
        return (None if grad_x is None else grad_x.to(ctx.x_dtype), None, None,
                None if grad_f is None else grad_f.to(freq.dtype), grad_minus)


class _PointPairFrame(torch.autograd.Function):
    """``R(theta(p_i))^T R(theta(p_j)) x[idx[i, j]] - m_i`` for constant positions and frequencies, with
    gradients for ``x`` and ``m``: the same relation as ``_PairFrame`` (the rotations commute), with the
    sines and cosines taken once per point ``(N, P)`` instead of once per pair ``(N k, P)``, as standard
    GeoPE does in ``rotation.py``.

    Forward: turn every row of ``x`` by its own angles, then per step of whole queries gather and turn back
    by the query's angles (broadcast over its ``k`` pairs). Backward: ``dL/dx_j = R_j^T sum_i R_i g_ij``,
    turned per pair by the query's angles, ``index_add_``-ed at ``j`` and turned back once per row. Saves
    ``idx``, ``pos (N, 3)`` and ``freq``. Angles of absolute positions reach ``|p| |f|`` (hundreds of radians
    in a room), so float32 rounds them to about ``1e-5`` rad, as it rounds GeoPE's."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, pos: Tensor, freq: Tensor, minus: Tensor | None) -> Tensor:
        ctx.save_for_backward(idx, pos, freq)
        ctx.rows = x.shape[0]
        ctx.x_dtype, ctx.minus_dtype = x.dtype, None if minus is None else minus.dtype
        work, flat, (k, pairs) = geometry_dtype(x.dtype), idx.reshape(-1), (idx.shape[1], freq.shape[0])
        theta = pair_angles(pos.to(work), freq.to(work))                               # (N, P)
        cos, sin = theta.cos(), theta.sin()
        src = _turn(channel_planes(x, pairs, 2, work), cos, sin)                       # R_j x_j, (2, N, P)

        def turn_into(part: slice, rows: Tensor) -> None:
            queries = slice(part.start // k, part.stop // k)
            got = src.index_select(1, flat[part]).unflatten(1, (-1, k))               # (2, S, k, P)
            back = _turn(got, cos[queries, None], -sin[queries, None]).flatten(1, 2)
            write_planes(back, rows)
        return turned_neighbours(x, idx, minus, 2 * pairs, turn_into)

    @staticmethod
    @first_order_only(GRID_WAY)
    def backward(ctx, grad: Tensor):
        idx, pos, freq = ctx.saved_tensors
        pairs, flat, (queries, k), channels = freq.shape[0], idx.reshape(-1), idx.shape, grad.shape[-1]
        work = geometry_dtype(ctx.x_dtype)
        theta = pair_angles(pos.to(work), freq.to(work))
        cos, sin = theta.cos(), theta.sin()
        grad_x = None
        if ctx.needs_input_grad[0]:
            rows = grad.reshape(-1, channels)
            grad_x = rows.new_zeros(ctx.rows, channels, dtype=work)
            for step in query_steps(queries, k, channels, grad.device):                # R_i g, at the row of x
                part = slice(step.start * k, step.stop * k)
                g = channel_planes(rows[part], pairs, 2, work).unflatten(1, (-1, k))
                turned = torch.empty(part.stop - part.start, channels, dtype=work, device=grad.device)
                write_planes(_turn(g, cos[step, None], sin[step, None]).flatten(1, 2), turned)
                turned[:, 2 * pairs:] = rows[part, 2 * pairs:]
                grad_x.index_add_(0, flat[part], turned)
            write_planes(_turn(channel_planes(grad_x, pairs, 2, work), cos, -sin), grad_x)  # R_j^T, once per row
            grad_x = grad_x.to(ctx.x_dtype)
        grad_minus = None
        if ctx.minus_dtype is not None and ctx.needs_input_grad[4]:
            grad_minus = grad.sum(1).neg_().to(ctx.minus_dtype)
        return grad_x, None, None, None, grad_minus


def pair_frame(x: Tensor, idx: Tensor, disp: Tensor, freq: Tensor, minus: Tensor | None = None,
               pos: Tensor | None = None) -> Tensor:
    """The relation of axial RoPE / RoPE-Mixed: ``out[i, j] = R(theta(d_ij)) x[idx[i, j]] - minus[i]``,
    ``(N, k, C)``, with ``x (N_s, C)``, ``idx (N, k)``, ``disp (N, k, 3)`` (``p_j - p_i``), ``freq (P, 3)``,
    ``minus (N, C)`` or ``None``; ``pos (N, 3)``, the positions of the rows of ``x`` when the queries are
    those rows (``N_s = N``, as in self-attention).

    Memory-lean in every case but one: with ``pos`` and constant frequencies (axial RoPE) the angles are
    taken per point (``_PointPairFrame``), else per pair (``_PairFrame``, which also gives the frequencies'
    gradient); where the displacements need a gradient, plain autograd composes gather, ``rotate_pairs`` and
    subtraction."""
    if not constant(disp):
        out = rotate_pairs(gather(x, idx), disp, freq)
        return out if minus is None else out - minus.unsqueeze(1)
    if pos is not None and constant(pos, freq) and pos.shape[0] == x.shape[0] == idx.shape[0]:
        return _PointPairFrame.apply(x, idx, pos, freq, minus)
    return _PairFrame.apply(x, idx, disp, freq, minus)
