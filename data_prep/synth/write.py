"""Writing synthetic rooms in the raw S3DIS text layout: a vectorised formatter and atomic room folders.

Lines are ``x y z r g b`` as in ``Stanford3dDataset_v1.2_Aligned_Version``, i.e. ``"%.3f %.3f %.3f %d %d %d"``.
Coordinates arrive already rounded to integer millimetres, so the text is exact: :func:`format_lines`
writes ``v_mm`` as ``[-]<v_mm // 1000>.<v_mm % 1000 as 3 digits>``, byte for byte what ``"%.3f" % (v_mm / 1000)``
gives, without a Python loop over points.

A room is written into a hidden temporary folder beside its final place and renamed in one step
(``os.replace``), so an interrupted run never leaves a room folder that looks complete.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

_ZERO, _DOT, _MINUS, _SPACE, _NEWLINE = 48, 46, 45, 32, 10
_CHUNK = 1 << 18  # rows formatted at once: bounds the (rows, width) byte table to a few tens of MB
TMP_MARK = ".tmp-"  # temporary room folders are named .<room>.tmp-<pid>


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """Decimal digits of non-negative int64 ``values`` (N,), right-aligned in ``width`` columns.

    Returns uint8 ``(N, width)``: ASCII digits, leading zeros replaced by 0 bytes (padding to be dropped),
    always at least the last digit. ``width`` must hold the largest value.
    """
    pow10 = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)   # (width,): 10^(w-1) .. 1
    digit = (values[:, None] // pow10) % 10
    shown = (values[:, None] >= pow10) | (pow10 == 1)
    return np.where(shown, digit + _ZERO, 0).astype(np.uint8)


@cache
def _digit_table(width: int) -> np.ndarray:
    """:func:`_digits` of every value ``0 .. 10**width - 1``, uint8 ``(10**width, width)``: a lookup table."""
    return _digits(np.arange(10 ** width, dtype=np.int64), width)


# The 3 decimals of every 0..999, zero-padded: "000" .. "999".
_DECIMALS = ((np.arange(1000)[:, None] // np.array([100, 10, 1])) % 10 + _ZERO).astype(np.uint8)


def _format_chunk(xyz_mm: np.ndarray, rgb: np.ndarray) -> tuple[bytes, np.ndarray]:
    """:func:`format_lines` on one chunk: fill a fixed-width byte table, then drop its 0-byte padding."""
    n = len(xyz_mm)
    magnitude = np.abs(xyz_mm)
    whole, decimals = magnitude // 1000, magnitude % 1000
    width = max(1, len(str(int(whole.max())))) if n else 1
    if width <= 5:  # lookup tables (10^5 rows at most) are far faster than dividing per digit
        table = _digit_table(width)
        whole_digits = [np.take(table, whole[:, axis], axis=0) for axis in range(3)]
    else:
        whole_digits = [_digits(whole[:, axis], width) for axis in range(3)]
    rgb_table = _digit_table(3)
    # row layout, 0 = padding: [sign | whole digits (width) | . | 3 decimals | ' '] x 3 (x, y, z)
    #                          [3 digits | ' '] x 2 (r, g) | [3 digits | '\n'] (b)
    out = np.empty((n, 3 * (width + 6) + 12), np.uint8)
    col = 0
    for axis in range(3):
        out[:, col] = (xyz_mm[:, axis] < 0) * np.uint8(_MINUS)
        out[:, col + 1:col + 1 + width] = whole_digits[axis]
        col += 1 + width
        out[:, col] = _DOT
        out[:, col + 1:col + 4] = np.take(_DECIMALS, decimals[:, axis], axis=0)
        out[:, col + 4] = _SPACE
        col += 5
    for channel in range(3):
        out[:, col:col + 3] = np.take(rgb_table, rgb[:, channel].astype(np.intp), axis=0)
        out[:, col + 3] = _SPACE if channel < 2 else _NEWLINE
        col += 4
    keep = out != 0
    return out[keep].tobytes(), keep.sum(axis=1, dtype=np.int64)


def format_lines(xyz_mm: np.ndarray, rgb: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The text of ``N`` points, one ``x y z r g b`` line each, and the byte length of each line.

    Args:
        xyz_mm: int64 ``(N, 3)`` coordinates in millimetres (written in metres with 3 decimals).
        rgb: integer ``(N, 3)`` colours in ``0..255``.
    Returns:
        ``(text, line_lengths)`` with ``line_lengths`` int64 ``(N,)`` counting the newline.
    """
    xyz_mm = np.asarray(xyz_mm)
    rgb = np.asarray(rgb)
    if xyz_mm.ndim != 2 or xyz_mm.shape[1] != 3 or not np.issubdtype(xyz_mm.dtype, np.integer):
        raise ValueError(f"expected integer millimetres of shape (N, 3), got {xyz_mm.dtype} {xyz_mm.shape}")
    if rgb.shape != xyz_mm.shape or (len(rgb) and (rgb.min() < 0 or rgb.max() > 255)):
        raise ValueError(f"expected colours of shape {xyz_mm.shape} in 0..255, got {rgb.shape}")
    xyz_mm = xyz_mm.astype(np.int64, copy=False)
    texts, lengths = [], []
    for start in range(0, len(xyz_mm), _CHUNK):
        text, length = _format_chunk(xyz_mm[start:start + _CHUNK], rgb[start:start + _CHUNK])
        texts.append(text)
        lengths.append(length)
    return b"".join(texts), (np.concatenate(lengths) if lengths else np.zeros(0, np.int64))


