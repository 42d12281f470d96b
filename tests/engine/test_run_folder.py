"""One writer per fold folder (real train.py processes), complete folds with another config, --force,
leftover temporary files and the number of torch threads of a resume."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from pointgeope.engine.checkpoint import load_checkpoint
from pointgeope.engine.config import load_config
from tests.engine.conftest import DEMO_CONFIG, REPO, TINY, ForkedTrainPy, last_line_only
from tests.engine.test_train import train


def _train_py(root, run, *extra, **popen):
    return subprocess.Popen([sys.executable, "train.py", "--config", str(DEMO_CONFIG), "--test-area", "1",
                             "--data-root", str(root), "--run-dir", str(run), *TINY, *extra], cwd=REPO,
                            text=True, **popen)


@pytest.mark.slow
def test_two_train_processes_on_one_fold_then_a_kill(two_folds, tmp_path, capsys):
    """A second training on the same RUN/area_K (here in the test process) is refused while a train.py process
    holds the fold; after that process is killed (-9), the next run takes the stale lock over and removes the
    temporary files left behind. (Two processes started at once, one winner: tests/test_lock.py.)"""
    long = ["train.epochs=1000"]
    first = _train_py(two_folds, tmp_path, *long, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        lock = tmp_path / "area_1" / ".lock"
        while not (lock.exists() and f'"pid": {first.pid},' in lock.read_text()):   # the fold is held
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        capsys.readouterr()
        assert train(two_folds, tmp_path, *long) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"train.py: error: {tmp_path / 'area_1'} is being written by pid {first.pid} on {socket.gethostname()}")
        assert first.poll() is None
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
        first.communicate()
    leftover = tmp_path / "area_1" / ".last.pt.6b1d3e9f.tmp.pt"  # what a kill inside save_checkpoint leaves
    leftover.write_bytes(b"half a checkpoint")
    capsys.readouterr()
    assert train(two_folds, tmp_path, *long, "train.epochs_per_run=1") == 0
    captured = capsys.readouterr()
    assert (f"taking over the lock of pid {first.pid} on {socket.gethostname()}, which has ended"
            in captured.err)
    assert f"removed {leftover}, left by an interrupted run" in captured.out
    assert not leftover.exists() and not (tmp_path / "area_1" / ".lock").exists()
    assert load_checkpoint(tmp_path / "area_1" / "last.pt")["epoch"] >= 1


@pytest.mark.slow
def test_complete_fold_with_another_config_is_refused_and_force_retrains(two_folds, tmp_path, capsys):
    assert train(two_folds, tmp_path, "train.epochs=1") == 0
    fold = tmp_path / "area_1"
    stamp = (fold / "metrics.json").stat().st_mtime_ns
    capsys.readouterr()
    assert train(two_folds, tmp_path, "train.epochs=1", "optim.lr=0.02", "model.share_planes=4") == 2
    assert capsys.readouterr().err.strip() == (
        f"train.py: error: {fold} is complete with another config (model.share_planes: run 8, now 4; optim.lr: "
        "run 0.01, now 0.02); --force retrains it, or use another --run-dir")
    assert train(two_folds, tmp_path, "train.epochs=1", "eval.tta.flips=true") == 0  # eval.* is free: skipped
    assert f"fold 1: {fold / 'metrics.json'} is complete, skipped" in capsys.readouterr().out
    assert (fold / "metrics.json").stat().st_mtime_ns == stamp
    assert train(two_folds, tmp_path, "train.epochs=1", "optim.lr=0.02", "--force") == 0
    assert load_config(fold / "config.yaml").optim.lr == 0.02
    assert load_checkpoint(fold / "last.pt")["config"]["optim"]["lr"] == 0.02
    assert json.loads((fold / "metrics.json").read_text())["complete"] is True
    log = (fold / "log.txt").read_text()
    assert log.count("fold 1 done") == 2 and "resumed from" not in log  # retrained from scratch


@pytest.fixture(scope="module")
def half_trained(two_folds, tmp_path_factory):
    """Fold 1 of ``two_folds`` stopped after epoch 1 of 2 (``train.epochs_per_run=1``) on the demo's one torch
    thread: ``RUN/area_1``. The tests copy it."""
    run, threads = tmp_path_factory.mktemp("half_trained"), torch.get_num_threads()
    try:
        assert train(two_folds, run, "train.epochs=2", "train.epochs_per_run=1", "train.threads=1") == 0
    finally:
        torch.set_num_threads(threads)
    return run / "area_1"


@pytest.mark.slow
def test_resume_with_another_number_of_threads_warns(two_folds, half_trained, tmp_path):
    import shutil

    shutil.copytree(half_trained, tmp_path / "area_1")
    assert load_checkpoint(tmp_path / "area_1" / "last.pt")["threads"] == 1
    threads = torch.get_num_threads()
    try:
        assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1", "train.threads=2") == 0
    finally:
        torch.set_num_threads(threads)
    log = (tmp_path / "area_1" / "log.txt").read_text()
    assert (f"warning: {tmp_path / 'area_1' / 'last.pt'} was written with 1 torch CPU thread, this run has 2: "
            "the results will differ from an uninterrupted run (set train.threads=1 to match)") in log


@pytest.mark.slow
def test_an_unfinished_fold_evaluated_stays_unfinished_and_is_flagged_by_report(two_folds, half_trained, tmp_path,
                                                                                 capsys):
    """Evaluating a fold whose training was interrupted after epoch 1 of 2 labels metrics.json as unfinished
    (it said "complete": true, so that the training was then skipped and report pooled the fold); predict
    from it warns."""
    import shutil

    from pointgeope.cli import main as cli

    fold = tmp_path / "area_1"
    shutil.copytree(half_trained, fold)                         # trained with train.epochs_per_run=1
    capsys.readouterr()
    assert cli(["evaluate", str(fold)]) == 0
    assert (f"warning: {fold} is unfinished: trained 1 of 2 epochs; metrics.json says so (\"complete\": false)"
            in capsys.readouterr().out)
    metrics = json.loads((fold / "metrics.json").read_text())
    assert (metrics["complete"], metrics["epoch"], metrics["trained_epochs"], metrics["epochs"]) == (False, 1, 1, 2)

    # report: the unfinished fold is named and left out of the pooled scores (here beside a complete fold 2)
    done = {"area": "Area_2", "fold": 2, "complete": True, "confusion": (np.eye(13, dtype=int) * 5).tolist()}
    (tmp_path / "area_2").mkdir()
    (tmp_path / "area_2/metrics.json").write_text(json.dumps(done))
    assert cli(["report", str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    table = (tmp_path / "report/report.md").read_text()
    assert "| Area_1 | missing (unfinished: trained 1 of 2 epochs) |" in table
    assert "pooled over 1 of 6 folds: Area_2" in table

    # predict from the unfinished fold warns (it said nothing), the more so while the fold is locked
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "pred")]) == 0
    warning = f"warning: {fold / 'last.pt'}: its fold has trained 1 of 2 epochs"
    assert capsys.readouterr().err.splitlines() == [f"{warning}; these are the predictions of an unfinished model"]
    (fold / ".lock").write_text("{}")  # as while a training holds it
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "pred")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{warning} (its folder is locked: it may be training now); these are the predictions of an unfinished model"]
    (fold / ".lock").unlink()

    capsys.readouterr()
    assert train(two_folds, tmp_path, "train.epochs=2") == 0  # continues the fold, does not skip it
    out = capsys.readouterr().out
    assert "is complete, skipped" not in out and "resumed from" in out
    metrics = json.loads((fold / "metrics.json").read_text())
    assert (metrics["complete"], metrics["trained_epochs"]) == (True, 2)
    assert cli(["predict", str(fold), str(scan), "--out", str(tmp_path / "pred")]) == 0
    assert "warning" not in capsys.readouterr().err  # a finished fold


@pytest.fixture(scope="module")
def signalled(two_folds, tmp_path_factory) -> dict:
    """train.py on fold 1 twice at once, into RUN/SIGINT and RUN/SIGTERM (two processes forked from one
    interpreter: conftest's ``ForkedTrainPy``), each sent its signal once it has written a checkpoint (inside the
    loop, the lock held): ``{signal: (exit code, stderr, its fold folder)}``."""
    base = tmp_path_factory.mktemp("signalled")
    folds = {sig: base / sig.name / "area_1" for sig in (signal.SIGINT, signal.SIGTERM)}
    children = ForkedTrainPy([["--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds),
                               "--run-dir", str(fold.parent), *TINY, "train.epochs=1000"] for fold in folds.values()],
                             base, seconds=300)
    try:
        waiting, deadline = dict(zip(folds, children.pids, strict=True)), time.monotonic() + 240
        while waiting:
            for sig in [sig for sig in waiting if (folds[sig] / "last.pt").exists()]:
                os.kill(waiting.pop(sig), sig)
            assert children.proc.poll() is None and time.monotonic() < deadline, f"no checkpoint in {waiting}"
            time.sleep(0.05)
        codes, errs, hung = children.ended()
    except BaseException:
        children.kill()
        raise
    assert not any(hung), errs
    return {sig: (code, err, fold) for sig, code, err, fold in zip(folds, codes, errs, folds.values(), strict=True)}


@pytest.mark.slow
def test_ctrl_c_stops_training_with_one_line_and_exit_code_130(signalled):
    """SIGINT to a training (Ctrl-C): one line, exit code 130, the fold's lock released; it printed a
    KeyboardInterrupt traceback."""
    code, err, fold = signalled[signal.SIGINT]
    assert code == 130
    last_line_only(err, "train.py: interrupted")
    assert not (fold / ".lock").exists()
    # the fold's record says why it ends there (it ended with the last epoch or step line, no reason)
    assert (fold / "log.txt").read_text().splitlines()[-1].endswith(" stopped: interrupted (Ctrl-C)")


@pytest.mark.slow
def test_sigterm_stops_training_as_ctrl_c_does(signalled):
    """SIGTERM (SLURM's time limit, preemption, scancel) killed a training at once: no line, the fold's
    .lock left, which a requeued task on another node is refused by. Now: one line, exit code 143, the lock
    released and no temporary file left."""
    code, err, fold = signalled[signal.SIGTERM]
    assert code == 143
    last_line_only(err, "train.py: terminated")
    assert (fold / "log.txt").read_text().splitlines()[-1].endswith(" stopped: terminated (SIGTERM)")
    assert sorted(p.name for p in fold.iterdir() if p.name.startswith(".")) == []
    assert load_checkpoint(fold / "last.pt")["step"] >= 1


def test_a_hand_edited_config_yaml_does_not_make_a_fold_complete(two_folds, tiny_run, tmp_path, capsys):
    """train.epochs 1 -> 2 written into the fold's config.yaml, then the command run with train.epochs=2:
    "metrics.json is complete, skipped" after 1 epoch. Completeness is judged against what was trained
    (last.pt's config), not the editable file."""
    import shutil

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    text = (fold / "config.yaml").read_text()
    assert "  epochs: 1\n" in text
    (fold / "config.yaml").write_text(text.replace("  epochs: 1\n", "  epochs: 2\n"))
    assert train(two_folds, tmp_path, "train.epochs=2", "train.val_every=1") == 2
    assert capsys.readouterr().err.strip() == (
        f"train.py: error: {fold} is complete with another config (train.epochs: run 1, now 2); --force retrains "
        "it, or use another --run-dir")
    assert load_checkpoint(fold / "last.pt")["epoch"] == 1
    (fold / "last.pt").unlink()   # what was trained is unknown: not taken as complete either
    assert train(two_folds, tmp_path, "train.epochs=2", "train.val_every=1") == 2
    assert capsys.readouterr().err.strip() == (
        f"train.py: error: {fold}: metrics.json says complete, but {fold / 'last.pt'}, the record of what was "
        "trained, is missing; --force retrains the fold, or use another --run-dir")


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_sigterm_while_writing_stops_evaluate_and_predict_as_ctrl_c(tiny_run, tmp_path, monkeypatch, capsys, command):
    """SIGTERM arriving while `evaluate` or `predict` writes its predictions (its temporary file open, its
    folder locked) was not handled: the process died with both left behind. Now it ends as Ctrl-C does:
    one line, exit code 143, the temporary file deleted and the lock released."""
    import shutil

    from pointgeope import h5_predictions
    from pointgeope.cli import main as cli
    from pointgeope.scans import outputs

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "metrics.json").unlink()
    shutil.rmtree(fold / "predictions")
    scan, out = tmp_path / "scan.npy", tmp_path / "pred"
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    folder = fold if command == "evaluate" else out
    module, name = (h5_predictions, "create_file") if command == "evaluate" else (outputs, "atomic_path")  # writers
    real_writer, seen = getattr(module, name), []

    @contextlib.contextmanager
    def write_then_sigterm(path):
        with real_writer(path) as f:
            seen.append(sorted(p.name for p in folder.rglob(".*")))  # the lock and the temporary file
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):   # Python runs the handler between two bytecodes: here, at once
                time.sleep(0.01)
            yield f

    monkeypatch.setattr(module, name, write_then_sigterm)
    ignored = []   # without a handler of the command's, SIGTERM lands here (pytest itself must not die)
    previous = signal.signal(signal.SIGTERM, lambda *_: ignored.append(1))
    ctrl_c = signal.getsignal(signal.SIGINT)   # cli's settle_exit(143) ignores a second Ctrl-C from then on
    try:
        argv = ["evaluate", str(fold)] if command == "evaluate" else ["predict", str(fold / "last.pt"), str(scan),
                                                                     "--out", str(out)]
        capsys.readouterr()
        assert cli(argv) == 143 and not ignored
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, ctrl_c)
    assert len(seen) == 1 and ".lock" in seen[0] and any(".tmp" in name for name in seen[0]), seen
    assert capsys.readouterr().err.splitlines()[-1] == f"pointgeope {command}: terminated"
    assert sorted(p.name for p in folder.rglob(".*")) == []
    assert not (fold / "metrics.json").exists()


