"""Cross-validation folds, read from ``OUT/folds.json`` (folds are data, written by ``data_prep``)::

    {"version": 1,
     "folds": {"1": {"test": ["Area_1"], "train": ["Area_2", "Area_3", ...]}, ...}}

Fold ``k`` tests on ``Area_k`` and trains on the other areas present in ``OUT``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FOLDS_VERSION = 1


@dataclass(frozen=True)
class Fold:
    """One fold: the areas it trains on and the areas it tests on."""

    index: int
    train: tuple[str, ...]
    test: tuple[str, ...]


def _area_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValueError(f"{where}: expected a list of area names, got {value!r}")
    return tuple(value)


def load_folds(root: str | Path) -> dict[int, Fold]:
    """Folds of ``root/folds.json`` by fold number, in increasing order.

    Raises:
        FileNotFoundError: no ``folds.json`` under ``root``.
        ValueError: a malformed file (the message names the file and the offending entry).
    """
    path = Path(root) / "folds.json"
    if not path.is_file():
        raise FileNotFoundError(f"expected {path} (written by `pointgeope prepare`), found nothing")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("version") != FOLDS_VERSION:
        got = doc.get("version") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{path}: expected version {FOLDS_VERSION}, got {got!r}")
    raw = doc.get("folds")
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected a non-empty object 'folds', got {raw!r}")
    folds = {}
    for key, entry in raw.items():
        where = f"{path}: fold {key!r}"
        if not key.isdigit():
            raise ValueError(f"{where}: expected a fold number as key")
        if not isinstance(entry, dict) or set(entry) != {"train", "test"}:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ValueError(f"{where}: expected keys ['test', 'train'], got {keys}")
        train = _area_list(entry["train"], f"{where} 'train'")
        test = _area_list(entry["test"], f"{where} 'test'")
        if set(train) & set(test):
            raise ValueError(f"{where}: areas {sorted(set(train) & set(test))} are in both train and test")
        folds[int(key)] = Fold(int(key), train, test)
    return dict(sorted(folds.items()))
