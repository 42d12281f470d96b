"""A raw room's colours as stored, ``uint8`` ``0..255`` (S3DIS's range), judged file by file.

Each annotation file (the unit of export: one object re-exported by another tool may differ from the
rest of its room) is read by the rule of :mod:`pointgeope.color_range` (:func:`~pointgeope.color_range.room_ranges`),
the one ``pointgeope predict`` applies to a scan: 0..1 scaled by 255, 16 bit divided by 257 (by 256 when
every value's low byte is 0: ``c << 8``), else 0..255
rounded, the few values outside clipped. Each case other than plain 0..255 is one warning per room, naming
how many files and the first one's file and line. (Before, the 0..1 test was made over the whole room: one
normalised file among 0..255 files was rounded to 0 and 1, black, without a word; 16-bit files were clipped
to 255, white.)
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pointgeope.color_range import (
    BITS8,
    BITS16,
    UNIT,
    bits16_said,
    clip_warning,
    fractions_beyond_unit,
    room_ranges,
    shown,
    to_uint8,
)
from pointgeope.plural import counted


def room_colours(rgb: np.ndarray, sizes: list[int], room: str, where: Callable[[int], str],
                 messages: list[str]) -> tuple[np.ndarray, int, int]:
    """``(color uint8 (N, 3), clipped values, scale)`` of a room's colours ``rgb`` ``(N, 3)`` float64, the
    rows of its files in order (``sizes``: the rows of each); ``scale`` is 255 when a file was 0..1, else 1
    (the room's ``color_scale`` attribute). ``where(row)`` names the file and line of a row for the
    warnings appended to ``messages``."""
    if not len(rgb):
        return np.empty((0, 3), dtype=np.uint8), 0, 1
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = ends - np.asarray(sizes, dtype=np.int64)
    maxima = [float(rgb[start:end].max()) if end > start else 0.0 for start, end in zip(starts, ends, strict=True)]
    (kinds, overruled), top = room_ranges([rgb[start:end] for start, end in zip(starts, ends, strict=True)],
                                          maxima), max(maxima)
    if overruled is not None:
        files, writer = overruled
        row = int(starts[writer]) + int(np.argmax(fractions_beyond_unit(rgb[starts[writer]:ends[writer]])))
        messages.append(f"{room}: {len(files):,} of {counted(len(kinds), 'file')} with colours within 0..1 read as "
                        f"0..255, not scaled by 255, since another file holds fractions beyond 0..1 ({where(row)}: "
                        f"{shown(rgb[row])}), a 0..255 writer of fractional colours (first "
                        f"{where(int(starts[files[0]]))}: {shown(rgb[starts[files[0]]])}); if they are a normalised "
                        "export, write the room's colours in one range")
    if all(k == BITS8 for k in kinds) and top < 255.5 and float(rgb.min()) > -0.5:
        return np.rint(rgb).astype(np.uint8, order="C"), 0, 1  # the usual room: nothing to clip or scale
    color = np.empty(rgb.shape, dtype=np.uint8)
    clipped = np.zeros(rgb.shape, dtype=bool)
    for start, end, kind in zip(starts, ends, kinds, strict=True):
        color[start:end], clipped[start:end] = to_uint8(rgb[start:end], kind)
    first16 = next((i for i, k in enumerate(kinds) if k == BITS16), 0)  # the file its message names
    for kind, found, action in (
            (UNIT, "colours within 0..1 (a normalised export), expected 0..255 (S3DIS)",
             "scaled by 255 (rounded as they are, every colour would be 0 or 1); if they really are 0..255, write "
             "them as integers"),
            (BITS16, "colours above 255 (16 bit, 0..65535)",
             f"{bits16_said(rgb[starts[first16]:ends[first16]])}; if they are 0..255, clip them to 255")):
        files = [start for start, k in zip(starts, kinds, strict=True) if k == kind]
        if files:
            messages.append(f"{room}: {len(files):,} of {counted(len(kinds), 'file')} with {found} (first "
                            f"{where(int(files[0]))}: {shown(rgb[files[0]])}): {action}")
    if clipped.any():
        at = int(np.searchsorted(ends, np.flatnonzero(clipped.any(axis=1))[0], side="right"))  # its file
        messages.append(clip_warning(room, rgb, clipped, where, judged=rgb[starts[at]:ends[at]]))
    return color, int(clipped.sum()), 255 if UNIT in kinds else 1
