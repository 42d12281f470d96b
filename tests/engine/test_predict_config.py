"""Tests of `pointgeope predict` on a fold folder whose config.yaml was edited or damaged: which checkpoint it
takes, what it refuses, and the eval settings of config.yaml it names but does not take (it predicts as the
checkpoint does)."""
from __future__ import annotations

import numpy as np

from pointgeope.cli import main as cli
from tests.engine.conftest import one_line


def test_a_config_yaml_predict_cannot_read_is_refused_not_taken_for_last(tiny_run, tmp_path, capsys):
    """A fold whose ``config.yaml`` chooses ``eval.checkpoint: best`` but holds a misspelt key elsewhere (which
    ``evaluate`` refuses) was predicted from ``last.pt``, exit code 0, without a word: other weights than the
    run's choice. Now one line names the file's line and ``--checkpoint``; with it, the chosen file is used."""
    import json
    import shutil

    fold, scan, out = tmp_path / "run" / "area_1", tmp_path / "scan.npy", tmp_path / "pred"
    fold.mkdir(parents=True)
    for name in ("last.pt", "best.pt"):
        shutil.copy(tiny_run / name, fold / name)
    text = (tiny_run / "config.yaml").read_text()
    assert text.count("  checkpoint: last\n") == 1
    (fold / "config.yaml").write_text(text.replace("  checkpoint: last\n", "  checkpoint: best\n  vot: probs\n"))
    line = text.splitlines().index("  checkpoint: last") + 2
    np.save(scan, np.random.default_rng(0).random((300, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    assert one_line(capsys, 2, ["predict", str(fold), str(scan), "--out", str(out)]) == (
        f"pointgeope predict: error: {fold / 'config.yaml'}:{line}: unknown key 'eval.vot'; did you mean "
        "'eval.vote'?; predict reads the fold's eval.checkpoint from it: correct it, or choose the file with "
        "--checkpoint last|best")
    assert not out.exists()
    assert cli(["predict", str(fold), str(scan), "--out", str(out), "--checkpoint", "best"]) == 0
    assert json.loads((out / "scan_pred.json").read_text())["model_path"] == str(fold / "best.pt")


def test_eval_values_of_config_yaml_other_than_the_checkpoints_are_named_by_predict(tiny_run, tmp_path, capsys):
    """predict takes ``eval.*`` from the checkpoint (a fold folder predicts as its ``.pt`` file does), evaluate
    from ``config.yaml``: a ``config.yaml`` edited for evaluate (``max_fragments: 5``) was silently not used by
    predict, whose help called the checkpoint's value "the run's". Now one note names the key, both values and
    the override that applies it; with the override, config.yaml's value is used and no note is said."""
    import json
    import shutil

    def recorded(folder):   # the eval.max_fragments the scan was predicted with, as its record says
        return [json.loads((folder / "scan_pred.json").read_text())["made_by"]["options"]["eval.max_fragments"]]

    fold, scan = tmp_path / "run" / "area_1", tmp_path / "scan.npy"
    fold.mkdir(parents=True)
    shutil.copy(tiny_run / "last.pt", fold / "last.pt")
    text = (tiny_run / "config.yaml").read_text()
    assert text.count("  max_fragments: 2\n") == 1
    (fold / "config.yaml").write_text(text.replace("  max_fragments: 2\n", "  max_fragments: 5\n"))
    np.save(scan, np.random.default_rng(0).random((300, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "a")]) == 0
    note = (f"note: {fold / 'config.yaml'} sets eval.max_fragments 5 (the checkpoint: 2); predict takes eval.* from "
            "the checkpoint, evaluate from config.yaml: add eval.max_fragments=5 to predict with config.yaml's")
    assert capsys.readouterr().err.splitlines().count(note) == 1
    assert recorded(tmp_path / "a") == [2]
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "b"), "eval.max_fragments=5"]) == 0
    assert "note:" not in capsys.readouterr().err and recorded(tmp_path / "b") == [5]
    assert cli(["predict", str(fold / "last.pt"), str(scan), "--out", str(tmp_path / "c")]) == 0
    assert "note:" not in capsys.readouterr().err and recorded(tmp_path / "c") == [2]   # the file: as its folder


def test_an_eval_checkpoint_override_is_refused_for_the_checkpoint_option(tiny_run, tmp_path, capsys):
    """``predict RUN/area_K SCAN eval.checkpoint=best`` passed the check of overrides (eval.*), but the file was
    chosen before the config was read: it predicted with last.pt, exit code 0, the override unread. Now one line
    names ``--checkpoint``, which chooses it, and nothing is written."""
    scan, out = tmp_path / "scan.npy", tmp_path / "pred"
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    for model, extra in ((tiny_run, []), (tiny_run / "best.pt", []), (tiny_run, ["--checkpoint", "best"])):
        assert one_line(capsys, 2, ["predict", str(model), str(scan), "--out", str(out), *extra,
                                    "eval.checkpoint=best"]) == (
            "pointgeope predict: error: override 'eval.checkpoint=best': not read (the checkpoint is chosen before "
            "its config); leave it out, and choose a run folder's with --checkpoint last|best, or give the file "
            "RUN/area_K/best.pt")
        assert not out.exists()


def test_predict_parses_the_folds_config_yaml_once(tiny_run, tmp_path, monkeypatch):
    """predict takes ``eval.checkpoint`` from a fold's ``config.yaml`` and names its other ``eval.*`` values: both
    from one parse of the file (it was parsed twice, once for each); the prediction is made."""
    import shutil

    from pointgeope.engine import config

    fold, scan = tmp_path / "run" / "area_1", tmp_path / "scan.npy"
    fold.mkdir(parents=True)
    for name in ("last.pt", "config.yaml"):
        shutil.copy(tiny_run / name, fold / name)
    np.save(scan, np.random.default_rng(0).random((300, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    parsed, parse = [], config.load_yaml_lines
    monkeypatch.setattr(config, "load_yaml_lines", lambda text: parsed.append(text) or parse(text))
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "pred")]) == 0
    assert parsed == [(fold / "config.yaml").read_text()]
