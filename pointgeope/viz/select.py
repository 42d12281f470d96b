"""Which points to draw: hide classes, voxel downsampling and a cap on the number of points.

Each function returns indices (``int64``, ascending) or a mask into the room's arrays, so that
coordinates, colours, labels and predictions are all selected together and stay aligned.
"""
from __future__ import annotations

import numpy as np

from pointgeope.constants import CLASS_NAMES
from pointgeope.data.voxelize import grid_coord, voxel_groups
from pointgeope.plural import agreeing
from pointgeope.viz import VizError

# The range of --voxel. A micrometre: an area file's float32 coordinates resolve no finer in a room, and a voxel far
# finer (1e-300 m) makes voxel indices beyond int64, which numpy casts to one value: a room drawn as 1 or 2 points.
# A kilometre holds a whole building in one voxel; far larger ones (1e308 m) overflow the distances to its centre.
MIN_VOXEL, MAX_VOXEL = 1e-6, 1000.0


def parse_class_names(text: str | None, names: tuple[str, ...] = CLASS_NAMES) -> tuple[int, ...]:
    """``"ceiling,beam"`` -> ``(0, 3)``: the labels of the comma-separated names among ``names`` (the view's
    classes in label order: S3DIS's 13, or a network's own with ``class_13``, ...); an unknown name is an
    error that lists the valid ones."""
    if not text:
        return ()
    index = {name: label for label, name in enumerate(names)}
    asked = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in asked if name not in index]
    if unknown:
        raise VizError(f"unknown class {agreeing(len(unknown), 'name', 'names')} {', '.join(map(repr, unknown))}; "
                       f"expected comma-separated names from: {', '.join(names)}")
    return tuple(sorted({index[name] for name in asked}))


def keep_mask(label: np.ndarray, hidden: tuple[int, ...]) -> np.ndarray:
    """``bool (N,)``: True for the points whose ground-truth class is not hidden."""
    return ~np.isin(np.asarray(label), np.asarray(hidden, dtype=np.int64))


def voxel_representatives(coord: np.ndarray, voxel: float) -> np.ndarray:
    """One point per occupied voxel: the point nearest the voxel's centre (ties: the first in file order).

    Voxel of a point: ``v = floor((p - min(coord)) / voxel)`` (integer, per axis); its centre is
    ``min + (v + 0.5) * voxel``. The grouping is the training pipeline's
    (``pointgeope.data.voxelize.voxel_groups``) with points ranked inside each voxel by their distance
    to its centre, so the first of each voxel is the representative.

    Returns:
        ``int64 (M,)`` ascending indices into ``coord``, ``M`` = number of occupied voxels.
    """
    coord = np.asarray(coord, dtype=np.float64)
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected coord of shape (N, 3), got {coord.shape}")
    if not voxel > 0:
        raise ValueError(f"expected a voxel size > 0 metres, got {voxel}")
    if coord.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    grid = grid_coord(coord, voxel).T                                 # (N, 3)
    dist = np.square(coord - (coord.min(axis=0) + (grid + 0.5) * voxel)).sum(axis=1)
    rank = np.empty(coord.shape[0], dtype=np.int64)
    rank[np.argsort(dist, kind="stable")] = np.arange(coord.shape[0])  # equal distances keep file order
    groups = voxel_groups(coord, voxel, rank=rank)
    return np.sort(groups.order[groups.starts])


def cap_indices(num_points: int, max_points: int, seed: int = 0) -> np.ndarray | None:
    """A uniform random subset of ``max_points`` of ``num_points`` indices (ascending), or ``None``
    when no cap is needed (``max_points <= 0`` means no cap). Seeded: the same room looks the same."""
    if max_points <= 0 or num_points <= max_points:
        return None
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_points, size=max_points, replace=False))
