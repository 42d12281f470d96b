"""Cross-validation folds, read from ``OUT/folds.json`` (folds are data, written by ``data_prep``)::

    {"version": 1,
     "folds": {"1": {"test": ["Area_1"], "train": ["Area_2", "Area_3", ...]}, ...}}

Fold ``k`` tests on ``Area_k`` and trains on the other areas present in ``OUT``. An area is the name of
its file in ``OUT`` (``OUT/<area>.h5``), never a path: ``../Area_1`` is refused, as it would be read
outside ``OUT`` and its predictions written outside ``RUN/area_K/predictions``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pointgeope import json_text
from pointgeope.errors import UserError
from pointgeope.recorded_text import repr_bounded

FOLDS_VERSION = 1


class FoldsError(UserError, ValueError):
    """A missing or malformed ``folds.json``."""


@dataclass(frozen=True)
class Fold:
    """One fold: the areas it trains on and the areas it tests on."""

    index: int
    train: tuple[str, ...]
    test: tuple[str, ...]


def _area_list(value: object, where: str, at_least_one: bool = False) -> tuple[str, ...]:
    """The area names of a fold's ``train`` or ``test`` list; a FoldsError naming ``where`` for a list that is
    not one of names of files in the data folder, that names an area twice, or (``at_least_one``) is empty."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise FoldsError(f"{where}: expected a list of area names, got {repr_bounded(value, 80)}")
    if at_least_one and not value:
        raise FoldsError(f"{where}: expected at least one area, got []; name the areas the fold tests on "
                         "(one or more), or remove the fold")
    for area in value:
        if area in ("", ".", "..") or "/" in area or "\\" in area:
            raise FoldsError(f"{where}: expected area names of files in the data folder (Area_N), got "
                             f"{repr_bounded(area, 80)}")
    twice = sorted({area for area in value if value.count(area) > 1})
    if twice:
        raise FoldsError(f"{where}: expected each area once, got {', '.join(map(repr, twice))} more than once")
    return tuple(value)


def load_folds(root: str | Path) -> dict[int, Fold]:
    """Folds of ``root/folds.json`` by fold number, in increasing order.

    Raises:
        FoldsError: no ``folds.json`` under ``root``, or a malformed one (the message names the file and
            the offending entry): keys that are not fold numbers or that are one number twice ("1", "01"),
            a fold testing no area, an area named twice in a list or in both lists.
    """
    path = Path(root) / "folds.json"
    if not Path(root).is_dir():
        raise FoldsError(f"data root {root}: expected a folder of prepared Area_N.h5 and folds.json, found "
                         f"{'a file' if Path(root).exists() else 'nothing'}; set --data-root or data.root")
    if not path.is_file():
        raise FoldsError(f"expected {path} (written by `pointgeope prepare`), found nothing")
    try:
        doc = json_text.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FoldsError(f"{path}: not valid JSON ({err}); run `pointgeope prepare` again") from None
    if not isinstance(doc, dict) or doc.get("version") != FOLDS_VERSION:
        got = doc.get("version") if isinstance(doc, dict) else type(doc).__name__
        raise FoldsError(f"{path}: expected version {FOLDS_VERSION}, got {repr_bounded(got, 80)}: written by another "
                         f"version of pointgeope; re-run `pointgeope prepare RAW OUT` with this version, into a new "
                         f"folder OUT (to keep {root} for the version that wrote it) or into {root} itself")
    raw = doc.get("folds")
    if not isinstance(raw, dict) or not raw:
        raise FoldsError(f"{path}: expected a non-empty object 'folds', got {repr_bounded(raw, 80)}")
    folds, seen = {}, {}
    for key, entry in raw.items():
        where = f"{path}: fold {key!r}"
        if not (key.isascii() and key.isdigit()):   # not "²" or "١", which str.isdigit() also takes
            raise FoldsError(f"{where}: expected a fold number (digits 0-9) as key")
        if int(key) in seen:                          # "1" and "01": one fold would replace the other
            raise FoldsError(f"{where}: the keys {seen[int(key)]!r} and {key!r} are both fold {int(key)}; give "
                             "each fold its own number")
        seen[int(key)] = key
        if not isinstance(entry, dict) or set(entry) != {"train", "test"}:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise FoldsError(f"{where}: expected keys ['test', 'train'], got {keys}")
        train = _area_list(entry["train"], f"{where} 'train'")
        test = _area_list(entry["test"], f"{where} 'test'", at_least_one=True)
        if set(train) & set(test):
            raise FoldsError(f"{where}: areas {sorted(set(train) & set(test))} are in both train and test")
        folds[int(key)] = Fold(int(key), train, test)
    return dict(sorted(folds.items()))


def fold_of(folds: dict[int, Fold], test_area: int, root: str | Path) -> Fold:
    """Fold ``test_area`` (``--test-area``) of ``folds``, those of ``root/folds.json``.

    Raises:
        FoldsError: no such fold; the message names the folds and the areas they test on (those of the
            file, which may be fewer than S3DIS's six) and what to do.
    """
    if test_area in folds:
        return folds[test_area]
    tests = ", ".join(area for fold in folds.values() for area in fold.test)
    prepare = (f", or run `pointgeope prepare` on raw data that holds Area_{test_area}" if test_area >= 0
               else "")  # no raw area is Area_-1
    raise FoldsError(f"--test-area {test_area}: {Path(root) / 'folds.json'} has folds {sorted(folds)} (test areas "
                     f"{tests}); pick one of them{prepare}")
