"""The Morton (Z-order) code of a point, in plain arithmetic (no numba, no torch): the one definition of the
code that the GPU kernels' keys (``model/ops/morton.py``, on tensors), the CPU Morton order
(:mod:`pointgeope.morton_order`, compiled with numba) and the normal estimate's neighbour order
(``data/normals.py``) compute. It imports nothing beyond the standard library, so that ``pointgeope.nn``'s
minimal install (torch alone) imports the model without numba.

The code interleaves the bits of the cell numbers, ``code = ... z1 y1 x1 z0 y0 x0``, so points close in the
code are mostly close in space.
"""
from __future__ import annotations

__all__ = ["code", "cell", "cube_scale"]

# (shift, mask) of each step that moves bits b of a cell number < 2^21 to bits 3 b (the first step leaves a
# number < 2^16 as it is: the GPU keys' 16 bits; the normal estimate's order takes 21)
_SPREAD = ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F), (4, 0x10C30C30C30C30C3),
           (2, 0x1249249249249249))


# --- the code of one point, in plain arithmetic --------------------------------------------------------------
# Operators, min, max and int only, so that numba compiles these for the CPU order (pointgeope.morton_order, at
# fewer bits for its radix sort); model/ops/morton.py's keys_in computes the same on whole tensors (test_morton.py
# checks that they agree).

def code(cx, cy, cz):
    """The Morton code ``... z1 y1 x1 z0 y0 x0`` of the cell ``(cx, cy, cz)``, each ``< 2^21``: ints, int64
    tensors (``_spread_table``), uint64 arrays (the normal estimate's order) or int64 scalars inside numba.
    Each bit ``b`` of axis ``a`` goes to bit ``3 b + a``."""
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
