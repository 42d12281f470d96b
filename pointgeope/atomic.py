"""Atomic file writes, shared by every step that writes: a reader (or a rerun after a kill) sees either
the old file or the complete new one, never a half-written file.

Each writer gets a temporary file in the target's folder (so ``os.replace`` is a rename on one file
system, and the suffix is kept for writers that pick a format from it), which is flushed to disk and
renamed over the target on success, and deleted on any error. A ``kill -9`` leaves it: the next writer
that holds the folder's lock removes it (:func:`remove_leftovers`). A writer without a lock on the folder
(``viz``) writes through a file without a name instead (:func:`atomic_unnamed`), which a kill leaves nothing of.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from pointgeope.errors import FULL_DISK, UserError

__all__ = ["atomic_path", "atomic_open", "atomic_unnamed", "write_text_atomic", "remove_leftovers", "is_leftover",
           "writable_folder", "remove_made_folders", "forget_made_folders", "check_replaceable", "DiskFullError",
           "UnwritableError"]

class DiskFullError(UserError):
    """A write refused by the disk (no space, quota, file size limit): names the file being written."""

    @classmethod
    def check(cls, err: BaseException, path: Path) -> None:
        """Raise one naming ``path`` if ``err``, or an error it arose from (a writer such as ``torch.save``
        may hide the OSError behind its own), is a full disk's; return otherwise."""
        while err is not None:
            if isinstance(err, OSError) and err.errno in FULL_DISK:
                raise cls(f"{path}: cannot write it: {FULL_DISK[err.errno]}; nothing of it was kept; free "
                          "space (or raise the limit) and run the same command again") from None
            err = err.__cause__ or err.__context__


# The temporary files of atomic_path: ".<name>.<8 hex digits>.tmp<suffix>" (secrets.token_hex(4), the suffix a
# Path.suffix), nothing wider: another program's temporary file in a folder written here (`predict --out .`), such
# as Python's tempfile.mkstemp(prefix=".<name>.", suffix=".tmp") makes (8 of [a-z0-9_]), is not ours to delete.
_LEFTOVER = re.compile(r"\..+\.[0-9a-f]{8}\.tmp(\.[^./]+)?")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class UnwritableError(UserError):
    """A target whose folder cannot take a file (missing rights, a read-only file system, a file where a
    folder should be): names the target, not the temporary file beside it."""


