"""Which scans the inputs of ``pointgeope predict`` name, and reading each one.

An input is, by what it is:

=================================  ====================================================================
``*.ply``                          PLY, ascii or binary (``ply.py``)
``*.las`` ``*.laz``                LAS / LAZ through laspy (``las.py``)
``*.txt .xyz .pts .csv``           ``x y z [r g b ...]`` text (``text.py``)
``*.npy``                          ``(N, 3)`` or ``(N, 6)`` numbers, ``x y z [r g b]``
``Area_N.h5`` (prepared)           every room of it, named ``Area_N/<room>`` (with its ground truth),
                                   once checked as training checks it (``pointgeope.data.check``)
a raw S3DIS room folder            ``<room>/Annotations/*.txt`` parsed as ``pointgeope prepare`` does, in
                                   the same point order (with its ground truth), named ``<room>``
any other folder                   its files of the kinds above (named by their stem), its raw room
                                   sub-folders (named ``<folder>/<room>``, e.g. ``Area_1/office_1``) and
                                   the raw rooms one level further down (a raw S3DIS root: named
                                   ``Area_N/<room>``, as the rooms of a prepared root's ``Area_N.h5``)
=================================  ====================================================================

Names come from the input's absolute path (``os.path.abspath``: ``.`` is the current folder's name, ``..``
its parent's), never from the path as typed; a name that would still put an output outside ``--out``
(a file named ``...h5``) is refused by ``outputs.output_path``.

:func:`find_scans` lists the scans, and checks a prepared area file (``.h5``) whole as training checks its
areas (checksum, every room) before anything is predicted; :func:`read_scan` reads one scan at a time, so a
call over many large files holds one of them in memory.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pointgeope.plural import counted, first_of
from pointgeope.recorded_text import repr_bounded
from pointgeope.scans.las import EXTENSIONS as LAS_EXTENSIONS
from pointgeope.scans.outputs import is_output_name
from pointgeope.scans.scan import Scan, ScanError, checked_scan, color_to_uint8, float64_coord
from pointgeope.scans.text import EXTENSIONS as TEXT_EXTENSIONS

ALIGNMENT = re.compile(r"Area_\d+_alignmentAngle\.txt", re.IGNORECASE)  # S3DIS's rotation of each room
KINDS = {".ply": "ply", ".npy": "npy", ".h5": "h5", **{e: "las" for e in LAS_EXTENSIONS},
         **{e: "text" for e in TEXT_EXTENSIONS}}


class Failure(str):
    """The message (a ``str``) of an input that failed, with the input it names as ``.source``: what the
    closing summary of ``predict`` lists."""

    source: str

    def __new__(cls, source: str | Path, message: str) -> Failure:
        failure = super().__new__(cls, message)
        failure.source = str(source)
        return failure


@dataclass(frozen=True)
class ScanRef:
    """One scan to read: ``kind`` of :data:`KINDS` (or ``"raw"``), the room of an ``h5`` file, the
    name of its outputs; ``notes`` to print with it (what its folder left out, on its first scan);
    ``checksum``: the file's checksum where it was taken already (an area file listed in its
    ``manifest.json``, verified against it), so that ``predict``'s record does not hash it again."""

    path: Path
    kind: str
    name: str
    room: str | None = None
    notes: tuple[str, ...] = ()
    checksum: str | None = None

    @property
    def source(self) -> str:
        return f"{self.path}:{self.room}" if self.room else str(self.path)


def _is_raw_room(folder: Path) -> bool:
    return (folder / "Annotations").is_dir()


def _absolute(path: Path) -> Path:
    """``path`` made absolute with ``.`` and ``..`` taken (symbolic links kept): where its name comes from."""
    return Path(os.path.abspath(path))


