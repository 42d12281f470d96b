"""Tests of `pointgeope predict` on a scan's units and extent: the spacing warning and --scale, points left
out as stray (--max-extent) and the labels they take, absurd scales and extents, points beyond float32."""
from __future__ import annotations

import numpy as np

from pointgeope.cli import main as cli
from pointgeope.h5 import read_room
from pointgeope.h5_predictions import read_predictions
from tests.engine.predict_helpers import without_run_cap_warning


def test_spacing_warning_for_millimetres_and_scale(tiny_run, two_folds, tmp_path, capsys):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"].astype(np.float64) * 1000, room["color"]])
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "a")]) == 2
    # a 6 km room in metres, beyond the default --max-extent 50 m
    err = without_run_cap_warning(capsys.readouterr().err)
    assert len(err) == 1 and "the scan is larger than a room in metres" in err[0]
    assert "pass --scale (0.001 for millimetres" in err[0]
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "a"),
                "--max-extent", "1e4"]) == 0  # taken as metres: predicted, with the spacing warning
    assert "pass --scale (0.001 for millimetres" in capsys.readouterr().err
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "b"),
                "--scale", "0.001"]) == 0
    assert not any("warning" in line for line in without_run_cap_warning(capsys.readouterr().err))
    np.testing.assert_array_equal(np.load(tmp_path / "b" / "office_1_pred.npy"),  # mm scaled back: same labels
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))


def test_a_scan_of_one_point_is_predicted_without_a_spacing_warning(tiny_run, tmp_path, capsys):
    """A 1-point scan warned "median point spacing nan ... is nan times the training rooms'"."""
    np.save(tmp_path / "one.npy", np.array([[1.0, 2.0, 0.5, 200, 10, 10]]))
    assert cli(["predict", str(tiny_run), str(tmp_path / "one.npy"), "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().err == "" and np.load(tmp_path / "o" / "one_pred.npy").shape == (1,)


def test_a_float32_scan_far_from_zero_is_warned_once(tiny_run, two_folds, tmp_path, capsys):
    """A room at UTM coordinates in a float32 .npy (as a PLY 'float' keeps it) is on a 0.5 m grid in y: it was
    predicted without a word. Now one warning line; the same room in float64 has none."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    utm = room["coord"].astype(np.float64) + [5.0e5, 4.2e6, 100.0]
    for dtype, name in ((np.float32, "f32"), (np.float64, "f64")):
        np.save(tmp_path / f"{name}.npy", np.c_[utm, room["color"]].astype(dtype))
        assert cli(["predict", str(tiny_run), str(tmp_path / f"{name}.npy"), "--out", str(tmp_path / name)]) == 0
        err = [line for line in without_run_cap_warning(capsys.readouterr().err) if "float32" in line]
        assert err == ([f"warning: {tmp_path / 'f32.npy'}: its coordinates are float32 values, which 4.2e+06 m "
                        "from 0 come in steps of 0.5 m (the model's voxels: 0.1 m): a file that kept them in "
                        "float32 has lost their detail; export them in float64 (a PLY 'double' property, a float64 "
                        ".npy) or minus an offset near the scan"] if dtype == np.float32 else [])


def test_stray_points_are_left_out_and_take_their_nearest_points_label(tiny_run, two_folds, tmp_path, capsys):
    """Points 10 km away, 5 km above a room point and at 1e30 m, inserted among a room's points: the others
    keep exactly the labels evaluate gave the room (the network saw the same input), each stray point takes
    the label and probabilities of its nearest room point (found here by brute force; any room point for
    the one at 1e30, to which all are equally near in float64), and one warning line counts them."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    coord, color = room["coord"].astype(np.float64), room["color"]
    stray = np.array([[1e4, 1e4, 1e4], coord[500] + [0.0, 0.0, 5000.0], [1e30, 0.0, 1.0]])
    at = [100, 2000, 2000]
    scan = np.insert(np.c_[coord, color], at, np.c_[stray, [[255, 0, 0], [0, 255, 0], [0, 0, 255]]], axis=0)
    np.save(tmp_path / "office_1.npy", scan)
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "o"),
                "--probabilities", "--format", "npy"]) == 0
    err = without_run_cap_warning(capsys.readouterr().err)
    pred = np.load(tmp_path / "o" / "office_1_pred.npy")
    evaluated = read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1")
    placed = np.array(at) + np.arange(len(at))  # the rows of the stray points in the scan
    np.testing.assert_array_equal(np.delete(pred, placed), evaluated)
    nearest = [np.argmin(((coord - p) ** 2).sum(1)) for p in stray[:2]]
    np.testing.assert_array_equal(pred[placed[:2]], evaluated[nearest])
    probs = np.load(tmp_path / "o" / "office_1_probs.npy")
    kept = np.delete(probs, placed, axis=0)
    np.testing.assert_array_equal(probs[placed[:2]], kept[nearest])
    assert (kept == probs[placed[2]]).all(1).any() and pred[placed[2]] == probs[placed[2]].argmax()
    assert len(err) == 1 and err[0].startswith("warning: ") and "3 of 3,875" in err[0]
    assert "--max-extent 50 m" in err[0]
    assert "the first is point 100: 10000 10000 10000" in err[0]


