"""Tests of pointgeope/report/'s inputs: a run folder without, or with damaged or foreign, ``metrics.json`` files,
fold folders beyond the six, a fold folder or an ablation's folder given as the run, an ``--out`` inside a
fold: each refused or named in one line, never pooled."""
from __future__ import annotations

import json
import re

import pytest

from pointgeope import cli
from pointgeope.constants import NUM_CLASSES
from pointgeope.report.fold_file import ReportError
from pointgeope.report.runs import load_run
from tests.test_report import make_runs, perfect, write_fold

C = NUM_CLASSES


def test_run_without_metrics_is_an_error_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty_run"
    (empty / "area_1").mkdir(parents=True)
    with pytest.raises(ReportError, match=r"empty_run: no complete fold.*Area_1 \(no metrics.json\)"):
        load_run(empty)
    assert cli.main(["report", str(empty)]) == 2
    assert "empty_run: no complete fold" in capsys.readouterr().err
    with pytest.raises(ReportError, match="nope: expected a run folder"):
        load_run(tmp_path / "nope")


def test_malformed_metrics_file_is_named(tmp_path):
    run = tmp_path / "run"
    write_fold(run, 1, perfect())
    path = run / "area_1" / "metrics.json"
    path.write_text('{"area": "Area_1",\n "confusion": [1, 2')
    with pytest.raises(ReportError, match=r"area_1/metrics.json:2: not valid JSON"):
        load_run(run)
    path.write_text(json.dumps({"area": "Area_1", "fold": 1, "confusion": [[1, 2], [3, 4]], "complete": True}))
    with pytest.raises(ReportError, match=r"13 x 13 non-negative integer counts, got shape \(2, 2\)"):
        load_run(run)
    path.write_text(json.dumps({"area": "Area_2", "fold": 2, "confusion": perfect().tolist(), "complete": True}))
    with pytest.raises(ReportError, match="expected the results of Area_1"):
        load_run(run)


@pytest.mark.parametrize("edit, message", [
    ({"complete": "true"}, r"expected 'complete' true or false, got \"true\""),     # was read as unfinished
    ({"complete": 1}, r"expected 'complete' true or false, got 1"),
    ({"confusion": [[True] + [0] * (C - 1)] + [[0] * C] * (C - 1)},                  # counted as 1
     r"expected 'confusion' as 13 x 13 non-negative integer counts, got true at \[0\]\[0\]"),
    ({"confusion": [[0.5] + [0] * (C - 1)] + [[0] * C] * (C - 1)}, r"expected 'confusion' .* got 0.5 at \[0\]\[0\]"),
    ({"confusion": [[-1] + [5] * (C - 1)] + [[5] * C] * (C - 1)},                      # scored with a negative TP
     r"expected 'confusion' as 13 x 13 non-negative integer counts, got -1 at \[0\]\[0\]"),
    ({"confusion": [[0, 2**62] + [0] * (C - 2)] + [[0] * C] * (C - 1)},                  # int64 sums overflow
     r"expected 'confusion' .* got 4611686018427387904 at \[0\]\[1\]"),
    ({"area": "Area_2"}, r"expected the results of Area_1 \(fold 1\), got area='Area_2' fold=1; the report pools "
                         r"S3DIS's six folds, .* a fold of an edited folds.json cannot be pooled with them$"),
    ({"confusion": [[0] * C] * C},                                                    # pooled as a complete fold
     r"'confusion' counts no point; evaluate the fold again"),
    # a traceback (int(None), int("x"), int([1])), or read as fold 1 (int(1.7), int(True))
    ({"fold": None}, r"expected 'fold' a fold number \(an integer\), got null; evaluate the fold again"),
    ({"fold": "x"}, r"expected 'fold' a fold number \(an integer\), got \"x\""),
    ({"fold": [1]}, r"expected 'fold' a fold number \(an integer\), got \[1\]"),
    ({"fold": 1.7}, r"expected 'fold' a fold number \(an integer\), got 1.7"),
    ({"fold": True}, r"expected 'fold' a fold number \(an integer\), got true"),
    ({"class_names": 5}, r"expected class_names a list of distinct names, one per class "          # a traceback
                         r"\(S3DIS: \['ceiling', .*\]\), got 5$"),
    ({"class_names": ["wall", "wall"]},
     r"expected class_names a list of distinct names, .* got \[\"wall\", \"wall\"\]$"),
])
def test_a_metrics_file_that_is_not_what_evaluate_writes_is_named(tmp_path, edit, message):
    run = tmp_path / "run"
    write_fold(run, 1, perfect())
    write_fold(run, 2, perfect())
    path = run / "area_1" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(ReportError, match=rf"^{re.escape(str(path))}: {message}"):
        load_run(run)


