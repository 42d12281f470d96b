"""Which points of a room or a scan are valid: the one rule that ``prepare`` (``data_prep/room.py``) applies
to raw rooms and ``predict`` (``pointgeope/engine/predict.py``) to users' scans.

A point is kept when

1. its coordinates are finite once stored as float32 (``1e39`` would become ``inf``): :func:`beyond_float32`;
2. it is at most ``max_extent`` metres from the median of the points kept by 1, on every axis
   (``|x_i - median(x)|_inf <= max_extent``): :func:`far_from_median`. ``max_extent`` is ``--max-extent``
   (prepare: :data:`pointgeope.constants.MAX_ROOM_EXTENT`, 1 km; predict:
   :data:`pointgeope.constants.PREDICT_MAX_EXTENT`, 50 m, S3DIS-sized rooms).

Pure numpy on ``(N, 3)`` float64 coordinates in metres; what to do with the points left out (drop and
report, refuse the room, label them by their nearest kept point) is the caller's.
"""
from __future__ import annotations

import numpy as np

# The smallest magnitude that float32 rounds to infinity (half an ulp above its largest finite value, a tie
# that rounds to even: infinity): a finite float64 ``v`` is finite in float32 exactly when ``|v| < FLOAT32_INF``.
FLOAT32_INF = 2.0**128 - 2.0**103


def beyond_float32(coord: np.ndarray) -> np.ndarray:
    """``bool (N,)``: the rows of ``coord (N, 3+)`` with a coordinate (columns 0..2) that is not finite
    once stored as float32 (NaN, infinite, or ``|x| >= FLOAT32_INF``)."""
    with np.errstate(invalid="ignore"):
        return ~(np.abs(np.asarray(coord)[:, :3]) < FLOAT32_INF).all(axis=1)


def column_bounds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(min (3,), max (3,))`` of the coordinates (columns 0..2) of ``values (N, 3+)``, N > 0; column by
    column (fast on column-major arrays, and numpy's axis-0 reduction of an (N, 6) array is slower)."""
    return (np.array([values[:, j].min() for j in range(3)]), np.array([values[:, j].max() for j in range(3)]))


def column_extent(values: np.ndarray) -> np.ndarray:
    """``max - min`` per axis of the coordinates of ``values (N, 3+)``; zeros when empty."""
    if not len(values):
        return np.zeros(3)
    lo, hi = column_bounds(values)
    return hi - lo


def far_from_median(coord: np.ndarray, max_extent: float,
                    extent: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``(far bool (N,), centre (3,) | None)``: the rows of ``coord (N, 3+)`` (float32-finite) farther
    than ``max_extent`` from their median ``centre`` on some axis. When the extent (``extent``, else
    computed) is within ``max_extent`` on every axis no point can be, and the median is skipped
    (``centre`` is ``None``): the usual case costs one pass of min/max."""
    coord = np.asarray(coord)
    if extent is None:
        extent = column_extent(coord)
    if (extent <= max_extent).all():
        return np.zeros(len(coord), dtype=bool), None
    centre = np.median(coord[:, :3], axis=0)
    return (np.abs(coord[:, :3] - centre) > max_extent).any(axis=1), centre
