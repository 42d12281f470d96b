"""The range of one file's colour values: the one rule of ``pointgeope predict`` (users' scans) and
``pointgeope prepare`` (each annotation file), so that a room and a scan of it are read alike.

A file's colours ``c`` ``(N, 3)`` (finite) are read as, in this order:

- ``"unit"``: 0..1, a normalised export (Open3D, CloudCompare): every value within ``[0, 1]`` and some
  fractional (a file of 0 and 1 only is not, nothing says so) -> ``round(255 c)``;
- ``"16bit"``: 0..65535 (LAS, 16-bit PLY and TIFF-derived exports): more than half of the values that round
  above 0 round above 255 -> ``round(c / 257)`` (65535 -> 255, the inverse of the ``c * 257`` of 8-bit
  writers). In a 16-bit file every colour brighter than 1/255 of full intensity is above 255, so nearly all
  are; in an 8-bit file a value above 255 is a stray (a 256, or 255.6 of float noise), a few at most;
- ``"8bit"``: 0..255 otherwise -> ``round(c)``, the few values that round outside ``0..255`` clipped
  (and counted, for the caller's warning).

One stray value cannot flip a file to 16 bit (before, the maximum alone decided: one 256 divided every
colour of a scan by 257, black).
"""
from __future__ import annotations

import numpy as np

UNIT, BITS16, BITS8 = "unit", "16bit", "8bit"


def is_unit(values: np.ndarray) -> bool:
    """Whether ``values`` are 0..1 colours: all within ``[0, 1]``, some fractional."""
    return (values.size > 0 and values.dtype.kind == "f" and float(values.min()) >= 0
            and float(values.max()) <= 1 and bool((values != np.rint(values)).any()))


def color_range(values: np.ndarray) -> str:
    """:data:`UNIT`, :data:`BITS16` or :data:`BITS8` for one file's colours ``(N, 3)`` (the module's rule)."""
    values = np.asarray(values)
    if is_unit(values):
        return UNIT
    above = np.count_nonzero(values >= 255.5)  # rounds above 255
    lit = np.count_nonzero(values >= 0.5)      # rounds above 0
    return BITS16 if above and 2 * above > lit else BITS8


def to_uint8(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``(colours uint8 (N, 3), clipped bool (N, 3))``: ``values`` read as ``kind`` (rounded, then clipped
    to ``0..255``; ``clipped`` marks the values that were outside)."""
    values = np.asarray(values, dtype=np.float64)
    if kind == UNIT:
        values = values * 255.0
    elif kind == BITS16:
        values = values / 257.0
    values = np.rint(values)
    clipped = (values < 0) | (values > 255)
    return np.clip(values, 0, 255).astype(np.uint8, order="C"), clipped
