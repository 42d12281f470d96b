"""Read the prepared S3DIS HDF5 files (written by ``data_prep``) and prediction files.

Layout of ``OUT/Area_N.h5`` (schema version ``constants.SCHEMA_VERSION``)::

    /                      attrs: schema_version, area, class_names
    /<room>/coord          float32 (N, 3)  metres, as in the raw files
    /<room>/color          uint8   (N, 3)
    /<room>/label          uint8   (N,)    0..12 in constants.CLASS_NAMES order
    /<room>/instance       int32   (N,)    object id within the room
            attrs: num_points, source, ...

Predictions ``RUN/area_K/predictions/Area_K.h5``: ``/<room>/pred`` uint8 (N,), aligned point for point
with the prepared room, root attr ``kind = "predictions"``.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from pointgeope.constants import SCHEMA_VERSION
from pointgeope.errors import UserError

ROOM_FIELDS = ("coord", "color", "label", "instance")


class SchemaError(UserError, ValueError):
    """A prepared file that this version of pointgeope cannot read."""


def open_area(path: str | Path) -> h5py.File:
    """Open a prepared area file read-only after checking its schema version."""
    path = Path(path)
    if not path.is_file():
        raise SchemaError(f"expected a prepared area file, found nothing at {path}; run `pointgeope prepare` "
                          "or check data.root and folds.json")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise SchemaError(f"{path}: not a readable HDF5 file ({err}); it is truncated or corrupt: run "
                          "`pointgeope prepare` again") from None
    version = f.attrs.get("schema_version")
    if version is None or int(version) != SCHEMA_VERSION:
        f.close()
        raise SchemaError(f"{path}: expected schema_version {SCHEMA_VERSION}, got {version}; "
                          "re-run `pointgeope prepare` with this version of pointgeope")
    return f


def list_rooms(path: str | Path) -> dict[str, int]:
    """Room name -> number of points, in file order."""
    with open_area(path) as f:
        return {name: int(f[name]["label"].shape[0]) for name in f}


def read_room(path: str | Path, room: str, fields: tuple[str, ...] = ROOM_FIELDS) -> dict[str, np.ndarray]:
    """The arrays of one room as numpy arrays."""
    with open_area(path) as f:
        if room not in f:
            raise KeyError(f"{path}: no room {room!r}; rooms are {sorted(f)}")
        return {key: f[room][key][()] for key in fields}


def read_predictions(path: str | Path, room: str) -> np.ndarray:
    """Predicted labels ``(N,)`` of one room from a predictions file."""
    path = Path(path)
    with h5py.File(path, "r") as f:
        if room not in f:
            raise KeyError(f"{path}: no predictions for room {room!r}; rooms are {sorted(f)}")
        return f[room]["pred"][()]
