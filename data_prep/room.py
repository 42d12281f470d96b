"""Turn the annotation files of one raw room into the arrays and attributes of a prepared room.

Instance ids follow the order of ``room.files`` (class, then object number: ``chair_2`` before
``chair_10``); ``attrs["objects"][i]`` names the file of instance ``i``. A class outside the 13 of
``pointgeope.constants`` (S3DIS has ``stairs``) is labelled clutter and counted in ``remapped``.
Colours are stored ``0..255``, each file's range judged by :mod:`data_prep.colors` (0..1 scaled by 255,
16 bit divided by 257, a few values outside 0..255 clipped; one message per room for each, naming the
first file and line; ``attrs["color_scale"]``: 255 when a file was 0..1, else 1).

What is written is validated, each drop reported with its file and line (the point rule is
``pointgeope/outliers.py``'s, which ``pointgeope predict`` applies to users' scans too):

- a file that is empty or binary (more than 30 % of its first 64 kB outside printable ASCII and
  whitespace) is skipped; a stray NUL or control byte in a text file is repaired or dropped on its line
  by the parser like any other. UTF-16 text (Windows "Unicode" exports) is decoded and parsed, with a
  warning (UTF-32 too); a file that is UTF-16 but does not decode is skipped, saying how to convert it; a UTF-8
  byte-order mark is dropped;
- every file that gives no point (skipped, or every line dropped) is named as a lost object
  (``attrs["lost_objects"]``), so that the loss of a whole object is visible, not one "dropped line";
- a line whose coordinate is beyond float32 (``1e39``) is dropped;
- a point farther than ``limits.max_extent`` metres (default 1 km) from the room's median, on any
  axis, is dropped (``outliers="drop"``) or makes the room refused (``outliers="refuse"``);
- coordinates are stored as float32 as they are, unless some is 16,384 m or more from 0 (a georeferenced
  room, where float32 would round them by 1 mm or more): then minus ``attrs["origin"]`` (float64, the
  floor of the room's minimum; :func:`float32_origin`);
- a room still larger than ``max_extent`` along an axis, or with no valid point left, is refused:
  ``RoomData.refused`` says why, and prepare does not write it.

A room written gets its normals (``arrays["normal"]``, :func:`pointgeope.data.normals.estimate_normals` of the
stored coordinates, ``attrs["normal_k"]`` its ``k``, ``attrs["normal_version"]`` the estimator's
:data:`~pointgeope.data.normals.NORMAL_VERSION`; :func:`add_normals`); ``RoomData.normal_seconds`` is their time.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from data_prep.colors import room_colours
from data_prep.limits import PointLimits
from data_prep.parse import is_plain, parse_many, parse_points
from data_prep.source import Room, Source, object_class
from pointgeope.constants import CLASS_INDEX, CLUTTER, NUM_CLASSES
from pointgeope.data.color_record import NO_COLOR, has_no_color
from pointgeope.limit_text import past_limit
from pointgeope.outliers import FLOAT32_INF, beyond_float32, column_bounds, column_extent, far_from_median
from pointgeope.text_codec import HEAD, Codec, detect

MAX_STORED_ISSUES = 1000  # messages kept in a room's attributes (the counts are always exact)
MAX_PRINTED_PER_FILE = 10  # messages printed per file; the rest are counted in one more line
PRECISE_FLOAT32 = 2.0**14  # metres: below, float32 steps are at most 2**-10 m (rounding <= 0.49 mm)
BATCH_BYTES = 16 << 20  # text parsed per call of parse_many (S3DIS files are ~200 kB, a few are 100+ MB)
_TEXT = bytes(range(32, 127)) + b"\t\n\r\x0b\x0c"


@dataclass
class RoomData:
    """A parsed room: ``arrays`` (coord, color, label, instance; normal when written), ``attrs`` and the messages
    to print.
    ``refused`` is the reason the room must not be written, else ``None``."""

    arrays: dict[str, np.ndarray]
    attrs: dict
    messages: list[str] = field(default_factory=list)
    num_bytes: int = 0
    seconds: float = 0.0
    refused: str | None = None
    normal_seconds: float = 0.0


@dataclass
class _Part:
    """The kept rows of one annotation file."""

    path: str
    instance: int
    label: int
    values: np.ndarray  # (n, 6) float64
    rows: np.ndarray  # (n,) row index of each kept value in the file's parsed rows (for line numbers)
    notes: list[str] = field(default_factory=list)  # the messages of its file


def is_binary(data: bytes) -> bool:
    """More than 30 % of the first 64 kB outside printable ASCII and whitespace. One NUL or control byte
    in a text file is not binary: the parser repairs or drops its line (a whole file was lost to it)."""
    head = data[:1 << 16]
    return len(head.translate(None, _TEXT)) > 0.3 * len(head)


def unicode_codec(data: bytes) -> Codec | None:
    """The UTF-16 or UTF-32 encoding of a raw file, ``None`` for anything else: by its byte-order mark
    (:func:`pointgeope.text_codec.detect`, the rule of configs and scans), else where the first 64 kB hold a NUL in
    every byte of each code unit but its low one and none there (ASCII text saved as Windows "Unicode"): wider
    evidence than the first character's, for a raw folder's files of any kind."""
    if (codec := detect(data[:HEAD])).mark and codec.name != "UTF-8":
        return codec
    for width, endian in ((4, "LE"), (4, "BE"), (2, "LE"), (2, "BE")):
        head = data[:(1 << 16) // width * width]
        units = [head[i::width] for i in (range(width) if endian == "LE" else reversed(range(width)))]
        if len(head) >= width and units[0].count(0) == 0 and all(u.count(0) == len(u) for u in units[1:]):
            return Codec(f"utf-{8 * width}-{endian.lower()}", f"UTF-{8 * width}{endian}")
    return None


def _text_of(data: bytes) -> tuple[bytes, bool, str | None, bool]:
    """``(text, plain, note, skip)``: the bytes to parse (UTF-16 decoded to UTF-8, whose non-ASCII
    characters, if any, then drop their lines: see :mod:`data_prep.parse`), :func:`is_plain` of them,
    what to say about the file (``None``: nothing) and whether it is skipped (empty, binary, or UTF-16
    that does not decode). A UTF-8 byte-order mark (Notepad) is dropped: it is no part of the first number,
    whose line was dropped as "a non-ASCII character in a number"."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if is_plain(data):  # numbers only (the S3DIS files): neither binary nor, unless blank, skipped
        return data, True, "empty file" if _blank(data) else None, _blank(data)
    if _blank(data):
        return data, False, "empty file", True
    codec = unicode_codec(data)
    if codec is not None:
        try:
            data = data.decode(codec.codec).encode("utf-8")
        except UnicodeDecodeError as err:
            return data, False, (f"{codec.name[:6]} text that does not decode ({err.reason} at byte {err.start}); "
                                 f"convert it to ASCII or UTF-8 (iconv -f {codec.name} -t UTF-8 FILE > NEW)"), True
        if _blank(data):
            return data, False, "empty file", True
    if is_binary(data):
        return data, False, "not a text file (binary)", True
    said = {"UTF-16": "UTF-16 text (a Windows 'Unicode' export), decoded", "UTF-32": "UTF-32 text, decoded"}
    return data, is_plain(data), codec and said[codec.name[:6]], False


