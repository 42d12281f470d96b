"""The prepare pipeline: raw S3DIS rooms -> per-room work files -> ``OUT/Area_N.h5``, ``manifest.json``,
``folds.json``, resumable and deterministic (:func:`prepare` lists the steps). What the command accepts
and writes: ``pointgeope/commands/prepare.py``; the rooms are read and validated by ``data_prep/room.py``
and written through ``pointgeope/h5.py``.
"""
from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.limits import PointLimits, ZipLimits
from data_prep.summary import print_summary
from pointgeope import json_text
from pointgeope.errors import UserError
from pointgeope.plural import counted as _count  # "1 room", "2 rooms"


@dataclass(frozen=True)
class PrepareConfig:
    raw: Path
    out: Path
    jobs: int = 1
    force: bool = False  # reparse every room, ignoring prepared and work files
    progress: bool = True
    limits: PointLimits = field(default_factory=PointLimits)
    zip_limits: ZipLimits = field(default_factory=ZipLimits)


@dataclass
class Stock:
    """Every room of RAW and where it stands: the one record that the steps of :func:`prepare` fill in turn.

    Attributes:
        areas: the areas of RAW, in order.
        previous: area -> room -> attributes of the rooms in ``Area_N.h5`` as it is on disk, when its
            checksum matches ``manifest.json`` (else ``{}``: the file is rebuilt).
        ready: area -> room -> attributes of each room with valid points (already held, or parsed now).
        held: (area, room) -> the file holding that room: ``Area_N.h5`` or its work file.
        refused: area -> room -> ``{"reason", "signature"}``, the rooms not written; ``manifest.json``
            keeps them, so that an unchanged refused room is not parsed again.
        checksums: area -> checksum of the ``Area_N.h5`` on disk, when it is trusted (``previous``).
        todo: the rooms to parse now, as worker tasks ``(source, room, work file, limits, held)``: ``held`` is
            ``None``, or ``(file holding it, data_prep.stale's need)`` for a room renewed from its stored record.
    """

    areas: list[str]
    previous: dict[str, dict[str, dict]] = field(default_factory=dict)
    ready: dict[str, dict[str, dict]] = field(default_factory=dict)
    held: dict[tuple[str, str], Path] = field(default_factory=dict)
    refused: dict[str, dict[str, dict]] = field(default_factory=dict)
    todo: list = field(default_factory=list)
    checksums: dict[str, str] = field(default_factory=dict)


# OUT/.work/assembled.json: area -> checksum of each Area_N.h5 written since manifest.json was: a run killed
# before its manifest trusts these files on rerun, where their rooms' work files are already gone; lineage.json:
# area -> [that checksum, points, same_points], which only the file it replaced told (data.identity.prepared_points).
ASSEMBLED, LINEAGE = "assembled.json", "lineage.json"


def _work_file(out: Path, area: str, room: str) -> Path:
    """Where a parsed room waits until its area is assembled: ``OUT/.work/Area_N/<room>.h5``."""
    from pointgeope.paths import inside

    folder = out / ".work" / area
    return inside(folder, folder / f"{room}.h5", f"room {area}/{room}", "the work folder")


