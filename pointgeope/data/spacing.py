"""The typical distance between neighbouring points of a scan: a check that a scan is in metres.

``median_spacing`` is the median distance from a point to its nearest other point, over the distinct
points (a scan whose points are repeated, or resampled with repeats, has the spacing of its surface, not 0). Above
``max_points`` points it is measured on a slab of the cloud, the ``max_points`` points whose x is nearest
the median x (``np.argpartition``, O(N)): inside the slab the density is the full cloud's, so the value
does not depend on the size of the scan (a random subset would be sparser), and a 20M-point scan costs
a KD-tree of 200k points. The slab is ``max_points / sqrt(N)`` point spacings wide for a scanned surface
(45 for 20M points), so the points near its faces, whose neighbours may lie outside, barely move the
median. A unit mistake (millimetres read as metres) shows up as a ratio of about 1000 to the training
rooms' value.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope.data.rooms import RoomStore, list_area_rooms


def median_spacing(coord: np.ndarray, max_points: int = 200_000) -> float:
    """Median nearest-neighbour distance of the distinct points of ``coord (N, 3)`` (see the module
    docstring); ``nan`` for fewer than 2 distinct points."""
    from pykdtree.kdtree import KDTree

    n = coord.shape[0]
    if n > max_points:
        x = np.asarray(coord[:, 0])
        lo = (n - max_points) // 2
        coord = np.take(coord, np.argpartition(x, (lo, lo + max_points - 1))[lo:lo + max_points], axis=0)
    points = np.unique(np.asarray(coord, dtype=np.float64), axis=0)
    if points.shape[0] < 2:
        return float("nan")
    points = points - points.min(axis=0)  # small values keep the KD-tree's distances precise
    dist, _ = KDTree(points).query(points, k=2)
    return float(np.median(dist[:, 1]))


def rooms_spacing(root: str | Path, areas: list[str], num_rooms: int = 4) -> float:
    """Median of :func:`median_spacing` over the first ``num_rooms`` rooms of ``areas`` under ``root`` (the
    training data's reference for ``pointgeope predict``); ``nan`` without rooms."""
    store = RoomStore()
    values = [median_spacing(store.read(room)["coord"]) for room in list_area_rooms(root, areas)[:num_rooms]]
    store.close()
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else float("nan")
