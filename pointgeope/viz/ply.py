"""Binary PLY export of coloured points, written with numpy (no Open3D needed), atomically.

Layout (little endian, one record of 17 bytes per point, the vertex properties in this order)::

    x y z          float32   metres
    red green blue uchar     the colour of the chosen mode
    label          uchar     ground truth (0..12, 255 unlabelled)
    pred           uchar     prediction (only when predictions are given)

Open3D, CloudCompare and MeshLab read ``x y z red green blue`` and ignore (or keep) the other properties.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope.atomic import atomic_open


def write_ply(path: str | Path, coord: np.ndarray, colors: np.ndarray, label: np.ndarray | None = None,
              pred: np.ndarray | None = None) -> Path:
    """Write points ``coord (N, 3)`` with ``colors uint8 (N, 3)`` (and optional ``label``/``pred`` ``(N,)``)
    to ``path`` as binary PLY: written to a temporary file beside it, then renamed into place."""
    path = Path(path)
    coord = np.asarray(coord)
    colors = np.asarray(colors)
    n = coord.shape[0]
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected coord of shape (N, 3), got {coord.shape}")
    if colors.shape != (n, 3) or colors.dtype != np.uint8:
        raise ValueError(f"expected colors uint8 of shape ({n}, 3), got {colors.dtype} {colors.shape}")
    fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    extra = {name: arr for name, arr in (("label", label), ("pred", pred)) if arr is not None}
    for name, arr in extra.items():
        if np.shape(arr) != (n,):
            raise ValueError(f"expected {name} of shape ({n},), got {np.shape(arr)}")
        fields.append((name, "u1"))
    records = np.empty(n, dtype=np.dtype(fields))
    records["x"], records["y"], records["z"] = coord[:, 0], coord[:, 1], coord[:, 2]
    records["red"], records["green"], records["blue"] = colors[:, 0], colors[:, 1], colors[:, 2]
    for name, arr in extra.items():
        records[name] = arr
    ply_types = {"<f4": "float", "u1": "uchar"}
    header = ["ply", "format binary_little_endian 1.0", "comment written by pointgeope viz",
              f"element vertex {n}"] + [f"property {ply_types[t]} {name}" for name, t in fields] + ["end_header"]
    with atomic_open(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode("ascii"))
        f.write(records.tobytes())
    return path
