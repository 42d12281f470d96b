"""Tests of pointgeope/viz/select.py: hidden classes, voxel representatives (against a brute-force loop), cap."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.constants import CLASS_NAMES
from pointgeope.viz.select import cap_indices, keep_mask, parse_class_names, voxel_representatives


def test_parse_class_names():
    assert parse_class_names("ceiling") == (0,)
    assert parse_class_names(" beam, ceiling ,beam,") == (0, 3)
    assert parse_class_names("") == ()
    assert parse_class_names(None) == ()
    with pytest.raises(ValueError) as err:
        parse_class_names("ceiling,roof,Wall")
    message = str(err.value)
    assert "'roof'" in message and "'Wall'" in message and "'ceiling'" not in message
    assert all(name in message for name in CLASS_NAMES)


def test_keep_mask():
    label = np.array([0, 1, 2, 0, 3, 12], dtype=np.uint8)
    np.testing.assert_array_equal(keep_mask(label, (0, 3)), [False, True, True, False, False, True])
    assert keep_mask(label, ()).all()


def _brute_force_representatives(coord: np.ndarray, voxel: float) -> np.ndarray:
    origin = coord.min(axis=0)
    best: dict[tuple, tuple[float, int]] = {}
    for i, p in enumerate(coord):
        v = tuple(int(c) for c in np.floor((p - origin) / voxel))
        d = float(np.square(p - (origin + (np.array(v) + 0.5) * voxel)).sum())
        if v not in best or d < best[v][0]:
            best[v] = (d, i)
    return np.sort([i for _, i in best.values()])


def test_voxel_representatives_match_brute_force():
    rng = np.random.default_rng(1)
    coord = rng.random((2000, 3)) * np.array([1.0, 0.6, 0.3]) + np.array([5.0, -2.0, 0.1])
    coord = np.concatenate([coord, coord[:50]])  # duplicates: ties go to the first in file order
    idx = voxel_representatives(coord, 0.1)
    np.testing.assert_array_equal(idx, _brute_force_representatives(coord, 0.1))
    # one point per occupied voxel
    cells = np.floor((coord - coord.min(axis=0)) / 0.1).astype(int)
    assert len(idx) == len(np.unique(cells, axis=0)) == len(np.unique(cells[idx], axis=0))


def test_voxel_representatives_bad_input():
    assert voxel_representatives(np.zeros((0, 3)), 0.1).shape == (0,)
    with pytest.raises(ValueError, match="voxel size > 0"):
        voxel_representatives(np.zeros((4, 3)), 0.0)
    with pytest.raises(ValueError, match=r"coord of shape \(N, 3\)"):
        voxel_representatives(np.zeros((4, 2)), 0.1)


def test_cap_indices():
    assert cap_indices(100, 0) is None
    assert cap_indices(100, 100) is None
    idx = cap_indices(1000, 300, seed=3)
    assert idx.shape == (300,) and len(np.unique(idx)) == 300
    assert (np.diff(idx) > 0).all() and idx.min() >= 0 and idx.max() < 1000
    np.testing.assert_array_equal(idx, cap_indices(1000, 300, seed=3))
