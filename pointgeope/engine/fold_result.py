"""A fold's result, the pair that a test writes: ``RUN/area_K/predictions/Area_K.h5`` and ``metrics.json``.

Each file is written atomically, but not the pair: a test stopped between them (``kill -9``, an out-of-memory
kill, Ctrl-C) leaves new predictions beside the old ``metrics.json``, whose scores, eval settings and
``"complete": true`` do not describe them. So each test draws a token (:func:`new_test`) that it writes into
every predictions file (root attr ``test``) and, last, into ``metrics.json`` (``"predictions_test"``), and
the readers of a fold's result take a pair whose tokens differ (:func:`pair_problem`) as a fold not tested:
``train`` tests it again instead of skipping it (:func:`complete_fold_metrics`), ``report`` names it missing and
leaves it out. (``viz`` shows the predictions file alone, with scores it computes from it.) A pair written
before tests drew tokens carries none on either side and is read as before; an old ``metrics.json`` beside
predictions of a newer test that stopped is not a pair. The previous pair is never removed first: a test
that fails before its first write (a full disk) leaves it whole.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from pointgeope import json_text

METRICS_FILE = "metrics.json"
TEST_KEY = "predictions_test"  # metrics.json's copy of its predictions files' token


def complete_fold_metrics(run: Path, log=None) -> dict | None:
    """``run/metrics.json`` as read, where it says ``"complete": true`` of the predictions beside it; ``None``
    where not (a damaged file, or one of another test than the predictions' (:func:`pair_problem`, said through
    ``log``): the fold is tested again). Read once: what a skipped fold reports is what was found complete."""
    path = Path(run) / METRICS_FILE
    if not path.is_file():
        return None
    try:
        metrics = json_text.loads(path.read_text())
        if metrics.get("complete") is not True:
            return None
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):  # damaged: evaluated again
        return None
    problem = pair_problem(run, metrics)
    if problem and log is not None:
        log(problem.train_warning())
    return metrics if problem is None else None


def new_test() -> str:
    """A fresh token for one test (random: two tests of one fold never share it)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class PairProblem:
    """Why a fold's ``metrics.json`` and one predictions file beside it are not the pair of one test: the file
    ``predictions`` of the fold folder ``run`` cannot be read (``unreadable``), or it holds another test's
    token. Each reader says it in its own sentence, made from these fields (never from another's sentence)."""
    run: Path
    predictions: Path
    unreadable: bool

    def what(self) -> str:
        """What is wrong, the part every reader's sentence shares."""
        if self.unreadable:
            return f"cannot read {self.predictions} (damaged or cut short: HDF5 cannot open it)"
        return (f"{self.predictions} is not the test that {Path(self.run) / METRICS_FILE} records (a test stopped "
                "between the two writes)")

    def report_reason(self) -> str:
        """``report``'s reason for leaving the fold out, with what to do."""
        return f"{self.what()}; test the fold again (the training command, or pointgeope evaluate {self.run})"

    def train_warning(self) -> str:
        """``train``'s warning before it tests the fold again instead of skipping it."""
        return f"warning: {self.what()}: testing it again"


def pair_problem(run: Path, metrics: dict) -> PairProblem | None:
    """Why ``run/metrics.json`` (read as ``metrics``) and the predictions files of its test areas are not the
    pair of one test (their tokens differ: a test stopped between its writes), ``None`` when they are or a
    predictions file is not there (deleted by hand: ``pointgeope evaluate`` writes it again). A predictions
    file HDF5 cannot read (damaged, cut short by a copy) is named as such, not as a stopped test."""
    from pointgeope.h5_predictions import predictions_path, predictions_test

    token = metrics.get(TEST_KEY)
    areas = metrics.get("test_areas") or [metrics.get("area")]
    for area in (a for a in (areas if isinstance(areas, list) else []) if isinstance(a, str)):
        path = predictions_path(run, area)
        if not path.exists():                                  # deleted: train skips it, evaluate writes it
            continue
        try:
            test = predictions_test(path)
        except OSError:
            return PairProblem(run, path, unreadable=True)
        if test != token:
            return PairProblem(run, path, unreadable=False)
    return None


