"""Messages that said the wrong thing (issue 38, class 9), each now naming the real cause and what to do;
and ``kill -9`` of ablate, which left its trials training alone."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from pointgeope.cli import main as cli
from pointgeope.lock import folder_lock
from tests.conftest import process_ended
from tests.engine.conftest import ignore_sigint, one_line
from tests.engine.test_ablation import ablate_args
from tests.engine.test_user_errors import train_args
from tests.test_denied import as_user


def test_an_unwritable_fold_folder_is_named_not_its_lock(tmp_path, capsys, two_folds):
    """Before: "Operation not permitted: RUN/area_1/.lock; check the folder's permissions", which hid that
    nothing (config.yaml, checkpoints) can be written there."""
    fold = tmp_path / "area_1"
    fold.mkdir()
    if subprocess.run(["chattr", "+i", str(fold)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not allowed here")
    try:
        line = one_line(capsys, 2, train_args(two_folds, tmp_path))
    finally:
        subprocess.run(["chattr", "-i", str(fold)], check=True)
    assert line == (f"pointgeope train: error: output folder {fold}: cannot write into it (Operation not permitted); "
                    "make it writable or give a folder you can write")


def test_num_classes_below_the_datas_says_to_set_it(tmp_path, capsys, two_folds):
    """Before: "label 12 found, expected labels below 5; run `pointgeope prepare` again"."""
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, "model.num_classes=5"))
    assert line.endswith("label 12 found, but model.num_classes is 5: the prepared data has the 13 S3DIS classes; "
                         "set model.num_classes=13"), line


def test_predict_of_a_predictions_file_says_what_it_is(tiny_run, tmp_path, capsys):
    """Before: "expected schema_version 1, got None; re-run `pointgeope prepare`". The refused command leaves no
    ``predictions/.readers.lock``: predict took the file, named ``Area_1.h5``, for a prepared area and read-locked
    its folder; the lock file stayed, and the fold's evaluate then took ``predictions/`` for another writer's
    folder, whose temporary files it left (a later test of this process failed so)."""
    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    preds = fold / "predictions" / "Area_1.h5"
    line = one_line(capsys, 2, ["predict", str(fold), str(preds), "--out", str(tmp_path / "o")])
    assert line == (f"pointgeope predict: error: {preds}: a fold's predictions file (labels only, written by "
                    "evaluate), not a prepared area file or a scan: give the scan, or the prepared area "
                    "(data.root/Area_N.h5)")
    assert sorted(p.name for p in preds.parent.iterdir()) == ["Area_1.h5"]


def test_info_check_without_triton_says_so(monkeypatch, capsys):
    """Before: "POINTGEOPE_KERNELS=triton: Triton does not import here ...; unset POINTGEOPE_KERNELS", a
    variable the user never set."""
    monkeypatch.setattr("pointgeope.model.kernels.triton_imports", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cli(["info", "--check", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pointgeope info: error: --check tests the Triton kernels, and Triton does not import here (pip "
                   "install triton); without it every kernel runs its torch path, which needs no check"]


def test_a_folder_as_config_is_called_a_folder(tmp_path, capsys):
    """Before: "expected a config file, found nothing at DIR"."""
    line = one_line(capsys, 2,
                    ["train", "--config", str(tmp_path), "--test-area", "1", "--run-dir", str(tmp_path / "r")])
    assert line == (f"pointgeope train: error: expected a config file, found a folder at {tmp_path}; give a YAML "
                    "file, e.g. configs/demo.yaml")


def test_evaluate_with_a_training_override_does_not_suggest_run_dir(tiny_run, tmp_path, capsys):
    """Before: "...; use the same config and overrides to resume, or another --run-dir" (evaluate has none)."""
    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    line = one_line(capsys, 2, ["evaluate", str(fold), "model.pe=rpe"])
    assert "--run-dir" not in line and line.endswith(
        "evaluate a fold with the config it was trained with: drop the overrides of what it was trained with "
        "(eval.* and the keys of place, speed and memory, such as train.device or data.hierarchy, may change), "
        "and restore its config.yaml if it was edited"), line


def test_a_rerun_beside_a_trial_still_running_names_its_lock(two_folds, tmp_path, capsys):
    """A trial left by an ablation killed before (here: this process, holding the fold's lock and writing
    progress into the trial's train.log): the rerun printed that progress line as the failure. Now the
    failure is the trial's own error line, which names the lock."""
    run = tmp_path / "abl"
    fold = run / "rpe" / "seed_0" / "area_1"
    stop = threading.Event()

    def progress():
        while not stop.is_set():
            with open(run / "rpe" / "seed_0" / "train.log", "a") as log:
                log.write("2026-01-01 00:00:00 epoch 7/1000  loss 1.0\n")
            time.sleep(0.01)

    with folder_lock(fold, "an orphaned trial"):
        writer = threading.Thread(target=progress)
        writer.start()
        try:
            code = cli(ablate_args(two_folds, run, "train.epochs=1", presets=("rpe",), seeds=("0",)))
        finally:
            stop.set()
            writer.join()
    out, err = capsys.readouterr()
    assert code == 2 and err.endswith("the 1 trial has no result of fold 1 to report "
                                      "(rpe seed 0: failed (exit code 2), see its train.log)\n"), err
    failed = next(line for line in out.splitlines() if line.startswith("rpe seed 0: FAILED"))
    assert (f"pointgeope train: error: {fold} is being written by pid {os.getpid()}" in failed
            and f"its lock: {fold / '.lock'}" in failed), failed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_kill_9_of_ablate_leaves_no_trial_running(two_folds, tmp_path, sigint):
    """Before: the trial went on training alone (its own session), and held its fold's lock; then again
    when ablate was started with SIGINT ignored (`ablate ... &` in a job script), which its trials inherited
    and which was their death signal."""
    run = tmp_path / "abl"
    argv = [sys.executable, "-m", "pointgeope", *ablate_args(two_folds, run, "train.epochs=1000", seeds=("0",))]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=ignore_sigint if sigint == "ignored" else None)  # noqa: PLW1509
    lock, pid = run / "rpe" / "seed_0" / "area_1" / ".lock", None
    try:
        deadline = time.monotonic() + 120
        while pid is None:  # the trial holds its fold (its SIGTERM handler set): no epoch needs to end first
            assert proc.poll() is None and time.monotonic() < deadline
            with contextlib.suppress(FileNotFoundError, ValueError):
                pid = json.loads(lock.read_text())["pid"]
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60
        while not process_ended(pid):  # (an orphan: its zombie is PID 1's to reap, which may never come)
            assert time.monotonic() < deadline, "the trial still runs a minute after ablate was killed"
            time.sleep(0.1)
        assert (run / "rpe" / "seed_0" / "train.log").read_text().rstrip().endswith("pointgeope train: terminated")
        assert not lock.exists()  # the trial stopped as Ctrl-C stops it: lock released
    finally:
        for p in (proc.pid, pid):
            if p is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


