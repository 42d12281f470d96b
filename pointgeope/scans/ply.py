"""PLY point clouds: a reader for ascii and binary files, and the binary writer every PLY export uses.

Reading (``read_ply``): the header names the format (``ascii``, ``binary_little_endian`` or
``binary_big_endian``) and the elements; the ``vertex`` element must hold ``x y z`` and may hold a colour
as ``red green blue`` (or ``r g b``, ``diffuse_red ...``) of any numeric type: ``uchar`` 0..255, ``ushort``
0..65535 (divided by 257, or 256 for ``c << 8``; see ``pointgeope.color_range``) or ``float``/``double`` 0..1,
or PCL's packed ``rgb``/``rgba`` (one 32-bit ``uint`` or ``float`` holding ``(r << 16) | (g << 8) | b``).
An ascii file's values must fit their declared types (``uchar`` 0..255 whole numbers): one that does not is refused,
naming its line, as binary could not hold it either. Other elements (faces, a camera) are skipped, before
the vertices or after them, list properties included. The points must be unambiguous: a second ``vertex``
element, or another element whose records hold ``x y z`` too, is refused, naming its header line; so is a
file shorter than its header says, or longer by a vertex record or more (a count the writer did not
update: reading it would leave the last points out), a mesh whose elements after the vertices (faces) do
not end where the file does when read after the header's vertex count (a short or long count: the
message names the count that fits, ``pointgeope.scans.ply_sizes``), and ascii vertex lines of more values
than the header's properties::

    ply
    format binary_little_endian 1.0
    element vertex 3                  -> 3 records of (x, y, z, red, green, blue)
    property float x ...
    property uchar red ...
    end_header
    <3 x 15 bytes>

Writing (``write_vertices``): one ``vertex`` element, binary little endian, the given properties in order,
written atomically (``pointgeope.atomic``). The header is lines of ASCII text, so its comment (which names
the input file, whatever its name) keeps printable ASCII and escapes the rest as Python's ``ascii()`` does:
the file ``bürö.npy`` is named ``b\\xfcr\\xf6.npy`` there (a newline ``\\n``), one line that still names it.
"""
from __future__ import annotations

import mmap
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pointgeope.atomic import atomic_open, atomic_unnamed
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded
from pointgeope.scans.ply_sizes import (
    NegativeCount,
    elements_end,
    vertices_that_fit,
    walk,
)
from pointgeope.scans.scan import Scan, ScanError, color_to_uint8, float64_coord, loadtxt_reason
from pointgeope.scans.text import bad_line, line_hint

TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
         "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
         "float": "f4", "float32": "f4", "double": "f8", "float64": "f8"}
PLY_NAMES = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint",
             "f4": "float", "f8": "double"}
