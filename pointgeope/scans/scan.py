"""A user's scan as read from a file, its error type, and the checks every reader applies.

A :class:`Scan` keeps the points in the file's order (the outputs of ``pointgeope predict`` follow it
point for point) and the coordinates in the file's unit and precision (float64): the network sees them
shifted (and scaled with ``--scale``), but every written file repeats them as they came.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pointgeope.color_range import BITS16, UNIT, UNIT_MAX, bits16_said, clip_warning, color_range, to_uint8
from pointgeope.errors import UserError
from pointgeope.plural import agreeing, counted


class ScanError(UserError, ValueError):
    """An input scan that cannot be read or predicted; the message names the file and says what to do."""


def loadtxt_reason(err: ValueError) -> str:
    """What ``np.loadtxt`` found wrong, without its advice after ``;`` (``usecols``), which does not apply to a
    scan's reader."""
    return str(err).split(";")[0]


@dataclass
class Scan:
    """One point cloud to predict.

    Attributes:
        name: the stem of its outputs, ``"office"`` for ``office.ply``, ``"Area_1/office_1"`` for a room
            of a prepared ``Area_1.h5``.
        source: where it came from, for messages (``path`` or ``path:room``).
        coord: ``float64 (N, 3)`` in the file's unit and order.
        color: ``uint8 (N, 3)``, or ``None`` when the file has no colour.
        label: ``uint8 (N,)`` ground truth where the input carries one (prepared rooms, raw S3DIS), else ``None``.
        meta: format details a writer may reuse (``las_scales``, ``las_offsets`` of a LAS input).
        normal: ``float32 (N, 3)`` unit normals where the input carries them (a prepared room, or a raw room
            parsed as prepare parses it: prepare's), else ``None`` (``predict`` estimates them for a network
            that reads them).
        normal_estimate: the estimate ``normal`` is of (``{"normal_k", "normal_version"}``,
            :mod:`pointgeope.data.normal_record`: a prepared room's attributes), where it is given.
    """

    name: str
    source: str
    coord: np.ndarray
    color: np.ndarray | None = None
    label: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    normal: np.ndarray | None = None
    normal_estimate: dict | None = None

    def __len__(self) -> int:
        return int(self.coord.shape[0])


def float64_coord(values: np.ndarray) -> np.ndarray:
    """``values`` (N, 3) as float64, quietly: a signalling NaN of a float32 file (``0x7f800001``) comes out as
    NaN without numpy's ``RuntimeWarning: invalid value encountered in cast``, which printed a traceback-like
    line before :func:`checked_scan`'s one line naming the file and the point."""
    with np.errstate(invalid="ignore"):
        return np.asarray(values).astype(np.float64)


def checked_scan(scan: Scan) -> Scan:
    """``scan`` after checking shapes, that it has points and that every coordinate is finite."""
    n = scan.coord.shape[0] if scan.coord.ndim == 2 else -1
    if scan.coord.ndim != 2 or scan.coord.shape[1] != 3:
        raise ScanError(f"{scan.source}: expected coordinates of shape (N, 3), got {scan.coord.shape}")
    if n == 0:
        raise ScanError(f"{scan.source}: expected points, found none (empty scan)")
    bad = ~np.isfinite(scan.coord).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        have = agreeing(int(bad.sum()), "has", "have")
        raise ScanError(f"{scan.source}: {counted(int(bad.sum()), 'point')} {have} NaN or infinite coordinates "
                        f"(the first is point {first}: {scan.coord[first].tolist()}); remove them from the file")
    for key, shape in (("color", (n, 3)), ("label", (n,))):
        value = getattr(scan, key)
        if value is not None and (value.shape != shape or value.dtype != np.uint8):
            raise ScanError(f"{scan.source}: expected {key} uint8 of shape {shape}, got {value.dtype} {value.shape}")
    return scan


def one_colour_note(scan: Scan) -> str | None:
    """The note of a scan of more than one point whose points all have one colour: a file with colour fields but
    no colours (a LAS point format with RGB filled with 0 by a scanner without a camera, 65535 by others), which
    a model trained with colour would take for a room painted in it, without a word (``predict`` prints it for
    such a model: ``engine.predict.check_scan``)."""
    color = scan.color
    if color is None or len(color) < 2 or not (color == color[0]).all():
        return None
    return (f"{scan.source}: every point has the colour ({', '.join(map(str, color[0].tolist()))}): a file with "
            "colour fields but no colours? a model trained with colour predicts it as a room of that colour; "
            "predict it with a geometry-only model (trained with data.color=false model.in_channels=3)")


def color_to_uint8(values: np.ndarray, source: str, unit_float: bool | None = None,
                   notes: list[str] | None = None, declared_16bit: bool = False) -> np.ndarray:
    """Colours ``(N, 3)`` of any common range as ``uint8``, by the rule of :mod:`pointgeope.color_range`
    (one owner, shared with ``pointgeope prepare``): 0..1 floats ``round(255 c)``; 16 bit ``round(c / 257)``
    (``c / 256`` when every value's low byte is 0: ``c << 8``)
    when the format declares it (``declared_16bit``: LAS, a 16-bit PLY type) and some value is above 255, or
    when more than half of the non-zero values are above 255 and some reaches 511.5; else 0..255 rounded,
    a few values above 255 clipped.

    ``unit_float``: ``True`` where the format says 0..1 (a PLY float colour), else judged by the values.
    ``notes`` gets one line when colours are clipped, or divided by 257 (256) while the format did not declare
    16 bit.

    Raises ScanError for negative, non-finite or larger values.
    """
    values = np.asarray(values)
    if values.size == 0:
        return np.zeros(values.shape, dtype=np.uint8)
    not_colours = ("; if these are not colours (normals, intensity), keep only x y z (and r g b) in the file, "
                   "in that order")
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise ScanError(f"{source}: colour values are NaN or infinite; expected 0..255, 0..65535 or 0..1{not_colours}")
    lo, hi = float(values.min()), float(values.max())
    if lo < 0 or hi > 65535:
        raise ScanError(f"{source}: colour values from {lo:g} to {hi:g}; expected 0..255, 0..65535 or "
                        f"0..1{not_colours}")
    if unit_float and hi > UNIT_MAX:  # 1.0000001, a 0..1 exporter's rounding, is 1
        raise ScanError(f"{source}: float colour values up to {hi:g}; expected 0..1 (a float colour is a "
                        "fraction of full intensity): divide them by 255, or store them as uchar 0..255")
    kind = UNIT if unit_float else color_range(values, declared_16bit)
    color, clipped = to_uint8(values, kind)
    if notes is not None and kind == BITS16 and not declared_16bit:
        notes.append(f"{source}: colours read as 16 bit (max {hi:g}, {np.count_nonzero(values >= 255.5):,} of "
                     f"{values.size:,} values above 255): {bits16_said(values)}; if they are 0..255, clip them to 255")
    if notes is not None and clipped.any():
        notes.append(clip_warning(source, values, clipped, lambda row: f"at point {row}"))
    return color
