"""Serialized patch attention of PTv3, on torch's ``scaled_dot_product_attention``.

For one serialization order, the points are read along the curve, cut into patches of K
(:mod:`pointgeope.model.ptv3.patches`), and each patch attends within itself with H heads of width D = C / H::

    q, k, v = split(feat W_qkv + b_qkv)                          (P, H, K, D) each
    out     = pe.attention(q, k, v, coord_patches, grid_patches, scale=s, dropout_p=, attn_mask=RPE + mask,
                           sdpa=self.sdpa)                       (P, H, K, D); without pe: self.sdpa(q, k, v)
            = softmax(s q' k'^T + RPE + mask) v                  s = qk_scale or D^-1/2
    out     = out W_proj + b_proj,   back in the input order

``RPE`` (Pointcept's ``enable_rpe``) is a learnt bias per head indexed by the clamped grid offset of the two
points along each axis, summed over x, y, z; it is float32 (the table's dtype) and reaches ``pe.attention`` as
made: ``lingeope`` adds it to its float32 scores, as Pointcept adds its float32 RPE to ``q k^T`` (by type
promotion, never rounded to q's precision), and :meth:`SerializedAttention.sdpa` casts it to the attention's
dtype (float32 with the upcasts and a half-precision q, else q's, e.g. bf16 under autocast: SDPA takes a float
mask of q's dtype only; autocast then casts all of them to its dtype).
``mask`` removes the empty slots of a cloud shorter than a patch. The positional encoding ``pe`` has one
protocol, ``pe.attention(q, k, v, coord_patches, grid_patches, *, scale, dropout_p, attn_mask, sdpa)``
(:class:`PatchEncoding`), given the patches' coordinates (P, K, 3) float
(metres), their stage's grid coordinates (P, K, 3) int64 and this layer's one SDPA entry :meth:`sdpa`: an
encoding of tokens (``none``, ``geope``, the RoPEs) turns q and k and calls ``sdpa``, so every one of them gets
the upcast and the CUDA head padding below; ``lingeope`` computes its scores ``q_i^T R(t_j - t_i) k_j`` per pair
(``qk_lingeope``), which are no product ``q' . k'`` of any per-token layout, so no SDPA kernel can take them and
it never calls ``sdpa`` (padding, zero channels in a ``q . k`` product, would have nothing to act on).

On CUDA the heads are padded with zero channels to a multiple of :data:`SDPA_ALIGN` before SDPA
(:func:`aligned_attention`): its memory-efficient kernel needs the head width to be a multiple of 4 (float32)
or 8 (half precision) and cuDNN's a multiple of 8, so the comparison's head width 18 would otherwise take the
math path, which stores the (P, H, K, K) scores of every patch (about 15 GB per float32 block at 1.8M points
and K = 1024). Zero channels add nothing to ``q . k`` and give zero outputs, which are cut off: the result
is the same (the scale is given explicitly, ``D^-1/2`` of the true width).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pointgeope.model.ptv3.patches import PatchPartition, partition
from pointgeope.model.ptv3.structure import PointBatch

__all__ = ["RPE", "PatchEncoding", "SerializedAttention", "SDPA_ALIGN", "aligned_attention", "sdpa_alignment"]


class PatchEncoding(Protocol):
    """The ``pe`` of :class:`SerializedAttention` (module docstring), e.g. ``seg.StageEncodings`` or any
    ``qk_encodings.QKEncoding``: ``attention(q, k, v (P, H, K, D), coord (P, K, 3), grid (P, K, 3), *, scale,
    dropout_p, attn_mask, sdpa) -> (P, H, K, D)``, where ``sdpa`` takes ``(q, k, v, attn_mask=, dropout_p=,
    scale=)`` as ``F.scaled_dot_product_attention`` does."""

    def attention(self, q: Tensor, k: Tensor, v: Tensor, coord: Tensor, grid: Tensor, *, scale: float,
                  dropout_p: float, attn_mask: Tensor | None, sdpa: Callable[..., Tensor]) -> Tensor: ...


SDPA_ALIGN = 8   # head width multiple of CUDA's fused SDPA kernels (module docstring); the CPU's take any width


def sdpa_alignment(device: torch.device) -> int:
    """The head-width multiple SDPA's fused kernels need on ``device``: :data:`SDPA_ALIGN` on CUDA, 1 elsewhere."""
    return SDPA_ALIGN if device.type == "cuda" else 1


def aligned_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, scale: float,
                      dropout_p: float = 0.0, align: int = 1) -> Tensor:
    """``scaled_dot_product_attention(q, k, v)`` (P, H, K, D) with the head width zero-padded to a multiple of
    ``align`` for the call and cut back after: ``[q | 0] . [k | 0] = q . k`` and ``A [v | 0] = [A v | 0]``."""
    width = q.shape[-1]
    pad = -width % align
    if pad:
        q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale, dropout_p=dropout_p)
    return out[..., :width] if pad else out


