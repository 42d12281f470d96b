"""Stray points of a user's scan: the points ``pointgeope predict`` keeps out of the network's input.

A scan is checked as ``prepare`` checks a room, by the same rule (:mod:`pointgeope.outliers`): in metres
(the file's coordinates times ``--scale``), a point is stray when a coordinate is not finite in float32
or when it is farther than ``--max-extent`` from the median of the others on some axis. One stray point
would otherwise change the input of every fragment it shares a voxel grid or a crop with (shifted
minimum, normalised height, crop centres) and with it the labels of most other points.

A stray point is labelled as its nearest kept point (Euclidean, in the file's coordinates): its label,
scores and vote count are that point's, so every output keeps one row per input point and the
probabilities stay consistent with the labels. (The alternative, the ignore label 255, is not a class
that the PLY/LAS palettes or ``viz`` can show.)
"""
from __future__ import annotations

import numpy as np

from pointgeope.outliers import FLOAT32_INF, beyond_float32, column_bounds, far_from_median

_FAR = 1e150  # query offsets are clipped to this, so that squared distances stay finite in float64


def stray_points(coord: np.ndarray, scale: float, max_extent: float) -> np.ndarray:
    """``bool (N,)``: the points of ``coord (N, 3)`` (float64, file units, finite) that are not valid once
    multiplied by ``scale`` (metres), by the rule of :mod:`pointgeope.outliers`."""
    coord = np.asarray(coord, dtype=np.float64)
    if not len(coord):
        return np.zeros(0, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = (bound * scale for bound in column_bounds(coord))  # the bounds in metres, exactly (scale > 0)
        if (np.abs(np.r_[lo, hi]) < FLOAT32_INF).all() and (hi - lo <= max_extent).all():
            return np.zeros(len(coord), dtype=bool)  # the usual scan: no temporary copy of it
        metres = coord * scale
    stray = beyond_float32(metres)
    finite = np.flatnonzero(~stray)
    if len(finite):
        far, _ = far_from_median(metres[finite], max_extent)
        stray[finite[far]] = True
    return stray


def nearest_kept(coord: np.ndarray, stray: np.ndarray) -> np.ndarray:
    """``int64 (S,)``: for each stray point of ``coord (N, 3)`` (``stray`` bool (N,)), the index among the
    kept points (``coord[~stray]``) of its nearest one. Needs a kept point."""
    from scipy.spatial import cKDTree

    kept = coord[~stray]
    centre = np.median(kept, axis=0)
    query = centre + np.clip(coord[stray] - centre, -_FAR, _FAR)
    _, index = cKDTree(kept).query(query, k=1)
    return np.asarray(index, dtype=np.int64)


def describe_stray(source: str, coord: np.ndarray, stray: np.ndarray, scale: float, max_extent: float) -> str:
    """The one warning line of a scan with stray points: how many, the first, what to do."""
    first = int(np.flatnonzero(stray)[0])
    return (f"warning: {source}: {int(stray.sum()):,} of {len(stray):,} point(s) left out of the network's input "
            f"and labelled as their nearest kept point: not finite in float32 or farther than --max-extent "
            f"{max_extent:g} m from the scan's median (after --scale {scale:g}; the first is point {first}: "
            f"{' '.join(f'{v:g}' for v in coord[first])}); raise --max-extent to keep them")
