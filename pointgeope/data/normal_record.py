"""Which normal estimate a room holds, and which one a run read: ``(normal_k, normal_version)``.

The normals are derived from ``coord`` (:mod:`pointgeope.data.normals`), so they are no part of the points
checksum (:mod:`pointgeope.checksum`): a room's estimate is named by its attributes ``normal_k`` (neighbours
per normal) and ``normal_version`` (:data:`~pointgeope.data.normals.NORMAL_VERSION` of the estimator that made
them). A room of a prepare that wrote ``normal_k`` alone holds version 1, the estimate of every version before
the attribute; a room without ``normal_k`` holds no normals (``None``).

- ``prepare`` estimates again, from the stored ``coord``, a room whose estimate is not :func:`current`
  (``data_prep.stale``);
- a run of ``data.normal`` records the estimate of each area file it read (the checkpoint's and
  ``metrics.json``'s ``"data_normals"``: area -> ``{"normal_k": 30, "normal_version": 1}``; a run of
  ``data.normal`` written before the record read version 1 with ``k = 30``, :func:`recorded`);
- a command that uses it on files of another estimate says so in one line (:func:`differing_line`): the
  same points with other normals are no other data (nothing refused), but its scores on them may differ.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["area_estimates", "current", "describe", "differing_line", "recorded", "room_estimate"]

BEFORE_VERSION = {"normal_k": 30, "normal_version": 1}  # the estimate of the versions that recorded none


def current() -> dict[str, int]:
    """The estimate ``prepare`` and ``predict`` make now."""
    from pointgeope.data.normals import K_NORMAL, NORMAL_VERSION

    return {"normal_k": int(K_NORMAL), "normal_version": int(NORMAL_VERSION)}


def room_estimate(attrs) -> dict[str, int] | None:
    """The estimate of a stored room of attributes ``attrs`` (module docstring); ``None`` without normals, or
    where an attribute is no integer (a damaged file: ``prepare`` estimates its normals again)."""
    if "normal_k" not in attrs:
        return None
    values = (attrs["normal_k"], attrs.get("normal_version", 1))
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        return None
    return {"normal_k": int(values[0]), "normal_version": int(values[1])}


def area_estimates(root: str | Path, areas) -> dict[str, dict[str, int] | None]:
    """Area -> the estimate every room of ``root/<area>.h5`` holds; ``None`` where a room holds none, the rooms
    hold several, or the file cannot be read (its readers name the problem)."""
    from pointgeope.h5 import area_path, read_rooms_attrs

    found = {}
    for area in areas:
        try:
            rooms = read_rooms_attrs(area_path(root, area)) or {}
        except (OSError, ValueError):
            rooms = {}
        estimates = [room_estimate(attrs) for attrs in rooms.values()]
        found[area] = estimates[0] if estimates and all(e == estimates[0] for e in estimates) else None
    return found


def recorded(ckpt: dict) -> dict[str, dict[str, int]] | None:
    """Area -> the estimate a checkpoint (or ``metrics.json``) records that its run read: its ``"data_normals"``;
    for a run of ``data.normal`` that records none (written before the record), version 1 of ``k = 30`` for
    each area of its ``"data"``; ``None`` for a run that read no normals."""
    data = (ckpt.get("config") or {}).get("data") or {}
    if not data.get("normal"):
        return None
    found = ckpt.get("data_normals")
    if isinstance(found, dict):
        return {area: e for area, e in found.items() if isinstance(e, dict)}
    return {area: dict(BEFORE_VERSION) for area in (ckpt.get("data") or {})}


def describe(estimate: dict | None) -> str:
    """``k=30, version 1``; ``none`` for ``None``."""
    if not estimate:
        return "none"
    return f"k={estimate.get('normal_k')}, version {estimate.get('normal_version')}"


def differing_line(what: str, read: dict[str, dict] | None, now: dict[str, dict | None]) -> str | None:
    """One warning line where an area of ``now`` (area -> the estimate at hand) holds another estimate than
    the run ``what`` read (``read``: area -> estimate, :func:`recorded`); ``None`` where none differs or
    the run read no normals."""
    if read is None:
        return None
    differ = {area: (read[area], estimate) for area, estimate in sorted(now.items())
              if area in read and estimate is not None and estimate != read[area]}
    if not differ:
        return None
    shown = "; ".join(f"{area} {describe(old)} then, {describe(new)} now" for area, (old, new) in differ.items())
    return (f"warning: {what} read normals of another estimate than the files hold now ({shown}): the same points, "
            "other normals, so its scores on them may differ from those it was measured with; retrain it to use "
            "the estimate of the files now")
