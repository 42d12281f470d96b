"""A synthetic S3DIS: areas of furnished rooms sampled into points and written in the raw layout.

Randomness is keyed, never shared: the layout of room ``i`` of area ``a`` draws from
``default_rng([seed, LAYOUT, a, i])``, its points from ``default_rng([seed, POINTS, a, i])``, the placement
of the rooms in the area from ``default_rng([seed, AREA, a])`` and the defect plan from
``default_rng([seed, DEFECTS])`` (the stream tag comes before the indices because numpy's SeedSequence
treats ``[s]`` and ``[s, 0]`` alike). So a room is the same whatever else is generated, a resumed run
writes the very bytes an uninterrupted one would, and changing the density resamples the same furniture.

The defects of the real dataset planted (``defects=True``), each in its own annotation file:
``control_byte`` in ``ceiling_1.txt`` of one room, ``crlf`` and ``trailing_spaces`` in two other files,
and a ``stairs_1.txt`` annotation (put in a hallway when there is one; the preparer maps it to clutter).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data_prep.synth.config import PRESETS
from data_prep.synth.geometry import inside_any, point_count, sample
from data_prep.synth.objects import object_colours
from data_prep.synth.places import check_places, check_room
from data_prep.synth.record import complete_manifest, recorded_settings
from data_prep.synth.rooms import BUILDERS, STRUCTURE, RoomLayout, solid_boxes
from data_prep.synth.write import Defect, format_lines, remove_stale, room_files, write_room
from pointgeope.atomic import is_leftover, remove_leftovers, write_text_atomic
from pointgeope.constants import AREAS, CLASS_NAMES
from pointgeope.lock import LOCK_NAME, folder_lock
from pointgeope.memory import available_memory
from pointgeope.plural import counted
from pointgeope.recorded_text import bounded, repr_bounded

MANIFEST = "synth_manifest.json"
SETTINGS = ".synth_settings.json"  # written once the settings are checked, before the first room, so that a
#                                   resumed run can check it continues the same one
RAW_TO_CLASS = {"stairs": "clutter"}  # annotation classes outside the 13, as the preparer maps them
BYTES_PER_POINT = 150  # peak memory of a room being generated, per point (measured: ~110 B at 0.3M-1.3M points)
ROOM_GAP = 0.2  # metres between neighbouring rooms of an area (the wall thickness)
LAYOUT, POINTS, AREA, DEFECTS = 1, 2, 3, 4  # tags of the random streams (see the module docstring)


@dataclass(frozen=True)
class RoomSpec:
    """Where one room sits in the plan: area index (0-based), room index in the area, kind and name."""

    area: int
    index: int
    kind: str
    name: str


@dataclass
class RoomPoints:
    """The sampled points of a room in room-file order.

    ``xyz_mm`` int64 ``(N, 3)`` millimetres, ``rgb`` uint8 ``(N, 3)``, ``files`` the annotation files
    ``(name, class, count)`` whose counts sum to ``N``.
    """

    spec: RoomSpec
    xyz_mm: np.ndarray
    rgb: np.ndarray
    files: list[tuple[str, str, int]]

    def coord(self) -> np.ndarray:
        """float32 ``(N, 3)``: the points in metres, as the preparer reads them from the room's files."""
        return (self.xyz_mm / 1000.0).astype(np.float32)

    def labels(self) -> np.ndarray:
        """int64 ``(N,)``: each point's class index (``CLASS_NAMES``) of its annotation file's class
        (:func:`class_of`)."""
        classes = [CLASS_NAMES.index(class_of(name)) for _, name, _ in self.files]
        return np.repeat(np.asarray(classes, dtype=np.int64), [count for *_, count in self.files])


def class_of(annotation: str) -> str:
    """The class (of the 13) of an annotation file's class name: itself, or clutter for ``stairs``
    (:data:`RAW_TO_CLASS`, as the preparer maps it)."""
    return RAW_TO_CLASS.get(annotation, annotation)


def plan_rooms(areas: int, rooms_per_area: int) -> list[RoomSpec]:
    """The rooms of every area: the first an office, then hallway / conference room / office in turn.

    Names are numbered per kind within an area (``office_1``, ``hallway_1``, ``office_2``...).
    """
    cycle = ("hallway", "conferenceRoom", "office")
    specs = []
    for a in range(areas):
        seen: dict[str, int] = {}
        for i in range(rooms_per_area):
            kind = "office" if i == 0 else cycle[(i - 1 + a) % 3]
            seen[kind] = seen.get(kind, 0) + 1
            specs.append(RoomSpec(a, i, kind, f"{kind}_{seen[kind]}"))
    return specs


