"""The viewer with the predictions of a network of more classes than S3DIS's 13 (``model.num_classes`` up to
254): labels 13.. were drawn black (the colour of ignored points) and predictions of them refused; they are
drawn in ``constants.class_palette(C)``'s colours, ``C`` the classes the predictions file names, in the
pictures and the legend."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.constants import CLASS_NAMES, PALETTE, class_names, class_palette
from pointgeope.viz import VizError
from pointgeope.viz.colors import IGNORE_COLOR, colorize, error_colors, label_colors
from pointgeope.viz.legend import legend_lines
from pointgeope.viz.scene import load_room
from pointgeope.viz.select import parse_class_names
from tests.viz.conftest import write_area, write_predictions
from tests.viz.test_ply import _read_ply

LABELS = np.array([0, 12, 13, 14, 255])


def test_labels_of_more_classes_take_the_class_palette():
    got = label_colors(LABELS, 15)
    np.testing.assert_array_equal(got, [PALETTE[0], PALETTE[12], class_palette(15)[13], class_palette(15)[14],
                                        IGNORE_COLOR])
    assert list(got[2]) == [217, 76, 76]  # class_palette's documented class 13
    np.testing.assert_array_equal(label_colors(LABELS), [PALETTE[0], PALETTE[12]] + [IGNORE_COLOR] * 3)  # S3DIS
    np.testing.assert_array_equal(colorize("pred", None, LABELS, LABELS, 15), got)
    # label 14 scored: right or wrong, not unlabelled
    errors = error_colors(np.array([14, 14, 255]), np.array([14, 13, 14]), 15)
    np.testing.assert_array_equal(errors, [(190, 190, 190), (255, 0, 0), IGNORE_COLOR])


def test_the_legend_lists_every_class_of_the_predictions():
    label = np.array([0, 13, 14, 14])
    lines = legend_lines(label, np.array([0, 13, 13, 14]), class_names=class_names(15))
    rows = lines[1:-1]
    assert len(rows) == 15
    assert [r.split()[:3] for r in rows[:13]] == [[str(c), name, "#{:02x}{:02x}{:02x}".format(*PALETTE[c])]
                                                   for c, name in enumerate(CLASS_NAMES)]
    assert rows[13].split() == ["13", "class_13", "#d94c4c", "1", "50.0"]
    assert rows[14].split()[:4] == ["14", "class_14", "#{:02x}{:02x}{:02x}".format(*class_palette(15)[14]), "2"]
    assert legend_lines(np.array([0]), np.array([0]))[0] == lines[0]  # S3DIS's header unchanged


def fifteen_class_area(tmp_path, names=True):
    n = 6
    coord = np.stack([np.arange(n), np.arange(n) % 2, np.zeros(n)], 1).astype(np.float32)
    room = {"coord": coord, "label": np.array([0, 1, 13, 14, 14, 2])}
    area = write_area(tmp_path / "Area_1.h5", "Area_1", {"r": room})
    preds = write_predictions(tmp_path / "pred.h5", {"r": np.array([0, 1, 13, 14, 13, 14])})
    if names:
        with h5py.File(preds, "a") as f:
            f.attrs["class_names"] = class_names(15)
    return area, preds


def test_the_viewer_reads_the_class_names_of_the_predictions(tmp_path, capsys):
    area, preds = fifteen_class_area(tmp_path)
    view = load_room(area, "r", preds)
    assert view.class_names == tuple(class_names(15)) and list(view.pred) == [0, 1, 13, 14, 13, 14]
    assert load_room(area, "r").class_names == CLASS_NAMES
    for mode in ("gt", "pred"):
        ply = tmp_path / f"{mode}.ply"
        assert cli(["viz", str(area), "--room", "r", "--pred", str(preds), "--mode", mode, "--ply", str(ply)]) == 0
        v = _read_ply(ply)[1]
        rgb = np.stack([v["red"], v["green"], v["blue"]], 1)
        labels = np.asarray(v["label" if mode == "gt" else "pred"])
        np.testing.assert_array_equal(rgb, label_colors(labels, 15))
        assert (rgb[labels == 14] == class_palette(15)[14]).all() and (labels == 14).any()
    out = capsys.readouterr().out
    assert " 14  class_14 " in out


def test_predictions_without_class_names_are_s3dis_s(tmp_path):
    area, preds = fifteen_class_area(tmp_path, names=False)
    with pytest.raises(ValueError, match=r"predicted labels outside 0..12 .*evaluate the fold again"):
        load_room(area, "r", preds)


def test_the_room_list_scores_the_classes_of_the_predictions(tmp_path, capsys):
    area, preds = fifteen_class_area(tmp_path)
    assert cli(["viz", str(area), "--list", "--pred", str(preds)]) == 0
    # classes 0, 1, 2, 13 present: IoU 1, 1, 0 (2 predicted 14), 1/2 (13: 1 right of 2 predicted); 14: 1/3
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["r", "6", f"{100 * (1 + 1 + 0 + 0.5 + 1 / 3) / 5:.1f}"]


def test_hide_takes_the_class_names_of_the_view(tmp_path, capsys):
    """``--hide`` knew S3DIS's 13 names alone: ``class_13`` was refused in a view whose legend lists it."""
    area, preds = fifteen_class_area(tmp_path)  # ground truth 0, 1, 13, 14, 14, 2
    ply = tmp_path / "h.ply"
    assert cli(["viz", str(area), "--room", "r", "--pred", str(preds), "--hide", "class_13,ceiling",
                "--ply", str(ply)]) == 0
    assert list(_read_ply(ply)[1]["label"]) == [1, 14, 14, 2]
    assert "note: hidden ceiling,class_13: 2 points" in capsys.readouterr().out
    # a name beyond the view's classes: one line listing them; S3DIS's 13 know no class_13
    assert cli(["viz", str(area), "--room", "r", "--pred", str(preds), "--hide", "class_15", "--ply", str(ply)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown class name 'class_15'" in err and err.endswith("clutter, class_13, class_14")
    assert parse_class_names("class_14,beam", tuple(class_names(15))) == (3, 14)
    with pytest.raises(VizError, match=r"'class_13'; expected comma-separated names from: ceiling, .*, clutter$"):
        parse_class_names("class_13")
