"""The two records ``pointgeope synth`` keeps in OUT, read back on a rerun: ``.synth_settings.json`` (the settings,
written before the first room) and ``synth_manifest.json`` (the rooms, defects and counts, written last).

Either may be damaged (cut short, edited, bytes that are not UTF-8). Damaged settings cannot say which run
the rooms belong to: :func:`recorded_settings` refuses them in one line naming the file. A damaged manifest loses
nothing, since every room is drawn again from the settings alone: :func:`complete_manifest` does not take it for
a finished run, so the run resumes, keeps the rooms written and writes the manifest anew.
"""
from __future__ import annotations

from pathlib import Path

from pointgeope import json_text
from pointgeope.number_kind import is_whole
from pointgeope.recorded_text import bounded


def recorded_settings(path: Path, out: Path) -> dict:
    """The settings recorded at ``path`` (``OUT/.synth_settings.json``): a mapping of setting -> value; a
    ``ValueError`` naming the file and saying what to do when it is not valid JSON or not a mapping."""
    try:
        found = json_text.loads(path.read_bytes())
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        why = f"not valid JSON ({bounded(str(err), 200)})"
    else:
        if isinstance(found, dict):
            return found
        why = f"a JSON {type(found).__name__}, not the mapping of settings synth writes"
    raise ValueError(f"{path}: {why}, so the rooms in {out} cannot be told apart from another run's; remove {out} "
                     "and run synth again, or choose another OUT")


def complete_manifest(path: Path, settings: dict, planned: set[tuple[str, str]]) -> dict | None:
    """The manifest at ``path`` when it records a finished run of ``settings``: valid JSON, those settings,
    exactly the ``planned`` ``(area, room)`` pairs, each with the mapping of its annotation ``files``, the totals
    the summary prints, which are the sums of the rooms' records (:func:`_totals`), and defects of their types;
    ``None`` otherwise (missing, damaged, another run's or unfinished)."""
    try:
        done = json_text.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict) or done.get("config") != settings:
        return None
    areas, totals, defects = done.get("areas"), done.get("totals"), done.get("defects")
    if not (isinstance(areas, dict) and all(isinstance(rooms, dict) for rooms in areas.values())
            and {(area, room) for area, rooms in areas.items() for room in rooms} == planned
            and all(isinstance(record, dict) and isinstance(record.get("files"), dict)
                    for rooms in areas.values() for record in rooms.values())):
        return None
    if not (isinstance(totals, dict) and totals == _totals([record for rooms in areas.values()
                                                             for record in rooms.values()])):
        return None
    if not isinstance(defects, list) or not all(_sound_defect(d) for d in defects):
        return None
    return done


def _totals(records: list[dict]) -> dict | None:
    """``totals`` as synth writes it from the rooms' ``records``: the rooms, all points and each class's points
    (the sums of the records' ``class_counts``); ``None`` where a record's counts are not whole numbers."""
    counts: dict[str, int] = {}
    for record in records:
        if not (isinstance(found := record.get("class_counts"), dict) and all(map(is_whole, found.values()))):
            return None
        for name, count in found.items():
            counts[name] = counts.get(name, 0) + count
    return {"rooms": len(records), "points": sum(counts.values()), "class_counts": counts}


def _sound_defect(defect) -> bool:
    """A defect entry as the summary prints it: ``kind`` and ``file`` strings; a stairs entry's points and the
    class it maps to."""
    return (isinstance(defect, dict) and isinstance(defect.get("kind"), str) and isinstance(defect.get("file"), str)
            and (defect["kind"] != "stairs"
                 or is_whole(defect.get("points")) and isinstance(defect.get("maps_to"), str)))
