"""One writer per folder across nested folders: a command's output folder may lie neither inside a folder that
another command holds (:func:`pointgeope.lock.folder_lock`) nor around one.

Each lock covers its folder and everything below it (``train`` and ``evaluate`` write ``RUN/area_K/predictions``,
``ablate`` the whole ``RUN``), so ``predict --out RUN/area_1/predictions`` while ``train`` holds ``RUN/area_1``
wrote into the fold's files under a second lock, and neither saw the other. :func:`refuse_nested` is asked by
:func:`~pointgeope.lock.folder_lock` once it holds its own lock, so of two commands that start together the later
check sees the earlier lock (at worst both are refused, never both admitted):

- **up**: every folder above (of the resolved path) whose ``.lock`` another process holds now
  (:func:`~pointgeope.lock.live_writer`: a lock file left by a ``kill -9`` is free and does not count; one of
  another host cannot be checked from here and counts, as ``folder_lock`` counts it, the message saying which
  file to delete once that process has ended; where ``/proc/locks`` cannot be read, a live process of the
  record's pid counts, which may be another program that took a killed command's pid: the message says so);
- **down**: every ``.lock`` below ``folder`` that a process of this host holds, read from ``/proc/locks`` and the
  holders' ``/proc/PID/fd`` (Linux; elsewhere, and for a holder of another host or another user, this direction
  is not checked: walking the tree would cost a read of every folder below an output folder).

A holder that is this process, one of its parents (``ablate`` runs each trial's ``train`` below the ``RUN`` it
holds), or one of its children is the same command, never refused.
"""
from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from pointgeope.lock import LOCK_NAME, LockError, _command, _shown, flocks, live_writer


def _parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/PID/stat`` (its 4th field, after the ``(name)`` that may hold spaces)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors(pid: int) -> set[int]:
    """``pid`` and its parents up to pid 1 (only ``pid`` and, for this process, its parent where ``/proc`` is
    missing)."""
    pids, at = {pid}, pid
    while (at := _parent_pid(at)) is not None and at > 1 and at not in pids:
        pids.add(at)
    return pids | ({os.getppid()} if pid == os.getpid() else set())


def _same_command(pid: int, mine: set[int]) -> bool:
    """Whether ``pid`` is this process, one of its parents (``mine``: :func:`_ancestors` of this process) or one
    of its children."""
    return pid in mine or os.getpid() in _ancestors(pid)


def _held_above(folder: Path, mine: set[int]) -> tuple[Path, dict] | None:
    """The nearest folder above ``folder`` whose lock another command holds, and its holder's record."""
    for parent in folder.parents:
        owner = live_writer(parent)
        if owner is not None and not (owner.get("host") == socket.gethostname() and _same_command(owner["pid"], mine)):
            return parent, owner
    return None


def _lock_files(pid: int, folder: Path) -> list[Path]:
    """The ``.lock`` files below ``folder`` (not its own) that process ``pid`` has open, from ``/proc/PID/fd``
    (none where it cannot be read: ended meanwhile, or another user's). Each descriptor is one ``readlink``, its
    path tested as a string: a holder of thousands of descriptors costs milliseconds, not a ``Path`` each."""
    try:
        entries = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:
        return []
    below, end = os.path.join(str(folder), ""), os.sep + LOCK_NAME  # "/run/area_1/", "/.lock"
    paths = []
    for entry in entries:
        try:
            link = os.readlink(entry.path)
        except OSError:  # closed meanwhile
            continue
        if link.endswith(end) and link.startswith(below) and len(link) > len(below) + len(LOCK_NAME):
            paths.append(Path(link))  # (".../.lock (deleted)": released, its file removed; not this name)
    return paths


def _held_below(folder: Path, mine: set[int]) -> tuple[Path, int] | None:
    """A folder below ``folder`` whose ``.lock`` another command of this host holds now, and its holder's pid.
    Each holder's descriptors are read once, whatever the number of its locks (``/proc/locks`` has a line per
    lock: read per line, a holder of 500 locks and 5,000 descriptors cost 2.5 million ``readlink``, a minute),
    and not at all for a holder that is this command (``mine``, or a child of this process: ``ablate``'s trials)."""
    held = flocks("WRITE")
    inodes: dict[int, set[int]] = {}
    for pid, inode in held or ():
        inodes.setdefault(pid, set()).add(inode)
    for pid, theirs in inodes.items():
        if _same_command(pid, mine):  # asked once a holder, before its descriptors are read
            continue
        for path in _lock_files(pid, folder):
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino in theirs:
                    return path.parent, pid
    return None


def refuse_nested(folder: str | Path) -> None:
    """Raise :class:`~pointgeope.lock.LockError` (one line, both folders named, and what to do) when ``folder``
    lies inside a folder that another command holds, or holds one inside it (see the module docstring)."""
    folder, mine = Path(folder).resolve(), _ancestors(os.getpid())
    if above := _held_above(folder, mine):
        parent, owner = above
        who = f"pid {owner['pid']} on {owner.get('host')} (since {owner.get('since')})"
        command = _shown(str(owner.get("command", "")))
        here = socket.gethostname()
        raise LockError(f"{folder} lies inside {parent}, which {who} is writing"
                        + (f" (`{command}`)" if command else "")
                        + f"; give an output folder outside {parent}, or wait for that command to end"
                        + (f" (it cannot be checked from {here}: once it has ended, delete {parent / LOCK_NAME})"
                           if owner.get("host") != here else
                           f" (only its pid is checked, /proc/locks cannot be read here: if pid {owner['pid']} is no "
                           f"pointgeope command, the lock was left by a killed one: delete {parent / LOCK_NAME})"
                           if flocks("WRITE") is None else ""))
    if below := _held_below(folder, mine):
        inner, pid = below
        command = _command(pid)
        raise LockError(f"{folder} holds {inner}, which pid {pid}" + (f" (`{command}`)" if command else "")
                        + f" is writing; give an output folder that does not contain {inner}, or wait for that "
                        f"command to end (its lock: {inner / LOCK_NAME})")
