"""The range of one file's colour values: the one rule of ``pointgeope predict`` (users' scans) and
``pointgeope prepare`` (each annotation file of a room), so that a room and a scan of it are read alike.

A file's colours ``c`` ``(N, 3)`` (finite) are read as, in this order:

- where the format declares 16 bit (LAS, whose colours are 16 bit by its spec, and a PLY colour of a
  2-byte type: ``ushort``/``short``/``uint16``/``int16``): ``"16bit"`` when some value rounds above 255,
  else ``"8bit"`` (a writer that stores 8-bit values as they are). Such files are integers, so an
  above-255 value is no float noise, and a dim 16-bit scan (most values at the sensor's floor, 1..255,
  under 1/255 of full intensity) stays 16 bit. A PLY ``int``/``uint`` colour (4 bytes, what plyfile
  writes for a numpy int32 array, mostly of 8-bit values) declares nothing: the rules below read it, so
  one stray 256 is clipped (and said), not a reason to divide the scan by 257;
- ``"unit"``: 0..1, a normalised export (Open3D, CloudCompare): every value within ``[0, 1]`` (up to
  :data:`UNIT_MAX`, the rounding noise of such exporters: float32's ``1.0000001``, float16's ``1.00098``)
  and some fractional (a file of 0 and 1 only is not, nothing says so) -> ``round(255 c)``, clipped to 255;
- ``"16bit"``: 0..65535 (16-bit exports that do not declare it: text, ``.npy``): more than half of the
  values that round above 0 (the "lit" values) round above 255, and some value reaches 511.5 (two 8-bit
  steps of full scale, ``2 * 257 - 2.5``) -> ``round(c / 257)`` (65535 -> 255, the inverse of the
  ``c * 257`` of 8-bit writers), or ``c / 256`` when every value is a whole multiple of 256
  (:func:`bits16_divisor`). In a 16-bit file every colour brighter than 1/255 of full intensity is
  above 255, so nearly all are; in an 8-bit file a value above 255 is a stray (a 256 of a writer that
  multiplies 0..1 by 256, or 255.6 of float noise), which never reaches 511.5;
- ``"8bit"``: 0..255 otherwise -> ``round(c)``, the few values that round outside ``0..255`` clipped
  (and counted, for the caller's warning).

A 16-bit file (declared or not) whose every value is a whole multiple of 256 holds 8-bit colours shifted
into the high byte, ``c << 8`` (the low byte zero, as many LAS writers store them): it is divided by 256,
giving back ``c`` exactly, where ``round(256 c / 257)`` is one level low for every ``c`` above 128
(``c / 257 > 0.5``). Nothing else is: ``c * 257`` has the low byte ``c``, zero for black only, and a
16-bit sensor's values fill the low byte too.

The files of one room (``prepare``, :func:`room_ranges`) are judged each by this rule, with two
exceptions that read a file as its room: no file is 0..1 when another file of the room holds values that
are not whole and clearly beyond 0..1 (above 1.5, so not the ``1.0000001`` of float noise: a 0..255 writer
of fractional colours, ``12.37 200.25``, whose near-black object ``0.1 0.79 0.27`` is within ``[0, 1]``
too; the room's warning says so), and in a room with a 0..1 file, a file of 0 and 1 only (a
black or white object) is 0..1 too. Where the rule cannot tell (a near-black object written with fractions
among integer 0..255 files is read as 0..1), the room's warning names the first such file.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pointgeope.plural import counted

UNIT, BITS16, BITS8 = "unit", "16bit", "8bit"
BITS16_REACH = 511.5  # some value of a 16-bit file that does not declare it reaches this
UNIT_MAX = 1.001      # the largest value of a 0..1 file: 1 and an exporter's rounding noise (float16's step
                      # above 1 is 1/1024); round(255 * 1.001) is still 255, nothing is clipped


def is_unit(values: np.ndarray) -> bool:
    """Whether ``values`` are 0..1 colours: all within ``[0, UNIT_MAX]``, some fractional."""
    return (values.size > 0 and values.dtype.kind == "f" and float(values.min()) >= 0
            and float(values.max()) <= UNIT_MAX and bool((values != np.rint(values)).any()))


def color_range(values: np.ndarray, declared_16bit: bool = False) -> str:
    """:data:`UNIT`, :data:`BITS16` or :data:`BITS8` for one file's colours ``(N, 3)`` (the module's rule);
    ``declared_16bit``: the file's format says 16 bit."""
    values = np.asarray(values)
    if values.size == 0:
        return BITS8
    if declared_16bit:
        return BITS16 if float(values.max()) >= 255.5 else BITS8
    if is_unit(values):
        return UNIT
    above = np.count_nonzero(values >= 255.5)  # rounds above 255
    lit = np.count_nonzero(values >= 0.5)      # rounds above 0
    return BITS16 if above and 2 * above > lit and float(values.max()) >= BITS16_REACH else BITS8


