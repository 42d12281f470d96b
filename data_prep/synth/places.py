"""The places a rerun of ``pointgeope synth`` writes in OUT (each area's folder, each room's folder and files),
checked before they are kept or written.

A room is written whole: its files go into a temporary folder renamed to the room's. So a room folder that lacks
one of its files (emptied by hand, a file removed, a folder where a file was) is not one synth wrote; kept, it
would be listed in the manifest with files missing, and the dataset reported complete.
"""
from __future__ import annotations

import os
from pathlib import Path

from pointgeope.plural import first_of


def check_places(out: Path, planned: set[tuple[str, str]]) -> None:
    """A ``ValueError`` naming the first place of an area or room folder of the plan (``(area, room)`` pairs)
    that holds something else: a file, or a link that leads to no folder (synth would fail there after the rooms
    before it), or a room folder without its room file ``<room>.txt`` or its ``Annotations`` folder. (Which
    annotation files a room holds is known once its layout is made: :func:`check_room`.)"""
    for place in sorted({out / area for area, _ in planned} | {out / area / room for area, room in planned}):
        kind = "room" if place.parent != out else "area"
        if os.path.lexists(place) and not place.is_dir():
            what = "a link that leads to no folder" if place.is_symlink() else "a file"
            raise ValueError(f"{place}: {what} where synth writes the {kind}'s folder; remove it, or choose "
                             "another OUT")
        if kind == "room" and place.is_dir():
            check_room(place, [])


def check_room(room: Path, annotations: list[str]) -> None:
    """A ``ValueError`` naming the folder ``room`` where it lacks one of its files, each a file: ``<room>.txt``,
    the folder ``Annotations`` and, in it, each of ``annotations`` (file names): ``...: a room folder without
    office_1.txt or Annotations``, ``without Annotations/chair_2.txt and 3 more annotation files``."""
    missing = [] if (room / f"{room.name}.txt").is_file() else [f"{room.name}.txt"]
    if not (room / "Annotations").is_dir():
        missing.append("Annotations")
    elif absent := sorted(set(annotations) - _files_in(room / "Annotations"), key=annotations.index):
        missing.append(first_of((f"Annotations/{name}" for name in absent), 1, " ", noun="annotation file"))
    if missing:
        raise ValueError(f"{room}: a room folder without {' or '.join(missing)}, not one synth wrote whole; remove "
                         "it (synth writes it again), or choose another OUT")


def _files_in(folder: Path) -> set[str]:
    """The names of the files (or links to files) in ``folder``: one listing, not one look-up a file."""
    with os.scandir(folder) as entries:
        return {entry.name for entry in entries if entry.is_file()}
