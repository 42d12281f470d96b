"""LAS and LAZ point clouds through ``laspy`` (optional: ``pip install "pointgeope[las]"``, which brings
``laspy`` and the ``lazrs`` LAZ backend).

Reading: ``x y z`` as scaled float64 (``X * scale + offset``), in file order; the colour of point formats
that have one (2, 3, 5, 7, 8, 10) is 16 bit by the specification and divided by 257 (by 256 when every
value's low byte is 0: ``c << 8``), unless every value is within 0..255 (writers that store 8-bit values as they are;
the rule of ``pointgeope.color_range``). An uncompressed file of fewer point records than its header counts (cut short),
or of more (a count the writer did not write; zeros after the points are padding), is refused, naming both counts; so is
a LAZ file whose chunk table is beyond its end or does not read (bytes lost inside the points), or whose chunks (of a
fixed size, or of varying sizes counted in the chunk table) cannot hold its header's count, one whose laszip
VLR's items do not add up to its point record size, and a header whose VLR count cannot fit before the points.
A LAZ file of fixed chunks larger than its point count is read by lazrs's single-threaded decompressor (the
parallel one allocates a whole chunk); a panic of the LAZ decoder is one error of the file, not a traceback.

Writing (``write_las``): LAS 1.2 point format 3 (GPS time and RGB, colour ``c * 257``), the predicted
class in the ``classification`` field (0..12 in ``constants.CLASS_NAMES`` order, not the ASPRS codes;
the class names are in a VLR ``pointgeope/classes``); a model of more than 32 classes, which format 3's
5-bit field cannot hold, gets LAS 1.4 point format 7 (the same fields, an 8-bit class). LAS stores a
coordinate as the 32-bit integer
``round((x - offset) / scale)``; :func:`las_scaling` takes the input LAS file's scales and offsets, else
0.001 (millimetres) and the floor of the minimum, when every point fits them. When not (a stray point far
from the others), the offset becomes the middle of the points and the step grows by powers of ten up to
:data:`COARSEST_STEP` (1 cm: a span of 42,950 km, any point on Earth), said in one warning; a scan that
even that cannot hold is refused before it is predicted.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pointgeope.atomic import atomic_path
from pointgeope.plural import counted
from pointgeope.scans.scan import Scan, ScanError, color_to_uint8

EXTENSIONS = (".las", ".laz")
INT32_MAX = 2**31 - 1
LAS12_CLASSES = 32  # classes 0..31: the 5-bit classification of point format 3
COARSEST_STEP = 0.01  # metres: the coarsest scale chosen to fit the points (finer ones of the input kept)


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
    _check_vlr_count(path)
    try:
        with laspy.open(path) as reader:
            header = reader.header
            _check_length(path, header)
            backend = _laz_backend(laspy, header)
            las = reader.read() if backend is None else laspy.read(path, laz_backend=backend)
    except ScanError:
        raise
    except Exception as err:  # noqa: BLE001 - laspy raises its own and OS errors for truncated or foreign files
        raise ScanError(f"{path}: not a readable LAS/LAZ file ({type(err).__name__}: {err})") from None
    except BaseException as err:  # lazrs's Rust panics reach Python as pyo3's PanicException, not an Exception
        if type(err).__name__ != "PanicException":
            raise
        raise ScanError(f"{path}: a damaged LAZ file: the LAZ decoder failed on it ({err}); copy it again or "
                        "export it again") from None
    if len(las.points) != header.point_count:  # laspy reads what there is, with only a log line
        raise ScanError(_truncated(path, header, f"{len(las.points):,} of them"))
    with np.errstate(over="ignore", invalid="ignore"):  # laspy's X * scale + offset, of a damaged header's scale
        coord = np.stack([np.asarray(las.x), np.asarray(las.y), np.asarray(las.z)], axis=1).astype(np.float64)
    if not np.isfinite(coord).all():  # X is an int32: only the header's scales and offsets make it infinite or NaN
        raise ScanError(f"{path}: a damaged LAS header: its scales {header.scales.tolist()} and offsets "
                        f"{header.offsets.tolist()} make coordinates infinite or NaN (X * scale + offset); copy it "
                        "again or export it again")
    color, notes = None, []
    if {"red", "green", "blue"} <= set(las.point_format.dimension_names):
        color = color_to_uint8(np.stack([las.red, las.green, las.blue], axis=1), str(path), notes=notes,
                               declared_16bit=True)
    meta = {"las_scales": [float(s) for s in las.header.scales],
            "las_offsets": [float(o) for o in las.header.offsets], "notes": notes}
    return Scan(name or path.stem, str(path), coord, color, meta=meta)


def _check_vlr_count(path: Path) -> None:
    """A ScanError when the public header's VLR count cannot fit between the header and the points, or the end
    of the file where the points are said to start beyond it (each VLR is 54 bytes or more): a damaged header
    (one flipped byte made it 4,211,081,216; bytes inserted into the header made it 16,777,217 and the points'
    offset 1.3 GB in a file of 780 bytes) on which laspy read VLRs for hours. Other files (no ``LASF``
    signature, too short) are left to laspy's own errors."""
    with open(path, "rb") as f:
        raw = f.read(104)
        size = os.fstat(f.fileno()).st_size
    if len(raw) < 104 or raw[:4] != b"LASF":
        return
    header_size, offset, count = (int.from_bytes(raw[a:b], "little") for a, b in ((94, 96), (96, 100), (100, 104)))
    room = max(min(offset, size) - header_size, 0)
    if count * 54 > room:
        end = (f"its points (byte {offset:,})" if offset <= size
               else f"the end of the file (byte {size:,}; its points are said to start at byte {offset:,})")
        raise ScanError(f"{path}: a damaged LAS header: it counts {count:,} VLRs of 54 bytes or more, which do not fit "
                        f"in the {room:,} bytes between its header ({header_size} bytes) and {end}; copy it again "
                        "or export it again")


