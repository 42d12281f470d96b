"""One writer per output folder: an exclusive lock file ``FOLDER/.lock`` holding the owner's pid and host.

The lock is an ``flock`` on that file (released by the kernel when its process ends, even by ``kill -9``),
and the file says who holds it::

    {"pid": 4242, "host": "node-3", "since": "2026-11-26 04:10:00", "command": "train.py --config ..."}

A second writer gets a :class:`LockError` naming the owner. A lock file left by a process of this host
that has ended is taken over, with a message. One left by another host cannot be checked from here
(``flock`` is per host on most network file systems): it is refused, and the message says which file to
delete once that process is known to have ended. The file is deleted when the lock is released.

A forked child (a pool worker, a DataLoader worker) never holds its parent's lock: ``flock`` belongs to the
open file description, which ``fork`` shares, so a child that outlived a killed parent kept the folder locked
in the name of a dead pid. Each forked child closes the descriptors of the locks held here (closing, never
unlocking, which would free the parent's lock too).

Readers of a folder that a writer replaces (``train`` and ``evaluate`` read a data root that ``prepare``
writes) hold :func:`reader_lock`, a shared ``flock`` on ``FOLDER/.readers.lock``; a writer that asks for it
(``folder_lock(..., readers=True)``) takes that file exclusively too, so it is refused while one reads, naming
the readers, and a reader is refused while it writes.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pointgeope import json_text
from pointgeope.atomic import forget_made_folders, remove_made_folders, writable_folder
from pointgeope.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: only the pid check below
    fcntl = None

LOCK_NAME = ".lock"
COMMAND_CHARS = 400  # a holder's command is shown whole up to this length (deep run folders included)
READERS_NAME = ".readers.lock"  # never deleted: readers and writers flock the same inode

# The lock descriptors this process holds (a forked child closes them at once and empties the set, so a
# descriptor missing here is one a forked child no longer has).
_HELD: set[int] = set()


def _close_inherited() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


class LockError(UserError):
    """The folder is being written by another process."""


def _owner(fd: int) -> dict | None:
    """The record in the lock file ``fd``, read whole: its first 4 KiB cut a command of long paths short,
    and the record of another host's live holder was then taken for none (taken over without a word)."""
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        owner = json_text.loads(b"".join(iter(lambda: os.read(fd, 1 << 16), b"")).decode() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None


def _holder(fd: int, wait: float = 5.0) -> dict | None:
    """The owner record of a lock another process holds: a holder that has just taken the flock writes its
    record a moment later (truncate, then write), so an empty record is read again for up to ``wait`` s
    (long enough for a holder descheduled on a busy machine; only a refusal in that gap waits)."""
    deadline = time.monotonic() + wait
    while (owner := _owner(fd)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return owner


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _shown(command: str) -> str:
    """``command`` on one line, whole up to :data:`COMMAND_CHARS` characters, else cut there and ended with
    `` ...`` so that a cut is never mistaken for the whole command."""
    command = " ".join(command.split())
    return command if len(command) <= COMMAND_CHARS else command[:COMMAND_CHARS] + " ..."


def _refuse(path: Path, owner: dict | None) -> LockError:
    who = f"pid {owner['pid']} on {owner.get('host')} (since {owner.get('since')})" if owner else "another process"
    command = _shown(str(owner.get("command", ""))) if owner else ""
    return LockError(f"{path.parent} is being written by {who}" + (f", `{command}`" if command else "")
                     + f"; wait for it to end or stop it (its lock: {path})")


def _flock_or_refuse(fd: int, mode: str, refusal) -> None:
    """``flock(fd, fcntl.<mode> | LOCK_NB)`` (no-op without fcntl); when another process holds it, the error
    ``refusal()`` makes (it may read ``fd`` to name the holder), raised after ``fd`` is closed."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, getattr(fcntl, mode) | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            error = refusal()
        finally:
            os.close(fd)
        raise error from None


def _open_lock_file(path: Path, flags: int, mode: int) -> int:
    """``os.open`` of a lock file; a folder in its place (made by hand, or by a sync tool), or a symbolic link
    that leads into no folder (``os.open`` cannot create its target), is a LockError that says to remove it,
    where it was a traceback (a link's ``FileNotFoundError`` is not taken for the folder's removal:
    :func:`_open_in`)."""
    try:
        return os.open(path, flags, mode)
    except IsADirectoryError:
        found = "a folder"
    except FileNotFoundError:
        if not os.path.islink(path):
            raise
        found = f"a symbolic link to {os.readlink(path)}, which leads into no folder"
    raise LockError(f"{path}: expected the lock file of {path.parent}, found {found}; remove "
                    f"{'that folder' if found == 'a folder' else 'the link'} (once no pointgeope command works "
                    "there) and run again") from None


def _open_locked(path: Path) -> int:
    """Open ``path`` and take its flock; the descriptor, or LockError when a live process holds it."""
    while True:
        fd = _open_lock_file(path, os.O_RDWR | os.O_CREAT, 0o644)
        _flock_or_refuse(fd, "LOCK_EX", lambda: _refuse(path, _holder(fd)))  # noqa: B023 - called before fd changes
        try:  # a releasing owner may have deleted the file between our open and our flock
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _open_in(folder: Path) -> int:
    """:func:`_open_locked` of ``folder``'s lock file, the folder made once more where it is gone since
    :func:`~pointgeope.atomic.writable_folder` made or found it: another command, refused, removes the empty
    folders it made (:func:`~pointgeope.atomic.remove_made_folders`), and ``folder`` may be one of them that this
    command found there an instant before. The remover cannot tell: nothing of ours is in the folder until our
    lock file is, and once it is the folder is not empty and stays. A folder gone twice is one line."""
    try:
        return _open_locked(folder / LOCK_NAME)
    except FileNotFoundError:
        writable_folder(folder)
    try:
        return _open_locked(folder / LOCK_NAME)
    except FileNotFoundError:
        raise LockError(f"{folder}: removed by another process while this command took its lock there, twice; "
                        "run it again once nothing else removes that folder") from None


def _claim(fd: int, folder: Path, path: Path, what: str) -> None:
    """Write this process's record into the lock ``fd`` it holds; a record left by a live process of
    another host (or any live one where ``flock`` is missing) is a LockError, a dead one's is taken over."""
    host = socket.gethostname()
    owner = _owner(fd)
    if owner is not None and owner["pid"] != os.getpid():
        if owner.get("host") != host or (fcntl is None and _alive(owner["pid"])):
            raise LockError(f"{folder} is locked by pid {owner['pid']} on {owner.get('host')} (since "
                            f"{owner.get('since')}), which cannot be checked from {host}; if that process "
                            f"has ended, delete {path}")
        print(f"warning: {path}: taking over the lock of pid {owner['pid']} on {host}, which has ended",
              file=sys.stderr, flush=True)
    mine = {"pid": os.getpid(), "host": host, "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": what or " ".join(sys.argv)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(mine).encode(), 0)
    os.fsync(fd)


def _command(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return ""
    return _shown(command.decode(errors="replace"))


def flocks(kind: str) -> list[tuple[int, int]] | None:
    """``(pid, inode)`` of every ``flock`` of ``kind`` (``"READ"``: shared, ``"WRITE"``: exclusive) held on this
    host, from ``/proc/locks`` (Linux; a waiter's ``->`` line is no holder, a line it cannot parse is skipped);
    ``None`` where it cannot be read."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    held = []
    for fields in map(str.split, lines):  # "1: FLOCK  ADVISORY  READ 4242 08:01:1234 0 EOF"
        if fields[1:2] == ["FLOCK"] and fields[3:4] == [kind] and len(fields) > 5:
            with contextlib.suppress(ValueError):
                held.append((int(fields[4]), int(fields[5].rsplit(":", 1)[-1])))
    return held


def _flock_holders(inode: int, kind: str) -> set[int] | None:
    """The pids holding a ``flock`` of ``kind`` on the file of ``inode`` (:func:`flocks`); ``None`` where
    ``/proc/locks`` cannot be read."""
    held = flocks(kind)
    return None if held is None else {pid for pid, held_inode in held if held_inode == inode}


def _readers(fd: int) -> str:
    """The processes holding a shared lock on the file of ``fd``, from ``/proc/locks`` (Linux), e.g.
    ``pid 4242 (`pointgeope train ...`)``; ``another process`` where that cannot be read."""
    pids = _flock_holders(os.fstat(fd).st_ino, "READ") or set()
    return ", ".join(f"pid {pid}" + (f" (`{cmd}`)" if (cmd := _command(pid)) else "") for pid in sorted(pids)) \
        or "another process"


def _exclude_readers(folder: Path) -> int:
    """Take ``FOLDER/.readers.lock`` exclusively: the descriptor, or LockError naming the readers."""
    fd = _open_lock_file(folder / READERS_NAME, os.O_RDONLY | os.O_CREAT, 0o666)
    _flock_or_refuse(fd, "LOCK_EX", lambda: LockError(f"{folder} is being read by {_readers(fd)}; wait for it to "
                                                      "end, or write into another folder"))
    return fd


def _release(fds: list[int], path: Path) -> None:
    """Delete the lock file and close ``fds``, unless this process is a forked child (which closed them)."""
    if fds[0] not in _HELD:
        return
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # while still holding the flock: a waiting writer re-checks the inode
    for fd in fds:
        _HELD.discard(fd)
        os.close(fd)


def still_held(folder: str | Path) -> bool:
    """Whether ``FOLDER/.lock`` is still the file whose lock this process holds (:func:`folder_lock`): false
    once the folder or its lock file was deleted or replaced while the process works in it (``rm -rf`` of a
    run folder, by hand or by a script). A writer that goes on would write into a folder of no lock, that
    a second writer may take (a write recreates the folder, :func:`~pointgeope.atomic.atomic_path`): a
    stat and an fstat per held lock, cheap enough to ask before every write."""
    try:
        now = os.stat(Path(folder) / LOCK_NAME)
    except OSError:
        return False
    for fd in _HELD:
        held = os.fstat(fd)
        if (held.st_ino, held.st_dev) == (now.st_ino, now.st_dev):
            return True
    return False


def live_writer(folder: str | Path) -> dict | None:
    """The record (``pid``, ``host``, ``since``, ``command``) of the process, other than this one, that holds the
    lock ``FOLDER/.lock`` now: a writer working in ``folder`` (a reader that must not take a result it is
    replacing for a finished one). A record of another host is returned as it is (that process cannot be
    checked from here, as :func:`folder_lock` refuses it: the caller says so, and which file to delete once it
    has ended). ``None`` where there is no lock file, its record cannot be read, or, on this host, the ``flock``
    is free: a file left by a ``kill -9`` or a crash names a pid that a later process may have taken (after a
    reboot, a low pid is soon some daemon's), so the holder is read from ``/proc/locks``; where that cannot be
    read (not Linux), a live process of the record's pid counts. Reads; takes no lock (a writer starting now
    is never refused for it)."""
    path = Path(folder) / LOCK_NAME
    try:
        owner = json_text.loads(path.read_text(encoding="utf-8"))
        inode = os.stat(path).st_ino
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not (isinstance(owner, dict) and type(owner.get("pid")) is int):
        return None
    if owner.get("host") != socket.gethostname():
        return owner
    if owner["pid"] == os.getpid():
        return None
    holders = _flock_holders(inode, "WRITE") if fcntl is not None else None
    return owner if (_alive(owner["pid"]) if holders is None else owner["pid"] in holders) else None


def has_lock_file(folder: str | Path) -> bool:
    """Whether ``folder`` holds a lock file of its own (``.lock``, ``.readers.lock``): the output folder of a
    command or a data root, even one made inside another command's folder (a ``predict --out`` in a fold
    folder, a prepared data root in a raw folder). Its files are its own writer's: the writer of a folder
    above it, which holds another lock, leaves them alone."""
    return any(os.path.lexists(Path(folder, name)) for name in (LOCK_NAME, READERS_NAME))


@contextlib.contextmanager
def folder_lock(folder: str | Path, what: str = "", readers: bool = False) -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (created if needed, checked to be a folder it can write:
    :func:`~pointgeope.atomic.writable_folder`) inside the ``with`` block.

    Args:
        folder: the output folder.
        what: what the holder does, shown to a refused writer (default: this process's command line).
        readers: also exclude the readers of ``folder`` (:func:`reader_lock`): for a writer that replaces
            files they read.
    Raises:
        LockError: another live process holds it (or reads it, with ``readers``), or a lock of another host
            is left in it; or another command holds a folder above it or below it
            (:mod:`pointgeope.lock_nesting`).
        UserError: ``folder`` is a file, a symbolic link that loops or leads nowhere, or cannot be written.
    """
    folder = writable_folder(folder)  # created; a file, a link that loops or an unwritable folder: one line
    path = folder / LOCK_NAME
    fds = [_open_in(folder)]
    try:
        _claim(fds[0], folder, path, what)
    except BaseException:
        os.close(fds[0])
        raise
    _HELD.add(fds[0])
    try:
        from pointgeope.lock_nesting import refuse_nested  # (it imports this module)
        try:
            refuse_nested(folder)  # not inside, nor around, a folder another command holds: once ours is held
            if readers:
                fds.append(_exclude_readers(folder))
                _HELD.add(fds[1])
        except LockError:  # refused: nothing left behind, not even the folder this command made for it
            _release(fds, path)
            remove_made_folders(folder)
            raise
        forget_made_folders(folder)  # taken: no later command of this process removes the folders made for it
        yield path
    finally:
        _release(fds, path)
        forget_made_folders(folder)  # with those made inside it meanwhile (evaluate's RUN/area_K/predictions)


@contextlib.contextmanager
def reader_lock(folder: str | Path) -> Iterator[None]:
    """Hold a shared lock on ``folder`` while reading its files (``train``, ``evaluate`` on a data root):
    a writer with ``folder_lock(folder, readers=True)`` (``prepare``) is refused meanwhile, naming the
    readers. Many readers share it.

    A folder where this user cannot make the lock file (missing, read-only: a shared copy of the data that
    nobody prepares into) is read without it. A folder in the lock file's place is refused, as a writer
    refuses it (:func:`_open_lock_file`), where this user can write ``folder`` (and so remove that folder, or
    prepare there): read without the lock, a prepare could replace the files meanwhile once that folder is
    gone, and one writer per folder would hold no more. In a folder it cannot write, it could not make the lock
    file either: read without it, as that rule says (its advice, to remove the folder, could not be followed).

    Raises:
        LockError: a writer holds ``folder`` now (named as :func:`folder_lock` names it), or a folder stands
            in the place of ``FOLDER/.readers.lock`` in a folder that this user can write.
    """
    path = Path(folder) / READERS_NAME
    try:
        fd = _open_lock_file(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except LockError:
        if os.access(folder, os.W_OK):
            raise
        yield
        return
    except OSError:
        yield
        return
    _flock_or_refuse(fd, "LOCK_SH", lambda: _refuse(Path(folder) / LOCK_NAME, _writer(Path(folder) / LOCK_NAME)))
    _HELD.add(fd)
    try:
        yield
    finally:
        if fd in _HELD:
            _HELD.discard(fd)
            os.close(fd)


def _writer(path: Path) -> dict | None:
    """The record of the writer holding ``path`` (a ``.lock``), ``None`` if it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _holder(fd)
    finally:
        os.close(fd)
