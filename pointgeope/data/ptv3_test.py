"""The test of Pointcept's PTv3 S3DIS recipe: 10 augmented views, each cut into grid-sample fragments.

Pointcept's ``SemSegTester`` with the config's ``test_cfg`` (``pointcept/datasets/defaults.py``,
``prepare_test_data``): the room is centred (``CenterShift(apply_z=True)``) and its colour divided by 255;
then for each of the 10 views ::

    scale s in (0.9, 0.95, 1, 1.05, 1.1), no flip       p' = s p                 n' = n
    the same 5 scales, flipped                          p' = (-s x, -s y, s z)   n' = (-n_x, -n_y, n_z)
                                                        (RandomFlip(p=1): x and y, of the normals too)

the view is grid-sampled in test mode on PTv3's grid (``ptv3_transforms.pointcept_grid``, 0.02 m): with
the points of every voxel in a seeded random order, fragment ``f`` holds point ``f mod count(v)`` of every
voxel ``v`` (:class:`~pointgeope.data.fragments.VoxelFragments`, the same rule), so there are
``max_v count(v)`` fragments per view and every point is in at least one. Each fragment keeps its points'
``grid_coord`` and is centred in x and y (``CenterShift(apply_z=False)``); there is no crop. Every point
sums the softmax of every prediction made for it over the fragments of all views, and takes the argmax
(``pointgeope.engine.evaluate`` with ``eval.protocol: ptv3``, ``eval.vote: softmax``). With ``normal``
(``data.normal``) the room sample carries its unit ``"normal"`` and each piece's ``x`` is ``[rgb | normal]``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from pointgeope.data.fragments import VoxelFragments
from pointgeope.data.points import Points
from pointgeope.data.ptv3_dataset import ptv3_data
from pointgeope.data.ptv3_transforms import CenterShift, NormalizeColor, pointcept_grid
from pointgeope.data.transforms import Sample, _replace, take_points
from pointgeope.data.voxelize import grid_groups
from pointgeope.h5 import NORMAL

# (scale, flip) of the 10 test views, in the config's order.
PTV3_TEST_VIEWS: tuple[tuple[float, bool], ...] = tuple(
    (s, flip) for flip in (False, True) for s in (0.9, 0.95, 1.0, 1.05, 1.1))


def ptv3_test_room(sample: Sample) -> Sample:
    """The room as the test's views start from it: centred (x, y on the box centre, floor at 0), colour 0..1."""
    return NormalizeColor()(CenterShift(apply_z=True)(sample))


def ptv3_view(room: Sample, scale: float, flip: bool) -> Sample:
    """One view of a (centred) room: ``coord * scale``, then x and y negated when ``flip``, of its
    ``normal`` too when it has one (a scale leaves a direction as it is)."""
    coord = room["coord"] * np.float32(scale)
    if flip:
        coord[:, :2] = -coord[:, :2]
    view = _replace(room, coord=coord.astype(np.float32))
    if flip and NORMAL in room:
        view[NORMAL] = room[NORMAL] * np.array([-1, -1, 1], dtype=room[NORMAL].dtype)
    return view


def feature_normals(used: bool, normal: np.ndarray | None, n: int) -> np.ndarray | None:
    """``normal`` when the network reads normals (``used``, ``data.normal``), checked to be ``(n, 3)``, else None."""
    if not used:
        return None
    if normal is None or np.shape(normal) != (n, 3):
        raise ValueError(f"expected normals of shape ({n}, 3) for a data.normal network, got "
                         f"{None if normal is None else np.shape(normal)}")
    return normal


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

    def piece(self, f: int, color: bool = True, normal: bool = False) -> tuple[np.ndarray, Points]:
        """``(room index (V,) int64, Points(pos, x, y, grid_coord))`` of fragment ``f``, centred in x and y
        (``x`` as :func:`~pointgeope.data.ptv3_dataset.ptv3_data` makes it with ``color`` and ``normal``)."""
        index = self.fragments[f]
        part = take_points(self.view, index)
        part["grid_coord"] = np.ascontiguousarray(self.grid[:, index].T)
        return index, ptv3_data(CenterShift(apply_z=False)(part), color, normal=normal)


def ptv3_room_pieces(sample: Sample, grid_size: float, seed: int, color: bool = True,
                     views: tuple[tuple[float, bool], ...] = PTV3_TEST_VIEWS, max_fragments: int | None = None,
                     on_view: Callable[[ViewFragments], None] | None = None,
                     normal: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, Points]]:
    """Every piece of every view of ``sample`` (a ``room_sample``, colour 0..255), view after view, lazily:
    ``(room index, Points)``. View ``v`` shuffles its voxels' points with ``default_rng([seed, v])``; each
    view's ``ViewFragments`` goes to ``on_view`` before its pieces; ``max_fragments`` keeps the first of each
    view (None: all, the published test). ``normal``: the room's ``(N, 3)`` unit normals, for the features
    ``[rgb | normal]`` (None: ``[rgb | xyz]``)."""
    if normal is not None:
        sample = {**sample, NORMAL: np.asarray(normal, dtype=np.float32)}
    room = ptv3_test_room(sample)
    for v, (scale, flip) in enumerate(views):
        frags = ViewFragments(ptv3_view(room, scale, flip), grid_size, np.random.default_rng([seed, v]))
        if on_view is not None:
            on_view(frags)
        for f in range(len(frags) if max_fragments is None else min(len(frags), max_fragments)):
            yield frags.piece(f, color, normal is not None)
