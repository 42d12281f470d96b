"""Which prepared rooms have no colour: prepare's record, read by train.

A room whose every point is ``0 0 0`` in its raw files (a scanner without a camera, the resampled rooms of some
S3DIS copies) is prepared like any other: a model fed colour (``data.color``, features ``[rgb | ...]``) sees it
as a black room. ``prepare`` records it once, where the data enters, as the room attribute ``no_color``
(``True``: every stored colour is ``0 0 0``) and names those rooms in its summary; ``train`` reads that
attribute (no colour is read) and, when ``data.color`` feeds colour and a fold's training rooms include one,
warns once a command (each such fold's ``log.txt`` holds the line). A room prepared before the attribute
existed carries no record, and is passed over (nothing is said of it) until a ``prepare`` into its folder records
it from its stored colours (``data_prep.stale``: such a room is not up to date; ``data_prep.renormal`` reads it,
estimating its normals again only where they are not this version's): the area file then holds a fresh prepare's
bytes, and the files it replaced are listed as of the same points, so runs trained on them stay valid.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

NO_COLOR = "no_color"   # the room attribute prepare writes


def has_no_color(color: np.ndarray) -> bool:
    """``True`` when the ``uint8 (N, 3)`` colours of a room with points are all ``0 0 0``."""
    return bool(len(color)) and not np.asarray(color).any()


def colorless_rooms(root: str | Path, areas: list[str]) -> list[str]:
    """``Area_N/room`` of each room of ``root/<area>.h5`` (``areas``, in order) that prepare recorded as without
    colour; reads the rooms' attributes only."""
    from pointgeope.h5 import area_path, read_rooms_attrs

    return [f"{area}/{room}" for area in areas
            for room, attrs in (read_rooms_attrs(area_path(root, area)) or {}).items() if attrs.get(NO_COLOR)]


def colorless_warning(root: str | Path, areas: list[str]) -> str | None:
    """The one warning line of a run fed colour that trains on ``areas``, when prepare recorded rooms of them
    without colour; ``None`` otherwise."""
    from pointgeope.plural import agreeing, counted, first_of

    rooms = colorless_rooms(root, areas)
    if not rooms:
        return None
    shown = first_of(rooms, 5)
    return (f"warning: data.color feeds colour, but {counted(len(rooms), 'training room')} "
            f"{agreeing(len(rooms), 'has', 'have')} none (every point 0 0 0, as prepare recorded): {shown}; "
            "the network learns them as black rooms (data.color=false trains on geometry alone)")
