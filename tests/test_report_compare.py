"""`pointgeope report A B`: runs side by side. Their differences are read as the effect of what differs
between them, so the report says which settings and which data differ (a second run trained for fewer
epochs, or on other data, read as the encoding's effect without a word before), and refuses one run folder
given twice (a comparison of a run with itself)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.report import default_out
from tests.test_report import write_fold
from tests.test_report_mixed import _fold, _with_data

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # they read no figure


def _run(root, name, *overrides, data=None):
    run = root / name
    for k in range(1, 7):
        _fold(run, k, *overrides, f"train.seed={k}", config_in_metrics=k % 2 == 0)
        if data is not None:
            _with_data(run, k, data)
    return run


FILES = {f"Area_{a}": f"sha256:{a}" * 4 for a in range(1, 7)}


def test_settings_the_runs_differ_in_are_named(tmp_path, capsys):
    rpe = _run(tmp_path, "rpe", "model.pe=rpe", "train.epochs=100", data=FILES)
    geope = _run(tmp_path, "geope", "model.pe=geope", "train.epochs=50", "train.device=cpu", data=FILES)
    out = tmp_path / "out"
    assert cli(["report", str(rpe), str(geope), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "- the runs were trained or tested with different settings" in md, md
    assert "  - `model.pe`: rpe `rpe`; geope `geope`" in md, md
    assert "  - `train.epochs`: rpe `100`; geope `50`" in md, md
    notes = md.split("Notes:", 1)[1].split("## Per fold", 1)[0]
    assert "train.device" not in notes and "different data" not in notes, notes
    assert "train.seed" not in notes   # _run gives fold k seed k in both runs: the runs' seeds agree
    assert "`model.pe`: rpe `rpe`; geope `geope`" in capsys.readouterr().out   # the summary on stdout says it
    differences = json.loads((out / "report.json").read_text())["run_differences"]
    assert differences == {"model.pe": {"rpe": "rpe", "geope": "geope"},
                           "train.epochs": {"rpe": 100, "geope": 50}}


def test_runs_on_other_data_are_said_to_compare_unlike_data(tmp_path):
    rpe = _run(tmp_path, "rpe", "model.pe=rpe", data=FILES)
    geope = _run(tmp_path, "geope", "model.pe=geope", data={**FILES, "Area_2": "sha256:other"})
    out = tmp_path / "out"
    assert cli(["report", str(rpe), str(geope), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert ("- the runs read different data (the checksums of Area_2 differ): their differences compare unlike "
            "data sets.") in md, md
    assert "- the runs were trained or tested with one setting apart: `model.pe` (rpe `rpe`; geope `geope`)." in md
    assert "data.files.Area_2" not in md.split("Notes:", 1)[1]   # one line for the data, not a checksum per key
    differences = json.loads((out / "report.json").read_text())["run_differences"]
    assert sorted(differences) == ["data.files.Area_2", "model.pe"]


def test_runs_of_one_method_with_other_seeds_are_said_to_differ_by_chance(tmp_path):
    """Two runs of one config with other seeds: their +x.x differences are seed noise, said so (before: the
    tables alone, read as an effect)."""
    def run(name, seed, *overrides):
        for k in range(1, 7):
            _fold(tmp_path / name, k, "model.pe=geope", f"train.seed={seed}", *overrides, config_in_metrics=k % 2 == 0)
            _with_data(tmp_path / name, k, FILES)
        return tmp_path / name

    a, b, out = run("a", 0), run("b", 7), tmp_path / "out"
    assert cli(["report", str(a), str(b), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "- the runs differ in their seed alone (`train.seed`: a `0`; b `7`): their differences are " in md, md
    assert "not an effect" in md and "different settings" not in md
    assert json.loads((out / "report.json").read_text())["run_differences"] == {"train.seed": {"a": 0, "b": 7}}
    run("a", 0, "model.planes=[16, 32, 64, 128, 256]")             # now a method apart too
    assert cli(["report", str(a), str(b), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "  - `train.seed`: a `0`; b `7`" in md and "  - `model.planes`: a " in md and "seed alone" not in md, md


def test_runs_alike_but_for_what_changes_no_result_get_no_note(tmp_path):
    a = _run(tmp_path, "a", "model.pe=rpe", "train.threads=2", data=FILES)
    b = _run(tmp_path, "b", "model.pe=rpe", "data.num_workers=0", "data.root=/scratch/s3dis", data=FILES)
    out = tmp_path / "out"
    assert cli(["report", str(a), str(b), "--out", str(out)]) == 0
    assert "different settings" not in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["run_differences"] == {}


def test_one_run_folder_given_twice_is_refused(tmp_path, capsys):
    """Before: ``--names`` (the advice of the refusal of two equal names) or a link gave a table of the run
    beside itself, its differences +0.0, as a comparison of two runs."""
    run = _run(tmp_path, "rpe", "model.pe=rpe")
    (tmp_path / "link").symlink_to(run)
    for args, said in (([str(run), str(run), "--names", "a", "b"], f"got {run} given twice"),
                       ([str(run), str(tmp_path / "link")], f"got {tmp_path / 'link'} and {run} are one folder")):
        assert cli(["report", *args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "give each run folder once" in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("names", "bad"), [(["", "rpe"], 0), (["a", "   "], 1), (["a\nb", "c"], 0),
                                            (["a", "x\x1b[31m"], 1)])
def test_a_run_name_that_cannot_head_a_row_is_refused(tmp_path, capsys, names, bad):
    """Before: `--names '' rpe` named both runs rpe in every table (the empty name became the folder's, after
    the check that names differ); a blank name headed a row of spaces; a newline split report.md's rows."""
    runs = [_run(tmp_path, "rpe", "model.pe=rpe"), _run(tmp_path, "geope", "model.pe=geope")]
    assert cli(["report", *map(str, runs), "--names", *names, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pointgeope report: error: run {runs[bad]}: expected a name of visible characters on one line, "
                   f"got {names[bad]!r} (blank or with a control character such as a newline); pass --names with "
                   "one"], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("names", [["rpe", "rpe "], ["a b", "a  b"], [" geope", "geope"]])
def test_names_told_apart_by_spaces_alone_are_refused(tmp_path, capsys, names):
    """Before: `--names rpe 'rpe '` was taken; report.md's rows (markdown drops the spaces around a cell and
    collapses those inside) read `rpe`, `rpe` and `rpe - rpe`: the runs could not be told apart."""
    runs = [_run(tmp_path, "rpe", "model.pe=rpe"), _run(tmp_path, "geope", "model.pe=geope")]
    assert cli(["report", *map(str, runs), "--names", *names, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope report: error: expected distinct run names, got {names!r} (told apart by spaces alone, which a "
        "table drops); pass --names"]
    assert not (tmp_path / "out").exists()


def test_a_refused_name_is_said_in_a_bounded_line(tmp_path):
    """Before: a refused name, or the list of names, was said whole: a name of 10,000 characters made a refusal
    line as long."""
    from pointgeope.report.fold_file import ReportError
    from pointgeope.report.runs import load_runs

    runs = [tmp_path / "a", tmp_path / "b"]
    cases = [(["x" * 10_000 + "\n", "b"], "x" * 10_000 + "\n"),     # the name refused
             (["y" * 10_000] * 2, ["y" * 10_000] * 2),                # the names that are not distinct
             (["z" * 10_000], ["z" * 10_000])]                        # the names, one fewer than the runs
    for names, said in cases:
        with pytest.raises(ReportError) as caught:
            load_runs(runs, names)
        text = str(caught.value)
        assert len(text) < 800 and "\n" not in text, text
        assert f"... ({len(repr(said)):,} characters)" in text, text


def test_long_run_names_make_file_names_the_file_system_takes(tmp_path, capsys):
    """Before: a name of 300 characters made `confusion_<name>.png` (and the default folder `report_<a>_vs_<b>`)
    longer than 255 bytes: an OSError traceback. Each name keeps its first 60 characters there, names that then
    agree are numbered, and the tables keep the names whole."""
    runs = [_run(tmp_path, "rpe", "model.pe=rpe"), _run(tmp_path, "geope", "model.pe=geope")]
    names = ["x" * 300, "x" * 299 + "y"]
    assert cli(["report", *map(str, runs), "--names", *names]) == 0
    out = tmp_path / f"report_{'x' * 60}_vs_{'x' * 60}"
    assert sorted(p.name for p in out.glob("confusion_*")) == [f"confusion_{'x' * 60}_{i}.png" for i in (1, 2)]
    assert [run["name"] for run in json.loads((out / "report.json").read_text())["runs"]] == names
    capsys.readouterr()


def test_many_runs_of_long_names_make_a_default_folder_the_file_system_takes(tmp_path, capsys):
    """Before: six runs of 50-character folder names made the default folder report_<run1>_vs_..._vs_<run6>, 330
    characters, beyond the 255 bytes of a file name: an OSError traceback. Now the first run's name, how many
    more, and 8 hex digits of the names: another list of runs gets another folder."""
    runs = [_run(tmp_path, f"ptv3_geope_s3dis_lr0.002_batch8_epochs100_seed{i}_abc", f"train.seed={i}")
            for i in range(6)]
    assert cli(["report", *map(str, runs)]) == 0
    capsys.readouterr()
    [folder] = tmp_path.glob("report_*")
    assert len(folder.name.encode()) <= 255
    assert re.fullmatch(f"report_{re.escape(runs[0].name)}_and_5_more_[0-9a-f]{{8}}", folder.name), folder
    assert [run["name"] for run in json.loads((folder / "report.json").read_text())["runs"]] == [r.name for r in runs]
    names = [run.name for run in runs]
    others = [default_out(runs[:5], names[:5]), default_out([runs[0], *runs[:0:-1]], [names[0], *names[:0:-1]])]
    assert len({folder, *others}) == 3 and all(other.name.startswith(f"report_{names[0]}_and_") for other in others)


def test_report_json_names_the_file_and_the_counts_of_every_fold(tmp_path):
    """Every number of report.json traces to a file: each fold names its metrics.json, the sha256 of the bytes
    its scores were read from (a fold evaluated again since shows another), and its confusion counts, whose
    sum is the pooled confusion. Before: the area and the scores alone."""
    import hashlib

    run = _run(tmp_path, "rpe", "model.pe=rpe")
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out)]) == 0
    entry = json.loads((out / "report.json").read_text())["runs"][0]
    total = None
    for fold in entry["per_fold"]:
        path = run / f"area_{fold['fold']}" / "metrics.json"
        assert fold["metrics"] == str(path)
        assert fold["metrics_sha256"] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        assert fold["confusion"] == json.loads(path.read_text())["confusion"]
        total = fold["confusion"] if total is None else \
            [[a + b for a, b in zip(r, s, strict=True)] for r, s in zip(total, fold["confusion"], strict=True)]
    assert total == entry["pooled_confusion"]


