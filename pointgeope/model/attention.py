"""Point Transformer vector attention with a choice of positional encodings (RPE, GeoPE and its baselines).

Point Transformer (Zhao et al., ICCV 2021, https://arxiv.org/abs/2012.09164), attention of point ``i``
over its ``k`` nearest neighbours ``j`` (``docs/GEOPE_SPEC.md`` section 4)::

    relation  r_ij = key_ij - q_i (+ delta_ij)
    weights   w_ij = softmax_j( gamma(r_ij) )          gamma = BN-ReLU-Linear(C, C/s)-BN-ReLU-Linear(C/s, C/s)
    output    y_i  = sum_j  w_ij (.) value_ij          w_ij has C/s channels, shared by s channel groups
    delta_ij  = theta(p_j - p_i)                       theta = Linear(3, 3)-BN-ReLU-Linear(3, C)  ("RPE")

with ``key_ij`` one of ``k_j`` (``none``/``rpe``), ``R(t_i)^T R(t_j) k_j`` (``geope``), ``R(t_j - t_i) k_j``
(``lingeope``), or the same with the 2D rotations of channel pairs (``rope.py``, where both forms are equal) of
axial 3D RoPE at GeoPE's frequencies (``rope3d``), LitePT's PointROPE (``pointrope``) or RoPE-Mixed
(``rope-mixed``); with ``absolute`` (``ape``) the sinusoids ``e(p)``
of the positions are added to queries and keys first (``ape.py``), so the relation gains ``e(p_j) - e(p_i)``.
``value_ij`` is one of ``v_j + delta_ij`` (``rpe``), the relation's rotation applied to ``v_j`` (``geope``)
or ``v_j`` (``none``). The channel groups of the weights, ``s = share_planes``::

    # value channels: [ group 0: c = 0 .. C/s-1 | group 1 | ... | group s-1 ],  channel c uses w[c mod C/s]

Phases come from the coordinates in voxel units: ``t_b(p) = (1 / grid_size) * w_b * p``, so block ``b``
turns by the angle ``k_b |p|`` with the block scale ``k_b = w_b / (3 grid_size)`` (``pointgeope.geope.BlockScale``);
``rope3d`` uses the same scales (the pair of axis ``a`` in RoPE block ``j`` turns by ``k_{2j} p_a``), so that
it differs from ``geope`` in the coupling of the axes only. ``pointrope`` uses PointROPE's own frequencies,
``100^(-q/Q)`` radians per grid unit on the integer grid coordinates ``floor(p / u_s)`` of its stage's unit
``u_s`` (``grid_unit``, set per stage by the network); RoPE-Mixed learns its own from its authors'
random initialisation (or ``rope3d``'s, ``mixed_init="axial"``).
"""
from __future__ import annotations

import typing

import torch
from torch import Tensor, nn

from pointgeope.geope import BlockScale
from pointgeope.geope_checks import check_scale
from pointgeope.model import fused_attention
from pointgeope.model.ape import absolute_features
from pointgeope.model.attention_reference import grouped_sum
from pointgeope.model.linear_rotation import relative_frame
from pointgeope.model.norm import BatchNormReLU
from pointgeope.model.ops import gather
from pointgeope.model.ops.checks import check_count
from pointgeope.model.presets import (
    PAIR_ROTATIONS,
    PRESETS,
    MixedInit,
    PositionalEncoding,
    frequency_keys,
    options_read,
)
from pointgeope.model.qkv import qkv_product
from pointgeope.model.rope import axial_frequencies, grid_coordinates, mixed_frequencies, pair_frame, pointrope_table
from pointgeope.model.rotation import constant, geometry_dtype, query_frame, rotation_tables
from pointgeope.model.stage_memo import displacements, int64

__all__ = ["PositionalEncoding", "PointTransformerLayer", "PRESETS", "position_scales", "options_read",
           "options_for", "frequency_keys", "pair_frequencies"]

DISPLACED = ("lingeope", "rope3d", "rope-mixed")    # the rotations that read p_j - p_i in coord's type (stage_memo)


