"""The patch partition of serialized attention: consecutive points of a curve cut into patches of K.

PTv3 attends within patches of ``K`` consecutive points of a cloud's serialized order. Pointcept's flash
path (``SerializedAttention.get_padding_and_inverse`` with ``flash_attn_varlen_qkvpacked_func``) cuts each
cloud of ``n`` points so:

- ``n > K``: ``ceil(n / K)`` patches of exactly ``K``. If ``r = n mod K > 0`` the last patch is short by
  ``K - r``; its tail slots repeat the points one patch earlier (slot ``t`` in ``[n, ceil(n/K) K)`` holds point
  ``t - K``), so the last patch holds the cloud's last ``K`` points: its ``K - r`` first ones are also in the
  patch before, attend as keys in both, and keep the output of that earlier patch.
- ``n <= K``: one sequence of the ``n`` points (flash's variable length).

Here every patch has ``K`` slots so that ``scaled_dot_product_attention`` sees one (P, H, K, D) batch: a cloud
with ``n < K`` gets ``K - n`` slots holding its first point, masked out as keys (``valid``), which gives the
same result as flash's sequence of ``n``. Pointcept's non-flash fallback is this partition with
``K = min(patch_size, smallest cloud)``, so no cloud is shorter than a patch.

Layout of the padded sequence (P K slots), clouds one after the other::

    cloud 0: [patch 0 | patch 1 | ... | last patch: r points + (K - r) repeats]  cloud 1: [...] ...
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pointgeope.model.ops.offsets import cloud_of_rows

__all__ = ["PatchPartition", "partition"]


@dataclass(frozen=True)
class PatchPartition:
    """Where each of the ``P K`` slots reads and where each point's output is.

    ``source`` (P K,): the position in the serialized sequence (0..N-1) each slot holds; ``slot`` (N,): the
    slot of each serialized position (its output); ``valid`` (P, K) bool, True where a slot is a key,
    or None when every slot is (no cloud shorter than K)."""

    patch_size: int
    source: Tensor
    slot: Tensor
    valid: Tensor | None

    @property
    def num_patches(self) -> int:
        return self.source.numel() // self.patch_size


def partition(counts: Tensor, patch_size: int) -> PatchPartition:
    """The :class:`PatchPartition` of clouds of ``counts`` (B,) points (packed in this order, every count
    >= 1) into patches of ``patch_size`` (module docstring)."""
    if patch_size < 1:
        raise ValueError(f"expected patch_size >= 1, got {patch_size}")
    k = patch_size
    counts = counts.long()
    start = torch.cumsum(counts, 0) - counts                      # first serialized position of each cloud
    slots = torch.where(counts > k, (counts + k - 1) // k * k, torch.full_like(counts, k))
    slot_start = torch.cumsum(slots, 0) - slots
    cloud = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), slots)
    t = torch.arange(int(slots.sum()), device=counts.device) - slot_start[cloud]   # slot within its cloud
    n = counts[cloud]
    local = torch.where(t < n, t, torch.where(n > k, t - k, torch.zeros_like(t)))
    source = start[cloud] + local
    total = int(counts.sum())
    point_cloud = cloud_of_rows(start + counts, total)
    slot = torch.arange(total, device=counts.device) - start[point_cloud] + slot_start[point_cloud]
    valid = None
    if bool((counts < k).any()):
        valid = ((n > k) | (t < n)).view(-1, k)       # repeats of a long cloud are keys too
    return PatchPartition(k, source, slot, valid)
