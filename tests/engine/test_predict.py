"""Tests of pointgeope/engine/predict.py and `pointgeope predict`: labels equal to evaluate's for the same
room and seed, input order kept through every input format, bad inputs reported while the others are
predicted, the colour and unit checks, probabilities, geometry-only models and a 2M-point scan."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.cli import main as cli
from pointgeope.h5 import list_rooms, read_predictions, read_room
from pointgeope.engine.checkpoint import prediction_metadata
from pointgeope.engine.distributed import DeviceError
from pointgeope.engine.config import config_to_dict, load_config
from pointgeope.constants import PALETTE
from pointgeope.engine.predict import (Predictor, load_predictor, predict_scan,
                                       vote_probabilities)
from pointgeope.scans.scan import Scan
from pointgeope.scans.sources import ScanRef, read_scan
from tests.engine.conftest import train_fold
from tests.engine.test_user_errors import one_line
from tests.engine.test_evaluate import ColourClassifier, expected_class


def colour_predictor(voxel_max=300, batch_points=2000) -> Predictor:
    """A Predictor whose "network" labels each point by its own red channel (test_evaluate's
    ColourClassifier): a label that lands on another point than its own shows as a wrong class."""
    cfg = load_config(None, ["data.grid_size=0.1", f"data.voxel_max={voxel_max}",
                             f"eval.batch_points={batch_points}", "train.amp=none"])
    info = prediction_metadata(config_to_dict(cfg))
    return Predictor(ColourClassifier(), cfg, info, torch.device("cpu"), "colour.pt")


# --- agreement with evaluate ---------------------------------------------------------------------------------

def test_labels_equal_evaluate_for_prepared_and_raw_rooms(tiny_run, two_folds, tiny_root, tmp_path):
    evaluated = tiny_run / "predictions" / "Area_1.h5"
    raw = tiny_root.parent / "raw" / "Area_1"
    rooms = list(list_rooms(two_folds / "Area_1.h5"))
    assert cli(["predict", str(tiny_run), str(two_folds / "Area_1.h5"), *map(str, (raw / r for r in rooms)),
                "--out", str(tmp_path)]) == 0
    for room in rooms:
        expected = read_predictions(evaluated, room)
        np.testing.assert_array_equal(np.load(tmp_path / "Area_1" / f"{room}_pred.npy"), expected)
        np.testing.assert_array_equal(np.load(tmp_path / f"{room}_pred.npy"), expected)  # raw room folder
        assert expected.shape == (list_rooms(two_folds / "Area_1.h5")[room],)      # every point of the room


# --- input order through every format ------------------------------------------------------------------------

def write_scan(path, coord, color):
    """``coord``/``color`` written by another library than pointgeope: Open3D, laspy or numpy."""
    if path.suffix == ".ply":
        o3d = pytest.importorskip("open3d")
        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(coord))
        pcd.colors = o3d.utility.Vector3dVector(color / 255.0)
        o3d.io.write_point_cloud(str(path), pcd)
    elif path.suffix == ".las":
        laspy = pytest.importorskip("laspy")
        las = laspy.LasData(laspy.LasHeader(point_format=2, version="1.2"))
        las.header.scales, las.header.offsets = np.full(3, 0.001), np.zeros(3)
        las.x, las.y, las.z = coord.T
        las.red, las.green, las.blue = (color.astype(np.uint16) * 257).T
        las.write(path)
    elif path.suffix == ".npy":
        np.save(path, np.c_[coord, color])
    else:
        np.savetxt(path, np.c_[coord, color], fmt="%.3f,%.3f,%.3f,%d,%d,%d" if path.suffix == ".csv"
                   else "%.3f %.3f %.3f %d %d %d")


@pytest.mark.parametrize("suffix", [".ply", ".las", ".txt", ".csv", ".npy"])
def test_every_input_format_keeps_the_input_order(tmp_path, suffix):
    rng = np.random.default_rng(7)
    n = 2500
    coord = np.round(rng.random((n, 3)) * [4.0, 3.0, 2.5], 3)
    coord[: n // 50] = coord[0]  # a clump of 50: 50 fragments, points far from their file position
    color = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    write_scan(tmp_path / f"scan{suffix}", coord, color)
    scan = read_scan(ScanRef(tmp_path / f"scan{suffix}", suffix.strip(".").replace("txt", "text")
                             .replace("csv", "text"), "scan"))
    pred, scores, votes = predict_scan(colour_predictor(), scan)
    assert (votes >= 1).all() and (votes > 1).any()   # crops overlap: several predictions were voted
    np.testing.assert_array_equal(pred, expected_class(color))


# --- probabilities -------------------------------------------------------------------------------------------

def test_vote_probabilities_of_summed_softmax_and_of_summed_logits():
    rng = np.random.default_rng(0)
    votes = rng.integers(1, 4, 50)
    logits = [rng.normal(size=(50, 13)) * 3 for _ in range(3)]
    summed = sum(z * (votes > k)[:, None] for k, z in enumerate(logits))   # point i voted votes[i] times
    mean_logit = summed / votes[:, None]
    expected = torch.softmax(torch.from_numpy(mean_logit), 1).numpy()
    probs = vote_probabilities(summed.astype(np.float32), votes, "logits", chunk=7)
    assert probs.dtype == np.float16 and probs.shape == (50, 13)
    np.testing.assert_allclose(probs, expected, atol=1e-3)
    softmaxes = [torch.softmax(torch.from_numpy(z), 1).numpy() for z in logits]
    summed_p = sum(p * (votes > k)[:, None] for k, p in enumerate(softmaxes))
    np.testing.assert_allclose(vote_probabilities(summed_p, votes, "softmax", chunk=16),
                               summed_p / votes[:, None], atol=1e-3)   # the mean probability
    np.testing.assert_array_equal(vote_probabilities(summed, votes, "logits").argmax(1), summed.argmax(1))


def test_probabilities_output_matches_the_labels(tiny_run, two_folds, tmp_path):
    area = two_folds / "Area_1.h5"
    assert cli(["predict", str(tiny_run / "last.pt"), str(area), "--out", str(tmp_path), "--probabilities",
                "--format", "npy"]) == 0
    for room in list_rooms(area):
        p = np.load(tmp_path / "Area_1" / f"{room}_probs.npy")
        assert p.dtype == np.float16 and p.shape[1] == 13
        np.testing.assert_allclose(p.astype(np.float32).sum(1), 1.0, atol=1e-2)
        pred = np.load(tmp_path / "Area_1" / f"{room}_pred.npy")
        np.testing.assert_array_equal(p[np.arange(len(pred)), pred], p.max(1))


# --- bad inputs, colour, units, checkpoints ---------------------------------------------------------------

def test_bad_inputs_fail_alone_and_the_exit_code_says_so(tiny_run, two_folds, tmp_path, capsys):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    good = tmp_path / "office_1.npy"
    np.save(good, np.c_[room["coord"], room["color"]])
    nan = room["coord"].astype(np.float64)
    nan[10, 2] = np.nan
    np.save(tmp_path / "nan.npy", np.c_[nan, room["color"]])
    (tmp_path / "empty.txt").write_text("")
    write_scan(tmp_path / "full.ply", room["coord"].astype(np.float64), room["color"])
    (tmp_path / "cut.ply").write_bytes((tmp_path / "full.ply").read_bytes()[:-500])
    (tmp_path / "scan.e57").write_text("?")
    np.save(tmp_path / "grey.npy", room["coord"])   # no colour for a colour model
    inputs = ["nan.npy", "empty.txt", "cut.ply", "scan.e57", "office_1.npy", "grey.npy"]
    code = cli(["predict", str(tiny_run), *(str(tmp_path / i) for i in inputs), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["office_1_pred.npy", "office_1_pred.ply"]
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "office_1_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))
    assert len(err) == 5 and all(line.startswith("pointgeope predict: error: ") for line in err)
    for name, words in (("nan.npy", "NaN or infinite coordinates (the first is point 10"),
                        ("empty.txt", "empty file"), ("cut.ply", "truncated PLY"),
                        ("scan.e57", "unknown extension '.e57'"),
                        ("grey.npy", "has no colour, but")):
        assert any(f"{tmp_path / name}: " in line and words in line for line in err), name
    assert any("data.color=false" in line for line in err)


def test_a_bad_file_in_a_folder_stops_nothing(tiny_run, two_folds, tmp_path, capsys):
    """A 0-byte .npy (np.load raises EOFError) and a truncated one before and after a good scan in one
    folder: one line each, the good scan predicted, exit 2 and the count in the last line."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    folder = tmp_path / "scans"
    folder.mkdir()
    (folder / "a_empty.npy").write_bytes(b"")
    np.save(folder / "b_good.npy", np.c_[room["coord"], room["color"]])
    (folder / "c_cut.npy").write_bytes((folder / "b_good.npy").read_bytes()[:1000])
    code = cli(["predict", str(tiny_run), str(folder), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 2
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "b_good_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))
    err = err.splitlines()
    assert len(err) == 2 and all(line.startswith("pointgeope predict: error: ") for line in err)
    assert f"{folder / 'a_empty.npy'}: not a readable .npy array (empty file)" in err[0]
    assert f"{folder / 'c_cut.npy'}: not a readable .npy array" in err[1]
    assert out.splitlines()[-1] == f"predicted 1 of 3 input(s) into {tmp_path / 'o'}; 2 failed (see the errors above)"


def test_spacing_warning_for_millimetres_and_scale(tiny_run, two_folds, tmp_path, capsys):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"].astype(np.float64) * 1000, room["color"]])
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.splitlines()  # a 6 km room in metres, beyond the default --max-extent 50 m
    assert len(err) == 1 and "the scan is larger than a room in metres" in err[0]
    assert "pass --scale (0.001 for millimetres" in err[0]
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "a"),
                "--max-extent", "1e4"]) == 0  # taken as metres: predicted, with the spacing warning
    assert "pass --scale (0.001 for millimetres" in capsys.readouterr().err
    assert cli(["predict", str(tiny_run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "b"),
                "--scale", "0.001"]) == 0
    assert "warning" not in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp_path / "b" / "office_1_pred.npy"),  # mm scaled back: same labels
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))


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
    err = capsys.readouterr().err.splitlines()
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
    np.save(tmp_path / "far" / "scan.npy", np.insert(np.c_[coord, color], [40, 2000], np.c_[far, [[9, 9, 9]] * 2], axis=0))
    rows = [40, 2001]  # the far points' rows in far/scan.npy
    for name in ("room", "far"):
        assert cli(["predict", str(tiny_run), str(tmp_path / name / "scan.npy"), "--out", str(tmp_path / f"o_{name}"),
                    "--probabilities", "--format", "npy"]) == 0
    err = capsys.readouterr().err.splitlines()
    pred, probs = (np.load(tmp_path / "o_far" / f"scan_{kind}.npy") for kind in ("pred", "probs"))
    np.testing.assert_array_equal(np.delete(pred, rows), np.load(tmp_path / "o_room" / "scan_pred.npy"))
    np.testing.assert_array_equal(np.delete(probs, rows, axis=0), np.load(tmp_path / "o_room" / "scan_probs.npy"))
    assert len(err) == 1 and f"2 of {len(coord) + 2:,} point(s) left out" in err[0]
    assert "farther than --max-extent 50 m" in err[0] and "the first is point 40: 1000 1000 1000" in err[0]
    hint = err[0].rsplit("to keep them in the network's input, pass --max-extent ", 1)[1]
    assert 998 < float(hint) <= 1100  # a round value above 1000 m less the room's median z (about 1.6 m)
    assert cli(["predict", str(tiny_run), str(tmp_path / "far" / "scan.npy"), "--out", str(tmp_path / "kept"),
                "--format", "npy", "--max-extent", hint]) == 0
    assert capsys.readouterr().err == ""