def _capped(path: str, messages: list[str]) -> list[str]:
    if len(messages) <= MAX_PRINTED_PER_FILE:
        return messages
    return messages[:MAX_PRINTED_PER_FILE] + [f"{path}: ... {len(messages) - MAX_PRINTED_PER_FILE} more (all counted)"]


def _line_numbers(source: Source, part: _Part, rows: np.ndarray) -> np.ndarray:
    """Line numbers of some kept rows of a part (re-parses the file: only for the rare report of outliers)."""
    data = source.read(part.path)
    data = _text_of(data)[0]
    return parse_points(data).line_numbers(data, part.rows[rows])


def _parsed_files(source: Source, room: Room):
    """Yield ``(instance, entry, data, parsed, note, num_bytes)`` for each file of ``room`` in order:
    ``data`` the text parsed, ``parsed`` ``None`` for a file skipped, ``note`` what :func:`_text_of` says
    of it, ``num_bytes`` the file's size. The
    text files are parsed by :func:`~data_prep.parse.parse_many` in batches of about :data:`BATCH_BYTES`
    of text (one room's text is never all in memory)."""
    batch: list = []
    batch_bytes = 0
    for instance, entry in enumerate(room.files):
        raw = source.read(entry.path)
        text, plain, note, skip = _text_of(raw)
        batch.append((instance, entry, text, plain, note, skip, len(raw)))
        batch_bytes += len(raw)
        if batch_bytes >= BATCH_BYTES or instance == len(room.files) - 1:
            kept = [b for b in batch if not b[5]]
            parsed = iter(parse_many([b[2] for b in kept], [b[3] for b in kept]))
            for instance_, entry_, text_, _, note_, skip_, size in batch:
                yield instance_, entry_, text_, None if skip_ else next(parsed), note_, size
            batch, batch_bytes = [], 0


