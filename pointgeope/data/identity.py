"""Whether an area file whose checksum is not the one a run recorded still holds the points it used.

A run records the whole-file checksums of the area files it trained on (``pointgeope.checksum.file_checksum``,
the checkpoint's ``"data"``) and, since their points checksums were introduced, those too
(``pointgeope.checksum.points_checksum``, the checkpoint's ``"data_points"``). The whole file also holds
where it was prepared from (the room attributes ``source`` and ``signature``), so the same raw data
prepared from a moved folder, from its zip or on another node gives another file checksum. Before a
command refuses such a file (``engine.trained_data.check_data``), :func:`same_points` compares its points with
the recorded ones, by what is at hand, in this order:

1. ``manifest.json``'s ``same_points``: the file checksums of the earlier files of the area that ``prepare``
   replaced with a file of the same points (a rerun after the raw folder moved);
2. the run's recorded points checksum, against the file's (``manifest.json``'s ``points``, else computed;
   :func:`recorded_points`);
3. the file the run trained on, where it is still at hand (its ``data.root``) with the recorded checksum.

The points checksum covers what was measured, never the normals estimated from it (:mod:`pointgeope.checksum`;
the estimate is named by its own attributes, :mod:`pointgeope.data.normal_record`): files of the same points
with normals of another estimate, or none, are the same data. One compatibility path, :func:`recorded_points`:
the versions between normals and this rule recorded points checksums that hashed ``normal`` too; such a
checksum is also compared with the file's checksum under that rule (``points_checksum(..., derived=True)``).
A ``manifest.json``'s ``points`` are read only where it says it was written under this rule (its
``points_rule``, :data:`POINTS_RULE`); an older one's points are computed from the files (its ``same_points``,
file checksums, hold under any rule).
"""
from __future__ import annotations

import functools
from pathlib import Path

from pointgeope.checksum import file_checksum, points_checksum
from pointgeope.data.check import read_manifest
from pointgeope.h5 import SchemaError, area_path

POINTS_RULE = "measured"  # manifest.json's points_rule: its points leave the derived arrays out


def manifest_points(root: str | Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``(points, same_points)`` of ``root/manifest.json`` (:func:`points_of`, read by
    ``check.read_manifest``); empty where it is not readable (``check.manifest_checksums`` refuses such a
    manifest, by name)."""
    try:
        manifest = read_manifest(root)
    except SchemaError:
        return {}, {}
    return points_of(manifest)


def points_of(manifest: object) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``(points, same_points)`` of a manifest: area -> points checksum, and area -> the file checksums of
    earlier files with those points; empty where it lacks them (prepared by an older version), and no points
    from a manifest of another ``points_rule`` (module docstring)."""
    ruled = isinstance(manifest, dict) and manifest.get("points_rule") == POINTS_RULE
    points = manifest.get("points") if ruled else None
    same = manifest.get("same_points") if isinstance(manifest, dict) else None
    points = {a: v for a, v in points.items() if isinstance(v, str)} if isinstance(points, dict) else {}
    same = {a: [c for c in v if isinstance(c, str)] for a, v in same.items() if isinstance(v, list)} \
        if isinstance(same, dict) else {}
    return points, same


def prepared_points(area: str, old_file: Path, old_checksum: str | None, new_file: Path | None,
                    old_manifest: dict, new_checksum: str | None = None) -> tuple[str, list[str]]:
    """``prepare``'s ``(points, same_points)`` entries of ``area`` for ``manifest.json``. ``new_file``
    ``None``: ``old_file`` is kept (its listed points checksum, else computed; its list as it was). Else
    ``new_file`` replaces ``old_file`` (of checksum ``old_checksum`` where ``prepare`` trusts it): where both
    hold the same points (the raw folder moved, or the zip was given for the folder; or only their normals
    differ: none, or another estimate), the old file's checksum joins the list (unless it is ``new_checksum``,
    the new file's: the same bytes), so that runs that recorded it use the new file (:func:`same_points`);
    else the list is empty. Call it before ``old_file`` is replaced."""
    listed, lineage = points_of(old_manifest)
    checksums = old_manifest.get("checksums")
    listed_for = checksums.get(area) if isinstance(checksums, dict) else None  # the file the list is of
    of_this = bool(old_checksum) and old_checksum == listed_for
    before = listed.get(area) if of_this else None
    if new_file is None:
        return before or points_checksum(old_file), lineage.get(area, []) if of_this else []
    now = points_checksum(new_file)
    if before is None and old_file.is_file():
        try:
            before = points_checksum(old_file)
        except SchemaError:  # a damaged file: no earlier points
            before = None
    if before != now:
        return now, []
    earlier = old_checksum or file_checksum(old_file)
    return now, [c for c in lineage.get(area, []) if c not in (earlier, new_checksum)] + \
        [earlier] * (earlier != new_checksum)


def area_points(root: str | Path, areas: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Area -> points checksum of ``root/<area>.h5``: listed in ``root/manifest.json`` (``prepare`` writes it
    with the file checksum that the commands verify), else computed from the file."""
    listed, _ = manifest_points(root)
    return {area: listed.get(area) or _computed(area_path(root, area)) for area in areas}


def _computed(path: Path, derived: bool = False) -> str:
    """:func:`points_checksum` of ``path``, once per file as it is now (its size and modification time):
    ``train --cv`` asks for every area at each fold's start, of a root whose manifest lists none."""
    stat = path.stat()
    return _computed_once(str(path), stat.st_size, stat.st_mtime_ns, derived)


@functools.lru_cache(maxsize=64)
def _computed_once(path: str, size: int, mtime_ns: int, derived: bool = False) -> str:
    return points_checksum(path, derived=True) if derived else points_checksum(path)


def same_points(area: str, saved: str | None, root: str | Path, saved_points: dict | None = None,
                trained_root: str | Path | None = None) -> bool | None:
    """Whether ``root/<area>.h5`` holds the points of the file of checksum ``saved`` that a run used
    (module docstring): ``True``, ``False``, or ``None`` where nothing at hand tells (a run that records
    no points checksum, its files replaced)."""
    if saved is None:
        return None
    if saved in manifest_points(root)[1].get(area, []):
        return True
    now, path = area_points(root, [area])[area], area_path(root, area)
    recorded = isinstance(saved_points, dict) and isinstance(saved_points.get(area), str)
    if recorded and recorded_points(saved_points[area], now, path):
        return True
    before = area_path(trained_root, area) if trained_root is not None else None
    if before is not None and before.is_file() and not before.samefile(path) and file_checksum(before) == saved:
        try:
            return points_checksum(before) == now
        except SchemaError:  # not a readable area file after all: nothing tells
            return None
    return False if recorded else None


def recorded_points(used: str, now: str, path: Path) -> bool:
    """Whether the points checksum ``used`` that a run recorded is that of the file at ``path`` (``now``, its
    points checksum), or that file's under the rule of the versions that hashed ``normal`` too: the one
    compatibility path (module docstring). The latter holds while the file's normals are the bytes the run
    read; where they were estimated again since, ``manifest.json``'s ``same_points`` or the file the run
    trained on tell (:func:`same_points`)."""
    return used == now or used == _computed(path, derived=True)
