"""Tests of pointgeope/engine/fold_result.py: a test stopped between its two writes (predictions, then
metrics.json) leaves a pair whose tokens differ, which ``train`` tests again and ``report`` leaves out; a
pair written before tokens is read as before; a fold without the checkpoint to test is told what to do."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.fold_result import complete_fold_metrics
from pointgeope.h5 import area_path, read_labels
from pointgeope.h5_predictions import PRED
from pointgeope.metrics import confusion_matrix
from pointgeope.report.fold_file import read_fold
from tests.engine.conftest import one_line, train_fold


def _confusion_of_predictions(fold, root) -> list:
    """The confusion counts of ``fold/predictions/Area_1.h5`` against the labels (all 13 classes)."""
    total = np.zeros((13, 13), dtype=np.int64)
    with h5py.File(fold / "predictions" / "Area_1.h5", "r") as f:
        for room in f:
            total += confusion_matrix(f[room][PRED][()], read_labels(area_path(root, "Area_1"), room))
    return total.tolist()


def test_a_test_stopped_after_the_predictions_leaves_the_fold_untested(two_folds, tiny_run, tmp_path, monkeypatch,
                                                                        capsys):
    """Before: the new predictions stood beside the old metrics.json (other confusion, other eval settings,
    "complete": true), ``train`` skipped the fold as complete and ``report`` pooled the old scores. Now the
    pair's tokens differ: ``report`` leaves the fold out, naming why, and the same training command tests
    the fold again, after which the pair agrees."""
    import pointgeope.engine.evaluate as evaluate

    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    write = evaluate.write_predictions

    def write_then_stop(*args, **kwargs):  # the process stopped (Ctrl-C here; kill -9 alike) right after
        write(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate, "write_predictions", write_then_stop)
    assert cli(["evaluate", str(fold), "eval.tta.rotations=2"]) == 130
    monkeypatch.undo()
    old = (tiny_run / "metrics.json").read_bytes()
    assert (fold / "metrics.json").read_bytes() == old                    # the previous file, left as it was
    assert complete_fold_metrics(fold) is None
    assert read_fold(fold / "metrics.json", 1) == (None, (
        f"{fold / 'predictions' / 'Area_1.h5'} is not the test that {fold / 'metrics.json'} records (a test "
        f"stopped between the two writes); test the fold again (the training command, or pointgeope evaluate "
        f"{fold})"))
    capsys.readouterr()
    assert train_fold(two_folds, fold.parent, "train.epochs=1", "train.val_every=1") == 0
    out = capsys.readouterr().out
    assert "is complete, skipped" not in out and "evaluated Area_1" in out and "testing it again" in out
    metrics = json.loads((fold / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["tta_views"] == 1
    assert metrics["confusion"] == _confusion_of_predictions(fold, two_folds)


def test_a_pair_written_before_is_read_as_it_was(two_folds, tiny_run, tmp_path, capsys):
    """A fold folder written before tests drew tokens (none in metrics.json, none in its predictions) is
    skipped as complete and reported, as it was."""
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    metrics = json.loads((fold / "metrics.json").read_text())
    del metrics["predictions_test"]
    (fold / "metrics.json").write_text(json.dumps(metrics))
    with h5py.File(fold / "predictions" / "Area_1.h5", "r+") as f:
        del f.attrs["test"]
    assert complete_fold_metrics(fold) == json.loads((fold / "metrics.json").read_text())
    assert read_fold(fold / "metrics.json", 1)[0] is not None
    before = (fold / "metrics.json").read_bytes()
    assert train_fold(two_folds, fold.parent, "train.epochs=1", "train.val_every=1") == 0
    assert "is complete, skipped" in capsys.readouterr().out
    assert (fold / "metrics.json").read_bytes() == before


@pytest.mark.parametrize("kept, checkpoint, fix", [
    (("config.yaml",), "last", "the fold has not saved a checkpoint yet (its training stopped before the "
     "first); train it first (pointgeope train --config {fold}/config.yaml --test-area 1 --run-dir {run})"),
    (("config.yaml", "last.pt"), "best", "the fold has not saved a best.pt yet (written at its validations); "
     "evaluate its last.pt (eval.checkpoint=last), or train it on (pointgeope train --config {fold}/config.yaml "
     "--test-area 1 --run-dir {run})"),
    (("last.pt",), "best", "the fold has not saved a best.pt yet (written at its validations); evaluate its "
     "last.pt (eval.checkpoint=last), or train it on (pointgeope train --config CONFIG --test-area 1 --run-dir "
     "{run})"),
])
def test_evaluate_without_its_checkpoint_says_what_to_do(tiny_run, tmp_path, capsys, kept, checkpoint, fix):
    """Before: "expected a checkpoint at RUN/area_1/last.pt, found nothing", and no fix (a fold killed before
    its first last.pt: config.yaml and log.txt only); then a command without the --config that train requires.
    It names the fold's saved config.yaml, or CONFIG where the fold has none."""
    fold = tmp_path / "run" / "area_1"
    fold.mkdir(parents=True)
    for name in kept:
        shutil.copy(tiny_run / name, fold / name)
    line = one_line(capsys, 2, ["evaluate", str(fold), "--checkpoint", checkpoint])
    assert line == (f"pointgeope evaluate: error: expected a checkpoint at {fold / (checkpoint + '.pt')}, found "
                    f"nothing: {fix.format(run=fold.parent, fold=fold)}")


