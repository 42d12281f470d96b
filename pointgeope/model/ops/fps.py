"""Farthest point sampling (FPS) per cloud of a packed batch, Point Transformer's transition-down.

Cloud ``b`` of ``n_b`` points keeps ``m_b = max(1, n_b // stride)`` points (PTv1 keeps ``n_b // stride``;
the ``max`` keeps tiny clouds from vanishing). Exact FPS: from a start point ``c_0``, sample ``s + 1`` is
the point whose squared distance to its nearest already chosen sample is largest,

    c_{s+1} = argmax_j  min_{r <= s} |p_j - p_{c_r}|^2 .

Backends and their start point (all deterministic, none uses a random seed):

- ``torch`` (iterative, any device, all clouds advanced together), ``triton`` (``triton_fps``: one kernel
  launch, the CUDA default; the same sequence as ``torch`` bit for bit on float32 points, argmax ties to
  the smallest index) and ``cluster`` (torch-cluster with ``random_start=False``): ``c_0`` is the **first
  point of the cloud**.
- ``fpsample`` (CPU, bucket FPS "QuickFPS", exact FPS, 100x faster than torch-cluster at 80k points):
  fpsample 1.0.2 does not honour ``start_idx``; it starts from a point picked through its KD-tree
  order (a fixed function of the cloud's array, not of its geometry alone), and from there its result
  is the exact FPS (checked in ``tests/model/test_ops.py``). Clouds under ``_BUCKET_MIN`` points, where
  the bucket tree does not pay (and fpsample refuses fewer points than buckets), use an exact numpy FPS
  from the first point.

Only the first-point backends make the network equivariant to permutations that keep each cloud's first
point in place; the bucket FPS is the fast default on CPU all the same.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from pointgeope.model import kernels
from pointgeope.model.ops.backends import FPS_BACKENDS, resolve
from pointgeope.model.ops.offsets import check_offset, counts, offset_from_counts

__all__ = ["fps", "sample_counts"]

_BUCKET_MIN = 1024  # smaller clouds: exact numpy FPS (at most ~1024 x 256 distance updates)


def sample_counts(sizes: list[int], stride: int) -> list[int]:
    """Points kept per cloud: ``max(1, n_b // stride)``."""
    return [max(1, n // stride) for n in sizes]


def fps(points: Tensor, offset: Tensor, stride: int, backend: str | None = None) -> tuple[Tensor, Tensor]:
    """Farthest point sampling of every cloud.

    Args:
        points: ``(N, 3)`` packed points.
        offset: ``(B,)`` cumulative counts.
        stride: keep ``n_b // stride`` points per cloud (``stride >= 1``).
        backend: ``"fpsample"``, ``"torch"``, ``"cluster"``, ``"triton"`` or ``None`` for the device's default.

    Returns:
        ``idx (M,)`` int64 global rows in sampling order per cloud, ``new_offset (B,)`` int64, both on the
        points' device.
    """
    if points.dim() != 2 or points.shape[1] != 3:
        raise ValueError(f"expected points of shape (N, 3), got {tuple(points.shape)}")
    if stride < 1:
        raise ValueError(f"expected stride >= 1, got {stride}")
    off = check_offset(offset, points.shape[0])
    sizes = counts(off)
    kept = sample_counts(sizes, stride)
    if backend is None and resolve(None, FPS_BACKENDS, points.device, "fps") == "triton":
        return kernels.run("fps", points.device, lambda: _fps_triton(points, sizes, kept, off),
                           lambda: fps(points, off, stride))
    backend = resolve(backend, FPS_BACKENDS, points.device, "fps")
    if backend == "torch":
        idx = _fps_torch(points, sizes, kept)
    elif backend == "cluster":
        idx = _fps_cluster(points, sizes, kept, stride)
    elif backend == "triton":
        return _fps_triton(points, sizes, kept, off)
    else:
        idx = _fps_fpsample(points, sizes, kept)
    return idx, offset_from_counts(kept, points.device)


def _fps_triton(points: Tensor, sizes: list[int], kept: list[int], off: list[int]) -> tuple[Tensor, Tensor]:
    from pointgeope.model.ops.triton_fps import fps_triton

    return fps_triton(points, sizes, kept), offset_from_counts(kept, points.device)


def _fps_fpsample(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    import fpsample

    pts = points.detach().to("cpu", torch.float32).numpy()
    parts, start = [], 0
    for n, m in zip(sizes, kept):
        cloud = pts[start:start + n]
        if n < _BUCKET_MIN:
            sel = _numpy_fps(cloud, m)
        else:
            # Tree height: the library's advice (3 small .. 9 large), about log2(n) - 7.
            h = int(min(9, max(3, math.log2(n) - 7)))
            sel = fpsample.bucket_fps_kdline_sampling(cloud, m, h=h, start_idx=0)
        parts.append(torch.from_numpy(np.asarray(sel, dtype=np.int64)) + start)
        start += n
    return torch.cat(parts).to(points.device)


def _numpy_fps(cloud: np.ndarray, m: int) -> np.ndarray:
    """Exact FPS from the first point, ``O(n m)``: the reference for small clouds."""
    dist = np.full(len(cloud), np.inf)
    sel = np.zeros(m, dtype=np.int64)
    for s in range(1, m):
        d = ((cloud - cloud[sel[s - 1]]) ** 2).sum(1)
        np.minimum(dist, d, out=dist)
        sel[s] = int(np.argmax(dist))
    return sel


def _fps_torch(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    """All clouds at once, padded to the largest one; one coordinate per contiguous plane::

        # xyz (3, B, n_max): plane a, row b = [ cloud b's coordinate a | padding ]
        # dist (B, n_max):   squared distance to the nearest chosen point; padding -1 (never chosen)
    """
    device, b = points.device, len(sizes)
    n_max, m_max = max(sizes), max(kept)
    sizes_t = torch.tensor(sizes, device=device)
    starts = torch.cumsum(sizes_t, 0) - sizes_t
    cols = torch.arange(n_max, device=device)
    valid = cols[None, :] < sizes_t[:, None]                                    # (B, n_max)
    rows = (starts[:, None] + cols[None, :]).clamp(max=points.shape[0] - 1)     # global rows, clamped pad
    xyz = points.detach()[rows].permute(2, 0, 1).contiguous()                   # (3, B, n_max)
    dist = torch.where(valid, torch.full_like(xyz[0], math.inf), torch.full_like(xyz[0], -1.0))
    chosen = torch.zeros(m_max, b, dtype=torch.long, device=device)             # first pick: column 0
    d, tmp = torch.empty_like(dist), torch.empty_like(dist)
    for s in range(1, m_max):
        last = xyz.gather(2, chosen[s - 1].view(1, b, 1).expand(3, b, 1))        # (3, B, 1)
        torch.sub(xyz[0], last[0], out=d).square_()
        d.add_(torch.sub(xyz[1], last[1], out=tmp).square_())
        d.add_(torch.sub(xyz[2], last[2], out=tmp).square_())
        torch.minimum(dist, d, out=dist)
        torch.argmax(dist, dim=1, out=chosen[s])
    keep = torch.arange(m_max, device=device)[:, None] < torch.tensor(kept, device=device)[None, :]
    return (chosen + starts[None, :]).T[keep.T]


def _fps_cluster(points: Tensor, sizes: list[int], kept: list[int], stride: int) -> Tensor:
    """torch-cluster's FPS with ``ratio = 1 / stride`` (it keeps ``ceil(n / stride)``), then the first
    ``kept[b]`` samples of each cloud: a prefix of an FPS order is the FPS of that size."""
    import torch_cluster

    device = points.device
    sizes_t = torch.tensor(sizes, device=device)
    batch = torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes_t)
    idx = torch_cluster.fps(points.detach(), batch, ratio=1.0 / stride, random_start=False)
    cloud = batch[idx]
    first = torch.searchsorted(cloud, torch.arange(len(sizes), device=device))  # start of each cloud's run
    rank = torch.arange(idx.numel(), device=device) - first[cloud]
    return idx[rank < torch.tensor(kept, device=device)[cloud]]
