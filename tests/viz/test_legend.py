"""Tests of pointgeope/viz/legend.py: swatches, the class legend with per-room IoU, the room table."""
from __future__ import annotations

import numpy as np

from pointgeope.constants import CLASS_NAMES, PALETTE
from pointgeope.viz.colors import missing_modes
from pointgeope.viz.legend import key_help_lines, legend_lines, room_table, swatch, use_ansi


def test_swatch():
    assert swatch((1, 2, 255), ansi=True) == "\x1b[48;2;1;2;255m    \x1b[0m"
    assert swatch((1, 2, 255), ansi=False, width=7) == "#0102ff"


def test_use_ansi(monkeypatch):
    class Tty:
        def isatty(self):
            return True
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_ansi(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_ansi(Tty())


def test_legend_without_predictions():
    label = np.array([0, 0, 2, 12, 12, 12, 255], dtype=np.uint8)
    lines = legend_lines(label, ansi=True, title="room")
    assert lines[0] == "room"
    assert "IoU" not in lines[1]
    body = lines[2:]
    assert len(body) == len(CLASS_NAMES)
    for c, line in enumerate(body):
        assert CLASS_NAMES[c] in line and swatch(PALETTE[c], True) in line
    counts = [int(line.split()[-1].replace(",", "")) for line in body]
    assert counts == [2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]


def test_legend_with_predictions_prints_room_iou():
    # class 0: TP 1, GT 2, PRED 1 -> IoU 1/2;  class 1: TP 2, GT 2, PRED 3 -> IoU 2/3;  others absent
    label = np.array([0, 0, 1, 1], dtype=np.uint8)
    pred = np.array([0, 1, 1, 1], dtype=np.uint8)
    lines = legend_lines(label, pred, ansi=False)
    assert lines[0].split()[-2:] == ["IoU", "%"]
    assert lines[1].split()[-1] == "50.0" and lines[2].split()[-1] == "66.7"
    assert all(line.split()[-1] == "-" for line in lines[3:14])
    assert lines[-1].strip() == (f"room: mIoU {100 * (1 / 2 + 2 / 3) / 2:.1f} % of the 2 classes present, OA 75.0 % "
                                 "over 4 labelled points")


def test_key_help_lists_the_four_modes():
    lines = key_help_lines(missing_modes(labelled=True, has_pred=False))
    for key, mode in zip("1234", ("rgb", "gt", "pred", "error"), strict=True):
        assert any(line.split()[:2] == [key, mode] for line in lines)
    assert sum("needs --pred" in line for line in lines) == 2
    assert not any("needs --pred" in line for line in key_help_lines(missing_modes(labelled=True, has_pred=True)))


def test_key_help_of_an_unlabelled_scan_offers_no_ground_truth_key():
    # predict --format h5's file of an unlabelled scan: gt and error would draw every point black
    lines = key_help_lines(missing_modes(labelled=False, has_pred=True))
    offered = [line.split()[:2] for line in lines if line.split()[:1] in (["1"], ["2"], ["3"], ["4"])]
    assert offered == [["1", "rgb"], ["3", "pred"]]
    assert not any("error colours" in line for line in lines)
    assert lines[-2].strip() == "(2 gt, 4 error: off, this room has no ground truth)"
    rgb_only = key_help_lines(missing_modes(labelled=False, has_pred=False))   # nor predictions: pred needs --pred
    offered = [line.split()[:2] for line in rgb_only if line.split()[:1] in (["1"], ["2"], ["3"], ["4"])]
    assert offered == [["1", "rgb"], ["3", "pred"]]
    assert sum("needs --pred" in line for line in rgb_only) == 1


def test_room_table_sorts_worst_first():
    counts = {"a": 10, "b": 2000, "c": 5, "d": 7}
    lines = room_table(counts, {"a": 0.9, "b": 0.25, "c": float("nan")})
    assert [line.split()[0] for line in lines[1:5]] == ["b", "a", "c", "d"]
    assert lines[1].split() == ["b", "2,000", "25.0"]
    assert lines[3].split() == ["c", "5", "-"] and lines[4].split() == ["d", "7", "-"]
    assert lines[-1] == "4 rooms, 2,022 points; each room's mIoU over the classes present in its truth or predictions"
    plain = room_table(counts)
    assert [line.split()[0] for line in plain[1:5]] == ["a", "b", "c", "d"] and "mIoU" not in plain[0]
    assert plain[-1] == "4 rooms, 2,022 points"


def test_legend_of_a_room_without_ground_truth_counts_the_predictions():
    """An unlabelled scan's predictions (every label 255): the legend counted ground truth (0 for every
    class) and printed IoU "-" and "mIoU - %, OA - % over 0 labelled points" under an image coloured by
    prediction."""
    label = np.full(6, 255, dtype=np.uint8)
    pred = np.array([1, 1, 1, 7, 12, 1], dtype=np.uint8)
    lines = legend_lines(label, pred, ansi=False, title="scan")
    assert lines[0] == "scan" and lines[1].split()[-1] == "predicted" and "IoU" not in lines[1]
    body = lines[2:2 + len(CLASS_NAMES)]
    assert [int(line.split()[-1]) for line in body] == [0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
    assert lines[2 + len(CLASS_NAMES):] == ["  room: 6 points by predicted class; no ground truth, nothing to score"]
    assert not any("mIoU" in line or "IoU" in line for line in lines)
    assert legend_lines(label, ansi=False)[0].split()[-1] == "points"  # no predictions: nothing else to count