def plan_defects(specs: list[RoomSpec], seed: int) -> tuple[list[Defect], RoomSpec]:
    """Which files get the text defects, and which room gets the stairs.

    Returns the text defects (files ``ceiling_1.txt``, ``wall_2.txt``, ``floor_1.txt`` of rooms drawn at
    random, so never two in one file) and the room that holds ``stairs_1.txt``.
    """
    rng = np.random.default_rng([seed, DEFECTS])

    def pick(pool: list[RoomSpec]) -> RoomSpec:
        return pool[int(rng.integers(len(pool)))]

    hallways = [s for s in specs if s.kind == "hallway"]
    stairs_room = pick(hallways or specs)
    defects = []
    for kind, file in (("control_byte", "ceiling_1.txt"), ("crlf", "wall_2.txt"),
                       ("trailing_spaces", "floor_1.txt")):
        room = pick(specs)
        defects.append(Defect(kind, AREAS[room.area], room.name, file, float(rng.random())))
    return defects, stairs_room


def area_layouts(specs: list[RoomSpec], seed: int, stairs_room: RoomSpec | None) -> list[RoomLayout]:
    """The furnished rooms of one area, placed side by side along x from a random area origin."""
    area = specs[0].area
    rng = np.random.default_rng([seed, AREA, area])
    x, y0 = rng.uniform(-15.0, 15.0, size=2)
    layouts = []
    for spec in specs:
        room_rng = np.random.default_rng([seed, LAYOUT, spec.area, spec.index])
        layout = BUILDERS[spec.kind](room_rng, spec.name, stairs=spec == stairs_room)
        layouts.append(layout.shifted([x, y0 + rng.uniform(-1.0, 1.0), 0.0]))
        x += layout.hi[0] + ROOM_GAP
    return layouts


def sample_room(spec: RoomSpec, layout: RoomLayout, density: float, noise: float, min_points: int,
                seed: int) -> RoomPoints:
    """Points on every part of a room at ``density`` points per m^2 with gaussian ``noise`` (metres).

    Each part gets ``max(min_points, round(area * density))`` points; wall, floor and ceiling points
    inside a solid object (column, beam, bookcase, sofa, door, window, board, stairs, ceiling light) are dropped,
    as a scanner does not see them. Coordinates are rounded to millimetres, like the real files.
    """
    rng = np.random.default_rng([seed, POINTS, spec.area, spec.index])
    boxes = solid_boxes(layout)
    xyz, rgb, files, seen = [], [], [], {}
    for part in layout.parts:
        n = point_count(part.patches.areas().sum(), density, min_points)
        points = sample(part.patches, n, rng)
        if part.name in STRUCTURE:
            points = points[~inside_any(points, boxes, margin=0.01)]
        points = points + rng.normal(0.0, noise, size=points.shape)
        xyz.append(np.rint(points * 1000.0).astype(np.int64))
        rgb.append(object_colours(part.name, len(points), rng))
        seen[part.name] = seen.get(part.name, 0) + 1
        files.append((f"{part.name}_{seen[part.name]}.txt", part.name, len(points)))
    return RoomPoints(spec, np.concatenate(xyz), np.concatenate(rgb), files)


def synth_room(size: str, area: int, index: int) -> RoomPoints:
    """Room ``index`` (0-based) of ``Area_<area>`` as ``pointgeope synth --size SIZE`` samples it (the same plan,
    seed, area layout, stairs room and sampling), made in memory: no files, no parser."""
    config = PRESETS[size]
    plan = plan_rooms(config.areas, config.rooms_per_area)
    specs = [s for s in plan if s.area == area - 1]
    if not specs or not 0 <= index < len(specs):
        raise ValueError(f"expected Area_1..Area_{config.areas} and a room index 0..{config.rooms_per_area - 1} "
                         f"of synth --size {size}, got Area_{area} room {index}")
    stairs = plan_defects(plan, config.seed)[1] if config.defects else None
    layout = area_layouts(specs, config.seed, stairs)[index]
    return sample_room(specs[index], layout, config.density, config.noise, config.min_points, config.seed)


