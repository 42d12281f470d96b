"""The typical distance between neighbouring points of a scan: a check that a scan is in metres.

``median_spacing`` estimates the median nearest-neighbour distance of a point cloud from a random subset
of ``m = min(N, max_points)`` points: with ``d_m`` the median distance from each subset point to its
nearest other subset point,

    spacing ~= d_m * sqrt(m / N)

(the spacing of points on surfaces scales as ``1 / sqrt(density)``, and the subset is ``m / N`` as dense),
so a 20M-point scan costs a KD-tree of 200k points. The estimate is meant for comparing two scans (a
user's scan against the training rooms): both are measured the same way, and a unit mistake (millimetres
read as metres) shows up as a ratio of about 1000.
"""
from __future__ import annotations

import numpy as np

from pointgeope.data.rooms import RoomRef, RoomStore


def median_spacing(coord: np.ndarray, rng: np.random.Generator, max_points: int = 200_000) -> float:
    """Estimated median nearest-neighbour distance of ``coord (N, 3)`` (see the module docstring);
    ``nan`` for fewer than 2 points."""
    from pykdtree.kdtree import KDTree

    n = coord.shape[0]
    if n < 2:
        return float("nan")
    m = min(n, max_points)
    subset = coord if m == n else np.take(coord, rng.choice(n, size=m, replace=False), axis=0)
    subset = np.ascontiguousarray(subset, dtype=np.float64)
    subset = subset - subset.min(axis=0)  # KD-tree distances in a small range keep their precision
    dist, _ = KDTree(subset).query(subset, k=2)
    return float(np.median(dist[:, 1]) * np.sqrt(m / n))


def rooms_spacing(rooms: list[RoomRef], seed: int = 0, num_rooms: int = 4) -> float:
    """Median of :func:`median_spacing` over the first ``num_rooms`` of ``rooms`` (the training data's
    reference for ``pointgeope predict``)."""
    store = RoomStore()
    rng = np.random.default_rng(seed)
    values = [median_spacing(store.read(room)["coord"], rng) for room in rooms[:num_rooms]]
    store.close()
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else float("nan")
