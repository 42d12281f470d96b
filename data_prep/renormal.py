"""A stored room whose normals are not this prepare's estimate, given this prepare's from its own stored
``coord`` (the normals depend on ``coord`` alone), or whose normals are but which lacks the colour record, given
that from its stored colours: no raw file is parsed again.

``prepare`` does it for a room whose signature matches (its raw files have not changed) but whose normals are
of another estimate or missing, or whose colour record is (``data_prep.stale``: a folder of an older version);
the room then goes through a work file like a parsed one (atomic, resumable), and the area file ends as a fresh
prepare's, byte for byte.
"""
from __future__ import annotations

import time
from pathlib import Path


def renormal_room(path: Path, room: str):
    """The :class:`data_prep.room.RoomData` of ``room`` as stored in ``path`` (an area or work file), its
    normals, ``normal_k`` and ``normal_version`` those of :func:`data_prep.room.add_normals`; a room stored before
    the colour record gets it (``no_color``, :mod:`pointgeope.data.color_record`, of its colours read here), as a
    parse writes it."""
    from data_prep import room as rooms
    from pointgeope.data.color_record import NO_COLOR, has_no_color
    from pointgeope.h5 import NORMAL, read_room_record

    start = time.perf_counter()
    arrays, attrs = read_room_record(path, room, skip=(NORMAL,))  # replaced: not read (a damaged one is no matter)
    if NO_COLOR not in attrs:
        attrs = with_color_record(attrs, has_no_color(arrays["color"]))
    seconds = rooms.add_normals(arrays, attrs)
    return rooms.RoomData(arrays, attrs, seconds=time.perf_counter() - start, normal_seconds=seconds)


def recorded_room(path: Path, room: str):
    """The :class:`data_prep.room.RoomData` of ``room`` as stored in ``path``, its normals (this prepare's) kept,
    with the colour record (``no_color``) that a prepare before it did not write, from its stored colours."""
    from data_prep import room as rooms
    from pointgeope.data.color_record import has_no_color
    from pointgeope.h5 import read_room_record

    start = time.perf_counter()
    arrays, attrs = read_room_record(path, room)
    attrs = with_color_record(attrs, has_no_color(arrays["color"]))
    return rooms.RoomData(arrays, attrs, seconds=time.perf_counter() - start, normal_seconds=0.0)


def with_color_record(attrs: dict, no_color: bool) -> dict:
    """``attrs`` with ``no_color`` where a parse writes it, before ``issues`` (:func:`data_prep.room.load_room`'s
    order: HDF5 keeps attributes in the order they are written, and the file is to be a fresh prepare's)."""
    from pointgeope.data.color_record import NO_COLOR

    keys = list(attrs)
    at = keys.index("issues") if "issues" in keys else len(keys)
    return {**{k: attrs[k] for k in keys[:at]}, NO_COLOR: no_color, **{k: attrs[k] for k in keys[at:]}}