def prepare(cfg: PrepareConfig) -> dict:
    """Prepare ``cfg.raw`` into ``cfg.out``; return the manifest. Resumable and deterministic:

    1. scan RAW: the rooms, each with a signature of its annotation files (names, sizes, stamps) and of
       the point limits; refuse zip members beyond ``cfg.zip_limits`` before parsing anything;
    2. a room is up to date when ``Area_N.h5`` (if it matches its checksum in ``manifest.json``) or a work
       file ``OUT/.work/Area_N/<room>.h5`` (left by an interrupted run) holds it with the same signature,
       or ``manifest.json`` lists it as refused with that signature; the others are parsed by ``cfg.jobs``
       worker processes, each room into its own work file (written atomically);
    3. each area whose rooms changed is assembled from these, in room order, into ``Area_N.h5`` (atomic),
       without timestamps: the same rooms give the same bytes, whatever ``jobs`` was;
       each area's checksum is recorded in ``.work/assembled.json`` before it replaces ``Area_N.h5``
       (a kill at any point loses no parsed room and leaves no file the rerun distrusts); an area whose
       every room is refused now has its previous file moved aside to ``Area_N.h5.refused``;
    4. ``manifest.json`` (with each area file's checksum) and ``folds.json`` are rewritten; then ``.work`` goes.
    """
    import h5py  # noqa: F401  (a missing toolkit package is one line before OUT holds even its lock files)

    from pointgeope.atomic import remove_leftovers, writable_folder
    from pointgeope.lock import folder_lock

    t0 = time.perf_counter()
    source, rooms = _scan_raw(cfg)  # 1: every problem of RAW's layout is found before any work
    out = writable_folder(cfg.out, "OUT")
    with folder_lock(out, f"pointgeope prepare {cfg.raw} {cfg.out}", readers=True):  # not while train reads
        remove_leftovers(out)  # the temporary files of a killed run; its work files stay and are reused
        old_manifest = {} if cfg.force else _read_manifest(out)
        stock = _take_stock(cfg, source, rooms, out, old_manifest)  # 2: what is up to date
        try:
            stats, t_parse = _parse_all(cfg, stock)  # 2: the rest, into work files
        finally:  # a worker stopped mid-write (another failed, or it was killed) leaves its temporary file
            remove_leftovers(out)
        # The manifest lists rooms in RAW's order, whatever order the workers finished in.
        stock.ready = {a: {r.name: stock.ready[a][r.name] for r in rooms if r.area == a and r.name in stock.ready[a]}
                       for a in stock.areas}
        written = [a for a in stock.areas if stock.ready[a]]
        if not written:
            raise UserError(f"{source.location}: no room holds a valid point, nothing written (see the warnings "
                            "above); check the files or the limits (--max-extent, --outliers)")
        changed, checksums, points = _assemble(out, stock, written, cfg.limits, old_manifest)  # 3
        result = _write_manifests(out, source.location, stock, written, (checksums, points),
                                  source.ignored_folders)  # 4
        shutil.rmtree(out / ".work", ignore_errors=True)  # only now: it holds the checksums of step 3
        print_summary(out, stock.ready, stock.refused, stats, changed, t_parse, time.perf_counter() - t0, cfg.jobs,
                      source.ignored_folders)
        return result


def _scan_raw(cfg: PrepareConfig) -> tuple:
    """The source and its rooms, every zip member checked against ``cfg.zip_limits``; non-annotation
    files are named in a warning."""
    from data_prep.source import open_source

    source = open_source(cfg.raw, cfg.zip_limits)
    rooms = source.rooms()
    for room in rooms:
        for entry in room.files:
            source.check(entry)
    for path in source.ignored:
        print(f"warning: {path}: ignored (not a .txt annotation file)", file=sys.stderr)
    for path, files in source.ignored_folders:  # its objects would be lost without a word
        print(f"warning: {path}: ignored (a folder inside Annotations, {_count(files, 'file')} not read); only the "
              "<class>_<k>.txt files directly in Annotations are prepared: move them up to keep them", file=sys.stderr)
    return source, rooms