def test_a_skipped_fold_names_the_eval_values_it_was_not_tested_with(two_folds, tiny_run, tmp_path, capsys):
    """`train` on a complete fold with new eval.* values said "complete, skipped" and kept the old test: the
    skip line now names the values not applied and the `pointgeope evaluate` command that applies them; run,
    that command's test is the one asked for, and the next `train` skips the fold without a note."""
    import shlex
    import shutil

    from pointgeope.cli import main as cli

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    before = (fold / "metrics.json").read_text()
    assert json.loads(before)["tta_views"] == 1
    same = ["train.epochs=1", "train.val_every=1"]   # tiny_run's command
    capsys.readouterr()
    assert train(two_folds, tmp_path, *same, "eval.tta.rotations=2", "eval.tta.flips=true") == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("fold 1: ")]
    command = f"pointgeope evaluate {fold} eval.tta.flips=true eval.tta.rotations=2"
    assert line == [f"fold 1: {fold / 'metrics.json'} is complete, skipped; its test did not use this command's "
                    "eval.tta.flips=true (it used false), eval.tta.rotations=2 (it used 1), which train does not "
                    f"apply to a complete fold: {command} tests it with them"]
    assert (fold / "metrics.json").read_text() == before   # skipped: not tested again
    assert cli(shlex.split(command)[1:]) == 0
    assert json.loads((fold / "metrics.json").read_text())["tta_views"] == 4
    capsys.readouterr()
    assert train(two_folds, tmp_path, *same, "eval.tta.rotations=2", "eval.tta.flips=true") == 0
    assert f"fold 1: {fold / 'metrics.json'} is complete, skipped\n" in capsys.readouterr().out
    # one value more: the command also sets those the test used but config.yaml (evaluate's start) lacks
    assert train(two_folds, tmp_path, *same, "eval.tta.rotations=2", "eval.tta.flips=true", "eval.vote=softmax") == 0
    assert (f"its test did not use this command's eval.vote=softmax (it used logits), which train does not apply "
            f"to a complete fold: {command} eval.vote=softmax tests it with them") in capsys.readouterr().out


