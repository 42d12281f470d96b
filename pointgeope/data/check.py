"""Check a prepared area file before any command uses it: every file opened, every room read.

:func:`check_area_file` is the one check of every command that reads area files: ``train`` (every area of
the fold, before the first epoch), ``evaluate`` (the test areas), ``predict`` (an ``Area_N.h5`` input) and
``viz``. For each file:

- its checksum equals the one ``prepare`` wrote in ``manifest.json`` (when the manifest lists it): a file
  changed or damaged after prepare is refused by name; so is a ``manifest.json`` that does not parse or has
  no checksums (a root without one, its areas copied in by hand, is checked without checksums);
- its root attribute ``area`` equals its name (``Area_1.h5`` holds ``Area_1``; :func:`pointgeope.h5.open_area`);
- it opens as HDF5 with this schema version, and holds at least one room;
- each room is a group of arrays only, each under its one name (no link, to nothing, in a loop or to another
  room's points: :func:`pointgeope.h5.checked_rooms`, the owner of that walk and check, which the points
  checksum and the readers of a room share), and has ``coord``
  float32 ``(N, 3)``, ``color`` uint8 ``(N, 3)``, ``label`` uint8 ``(N,)``, ``instance`` int32 ``(N,)`` with
  ``N >= 1``, every coordinate finite, ``normal`` float16 ``(N, 3)`` finite and of unit length where the room
  has it (files of an older prepare have none), an extent within the limit the file was prepared with (root
  attr ``max_extent``; plus the float32 rounding of the stored coordinates, :func:`float32_rounding`), and
  labels below ``num_classes``. A scan's predictions file (``predict --format h5``, opened by ``viz``) has no
  extent limit and 255 where its ground truth is unknown.

Any failure is a :class:`~pointgeope.h5.SchemaError` naming the file and the room.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope import json_text
from pointgeope.checksum import file_checksum
from pointgeope.constants import IGNORE_LABEL, NUM_CLASSES
from pointgeope.h5 import (
    AGAIN as _AGAIN,
    NORMAL,
    OPTIONAL_ARRAYS,
    ROOM_ARRAYS,
    SchemaError,
    area_max_extent,
    area_path,
    checked_rooms,
    is_scan_predictions,
    open_area,
)
from pointgeope.limit_text import past_limit
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded

UNIT_TOLERANCE = 1e-2  # a stored normal's length within it of 1


def read_manifest(root: str | Path) -> object | None:
    """``root/manifest.json`` as parsed (a dict where ``prepare`` wrote it), ``None`` without one: the one
    reader of a prepared root's manifest (:func:`manifest_checksums`, ``identity.manifest_points``).

    Raises:
        SchemaError: a manifest that is there but cannot be read or does not parse.
    """
    path = Path(root) / "manifest.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise SchemaError(f"{path}: cannot be read ({err.strerror or err}); {_AGAIN}") from None
    except UnicodeDecodeError as err:
        raise SchemaError(f"{path}: not valid JSON ({err}); {_AGAIN}") from None
    try:
        return json_text.loads(text)
    except ValueError as err:
        raise SchemaError(f"{path}: not valid JSON ({err}); {_AGAIN}") from None


def manifest_checksums(root: str | Path) -> dict[str, str]:
    """Area -> checksum from ``root/manifest.json`` (:func:`read_manifest`); ``{}`` without a manifest (areas
    copied in by hand: each file is then checked without a checksum to compare with).

    Raises:
        SchemaError: a manifest that is there but does not parse, or has no ``checksums`` object of area ->
            checksum: a damaged manifest must not turn the check of the area files off.
    """
    path, manifest = Path(root) / "manifest.json", read_manifest(root)
    if manifest is None:
        return {}
    checksums = manifest.get("checksums") if isinstance(manifest, dict) else None
    if not isinstance(checksums, dict) or not all(isinstance(v, str) for v in checksums.values()):
        got = "none" if checksums is None else repr_bounded(checksums, 60)
        raise SchemaError(f"{path}: expected an object 'checksums' (area -> checksum of its file), got {got}; "
                          f"{_AGAIN}")
    return checksums


def nonfinite_points(values: np.ndarray) -> tuple[int, int] | None:
    """``(how many, the first)`` of the points (rows) of ``values (N, ...)`` with a NaN or an infinity, else ``None``:
    the one reading by which a room's stored arrays name their first such point (here, and the training samples'
    check, :mod:`pointgeope.data.sample_check`)."""
    bad = ~np.isfinite(np.asarray(values, dtype=np.float64)).reshape(len(values), -1).all(axis=1)
    return (int(np.count_nonzero(bad)), int(np.argmax(bad))) if bad.any() else None


def check_room(where: str, members: dict, max_extent: float, num_classes: int, unlabelled: bool = False,
               again: str = _AGAIN) -> int:
    """Check one room's ``members`` (name -> dataset: every member of its group, opened and checked to be arrays,
    :func:`pointgeope.h5.checked_rooms`; see the module docstring); returns its number of points.
    ``unlabelled``: the ignore label 255 is allowed too (a scan's predictions file, whose ground truth is
    unknown). ``again``: what a refusal tells the user to do (:func:`_advice`)."""
    missing = [key for key in ROOM_ARRAYS if key not in members]
    if missing:
        raise SchemaError(f"{where}: expected datasets {list(ROOM_ARRAYS)}, missing {missing}; {again}")
    lengths = {key: members[key].shape[0] if members[key].ndim else "no" for key in ROOM_ARRAYS}
    if len(set(lengths.values())) > 1:  # named by length: the shape check below took the labels' as right
        raise SchemaError(f"{where}: expected one entry per point in each array, got "
                          f"{', '.join(f'{count} {key}' for key, count in lengths.items())}; {again}")
    n = members["label"].shape[0] if members["label"].ndim == 1 else -1
    _check_arrays(where, members, n, ROOM_ARRAYS, again)
    if n == 0:
        raise SchemaError(f"{where}: holds no point; {again}")
    _check_arrays(where, members, n, {k: v for k, v in OPTIONAL_ARRAYS.items() if k in members}, again)
    coord = members["coord"][()]
    if (bad := nonfinite_points(coord)) is not None:
        raise SchemaError(f"{where}: {counted(bad[0], 'point')} with a non-finite coordinate, the first point "
                          f"{bad[1]}: {coord[bad[1]].tolist()}; {again}")
    if NORMAL in members:
        _check_normals(where, members[NORMAL][()], again)
    extent = coord.max(axis=0) - coord.min(axis=0)
    if extent.max() > max_extent + float32_rounding(coord):
        spans, limit = past_limit(extent.max(), max_extent)
        raise SchemaError(f"{where}: spans {spans} m, more than the {limit} m it was prepared with; {again}")
    label = members["label"][()]
    top = int(label[label != IGNORE_LABEL].max(initial=0) if unlabelled else label.max())
    if top >= num_classes:
        if num_classes < NUM_CLASSES:  # the config's, not the data's: the data holds the 13 S3DIS classes
            raise SchemaError(f"{where}: label {top} found, but model.num_classes is {num_classes}: the prepared "
                              f"data has the {NUM_CLASSES} S3DIS classes; set model.num_classes={NUM_CLASSES}")
        raise SchemaError(f"{where}: label {top} found, expected labels below {num_classes}; {again}")
    return n


def float32_rounding(coord: np.ndarray) -> float:
    """How much more than prepare measured a room's extent can be in its stored ``coord (N, 3)`` (float32):
    prepare compares the extent of the parsed float64 coordinates with ``--max-extent``, then stores them as
    float32, each rounded by at most half a float32 step ``u = spacing(M)`` at the largest magnitude ``M`` of
    ``coord``; the float32 difference of two of them (at most ``2M``) rounds by at most half a step at ``2M``,
    ``u``. So ``extent32 <= extent64 + 2u``: a room measured within the limit is within it plus ``2u`` as
    stored (2 um at 10 m, 0.1 mm at 1 km, 4 mm at 16 km), which the check allows."""
    magnitude = float(np.abs(coord).max()) if coord.size else 0.0
    return 2.0 * float(np.spacing(np.float32(magnitude)))


def _check_normals(where: str, normal: np.ndarray, again: str) -> None:
    """``normal (N, 3)`` float16 finite and of unit length: within :data:`UNIT_TOLERANCE` of 1 (float16 stores a
    unit vector within 1e-3; a zero row, or one scaled, is no normal)."""
    if not np.isfinite(normal).all():
        raise SchemaError(f"{where}: a non-finite normal; {again}")
    off = np.abs(np.linalg.norm(normal.astype(np.float32), axis=1) - 1)
    bad = int(np.count_nonzero(off > UNIT_TOLERANCE))
    if bad:
        row = int(np.argmax(off))
        raise SchemaError(f"{where}: {counted(bad, 'normal')} not of unit length (point {row}: length "
                          f"{float(np.linalg.norm(normal[row].astype(np.float32))):g}); {again}")


def _check_arrays(where: str, members: dict, n: int, arrays: dict, again: str) -> None:
    """Each array ``name -> (dtype, width)`` of ``arrays`` among a room's ``members`` (name -> dataset) has that
    dtype and ``n`` rows."""
    for key, (dtype, width) in arrays.items():
        data = members[key]
        expected = (n,) if width is None else (n, width)
        if data.dtype != dtype or data.shape != expected:
            raise SchemaError(f"{where}: expected {key} {np.dtype(dtype).name} of shape {expected}, got "
                              f"{data.dtype} {data.shape}; {again}")


def check_area(path: str | Path, checksum: str | None = None, num_classes: int = NUM_CLASSES) -> dict[str, int]:
    """Check one prepared area file; returns room -> number of points. ``checksum``: the expected one."""
    path = Path(path)
    if checksum is not None and path.is_file() and file_checksum(path) != checksum:
        raise SchemaError(f"{path}: does not match its checksum in manifest.json (changed or damaged after "
                          f"prepare); {_AGAIN}")
    again = _advice(path, checksum)
    with open_area(path) as f:
        try:
            max_extent, scan = area_max_extent(f), is_scan_predictions(f)
            if not max_extent > 0:  # NaN would turn the extent check off (extent > nan is false)
                raw = f.attrs.get("max_extent")
                got = repr_bounded(getattr(raw, "tolist", lambda: raw)(), 80)
                raise SchemaError(f"{path}: expected a positive max_extent (its attribute: the room size limit "
                                  f"of prepare, metres), got {got}; {again}")
            rooms = {name: check_room(f"{path}: room {name!r}", members, max_extent, num_classes, scan, again)
                     for name, (_, members) in checked_rooms(f, again=again).items()}   # every member: arrays only
        except SchemaError:
            raise
        except (OSError, KeyError, ValueError, TypeError, AttributeError) as err:
            raise SchemaError(f"{path}: cannot be read ({type(err).__name__}: {err}); the file is truncated "
                              f"or corrupt: {again}") from None
    if not rooms:
        raise SchemaError(f"{path}: holds no room; {again}")
    return rooms


def _advice(path: Path, checksum: str | None) -> str:
    """What to do about a defect found inside the area file at ``path``: run prepare again, which rebuilds a
    file without a checksum in manifest.json; but one that matches its checksum (``checksum`` given, and verified)
    is what prepare wrote, and a rerun keeps it (its rooms are up to date): delete it first."""
    if checksum is None:
        return _AGAIN
    return (f"delete {path} and run `pointgeope prepare` again (the file matches its checksum in manifest.json, "
            "so a rerun alone keeps it)")


def check_area_file(path: str | Path, num_classes: int = NUM_CLASSES) -> dict[str, int]:
    """:func:`check_area` of ``path``, against its checksum in the ``manifest.json`` beside it (when that
    lists it): the check of every command that reads an area file."""
    path = Path(path)
    return check_area(path, manifest_checksums(path.parent).get(path.stem), num_classes)


def check_areas(root: str | Path, areas: list[str] | tuple[str, ...],
                num_classes: int = NUM_CLASSES) -> dict[str, dict[str, int]]:
    """:func:`check_area_file` of each ``root/<area>.h5``: room -> points by area."""
    return {area: check_area_file(area_path(root, area), num_classes) for area in areas}


def area_checksums(root: str | Path, areas: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Area -> checksum of ``root/<area>.h5``: the one in ``root/manifest.json`` where it lists the area
    (:func:`check_areas` verifies it against the file), else computed from the file (a root prepared
    without a manifest, or an area copied in by hand). What a checkpoint records of the data it trained on."""
    listed = manifest_checksums(root)
    return {area: listed.get(area) or file_checksum(area_path(root, area)) for area in areas}
