"""Grid sampling (voxelization) and the nearest-point crop of Point Transformer's S3DIS recipe.

A point ``p`` lies in the voxel with integer grid coordinate

    g(p) = floor((p - min_i p_i) / grid_size)                      (per axis, float32 arithmetic)

and the voxel's key is ``g`` raveled into one int64, ``k = (g_x * D_y + g_y) * D_z + g_z`` with
``D = max g + 1`` (exact, no collisions). Where ``prod(D)`` does not fit in int64 the key is the 64-bit
FNV-1a hash of ``(g_x, g_y, g_z)`` instead (collisions then merge two voxels with probability about
``V^2 / 2^64``).

Grouping the points of each voxel is one sort, never a Python loop per point. Each key is packed with
a tie-break rank ``r`` (0..N-1) into one int64 and sorted::

    packed = key << b | r        b = bits(N - 1)
             [ key (63 - b bits) | r (b bits) ]

so the points of a voxel come out contiguous, ordered by ``r`` (the point index for training, a seeded
random permutation for the test fragments), with the same result on every sort implementation. Where the
packed value would overflow, ``np.lexsort((r, key))`` gives the same order, more slowly.

Training (``voxel_sample``) keeps one uniformly random point per occupied voxel on every call; the test
mode is ``pointgeope.data.fragments``. ``random_crop`` keeps the ``voxel_max`` points nearest to a random
point (PTv1: 80,000) with ``np.argpartition``, not a full sort. Speed: ``bench/bench_voxelize.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pointgeope.radix import sort_nonnegative

# FNV-1a, 64 bit: offset basis and prime.
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _check_coord(coord: np.ndarray, name: str = "coord") -> np.ndarray:
    """``coord`` as an ``(N, 3)`` float array of finite points: one NaN makes its column's minimum NaN, and every
    point's grid coordinate on that axis ``INT64_MIN`` (the voxels lose an axis without a word). One pass
    (about 0.6 ms per million points, 1% of ``voxel_sample``)."""
    coord = np.asarray(coord)
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected {name} of shape (N, 3), got {tuple(coord.shape)}")
    if not np.issubdtype(coord.dtype, np.floating):
        raise ValueError(f"expected floating-point {name}, got dtype {coord.dtype}")
    if not np.isfinite(coord).all():
        bad = ~np.isfinite(coord)
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"expected finite {name}, got {int(bad.sum())} NaN or infinite entries (the first in row "
                         f"{row}: {coord[row].tolist()}); drop or repair those points")
    return coord


def column_min(coord: np.ndarray) -> np.ndarray:
    """``coord.min(0)`` of an ``(N, 3)`` array, per column (numpy's axis-0 reduction over 3 columns is slow)."""
    return np.array([coord[:, j].min() for j in range(coord.shape[1])], dtype=coord.dtype)


def check_grid_size(grid_size: float) -> float:
    """``grid_size`` as a float, a ``ValueError`` unless it is a finite number > 0: NaN or 0 gave no cells, and an
    infinite voxel put every point in cell 0, the whole cloud one voxel without a word."""
    if not 0 < grid_size < np.inf:
        raise ValueError(f"expected grid_size a finite number > 0, got {grid_size}")
    return float(grid_size)


def check_cells(cells: np.ndarray, grid_size: float, lo: np.ndarray | None = None) -> np.ndarray:
    """A ``ValueError`` unless every entry of ``cells`` (floored cell numbers as floats, ``(A, N)`` after the
    shift to the minimum, or before it: PTv3's grid) and the span of each axis fit in int64: past ``2^63`` the
    cast gave ``INT64_MIN`` without a word (an extent of 10 m at ``grid_size=1e-30``, or a float32 quotient
    that overflowed to infinity), every such point in one voxel of negative coordinates. Returns the minima
    ``(A,)``, which PTv3's grid shifts by; ``lo`` gives them where the caller knows them (after the shift: 0).
    A pass over the cells per axis for the maxima, and one for the minima unless given (0.15 ms per million)."""
    lo = cells.min(axis=1) if lo is None else lo
    hi = cells.max(axis=1)
    with np.errstate(invalid="ignore"):                # inf - inf (every cell infinite): NaN, and reach is inf
        reach = max(float(np.abs(lo).max()), float(np.abs(hi).max()), float((hi - lo).max()))
    if not reach < 2.0 ** 63:
        raise ValueError(f"expected grid cells that fit in int64 (below 2^63), got {reach:.3g} cells of grid_size "
                         f"{grid_size:g} along an axis: use a larger grid_size, or centre and split the cloud")
    return lo


def grid_coord(coord: np.ndarray, grid_size: float) -> np.ndarray:
    """Integer voxel coordinates ``floor((coord - min) / grid_size)``.

    Args:
        coord: ``(N, 3)`` finite float points, N >= 1 (a NaN or an infinity is a ``ValueError`` naming it).
        grid_size: voxel edge length (same unit as ``coord``), finite and > 0; a cloud of ``2^63`` voxels or more along
            an axis is a ``ValueError`` (:func:`check_cells`).

    Returns:
        ``(3, N)`` int64, axis-major (each row contiguous), all >= 0.
    """
    coord = _check_coord(coord)
    grid_size = check_grid_size(grid_size)
    if coord.shape[0] == 0:
        raise ValueError("expected at least one point, got an empty coord array")
    ct = np.array(coord.T, order="C")               # (3, N), a copy we may write into (also of a Fortran-order
                                                    # coord, whose .T ascontiguousarray would return as is)
    with np.errstate(over="ignore", divide="ignore"):     # an infinite quotient: check_cells refuses it
        ct -= column_min(coord)[:, None]
        ct /= ct.dtype.type(grid_size)
    np.floor(ct, out=ct)
    check_cells(ct, grid_size, lo=np.zeros(3))      # x - min(x) >= 0, and 0 at the minimum: the minima are 0
    return ct.astype(np.int64)


def voxel_keys(grid: np.ndarray) -> tuple[np.ndarray, bool]:
    """One int64 key per point from ``(3, N)`` grid coordinates.

    Returns:
        ``(keys (N,), exact)``: ``exact`` is True for the raveled key (keys in ``[0, prod(D))``),
        False for the FNV-1a hash (keys anywhere in int64).
    """
    dims = [int(d) + 1 for d in grid.max(axis=1)]
    if dims[0] * dims[1] * dims[2] < 2**63:
        key = grid[0] * dims[1]
        key += grid[1]
        key *= dims[2]
        key += grid[2]
        return key, True
    h = np.full(grid.shape[1], _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for axis in range(3):
            h ^= grid[axis].astype(np.uint64)
            h *= _FNV_PRIME
    return h.view(np.int64), False


@dataclass(frozen=True)
class VoxelGroups:
    """Points grouped by voxel.

    ``order`` lists point indices voxel after voxel (voxels in key order, points of one voxel in
    tie-break order); voxel ``v`` holds ``order[starts[v] : starts[v] + counts[v]]``::

        order:  [ v0 v0 v0 | v1 | v2 v2 | ... ]
        starts: [ 0,         3,   4,      ... ]
        counts: [ 3,         1,   2,      ... ]
    """

    order: np.ndarray   # (N,) int64
    starts: np.ndarray  # (V,) int64
    counts: np.ndarray  # (V,) int64

    @property
    def num_voxels(self) -> int:
        return int(self.starts.shape[0])


def voxel_groups(coord: np.ndarray, grid_size: float, rank: np.ndarray | None = None) -> VoxelGroups:
    """Group the points of ``coord`` by voxel of edge ``grid_size``.

    Args:
        coord: ``(N, 3)`` float points.
        grid_size: voxel edge length.
        rank: optional ``(N,)`` permutation of ``0..N-1``: the order of points inside each voxel
            (default: increasing point index).
    """
    return grid_groups(grid_coord(coord, grid_size), rank)


def grid_groups(grid: np.ndarray, rank: np.ndarray | None = None) -> VoxelGroups:
    """Group points by their integer voxel coordinates ``grid`` (``(3, N)`` int64, all >= 0; e.g.
    :func:`grid_coord`, or another grid's definition such as PTv3's ``pointgeope.data.ptv3_transforms``);
    ``rank`` as in :func:`voxel_groups`."""
    key, exact = voxel_keys(grid)
    n = key.shape[0]
    identity = rank is None
    if identity:
        rank = np.arange(n, dtype=np.int64)
    else:
        rank = np.asarray(rank, dtype=np.int64)
        if rank.shape != (n,):
            raise ValueError(f"expected rank of shape ({n},), got {tuple(rank.shape)}")
    bits = max(1, (n - 1).bit_length())
    if exact and int(key.max()) < 2 ** (63 - bits):
        packed = key << bits                        # [ key | rank ]
        packed |= rank
        sort_nonnegative(packed)
        sorted_key = packed >> bits
        order = packed & ((1 << bits) - 1)           # sorted ranks
        if not identity:
            inverse = np.empty_like(rank)               # rank -> point index
            inverse[rank] = np.arange(n, dtype=np.int64)
            order = inverse[order]
    else:
        perm = np.lexsort((rank, key))
        sorted_key = key[perm]
        order = perm
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, n))
    return VoxelGroups(order=order, starts=starts, counts=counts)