def test_a_fold_being_written_now_is_named_not_pooled(tmp_path):
    """A fold whose folder a live process holds (``pointgeope evaluate`` testing it again with other eval
    settings, a training at work) is left out and named as such. Before: its old metrics.json was pooled
    as finished, and once the new predictions were written the fold was said to be 'a test stopped between
    the two writes' while the test was running. A lock file left by a process that has ended changes nothing,
    nor does one whose pid a process holding no lock has taken since (a pid reused after a reboot)."""
    import os
    import subprocess
    import sys

    run = _run(tmp_path, "rpe", "model.pe=rpe")
    holder = ("import sys, time\nfrom pointgeope.lock import folder_lock\n"
              "with folder_lock(sys.argv[1], 'pointgeope evaluate rpe/area_3 eval.vote=mean'):\n"
              "    print('locked', flush=True)\n    time.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", holder, str(run / "area_3")], stdout=subprocess.PIPE, text=True)
    out = tmp_path / "out"
    try:
        assert writer.stdout.readline().strip() == "locked"
        since = json.loads((run / "area_3" / ".lock").read_text())["since"]
        assert cli(["report", str(run), "--out", str(out)]) == 0
        md = (out / "report.md").read_text()
        assert f"Area_3 (being written now by pid {writer.pid} (since {since}): report again" in md, md
        assert json.loads((out / "report.json").read_text())["runs"][0]["folds"] == [
            "Area_1", "Area_2", "Area_4", "Area_5", "Area_6"]
    finally:
        writer.kill()
        writer.wait()
    six = [f"Area_{k}" for k in range(1, 7)]
    assert cli(["report", str(run), "--out", str(out)]) == 0    # the writer has ended: its lock file is left over
    assert os.path.exists(run / "area_3" / ".lock")
    assert json.loads((out / "report.json").read_text())["runs"][0]["folds"] == six
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # the dead pid taken again
    try:
        record = json.loads((run / "area_3" / ".lock").read_text())
        (run / "area_3" / ".lock").write_text(json.dumps({**record, "pid": other.pid}))
        assert cli(["report", str(run), "--out", str(out)]) == 0
        assert json.loads((out / "report.json").read_text())["runs"][0]["folds"] == six
    finally:
        other.kill()
        other.wait()


