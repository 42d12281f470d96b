"""A fold folder's earlier training, before ``train`` starts it: complete with this config on this data
(:func:`complete_metrics`: the fold is skipped), trained otherwise (refused, naming what differs), or
cleared for ``--force`` (:func:`clear_fold`)."""
from __future__ import annotations

import shutil
from pathlib import Path

from pointgeope.data.check import area_checksums
from pointgeope.data.folds import Fold
from pointgeope.engine.checkpoint import (
    CheckpointError,
    checkpoint_config,
    fold_progress,
    load_checkpoint,
)
from pointgeope.engine.config import Config, config_to_dict
from pointgeope.engine.config_diff import config_differences, describe_differences
from pointgeope.engine.fold_record import check_trained_fold
from pointgeope.engine.fold_result import complete_fold_metrics
from pointgeope.engine.record_keys import predating_note
from pointgeope.engine.retrain import retrain_from_scratch
from pointgeope.engine.trained_data import check_data_of, saved_data
from pointgeope.errors import UserError
from pointgeope.h5 import area_path

__all__ = ["clear_fold", "complete_metrics"]


def complete_metrics(run: Path, cfg: Config, fold: Fold, log=print) -> dict | None:
    """The metrics of a complete ``fold`` trained with ``cfg`` (free keys aside) on the files of its areas
    now in ``cfg.data.root``, ``None`` if the fold is not complete (a ``metrics.json`` of another test than
    its predictions' too, said through ``log``: :mod:`~pointgeope.engine.fold_result`); a :class:`UserError` naming the
    differing keys if it was trained with another config, the differing files if on other data, or the folds
    if its ``last.pt`` was trained for another fold (:func:`~pointgeope.engine.fold_record.check_trained_fold`).

    What was trained is read from the fold's ``last.pt`` (its config, epochs and the checksums of its area
    files), never from ``config.yaml``, which a user may edit: a fold whose ``metrics.json`` says complete
    but whose ``last.pt`` trained fewer epochs than ``cfg`` asks is continued, and one without ``last.pt``
    is refused. ``data.root`` is a free key (where the files live), so the data is compared by checksum, as
    a resume and ``evaluate`` compare it: a root prepared again from other rooms is not the fold's data."""
    metrics = complete_fold_metrics(run, log)
    if metrics is None:
        return None
    try:
        return _trained_metrics(run, cfg, fold, log, metrics)
    except CheckpointError as err:  # its last.pt: damaged, of another fold or data; --force trains it again
        raise retrain_from_scratch(err, run)  # noqa: B904 - err itself, marked for ablate


def _trained_metrics(run: Path, cfg: Config, fold: Fold, log, metrics: dict) -> dict | None:
    """:func:`complete_metrics` of a fold whose ``metrics.json`` says complete (``metrics``, as read): its refusals
    are marked as those that training it from scratch ends (:func:`~pointgeope.engine.retrain.retrain_from_scratch`)."""
    last = run / "last.pt"
    if not last.is_file():
        raise retrain_from_scratch(UserError(
            f"{run}: metrics.json says complete, but {last}, the record of what was trained, is missing; --force "
            "retrains the fold, or use another --run-dir"), run)
    ckpt = load_checkpoint(last)
    trained = checkpoint_config(ckpt, last)
    diff = config_differences(trained, config_to_dict(cfg))
    if diff:
        raise retrain_from_scratch(UserError(
            f"{run} is complete with another config ({describe_differences(diff, 'run')})"
            f"{predating_note(trained, diff)}; --force retrains it, or use another --run-dir"), run)
    if fold_progress(last, ckpt)[0] < cfg.train.epochs:
        return None
    saved, root, areas = saved_data(ckpt, last), cfg.data.root, list(fold.train + fold.test)
    check_trained_fold(last, ckpt.get("fold"), fold, root, log)
    now = {area: None for area in set(saved or {}) | set(areas)}  # None: a file that is not there
    now.update(area_checksums(root, [area for area in areas if area_path(root, area).is_file()]))
    check_data_of(last, ckpt, now, root, print)
    return metrics


def clear_fold(run: Path) -> None:
    """``--force``: delete what a previous training of the fold wrote (its log.txt is kept)."""
    for name in ("last.pt", "best.pt", "metrics.json", "config.yaml", "predictions", "tb"):
        path = run / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for dump in run.glob("nan_step_*.pt"):
        dump.unlink()
