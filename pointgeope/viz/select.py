"""Which points to draw: hide classes, voxel downsampling and a cap on the number of points.

Each function returns indices (``int64``, ascending) or a mask into the room's arrays, so that
coordinates, colours, labels and predictions are all selected together and stay aligned.
"""
from __future__ import annotations

import numpy as np

from pointgeope.constants import CLASS_INDEX, CLASS_NAMES


def parse_class_names(text: str | None) -> tuple[int, ...]:
    """``"ceiling,beam"`` -> ``(0, 3)``; an unknown name is an error that lists the valid ones."""
    if not text:
        return ()
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CLASS_INDEX]
    if unknown:
        raise ValueError(f"unknown class name(s) {', '.join(map(repr, unknown))}; "
                         f"expected comma-separated names from: {', '.join(CLASS_NAMES)}")
    return tuple(sorted({CLASS_INDEX[name] for name in names}))


def keep_mask(label: np.ndarray, hidden: tuple[int, ...]) -> np.ndarray:
    """``bool (N,)``: True for the points whose ground-truth class is not hidden."""
    return ~np.isin(np.asarray(label), np.asarray(hidden, dtype=np.int64))


def voxel_representatives(coord: np.ndarray, voxel: float) -> np.ndarray:
    """One point per occupied voxel: the point nearest the voxel's centre (ties: the first in file order).

    Voxel of a point: ``v = floor((p - min(coord)) / voxel)`` (integer, per axis); its centre is
    ``min + (v + 0.5) * voxel``. Vectorised: one ``lexsort`` by (voxel key, distance to centre) and the
    first point of each run of equal keys.

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
    origin = coord.min(axis=0)
    grid = np.floor((coord - origin) / voxel).astype(np.int64)       # (N, 3)
    dims = grid.max(axis=0) + 1
    # key = (i * dims_y + j) * dims_z + k; fits int64 for any room (dims < 2**21 per axis at 1 mm in 2 km)
    key = (grid[:, 0] * dims[1] + grid[:, 1]) * dims[2] + grid[:, 2]
    dist = np.square(coord - (origin + (grid + 0.5) * voxel)).sum(axis=1)
    order = np.lexsort((dist, key))  # by key, then distance; stable, so equal distances keep file order
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = key[order[1:]] != key[order[:-1]]
    return np.sort(order[first])


def cap_indices(num_points: int, max_points: int, seed: int = 0) -> np.ndarray | None:
    """A uniform random subset of ``max_points`` of ``num_points`` indices (ascending), or ``None``
    when no cap is needed (``max_points <= 0`` means no cap). Seeded: the same room looks the same."""
    if max_points <= 0 or num_points <= max_points:
        return None
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_points, size=max_points, replace=False))
