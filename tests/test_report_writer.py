"""One ``report`` at a time writes its ``--out`` folder, and a report stopped while it works leaves the
previous report whole (``pointgeope/report/__init__.py``: ``make_report``, ``write_report``)."""
from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pointgeope.cli import main as cli
from tests.test_report import make_runs

FILES = ("report.md", "report.json", "report.csv", "iou_per_class.png", "confusion_run.png")

# A report whose figures wait (a slow matplotlib): it says when it makes its first, then sleeps, holding --out.
SLOW_REPORT = """
import sys, time
from pathlib import Path

from pointgeope.cli import main
from pointgeope.report import plots

def waiting(fig, *path):
    Path(sys.argv[1]).write_text("making the figures")
    time.sleep(120)

plots._png = plots._save = waiting  # (_save: the writer of each figure before they were made first)
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module", autouse=True)
def figures_of_their_data():
    """Each figure as bytes of what it shows (its runs' names and pooled confusion), not drawn: these tests are of
    the writing (the lock, the order, which files stand), to which a figure is bytes; matplotlib was most of their
    time. tests/test_report.py draws and checks the figures. The slow report's process draws its own."""
    from pointgeope.report import plots

    def shown(runs) -> bytes:
        return b"\x89PNG " + repr([(run.name, run.confusion.tolist()) for run in runs]).encode()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "iou_bar_chart", shown)
        patch.setattr(plots, "confusion_heatmap", lambda run: shown([run]))
        yield


def _contents(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in FILES}


def _wait_for(flag: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert flag.exists(), f"the first report never made a figure (exit code {proc.poll()})"


@pytest.fixture(scope="module")
def two_reports(tmp_path_factory) -> tuple[Path, Path, dict[str, bytes], dict[str, bytes]]:
    """Two runs' reports, made once for the tests that stop a report: the geope run, the rpe run's report folder (the
    previous report, which each test copies), its files and those of the geope run's report written whole elsewhere."""
    root = tmp_path_factory.mktemp("two_reports")
    rpe, geope = make_runs(root)
    out, ref = root / "out", root / "ref"
    assert cli(["report", str(rpe), "--out", str(out), "--names", "run"]) == 0
    assert cli(["report", str(geope), "--out", str(ref), "--names", "run"]) == 0
    return geope, out, _contents(out), _contents(ref)


def test_a_second_report_into_the_same_out_is_refused_and_a_stopped_one_leaves_the_previous(tmp_path, two_reports):
    """Before: two reports into one --out both succeeded (exit 0) and could leave report.md of one beside the
    figures of the other; a report stopped after its tables left new tables beside the old figures. Now the
    second is refused in one line naming the first (pid, command, lock), exit 2, as every writing command
    is; the stopped one leaves the previous report byte for byte, and the same command then writes its own."""
    geope, previous, before, expected = two_reports
    out = tmp_path / "out"
    shutil.copytree(previous, out)                                     # the previous report, a copy of its own
    assert _contents(out) == before and expected != before

    command = ["report", str(geope), "--out", str(out), "--names", "run"]
    flag = tmp_path / "flag"
    first = subprocess.Popen([sys.executable, "-c", SLOW_REPORT, str(flag), *command],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(flag, first)
        second = subprocess.run([sys.executable, "-m", "pointgeope", *command], capture_output=True, text=True,
                                timeout=120, check=False)
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1 and second.stderr.startswith(
            f"pointgeope report: error: {out} is being written by pid {first.pid} on ")
        assert f"report {geope} --out {out} --names run`" in second.stderr   # the first's command line
        assert second.stderr.endswith(f"(its lock: {out / '.lock'})\n")
        assert _contents(out) == before
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 130 and err == "pointgeope report: interrupted\n"
    assert _contents(out) == before                      # the previous report whole: no new table beside it
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)   # no lock, no temporary file left
    assert cli(command) == 0
    assert _contents(out) == expected


def test_a_report_removes_the_confusion_figures_of_an_earlier_reports_runs_and_nothing_else(tmp_path, capsys):
    """Before: a report into the --out of an earlier one whose runs had other names left their
    ``confusion_<run>.png`` beside its own, which a reader took for current. Now the report removes them,
    says so, and leaves every other file in the folder, whatever its name looks like."""
    rpe, geope = make_runs(tmp_path)
    out = tmp_path / "out"
    assert cli(["report", str(rpe), str(geope), "--out", str(out)]) == 0
    assert {"confusion_rpe.png", "confusion_geope.png"} <= {p.name for p in out.iterdir()}
    kept = ("notes.txt", "confusion.png", "confusion_rpe.png.bak", "my_confusion_x.png", "confusion_x.jpg")
    for name in kept:
        (out / name).write_bytes(b"a user's")
    (out / "confusion_folder.png").mkdir()
    capsys.readouterr()

    assert cli(["report", str(geope), "--out", str(out), "--names", "GeoPE v2"]) == 0
    stdout = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ("report.md", "report.json", "report.csv", "iou_per_class.png", "confusion_GeoPE_v2.png",
         "confusion_folder.png", *kept))
    assert all((out / name).read_bytes() == b"a user's" for name in kept)
    assert stdout.endswith(f"removed (an earlier report's, of runs not in this one):\n  {out / 'confusion_geope.png'}"
                           f"\n  {out / 'confusion_rpe.png'}\n")


