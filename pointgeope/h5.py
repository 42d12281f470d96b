"""The HDF5 files of pointgeope, read and written here only: prepared areas, fold predictions, scan predictions.

Prepared area ``OUT/Area_N.h5`` (written by ``data_prep``, read by ``pointgeope.data``, evaluation, the
viewer and ``pointgeope predict``)::

    /                      attrs: schema_version (= SCHEMA_VERSION), area, class_names, max_extent
    /<room>/coord          float32 (N, 3)  metres, as in the raw files (minus attr origin, if any)
    /<room>/color          uint8   (N, 3)
    /<room>/label          uint8   (N,)    0..12 in constants.CLASS_NAMES order
    /<room>/instance       int32   (N,)    object id within the room
            attrs: num_points, source, signature, class_counts, ...   (prepare's bookkeeping);
                   origin float64 (3,) only for a georeferenced room (data_prep.room.float32_origin)

A work file ``OUT/.work/Area_N/<room>.h5`` of an interrupted prepare holds one room in the same layout
(root attr ``schema_version`` only). Groups and datasets carry no HDF5 timestamps: same rooms, same bytes.

Fold predictions ``RUN/area_K/predictions/Area_K.h5`` (written by ``pointgeope train`` and ``evaluate``)::

    /                      attrs: kind = "predictions", area, checkpoint, epoch, test (the token of the test
                           that wrote it: metrics.json's "predictions_test"), class_names (the network's),
                           ignore_index (the run's train.ignore_index; older files have none)
    /<room>/pred           uint8 (N,)      aligned point for point with the prepared room

Scan predictions ``DIR/<name>_pred.h5`` (``pointgeope predict --format h5``): one room in the prepared
layout plus its ``pred`` array, root attrs ``kind = "scan-predictions"`` and ``ignore_index``
(:func:`write_scan_predictions`), so that the viewer reads it as an area file.

Every reader of a prepared file goes through :func:`open_area` (the version check, and the identity
check: a file named ``Area_N.h5`` must hold area ``Area_N``); a file this version cannot read is a
:class:`SchemaError` that names it and says to run ``pointgeope prepare`` again.
"""
from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import h5py
import numpy as np

from pointgeope.atomic import atomic_path
from pointgeope.constants import CLASS_NAMES, FOLD_NAME, MAX_ROOM_EXTENT
from pointgeope.errors import UserError
from pointgeope.paths import inside

# Version of the prepared layout above: data_prep writes it, every reader checks it.
SCHEMA_VERSION = 1

# name -> (dtype, width) of each room array: (N, width), or (N,) where width is None.
ROOM_ARRAYS: dict[str, tuple[type, int | None]] = {
    "coord": (np.float32, 3), "color": (np.uint8, 3), "label": (np.uint8, None), "instance": (np.int32, None),
}
ROOM_FIELDS = tuple(ROOM_ARRAYS)
PRED = "pred"  # the predictions dataset of a room
SCAN_PREDICTIONS = "scan-predictions"  # root attr kind of a scan's predictions (label 255: unknown)
_STR = h5py.string_dtype()
_AREA_FILE = re.compile(r"Area_\d+\.h5")  # the names area_path gives; open_area checks their identity


class SchemaError(UserError, ValueError):
    """A prepared file that this version of pointgeope cannot read."""


def area_path(root: str | Path, area: str) -> Path:
    """``root/<area>.h5``: where prepare writes an area and every reader finds it."""
    return Path(root) / f"{area}.h5"


def prepared_root(path: str | Path) -> Path | None:
    """The data root of ``path`` when it is named as ``prepare`` names an area file (``Area_N.h5``): its folder,
    which a prepare into it rewrites, so that a reader holds :func:`pointgeope.lock.reader_lock` there while
    it reads. ``None`` for any other name (a scan's predictions, a file a user named), which no prepare
    replaces."""
    path = Path(path)
    return path.parent if _AREA_FILE.fullmatch(path.name) else None


def predictions_path(run: str | Path, area: str) -> Path:
    """``RUN/area_K/predictions/<area>.h5``, given the fold folder ``run`` (checked to lie in its
    predictions folder, :func:`pointgeope.paths.inside`)."""
    folder = Path(run) / "predictions"
    return inside(folder, folder / f"{area}.h5", f"area {area!r} of folds.json", "the predictions folder")


# --- reading ---------------------------------------------------------------------------------------------

