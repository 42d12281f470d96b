"""The checksums of an area file (and of the inputs ``predict`` records, :func:`folder_checksum`).

:func:`file_checksum`, ``"sha256:<hex>"`` of the whole file, read in blocks (0.25 s per 100 MB, 0.4 GB/s, on
a shared 2-core machine: ``bench/results/bench_checksum.json``): ``prepare`` stores it for each ``Area_N.h5`` in
``manifest.json``; a rerun and the training's data check compare it with the file on disk, and a
checkpoint records it as the data it trained on.

:func:`points_checksum`, ``"points:sha256:<hex>"`` of what was measured of the file's points: the arrays
prepared from the raw data, not where they were prepared from, and not what was estimated from them. The whole
file also holds each room's provenance, the attributes ``source`` (RAW's path) and ``signature`` (a hash of RAW's
location and its files' times), and its parse report (``issues``, ``empty_files``, ... naming files by their path
under RAW), so the same release prepared from a moved folder, from its zip, or on another machine gives other
file checksums but the same points checksum. Hashed, in this order::

    root attributes (json, keys sorted: area, class_names, max_extent, schema_version)
    for each room, by name: its name, its origin attribute (json; null without),
        then each measured dataset by name (color, coord, instance, label): name, dtype, shape, bytes (C order)

The derived arrays (:data:`pointgeope.h5.DERIVED_ARRAYS`: ``normal``, estimated from ``coord``) are left out:
they are identified by their own room attributes (``normal_k``, ``normal_version``:
:mod:`pointgeope.data.normal_record`), so that another estimate of the same points (a newer estimator, a kd-tree
that breaks ties between equally near neighbours otherwise) is the same data set with another estimate, which a
run that read it is told of, not other data. A file of a prepare before normals has the same points checksum
as the same points prepared now. The versions between normals and this rule hashed ``normal`` too
(``derived=True``): only :mod:`pointgeope.data.identity` asks for that (``recorded_points``), to
recognise what they recorded.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

BLOCK = 8 << 20


def file_checksum(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def folder_checksum(path: str | Path) -> str:
    """``"files:sha256:<hex>"`` of every regular file below the folder ``path`` (a raw room): for each, by
    its posix path relative to ``path`` in sorted order, ``json [relative path, size]`` then its bytes. A file
    renamed, added, removed or changed gives another checksum; the folder moved or its times changed not."""
    import os

    root = Path(path)
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for name, file in files:
        digest.update(json.dumps([name, os.path.getsize(file)]).encode())
        with open(file, "rb") as f:
            while block := f.read(BLOCK):
                digest.update(block)
    return f"files:sha256:{digest.hexdigest()}"


def points_checksum(path: str | Path, derived: bool = False) -> str:
    """The checksum of the points of the area file at ``path`` (module docstring), opened with
    :func:`pointgeope.h5.open_area` (its errors: SchemaError); with ``derived`` the derived arrays are hashed
    too (the rule of the versions between normals and this one). Reads every hashed array once. A room that is
    not a group, or a hashed member that is not an array, is a SchemaError naming it
    (:func:`pointgeope.h5.checked_rooms`), as the area check refuses it."""
    import numpy as np

    from pointgeope.h5 import DERIVED_ARRAYS, checked_rooms, open_area, room_attrs

    skip = () if derived else DERIVED_ARRAYS
    digest = hashlib.sha256()
    with open_area(path) as f:
        digest.update(json.dumps(room_attrs(f), sort_keys=True).encode())
        for room, (group, members) in sorted(checked_rooms(f, skip=skip).items()):
            origin = group.attrs.get("origin")
            digest.update(json.dumps([room, None if origin is None else np.asarray(origin).tolist()]).encode())
            for name in sorted(members):
                values = np.ascontiguousarray(members[name][()])
                digest.update(json.dumps([name, values.dtype.str, list(values.shape)]).encode())
                digest.update(values.data)
    return f"points:sha256:{digest.hexdigest()}"
