"""Parse S3DIS annotation text (lines ``x y z r g b``) into an ``(N, 6)`` float64 array, repairing what can be.

Two paths; both give, for each token, the correctly rounded double (what C ``strtod``, Python's
``float`` and ``np.loadtxt`` give), so the values never depend on which path ran:

1. ``_parse_fast``: ``pandas.read_csv`` (C engine) on text made only of digits, ``. + - e E``, spaces,
   tabs and ``\\n`` / ``\\r\\n`` / ``\\r`` line ends (old Mac files: turned into ``\\n`` first), first with
   one space as the separator (the S3DIS files), then with runs of blanks. Accepted only when every
   non-blank line held six finite numbers. This is every file of S3DIS but a few
   (``bench/bench_prepare.py``: about 3x the speed of ``np.loadtxt``).
2. ``_parse_lines``: line by line (lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``), for what the fast
   path refuses. A token with stray ASCII control bytes (NUL included: the trace of a crash or a
   zero-filled disk block; S3DIS has ``103.0\\x100000`` in Area_5/hallway_6) is repaired by dropping them
   only where they cannot have stood for a sign, a decimal point or a digit of the integer part
   (:func:`_repair`): after a digit or the point, and, between two digits, only in the fraction. Anything
   else is dropped with its line: a non-ASCII byte (a Unicode minus ``\\u2212``, a middle-dot decimal
   ``2\\u00b75``, an NBSP: removing it would change the value, ``-1.5`` read as ``1.5``, ``2.5`` as ``25``), a
   control byte before a number's first digit (a lost sign) or between the digits of its integer part or
   exponent, a line that is not six finite numbers. Every repair and drop is an :class:`Issue` with its
   line number.

:func:`parse_many` parses many texts at once with the same result as ``parse_points`` on each: the plain
ones (the S3DIS layout) joined into one ``pandas.read_csv`` call, whose fixed cost per call is otherwise as
large as the parsing of a typical 200 kB annotation file (``bench/bench_prepare.py``).
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

import numpy as np

from pointgeope.plural import counted

FIELDS = 6  # x y z r g b

# The only bytes of a file the fast path reads; any other byte sends the file to the line-by-line path.
_NUMERIC_TEXT = b"0123456789.+-eE \t\r\n"
_JOINABLE_TEXT = b"0123456789.+-eE \n"  # parse_many joins the texts made of these bytes only
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Bytes that can never be part of a number in a text file: control bytes and non-ASCII; a run of them.
_STRAY = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f-\xff]+")


@dataclass(frozen=True)
class Issue:
    """One line that was repaired (``kind="repaired"``) or dropped (``kind="dropped"``)."""

    line: int  # 1-based
    kind: str
    message: str


@dataclass(frozen=True)
class Parsed:
    """The rows of one file, ``values`` float64 ``(N, 6)``, and what was repaired or dropped.

    ``lines`` (int64 ``(N,)``, 1-based) is the line of each row, set by the line-by-line path; for the
    fast path every non-blank line is a row and :meth:`line_numbers` finds them on demand.
    """

    values: np.ndarray
    issues: tuple[Issue, ...] = ()
    path: str = "fast"  # which parser produced the values: fast or lines
    lines: np.ndarray | None = None

    def count(self, kind: str) -> int:
        return sum(issue.kind == kind for issue in self.issues)

    def line_numbers(self, data: bytes, rows: np.ndarray) -> np.ndarray:
        """The 1-based line numbers in ``data`` (the parsed text) of the given rows."""
        if self.lines is not None:
            return self.lines[rows]
        if not len(rows):
            return np.empty(0, dtype=np.int64)
        filled = [n for n, line in enumerate(data.splitlines(), start=1) if line.strip()]
        return np.asarray(filled, dtype=np.int64)[rows]


def parse_points(data: bytes) -> Parsed:
    """Parse the text of one annotation file; see the module docstring for the two paths."""
    values = _parse_fast(data)
    if values is not None:
        return Parsed(values, (), "fast")
    values, issues, lines = _parse_lines(data)
    return Parsed(values, tuple(issues), "lines", lines)


def parse_many(texts: list[bytes], plain: list[bool] | None = None) -> list[Parsed]:
    """``[parse_points(t) for t in texts]``, the same values bit for bit, faster: the texts in the S3DIS
    layout (one space between numbers, ``\\n`` line ends, no blank line) are joined and read by one call
    of ``pandas.read_csv``, whose fixed cost per call (about 1 ms) is as much as the parsing of a typical
    200 kB annotation file. Each row is converted alone with the same options, so joining changes no
    value; the rows are split back by each text's line count. Anything else (or a join that fails)
    goes through :func:`parse_points` one text at a time. ``plain``: :func:`is_plain` of each text, if
    the caller has it."""
    plain = [is_plain(text) for text in texts] if plain is None else plain
    joinable = [i for i, text in enumerate(texts) if plain[i]]
    parsed: list[Parsed | None] = [None] * len(texts)
    if len(joinable) > 1:
        counts = [texts[i].count(b"\n") + (not texts[i].endswith(b"\n")) for i in joinable]
        joined = b"".join(texts[i] if texts[i].endswith(b"\n") else texts[i] + b"\n" for i in joinable)
        values = _read_csv(joined, " ")
        if values is not None and len(values) == sum(counts):
            ends = np.cumsum(counts)
            for i, end, count in zip(joinable, ends, counts, strict=True):
                parsed[i] = Parsed(values[end - count:end], (), "fast")
    return [p if p is not None else parse_points(t) for p, t in zip(parsed, texts, strict=True)]


def is_plain(text: bytes) -> bool:
    """Only digits, ``. + - e E``, spaces and ``\\n`` (so, not binary): the texts :func:`parse_many` joins.
    A blank line (which pandas skips) or a line that is not six numbers makes the joined rows fewer than
    the lines, or the parse fail: the texts are then parsed one by one."""
    return bool(text) and not text.translate(None, _JOINABLE_TEXT)


def _read_csv(data: bytes, sep: str) -> np.ndarray | None:
    """``pandas.read_csv`` (C engine) of numeric text, ``(N, 6)`` finite float64 (column-major); ``None``
    when a line is not six numbers or a value is not finite."""
    import pandas as pd

    try:
        frame = pd.read_csv(io.BytesIO(data), sep=sep, header=None, dtype=np.float64, engine="c",
                            na_filter=False, quoting=csv.QUOTE_NONE)  # ASCII only: read as it is, not decoded
    except (ValueError, pd.errors.ParserError):  # a short or long line, a token like '1-2' or '1e'
        return None
    if frame.shape[1] != FIELDS:
        return None
    values = np.stack([frame[c].to_numpy(dtype=np.float64) for c in frame.columns]).T  # columns: one copy
    return values if np.isfinite(values).all() else None


def _parse_fast(data: bytes) -> np.ndarray | None:
    """``pandas.read_csv`` on plain numeric text; ``None`` when the text is anything else."""
    if not data.strip():
        return np.empty((0, FIELDS))
    if data.translate(None, _NUMERIC_TEXT):
        return None  # other bytes (letters: 'nan', 'True'; control bytes)
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):  # a lone \r ends a line too (old Mac)
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    for sep in (" ", r"\s+"):
        values = _read_csv(data, sep)
        if values is not None:
            return np.ascontiguousarray(values)
    return None


def _parse_token(token: bytes) -> float | None:
    if _NUMBER.fullmatch(token) is None:
        return None
    value = float(token)
    return value if np.isfinite(value) else None


def _parse_lines(data: bytes) -> tuple[np.ndarray, list[Issue], np.ndarray]:
    """The slow path: parse, repair or drop line by line; returns the values, the issues and the line
    number of each row."""
    rows: list[list[float]] = []
    numbers: list[int] = []
    issues: list[Issue] = []
    for number, line in enumerate(data.splitlines(), start=1):  # \n, \r\n and a lone \r
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) != FIELDS:
            issues.append(Issue(number, "dropped", f"expected {FIELDS} values, got {len(tokens)}: {_show(line)}"))
            continue
        row: list[float] = []
        repaired, why, stray = [], "", 0
        for token in tokens:
            value = _parse_token(token)
            if value is None:
                fixed, why = _repair(token)
                value = _parse_token(fixed) if fixed is not None else None
                if value is None:
                    break
                repaired.append(f"{_show(token)} -> {fixed.decode()}")
                stray += len(token) - len(fixed)
            row.append(value)
        if len(row) != FIELDS:
            issues.append(Issue(number, "dropped", f"non-numeric value {_show(token)} in {_show(line)}{why}"))
            continue
        if repaired:
            issues.append(Issue(number, "repaired", f"dropped {counted(stray, 'stray byte')}: {', '.join(repaired)}"))
        rows.append(row)
        numbers.append(number)
    return (np.array(rows, dtype=np.float64).reshape(-1, FIELDS), issues,
            np.array(numbers, dtype=np.int64))


def _repair(token: bytes) -> tuple[bytes | None, str]:
    """``(token without its stray bytes, "")`` when that is a number and every run of stray bytes was
    safe to remove; else ``(None, why)``, ``why`` saying what was not guessed (``""``: not a number).

    Safe: a run of ASCII control bytes that follows a digit or the point and, if a digit follows it, is
    in the fraction (after the point, before any exponent), as in S3DIS's ``103.0\\x100000``. So nothing
    is removed that may have stood for a sign (a run before the first digit of the number or of its
    exponent), a decimal point (``1\\x0e5``: ``.`` is ``0x2e``, ``0x0e`` with bit 5 lost, as ``\\x10`` is
    ``0``), a digit of the integer part or exponent (``10\\x103``: 103 or 1003?) or a non-ASCII character
    (``\\xe2\\x88\\x92`` is U+2212, a minus; ``\\xc2\\xb7`` a middle dot, a decimal mark)."""
    fixed = _STRAY.sub(b"", token)
    if fixed == token or _NUMBER.fullmatch(fixed) is None:
        return None, ""
    for run in _STRAY.finditer(token):
        before, after = _STRAY.sub(b"", token[:run.start()]), _STRAY.sub(b"", token[run.end():])
        if max(run.group()) >= 0x80:
            return None, ": a non-ASCII character in a number (a Unicode minus, decimal mark or space?) is not guessed"
        if not before[-1:].isdigit() and before[-1:] != b".":
            return None, ": a stray byte before the first digit (where a sign may have been) is not guessed"
        if after[:1].isdigit() and (b"." not in before or b"e" in before.lower()):
            return None, (": a stray byte between digits before the decimal point or in the exponent (where a "
                          "point or a digit may have been) is not guessed")
    return fixed, ""


def _show(text: bytes, limit: int = 80) -> str:
    """Printable form of raw bytes for messages, control bytes escaped (``b'103.0\\x100000'``)."""
    shown = repr(text.strip())[2:-1]
    return "'" + shown[:limit] + ("..." if len(shown) > limit else "") + "'"
