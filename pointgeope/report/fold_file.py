"""One fold's ``metrics.json`` as the report reads it: the file read once (its checksum names the bytes read),
checked key by key, and a complete fold's :class:`FoldResult`; an incomplete one is said with the reason, a
damaged one is a :class:`ReportError` naming the file, the key and what to do (:func:`read_fold`). A run's folds
and their summary: :mod:`pointgeope.report.runs`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pointgeope import json_text
from pointgeope.constants import CLASS_NAMES, written_names
from pointgeope.engine.device_text import NOT_RECORDED
from pointgeope.engine.fold_result import pair_problem
from pointgeope.errors import UserError
from pointgeope.metrics import CLASS_MEANS, scores
from pointgeope.number_kind import is_whole
from pointgeope.recorded_text import bounded, recorded_text, repr_bounded
from pointgeope.report.citation import code_of
from pointgeope.report.machine import fold_machine
from pointgeope.report.settings import fold_settings

__all__ = ["ReportError", "FoldResult", "read_fold", "same_class_names"]

AGAIN = "evaluate the fold again (pointgeope evaluate RUN/area_K)"  # what a damaged metrics.json asks for: a new one


class ReportError(UserError, ValueError):
    """A run folder or metrics file that the report cannot use; the message names it."""


@dataclass(frozen=True)
class FoldResult:
    """One complete fold: its test area and the confusion matrix ``(C, C)`` over that area."""
    area: str  # "Area_K"
    fold: int  # K
    confusion: np.ndarray  # int64 (C, C), rows = ground truth, columns = prediction
    path: Path
    class_mean: str = "present"  # the rule of mAcc / mIoU (pointgeope.metrics.CLASS_MEANS)
    settings: dict | None = None  # section.key -> value it was trained and evaluated with (report/settings.py)
    class_names: tuple[str, ...] = CLASS_NAMES  # the C classes of its confusion matrix, in label order
    sha256: str = ""  # "sha256:<hex>" of the metrics.json its scores were read from (report.json names it)
    machine: dict = field(default_factory=dict)  # {aspect: text} of where it was trained and tested (machine.py)
    code: str = NOT_RECORDED  # the pointgeope version (and commit) that tested it (report/citation.py)

    @property
    def scores(self) -> dict:
        return scores(self.confusion, self.class_mean)

    @property
    def num_points(self) -> int:
        return int(self.confusion.sum())


def _load_json(path: Path) -> tuple[dict, str]:
    """The JSON object of the file ``path`` and ``"sha256:<hex>"`` of the bytes it was read from (one read: the
    report names which file its numbers came from, :class:`FoldResult`'s ``sha256``)."""
    try:
        raw = path.read_bytes()
        data = json_text.loads(raw)
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); {AGAIN}") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a text file (damaged?); {AGAIN}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data, f"sha256:{hashlib.sha256(raw).hexdigest()}"


def _class_names(value, path: Path) -> tuple[str, ...]:
    """A metrics file's ``class_names``: S3DIS's 13 where it has none (written before the key), else its list
    of distinct non-empty names, one per class; a ReportError for anything else."""
    if value is None:
        return CLASS_NAMES
    if not (isinstance(value, list) and value and all(isinstance(n, str) and n for n in value)
            and len(set(value)) == len(value)):
        raise ReportError(f"{path}: expected class_names a list of distinct names, one per class (S3DIS: "
                          f"{list(CLASS_NAMES)}), got {bounded(json.dumps(value))}")
    return tuple(value)


def _names_beside(names: tuple[str, ...], confusion) -> tuple[str, ...]:
    """``names`` as the class names of ``confusion`` (a metrics file's, unchecked): S3DIS's 13 beside an
    ``n x n`` list of lists are those of ``n`` classes (:func:`constants.written_names`: evaluate wrote the
    first 13 names alone for a network of more classes). Any other mismatch is left to :func:`_confusion`."""
    if isinstance(confusion, list) and all(isinstance(row, list) and len(row) == len(confusion) for row in confusion):
        return tuple(written_names(names, len(confusion)))
    return names