def position_scales(pe: PositionalEncoding, channels: int, base: float, pos_scale: float, learnable: bool,
                    mixed_init: MixedInit, axes: int = 3) -> tuple[BlockScale | None, nn.Parameter | None]:
    """GeoPE's block scales where a rotation or the sinusoids need them, and RoPE-Mixed's learnable pair
    frequencies ``(P, 3)`` (``mixed_init``: its authors' random directions, or axial RoPE's; ``learnable``
    then concerns nothing else). PointROPE needs neither (its frequencies are constants, ``rope.py``).
    ``axes``: of the positions; the channel pairs of RoPE and the sinusoids are for 3 only."""
    pairs = pe.rotation in PAIR_ROTATIONS or pe.absolute
    if pairs and axes != 3:
        raise ValueError(f"expected 3 position axes for {pe} (one channel pair per axis), got {axes}")
    if pairs and channels < 6:
        raise ValueError(f"expected at least 6 channels (one block of three channel pairs) for {pe}, got {channels}")
    if mixed_init not in typing.get_args(MixedInit):
        raise ValueError(f"expected mixed_init in {typing.get_args(MixedInit)}, got {mixed_init!r}")
    if pe.rotation == "pointrope" and pe.absolute:
        raise ValueError(f"expected no absolute sinusoids with pointrope (its frequencies are per grid unit), got {pe}")
    if channels < 3 or pe.rotation == "pointrope" or not (pairs or pe.rotates):
        return None, None
    mixed = pe.rotation == "rope-mixed"
    scale = BlockScale(channels, base=base, pos_scale=pos_scale, axes=axes, learnable=learnable and not mixed)
    if not mixed:
        return scale, None
    if mixed_init == "random":
        return scale, nn.Parameter(mixed_frequencies(channels, pos_scale))
    return scale, nn.Parameter(axial_frequencies(scale(torch.float32, torch.device("cpu")), channels))


def options_for(pe: str | PositionalEncoding, **options) -> dict:
    """Those of ``options`` (``GeoPEPointTransformerConv``'s names) that a layer of ``pe`` (a preset's name or
    an encoding) reads, by :func:`options_read` at ``options``' ``mixed_init`` (default ``"random"``): one
    set of settings for layers of every encoding, each given only what it reads (it refuses the others)."""
    read = options_read(PositionalEncoding.preset(pe), options.get("mixed_init", "random"))
    return {name: value for name, value in options.items() if name in read}


def pair_frequencies(pe: PositionalEncoding, channels: int, block_scale: BlockScale | None,
                     pair_freq: Tensor | None, like: Tensor) -> Tensor:
    """The channel pairs' frequency vectors ``(P, 3)`` (of ``position_scales``' results): RoPE-Mixed's
    parameter, PointROPE's constants (per grid unit, ``rope.pointrope_table``: made once per device and
    dtype), else the axial ones of GeoPE's scales (per unit of position), for features like ``like``."""
    if pair_freq is not None:
        return pair_freq
    if pe.rotation == "pointrope":
        return pointrope_table(channels, dtype=geometry_dtype(like.dtype), device=like.device)
    return axial_frequencies(block_scale(geometry_dtype(like.dtype), like.device), channels)


