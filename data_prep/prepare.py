"""Prepare raw S3DIS (a folder or a .zip of Stanford3dDataset_v1.2[_Aligned_Version]) as OUT/Area_N.h5.

Writes OUT/Area_N.h5 (one group per room), OUT/manifest.json (points and class histogram per room) and
OUT/folds.json (fold k tests on Area_k), then a summary per area. Reruns skip rooms already prepared
from the same files; a killed run, rerun, finishes with the same files as an uninterrupted one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PrepareConfig:
    raw: Path
    out: Path
    jobs: int = 1
    force: bool = False  # reparse every room, ignoring prepared and work files
    progress: bool = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("raw", type=Path, help="raw S3DIS folder or .zip (Area_N/<room>/Annotations/*.txt)")
    parser.add_argument("out", type=Path, help="output folder for Area_N.h5, manifest.json, folds.json")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="parallel worker processes (default: the CPU count, at most 8)")
    parser.add_argument("--force", action="store_true", help="reparse every room even if it is up to date")


def main(args: argparse.Namespace) -> int:
    from data_prep.source import SourceError

    if args.jobs < 1:
        print(f"error: expected --jobs >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    try:
        prepare(PrepareConfig(args.raw, args.out, args.jobs, args.force))
    except SourceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _parse_room(task):
    """Worker: parse one room into its work file; return what the summary needs (not the arrays)."""
    from data_prep.room import load_room
    from data_prep.writer import write_room_file

    source, room, path = task
    data = load_room(source, room)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_room_file(path, room.name, data.arrays, data.attrs)
    return room.area, room.name, data.attrs, data.messages, data.num_bytes, data.seconds


def prepare(cfg: PrepareConfig) -> dict:
    """Prepare ``cfg.raw`` into ``cfg.out``; return the manifest. Resumable and deterministic:

    1. scan RAW: the rooms, each with a signature of its annotation files (names, sizes, stamps);
    2. a room is up to date when ``Area_N.h5`` or a work file ``OUT/.work/Area_N/<room>.h5`` (left by
       an interrupted run) holds it with the same signature; the others are parsed by ``cfg.jobs``
       worker processes, each room into its own work file (written atomically);
    3. each area with a changed room is assembled from these, in room order, into ``Area_N.h5``
       (atomic), without timestamps: the same rooms give the same bytes, whatever ``jobs`` was;
    4. ``manifest.json`` and ``folds.json`` are rewritten from the rooms' attributes; ``.work`` goes.
    """
    import multiprocessing

    import h5py
    from tqdm import tqdm

    from data_prep.source import open_source
    from data_prep.writer import folds, manifest, read_attrs, read_room, write_area, write_json

    t0 = time.perf_counter()
    source = open_source(cfg.raw)
    rooms = source.rooms()
    for path in source.ignored:
        print(f"warning: {path}: ignored (not a .txt annotation file)", file=sys.stderr)
    out, work = Path(cfg.out), Path(cfg.out) / ".work"
    out.mkdir(parents=True, exist_ok=True)
    areas = list(dict.fromkeys(r.area for r in rooms))

    # 2. What is up to date, and where: `held` names the file holding each room already parsed.
    attrs: dict[str, dict[str, dict]] = {a: {} for a in areas}
    held: dict[tuple[str, str], Path] = {}
    todo, changed = [], set()
    for area in areas:
        area_file = out / f"{area}.h5"
        old = {} if cfg.force else (read_attrs(area_file) or {})
        names = [r.name for r in rooms if r.area == area]
        if set(old) != set(names):
            changed.add(area)
        for room in (r for r in rooms if r.area == area):
            sig, work_file = room.signature(), work / area / f"{room.name}.h5"
            if old.get(room.name, {}).get("signature") == sig:
                attrs[area][room.name], held[area, room.name] = old[room.name], area_file
                continue
            changed.add(area)
            cached = None if cfg.force else (read_attrs(work_file) or {}).get(room.name)
            if cached is not None and cached.get("signature") == sig:
                attrs[area][room.name], held[area, room.name] = cached, work_file
            else:
                todo.append((source, room, work_file))

    # Parse, biggest rooms first so that the workers finish together.
    todo.sort(key=lambda task: -task[1].num_bytes)
    stats = {a: {"parsed": 0, "bytes": 0, "seconds": 0.0} for a in areas}
    t_parse = time.perf_counter()
    results = map(_parse_room, todo)
    pool = multiprocessing.get_context().Pool(min(cfg.jobs, len(todo))) if cfg.jobs > 1 and len(todo) > 1 else None
    try:
        if pool is not None:
            results = pool.imap_unordered(_parse_room, todo)
        bar = tqdm(results, total=len(todo), desc="parsing rooms", unit="room", disable=not cfg.progress or None)
        for area, name, room_attrs, messages, num_bytes, seconds in bar:
            for message in messages:
                bar.write(f"warning: {message}", file=sys.stderr)
            attrs[area][name], held[area, name] = room_attrs, work / area / f"{name}.h5"
            s = stats[area]
            s["parsed"], s["bytes"], s["seconds"] = s["parsed"] + 1, s["bytes"] + num_bytes, s["seconds"] + seconds
    finally:
        if pool is not None:
            pool.terminate()
    t_parse = time.perf_counter() - t_parse
    attrs = {a: {r.name: attrs[a][r.name] for r in rooms if r.area == a} for a in areas}  # room order

    # 3. Assemble each changed area in room order; then its work files are no longer needed.
    for area in areas:
        if area not in changed:
            continue
        names = [r.name for r in rooms if r.area == area]

        def records(area=area, names=names):
            for name in names:
                with h5py.File(held[area, name], "r") as f:
                    arrays, room_attrs = read_room(f[name])
                yield name, arrays, room_attrs

        write_area(out / f"{area}.h5", area, records())
        shutil.rmtree(work / area, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)

    # 4. Manifest, folds, summary.
    result = manifest(source.location, attrs)
    write_json(out / "manifest.json", result)
    write_json(out / "folds.json", folds(areas))
    extra = sorted(p.name for p in out.glob("Area_*.h5") if p.stem not in areas)
    if extra:
        print(f"warning: {out} also holds {', '.join(extra)}, not in {source.location}; "
              "manifest.json and folds.json list only the areas prepared now", file=sys.stderr)
    _print_summary(out, attrs, stats, changed, t_parse, time.perf_counter() - t0, cfg.jobs)
    return result


def _print_summary(out: Path, attrs: dict, stats: dict, changed: set, t_parse: float, t_total: float,
                   jobs: int) -> None:
    """nanoGPT-style: what was written, with the counts of points, classes and defects per area."""
    from pointgeope.constants import CLASS_NAMES

    total_bytes = sum(s["bytes"] for s in stats.values())
    for area, rooms in attrs.items():
        s = stats[area]
        counts = [sum(int(a["class_counts"][c]) for a in rooms.values()) for c in range(len(CLASS_NAMES))]
        remapped: dict[str, int] = {}
        for a in rooms.values():
            for name, n in json.loads(a["remapped_to_clutter"]).items():
                remapped[name] = remapped.get(name, 0) + n
        path = out / f"{area}.h5"
        parsed = (f"{s['parsed']} parsed: {_size(s['bytes'])} at {s['bytes'] / 1e6 / max(s['seconds'], 1e-9):.1f} "
                  "MB/s per worker" if s["parsed"] else "all up to date")
        written = f"wrote {path} ({_size(path.stat().st_size)})" if area in changed else f"{path} unchanged"
        print(f"{area}: {_count(len(rooms), 'room')} ({parsed}), {sum(counts):,} points; {written}")
        print("  classes: " + ", ".join(f"{name} {n:,}" for name, n in zip(CLASS_NAMES, counts)))
        defects = {key: sum(int(a[key]) for a in rooms.values())
                   for key in ("repaired_lines", "dropped_lines", "clipped_colors")}
        empty = sum(len(a["empty_files"]) for a in rooms.values())
        moved = ", ".join(f"{name}->clutter {n:,} points" for name, n in sorted(remapped.items())) or "none"
        print(f"  repaired lines {defects['repaired_lines']}, dropped lines {defects['dropped_lines']}, "
              f"empty files {empty}, clipped colours {defects['clipped_colors']}, unknown classes: {moved}")
    points = sum(int(a["num_points"]) for rooms in attrs.values() for a in rooms.values())
    print(f"prepared {_count(len(attrs), 'area')}, {_count(sum(map(len, attrs.values())), 'room')}, {points:,} "
          f"points in {t_total:.1f} s; parsed {_size(total_bytes)} in {t_parse:.1f} s "
          f"({total_bytes / 1e6 / max(t_parse, 1e-9):.1f} MB/s, --jobs {jobs}); "
          f"wrote {out / 'manifest.json'}, {out / 'folds.json'}")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _size(num_bytes: float) -> str:
    for unit in ("B", "kB", "MB"):
        if num_bytes < 1000:
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return f"{num_bytes:.2f} GB"