def _refs_of_file(path: Path) -> list[ScanRef]:
    kind = KINDS.get(path.suffix.lower())
    if kind is None:
        raise ScanError(f"{path}: unknown extension {path.suffix!r}; expected one of "
                        f"{', '.join(sorted(KINDS))}, a raw S3DIS room folder or a folder of such files")
    stem = _absolute(path).stem
    if kind != "h5":
        return [ScanRef(path, kind, stem)]
    from pointgeope.data.check import check_area, manifest_checksums
    from pointgeope.h5 import SchemaError

    try:  # as training checks its areas (check_area_file): schema, checksum, every room
        checksum = manifest_checksums(path.parent).get(path.stem)
        rooms = check_area(path, checksum)  # the file's checksum is the listed one, or it was refused
    except SchemaError as err:
        raise ScanError(str(err)) from None
    except (OSError, ValueError, KeyError) as err:
        raise ScanError(f"{path}: expected a prepared area file (pointgeope prepare): {err}") from None
    return [ScanRef(path, "h5", f"{stem}/{room}", room, checksum=checksum) for room in rooms]


def _outputs_here(folder: Path, out: Path | None) -> bool:
    """Whether ``folder`` is the ``--out`` folder, whose files named as outputs are not inputs."""
    return out is not None and out.is_dir() and folder.is_dir() and folder.samefile(out)