def test_tables_of_fewer_folds_are_not_titled_six_fold(tmp_path, capsys):
    """The Area 5 protocol (``train --test-area 5``, then ``report``) gave a table titled "S3DIS 6-fold, pooled
    over the test areas (standard 6-fold number)" of Area_5 alone: cited as a 6-fold number, it is not one."""
    import numpy as np

    from tests.test_report import write_fold

    def run(name, folds):
        for k in folds:
            write_fold(tmp_path / name, k, 10 * np.eye(13, dtype=np.int64))
        return str(tmp_path / name)

    titles = {}
    for case, runs in {"area5": [run("a5", [5])], "four": [run("f1", [1, 2, 4, 5]), run("f2", [1, 2, 4, 5])],
                       "unlike": [run("u1", [5]), run("u2", [1, 5])], "six": [run("s", range(1, 7))]}.items():
        assert cli(["report", *runs, "--out", str(tmp_path / case)]) == 0
        md = (tmp_path / case / "report.md").read_text()
        titles[case] = [md.splitlines()[0]] + [line for line in md.split("## Per fold")[0].splitlines()
                                               if line.startswith("**")]
    assert titles["area5"] == ["# S3DIS report: Area_5", "**S3DIS Area_5, pooled over the test areas, %**",
                               "**S3DIS Area_5, mean of the per-fold scores, %**"]
    four = "4 of 6 folds (Area_1, Area_2, Area_4, Area_5)"
    assert titles["four"] == [f"# S3DIS report: {four}", f"**S3DIS, {four}, pooled over the test areas, %**",
                              f"**S3DIS, {four}, mean of the per-fold scores, %**"]
    assert titles["unlike"][1] == "**S3DIS, folds per run (column *folds*), pooled over the test areas, %**"
    assert titles["six"] == ["# S3DIS 6-fold cross-validation report",
                             "**S3DIS 6-fold, pooled over the test areas (standard 6-fold number), %**",
                             "**S3DIS 6-fold, mean of the per-fold scores, %**"]