def _truncated(path: Path, header, holds: str) -> str:
    kind = "LAZ" if header.are_points_compressed else "LAS"
    return (f"{path}: truncated {kind}: its header promises {header.point_count:,} points, the file holds {holds} "
            "(cut short, e.g. by an interrupted copy or download); copy it again or export it again")


def _check_length(path: Path, header) -> None:
    """A ScanError when the point records of an uncompressed file, from ``offset_to_point_data`` to its end (or
    to its extended VLRs or waveform packets, LAS 1.3+), are not the header's ``point_count``: fewer (laspy read
    whole records: cut inside one it raised numpy's "buffer size must be a multiple of element size", cut
    between two it returned the records there were, a scan silently short of its last points), or at least one
    more (a writer stopped before it wrote the count: 0 read as an empty scan, another count as that many
    points, the others dropped); bytes of zeros after the points are padding, not records."""
    size, record, start = path.stat().st_size, header.point_format.size, header.offset_to_point_data
    if header.are_points_compressed:  # LAZ: its points end with a chunk table, found at the int64 they start with
        _check_laz_items(path, header)
        _check_chunk_table(path, header, size)
        return
    if size < start + header.point_count * record:
        holds = max(size - start, 0) // record
        raise ScanError(_truncated(path, header, f"{counted(holds, 'whole point record')} of {record} bytes"))
    end = min([size] + [at for at in (header.start_of_first_evlr, header.start_of_waveform_data_packet_record)
                        if start < at])
    tail = start + header.point_count * record
    if end - tail >= record and not _zeros(path, tail, end):
        raise ScanError(f"{path}: its LAS header promises {header.point_count:,} points, the file holds "
                        f"{(end - start) // record:,} point records of {record} bytes: the header's count is "
                        "wrong (a writer stopped before it wrote the count?); export the file again")


def _zeros(path: Path, start: int, end: int, block: int = 1 << 22) -> bool:
    """Whether bytes ``start:end`` of ``path`` are all 0: padding after the points, which a few writers leave
    (records of a count the writer did not write hold points, not zeros). Read a block at a time, stopping at
    the first one that is not zeros."""
    with open(path, "rb") as f:
        f.seek(start)
        while start < end:
            data = f.read(min(block, end - start))
            if data.count(0) != len(data):
                return False
            start += len(data) or end
    return True


def _chunk_size(header) -> int | None:
    """The points of each chunk but the last of a LAZ file (``chunk_size`` of its ``laszip encoded`` VLR, a
    uint32 at byte 12 of its data); None when they vary (``0xFFFFFFFF``: the counts are in the compressed
    chunk table) or the VLR is not there."""
    for vlr in header.vlrs:
        if (vlr.user_id, vlr.record_id) == ("laszip encoded", 22204):
            data = vlr.record_data_bytes()
            step = int.from_bytes(data[12:16], "little") if len(data) >= 16 else 0
            return step if 0 < step < 0xFFFFFFFF else None
    return None


def _laszip_vlr(header):
    """The ``laszip encoded`` VLR of a LAZ file, or None."""
    return next((v for v in header.vlrs if (v.user_id, v.record_id) == ("laszip encoded", 22204)), None)


