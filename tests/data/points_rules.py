"""The points checksum of an area file by each rule, written from their definitions (not by calling
``pointgeope.checksum``), to check the code and to build what older versions recorded:

- :func:`measured_points`: the rule now, every room array but ``normal`` (derived from ``coord``);
- :func:`points_with_normals`: the rule of the versions between normals and it, every room array.
A file without normals (a prepare before them) has one checksum by both.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np

from pointgeope.h5 import room_attrs


def _points(path: Path, arrays: set[str] | None) -> str:
    digest = hashlib.sha256()
    with h5py.File(path, "r") as f:
        digest.update(json.dumps(room_attrs(f), sort_keys=True).encode())
        for room in sorted(f):
            origin = f[room].attrs.get("origin")
            digest.update(json.dumps([room, None if origin is None else [float(v) for v in origin]]).encode())
            for name in sorted(f[room]):
                if arrays is None or name in arrays:
                    values = np.ascontiguousarray(f[room][name][()])
                    digest.update(json.dumps([name, values.dtype.str, list(values.shape)]).encode())
                    digest.update(values.tobytes())
    return "points:sha256:" + digest.hexdigest()


def measured_points(path: Path) -> str:
    return _points(path, {"coord", "color", "label", "instance"})


def points_with_normals(path: Path) -> str:
    return _points(path, None)
