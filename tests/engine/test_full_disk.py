"""A full disk (here: the file size limit, ``ulimit -f``, so that no root is needed) ends every command that
writes in one line naming the file and the cause, exit code 2, within seconds, no partial file kept.

Each case runs the real command line in a subprocess whose ``RLIMIT_FSIZE`` is below the size of the
file under test and above the smaller files written before it. The kernel then refuses the write with
EFBIG (CPython ignores SIGXFSZ), exactly as a full disk refuses one with ENOSPC. Before this was handled,
HDF5 crashed the process at exit (a segmentation fault) and ``prepare --jobs 2`` waited forever for a
worker.
"""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.conftest import DEMO_CONFIG, TINY

pytestmark = pytest.mark.slow  # each case starts the real command (torch import) in a subprocess

CAUSE = ("cannot write it: file too large for the file size limit (`ulimit -f`) or the file system; nothing of "
         "it was kept; free space (or raise the limit) and run the same command again")


def run_limited(argv: list[str], limit: int, cwd: Path) -> tuple[int, list[str]]:
    """``python -m pointgeope argv`` with writes limited to ``limit`` bytes per file; the exit code and
    the lines of stderr. A hang fails the test (TimeoutExpired)."""
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "pointgeope", *argv], preexec_fn=preexec, cwd=cwd,
                          capture_output=True, text=True, timeout=180, check=False)
    return proc.returncode, proc.stderr.strip().splitlines()


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp" in p.name]


def assert_one_error(code: int, lines: list[str], prog: str, path: Path) -> None:
    assert code == 2, lines[-20:]
    assert not any("Traceback" in line for line in lines), lines[-20:]
    assert lines[-1] == f"pointgeope {prog}: error: {path}: {CAUSE}"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_prepare_ends_in_one_line_naming_the_room_or_area_file(tiny_root, tmp_path, jobs):
    raw = tiny_root.parent / "raw"
    # 130 kB: the biggest room's work file is refused (it was a segfault with --jobs 1, a hang with 2); with the
    # normals the work files are 143 kB (Area_5/conferenceRoom_1) and at most 120 kB (the others), so no other
    # room's refusal can come first from the second worker.
    out = tmp_path / "small"
    code, lines = run_limited(["prepare", str(raw), str(out), "--jobs", jobs], 130 * 1024, tmp_path)
    assert_one_error(code, lines, "prepare", out / ".work/Area_5/conferenceRoom_1.h5")
    assert temporaries(out) == [] and not list(out.glob("Area_*.h5"))
    # 150 kB: every room fits, the first area file does not (written in .work, then moved onto Area_1.h5).
    out = tmp_path / "area"
    code, lines = run_limited(["prepare", str(raw), str(out), "--jobs", jobs], 150 * 1024, tmp_path)
    assert_one_error(code, lines, "prepare", out / ".work/Area_1.h5")
    assert temporaries(out) == [] and not list(out.glob("Area_*.h5"))
    assert (out / ".work/Area_1").is_dir()  # the parsed rooms are kept for the rerun


def test_train_checkpoint(two_folds, tmp_path):
    run = tmp_path / "run"
    argv = ["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds),
            "--run-dir", str(run), *TINY, "train.epochs=1"]
    code, lines = run_limited(argv, 64 * 1024, tmp_path)  # a checkpoint is ~270 kB, the log a few
    assert_one_error(code, lines, "train", run / "area_1/best.pt")
    assert temporaries(run) == [] and not list(run.rglob("*.pt"))


def test_evaluate_keeps_the_previous_predictions(tiny_run, tmp_path):
    predictions = tiny_run / "predictions/Area_1.h5"
    before = predictions.read_bytes()
    code, lines = run_limited(["evaluate", str(tiny_run)], 8 * 1024, tmp_path)  # predictions ~14 kB
    assert_one_error(code, lines, "evaluate", predictions)
    assert predictions.read_bytes() == before and temporaries(tiny_run) == []


def test_predict_and_report(tiny_root, tiny_run, tmp_path):
    room = tiny_root.parent / "raw/Area_1/office_1"
    out = tmp_path / "pred"
    code, lines = run_limited(["predict", str(tiny_run), str(room), "--out", str(out)], 20 * 1024, tmp_path)
    assert code == 2 and not any("Traceback" in line for line in lines), lines
    assert f"pointgeope predict: error: {out / 'office_1_pred.ply'}: {CAUSE}" in lines
    assert temporaries(out) == [] and not (out / "office_1_pred.ply").exists()

    out = tmp_path / "report"
    code, lines = run_limited(["report", str(tiny_run.parent), "--out", str(out)], 8 * 1024, tmp_path)
    assert_one_error(code, lines, "report", out / "iou_per_class.png")  # the tables are smaller
    assert temporaries(out) == [] and not (out / "iou_per_class.png").exists()
