"""Tests of pointgeope/engine/train.py on tiny data: run folder, exact resume, --cv skipping, NaN stop, the
identity of area files and the data a resume runs on."""
from __future__ import annotations

import argparse
import json
import re

import h5py
import numpy as np
import pytest
import torch

from pointgeope.checksum import file_checksum
from pointgeope.commands import train as train_command
from pointgeope.engine import losses as losses_mod, state as state_mod
from pointgeope.engine.checkpoint import load_checkpoint
from pointgeope.engine.config import load_config
from pointgeope.errors import run_command
from pointgeope.h5 import SchemaError, list_rooms, read_room, read_room_record, write_area
from pointgeope.h5_predictions import read_predictions
from pointgeope.metrics import confusion_matrix, scores
from pointgeope.model.ops.fps import FPS_RULE
from tests.engine.conftest import DEMO_CONFIG, TINY


def train(root, run, *extra, fold="1"):
    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    where = ["--cv"] if fold == "cv" else ["--test-area", fold]
    args = parser.parse_args(["--config", str(DEMO_CONFIG), *where, "--data-root", str(root),
                              "--run-dir", str(run), *TINY, *extra])
    return run_command("train.py", train_command.main, args)


def weights(path):
    return load_checkpoint(path)["model"]


@pytest.mark.slow
def test_fold_writes_a_complete_run_folder(two_folds, validated_run):
    fold = validated_run / "area_1"             # `pointgeope train` of fold 1, TINY's 2 epochs, validated each
    cfg = load_config(fold / "config.yaml")
    assert cfg == load_config(DEMO_CONFIG, TINY + ["train.val_every=1", f"data.root={two_folds}",
                                                   f"train.run_dir={validated_run}"])
    last = torch.load(fold / "last.pt", map_location="cpu", weights_only=True)
    best = torch.load(fold / "best.pt", map_location="cpu", weights_only=True)
    assert (last["epoch"], last["batch"]) == (2, 0)
    log = (fold / "log.txt").read_text()
    assert log.count(" epoch 1/2 ") == 1 and log.count(" epoch 2/2 ") == 1
    assert ("point hierarchy: built on the host, where the batches are made (CPU libraries) (data.hierarchy=auto: "
            "the cpu defaults") in log
    assert log.count("point hierarchy: built ") == 2             # training's place, then the test area's
    assert f"farthest point sampling: {FPS_RULE} (" in log
    # best.pt is the epoch with the highest validation mIoU (validated at full resolution each epoch)
    val = [float(line.split("val oa")[1].split("miou ")[1].split()[0]) for line in log.splitlines() if "val oa" in line]
    assert len(val) == 2 and val[best["epoch"] - 1] == max(val)
    assert round(best["best_miou"], 4) == max(val) == round(last["best_miou"], 4)
    assert list((fold / "tb").glob("events.out.tfevents.*"))
    metrics = json.loads((fold / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["area"] == "Area_1" and metrics["fold"] == 1
    assert metrics["fps_rule"] == FPS_RULE            # which hierarchy the fold was trained and tested with
    # and on which files (report compares them): the checksums of the fold's area files
    assert metrics["data"] == {a: file_checksum(two_folds / f"{a}.h5") for a in ("Area_1", "Area_2", "Area_3")}
    rooms = list_rooms(two_folds / "Area_1.h5")
    assert metrics["num_points"] == sum(rooms.values())
    with h5py.File(fold / "predictions" / "Area_1.h5", "r") as f:
        assert f.attrs["kind"] == "predictions" and sorted(f) == sorted(rooms)
    confusion = np.zeros((13, 13), dtype=np.int64)
    for room, n in rooms.items():
        pred = read_predictions(fold / "predictions" / "Area_1.h5", room)
        assert pred.dtype == np.uint8 and pred.shape == (n,)
        confusion += confusion_matrix(pred, read_room(two_folds / "Area_1.h5", room, ("label",))["label"])
    assert metrics["confusion"] == confusion.tolist()
    # the authors' class means by default (eval.class_mean: all), recorded beside the scores
    assert metrics["class_mean"] == "all" and metrics["miou"] == pytest.approx(scores(confusion, "all")["miou"])
    assert sorted(p.name for p in fold.iterdir()) == ["best.pt", "config.yaml", "last.pt", "log.txt",
                                                      "metrics.json", "predictions", "tb"]


# 8 samples, 4 steps an epoch: saves after step 2, epoch 1 (step 4), step 6, epoch 2 (step 8)
RESUMED = ["data.loop=2", "train.checkpoint_every=2"]


@pytest.fixture(scope="module")
def straight(two_folds, tmp_path_factory):
    """The run that :func:`test_resume_after_a_kill_reaches_the_same_result` compares each killed run with, trained
    without a stop once for both kill points (the same settings, the same data: the same run)."""
    run = tmp_path_factory.mktemp("straight")
    assert train(two_folds, run, *RESUMED) == 0
    return run


@pytest.mark.slow
@pytest.mark.parametrize("fail_at_save", [2, 3], ids=["epoch-end", "mid-epoch"])
def test_resume_after_a_kill_reaches_the_same_result(two_folds, straight, tmp_path, monkeypatch, fail_at_save):
    extra = RESUMED

    real_save, saves = state_mod.save_checkpoint, []

    def save_then_die(path, payload):  # dies right after the n-th save of last.pt
        real_save(path, payload)
        if path.name == "last.pt":
            saves.append((payload["epoch"], payload["batch"]))
            if len(saves) == fail_at_save:
                raise KeyboardInterrupt("injected kill")

    monkeypatch.setattr(state_mod, "save_checkpoint", save_then_die)
    assert train(two_folds, tmp_path / "killed", *extra) == 130  # stopped as Ctrl-C stops it: one line, 130
    killed_at = saves[-1]
    assert killed_at == [(0, 2), (1, 0), (1, 2)][fail_at_save - 1]
    assert not (tmp_path / "killed" / "area_1" / "metrics.json").exists()
    monkeypatch.setattr(state_mod, "save_checkpoint", real_save)
    assert train(two_folds, tmp_path / "killed", *extra) == 0

    log = (tmp_path / "killed" / "area_1" / "log.txt").read_text()
    where = (f"inside epoch {killed_at[0] + 1}, after its batch {killed_at[1]}" if killed_at[1]
             else f"after epoch {killed_at[0]}")
    assert f"resumed from {tmp_path / 'killed' / 'area_1' / 'last.pt'}: {where} (step " in log
    a, b = weights(straight / "area_1" / "last.pt"), weights(tmp_path / "killed" / "area_1" / "last.pt")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)
    ma = json.loads((straight / "area_1" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "killed" / "area_1" / "metrics.json").read_text())
    assert ma["confusion"] == mb["confusion"]
    # each epoch's logged train scores are those of all its batches (a mid-epoch resume logged those after it)
    assert epoch_scores(tmp_path / "killed") == epoch_scores(straight)


def epoch_scores(run) -> dict[str, str]:
    """``{"epoch 1/2": "loss 1.2345  train oa 0.5 miou 0.1", ...}`` of a fold's log.txt (its last line of each
    epoch: a resumed run logs the epoch it finishes)."""
    found = re.findall(r" (epoch \d+/\d+)  (loss \S+  train oa \S+ miou \S+)  ",
                       (run / "area_1" / "log.txt").read_text())
    assert found
    return dict(found)


@pytest.mark.slow
def test_cv_runs_every_fold_and_skips_complete_ones(two_folds, tmp_path, capsys):
    """Under --cv, train.epochs_per_run counted per fold: a job sized for N epochs trained N of every fold
    and overran its time limit. One epoch per run: fold 1's epoch (and its evaluation), then a stop; the same
    command then trains fold 2, fold 1 skipped as complete. A fold trained but not evaluated is evaluated by
    the next --cv run (without a limit: it goes through every fold), and `evaluate` re-evaluates a fold.
    (One test: the epochs_per_run test trained the two folds that this one trained again.)"""
    assert train(two_folds, tmp_path, "train.epochs=1", "train.epochs_per_run=1", fold="cv") == 0
    out = capsys.readouterr().out
    assert json.loads((tmp_path / "area_1" / "metrics.json").read_text())["complete"] is True
    assert not (tmp_path / "area_2" / "last.pt").exists()
    assert ("stopping before fold 2: 1 epoch trained in this run (train.epochs_per_run=1); the same command "
            "continues with it") in out
    assert train(two_folds, tmp_path, "train.epochs=1", "train.epochs_per_run=1", fold="cv") == 0
    assert "fold 1: " in capsys.readouterr().out   # skipped as complete
    for k in (1, 2):
        assert json.loads((tmp_path / f"area_{k}" / "metrics.json").read_text())["complete"] is True
    first = (tmp_path / "area_1" / "metrics.json").stat().st_mtime_ns
    (tmp_path / "area_2" / "metrics.json").unlink()  # fold 2 trained but not evaluated
    capsys.readouterr()
    assert train(two_folds, tmp_path, "train.epochs=1", fold="cv") == 0
    out = capsys.readouterr().out
    assert "fold 1: " in out and "is complete, skipped" in out
    assert (tmp_path / "area_1" / "metrics.json").stat().st_mtime_ns == first
    assert json.loads((tmp_path / "area_2" / "metrics.json").read_text())["complete"] is True
    log2 = (tmp_path / "area_2" / "log.txt").read_text()
    assert log2.count(" epoch 1/1 ") == 1  # the third run went straight to the evaluation
    assert log2.count("evaluated Area_2") == 2

    # `pointgeope evaluate` re-evaluates a fold with other eval.* settings (here 2 x 2 TTA views)
    from pointgeope.cli import main as cli

    assert cli(["evaluate", str(tmp_path / "area_1"), "eval.tta.rotations=2", "eval.tta.flips=true"]) == 0
    metrics = json.loads((tmp_path / "area_1" / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["tta_views"] == 4
    assert metrics["num_points"] == sum(int(np.sum(row)) for row in metrics["confusion"])


def test_corrupt_checkpoint_stops_with_its_name(two_folds, tmp_path, capsys):
    (tmp_path / "area_1").mkdir()
    (tmp_path / "area_1" / "last.pt").write_bytes(b"not a checkpoint")
    assert train(two_folds, tmp_path) == 2
    assert f"{tmp_path / 'area_1' / 'last.pt'}: not a readable checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_checkpoint_of_another_config_or_model_is_refused(two_folds, tmp_path, capsys):
    assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1") == 0
    assert load_checkpoint(tmp_path / "area_1" / "last.pt")["epoch"] == 1
    assert train(two_folds, tmp_path, "train.epochs=2", "optim.lr=0.02") == 2
    err = capsys.readouterr().err
    assert "last.pt: written with another config (optim.lr: checkpoint 0.01, now 0.02)" in err
    assert load_config(tmp_path / "area_1" / "config.yaml").optim.lr == 0.01  # left as it was
    # keys of speed and memory only: the fold resumes with them changed (it was refused, naming them)
    assert train(two_folds, tmp_path, "train.epochs=2", "data.cache=false", "data.hierarchy=loader",
                 "train.cuda_graphs=true") == 0
    assert load_checkpoint(tmp_path / "area_1" / "last.pt")["epoch"] == 2
    assert "written with another config" not in capsys.readouterr().err


@pytest.mark.slow
def test_nan_loss_stops_and_saves_the_batch(two_folds, tmp_path, monkeypatch, capsys):
    real = torch.nn.functional.cross_entropy
    calls = []

    def nan_on_third(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) == 3 else loss

    monkeypatch.setattr(losses_mod.F, "cross_entropy", nan_on_third)  # the loss (engine/losses.py)
    assert train(two_folds, tmp_path, "data.loop=2") == 1  # 4 steps an epoch
    assert "the loss is nan at epoch 1, step 2 (batch 2 of the epoch)" in capsys.readouterr().err
    # the fold's log.txt says it too (it ended with the run's set-up lines, without a reason)
    last = (tmp_path / "area_1" / "log.txt").read_text().splitlines()[-1]
    assert " stopped: fold 1: the loss is nan at epoch 1, step 2 (batch 2 of the epoch); " in last
    dump = torch.load(tmp_path / "area_1" / "nan_step_2.pt", weights_only=True)
    assert dump["step"] == 2 and dump["pos"].shape[0] == dump["y"].shape[0] == dump["ptr"][-1]
    assert dump["model"].keys() == weights_like(two_folds, tmp_path).keys()
    assert not (tmp_path / "area_1" / "metrics.json").exists()


class _NanBackward(torch.autograd.Function):
    """The identity forward, a NaN gradient backward: a finite loss whose gradients are not (an overflow in
    the backward of a diverging run)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


@pytest.mark.slow
def test_non_finite_gradients_of_a_finite_loss_stop_before_the_update(two_folds, tmp_path, monkeypatch, capsys):
    real = torch.nn.functional.cross_entropy
    calls = []

    def nan_gradient_on_fourth(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return _NanBackward.apply(loss) if len(calls) == 4 else loss

    monkeypatch.setattr(losses_mod.F, "cross_entropy", nan_gradient_on_fourth)
    # 4 steps an epoch: the last step of epoch 1 has a finite loss and NaN gradients. Updated by them, every
    # weight would be NaN in the last.pt and best.pt of epoch 1, and the stop would come a step later
    # naming an innocent batch.
    assert train(two_folds, tmp_path, "data.loop=2") == 1
    err = capsys.readouterr().err
    assert "the gradients are not finite at epoch 1, step 3 (batch 3 of the epoch), with a loss of " in err
    assert re.search(r"holds [\d,]+ NaN or infinite values? of", err) and "the weights were not updated" in err
    dump = torch.load(tmp_path / "area_1" / "nan_step_3.pt", weights_only=True)
    assert dump["step"] == 3 and bool(torch.isfinite(dump["loss"]))
    assert all(bool(torch.isfinite(w).all()) for w in dump["model"].values() if w.is_floating_point())
    assert not (tmp_path / "area_1" / "last.pt").exists() and not (tmp_path / "area_1" / "best.pt").exists()


def test_the_first_parameter_with_a_non_finite_gradient_is_named():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    learner = state_mod.Learner(net, torch.optim.SGD(net.parameters(), lr=0.1), None,
                                torch.amp.GradScaler("cpu", enabled=False))
    assert learner.non_finite_gradient() is None                  # no gradient yet
    learner.backward(net(torch.ones(3, 2)).sum())
    assert learner.non_finite_gradient() is None
    net[1].weight.grad[0, 1] = float("inf")
    net[1].bias.grad[0] = float("nan")
    assert learner.non_finite_gradient() == ("1.weight", 1, 2)
    for p in net.parameters():                                    # finite but huge: their norm overflows
        p.grad = torch.full_like(p, 3e38)
    assert learner.non_finite_gradient() is None


def weights_like(root, run):
    from pointgeope.engine import build

    cfg = load_config(DEMO_CONFIG, TINY + [f"data.root={root}"])
    return build.model(cfg).state_dict()


def _copy_root(two_folds, root):
    """A root of its own (files, not links) with two_folds' areas and folds.json, without manifest.json."""
    root.mkdir()
    for path in two_folds.iterdir():
        (root / path.name).write_bytes(path.read_bytes())
    return root


def test_an_area_file_copied_over_another_is_refused(two_folds, tmp_path, capsys):
    """Area_1.h5 replaced by a copy of Area_3.h5, no manifest to catch it: its own 'area' attribute does."""
    root = _copy_root(two_folds, tmp_path / "root")
    (root / "Area_1.h5").write_bytes((root / "Area_3.h5").read_bytes())
    assert train(root, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"{root / 'Area_1.h5'}: holds 'Area_3' (its 'area' attribute), expected 'Area_1' by its name" in err
    with pytest.raises(SchemaError, match="expected 'Area_1' by its name"):
        list_rooms(root / "Area_1.h5")  # evaluate, predict and the viewer read area files through it too


@pytest.mark.slow
def test_resume_on_other_data_is_refused_with_the_files_named(two_folds, tmp_path, capsys):
    """The checkpoint records the checksums of the fold's files (computed: this root has no manifest);
    Area_2 re-prepared with one room fewer (and a manifest, as prepare writes) stops the resume by name;
    --force retrains."""
    root = _copy_root(two_folds, tmp_path / "root")
    assert train(root, tmp_path / "run", "train.epochs=2", "train.epochs_per_run=1") == 0
    last = tmp_path / "run" / "area_1" / "last.pt"
    before = {a: file_checksum(root / f"{a}.h5") for a in ("Area_1", "Area_2", "Area_3")}
    assert load_checkpoint(last)["data"] == before
    rooms = list(list_rooms(root / "Area_2.h5"))[:-1]
    write_area(root / "Area_2.h5", "Area_2", [(r, *read_room_record(two_folds / "Area_2.h5", r)) for r in rooms])
    checksums = {a: file_checksum(root / f"{a}.h5") for a in before}
    (root / "manifest.json").write_text(json.dumps({"checksums": checksums}))
    assert train(root, tmp_path / "run", "train.epochs=2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{last} was trained on other data than {root} holds now" in err[0]
    assert f"Area_2.h5 trained on {before['Area_2'][:19]}..., now {checksums['Area_2'][:19]}..." in err[0]
    assert "Area_1.h5" not in err[0] and "Area_3.h5" not in err[0] and "--force retrains" in err[0]
    assert load_checkpoint(last)["epoch"] == 1  # left as it was
    assert train(root, tmp_path / "run", "train.epochs=1", "--force") == 0
    assert load_checkpoint(last)["data"] == checksums


def test_a_stop_under_force_says_to_drop_force(two_folds, tmp_path, capsys):
    """With --force, "the same command continues from last.pt" was false: the same command cleared the fold
    again, so a resubmission loop never got past train.epochs_per_run epochs. The stop line now says that
    the command without --force continues, and that one does."""
    assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1", "--force") == 0
    last = tmp_path / "area_1" / "last.pt"
    assert (f"stopping in fold 1 after epoch 1: 1 epoch trained in this run (train.epochs_per_run=1); the same "
            f"command without --force (with it, the fold starts again) continues from {last}"
            in capsys.readouterr().out)
    assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1") == 0
    assert f"resumed from {last}: after epoch 1 (step 2)" in capsys.readouterr().out
    assert json.loads((tmp_path / "area_1" / "metrics.json").read_text())["complete"] is True


def test_a_complete_fold_on_other_data_is_refused_not_skipped(two_folds, tmp_path, capsys):
    """A complete fold whose area file was prepared again from other rooms (the same data.root, a new
    manifest) was skipped as complete, its old scores kept for the report; a resume and `evaluate` refused
    it. Now the skip compares the checksums too and refuses it by file; --force retrains."""
    root = _copy_root(two_folds, tmp_path / "root")
    assert train(root, tmp_path / "run", "train.epochs=1") == 0
    fold = tmp_path / "run" / "area_1"
    metrics = (fold / "metrics.json").read_text()
    capsys.readouterr()
    assert train(root, tmp_path / "run", "train.epochs=1") == 0     # the same files: skipped
    assert f"fold 1: {fold / 'metrics.json'} is complete, skipped" in capsys.readouterr().out
    before = file_checksum(root / "Area_3.h5")
    rooms = list(list_rooms(root / "Area_3.h5"))[:-1]
    write_area(root / "Area_3.h5", "Area_3", [(r, *read_room_record(two_folds / "Area_3.h5", r)) for r in rooms])
    now = file_checksum(root / "Area_3.h5")
    (root / "manifest.json").write_text(json.dumps({"checksums": {a: file_checksum(root / f"{a}.h5")
                                                                  for a in ("Area_1", "Area_2", "Area_3")}}))
    assert train(root, tmp_path / "run", "train.epochs=1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"train.py: error: {fold / 'last.pt'} was trained on other data than {root} holds now (Area_3.h5 "
                   f"trained on {before[:19]}..., now {now[:19]}...): their points differ, not only where they "
                   "were prepared from; restore the data it trained on (or set "
                   "data.root to it); pointgeope train with --force retrains the fold from scratch"]
    assert (fold / "metrics.json").read_text() == metrics
    (root / "Area_2.h5").unlink()                                    # a file of the fold gone: not skipped either
    assert train(root, tmp_path / "run", "train.epochs=1") == 2
    err = capsys.readouterr().err
    assert "Area_2.h5 trained on sha256:" in err and ", now nothing" in err
