"""The files ``pointgeope predict`` writes for one scan, all in the scan's point order (row ``i`` of every
file is point ``i`` of the input), each written atomically:

==========  ================================  ===============================================================
format      file                              content
==========  ================================  ===============================================================
npy         ``DIR/<name>_pred.npy``           ``uint8 (N,)`` class per point (``constants.CLASS_NAMES`` order)
ply         ``DIR/<name>_pred.ply``           binary PLY: ``x y z`` (float, or double where float would round
                                              them), ``red green blue`` = ``PALETTE[pred]``, ``pred`` uchar
las         ``DIR/<name>_pred.las``           LAS 1.2 (1.4 above 32 classes), ``classification`` = label
txt         ``DIR/<name>_pred.txt``           ``x y z r g b label`` lines (``text.py``)
h5          ``DIR/<name>_pred.h5``            one room in the prepared-area layout with its ``pred``: ``pointgeope
                                              viz DIR/<name>_pred.h5 --mode pred`` shows it
probs       ``DIR/<name>_probs.npy``          ``float32 (N, C)`` class probabilities, rows sum to 1
record      ``DIR/<name>_pred.json``          what made them (written last; ``engine.predict_record``): a rerun
                                              skips the scan when it matches
==========  ================================  ===============================================================

In every PLY file pointgeope writes, ``pred`` is the prediction and ``label`` the ground truth (``viz --ply``
writes both); predict's PLY carries no ground truth, so it has no ``label``: a reader of the prediction from
``label`` finds none, rather than another field. ``r g b`` of the txt and LAS files is the scan's own colour (the
palette colour of the label where the scan has none). The h5 file: root attributes ``schema_version``, ``area`` (the
name), ``class_names``, ``kind = "scan-predictions"``, ``ignore_index`` (the run's ``train.ignore_index``: the ground
truth viz does not score); group ``<room>`` (the last part of the name; a byte of a file name that is not UTF-8 is
written ``\\udcff`` there) with ``coord`` float32
``(N, 3)`` = the scan's coordinates minus the group attribute ``origin`` (float64, the floor of their
minimum, so that georeferenced coordinates keep their precision), ``color`` uint8 (0 where the scan has
none), ``label`` uint8 (ground truth, 255 where unknown), ``instance`` int32 (0), ``pred`` uint8, and
``normal`` float16 ``(N, 3)`` where predict had normals: a prepared room's own, or those it estimated
for a network of ``[rgb | normal]`` (a raw room's as prepare does; a stray point: its nearest kept point's, as
its prediction), with the group attributes ``normal_k`` and ``normal_version`` that name the estimate
(``pointgeope.data.normals``).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pointgeope.atomic import atomic_path
from pointgeope.constants import IGNORE_LABEL
from pointgeope.h5 import NORMAL
from pointgeope.h5_predictions import write_scan_predictions
from pointgeope.paths import inside
from pointgeope.scans.scan import Scan, ScanError

FORMATS = ("npy", "ply", "las", "txt", "h5")
DEFAULT_FORMATS = ("npy", "ply")
PLY_PREDICTION = "pred"  # the PLY property of the prediction (a rename changes predict's record: predicted again)
# The file names of the table above: never taken as inputs in the --out folder (a rerun into the folder of
# its inputs would otherwise predict its own outputs).
_OUTPUT_NAME = re.compile(rf".+_(pred\.({'|'.join(FORMATS)}|json)|probs\.npy)")


def is_output_name(name: str) -> bool:
    """Whether a file name is one that :func:`output_path` gives (``x_pred.ply``, ``x_probs.npy``)."""
    return _OUTPUT_NAME.fullmatch(name) is not None


def output_path(out: str | Path, name: str, fmt: str, source: str | None = None) -> Path:
    """``DIR/<name>_pred.<fmt>`` (``DIR/<name>_probs.npy`` for ``fmt="probs"``, ``DIR/<name>_pred.json`` for
    ``fmt="record"``), checked to lie inside
    ``DIR`` (:func:`pointgeope.paths.inside`: an OutsideError naming ``source``, the input, otherwise)."""
    file = {"probs": f"{name}_probs.npy", "record": f"{name}_pred.json"}.get(fmt, f"{name}_pred.{fmt}")
    path = Path(out) / file
    return inside(out, path, source or name, "--out")


def _coord_properties(coord: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``x y z`` as float32 where that keeps every value exactly, else float64."""
    with np.errstate(over="ignore"):  # a value beyond float32 (a stray point): not kept, so float64
        single = coord.astype(np.float32)
    keep = single if np.array_equal(single, coord) else coord
    return [(axis, np.ascontiguousarray(keep[:, j])) for j, axis in enumerate("xyz")]


