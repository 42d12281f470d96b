"""Where a denied access (``EACCES``, ``EPERM``) was refused: the folder or file whose permissions keep this
user out, for the one line of the error (:func:`pointgeope.errors.user_message`).

A ``PermissionError`` names the path the call was given (``RUN/rpe/seed_0/area_1/last.pt``), not what
refused it: a folder on the way that this user cannot enter (no search bit, ``x``) refuses every file below
it, a file that it cannot read or write refuses itself, a folder that it cannot write refuses a new file in
it. :func:`denied_by` walks the path from its top, as the kernel resolves it, and names the first::

    abl/rpe/seed_0/area_1/last.pt, area_1 without x  ->  ("folder", abl/rpe/seed_0/area_1, "enter")

The check is ``os.access`` (the real user's permissions, as a command run by hand has them); where nothing on
the way refuses by its mode bits (an ACL, an immutable file, a mount's options, root), ``None``.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["denied_by", "denied_line"]


def denied_by(path: str | bytes | os.PathLike) -> tuple[str, Path, str] | None:
    """``(kind, where, what)`` of the first thing on ``path`` that this user is refused: ``kind`` ``"folder"``
    or ``"file"``, ``where`` that path (written as ``path`` is: relative stays relative), ``what`` the access
    it lacks (``"enter"``, ``"read"``, ``"write"``, ``"read or write"``, ``"write into"``); ``None`` where the
    mode bits refuse nothing."""
    path = Path(os.fsdecode(path))
    for folder in [*reversed(path.parents), path]:      # from the top: the first refusal hides the others
        if os.path.isdir(folder) and not os.access(folder, os.X_OK):
            return "folder", folder, "enter"
    if os.path.isdir(path):
        lacks = [what for what, mode in (("read", os.R_OK), ("write into", os.W_OK)) if not os.access(path, mode)]
        return ("folder", path, " or ".join(lacks)) if lacks else None
    if os.path.lexists(path):
        lacks = [what for what, mode in (("read", os.R_OK), ("write", os.W_OK)) if not os.access(path, mode)]
        return ("file", path, " or ".join(lacks)) if lacks else None
    parent = path.parent
    if os.path.isdir(parent) and not os.access(parent, os.W_OK):
        return "folder", parent, "write into"
    return None


def denied_line(err: OSError) -> str:
    """The one line of a denied access ``err``: the path it names, what refused it (:func:`denied_by`) and what
    to do, e.g. ``Permission denied: RUN/area_1/last.pt: this user cannot enter the folder RUN/area_1;
    change its permissions (chmod, chown) or use another folder``. A file descriptor in the place of the path
    (``os.chmod(fd, ...)`` names the number) is said as it is, with no folder to look at."""
    name = err.filename
    if isinstance(name, (str, bytes, os.PathLike)):
        name = os.fsdecode(name)
    said = f"{err.strerror or err}" + (f": {name}" if name is not None and name != "" else "")
    found = denied_by(name) if isinstance(name, str) and name else None
    if found is None:
        return f"{said}; check the permissions of it and of its folders, or use another folder"
    kind, where, what = found
    return (f"{said}: this user cannot {what} the {kind} {where}; change its permissions (chmod, chown) or use "
            "another folder")