def bits16_divisor(values: np.ndarray) -> int:
    """The divisor that turns 16-bit colours ``values`` ``(N, 3)`` into 0..255: 256 when every value is a
    whole multiple of 256 (``c << 8``, low byte zero: ``v / 256`` is ``c`` exactly), else 257 (``c * 257``,
    65535 -> 255)."""
    values = np.asarray(values)
    return 256 if values.size and bool((np.fmod(values, 256) == 0).all()) else 257


def bits16_said(values: np.ndarray) -> str:
    """How 16-bit colours ``values`` were read, for messages: ``"divided by 257"``, or ``"divided by 256
    (every value's low byte is 0: 8-bit colours stored as c << 8)"``."""
    return ("divided by 257" if bits16_divisor(values) == 257
            else "divided by 256 (every value's low byte is 0: 8-bit colours stored as c << 8)")


def fractions_beyond_unit(block: np.ndarray) -> np.ndarray:
    """``(N,)`` bool: the rows of ``block`` ``(N, 3)`` holding a value that is not whole and clearly beyond
    0..1 (above 1.5: not the float noise ``1.0000001`` of a 0..1 exporter), the mark of a 0..255 writer of
    fractions (``12.37``)."""
    return ((block > 1.5) & (block != np.rint(block))).any(axis=1)


def room_ranges(blocks: Sequence[np.ndarray],
                maxima: Sequence[float]) -> tuple[list[str], tuple[list[int], int] | None]:
    """``(kinds, overruled)``: the range of each file of a room (the module's rule, its room exceptions),
    ``blocks`` the files' colours ``(N_i, 3)``, ``maxima`` their maxima (0 for an empty file). A file whose
    maximum is within ``(UNIT_MAX, 255.5)`` (the usual one) is 0..255 at the cost of its maximum alone.
    ``overruled``: ``(files, writer)`` when the first exception applied (the indices of the files that alone
    are 0..1 and are read as 0..255, the first file with fractions beyond 0..1), else ``None``."""
    kinds = [BITS8 if UNIT_MAX < hi < 255.5 else color_range(block) for block, hi in zip(blocks, maxima, strict=True)]
    writer = next((i for i, (block, k) in enumerate(zip(blocks, kinds, strict=True))
                   if k != UNIT and fractions_beyond_unit(block).any()), None)
    overruled = None
    if UNIT in kinds and writer is not None:  # a 0..255 writer of fractions: its dark files too
        overruled = ([i for i, k in enumerate(kinds) if k == UNIT], writer)
        kinds = [BITS8 if k == UNIT else k for k in kinds]
    if UNIT in kinds:  # a file of 0 and 1 only (a black or white object) in a 0..1 room is 0..1 too
        kinds = [UNIT if k == BITS8 and len(block) and float(block.min()) >= 0 and hi <= 1 else k
                 for block, hi, k in zip(blocks, maxima, kinds, strict=True)]
    return kinds, overruled


def to_uint8(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``(colours uint8 (N, 3), clipped bool (N, 3))``: ``values`` read as ``kind`` (16 bit divided by
    :func:`bits16_divisor`; rounded, then clipped to ``0..255``; ``clipped`` marks the values that were outside)."""
    values = np.asarray(values, dtype=np.float64)
    if kind == UNIT:
        values = values * 255.0
    elif kind == BITS16:
        values = values / float(bits16_divisor(values))
    values = np.rint(values)
    clipped = (values < 0) | (values > 255)
    return np.clip(values, 0, 255).astype(np.uint8, order="C"), clipped


def shown(row: np.ndarray) -> str:
    """One point's colour values as they came, for messages: ``"256 12.5 0"``."""
    return " ".join(f"{v:g}" for v in row)


def not_16bit_reason(values: np.ndarray) -> str:
    """Which part of the 16-bit test of :func:`color_range` a file's colours ``values`` ``(N, 3)`` failed:
    more than half of the lit values above 255, and some value reaching :data:`BITS16_REACH`."""
    above, lit = np.count_nonzero(values >= 255.5), np.count_nonzero(values >= 0.5)
    return ("none reaches 511.5 for 16-bit colours; " if 2 * above > lit
            else "too few above 255 for 16-bit colours; ")


def clip_warning(name: str, values: np.ndarray, clipped: np.ndarray, where: Callable[[int], str],
                 judged: np.ndarray | None = None) -> str:
    """The one line said when colours were clipped: ``values`` ``(N, 3)`` as they came, ``clipped`` of
    :func:`to_uint8` (some true), ``where(row)`` naming a row (``"at point 7"``, ``"wall_1.txt:8"``);
    ``judged``: the colours of the file that holds the first clipped value (default ``values``), whose
    failed part of the 16-bit test is the reason given for values above 255."""
    rows = np.flatnonzero(clipped.any(axis=1))
    judged = values if judged is None else judged
    why = not_16bit_reason(judged) if (values[clipped] > 255).any() else ""
    return (f"{name}: colours outside 0..255 clipped: {counted(int(clipped.sum()), 'colour value')} of "
            f"{len(rows):,} of {counted(len(values), 'point')} (first {where(int(rows[0]))}: "
            f"{shown(values[rows[0]])}); {why}if the file's colours have another range, rescale them to 0..255")