def unfinished_metrics_warning(run: Path, trained: int, epochs: int) -> str:
    return (f"warning: {run} is unfinished: trained {trained} of {epochs} epochs; metrics.json says so "
            "(\"complete\": false), the same training command continues the fold, and report leaves it out "
            "of the pooled scores")


def nothing_scored(run: Path, areas: list[str], ignore_index: int) -> str:
    """The line for a test of the fold folder ``run`` that scores no point of its test ``areas`` (every label is
    ``ignore_index``): its ``metrics.json`` would count nothing, yet say complete, and a rerun skip the fold."""
    return (f"{run}: no point of {', '.join(areas)} is scored (every label is train.ignore_index={ignore_index}); "
            "metrics.json is not written; test the fold on labelled points")


def train_fold_command(run: Path, fold: int) -> str:
    """The command that trains (or trains on) the fold folder ``run`` (``RUN/area_K``), with its saved
    ``config.yaml`` where it has one (``CONFIG`` otherwise)."""
    run = Path(run)
    config = run / "config.yaml" if (run / "config.yaml").is_file() else "CONFIG"
    return f"pointgeope train --config {config} --test-area {fold} --run-dir {run.parent}"


def untrained_fold(run: Path, fold: int) -> str:
    """The line of ``evaluate`` and ``predict`` for a fold folder ``run`` (``RUN/area_K``) that is not there:
    its training has not started (or the path is wrong)."""
    return (f"{run}: no such fold folder: fold {fold} has not been trained yet, or the path is wrong; train it "
            f"first ({train_fold_command(run, fold)}), or give the fold folder that holds its last.pt")


def unvalidated_best(path: Path, ckpt: dict,
                     use_last: str = "evaluate its last.pt (eval.checkpoint=last)") -> str | None:
    """The line refusing a fold's ``best.pt`` (``path``, loaded as ``ckpt``) that no validation picked, ``None``
    for any other checkpoint: its fold trained with ``train.val_every: 0`` (the checkpoint's best validation
    mIoU is still -1), so ``best.pt`` is rewritten every epoch and holds the last one, the weights of
    ``last.pt``. The one rule of ``evaluate`` and ``predict`` (``use_last``: the command's way to take
    ``last.pt``)."""
    if path.name != "best.pt" or not ckpt.get("best_miou", 0.0) < 0:   # a validation scored it (or too old to say)
        return None
    return (f"{path}: no validation picked it: the fold trained without validation (train.val_every=0), so "
            f"best.pt holds its last epoch ({int(ckpt.get('epoch', 0))}), the weights of last.pt; {use_last}, or "
            "train with train.val_every=1 for a best epoch")


def predict_last(path: Path, folder: bool) -> str:
    """``predict``'s way to take the ``last.pt`` of the fold of checkpoint ``path`` (the ``use_last`` of
    :func:`unvalidated_best` and :func:`missing_checkpoint`): ``--checkpoint last`` where a fold ``folder`` was
    given, else the file ``last.pt`` beside ``path``, else a copy of ``path`` under that name (a ``best.pt``
    that no validation picked holds the weights of ``last.pt``)."""
    last = path.with_name("last.pt")
    if folder:
        return "predict from its last.pt (--checkpoint last)"
    if last.is_file():
        return f"predict from its last.pt (MODEL {last})"
    return f"predict from a copy of it named last.pt (MODEL {last}: the same weights)"


def missing_checkpoint(path: Path, fold: int, use_last: str = "evaluate its last.pt (eval.checkpoint=last)") -> str:
    """The line for a test (``evaluate``, ``predict``) of the fold folder ``path.parent`` whose checkpoint
    ``path`` is not there: a fold stopped before it saved its first ``last.pt``, or (``best.pt``) before its
    first validation, when ``use_last`` (the command's way to take ``last.pt``) is the advice. The command it
    gives trains on with the fold's saved ``config.yaml`` (``CONFIG`` when there is none)."""
    run = path.parent
    train = train_fold_command(run, fold)
    if path.name == "best.pt" and (run / "last.pt").is_file():
        return (f"expected a checkpoint at {path}, found nothing: the fold has not saved a best.pt yet (written "
                f"at its validations); {use_last}, or train it on ({train})")
    return (f"expected a checkpoint at {path}, found nothing: the fold has not saved a checkpoint yet (its "
            f"training stopped before the first); train it first ({train})")