def _blank(data: bytes) -> bool:
    return not data or data.isspace()


def load_room(source: Source, room: Room, limits: PointLimits = PointLimits(), normals: bool = True) -> RoomData:
    """Read, parse and validate every annotation file of ``room`` (see the module docstring); ``normals=False``:
    without its normals (``predict`` of a network that reads none: the estimate is most of a room's time)."""
    start = time.perf_counter()
    parts: list[_Part] = []
    notes: list[tuple[str, list[str]]] = []  # (file, its messages), in file order
    counts = {"repaired": 0, "dropped": 0, "num_bytes": 0}
    empty, binary = [], []
    for instance, entry, _data, parsed, note, num_bytes in _parsed_files(source, room):
        counts["num_bytes"] += num_bytes
        if parsed is None:
            (empty if note == "empty file" else binary).append(entry.path)
            notes.append((entry.path, [f"{entry.path}: skipped: {note}"]))
            continue
        counts["repaired"] += parsed.count("repaired")
        counts["dropped"] += parsed.count("dropped")
        notes.append((entry.path, [f"{entry.path}: repaired: {note}"] * bool(note)
                      + [f"{entry.path}:{i.line}: {i.kind}: {i.message}" for i in parsed.issues]))
        label = CLASS_INDEX.get(object_class(entry.path), CLUTTER)
        parts.append(_Part(entry.path, instance, label, parsed.values, np.arange(len(parsed.values)), notes[-1][1]))
    values, extent = _drop_beyond_float32(source, parts, counts)
    messages = [m for path, file_notes in notes for m in _capped(path, file_notes)]
    remapped: dict[str, int] = {}
    for part in parts:
        name = object_class(part.path)
        if name not in CLASS_INDEX:
            remapped[name] = remapped.get(name, 0) + len(part.values)
    refused, values, extent = _drop_outliers(source, parts, limits, messages, counts, values, extent)
    if refused is None:
        refused = _room_extent_problem(values, limits, extent)
    lost = _lost_objects(room, parts, empty + binary, messages)
    sizes = [len(p.values) for p in parts]
    color, counts["clipped"], counts["color_scale"] = room_colours(
        values[:, 3:], sizes, room.path, lambda row: _where(source, parts, row), messages)
    origin = float32_origin(values)
    arrays = {  # coord: C order whatever the layout of values
        "coord": (values[:, :3] if origin is None else values[:, :3] - origin).astype(np.float32, order="C"),
        "color": color,
        "label": np.repeat(np.array([p.label for p in parts], dtype=np.uint8), sizes),
        "instance": np.repeat(np.array([p.instance for p in parts], dtype=np.int32), sizes),
    }
    attrs = _room_attrs(room, limits, arrays, counts, (empty, binary, lost), remapped, messages)
    if origin is not None:
        attrs["origin"] = origin
    normal_seconds = add_normals(arrays, attrs) if refused is None and normals else 0.0
    return RoomData(arrays, attrs, messages, counts["num_bytes"], time.perf_counter() - start, refused, normal_seconds)