# pointgeope's main on each command line of argv[1], in this one process: the exit codes, and which of argv[2]'s
# modules it imported
CHILD = """
import json, sys
from pointgeope.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps([codes, sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)]))
"""


def test_a_complete_fold_is_skipped_or_refused_without_the_training_stack(two_folds, tiny_run, tmp_path):
    """A rerun of a complete fold (each trial of an ablation's rerun is one process of it) imported the training
    stack (pointgeope.engine.train: the model, torch_geometric, the data loaders; ~4 s of CPU a process) before
    it read the fold's last.pt. It says the same lines, the skip or the refusal, with torch alone of them imported
    (to read the last.pt). A fresh process: in this one they are imported already."""
    import shutil

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    train = ["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds),
             "--run-dir", str(tmp_path), *TINY, "train.epochs=1", "train.val_every=1"]   # tiny_run's command
    heavy = ["pointgeope.engine.train", "pointgeope.model.network", "scipy", "torch", "torch_geometric"]
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([train, [*train, "optim.lr=0.02"]]),
                           json.dumps(heavy)], capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    *said, imported = done.stdout.splitlines()
    assert json.loads(imported) == [[0, 2], ["torch"]]
    assert [line for line in said if not line.startswith("warning: ")] == [   # (the overrides TINY gives too)
        f"fold 1: {fold / 'metrics.json'} is complete, skipped"]
    assert "Traceback" not in done.stderr and done.stderr.splitlines()[-1] == (
        f"pointgeope train: error: {fold} is complete with another config (optim.lr: run 0.01, now 0.02); --force "
        "retrains it, or use another --run-dir")


