"""Write the prepared files' JSON companions atomically: ``manifest.json`` and ``folds.json``.

The HDF5 files (``Area_N.h5`` and the per-room work files) are written by :mod:`pointgeope.h5`, the one
owner of their layout.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from data_prep.names import area_number
from pointgeope.atomic import write_text_atomic
from pointgeope.constants import CLASS_NAMES
from pointgeope.h5 import SCHEMA_VERSION


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
    """``folds.json``: fold k tests on Area_k and trains on the other areas present; k is the area's number
    (:func:`data_prep.names.area_number`: ``Area_01`` is fold "1")."""
    areas = sorted(areas, key=area_number)
    return {"version": 1, "folds": {str(area_number(a)): {"test": [a], "train": [b for b in areas if b != a]}
                                    for a in areas}}


def with_lineage(old: dict, lineage: dict, trusted: dict[str, str | None]) -> dict:
    """The manifest ``old`` as a prepare killed after replacing area files left it: for each area whose file
    is the one ``lineage`` (area -> ``[checksum, points, same_points]``, recorded before it replaced the
    previous file) names, and ``trusted`` (area -> checksum of the file now) holds, that file's ``checksums``,
    ``points`` and ``same_points`` (``pointgeope.data.identity.prepared_points``), which only the replaced file
    told."""
    def section(key: str) -> dict:
        return dict(old[key]) if isinstance(old.get(key), dict) else {}

    new = {**old, "checksums": section("checksums"), "points": section("points"), "same_points": section("same_points")}
    for area, entry in lineage.items():
        if isinstance(entry, list) and len(entry) == 3 and entry[0] == trusted.get(area) \
                and isinstance(entry[1], str) and isinstance(entry[2], list):
            new["checksums"][area], new["points"][area], new["same_points"][area] = entry
    return new
