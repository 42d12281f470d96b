"""Farthest point sampling (FPS) per cloud of a packed batch, Point Transformer's transition-down.

Cloud ``b`` of ``n_b`` points keeps ``m_b = max(1, n_b // stride)`` points (PTv1 keeps ``n_b // stride``;
the ``max`` keeps tiny clouds from vanishing). Exact FPS from the cloud's first point, as the PTv1
authors' pointops: ``c_0 = 0`` and sample ``s + 1`` is the point farthest from the samples so far,

    dist_j   = min_{r <= s} |p_j - p_{c_r}|^2 ,        c_{s+1} = argmax_j dist_j .

**The rule of every backend** (``FPS_RULE``; with it the sequence is unique, exact ties included):
coordinates rounded to float32; ``dist_j`` starts at ``+inf`` and after each sample ``c`` becomes
``min(dist_j, ((x_j - x_c)^2 + (y_j - y_c)^2) + (z_j - z_c)^2)`` in float32, one rounding per operation
(no fused multiply-add); the next sample is the **smallest** ``j`` holding the largest ``dist_j``. A chosen
point keeps ``dist = 0``, so a cloud whose points all coincide with samples (duplicates) repeats row 0.

Backends, all deterministic and bit for bit the same sequence (the tests check each against a numpy
definition and the others, on integer grids, duplicates and clouds of 1-3 points):

- ``torch``: the definition, iterative, any device, all clouds advanced together (``torch.argmax``
  returns the first maximal index).
- ``triton`` (``triton_fps``): one kernel launch, the CUDA default.
- ``numba`` (``bucket_fps``): a bucket tree that updates only the distances that can change, the CPU
  default and so what the data loader's workers run; at 80k -> 20k points about as fast as ``fpsample``'s
  bucket FPS (``bench/bench_fps.py``), which cannot be used: fpsample 1.0.2 starts from a point of its
  own KD-tree order whatever ``start_idx`` says, and breaks ties in that order.

(torch-cluster's FPS is not a backend: its CUDA kernel sums ``dd += tmp * tmp``, which nvcc fuses into
multiply-adds, and its argmax over threads does not keep the smallest index.)
"""
from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from pointgeope.model import kernels
from pointgeope.model.ops import checks
from pointgeope.model.ops.backends import FPS_BACKENDS, available, resolve
from pointgeope.model.ops.offsets import check_offset, counts, offset_from_counts

__all__ = ["fps", "sample_counts", "FPS_RULE"]

FPS_RULE = ("exact FPS from each cloud's first point; float32 ((dx^2 + dy^2) + dz^2) without fused multiply-add; "
            "ties to the smallest index")


def sample_counts(sizes: list[int], stride: int) -> list[int]:
    """Points kept per cloud: ``max(1, n_b // stride)``."""
    return [max(1, n // stride) for n in sizes]


def fps(points: Tensor, offset: Tensor, stride: int, backend: str | None = None, *,
        check_finite: bool = True) -> tuple[Tensor, Tensor]:
    """Farthest point sampling of every cloud, by the rule of the module docstring.

    Args:
        points: ``(N, 3)`` packed points.
        offset: ``(B,)`` cumulative counts.
        stride: keep ``n_b // stride`` points per cloud (``stride >= 1``).
        backend: ``"numba"``, ``"torch"``, ``"triton"`` or ``None`` for the device's default.
        check_finite: check that ``points`` are finite and within ``checks.COORD_LIMIT`` (one flag read on the
            host; ``HierarchySpec``, which checks its coordinates once, passes ``False``). The name is kept from
            when it checked finiteness only.

    Returns:
        ``idx (M,)`` int64 global rows in sampling order per cloud, ``new_offset (B,)`` int64, both on the
        points' device.

    Raises:
        ValueError / TypeError naming the argument: the shape, ``stride`` not an int ``>= 1``, non-finite
        points or points beyond ``checks.COORD_LIMIT`` (``2^60``: float32 squared distances overflow), offsets
        (``offsets.check_offset``), a backend that cannot run.
    """
    if points.dim() != 2 or points.shape[1] != 3:
        raise ValueError(f"expected points of shape (N, 3), got {tuple(points.shape)}")
    stride = checks.check_count("stride", stride)
    checks.check_values("fps", points=points, offset=offset)
    if checks.check_flag("check_finite", check_finite):
        checks.check_coordinates("points", points)
    off = check_offset(offset, points.shape[0])
    sizes = counts(off)
    kept = sample_counts(sizes, stride)
    chosen = resolve(backend, FPS_BACKENDS, points.device, "fps")
    if chosen == "triton":             # the default falls back to the next default if the kernel fails
        idx = KERNEL.explicit(points, sizes, kept) if backend else KERNEL(points.device, points, sizes, kept)
    elif chosen == "torch":
        idx = _fps_torch(points, sizes, kept)
    else:
        idx = _fps_numba(points, sizes, kept)
    return idx, offset_from_counts(kept, points.device)


def _fps_triton(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    from pointgeope.model.ops.triton_fps import fps_triton

    return fps_triton(points, sizes, kept)


def _fps_numba(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    """``bucket_fps``, each cloud's tree in the kd order of the kNN's tree over it where a hierarchy built one."""
    from pointgeope.model.ops.bucket_fps import bucket_fps
    from pointgeope.model.ops.knn import kd_order

    starts = [0, *itertools.accumulate(sizes)]
    orders = [kd_order(points.detach()[a:b]) for a, b in itertools.pairwise(starts)]
    pts = points.detach().to("cpu", torch.float32).numpy()
    return torch.from_numpy(bucket_fps(pts, sizes, kept, orders=orders)).to(points.device)


def _next_default(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    """The samples by the backend that follows Triton by default (``numba`` on the host, else ``torch``)."""
    return _fps_numba(points, sizes, kept) if available("numba") else _fps_torch(points, sizes, kept)


def _check(device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    from pointgeope.model.kernel_check import fps_cases

    return fps_cases(device, points)


def _fps_torch(points: Tensor, sizes: list[int], kept: list[int]) -> Tensor:
    """All clouds at once, padded to the largest one, in float32; one coordinate per contiguous plane::

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
    xyz = points.detach().float()[rows].permute(2, 0, 1).contiguous()           # (3, B, n_max)
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


KERNEL = kernels.register("fps", _fps_triton, _next_default, check=_check)
