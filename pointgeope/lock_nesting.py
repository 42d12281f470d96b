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
  file to delete once that process has ended);
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

from pointgeope.lock import LOCK_NAME, LockError, _command, _shown, live_writer


def _parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/PID/stat`` (its 4th field, after the ``(name)`` that may hold spaces)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors(pid: int) -> set[int]:
    """``pid`` and its parents up to pid 1 (only ``pid`` and, for this process, its parent where ``/proc`` is
    missing)."""
    pids = {pid} | ({os.getppid()} if pid == os.getpid() else set())
    while (pid := _parent_pid(pid)) is not None and pid > 1 and pid not in pids:
        pids.add(pid)
    return pids


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


def _lock_files(pid: int) -> list[Path]:
    """The ``.lock`` files process ``pid`` has open, from ``/proc/PID/fd`` (none where it cannot be read: ended
    meanwhile, or another user's)."""
    try:
        entries = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:
        return []
    paths = []
    for entry in entries:
        try:
            path = Path(os.readlink(entry.path))
        except OSError:  # closed meanwhile
            continue
        if path.name == LOCK_NAME:
            paths.append(path)
    return paths


def _held_below(folder: Path, mine: set[int]) -> tuple[Path, int] | None:
    """A folder below ``folder`` whose ``.lock`` another command of this host holds now, and its holder's pid."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for fields in map(str.split, lines):  # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF" ("1: ->" a waiter)
        if fields[1:2] != ["FLOCK"] or fields[3:4] != ["WRITE"] or (pid := int(fields[4])) in mine:
            continue
        inode = int(fields[5].rsplit(":", 1)[-1])
        for path in _lock_files(pid):
            if folder in path.parents and path.parent != folder and not _same_command(pid, mine):
                with contextlib.suppress(OSError):
                    if os.stat(path).st_ino == inode:
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
                           if owner.get("host") != here else ""))
    if below := _held_below(folder, mine):
        inner, pid = below
        command = _command(pid)
        raise LockError(f"{folder} holds {inner}, which pid {pid}" + (f" (`{command}`)" if command else "")
                        + f" is writing; give an output folder that does not contain {inner}, or wait for that "
                        f"command to end (its lock: {inner / LOCK_NAME})")
