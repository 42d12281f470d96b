"""``pointgeope viz`` given a folder, or one of predict's outputs that are not HDF5 (``*_pred.ply``, ``.npy``),
says what to give in one line (pointgeope/viz/show.py ``check_inputs``). Before: "expected a prepared area
file, found nothing at OUT" for a folder that is there, and "not a readable HDF5 file ...; it is truncated
or corrupt: run `pointgeope prepare` again" for predict's PLY, which is neither."""
from __future__ import annotations

import numpy as np

from pointgeope.cli import main
from pointgeope.scans.ply import write_vertices
from tests.viz.conftest import write_predictions


def _error(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pointgeope viz: error: "), err
    return err[0]


def test_a_folder_as_the_area_names_the_area_files_in_it(synthetic_area, capsys):
    area, _ = synthetic_area
    assert main(["viz", str(area.parent), "--list"]) == 2
    line = _error(capsys)
    assert f"the area {area.parent}: a folder" in line and str(area) in line
    assert "found nothing" not in line


def test_a_fold_folder_as_pred_names_its_predictions_file(synthetic_area, tmp_path, capsys):
    area, preds = synthetic_area
    fold = tmp_path / "run" / "area_9"
    (fold / "predictions").mkdir(parents=True)
    given = write_predictions(fold / "predictions" / "Area_9.h5", {"grid_1": np.zeros(1)})
    assert main(["viz", str(area), "--list", "--pred", str(fold)]) == 2
    line = _error(capsys)
    assert f"--pred {fold}: a folder" in line and line.endswith(f"such as {given}")


def test_predicts_ply_says_to_predict_with_format_h5(tmp_path, capsys):
    ply = write_vertices(tmp_path / "scan_pred.ply", [(axis, np.zeros(3, np.float32)) for axis in "xyz"]
                         + [("pred", np.zeros(3, np.uint8))])
    npy = tmp_path / "scan_pred.npy"
    np.save(npy, np.zeros(3, np.uint8))
    for argv in ([str(ply)], [str(ply), "--mode", "pred"], [str(npy)]):
        assert main(["viz", *argv]) == 2
        line = _error(capsys)
        assert "--format h5" in line and "prepare" not in line and "corrupt" not in line


def test_a_run_folder_as_pred_names_the_predictions_files_of_its_folds(synthetic_area, tmp_path, capsys):
    """``viz AREA --pred RUN`` (the run, not one of its folds): the message names the folds' predictions files;
    it said that none was in that folder."""
    area, _ = synthetic_area
    run = tmp_path / "run"
    (run / "area_9" / "predictions").mkdir(parents=True)
    given = write_predictions(run / "area_9" / "predictions" / "Area_9.h5", {"grid_1": np.zeros(1)})
    assert main(["viz", str(area), "--list", "--pred", str(run)]) == 2
    line = _error(capsys)
    assert f"--pred {run}: a folder" in line and line.endswith(f"such as {given}")


def test_every_scan_format_predict_reads_but_h5_says_to_predict_with_format_h5(tmp_path, capsys, monkeypatch):
    """The scan suffixes are those predict reads (``scans.sources.KINDS``), one added later too: a list of its
    own in viz left a new one to "not a readable HDF5 file ...; it is truncated or corrupt"."""
    from pointgeope.scans import sources

    monkeypatch.setitem(sources.KINDS, ".e57", "e57")
    for suffix in [s for s, kind in sources.KINDS.items() if kind != "h5"]:
        scan = tmp_path / f"scan{suffix.upper()}"
        scan.write_bytes(b"not hdf5\n")
        assert main(["viz", str(scan)]) == 2
        line = _error(capsys)
        assert "--format h5" in line and "corrupt" not in line, line
