"""The tests step of bench/gpu_check.py cut off before pytest's summary: what its progress marks record."""
from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_tests_step_cut_short_records_what_had_reported(tmp_path):
    """Run 8's tests step ran out of its 120 s before pytest's summary (``summary`` None, the step failed): it
    now records the outcomes its log's progress marks show, which are those of the summary pytest printed over
    the same paths in the second call (``h200_run8b_tests.txt``: 941 passed, 124 skipped)."""
    import gpu_check

    log = (REPO / "bench/results/gpu/h200_run8_tests_timeout.txt").read_text()
    (tmp_path / "tests.log").write_text(log)
    step = {"ok": False, "rc": "timeout", "seconds": 120.0, "log": "tests.log", "tail": log[-1500:]}

    class Cut:                                        # gpu_runner.Check as far as step_tests uses it
        args = gpu_check.argparse.Namespace(tests_workers=12, tests="", tests_paths=["tests/model"], tests_limit=120)
        logs = tmp_path

        def run(self, name, cmd, limit):
            return step

        def write(self):
            pass

    gpu_check.step_tests(Cut(), sys.executable)
    printed = re.search(r"^(\d+) passed, (\d+) skipped, \d+ warnings in [\d.]+s",
                        (REPO / "bench/results/gpu/h200_run8b_tests.txt").read_text(), flags=re.M)
    passed, skipped = int(printed[1]), int(printed[2])
    assert step["summary"] is None and not step["ok"]
    assert step["progress"] == {"passed": passed, "skipped": skipped, "reported": passed + skipped, "percent": 100}


def test_progress_marks_counts_each_outcome_and_only_progress_lines():
    """Every mark counts once by its outcome; lines that merely end in a percentage (a verbose line, a warning)
    do not count; no progress line: nothing reported."""
    from gpu_check import progress_marks

    log = ("bringing up nodes...\n\n..sF [ 40%]\ntests/a.py::t PASSED [ 45%]\nsss warning text [ 50%]\n"
           "E.xX. [100%]\n=== 1 failed ===\n")
    assert progress_marks(log) == {"passed": 4, "failed": 1, "error": 1, "skipped": 1, "xfailed": 1, "xpassed": 1,
                                   "reported": 9, "percent": 100}
    assert progress_marks("no marks here\n") == {"reported": 0, "percent": 0}