def open_area(path: str | Path) -> h5py.File:
    """Open a prepared area file read-only after checking what its root attributes say it is
    (:func:`_root_problem`)."""
    path = Path(path)
    if not path.is_file():
        raise SchemaError(f"expected a prepared area file, found nothing at {path}; run `pointgeope prepare` "
                          "or check data.root and folds.json")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise SchemaError(f"{path}: not a readable HDF5 file ({err}); it is truncated or corrupt: run "
                          "`pointgeope prepare` again") from None
    problem = _root_problem(path, f)
    if problem:
        f.close()
        raise SchemaError(problem)
    return f


def _root_problem(path: Path, f: h5py.File) -> str | None:
    """Why the open file ``f`` is not a prepared area this version reads: a fold's predictions file, a
    ``schema_version`` that is no integer (another tool's ``"2.1"``) or another version, or a file named like
    an area (``Area_N.h5``) that holds another (root attr ``area``: a copy of ``Area_3.h5`` saved as
    ``Area_1.h5`` would otherwise train or test as Area_1); ``None`` when it is one."""
    version = f.attrs.get("schema_version")
    if version is None and _plain(f.attrs.get("kind")) == "predictions":
        return (f"{path}: a fold's predictions file (labels only, written by evaluate), not a prepared area file "
                "or a scan: give the scan, or the prepared area (data.root/Area_N.h5)")
    if version is not None and (not isinstance(version, (int, np.integer)) or isinstance(version, bool)):
        return (f"{path}: expected schema_version {SCHEMA_VERSION} (an integer), got {_plain(version)!r:.80}: not "
                "a file of `pointgeope prepare`; give a prepared area file (data.root/Area_N.h5)")
    if version is None or int(version) != SCHEMA_VERSION:
        return (f"{path}: expected schema_version {SCHEMA_VERSION}, got {version}; re-run `pointgeope prepare` "
                "with this version of pointgeope")
    if not _AREA_FILE.fullmatch(path.name) or _plain(f.attrs.get("area")) == path.stem:
        return None
    return (f"{path}: holds {_plain(f.attrs.get('area'))!r} (its 'area' attribute), expected {path.stem!r} by its name: a copied or "
            f"renamed area file; put {path.stem}'s own file back or run `pointgeope prepare` again")


def is_scan_predictions(f: h5py.File) -> bool:
    """Whether an open file is a scan's predictions (``pointgeope predict --format h5``), not a prepared area."""
    return _plain(f.attrs.get("kind")) == SCAN_PREDICTIONS


def area_max_extent(f: h5py.File) -> float:
    """The room size limit (metres) an open area file was prepared with (a scan's predictions: none, its
    points are the user's as they came); NaN for a value that is no number (``check_area`` refuses it)."""
    value = f.attrs.get("max_extent", MAX_ROOM_EXTENT)
    number = float(value) if isinstance(value, (int, float, np.integer, np.floating)) else float("nan")
    return float("inf") if is_scan_predictions(f) else number


def room_group(f: h5py.File, room: str) -> h5py.Group:
    """The group of ``room`` in an open file; a ``KeyError`` naming the file and its rooms if absent."""
    if room not in f:
        raise KeyError(f"{f.filename}: no room {room!r}; rooms are {sorted(f)}")
    return f[room]


def read_fields(group: h5py.Group, fields: Iterable[str] = ROOM_FIELDS) -> dict[str, np.ndarray]:
    """The arrays ``fields`` of a room group as numpy arrays."""
    return {key: group[key][()] for key in fields}


def list_rooms(path: str | Path) -> dict[str, int]:
    """Room name -> number of points, in file order."""
    with open_area(path) as f:
        return {name: int(f[name]["label"].shape[0]) for name in f}


def read_room(path: str | Path, room: str, fields: tuple[str, ...] = ROOM_FIELDS) -> dict[str, np.ndarray]:
    """The arrays of one room as numpy arrays."""
    with open_area(path) as f:
        return read_fields(room_group(f, room), fields)


def read_labels(path: str | Path, room: str) -> np.ndarray:
    """The ground truth ``uint8 (N,)`` of one room."""
    return read_room(path, room, fields=("label",))["label"]