def _check_laz_items(path: Path, header) -> None:
    """A ScanError when the items of a LAZ file's ``laszip encoded`` VLR (a point's compressed parts: ``POINT10``
    20 bytes, ``GPSTIME11`` 8, ``RGB12`` 6, extra bytes) do not add up to the header's point record size: a
    damaged VLR (of no item, lazrs panicked: a traceback that stopped every other input of ``predict``). Checked
    with ``lazrs`` (without it, laspy's other backend reads the file as before)."""
    vlr = _laszip_vlr(header)
    try:
        import lazrs
    except ImportError:
        return
    try:
        size = None if vlr is None else lazrs.LazVlr(vlr.record_data_bytes()).item_size()
    except (lazrs.LazrsError, ValueError) as err:  # a VLR lazrs cannot read
        raise ScanError(f"{path}: not a readable LAS/LAZ file ({type(err).__name__}: {err})") from None
    if size is not None and size != header.point_format.size:
        raise ScanError(f"{path}: a damaged LAZ file: its laszip VLR describes point records of {size} bytes, its "
                        f"header {header.point_format.size} (point format {header.point_format.id}); copy it again "
                        "or export it again")


def _laz_backend(laspy, header):
    """None (laspy's choice, lazrs's parallel decompressor where installed), or lazrs's single-threaded one for a
    LAZ file of fixed chunks larger than its point count: the parallel decompressor allocates a whole chunk
    (chunk size x record bytes: a damaged byte of the chunk size made it 145 GB and the process aborted,
    "memory allocation of 145460161020 bytes failed"), the single-threaded one only the points it reads."""
    step = _chunk_size(header) if header.are_points_compressed else None
    if step is None or step <= header.point_count or not laspy.LazBackend.Lazrs.is_available():
        return None
    return laspy.LazBackend.Lazrs