def _h5_origin(scan: Scan) -> np.ndarray:
    """The h5 file's origin (3,): the floor of the scan's minimum; a ScanError when float32 cannot hold a point
    from it (checked on the extent alone: no copy of the points)."""
    origin = np.floor(scan.coord.min(axis=0))
    if (scan.coord.max(axis=0) - origin <= np.finfo(np.float32).max).all():
        return origin
    with np.errstate(over="ignore"):
        beyond = ~np.isfinite((scan.coord - origin).astype(np.float32)).all(axis=1)
    if beyond.any():
        first = int(np.flatnonzero(beyond)[0])
        raise ScanError(f"{scan.source}: --format h5 cannot hold its points: it stores coordinates as float32 "
                        f"from the scan's minimum, and point {first} ({' '.join(f'{v:g}' for v in scan.coord[first])}) "
                        "is beyond it; predict it without h5 (--format npy,ply), or remove the points that far")
    return origin


def check_formats(scan: Scan, formats: tuple[str, ...], warn=print) -> None:
    """Before a scan is predicted: a ScanError if a format of ``formats`` cannot hold its coordinates
    (``las``: :func:`~pointgeope.scans.las.las_scaling`, ``h5``: float32), and ``warn`` where LAS holds
    them in coarser steps than asked."""
    if "las" in formats:
        from pointgeope.scans.las import las_scaling

        warning = las_scaling(scan)[2]
        if warning:
            warn(warning)
    if "h5" in formats:
        _h5_origin(scan)


def _utf8(text: str) -> str:
    """``text`` as HDF5 can store it (UTF-8): a file name's undecodable byte (a surrogate) written ``\\udcff``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def write_h5(path: Path, scan: Scan, pred: np.ndarray, class_names: list[str],
             ignore_index: int = IGNORE_LABEL) -> None:
    """The h5 file of the module docstring."""
    origin = _h5_origin(scan)
    coord = (scan.coord - origin).astype(np.float32)
    n = len(scan)
    arrays = {"coord": coord,
              "color": scan.color if scan.color is not None else np.zeros((n, 3), np.uint8),
              "label": scan.label if scan.label is not None else np.full(n, IGNORE_LABEL, np.uint8),
              "instance": np.zeros(n, np.int32),
              **({NORMAL: scan.normal} if scan.normal is not None else {})}
    estimate = {key: int(value) for key, value in (scan.normal_estimate or {}).items()} if NORMAL in arrays else {}
    name, source = _utf8(scan.name), _utf8(scan.source)
    write_scan_predictions(path, name, name.rsplit("/", 1)[-1], arrays, pred, class_names, source,
                           {"num_points": n, "origin": origin, "source": source, **estimate},
                           {"ignore_index": int(ignore_index)})


def write_outputs(out: str | Path, scan: Scan, pred: np.ndarray, formats: tuple[str, ...],
                  palette: np.ndarray, class_names: list[str], probs: np.ndarray | None = None,
                  ignore_index: int = IGNORE_LABEL) -> list[Path]:
    """Write the files of ``formats`` (and ``probs`` when given) for ``scan``; returns their paths.
    ``ignore_index``: the run's ``train.ignore_index``, recorded in the h5 file.

    Args:
        pred: ``(N,)`` class per point; palette: ``uint8 (C, 3)``; probs: ``(N, C)``, rows summing to 1.
    """
    from pointgeope.scans.las import write_las
    from pointgeope.scans.ply import write_vertices
    from pointgeope.scans.text import write_text

    pred = np.asarray(pred, dtype=np.uint8)
    colors = palette[pred]
    own = scan.color if scan.color is not None else colors
    written = []
    for fmt in formats:
        path = output_path(out, scan.name, fmt, scan.source)
        if fmt == "npy":
            with atomic_path(path) as tmp:
                np.save(tmp, pred)
        elif fmt == "ply":
            rgb = [(c, colors[:, j]) for j, c in enumerate(("red", "green", "blue"))]
            write_vertices(path, _coord_properties(scan.coord) + rgb + [(PLY_PREDICTION, pred)],
                           comment=f"pointgeope predict of {scan.source}")
        elif fmt == "las":
            write_las(path, scan, own, pred, class_names)
        elif fmt == "txt":
            write_text(path, scan.coord, own, pred)
        elif fmt == "h5":
            write_h5(path, scan, pred, class_names, ignore_index)
        else:
            raise ValueError(f"expected output formats from {', '.join(FORMATS)}, got {fmt!r}")
        written.append(path)
    if probs is not None:
        path = output_path(out, scan.name, "probs", scan.source)
        with atomic_path(path) as tmp:
            np.save(tmp, probs.astype(np.float32))
        written.append(path)
    return written