def room_record(points: RoomPoints) -> dict:
    """The manifest entry of a room: kind, point count, 13-class counts (stairs as clutter), files, box."""
    counts = dict.fromkeys(CLASS_NAMES, 0)
    for _, name, count in points.files:
        counts[class_of(name)] += count
    lo, hi = points.xyz_mm.min(0) / 1000.0, points.xyz_mm.max(0) / 1000.0
    return {"kind": points.spec.kind, "num_points": int(len(points.xyz_mm)), "class_counts": counts,
            "files": {name: count for name, _, count in points.files},
            "bbox": [lo.round(3).tolist(), hi.round(3).tolist()]}


def largest_room_points(specs: list[RoomSpec], seed: int, stairs_room: RoomSpec | None, density: float,
                        min_points: int) -> int:
    """The most points :func:`sample_room` draws for one room of the plan: ``sum_parts max(min_points,
    round(area * density))`` (before the points inside solid objects are dropped), from the layouts alone."""
    most = 0
    for area in sorted({s.area for s in specs}):
        area_specs = [s for s in specs if s.area == area]
        for layout in area_layouts(area_specs, seed, stairs_room):
            most = max(most, sum(point_count(p.patches.areas().sum(), density, min_points) for p in layout.parts))
    return most


def check_memory(config, specs: list[RoomSpec], stairs_room: RoomSpec | None) -> None:
    """A ValueError, before anything is drawn, when generating the largest room would need more memory than
    is available: ``points x BYTES_PER_POINT`` (a room is drawn, formatted and written whole)."""
    points = largest_room_points(specs, config.seed, stairs_room, config.density, config.min_points)
    need, have = points * BYTES_PER_POINT, available_memory()
    if need > have:
        fits = config.density * have / need
        raise ValueError(f"--density {config.density:g}: the largest room would hold about {points:.3g} points, "
                         f"about {need / 2**30:.3g} GiB while it is generated ({BYTES_PER_POINT} B a point), more "
                         f"than the {have / 2**30:.3g} GiB available; at most --density {fits:.3g} fits here "
                         "(real S3DIS has 5,000-10,000 points per m^2)")


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (temporary file + ``os.replace``)."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def _left_by_a_killed_start(out: Path) -> bool:
    """Whether the folder ``out`` holds nothing but what a synth stopped before its first room leaves: its
    settings, its lock file, and, where that lock file is there (a ``kill -9``: the lock is taken before the
    first write), the atomic writer's temporary files (:func:`pointgeope.atomic.is_leftover`). Without the
    lock file, files so named are not a killed synth's (a user's ``.notes.20261129.tmp.txt``, another
    command's temporary file being written there under the lock of a folder above): the folder is not new."""
    names = [p.name for p in out.iterdir()]
    killed = LOCK_NAME in names
    return all(name in (SETTINGS, LOCK_NAME) or (killed and is_leftover(name)) for name in names)