def add_normals(arrays: dict, attrs: dict) -> float:
    """``arrays["normal"]`` of the stored ``arrays["coord"]``, ``attrs["normal_k"]`` and ``attrs["normal_version"]``
    (replacing any there); returns the seconds."""
    from pointgeope.data.normals import K_NORMAL, NORMAL_VERSION, estimate_normals

    start = time.perf_counter()
    arrays["normal"] = estimate_normals(arrays["coord"], K_NORMAL)
    attrs.pop("normal_k", None)
    attrs.pop("normal_version", None)  # after the others, in this order, as a parse writes them: the same bytes
    attrs["normal_k"], attrs["normal_version"] = K_NORMAL, NORMAL_VERSION
    return time.perf_counter() - start


def _where(source: Source, parts: list[_Part], row: int) -> str:
    """``file:line`` of row ``row`` of the rows of every part (:func:`_columns`)."""
    ends = np.cumsum([len(p.values) for p in parts])
    at = int(np.searchsorted(ends, row, side="right"))
    part = parts[at]
    return f"{part.path}:{_line_numbers(source, part, np.array([row - (ends[at] - len(part.values))]))[0]}"


def _lost_objects(room: Room, parts: list[_Part], skipped: list[str], messages: list[str]) -> list[str]:
    """The files of ``room`` that give no point (skipped, or every line or point dropped), in file
    order; one message for each file that was read but kept nothing."""
    emptied = [p.path for p in parts if not len(p.values)]
    messages.extend(f"{path}: no point kept: the object {PurePosixPath(path).stem} is lost" for path in emptied)
    lost = set(skipped + emptied)
    return [f.path for f in room.files if f.path in lost]


def _room_attrs(room: Room, limits: PointLimits, arrays: dict, counts: dict, files: tuple[list, list, list],
                remapped: dict, messages: list[str]) -> dict:
    """``files``: the empty files, the binary ones and the lost objects (every file that gives no point)."""
    empty, binary, lost = files
    return {
        "num_points": int(arrays["label"].shape[0]),
        "source": f"{room.location}/{room.path}",
        "signature": room.signature(limits),
        "objects": [PurePosixPath(f.path).stem for f in room.files],
        "class_counts": np.bincount(arrays["label"], minlength=NUM_CLASSES).astype(np.int64),
        "num_bytes": counts["num_bytes"],
        "repaired_lines": counts["repaired"],
        "dropped_lines": counts["dropped"],
        "empty_files": empty,
        "binary_files": binary,
        "lost_objects": lost,
        "remapped_to_clutter": json.dumps(dict(sorted(remapped.items()))),
        "clipped_colors": counts["clipped"],
        "color_scale": counts["color_scale"],
        NO_COLOR: has_no_color(arrays["color"]),    # every point 0 0 0: prepare's summary and train name it
        "issues": messages[:MAX_STORED_ISSUES],
    }


def _columns(parts: list[_Part]) -> np.ndarray:
    """The rows of every part, ``(N, 6)`` float64 in column-major order (each column contiguous: the
    joined parse gives columns, and the per-column reductions below are fast on them); without a copy
    when the parts are consecutive rows of one array (a room parsed in one batch, nothing dropped)."""
    if not parts:
        return np.empty((0, 6))
    blocks = [p.values.T for p in parts]
    whole = _one_block(blocks)
    return (whole if whole is not None else np.concatenate(blocks, axis=1)).T


def _one_block(blocks: list[np.ndarray]) -> np.ndarray | None:
    """``base[:, start:stop]`` when ``blocks`` are the consecutive column ranges ``start..stop`` of one
    C-ordered ``(6, M)`` float64 array ``base``; else ``None``."""
    base = blocks[0].base
    if not isinstance(base, np.ndarray) or base.ndim != 2 or base.dtype != np.float64 or not base.flags.c_contiguous:
        return None
    at = base.__array_interface__["data"][0]
    start = stop = (blocks[0].__array_interface__["data"][0] - at) // base.itemsize
    for block in blocks:
        if (block.base is not base or block.strides != base.strides
                or block.__array_interface__["data"][0] != at + stop * base.itemsize):
            return None
        stop += block.shape[1]
    return base[:, start:stop]


