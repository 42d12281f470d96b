"""``pointgeope viz --pred`` of another area or of a scan is refused by the files' ``area`` attributes
(pointgeope/viz/scene.py ``check_same_area``), and ``--list --pred`` that matches no room of the area."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope import h5_predictions
from pointgeope.cli import main
from tests.viz.conftest import synthetic_room, unlabelled_scan, write_predictions


def _fold_predictions(path, area: str):
    """evaluate's file of ``area``, whose rooms have the names and sizes of the synthetic Area_9's."""
    _, pred = synthetic_room()
    h5_predictions.write_predictions(path, area, {"grid_1": pred, "tiny_2": np.array([0, 1, 1, 1])}, {})
    return path


@pytest.mark.parametrize("argv", [["--list"], ["--room", "grid_1", "--ply", "v.ply"]])
def test_predictions_of_another_area_are_refused_even_where_rooms_match(synthetic_area, tmp_path, capsys,
                                                                        monkeypatch, argv):
    """Before: rooms of the same names and sizes were drawn and scored as Area_9's, with exit code 0."""
    monkeypatch.chdir(tmp_path)
    area, _ = synthetic_area
    other = _fold_predictions(tmp_path / "Area_1.h5", "Area_1")
    assert main(["viz", str(area), *argv, "--pred", str(other)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"pointgeope viz: error: {other} holds the predictions of Area_1, not of {area} "
                            "(Area_9): give RUN/area_9/predictions/Area_9.h5\n")
    assert "mIoU" not in captured.out and not (tmp_path / "v.ply").exists()
    same = _fold_predictions(tmp_path / "Area_9.h5", "Area_9")  # the same area's file is taken
    assert main(["viz", str(area), *argv, "--pred", str(same)]) == 0


def test_a_scans_predictions_given_as_pred_of_an_area_say_to_view_the_scan(synthetic_area, tmp_path, capsys):
    area, _ = synthetic_area
    scan = tmp_path / "scan_pred.h5"
    unlabelled_scan(scan)
    assert main(["viz", str(area), "--list", "--pred", str(scan)]) == 2
    assert capsys.readouterr().err == (f"pointgeope viz: error: {scan} holds the predictions of scans/scan, not of "
                                       f"{area} (Area_9): view the scan alone: pointgeope viz {scan}\n")


def test_list_with_predictions_of_none_of_its_rooms_is_refused(synthetic_area, tmp_path, capsys):
    """Before: "note: 2 room(s) have no predictions", a table of '-', exit code 0 (a file without 'area')."""
    area, _ = synthetic_area
    preds = write_predictions(tmp_path / "p.h5", {"office_1": np.zeros(3), "office_2": np.zeros(3)})
    assert main(["viz", str(area), "--list", "--pred", str(preds)]) == 2
    assert capsys.readouterr().err == (f"pointgeope viz: error: {preds}: predictions of none of the rooms of {area} "
                                       f"(it holds office_1, office_2); give the predictions of {area}\n")