def _not_a_file(path: Path) -> str:
    """What ``path``, which names no regular file or folder, is instead, for messages."""
    if path.is_symlink() and not path.exists():
        return f"a symbolic link to nothing ({os.readlink(path)})"
    if not path.exists():
        return "nothing"
    mode = path.stat().st_mode
    kinds = {stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISSOCK: "a socket", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device"}
    return next((text for test, text in kinds.items() if test(mode)), "not a regular file")


def _raw_rooms_below(entries: list[Path]) -> list[ScanRef]:
    """The raw rooms inside the sub-folders ``entries`` that are not rooms themselves (the ``Area_N/<room>``
    of a raw S3DIS root), named ``<sub-folder>/<room>``; an unreadable sub-folder holds none."""
    refs = []
    for sub in entries:
        if sub.is_dir() and not _is_raw_room(sub):
            try:
                rooms = sorted(p for p in sub.iterdir() if p.is_dir() and _is_raw_room(p))
            except OSError:
                continue
            refs += [ScanRef(p, "raw", f"{sub.name}/{p.name}") for p in rooms]
    return refs


def _alignment_files(entries: list[Path], refs: list[ScanRef]) -> list[Path]:
    """The ``Area_N_alignmentAngle.txt`` files of the S3DIS release among ``entries``, where the folder holds
    raw rooms (``refs``): ``x y z`` text by its extension, but room names and angles, not a scan."""
    if not any(ref.kind == "raw" for ref in refs):
        return []
    return [p for p in entries if ALIGNMENT.fullmatch(p.name) and not p.is_dir()]


def _left_out(folder: Path, entries: list[Path], refs: list[ScanRef], out: Path | None,
              kinds: bool = True) -> str | None:
    """What a folder's scan search leaves out, in words after ``"<folder>: "``, or ``None``: its files of other
    extensions, S3DIS's ``Area_N_alignmentAngle.txt`` beside raw rooms (:func:`_alignment_files`) and its
    sub-folders that are no raw room and hold none (their files are not searched). Not
    named: hidden ones, the ``out`` folder (``predict``'s outputs), and a prepared root's ``manifest.json``
    and ``folds.json`` (prepare's own, beside its ``Area_N.h5``)."""
    from pointgeope.h5 import prepared_root

    taken = {r.path for r in refs} | {r.path.parent for r in refs}
    bookkeeping = ("manifest.json", "folds.json") if any(prepared_root(p) for p in entries) else ()
    files = [p.name for p in entries if p.suffix.lower() not in KINDS and not p.is_dir()
             and not p.name.startswith(".") and p.name not in bookkeeping]
    subs = [f"{p.name}/" for p in entries if p.is_dir() and p not in taken and not p.name.startswith(".")
            and not _outputs_here(p, out)]
    angles = [p.name for p in _alignment_files(entries, refs)]
    parts = [f"{counted(len(names), noun)}{what} ({first_of(names, 5)})"
             for names, noun, what in ((files, "file", " of unknown type"),
                                       (angles, "S3DIS alignment file", ", not scans"),
                                       (subs, "sub-folder", " not searched")) if names]
    if not parts:
        return None
    fix = (f"; a folder's scans are taken from it, not from its sub-folders (raw rooms excepted): give "
           f"{folder / subs[0]} as an input to predict its scans") if subs else ""
    spelt = next((sub for sub in subs if sub.lower() == "annotations/"), None)
    if spelt:  # a raw room whose Annotations folder is spelt otherwise: read without its labels
        fix = (f"; {folder / spelt} is spelt {spelt.rstrip('/')}: rename it Annotations to read {folder} as a raw "
               "room (its objects, with their labels)")
    known = f"; known extensions: {', '.join(sorted(KINDS))}" if kinds and (files or subs) else ""
    return f"left out {' and '.join(parts)}{fix}{known}"


def _refs_of_folder(folder: Path, errors: list[str], out: Path | None, skipped: list[Path]) -> list[ScanRef]:
    name = _absolute(folder).name  # "" for the root folder "/"
    if _is_raw_room(folder):
        return [ScanRef(folder, "raw", name)]
    entries = sorted(folder.iterdir())
    refs = [ScanRef(p, "raw", f"{name}/{p.name}".lstrip("/")) for p in entries if p.is_dir() and _is_raw_room(p)]
    refs += _raw_rooms_below(entries)
    inputs = [p for p in entries if not (_outputs_here(folder, out) and is_output_name(p.name))]
    left_out = _left_out(folder, inputs, refs, out)
    if _outputs_here(folder, out):
        skipped += [p for p in entries if is_output_name(p.name)]
        entries = [p for p in entries if not is_output_name(p.name)]
    angles = _alignment_files(entries, refs)
    files = [p for p in entries if p.suffix.lower() in KINDS and not p.is_dir() and p not in angles]
    for path in files:
        if not path.is_file():  # a dangling link, a FIFO (reading it would wait forever), a device
            errors.append(Failure(path, f"{path}: expected a scan file, found {_not_a_file(path)}"))
            continue
        try:
            refs += _refs_of_file(path)
        except ScanError as err:
            errors.append(Failure(path, str(err)))
    if not refs and not files:
        raise ScanError(f"{folder}: a folder without scans (expected files {', '.join(sorted(KINDS))} in it, "
                        "or raw S3DIS rooms with Annotations/ in it or one level down)"
                        + (f"; {_left_out(folder, inputs, refs, out, kinds=False)}" if left_out else ""))
    if refs and left_out:  # said with the folder's first scan, so that "predicted 1 of 1" is not all there was
        refs[0] = dataclasses.replace(refs[0], notes=(f"{folder}: {left_out}",))
    return refs


def prepared_roots(inputs: list[str | Path]) -> list[Path]:
    """The data roots whose prepared area files the inputs name, given or in a given folder (the folders of
    the files named as ``prepare`` names them, :func:`pointgeope.h5.prepared_root`), once each: ``predict``
    reads them under :func:`pointgeope.lock.reader_lock`, as a prepare into one rewrites them. A folder that
    cannot be listed adds none (:func:`find_scans` reports it), nor does a fold's predictions file, which
    ``evaluate`` names as ``prepare`` names an area file (``RUN/area_K/predictions/Area_K.h5``): no prepare
    writes there, and the reader lock's ``.readers.lock``, which stays, made ``predictions/`` another writer's
    folder, whose temporary files a killed ``evaluate`` left were never removed
    (:func:`pointgeope.atomic.remove_leftovers`)."""
    from pointgeope.h5 import prepared_root

    roots: list[Path] = []
    for item in map(Path, inputs):
        try:
            files = sorted(item.iterdir()) if item.is_dir() else [item]
        except OSError:
            continue
        for file in files:
            root = prepared_root(file)
            if root is not None and root not in roots and not _fold_predictions(file):
                roots.append(root)
    return roots


def _fold_predictions(path: Path) -> bool:
    """Whether ``path`` is a fold's predictions file (root attribute ``kind``: ``predictions``); False for any
    other file, and for one that cannot be read (:func:`find_scans` says why)."""
    from pointgeope.h5 import SchemaError
    from pointgeope.h5_predictions import predictions_area

    try:
        return predictions_area(path)[1] == "predictions"
    except (SchemaError, OSError):
        return False


def find_scans(inputs: list[str | Path], out: str | Path | None = None,
               skipped: list[Path] | None = None) -> tuple[list[ScanRef], list[str]]:
    """``(scans, errors)``: every scan the inputs name, in order, and one message (a :class:`Failure`) per
    input that names none (missing, unknown extension, unreadable area file, folder without scans). Files of the ``out``
    folder named as ``predict``'s outputs (``outputs.is_output_name``) are left out and added to
    ``skipped``: a rerun into the folder of its inputs predicts the same scans."""
    refs: list[ScanRef] = []
    errors: list[str] = []
    out = None if out is None else Path(out)
    skipped = [] if skipped is None else skipped
    for item in map(Path, inputs):
        try:
            if item.is_dir():
                refs += _refs_of_folder(item, errors, out, skipped)
            elif item.is_file():
                refs += _refs_of_file(item)
            elif not item.exists() and not item.is_symlink():
                raise ScanError(f"{item}: expected a scan file or folder, found nothing")
            else:
                raise ScanError(f"{item}: expected a scan file, found {_not_a_file(item)}")
        except ScanError as err:
            errors.append(Failure(item, str(err)))
    return refs, errors


def _load_npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, its header checked against the file's size before any data is read: the
    file is mapped (``mmap_mode="r"``), then copied. A header whose shape needs more bytes than the file holds
    (a file cut short; a damaged shape of 4 TiB was a ``MemoryError``) and a header that does not parse (numpy
    let ``tokenize.TokenError`` through) are ScanErrors, as are files that are not ``.npy``. A file that cannot be
    opened (no permission) is :func:`read_scan`'s ``cannot read it`` (an ``OSError``); one on a file system that
    cannot map files is read as before mapping was used."""
    try:
        try:
            mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR, errno.EIO):
                raise  # not the header's: read_scan's "cannot read it (Permission denied)"
            mapped = np.load(path, allow_pickle=False)  # no mmap there (ENODEV: a FUSE mount, a device)
    except EOFError:  # a 0-byte file
        raise ScanError(f"{path}: not a readable .npy array (empty file); expected an array saved by "
                        "numpy.save") from None
    except ValueError as err:
        if "mmap length is greater than file size" in str(err):
            raise ScanError(f"{path}: not a readable .npy array (truncated: its header's shape needs more bytes than "
                            "the file holds; cut short, e.g. by an interrupted copy?): save or copy it again") from None
        if "Python objects" in str(err):
            raise ScanError(f"{path}: not a readable .npy array (it holds Python objects, read only by unpickling); "
                            "expected a numeric array of shape (N, 3) or (N, 6)") from None
        raise ScanError(f"{path}: not a readable .npy array ({err})") from None
    except (SyntaxError, tokenize.TokenError) as err:
        raise ScanError(f"{path}: not a readable .npy array (its header does not parse: {err}); expected an array "
                        "saved by numpy.save") from None
    return np.array(mapped)


def _read_npy(path: Path, name: str) -> Scan:
    values = _load_npy(path)
    if values.ndim != 2 or values.shape[1] not in (3, 6) or values.dtype.kind not in "iuf":
        raise ScanError(f"{path}: expected a numeric array of shape (N, 3) or (N, 6) (x y z [r g b]), "
                        f"got {values.dtype} {values.shape}")
    notes: list[str] = []
    color = color_to_uint8(values[:, 3:6], str(path), notes=notes) if values.shape[1] == 6 else None
    return Scan(name, str(path), float64_coord(values[:, :3]), color, meta={"notes": notes})


def _read_h5_room(ref: ScanRef) -> Scan:
    from pointgeope.data.normal_record import room_estimate
    from pointgeope.h5 import open_area, read_fields, room_group
    from pointgeope.origin import checked_origin

    with open_area(ref.path) as f:
        group = room_group(f, ref.room)
        data = read_fields(group, ("coord", "color", "label"))
        # prepare's normals, where it wrote them
        normal = read_fields(group, ("normal",))["normal"] if "normal" in group else None
        estimate = room_estimate(group.attrs) if normal is not None else None
        origin = group.attrs.get("origin", np.zeros(3))  # a georeferenced room's (data_prep.room.float32_origin)
    if (shift := checked_origin(origin)) is None:
        raise ScanError(f"{ref.source}: expected the room's 'origin' attribute to be 3 finite numbers, got "
                        f"{repr_bounded(origin, 80)}; prepare it again")
    return Scan(ref.name, ref.source, data["coord"].astype(np.float64) + shift, data["color"].astype(np.uint8),
                data["label"].astype(np.uint8), normal=None if normal is None else normal.astype(np.float32),
                normal_estimate=estimate)


def _read_raw_room(ref: ScanRef, normals: bool) -> Scan:
    """The annotation files of a raw room, parsed and ordered as ``pointgeope prepare`` does; with ``normals``,
    its normals as ``prepare`` estimates them."""
    from data_prep.room import load_room
    from data_prep.source import Entry, FolderSource, Room, object_key
    from pointgeope.data.normal_record import room_estimate

    files = sorted((p for p in (ref.path / "Annotations").iterdir()
                    if p.is_file() and p.suffix.lower() == ".txt" and not p.name.startswith(".")),
                   key=lambda p: object_key(p.name))
    if not files:
        raise ScanError(f"{ref.path}: expected Annotations/<class>_<k>.txt files (x y z r g b), found none")
    entries = tuple(Entry(f"Annotations/{p.name}", p.stat().st_size) for p in files)
    room = load_room(FolderSource(ref.path), Room(ref.path.parent.name, ref.name, ".", entries, str(ref.path)),
                     normals=normals)
    a = room.arrays
    origin = room.attrs.get("origin", np.zeros(3))  # a georeferenced room's (data_prep.room.float32_origin)
    normal = a.get("normal")            # prepare's, of these coordinates (load_room estimates them)
    return Scan(ref.name, ref.source, a["coord"].astype(np.float64) + origin, a["color"], a["label"],
                meta={"notes": [_in_room(message, ref.path) for message in room.messages]},
                normal=None if normal is None else normal.astype(np.float32),
                normal_estimate=None if normal is None else room_estimate(room.attrs))


def _in_room(message: str, room: Path) -> str:
    """A message of :func:`~data_prep.room.load_room` about the room read at ``.`` (files
    ``Annotations/<name>``, the room itself ``.``) naming its files under ``room``, as given: the same
    ``Annotations/ceiling_1.txt:4`` is in every room of a raw root."""
    message = re.sub(r"(?<![\w./-])Annotations/", lambda _: f"{room}/Annotations/", message)
    return f"{room}{message[1:]}" if message.startswith(".:") else message


def read_scan(ref: ScanRef, normals: bool = False) -> Scan:
    """Read and check one scan (:func:`~pointgeope.scans.scan.checked_scan`); every failure is a ScanError.
    ``normals``: a raw room comes with the normals ``prepare`` would estimate for it (for a network that reads
    them; without, it has none, as a scan of any other format); a prepared room has its stored ones either way."""
    from pointgeope.scans.las import read_las
    from pointgeope.scans.ply import read_ply
    from pointgeope.scans.text import read_text

    try:
        if ref.kind == "raw":
            scan = _read_raw_room(ref, normals)
        elif ref.kind == "h5":
            scan = _read_h5_room(ref)
        elif ref.kind == "npy":
            scan = _read_npy(ref.path, ref.name)
        else:
            scan = {"ply": read_ply, "las": read_las, "text": read_text}[ref.kind](ref.path, ref.name)
    except OSError as err:
        raise ScanError(f"{ref.source}: cannot read it ({err.strerror or err})") from None
    scan.meta["notes"] = [*ref.notes, *scan.meta.get("notes", [])]
    return checked_scan(scan)