def _plain(value):
    """The Python value of an attribute read back from HDF5 (str, int, list)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def room_attrs(group: h5py.Group) -> dict:
    """The attributes of a room group as plain Python values."""
    return {key: _plain(value) for key, value in group.attrs.items()}


def read_room_record(path: str | Path, room: str) -> tuple[dict[str, np.ndarray], dict]:
    """The four arrays and the attributes of one room of a prepared (or work) file."""
    with open_area(path) as f:
        group = room_group(f, room)
        return read_fields(group), room_attrs(group)


def read_rooms_attrs(path: str | Path) -> dict[str, dict] | None:
    """Room -> attributes of a prepared (or work) file; ``None`` if it is missing, unreadable or of
    another schema version (prepare then rebuilds it)."""
    try:
        with open_area(path) as f:
            return {room: room_attrs(f[room]) for room in f}
    except (SchemaError, OSError, KeyError, ValueError):
        return None


_PREDICTIONS = "RUN/area_N/predictions/Area_N.h5 or a file of pointgeope predict --format h5"


def _open_predictions(path: str | Path) -> h5py.File:
    """A predictions file (fold or scan) opened read-only; a SchemaError naming it if it is none."""
    path = Path(path)
    if not path.is_file():
        fold = path.parent.parent   # a fold's predictions, deleted: its evaluation writes them (train skips it)
        fix = (f"; `pointgeope evaluate {fold}` writes it" if path.parent.name == "predictions"
               and FOLD_NAME.fullmatch(fold.name) and (fold / "last.pt").is_file() else "")
        raise SchemaError(f"expected a predictions file ({_PREDICTIONS}), found nothing at {path}{fix}")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise SchemaError(f"{path}: not a readable HDF5 file ({err}); expected {_PREDICTIONS}") from None


def read_predictions(path: str | Path, room: str) -> np.ndarray:
    """Predicted labels ``(N,)`` of one room from a predictions file (fold or scan); a SchemaError naming
    the file when it holds no predictions of ``room``."""
    with _open_predictions(path) as f:
        if room not in f:
            raise SchemaError(f"{path}: no predictions for room {room!r}; rooms are {sorted(f)}")
        if not isinstance(f[room], h5py.Group) or PRED not in f[room]:
            raise SchemaError(f"{path}: room {room!r} holds no predictions (no 'pred' array); expected "
                              f"{_PREDICTIONS}")
        return f[room][PRED][()]


def predictions_attrs(path: str | Path, *keys: str) -> list:
    """The root attributes ``keys`` of a predictions file (fold or scan) or area file as Python values, ``None``
    for one it does not carry (``class_names``: a list of str; fold files of older versions have none)."""
    with _open_predictions(path) as f:
        return [None if f.attrs.get(key) is None else _plain(f.attrs[key]) for key in keys]


def predictions_area(path: str | Path) -> tuple[str | None, str | None]:
    """``(area, kind)``: the root attributes ``area`` and ``kind`` of a predictions file (fold: ``"predictions"``,
    scan: ``"scan-predictions"``) or area file; ``None`` for one it does not carry."""
    return tuple(None if v is None else str(v) for v in predictions_attrs(path, "area", "kind"))


def predicted_rooms(path: str | Path) -> set[str]:
    """The rooms a predictions file holds predictions of."""
    with _open_predictions(path) as f:
        return {room for room in f if isinstance(f[room], h5py.Group) and PRED in f[room]}


def predictions_test(path: str | Path) -> str | None:
    """The token of the test that wrote a fold predictions file (root attr ``test``, which the test's
    ``metrics.json`` carries too: :mod:`pointgeope.engine.fold_result`); ``None`` where the file has none
    (written before tests recorded it). A missing or unreadable (damaged, cut short) file raises ``OSError``:
    it is no token, and no stopped test either."""
    with h5py.File(path, "r") as f:
        value = f.attrs.get("test")
    return None if value is None else str(_plain(value))


def has_predictions(path: str | Path, room: str) -> bool:
    """Whether ``room`` of the file carries its own ``pred`` array (a scan-predictions file)."""
    with _open_predictions(path) as f:
        return room in f and PRED in f[room]


# --- writing ---------------------------------------------------------------------------------------------

def _attr(value):
    """An attribute value h5py can store: lists of str become variable-length string arrays."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return np.array(value, dtype=_STR)
    return value