# What a node that is not a regular file is, by its ``stat.S_IFMT`` type.
_NODE_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def check_replaceable(path: str | Path) -> None:
    """Refuse (an :class:`UnwritableError` naming ``path``) a target that exists and is not a regular file
    once its links are followed: a folder, a FIFO, a device (``/dev/null``), a socket. A rename onto it
    would replace the node itself by a regular file (as root, ``/dev/null`` with it), which no writer
    means. Nothing at ``path``, a regular file, or a link to one or to nothing: returns."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # nothing there (or not reachable: the write itself says why)
    if not stat.S_ISREG(mode):
        kind = _NODE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise UnwritableError(f"{path}: expected a regular file to write (or nothing there), found {kind}; "
                              "nothing was written; give a file name")


def _temporary_name(path: Path) -> Path:
    """A new name for a temporary file of ``path``, beside it: ``.<name>.<8 hex digits>.tmp<suffix>``
    (:data:`_LEFTOVER`)."""
    return path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp{path.suffix}"


def _temporary(path: Path, made: list[Path]) -> Path:
    """A new empty temporary file beside ``path`` (its folder created), ``.<name>.<8 hex digits>.tmp<suffix>``
    (mode 0600); an UnwritableError naming ``path``. Its name goes into ``made`` before the file exists, for
    the caller to delete: ``mkstemp`` gave the name only once the file existed, and a stop (Ctrl-C, SIGTERM)
    whose handler ran as the file was created left it behind (a prepare stopped there, 4 runs in 10 of
    test_a_stop_dropped_in_a_callback_still_ends_the_run)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            made.append(name := _temporary_name(path))
            try:
                os.close(os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
                return name
            except FileExistsError:
                made.remove(name)  # another writer's: not ours to delete
    except OSError as err:
        if err.errno in FULL_DISK:
            raise
        where = f": {err.filename}" if err.filename and not _LEFTOVER.fullmatch(Path(err.filename).name) else ""
        raise UnwritableError(f"{path}: cannot be written ({err.strerror or err}{where}); give a path in a "
                              "folder you can write") from None


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for any writer (h5py, PIL, numpy...); on success it is
    synced and moved onto ``path``, on failure deleted. Parent folders are created. A write the disk
    refuses (no space, quota, ``ulimit -f``: ENOSPC, EDQUOT, EFBIG) ends as a :class:`DiskFullError`
    naming ``path``, a folder that cannot take the file as an :class:`UnwritableError` naming ``path``, and
    so does an existing ``path`` that is not a regular file (:func:`check_replaceable`: a FIFO, a device, a
    folder), before and again after the writer, which the rename would have replaced."""
    path, made = Path(path), []
    check_replaceable(path)
    try:
        tmp = _temporary(path, made)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # made 0600; give the usual permissions
        check_replaceable(path)  # made meanwhile
        os.replace(tmp, path)
    except Exception as err:
        DiskFullError.check(err, path)
        raise
    finally:
        for name in made:
            name.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """``open(path, mode)`` for writing (``"w"``: UTF-8 text, ``"wb"``: bytes), atomically."""
    if mode not in ("w", "wb"):
        raise ValueError(f"expected mode 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as f:
            yield f


@contextlib.contextmanager
def atomic_unnamed(path: str | Path) -> Iterator[IO[bytes]]:
    """:func:`atomic_open` ``(path, "wb")`` for a writer that holds no lock on the folder (``viz``, which writes
    anywhere, so that no rerun may clear a temporary file there): the bytes go to a file without a name in
    ``path``'s folder (Linux ``O_TMPFILE``), which a ``kill -9`` meanwhile leaves nothing of; at the end it is
    given a temporary name for the moment of the rename (microseconds), and renamed onto ``path``. Where the
    system, the file system (NFS) or ``/proc`` has no such file, it is :func:`atomic_open`'s named one."""
    path = Path(path)
    check_replaceable(path)
    fd = None
    with contextlib.suppress(AttributeError, OSError):  # no O_TMPFILE here: the named temporary file, its messages
        if os.path.isdir("/proc/self/fd"):  # (else the file could not be given its name)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.parent, os.O_TMPFILE | os.O_RDWR, 0o600)
    if fd is None:  # outside the handler: the writer's own errors are not chained to that refusal
        with atomic_open(path, "wb") as f:
            yield f
        return
    try:
        with os.fdopen(fd, "wb+") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            check_replaceable(path)  # made meanwhile
            _name_and_replace(f, path)
    except Exception as err:
        DiskFullError.check(err, path)
        raise


def _name_and_replace(f: IO[bytes], path: Path) -> None:
    """Give the file without a name ``f`` a temporary name beside ``path`` (``linkat`` of ``/proc/self/fd/N``,
    the links followed) and rename it onto ``path``; where it cannot be named, its bytes are copied to
    :func:`atomic_open`'s named temporary file instead."""
    made: list[Path] = []
    proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            made.append(name := _temporary_name(path))
            try:
                os.link(str(f.fileno()), name, src_dir_fd=proc, follow_symlinks=True)
                break
            except FileExistsError:
                made.remove(name)  # another writer's: not ours to delete
        os.replace(name, path)
    except OSError as err:
        if err.errno in FULL_DISK or isinstance(err, FileExistsError):
            raise
        f.seek(0)
        with atomic_open(path, "wb") as copy:
            shutil.copyfileobj(f, copy)
    finally:
        os.close(proc)
        for name in made:
            name.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def is_leftover(name: str) -> bool:
    """Whether a file name is one of :func:`atomic_path`'s temporary files (``.<name>.<8 hex digits>.tmp<suffix>``):
    in a folder whose lock is free, a killed writer's leftover, not data."""
    return _LEFTOVER.fullmatch(name) is not None


def _say(line: str) -> None:
    print(line, flush=True)


def remove_leftovers(folder: str | Path, recursive: bool = True, locked: bool = True,
                     log: Callable[[str], None] | None = _say) -> list[Path]:
    """Delete the temporary files that a killed writer left in ``folder`` and (``recursive``) its sub-folders;
    returns them, and ``log`` says each in one line (``removed PATH, left by an interrupted run``; ``None``:
    silent). Call it only while holding the lock of ``folder`` (:mod:`pointgeope.lock`), or (``locked=False``)
    of a folder above it: a live writer's temporary file looks the same. A sub-folder that holds a lock file
    of its own (:func:`pointgeope.lock.has_lock_file`: a ``predict --out`` made in a fold folder, a data root in
    a raw folder), and with ``locked=False`` ``folder`` itself, is another writer's, which may be writing there
    now: neither it nor the folders below it are searched. Symbolic links to folders are not followed."""
    from pointgeope.lock import has_lock_file  # (lock.py imports this module)

    folder = Path(folder)
    if not folder.is_dir() or (not locked and has_lock_file(folder)):
        return []
    removed = []
    for root, dirs, files in os.walk(folder):
        removed += [Path(root, name) for name in sorted(files) if is_leftover(name) and Path(root, name).is_file()]
        dirs[:] = sorted(d for d in dirs if recursive and not has_lock_file(Path(root, d)))
    for path in removed:
        path.unlink(missing_ok=True)
        if log is not None:
            log(f"removed {path}, left by an interrupted run")
    return removed


# The folders :func:`writable_folder` made in this process that no command has taken yet, absolute path ->
# (st_dev, st_ino) of the folder made: a command refused before it writes anything removes them again
# (:func:`remove_made_folders`), so that bad input leaves nothing behind; a command's lock taken or released
# forgets them (:func:`forget_made_folders`), so that a later command of the process (a Python session) never
# removes a folder an earlier one made, nor one of the same name that another process made meanwhile.
_MADE: dict[Path, tuple[int, int]] = {}


def writable_folder(path: str | Path, what: str = "output folder") -> Path:
    """Create ``path`` if needed and check, by writing a temporary file into it, that it can be written;
    a :class:`~pointgeope.errors.UserError` naming it otherwise (before any long work starts). The folders
    it makes (``path`` and its missing parents) are recorded for :func:`remove_made_folders`.

    A folder removed between its ``mkdir`` and the test write is made once more: another command, refused,
    removes the empty folders it made (:func:`remove_made_folders`), and ``path`` may be one it made that this
    command has just found there. Refused (a name too long, a folder it cannot write), it removes the empty
    folders it made on the way."""
    path = Path(path)
    check_folder_path(path, what)
    made: list[Path] = []
    try:
        try:
            _make_writable(path, made)
        except FileNotFoundError:  # removed under us (a refused command's cleanup): once more
            _make_writable(path, made)
    except OSError as err:
        _unmake(made)
        fix = ("give a shorter name" if err.errno == errno.ENAMETOOLONG else
               "make it writable or give a folder you can write")
        raise UserError(f"{what} {path}: cannot write into it ({err.strerror or err}); {fix}") from None
    return path


def _make_writable(path: Path, made: list[Path]) -> None:
    """``mkdir -p path``, the folders it made recorded (:data:`_MADE`) and appended to ``made`` (those made
    before a part fails too), and a temporary file written into it."""
    absolute = Path(os.path.abspath(path))
    missing = [p for p in (absolute, *absolute.parents) if not os.path.lexists(p)]
    try:
        path.mkdir(parents=True, exist_ok=True)
    finally:
        for folder in missing:
            if (identity := _folder_identity(folder)) is not None:
                _MADE[folder] = identity
                made.append(folder)
    with tempfile.TemporaryFile(dir=path):
        pass


def _unmake(made: list[Path]) -> None:
    """Remove the folders of ``made`` (this call of :func:`writable_folder` made them), the deepest first, where
    each is still the folder made and empty; their records forgotten."""
    for folder in sorted(set(made), key=lambda f: len(f.parts), reverse=True):
        if _MADE.pop(folder, None) == _folder_identity(folder):
            with contextlib.suppress(OSError):  # not empty: it stays, and so does every folder above it
                folder.rmdir()


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the folder ``path`` itself (not of a link's target); ``None`` where it is none."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None


def remove_made_folders(path: str | Path) -> None:
    """Remove ``path`` and then each folder above it, as long as :func:`writable_folder` made that very folder
    (the same inode) for the command now refused and it is empty: a command refused after it made its output
    folder (another command holds a folder around it, :mod:`pointgeope.lock_nesting`) leaves no empty folder
    behind. A folder that another process has written into meanwhile is not empty, and stays; the records of
    the folders around ``path`` are forgotten (:func:`forget_made_folders`)."""
    try:
        for folder in (absolute := Path(os.path.abspath(path)), *absolute.parents):
            made = _MADE.pop(folder, None)
            if made is None or _folder_identity(folder) != made:
                return  # not ours: nor is any folder above it ours to remove
            try:
                folder.rmdir()
            except OSError:  # not empty (or gone)
                return
    finally:
        forget_made_folders(path)


def forget_made_folders(path: str | Path) -> None:
    """Forget the folders :func:`writable_folder` made at ``path``, above it and below it: a command holds (or
    held) ``path`` (:func:`pointgeope.lock.folder_lock`), and no later command of this process removes them."""
    absolute = Path(os.path.abspath(path))
    for folder in [f for f in _MADE if f == absolute or f in absolute.parents or absolute in f.parents]:
        del _MADE[folder]


def check_folder_path(path: str | Path, what: str = "output folder") -> None:
    """A :class:`~pointgeope.errors.UserError` naming ``path`` where it cannot be a folder: a file, a link that
    loops or leads nowhere. Creates nothing: the check of a folder written at the end of long work (``ablate``'s
    report, after the trials), made before that work starts."""
    if found := _not_a_folder(Path(path)):
        raise UserError(f"{what} {path}: expected a folder, found {found}; remove it or give another folder name")
    for parent in Path(os.path.abspath(path)).parents:        # the nearest that exists: a file there blocks it
        if os.path.lexists(parent):
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise UserError(f"{what} {path}: expected a folder, but {parent} on its path is a file; remove it or "
                                f"give another folder name")
            return


def _not_a_folder(path: Path) -> str | None:
    """What ``path`` is when it cannot be a folder (a file, a link that loops or leads nowhere), else
    ``None`` (a folder, or nothing yet)."""
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as err:
            loops = err.errno == errno.ELOOP
            return f"a symbolic link {'that loops' if loops else 'to nothing'} ({path} -> {os.readlink(path)})"
    if path.exists() and not path.is_dir():
        return "a file"
    return None