def same_class_names(items: list[tuple[Path, tuple[str, ...]]]) -> tuple[str, ...]:
    """The class names that every ``(metrics file, class names)`` of ``items`` has (the folds of a run, runs
    side by side: their scores compare class by class); a ReportError naming the first file and the first
    that differs from it."""
    first_path, first = items[0]
    for path, names in items[1:]:
        if names != first:
            raise ReportError(f"{path}: expected class_names {repr_bounded(list(first))} (those of {first_path}), "
                              f"got {repr_bounded(list(names))}; folds pooled and runs compared must have the same "
                              "classes")
    return first


def _confusion(value, path: Path, c: int) -> np.ndarray:
    """The ``(C, C)`` counts of a metrics file's ``confusion``, checked entry by entry as JSON gives them (a
    ``true`` would count as 1 in numpy); a ReportError naming the first bad entry, or a matrix of no point."""
    expected = f"expected 'confusion' as {c} x {c} non-negative integer counts"
    if not (isinstance(value, list) and len(value) == c and all(isinstance(r, list) and len(r) == c for r in value)):
        raise ReportError(f"{path}: {expected}, got shape {np.asarray(value, dtype=object).shape}; {AGAIN}")
    for i, row in enumerate(value):
        for j, x in enumerate(row):
            if not is_whole(x) or not 0 <= x < 2**62:
                raise ReportError(f"{path}: {expected}, got {bounded(json.dumps(x))} at [{i}][{j}]; {AGAIN}")
    confusion = np.asarray(value, dtype=np.int64)
    if not confusion.any():
        raise ReportError(f"{path}: 'confusion' counts no point; {AGAIN}")
    return confusion


def read_fold(path: Path, fold: int) -> tuple[FoldResult | None, str]:
    """Read one ``metrics.json``; ``(None, reason)`` for an incomplete fold, a :class:`ReportError` for a bad file."""
    data, sha256 = _load_json(path)
    area, recorded = f"Area_{fold}", data.get("fold", fold)
    if not is_whole(recorded):  # null, "x", 1.7, true: int() took or crashed
        raise ReportError(f"{path}: expected 'fold' a fold number (an integer), got {bounded(json.dumps(recorded))}; "
                          f"{AGAIN}")
    if data.get("area", area) != area or recorded != fold:
        why = (f"; a fold's file in another fold's folder: evaluate the fold again (pointgeope evaluate "
               f"{path.parent})" if recorded != fold else
               "; the report pools S3DIS's six folds, fold K testing Area_K alone (prepare's folds.json), so a "
               "fold of an edited folds.json cannot be pooled with them")
        raise ReportError(f"{path}: expected the results of {area} (fold {fold}), "
                          f"got area={repr_bounded(data.get('area'))} fold={repr_bounded(data.get('fold'))}{why}")
    if not isinstance(data.get("complete"), bool):  # "true" (a string) read as unfinished; none: a damaged file
        got = bounded(json.dumps(data["complete"])) if "complete" in data else "no such key"  # (always written)
        raise ReportError(f"{path}: expected 'complete' true or false, got {got}; {AGAIN}")
    if data.get("complete") is not True:  # an evaluation of an interrupted training: flagged, never pooled
        trained, epochs = data.get("trained_epochs"), data.get("epochs")   # one line of report.md each: said bounded
        return None, (f"unfinished: trained {recorded_text(trained, int)} of {recorded_text(epochs, int)} epochs"
                      if epochs else "incomplete")
    if problem := pair_problem(path.parent, data):  # a test stopped between its predictions and this file
        return None, problem.report_reason()
    names = _class_names(data.get("class_names"), path)
    if "confusion" not in data:
        raise ReportError(f"{path}: expected a 'confusion' matrix, the file has keys {repr_bounded(sorted(data))}")
    names = _names_beside(names, data["confusion"])
    confusion = _confusion(data["confusion"], path, len(names))
    rule = data.get("class_mean", "present")
    if rule not in CLASS_MEANS:
        raise ReportError(f"{path}: expected 'class_mean' in {CLASS_MEANS}, got {repr_bounded(rule)}")
    return FoldResult(area, fold, confusion, path, rule, fold_settings(data, path.parent), names, sha256,
                      fold_machine(data), code_of(data)), ""
