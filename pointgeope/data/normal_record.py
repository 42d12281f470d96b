"""Which normal estimate a room holds, and which one a run read: ``(normal_k, normal_version)``.

The normals are derived from ``coord`` (:mod:`pointgeope.data.normals`), so they are no part of the points
checksum (:mod:`pointgeope.checksum`): a room's estimate is named by its attributes ``normal_k`` (neighbours
per normal) and ``normal_version`` (:data:`~pointgeope.data.normals.NORMAL_VERSION` of the estimator that made
them). A room of a prepare that wrote ``normal_k`` alone is taken as version 1, the estimate of the versions before
:data:`~pointgeope.data.normals.NORMAL_VERSION`; a room without ``normal_k`` holds no normals (``None``).

- ``prepare`` estimates again, from the stored ``coord``, a room whose estimate is not :func:`current`
  (``data_prep.stale``);
- a run of ``data.normal`` records the estimate of each area file it read (the checkpoint's and
  ``metrics.json``'s ``"data_normals"``: area -> ``{"normal_k": 30, "normal_version": 1}``; an area whose rooms
  hold several, a list of them with the rooms holding each, :func:`area_estimates`; a run of ``data.normal``
  written before the record read version 1 with ``k = 30``, :func:`recorded`); a training resumed on files of
  another estimate records the earlier ones too, in order, each with the point it was read until
  (``"data_normals_earlier"``, :class:`NormalsRead`; :func:`read_text` says it in words);
- a command that uses it on files of another estimate says so in one line (:func:`differing_line`): the
  same points with other normals are no other data (nothing refused), but its scores on them may differ;
- a training of ``data.normal`` on files whose estimate is not :func:`current` (:func:`is_current`) trains on
  them as they are, with one warning line naming them and the ``prepare`` that re-estimates them
  (:func:`not_current_line`; ``train`` says it once a command).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from pointgeope.number_kind import is_integer, is_whole

__all__ = ["NormalsRead", "area_estimates", "current", "describe", "differing_line", "earlier_of", "estimates_in",
           "is_current", "not_current_line", "read_in_training", "read_text", "recorded", "room_estimate", "tested"]

BEFORE_VERSION = {"normal_k": 30, "normal_version": 1}  # the estimate of the versions that recorded none
THEN = ", then "  # between two estimates one area was read with in turn (read_text)
UNTIL = ("epoch", "batch", "step")  # the point of a training an estimate was read until (NormalsRead.earlier)


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
    if not all(is_integer(v) for v in values):
        return None
    return {"normal_k": int(values[0]), "normal_version": int(values[1])}


def is_current(attrs) -> bool:
    """Whether a stored room of attributes ``attrs`` holds this version's estimate: :func:`current`, and written
    with ``normal_version`` (a room of ``normal_k`` alone is an older prepare's, whatever its bytes:
    ``prepare`` estimates it again, ``data_prep.stale``)."""
    return "normal_version" in attrs and room_estimate(attrs) == current()


def not_current_line(root: str | Path, areas) -> str | None:
    """One warning line naming the area files ``root/<area>.h5`` among ``areas`` with a room whose normals are
    not :func:`is_current` (each file with its estimates, :func:`describe`; ``none`` for a room without normals,
    which a reader refuses by name), and the ``prepare`` into ``root`` that estimates them again from the files'
    own ``coord`` (its raw folder the ``source`` of ``root/manifest.json``, else ``RAW``); ``None`` where every
    room is current or a file cannot be read (its readers name the problem)."""
    from pointgeope.data.check import read_manifest
    from pointgeope.errors import UserError
    from pointgeope.h5 import area_path, read_rooms_attrs
    from pointgeope.plural import counted

    found = []
    for area in sorted(set(areas)):     # one text for the same files, whatever order a fold lists its areas in
        rooms = read_rooms_attrs(area_path(root, area)) or {}
        old = [attrs for attrs in rooms.values() if not is_current(attrs)]
        if old:
            shown = sorted({describe(room_estimate(attrs)) + ("" if "normal_version" in attrs or "normal_k" not in
                                                              attrs else " (not recorded)") for attrs in old})
            found.append(f"{area_path(root, area).name} ({len(old)} of {counted(len(rooms), 'room')}: "
                         f"{', '.join(shown)})")
    if not found:
        return None
    try:
        manifest = read_manifest(root)
    except UserError:
        manifest = None
    raw = manifest.get("source") if isinstance(manifest, dict) else None
    raw = shlex.quote(raw) if isinstance(raw, str) and raw else "RAW"
    return (f"warning: {root}: {'; '.join(found)} hold normals of another estimate than this version's "
            f"({describe(current())}); training reads them as they are; "
            f"`pointgeope prepare {raw} {shlex.quote(str(root))}` estimates them again from the files' own "
            "coordinates (seconds per room, no raw file parsed again)")


def area_estimates(root: str | Path, areas) -> dict[str, dict | list | None]:
    """Area -> the estimate of the rooms of ``root/<area>.h5``: ``{"normal_k": 30, "normal_version": 2}`` where
    every room holds it; where they hold several, each of them with the rooms that hold it, sorted by estimate
    (its rooms by name)::

        [{"normal_k": 30, "normal_version": 1, "rooms": ["office_1"]},
         {"normal_k": 30, "normal_version": 2, "rooms": ["hallway_1", "office_2"]}]

    ``None`` where a room holds none (or an attribute that is no integer) or the file cannot be read (its readers
    name the problem)."""
    from pointgeope.h5 import area_path, read_rooms_attrs

    found = {}
    for area in areas:
        try:
            rooms = read_rooms_attrs(area_path(root, area)) or {}
        except (OSError, ValueError):
            rooms = {}
        estimates = {name: room_estimate(attrs) for name, attrs in rooms.items()}
        kinds = sorted({_key(e) for e in estimates.values() if e is not None})
        if not estimates or None in estimates.values():
            found[area] = None
        elif len(kinds) == 1:
            found[area] = dict(zip(_KEYS, kinds[0], strict=True))
        else:
            found[area] = [{**dict(zip(_KEYS, kind, strict=True)), "rooms": sorted(n for n, e in estimates.items()
                                                                      if _key(e) == kind)} for kind in kinds]
    return found


_KEYS = ("normal_k", "normal_version")


def _key(estimate: dict) -> tuple:
    return tuple(estimate[key] for key in _KEYS)


def _is_estimate(value) -> bool:
    return isinstance(value, dict) and all(is_whole(value.get(key)) for key in _KEYS)


def _is_entry(value) -> bool:
    """Whether ``value`` is an area's record (:func:`area_estimates`): one estimate, or several with their rooms."""
    if isinstance(value, list):
        return len(value) > 1 and all(_is_estimate(e) and isinstance(e.get("rooms"), list) for e in value)
    return _is_estimate(value)


