"""GeoPE for scaled dot-product attention: rotate queries and keys by their positions, then any attention.

The paper's main use (`GeoPE <https://arxiv.org/abs/2512.04963>`_, as RoPE in RoFormer): every query and
key is turned by the rotation ``R(t(p))`` of its own position, per block of three channels
(``pointgeope.geope``, ``docs/GEOPE_SPEC.md``). ``R`` is orthonormal, so a score sees the two positions only
through the relative rotation of the spec (standard GeoPE, section 3)::

    <R(t_i) q_i, R(t_j) k_j> = q_i^T  R(t_i)^T R(t_j)  k_j          t_b(p) = pos_scale * w_b * p

and the norms, hence softmax's ``1 / sqrt(C)`` scale, do not change. Values are not rotated. Windowed or
serialized point attention, masks, heads, flash kernels: whatever takes ``(q, k, v)`` takes the rotated pair.
(Linear GeoPE's ``R(t_j - t_i)`` does not factor into one rotation per token, so it has no such form.)
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from pointgeope.geope import BlockScale, apply_geope

__all__ = ["geope_qk", "geope_attention"]


def geope_qk(q: Tensor, k: Tensor, pos_q: Tensor, pos_k: Tensor | None = None, *, base: float = 100.0,
             pos_scale: float = 25.0, block_scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Queries and keys turned by GeoPE's rotations of their positions: ``(R(t(pos_q)) q, R(t(pos_k)) k)``.

    Args:
        q: ``(..., L, C)`` queries; k: ``(..., S, C)`` keys (any leading dims, e.g. ``(B, H, L, C)`` heads:
            every head gets the same ``C // 3`` blocks and frequencies).
        pos_q: ``(..., L, A)`` positions of the queries, broadcastable to ``q``'s leading dims (e.g.
            ``(B, 1, L, 3)`` for heads); ``A`` in 1, 2, 3. pos_k: those of the keys (default: ``pos_q``).
        base: frequency base (the paper's lambda). pos_scale: phase per unit of position at block 0.
        block_scale: ``(C // 3,)`` block scales ``k_b`` to use instead of ``base`` and ``pos_scale``, e.g. a
            learnable ``pointgeope.geope.BlockScale``'s output.
    """
    pos_k = pos_q if pos_k is None else pos_k
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"expected queries and keys of the same width, got {tuple(q.shape)} and {tuple(k.shape)}")
    if pos_q.shape[-1] != pos_k.shape[-1]:
        raise ValueError(f"expected positions with the same axes, got {tuple(pos_q.shape)} and {tuple(pos_k.shape)}")
    if block_scale is None:
        scales = BlockScale(q.shape[-1], base=base, pos_scale=pos_scale, axes=pos_q.shape[-1])
        block_scale = scales(torch.promote_types(pos_q.dtype, torch.float32), q.device)
    return apply_geope(q, pos_q, block_scale), apply_geope(k, pos_k, block_scale)


def geope_attention(q: Tensor, k: Tensor, v: Tensor, pos_q: Tensor, pos_k: Tensor | None = None, *,
                    base: float = 100.0, pos_scale: float = 25.0, block_scale: Tensor | None = None,
                    attention: Callable[..., Tensor] = F.scaled_dot_product_attention, **attention_args) -> Tensor:
    """``attention(R(t(pos_q)) q, R(t(pos_k)) k, v, **attention_args)``: dot-product attention whose scores
    depend on positions through ``R(t_i)^T R(t_j)`` (``geope_qk``; default ``attention``: PyTorch's
    ``scaled_dot_product_attention``, e.g. with ``attn_mask`` for windows). Shapes as ``geope_qk``, ``v
    (..., S, C_v)`` -> ``(..., L, C_v)``."""
    q, k = geope_qk(q, k, pos_q, pos_k, base=base, pos_scale=pos_scale, block_scale=block_scale)
    return attention(q, k, v, **attention_args)
