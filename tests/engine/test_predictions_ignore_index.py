"""evaluate and predict (``--format h5``) write their run's ``train.ignore_index`` into the predictions file,
and ``pointgeope viz`` scores each room of it as evaluate scores the area: without the points of that ground
truth. Before, the files did not say which label the run ignored, and viz's room mIoU counted them (another
score than evaluate's)."""
from __future__ import annotations

import re

import numpy as np

from pointgeope.cli import main as cli
from pointgeope.h5 import list_rooms, read_labels
from pointgeope.h5_predictions import predictions_attrs, read_predictions
from tests.engine.conftest import train_fold

IGNORED = 2  # wall: present in every room


def _miou(label: np.ndarray, pred: np.ndarray, classes: int) -> float:
    """Mean IoU from its definition over the classes in the truth or the predictions of the scored points."""
    keep = label != IGNORED
    label, pred = label[keep], pred[keep]
    ious = [np.sum((label == c) & (pred == c)) / np.sum((label == c) | (pred == c)) for c in range(classes)
            if np.sum((label == c) | (pred == c))]
    return 100 * float(np.mean(ious))


def test_viz_scores_an_evaluated_fold_without_its_ignored_label(two_folds, tmp_path, capsys):
    assert train_fold(two_folds, tmp_path / "run", "train.epochs=1", f"train.ignore_index={IGNORED}") == 0
    fold = tmp_path / "run" / "area_1"
    preds = fold / "predictions" / "Area_1.h5"
    assert predictions_attrs(preds, "ignore_index") == [IGNORED]
    capsys.readouterr()
    area = two_folds / "Area_1.h5"
    assert cli(["viz", str(area), "--list", "--pred", str(preds)]) == 0
    out = capsys.readouterr().out
    for room in list_rooms(area):
        label, pred = read_labels(area, room).astype(np.int64), read_predictions(preds, room).astype(np.int64)
        assert (label == IGNORED).any()
        printed = float(re.search(rf"^{room}\s+[\d,]+\s+([\d.]+)$", out, re.M).group(1))
        assert abs(printed - _miou(label, pred, 13)) <= 0.05, (room, printed)
    # predict's h5 of the same rooms (their ground truth with them): the legend scores them the same way
    assert cli(["predict", str(fold), str(area), "--out", str(tmp_path / "o"), "--format", "h5"]) == 0
    room = sorted(list_rooms(area))[0]
    scan = tmp_path / "o" / "Area_1" / f"{room}_pred.h5"
    assert predictions_attrs(scan, "ignore_index") == [IGNORED]
    capsys.readouterr()
    assert cli(["viz", str(scan), "--ply", str(tmp_path / "v.ply")]) == 0
    printed = float(re.search(r"room: mIoU ([\d.]+) %", capsys.readouterr().out).group(1))
    label, pred = read_labels(area, room).astype(np.int64), read_predictions(scan, room).astype(np.int64)
    assert abs(printed - _miou(label, pred, 13)) <= 0.05, (room, printed)