def test_a_fold_not_trained_yet_is_told_to_train_it_by_evaluate_and_predict(tiny_run, tmp_path, capsys):
    """Before: evaluate of RUN/area_1 not made yet said "expected a fold folder named area_K (RUN/area_K), got
    RUN/area_1 (not a folder)", of a path that is named so, and predict "expected a checkpoint at RUN/area_1,
    found nothing"; of a fold stopped before its first last.pt, predict gave no fix where evaluate named the
    command. Both say the same now (one owner: engine/fold_result.py)."""
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    def predict(fold):
        return ["predict", str(fold), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o")]

    fold = tmp_path / "run" / "area_1"
    said = (f"{fold}: no such fold folder: fold 1 has not been trained yet, or the path is wrong; train it first "
            f"(pointgeope train --config CONFIG --test-area 1 --run-dir {fold.parent}), or give the fold folder "
            "that holds its last.pt")
    assert one_line(capsys, 2, ["evaluate", str(fold)]) == f"pointgeope evaluate: error: {said}"
    assert one_line(capsys, 2, predict(fold)) == f"pointgeope predict: error: {said}"
    fold.mkdir(parents=True)                      # stopped before its first checkpoint: config.yaml only
    shutil.copy(tiny_run / "config.yaml", fold / "config.yaml")
    said = (f"expected a checkpoint at {fold / 'last.pt'}, found nothing: the fold has not saved a checkpoint yet "
            f"(its training stopped before the first); train it first (pointgeope train --config "
            f"{fold / 'config.yaml'} --test-area 1 --run-dir {fold.parent})")
    assert one_line(capsys, 2, ["evaluate", str(fold)]) == f"pointgeope evaluate: error: {said}"
    assert one_line(capsys, 2, predict(fold)) == f"pointgeope predict: error: {said}"
    (fold / "config.yaml").unlink()               # an empty fold folder: the same command, its fold and run named
    assert one_line(capsys, 2, ["evaluate", str(fold)]) == (
        f"pointgeope evaluate: error: {fold}: expected config.yaml and last.pt, the fold's config and weights, "
        f"found neither; train the fold first (pointgeope train --config CONFIG --test-area 1 --run-dir "
        f"{fold.parent}), or give the fold folder that holds them")
    assert not (tmp_path / "o").exists()


def test_a_pair_whose_predictions_were_deleted_is_still_complete(tiny_run, tmp_path):
    """Predictions deleted by hand (to save space) are no stopped test: the fold stays complete, as before
    (its report stands; ``pointgeope evaluate`` writes the file again)."""
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "predictions" / "Area_1.h5").unlink()
    assert complete_fold_metrics(fold) == json.loads((fold / "metrics.json").read_text())
    assert read_fold(fold / "metrics.json", 1)[0] is not None


def test_a_damaged_predictions_file_is_named_damaged_not_a_stopped_test(tiny_run, tmp_path):
    """A predictions file cut short (a half copy) read as "no token" and was named "a test stopped between the
    two writes". Now: cannot read it, damaged; the fold is tested again, as before."""
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    path = fold / "predictions" / "Area_1.h5"
    with open(path, "r+b") as f:
        f.truncate(3000)
    logged = []
    assert complete_fold_metrics(fold, logged.append) is None
    assert logged == [f"warning: cannot read {path} (damaged or cut short: HDF5 cannot open it): testing it again"]
    assert read_fold(fold / "metrics.json", 1) == (None, (
        f"cannot read {path} (damaged or cut short: HDF5 cannot open it); test the fold again (the training "
        f"command, or pointgeope evaluate {fold})"))


