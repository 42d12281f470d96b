"""One writer per output folder: an exclusive lock file ``FOLDER/.lock`` holding the owner's pid and host.

The lock is an ``flock`` on that file (released by the kernel when its process ends, even by ``kill -9``),
and the file says who holds it::

    {"pid": 4242, "host": "node-3", "since": "2026-11-26 04:10:00", "command": "train.py --config ..."}

A second writer gets a :class:`LockError` naming the owner. A lock file left by a process of this host
that has ended is taken over, with a message. One left by another host cannot be checked from here
(``flock`` is per host on most network file systems): it is refused, and the message says which file to
delete once that process is known to have ended. The file is deleted when the lock is released.
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

from pointgeope.atomic import writable_folder
from pointgeope.errors import UserError

try:
    import fcntl
except ImportError:  # Windows: only the pid check below
    fcntl = None

LOCK_NAME = ".lock"


class LockError(UserError):
    """The folder is being written by another process."""


def _owner(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        owner = json.loads(os.read(fd, 4096).decode() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None


def _holder(fd: int, wait: float = 1.0) -> dict | None:
    """The owner record of a lock another process holds: a holder that has just taken the flock writes its
    record a moment later (truncate, then write), so an empty record is read again for up to ``wait`` s."""
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


def _refuse(path: Path, owner: dict | None) -> LockError:
    who = f"pid {owner['pid']} on {owner.get('host')} (since {owner.get('since')})" if owner else "another process"
    command = str(owner.get("command", ""))[:100] if owner else ""
    return LockError(f"{path.parent} is being written by {who}" + (f", `{command}`" if command else "")
                     + f"; wait for it to end or stop it (its lock: {path})")


def _open_locked(path: Path) -> int:
    """Open ``path`` and take its flock; the descriptor, or LockError when a live process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _holder(fd)
                os.close(fd)
                raise _refuse(path, owner) from None
        try:  # a releasing owner may have deleted the file between our open and our flock
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: str | Path, what: str = "") -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (created if needed, checked to be a folder it can write:
    :func:`~pointgeope.atomic.writable_folder`) inside the ``with`` block.

    Args:
        folder: the output folder.
        what: what the holder does, shown to a refused writer (default: this process's command line).
    Raises:
        LockError: another live process holds it, or a lock of another host is left in it.
        UserError: ``folder`` is a file, a symbolic link that loops or leads nowhere, or cannot be written.
    """
    folder = writable_folder(folder)  # created; a file, a link that loops or an unwritable folder: one line
    path = folder / LOCK_NAME
    host = socket.gethostname()
    fd = _open_locked(path)
    try:
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
    except BaseException:
        os.close(fd)
        raise
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # while still holding the flock: a waiting writer re-checks the inode
        os.close(fd)