def test_out_into_a_fold_folder_is_refused(tmp_path, capsys):
    """report --out RUN/area_1 wrote report.md, PNGs... into the folder train and evaluate own."""
    rpe, _ = make_runs(tmp_path)
    for out in (rpe / "area_1", rpe / "area_1" / "sub"):
        assert cli.main(["report", str(rpe), "--out", str(out)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"pointgeope report: error: --out {out}: inside the fold folder {rpe / 'area_1'}, which train and "
            "evaluate write; give a folder outside the runs' fold folders (default: RUN/report)")
    assert not (rpe / "area_1" / "report.md").exists() and not (rpe / "area_1" / "sub").exists()


def test_fold_folders_beyond_the_six_are_named_not_dropped_silently(tmp_path, capsys):
    """A complete fold of an Area_7 (prepare accepts it, train --cv trains it) was left out of the report
    without a word. The six-fold report still pools Area_1..Area_6, and names the folds it leaves out."""
    run = tmp_path / "seven"
    for k in (6, 7, 10):
        write_fold(run, k, perfect())
    (run / "area_8").mkdir()                      # no metrics.json: not a result, not named
    (run / "area_old").mkdir()                    # not a fold folder's name (area_K): not named either
    (run / "area_old" / "metrics.json").write_text("{}")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    note = ("not reported: area_7, area_10 (the report covers S3DIS's six folds, Area_1..Area_6; report those "
            "folds' metrics.json on their own)")
    assert f"- seven: {note}." in capsys.readouterr().out
    assert f"- seven: {note}." in (tmp_path / "out" / "report.md").read_text()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["runs"][0]["folds"] == ["Area_6"] and report["runs"][0]["folds_unreported"] == ["area_7", "area_10"]
    (run / "area_6" / "metrics.json").unlink()
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    assert capsys.readouterr().err.rstrip().endswith(f"; {note}")


def test_a_metrics_file_without_complete_is_damaged_not_unfinished(tmp_path):
    """``{}`` was listed as "Area_1 (incomplete)" and a file without "complete" as "unfinished: trained 5 of 5
    epochs"; evaluate always writes the key, so its absence is a damaged file."""
    run = tmp_path / "run"
    write_fold(run, 1, perfect())
    path = run / "area_1" / "metrics.json"
    for data in ({}, {k: v for k, v in json.loads(path.read_text()).items() if k != "complete"}):
        path.write_text(json.dumps({**data, "trained_epochs": 5, "epochs": 5} if data else data))
        with pytest.raises(ReportError) as err:
            load_run(run)
        assert str(err.value) == (f"{path}: expected 'complete' true or false, got no such key; evaluate the fold "
                                  "again (pointgeope evaluate RUN/area_K)")


def test_a_fold_folder_given_as_the_run_names_its_run(tmp_path, capsys):
    """``report runs/x/area_1`` said "no complete fold ... expected runs/x/area_1/area_K/metrics.json"."""
    run = tmp_path / "run"
    write_fold(run, 1, perfect())
    assert cli.main(["report", str(run / "area_1"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope report: error: {run / 'area_1'}: a fold folder (RUN/area_K), not a run folder holding area_1 .. "
        f"area_6; give its run folder, {run}"]


def test_an_ablations_run_folder_names_its_report(tmp_path, capsys):
    """``report RUN`` of ``ablate --run-dir RUN`` said "no complete fold ... (no area_1/ folder), ...": the
    trials are in RUN/<preset>/seed_<s>, their report in RUN/report/fold_K."""
    run = tmp_path / "abl"
    write_fold(run / "rpe" / "seed_0", 1, perfect())
    (run / "report" / "fold_1").mkdir(parents=True)
    (run / "report" / "fold_1" / "ablation.md").write_text("# Ablation\n")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope report: error: {run}: an ablation's run folder (pointgeope ablate), not a training's: its "
        f"report is {run / 'report' / 'fold_1' / 'ablation.md'}; `pointgeope report {run / '<preset>' / 'seed_<s>'}` "
        "reports one trial"]


def test_an_ablations_run_folder_without_a_report_is_named(tmp_path, capsys):
    """Every trial unfinished (train.epochs_per_run): ablate writes no report yet, and ``report RUN`` said
    "no complete fold ... (no area_1/ folder)" of a folder whose trials are in RUN/<preset>/seed_<s>."""
    run = tmp_path / "abl"
    (run / "rpe" / "seed_0" / "area_1").mkdir(parents=True)
    (run / "rpe" / "seed_0" / "area_1" / "last.pt").write_bytes(b"a checkpoint")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope report: error: {run}: an ablation's run folder (pointgeope ablate), not a training's: no "
        "report yet (no trial has finished: rerun its ablate command to continue them); "
        f"`pointgeope report {run / '<preset>' / 'seed_<s>'}` reports one trial"]


def test_an_older_ablations_report_is_named_where_that_version_wrote_it(tmp_path, capsys):
    """ablate wrote one report for the folder, RUN/report/ablation.md, before it wrote one a fold
    (RUN/report/fold_K/, 2026-11-27): ``report RUN`` of such a folder, every trial complete, said "no report yet (no
    trial has finished: ...)"."""
    run = tmp_path / "abl"
    for preset in ("rpe", "geope"):
        write_fold(run / preset / "seed_0", 1, perfect())
    (run / "report").mkdir()
    (run / "report" / "ablation.md").write_text("# Ablation: rpe, geope x seeds 0, fold 1\n")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope report: error: {run}: an ablation's run folder (pointgeope ablate), not a training's: its "
        f"report is {run / 'report' / 'ablation.md'} (an older pointgeope's, one for the folder: its ablate command, "
        "run again, skips the complete trials and writes one a fold, report/fold_K); "
        f"`pointgeope report {run / '<preset>' / 'seed_<s>'}` reports one trial"]