class PointTransformerLayer(nn.Module):
    """Vector self-attention over the ``k`` nearest neighbours of every point.

    Args:
        channels: feature width ``C`` (input = mid = output, as in the published model).
        share_planes: ``s``, channel groups sharing one attention weight (``C`` divisible by ``s``).
        neighbours: ``k``.
        pe: a ``PositionalEncoding`` or a preset name.
        grid_size: voxel size in metres; phases use ``pos_scale = 1 / grid_size``.
        geope_base: GeoPE frequency base (finite and > 0, as ``grid_size`` and ``grid_unit``).
        geope_learnable: learn the block frequencies (RoPE-Mixed always learns its own ``pair_freq (P, 3)``).
        grid_unit: PointROPE's grid unit at this stage, metres (``None``: ``grid_size``).
        mixed_init: RoPE-Mixed's initial frequencies, its authors' ``"random"`` directions at base 10 or
            ``"axial"``, those of ``rope3d``.

    Shapes:
        ``coord (N, 3)``, ``feat (N, C)``, ``idx (N, k)`` neighbour rows (including the point itself)
        -> ``(N, C)``.
    """

    def __init__(self, channels: int, share_planes: int = 8, neighbours: int = 16,
                 pe: str | PositionalEncoding = "rpe", grid_size: float = 0.04, geope_base: float = 100.0,
                 geope_learnable: bool = False, grid_unit: float | None = None, mixed_init: MixedInit = "random"):
        super().__init__()
        channels, share_planes = check_count("channels", channels), check_count("share_planes", share_planes)
        if channels % share_planes:
            raise ValueError(f"expected channels divisible by share_planes={share_planes}, got {channels}")
        grid_size, geope_base = check_scale("grid_size", grid_size), check_scale("geope_base", geope_base)
        self.grid_unit = grid_size if grid_unit is None else check_scale("grid_unit", grid_unit)
        self.channels, self.share_planes, self.neighbours = channels, share_planes, neighbours
        self.pe = PositionalEncoding.preset(pe)
        self.linear_q = nn.Linear(channels, channels)
        self.linear_k = nn.Linear(channels, channels)
        self.linear_v = nn.Linear(channels, channels)
        groups = channels // share_planes
        # theta and gamma take the (N * k, .) rows of every (point, neighbour) pair: BatchNorm's statistics over
        # N * k, and the ReLUs write a tensor of their own (on a view of it, autograd would copy the whole pair
        # tensor three times in the backward pass: CopySlices). Each ReLU runs in its norm (norm.BatchNormReLU);
        # an Identity holds its index, so the checkpoints' keys (linear_w.2, .3, .5; linear_p.3) stay
        self.linear_p = (nn.Sequential(nn.Linear(3, 3), BatchNormReLU(3), nn.Identity(), nn.Linear(3, channels))
                         if self.pe.needs_delta else None)
        self.linear_w = nn.Sequential(BatchNormReLU(channels), nn.Identity(), nn.Linear(channels, groups),
                                      BatchNormReLU(groups), nn.Identity(), nn.Linear(groups, groups))
        self.block_scale, self.pair_freq = position_scales(self.pe, channels, geope_base, 1.0 / grid_size,
                                                           geope_learnable, mixed_init)
        self.register_load_state_dict_pre_hook(_renamed_frequencies)

    def frequency_parameters(self) -> list[nn.Parameter]:
        """The learnt positional frequencies: RoPE-Mixed's ``pair_freq`` and, with ``geope_learnable``, GeoPE's
        ``block_scale.freq`` (the optimiser's no-decay group, ``optim.no_weight_decay: [pe_frequencies]``)."""
        scale = None if self.block_scale is None else self.block_scale.freq
        return [p for p in (self.pair_freq, scale) if p is not None]

    def _block_scales(self, like: Tensor) -> Tensor:
        """The block scales ``k_b``, ``(n,)``, in the geometry's dtype for features like ``like``."""
        return self.block_scale(geometry_dtype(like.dtype), like.device)

    def _pair_frequencies(self, like: Tensor) -> Tensor:
        """The channel pairs' frequency vectors ``(P, 3)``: RoPE-Mixed's parameter, PointROPE's constants (per
        grid unit), else the axial ones of GeoPE's scales (per unit of position)."""
        return pair_frequencies(self.pe, self.channels, self.block_scale, self.pair_freq, like)

    def _standard_tables(self, coord: Tensor, feat: Tensor) -> Tensor | None:
        """Standard GeoPE's per-point rotations ``(5, N, C)`` (``rotation_tables``), shared by the key and value
        terms and by the fast paths (the Triton kernels, ``rotation.query_frame``'s Function), when they are
        constants: fixed frequencies and coordinates that need no gradient. ``None`` otherwise (learnable
        frequencies, or a gradient w.r.t. the coordinates: a saliency map, an attack on the points), where
        ``query_frame`` differentiates the rotations with plain autograd."""
        if "geope" not in (self.pe.rotation, self.pe.value_rotation) or self.block_scale is None:
            return None
        pos, scales = coord.to(geometry_dtype(feat.dtype)), self._block_scales(feat)
        return rotation_tables(pos, scales, self.channels) if constant(pos, scales) else None

    def _rotated(self, x: Tensor, coord: Tensor, idx: Tensor, disp: Tensor, tables: Tensor | None,
                 minus: Tensor | None = None) -> Tensor:
        """Neighbour features ``x[idx]`` in the query's frame (minus the query's ``minus`` row), ``(N, k, C)``:
        gather, rotate (and subtract) in one pass."""
        if self.pe.rotation == "lingeope":
            return relative_frame(x, idx, disp, self._block_scales(x), minus)
        if self.pe.rotation == "pointrope":                                      # integer grid coordinates
            grid = grid_coordinates(coord, self.grid_unit, geometry_dtype(x.dtype))
            return pair_frame(x, idx, grid[idx] - grid.unsqueeze(1), self._pair_frequencies(x), minus, pos=grid)
        if self.pe.rotation in PAIR_ROTATIONS:
            return pair_frame(x, idx, disp, self._pair_frequencies(x), minus, pos=coord)
        return query_frame(x, idx, coord.to(geometry_dtype(x.dtype)), self._block_scales(x), minus, tables)

    def _fused_relation(self, key: Tensor, q: Tensor, idx: Tensor, disp: Tensor, delta: Tensor | None,
                        tables: Tensor | None) -> Tensor | None:
        """The relation (``+ delta`` where the preset has it) on the Triton kernels, where they run
        (``fused_attention.enabled``) and have it: no rotation, standard GeoPE with constant rotations
        (``tables``), linear GeoPE with fixed frequencies; ``None`` otherwise (RoPE's pairs, learnable GeoPE
        frequencies, the torch path)."""
        delta, device = delta if self.pe.relation_delta else None, key.device
        if self.pe.rotation == "none" and fused_attention.enabled("relation", device):
            return fused_attention.relation(key, idx, q, delta, check_index=False)
        if self.pe.rotation == "geope" and tables is not None and key.shape[0] == idx.shape[0] \
                and fused_attention.enabled("frame_relation", device):
            return fused_attention.frame_relation(key, idx, tables, q, delta, check_index=False)
        if self.pe.rotation == "lingeope" and not self.block_scale.learnable and constant(disp) \
                and fused_attention.enabled("linear_relation", device):
            return fused_attention.linear_relation(key, idx, disp, self._block_scales(key), q, delta,
                                                   check_index=False)
        return None

    def forward(self, coord: Tensor, feat: Tensor, idx: Tensor) -> Tensor:
        if feat.dim() != 2 or feat.shape[1] != self.channels:
            raise ValueError(f"expected feat of shape (N, {self.channels}), got {tuple(feat.shape)}")
        if coord.shape != (feat.shape[0], 3):
            raise ValueError(f"expected coord of shape ({feat.shape[0]}, 3), got {tuple(coord.shape)}")
        if idx.dim() != 2 or idx.shape[0] != feat.shape[0]:
            raise ValueError(f"expected idx of shape ({feat.shape[0]}, k), got {tuple(idx.shape)}")
        idx = int64(idx)                 # an int32 kNN of one's own: the kernels take int64 (once a stage)
        n, k, c = feat.shape[0], idx.shape[1], self.channels
        q, key, value = qkv_product(feat, (self.linear_q, self.linear_k, self.linear_v))   # one product (qkv.py)
        if self.pe.absolute:                                                     # APE: q_i + e(p_i), k_j + e(p_j)
            e = absolute_features(coord, self._pair_frequencies(feat), c, q.dtype)
            q, key = q + e, key + e
        disp = displacements(coord, idx) if self.pe.rotation in DISPLACED else None     # (N, k, 3): p_j - p_i
        delta = None
        if self.linear_p is not None:       # theta(p_j - p_i) from rows in feat's type (bf16: no cast, stage_memo)
            rows = disp if disp is not None and disp.dtype == feat.dtype else displacements(coord, idx, feat.dtype)
            delta = self.linear_p(rows.view(-1, 3)).view(n, k, c)
        tables = self._standard_tables(coord, feat)                             # (5, N, C) or None

        relation = self._fused_relation(key, q, idx, disp, delta, tables)      # Triton (fused_attention.py), delta in
        if relation is None:
            if self.pe.rotation == "none":
                relation = gather(key, idx) - q.unsqueeze(1)                     # (N, k, C)
            else:
                relation = self._rotated(key, coord, idx, disp, tables, minus=q)
            if self.pe.relation_delta:
                relation = relation + delta
        logits = self.linear_w(relation.reshape(n * k, c)).view(n, k, -1)        # (N, k, C/s)
        if self.pe.value != "geope" and fused_attention.enabled("aggregate", feat.device):
            return fused_attention.aggregate(logits, value, idx, delta if self.pe.value == "rpe" else None,
                                             self.share_planes, check_index=False)   # idx: the kNN's rows
        weight = torch.softmax(logits, dim=1)                                    # (N, k, C/s)

        if self.pe.value == "rpe":
            value = gather(value, idx) + delta
        elif self.pe.value == "geope":
            value = self._rotated(value, coord, idx, disp, tables)
        else:
            value = gather(value, idx)
        return grouped_sum(value, weight, self.share_planes)                   # (N, C)

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, share_planes={self.share_planes}, neighbours={self.neighbours}, "
                f"pe={self.pe}")


def _renamed_frequencies(module, state_dict, prefix, *args) -> None:
    """Checkpoints written before the block scale had its name hold learnable frequencies at ``geope.freq``."""
    old = prefix + "geope.freq"
    if old in state_dict:
        state_dict[prefix + "block_scale.freq"] = state_dict.pop(old)
