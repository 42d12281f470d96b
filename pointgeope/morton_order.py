"""The Morton order of one cloud on the CPU, compiled with numba: the order of the queries of the CPU kNN
(``model/ops/knn.py``; the CPU FPS's bucket tree takes a kd order, ``model/ops/bucket_fps.py``). The code itself, in
plain arithmetic, is :mod:`pointgeope.morton_code`'s (data code and model code both import it; this module
needs numba, which ``pointgeope.nn``'s minimal install lacks).

The order takes ``code`` of ``cell`` in the cloud's bounding cube (``cube_scale`` of its side) at ``BITS`` bits
per axis: enough to order the points, which is all it is for here. Ties keep row order (a stable sort).
"""
from __future__ import annotations

import numba
import numpy as np

from pointgeope.morton_code import cell, code, cube_scale
from pointgeope.radix import radix_sort

__all__ = ["morton_order", "cloud_order", "BITS", "code", "cell", "cube_scale"]

BITS = 10           # bits per axis of the code: it orders the points, nothing else

# the plain functions above, compiled (they stay plain for the torch code of model/ops/morton.py)
_code, _cell, _cube_scale = (numba.njit(cache=True)(f) for f in (code, cell, cube_scale))


@numba.njit(cache=True)
def morton_order(points):
    """Rows ``0 .. n-1`` of the cloud ``points (n, 3)`` (``n >= 1``) sorted by their Morton code in the cloud's
    bounding cube at ``BITS`` bits per axis, ties in row order (the package's radix sort, ``pointgeope.radix``,
    of ``code << b | row``)."""
    n = points.shape[0]
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for i in range(n):
        for a in range(3):
            lo[a], hi[a] = min(lo[a], points[i, a]), max(hi[a], points[i, a])
    scale = _cube_scale((hi - lo).max(), BITS)
    keys = np.empty(n, np.int64)
    for i in range(n):
        x, y, z = points[i, 0], points[i, 1], points[i, 2]          # (a row view: +0.1 ms at 80k)
        keys[i] = _code(_cell(x, lo[0], scale, BITS), _cell(y, lo[1], scale, BITS), _cell(z, lo[2], scale, BITS))
    rows = 1                                            # key << rows | row: sorted, the rows in key order
    while (1 << rows) < n:
        rows += 1
    for i in range(n):
        keys[i] = (keys[i] << rows) | i
    radix_sort(keys, 3 * BITS + rows)
    return keys & ((1 << rows) - 1)


def cloud_order(points: np.ndarray) -> np.ndarray:
    """``morton_order`` of the whole cloud ``points (n, 3)`` (finite; float32 or float64, C order): ``(n,)``
    int64 rows."""
    return morton_order(points) if len(points) else np.empty(0, np.int64)
