"""Scans whose file kept the coordinates in float32 far from 0: a warning, as ``predict`` cannot restore them.

float32 holds 24 significant bits, so a coordinate ``x`` comes in steps of ``ulp(x) = 2^(floor(log2 |x|) - 23)``:
about 0.5 m at a UTM northing of 4.2e6 m, 0.03 m at an easting of 5e5 m. A PLY ``float`` property or a float32
``.npy`` of a georeferenced scan has lost everything finer before ``predict`` reads it (``prepare`` keeps such
rooms precise by storing them minus an ``origin``: :mod:`pointgeope.origin`), and its points fall on a few planes
per voxel: the network sees another cloud than the scanner's, without a word. Such a scan is recognised by its
values: every coordinate is a float32 value, some are not integers or some reach 2^24 (integer coordinates, e.g. a
1 m lattice or whole millimetres, are float32 values below 2^24 without having been rounded; from 2^24 on every
float32 value is an integer, so there integers are no excuse: a float32 file of millimetres at 4.2e9 mm is in
steps of 256 mm), and the step at its largest ``|x|`` (in metres, after ``--scale``) exceeds :data:`STEP_SHARE` of
the model's voxel. One pass over the coordinates, a comparison each.

The share and why (an eighth of a voxel): :mod:`pointgeope.coord_steps`, the rule's one owner, which the networks'
warning for float32 coordinates given to their ``forward`` asks too.
"""
from __future__ import annotations

import numpy as np

from pointgeope.coord_steps import STEP_SHARE, too_coarse

__all__ = ["STEP_SHARE", "float32_steps", "float32_note"]

def float32_steps(coord: np.ndarray) -> float:
    """The float32 step at the largest ``|x|`` of ``coord (N, 3)`` (float64, the file's unit) where every entry
    is a float32 value and some are not integers or the largest reaches ``2^24``, else 0 (also for an empty
    cloud)."""
    if coord.size == 0:
        return 0.0
    as32 = coord.astype(np.float32)
    if not np.array_equal(as32, coord):
        return 0.0
    reach = np.abs(as32).max()
    if reach < 2.0 ** 24 and np.array_equal(np.floor(coord), coord):   # integers below 2^24: exact in float32
        return 0.0
    return float(np.spacing(reach))


def float32_note(source: str, coord: np.ndarray, scale: float, grid_size: float) -> str | None:
    """The warning for a scan ``source`` whose coordinates ``coord (N, 3)`` (before ``--scale``) came as float32
    values in steps coarser than ``STEP_SHARE * grid_size`` metres (module docstring), else ``None``."""
    step = float32_steps(coord) * scale
    if not too_coarse(step, grid_size):
        return None
    reach = float(np.abs(coord).max()) * scale
    return (f"warning: {source}: its coordinates are float32 values, which {reach:.3g} m from 0 come in steps of "
            f"{step:.3g} m (the model's voxels: {grid_size:g} m): a file that kept them in float32 has lost their "
            "detail; export them in float64 (a PLY 'double' property, a float64 .npy) or minus an offset near the scan")
