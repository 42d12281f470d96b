"""Tests of pointgeope/scans/outputs.py: every output format of one scan, read back by another library
(numpy, Open3D, laspy, h5py and the viewer's loader), row i = input point i."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.constants import CLASS_NAMES, PALETTE
from pointgeope.scans.outputs import FORMATS, output_path, write_outputs
from pointgeope.scans.scan import Scan

PAL = np.asarray(PALETTE, dtype=np.uint8)


def scan(n=500, seed=0, color=True, origin=(651_234.5, 4_812_345.25, 120.0)):
    rng = np.random.default_rng(seed)
    coord = np.round(rng.random((n, 3)) * [12, 8, 3] * 1024) / 1024 + origin  # 1/1024 m: exact in float32 near 0
    return Scan("site/part", "part.las", coord,
                rng.integers(0, 256, (n, 3)).astype(np.uint8) if color else None)


def test_every_format_reads_back(tmp_path):
    o3d = pytest.importorskip("open3d")
    laspy = pytest.importorskip("laspy")
    from pointgeope.viz.scene import load_room

    s = scan()
    pred = (np.arange(len(s)) * 7 % 13).astype(np.uint8)
    probs = np.random.default_rng(1).dirichlet(np.ones(13), len(s))
    paths = write_outputs(tmp_path, s, pred, FORMATS, PAL, list(CLASS_NAMES), probs)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "site/part_pred.npy", "site/part_pred.ply", "site/part_pred.las", "site/part_pred.txt",
        "site/part_pred.h5", "site/part_probs.npy"]
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == sorted(p.name for p in paths)  # no temp
    np.testing.assert_array_equal(np.load(paths[0]), pred)
    ply = o3d.t.io.read_point_cloud(str(paths[1]))
    np.testing.assert_array_equal(ply.point.positions.numpy(), s.coord)       # doubles: exact
    np.testing.assert_array_equal(ply.point.colors.numpy(), PAL[pred])
    np.testing.assert_array_equal(ply.point["pred"].numpy()[:, 0], pred)
    assert "label" not in ply.point  # the ground truth's name in every PLY: a scan has none
    las = laspy.read(paths[2])
    np.testing.assert_allclose(np.stack([las.x, las.y, las.z], 1), s.coord, rtol=0, atol=5.1e-4)  # mm scale
    np.testing.assert_array_equal(np.asarray(las.classification), pred)
    np.testing.assert_array_equal(np.stack([las.red, las.green, las.blue], 1) // 257, s.color)
    txt = np.loadtxt(paths[3])
    assert np.array_equal(txt[:, :3], s.coord)                      # the shortest decimal that reads back
    np.testing.assert_array_equal(txt[:, 3:], np.c_[s.color, pred])
    room = load_room(paths[4], "part")                                          # what `viz --mode pred` draws
    np.testing.assert_array_equal(room.pred, pred)
    np.testing.assert_array_equal(room.color, s.color)
    assert (room.label == 255).all()
    import h5py

    with h5py.File(paths[4], "r") as f:
        origin = f["part"].attrs["origin"]
        assert f.attrs["kind"] == "scan-predictions" and list(f.attrs["class_names"]) == list(CLASS_NAMES)
    np.testing.assert_allclose(room.coord + origin, s.coord, rtol=0, atol=1e-5)
    p = np.load(paths[5])
    assert p.dtype == np.float32 and p.shape == (len(s), 13)
    np.testing.assert_array_equal(p, probs.astype(np.float32))


def test_without_colour_the_text_and_las_carry_the_palette(tmp_path):
    s = scan(color=False, origin=(0.0, 0.0, 0.0))
    pred = (np.arange(len(s)) % 13).astype(np.uint8)
    write_outputs(tmp_path, s, pred, ("txt", "ply"), PAL, list(CLASS_NAMES))
    txt = np.loadtxt(output_path(tmp_path, s.name, "txt"))
    np.testing.assert_array_equal(txt[:, 3:6], PAL[pred])
    header = output_path(tmp_path, s.name, "ply").read_bytes().split(b"end_header")[0].decode()
    assert "property float x" in header  # coordinates exact in float32: written as float


def test_a_prediction_is_pred_and_ground_truth_label_in_every_ply(tmp_path):
    """predict's PLY named its prediction ``label``, viz's PLY its ground truth: one name read two ways. Both
    files of the same points, read back by Open3D: ``pred`` is the prediction in each, ``label`` the truth."""
    o3d = pytest.importorskip("open3d")
    from pointgeope.viz.ply import write_ply

    s = scan(n=200, origin=(0.0, 0.0, 0.0))
    pred = (np.arange(len(s)) * 5 % 13).astype(np.uint8)
    truth = (np.arange(len(s)) % 13).astype(np.uint8)
    (predicted,) = write_outputs(tmp_path, s, pred, ("ply",), PAL, list(CLASS_NAMES))
    shown = write_ply(tmp_path / "view.ply", s.coord, PAL[pred], truth, pred)
    for path, fields in ((predicted, {"pred": pred}), (shown, {"pred": pred, "label": truth})):
        cloud = o3d.t.io.read_point_cloud(str(path))
        read = {k: cloud.point[k].numpy()[:, 0] for k in ("pred", "label") if k in cloud.point}
        assert set(read) == set(fields), path
        for k, want in fields.items():
            np.testing.assert_array_equal(read[k], want)