@pytest.mark.slow
def test_a_fold_folder_deleted_while_training_is_one_line_and_not_made_again(two_folds, tmp_path, monkeypatch, capsys):
    import shutil

    from pointgeope.engine import losses

    real, calls, fold = losses.F.cross_entropy, [], tmp_path / "area_1"

    def delete_at_the_second_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            shutil.rmtree(fold)                                  # rm -rf of the fold folder, while it trains
        return real(*args, **kwargs)

    monkeypatch.setattr(losses.F, "cross_entropy", delete_at_the_second_step)
    assert train(two_folds, tmp_path, "data.loop=2") == 2
    last_line_only(capsys.readouterr().err, f"train.py: error: {fold}: the fold folder, or its lock file .lock, "
                   "was deleted while this training wrote into it (after step 1); stopped, since another process "
                   "could now take the folder; the same command trains the fold again (from its last.pt, if one "
                   "is left)")
    assert not fold.exists()       # no checkpoint, event or log written into a folder made again without a lock


def test_evaluate_removes_the_temporary_files_of_a_killed_evaluate(tiny_run, tmp_path, capsys):
    """`kill -9` of evaluate while it wrote its predictions left `predictions/.Area_1.h5.<8 characters>.tmp.h5`:
    the evaluate rerun wrote the same results but kept that file for good (only train's lock removed them).
    Both commands take the fold folder alike now: its lock, then a killed run's temporary files removed."""
    import shutil

    from pointgeope.cli import main as cli

    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    killed = [fold / "predictions" / ".Area_1.h5.9efd0e96.tmp.h5", fold / ".metrics.json.0a1b2c3d.tmp.json"]
    for path in killed:
        path.write_bytes(b"half")
    assert cli(["evaluate", str(fold)]) == 0
    printed = capsys.readouterr().out
    assert not any(path.exists() for path in killed)
    assert all(f"removed {path}, left by an interrupted run" in printed for path in killed)
    assert sorted(p.name for p in (fold / "predictions").iterdir()) == ["Area_1.h5"]
