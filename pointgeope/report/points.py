"""The points checksums of folds evaluated before ``metrics.json`` recorded them (``"data_points"``).

Such a fold records only the whole-file checksums of its area files (``"data"``), which also hold where the
files were prepared from: the same raw data prepared on two nodes, or from the zip and from the folder,
gives other file checksums, and :mod:`pointgeope.report.settings` would name the folds a mix of data sets.
Where the file checksums of the folds differ, :func:`recover_points` takes the points checksum of each
such fold's file from what is at hand under the fold's ``data.root``, as ``train`` and ``evaluate`` do
(``pointgeope.data.identity``), in this order:

1. ``ROOT/manifest.json``: ``prepare`` lists each area's points checksum with its file checksum, and the
   file checksums of earlier files of the same points (``same_points``);
2. ``ROOT/<area>.h5`` itself, when its file checksum is the recorded one (hashed, then its points).

A fold whose every area is found so is compared by its points; one that is not keeps its file checksums
(and the folds are then compared by files, as before). The report says which folds were found, and how.

A fold that records its points may have recorded them otherwise than a fold recording them now, for the same
data: it trained on a file that a later ``prepare`` into the same folder replaced with one of the same points
(``same_points``: a moved raw folder, or normals added or estimated again, ``pointgeope.data.identity``), or
a version between normals and the points rule of :mod:`pointgeope.checksum` hashed its file's normals too.
:func:`current_points` takes the points of every fold whose file ``manifest.json`` under its ``data.root`` lists
(as the area's file now, or under ``same_points``) as that folder's points now (listed, or computed from the
file where the manifest is of an older rule: ``pointgeope.data.identity.area_points``), so that folds trained
before and after, and runs side by side, compare as one data set.
"""
from __future__ import annotations

from pathlib import Path

from pointgeope.plural import agreeing


def points_of_file(root: str | Path, area: str, checksum: str) -> tuple[str, str] | None:
    """``(points checksum, how)`` of the file of ``area`` whose whole-file checksum is ``checksum``, from
    what is at hand under ``root`` (module docstring); ``None`` where nothing there tells."""
    from pointgeope.checksum import file_checksum
    from pointgeope.data.identity import area_points
    from pointgeope.h5 import SchemaError, area_path

    listed, points, same = _manifest_lists(root)
    if area in points and (checksum == listed.get(area) or checksum in same.get(area, [])):
        return points[area], f"{Path(root) / 'manifest.json'}"
    path = area_path(root, area)
    try:
        if path.is_file() and file_checksum(path) == checksum:
            return area_points(root, [area])[area], str(path)
    except (OSError, SchemaError):
        return None
    return None


def recover_points(folds: dict[str, dict | None]) -> list[str]:
    """Add ``data.points.<area>`` to the settings (``{fold area: settings}``) of each fold that records file
    checksums (``data.files.<area>``) and no points checksums, where every one of its areas is found
    (:func:`points_of_file` under its ``data.root``, asked once per file: without a manifest it hashes the
    file, which every fold of a run lists); returns one line per fold found, naming where."""
    found, known = [], {}    # (root, area, checksum) -> points_of_file's answer: six folds share one file
    for fold, settings in folds.items():
        if not settings or any(key.startswith("data.points.") for key in settings):
            continue
        files = {key.removeprefix("data.files."): value for key, value in settings.items()
                 if key.startswith("data.files.") and isinstance(value, str)}
        root = settings.get("data.root")
        if not files or not isinstance(root, str):
            continue
        for area, checksum in files.items():
            if (root, area, checksum) not in known:
                known[root, area, checksum] = points_of_file(root, area, checksum)
        points = {area: known[root, area, checksum] for area, checksum in files.items()}
        if all(points.values()):
            settings.update({f"data.points.{area}": value for area, (value, _) in points.items()})
            where = sorted({how for _, how in points.values()})
            found.append(f"{fold} (no points checksums recorded: from {', '.join(where)})")
    return found


def current_points(folds: dict[str, dict | None]) -> list[str]:
    """Set ``data.points.<area>`` of each fold (``{fold area: settings}``) recording it and ``data.files.<area>``
    to the points of ``root/<area>.h5`` now (``root`` its ``data.root``; ``identity.area_points``) where
    ``root/manifest.json`` lists the fold's file checksum as the area's, or among ``same_points[area]``, and
    the two points checksums differ (module docstring); returns one line per fold so changed, as
    :func:`recover_points`'s."""
    found, manifests = [], {}    # root -> (checksums, same_points) of its manifest: the folds of a run share one
    for fold, settings in folds.items():
        root = settings.get("data.root") if settings else None
        if not isinstance(root, str):
            continue
        if root not in manifests:
            listed, _, same = _manifest_lists(root)
            manifests[root] = listed, same
        listed, same = manifests[root]
        replaced, ruled = [], []
        recorded = sorted(key.removeprefix("data.points.") for key in settings if key.startswith("data.points."))
        for area in recorded:
            file = settings.get(f"data.files.{area}")
            if file is None or (file != listed.get(area) and file not in same.get(area, [])):
                continue
            now = _points_now(root, area)
            if now is not None and now != settings[f"data.points.{area}"]:
                settings[f"data.points.{area}"] = now
                (ruled if file == listed.get(area) else replaced).append(area)
        if replaced or ruled:
            found.append(f"{fold} ({_changed_text(replaced, ruled)}: from {Path(root) / 'manifest.json'})")
    return found


def _manifest_lists(root: str | Path) -> tuple[dict, dict, dict]:
    """What ``root/manifest.json`` lists, ``{area: ...}`` each: its file checksums, points checksums and
    ``same_points`` (``identity.points_of``); empty where there is no manifest or one of no known schema."""
    from pointgeope.data.check import read_manifest
    from pointgeope.data.identity import points_of
    from pointgeope.h5 import SchemaError

    try:
        manifest = read_manifest(root)
    except SchemaError:
        manifest = None
    listed = manifest.get("checksums") if isinstance(manifest, dict) else None
    return (listed if isinstance(listed, dict) else {}), *points_of(manifest)


def _points_now(root: str, area: str) -> str | None:
    """The points checksum of ``root/<area>.h5`` now (``identity.area_points``); ``None`` where unreadable."""
    from pointgeope.data.identity import area_points
    from pointgeope.h5 import SchemaError

    try:
        return area_points(root, [area])[area]
    except (OSError, SchemaError):
        return None


def _changed_text(replaced: list[str], ruled: list[str]) -> str:
    """What :func:`current_points` changed of one fold, in words."""
    parts = []
    if replaced:
        n = len(replaced)
        parts.append(f"its {agreeing(n, 'file', 'files')} of {', '.join(replaced)} since replaced by "
                     f"{agreeing(n, 'one', 'files')} of the same points")
    if ruled:
        parts.append(f"its points of {', '.join(ruled)} recorded with their normals by an older version")
    return "; ".join(parts)
