"""Turn the annotation files of one raw room into the arrays and attributes of a prepared room.

Instance ids follow the order of ``room.files`` (class, then object number: ``chair_2`` before
``chair_10``); ``attrs["objects"][i]`` names the file of instance ``i``. A class outside the 13 of
``pointgeope.constants`` (S3DIS has ``stairs``) is labelled clutter and counted in ``remapped``.
Colours are rounded and clipped to ``0..255`` (some files hold floats).

What is written is validated, each drop reported with its file and line:

- a file that is empty or binary (a NUL byte, or mostly non-text bytes) is skipped;
- a line whose coordinate is beyond float32 (``1e39``) is dropped;
- a point farther than ``limits.max_extent`` metres (default 1 km) from the room's median, on any
  axis, is dropped (``outliers="drop"``) or makes the room refused (``outliers="refuse"``);
- a room still larger than ``max_extent`` along an axis, or with no valid point left, is refused:
  ``RoomData.refused`` says why, and prepare does not write it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from data_prep.limits import PointLimits
from data_prep.parse import parse_points
from data_prep.source import Room, Source, object_class
from pointgeope.constants import CLASS_INDEX, CLUTTER, NUM_CLASSES

MAX_STORED_ISSUES = 1000  # messages kept in a room's attributes (the counts are always exact)
MAX_PRINTED_PER_FILE = 10  # messages printed per file; the rest are counted in one more line
_TEXT = bytes(range(32, 127)) + b"\t\n\r\x0b\x0c"


@dataclass
class RoomData:
    """A parsed room: ``arrays`` (coord, color, label, instance), ``attrs`` and the messages to print.
    ``refused`` is the reason the room must not be written, else ``None``."""

    arrays: dict[str, np.ndarray]
    attrs: dict
    messages: list[str] = field(default_factory=list)
    num_bytes: int = 0
    seconds: float = 0.0
    refused: str | None = None


@dataclass
class _Part:
    """The kept rows of one annotation file."""

    path: str
    instance: int
    label: int
    values: np.ndarray  # (n, 6) float64
    rows: np.ndarray  # (n,) row index of each kept value in the file's parsed rows (for line numbers)


def is_binary(data: bytes) -> bool:
    """A NUL byte, or more than 30 % of the first 64 kB outside printable ASCII and whitespace."""
    head = data[:1 << 16]
    return b"\x00" in data or len(head.translate(None, _TEXT)) > 0.3 * len(head)


def _capped(path: str, messages: list[str]) -> list[str]:
    if len(messages) <= MAX_PRINTED_PER_FILE:
        return messages
    return messages[:MAX_PRINTED_PER_FILE] + [f"{path}: ... {len(messages) - MAX_PRINTED_PER_FILE} more (all counted)"]


def _line_numbers(source: Source, part: _Part, rows: np.ndarray) -> np.ndarray:
    """Line numbers of some kept rows of a part (re-parses the file: only for the rare report of outliers)."""
    data = source.read(part.path)
    return parse_points(data).line_numbers(data, part.rows[rows])


def load_room(source: Source, room: Room, limits: PointLimits = PointLimits()) -> RoomData:
    """Read, parse and validate every annotation file of ``room`` (see the module docstring)."""
    start = time.perf_counter()
    parts: list[_Part] = []
    messages: list[str] = []
    counts = {"repaired": 0, "dropped": 0, "num_bytes": 0}
    empty, binary = [], []
    remapped: dict[str, int] = {}
    for instance, entry in enumerate(room.files):
        data = source.read(entry.path)
        counts["num_bytes"] += len(data)
        if not data.strip() or is_binary(data):
            (empty if not data.strip() else binary).append(entry.path)
            messages.append(f"{entry.path}: skipped: " + ("empty file" if not data.strip()
                                                          else "not a text file (binary)"))
            continue
        parsed = parse_points(data)
        counts["repaired"] += parsed.count("repaired")
        counts["dropped"] += parsed.count("dropped")
        file_messages = [f"{entry.path}:{i.line}: {i.kind}: {i.message}" for i in parsed.issues]
        rows, values = _within_float32(entry.path, data, parsed, file_messages)
        counts["dropped"] += len(parsed.values) - len(rows)
        messages.extend(_capped(entry.path, file_messages))
        name = object_class(entry.path)
        if name not in CLASS_INDEX:
            remapped[name] = remapped.get(name, 0) + len(rows)
        parts.append(_Part(entry.path, instance, CLASS_INDEX.get(name, CLUTTER), values, rows))
    refused = _drop_outliers(source, parts, limits, messages, counts)
    values = np.concatenate([p.values for p in parts]) if parts else np.empty((0, 6))
    if refused is None:
        refused = _room_extent_problem(values, limits)
    sizes = [len(p.values) for p in parts]
    rgb = np.rint(values[:, 3:])
    arrays = {
        "coord": values[:, :3].astype(np.float32),
        "color": np.clip(rgb, 0, 255).astype(np.uint8),
        "label": np.repeat(np.array([p.label for p in parts], dtype=np.uint8), sizes),
        "instance": np.repeat(np.array([p.instance for p in parts], dtype=np.int32), sizes),
    }
    attrs = {
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
        "remapped_to_clutter": json.dumps(dict(sorted(remapped.items()))),
        "clipped_colors": int(np.count_nonzero((rgb < 0) | (rgb > 255))),
        "issues": messages[:MAX_STORED_ISSUES],
    }
    return RoomData(arrays, attrs, messages, counts["num_bytes"], time.perf_counter() - start, refused)


def _extent(blocks: list[np.ndarray]) -> np.ndarray:
    """``max - min`` of the coordinates (columns 0..2) of all rows of ``blocks``, per axis; zeros when
    empty. Column by column: numpy's axis-0 reduction of an (N, 6) array is several times slower."""
    blocks = [b for b in blocks if len(b)]
    if not blocks:
        return np.zeros(3)
    return np.array([max(b[:, j].max() for b in blocks) - min(b[:, j].min() for b in blocks) for j in range(3)])


