"""Where a command may write: inside its output folder, whatever names the data give its files.

Commands compose the paths they write from names that the data bring: a scan's file or folder name
(``predict``), an area of ``folds.json`` (``evaluate``), a room of a raw tree (``prepare``), a preset
(``ablate``), a run's name (``report``). A name such as ``..`` or ``/x`` would put a file beside the output
folder or anywhere on the disk. :func:`inside` is the one check, called wherever a command composes such
a path; a name that fails it is the user's input, one line (:class:`OutsideError`).

Both paths are compared as absolute paths with ``.`` and ``..`` taken lexically (``os.path.abspath``);
symbolic links are not followed, so that a link the user put inside the output folder stays theirs to use.

An output must not be one of the command's inputs either: :func:`file_key` is the one rule for "the same
file", the device and inode after links are followed, so another spelling, a symbolic link or a hard link
of an input is that input.
"""
from __future__ import annotations

import os
from pathlib import Path

from pointgeope.errors import UserError


class OutsideError(UserError, ValueError):
    """A name from the input that would put a written file outside the command's output folder."""


def inside(folder: str | Path, path: str | Path, what: str, option: str = "the output folder") -> Path:
    """``Path(path)``, once checked to lie strictly inside ``folder``; an :class:`OutsideError` naming
    ``what`` (the input the name came from), the path and ``option`` (how the user named ``folder``)
    otherwise."""
    base, target = os.path.abspath(folder), os.path.abspath(path)
    if target != base and os.path.commonpath([base, target]) == base:
        return Path(path)
    raise OutsideError(f"{what}: its name would put {path} outside {option} {folder}; rename it (names "
                       "such as '..', '.' or ones starting with '/' cannot be written)")


def file_key(path: str | Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names once links are followed; ``None`` when nothing is
    there (or it cannot be reached). Two paths name one file exactly when their keys are equal and not
    ``None``."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one existing file (:func:`file_key`)."""
    key = file_key(a)
    return key is not None and key == file_key(b)
