"""`pointgeope predict`'s h5 and LAS outputs: the h5 opens in the viewer and holds the normals the network read (or its
input's), a LAS output keeps a stray point, a mesh PLY is read as its vertices."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.constants import PALETTE
from pointgeope.h5 import read_room
from pointgeope.h5_predictions import read_predictions
from tests.engine.predict_helpers import without_run_cap_warning


def test_the_h5_output_opens_in_the_viewer(tiny_run, two_folds, tmp_path):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"], room["color"]])
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "o"),
                "--format", "h5"]) == 0
    assert cli(["viz", str(tmp_path / "o" / "office_1_pred.h5"), "--mode", "pred", "--max-points", "0",
                "--ply", str(tmp_path / "v.ply")]) == 0
    o3d = pytest.importorskip("open3d")
    drawn = o3d.t.io.read_point_cloud(str(tmp_path / "v.ply"))
    pred = read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1")
    np.testing.assert_array_equal(drawn.point.colors.numpy(), np.asarray(PALETTE, np.uint8)[pred])
    np.testing.assert_allclose(drawn.point.positions.numpy(), room["coord"], atol=1e-5)  # in place: + origin


def test_the_h5_output_of_a_network_without_normals_holds_those_of_its_input_alone(tiny_run, two_folds, tmp_path):
    """PTv1 (``[rgb | xyz]``) estimates no normals: a scan's h5 file has none, a prepared room's keeps its own."""
    import h5py

    room = read_room(two_folds / "Area_1.h5", "office_1", fields=("coord", "color", "normal"))
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"], room["color"]])
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), str(two_folds / "Area_1.h5"), "--out",
                str(tmp_path / "o"), "--format", "h5"]) == 0
    with h5py.File(tmp_path / "o" / "office_1_pred.h5", "r") as f:
        assert "normal" not in f["office_1"] and "normal_k" not in f["office_1"].attrs
    kept = read_room(tmp_path / "o" / "Area_1" / "office_1_pred.h5", "office_1", fields=("normal",))["normal"]
    assert kept.tobytes() == room["normal"].tobytes()


def test_las_output_of_a_scan_with_a_stray_point(tiny_run, tmp_path, capsys):
    """--format las of a scan with a point 10,000 km away (left out of the prediction, as designed) ended in
    laspy's OverflowError, exit 1, and the inputs after it were never predicted. Now its LAS file holds
    every point in 1 cm steps (said in one warning); a point at 1e30 m that no LAS step holds refuses that
    scan in one line before any work, and the next input is predicted."""
    laspy = pytest.importorskip("laspy")
    rng = np.random.default_rng(3)
    room = np.c_[rng.random((400, 3)) * [4, 3, 2.5], rng.integers(0, 256, (400, 3))]
    for name, far in (("a_far", 1e7), ("b_space", 1e30), ("c_room", None)):
        np.save(tmp_path / f"{name}.npy", room if far is None else np.insert(room, 7, [far, 0, 1, 9, 9, 9], axis=0))
    assert cli(["predict", str(tiny_run), *(str(tmp_path / f"{n}.npy") for n in ("a_far", "b_space", "c_room")),
                "--out", str(tmp_path / "o"), "--format", "npy,las"]) == 2
    err = without_run_cap_warning(capsys.readouterr().err)
    assert [line.split(":")[0] for line in err] == ["warning", "warning", "pointgeope predict"]
    assert f"{tmp_path / 'a_far.npy'}: its LAS file stores x in steps of 0.01 m, not 0.001 m" in err[0]
    assert err[2] == (f"pointgeope predict: error: {tmp_path / 'b_space.npy'}: --format las cannot hold its points: "
                      "LAS stores coordinates as 32-bit integers, x spans 1e+30 (at most 4.29497e+07 in steps of "
                      "0.01 m); predict it without las (--format npy), or remove the points that far")
    las = laspy.read(tmp_path / "o" / "a_far_pred.las")
    coord = np.load(tmp_path / "a_far.npy")[:, :3]
    np.testing.assert_allclose(np.c_[las.x, las.y, las.z], coord, atol=0.005 + 1e-9)
    np.testing.assert_array_equal(np.asarray(las.classification), np.load(tmp_path / "o" / "a_far_pred.npy"))
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["a_far_pred.json", "a_far_pred.las",
                                                                 "a_far_pred.npy", "c_room_pred.json",
                                                                 "c_room_pred.las", "c_room_pred.npy"]


def test_a_mesh_ply_is_predicted_and_two_sets_of_points_refused(tiny_run, two_folds, tmp_path, capsys):
    """A binary mesh whose faces come before its vertices (refused before: 'list properties ... not
    supported') is predicted as the room it holds; a PLY with two vertex elements (its first read before, the
    rest of the points silently left out) is one line naming the header line, exit 2."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    n = len(room["coord"])
    vertices = np.empty(n, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"),
                                  ("blue", "u1")])
    for j, key in enumerate(("x", "y", "z")):
        vertices[key] = room["coord"][:, j]
    for j, key in enumerate(("red", "green", "blue")):
        vertices[key] = room["color"][:, j]
    props = "".join(f"property float {k}\n" for k in "xyz") + "".join(f"property uchar {k}\n" for k in
                                                                      ("red", "green", "blue"))
    faces = np.uint8([3]).tobytes() + np.int32([0, 1, 2]).tobytes()  # one triangle
    (tmp_path / "office_1.ply").write_bytes(
        ("ply\nformat binary_little_endian 1.0\nelement face 1\nproperty list uchar int vertex_indices\n"
         f"element vertex {n}\n{props}end_header\n").encode() + faces + vertices.tobytes())
    (tmp_path / "two.ply").write_bytes(
        (f"ply\nformat binary_little_endian 1.0\nelement vertex {n - 5}\n{props}element vertex 5\n{props}"
         "end_header\n").encode() + vertices.tobytes())
    code = cli(["predict", str(tiny_run), str(tmp_path / "office_1.ply"), str(tmp_path / "two.ply"),
                "--out", str(tmp_path / "o"), "--format", "npy"])
    err = without_run_cap_warning(capsys.readouterr().err)
    assert code == 2
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "office_1_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))
    assert err == [f"pointgeope predict: error: {tmp_path / 'two.ply'}:10: a second 'element vertex'; expected one "
                   f"vertex element, the points, got two (line 3: {n - 5:,} records, line 10: 5): combine them into "
                   "one, or rename the one that does not hold the points"]