def voxel_sample(coord: np.ndarray, grid_size: float, rng: np.random.Generator) -> np.ndarray:
    """Training-mode grid sampling: one uniformly random point of every occupied voxel.

    Args:
        coord: ``(N, 3)`` float points.
        grid_size: voxel edge length (S3DIS recipe: 0.04 m).
        rng: the sample's generator; a different state picks different points.

    Returns:
        ``(V,)`` int64 indices into ``coord``, one per voxel, in voxel-key order.
    """
    groups = voxel_groups(coord, grid_size)
    offset = rng.integers(0, groups.counts)         # uniform in [0, count) per voxel
    return groups.order[groups.starts + offset]


def squared_distance(coord: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``|coord_i - center|^2`` as ``(dx*dx + dy*dy) + dz*dz`` in the dtype of ``coord``, shape ``(N,)``."""
    center = np.asarray(center, dtype=coord.dtype)
    d = coord[:, 0] - center[0]
    d2 = d * d
    d = coord[:, 1] - center[1]
    d2 += d * d
    d = coord[:, 2] - center[2]
    d2 += d * d
    return d2


def crop_nearest(coord: np.ndarray, voxel_max: int, center: np.ndarray) -> np.ndarray:
    """Indices of the ``voxel_max`` points of ``coord`` nearest to ``center`` (all points if fewer).

    Uses ``np.argpartition`` on the squared distance (O(N)); the returned indices are in no particular
    order. Among points at exactly the same distance as the ``voxel_max``-th, an arbitrary subset is kept.
    """
    coord = _check_coord(coord)
    if voxel_max < 1:
        raise ValueError(f"expected voxel_max >= 1, got {voxel_max}")
    n = coord.shape[0]
    if n <= voxel_max:
        return np.arange(n, dtype=np.int64)
    d2 = squared_distance(coord, center)
    return np.argpartition(d2, voxel_max - 1)[:voxel_max].astype(np.int64, copy=False)


def random_crop(coord: np.ndarray, voxel_max: int, rng: np.random.Generator) -> np.ndarray:
    """PTv1's training crop: the ``voxel_max`` points nearest to a uniformly random point of ``coord``.

    Returns all indices (``arange(N)``, drawing nothing from ``rng``) when ``N <= voxel_max``.
    """
    coord = _check_coord(coord)
    n = coord.shape[0]
    if n <= voxel_max:
        return np.arange(n, dtype=np.int64)
    return crop_nearest(coord, voxel_max, coord[rng.integers(n)])