def _new_group(parent: h5py.Group, name: str) -> h5py.Group:
    """A group without HDF5 timestamps (the same content gives the same bytes)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


class _KeepFirstError:
    """The file object HDF5 writes through (h5py's ``fileobj`` driver): the first write the disk refuses
    (a full disk, ``ulimit -f``) is kept, and every later write is dropped as if it had succeeded.

    HDF5 left with a failed write in its C library goes on failing at every flush, then crashes the
    process when it exits (a segmentation fault, seen with the ``sec2`` driver). Through this object the
    library always sees success and closes cleanly; :func:`_create` then raises the kept error, and the
    temporary file (garbage after the failure) is deleted by ``atomic_path``."""

    def __init__(self, f):
        self.f, self.error = f, None

    def _guard(self, call, *args, dropped=None):
        if self.error is None:
            try:
                return call(*args)
            except OSError as err:
                self.error = err
        return dropped

    def write(self, data) -> int:
        view = memoryview(data).cast("B")

        def write_all():  # an unbuffered file may write part of it (a short write at the limit)
            done = 0
            while done < view.nbytes:
                written = self.f.write(view[done:])
                if not written:  # never for a regular file; no endless loop if it happens
                    raise OSError(errno.EIO, "the file accepted no byte", self.f.name)
                done += written

        self._guard(write_all)
        return view.nbytes

    def truncate(self, size=None):
        return self._guard(self.f.truncate, size, dropped=size)

    def flush(self) -> None:
        self._guard(self.f.flush)

    def read(self, size=-1) -> bytes:
        return self.f.read(size)

    def readinto(self, buffer) -> int:
        return self.f.readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._guard(self.f.seek, offset, whence, dropped=offset)

    def tell(self) -> int:
        return self.f.tell()


@contextlib.contextmanager
def _create(path: Path) -> Iterator[h5py.File]:
    """A new HDF5 file at ``path``, written atomically; a write the disk refuses ends, once HDF5 has
    closed cleanly, as a :class:`~pointgeope.atomic.DiskFullError` naming ``path`` (never a crash)."""
    with atomic_path(path) as tmp, open(tmp, "wb+", buffering=0) as raw:  # no buffer to flush at a seek
        sink = _KeepFirstError(raw)
        try:
            with h5py.File(sink, "w") as f:
                yield f
        finally:
            if sink.error is not None:  # the disk's error, not what HDF5 made of the dropped writes
                raise sink.error


def write_room(parent: h5py.Group, name: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """Group ``name`` with the four room arrays (cast to the schema dtypes) and its attributes."""
    group = _new_group(parent, name)
    for key, (dtype, _) in ROOM_ARRAYS.items():
        group.create_dataset(key, data=np.ascontiguousarray(arrays[key], dtype=dtype), track_times=False)
    for key, value in attrs.items():
        group.attrs[key] = _attr(value)


def write_room_file(path: Path, room: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """A work file holding one room, written atomically."""
    with _create(path) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        write_room(f, room, arrays, attrs)


def write_area(path: Path, area: str, rooms: Iterable[tuple[str, dict[str, np.ndarray], dict]],
               max_extent: float = MAX_ROOM_EXTENT) -> None:
    """``Area_N.h5`` from ``(room, arrays, attrs)`` in the given order, written atomically; ``max_extent``
    is the room size limit the rooms were validated with (readers check against it)."""
    with _create(path) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["area"] = area
        f.attrs["class_names"] = _attr(list(CLASS_NAMES))
        f.attrs["max_extent"] = float(max_extent)
        for room, arrays, attrs in rooms:
            write_room(f, room, arrays, attrs)


def write_predictions(path: Path, area: str, rooms: dict[str, np.ndarray], attrs: dict) -> None:
    """Fold predictions: group per room (sorted) with ``pred`` uint8 (N,), written atomically."""
    with _create(path) as f:
        f.attrs.update({"kind": "predictions", "area": area, **{key: _attr(v) for key, v in attrs.items()}})
        for room in sorted(rooms):
            f.create_group(room).create_dataset(PRED, data=rooms[room].astype(np.uint8),
                                                compression="gzip", compression_opts=1)


def write_scan_predictions(path: Path, area: str, room: str, arrays: dict[str, np.ndarray], pred: np.ndarray,
                           class_names: list[str], source: str, group_attrs: dict, more: dict | None = None) -> None:
    """A scan's predictions as a one-room area file, written atomically: root attrs ``schema_version``,
    ``area``, ``class_names``, ``kind = "scan-predictions"``, ``source`` and ``more``; group ``room`` with
    ``group_attrs``, the four room arrays (already in the schema dtypes) and ``pred`` uint8 ``(N,)``."""
    with _create(path) as f:
        f.attrs.update({"schema_version": SCHEMA_VERSION, "area": area, "class_names": class_names,
                        "kind": SCAN_PREDICTIONS, "source": source, **(more or {})})
        g = f.create_group(room)
        g.attrs.update(group_attrs)
        for key, value in {**{k: arrays[k] for k in ROOM_FIELDS}, PRED: pred.astype(np.uint8)}.items():
            g.create_dataset(key, data=value, compression="gzip", compression_opts=1)
