"""The bytes a binary PLY's elements take, so that the reader can tell whether its header describes the file.

An element of fixed properties takes ``count x record`` bytes. A record with list properties (a mesh's
``face``: ``property list uchar int vertex_indices``) takes, per list, its count's bytes and that many items:
the element's size is known only by reading its counts. Two ways, one answer:

- :func:`uniform_size`: every list holds as many items as the first record's (a triangle mesh, the usual
  case): the counts are checked at once, with numpy, at their fixed place in each record;
- :func:`walk`: record by record, in Python (a mesh of triangles and quads).

:func:`vertices_that_fit` answers the other question, the vertex count a file holds when the elements after
its vertices do not fit the header's: the count ``V`` for which those elements, every list of ``L`` items,
end where the file does (``L`` of 0..255 tried, each check a numpy comparison).
"""
from __future__ import annotations

import struct

import numpy as np

FACE_LISTS = ("vertex_indices", "vertex_index")  # a face's corners: 3 or more in a mesh


def least_items(element, name: str, faces: bool) -> int:
    """The fewest items list ``name`` of ``element`` may hold: 3 for a face's corners when ``faces`` (a face
    of fewer is none: what a walk from a wrong place reads in the zero bytes of small indices), else 0."""
    return 3 if faces and element.name == "face" and name in FACE_LISTS else 0


class NegativeCount(ValueError):
    """A list count below 0 (a signed ``char`` count of byte ``0xFF``) at byte ``pos``: the file is damaged."""

    def __init__(self, pos: int, count: int):
        super().__init__(f"count {count} at byte {pos}")
        self.pos, self.count = pos, count


def walk(m, pos: int, element, end: str, faces: bool = False) -> int:
    """The byte where ``element``'s records, from byte ``pos`` of the buffer ``m``, end (``len(m) + 1``: beyond
    the end of ``m``, or, ``faces``, a face of fewer than 3 corners), read record by record: each list its
    count, then that many items. ``end``: ``"<"`` or ``">"``. Raises :class:`NegativeCount`."""
    steps = [(struct.Struct(end + np.dtype(kind[1]).char), np.dtype(kind[2]).itemsize,
              least_items(element, name, faces)) if kind[0] == "list"
             else (None, np.dtype(kind).itemsize, 0) for name, kind in element.props]
    try:
        for _ in range(element.count):
            for counter, item, least in steps:
                n = 0 if counter is None else counter.unpack_from(m, pos)[0]
                if n < 0:
                    raise NegativeCount(pos, n)
                if n < least:
                    return len(m) + 1
                pos += item if counter is None else counter.size + n * item
    except struct.error:
        return len(m) + 1
    return pos


def uniform_size(m, pos: int, element, end: str, items: int | None = None, faces: bool = False) -> int | None:
    """The bytes of ``element``'s records from byte ``pos`` of ``m`` when every list holds ``items`` items
    (default: as many as the first record's same list), else None (lists of other lengths, beyond the end of
    ``m``, or, ``faces``, faces of fewer than 3 corners). Record layout: ``[fixed | count, count x item |
    ...]``, each list at a fixed offset then."""
    layout, size = [], 0  # (offset, count dtype, items) of each list; size: the record's bytes
    for name, kind in element.props:
        if kind[0] != "list":
            size += np.dtype(kind).itemsize
            continue
        counter = np.dtype(end + kind[1])
        if items is None:
            if pos + size + counter.itemsize > len(m):
                return None
            n = int(np.frombuffer(m, dtype=counter, count=1, offset=pos + size)[0])
        else:
            n = items
        if n < least_items(element, name, faces):
            return None
        layout.append((size, counter, n))
        size += counter.itemsize + n * np.dtype(kind[2]).itemsize
    total = element.count * size
    if pos + total > len(m):
        return None
    if total and layout:
        records = np.frombuffer(m, dtype=np.uint8, count=total, offset=pos).reshape(element.count, size)
        for at, counter, n in layout:
            counts = np.ascontiguousarray(records[:, at:at + counter.itemsize]).view(counter).ravel()
            if not (counts == n).all():
                return None
    return total


def elements_end(m, pos: int, elements: list, end: str, faces: bool = True) -> int:
    """The byte where ``elements``, in order from byte ``pos`` of ``m``, end (``len(m) + 1``: beyond it, or,
    ``faces``, a face of fewer than 3 corners); each by :func:`uniform_size`, else :func:`walk`. Raises
    :class:`NegativeCount`."""
    for element in elements:
        size = uniform_size(m, pos, element, end, faces=faces)
        pos = pos + size if size is not None else walk(m, pos, element, end, faces=faces)
        if pos > len(m):
            return len(m) + 1
    return pos


def vertices_that_fit(m, start: int, record: int, elements: list, end: str) -> int | None:
    """The vertex count ``V`` (records of ``record`` bytes from byte ``start`` of ``m``) after which
    ``elements`` end exactly at the end of ``m``, every list of them holding one number ``L`` of items (1..255
    tried: an empty list is no face); None when no ``L`` fits (lists of varying lengths, or a file damaged
    otherwise), or more than one does (a file of a few bytes after its vertices can fit by chance)."""
    lists = any(kind[0] == "list" for e in elements for _, kind in e.props)
    fits = set()
    for items in range(1, 256) if lists else (0,):
        sizes = [_size(e, items) for e in elements]
        left = len(m) - start - sum(sizes)
        if left < 0 or left % record:
            continue
        pos = start + left
        for e, size in zip(elements, sizes, strict=True):
            if uniform_size(m, pos, e, end, items, faces=True) != size:
                break
            pos += size
        else:
            fits.add(left // record)
    return fits.pop() if len(fits) == 1 else None


def _size(element, items: int) -> int:
    """The bytes of ``element`` when each of its lists holds ``items`` items."""
    size = sum(np.dtype(kind[1]).itemsize + items * np.dtype(kind[2]).itemsize if kind[0] == "list"
               else np.dtype(kind).itemsize for _, kind in element.props)
    return element.count * size