COLOR_NAMES = (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue"))
PACKED_COLOR_NAMES = ("rgb", "rgba")  # PCL's one 32-bit property (see _packed_color)


class Element(NamedTuple):
    """One ``element`` of a PLY header: its name, record count, ``[(property, numpy type)]`` (a list property's
    type is ``("list", count type, item type)``) and the header line that declares it."""
    name: str
    count: int
    props: list
    line: int


def _header(f, path: Path) -> tuple[str, list[Element], int]:
    """``(format, [Element], header length in bytes)``."""
    if f.readline().strip() != b"ply":
        raise ScanError(f"{path}: not a PLY file (expected 'ply' on the first line)")
    fmt, elements = None, []
    for number, raw in enumerate(iter(f.readline, b""), start=2):
        words = raw.decode("ascii", errors="replace").split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "end_header":
            if fmt is None:
                raise ScanError(f"{path}: PLY header without a 'format' line")
            return fmt, elements, f.tell()
        if words[0] == "format" and len(words) == 3:
            fmt = words[1]
        elif words[0] == "element" and len(words) == 3 and words[2].isdigit():
            elements.append(Element(words[1], int(words[2]), [], number))
        elif words[0] == "property" and elements and (len(words) == 3 and words[1] in TYPES
                                                      or len(words) == 5 and words[1] == "list"
                                                      and words[2] in TYPES and words[3] in TYPES):
            element = elements[-1]
            if words[1] == "list" and TYPES[words[2]][0] not in "iu":
                raise ScanError(f"{path}:{number}: the count of list property {words[-1]!r} is a {words[2]}; "
                                "expected an integer type (uchar, int, ...): fix the header")
            if words[-1] in (name for name, _ in element.props):  # numpy refused it with a traceback
                raise ScanError(f"{path}:{number}: property {words[-1]!r} declared twice in element "
                                f"{element.name!r}; a PLY element names each property once: rename or remove one "
                                "in the header")
            kind = ("list", TYPES[words[2]], TYPES[words[3]]) if words[1] == "list" else TYPES[words[1]]
            element.props.append((words[-1], kind))
        else:
            raise ScanError(f"{path}:{number}: unexpected PLY header line {repr_bounded(raw.strip(), 80)}")
    raise ScanError(f"{path}: truncated PLY header (no 'end_header')")


def _points_element(elements: list[Element], path: Path) -> int:
    """The index of the one ``vertex`` element, the points. A second ``vertex`` element, or another element of
    records that also hold ``x y z``, leaves it unclear which are the points: refused, naming its header line
    (before, the first ``vertex`` was read and the rest of the points silently left out)."""
    names = [e.name for e in elements]
    if "vertex" not in names:
        raise ScanError(f"{path}: PLY file without a 'vertex' element (elements: {', '.join(names)})")
    first = elements[names.index("vertex")]
    for other in elements:
        if other is first:
            continue
        if other.name == "vertex":
            raise ScanError(f"{path}:{other.line}: a second 'element vertex'; expected one vertex element, the "
                            f"points, got two (line {first.line}: {first.count:,} records, line {other.line}: "
                            f"{other.count:,}): combine them into one, or rename the one that does not hold the points")
        if other.count and {"x", "y", "z"} <= {name for name, _ in other.props}:
            raise ScanError(f"{path}:{other.line}: element {other.name!r} holds x y z as the 'vertex' element "
                            f"(line {first.line}) does; expected the points in the vertex element only, got "
                            f"{other.count:,} records of x y z in {other.name!r} and {first.count:,} in 'vertex': "
                            "remove the other element, or rename its x y z properties")
    if not {"x", "y", "z"} <= {name for name, _ in first.props}:  # before its records are sized (0 bytes: none)
        raise ScanError(f"{path}:{first.line}: PLY vertices without x y z (properties: "
                        f"{', '.join(name for name, _ in first.props) or 'none'}); expected 'property float x' "
                        "(y, z) after 'element vertex'")
    lists = [name for name, kind in first.props if kind[0] == "list"]
    if lists:
        raise ScanError(f"{path}:{first.line}: the PLY 'vertex' element has the list property {lists[0]!r}; "
                        "expected numbers only (x y z, colour, ...): remove it from the vertices")
    return names.index("vertex")


def _binary_skip(f, start: int, elements: list[Element], end: str, path: Path) -> int:
    """The bytes that ``elements`` (those before the vertices, from byte ``start``) take: count x record size,
    or, for an element with list properties, its records walked one by one (each list: its count, then that
    many items; :func:`~pointgeope.scans.ply_sizes.walk`)."""
    size = 0
    for element in elements:
        if not any(kind[0] == "list" for _, kind in element.props):
            size += element.count * np.dtype([(n, end + t) for n, t in element.props]).itemsize
            continue
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            try:
                pos = walk(m, start + size, element, end)
            except NegativeCount as bad:
                raise ScanError(_negative(path, element, bad)) from None
            if pos > len(m):
                raise ScanError(f"{path}: truncated PLY: the file ends inside its {element.name!r} element (line "
                                f"{element.line}), before the vertices") from None
        size = pos - start
    return size


def _negative(path: Path, element: Element, bad: NegativeCount) -> str:
    return (f"{path}: a list of {element.name!r} (line {element.line}) has the count {bad.count} at byte {bad.pos}; "
            "expected a count >= 0: the file is damaged")


def _vertex_records(path: Path) -> np.ndarray:
    """The ``vertex`` element as a structured array (one field per property)."""
    with open(path, "rb") as f:
        fmt, elements, offset = _header(f, path)
        index = _points_element(elements, path)
        before, (_, count, props, _) = elements[:index], elements[index]
        if fmt == "ascii":
            for _ in range(sum(e.count for e in before)):  # one line a record, list or not
                f.readline()
            try:
                with warnings.catch_warnings():  # a blank line "will not be counted towards max_rows": none is
                    warnings.simplefilter("ignore", UserWarning)
                    rows = (np.loadtxt(f, dtype=np.float64, max_rows=count, ndmin=2) if count
                            else np.zeros((0, len(props))))
            except ValueError as err:
                raise ScanError(_unreadable_vertex(f, path, offset, before, props, loadtxt_reason(err))) from None
            if rows.shape[0] != count:
                raise ScanError(f"{path}: truncated PLY: the header promises {count:,} vertices of "
                                f"{len(props)} values, the file holds {rows.shape[0]:,} lines of them: cut short (an "
                                "interrupted copy)? copy or export it again, or correct 'element vertex'")
            _ascii_fits(f, offset, elements, rows.shape[1], path)
            first_line = _first_vertex_line(f, offset, before)
            return _ascii_records(rows, props, path, first_line)
        if fmt not in ("binary_little_endian", "binary_big_endian"):
            raise ScanError(f"{path}: unknown PLY format {fmt!r}; expected ascii or binary_*_endian")
        end = "<" if fmt == "binary_little_endian" else ">"
        skip = _binary_skip(f, offset, before, end, path)
        dtype = np.dtype([(n, end + t) for n, t in props])
        size = path.stat().st_size - offset - skip
        if size < count * dtype.itemsize:
            raise ScanError(f"{path}: truncated PLY: the header promises {count:,} vertices "
                            f"({count * dtype.itemsize:,} bytes), the file holds {max(size, 0):,} bytes")
        _binary_fits(f, offset + skip, elements[index + 1:], (dtype.itemsize, count), end, path)
        return np.fromfile(f, dtype=dtype, count=count, offset=skip)


def _first_vertex_line(f, offset: int, before: list[Element]) -> int:
    """The 1-based line of an ascii PLY's first vertex: after the header (``offset`` bytes) and the records of the
    elements ``before`` the vertices, one a line."""
    f.seek(0)
    return f.read(offset).count(b"\n") + sum(e.count for e in before) + 1


def _unreadable_vertex(f, path: Path, offset: int, before: list[Element], props: list, reason: str) -> str:
    """The one line for ascii vertex lines that ``np.loadtxt`` did not read (``reason``, its words, which count rows
    from the first vertex): the file's line, what it holds and what was expected, as the text reader names its lines
    (:func:`pointgeope.scans.text.bad_line`, :func:`~pointgeope.scans.text.line_hint`)."""
    expected = f"vertex lines of {len(props)} numbers ({' '.join(name for name, _ in props)})"
    bad = bad_line(path, None, _first_vertex_line(f, offset, before) - 1)
    if bad is None:                                     # numpy's own words, should no line be found
        return f"{path}: expected {expected} after the header, got lines numpy does not read ({reason})"
    line, text, why = bad
    return (f"{path}:{line}: expected {expected}, got {repr_bounded(text, 82)} ({why}){line_hint(reason, text)}; "
            "correct that line, or export the file again")


def _more_points(path: Path, count: int, holds: str) -> str:
    return (f"{path}: the PLY header promises {count:,} vertices, the file holds more: {holds}; the header's count "
            "is wrong (a writer that did not update it?): write the file again, or correct 'element vertex'")


def _binary_fits(f, start: int, after: list[Element], vertices: tuple[int, int], end: str, path: Path) -> None:
    """A ScanError when the elements ``after`` the vertices (``vertices``: ``(record bytes, count)`` from byte
    ``start``) do not end where the file does, up to less than a record: the bytes after them hold another
    vertex record or more (the header's count is short, and reading it would leave the last points out without
    a word), or the elements after the vertices, read from the vertices' end, go beyond the file or leave
    bytes (a mesh's faces after a vertex count that is short or long: their sizes read from vertex bytes).
    The count the file holds is named when one fits (:func:`~pointgeope.scans.ply_sizes.vertices_that_fit`); a
    mesh whose faces fit only when a face of fewer than 3 corners is taken is said to be that or a wrong count."""
    (record, count), after = vertices, [e for e in after if e.count]
    lists = any(kind[0] == "list" for e in after for _, kind in e.props)
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        try:
            stop = elements_end(m, start + count * record, after, end)
        except NegativeCount:
            stop = len(m) + 1
        extra = len(m) - stop
        if 0 <= extra < record:
            return
        if extra >= record and not lists:
            more = f"{counted(extra // record, 'more vertex record', 'more vertex records')} of {record} bytes" + (
                f" (after {', '.join(repr(e.name) for e in after)})" if after else "")
            raise ScanError(_more_points(path, count, f"{extra:,} bytes after its elements, {more}"))
        holds = vertices_that_fit(m, start, record, after, end)
        try:  # read as the header says, faces of under 3 corners taken: a mesh with such faces ends at the file's end
            small = extra < 0 and elements_end(m, start + count * record, after, end, faces=False) == len(m)
        except NegativeCount:
            small = False
    names = ", ".join(f"{e.name!r} (line {e.line})" for e in after)
    if holds is not None and holds != count:
        raise ScanError(f"{path}: the PLY header promises {count:,} vertices, the file holds {holds:,}: its elements "
                        f"after the vertices ({names}) end where the file does after {holds:,} vertex records of "
                        f"{record} bytes; the header's vertex count is wrong (a writer that did not update it?): "
                        "write the file again, or correct 'element vertex'")
    found = ("end where the file does only with faces of fewer than 3 corners" if small
             else "go beyond its end" if extra < 0 else f"leave {extra:,} bytes")
    why = ("a vertex count that is wrong?), or those faces are meant (remove them, or save the vertices alone)" if small
           else "a vertex count that is wrong, or a file cut short?)")
    raise ScanError(f"{path}: the PLY header promises {count:,} vertices of {record} bytes, and its elements after "
                    f"them ({names}), read from there, {found}: the header does not describe the file ({why}; "
                    "write the file again")


def _ascii_fits(f, offset: int, elements: list[Element], width: int, path: Path) -> None:
    """A ScanError when the ascii vertex lines hold another number of values than the header's properties
    (``width`` read), or the file more or fewer non-blank lines than its elements' records (one a line): either
    way the header does not describe the points, and the values or lines beyond it would be left out without a
    word, or the lines of faces after them read as vertices."""
    vertex = next(e for e in elements if e.name == "vertex")
    if width != len(vertex.props):
        raise ScanError(f"{path}: the ascii PLY vertex lines hold {width} values, the header declares "
                        f"{len(vertex.props)} properties ({' '.join(name for name, _ in vertex.props)}) (line "
                        f"{vertex.line}); declare one property a value, in the order of the values")
    f.seek(offset)
    lines, records = sum(1 for line in f if line.strip()), sum(e.count for e in elements)
    holds = (f"{lines:,} lines of records after the header, where its elements "
             f"({', '.join(f'{e.name} {e.count:,}' for e in elements)}) have {records:,}, one a line")
    if lines > records:
        raise ScanError(_more_points(path, vertex.count, holds))
    if lines < records:  # the vertices read the lines of the elements after them (faces of as many values)
        raise ScanError(f"{path}: the PLY header promises {vertex.count:,} vertices, the file holds "
                        f"{max(lines - records + vertex.count, 0):,}: {holds}; the header's count is wrong (or the "
                        "file cut short): write the file again, or correct 'element vertex'")


def _ascii_records(rows: np.ndarray, props: list, path: Path, first_line: int) -> np.ndarray:
    """The ascii vertex ``rows`` ``(count, len(props))`` float64 as the header's types, as binary holds them.
    A value that its integer type cannot hold (a fraction, NaN, out of range: 0.5 or 300 under ``uchar``)
    is refused, naming its line (``first_line`` is the first vertex's): cast, it wrapped (300 -> 44, -1 ->
    255) or was truncated (0.5 -> 0, colours 0..1 under a ``uchar`` header turned black) without a word."""
    out = np.empty(len(rows), dtype=[(n, t) for n, t in props])
    for j, (name, kind) in enumerate(props):
        column = rows[:, j]
        if np.dtype(kind).kind in "iu":
            info = np.iinfo(kind)
            bad = ~((column == np.rint(column)) & (column >= info.min) & (column <= info.max))  # NaN: bad
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise ScanError(
                    f"{path}:{first_line + row}: property {name!r} is {PLY_NAMES[np.dtype(kind).str[1:]]} (whole "
                    f"numbers {info.min}..{info.max}), got {column[row]:g} ({counted(int(bad.sum()), 'such value')}); "
                    "write whole numbers in that range, or declare the property 'float' in the header "
                    "(0..1 colours: 'property float red')")
        out[name] = column
    return out


def _packed_color(values: np.ndarray, name: str, path: Path) -> np.ndarray:
    """PCL's packed colour: one 32-bit ``rgb`` / ``rgba`` property, ``(a << 24) | (r << 16) | (g << 8) | b``,
    stored as ``uint``/``int`` or as the bit pattern of a ``float`` (``pcl::io::savePLYFile``, ROS tools);
    returns ``uint8 (N, 3)``, alpha left out."""
    if values.dtype.itemsize != 4 or values.dtype.kind not in "iuf":
        raise ScanError(f"{path}: the packed colour property {name!r} is {values.dtype.name}; expected a 32-bit "
                        f"'uint' or 'float' (PCL's (r << 16) | (g << 8) | b): unpack it into red green blue")
    bits = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("=")).view(np.uint32)
    return np.stack([(bits >> 16) & 255, (bits >> 8) & 255, bits & 255], axis=1).astype(np.uint8)