def check_out(out: Path, settings: dict) -> str:
    """What to do with ``out``: ``"new"``, ``"resume"`` (same settings, unfinished) or ``"complete"``.

    Raises ``ValueError`` if ``out`` holds other data, synthetic data made with other settings, or damaged
    settings (:func:`~data_prep.synth.record.recorded_settings`).
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"expected OUT to be a folder, got the file {out}")
    if not out.exists() or _left_by_a_killed_start(out):
        return "new"  # empty, or what an attempt killed before its first room left (its settings): nothing to keep
    path = out / SETTINGS
    if not path.is_file():
        raise ValueError(f"{out} is not empty and holds no {SETTINGS}: expected an empty folder or one "
                         "written by `pointgeope synth`; choose another OUT")
    found = recorded_settings(path, out)
    if found != settings:
        changed = sorted(k for k in set(found) | set(settings) if found.get(k) != settings.get(k))
        keys = bounded(", ".join(k if k.isidentifier() else repr(k) for k in changed), 200)  # a hand edit's: cut
        raise ValueError(f"{out} was generated with other settings ({keys} differ: "
                         f"{repr_bounded({k: found.get(k) for k in changed}, 200)} there, "
                         f"{repr_bounded({k: settings.get(k) for k in changed}, 200)} asked); remove it or choose "
                         "another OUT")
    planned = {(AREAS[s.area], s.name) for s in plan_rooms(settings["areas"], settings["rooms_per_area"])}
    check_places(out, planned)
    done = complete_manifest(out / MANIFEST, settings, planned)
    if done is not None and all((out / area / room).is_dir() for area, room in planned):
        for area, room in sorted(planned):  # each room holds the annotation files its record names
            check_room(out / area / room, list(done["areas"][area][room]["files"]))
        return "complete"
    return "resume"  # unfinished, or a damaged manifest: the rooms are kept and the manifest written anew


def generate(out: Path, config, log=print) -> dict:
    """Generate (or finish) the synthetic dataset described by ``config`` (a ``SynthConfig``) in ``out``.

    Writes every room that is not there yet, then ``out/synth_manifest.json``; returns the manifest.
    A complete ``out`` made with the same settings is left as it is. One writer at a time
    (:func:`pointgeope.lock.folder_lock`: a second one is refused with one line), which first removes the
    temporary room folders and files (:func:`pointgeope.atomic.remove_leftovers`) a killed run left.
    """
    settings = asdict(config)
    check_out(out, settings)  # a file, another folder's data, other settings: refused before OUT is made
    with folder_lock(out, f"pointgeope synth {out}"):
        for stale in (p for area_dir in sorted(out.glob("Area_*")) for p in remove_stale(area_dir)):
            log(f"removed the unfinished room {stale}")
        remove_leftovers(out, log=log)  # a killed run's temporary files (its manifest's, written last), first
        if check_out(out, settings) == "complete":
            log(f"{out} already holds the complete synthetic dataset with these settings; nothing to do")
            return json.loads((out / MANIFEST).read_text())
        return _write_rooms(out, config, settings, log)


def _write_rooms(out: Path, config, settings: dict, log) -> dict:
    """The body of :func:`generate`, under OUT's lock: every room not there yet, then the manifest."""
    specs = plan_rooms(config.areas, config.rooms_per_area)
    defects, stairs_room = plan_defects(specs, config.seed) if config.defects else ([], None)
    check_memory(config, specs, stairs_room)  # every setting checked before the settings are recorded
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / SETTINGS, settings)
    manifest = {"version": 1, "generator": "pointgeope synth", "config": settings, "areas": {},
                "defects": []}
    for a in range(config.areas):
        area = AREAS[a]
        area_dir = out / area
        area_dir.mkdir(exist_ok=True)
        area_specs = [s for s in specs if s.area == a]
        records = manifest["areas"][area] = {}
        for spec, layout in zip(area_specs, area_layouts(area_specs, config.seed, stairs_room), strict=True):
            points = sample_room(spec, layout, config.density, config.noise, config.min_points, config.seed)
            records[spec.name] = record = room_record(points)
            room_defects = [d for d in defects if (d.area, d.room) == (area, spec.name)]
            room_dir = area_dir / spec.name
            state_word = "kept" if room_dir.is_dir() else "wrote"
            if state_word == "kept":  # (an annotation file removed since: refused, the rooms before it kept)
                check_room(room_dir, [name for name, _, _ in points.files])
            planted = []
            if state_word == "wrote" or room_defects:  # a kept room is formatted only to report its defects
                text, lengths = format_lines(points.xyz_mm, points.rgb)
                files = [(name, count) for name, _, count in points.files]
                contents, planted = room_files(area, spec.name, files, text, lengths, room_defects)
                if state_word == "wrote":
                    write_room(room_dir, contents)
            if spec == stairs_room:
                planted.append({"kind": "stairs", "file": f"{area}/{spec.name}/Annotations/stairs_1.txt",
                                "line": None, "points": record["files"]["stairs_1.txt"],
                                "maps_to": RAW_TO_CLASS["stairs"]})
            manifest["defects"] += planted
            log(f"{state_word} {area}/{spec.name:<18} {spec.kind:<15} {record['num_points']:>9,} points")
    totals = dict.fromkeys(CLASS_NAMES, 0)
    for rooms in manifest["areas"].values():
        for record in rooms.values():
            for name, count in record["class_counts"].items():
                totals[name] += count
    manifest["totals"] = {"rooms": len(specs), "points": sum(totals.values()), "class_counts": totals}
    _write_json(out / MANIFEST, manifest)
    return manifest



def print_summary(manifest: dict, out: Path, seconds: float) -> None:
    """The planted defects, then the rooms, points and per-class counts of ``manifest``."""
    totals = manifest["totals"]
    print(f"planted {counted(len(manifest['defects']), 'defect')}:")
    for defect in manifest["defects"]:
        where = f"line {defect['line']}" if defect.get("line") else "every line" if defect["kind"] != "stairs" \
            else f"{defect['points']} points, maps to {defect['maps_to']}"
        print(f"  {defect['kind']:<16} {defect['file']}  ({where})")
    print(f"{counted(totals['rooms'], 'room')}, {counted(totals['points'], 'point')} in {out} "
          f"({seconds:.1f} s); manifest {out / MANIFEST}")
    print("points per class: " + ", ".join(f"{k} {v:,}" for k, v in totals["class_counts"].items()))
