"""Linear GeoPE in dot-product attention: scores ``q_i^T R(t(p_j) - t(p_i)) k_j``, per pair of tokens.

Linear GeoPE (``docs/GEOPE_SPEC.md`` section 3) turns the key of pair ``(i, j)`` by the rotation of the
displacement ``d_ij = p_j - p_i``: block ``b`` by the angle ``phi_b = k_b |d_ij|`` about ``u = d_ij / |d_ij|``
(``k_b`` the block scale, ``pointgeope.geope.BlockScale``). Three-dimensional rotations do not commute, so
``R(t_j - t_i)`` is no product ``R(t_i)^T R(t_j)`` of one rotation per token (that is standard GeoPE): the
scores cannot be had by rotating ``q`` and ``k`` and calling a fused attention kernel. They are computed per
pair here, without building any rotated key: with Rodrigues' formula,

    q^T R k = cos(phi) q.k + sin(phi) u.(k x q) + (1 - cos(phi)) (q.u)(k.u)

and, writing ``u = d / |d|`` and ``s(phi) = sin(phi)/phi``, ``c(phi) = (1 - cos(phi))/phi^2`` (smooth at 0,
``pointgeope.geope``'s series)::

    s_b(i, j) = cos(phi) A + k_b s(phi) C + k_b^2 c(phi) E F
    A = q_i . k_j                          (one (L, 3) x (3, L) product per block)
    C = d_ij . (k_j x q_i) = q_i . (p_j x k_j) - (q_i x p_i) . k_j      (one (L, 6) x (6, L) product)
    E = q_i . d_ij = q_i . p_j - q_i . p_i,    F = k_j . d_ij = k_j . p_j - p_i . k_j

so a block costs four small matrix products and a few elementwise passes over ``(B, H, L, L)``; the angles
(``(B, 1, L, L)`` per block) are shared by the heads. Positions are centred per row of ``B`` first (the
scores see displacements only), which keeps ``E`` and ``F`` free of cancellation. The last ``D mod 3``
channels pass through: ``+ q_i,rest . k_j,rest``. Rows of ``B`` are processed a chunk at a time, under
activation checkpointing when a gradient is needed, so memory stays at one chunk's ``(b, H, L, L)`` tensors.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pointgeope.geope import _coefficients
from pointgeope.model.rotation import geometry_dtype

__all__ = ["lingeope_scores", "lingeope_attention"]

# Score elements per chunk of rows (about 64 MB of float32 per (b, H, L, L) intermediate).
_CHUNK_ELEMENTS = 1 << 24


def lingeope_scores(q: Tensor, k: Tensor, pos: Tensor, block_scale: Tensor) -> Tensor:
    """Unscaled scores ``sum_b q_ib^T R(k_b d_ij) k_jb + q_i,rest . k_j,rest`` of ``q, k (B, H, L, D)`` at
    positions ``pos (B, L, 3)`` with ``block_scale (n,)``, ``n = D // 3``: ``(B, H, L, L)`` in float32 (float64
    for float64 inputs), differentiable in ``q``, ``k`` and ``block_scale``."""
    work = geometry_dtype(q.dtype)
    q, k, scale = q.to(work), k.to(work), block_scale.to(work)
    p = pos.to(work)
    p = (p - p.mean(dim=1, keepdim=True)).unsqueeze(1)                       # (B, 1, L, 3), centred
    d = p.unsqueeze(-3) - p.unsqueeze(-2)                                     # d[.., i, j] = p_j - p_i
    dist_sq = (d * d).sum(-1)                                                 # (B, 1, L, L)
    del d
    n = scale.shape[0]
    scores = q[..., 3 * n:] @ k[..., 3 * n:].transpose(-1, -2)                # pass-through channels
    p_t = p.transpose(-1, -2)                                                 # (B, 1, 3, L)
    for b in range(n):
        qb, kb = q[..., 3 * b: 3 * b + 3], k[..., 3 * b: 3 * b + 3]
        cos, sinc, versc = _coefficients(dist_sq * scale[b] * scale[b])
        a = qb @ kb.transpose(-1, -2)
        c = torch.cat([qb, -torch.linalg.cross(qb, p.expand_as(qb), dim=-1)], -1) @ \
            torch.cat([torch.linalg.cross(p.expand_as(kb), kb, dim=-1), kb], -1).transpose(-1, -2)
        e = qb @ p_t - (qb * p).sum(-1, keepdim=True)                          # q_i . (p_j - p_i)
        f = (kb * p).sum(-1).unsqueeze(-2) - p @ kb.transpose(-1, -2)         # k_j . (p_j - p_i)
        scores = scores + cos * a + (scale[b] * sinc) * c + (scale[b] * scale[b] * versc) * e * f
    return scores


def _attend(q: Tensor, k: Tensor, v: Tensor, pos: Tensor, block_scale: Tensor, scale: float,
            dropout_p: float, attn_mask: Tensor | None = None) -> Tensor:
    """``softmax(scale * lingeope_scores + mask) v`` of one chunk, ``(b, H, L, D_v)`` in ``v``'s dtype; in
    float32 at least also under autocast (whose bfloat16 products would round ``E`` and ``F``'s positions)."""
    with torch.autocast(q.device.type, enabled=False):
        scores = lingeope_scores(q, k, pos, block_scale) * scale
        if attn_mask is not None:
            scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                      else scores + attn_mask.to(scores.dtype))
        weights = torch.softmax(scores, dim=-1)
        if dropout_p > 0:
            weights = F.dropout(weights, p=dropout_p)
        return (weights @ v.to(weights.dtype)).to(v.dtype)


def lingeope_attention(q: Tensor, k: Tensor, v: Tensor, pos: Tensor, block_scale: Tensor, *,
                       scale: float | None = None, dropout_p: float = 0.0, attn_mask: Tensor | None = None) -> Tensor:
    """Dot-product attention with linear GeoPE scores: ``softmax_j(scale * s_ij) v_j`` for ``q, k (B, H, L, D)``,
    ``v (B, H, L, D_v)``, ``pos (B, L, 3)``, ``block_scale (n,)``; ``scale`` defaults to ``1 / sqrt(D)`` as in
    ``scaled_dot_product_attention``, ``dropout_p`` drops attention weights, ``attn_mask`` as SDPA's (bool: True
    where a key is attended; float: added to the scores), broadcast to ``(B, H, L, L)``. Returns ``(B, H, L, D_v)``."""
    batch, heads, length, channels = q.shape
    scale = channels ** -0.5 if scale is None else scale
    rows = max(1, _CHUNK_ELEMENTS // max(1, heads * length * length))
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, block_scale))
    outs = []
    for start in range(0, batch, rows):
        part = slice(start, start + rows)
        mask = attn_mask if attn_mask is None or attn_mask.shape[0] == 1 else attn_mask[part]
        args = (q[part], k[part], v[part], pos[part], block_scale, scale, dropout_p, mask)
        outs.append(checkpoint(_attend, *args, use_reentrant=False) if grad else _attend(*args))
    return torch.cat(outs)
