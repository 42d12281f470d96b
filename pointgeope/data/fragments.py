"""Test-time pieces of a room: voxel fragments as in Point Transformer's test, and crops of large ones.

Fragments (the authors' ``tool/test.py``; Pointcept's test-mode ``GridSample`` does the same). The
room is voxelized at ``grid_size`` (voxel of ``p`` = ``floor((p - min p) / grid_size)``), the points of
each voxel are shuffled (seeded), and fragment ``f`` takes from **every** occupied voxel ``v`` its point
number ``f mod count(v)``::

    voxel a: [a0 a1 a2]      fragment 0: [a0 b0 c0]
    voxel b: [b0]            fragment 1: [a1 b0 c1]
    voxel c: [c0 c1]         fragment 2: [a2 b0 c0]

There are ``F = max_v count(v)`` fragments. Each is a complete grid-sampled view of the room, one point
per voxel, which is what the network saw in training; every point is in at least one fragment, and the
points of sparse voxels are predicted several times (``b0`` three times above). ``F`` is set by the
densest voxel, so a room with a few very dense voxels costs many passes; ``max_fragments`` caps it, and
a point that no fragment then reaches takes the summed scores of the predicted points of its voxel
(:func:`fill_from_voxels`). The published test has no cap.

Crops. A fragment holds one point per voxel of the room, often more than ``voxel_max``.
``split_into_crops`` covers it with overlapping crops of the ``voxel_max`` points nearest to a seed, after
PTv1's test: every point draws a small random weight; the next seed is the uncovered point of least weight;
it stops when every point is in at least one crop. The authors take the seed of least weight over all
points, covered or not, and after each crop add ``(1 - d^2 / max d^2)^2`` to its points' weights (more near
the seed), so that a covered point is seldom the least. Restricting the seed to uncovered points makes that
update moot (only covered points gain weight, and no covered point is a seed), so it is not done; the crops
differ from the authors' only from the first crop where their least-weight point is a covered one, and each
crop covers a new point (``tests/data/test_fragments.py`` checks both against the authors' rule).

A piece (one crop of one fragment) is shifted to a minimum of 0 like a training block. The engine sums
the scores of every prediction made for a point (``pointgeope.engine.evaluate``).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from pointgeope.data.transforms import Sample, shift_to_origin, take_points
from pointgeope.data.voxelize import VoxelGroups, crop_nearest, squared_distance, voxel_groups


class VoxelFragments(Sequence):
    """The ``F`` fragments of a room, built on demand: ``fragments[f]`` is an int64 index array of one
    point per occupied voxel (``V`` of them), point ``f mod count(v)`` of voxel ``v``'s shuffled points.

    Only the voxel grouping (``O(N)``) is stored, never the ``F x V`` indices of all fragments.
    """

    def __init__(self, groups: VoxelGroups):
        self.groups = groups

    def __len__(self) -> int:
        return int(self.groups.counts.max())

    def __getitem__(self, f: int) -> np.ndarray:
        if not 0 <= f < len(self):
            raise IndexError(f"expected a fragment index in [0, {len(self)}), got {f}")
        g = self.groups
        return g.order[g.starts + f % g.counts]


def voxel_fragments(coord: np.ndarray, grid_size: float, rng: np.random.Generator) -> VoxelFragments:
    """The published test-time fragments of a room (see the module docstring).

    Args:
        coord: ``(N, 3)`` float points of the room.
        grid_size: voxel edge length (S3DIS recipe: 0.04 m).
        rng: generator of the within-voxel shuffle.

    Returns:
        ``F = max_v count(v)`` fragments, each holding exactly one point of every occupied voxel.
    """
    n = np.asarray(coord).shape[0]
    return VoxelFragments(voxel_groups(coord, grid_size, rank=rng.permutation(n)))


def fill_from_voxels(groups: VoxelGroups, scores: np.ndarray, votes: np.ndarray) -> int:
    """Give every point without a vote the summed ``scores`` and ``votes`` of its voxel, in place.

    For a voxel ``v`` and a point ``i`` of it with ``votes[i] == 0``:
    ``scores[i] = sum_{j in v} scores[j]``, ``votes[i] = sum_{j in v} votes[j]`` (the points without a
    vote add nothing). Returns the number of points filled; points of voxels that hold no vote at all
    stay at zero.
    """
    missing = votes[groups.order] == 0                        # in voxel order
    if not missing.any():
        return 0
    voxel_scores = np.add.reduceat(scores[groups.order], groups.starts, axis=0)      # (V, C)
    voxel_votes = np.add.reduceat(votes[groups.order], groups.starts)                # (V,)
    voxel_of = np.repeat(np.arange(groups.starts.shape[0]), groups.counts)           # voxel order
    points = groups.order[missing]
    scores[points] = voxel_scores[voxel_of[missing]]
    votes[points] = voxel_votes[voxel_of[missing]]
    return int(points.shape[0])


def split_into_crops(coord: np.ndarray, voxel_max: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Cover ``coord`` with overlapping crops of at most ``voxel_max`` points (see module docstring).

    Args:
        coord: ``(N, 3)`` float points (one fragment).
        voxel_max: most points in one crop.
        rng: generator of the points' weights (the uncovered point of least weight seeds the next crop).

    Returns:
        int64 index arrays into ``coord``: ``[arange(N)]`` when ``N <= voxel_max``, else crops of exactly
        ``voxel_max`` points, each the ``voxel_max`` nearest to its seed, whose union is every index.
    """
    n = coord.shape[0]
    if voxel_max < 1:
        raise ValueError(f"expected voxel_max >= 1, got {voxel_max}")
    if n <= voxel_max:
        return [np.arange(n, dtype=np.int64)]
    order = np.argsort(rng.random(n), kind="stable")  # the points by weight: the next seed is the first uncovered
    covered = np.zeros(n, dtype=bool)
    crops, next_seed = [], 0
    while not covered.all():
        while covered[order[next_seed]]:
            next_seed += 1
        seed = order[next_seed]
        crop = crop_nearest(coord, voxel_max, coord[seed])
        if not (crop == seed).any():  # more than voxel_max duplicates of the seed: keep the seed itself
            crop[np.argmax(squared_distance(np.take(coord, crop, axis=0), coord[seed]))] = seed
        covered[crop] = True
        crops.append(np.sort(crop))
    return crops


def room_pieces(sample: Sample, fragments: VoxelFragments, voxel_max: int | None, rng: np.random.Generator,
                max_fragments: int | None = None) -> Iterator[tuple[np.ndarray, Sample]]:
    """Test-time pieces of a room: ``(index into the room (int64), piece shifted to minimum 0)``.

    The first ``min(F, max_fragments)`` fragments of the room, each split into crops of at most
    ``voxel_max`` points (``None``: no split). Lazy: one fragment's crops exist at a time.
    """
    count = len(fragments) if max_fragments is None else min(len(fragments), max_fragments)
    for f in range(count):
        fragment = fragments[f]
        crops = ([np.arange(fragment.shape[0], dtype=np.int64)] if voxel_max is None
                 else split_into_crops(np.take(sample["coord"], fragment, axis=0), voxel_max, rng))
        for crop in crops:
            index = fragment[crop]
            yield index, shift_to_origin(take_points(sample, index))
