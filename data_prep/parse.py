"""Parse S3DIS annotation text (lines ``x y z r g b``) into an ``(N, 6)`` float64 array, repairing what can be.

Three paths, tried in order; all give the value that C ``strtod`` gives for each token (correctly
rounded), so the result never depends on which path ran:

1. ``_parse_decimal``: vectorised over the bytes of the file, for text made only of plain decimals
   (``[+-]digits[.digits]``, the integer of the digits below ``2**53``) and whitespace, six tokens on
   each non-blank line. A token with digits ``d`` and ``k`` digits after the point is
   ``int(d) / 10**k``: both are exact doubles (``int(d) < 2**53``, ``k <= 22``), so one IEEE division
   is correctly rounded (Clinger's fast path), bit for bit what ``strtod`` returns. This is every
   file of S3DIS but a few.
2. ``_parse_generic``: ``np.fromstring`` for anything else that is well formed (exponents, ...).
3. ``_parse_lines``: line by line. A token with a stray control byte or non-ASCII byte inside a number
   (S3DIS has ``103.0\\x100000``) is repaired by dropping those bytes; a line that is still not six
   numbers is dropped. Every repair and drop is returned as an :class:`Issue` with its line number.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import numpy as np

FIELDS = 6  # x y z r g b
MAX_DIGITS = 22  # 10**22 is the largest exact power of ten in float64
BLOCK = 1 << 18  # bytes per block of the vectorised parser

# Byte classes of the vectorised parser: solid (token) bytes are >= _DIGIT, signs >= _MINUS, junk the largest.
_SPACE, _NEWLINE, _DIGIT, _DOT, _MINUS, _PLUS, _OTHER = range(7)
_CLASS = np.full(256, _OTHER, dtype=np.uint8)
_CLASS[[ord(c) for c in " \t\r\v\f"]] = _SPACE
_CLASS[ord("\n")] = _NEWLINE
_CLASS[ord("0"):ord("9") + 1] = _DIGIT
_CLASS[ord(".")] = _DOT
_CLASS[ord("-")] = _MINUS
_CLASS[ord("+")] = _PLUS
_POW10 = np.array([float(10**k) for k in range(23)])  # exact: every 10**k, k <= 22, is a double

_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Bytes that can never be part of a number in a text file: control bytes and non-ASCII.
_STRAY = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f-\xff]")


@dataclass(frozen=True)
class Issue:
    """One line that was repaired (``kind="repaired"``) or dropped (``kind="dropped"``)."""

    line: int  # 1-based
    kind: str
    message: str


@dataclass(frozen=True)
class Parsed:
    """The rows of one file, ``values`` float64 ``(N, 6)``, and what was repaired or dropped."""

    values: np.ndarray
    issues: tuple[Issue, ...] = ()
    path: str = "decimal"  # which parser produced the values: decimal, generic or lines

    def count(self, kind: str) -> int:
        return sum(issue.kind == kind for issue in self.issues)


def parse_points(data: bytes) -> Parsed:
    """Parse the text of one annotation file; see the module docstring for the three paths."""
    values = _parse_decimal(data)
    if values is not None:
        return Parsed(values, (), "decimal")
    values = _parse_generic(data)
    if values is not None:
        return Parsed(values, (), "generic")
    values, issues = _parse_lines(data)
    return Parsed(values, tuple(issues), "lines")


def _parse_decimal(data: bytes) -> np.ndarray | None:
    """Vectorised exact parser for plain decimals; ``None`` when the text is anything else.

    Works on blocks of whole lines of about ``BLOCK`` bytes, so that its temporaries stay in the CPU
    cache (measured about twice as fast as whole 8 MB files at once).
    """
    blocks = []
    start, size = 0, len(data)
    view = memoryview(data)
    while start < size:
        stop = data.rfind(b"\n", start, start + BLOCK) + 1 if start + BLOCK < size else size
        if stop <= start:  # a line longer than BLOCK
            stop = data.find(b"\n", start + BLOCK) + 1 or size
        values = _parse_block(view[start:stop])
        if values is None:
            return None
        blocks.append(values)
        start = stop
    return np.concatenate(blocks) if blocks else np.empty((0, FIELDS))


def _parse_block(data: memoryview) -> np.ndarray | None:
    """:func:`_parse_decimal` on one block of whole lines. Layout, for the text ``"-1.25 30"``::

        bytes     - 1 . 2 5 _ 3 0     c = class of each byte (_ is a space)
        tokens    [-1.25]   [30]      starts = [0, 6], ends = [5, 8] (exclusive)
        digits      1   2 5   3 0     digits = [1, 3, 4, 6, 7], digit_token = [0, 0, 0, 1, 1]
        place       2   1 0   1 0     last = [2, 4] (index of each token's last digit): last[t] - j
        mantissa    125       30      sum of d * 10**place (float64 sums of integers < 2**53 are exact)
        frac        2         0       digits after the point = end - point - 1
        values      -1.25     30.0    mantissa / 10**frac, negated after a '-'
    """
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return np.empty((0, FIELDS))
    c = _CLASS.take(b)  # (take: a third of the time of fancy indexing here)
    if c.max() == _OTHER:
        return None
    solid = (c >= _DIGIT).view(np.int8)
    # edge[i] = +1 where a token starts at byte i, -1 where one ended at byte i - 1; they alternate
    edge = np.empty(b.size + 1, dtype=np.int8)
    edge[0], edge[-1] = solid[0], -solid[-1]
    np.subtract(solid[1:], solid[:-1], out=edge[1:-1])
    bounds = np.flatnonzero(edge)
    starts, ends = bounds[0::2], bounds[1::2]  # ends exclusive
    if starts.size == 0:
        return np.empty((0, FIELDS))
    token_of = np.cumsum(edge[:-1] == 1, dtype=np.int32)  # tokens started up to each byte (1-based on tokens)
    # Six tokens on every non-blank line: tokens started before each newline, differenced per line.
    before_newline = token_of.take(np.flatnonzero(c == _NEWLINE))
    per_line = np.diff(before_newline, prepend=0, append=starts.size)
    if not ((per_line == 0) | (per_line == FIELDS)).all():
        return None
    # A sign only as the first byte of a token; at most one point per token.
    signs = np.flatnonzero(c >= _MINUS)
    if (edge[signs] != 1).any():
        return None
    sign_token = token_of.take(signs) - 1
    dots = np.flatnonzero(c == _DOT)
    dot_token = token_of.take(dots) - 1
    if dot_token.size and (np.diff(dot_token) == 0).any():
        return None
    # A token is [sign] digits [point] digits: its digits are contiguous in `digits`, in token order.
    n_digits = ends - starts
    n_digits[dot_token] -= 1
    n_digits[sign_token] -= 1
    if n_digits.min() < 1 or n_digits.max() > MAX_DIGITS:
        return None
    digits = np.flatnonzero(c == _DIGIT)
    digit_token = np.repeat(np.arange(starts.size), n_digits)
    # Digit j adds d * 10**(digits after it in its token) = d * 10**(last[token] - j).
    last = np.cumsum(n_digits) - 1
    place = last.take(digit_token) - np.arange(digits.size)
    weights = (b.take(digits) - 48) * _POW10.take(place)
    mantissa = np.bincount(digit_token, weights=weights, minlength=starts.size)
    if mantissa.max() >= 2.0 ** 53:  # the sums are exact below 2**53, and only then
        return None
    # Only digits follow the point (signs lead, one point per token): k = end - point - 1.
    frac = np.zeros(starts.size, dtype=np.int64)
    frac[dot_token] = ends[dot_token] - dots - 1
    values = mantissa / _POW10[frac]
    negative = sign_token[b.take(signs) == ord("-")]
    values[negative] = -values[negative]
    return values.reshape(-1, FIELDS)


def _parse_generic(data: bytes) -> np.ndarray | None:
    """``np.fromstring`` on the whole text, accepted only when every non-blank line has six numbers."""
    lines = data.split(b"\n")
    counts = np.fromiter((len(line.split()) for line in lines), dtype=np.int64, count=len(lines))
    if not np.isin(counts, (0, FIELDS)).all():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (not raises) when it stops at a bad token
        try:
            values = np.fromstring(data, dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    if values.size != counts.sum() or not np.isfinite(values).all():
        return None
    return values.reshape(-1, FIELDS)


def _parse_token(token: bytes) -> float | None:
    if _NUMBER.fullmatch(token) is None:
        return None
    value = float(token)
    return value if np.isfinite(value) else None


def _parse_lines(data: bytes) -> tuple[np.ndarray, list[Issue]]:
    """The slow path: parse, repair or drop line by line."""
    rows: list[list[float]] = []
    issues: list[Issue] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) != FIELDS:
            issues.append(Issue(number, "dropped", f"expected {FIELDS} values, got {len(tokens)}: {_show(line)}"))
            continue
        row: list[float] = []
        repaired = []
        for token in tokens:
            value = _parse_token(token)
            if value is None:
                fixed = _STRAY.sub(b"", token)
                value = _parse_token(fixed) if fixed != token else None
                if value is None:
                    break
                repaired.append(f"{_show(token)} -> {fixed.decode()}")
            row.append(value)
        if len(row) != FIELDS:
            issues.append(Issue(number, "dropped", f"non-numeric value {_show(token)} in {_show(line)}"))
            continue
        if repaired:
            issues.append(Issue(number, "repaired", "dropped stray byte(s): " + ", ".join(repaired)))
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(-1, FIELDS), issues


def _show(text: bytes, limit: int = 80) -> str:
    """Printable form of raw bytes for messages, control bytes escaped (``b'103.0\\x100000'``)."""
    shown = repr(text.strip())[2:-1]
    return "'" + shown[:limit] + ("..." if len(shown) > limit else "") + "'"
