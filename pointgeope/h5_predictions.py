"""The predictions files of pointgeope, read and written here only: a fold's and a scan's.

Fold predictions ``RUN/area_K/predictions/Area_K.h5`` (written by ``pointgeope train`` and ``evaluate``)::

    /                      attrs: kind = "predictions", area, checkpoint, epoch, test (the token of the test
                           that wrote it: metrics.json's "predictions_test"), class_names (the network's),
                           ignore_index (the run's train.ignore_index; older files have none)
    /<room>/pred           uint8 (N,)      aligned point for point with the prepared room

Scan predictions ``DIR/<name>_pred.h5`` (``pointgeope predict --format h5``): one room in the prepared
layout of :mod:`pointgeope.h5` plus its ``pred`` array, root attrs ``kind = "scan-predictions"``
(:data:`~pointgeope.h5.SCAN_PREDICTIONS`) and ``ignore_index`` (:func:`write_scan_predictions`), so that
the viewer reads it as an area file.

Every reader of a predictions file goes through :func:`_open_predictions`: a file that is missing or no
HDF5 file is a :class:`~pointgeope.h5.SchemaError` that names it and says what was expected.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from pointgeope.constants import FOLD_NAME
from pointgeope.h5 import OPTIONAL_ARRAYS, ROOM_FIELDS, SCAN_PREDICTIONS, SCHEMA_VERSION, SchemaError, opened_member
from pointgeope.h5_file import create_file, from_attr, to_attr
from pointgeope.paths import inside

PRED = "pred"  # the predictions dataset of a room
# What a predictions file is, as the errors of a reader name it.
_PREDICTIONS = "RUN/area_N/predictions/Area_N.h5 or a file of pointgeope predict --format h5"


def predictions_path(run: str | Path, area: str) -> Path:
    """``RUN/area_K/predictions/<area>.h5``, given the fold folder ``run`` (checked to lie in its
    predictions folder, :func:`pointgeope.paths.inside`)."""
    folder = Path(run) / "predictions"
    return inside(folder, folder / f"{area}.h5", f"area {area!r} of folds.json", "the predictions folder")


def _open_predictions(path: str | Path) -> h5py.File:
    """A predictions file (fold or scan) opened read-only; a SchemaError naming it if it is none."""
    path = Path(path)
    if not path.is_file():
        fold = path.parent.parent   # a fold's predictions, deleted: its evaluation writes them (train skips it)
        fix = (f"; `pointgeope evaluate {fold}` writes it" if path.parent.name == "predictions"
               and FOLD_NAME.fullmatch(fold.name) and (fold / "last.pt").is_file() else "")
        raise SchemaError(f"expected a predictions file ({_PREDICTIONS}), found nothing at {path}{fix}")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise SchemaError(f"{path}: not a readable HDF5 file ({err}); expected {_PREDICTIONS}") from None


def read_predictions(path: str | Path, room: str) -> np.ndarray:
    """Predicted labels ``(N,)`` of one room from a predictions file (fold or scan); a SchemaError naming
    the file when it holds no predictions of ``room``, or ``pred`` is not one integer label per point (float
    labels reached the metrics' ValueError, a traceback of ``viz --list --pred``)."""
    with _open_predictions(path) as f:
        if room not in f:
            raise SchemaError(f"{path}: no predictions for room {room!r}; rooms are {sorted(f)}")
        group = _room(f, room)
        if not isinstance(group, h5py.Group) or PRED not in group:
            raise SchemaError(f"{path}: room {room!r} holds no predictions (no 'pred' array); expected "
                              f"{_PREDICTIONS}")
        pred = opened_member(group, PRED, f"{f.filename}: room {room!r}: expected 'pred' to be integer labels of "
                             "shape (N,)", f"expected {_PREDICTIONS}")
        if not isinstance(pred, h5py.Dataset) or pred.ndim != 1 or pred.dtype.kind not in "iu":
            what = f"{pred.dtype} {pred.shape}" if isinstance(pred, h5py.Dataset) else "a group"
            raise SchemaError(f"{path}: room {room!r}: expected 'pred' to be integer labels of shape (N,), got "
                              f"{what}; expected {_PREDICTIONS}")
        return pred[()]


def _room(f: h5py.File, room: str) -> h5py.Group | h5py.Dataset:
    """``f[room]``, which ``f`` holds; a link there (to nothing, in a loop or to another object) or a second name of
    an object is a SchemaError naming the file and the room (:func:`pointgeope.h5.opened_member`)."""
    return opened_member(f, room, f"{f.filename}: expected room {room!r} to be a group of predictions",
                         f"expected {_PREDICTIONS}")


def predictions_attrs(path: str | Path, *keys: str) -> list:
    """The root attributes ``keys`` of a predictions file (fold or scan) or area file as Python values, ``None``
    for one it does not carry (``class_names``: a list of str; fold files of older versions have none)."""
    with _open_predictions(path) as f:
        return [None if f.attrs.get(key) is None else from_attr(f.attrs[key]) for key in keys]


def predictions_area(path: str | Path) -> tuple[str | None, str | None]:
    """``(area, kind)``: the root attributes ``area`` and ``kind`` of a predictions file (fold: ``"predictions"``,
    scan: ``"scan-predictions"``) or area file; ``None`` for one it does not carry."""
    return tuple(None if v is None else str(v) for v in predictions_attrs(path, "area", "kind"))


def predicted_rooms(path: str | Path) -> set[str]:
    """The rooms a predictions file holds predictions of."""
    with _open_predictions(path) as f:
        return {room for room in f if isinstance(group := _room(f, room), h5py.Group) and PRED in group}


def predictions_test(path: str | Path) -> str | None:
    """The token of the test that wrote a fold predictions file (root attr ``test``, which the test's
    ``metrics.json`` carries too: :mod:`pointgeope.engine.fold_result`); ``None`` where the file has none
    (written before tests recorded it). A missing or unreadable (damaged, cut short) file raises ``OSError``:
    it is no token, and no stopped test either."""
    with h5py.File(path, "r") as f:
        value = f.attrs.get("test")
    return None if value is None else str(from_attr(value))


def has_predictions(path: str | Path, room: str) -> bool:
    """Whether ``room`` of the file carries its own ``pred`` array (a scan-predictions file)."""
    with _open_predictions(path) as f:
        return room in f and isinstance(group := _room(f, room), h5py.Group) and PRED in group


def write_predictions(path: Path, area: str, rooms: dict[str, np.ndarray], attrs: dict) -> None:
    """Fold predictions: group per room (sorted) with ``pred`` uint8 (N,), written atomically."""
    with create_file(path) as f:
        f.attrs.update({"kind": "predictions", "area": area, **{key: to_attr(v) for key, v in attrs.items()}})
        for room in sorted(rooms):
            f.create_group(room).create_dataset(PRED, data=rooms[room].astype(np.uint8),
                                                compression="gzip", compression_opts=1)


def write_scan_predictions(path: Path, area: str, room: str, arrays: dict[str, np.ndarray], pred: np.ndarray,
                           class_names: list[str], source: str, group_attrs: dict, more: dict | None = None) -> None:
    """A scan's predictions as a one-room area file, written atomically: root attrs ``schema_version``,
    ``area``, ``class_names``, ``kind = "scan-predictions"``, ``source`` and ``more``; group ``room`` with
    ``group_attrs``, the four room arrays (already in the schema dtypes), ``normal`` where ``arrays`` holds it
    (stored float16 as in a prepared room) and ``pred`` uint8 ``(N,)``."""
    with create_file(path) as f:
        f.attrs.update({"schema_version": SCHEMA_VERSION, "area": area, "class_names": class_names,
                        "kind": SCAN_PREDICTIONS, "source": source, **(more or {})})
        g = f.create_group(room)
        g.attrs.update(group_attrs)
        optional = {k: np.asarray(arrays[k], dtype=dtype) for k, (dtype, _) in OPTIONAL_ARRAYS.items() if k in arrays}
        for key, value in {**{k: arrays[k] for k in ROOM_FIELDS}, **optional, PRED: pred.astype(np.uint8)}.items():
            g.create_dataset(key, data=value, compression="gzip", compression_opts=1)
