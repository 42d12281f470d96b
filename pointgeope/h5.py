"""The prepared area files of pointgeope, read and written here only (and the work files of prepare).

Prepared area ``OUT/Area_N.h5`` (written by ``data_prep``, read by ``pointgeope.data``, evaluation, the
viewer and ``pointgeope predict``)::

    /                      attrs: schema_version (= SCHEMA_VERSION), area, class_names, max_extent
    /<room>/coord          float32 (N, 3)  metres, as in the raw files (minus attr origin, if any)
    /<room>/color          uint8   (N, 3)
    /<room>/label          uint8   (N,)    0..12 in constants.CLASS_NAMES order
    /<room>/instance       int32   (N,)    object id within the room
    /<room>/normal         float16 (N, 3)  unit normal (pointgeope.data.normals.estimate_normals, k = attr
                                           normal_k, of attr normal_version; float16: within 0.03 degrees and
                                           1e-3 of unit length); derived from coord (DERIVED_ARRAYS)
            attrs: num_points, source, signature, class_counts, normal_k, normal_version, ... (prepare's);
                   origin float64 (3,) only for a georeferenced room (data_prep.room.float32_origin)

``normal`` is optional for readers (:data:`OPTIONAL_ARRAYS`): files prepared before it (no ``normal``, no
``normal_k``) are read as before by whatever does not ask for it; a reader that asks for it
(``read_room(..., fields=(..., "normal"))``) gets a :class:`SchemaError` naming the file and saying to run
``pointgeope prepare`` again, which adds the normals to such a folder (a room without them, or with another
estimate, ``normal_k`` or ``normal_version``, is not up to date: its normals are estimated again from its
``coord``).

A work file ``OUT/.work/Area_N/<room>.h5`` of an interrupted prepare holds one room in the same layout
(root attr ``schema_version`` only). Groups and datasets carry no HDF5 timestamps: same rooms, same bytes.

A scan's predictions (``pointgeope predict --format h5``) are a one-room area file plus a ``pred`` array,
root attr ``kind =`` :data:`SCAN_PREDICTIONS` (:func:`is_scan_predictions`), which every area reader reads.
The predictions files, a fold's and a scan's, are written and read by :mod:`pointgeope.h5_predictions`;
every HDF5 file is created by :func:`pointgeope.h5_file.create_file` (atomic, a full disk an error).

Every reader of a prepared file goes through :func:`open_area` (the version check, and the identity
check: a file named ``Area_N.h5`` must hold area ``Area_N``); a file this version cannot read is a
:class:`SchemaError` that names it and says to run ``pointgeope prepare`` again.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import h5py
import numpy as np

from pointgeope.constants import AREA_NAME, CLASS_NAMES, MAX_ROOM_EXTENT
from pointgeope.errors import UserError
from pointgeope.h5_file import create_file, from_attr, new_group, to_attr
from pointgeope.number_kind import is_integer
from pointgeope.recorded_text import repr_bounded

# Version of the prepared layout above: data_prep writes it, every reader checks it.
SCHEMA_VERSION = 1

# name -> (dtype, width) of each room array: (N, width), or (N,) where width is None.
ROOM_ARRAYS: dict[str, tuple[type, int | None]] = {
    "coord": (np.float32, 3), "color": (np.uint8, 3), "label": (np.uint8, None), "instance": (np.int32, None),
}
ROOM_FIELDS = tuple(ROOM_ARRAYS)
# Arrays prepare writes that a file of an older prepare lacks: read only where asked for.
NORMAL = "normal"
OPTIONAL_ARRAYS: dict[str, tuple[type, int | None]] = {NORMAL: (np.float16, 3)}
# Arrays estimated from the others (not measured): out of the points checksum (pointgeope.checksum).
DERIVED_ARRAYS = (NORMAL,)
SCAN_PREDICTIONS = "scan-predictions"  # root attr kind of a scan's predictions (label 255: unknown)
AGAIN = "run `pointgeope prepare` again"  # what a defect of an area file asks for (prepare rebuilds the file)


class SchemaError(UserError, ValueError):
    """A prepared file that this version of pointgeope cannot read."""


def _area_file(path: Path) -> bool:
    """Whether ``path`` is named as :func:`area_path` names an area's file, ``Area_N.h5`` (``open_area`` checks
    its identity)."""
    return path.suffix == ".h5" and AREA_NAME.fullmatch(path.stem) is not None


def area_path(root: str | Path, area: str) -> Path:
    """``root/<area>.h5``: where prepare writes an area and every reader finds it."""
    return Path(root) / f"{area}.h5"


def prepared_root(path: str | Path) -> Path | None:
    """The data root of ``path`` when it is named as ``prepare`` names an area file (``Area_N.h5``): its folder,
    which a prepare into it rewrites, so that a reader holds :func:`pointgeope.lock.reader_lock` there while
    it reads. ``None`` for any other name (a scan's predictions, a file a user named), which no prepare
    replaces."""
    path = Path(path)
    return path.parent if _area_file(path) else None


def prepared_folder_mark(folder: str | Path) -> str | None:
    """The name of what makes ``folder`` a prepared data folder: ``prepare``'s ``folds.json`` or
    ``manifest.json``, else an area file named as it names them (``Area_N.h5``, the first in order); ``None``
    for any other folder, and for one whose entries cannot be looked at (another user's: the caller's check
    that it can write there names that). The one test of ``train`` and ``ablate``, which refuse such a folder
    as their run folder (their ``area_K/`` would mix with the data)."""
    folder = Path(folder)
    try:
        for name in ("folds.json", "manifest.json"):
            if (folder / name).is_file():
                return name
        return next((p.name for p in sorted(folder.glob("Area_*.h5")) if prepared_root(p) is not None), None)
    except OSError:
        return None


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
    if version is None and from_attr(f.attrs.get("kind")) == "predictions":
        return (f"{path}: a fold's predictions file (labels only, written by evaluate), not a prepared area file "
                "or a scan: give the scan, or the prepared area (data.root/Area_N.h5)")
    if version is not None and not is_integer(version):
        return (f"{path}: expected schema_version {SCHEMA_VERSION} (an integer), got "
                f"{repr_bounded(from_attr(version), 80)}: not a file of `pointgeope prepare`; give a prepared area "
                "file (data.root/Area_N.h5)")
    if version is None or int(version) != SCHEMA_VERSION:
        return (f"{path}: expected schema_version {SCHEMA_VERSION}, got {version}; re-run `pointgeope prepare` "
                "with this version of pointgeope")
    if not _area_file(path) or from_attr(f.attrs.get("area")) == path.stem:
        return None
    held = from_attr(f.attrs.get("area"))
    return (f"{path}: holds {repr_bounded(held, 80)} (its 'area' attribute), expected {path.stem!r} by its name: a "
            f"copied or renamed area file; put {path.stem}'s own file back or run `pointgeope prepare` again")


def is_scan_predictions(f: h5py.File) -> bool:
    """Whether an open file is a scan's predictions (``pointgeope predict --format h5``), not a prepared area."""
    return from_attr(f.attrs.get("kind")) == SCAN_PREDICTIONS


def area_max_extent(f: h5py.File) -> float:
    """The room size limit (metres) an open area file was prepared with (a scan's predictions: none, its
    points are the user's as they came); NaN for a value that is no number (``check_area`` refuses it)."""
    value = f.attrs.get("max_extent", MAX_ROOM_EXTENT)
    number = float(value) if isinstance(value, (int, float, np.integer, np.floating)) else float("nan")
    return float("inf") if is_scan_predictions(f) else number


def room_group(f: h5py.File, room: str, again: str = AGAIN) -> h5py.Group:
    """The group of ``room`` in an open file; a ``KeyError`` naming the file and its rooms if absent, a
    :class:`SchemaError` naming it if it is an array, or a link or a second name of an object (a damaged or
    hand-edited file, :func:`opened_member`: ``/office_2 -> /office_1`` would read a room's points twice), ending
    with ``again`` (what to do)."""
    if room not in f:
        raise KeyError(f"{f.filename}: no room {room!r}; rooms are {sorted(f)}")
    expected = f"{f.filename}: expected {room!r} to be a room (a group)"
    if not isinstance(group := opened_member(f, room, expected, again), h5py.Group):
        raise SchemaError(f"{expected}, found an array; {again}")
    return group


def check_members(group: h5py.Group, keys: Iterable[str], again: str = AGAIN) -> dict[str, h5py.Dataset]:
    """The members ``keys`` of the room ``group`` that it holds, opened (key -> dataset, in the order of
    ``keys``): each opened once, for its reader to read. The first that is something other than an array (a group
    in its place, a link that points nowhere: a damaged file) is refused, naming the file, the room and the
    member, ending with ``again``; a key the room lacks is left out, to the caller. The one check of it:
    :func:`read_fields`, :func:`checked_rooms`, the points checksum (``pointgeope.checksum``) and the area check
    (``pointgeope.data.check``)."""
    members = {}
    for key in keys:
        if key not in group:
            continue
        expected = f"{group.file.filename}: room {group.name.lstrip('/')!r}: expected {key!r} to be an array"
        if not isinstance(member := opened_member(group, key, expected, again), h5py.Dataset):
            raise SchemaError(f"{expected}, found a {type(member).__name__.lower()}; {again}")
        members[key] = member
    return members


def checked_rooms(f: h5py.File, keys: Iterable[str] | None = None, skip: Iterable[str] = (),
                  again: str = AGAIN) -> dict[str, tuple[h5py.Group, dict[str, h5py.Dataset]]]:
    """Room -> ``(group, members)`` of every room of an open area file, in file order: its group
    (:func:`room_group`) and its members ``keys`` (every member but ``skip`` where ``None``) opened and checked
    (:func:`check_members`), a refusal ending with ``again``. The one walk over a file's rooms of
    :func:`list_rooms`, :func:`read_rooms_attrs`, the points checksum and the area check
    (``pointgeope.data.check``)."""
    rooms = {}
    for room in f:
        group = room_group(f, room, again)
        names = list(group) if keys is None else keys
        rooms[room] = group, check_members(group, [name for name in names if name not in skip], again)
    return rooms


def opened_member(parent: h5py.Group, key: str, expected: str, again: str) -> h5py.Group | h5py.Dataset:
    """``parent[key]``, which ``parent`` holds; where it is not an object of its own under that one name, a
    :class:`SchemaError` of ``expected`` (the file, and what was expected there), what was found and ``again``:
    a soft or external link, to nothing (h5py's ``KeyError`` said neither the file nor the room), in a loop, or to
    an object (its points read twice), or a second name of an object (a hard link), in the words of
    :mod:`pointgeope.h5_links` (pointgeope writes none of them), else h5py's reason (a damaged object header).
    The one opener of a room and its members that may not be there: of area files here, of predictions files in
    :mod:`pointgeope.h5_predictions`."""
    from pointgeope.h5_links import link_found, second_name

    if (found := link_found(parent, key)) is None:
        try:
            member = parent[key]
        except KeyError as err:
            found = f"an object that cannot be opened ({err.args[0] if err.args else err})"
        else:
            if (found := second_name(member)) is None:
                return member
    raise SchemaError(f"{expected}, found {found}; {again}")


def read_fields(group: h5py.Group, fields: Iterable[str] = ROOM_FIELDS) -> dict[str, np.ndarray]:
    """The arrays ``fields`` of a room group as numpy arrays; a field the room lacks is a :class:`SchemaError`
    naming the file and the room (``normal`` in a file of a prepare before it: prepare again adds it), and so
    is one that is not an array (:func:`check_members`)."""
    fields = tuple(fields)
    members = check_members(group, fields)
    missing = [key for key in fields if key not in members]
    if missing:
        where = f"{group.file.filename}: room {group.name.lstrip('/')!r}"
        if missing == [NORMAL]:
            raise SchemaError(f"{where} has no normals (prepared by an older pointgeope); run `pointgeope prepare "
                              "RAW OUT` again into its folder, which adds them")
        raise SchemaError(f"{where}: expected datasets {list(fields)}, missing {missing}; {AGAIN}")
    return {key: members[key][()] for key in fields}


def list_rooms(path: str | Path) -> dict[str, int]:
    """Room name -> number of points, in file order."""
    with open_area(path) as f:
        return {name: int(members["label"].shape[0]) for name, (_, members) in checked_rooms(f, ["label"]).items()}


def read_room(path: str | Path, room: str, fields: tuple[str, ...] = ROOM_FIELDS) -> dict[str, np.ndarray]:
    """The arrays of one room as numpy arrays."""
    with open_area(path) as f:
        return read_fields(room_group(f, room), fields)


def read_labels(path: str | Path, room: str) -> np.ndarray:
    """The ground truth ``uint8 (N,)`` of one room."""
    return read_room(path, room, fields=("label",))["label"]


def room_attrs(group: h5py.Group) -> dict:
    """The attributes of a room group as plain Python values."""
    return {key: from_attr(value) for key, value in group.attrs.items()}


def read_room_record(path: str | Path, room: str, skip: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays (the four, and those of :data:`OPTIONAL_ARRAYS` it holds but ``skip``) and the attributes of
    one room of a prepared (or work) file."""
    with open_area(path) as f:
        group = room_group(f, room)
        optional = tuple(k for k in OPTIONAL_ARRAYS if k in group and k not in skip)
        return read_fields(group, ROOM_FIELDS + optional), room_attrs(group)


def read_rooms_attrs(path: str | Path) -> dict[str, dict] | None:
    """Room -> attributes of a prepared (or work) file; ``None`` if it is missing, unreadable, of another schema
    version, or holds a room or member that is not what prepare writes (:func:`room_group`,
    :func:`check_members`: a group, a link that points nowhere): prepare then rebuilds it (its rooms, or the
    work file's room, are parsed again; a damaged work file refused them at every rerun)."""
    try:
        with open_area(path) as f:
            return {room: room_attrs(group) for room, (group, _) in checked_rooms(f).items()}
    except (SchemaError, OSError, KeyError, ValueError):
        return None


# --- writing ---------------------------------------------------------------------------------------------

def write_room(parent: h5py.Group, name: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """Group ``name`` with the four room arrays and those of :data:`OPTIONAL_ARRAYS` in ``arrays`` (prepare
    gives ``normal`` always), cast to the schema dtypes, and its attributes."""
    group = new_group(parent, name)
    for key, (dtype, _) in {**ROOM_ARRAYS, **OPTIONAL_ARRAYS}.items():
        if key in ROOM_ARRAYS or key in arrays:
            group.create_dataset(key, data=np.ascontiguousarray(arrays[key], dtype=dtype), track_times=False)
    for key, value in attrs.items():
        group.attrs[key] = to_attr(value)


def write_room_file(path: Path, room: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    """A work file holding one room, written atomically."""
    with create_file(path) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        write_room(f, room, arrays, attrs)


def write_area(path: Path, area: str, rooms: Iterable[tuple[str, dict[str, np.ndarray], dict]],
               max_extent: float = MAX_ROOM_EXTENT) -> None:
    """``Area_N.h5`` from ``(room, arrays, attrs)`` in the given order, written atomically; ``max_extent``
    is the room size limit the rooms were validated with (readers check against it)."""
    with create_file(path) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["area"] = area
        f.attrs["class_names"] = to_attr(list(CLASS_NAMES))
        f.attrs["max_extent"] = float(max_extent)
        for room, arrays, attrs in rooms:
            write_room(f, room, arrays, attrs)
