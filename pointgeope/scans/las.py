"""LAS and LAZ point clouds through ``laspy`` (optional: ``pip install "pointgeope[las]"``, which brings
``laspy`` and the ``lazrs`` LAZ backend).

Reading: ``x y z`` as scaled float64 (``X * scale + offset``), in file order; the colour of point formats
that have one (2, 3, 5, 7, 8, 10) is 16 bit by the specification and divided by 257, unless no value
exceeds 255 (writers that store 8-bit values as they are), see ``scan.color_to_uint8``.

Writing (``write_las``): LAS 1.2 point format 3 (GPS time and RGB, colour ``c * 257``), the predicted
class in the ``classification`` field (0..12 in ``constants.CLASS_NAMES`` order, not the ASPRS codes;
the class names are in a VLR ``pointgeope/classes``). Scales and offsets are the input LAS file's, else
0.001 and the minimum (millimetres).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pointgeope.atomic import atomic_path
from pointgeope.scans.scan import Scan, ScanError, color_to_uint8

EXTENSIONS = (".las", ".laz")


def _laspy(path: Path):
    try:
        import laspy
    except ImportError:
        raise ScanError(f"{path}: reading and writing LAS/LAZ needs laspy: pip install 'pointgeope[las]' "
                        "(or pip install 'laspy[lazrs]')") from None
    return laspy


def read_las(path: str | Path, name: str | None = None) -> Scan:
    """A :class:`Scan` of a LAS/LAZ file (see the module docstring)."""
    path = Path(path)
    laspy = _laspy(path)
    try:
        las = laspy.read(path)
    except Exception as err:  # laspy raises its own and OS errors for truncated or foreign files
        raise ScanError(f"{path}: not a readable LAS/LAZ file ({type(err).__name__}: {err})") from None
    coord = np.stack([np.asarray(las.x), np.asarray(las.y), np.asarray(las.z)], axis=1).astype(np.float64)
    color = None
    if {"red", "green", "blue"} <= set(las.point_format.dimension_names):
        color = color_to_uint8(np.stack([las.red, las.green, las.blue], axis=1), str(path), unit_float=False)
    meta = {"las_scales": [float(s) for s in las.header.scales],
            "las_offsets": [float(o) for o in las.header.offsets]}
    return Scan(name or path.stem, str(path), coord, color, meta=meta)


def write_las(path: str | Path, scan: Scan, color: np.ndarray, label: np.ndarray,
              class_names: list[str]) -> Path:
    """``scan``'s points with ``color uint8 (N, 3)`` and ``classification = label`` (see the module
    docstring), atomically."""
    path = Path(path)
    laspy = _laspy(path)
    header = laspy.LasHeader(point_format=3, version="1.2")
    header.scales = np.asarray(scan.meta.get("las_scales", [0.001] * 3), dtype=np.float64)
    header.offsets = np.asarray(scan.meta.get("las_offsets", np.floor(scan.coord.min(axis=0))), dtype=np.float64)
    header.vlrs.append(laspy.VLR(user_id="pointgeope", record_id=1, description="classes",
                                 record_data=",".join(class_names).encode("ascii")))
    las = laspy.LasData(header)
    las.x, las.y, las.z = scan.coord[:, 0], scan.coord[:, 1], scan.coord[:, 2]
    rgb16 = color.astype(np.uint16) * 257
    las.red, las.green, las.blue = rgb16[:, 0], rgb16[:, 1], rgb16[:, 2]
    las.classification = label.astype(np.uint8)
    with atomic_path(path) as tmp:
        las.write(tmp)
    return path
