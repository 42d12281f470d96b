"""Positional encodings of dot-product (patch) attention: queries and keys turned by their tokens' positions.

Point Transformer V3's serialized attention (Pointcept's ``PT-v3m1``) and its successors attend within
patches of consecutive tokens with scores ``q_i . k_j``. An encoding here takes ``q, k (B, H, L, D)`` (``B``
patches, ``H`` heads, ``L`` tokens, head width ``D``) after the qkv projection, the tokens' continuous
coordinates ``coord (B, L, 3)`` in metres and the stage's integer grid coordinates ``grid (B, L, 3)``, and
returns the pair to give ``scaled_dot_product_attention`` (``forward``), or the attention itself
(``attention``, which every encoding has, and the one method PTv3's attention calls: it passes its own
``sdpa``, which per-token encodings call and ``lingeope``, whose scores no SDPA kernel computes, does not).
Per head (every head gets the same rotation):

==============  ==================================================================  ===========  ==========
name            rotation of q and k (``docs/positional-encodings.md``)               positions    relative
==============  ==================================================================  ===========  ==========
``none``        identity (PTv3's default: its xCPE convolution is the encoding)      --           --
``geope``       GeoPE ``R(t(p))`` per block of 3 channels, ``t = pos_scale w_b p``   coord (m)    no
``lingeope``    ``q_i^T R(t(p_j) - t(p_i)) k_j`` per pair (``qk_lingeope.py``)       coord (m)    yes
``rope3d``      axial RoPE at GeoPE's frequencies, interleaved pairs (``rope.py``)   coord (m)    yes
``point3drope`` Utonia's Point3DRoPE: x | y | z thirds, rotate-half, base 10         coord (m)    yes
``pointrope``   LitePT's PointROPE: the same form, base 100, per grid cell           grid         yes
==============  ==================================================================  ===========  ==========

Channels past the rotated ones pass through (``D mod 3`` for GeoPE, ``D mod 6`` for the others), as in
``docs/GEOPE_SPEC.md``; PTv3's S3DIS head width 16 so keeps 1 (GeoPE) or 4 (RoPE) channels unrotated, and
``ROTARY_HEAD_DIM = 18`` (Utonia's) is the width every rotator uses fully (``rotary_channels``).
"""
from __future__ import annotations

import numbers
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pointgeope.geope import BlockScale, apply_geope
from pointgeope.geope_checks import check_counted, check_phase_scales, check_scale
from pointgeope.model.coord_augment import UTONIA_AUGMENT, CoordAugment
from pointgeope.model.ops.checks import check_flag
from pointgeope.model.presets import GEOPE_FREQUENCY_ENCODINGS, POINT3DROPE_SCALE, QK_ENCODINGS, QKName
from pointgeope.model.ptv3_rules import head_width_problem
from pointgeope.model.qk_kernels import block_tables, half_tables, swap_matrix, turn_tokens
from pointgeope.model.qk_lingeope import lingeope_attention
from pointgeope.model.rope import POINTROPE_BASE, axial_frequencies, pair_angles, pointrope_table
from pointgeope.model.rotation import constant, geometry_dtype

__all__ = ["QKName", "QK_ENCODINGS", "GEOPE_FREQUENCY_ENCODINGS", "ROTARY_HEAD_DIM", "POINT3DROPE_BASE",
           "POINT3DROPE_SCALE", "GEOPE_POS_SCALE", "rotary_channels", "QKEncoding", "GeoPEQK", "LinGeoPEQK",
           "AxialRoPEQK", "Point3DRoPEQK", "PointRoPEQK", "qk_encoding"]

ROTARY_HEAD_DIM = 18            # Utonia's head width (54 channels / 3 heads): 6 GeoPE blocks, 3 RoPE pairs per axis
POINT3DROPE_BASE = 10.0         # Utonia's rope_base (every config of configs/utonia)
GEOPE_POS_SCALE = 50.0          # 1 / grid_size at PTv3's S3DIS grid of 2 cm: phases in voxel units


