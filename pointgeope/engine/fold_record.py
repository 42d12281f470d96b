"""Which fold a checkpoint was trained for: its ``"fold"`` entry, and the check that a fold folder holds its own.

A fold's checkpoints (``last.pt``, ``best.pt``) record the split they were trained on::

    "fold": {"index": 2, "test": ["Area_2"], "train": ["Area_1", "Area_3", ...]}

The area files' checksums (the checkpoint's ``"data"``) cannot tell one S3DIS fold from another: every fold
reads the same six files. So a checkpoint copied into another fold's folder (``cp RUN/area_2/last.pt
RUN/area_1/``) would be tested on an area it trained on, or resumed as another fold's training. ``evaluate``,
a resume and ``train``'s skip of a complete fold refuse a checkpoint whose test areas are not the fold's
(:func:`check_trained_fold`); the same test areas with other training areas (``folds.json`` edited since)
pass here, as the test stays one on unseen data (a resume is still refused by the data check).

Checkpoints written before the entry carry none: they are used as before, with a warning that the fold was
not checked (nothing else in them says which area was the test: their config has no test area).

:func:`fold_checkpoint` loads the checkpoint a fold's test uses: the fold's own, of its config.
"""
from __future__ import annotations

from pathlib import Path

from pointgeope.data.folds import Fold
from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint
from pointgeope.engine.fold_result import missing_checkpoint, unvalidated_best
from pointgeope.recorded_text import repr_bounded

EVALUATE_ADVICE = ("evaluate a fold with the config it was trained with: drop the overrides of what it was trained "
                   "with (eval.* and the keys of place, speed and memory, such as train.device or data.hierarchy, "
                   "may change), and restore its config.yaml if it was edited")


def fold_record(fold: Fold) -> dict:
    """The ``"fold"`` entry of a checkpoint of ``fold``: ``{"index": int, "test": [str], "train": [str]}``."""
    return {"index": int(fold.index), "test": list(fold.test), "train": list(fold.train)}


def _recorded(path: Path, saved: object) -> tuple[int, list[str], list[str]]:
    """``(index, test, train)`` of a checkpoint's ``"fold"`` entry; a CheckpointError naming the file when the
    entry is damaged."""
    ok = (isinstance(saved, dict) and type(saved.get("index")) is int
          and all(isinstance(saved.get(key), list) and all(isinstance(a, str) for a in saved[key])
                  for key in ("test", "train")))
    if not ok:
        raise CheckpointError(f"{path}: damaged checkpoint: expected a 'fold' entry {{index, test, train}}, got "
                              f"{repr_bounded(saved, 120)}; use a checkpoint the fold's training wrote")
    return saved["index"], saved["test"], saved["train"]


def check_trained_fold(path: str | Path, saved: object, fold: Fold, root: str | Path, log) -> None:
    """Refuse the checkpoint at ``path`` (its ``"fold"`` entry ``saved``) for ``fold`` of ``root/folds.json``
    unless it was trained for the same test areas; ``saved`` ``None`` (written before the entry): a warning
    through ``log``, nothing checked."""
    path = Path(path)
    if saved is None:
        log(f"warning: {path} does not record the fold it was trained for (written by an older pointgeope); "
            "using it without checking that")
        return
    index, test, train = _recorded(path, saved)
    if sorted(test) == sorted(fold.test):
        return
    raise CheckpointError(
        f"{path}: trained for fold {index} (test {', '.join(test) or 'none'}, trained on {', '.join(train)}), but "
        f"this folder is fold {fold.index} (test {', '.join(fold.test)} in {Path(root) / 'folds.json'})",
        advice=f"put fold {fold.index}'s own checkpoint back (or train it: pointgeope train ... --test-area "
               f"{fold.index})")


def fold_checkpoint(run: str | Path, cfg, fold: Fold, log) -> tuple[Path, dict]:
    """The path and content of ``fold``'s checkpoint to test in its folder ``run`` (``eval.checkpoint``),
    checked against ``cfg`` (a ``Config``: its config) and refused when trained for another fold
    (:func:`check_trained_fold`, its warnings through ``log``); one line that says what to do where the fold
    has not saved it yet, or where ``best.pt`` was picked by no validation (``train.val_every: 0``: it holds
    the last epoch, and ``best`` would name a choice that was never made)."""
    from pointgeope.engine.config import config_to_dict

    path = Path(run) / f"{cfg.eval.checkpoint}.pt"
    if not path.is_file():
        raise CheckpointError(missing_checkpoint(path, fold.index))
    ckpt = load_checkpoint(path, config_to_dict(cfg), advice=EVALUATE_ADVICE)
    check_trained_fold(path, ckpt.get("fold"), fold, cfg.data.root, log)
    if line := unvalidated_best(path, ckpt):   # no validation ever scored it
        raise CheckpointError(line)
    return path, ckpt
