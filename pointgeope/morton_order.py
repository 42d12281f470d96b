"""The Morton (Z-order) code of a point, in plain arithmetic, and the Morton order of one cloud on the CPU,
compiled with numba: the order of the CPU FPS's bucket tree (``model/ops/bucket_fps.py``), of the queries of
the CPU kNN (``model/ops/knn.py``) and of the normal estimate's neighbour search (``data/normals.py``). No
torch: data code and model code both import it (the GPU kernels' keys on tensors: ``model/ops/morton.py``).

The code interleaves the bits of the cell numbers, ``code = ... z1 y1 x1 z0 y0 x0``, so points close in the
code are mostly close in space. The CPU order (:func:`morton_order`) takes ``code`` of ``cell`` in the cloud's
bounding cube (``cube_scale`` of its side) at ``BITS`` bits per axis: enough to order the points, which is all
it is for here. Ties keep row order (a stable sort).
"""
from __future__ import annotations

import numba
import numpy as np

from pointgeope.radix import radix_sort

__all__ = ["morton_order", "cloud_order", "BITS", "code", "cell", "cube_scale"]

# (shift, mask) of each step that moves bits b of a cell number < 2^21 to bits 3 b (the first step leaves a
# number < 2^16 as it is: the GPU keys' 16 bits; the normal estimate's order takes 21)
_SPREAD = ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F), (4, 0x10C30C30C30C30C3),
           (2, 0x1249249249249249))


# --- the code of one point, in plain arithmetic --------------------------------------------------------------
# Operators, min, max and int only, so that numba compiles these for the CPU order below (at fewer bits for its
# radix sort); model/ops/morton.py's keys_in computes the same on whole tensors (test_morton.py checks that they agree).

def code(cx, cy, cz):
    """The Morton code ``... z1 y1 x1 z0 y0 x0`` of the cell ``(cx, cy, cz)``, each ``< 2^21``: ints, int64
    tensors (``_spread_table``), uint64 arrays (the normal estimate's order) or int64 scalars inside numba. Each bit ``b`` of axis ``a`` goes to bit
    ``3 b + a``."""
    out = 0
    for axis, v in enumerate((cx, cy, cz)):
        for shift, mask in _SPREAD:                 # bits b of v moved to bits 3 b
            v = (v | (v << shift)) & mask
        out |= v << axis
    return out


def cube_scale(extent, bits):
    """Cells per unit length, ``(2^bits - 1) / extent``, of a cube of side ``extent`` (at least 1e-12: a
    cloud of one point) cut into ``2^bits`` cells a side: its far faces fall in the last cell."""
    return ((1 << bits) - 1) / max(extent, 1e-12)


def cell(x, lo, scale, bits):
    """The cell of coordinate ``x`` along an axis of the cube from ``lo`` of ``scale`` cells per unit:
    ``trunc((x - lo) * scale)`` clamped to ``0 .. 2^bits - 1`` (a point outside falls in a face's cell)."""
    return int(min(max((x - lo) * scale, 0.0), (1 << bits) - 1))


BITS = 10           # bits per axis of the code: it orders the points, nothing else

# the plain functions above, compiled (they stay plain for the torch code of model/ops/morton.py)
_code, _cell, _cube_scale = (numba.njit(cache=True)(f) for f in (code, cell, cube_scale))


@numba.njit(cache=True)
def morton_order(points, start, n):
    """Rows ``0 .. n-1`` of the cloud ``points[start:start + n]`` sorted by their Morton code in the cloud's
    bounding cube at ``BITS`` bits per axis, ties in row order (the package's radix sort, ``pointgeope.radix``,
    of ``code << b | row``)."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for i in range(start, start + n):
        for a in range(3):
            lo[a], hi[a] = min(lo[a], points[i, a]), max(hi[a], points[i, a])
    scale = _cube_scale((hi - lo).max(), BITS)
    keys = np.empty(n, np.int64)
    for i in range(n):
        x, y, z = points[start + i, 0], points[start + i, 1], points[start + i, 2]  # (a row view: +0.1 ms at 80k)
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
    return morton_order(points, 0, points.shape[0]) if len(points) else np.empty(0, np.int64)
