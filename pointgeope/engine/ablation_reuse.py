"""Before an ablation's trials run: the saved trials of its run folder that ``train`` would refuse.

A trial's fold folder ``RUN/<preset>/seed_<s>/area_K`` with a ``last.pt`` is resumed (unfinished) or
skipped (complete) by ``pointgeope train`` only when the config ``last.pt`` was written with has no
difference from the trial's (:func:`~pointgeope.engine.checkpoint.config_differences`, the keys a resume must
match; free keys such as ``train.threads`` and the ``eval.*`` keys aside). Otherwise train refuses it with
the advice of its own ``--force``, which ``ablate`` does not have: a rerun of an ablation with another
``train.epochs`` started every trial only to see each refused. :func:`check_reuse` says it once, before any
trial starts, with what to do.
"""
from __future__ import annotations

from pathlib import Path

from pointgeope.constants import fold_folder_name
from pointgeope.engine.checkpoint import (
    CheckpointError,
    checkpoint_config,
    config_differences,
    describe_differences,
    load_checkpoint,
)
from pointgeope.errors import UserError

__all__ = ["check_reuse"]


def _trained_with(last: Path) -> dict | None:
    """The config ``last`` (a trial's ``last.pt``) was written with; ``None`` where there is none or it cannot
    be read (train names that itself). Its tensors are mapped from the file, not read."""
    if not last.is_file():
        return None
    try:
        return checkpoint_config(load_checkpoint(last, mmap=True), last)
    except CheckpointError:
        return None


def check_reuse(trials: list, test_area: int, run_dir: Path) -> None:
    """Raise a :class:`UserError` naming the ``trials`` (each with ``folder`` and its resolved ``config``)
    whose ``area_<test_area>/last.pt`` was written with settings that differ from the trial's, and what to
    do (another ``--run-dir``, or their fold folders deleted to train them again)."""
    other = []
    for trial in trials:
        fold = trial.folder / fold_folder_name(test_area)
        saved = _trained_with(fold / "last.pt")
        diff = config_differences(saved, trial.config) if saved is not None else []
        if diff:
            other.append((trial, fold, diff))
    if not other:
        return
    trial, _, diff = other[0]
    folds = " ".join(str(fold) for _, fold, _ in other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
    raise UserError(f"--run-dir {run_dir}: {len(other)} of the {len(trials)} trial(s) were trained with other "
                    f"settings than this command's ({trial.name}: {describe_differences(diff, 'it used')}), and "
                    f"train neither resumes nor reuses such a fold: give another --run-dir, or delete {folds} "
                    "to train them again with these settings")
