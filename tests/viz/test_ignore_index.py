"""A run trained with ``train.ignore_index`` on a real class (``12``, clutter): evaluate skips the points of
that ground truth in every metric, and the viewer scores and colours the run's predictions the same way
(the predictions file carries the run's ``ignore_index``). Before, viz scored those points as a class:
``--list`` and the legend printed another mIoU than evaluate's, and error mode drew them red or grey."""
from __future__ import annotations

import re

import h5py
import numpy as np

from pointgeope import h5_predictions
from pointgeope.cli import main
from pointgeope.constants import CLASS_NAMES
from tests.viz.conftest import write_area
from tests.viz.test_ply import _read_ply

IGNORED = 12


def _room(seed: int, n: int = 600) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 13, n)
    label[:100] = IGNORED                                   # plenty of clutter
    pred = np.where(rng.random(n) < 0.6, label, rng.integers(0, 13, n))
    coord = rng.random((n, 3)) * [5.0, 4.0, 3.0]
    return {"coord": coord, "label": label}, pred


def _miou_without(label: np.ndarray, pred: np.ndarray, ignored: int) -> float:
    """Mean IoU, from its definition, over the classes in the truth or the predictions of the points whose
    truth is not ``ignored`` (evaluate's rule for its run's ``train.ignore_index``)."""
    keep = label != ignored
    label, pred = label[keep], pred[keep]
    ious = []
    for c in range(13):
        union = np.sum((label == c) | (pred == c))
        if union:
            ious.append(np.sum((label == c) & (pred == c)) / union)
    return float(np.mean(ious))


def _files(tmp_path):
    rooms, preds = {}, {}
    for seed, name in enumerate(("office_1", "office_2")):
        rooms[name], preds[name] = _room(seed)
    area = write_area(tmp_path / "Area_3.h5", "Area_3", rooms)
    run = tmp_path / "Area_3_pred.h5"
    h5_predictions.write_predictions(run, "Area_3", preds, {"class_names": list(CLASS_NAMES), "ignore_index": IGNORED})
    return area, run, rooms, preds


def test_list_scores_rooms_without_the_points_of_the_runs_ignored_label(tmp_path, capsys):
    area, run, rooms, preds = _files(tmp_path)
    assert main(["viz", str(area), "--list", "--pred", str(run)]) == 0
    out = capsys.readouterr().out
    for name in rooms:
        printed = float(re.search(rf"^{name}\s+[\d,]+\s+([\d.]+)$", out, re.M).group(1))
        want = 100 * _miou_without(rooms[name]["label"], preds[name], IGNORED)
        assert abs(printed - want) <= 0.05, (name, printed, want)
        assert abs(printed - 100 * _miou_without(rooms[name]["label"], preds[name], 255)) > 0.1  # the old score


def test_legend_and_error_colours_leave_the_ignored_label_unjudged(tmp_path, capsys):
    area, run, rooms, preds = _files(tmp_path)
    ply = tmp_path / "err.ply"
    assert main(["viz", str(area), "--room", "office_1", "--pred", str(run), "--mode", "error",
                 "--ply", str(ply)]) == 0
    out = capsys.readouterr().out
    label, pred = rooms["office_1"]["label"], preds["office_1"]
    miou, oa = re.search(r"room: mIoU ([\d.]+) % .* OA ([\d.]+) % over ([\d,]+) labelled points", out).groups()[:2]
    keep = label != IGNORED
    assert abs(float(miou) - 100 * _miou_without(label, pred, IGNORED)) <= 0.05
    assert abs(float(oa) - 100 * np.mean(label[keep] == pred[keep])) <= 0.05
    assert f"over {keep.sum():,} labelled points" in out
    v = _read_ply(ply)[1]
    rgb = np.stack([v["red"], v["green"], v["blue"]], axis=1)
    np.testing.assert_array_equal(v["label"], label)  # no cap, no hiding: the room's points in file order
    assert (rgb[~keep] == 0).all()                    # unjudged: black, as unlabelled points
    right = pred[keep] == label[keep]
    assert (rgb[keep][right] == 190).all() and (rgb[keep][~right] == [255, 0, 0]).all()


def test_a_file_without_ignore_index_scores_every_class(tmp_path, capsys):
    """Predictions of an older version (no ``ignore_index``): 255, the default, skips no class."""
    area, run, rooms, preds = _files(tmp_path)
    old = tmp_path / "old.h5"
    h5_predictions.write_predictions(old, "Area_3", preds, {"class_names": list(CLASS_NAMES)})
    assert main(["viz", str(area), "--list", "--pred", str(old)]) == 0
    out = capsys.readouterr().out
    printed = float(re.search(r"^office_1\s+[\d,]+\s+([\d.]+)$", out, re.M).group(1))
    assert abs(printed - 100 * _miou_without(rooms["office_1"]["label"], preds["office_1"], 255)) <= 0.05


def test_an_ignore_index_that_is_no_integer_is_one_line(tmp_path, capsys):
    """int('x') of a damaged attribute was a ValueError traceback of viz --list --pred and of the views."""
    area, _, rooms, preds = _files(tmp_path)
    bad = tmp_path / "bad.h5"
    h5_predictions.write_predictions(bad, "Area_3", preds, {"class_names": list(CLASS_NAMES), "ignore_index": "x"})
    for argv in (["--list"], ["--room", "office_1", "--ply", str(tmp_path / "o.ply")]):
        assert main(["viz", str(area), *argv, "--pred", str(bad)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"pointgeope viz: error: {bad}: expected its 'ignore_index' attribute to be an integer label, "
                       "got 'x'; evaluate or predict again to write the file anew"]


def test_predictions_that_are_no_integer_labels_are_one_line(tmp_path, capsys):
    """float32 predictions reached the metrics' "expected integer pred labels" ValueError: a traceback."""
    area, _, rooms, preds = _files(tmp_path)
    bad = tmp_path / "float.h5"
    h5_predictions.write_predictions(bad, "Area_3", preds, {"class_names": list(CLASS_NAMES)})
    with h5py.File(bad, "r+") as f:  # as a tool that rewrote them would
        for room, pred in preds.items():
            del f[room]["pred"]
            f[room]["pred"] = pred.astype(np.float32)
    assert main(["viz", str(area), "--list", "--pred", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"pointgeope viz: error: {bad}: room 'office_1': expected 'pred' to "
                                               "be integer labels of shape (N,), got float32 (600,)"), err
