"""Point clouds as text: one point per line, ``x y z [r g b ...]`` (S3DIS style), spaces, tabs or commas.

Reading (``read_text``, for ``.txt .xyz .pts .csv``):

- the text is UTF-8 (ASCII included), with or without a byte-order mark (Windows Notepad's and Excel's
  "CSV UTF-8" write one; it is not part of the first number), or UTF-16 or UTF-32, with their mark (Windows
  "Unicode") or without it, told as YAML tells them (:mod:`pointgeope.text_codec`);
  a byte that does not decode is read as U+FFFD: in a header line it is skipped with the line, in a data
  line it is named in the error;
- the separator is a comma in ``.csv`` files and in any file whose first data line has one, else white space
  (a line of ``;``-separated values, or of UTF-16 text without its mark whose first character is not ASCII, which
  no rule tells from UTF-8, is refused saying what to save it as);
- leading header lines (fewer than half of their values numbers: a CSV header ``x,y,z,r,g,b``; or one or
  two numbers among words of another width than the points' lines: ``Scan 1``) are skipped, and so is the point count on
  the first line of a ``.pts`` file (the lines of points must match it: a file cut at a line's end is refused); a first
  line of numbers with one that does not read (``1.0 2.0 3.x``) is an error naming it, as any later line; ``#`` starts a
  comment;
- columns: ``x y z`` then, with 6 or more columns, ``r g b`` in columns 4-6 (0..255, 0..65535 or 0..1,
  see ``scan.color_to_uint8``); 3 to 5 columns have no colour. Leica ``.pts`` files with 7 columns are
  ``x y z intensity r g b``: their colour is columns 5-7.

Writing (``write_text``): ``x y z r g b label`` per line, each coordinate the shortest decimal that reads back as the
float64 read (Python's ``repr``): a text scan's coordinates come back as written (``0.12345678``, ``4200000.123``,
not ``4200000.123000``), a binary file's exactly (a float32 ``0.3`` as ``0.30000001192092896``, a LAS's
``X * scale + offset`` as the float64 laspy computed). Before, 6 decimals (``%.6f``) cut the coordinates of degrees
(a LAS at scale 1e-7), kilometres or a cloud in ``[-1, 1]``, and a float32 file's values no longer read back as them.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from pointgeope.atomic import atomic_open
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded
from pointgeope.scans.scan import Scan, ScanError, color_to_uint8, loadtxt_reason
from pointgeope.text_codec import HEAD, detect, printable, unprintable_share

EXTENSIONS = (".txt", ".xyz", ".pts", ".csv")
_CHUNK = 1 << 20  # lines written per np.savetxt call
HEADER_LINES = 9  # leading lines of names skipped at most (a title, units, column names, ...)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _is_numeric(tokens: list[str]) -> bool:
    return bool(tokens) and all(map(_is_number, tokens))


def _is_names(tokens: list[str], width: int | None) -> bool:
    """Whether a leading line that is not all numbers is a header (``x y z r g b``, ``//X,Y,Z``, ``Scan 1``),
    ``width`` being the number of values of the first line of numbers after it (None: none). A data line with a
    damaged value (``1.0 2.0 3.x 10 20 30``) has at least half of its tokens numbers, and three of them or the
    width of the lines after it: named in the error; skipped as a header, it left the scan one point short and
    every label of the outputs one line off the file's. A title of one or two numbers among words of another
    width (``Scan 1``, ``Points: 3``) is a header."""
    numbers = sum(map(_is_number, tokens))
    return 2 * numbers < len(tokens) or (numbers < 3 and len(tokens) != width)


def _encoding(path: Path) -> str:
    """The codec of a text point cloud (:func:`pointgeope.text_codec.detect`): by its byte-order mark (UTF-8's is
    dropped as the text is read: read as plain UTF-8 it made the first line ``'\\ufeff16.36 ...'``, taken for a
    header and skipped, so every label went to the next point), else by the NUL bytes around its first character
    (UTF-16 or UTF-32 without a mark; a first line of numbers or names starts with an ASCII character), else UTF-8."""
    with open(path, "rb") as f:
        return detect(f.read(HEAD)).codec


def _open(path: Path):
    return open(path, encoding=_encoding(path), errors="replace", newline=None)


def _layout(path: Path) -> tuple[str | None, int, float | None]:
    """``(delimiter, number of lines before the first data line, the point count of a .pts file or None)``
    from the first lines of the file."""
    first: list[tuple[int, str]] = []  # (line index, text) of the first non-blank, non-comment lines
    with _open(path) as f:
        for index, line in enumerate(f):
            if line.strip() and not line.lstrip().startswith("#"):
                first.append((index, line))
            if len(first) == HEADER_LINES + 1:
                break
    comma = path.suffix.lower() == ".csv" or any("," in line.split("#")[0] for _, line in first[:2])  # not comments

    def tokens(line: str) -> list[str]:
        data = line.split("#")[0]  # a comment after the values is no part of them
        return [t.strip() for t in data.split(",")] if comma else data.split()

    widths = [len(tokens(line)) if _is_numeric(tokens(line)) else None for _, line in first]
    k = 0
    while k < len(first) and widths[k] is None and _is_names(tokens(first[k][1]), next(filter(None, widths[k:]), None)):
        k += 1  # a header of names
    count = None
    if path.suffix.lower() == ".pts" and k < len(first) - 1 and len(tokens(first[k][1])) == 1:
        count = float(tokens(first[k][1])[0]) if _is_numeric(tokens(first[k][1])) else None
        k += 1  # the point count of a Leica .pts file
    return ("," if comma else None), (first[k][0] if k < len(first) else 0), count


def bad_line(path: Path, delimiter: str | None, skip: int) -> tuple[int, str, str] | None:
    """``(1-based line, its text, why)`` of the first data line (after ``skip`` lines, ``#`` comments and
    blank lines left out, as ``np.loadtxt`` reads them) that is not numbers, or has another count of them
    than the first: numpy names a row by its index among the data rows (0-based in one message, 1-based in
    another), not the file's line. ``None`` when every line reads."""
    width = None
    with _open(path) as f:
        for index, line in enumerate(f):
            data = line.split("#")[0]
            if index < skip or not data.strip():
                continue
            tokens = [t.strip() for t in data.split(delimiter)] if delimiter else data.split()
            for token in tokens:
                try:
                    float(token)
                except ValueError:
                    why = (f"{token!r} is not a number" if token else "an empty value: a separator at the end of "
                           "the line, or two in a row; remove it")
                    return index + 1, line.rstrip("\r\n"), why
            if width is not None and len(tokens) != width:
                why = f"{counted(len(tokens), 'value')}, the lines before have {width}"
                return index + 1, line.rstrip("\r\n"), why
            width = len(tokens)
    return None


def line_hint(reason: str, data: str = "") -> str:
    """What to do about a line that is not numbers (``data``, its part before a comment; ``reason``, numpy's
    words), from what it holds: NUL bytes between the characters (UTF-16 without a byte-order mark whose first
    character is not ASCII: no rule tells it from UTF-8, :mod:`pointgeope.text_codec`), control characters no
    text holds (:func:`~pointgeope.text_codec.printable`): mostly such (over a quarter of its characters but
    spaces), an array of 16- or 32-bit numbers whose first is an ASCII code, read as UTF-16 or UTF-32 without a
    mark (``d\x05`` for 100, 5), a few (a terminal's colour codes, ``\x1b[31m``) in a line of text; a byte that
    did not decode (U+FFFD: Latin-1 or another 8-bit code page), or ``;`` (the separator of Excel's CSV in locales
    whose decimal mark is a comma); ``""`` when none."""
    text = reason + data
    if "\x00" in text:  # first: such a line's non-ASCII first character is a U+FFFD too
        return ("; NUL bytes between the characters: UTF-16 text without a byte-order mark, its first character not "
                "ASCII? save the file as UTF-8 (or ASCII) text")
    shown = (data or reason).replace("\ufffd", "").rstrip("\x1a")  # (a DOS end-of-file mark, Ctrl-Z, is text's)
    if not printable(shown) and unprintable_share(shown.replace(" ", "")) > 0.25:
        return ("; control characters, no text: a binary file (an array of numbers?) with a text suffix? give the "
                "points as text lines, or as a .npy or .ply file")
    if not printable(shown):
        return "; control characters in a line of text (a terminal's colour codes?): remove them"
    if "\ufffd" in text:
        return "; save the file as UTF-8 (or ASCII) text"
    if ";" in text:
        return ("; values separated by ';' (a CSV of Excel in a locale with ',' decimals?): save it with ',' or "
                "space separators and '.' decimal marks")
    return ""


def read_text(path: str | Path, name: str | None = None) -> Scan:
    """A :class:`Scan` of a text point cloud, in line order (see the module docstring)."""
    path = Path(path)
    delimiter, skip, count = _layout(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": checked below
            with _open(path) as f:
                rows = np.loadtxt(f, dtype=np.float64, delimiter=delimiter, comments="#", skiprows=skip, ndmin=2)
    except ValueError as err:
        reason = loadtxt_reason(err)
        bad = bad_line(path, delimiter, skip)
        hint = line_hint(reason, "" if bad is None else bad[1].split("#")[0])   # its data, not its comment
        if count is not None and bad is not None and bad[2].startswith("1 value,"):
            hint += "; a second scan's point count? save each scan of the .pts file as its own file"
        if bad is None:
            raise ScanError(f"{path}: expected lines of numbers 'x y z [r g b ...]' ({reason}, counting data "
                            f"rows after {counted(skip, 'header line')}){hint}") from None
        raise ScanError(f"{path}:{bad[0]}: expected lines of numbers 'x y z [r g b ...]', got "
                        f"{repr_bounded(bad[1], 82)} ({bad[2]}){hint}") from None
    if rows.shape[0] == 0:
        raise ScanError(f"{path}: expected points, found none (empty file)")
    if count is not None and count != rows.shape[0]:  # what the count is for: a file cut at a line's end
        why = ("cut short (an interrupted copy)? copy or export it again" if count > rows.shape[0] else
               "a count the writer did not update? export it again")
        raise ScanError(f"{path}: its first line counts {count:,g} points, the file holds {rows.shape[0]:,} lines of "
                        f"points: {why}, or correct the count")
    if rows.shape[1] < 3:
        raise ScanError(f"{path}: expected at least 3 columns (x y z), got {rows.shape[1]}")
    coord = np.ascontiguousarray(rows[:, :3])
    first = 4 if path.suffix.lower() == ".pts" and rows.shape[1] == 7 else 3
    notes: list[str] = []
    color = color_to_uint8(rows[:, first:first + 3], str(path), notes=notes) if rows.shape[1] >= 6 else None
    return Scan(name or path.stem, str(path), coord, color, meta={"notes": notes})


def write_text(path: str | Path, coord: np.ndarray, color: np.ndarray, label: np.ndarray) -> Path:
    """``x y z r g b label`` lines (coordinates as their shortest round-trip decimal, ``repr``: module docstring;
    integer colour and label), atomically."""
    n = coord.shape[0]
    with atomic_open(path, "w") as f:
        for start in range(0, n, _CHUNK):
            part = slice(start, start + _CHUNK)
            rows = zip(np.asarray(coord[part], np.float64).tolist(), np.asarray(color[part]).tolist(),
                       np.asarray(label[part]).tolist(), strict=True)
            f.writelines(f"{x!r} {y!r} {z!r} {r} {g} {b} {k}\n" for (x, y, z), (r, g, b), k in rows)
    return Path(path)