def estimates_in(entry) -> list[dict[str, int]]:
    """The estimates (``normal_k``, ``normal_version``) of an area's record (:func:`area_estimates`); ``[]`` for
    ``None``."""
    if isinstance(entry, list):
        return [{key: e[key] for key in _KEYS} for e in entry]
    return [] if entry is None else [entry]


def recorded(ckpt: dict) -> dict[str, dict[str, int]] | None:
    """Area -> the estimate a checkpoint (or ``metrics.json``) records that its run read: its ``"data_normals"``;
    for a run of ``data.normal`` that records none (written before the record), version 1 of ``k = 30`` for
    each area of its ``"data"``; ``None`` for a run that read no normals."""
    data = (ckpt.get("config") or {}).get("data") or {}
    if not data.get("normal"):
        return None
    found = ckpt.get("data_normals")
    if isinstance(found, dict):
        return {area: e for area, e in found.items() if _is_entry(e)}
    return {area: dict(BEFORE_VERSION) for area in (ckpt.get("data") or {})}


def read_in_training(ckpt: dict) -> list[dict[str, int]] | None:
    """Every estimate the training of the checkpoint ``ckpt`` read of any area, each once (sorted): those of
    :func:`recorded` and those it read before a resume on files of another (:func:`earlier_of`); ``None`` for a run
    that read no normals. What ``predict`` compares a scan's estimate with."""
    read = recorded(ckpt)
    if read is None:
        return None
    entries = [*read.values(), *(entry for record in earlier_of(ckpt) for entry in record["data_normals"].values()
                                 if _is_entry(entry))]
    keys = sorted({_key(e) for entry in entries for e in estimates_in(entry)})
    return [dict(zip(_KEYS, key, strict=True)) for key in keys]


def tested(ckpt: dict, root: str | Path, areas) -> dict[str, dict]:
    """``{"data_normals": ...}`` of a fold's ``metrics.json``: the estimates its checkpoint records it read, those of
    the test ``areas`` as evaluated now (:func:`area_estimates` of ``root``: the normals its scores came from,
    another estimate than in training where ``evaluate`` warned of it); ``{}`` for a checkpoint recording none."""
    read = ckpt.get("data_normals")
    if not isinstance(read, dict):
        return {}
    return {"data_normals": {**read, **{a: e for a, e in area_estimates(root, areas).items() if e is not None}},
            **({"data_normals_earlier": earlier} if (earlier := earlier_of(ckpt)) else {})}