def read_ply(path: str | Path, name: str | None = None) -> Scan:
    """A :class:`Scan` of the PLY file's vertices, in file order (see the module docstring)."""
    path = Path(path)
    rec = _vertex_records(path)
    fields = rec.dtype.names
    coord = float64_coord(np.stack([rec["x"], rec["y"], rec["z"]], axis=1))
    color, notes = None, []
    names = next((c for c in COLOR_NAMES if set(c) <= set(fields)), None)
    packed = next((p for p in PACKED_COLOR_NAMES if p in fields), None)
    if names is not None:
        values = np.stack([rec[c] for c in names], axis=1)
        kind = rec.dtype[names[0]]
        color = color_to_uint8(values, str(path), unit_float=True if kind.kind == "f" else None, notes=notes,
                               declared_16bit=kind.kind in "iu" and kind.itemsize == 2)
    elif packed is not None:
        color = _packed_color(rec[packed], packed, path)
    return Scan(name or path.stem, str(path), coord, color, meta={"notes": notes})


def header_text(text: str) -> str:
    """``text`` as one line of printable ASCII: other characters (non-ASCII, newlines, control characters,
    the surrogates of a file name's undecodable bytes) and the backslash escaped as ``ascii()`` does."""
    return "".join(c if " " <= c <= "~" and c != "\\" else ascii(c)[1:-1] for c in text)


