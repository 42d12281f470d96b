"""A stored room whose normals are not this prepare's estimate, given this prepare's from its own stored
``coord`` (the normals depend on ``coord`` alone): no raw file is parsed again.

``prepare`` does it for a room whose signature matches (its raw files have not changed) but whose normals are
of another estimate or missing (``data_prep.stale``: a folder of an older version); the room then goes through
a work file like a parsed one (atomic, resumable), and the area file ends as a fresh prepare's, byte for byte.
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
    attrs.setdefault(NO_COLOR, has_no_color(arrays["color"]))
    seconds = rooms.add_normals(arrays, attrs)
    return rooms.RoomData(arrays, attrs, seconds=time.perf_counter() - start, normal_seconds=seconds)
