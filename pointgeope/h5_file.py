"""Writing an HDF5 file of pointgeope, and attribute values in and out of HDF5.

Every HDF5 file pointgeope writes (prepared areas, work files, predictions: :mod:`pointgeope.h5`,
:mod:`pointgeope.h5_predictions`) is made by :func:`create_file`:

- atomically: written to a temporary file beside the target, then renamed (:func:`pointgeope.atomic.atomic_path`),
  so that a reader never sees half a file;
- without HDF5 timestamps on its groups (:func:`new_group`) and datasets, so that the same content gives the
  same bytes;
- with a write the disk refuses (a full disk, ``ulimit -f``) ending as a
  :class:`~pointgeope.atomic.DiskFullError` naming the file, never as a crash of the HDF5 library
  (:class:`_KeepFirstError`).

:func:`to_attr` and :func:`from_attr` turn attribute values into what h5py stores and back into plain Python
values (str, int, float, list).
"""
from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from pointgeope.atomic import atomic_path

_STR = h5py.string_dtype()


def to_attr(value):
    """An attribute value h5py can store: lists of str become variable-length string arrays."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return np.array(value, dtype=_STR)
    return value


def new_group(parent: h5py.Group, name: str) -> h5py.Group:
    """A group without HDF5 timestamps (the same content gives the same bytes)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def from_attr(value):
    """The Python value of an attribute read back from HDF5 (str, int, list)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [from_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


class _KeepFirstError:
    """The file object HDF5 writes through (h5py's ``fileobj`` driver): the first write the disk refuses
    (a full disk, ``ulimit -f``) is kept, and every later write is dropped as if it had succeeded.

    HDF5 left with a failed write in its C library goes on failing at every flush, then crashes the
    process when it exits (a segmentation fault, seen with the ``sec2`` driver). Through this object the
    library always sees success and closes cleanly; :func:`create_file` then raises the kept error, and the
    temporary file (garbage after the failure) is deleted by ``atomic_path``."""

    def __init__(self, f):
        self.f, self.error = f, None

    def _guard(self, call, *args, dropped=None):
        if self.error is None:
            try:
                return call(*args)
            except OSError as err:
                self.error = err
        return dropped

    def write(self, data) -> int:
        view = memoryview(data).cast("B")

        def write_all():  # an unbuffered file may write part of it (a short write at the limit)
            done = 0
            while done < view.nbytes:
                written = self.f.write(view[done:])
                if not written:  # never for a regular file; no endless loop if it happens
                    raise OSError(errno.EIO, "the file accepted no byte", self.f.name)
                done += written

        self._guard(write_all)
        return view.nbytes

    def truncate(self, size=None):
        return self._guard(self.f.truncate, size, dropped=size)

    def flush(self) -> None:
        self._guard(self.f.flush)

    def read(self, size=-1) -> bytes:
        return self.f.read(size)

    def readinto(self, buffer) -> int:
        return self.f.readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._guard(self.f.seek, offset, whence, dropped=offset)

    def tell(self) -> int:
        return self.f.tell()


@contextlib.contextmanager
def create_file(path: Path) -> Iterator[h5py.File]:
    """A new HDF5 file at ``path``, written atomically; a write the disk refuses ends, once HDF5 has
    closed cleanly, as a :class:`~pointgeope.atomic.DiskFullError` naming ``path`` (never a crash)."""
    with atomic_path(path) as tmp, open(tmp, "wb+", buffering=0) as raw:  # no buffer to flush at a seek
        sink = _KeepFirstError(raw)
        try:
            with h5py.File(sink, "w") as f:
                yield f
        finally:
            if sink.error is not None:  # the disk's error, not what HDF5 made of the dropped writes
                raise sink.error