def test_by_default_a_point_100_m_or_1_km_away_changes_no_other_label(tiny_run, two_folds, tmp_path, capsys):
    """The issue's case with predict's default --max-extent (50 m, S3DIS-sized rooms): a room scan with
    one point at (1000, 1000, 1000) and one 100 m below a room point along y (it would move the voxel
    grid's origin). Both are left out, and every other point gets exactly the label and probabilities
    of the scan without them; the warning's hint (--max-extent V) does keep them when passed."""
    room = read_room(two_folds / "Area_1.h5", "hallway_1")
    coord, color = room["coord"].astype(np.float64), room["color"]
    for name in ("room", "far"):  # the same file name: the name seeds the fragments' shuffles
        (tmp_path / name).mkdir()
    np.save(tmp_path / "room" / "scan.npy", np.c_[coord, color])
    far = np.array([[1000.0, 1000.0, 1000.0], coord[300] - [0.0, 100.0, 0.0]])
    np.save(tmp_path / "far" / "scan.npy",
            np.insert(np.c_[coord, color], [40, 2000], np.c_[far, [[9, 9, 9]] * 2], axis=0))
    rows = [40, 2001]  # the far points' rows in far/scan.npy
    for name in ("room", "far"):
        assert cli(["predict", str(tiny_run), str(tmp_path / name / "scan.npy"), "--out", str(tmp_path / f"o_{name}"),
                    "--probabilities", "--format", "npy"]) == 0
    err = without_run_cap_warning(capsys.readouterr().err)
    pred, probs = (np.load(tmp_path / "o_far" / f"scan_{kind}.npy") for kind in ("pred", "probs"))
    np.testing.assert_array_equal(np.delete(pred, rows), np.load(tmp_path / "o_room" / "scan_pred.npy"))
    np.testing.assert_array_equal(np.delete(probs, rows, axis=0), np.load(tmp_path / "o_room" / "scan_probs.npy"))
    assert len(err) == 1 and f"2 of {len(coord) + 2:,} points left out" in err[0]
    assert "farther than --max-extent 50 m" in err[0] and "the first is point 40: 1000 1000 1000" in err[0]
    hint = err[0].rsplit("to keep them in the network's input, pass --max-extent ", 1)[1]
    assert 998 < float(hint) <= 1100  # a round value above 1000 m less the room's median z (about 1.6 m)
    assert cli(["predict", str(tiny_run), str(tmp_path / "far" / "scan.npy"), "--out", str(tmp_path / "kept"),
                "--format", "npy", "--max-extent", hint]) == 0
    assert without_run_cap_warning(capsys.readouterr().err) == []


def test_absurd_scales_and_extents_are_one_line_errors(tiny_run, two_folds, tmp_path, capsys):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"].astype(np.float64) + 1, room["color"]])
    for extra, words in ((["--scale", "1e300"], "no valid point: every point is beyond float32"),
                         (["--scale", "inf"], "expected a finite --scale > 0"),
                         (["--max-extent", "0"], "expected --max-extent in (0, 1e+06] metres, got 0"),
                         (["--max-extent", "1e31"], "expected --max-extent in (0, 1e+06] metres, got 1e+31"),
                         (["--max-extent", "1000001"], "expected --max-extent in (0, 1e+06] metres, got 1000001")):
        code = cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "o"), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and words in err[0], (extra, err)


def test_a_point_beyond_float32_gives_no_numpy_warning(tiny_run, tmp_path, capsys):
    """A point at 1e39 (left out of the prediction) leaked numpy's "overflow encountered in cast"."""
    import warnings

    rng = np.random.default_rng(2)  # colours of a real scan: one colour is a note of its own (test_predict.py)
    scan = np.c_[rng.random((300, 3)) * 3, rng.integers(0, 256, (300, 3))]
    np.save(tmp_path / "s.npy", np.insert(scan, 3, [1e39, 0, 0, 1, 1, 1], axis=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli(["predict", str(tiny_run), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o"),
                    "--format", "npy,ply,txt"]) == 0
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert len(without_run_cap_warning(capsys.readouterr().err)) == 1  # the stray point's warning
