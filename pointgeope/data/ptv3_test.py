"""The test of Pointcept's PTv3 S3DIS recipe: 10 augmented views, each cut into grid-sample fragments.

Pointcept's ``SemSegTester`` with the config's ``test_cfg`` (``pointcept/datasets/defaults.py``,
``prepare_test_data``): the room is centred (``CenterShift(apply_z=True)``) and its colour divided by 255;
then for each of the 10 views ::

    scale s in (0.9, 0.95, 1, 1.05, 1.1), no flip       p' = s p
    the same 5 scales, flipped                          p' = (-s x, -s y, s z)   (RandomFlip(p=1): x and y)

the view is grid-sampled in test mode on PTv3's grid (``ptv3_transforms.pointcept_grid``, 0.02 m): with
the points of every voxel in a seeded random order, fragment ``f`` holds point ``f mod count(v)`` of every
voxel ``v`` (:class:`~pointgeope.data.fragments.VoxelFragments`, the same rule), so there are
``max_v count(v)`` fragments per view and every point is in at least one. Each fragment keeps its points'
``grid_coord`` and is centred in x and y (``CenterShift(apply_z=False)``); there is no crop. Every point
sums the softmax of every prediction made for it over the fragments of all views, and takes the argmax
(``pointgeope.engine.evaluate`` with ``eval.protocol: ptv3``, ``eval.vote: softmax``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from torch_geometric.data import Data

from pointgeope.data.fragments import VoxelFragments
from pointgeope.data.ptv3_dataset import ptv3_data
from pointgeope.data.ptv3_transforms import CenterShift, NormalizeColor, pointcept_grid
from pointgeope.data.transforms import Sample, _replace, take_points
from pointgeope.data.voxelize import grid_groups

# (scale, flip) of the 10 test views, in the config's order.
PTV3_TEST_VIEWS: tuple[tuple[float, bool], ...] = tuple(
    (s, flip) for flip in (False, True) for s in (0.9, 0.95, 1.0, 1.05, 1.1))


def ptv3_test_room(sample: Sample) -> Sample:
    """The room as the test's views start from it: centred (x, y on the box centre, floor at 0), colour 0..1."""
    return NormalizeColor()(CenterShift(apply_z=True)(sample))


def ptv3_view(room: Sample, scale: float, flip: bool) -> Sample:
    """One view of a (centred) room: ``coord * scale``, then x and y negated when ``flip``."""
    coord = room["coord"] * np.float32(scale)
    if flip:
        coord[:, :2] = -coord[:, :2]
    return _replace(room, coord=coord.astype(np.float32))


class ViewFragments:
    """The test-mode grid sampling of one view: ``grid`` ``(3, N)`` int64 (PTv3's grid) and ``fragments``
    (``len`` = the largest voxel's count; ``fragments[f]`` one point index per voxel)."""

    def __init__(self, view: Sample, grid_size: float, rng: np.random.Generator):
        self.view = view
        self.grid = pointcept_grid(view["coord"], grid_size)
        n = self.grid.shape[1]
        self.fragments = VoxelFragments(grid_groups(self.grid, rank=rng.permutation(n)))

    def __len__(self) -> int:
        return len(self.fragments)

    def piece(self, f: int, color: bool = True) -> tuple[np.ndarray, Data]:
        """``(room index (V,) int64, Data(pos, x, y, grid_coord))`` of fragment ``f``, centred in x and y."""
        index = self.fragments[f]
        part = take_points(self.view, index)
        part["grid_coord"] = np.ascontiguousarray(self.grid[:, index].T)
        return index, ptv3_data(CenterShift(apply_z=False)(part), color)


def ptv3_room_pieces(sample: Sample, grid_size: float, seed: int, color: bool = True,
                     views: tuple[tuple[float, bool], ...] = PTV3_TEST_VIEWS, max_fragments: int | None = None,
                     on_view: Callable[[ViewFragments], None] | None = None) -> Iterator[tuple[np.ndarray, Data]]:
    """Every piece of every view of ``sample`` (a ``room_sample``, colour 0..255), view after view, lazily:
    ``(room index, Data)``. View ``v`` shuffles its voxels' points with ``default_rng([seed, v])``; each
    view's ``ViewFragments`` goes to ``on_view`` before its pieces; ``max_fragments`` keeps the first of each
    view (None: all, the published test)."""
    room = ptv3_test_room(sample)
    for v, (scale, flip) in enumerate(views):
        frags = ViewFragments(ptv3_view(room, scale, flip), grid_size, np.random.default_rng([seed, v]))
        if on_view is not None:
            on_view(frags)
        for f in range(len(frags) if max_fragments is None else min(len(frags), max_fragments)):
            yield frags.piece(f, color)
