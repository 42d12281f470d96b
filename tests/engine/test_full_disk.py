"""A full disk (here: the file size limit, ``ulimit -f``, so that no root is needed) ends every command that
writes in one line naming the file and the cause, exit code 2, within seconds, no partial file kept.

Each case runs the real command line (``pointgeope.cli.main``, as ``python -m pointgeope``) with a soft
``RLIMIT_FSIZE`` below the size of the file under test and above the smaller files written before it. The
kernel then refuses the write with EFBIG (CPython ignores SIGXFSZ), exactly as a full disk refuses one with
ENOSPC. Before this was handled, HDF5 crashed the process at exit (a segmentation fault) and ``prepare
--jobs 2`` waited forever for a worker. Every case runs in one fresh process, one after the other (the limit
set before each command and lifted after it): that process then exits 0, so no refusal left it a crash at
exit, and the torch import is paid once, not once a case.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.conftest import DEMO_CONFIG, TINY

pytestmark = pytest.mark.slow  # the real commands (torch import) in a subprocess

CAUSE = ("cannot write it: file too large for the file size limit (`ulimit -f`) or the file system; nothing of "
         "it was kept; free space (or raise the limit) and run the same command again")

_END = "---- the command above ended with exit code"
# Each (limit, argv) of argv[1] in turn: pointgeope's command line with writes limited to limit bytes a file.
_RUNNER = f"""
import json, resource, sys
from pointgeope.cli import main
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
for limit, argv in json.loads(sys.argv[1]):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    code = main(argv)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    print("{_END}", code, file=sys.stderr, flush=True)
"""


def run_limited(cases: list[tuple[list[str], int]], cwd: Path) -> list[tuple[int, list[str]]]:
    """``pointgeope argv`` with writes limited to ``limit`` bytes per file, for each ``(argv, limit)`` of
    ``cases``, in one new process: each case's exit code and lines of stderr. A hang fails the tests
    (TimeoutExpired); the process itself exits 0."""
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps([[limit, argv] for argv, limit in cases])],
                          cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran, lines = [], []
    for line in proc.stderr.splitlines():
        if line.startswith(_END):
            ran.append((int(line.split()[-1]), "\n".join(lines).strip().splitlines()))
            lines = []
        else:
            lines.append(line)
    assert len(ran) == len(cases), proc.stderr[-3000:]
    return ran


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp" in p.name]


def assert_one_error(code: int, lines: list[str], prog: str, path: Path) -> None:
    assert code == 2, lines[-20:]
    assert not any("Traceback" in line for line in lines), lines[-20:]
    assert lines[-1] == f"pointgeope {prog}: error: {path}: {CAUSE}"


@pytest.fixture(scope="module")
def refused(tiny_root, two_folds, tiny_run, tmp_path_factory) -> dict:
    """Every case of this file run in one process (``run_limited``; the prepares first, ``--jobs 2``'s forks
    before any other work): ``{case: (exit code, stderr lines, its output folder)}``, and ``tiny_run``'s
    predictions as they were before."""
    base, raw = tmp_path_factory.mktemp("full_disk"), tiny_root.parent / "raw"
    room = raw / "Area_1/office_1"
    cases = {}
    for jobs in ("2", "1"):
        # 130 kB: the biggest room's work file is refused (it was a segfault with --jobs 1, a hang with 2); with
        # the normals the work files are 143 kB (Area_5/conferenceRoom_1) and at most 120 kB (the others), so no
        # other room's refusal can come first from the second worker.
        # 150 kB: every room fits, the first area file does not (written in .work, then moved onto Area_1.h5).
        for name, limit in (("small", 130 * 1024), ("area", 150 * 1024)):
            out = base / f"{name}{jobs}"
            cases[name + jobs] = ["prepare", str(raw), str(out), "--jobs", jobs], limit, out
    cases["train"] = (["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds),
                       "--run-dir", str(base / "run"), *TINY, "train.epochs=1"],
                      64 * 1024, base / "run")                        # a checkpoint is ~270 kB, the log a few
    cases["evaluate"] = ["evaluate", str(tiny_run)], 8 * 1024, tiny_run   # predictions ~14 kB
    cases["predict"] = (["predict", str(tiny_run), str(room), "--out", str(base / "pred")], 20 * 1024,
                        base / "pred")
    cases["report"] = (["report", str(tiny_run.parent), "--out", str(base / "report")], 8 * 1024,
                       base / "report")                               # the tables are smaller than the figure
    before = (tiny_run / "predictions/Area_1.h5").read_bytes()
    ran = run_limited([(argv, limit) for argv, limit, _ in cases.values()], base)
    return {"predictions": before} | {name: (*result, out) for (name, (_, _, out)), result
                                      in zip(cases.items(), ran, strict=True)}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_prepare_ends_in_one_line_naming_the_room_or_area_file(refused, jobs):
    code, lines, out = refused["small" + jobs]
    assert_one_error(code, lines, "prepare", out / ".work/Area_5/conferenceRoom_1.h5")
    assert temporaries(out) == [] and not list(out.glob("Area_*.h5"))
    code, lines, out = refused["area" + jobs]
    assert_one_error(code, lines, "prepare", out / ".work/Area_1.h5")
    assert temporaries(out) == [] and not list(out.glob("Area_*.h5"))
    assert (out / ".work/Area_1").is_dir()  # the parsed rooms are kept for the rerun


def test_train_checkpoint(refused):
    code, lines, run = refused["train"]
    assert_one_error(code, lines, "train", run / "area_1/best.pt")
    assert temporaries(run) == [] and not list(run.rglob("*.pt"))


def test_evaluate_keeps_the_previous_predictions(refused):
    code, lines, fold = refused["evaluate"]
    predictions = fold / "predictions/Area_1.h5"
    assert_one_error(code, lines, "evaluate", predictions)
    assert predictions.read_bytes() == refused["predictions"] and temporaries(fold) == []


def test_predict_and_report(refused):
    code, lines, out = refused["predict"]
    assert code == 2 and not any("Traceback" in line for line in lines), lines
    assert f"pointgeope predict: error: {out / 'office_1_pred.ply'}: {CAUSE}" in lines
    assert temporaries(out) == [] and not (out / "office_1_pred.ply").exists()

    code, lines, out = refused["report"]
    assert_one_error(code, lines, "report", out / "iou_per_class.png")
    assert temporaries(out) == [] and not (out / "iou_per_class.png").exists()
