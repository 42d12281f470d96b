"""Fork-safe, lazily opened access to the rooms of prepared area files (``OUT/Area_N.h5``).

An h5py handle must not cross a ``fork`` (DataLoader workers): ``RoomStore`` keeps only paths when it
is built, opens a file on the first read in each process, remembers which process opened its handles
and drops (without using) handles inherited from another process, and never pickles a handle (spawned
workers start with none). With ``cache=True`` each process keeps the rooms it has read in memory (the
demo's rooms are small; the full S3DIS would need several GB per worker).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from pointgeope.h5 import area_path, list_rooms, open_area, read_fields, room_group

FIELDS = ("coord", "color", "label")  # what training and evaluation read of a room


@dataclass(frozen=True)
class RoomRef:
    """One room: its area file, area name and group name."""

    path: Path
    area: str
    name: str
    num_points: int


def list_area_rooms(root: str | Path, areas: list[str] | tuple[str, ...]) -> list[RoomRef]:
    """The rooms of ``areas`` under ``root``, area by area, in file order (opens and closes each file)."""
    rooms = []
    for area in areas:
        path = area_path(root, area)
        rooms += [RoomRef(path, area, name, n) for name, n in list_rooms(path).items()]
    return rooms


class RoomStore:
    """Read rooms as dicts of numpy arrays (``coord`` float32 (N,3), ``color`` uint8 (N,3), ``label``
    uint8 (N,); ``fields`` names them: add ``"normal"``, float16 (N,3), for the normals, which a file of an
    older prepare lacks: a one-line SchemaError, :func:`pointgeope.h5.read_fields`), opening each area file at
    most once per process."""

    def __init__(self, cache: bool = False, fields: tuple[str, ...] = FIELDS):
        self.cache, self.fields = cache, tuple(fields)
        self._pid: int | None = None
        self._files: dict[Path, h5py.File] = {}
        self._rooms: dict[tuple[Path, str], dict[str, np.ndarray]] = {}

    def _file(self, path: Path) -> h5py.File:
        pid = os.getpid()
        if self._pid != pid:
            # Handles opened by another process (we were forked): forget them, never read through them.
            self._files = {}
            self._pid = pid
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = open_area(path)
        return f

    def read(self, room: RoomRef) -> dict[str, np.ndarray]:
        key = (room.path, room.name)
        if key in self._rooms:
            return self._rooms[key]
        data = read_fields(room_group(self._file(room.path), room.name), self.fields)
        if self.cache:
            self._rooms[key] = data
        return data

    def close(self) -> None:
        """Close the handles this process opened."""
        if self._pid == os.getpid():
            for f in self._files.values():
                f.close()
        self._files = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_files"] = {}
        state["_pid"] = None
        return state