def test_a_fold_of_other_test_areas_is_refused_with_what_to_do(tmp_path, capsys):
    """A fold of an edited folds.json (fold 1 testing Area_3, or Area_1 and Area_2) and a metrics.json copied
    into another fold's folder were refused without a word of why or what to do."""
    run = _run(tmp_path, "rpe", "model.pe=rpe")
    path = run / "area_1" / "metrics.json"
    kept = path.read_text()
    for area, fold, said in (("Area_3", 1, "the report pools S3DIS's six folds, fold K testing Area_K alone"),
                             (["Area_1", "Area_2"], 1, "fold of an edited folds.json cannot be pooled"),
                             ("Area_2", 2, (f"another fold's folder: evaluate the fold again (pointgeope evaluate "
                                            f"{run / 'area_1'})"))):
        path.write_text(json.dumps({**json.loads(kept), "area": area, "fold": fold}))
        assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "expected the results of Area_1 (fold 1)" in err[0] and said in err[0], err


def test_a_run_without_recorded_settings_is_named_as_not_compared(tmp_path):
    """A run whose folds record no settings (an older metrics.json copied without its config.yaml) was left out
    of the comparison without a word: no note, read as runs trained alike, and two runs differing in their
    seed alone beside it were said to differ 'in their seed alone'."""
    def run(name, seed):
        for k in range(1, 7):
            _fold(tmp_path / name, k, "model.pe=rpe", f"train.seed={seed}", config_in_metrics=k % 2 == 0)
            _with_data(tmp_path / name, k, FILES)
        return str(tmp_path / name)

    a, b, old, out = run("a", 0), run("b", 9), tmp_path / "old", tmp_path / "out"
    for k in range(1, 7):
        write_fold(old, k, 10 * np.eye(13, dtype=np.int64))        # no "config", no config.yaml
    for runs in ([a, str(old)], [a, b, str(old)]):
        assert cli(["report", *runs, "--out", str(out)]) == 0
        notes = (out / "report.md").read_text().split("Notes:", 1)[1].split("## Per fold", 1)[0]
        assert "- old: no settings recorded" in notes and "not compared" in notes and "seed alone" not in notes, notes
    assert "- the runs were trained or tested with one setting apart: `train.seed` (a `0`; b `9`)." in notes, notes
    assert cli(["report", a, b, "--out", str(out)]) == 0             # the two alone: their seed alone, said so
    assert "- the runs differ in their seed alone" in (out / "report.md").read_text()