def test_a_report_keeps_confusion_figures_that_no_earlier_report_wrote(tmp_path, capsys):
    """Before: a report removed every ``confusion_*.png`` in its --out as "an earlier report's", also a user's
    own figure in a folder that held no report. Only the figures of the runs an earlier ``report.json`` names
    are removed; with no (or an unreadable) ``report.json`` nothing is."""
    rpe, geope = make_runs(tmp_path)
    out = tmp_path / "figures"
    out.mkdir()
    mine = ("confusion_baseline.png", "confusion_rpe_2.png")
    for name in mine:
        (out / name).write_bytes(b"a user's")
    assert cli(["report", str(rpe), "--out", str(out)]) == 0
    assert "removed" not in capsys.readouterr().out
    assert all((out / name).read_bytes() == b"a user's" for name in mine)

    assert cli(["report", str(geope), "--out", str(out)]) == 0       # the earlier report (rpe) is in out now
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ("report.md", "report.json", "report.csv", "iou_per_class.png", "confusion_geope.png", *mine))
    assert capsys.readouterr().out.endswith(f"removed (an earlier report's, of runs not in this one):\n"
                                            f"  {out / 'confusion_rpe.png'}\n")
    (out / "report.json").write_text("{not json")
    assert cli(["report", str(rpe), "--out", str(out)]) == 0
    assert (out / "confusion_geope.png").is_file() and "removed" not in capsys.readouterr().out


class _Killed(BaseException):
    """A ``kill -9`` between two writes: nothing runs after it (no handler, no cleanup of ``--out``)."""


@pytest.mark.parametrize("written", range(6))  # report.md, report.csv, iou_per_class.png, confusion_run.png, record
def test_a_report_killed_between_its_writes_leaves_the_previous_record_naming_what_is_not_of_it(
        tmp_path, monkeypatch, written, two_reports):
    """``report.json`` was the second file written: killed after it, a new record stood beside the previous
    report's csv and figures, which it did not name as other. The record is written last now, with the
    checksum of each output: until it is written the previous report's record stands, and ``report_outputs``
    trusts exactly the files of the report it records."""
    from pointgeope import atomic
    from pointgeope.report import make_report

    geope, previous, before, after = two_reports
    out = tmp_path / "out"
    shutil.copytree(previous, out)                                     # the previous report, a copy of its own
    assert _contents(out) == before and all(before[name] != after[name] for name in FILES)
    real, order = atomic.atomic_open, []

    @contextlib.contextmanager
    def killed_after(path, *args, **kwargs):
        if len(order) == written:
            raise _Killed
        order.append(Path(path).name)
        with real(path, *args, **kwargs) as f:
            yield f

    monkeypatch.setattr(atomic, "atomic_open", killed_after)
    if written < len(FILES):
        with pytest.raises(_Killed):
            make_report([geope], out, ["run"])
    else:
        make_report([geope], out, ["run"])
    monkeypatch.undo()
    assert "report.json" not in order[:-1]  # the record: last, if written at all
    now = _contents(out)
    assert now["report.json"] == (after if written == len(FILES) else before)["report.json"]

    from pointgeope.report import report_outputs

    good, bad = report_outputs(out)
    trusted = {p.name: p.read_bytes() for p in good}
    assert sorted([*trusted, *(p.name for p in bad)]) == sorted(FILES)
    recorded = after if written == len(FILES) else before
    assert trusted == {name: recorded[name] for name in trusted}          # all of one report
    assert sorted(p.name for p in bad) == sorted(set(order) - {"report.json"} if written < len(FILES) else [])


def test_runs_whose_names_share_a_file_name_get_a_confusion_figure_each(tmp_path, capsys):
    """``geope v2`` and ``geope_v2`` are both ``confusion_geope_v2.png``: the second figure overwrote the first."""
    from pointgeope.report import confusion_names

    assert confusion_names(["geope v2", "geope_v2", "rpe"]) == [
        "confusion_geope_v2_1.png", "confusion_geope_v2_2.png", "confusion_rpe.png"]
    rpe, geope = make_runs(tmp_path)
    out = tmp_path / "out"
    assert cli(["report", str(rpe), str(geope), "--names", "geope v2", "geope_v2", "--out", str(out)]) == 0
    assert (out / "confusion_geope_v2_1.png").read_bytes() != (out / "confusion_geope_v2_2.png").read_bytes()