def rotary_channels(heads: tuple[int, ...], head_dim: int = ROTARY_HEAD_DIM) -> tuple[int, ...]:
    """The stage widths of the width variant: ``heads * head_dim`` per stage. PTv3's S3DIS encoder heads
    ``(2, 4, 8, 16, 32)`` give ``(36, 72, 144, 288, 576)`` instead of ``(32, ..., 512)`` and its decoder heads
    ``(4, 4, 8, 16)`` give ``(72, 72, 144, 288)`` instead of ``(64, 64, 128, 256)``: head width 18, not 16."""
    return tuple(h * head_dim for h in heads)


class QKEncoding(nn.Module):
    """The identity (``none``) and the interface of every encoding.

    Args:
        head_dim: ``D``, checked against ``q`` and ``k``.
        augment: a ``CoordAugment`` of the continuous positions, drawn at each call in training mode only.
        check_finite: check that the positions are finite and within ``+-2^60`` (the point ops' rule,
            ``geope_checks.check_counted``; one reduction read, on a GPU one synchronisation).

    Shapes: ``q, k (B, H, L, D)``, ``coord (B, L, 3)`` float, ``grid (B, L, 3)`` integer or float (only
    ``pointrope`` reads it; others take ``None``).
    """

    name: str = "none"
    uses_grid = False

    def __init__(self, head_dim: int, augment: CoordAugment | None = None, check_finite: bool = True):
        super().__init__()
        self.head_dim, self.augment = _width(self, head_dim), augment
        self.check_finite = check_flag("check_finite", check_finite)     # "no" is truthy

    def forward(self, q: Tensor, k: Tensor, coord: Tensor | None, grid: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(q, k)`` turned by the positions (``coord`` or ``grid``), shapes and dtypes kept."""
        return self.rotate(q, k, self.positions(q, k, coord, grid))

    def attention(self, q: Tensor, k: Tensor, v: Tensor, coord: Tensor | None, grid: Tensor | None = None, *,
                  scale: float | None = None, dropout_p: float = 0.0, attn_mask: Tensor | None = None,
                  sdpa: Callable[..., Tensor] = F.scaled_dot_product_attention) -> Tensor:
        """``sdpa(*self(q, k, coord, grid), v)``: ``v (B, H, L, D_v)`` -> ``(B, H, L, D_v)``. ``sdpa`` is the
        caller's ``scaled_dot_product_attention`` (PTv3's: its layer's, which pads the heads on CUDA), called
        as ``sdpa(q, k, v, attn_mask=, dropout_p=, scale=)``."""
        q, k = self(q, k, coord, grid)
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)

    def rotate(self, q: Tensor, k: Tensor, pos: Tensor | None) -> tuple[Tensor, Tensor]:
        return q, k

    def positions(self, q: Tensor, k: Tensor, coord: Tensor | None, grid: Tensor | None) -> Tensor | None:
        """The checked positions this encoding reads, ``(B, L, 3)`` in float32 (float64 for float64 ``q``),
        augmented in training mode; ``None`` for ``none``."""
        _check_pair(q, k, self.head_dim)
        if type(self) is QKEncoding:
            return None
        name, pos = ("grid", grid) if self.uses_grid else ("coord", coord)
        _check_positions(name, pos, q, self.check_finite)
        pos = pos.to(geometry_dtype(q.dtype))
        if self.augment is not None and self.training:
            pos = self.augment(pos)
        return pos

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, augment={self.augment}"


def _width(encoding: QKEncoding, head_dim) -> int:
    """``head_dim`` as an int wide enough for the encoding (``ptv3_rules.head_width_problem``; ``TypeError`` for a
    float or a bool: a width of 16.0 failed inside ``range``, or was taken by GeoPE's blocks)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral):
        raise TypeError(f"expected head_dim an int for {encoding.name}, got {head_dim!r} ({type(head_dim).__name__})")
    problem = head_width_problem(encoding.name, head_dim)
    if problem:
        raise ValueError(problem)
    return int(head_dim)


def _check_pair(q: Tensor, k: Tensor, head_dim: int) -> None:
    for label, t in (("q", q), ("k", k)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"expected {label} a floating-point tensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 4 or t.shape[-1] != head_dim:
            raise ValueError(f"expected {label} of shape (B, H, L, {head_dim}), got {tuple(t.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"expected q and k of the same shape, got {tuple(q.shape)} and {tuple(k.shape)}")


def _check_positions(name: str, pos: Tensor | None, q: Tensor, check_finite: bool) -> None:
    batch, _, length, _ = q.shape
    if not isinstance(pos, Tensor):
        raise TypeError(f"expected {name} a tensor of shape (B, L, 3) = ({batch}, {length}, 3), got "
                        f"{type(pos).__name__}")
    if tuple(pos.shape) != (batch, length, 3):
        raise ValueError(f"expected {name} of shape (B, L, 3) = ({batch}, {length}, 3) for q of shape "
                         f"{tuple(q.shape)} (B, H, L, D), got {tuple(pos.shape)}")
    if pos.device != q.device:
        raise ValueError(f"expected {name} on q's device {q.device}, got {pos.device}")
    if name == "coord" and not pos.is_floating_point():
        raise TypeError(f"expected coord a floating-point tensor (metres), got {pos.dtype}")
    if check_finite and pos.is_floating_point():   # one read: NaN, inf, or beyond the point ops' +-2^60, where
        check_counted(name, pos)                                        # GeoPE's axis norm overflows


class GeoPEQK(QKEncoding):
    """Standard GeoPE (``pointgeope.geope``): block ``b`` of every query and key turns by ``R(t_b(p))``,
    ``t_b = pos_scale w_b p``, ``w_b = base^(-2b / (3n))``, ``n = D // 3``; ``p = coord`` in metres, so
    ``pos_scale`` (default ``1 / 0.02``) puts the phases in voxel units. Scores ``q_i^T R(t_i)^T R(t_j) k_j``
    depend on the absolute positions (not translation invariant, as ``docs/GEOPE_SPEC.md`` says).

    Args: as ``QKEncoding``, and ``base``, ``pos_scale``, ``learnable`` (the frequencies) as ``pointgeope.geope.GeoPE``.
    """

    name = "geope"

    def __init__(self, head_dim: int, base: float = 100.0, pos_scale: float = GEOPE_POS_SCALE, learnable: bool = False,
                 augment: CoordAugment | None = None, check_finite: bool = True):
        super().__init__(head_dim, augment, check_finite)
        self.block_scale = BlockScale(head_dim, base=base, pos_scale=pos_scale, axes=3, learnable=learnable)

    def rotate(self, q: Tensor, k: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """The kernels' constant tables (``qk_kernels``) unless the rotation needs a gradient (learnable
        frequencies, or coordinates that need one): then plain autograd through ``apply_geope``."""
        scale = self.block_scale(pos.dtype, pos.device)
        if not constant(pos, scale):
            return apply_geope(q, pos.unsqueeze(1), scale), apply_geope(k, pos.unsqueeze(1), scale)
        tables = block_tables(pos, scale, self.head_dim)
        return turn_tokens(q, tables), turn_tokens(k, tables)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self.block_scale.extra_repr()}"


class LinGeoPEQK(GeoPEQK):
    """Linear GeoPE: scores ``q_i^T R(t(p_j) - t(p_i)) k_j`` (translation invariant), computed per pair in
    ``attention`` (``qk_lingeope.lingeope_attention``): no per-token form exists, so ``forward`` refuses, and no
    SDPA kernel computes such scores, so ``attention`` takes no ``sdpa`` call (it accepts the argument of the
    common protocol and leaves it: zero-padded heads, ``sdpa``'s business, add nothing to these scores either)."""

    name = "lingeope"

    def forward(self, q, k, coord, grid=None):
        raise TypeError("lingeope turns each pair (i, j) by R(t(p_j) - t(p_i)), which no rotation of q and k "
                        "alone gives: call .attention(q, k, v, coord, grid)")

    def attention(self, q: Tensor, k: Tensor, v: Tensor, coord: Tensor | None, grid: Tensor | None = None, *,
                  scale: float | None = None, dropout_p: float = 0.0, attn_mask: Tensor | None = None,
                  sdpa: Callable[..., Tensor] | None = None) -> Tensor:
        pos = self.positions(q, k, coord, grid)
        return lingeope_attention(q, k, v, pos, self.block_scale(pos.dtype, pos.device), scale=scale,
                                  dropout_p=dropout_p, attn_mask=attn_mask)


class _HalfRotary(QKEncoding):
    """Rotary encodings of channel pairs ``(first[p], second[p])`` (``qk_kernels.turn_halves``), turned by
    ``angles(pos) (B, L, P)``; the layout's index and swap tensors are buffers outside the ``state_dict``."""

    def __init__(self, head_dim: int, first: list[int], second: list[int], augment: CoordAugment | None,
                 check_finite: bool):
        super().__init__(head_dim, augment, check_finite)
        first_t, second_t = torch.tensor(first), torch.tensor(second)
        self.register_buffer("first", first_t, persistent=False)
        self.register_buffer("second", second_t, persistent=False)
        self.register_buffer("swap", swap_matrix(first_t, second_t, head_dim), persistent=False)

    def angles(self, pos: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define angles(pos)")

    def rotate(self, q: Tensor, k: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        tables = half_tables(self.angles(pos), self.first, self.second, self.head_dim)
        return turn_tokens(q, tables, self.swap), turn_tokens(k, tables, self.swap)

    def third_angles(self, pos: Tensor, base: float) -> Tensor:
        """``theta[.., a Q + q] = pos_a base^(-q/Q)``, ``(B, L, 3Q)`` in the order ``(a, q)`` of ``_thirds``, from
        ``rope.py``'s ``pointrope_frequencies`` (rows ``3q + a``), made once per device and dtype
        (``rope.pointrope_table``: a copy from the host at every call would wait for a GPU's queue to drain)."""
        freq = pointrope_table(self.head_dim, base, pos.dtype, pos.device)                    # (3Q, 3)
        return pair_angles(pos, freq).unflatten(-1, (-1, 3)).transpose(-1, -2).flatten(-2)


def _lowest(head_dim: int) -> float:
    """The lowest exponent ``-(Q - 1) / Q`` of the thirds' frequencies ``base^(-q/Q)``, ``Q = D // 6``."""
    big_q = head_dim // 6
    return -(big_q - 1) / big_q


def _thirds(head_dim: int) -> tuple[list[int], list[int]]:
    """LitePT's and Utonia's pairs, ``(2Qa + q, 2Qa + Q + q)`` for axis ``a`` and ``q < Q = D // 6``, in the
    order ``(a, q)``."""
    big_q = head_dim // 6
    cells = [(a, q) for a in range(3) for q in range(big_q)]
    return [2 * big_q * a + q for a, q in cells], [2 * big_q * a + big_q + q for a, q in cells]


class AxialRoPEQK(_HalfRotary):
    """``rope3d``, this project's axial 3D RoPE (``pointgeope/model/rope.py``, as the PTv1 preset): pair
    ``p = 3j + a`` (channels ``2p, 2p+1``) turns by ``k_2j p_a``, ``k_b`` GeoPE's block scales of the same
    ``base`` and ``pos_scale`` (``axial_frequencies``); ``m = D // 6`` blocks, ``D mod 6`` channels pass through.
    ``learnable``: GeoPE's frequencies ``w_b`` are a parameter (``BlockScale``), as for ``geope`` and PTv1's
    ``rope3d``; the pairs read the even blocks' ``k_2j`` only, so the odd entries get a gradient of 0."""

    name = "rope3d"

    def __init__(self, head_dim: int, base: float = 100.0, pos_scale: float = GEOPE_POS_SCALE, learnable: bool = False,
                 augment: CoordAugment | None = None, check_finite: bool = True):
        pairs = range(3 * (_width(self, head_dim) // 6))
        super().__init__(head_dim, [2 * p for p in pairs], [2 * p + 1 for p in pairs], augment, check_finite)
        self.block_scale = BlockScale(head_dim, base=base, pos_scale=pos_scale, axes=3, learnable=learnable)

    def angles(self, pos: Tensor) -> Tensor:
        freq = axial_frequencies(self.block_scale(pos.dtype, pos.device), self.head_dim)      # (P, 3)
        return pair_angles(pos, freq)                                                          # (B, L, P)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self.block_scale.extra_repr()}"


class Point3DRoPEQK(_HalfRotary):
    """Utonia's ``Point3DRoPE`` (Pointcept 1.7, ``point_transformer_v3m3_utonia.py``): the first ``6Q`` channels
    (``Q = D // 6``) in x | y | z thirds of ``2Q``, each rotated NeoX-style (channel ``q`` with ``q + Q``) by
    ``pos_scale p_a base^(-q/Q)``, ``p = coord``. Utonia's module turns by ``p_a base^(-q/Q)`` of the coordinates
    it is given (``pos_scale`` 1, the default here, base 10); its S3DIS configs give it half-metres, so on
    metres ``pos_scale = POINT3DROPE_SCALE`` (0.5) gives its S3DIS angles, which PTv3's config does
    (``model.point3drope_scale``). In training the positions are first augmented as Utonia's (``augment``,
    default ``UTONIA_AUGMENT``: per-axis jitter x1.1, rescale x1.2, one draw per call: factors, which commute
    with ``pos_scale``)."""

    name = "point3drope"

    def __init__(self, head_dim: int, base: float = POINT3DROPE_BASE, pos_scale: float = 1.0,
                 augment: CoordAugment | None = UTONIA_AUGMENT, check_finite: bool = True):
        super().__init__(head_dim, *_thirds(_width(self, head_dim)), augment, check_finite)
        self.base, self.pos_scale = check_scale("base", base), check_scale("pos_scale", pos_scale)
        check_phase_scales(self.base, self.pos_scale, _lowest(self.head_dim))

    def angles(self, pos: Tensor) -> Tensor:
        return self.third_angles(pos * self.pos_scale, self.base)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}, pos_scale={self.pos_scale}"


class PointRoPEQK(_HalfRotary):
    """LitePT's ``PointROPE`` (``libs/pointrope``): the layout and rotation of ``point3drope`` with base 100 on the
    stage's integer grid coordinates ``grid`` (radians per cell: ``base^(-q/Q)``); no augmentation."""

    name, uses_grid = "pointrope", True

    def __init__(self, head_dim: int, base: float = POINTROPE_BASE, check_finite: bool = True):
        super().__init__(head_dim, *_thirds(_width(self, head_dim)), None, check_finite)
        self.base = check_scale("base", base)     # 0, < 0 or NaN: NaN angles without a word
        check_phase_scales(self.base, None, _lowest(self.head_dim))    # radians per grid cell

    def angles(self, pos: Tensor) -> Tensor:
        return self.third_angles(pos, self.base)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"


def qk_encoding(name: QKName, head_dim: int, **options) -> QKEncoding:
    """The encoding ``name`` for heads of width ``head_dim``; ``options`` are its class's keyword arguments
    (e.g. ``pos_scale``, ``base``, ``augment``, ``check_finite``)."""
    classes = {"none": QKEncoding, "geope": GeoPEQK, "lingeope": LinGeoPEQK, "rope3d": AxialRoPEQK,
               "point3drope": Point3DRoPEQK, "pointrope": PointRoPEQK}
    if name not in classes:
        raise ValueError(f"expected a positional encoding in {QK_ENCODINGS}, got {name!r}")
    return classes[name](head_dim, **options)