def test_a_fortran_order_scan_gets_the_labels_of_the_same_points_in_c_order(tiny_run, two_folds, tmp_path):
    """numpy.save keeps a Fortran-order array so; its points gave other labels (the network's input kept
    the layout, and a later step read it as C order)."""
    room = read_room(two_folds / "Area_1.h5", "hallway_1")
    np.save(tmp_path / "hallway_1.npy", np.asfortranarray(np.c_[room["coord"].astype(np.float64), room["color"]]))
    assert not np.load(tmp_path / "hallway_1.npy").flags.c_contiguous
    assert cli(["predict", str(tiny_run), str(tmp_path / "hallway_1.npy"), "--out", str(tmp_path / "o")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "hallway_1_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "hallway_1"))


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


def test_foreign_checkpoints_are_one_line_errors(tiny_run, tmp_path, capsys):
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("not torch")
    for model, words in (("other.pt", "expected a pointgeope-checkpoint file"),
                         ("text.pt", "not a readable checkpoint"), ("none.pt", "found nothing")):
        assert cli(["predict", str(tmp_path / model), str(tmp_path / "s.npy"), "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and str(tmp_path / model) in err[0]
    if torch.cuda.is_available():
        assert load_predictor(tiny_run, device="cuda").device.type == "cuda"
    else:
        with pytest.raises(DeviceError, match="--device cuda but CUDA is not available here"):
            load_predictor(tiny_run, device="cuda")


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
    np.testing.assert_allclose(drawn.point.positions.numpy(), room["coord"] - np.floor(room["coord"].min(0)),
                               atol=1e-5)


# --- geometry-only models, large scans ------------------------------------------------------------------------

@pytest.mark.slow
def test_geometry_only_model_trains_and_predicts_a_scan_without_colour(two_folds, tmp_path):
    assert train_fold(two_folds, tmp_path / "run", "data.color=false", "model.in_channels=3", "train.epochs=1") == 0
    run = tmp_path / "run" / "area_1"
    predictor = load_predictor(run)
    assert predictor.info["features"] == ["xyz"] and not predictor.uses_color
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", room["coord"])                 # (N, 3): no colour
    assert cli(["predict", str(run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "o")]) == 0
    pred = np.load(tmp_path / "o" / "office_1_pred.npy")
    np.testing.assert_array_equal(pred, read_predictions(run / "predictions" / "Area_1.h5", "office_1"))
    # the colour of a coloured scan is not used by this model: same labels with random colours
    scan = Scan("office_1", "c", room["coord"].astype(np.float64),
                np.random.default_rng(0).integers(0, 256, (len(pred), 3)).astype(np.uint8))
    np.testing.assert_array_equal(predict_scan(predictor, scan)[0], pred)


@pytest.mark.slow
def test_a_2m_point_scan_is_predicted_in_bounded_pieces():
    """Every one of 2M points gets its own label while no forward pass sees more than
    max(voxel_max, batch_points) points; the stand-in network (ColourClassifier) keeps this test fast and
    exact. The peak memory of the real network against the scan size is measured in bench/bench_predict.py."""
    rng = np.random.default_rng(0)
    n = 2_000_000
    coord = rng.random((n, 3)) * [30.0, 10.0, 0.0]   # a 30 x 10 m floor: 30k voxels of 0.1 m, ~67 points each
    color = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    predictor = colour_predictor(voxel_max=20_000, batch_points=40_000)
    pred, scores, votes = predict_scan(predictor, Scan("big", "big.npy", coord, color))
    assert pred.shape == (n,) and (votes >= 1).all() and (votes > 1).any()   # fragments of 30k: cropped
    assert 0 < max(predictor.model.calls) <= 40_000
    np.testing.assert_array_equal(pred, expected_class(color))


# --- where the outputs go ------------------------------------------------------------------------------------

def test_a_scans_name_comes_from_its_absolute_path(tiny_root, tmp_path, monkeypatch):
    """``.`` named the rooms of the current folder "/office_1" (``Path('.').name == ''``), whose outputs
    went to the file system's root; ``..`` named them "../office_1"."""
    from pointgeope.scans.sources import find_scans

    raw = tiny_root.parent / "raw" / "Area_1"
    monkeypatch.chdir(raw)
    assert [ref.name for ref in find_scans(["."])[0]] == ["Area_1/hallway_1", "Area_1/office_1"]
    monkeypatch.chdir(raw / "office_1" / "Annotations")
    assert [ref.name for ref in find_scans([".."])[0]] == ["office_1"]
    assert [ref.name for ref in find_scans(["../.."])[0]] == ["Area_1/hallway_1", "Area_1/office_1"]


def test_every_output_lies_inside_out(tiny_run, tiny_root, two_folds, tmp_path, monkeypatch, capsys):
    """A folder given as ``..`` holding a raw room and an area file named ``...h5`` (stem ``..``): the room
    went to --out/.., the area's rooms beside --out; now the room goes inside and each room of the oddly
    named file is one line naming it."""
    work = tmp_path / "scans" / "here"
    work.mkdir(parents=True)
    (tmp_path / "scans" / "...h5").symlink_to(two_folds / "Area_1.h5")
    (tmp_path / "scans" / "room").mkdir()
    (tmp_path / "scans" / "room" / "Annotations").symlink_to(tiny_root.parent / "raw/Area_1/office_1/Annotations")
    monkeypatch.chdir(work)
    assert cli(["predict", str(tiny_run), "..", "--out", "out", "--format", "npy"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("...h5:" in line and "outside --out out" in line for line in err), err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*_pred.npy")) == [
        "scans/here/out/scans/room_pred.npy"]


def test_a_prepared_area_input_is_checked_as_training_checks_it(tiny_run, tiny_root, tmp_path, capsys):
    """A prepared Area_1.h5 whose labels were changed after prepare (its manifest.json says so) was
    predicted as if nothing were wrong; now it is refused in one line, the other input still predicted,
    and the viewer refuses it the same way."""
    import h5py

    root = tmp_path / "root"
    root.mkdir()
    for name in ("Area_1.h5", "manifest.json"):
        (root / name).write_bytes((tiny_root / name).read_bytes())
    with h5py.File(root / "Area_1.h5", "r+") as f:
        f["office_1/label"][0] = (f["office_1/label"][0] + 1) % 13
    room = read_room(tiny_root / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"], room["color"]])
    assert cli(["predict", str(tiny_run), str(root / "Area_1.h5"), str(tmp_path / "office_1.npy"),
                "--out", str(tmp_path / "o"), "--format", "npy"]) == 2
    err = capsys.readouterr().err.splitlines()
    message = (f"{root / 'Area_1.h5'}: does not match its checksum in manifest.json (changed or damaged after "
               "prepare); run `pointgeope prepare` again")
    assert err == [f"pointgeope predict: error: {message}"]
    assert sorted(p.name for p in (tmp_path / "o").rglob("*.npy")) == ["office_1_pred.npy"]
    assert cli(["viz", str(root / "Area_1.h5"), "--list"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"pointgeope viz: error: {message}"]


def test_a_rerun_into_the_input_folder_does_not_take_its_outputs_as_inputs(tiny_run, tmp_path, capsys):
    """``predict RUN clouds --out clouds`` twice: the second run predicted its own a_pred.h5, failed on
    a_pred.npy and a_probs.npy and refused a_pred.ply as a collision, exit 2, at every rerun."""
    clouds = tmp_path / "clouds"
    clouds.mkdir()
    np.save(clouds / "a.npy", np.random.default_rng(1).random((400, 6)) * [3, 3, 2, 255, 255, 255])
    argv = ["predict", str(tiny_run), str(clouds), "--out", str(clouds), "--format", "npy,ply,h5", "--probabilities"]
    assert cli(argv) == 0
    first = {p.name: p.read_bytes() for p in clouds.iterdir() if p.name != "a_pred.h5"}
    capsys.readouterr()
    assert cli(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and {p.name: p.read_bytes() for p in clouds.iterdir() if p.name != "a_pred.h5"} == first
    assert sorted(first) == ["a.npy", "a_pred.npy", "a_pred.ply", "a_probs.npy"]
    assert (f"note: {clouds}: 4 file(s) named as this command's outputs (a_pred.h5, a_pred.npy, a_pred.ply, "
            "a_probs.npy) are not inputs in --out") in out


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
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["warning", "warning", "pointgeope predict"]
    assert f"{tmp_path / 'a_far.npy'}: its LAS file stores x in steps of 0.01 m, not 0.001 m" in err[0]
    assert err[2] == (f"pointgeope predict: error: {tmp_path / 'b_space.npy'}: --format las cannot hold its points: "
                      "LAS stores coordinates as 32-bit integers, x spans 1e+30 (at most 4.29497e+07 in steps of "
                      "0.01 m); predict it without las (--format npy), or remove the point(s) that far")
    las = laspy.read(tmp_path / "o" / "a_far_pred.las")
    coord = np.load(tmp_path / "a_far.npy")[:, :3]
    np.testing.assert_allclose(np.c_[las.x, las.y, las.z], coord, atol=0.005 + 1e-9)
    np.testing.assert_array_equal(np.asarray(las.classification), np.load(tmp_path / "o" / "a_far_pred.npy"))
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["a_far_pred.las", "a_far_pred.npy",
                                                                 "c_room_pred.las", "c_room_pred.npy"]


def test_a_scan_of_one_point_is_predicted_without_a_spacing_warning(tiny_run, tmp_path, capsys):
    """A 1-point scan warned "median point spacing nan ... is nan times the training rooms'"."""
    np.save(tmp_path / "one.npy", np.array([[1.0, 2.0, 0.5, 200, 10, 10]]))
    assert cli(["predict", str(tiny_run), str(tmp_path / "one.npy"), "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().err == "" and np.load(tmp_path / "o" / "one_pred.npy").shape == (1,)


def test_fragments_are_capped_by_default_and_by_option_or_override(tiny_run, tmp_path, capsys):
    """A scan of 100 points and 1,501 copies of one point: 1,501 fragments, one pass over the scan each
    (3,000 copies took 77 s, the full S3DIS configs having eval.max_fragments: null). predict now takes
    --max-fragments and evaluate's overrides, and without either caps a config's null at 100, in one
    warning; an override of a key the network was trained with, or of one predict has no use for, is refused."""
    rng = np.random.default_rng(5)
    scan = np.c_[rng.random((100, 3)) * [3, 3, 2], rng.integers(0, 256, (100, 3))]
    np.save(tmp_path / "dense.npy", np.r_[scan, np.repeat([[3.55, 3.55, 2.05, 9, 9, 9]], 1501, axis=0)])
    base = ["predict", str(tiny_run), str(tmp_path / "dense.npy"), "--out", str(tmp_path / "o"), "--format", "npy"]
    assert cli(base + ["eval.max_fragments=null"]) == 0      # the s3dis configs' value: predict's default cap
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: {tmp_path / 'dense.npy'}: its densest 0.1 m voxel holds 1,501 points: predicted the "
                   "first 100 of its 1,501 fragments (predict's default cap; a point they miss takes its voxel's "
                   "votes); --max-fragments N or all to choose"]
    assert cli(base + ["eval.max_fragments=null", "--max-fragments", "3"]) == 0
    assert capsys.readouterr().err == ""                       # the user's choice: no warning
    assert cli(base + ["eval.max_fragments=3"]) == 0           # an override of evaluate: the run's cap
    assert capsys.readouterr().err == ""
    for refused in ("model.planes=[16, 32]", "train.device=cuda", "data.root=elsewhere"):   # trained, or no effect
        line = one_line(capsys, 2, base + [refused])
        assert line == (f"pointgeope predict: error: override {refused!r}: predict takes overrides of eval.* and "
                        "of train.threads, not of what the network was trained with (nor of the keys that set "
                        "where and how training runs: --device chooses the device)")
    with pytest.raises(SystemExit):                            # argparse: N >= 1 or all
        cli(base + ["--max-fragments", "0"])
    assert "--max-fragments: expected a number of fragments >= 1 or all, got '0'" in capsys.readouterr().err


def test_a_point_beyond_float32_gives_no_numpy_warning(tiny_run, tmp_path, capsys):
    """A point at 1e39 (left out of the prediction) leaked numpy's "overflow encountered in cast"."""
    import warnings

    scan = np.c_[np.random.default_rng(2).random((300, 3)) * 3, np.full((300, 3), 100)]
    np.save(tmp_path / "s.npy", np.insert(scan, 3, [1e39, 0, 0, 1, 1, 1], axis=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli(["predict", str(tiny_run), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o"),
                    "--format", "npy,ply,txt"]) == 0
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert len(capsys.readouterr().err.splitlines()) == 1  # the stray point's warning


def test_a_dangling_link_or_a_fifo_among_the_inputs_is_named(tiny_run, tmp_path, capsys):
    """A dangling symbolic link or a FIFO in a folder of scans was skipped without a word (and a FIFO given
    as an input was "found nothing"; reading it would wait forever)."""
    import os

    folder = tmp_path / "scans"
    folder.mkdir()
    np.save(folder / "good.npy", np.random.default_rng(0).random((200, 6)) * [3, 3, 2, 255, 255, 255])
    (folder / "gone.ply").symlink_to(tmp_path / "nowhere.ply")
    os.mkfifo(folder / "pipe.txt")
    assert cli(["predict", str(tiny_run), str(folder), str(folder / "pipe.txt"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"pointgeope predict: error: {folder / 'gone.ply'}: expected a scan file, found a symbolic link to "
        f"nothing ({tmp_path / 'nowhere.ply'})",
        f"pointgeope predict: error: {folder / 'pipe.txt'}: expected a scan file, found a FIFO (named pipe)",
        f"pointgeope predict: error: {folder / 'pipe.txt'}: expected a scan file, found a FIFO (named pipe)"]
    assert (tmp_path / "o" / "good_pred.npy").is_file()