def _drop_beyond_float32(source: Source, parts: list[_Part], counts: dict) -> tuple[np.ndarray, np.ndarray]:
    """Drop the rows whose coordinates are not finite in float32 (``1e39`` would be stored as ``inf``),
    each reported by line in its file's notes; returns the rows of every part (:func:`_columns`) and
    their extent ``(3,)``. The usual case costs the min/max of each column, which give the extent too."""
    values = _columns(parts)
    if not len(values):
        return values, np.zeros(3)
    lo, hi = column_bounds(values)
    if (np.abs(np.concatenate([lo, hi])) < FLOAT32_INF).all():
        return values, hi - lo
    for part in parts:
        rows = np.flatnonzero(beyond_float32(part.values))
        if not len(rows):
            continue
        part.notes.extend(f"{part.path}:{line}: dropped: coordinate beyond float32: "
                          f"{' '.join(f'{v:g}' for v in part.values[row, :3])}"
                          for row, line in zip(rows, _line_numbers(source, part, rows), strict=True))
        counts["dropped"] += len(rows)
        keep = np.ones(len(part.values), dtype=bool)
        keep[rows] = False
        part.values, part.rows = part.values[keep], part.rows[keep]
    values = _columns(parts)
    return values, column_extent(values)


def _drop_outliers(source: Source, parts: list[_Part], limits: PointLimits, messages: list[str],
                   counts: dict, values: np.ndarray, extent: np.ndarray) -> tuple[str | None, np.ndarray, np.ndarray]:
    """Points farther than ``max_extent`` from the room's median (per axis, ``pointgeope.outliers``):
    dropped from ``parts`` and reported, or the reason to refuse the room (``outliers="refuse"``).
    ``extent``: that of ``values``. Returns that reason (or ``None``), the rows of ``values`` kept and
    their extent."""
    far, centre = far_from_median(values, limits.max_extent, extent)
    if not far.any():
        return None, values, extent
    first = None
    ends = np.cumsum([len(p.values) for p in parts])
    for part, end in zip(parts, ends, strict=True):
        rows = np.flatnonzero(far[end - len(part.values):end])
        if not len(rows):
            continue
        lines = _line_numbers(source, part, rows)
        first = first or f"{part.path}:{lines[0]}"
        action = "refused" if limits.outliers == "refuse" else "dropped"
        said = []
        for row, line in zip(rows, lines, strict=True):
            point = " ".join(f"{v:g}" for v in part.values[row, :3])
            distance, limit = past_limit(np.abs(part.values[row, :3] - centre).max(), limits.max_extent)
            said.append(f"{part.path}:{line}: {action}: point ({point}) is {distance} m from the room's median, "
                        f"more than --max-extent {limit} m")
        messages.extend(_capped(part.path, said))
        counts["dropped"] += len(rows)
        keep = np.ones(len(part.values), dtype=bool)
        keep[rows] = False
        part.values, part.rows = part.values[keep], part.rows[keep]
    values = _columns(parts)
    if limits.outliers == "refuse":
        return (f"points farther than --max-extent {limits.max_extent:g} m from the room's median (first at "
                f"{first}); drop them with --outliers drop or raise --max-extent"), values, column_extent(values)
    return None, values, column_extent(values)


def float32_origin(values: np.ndarray) -> np.ndarray | None:
    """The origin ``float64 (3,)`` to subtract from the coordinates of ``values (N, 3+)`` before they are
    stored as float32, or ``None`` (stored as they are): ``floor(min)`` per axis, once some coordinate is
    :data:`PRECISE_FLOAT32` or more from 0, where float32 steps reach 2 mm (a georeferenced room: at
    y = 4,000,000 m they are 25 cm, and points a grid cell apart merged). Below, float32 keeps every
    coordinate to within 0.5 mm, and S3DIS's rooms (tens of metres) are stored exactly as before."""
    if not len(values):
        return None
    lo, hi = column_bounds(values)
    if max(np.abs(lo).max(), np.abs(hi).max()) < PRECISE_FLOAT32:
        return None
    return np.floor(lo)


def _room_extent_problem(values: np.ndarray, limits: PointLimits, extent: np.ndarray) -> str | None:
    if not len(values):
        return "no valid point (every file empty, binary or with every line dropped)"
    axis = int(np.argmax(extent))
    if extent[axis] > limits.max_extent:
        spans, limit = past_limit(extent[axis], limits.max_extent)
        return (f"spans {spans} m along {'xyz'[axis]}, more than --max-extent {limit} m; check the coordinates or "
                "raise --max-extent")
    return None