def _read_manifest(out: Path, name: str = "manifest.json") -> dict:
    try:
        old = json_text.loads((out / name).read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def _trusted_attrs(out: Path, area: str, old_manifest: dict, force: bool) -> tuple[dict, str | None]:
    """Room -> attrs of an existing ``Area_N.h5`` whose checksum matches ``manifest.json`` or, written by
    a run killed before its manifest, ``.work/assembled.json``, and that checksum (else ``({}, None)``)."""
    from pointgeope.checksum import file_checksum
    from pointgeope.h5 import area_path, read_rooms_attrs

    path = area_path(out, area)
    if force or not path.is_file():
        return {}, None
    checksums = old_manifest.get("checksums")
    found = ((checksums if isinstance(checksums, dict) else {}).get(area),
             _read_manifest(out / ".work", ASSEMBLED).get(area))
    expected = {c for c in found if isinstance(c, str)}  # a damaged entry ({}, []) is no checksum: it was a TypeError
    if not expected or (actual := file_checksum(path)) not in expected:  # no checksum: no file read
        why = "does not match its checksum in" if expected else "has no checksum in"
        print(f"warning: {path} {why} {out / 'manifest.json'}; rebuilding it", file=sys.stderr)
        return {}, None
    return read_rooms_attrs(path) or {}, actual


def _take_stock(cfg: PrepareConfig, source, rooms: list, out: Path, old_manifest: dict) -> Stock:
    """Step 2 without parsing: each room of RAW is held (by ``Area_N.h5`` or a work file), refused
    before, or to parse, by comparing its signature with the one stored where it was written; a held room
    whose normals are not this version's is to have them estimated again, one without the colour record to have
    it recorded (``data_prep.stale``)."""
    from data_prep.stale import NORMALS, PARSE, stale
    from pointgeope.data.normal_record import current, describe
    from pointgeope.h5 import area_path, read_rooms_attrs

    stock = Stock(areas=list(dict.fromkeys(r.area for r in rooms)))
    old_refused = old_manifest.get("refused", {}) if isinstance(old_manifest.get("refused"), dict) else {}
    renewed: dict[tuple[str, str], int] = {}  # (area, need) -> rooms held with another normal estimate (or none),
    # estimated again, or without the colour record, recorded
    for area in stock.areas:
        stock.ready[area], stock.refused[area] = {}, {}
        previous, stock.checksums[area] = _trusted_attrs(out, area, old_manifest, cfg.force)
        stock.previous[area] = previous
        for room in (r for r in rooms if r.area == area):
            sig, work_file = room.signature(cfg.limits), _work_file(out, area, room.name)
            cached = None if cfg.force else (read_rooms_attrs(work_file) or {}).get(room.name)
            was_refused = old_refused.get(area, {}).get(room.name, {})
            held = sorted(((need is not None, where, attrs, need) for where, attrs in
                           ((area_path(out, area), previous.get(room.name)), (work_file, cached))
                           if attrs is not None and attrs.get("signature") == sig
                           and (need := stale(where, room, attrs)) != PARSE), key=lambda c: c[0])  # up to date first
            held = held[0][1:] if held else None
            if held is not None and held[2] is None:
                stock.ready[area][room.name], stock.held[area, room.name] = held[1], held[0]
            elif held is not None:  # only its normals (estimated again from its stored coord) or colour record
                stock.todo.append((source, room, work_file, cfg.limits, (held[0], held[2])))
                renewed[area, held[2]] = renewed.get((area, held[2]), 0) + 1
            elif was_refused.get("signature") == sig:
                stock.refused[area][room.name] = was_refused
            else:
                stock.todo.append((source, room, work_file, cfg.limits, None))
    for (area, need), n in renewed.items():
        print(f"note: {area}: {_count(n, 'room')} stored without this version's normals (an older prepare): estimating "
              f"them again from their stored points ({describe(current())}), their raw files not parsed again"
              if need == NORMALS else f"note: {area}: {_count(n, 'room')} stored before prepare recorded the rooms "
              "without colour (an older prepare): reading their stored colours to record it, their normals and raw "
              "files as they are", file=sys.stderr)
    return stock


def _parse_room(task):
    """Worker: parse one room into its work file (or, where the task names the file holding it, estimate its
    normals again: ``data_prep.renormal``); return what the summary needs (not the arrays)."""
    from data_prep.renormal import recorded_room, renormal_room
    from data_prep.room import load_room
    from data_prep.stale import NORMALS
    from pointgeope.h5 import write_room_file

    source, room, path, limits, held = task
    data = (load_room(source, room, limits) if held is None else
            renormal_room(held[0], room.name) if held[1] == NORMALS else recorded_room(held[0], room.name))
    if data.refused is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_room_file(path, room.name, data.arrays, data.attrs)
    return (room.area, room.name, data.attrs, data.messages, data.num_bytes, (data.seconds, data.normal_seconds),
            data.refused)


def _parse_all(cfg: PrepareConfig, stock: Stock) -> tuple[dict, float]:
    """Parse the rooms of ``stock.todo`` (biggest first, so that the workers finish together) into their
    work files; fill ``stock.ready``, ``held`` and ``refused``; return the per-area statistics and the
    seconds."""
    from tqdm import tqdm

    from data_prep.pool import parallel_map
    from data_prep.stale import NORMALS

    todo = sorted(stock.todo, key=lambda task: -task[1].num_bytes)
    stats = {a: {"parsed": 0, "renewed": 0, "recorded": 0, "bytes": 0, "seconds": 0.0, "normals": 0.0}
             for a in stock.areas}
    renewed = {(task[1].area, task[1].name): "renewed" if task[4][1] == NORMALS else "recorded"
               for task in todo if task[4] is not None}  # normals estimated again, or the colour record added
    t_parse = time.perf_counter()
    with parallel_map(_parse_room, todo, cfg.jobs) as results:
        bar = tqdm(results, total=len(todo), desc="parsing rooms", unit="room", disable=not cfg.progress or None)
        for area, name, room_attrs, messages, num_bytes, seconds, reason in bar:
            for message in messages:
                bar.write(f"warning: {message}", file=sys.stderr)
            if reason is None:
                stock.ready[area][name], stock.held[area, name] = room_attrs, _work_file(cfg.out, area, name)
            else:
                bar.write(f"warning: {area}/{name}: refused, not written: {reason}", file=sys.stderr)
                stock.refused[area][name] = {"reason": reason, "signature": room_attrs["signature"]}
            s = stats[area]
            s[renewed.get((area, name), "parsed")] += 1
            s["bytes"] += num_bytes
            s["seconds"], s["normals"] = s["seconds"] + seconds[0] - seconds[1], s["normals"] + seconds[1]
    return stats, time.perf_counter() - t_parse


def _assemble(out: Path, stock: Stock, areas: list[str], limits: PointLimits,
              old_manifest: dict) -> tuple[set, dict, dict]:
    """Step 3: write each area whose rooms changed, in room order, into ``.work``; record its checksum in
    ``.work/assembled.json``, then move it onto ``Area_N.h5`` and remove its work files; returns the changed
    areas, every area file's checksum and its ``(points, same_points)`` (``data.identity.prepared_points``).
    An area of RAW without a room written has its previous file moved aside."""
    from data_prep.writer import with_lineage, write_json
    from pointgeope.checksum import file_checksum
    from pointgeope.data.identity import prepared_points
    from pointgeope.h5 import area_path, read_room_record, write_area

    changed, checksums, points = set(), {}, {}
    assembled, lineage = _read_manifest(out / ".work", ASSEMBLED), _read_manifest(out / ".work", LINEAGE)
    old_manifest = with_lineage(old_manifest, lineage, stock.checksums)  # as a run killed after assembling left it
    for area in areas:
        area_file = area_path(out, area)
        names = list(stock.ready[area])
        if set(names) != set(stock.previous[area]) or any(stock.held[area, n] != area_file for n in names):
            changed.add(area)

            def records(area=area, names=names):
                for name in names:
                    yield name, *read_room_record(stock.held[area, name], name)

            staged = out / ".work" / area_file.name  # its checksum is recorded before it replaces Area_N.h5,
            write_area(staged, area, records(), limits.max_extent)  # so that a rerun after a kill trusts it
            checksums[area] = assembled[area] = file_checksum(staged)
            points[area] = prepared_points(area, area_file, stock.checksums[area], staged, old_manifest,
                                           checksums[area])
            lineage[area] = [checksums[area], *points[area]]
            write_json(out / ".work" / ASSEMBLED, assembled)
            write_json(out / ".work" / LINEAGE, lineage)
            staged.replace(area_file)
        else:
            checksums[area] = stock.checksums[area]  # verified by _trusted_attrs
            points[area] = prepared_points(area, area_file, checksums[area], None, old_manifest)
        shutil.rmtree(out / ".work" / area, ignore_errors=True)
    for area in stock.areas:
        if area not in areas:
            _set_aside(area_path(out, area), area)
    return changed, checksums, points


def _set_aside(area_file: Path, area: str) -> None:
    """Every room of ``area`` is refused now: its previous ``Area_N.h5``, which readers would still accept,
    is renamed (atomically) to ``Area_N.h5.refused``, which none of them opens."""
    if not area_file.is_file():
        print(f"warning: {area}: every room was refused; {area_file} not written", file=sys.stderr)
        return
    aside = area_file.with_name(area_file.name + ".refused")
    area_file.replace(aside)
    print(f"warning: {area}: every room is refused now; moved the previous {area_file} to {aside}, which no "
          "reader opens (delete it, or fix the rooms and prepare again)", file=sys.stderr)


def _write_manifests(out: Path, location: str, stock: Stock, written: list[str], checksums: tuple[dict, dict],
                     ignored: tuple = ()) -> dict:
    """Step 4: ``manifest.json`` (rooms, counts, checksums of the files and of their points (``checksums``:
    area -> file checksum, area -> ``(points, same_points)``), refused rooms, the folders inside Annotations not
    read, ``ignored``: ``(path, files)`` pairs) and ``folds.json`` of the areas written now; warns about area
    files in OUT that RAW no longer holds. Returns the manifest."""
    from data_prep.writer import folds, manifest, write_json
    from pointgeope.data.identity import POINTS_RULE

    result = manifest(location, {a: stock.ready[a] for a in written})
    result["checksums"], points = checksums
    result["points"], result["points_rule"] = {area: value for area, (value, _) in points.items()}, POINTS_RULE
    result["same_points"] = {area: same for area, (_, same) in points.items() if same}
    result["refused"] = {a: dict(sorted(r.items())) for a, r in stock.refused.items() if r}
    result["ignored_folders"] = dict(ignored)  # folder inside Annotations -> files in it, not read
    write_json(out / "manifest.json", result)
    write_json(out / "folds.json", folds(written))
    extra = sorted(p.name for p in out.glob("Area_*.h5") if p.stem not in stock.areas)
    if extra:
        print(f"warning: {out} also holds {', '.join(extra)}, which {location} does not hold; manifest.json "
              "and folds.json list only the areas prepared now", file=sys.stderr)
    return result
