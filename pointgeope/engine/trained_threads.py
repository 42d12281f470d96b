"""The torch CPU thread count a checkpoint was trained with, read from its ``threads`` key and said in words.

torch's CPU kernels split their sums by thread, so a fold trained with another count takes other weights (the
same seed, data and code): a score is one count's. ``train.threads`` is a free key (a fold resumes, and a
complete one is skipped, under another count: :data:`~pointgeope.engine.config_diff.FREE_KEYS`), so what states
scores (``ablate``'s report, ``bench/demo_table.py``) reads the count from each fold's ``last.pt`` and names
every count where its folds differ.
"""
from __future__ import annotations

from pathlib import Path

from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint
from pointgeope.number_kind import is_whole
from pointgeope.plural import counted

__all__ = ["saved_threads", "threads_text"]


def saved_threads(path: str | Path) -> int | None:
    """The torch CPU threads the checkpoint at ``path`` was written with; ``None`` where there is no readable
    checkpoint or it does not say. Only its small keys are read (its tensors mapped from the file)."""
    try:
        threads = load_checkpoint(path, mmap=True).get("threads")
    except CheckpointError:
        return None
    return threads if is_whole(threads) else None


def threads_text(counts: list[int | None], what: str = "folds") -> str:
    """``counts`` (one per fold or trial, ``None``: not recorded) in words: one count for all (``1 torch CPU
    thread``), else every count (``what`` differ: not one setting's scores), else what is not recorded."""
    known = sorted({c for c in counts if c is not None})
    if not known or len(known) < len(set(counts)):
        return f"torch CPU threads not recorded for every {what[:-1]}" if known else "torch CPU threads not recorded"
    if len(known) == 1:
        return counted(known[0], "torch CPU thread")
    return f"torch CPU threads {', '.join(map(str, known))} (the {what} differ: their scores are not one setting's)"
