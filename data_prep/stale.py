"""Which stored rooms ``prepare`` does not take as they are although their raw files have not changed (same
signature), and what it does with them (:func:`stale`).

A room held by ``Area_N.h5`` or a work file is up to date when its signature (its annotation files and the
point limits) matches, unless it was stored by an older prepare in a way this one no longer writes:

- without normals, or with normals of another estimate (``normal_k`` and ``normal_version``,
  :mod:`pointgeope.data.normal_record`, other than :func:`~pointgeope.data.normal_record.current`), or without
  the ``normal_version`` attribute (a prepare before it; so that a folder holds the bytes of a fresh prepare): its
  normals are estimated again from its stored ``coord`` (``data_prep.renormal``; its raw files are not parsed
  again), and the area file rewritten, resumably like any prepare;
- with this version's normals but without the colour record (``no_color``, :mod:`pointgeope.data.color_record`:
  a prepare of the hour between the two): its stored colours are read to record it (``data_prep.renormal``; its
  normals and raw files as they are), and the area file rewritten as above, so that ``train`` warns of a room
  without colour as it does for a fresh prepare's;
- with coordinates far from 0 stored as float32 as they came, where a prepare now stores them minus an
  ``origin`` (:func:`_lossy`): parsed again.
"""
from __future__ import annotations

import sys
from pathlib import Path

NORMALS = "normals"  # stale(): only its normals are not this prepare's
RECORD = "record"  # stale(): only its colour record is missing
PARSE = "parse"  # stale(): parse it again


def stale(path: Path, room, attrs: dict) -> str | None:
    """What the stored ``room`` (``attrs`` its attributes in ``path``) needs (module docstring): ``None`` (up
    to date), :data:`NORMALS`, :data:`RECORD` or :data:`PARSE`."""
    from pointgeope.data.color_record import NO_COLOR
    from pointgeope.data.normal_record import is_current

    if _lossy(path, room, attrs):
        return PARSE
    if not is_current(attrs):
        return NORMALS
    return None if NO_COLOR in attrs else RECORD


def _lossy(path: Path, room, attrs: dict) -> bool:
    """Whether the stored room (``attrs`` its attributes in ``path``) is stale though its signature matches:
    written before rooms far from 0 were stored minus an ``origin``, as float32 as they came (25 cm steps
    at y = 4e6 m), which a prepare now stores minus its origin. Such a room has no ``origin`` attribute and
    a coordinate beyond :data:`~data_prep.room.PRECISE_FLOAT32` (16,384 m) from 0; only rooms without the
    attribute have their ``coord`` read. (Beyond, not at: a coordinate just below 16,384 m, stored without
    origin, may round to 16,384 in float32, and would be parsed again on every run.) The room's first point
    decides for the usual room: one within 8,192 m of 0 leaves every point within 16,384 m, as a stored room
    spans at most twice ``--max-extent`` (1 km by default) around its median; only a room whose first point
    is farther has its whole ``coord`` read (a rerun over all of S3DIS reads 272 points, not 3 GB)."""
    import numpy as np

    from data_prep.room import PRECISE_FLOAT32
    from pointgeope.h5 import open_area, read_room, room_group

    if "origin" in attrs or not attrs.get("num_points"):
        return False
    with open_area(path) as f:
        first = np.asarray(room_group(f, room.name)["coord"][0], dtype=np.float64)
    if float(np.abs(first).max()) <= PRECISE_FLOAT32 / 2:
        return False
    reach = float(np.abs(read_room(path, room.name, ("coord",))["coord"]).max())
    if reach <= PRECISE_FLOAT32:
        return False
    print(f"warning: {room.area}/{room.name}: stored by an older prepare with coordinates up to {reach:,.0f} m "
          "as float32 as they came (losing millimetres); parsing it again, stored minus its origin", file=sys.stderr)
    return True