def test_runs_of_other_seeds_and_other_folds_are_not_said_to_differ_by_their_seed_alone(tmp_path):
    """A run of six folds beside one of Area_5 alone, seeds apart: they were said to differ 'in their seed
    alone', their differences 'the spread between seeds', beside the note that they compare unlike test sets."""
    def run(name, seed, folds):
        for k in folds:
            _fold(tmp_path / name, k, "model.pe=geope", f"train.seed={seed}", config_in_metrics=k % 2 == 0)
            _with_data(tmp_path / name, k, FILES)
        return str(tmp_path / name)

    out = tmp_path / "out"
    assert cli(["report", run("six", 0, range(1, 7)), run("area5", 7, [5]), "--out", str(out)]) == 0
    notes = (out / "report.md").read_text().split("Notes:", 1)[1].split("## Per fold", 1)[0]
    assert "- the runs cover different folds" in notes and "seed alone" not in notes, notes
    assert "- the runs were trained or tested with one setting apart: `train.seed` (six `0`; area5 `7`)." in notes


def test_a_fold_locked_from_another_host_is_named_with_what_to_do(tmp_path):
    """A run folder on a shared file system, a fold tested again on another node: its lock names that host,
    where this one cannot see whether the process lives. Before, the fold's old metrics.json was pooled as
    finished (a lock of another host was read as no writer); now it is left out, as a writer of this folder
    would be refused, with the file to delete once that process has ended."""
    import socket

    run = _run(tmp_path, "rpe", "model.pe=rpe")
    lock = run / "area_3" / ".lock"
    lock.write_text(json.dumps({"pid": 4242, "host": socket.gethostname() + "-node7", "since": "2026-11-28 09:00:00",
                                "command": "pointgeope evaluate rpe/area_3"}))
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert (f"Area_3 (locked by pid 4242 on {socket.gethostname()}-node7 (since 2026-11-28 09:00:00), which cannot "
            f"be checked from here: report again once it has ended, or delete {lock} if it has)") in md, md
    assert "Area_3" not in json.loads((out / "report.json").read_text())["runs"][0]["folds"]
    lock.unlink()
    assert cli(["report", str(run), "--out", str(out)]) == 0
    assert "Area_3" in json.loads((out / "report.json").read_text())["runs"][0]["folds"]


def test_an_ablation_names_a_trial_being_written_whole(tmp_path, capsys):
    """ablate keeps a missing trial's reason up to its first ';': the fold being written was cut to 'being
    written now by pid N (since T)' with two parentheses left open and without what to do."""
    import subprocess
    import sys

    from pointgeope.report.seeds import write_trials

    runs = [_run(tmp_path, f"seed_{s}", "model.pe=rpe") for s in (0, 1)]
    holder = ("import sys, time\nfrom pointgeope.lock import folder_lock\nwith folder_lock(sys.argv[1], 'train'):\n"
              "    print('locked', flush=True)\n    time.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", holder, str(runs[1] / "area_2")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout.readline().strip() == "locked"
        write_trials([("rpe", s, run) for s, run in enumerate(runs)], tmp_path / "out", fold=2)
    finally:
        writer.kill()
        writer.wait()
    line = next(x for x in (tmp_path / "out" / "ablation.md").read_text().splitlines() if "seed 1 missing" in x)
    assert f"(folds missing: Area_2 (being written now by pid {writer.pid} (since " in line, line
    assert line.endswith("): report again once it has ended)))"), line
    capsys.readouterr()
