"""The network's classes against the labels a fold's area files hold: the line that names classes that never occur.

``model.num_classes`` sets the network's ``C`` outputs; the data's label set is what its area files hold (the
fold's training and test areas, each room's ``label``: the one record that holds for files of any origin,
``prepare``'s or a user's own labels). A class ``c < C`` with no point in any of the fold's areas cannot be
learnt, and under ``eval.class_mean: all`` (the PTv1 authors' rule, :func:`pointgeope.metrics.scores`)
counts an IoU and an accuracy of 0 in every mean::

    miou_all = (1/C) sum_c TP_c / (union_c + 1e-10) = (k/C) * (mean over the k classes that occur)

(at most; 13 S3DIS classes under ``model.num_classes=20``: 13/20 of the score). Training starts anyway,
with one warning line: a head wider than the data is legitimate (labels of one's own in other folds, a
head kept for other data), but never silent.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope.constants import IGNORE_LABEL, class_names
from pointgeope.h5 import area_path, open_area
from pointgeope.plural import counted, first_of

__all__ = ["absent_classes_warning", "label_counts"]


def label_counts(root: str | Path, areas: list[str], checked: dict[str, dict[str, int]] | None = None) -> np.ndarray:
    """``int64 (256,)``: the number of points of each label value in the ``areas``' files under ``root``, over
    every room (the ignore label's included; a caller leaves it out).

    ``checked``: :func:`~pointgeope.data.check.check_areas` of these areas (room -> points), just made. An
    area whose file that check found equal to its checksum in ``manifest.json`` takes the per-room
    ``class_counts`` that ``prepare`` recorded there (the file is the one they were counted from) when they
    agree with it (the same rooms, each room's counts summing to its points); any other area's labels are
    read (a root without a manifest, areas copied in by hand, a manifest without counts)."""
    from pointgeope.data.check import read_manifest

    manifest = read_manifest(root) if checked is not None else None
    counts = np.zeros(256, dtype=np.int64)
    for area in areas:
        recorded = _recorded(manifest, area, (checked or {}).get(area))
        if recorded is not None:
            counts += recorded
            continue
        with open_area(area_path(root, area)) as f:
            for room in f:
                counts += np.bincount(f[room]["label"][()].ravel(), minlength=256)[:256]
    return counts


def _recorded(manifest: object, area: str, rooms: dict[str, int] | None) -> np.ndarray | None:
    """``int64 (256,)``: ``area``'s label counts as ``manifest`` records them, room by room, where the file was
    checked against its checksum there (``rooms``: room -> points of the check) and the record agrees with
    what the check found; ``None`` where it cannot be used."""
    try:
        listed = area in manifest["checksums"]
        entry = manifest["areas"][area]["rooms"]
    except (TypeError, KeyError):
        return None
    if not listed or rooms is None or not isinstance(entry, dict) or set(entry) != set(rooms):
        return None
    counts = np.zeros(256, dtype=np.int64)
    for room, points in rooms.items():
        got = entry[room].get("class_counts") if isinstance(entry[room], dict) else None
        if (not isinstance(got, list) or not 0 < len(got) <= 256 or not all(type(n) is int and n >= 0 for n in got)
                or sum(got) != points):
            return None
        counts[:len(got)] += got
    return counts


def _listed(classes: list[int], names: list[str], most: int = 6) -> str:
    return first_of((names[c] if names[c] == f"class_{c}" else f"{names[c]} ({c})" for c in classes), most)


def absent_classes_warning(num_classes: int, counts: np.ndarray, areas: list[str], class_mean: str,
                           ignore_index: int | None = IGNORE_LABEL) -> str | None:
    """The warning line for the classes ``0..num_classes-1`` that ``counts`` (:func:`label_counts` of
    ``areas``) never holds, or ``None`` when each occurs; it names them, says what ``class_mean`` makes
    of them, and, when they are the top ones (a ``model.num_classes`` above the data's labels), the value
    that fits the data. ``ignore_index`` (``train.ignore_index``): a label never learnt, not reported."""
    seen = counts[:num_classes].copy()
    if ignore_index is not None and 0 <= ignore_index < num_classes:
        seen[ignore_index] = 1
    absent = [int(c) for c in np.flatnonzero(seen == 0)]
    if not absent:
        return None
    k = num_classes - len(absent)
    names = class_names(num_classes)
    line = (f"warning: model.num_classes={num_classes}, but the fold's area files ({', '.join(areas)}) hold no "
            f"point of {len(absent)} of its classes: {_listed(absent, names)}; the network cannot learn them")
    if class_mean == "all":
        line += (f", and under eval.class_mean=all each counts an IoU and an accuracy of 0: every mIoU and mAcc "
                 f"is at most {k}/{num_classes} of the mean over the {counted(k, 'class')} it holds")
    top = int(np.flatnonzero(counts[:num_classes])[-1]) + 1 if k else 0
    if k and absent == list(range(top, num_classes)):
        return line + f"; set model.num_classes={top} (the data's labels are 0..{top - 1})"
    return line + ("; eval.class_mean=present leaves them out of mAcc, and out of mIoU while no point is predicted "
                   "as one of them" if class_mean == "all" else "")