@dataclass(frozen=True)
class Defect:
    """A defect of the real dataset planted in one annotation file of one room.

    ``kind``: ``control_byte`` (a control byte inside the second number of line ``line``, 1-based, as in
    S3DIS's ``103.0\\x100000``), ``crlf`` (every line ends with ``\\r\\n``), ``trailing_spaces`` (every line
    ends with two spaces before the newline) or ``stairs`` (an annotation of the extra class ``stairs``).
    ``fraction`` picks the line of a ``control_byte`` in ``[0, 1)`` of the file.
    """

    kind: str
    area: str
    room: str
    file: str
    fraction: float = 0.0


def plant(kind: str, text: bytes, fraction: float) -> tuple[bytes, dict]:
    """Plant a text defect in the bytes of one annotation file; the new bytes and what was done.

    The record holds ``line`` (1-based, ``None`` for every line) and, for a control byte, the line before
    (``original``) and after (``written``), without their line ending.
    """
    if kind == "crlf":
        return text.replace(b"\n", b"\r\n"), {"line": None, "lines": "all"}
    if kind == "trailing_spaces":
        return text.replace(b"\n", b"  \n"), {"line": None, "lines": "all"}
    if kind != "control_byte":
        raise ValueError(f"expected a text defect (control_byte, crlf, trailing_spaces), got {kind!r}")
    lines = text.split(b"\n")[:-1]
    index = min(len(lines) - 1, int(fraction * len(lines)))
    original = lines[index]
    first_space = original.index(b" ")
    cut = original.index(b".", first_space) + 2  # after the first decimal of y: "103.0" | "00"
    written = original[:cut] + b"\x10" + original[cut:]
    lines[index] = written
    return b"\n".join(lines) + b"\n", {"line": index + 1, "original": original.decode(),
                                      "written": written.decode()}


def room_files(area: str, room: str, files: list[tuple[str, int]], text: bytes, line_lengths: np.ndarray,
               defects: list[Defect]) -> tuple[dict[str, bytes], list[dict]]:
    """The bytes of every file of one room, and the defects planted in them.

    Args:
        area, room: e.g. ``"Area_1"``, ``"office_1"``.
        files: ``(file name, number of points)`` of each annotation in room-file order.
        text: the room file, i.e. all annotation lines concatenated; ``line_lengths`` (N,) their byte lengths.
        defects: text defects to plant in the annotation files (the room file stays clean).
    Returns:
        ``{path inside the room folder: bytes}`` (``<room>.txt``, ``Annotations/<file>``) and one record per
        planted defect (see :func:`plant`) with its ``file`` relative to ``OUT``.
    """
    counts = np.array([count for _, count in files], dtype=np.int64)
    if counts.sum() != len(line_lengths):
        raise ValueError(f"expected {counts.sum()} lines for {area}/{room}, got {len(line_lengths)}")
    by_file = {d.file: d for d in defects}
    missing = set(by_file) - {name for name, _ in files}
    if missing:
        raise ValueError(f"defects planned in {sorted(missing)}, which {area}/{room} does not have")
    line_ends = np.concatenate([[0], np.cumsum(line_lengths)])
    file_ends = line_ends[np.concatenate([[0], np.cumsum(counts)])]
    contents, records = {f"{room}.txt": text}, []
    for i, (name, _) in enumerate(files):
        body = text[file_ends[i]:file_ends[i + 1]]
        if name in by_file:
            body, record = plant(by_file[name].kind, body, by_file[name].fraction)
            records.append({"kind": by_file[name].kind, "file": f"{area}/{room}/Annotations/{name}", **record})
        contents[f"Annotations/{name}"] = body
    return contents, records


def write_room(room_dir: Path, contents: dict[str, bytes]) -> None:
    """Write the files of one room (``{relative path: bytes}``) into ``room_dir``, all or nothing.

    The files go into a hidden temporary folder beside ``room_dir`` that is then renamed to it;
    ``room_dir`` must not exist yet.
    """
    tmp = room_dir.parent / f".{room_dir.name}{TMP_MARK}{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    for rel, data in contents.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.replace(tmp, room_dir)


def remove_stale(area_dir: Path) -> list[Path]:
    """Remove the temporary room folders an interrupted run left in ``area_dir``; the ones removed."""
    stale = sorted(p for p in area_dir.glob(f".*{TMP_MARK}*") if p.is_dir())
    for path in stale:
        shutil.rmtree(path)
    return stale
