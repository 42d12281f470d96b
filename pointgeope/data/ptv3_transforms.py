"""The transforms of Pointcept's PTv3 S3DIS recipe that the PTv1 set lacks, and its training pipeline.

Pointcept's ``configs/s3dis/semseg-pt-v3m1-0-base.py`` (Wu et al. 2024; ``pointcept/datasets/transform.py``
defines each transform) trains on this pipeline, in this order, with these parameters
(``ptv3_train_transform()``, ``data.augment: pointcept_ptv3``)::

    CenterShift(apply_z=True)                      x, y centred on the box, floor at z = 0
    RandomDropout(ratio=0.2, p=0.2)                drop 20 % of the points, in 20 % of the samples
    RandomRotate(angle=(-1, 1), axis=z, center=(0, 0, 0), p=0.5)     angles in units of pi
    RandomRotate(angle=(-1/64, 1/64), axis=x, p=0.5)                 about the box centre
    RandomRotate(angle=(-1/64, 1/64), axis=y, p=0.5)
    RandomScale((0.9, 1.1))  RandomFlip(p=0.5)  RandomJitter(sigma=0.005, clip=0.02)
    ChromaticAutoContrast(p=0.2)  ChromaticTranslation(p=0.95, ratio=0.05)  ChromaticJitter(p=0.95, std=0.05)
    GridSample(grid_size=0.02)                     one random point per voxel, with its grid_coord
    SphereCrop(sample_rate=0.6)                    the 60 % of points nearest to a random point
    SphereCrop(point_max=204800)
    CenterShift(apply_z=False)  NormalizeColor()

The rotation, scale, flip, jitter and colour transforms are PTv1's (:mod:`pointgeope.data.transforms`,
same definitions; PTv1's ``RandomRotateZ`` is ``RandomRotate``'s z case). A sample's unit ``"normal"``
(``data.normal``, the recipe's ``[rgb | normal]``) turns with the rotations and flips with the flip, as
Pointcept's transforms do; the others leave it, and every selection of points keeps each point's own. Every
transform here follows that module's contract: ``t(sample, rng)`` draws from the sample's generator only,
returns a new dict and never writes into its input's arrays.

PTv3's grid (Pointcept's ``GridSample``) is anchored at the origin, not at the sample's minimum::

    grid_coord(p) = floor(p / grid_size) - min_i floor(p_i / grid_size)       (float64, per axis)

which after ``CenterShift`` puts voxel boundaries on the planes ``x = k * grid_size`` (PTv1's
``voxelize.grid_coord`` is ``floor((p - min p) / grid_size)``, boundaries offset by the minimum).
"""
from __future__ import annotations

import numpy as np

from pointgeope.data.transforms import (
    ChromaticAutoContrast,
    ChromaticJitter,
    ChromaticTranslation,
    Compose,
    RandomFlip,
    RandomJitter,
    RandomRotate,
    RandomScale,
    Sample,
    Transform,
    _replace,
    box_centre,
    take_points,
)
from pointgeope.data.voxelize import _check_coord, check_cells, check_grid_size, crop_nearest, grid_groups


class CenterShift(Transform):
    """``coord - (c_x, c_y, z_min)`` with ``c`` the box centre (``apply_z=False``: ``coord - (c_x, c_y, 0)``)."""

    _repr_fields = ("apply_z",)

    def __init__(self, apply_z: bool = True):
        self.apply_z = apply_z

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        coord = sample["coord"]
        shift = box_centre(coord)
        shift[2] = coord[:, 2].min() if self.apply_z else 0.0
        return _replace(sample, coord=coord - shift.astype(coord.dtype))     # in coord's precision, as Pointcept


class RandomDropout(Transform):
    """With probability ``p``, keep ``floor(N (1 - ratio))`` points drawn without replacement (every
    array of the sample, in the drawn order)."""

    _repr_fields = ("ratio", "p")

    def __init__(self, ratio: float = 0.2, p: float = 0.5):
        if not 0 <= ratio < 1:
            raise ValueError(f"expected a dropout ratio in [0, 1), got {ratio}")
        self.ratio, self.p = ratio, p

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        n = sample["coord"].shape[0]
        return take_points(sample, rng.choice(n, int(n * (1 - self.ratio)), replace=False))


class NormalizeColor(Transform):
    """``color / 255`` (colours 0..255 to 0..1)."""

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        return _replace(sample, color=(sample["color"] / np.float32(255)).astype(np.float32))


