"""Write the prepared files atomically: per-room work files, ``Area_N.h5``, ``manifest.json``, ``folds.json``.

Every file is written to a temporary name in its folder and moved into place with ``os.replace``, so a
reader (or a rerun after a kill) sees either the old file or the complete new one. Groups and datasets
are created without HDF5 timestamps, so the same rooms give the same bytes.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import h5py
import numpy as np

from pointgeope.atomic import atomic_path, write_text_atomic
from pointgeope.constants import CLASS_NAMES, MAX_ROOM_EXTENT, SCHEMA_VERSION

# name -> dtype of each room array (the schema read by pointgeope.data.h5)
ROOM_DTYPES = {"coord": np.float32, "color": np.uint8, "label": np.uint8, "instance": np.int32}
_STR = h5py.string_dtype()


def _attr(value):
    """An attribute value h5py can store: lists of str become variable-length string arrays."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return np.array(value, dtype=_STR)
    return value


def _plain(value):
    """The Python value of an attribute read back from HDF5 (str, int, list)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _new_group(parent: h5py.Group, name: str) -> h5py.Group:
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def write_room(parent: h5py.Group, name: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """Group ``name`` with the four room arrays (cast to the schema dtypes) and its attributes."""
    group = _new_group(parent, name)
    for key, dtype in ROOM_DTYPES.items():
        group.create_dataset(key, data=np.ascontiguousarray(arrays[key], dtype=dtype), track_times=False)
    for key, value in attrs.items():
        group.attrs[key] = _attr(value)


def read_room(group: h5py.Group) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and the attributes (as plain Python values) of a room group."""
    return {key: group[key][()] for key in ROOM_DTYPES}, room_attrs(group)


def room_attrs(group: h5py.Group) -> dict:
    return {key: _plain(value) for key, value in group.attrs.items()}


def write_room_file(path: Path, room: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """A work file holding one room, written atomically."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        write_room(f, room, arrays, attrs)


def write_area(path: Path, area: str, rooms: Iterable[tuple[str, dict[str, np.ndarray], dict]],
               max_extent: float = MAX_ROOM_EXTENT) -> None:
    """``Area_N.h5`` from ``(room, arrays, attrs)`` in the given order, written atomically; ``max_extent``
    is the room size limit the rooms were validated with (readers check against it)."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["area"] = area
        f.attrs["class_names"] = _attr(list(CLASS_NAMES))
        f.attrs["max_extent"] = float(max_extent)
        for room, arrays, attrs in rooms:
            write_room(f, room, arrays, attrs)


def read_attrs(path: Path) -> dict[str, dict] | None:
    """Room -> attributes of a prepared (or work) file; ``None`` if it is missing, unreadable or of
    another schema version (it is then rebuilt)."""
    try:
        with h5py.File(path, "r") as f:
            if int(f.attrs.get("schema_version", -1)) != SCHEMA_VERSION:
                return None
            return {room: room_attrs(f[room]) for room in f}
    except (OSError, KeyError, ValueError):
        return None


def write_json(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def manifest(source: str, areas: dict[str, dict[str, dict]]) -> dict:
    """``manifest.json``: per area, per room the point count and 13-class histogram, plus totals.

    ``areas`` maps area -> room -> room attributes (as written by prepare).
    """
    out = {"version": 1, "schema_version": SCHEMA_VERSION, "source": source,
           "class_names": list(CLASS_NAMES), "areas": {}}
    total_points, total_rooms, total_counts = 0, 0, np.zeros(len(CLASS_NAMES), dtype=np.int64)
    for area, rooms in areas.items():
        counts = np.zeros(len(CLASS_NAMES), dtype=np.int64)
        entry = {}
        for room, attrs in rooms.items():
            entry[room] = {"num_points": int(attrs["num_points"]),
                          "class_counts": [int(n) for n in attrs["class_counts"]]}
            counts += np.asarray(attrs["class_counts"], dtype=np.int64)
        points = int(counts.sum())
        out["areas"][area] = {"num_rooms": len(rooms), "num_points": points,
                              "class_counts": counts.tolist(), "rooms": entry}
        total_points, total_rooms, total_counts = total_points + points, total_rooms + len(rooms), total_counts + counts
    out["totals"] = {"num_areas": len(areas), "num_rooms": total_rooms, "num_points": total_points,
                     "class_counts": total_counts.tolist()}
    return out


def folds(areas: Iterable[str]) -> dict:
    """``folds.json``: fold k tests on Area_k and trains on the other areas present."""
    areas = sorted(areas, key=lambda a: int(a.split("_")[1]))
    return {"version": 1, "folds": {a.split("_")[1]: {"test": [a], "train": [b for b in areas if b != a]}
                                    for a in areas}}
