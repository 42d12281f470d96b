"""What stands in an HDF5 file of pointgeope where a room or an array should be, when it is not an object under
its one name: a link (soft, or external to another file) or a second name of an object (a hard link).

pointgeope writes neither. A hand-edited area file may hold one: ``/office_2`` a link to ``/office_1`` (or a hard
link made by ``f["office_2"] = f["office_1"]``) passes every check of the room it leads to, and its points would be
read twice under two names (trained on twice, counted twice in a test area's scores); a link to another file's
room reads that file's points as this one's; a link to a path the file lacks, or to a file that is not there,
points nowhere, and so does a loop of links (``/r -> /r``, which HDF5 follows until "too many links"). Each is
said in words here for the one line of :func:`pointgeope.h5.opened_member`, the opener of rooms and their members.
"""
from __future__ import annotations

import h5py

from pointgeope.recorded_text import repr_bounded

NEVER_WRITTEN = "which prepare never writes: its points would be read twice, under two names"
ANOTHER_FILE = "which prepare never writes: another file's points would be read as this one's"


def link_found(parent: h5py.Group, key: str) -> str | None:
    """What ``parent[key]`` is, in words, when it is a soft or an external link (whether it points nowhere, loops
    or leads to an object: module docstring); ``None`` for an object stored under the name (a hard link,
    :func:`second_name` says whether it has another)."""
    link = parent.get(key, getlink=True)
    if isinstance(link, h5py.SoftLink):
        to, found = f"a link to {repr_bounded(link.path, 80)}", NEVER_WRITTEN
    elif isinstance(link, h5py.ExternalLink):
        to, found = f"a link to {repr_bounded(link.path, 80)} in file {repr_bounded(link.filename, 80)}", ANOTHER_FILE
    else:
        return None
    try:
        parent[key]
    except KeyError:
        return f"{to}, which " + ("the file does not hold" if isinstance(link, h5py.SoftLink) else "cannot be opened")
    except RuntimeError:  # HDF5: "Special link traversal failed (too many links)"
        return f"{to}, a loop of links that leads nowhere"
    return f"{to}, {found}"


def second_name(obj: h5py.Group | h5py.Dataset) -> str | None:
    """What ``obj`` is, in words, when the file holds it under more than one name (its HDF5 reference count: one
    per hard link), naming another of them where it is a room or a room's member (where pointgeope puts its
    objects); ``None`` for an object of one name."""
    if h5py.h5o.get_info(obj.id).rc < 2:
        return None
    other = next((name for name in _names(obj.file) if name != obj.name and _opened(obj.file, name) == obj), None)
    what = f"an object also named {other!r}" if other else "an object the file holds under another name too"
    return f"{what} (an HDF5 hard link), {NEVER_WRITTEN}"


def _names(f: h5py.File) -> list[str]:
    """The paths of the objects stored in ``f`` under their own name (no soft or external link) at the depths of
    rooms and their members: ``/room``, ``/room/member``."""
    rooms = [f"/{name}" for name in f if isinstance(f.get(name, getlink=True), h5py.HardLink)]
    members = [f"{room}/{name}" for room in rooms if isinstance(group := _opened(f, room), h5py.Group)
               for name in group if isinstance(group.get(name, getlink=True), h5py.HardLink)]
    return rooms + members


def _opened(f: h5py.File, path: str) -> h5py.Group | h5py.Dataset | None:
    """``f[path]``; ``None`` where it cannot be opened (a damaged object: not the one looked for)."""
    try:
        return f[path]
    except (KeyError, RuntimeError, OSError):
        return None
