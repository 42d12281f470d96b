"""Absolute sinusoidal position features (APE) added to queries and keys of the vector attention.

The Transformer's sinusoids (Vaswani et al. 2017) of the block's coordinates, with the frequencies and the
channel layout of axial 3D RoPE (``rope.py``: pair ``p = 3 j + a`` is channels ``(2p, 2p + 1)``, angle
``theta_p(pos) = f_p . pos = k_j pos_a``), so that the three baselines differ only in how positions enter::

    # channels: [ cos t0x sin t0x cos t0y sin t0y cos t0z sin t0z | cos t1x ... sin t1z | ... | 0 ... 0 ]
    e(pos)_(2p, 2p+1) = (cos theta_p(pos), sin theta_p(pos))        (the pass-through channels get 0)

In Point Transformer's subtraction relation the features enter as a difference of absolute terms,
``(k_j + e(p_j)) - (q_i + e(p_i)) = k_j - q_i + e(p_j) - e(p_i)``: not translation invariant, and with no
learnt ``delta_ij``. Parameter-free; the sinusoids are computed in float32 at least and rounded once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.rope import pair_angles
from pointgeope.model.rotation import geometry_dtype

__all__ = ["absolute_features"]


def absolute_features(pos: Tensor, freq: Tensor, channels: int, dtype: torch.dtype | None = None) -> Tensor:
    """``e(pos)`` of ``pos (N, 3)`` with the pair frequencies ``freq (P, 3)`` (``2 P <= channels``) ->
    ``(N, channels)`` in ``dtype`` (default: ``pos``'s)."""
    pairs = freq.shape[0]
    if 2 * pairs > channels:
        raise ValueError(f"expected at most {channels // 2} frequency pairs for {channels} channels, got {pairs}")
    dtype = pos.dtype if dtype is None else dtype
    work = geometry_dtype(dtype)
    theta = pair_angles(pos.to(work), freq.to(work))                                  # (N, P)
    waves = torch.stack([theta.cos(), theta.sin()], dim=-1).flatten(-2).to(dtype)     # (N, 2P)
    return torch.cat([waves, waves.new_zeros(pos.shape[0], channels - 2 * pairs)], dim=-1)
