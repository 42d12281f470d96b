"""Stray points of a user's scan: the points ``pointgeope predict`` keeps out of the network's input.

A scan is checked as ``prepare`` checks a room, by the same rule (:mod:`pointgeope.outliers`): in metres
(the file's coordinates times ``--scale``), a point is stray when a coordinate is not finite in float32
or when it is farther than ``--max-extent`` (predict's default
:data:`~pointgeope.constants.PREDICT_MAX_EXTENT`, 50 m: the S3DIS-sized rooms the network was trained on)
from the median of the others on some axis. Kept, one such point changes the others' predictions:

- below the room it moves the voxel grid's origin (``floor((p - min p) / grid)``), so other voxels and
  fragments, and shifts the xyz features of its crop (each piece is shifted to a minimum of 0);
- it seeds a crop of the ``voxel_max`` room points nearest to it, which covers them, so every later crop
  starts from another seed;
- in its crop it joins the network's farthest-point sampling and neighbourhoods.

Measured on the test model (tiny synthetic rooms): one point at (1000, 1000, 1000) changed the vote counts
of 46-62 % of a room's points (an inside point: 0.1-4 %, through the seeded shuffles), 100 m below the room
67-85 %; without crops 1 % and 10-16 %.

A scan with more than :data:`STRAY_SHARE` (10 %) of its points stray is refused instead (:func:`refusal`):
it is larger than ``--max-extent`` itself (millimetres read as metres, a whole building), and its
points are no outliers to label from their neighbours. The messages give the ``--max-extent`` that keeps
the points (:func:`keep_extent`).

A stray point is labelled as its nearest kept point (Euclidean, in the file's coordinates): its label,
scores and vote count are that point's, so every output keeps one row per input point and the
probabilities stay consistent with the labels. (The alternative, the ignore label 255, is not a class
that the PLY/LAS palettes or ``viz`` can show.)
"""
from __future__ import annotations

import numpy as np

from pointgeope.constants import PREDICT_EXTENT_LIMIT
from pointgeope.outliers import FLOAT32_INF, beyond_float32, column_bounds, far_from_median
from pointgeope.plural import counted

STRAY_SHARE = 0.1  # more stray points than this share: the scan is larger than --max-extent, not stray points
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


def keep_extent(coord: np.ndarray, stray: np.ndarray, scale: float) -> tuple[float, int] | None:
    """``(extent, kept)``: the smallest round ``--max-extent`` (metres, two significant digits, at most
    :data:`~pointgeope.constants.PREDICT_EXTENT_LIMIT`) above ``|scale * x_i - median|_inf`` of the most
    stray points of ``coord (N, 3)`` (``stray`` bool (N,)), and how many of them it keeps; the median is
    that of the float32-finite points, the centre :func:`stray_points` used. ``None`` when none can be
    kept (not finite in float32, or beyond the limit)."""
    with np.errstate(over="ignore", invalid="ignore"):
        metres = coord * scale
    finite = ~beyond_float32(metres)
    if not (stray & finite).any():
        return None
    reach = np.abs(metres[stray & finite] - np.median(metres[finite], axis=0)).max(axis=1)
    reach = reach[reach < PREDICT_EXTENT_LIMIT]
    if not len(reach):
        return None
    needed = float(reach.max())
    unit = 10.0 ** (np.floor(np.log10(needed)) - (needed >= 10))
    extent = float(np.ceil(needed / unit) * unit)
    extent = min(extent if extent > needed else extent + unit, PREDICT_EXTENT_LIMIT)
    return extent, len(reach)


def refusal(source: str, coord: np.ndarray, stray: np.ndarray, scale: float, max_extent: float) -> str | None:
    """Why a scan is refused rather than predicted without its stray points, or ``None``: no valid point
    at all, or more than :data:`STRAY_SHARE` of them stray (the scan itself is larger than ``max_extent``
    in metres: another unit, or more than a room; labelling them as their nearest kept point would be
    wrong for a large part of it)."""
    where = f"farther than --max-extent {max_extent:g} m from the scan's median after --scale {scale:g}"
    if not stray.all() and stray.mean() <= STRAY_SHARE:
        return None
    keep = keep_extent(coord, stray, scale)
    if stray.all() and keep is None:
        return (f"{source}: no valid point: every point is beyond float32 or {where}; check --scale "
                "(metres per unit)")
    return (f"{source}: {int(stray.sum()):,} of {len(stray):,} points are not finite in float32 or {where}: "
            f"the scan is larger than a room in metres, not a few stray points; if its unit is not metres pass "
            f"--scale (0.001 for millimetres, 0.3048 for feet); "
            + ("no --max-extent keeps them" if keep is None else f"to predict it whole pass --max-extent {keep[0]:g}"))


def describe_stray(source: str, coord: np.ndarray, stray: np.ndarray, scale: float, max_extent: float) -> str:
    """The one warning line of a scan with stray points: how many, the first, how to keep them."""
    first = int(np.flatnonzero(stray)[0])
    keep = keep_extent(coord, stray, scale)
    count = int(stray.sum())
    hint = (f"none can be kept (not finite in float32, or beyond {PREDICT_EXTENT_LIMIT:g} m)" if keep is None else
            f"to keep {'them' if keep[1] == count else f'{keep[1]:,} of them'} in the network's input, "
            f"pass --max-extent {keep[0]:g}")
    return (f"warning: {source}: {count:,} of {counted(len(stray), 'point')} left out of the network's input "
            f"and labelled as their nearest kept point: not finite in float32 or farther than --max-extent "
            f"{max_extent:g} m from the scan's median (after --scale {scale:g}; the first is point {first}: "
            f"{' '.join(f'{v:g}' for v in coord[first])}); {hint}")
