"""What ``pointgeope prepare`` says it wrote, nanoGPT-style: a line per area (its rooms, points, whether its file
was written or is unchanged, and the parse's rate), its classes' points, the defects repaired, dropped or
refused and the rooms without colour; then the totals and the workers' time (:func:`print_summary`).
"""
from __future__ import annotations

from pathlib import Path

from pointgeope import json_text
from pointgeope.data.color_record import NO_COLOR
from pointgeope.plural import counted as _count  # "1 room", "2 rooms"

__all__ = ["print_summary", "ignored_text"]


def ignored_text(ignored: tuple, area: str) -> str:
    """``ignored folders in Annotations 1 (2 files)`` of ``area``'s ``(path, files)`` pairs; a path ends
    ``Area_N/room/Annotations/folder``, after any folders above the areas (the official zip's top folder)."""
    mine = [files for path, files in ignored if path.split("/")[-4] == area]
    return f"ignored folders in Annotations {len(mine)} ({_count(sum(mine), 'file')})"


def print_summary(out: Path, attrs: dict, refused: dict, stats: dict, changed: set, t_parse: float,
                  t_total: float, jobs: int, ignored: tuple = ()) -> None:
    """nanoGPT-style: what was written, with the counts of points, classes and defects per area (``ignored``:
    the ``(folder inside Annotations, files)`` pairs not read, counted in their area's line)."""
    from pointgeope.constants import CLASS_NAMES
    from pointgeope.h5 import area_path

    for area, rooms in attrs.items():
        s = stats[area]
        if not rooms:
            print(f"{area}: no room written ({_count(len(refused[area]), 'room')} refused)")
            continue
        counts = [sum(int(a["class_counts"][c]) for a in rooms.values()) for c in range(len(CLASS_NAMES))]
        remapped: dict[str, int] = {}
        for a in rooms.values():
            for name, n in json_text.loads(a["remapped_to_clutter"]).items():
                remapped[name] = remapped.get(name, 0) + n
        path = area_path(out, area)
        parsed = (f"{s['parsed']} parsed: {_size(s['bytes'])} at {s['bytes'] / 1e6 / max(s['seconds'], 1e-9):.1f} "
                  f"MB/s per worker, normals {s['normals']:.1f} s" if s["parsed"] else f"normals {s['normals']:.1f} s"
                  if s["renewed"] else "all up to date" if not s.get("recorded") else "none parsed") + (
            f", {s['renewed']} with normals estimated again" if s["renewed"] else "") + (
            f", {s['recorded']} with the colour record added" if s.get("recorded") else "")
        written = f"wrote {path} ({_size(path.stat().st_size)})" if area in changed else f"{path} unchanged"
        print(f"{area}: {_count(len(rooms), 'room')} ({parsed}), {sum(counts):,} points; {written}")
        print("  classes: " + ", ".join(f"{name} {n:,}" for name, n in zip(CLASS_NAMES, counts, strict=True)))
        defects = {key: sum(int(a[key]) for a in rooms.values())
                   for key in ("repaired_lines", "dropped_lines", "clipped_colors")}
        skipped = {key: sum(len(a.get(key, [])) for a in rooms.values())
                   for key in ("empty_files", "binary_files", "lost_objects")}
        scaled = sum(int(a.get("color_scale", 1)) != 1 for a in rooms.values())
        moved = ", ".join(f"{name}->clutter {n:,} points" for name, n in sorted(remapped.items())) or "none"
        print(f"  repaired lines {defects['repaired_lines']}, dropped lines {defects['dropped_lines']}, "
              f"empty files {skipped['empty_files']}, binary files {skipped['binary_files']}, "
              f"lost objects {skipped['lost_objects']}, {ignored_text(ignored, area)}, "
              f"clipped colour values {defects['clipped_colors']}, "
              f"rooms with 0..1 colours scaled {scaled}, refused rooms {len(refused[area])}, "
              f"unknown classes: {moved}")
        if dark := [name for name, a in rooms.items() if a.get(NO_COLOR)]:   # pointgeope.data.color_record
            print(f"  without colour (every point 0 0 0; a model fed colour sees them black): {', '.join(dark)}")
    points = sum(int(a["num_points"]) for rooms in attrs.values() for a in rooms.values())
    num_refused = sum(map(len, refused.values()))
    print(f"prepared {_count(sum(1 for r in attrs.values() if r), 'area')}, "
          f"{_count(sum(map(len, attrs.values())), 'room')} ({num_refused} refused), {points:,} "
          f"points in {t_total:.1f} s; {_work_text(stats, t_parse, jobs)}; "
          f"wrote {out / 'manifest.json'}, {out / 'folds.json'}")


def _size(num_bytes: float) -> str:
    for unit in ("B", "kB", "MB"):
        if num_bytes < 1000:
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return f"{num_bytes:.2f} GB"


def _work_text(stats: dict, t_parse: float, jobs: int) -> str:
    """What the workers did: the text parsed (its rate), else the rooms whose normals alone were renewed, or whose
    colour record was added."""
    total = {key: sum(s.get(key, 0) for s in stats.values())
             for key in ("parsed", "renewed", "recorded", "bytes", "normals")}
    normals = f"--jobs {jobs}; normals {total['normals']:.1f} s of the workers' time"
    again = _count(total["renewed"], "room") if total["renewed"] else ""
    recorded = (f"added the colour record of {_count(total['recorded'], 'room')} from their stored colours"
                if total["recorded"] else "")
    if total["parsed"]:
        return (f"parsed {_size(total['bytes'])} in {t_parse:.1f} s ({total['bytes'] / 1e6 / max(t_parse, 1e-9):.1f}"
                f" MB/s, {normals}" + (f", {again} with normals estimated again" if again else "")
                + (f"; {recorded}" if recorded else "") + ")")
    if again:
        return (f"parsed nothing; estimated the normals of {again} again from their stored points in "
                f"{t_parse:.1f} s ({normals})" + (f"; {recorded}" if recorded else ""))
    return f"parsed nothing; {recorded} in {t_parse:.1f} s" if recorded else "parsed nothing (every room up to date)"