def _within_float32(path: str, data: bytes, parsed, messages: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The rows (indices, values) whose coordinates are finite in float32 (``1e39`` would be stored as
    ``inf``); the others are reported by line in ``messages``."""
    with np.errstate(over="ignore"):
        finite = np.isfinite(parsed.values[:, :3].astype(np.float32))
    if finite.all():  # the usual case, without a per-row reduction
        return np.arange(len(parsed.values)), parsed.values
    keep = finite.all(axis=1)
    bad = np.flatnonzero(~keep)
    for row, line in zip(bad, parsed.line_numbers(data, bad)):
        messages.append(f"{path}:{line}: dropped: coordinate beyond float32: "
                        f"{' '.join(f'{v:g}' for v in parsed.values[row, :3])}")
    return np.flatnonzero(keep), parsed.values[keep]


def _drop_outliers(source: Source, parts: list[_Part], limits: PointLimits, messages: list[str],
                   counts: dict) -> str | None:
    """Points farther than ``max_extent`` from the room's median (per axis): dropped from ``parts``
    and reported, or the reason to refuse the room (``outliers="refuse"``)."""
    if (_extent([p.values for p in parts]) <= limits.max_extent).all():
        return None  # no point can be farther than the room's extent from its median
    centre = np.median(np.concatenate([p.values[:, :3] for p in parts]), axis=0)
    first = None
    for part in parts:
        far = np.flatnonzero((np.abs(part.values[:, :3] - centre) > limits.max_extent).any(axis=1))
        if not len(far):
            continue
        lines = _line_numbers(source, part, far)
        first = first or f"{part.path}:{lines[0]}"
        action = "refused" if limits.outliers == "refuse" else "dropped"
        messages.extend(_capped(part.path, [
            f"{part.path}:{line}: {action}: point ({' '.join(f'{v:g}' for v in part.values[row, :3])}) is "
            f"{np.abs(part.values[row, :3] - centre).max():g} m from the room's median, more than "
            f"--max-extent {limits.max_extent:g} m" for row, line in zip(far, lines)]))
        counts["dropped"] += len(far)
        keep = np.ones(len(part.values), dtype=bool)
        keep[far] = False
        part.values, part.rows = part.values[keep], part.rows[keep]
    if first is not None and limits.outliers == "refuse":
        return (f"points farther than --max-extent {limits.max_extent:g} m from the room's median (first at "
                f"{first}); drop them with --outliers drop or raise --max-extent")
    return None


def _room_extent_problem(values: np.ndarray, limits: PointLimits) -> str | None:
    if not len(values):
        return "no valid point (every file empty, binary or with every line dropped)"
    extent = _extent([values])
    axis = int(np.argmax(extent))
    if extent[axis] > limits.max_extent:
        return (f"spans {extent[axis]:g} m along {'xyz'[axis]}, more than --max-extent {limits.max_extent:g} m; "
                "check the coordinates or raise --max-extent")
    return None
