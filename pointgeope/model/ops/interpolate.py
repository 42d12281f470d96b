"""Inverse-distance interpolation from the 3 nearest coarse points (Point Transformer's transition-up).

For a fine point ``i`` with nearest coarse points ``j = 1..3`` at Euclidean distances ``d_ij``:

    f_i = sum_j  w_ij f_j,      w_ij = (1 / (d_ij + eps)) / sum_l (1 / (d_il + eps)),   eps = 1e-8

(a coarse cloud of fewer than 3 points repeats its nearest ones, see ``knn``; weights stay normalised). The
weights are computed in the geometry dtype (``geope.geometry_dtype``: float32 at least, float64 stays) and
cast once to the features' dtype: in float16 ``eps`` rounds to 0, and a fine point on a coarse one (every
sampled point, in PTv1) would get ``inf / inf``.
"""
from __future__ import annotations

from torch import Tensor

from pointgeope.geope import geometry_dtype
from pointgeope.geope_checks import check_real
from pointgeope.model.ops.checks import check_coordinates
from pointgeope.model.ops.gather import gather
from pointgeope.model.ops.knn import knn

__all__ = ["interpolate", "interpolate_from", "EPS"]

EPS = 1e-8


def interpolate(source_points: Tensor, target_points: Tensor, source_feat: Tensor, source_offset: Tensor,
                target_offset: Tensor, k: int = 3, backend: str | None = None) -> Tensor:
    """Features ``source_feat (N_s, C)`` at ``source_points (N_s, 3)`` carried to ``target_points (N_t, 3)``.

    Returns ``(N_t, C)``. The neighbour indices are not differentiated; the weights depend only on
    coordinates, so gradients flow to ``source_feat`` alone. Non-finite points, or points beyond
    ``checks.COORD_LIMIT``, raise ``ValueError`` naming ``source_points`` or ``target_points``, features not
    floating point a ``TypeError`` naming ``source_feat``; the other arguments are checked as ``knn`` checks them.
    """
    check_real("source_feat", source_feat)      # integer features would take integer weights: 0 below 1
    if source_feat.dim() != 2 or source_feat.shape[0] != source_points.shape[0]:
        raise ValueError(f"expected source_feat of shape ({source_points.shape[0]}, C), got {tuple(source_feat.shape)}")
    check_coordinates("source_points", source_points)
    check_coordinates("target_points", target_points)
    idx, dist2 = knn(target_points, source_points, k, target_offset, source_offset, backend=backend,
                     check_finite=False)
    return interpolate_from(source_feat, idx, dist2)


def interpolate_from(source_feat: Tensor, idx: Tensor, dist2: Tensor) -> Tensor:
    """The interpolation with given neighbours: ``idx (N_t, k)`` rows of ``source_feat (N_s, C)`` and their
    squared distances ``dist2 (N_t, k)`` (e.g. from a precomputed ``PointHierarchy``) -> ``(N_t, C)``. Shapes
    that do not match are a ``ValueError`` (they broadcast: ``idx (1, k)`` with ``dist2 (N_t, k)`` gave ``N_t``
    rows of the first target's neighbours); shapes only, nothing is read."""
    if idx.dim() != 2 or dist2.shape != idx.shape or source_feat.dim() != 2:
        raise ValueError(f"expected source_feat (N_s, C), idx (N_t, k) and dist2 of idx's shape, got "
                         f"{tuple(source_feat.shape)}, {tuple(idx.shape)} and {tuple(dist2.shape)}")
    d2 = dist2.to(geometry_dtype(dist2.dtype))
    recip = 1.0 / (d2.clamp_min(0).sqrt() + EPS)                             # (N_t, k)
    weight = (recip / recip.sum(1, keepdim=True)).to(source_feat.dtype)
    return (gather(source_feat, idx) * weight.unsqueeze(-1)).sum(1)
