"""A stand-in for ``pointgeope.data.normals`` (prepare's normal estimate) where this checkout lacks it, and the
normals a prepared file lacks, added for the engine tests' PTv3 runs (``data.normal: true``).

Only tests use it, and only while the package's own estimate and prepare's ``/<room>/normal`` are absent:
:func:`install` does nothing once ``pointgeope.data.normals`` imports, :func:`add_missing_normals` nothing to a
file whose rooms have normals. The estimate here is the same definition, written plainly: the eigenvector of the
smallest eigenvalue of the covariance of each point's k nearest neighbours, facing the box centre.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import h5py
import numpy as np
from scipy.spatial import cKDTree


def stand_in_normals(coord: np.ndarray, k: int = 16) -> np.ndarray:
    """``(N, 3)`` float32 unit normals of ``coord`` (module docstring)."""
    coord = np.asarray(coord, dtype=np.float64)
    n = coord.shape[0]
    _, index = cKDTree(coord).query(coord, k=min(k, n))
    index = index.reshape(n, -1)
    nb = coord[index] - coord[index].mean(axis=1, keepdims=True)
    _, vectors = np.linalg.eigh(np.einsum("nki,nkj->nij", nb, nb))
    normal = vectors[:, :, 0]
    normal[~np.isfinite(normal).all(1) | (np.linalg.norm(normal, axis=1) == 0)] = (0.0, 0.0, 1.0)
    centre = (coord.min(0) + coord.max(0)) / 2
    normal[np.einsum("ni,ni->n", normal, centre - coord) < 0] *= -1
    return (normal / np.linalg.norm(normal, axis=1, keepdims=True)).astype(np.float32)


def install() -> None:
    """``pointgeope.data.normals.estimate_normals`` = :func:`stand_in_normals` where the module is missing."""
    try:
        import pointgeope.data.normals  # noqa: F401
    except ImportError:
        module = types.ModuleType("pointgeope.data.normals")
        module.estimate_normals = stand_in_normals
        sys.modules["pointgeope.data.normals"] = module


def has_normals(path: Path) -> bool:
    with h5py.File(path, "r") as f:
        return all("normal" in f[room] for room in f)


def add_missing_normals(path: Path) -> None:
    """Write ``/<room>/normal`` (float32) into every room of ``path`` that lacks one."""
    with h5py.File(path, "r+") as f:
        for room in f:
            if "normal" not in f[room]:
                f[room].create_dataset("normal", data=stand_in_normals(f[room]["coord"][()]))