def test_a_test_that_scores_no_point_writes_no_metrics(two_folds, tiny_run, tmp_path):
    """A test area whose every label is train.ignore_index wrote an all-zero metrics.json marked complete (a
    rerun skipped the fold), then training crashed formatting its None scores. Now one line, no metrics.json."""
    import os

    import torch

    from pointgeope.engine import distributed
    from pointgeope.engine.checkpoint import fold_config, save_checkpoint
    from pointgeope.engine.evaluate import evaluate_fold
    from pointgeope.errors import UserError
    from pointgeope.h5 import list_rooms, read_room_record, write_area

    root = tmp_path / "root"
    root.mkdir()
    for area in ("Area_2", "Area_3"):
        os.symlink(two_folds / f"{area}.h5", root / f"{area}.h5")
    shutil.copy(two_folds / "folds.json", root / "folds.json")
    rooms = []
    for room in list_rooms(two_folds / "Area_1.h5"):
        arrays, attrs = read_room_record(two_folds / "Area_1.h5", room)
        rooms.append((room, {**arrays, "label": np.full_like(arrays["label"], 255)}, attrs))
    write_area(root / "Area_1.h5", "Area_1", rooms)
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "metrics.json").unlink()
    ckpt = torch.load(fold / "last.pt", weights_only=True)     # its record of Area_1's checksum: not these files
    save_checkpoint(fold / "last.pt", {k: v for k, v in ckpt.items() if k not in ("format", "version", "data")})
    cfg = fold_config(fold, [f"data.root={root}", "eval.max_fragments=1"])
    assert cfg.train.ignore_index == 255
    env = distributed.DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(UserError) as err:
        evaluate_fold(fold, cfg, env, log=lambda line: None, checked=True)
    assert str(err.value) == (f"{fold}: no point of Area_1 is scored (every label is train.ignore_index=255); "
                              "metrics.json is not written; test the fold on labelled points")
    assert not (fold / "metrics.json").exists()


def test_evaluate_best_of_a_fold_trained_without_validation_says_no_epoch_was_picked(unvalidated_run, tmp_path,
                                                                                     capsys):
    """``train.val_every=0`` rewrites best.pt every epoch: ``evaluate --checkpoint best`` tested the last epoch
    as if a validation had picked it, without a word (metrics.json said "checkpoint": "best.pt"). Now one
    line says so and what to run; metrics.json is left as it was, and ``--checkpoint last`` evaluates."""
    run = tmp_path / "run"
    shutil.copytree(unvalidated_run, run)             # evaluate --checkpoint last rewrites its metrics.json
    fold = run / "area_1"
    before = (fold / "metrics.json").read_bytes()
    capsys.readouterr()
    line = one_line(capsys, 2, ["evaluate", str(fold), "--checkpoint", "best"])
    assert line == (f"pointgeope evaluate: error: {fold / 'best.pt'}: no validation picked it: the fold trained "
                    "without validation (train.val_every=0), so best.pt holds its last epoch (1), the weights of "
                    "last.pt; evaluate its last.pt (eval.checkpoint=last), or train with train.val_every=1 for a "
                    "best epoch")
    assert (fold / "metrics.json").read_bytes() == before
    assert cli(["evaluate", str(fold), "--checkpoint", "last"]) == 0
    assert json.loads((fold / "metrics.json").read_text())["checkpoint"] == "last.pt"



def test_a_complete_fold_is_skipped_with_the_metrics_read_once(two_folds, tiny_run, tmp_path, monkeypatch):
    """The skip check reads metrics.json once and returns what it found complete. Before: it read it again after
    the checkpoint's checks, so that a file replaced in between was reported without having been checked."""
    from pointgeope.data.folds import load_folds
    from pointgeope.engine.config import load_config
    from pointgeope.engine.fold_skip import complete_metrics

    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    reads, read_text = [], Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (reads.append(self.name), read_text(self, *a, **k))[1])
    metrics = complete_metrics(fold, load_config(fold / "config.yaml"), load_folds(two_folds)[1])
    assert metrics == json.loads(read_text(fold / "metrics.json")) and metrics["complete"] is True
    assert reads.count("metrics.json") == 1
