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

A fold that records its points may have trained on a file that a later ``prepare`` into the same folder
replaced with one of the same points and more arrays: the file of a prepare before normals, whose points
checksum (no ``normal``) differs from the new file's. ``prepare`` lists the old file's checksum under
``same_points`` (``pointgeope.data.identity.prepared_points``), and ``train``/``evaluate`` accept it;
:func:`current_points` takes such a fold's points as the manifest's current ones, so that folds trained before
and after that prepare (and runs side by side) compare as one data set.
"""
from __future__ import annotations

from pathlib import Path


def points_of_file(root: str | Path, area: str, checksum: str) -> tuple[str, str] | None:
    """``(points checksum, how)`` of the file of ``area`` whose whole-file checksum is ``checksum``, from
    what is at hand under ``root`` (module docstring); ``None`` where nothing there tells."""
    from pointgeope.checksum import file_checksum
    from pointgeope.data.check import read_manifest
    from pointgeope.data.identity import area_points, points_of
    from pointgeope.h5 import SchemaError, area_path

    try:
        manifest = read_manifest(root)
    except SchemaError:
        manifest = None
    points, same = points_of(manifest)
    listed = manifest.get("checksums") if isinstance(manifest, dict) else None
    listed = listed.get(area) if isinstance(listed, dict) else None
    if area in points and (checksum == listed or checksum in same.get(area, [])):
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
    to the points ``manifest.json`` under its ``data.root`` lists now where that manifest lists the fold's file
    checksum among ``same_points[area]`` (module docstring) and the two points checksums differ; returns one
    line per fold so changed, as :func:`recover_points`'s."""
    from pointgeope.data.identity import manifest_points

    found, manifests = [], {}    # root -> manifest_points(root): the folds of a run share one root
    for fold, settings in folds.items():
        root = settings.get("data.root") if settings else None
        if not isinstance(root, str):
            continue
        if root not in manifests:
            manifests[root] = manifest_points(root)
        points, same = manifests[root]
        changed = sorted(area for key, value in settings.items() if key.startswith("data.points.")
                         and (area := key.removeprefix("data.points.")) in points and value != points[area]
                         and settings.get(f"data.files.{area}") in same.get(area, []))
        if changed:
            settings.update({f"data.points.{area}": points[area] for area in changed})
            found.append(f"{fold} (its file{'s' if len(changed) > 1 else ''} of {', '.join(changed)} since replaced "
                         f"by {'files' if len(changed) > 1 else 'one'} of the same points: from "
                         f"{Path(root) / 'manifest.json'})")
    return found
