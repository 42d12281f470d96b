"""What a fold's metrics.json records of its settings, which `pointgeope report` compares between folds."""
from __future__ import annotations

import json
import shutil

from pointgeope.cli import main as cli
from pointgeope.report.settings import fold_settings


def test_evaluate_records_the_settings_it_evaluated_with(tiny_run, tmp_path, capsys):
    """An evaluation with an eval override records it (config.yaml keeps what training used): before,
    metrics.json had no config and the report could not tell such folds apart."""
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    assert cli(["evaluate", str(fold), "eval.tta.rotations=2"]) == 0
    metrics = json.loads((fold / "metrics.json").read_text())
    settings = fold_settings(metrics, fold)
    assert settings["eval.tta.rotations"] == 2 and settings["model.pe"] == "geope"
    assert settings["model.planes"] == [8, 16] and settings["data.grid_size"] == 0.1


def test_metrics_json_records_the_code_that_made_it(tiny_run):
    """Before: nothing in a run folder said which code produced it (0.1.0 named a state 551 commits old)."""
    import pointgeope
    from pointgeope.provenance import checkout_commit

    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert metrics["pointgeope"] == pointgeope.__version__
    assert metrics["pointgeope_commit"] == checkout_commit()   # this checkout's HEAD (tests/test_provenance.py)