def describe(estimate: dict | list | None) -> str:
    """``k=30, version 1``; ``none`` for ``None``; an area of several (:func:`area_estimates`):
    ``k=30, version 1 in 1 room and k=30, version 2 in 2 rooms``."""
    from pointgeope.plural import counted

    if isinstance(estimate, list):
        return " and ".join(f"{describe(e)} in {counted(len(e['rooms']), 'room')}" for e in estimate)
    if not estimate:
        return "none"
    return f"k={estimate.get('normal_k')}, version {estimate.get('normal_version')}"


def differing_line(what: str, read: dict[str, dict] | None, now: dict[str, dict | None],
                   resumed: bool = False) -> str | None:
    """One warning line where an area of ``now`` (area -> the estimate at hand) holds another estimate than
    the run ``what`` read (``read``: area -> estimate, :func:`recorded`); ``None`` where none differs or
    the run read no normals. ``resumed``: said of a training that goes on with the files now
    (:meth:`NormalsRead.resumed`)."""
    if read is None:
        return None
    differ = {area: (read[area], estimate) for area, estimate in sorted(now.items())
              if area in read and estimate is not None and estimate != read[area]}
    if not differ:
        return None
    shown = "; ".join(f"{area} {describe(old)} then, {describe(new)} now" for area, (old, new) in differ.items())
    if resumed:
        return (f"warning: {what} read normals of another estimate than the files hold now ({shown}): the same "
                "points, other normals; training goes on with those of the files now, and its checkpoints record "
                "both (data_normals_earlier); `pointgeope train --force` trains the fold on one estimate from scratch")
    return (f"warning: {what} read normals of another estimate than the files hold now ({shown}): the same points, "
            "other normals, so its scores on them may differ from those it was measured with; retrain it to use "
            "the estimate of the files now")


def earlier_of(record: dict) -> list[dict]:
    """The estimates a checkpoint (or ``metrics.json``) records that its training read before those of its
    ``"data_normals"`` (:class:`NormalsRead`), in order; ``[]`` where it records none (read one estimate
    throughout, or written before the record), an entry that is not such a record left out."""
    found = record.get("data_normals_earlier")
    return [e for e in found if isinstance(e, dict) and isinstance(e.get("data_normals"), dict)
            and isinstance(e.get("until"), dict) and all(is_whole(e["until"].get(key)) for key in UNTIL)
            ] if isinstance(found, list) else []


@dataclass
class NormalsRead:
    """The normal estimates a training of ``data.normal`` read, as its checkpoints record them (:meth:`saved`):

    - ``now``: area -> the estimate of the fold's files it reads now (:func:`area_estimates`): ``"data_normals"``;
    - ``earlier``: ``"data_normals_earlier"`` (absent where empty), in order, the records it read before them,
      each ``{"data_normals": {area: ...}, "until": {"epoch": 3, "batch": 0, "step": 120}}``: read up to that
      point of the training (``engine.state.LoopState``: after epoch 3, none of epoch 4's batches), where a resume
      found the files of another estimate (:meth:`resumed`) and read theirs from the next step on.
    """

    now: dict[str, dict | list | None]
    earlier: list[dict] = field(default_factory=list)

    def resumed(self, ckpt: dict) -> None:
        """Resuming the checkpoint ``ckpt``: its earlier records, and the estimates it read (:func:`recorded`) up
        to its ``epoch``, ``batch`` and ``step`` where an area of the files now holds another."""
        self.earlier = earlier_of(ckpt)
        read = recorded(ckpt)
        if read is not None and any(self.now.get(a) is not None and self.now[a] != e for a, e in read.items()):
            self.earlier.append({"data_normals": read, "until": {key: ckpt.get(key) for key in UNTIL}})

    def saved(self) -> dict:
        """The checkpoint's entries: ``"data_normals"`` and, where it has any, ``"data_normals_earlier"``."""
        return {"data_normals": self.now, **({"data_normals_earlier": self.earlier} if self.earlier else {})}


def _until(until: dict) -> str:
    """``epoch 3 (step 120)``; inside an epoch: ``batch 5 of epoch 4 (step 125)``."""
    where = (f"batch {until['batch']} of epoch {until['epoch'] + 1}" if until["batch"]
             else f"epoch {until['epoch']}")
    return f"{where} (step {until['step']})"


def read_text(area: str, entry, earlier: list[dict]) -> str:
    """The estimates the training of ``earlier`` (:func:`earlier_of`) read of ``area``, the last one ``entry``, in
    words: ``k=30, version 1 until epoch 3 (step 120), then k=30, version 2``; :func:`describe` of ``entry``
    where it read one throughout."""
    text, last = "", entry
    for record in reversed(earlier):    # from the last change back to the first
        old = record["data_normals"].get(area)
        if _is_entry(old) and old != last:
            text = f"{describe(old)} until {_until(record['until'])}{THEN}" + text
            last = old
    if not text:
        return describe(entry)
    return text + describe(entry)