class RPE(nn.Module):
    """Pointcept's relative position bias: ``bias[h, i, j] = sum_a T[a R + clamp(g_i - g_j, -b, b)_a + b, h]``
    with the bound ``b = int(2 (4 patch_size)^(1/3))``, ``R = 2 b + 1`` and the table ``T`` (3 R, H)."""

    def __init__(self, patch_size: int, num_heads: int) -> None:
        super().__init__()
        self.pos_bnd = int((4 * patch_size) ** (1 / 3) * 2)
        self.rpe_num = 2 * self.pos_bnd + 1
        self.rpe_table = nn.Parameter(torch.zeros(3 * self.rpe_num, num_heads))
        nn.init.trunc_normal_(self.rpe_table, std=0.02)

    def forward(self, grid_patches: Tensor) -> Tensor:
        """Bias (P, H, K, K) of the grid coordinates of the patches (P, K, 3)."""
        rel = grid_patches.unsqueeze(2) - grid_patches.unsqueeze(1)             # (P, K, K, 3): g_i - g_j
        axis = torch.arange(3, device=rel.device) * self.rpe_num
        idx = rel.clamp(-self.pos_bnd, self.pos_bnd) + self.pos_bnd + axis
        bias = self.rpe_table[idx].sum(dim=3)                                   # (P, K, K, H)
        return bias.permute(0, 3, 1, 2)


class SerializedAttention(nn.Module):
    """Multi-head attention within serialized patches (module docstring).

    Args (Pointcept's ``SerializedAttention``):
        channels, num_heads: C and H (C divisible by H).
        patch_size: K. ``enable_flash=True``: K fixed, Pointcept's flash partition. False: Pointcept's
            fallback, ``K = min(patch_size, smallest cloud)``.
        qkv_bias, qk_scale, attn_drop, proj_drop: as in Pointcept.
        order_index: which serialization order (row of ``serialized_order``) this layer uses.
        enable_rpe: add the :class:`RPE` bias (allowed with either partition: SDPA takes a bias).
        upcast_attention, upcast_softmax: attend in float32 when the features are half precision (float32 and
            float64 features attend in their own dtype). Under autocast they change nothing: autocast casts
            SDPA's inputs, float32 ones too, to its own dtype (CPU and CUDA).
        pe: the positional encoding, a :class:`PatchEncoding` (module docstring); None = none.
    Shapes:
        forward(point) -> (N, C), the attention output of ``point.feat`` (N, C), rows in input order.
    """

    def __init__(self, channels: int, num_heads: int, patch_size: int, qkv_bias: bool = True,
                 qk_scale: float | None = None, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 order_index: int = 0, enable_rpe: bool = False, enable_flash: bool = True,
                 upcast_attention: bool = True, upcast_softmax: bool = True,
                 pe: PatchEncoding | None = None) -> None:
        super().__init__()
        if channels % num_heads:
            raise ValueError(f"expected channels divisible by num_heads, got {channels} and {num_heads}")
        self.channels, self.num_heads, self.patch_size = channels, num_heads, patch_size
        self.scale = qk_scale or (channels // num_heads) ** -0.5
        self.order_index, self.enable_flash = order_index, enable_flash
        self.upcast = upcast_attention or upcast_softmax
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(channels, channels * 3, bias=qkv_bias)
        self.proj = nn.Linear(channels, channels)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rpe = RPE(patch_size, num_heads) if enable_rpe else None
        self.pe = pe

    def patches(self, point: PointBatch) -> PatchPartition:
        """The stage's partition for this layer's K, built once and cached on ``point``."""
        counts = point.counts()
        k = self.patch_size if self.enable_flash else min(int(counts.min()), self.patch_size)
        key = ("patches", k)
        if key not in point.cache:
            point.cache[key] = partition(counts, k)
        return point.cache[key]

    def forward(self, point: PointBatch) -> Tensor:
        part = self.patches(point)
        h, c, k = self.num_heads, self.channels, part.patch_size
        order = point.serialized_order[self.order_index][part.source]            # (P K,) point of each slot
        inverse = part.slot[point.serialized_inverse[self.order_index]]          # (N,) slot of each point
        qkv = self.qkv(point.feat)[order]
        q, key, v = qkv.view(-1, k, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)   # (P, H, K, D)
        coord, grid = point.coord[order].view(-1, k, 3), point.grid_coord[order].view(-1, k, 3)
        mask = self._mask(part, grid)
        drop = self.attn_drop if self.training else 0.0
        if self.pe is None:
            out = self.sdpa(q, key, v, attn_mask=mask, dropout_p=drop, scale=self.scale)
        else:
            out = self.pe.attention(q, key, v, coord, grid, scale=self.scale, dropout_p=drop, attn_mask=mask,
                                    sdpa=self.sdpa)
        out = out.transpose(1, 2).reshape(-1, c)[inverse]
        return self.proj_drop(self.proj(out))

    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
             scale: float | None = None) -> Tensor:
        """This layer's one call of ``scaled_dot_product_attention`` (P, H, K, D) -> (P, H, K, D) in ``q``'s
        dtype: in float32 if ``upcast`` and ``q`` is half precision (float64 stays float64: an upcast never
        lowers the precision; under autocast SDPA runs in autocast's dtype whatever the upcast), a float mask
        (the RPE bias) in the attention's precision, the heads padded to :func:`sdpa_alignment` of the device
        (:func:`aligned_attention`)."""
        dtype = q.dtype
        if self.upcast and torch.finfo(dtype).bits < 32:
            q, k, v = q.float(), k.float(), v.float()
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.to(q.dtype)                              # the RPE bias in q's precision
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        return aligned_attention(q, k, v, attn_mask, scale, dropout_p, sdpa_alignment(q.device)).to(dtype)

    def _mask(self, part: PatchPartition, grid_patches: Tensor) -> Tensor | None:
        """The SDPA mask: None, the keys' validity (P, 1, 1, K) bool, or the RPE bias (P, H, K, K) with
        ``-inf`` at invalid keys."""
        valid = None if part.valid is None else part.valid[:, None, None, :]
        if self.rpe is None:
            return valid
        bias = self.rpe(grid_patches)
        if valid is not None:
            bias = bias.masked_fill(~valid, float("-inf"))
        return bias
