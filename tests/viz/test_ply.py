"""Tests of pointgeope/viz/ply.py: the binary layout, read back with numpy (and with Open3D in test_render)."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.viz.ply import write_ply


def _read_ply(path):
    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = raw[:end].decode("ascii").splitlines()
    types = {"float": "<f4", "double": "<f8", "uchar": "u1"}
    fields = [(line.split()[2], types[line.split()[1]]) for line in header if line.startswith("property")]
    count = int(next(line for line in header if line.startswith("element vertex")).split()[2])
    return header, np.frombuffer(raw[end:], dtype=np.dtype(fields), count=count), len(raw) - end


def test_write_ply_layout(tmp_path):
    rng = np.random.default_rng(0)
    coord = rng.normal(size=(10, 3)).astype(np.float32)
    colors = rng.integers(0, 256, (10, 3), dtype=np.uint8)
    label = np.arange(10, dtype=np.uint8)
    path = write_ply(tmp_path / "a.ply", coord, colors, label, pred=label[::-1].copy())
    header, rec, body = _read_ply(path)
    assert header[:2] == ["ply", "format binary_little_endian 1.0"]
    assert [line.split()[2] for line in header if line.startswith("property")] == \
        ["x", "y", "z", "red", "green", "blue", "label", "pred"]
    assert body == 10 * 17
    np.testing.assert_array_equal(np.stack([rec["x"], rec["y"], rec["z"]], 1), coord)
    np.testing.assert_array_equal(np.stack([rec["red"], rec["green"], rec["blue"]], 1), colors)
    np.testing.assert_array_equal(rec["label"], label)
    np.testing.assert_array_equal(rec["pred"], label[::-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ply"]  # no temporary file left


def test_write_ply_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"colors uint8 of shape \(2, 3\)"):
        write_ply(tmp_path / "b.ply", np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"label of shape \(2,\)"):
        write_ply(tmp_path / "b.ply", np.zeros((2, 3)), np.zeros((2, 3), np.uint8), label=np.zeros(3))
    assert not (tmp_path / "b.ply").exists()


def test_ply_round_trips_through_open3d(tmp_path):
    o3d = pytest.importorskip("open3d", reason="Open3D is not installed")
    from pointgeope.constants import PALETTE
    from pointgeope.viz.colors import label_colors

    rng = np.random.default_rng(2)
    coord = (rng.random((500, 3)) * 5).astype(np.float32)
    label = rng.integers(0, 13, 500).astype(np.uint8)
    path = write_ply(tmp_path / "c.ply", coord, label_colors(label), label, pred=label)
    pcd = o3d.io.read_point_cloud(str(path))
    np.testing.assert_array_equal(np.asarray(pcd.points).astype(np.float32), coord)
    got = np.rint(np.asarray(pcd.colors) * 255).astype(np.uint8)
    np.testing.assert_array_equal(got, np.asarray(PALETTE, np.uint8)[label])
