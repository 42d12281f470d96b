"""bench/suite_time.py: the counts of pytest's summary line, its slowest tests, and the command it times (the
Makefile's test target's). The script itself runs the suite: its run is recorded in bench/results, not here."""
from __future__ import annotations

import sys

import pytest

import suite_time


@pytest.mark.parametrize("line, counts", [
    ("=========== 4667 passed, 52 skipped, 3 warnings in 532.10s (0:08:52) ===========",
     {"passed": 4667, "skipped": 52, "warnings": 3}),
    ("== 2 failed, 10 passed, 1 error in 3.20s ==", {"failed": 2, "passed": 10, "errors": 1}),
    ("7 passed, 1 deselected, 1 warning in 0.52s", {"passed": 7, "deselected": 1, "warnings": 1}),     # -q
])
def test_the_summary_lines_counts_are_read_and_the_others_are_zero(line, counts):
    output = f"tests/x.py ..  [100%]\n1 passed in the name of a test in 2s\n{line}\n"
    assert suite_time.summary_counts(output) == {outcome: counts.get(outcome, 0) for outcome in suite_time.OUTCOMES}


def test_output_without_a_summary_line_is_refused():
    with pytest.raises(ValueError, match="no summary line"):
        suite_time.summary_counts("ImportError while loading conftest '/repo/tests/conftest.py'.\n")


def test_the_slowest_rows_keep_their_order_phase_and_test_id():
    output = ("=== slowest 30 durations ===\n41.20s call     tests/model/test_x.py::test_y[a b-1]\n"
              "3.05s setup    tests/engine/test_z.py::test_w\n0.50s teardown tests/q.py::t\n"
              "=== 3 passed in 45.00s ===\n")
    assert suite_time.slowest(output, keep=2) == [
        {"seconds": 41.2, "phase": "call", "test": "tests/model/test_x.py::test_y[a b-1]"},
        {"seconds": 3.05, "phase": "setup", "test": "tests/engine/test_z.py::test_w"}]


def test_the_command_is_make_tests_pytest_with_the_selection_appended(monkeypatch):
    monkeypatch.setattr(suite_time.shutil, "which", lambda name: None)
    assert suite_time.command(2, ["tests/test_h5.py", "-k", "atomic"]) == [
        sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", f"--durations={suite_time.SLOWEST}",
        "tests/test_h5.py", "-k", "atomic"]
    monkeypatch.setattr(suite_time.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert suite_time.command(0, [])[:4] == ["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24 -noreset"]


def test_a_run_without_a_summary_line_says_pytests_error_line_and_exits_2(monkeypatch, capsys):
    """pytest's usage error (a bad ``--select``) printed no summary line: the run's output was captured, so a
    ValueError that said "see its output" showed nothing of it."""
    said = "pytest: error: unrecognized arguments: --bogus-flag"
    monkeypatch.setattr(suite_time.subprocess, "run", lambda cmd, **kw: suite_time.subprocess.CompletedProcess(
        cmd, 4, stdout="", stderr=f"ERROR: usage: pytest [options]\n{said}\n  rootdir: /repo\n"))
    with pytest.raises(SystemExit) as exit_:
        suite_time.run(0, ["--bogus-flag"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "exited 4" in err and "--bogus-flag" in err