@pytest.mark.parametrize("finished", [1, 2])
def test_an_ablation_stopped_before_its_report_counts_its_complete_trials(tmp_path, capsys, finished):
    """ablate stopped after its trials but before the report (or an older ablate's trial that went on without it):
    ``report RUN`` said "no trial has finished" of complete trials."""
    run = tmp_path / "abl"
    write_fold(run / "rpe" / "seed_0", 1, perfect())
    write_fold(run / "geope" / "seed_0", 1, perfect(), complete=finished == 2)
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"not a training's: no report yet ({finished} of 2 trials complete: rerun its ablate command to " \
           f"{'write it' if finished == 2 else 'continue the others and write it'}); `pointgeope report" in line, line


def test_an_unfinished_folds_damaged_epochs_are_said_on_one_line_and_marked(tmp_path, capsys):
    """An unfinished fold's ``metrics.json`` whose ``epochs`` holds a newline (edited or damaged): the note and the
    fold's table row say it as repr writes it, marked (looks damaged), each on one line; sound counts as they are.
    Before: the value verbatim, the newline forging a list item ``- injected`` and cutting the table row in two."""
    run = tmp_path / "run"
    for k in range(1, 7):
        write_fold(run, k, perfect())
    path = run / "area_2" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "complete": False, "trained_epochs": 3,
                                "epochs": "30\n- injected"}))
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert not any(line.startswith("- injected") for line in lines)
    reason = "unfinished: trained 3 of '30\\n- injected' (looks damaged) epochs"
    assert f"- run: folds missing: Area_2 ({reason}); pooled over 5 of 6 folds: Area_1, Area_3, Area_4, Area_5, " \
           "Area_6." in lines
    assert any(line.startswith(f"| Area_2 | missing ({reason}) |") for line in lines)
