"""Writing an HDF5 file of pointgeope, and attribute values in and out of HDF5.

Every HDF5 file pointgeope writes (prepared areas, work files, predictions: :mod:`pointgeope.h5`,
:mod:`pointgeope.h5_predictions`) is made by :func:`create_file`:

- atomically: written to a temporary file beside the target, then renamed (:func:`pointgeope.atomic.atomic_path`),
  so that a reader never sees half a file;
- without HDF5 timestamps on its groups (:func:`new_group`) and datasets, so that the same content gives the
  same bytes;
- with a write the disk refuses (a full disk, ``ulimit -f``) ending as a
  :class:`~pointgeope.atomic.DiskFullError` naming the file, never as a crash of the HDF5 library
  (:class:`_KeepFirstError`);
- with a stop (Ctrl-C, SIGTERM) that comes while HDF5 calls the file object back held until HDF5 has closed
  the file, then raised (:mod:`pointgeope.stop_callbacks`): HDF5 does not pass an exception from there on.

:func:`to_attr` and :func:`from_attr` turn attribute values into what h5py stores and back into plain Python
values (str, int, float, list).
"""
from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np

from pointgeope.atomic import atomic_path
from pointgeope.stop_callbacks import stops_held_in

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
    temporary file (garbage after the failure) is deleted by ``atomic_path``.

    Any other exception raised in one of these callbacks (a stop whose handler ran there, a bug) is kept the
    same way, reads included, instead of going back into HDF5, which does not pass it on (h5py calls Python
    again with it still set; :mod:`pointgeope.stop_callbacks`): HDF5 finishes, and :func:`create_file` raises it
    once the file is closed."""

    def __init__(self, f):
        self.f, self.error = f, None

    def keep(self, err: BaseException) -> None:
        """Keep ``err`` for :func:`create_file` to raise, unless an earlier one is kept; drop the later writes."""
        if self.error is None:
            self.error = err

    def _kept(self, call: Callable[[], object], dropped=None):
        """``call()``, or ``dropped`` where it raises (the exception kept). ``call`` looks the file's method up
        itself: a lookup that raises is kept too."""
        try:
            return call()
        except BaseException as err:  # noqa: BLE001 (HDF5 cannot pass it on: raised by create_file instead)
            self.keep(err)
        return dropped

    def _guard(self, call: Callable[[], object], dropped=None):
        """``call()`` until an exception is kept; ``dropped`` from then on (a write the file does not need: it
        is deleted)."""
        return dropped if self.error is not None else self._kept(call, dropped)

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
        return self._guard(lambda: self.f.truncate(size), dropped=size)

    def flush(self) -> None:
        self._guard(lambda: self.f.flush())

    def read(self, size=-1) -> bytes:
        return self._kept(lambda: self.f.read(size), dropped=b"")

    def readinto(self, buffer) -> int:
        return self._kept(lambda: self.f.readinto(buffer), dropped=0)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._guard(lambda: self.f.seek(offset, whence), dropped=offset)

    def tell(self) -> int:
        return self._kept(lambda: self.f.tell(), dropped=0)


# The driver's callbacks, and the opening and closing of the file: a stop there is held
_CALLBACKS = [getattr(_KeepFirstError, name).__code__
              for name in ("write", "truncate", "flush", "read", "readinto", "seek", "tell")]


def _open(sink: _KeepFirstError, opened: list[h5py.File]) -> None:
    opened.append(h5py.File(sink, "w"))


def _close(opened: list[h5py.File]) -> None:
    for f in opened:
        f.close()


@contextlib.contextmanager
def create_file(path: Path) -> Iterator[h5py.File]:
    """A new HDF5 file at ``path``, written atomically; a write the disk refuses ends, once HDF5 has
    closed cleanly, as a :class:`~pointgeope.atomic.DiskFullError` naming ``path`` (never a crash). A stop
    (Ctrl-C, SIGTERM) that comes while HDF5 calls the file object back, or while the file is opened or closed,
    is held (:func:`pointgeope.stop_callbacks.stops_held_in`): the later writes are dropped, and it is raised
    once HDF5 has closed the file; ``atomic_path`` then deletes the temporary file."""
    opened: list[h5py.File] = []
    with atomic_path(path) as tmp, open(tmp, "wb+", buffering=0) as raw:  # no buffer to flush at a seek
        sink = _KeepFirstError(raw)
        with stops_held_in([*_CALLBACKS, _open.__code__, _close.__code__], sink.keep):
            try:
                _open(sink, opened)
                yield opened[0]
            finally:
                try:
                    _close(opened)
                finally:  # a close that raises too: the stop or the disk's error is what ended the write
                    # the disk's error or a held stop, not what HDF5 made of them; taken from the sink, whose
                    # frames its traceback holds: in that cycle h5py's objects outlived HDF5 (a crash at exit)
                    error, sink.error = sink.error, None
                    if error is not None:
                        raise error
