"""Binary PLY export of coloured points (``pointgeope.scans.ply.write_vertices``: numpy, atomic).

Layout (little endian, one record per point: 16 bytes, 17 with ``pred``, 12 more with float64 ``x y z``; the
vertex properties in this order)::

    x y z          float32   metres (float64 ``coord + origin`` for a georeferenced room, as predict writes it)
    red green blue uchar     the colour of the chosen mode
    label          uchar     ground truth (0..12, 255 unlabelled)
    pred           uchar     prediction (only when predictions are given)

The names are those of every PLY pointgeope writes: ``label`` is the ground truth, ``pred`` the prediction
(``pointgeope predict``'s PLY has ``pred`` alone). Open3D, CloudCompare and MeshLab read ``x y z red green blue`` and
ignore (or keep) the other properties.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope.scans.ply import write_vertices


def write_ply(path: str | Path, coord: np.ndarray, colors: np.ndarray, label: np.ndarray | None = None,
              pred: np.ndarray | None = None, origin: np.ndarray | None = None) -> Path:
    """Write points ``coord (N, 3)`` with ``colors uint8 (N, 3)`` (and optional ``label``/``pred`` ``(N,)``)
    to ``path`` as binary PLY: written to a temporary file beside it, then renamed into place. With
    ``origin (3,)`` (a georeferenced room's) the points are written in place, ``coord + origin`` as
    float64 (float32 would round them to ~0.5 m at 4,000 km)."""
    coord = np.asarray(coord)
    colors = np.asarray(colors)
    n = coord.shape[0]
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected coord of shape (N, 3), got {coord.shape}")
    if colors.shape != (n, 3) or colors.dtype != np.uint8:
        raise ValueError(f"expected colors uint8 of shape ({n}, 3), got {colors.dtype} {colors.shape}")
    if origin is not None:
        coord = coord.astype(np.float64) + np.asarray(origin, dtype=np.float64)
    props = [(axis, coord[:, j].astype(np.float32 if origin is None else np.float64)) for j, axis in enumerate("xyz")]
    props += [(channel, colors[:, j]) for j, channel in enumerate(("red", "green", "blue"))]
    for name, arr in (("label", label), ("pred", pred)):
        if arr is not None:
            if np.shape(arr) != (n,):
                raise ValueError(f"expected {name} of shape ({n},), got {np.shape(arr)}")
            props.append((name, np.asarray(arr).astype(np.uint8)))
    return write_vertices(path, props, comment="written by pointgeope viz", unnamed=True)  # viz holds no lock