class SphereCrop(Transform):
    """Keep the ``m`` points nearest to a centre when there are more than ``m``: ``m = point_max``, or
    ``floor(sample_rate * N)`` when ``sample_rate`` is given; the centre is a uniformly random point
    (``mode="random"``) or point ``N // 2`` (``mode="center"``)."""

    _repr_fields = ("point_max", "sample_rate", "mode")

    def __init__(self, point_max: int | None = 80_000, sample_rate: float | None = None, mode: str = "random"):
        if mode not in ("random", "center"):
            raise ValueError(f"expected SphereCrop mode 'random' or 'center', got {mode!r}")
        if sample_rate is None and (point_max is None or point_max < 1):
            raise ValueError(f"expected point_max >= 1 or a sample_rate, got point_max={point_max}")
        if sample_rate is not None and not 0 < sample_rate <= 1:
            raise ValueError(f"expected a sample_rate in (0, 1], got {sample_rate}")
        self.point_max, self.sample_rate, self.mode = point_max, sample_rate, mode

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        coord = sample["coord"]
        n = coord.shape[0]
        m = int(self.sample_rate * n) if self.sample_rate is not None else self.point_max
        if n <= m:
            return dict(sample)
        centre = coord[rng.integers(n) if self.mode == "random" else n // 2]
        return take_points(sample, np.sort(crop_nearest(coord, max(m, 1), centre)))


def pointcept_grid(coord: np.ndarray, grid_size: float) -> np.ndarray:
    """PTv3's grid coordinates ``floor(p / grid_size) - min_i floor(p_i / grid_size)`` (module docstring).

    Args:
        coord: ``(N, 3)`` float points, N >= 1.
        grid_size: voxel edge, finite and > 0.

    Returns:
        ``(3, N)`` int64, all >= 0, each axis's minimum 0 (``voxelize.check_cells``: cells past int64 are a
        ``ValueError``).
    """
    coord, grid_size = _check_coord(coord), check_grid_size(grid_size)
    if coord.shape[0] == 0:
        raise ValueError("expected at least one point, got an empty coord array")
    grid = np.empty((3, coord.shape[0]), dtype=np.int64)
    for axis in range(3):                          # column by column: contiguous rows, no (N, 3) float64 copy
        col = coord[:, axis].astype(np.float64)
        with np.errstate(over="ignore"):             # an infinite quotient: check_cells refuses it
            col /= grid_size
        np.floor(col, out=col)
        low = check_cells(col[None], grid_size)[0]   # the float minimum, exact below 2^63: no int64 pass for it
        grid[axis] = col
        grid[axis] -= np.int64(low)
    return grid


class GridSample(Transform):
    """Training-mode grid sampling on PTv3's grid: one uniformly random point of every occupied voxel
    (rows of every array, in voxel-key order), and ``grid_coord`` ``(V, 3)`` int64 of the kept points."""

    _repr_fields = ("grid_size",)

    def __init__(self, grid_size: float = 0.02):
        self.grid_size = check_grid_size(grid_size)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        grid = pointcept_grid(sample["coord"], self.grid_size)
        groups = grid_groups(grid)
        keep = groups.order[groups.starts + rng.integers(0, groups.counts)]
        out = take_points(sample, keep)
        out["grid_coord"] = np.ascontiguousarray(grid[:, keep].T)
        return out


def ptv3_train_transform(grid_size: float = 0.02, crop_rate: float | None = 0.6,
                         point_max: int | None = 204_800) -> Compose:
    """Pointcept's PTv3 S3DIS training pipeline (module docstring), from the room to the block; the
    block's colour is 0..1 and it carries ``grid_coord``. ``crop_rate`` or ``point_max`` None leaves that
    crop out."""
    crops = ([SphereCrop(sample_rate=crop_rate)] if crop_rate is not None else []) + \
            ([SphereCrop(point_max=point_max)] if point_max is not None else [])
    return Compose([
        CenterShift(apply_z=True), RandomDropout(ratio=0.2, p=0.2),
        RandomRotate((-1.0, 1.0), axis="z", center=(0.0, 0.0, 0.0), p=0.5),
        RandomRotate((-1 / 64, 1 / 64), axis="x", p=0.5), RandomRotate((-1 / 64, 1 / 64), axis="y", p=0.5),
        RandomScale((0.9, 1.1)), RandomFlip(p=0.5), RandomJitter(sigma=0.005, clip=0.02),
        ChromaticAutoContrast(p=0.2, blend_factor=None), ChromaticTranslation(p=0.95, ratio=0.05),
        ChromaticJitter(p=0.95, std=0.05),
        GridSample(grid_size), *crops, CenterShift(apply_z=False), NormalizeColor(),
    ])