def _check_chunk_table(path: Path, header, size: int) -> None:
    """A ScanError when a LAZ file's chunk table (at the int64 its points start with; -1: none) is not where
    that offset says: beyond the end (a file cut short: lazrs said only "IoError: failed to fill whole buffer"),
    or not starting with its version 0 and a chunk count of 1 to ``point_count`` and to the bytes of the points
    (a chunk takes one or more; 0 in a file of no points; a
    byte lost or added inside the points shifts it: lazrs then read sizes of garbage and aborted the whole
    process on an allocation of tens of GB); or, chunks of a fixed size ``S`` (:func:`_chunk_size`), when
    ``point_count`` is not in ``((chunks - 1) S, chunks S]``: a count the writer did not write (lazrs read
    that many points, the others dropped without a word, or failed on a buffer it could not fill); chunks of
    varying size, when the sum of their point counts (:func:`_variable_chunk_points`) is not ``point_count``."""
    with open(path, "rb") as f:
        f.seek(header.offset_to_point_data)
        table = int.from_bytes(f.read(8), "little", signed=True)
        if table == -1:
            return
        if table > size - 8:
            raise ScanError(_truncated(path, header, f"{size:,} bytes, where its chunk table starts at byte {table:,}"))
        f.seek(table)
        version, chunks = (int.from_bytes(f.read(4), "little") for _ in range(2))
    least = min(header.point_count, 1)  # a LAZ of no points: 0 chunks
    most = max(min(header.point_count, table - header.offset_to_point_data - 8), 1)  # a chunk takes a byte or more
    step = _chunk_size(header)
    if version == 0 and step and chunks != -(-header.point_count // step) and (chunks <= most or not least):
        raise ScanError(f"{path}: its LAS header promises {header.point_count:,} points, its LAZ chunk table counts "
                        f"{chunks:,} chunks of {step:,} points ({max((chunks - 1) * step + 1, 0):,} to "
                        f"{chunks * step:,} points): the header's count is wrong (a writer stopped before it wrote "
                        "the count?); export the file again")
    if version != 0 or not least <= chunks <= most:
        raise ScanError(f"{path}: a damaged LAZ file: its chunk table at byte {table:,} reads version {version} and "
                        f"{chunks:,} chunks, expected version 0 and {least} to {most:,} chunks (bytes lost or "
                        "added inside the points, e.g. by a faulty copy); copy it again or export it again")
    total = None if step else _variable_chunk_points(path, header, table)
    if total is not None and total != header.point_count:
        raise ScanError(f"{path}: its LAS header promises {header.point_count:,} points, its LAZ chunk table counts "
                        f"{total:,} points in {chunks:,} chunks of varying size: the header's count is wrong (a "
                        "writer stopped before it wrote the count?); export the file again")


def _variable_chunk_points(path: Path, header, table: int) -> int | None:
    """The points a LAZ file of chunks of varying size holds: the sum of the point counts of its chunk table
    (at byte ``table``, compressed; read by ``lazrs``). None for chunks of a fixed size, without the laszip VLR
    or without ``lazrs`` (laspy's other backend reads the file as before)."""
    vlr = _laszip_vlr(header)
    try:
        import lazrs
    except ImportError:
        return None
    try:
        laz_vlr = None if vlr is None else lazrs.LazVlr(vlr.record_data_bytes())
    except (lazrs.LazrsError, ValueError) as err:  # a VLR lazrs cannot read
        raise ScanError(f"{path}: not a readable LAS/LAZ file ({type(err).__name__}: {err})") from None
    if laz_vlr is None or not laz_vlr.uses_variable_size_chunks():
        return None
    with open(path, "rb") as f:
        f.seek(table)
        try:
            return sum(int(points) for points, _ in lazrs.read_chunk_table_only(f, laz_vlr))
        except (lazrs.LazrsError, ValueError, OSError) as err:  # a table that does not decode
            raise ScanError(f"{path}: a damaged LAZ file: its chunk table at byte {table:,} does not read "
                            f"({type(err).__name__}: {err}); copy it again or export it again") from None


def _fit(lo: np.ndarray, hi: np.ndarray, scales: np.ndarray, offsets: np.ndarray) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        return bool((np.abs(np.r_[(lo - offsets) / scales, (hi - offsets) / scales]) <= INT32_MAX - 1).all())


def las_scaling(scan: Scan) -> tuple[np.ndarray, np.ndarray, str | None]:
    """``(scales (3,), offsets (3,), warning or None)`` of the LAS file of ``scan`` (see the module
    docstring); a ScanError when no scale up to :data:`COARSEST_STEP` holds its points."""
    lo, hi = scan.coord.min(axis=0), scan.coord.max(axis=0)
    base = np.asarray(scan.meta.get("las_scales", [0.001] * 3), dtype=np.float64)
    offsets = np.asarray(scan.meta.get("las_offsets", np.floor(lo)), dtype=np.float64)
    if _fit(lo, hi, base, offsets):
        return base, offsets, None
    with np.errstate(over="ignore", invalid="ignore"):
        offsets = np.floor(lo / 2 + hi / 2)
        reach = np.maximum(hi - offsets, offsets - lo)
        powers = np.maximum(np.ceil(np.log10(reach / (INT32_MAX - 1) / base)), 0)
        scales = np.where(np.isfinite(powers), base * 10.0 ** np.minimum(powers, 400), np.inf)
    limit = np.maximum(base, COARSEST_STEP)
    for j, axis in enumerate("xyz"):
        if not scales[j] <= limit[j] or not _fit(lo[j:j + 1], hi[j:j + 1], scales[j:j + 1], offsets[j:j + 1]):
            raise ScanError(f"{scan.source}: --format las cannot hold its points: LAS stores coordinates as 32-bit "
                            f"integers, {axis} spans {hi[j] - lo[j]:g} (at most {2**32 * limit[j]:g} in steps of "
                            f"{limit[j]:g} m); predict it without las (--format npy), or remove the points that far")
    changed = [f"{axis} in steps of {scales[j]:g} m, not {base[j]:g} m" for j, axis in enumerate("xyz")
               if scales[j] != base[j]]
    warning = None if not changed else (
        f"warning: {scan.source}: its LAS file stores {', '.join(changed)}: LAS coordinates are 32-bit integers, "
        f"and its points span {', '.join(f'{hi[j] - lo[j]:g}' for j in range(3))} in x, y, z (stray points?)")
    return scales, offsets, warning


def write_las(path: str | Path, scan: Scan, color: np.ndarray, label: np.ndarray,
              class_names: list[str]) -> Path:
    """``scan``'s points with ``color uint8 (N, 3)`` and ``classification = label`` (see the module
    docstring; the scales and offsets of :func:`las_scaling`), atomically."""
    path = Path(path)
    laspy = _laspy(path)
    wide = len(class_names) > LAS12_CLASSES  # 5 bits of format 3: laspy's OverflowError at class 32
    header = laspy.LasHeader(point_format=7 if wide else 3, version="1.4" if wide else "1.2")
    header.global_encoding.wkt = wide  # LAS 1.4: "must be set" for point formats 6-10 (laspy leaves it unset)
    header.scales, header.offsets, _ = las_scaling(scan)
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