def test_evaluate_of_a_fold_without_config_yaml_takes_its_checkpoints_config(tiny_run, tmp_path, capsys):
    """Before: "expected a config file, found nothing at .../config.yaml" and no fix, though last.pt carries
    the config that trained the fold (predict already used it)."""
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "config.yaml").unlink()
    (fold / "metrics.json").unlink()
    assert cli(["evaluate", str(fold), "--checkpoint", "best"]) == 0
    out = capsys.readouterr().out
    assert f"{fold / 'config.yaml'}: not there; using the config that last.pt carries (it trained the fold)" in out
    metrics, trained = (json.loads((f / "metrics.json").read_text()) for f in (fold, tiny_run))
    assert metrics["confusion"] == trained["confusion"] and metrics["checkpoint"].endswith("best.pt")
    assert not (fold / "config.yaml").exists()
    line = one_line(capsys, 2, ["evaluate", str(fold), "model.pe=rpe"])      # the overrides still checked
    assert "written with another config (model.pe: checkpoint 'geope', now 'rpe')" in line
    for name in ("last.pt", "best.pt"):
        (fold / name).unlink()
    line = one_line(capsys, 2, ["evaluate", str(fold)])
    assert line == (f"pointgeope evaluate: error: {fold}: expected config.yaml and last.pt, the fold's config and "
                    f"weights, found neither; train the fold first (pointgeope train --config CONFIG --test-area 1 "
                    f"--run-dir {fold.parent}), or give the fold folder that holds them")


ABLATE = """
import sys
from pointgeope.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ablate_names_the_trial_folder_it_cannot_enter(two_folds, tmp_path):
    """A saved trial's fold folder that this user cannot enter: ablate said "Permission denied:
    RUN/rpe/seed_0/area_1/last.pt; check the folder's permissions and free space", naming no folder (and a
    disk that was not full). Refused in one line, before any trial starts."""
    run = tmp_path / "abl"
    fold = run / "rpe" / "seed_0" / "area_1"
    fold.mkdir(parents=True)
    os.chmod(fold, 0o000)
    try:
        done = as_user(ABLATE, *ablate_args(two_folds, run, presets=("rpe",), seeds=("0",)))
    finally:
        os.chmod(fold, 0o700)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [(
        f"pointgeope ablate: error: Permission denied: {fold / 'last.pt'}: this user cannot enter the folder "
        f"{fold}; change its permissions (chmod, chown) or use another folder")]
    assert sorted(p.name for p in fold.iterdir()) == []                 # no trial started
