"""Test-time voxel fragments of a room, and overlapping crops of a fragment too large for one pass.

Fragments (Pointcept's test-mode ``Voxelize``). Shuffle the points of each voxel (seeded), then
fragment ``f`` takes the ``f``-th point of every voxel that holds more than ``f`` points::

    voxel a: [a0 a1 a2]      fragment 0: [a0 b0 c0]
    voxel b: [b0]            fragment 1: [a1 c1]
    voxel c: [c0 c1]         fragment 2: [a2]

so every point of the room lands in exactly one fragment, each fragment holds at most one point per
voxel (a grid-sampled view of the room, like a training sample), and there are ``max_v count(v)``
fragments. The engine predicts every fragment and so gets a prediction for every point at full
resolution.

Crops. A fragment can hold more than ``voxel_max`` points (fragment 0 holds one point of every voxel).
``split_into_crops`` covers it with overlapping crops of the ``voxel_max`` points nearest to a seed,
PTv1's test procedure: every point carries a small random weight; the next seed is the uncovered point
of least weight; after each crop the crop's points gain weight ``(1 - d^2 / max d^2)^2`` (more near the
seed). It stops when every point is in at least one crop, so a point can be predicted several times;
the engine votes (sums the softmax scores) over all predictions of a point.
"""
from __future__ import annotations

import numpy as np

from pointgeope.data.voxelize import crop_nearest, squared_distance, voxel_groups


def voxel_fragments(coord: np.ndarray, grid_size: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Partition a room's points into voxel fragments.

    Args:
        coord: ``(N, 3)`` float points of the room.
        grid_size: voxel edge length (S3DIS recipe: 0.04 m).
        rng: generator for the within-voxel shuffle.

    Returns:
        ``F`` int64 index arrays into ``coord`` (``F`` = most points in one voxel), fragment ``f``
        holding one point of each voxel with more than ``f`` points; together they hold every index
        exactly once.
    """
    n = np.asarray(coord).shape[0]
    groups = voxel_groups(coord, grid_size, rank=rng.permutation(n))
    # Voxels by decreasing count: the voxels with more than f points are then a prefix.
    by_count = np.argsort(-groups.counts, kind="stable")
    starts = groups.starts[by_count]
    counts = groups.counts[by_count]
    # sizes[f] = number of voxels with count > f (counts are decreasing).
    num_fragments = int(counts[0])
    sizes = np.searchsorted(-counts, -np.arange(num_fragments), side="left")
    return [groups.order[starts[: int(sizes[f])] + f] for f in range(num_fragments)]


def split_into_crops(coord: np.ndarray, voxel_max: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Cover ``coord`` with overlapping crops of at most ``voxel_max`` points (see module docstring).

    Args:
        coord: ``(N, 3)`` float points (one fragment).
        voxel_max: most points in one crop.
        rng: generator for the initial weights (which point seeds the first crop).

    Returns:
        int64 index arrays into ``coord``: ``[arange(N)]`` when ``N <= voxel_max``, else crops of exactly
        ``voxel_max`` points, each the ``voxel_max`` nearest to its seed, whose union is every index.
    """
    n = coord.shape[0]
    if voxel_max < 1:
        raise ValueError(f"expected voxel_max >= 1, got {voxel_max}")
    if n <= voxel_max:
        return [np.arange(n, dtype=np.int64)]
    weight = rng.random(n) * 1e-3
    covered = np.zeros(n, dtype=bool)
    crops = []
    while not covered.all():
        uncovered = np.flatnonzero(~covered)
        seed = uncovered[np.argmin(weight[uncovered])]
        crop = crop_nearest(coord, voxel_max, coord[seed])
        d2 = squared_distance(np.take(coord, crop, axis=0), coord[seed]).astype(np.float64)
        if not (crop == seed).any():  # more than voxel_max duplicates of the seed: keep the seed itself
            far = np.argmax(d2)
            crop[far], d2[far] = seed, 0.0
        weight[crop] += np.square(1.0 - d2 / max(float(d2.max()), 1e-12))
        covered[crop] = True
        crops.append(np.sort(crop))
    return crops
