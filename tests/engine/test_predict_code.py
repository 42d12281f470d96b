"""`pointgeope predict`'s records name the code that predicted each scan (engine/predict_record.py's ``made_by``):
the version, the commit of a checkout and whether its code had uncommitted changes, from the same owner as a
run's ``metrics.json`` (:func:`pointgeope.provenance.code_record`). A rerun under other code predicts again."""
from __future__ import annotations

import json

import numpy as np

import pointgeope.engine.predict as predict_module
from pointgeope import __version__
from pointgeope.cli import main as cli

A, B = "a" * 40, "b" * 40


def test_the_record_names_the_commit_and_edits_and_a_rerun_under_other_code_predicts_again(
        tiny_run, tmp_path, capsys, monkeypatch, code_at):
    """Before: ``made_by`` named the version alone (``0.2.0.dev0`` between releases: many states of the code), so
    a rerun after a pull or an edit of the model's code skipped every scan as made by the same code."""
    scan, out = tmp_path / "b.npy", tmp_path / "out"
    np.save(scan, np.random.default_rng(1).random((350, 6)) * [3, 3, 2, 255, 255, 255])
    calls: list[int] = []
    original = predict_module.predict_scan
    monkeypatch.setattr(predict_module, "predict_scan", lambda *a, **k: calls.append(1) or original(*a, **k))

    def predict(commit, modified) -> list[str]:
        code_at(commit, modified)
        assert cli(["predict", str(tiny_run), str(scan), "--out", str(out)]) == 0
        made = json.loads((out / "b_pred.json").read_text())["made_by"]
        assert (made["pointgeope"], made["pointgeope_commit"], made["pointgeope_modified"]) == \
            (__version__, commit, modified)
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped")]

    assert predict(A, False) == [] and len(calls) == 1
    assert predict(A, False) == [f"skipped {scan}: its outputs in {out} are complete, from the same model, input, "
                                 "options and code (--force predicts it again)"] and len(calls) == 1
    assert predict(B, False) == [] and len(calls) == 2       # another commit
    assert predict(B, True) == [] and len(calls) == 3        # the same commit, edited since
    assert predict(B, True) == [f"skipped {scan}: its outputs in {out} are complete, from the same model, input, "
                                "options and code; the code had uncommitted changes then and has now, which are "
                                "not compared (--force predicts it again)"] and len(calls) == 3
    assert predict(None, None) == [] and len(calls) == 4     # no checkout (an installed wheel): the version alone
    assert predict(None, None) != [] and len(calls) == 4