def write_vertices(path: str | Path, properties: list[tuple[str, np.ndarray]],
                   comment: str = "written by pointgeope", unnamed: bool = False) -> Path:
    """Write ``properties`` (``(name, (N,) array)``, in order) as a binary little-endian PLY ``vertex``
    element; each keeps its dtype (one of :data:`PLY_NAMES`); ``comment`` escaped by :func:`header_text`. Atomic;
    ``unnamed``: through a file without a name until the rename (:func:`pointgeope.atomic.atomic_unnamed`, for a
    writer without a lock on the folder)."""
    path = Path(path)
    n = len(properties[0][1])
    fields = []
    for name, arr in properties:
        arr = np.asarray(arr)
        key = arr.dtype.str.lstrip("<>|=")
        if arr.shape != (n,) or key not in PLY_NAMES:
            raise ValueError(f"expected {name} of shape ({n},) and a PLY type, got {arr.dtype} {arr.shape}")
        fields.append((name, "<" + key if arr.dtype.itemsize > 1 else key))
    records = np.empty(n, dtype=np.dtype(fields))
    for name, arr in properties:
        records[name] = arr
    header = ["ply", "format binary_little_endian 1.0", f"comment {header_text(comment)}", f"element vertex {n}"] + \
        [f"property {PLY_NAMES[t.lstrip('<')]} {name}" for name, t in fields] + ["end_header"]
    with atomic_unnamed(path) if unnamed else atomic_open(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode("ascii"))
        f.write(records.tobytes())
    return path
