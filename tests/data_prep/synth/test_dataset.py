"""data_prep/synth/ (`pointgeope synth`): determinism, resuming, the raw layout, geometry, planted defects."""
from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from data_prep.synth import objects as obj
from data_prep.synth.config import PRESETS, SynthConfig
from data_prep.synth.dataset import MANIFEST, generate, synth_room
from pointgeope.cli import build_parser, main as cli
from pointgeope.commands.synth import config_from_args
from pointgeope.constants import CLASS_NAMES

NOISE_BOUND = 0.02  # metres: over 6 sigma of the default 3 mm noise
NUMBER = re.compile(rb"-?\d+\.\d{3}")  # how the real files write a coordinate
ANNOTATION = re.compile(r"([A-Za-z]+)_(\d+)\.txt")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _points(path: Path) -> np.ndarray:
    """float64 (N, 6) of a raw file, the planted control byte removed (other defects are whitespace)."""
    return np.array(path.read_bytes().replace(b"\x10", b"").split(), dtype=float).reshape(-1, 6)


def _class(file_name: str) -> str:
    name = ANNOTATION.fullmatch(file_name).group(1)
    return "clutter" if name == "stairs" else name


def _tiny(out: Path, **overrides) -> dict:
    return generate(out, SynthConfig(**{**vars(PRESETS["tiny"]), **overrides}), log=lambda _: None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """`pointgeope synth OUT --size tiny`: 6 areas x 2 rooms with the defects."""
    out = tmp_path_factory.mktemp("synth") / "raw"
    assert cli(["synth", str(out), "--size", "tiny"]) == 0
    return out


@pytest.fixture(scope="module")
def manifest(tiny) -> dict:
    return json.loads((tiny / MANIFEST).read_text())


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a, b, c = (_tiny(tmp_path / name, areas=2, seed=seed) for name, seed in (("a", 7), ("b", 7), ("c", 8)))
    assert a == b and a != c
    tree_a, tree_b, tree_c = (_tree(tmp_path / name) for name in "abc")
    assert tree_a == tree_b
    assert tree_a.keys() != tree_c.keys() or any(tree_a[k] != tree_c[k] for k in tree_a)


def test_resume_writes_the_same_bytes_and_a_complete_out_is_left_alone(tmp_path, capsys):
    out = tmp_path / "raw"
    _tiny(out, areas=2)
    before = _tree(out)
    # an interrupted run: a room never renamed into place, its temporary folder left behind, no manifest
    room = out / "Area_2" / "office_1"
    room.rename(out / "Area_2" / ".office_1.tmp-99999")
    (out / MANIFEST).unlink()
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "2"]) == 0
    printed = capsys.readouterr().out
    assert "removed the unfinished room" in printed and "wrote Area_2/office_1" in printed
    assert "kept Area_1/office_1" in printed
    assert _tree(out) == before
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "2"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert _tree(out) == before


def test_other_settings_or_foreign_folder_are_refused(tmp_path, capsys):
    out = tmp_path / "raw"
    _tiny(out, areas=1)
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1", "--seed", "3"]) == 2
    assert "other settings (seed differ: {'seed': 0} there, {'seed': 3} asked)" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert cli(["synth", str(foreign), "--size", "tiny"]) == 2
    assert "is not empty and holds no .synth_settings.json" in capsys.readouterr().err
    assert cli(["synth", str(foreign / "notes.txt"), "--size", "tiny"]) == 2
    assert "expected OUT to be a folder, got the file" in capsys.readouterr().err
    assert cli(["synth", str(tmp_path / "x"), "--size", "tiny", "--areas", "7"]) == 2
    assert "expected 1 to 6 areas (S3DIS has 6), got 7" in capsys.readouterr().err


def test_options_override_the_preset():
    args = build_parser().parse_args(["synth", "out", "--size", "tiny", "--density", "50", "--no-defects"])
    assert config_from_args(args) == SynthConfig(rooms_per_area=2, density=50.0, defects=False)
    assert config_from_args(build_parser().parse_args(["synth", "out"])) == PRESETS["demo"]


def test_every_area_has_all_13_classes_and_counts_match_the_files(tiny, manifest):
    assert manifest["config"] == vars(PRESETS["tiny"])
    assert list(manifest["areas"]) == [f"Area_{k}" for k in range(1, 7)]
    totals = dict.fromkeys(CLASS_NAMES, 0)
    for area, rooms in manifest["areas"].items():
        in_area = set()
        assert sorted(p.name for p in (tiny / area).iterdir()) == sorted(rooms)
        for room, record in rooms.items():
            annotations = tiny / area / room / "Annotations"
            assert sorted(record["files"]) == sorted(p.name for p in annotations.iterdir())
            counts = dict.fromkeys(CLASS_NAMES, 0)
            for name, n in record["files"].items():
                assert len(_points(annotations / name)) == n, f"{area}/{room}/{name}"
                counts[_class(name)] += n
            assert counts == record["class_counts"]
            assert len(_points(tiny / area / room / f"{room}.txt")) == record["num_points"] == sum(counts.values())
            if record["kind"] == "office":
                assert all(counts.values()), f"{area}/{room} lacks a class: {counts}"
            in_area |= {name for name, n in counts.items() if n}
            totals = {k: totals[k] + counts[k] for k in totals}
        assert in_area == set(CLASS_NAMES), f"{area} lacks {set(CLASS_NAMES) - in_area}"
    assert manifest["totals"]["class_counts"] == totals
    assert manifest["totals"]["points"] == sum(totals.values())
    per_room = [r["num_points"] for rooms in manifest["areas"].values() for r in rooms.values()]
    assert manifest["totals"]["rooms"] == 12 and 2000 <= min(per_room) and max(per_room) <= 8000


def _layout_problems(root: Path, skip: set[str] = frozenset(), max_lines: int = 400) -> list[str]:
    """What in ``root`` departs from the raw S3DIS layout (the first ``max_lines`` lines of each file)."""
    problems = []
    for room in sorted(p for p in root.glob("Area_*/*") if p.is_dir()):
        rel = room.relative_to(root)
        if not re.fullmatch(r"Area_[1-6]", room.parent.name):
            problems.append(f"{rel}: area name")
        files = sorted((room / "Annotations").glob("*.txt"))
        if not (room / f"{room.name}.txt").is_file() or not files:
            problems.append(f"{rel}: expected {room.name}.txt and Annotations/*.txt")
        for path in [room / f"{room.name}.txt", *files]:
            if path.parent.name == "Annotations" and (ANNOTATION.fullmatch(path.name) is None or
                                                      _class(path.name) not in CLASS_NAMES):
                problems.append(f"{path.relative_to(root)}: annotation name")
            if str(path.relative_to(root)) in skip:
                continue
            for i, line in enumerate(path.read_bytes().split(b"\n")[:max_lines]):
                fields = line.split(b" ")
                if line and not (len(fields) == 6 and all(NUMBER.fullmatch(f) for f in fields[:3])
                                 and all(f.isdigit() and 0 <= int(f) <= 255 for f in fields[3:])):
                    problems.append(f"{path.relative_to(root)}:{i + 1}: {line!r}")
                    break
    return problems


def test_the_raw_layout_is_the_real_one(tiny, manifest, s3dis_real):
    assert _layout_problems(s3dis_real) == []  # the checker accepts the real dataset...
    defects = {d["file"] for d in manifest["defects"] if d["kind"] != "stairs"}
    assert _layout_problems(tiny, skip=defects) == []  # ...and the synthetic one, planted files aside
    for area, rooms in manifest["areas"].items():
        for room in rooms:
            assert re.fullmatch(r"(office|conferenceRoom|hallway)_\d+", room)
            # the room file is its annotations concatenated, in the manifest's order
            annotations = b"".join((tiny / area / room / "Annotations" / name).read_bytes()
                                   for name in rooms[room]["files"])
            clean = annotations.replace(b"\r", b"").replace(b"  \n", b"\n").replace(b"\x10", b"")
            assert (tiny / area / room / f"{room}.txt").read_bytes() == clean


# Height of each class above the floor, as a range (fractions of the room height h allowed).
HEIGHTS = {"table": (0.0, 0.74), "chair": (0.0, 0.92), "sofa": (0.0, 0.85), "bookcase": (0.0, 2.2),
           "door": (0.0, 2.15), "board": (0.8, 2.1)}


def test_geometry_of_every_room(tiny, manifest):
    for area, rooms in manifest["areas"].items():
        for room, record in rooms.items():
            ann = tiny / area / room / "Annotations"
            parts = {name: _points(ann / name)[:, :3] for name in record["files"]}
            every = np.concatenate(list(parts.values()))
            floor, ceiling = parts["floor_1.txt"], parts["ceiling_1.txt"]
            z0, z1 = floor[:, 2].mean(), ceiling[:, 2].mean()
            assert np.ptp(floor[:, 2]) < 2 * NOISE_BOUND and np.ptp(ceiling[:, 2]) < 2 * NOISE_BOUND
            assert every[:, 2].min() > z0 - NOISE_BOUND and every[:, 2].max() < z1 + NOISE_BOUND
            # each wall is a plane x = c or y = c (the axis it spreads least along); c its median
            planes = [[], []]
            for name, xyz in parts.items():
                if _class(name) == "wall":
                    axis = int(np.argmin(np.ptp(xyz[:, :2], axis=0)))
                    planes[axis].append(np.median(xyz[:, axis]))
            lo, hi = np.array([min(planes[0]), min(planes[1])]), np.array([max(planes[0]), max(planes[1])])
            assert np.all((every[:, :2] > lo - NOISE_BOUND) & (every[:, :2] < hi + NOISE_BOUND)), f"{area}/{room}"
            np.testing.assert_allclose(record["bbox"], [every.min(0), every.max(0)], atol=1e-9)
            height = z1 - z0
            for name, xyz in parts.items():
                cls, z = _class(name), xyz[:, 2] - z0
                to_wall = np.minimum(np.abs(xyz[:, :2] - lo), np.abs(xyz[:, :2] - hi)).min(axis=1)
                where = f"{area}/{room}/{name}"
                if cls in HEIGHTS:
                    low, high = HEIGHTS[cls]
                    assert z.min() > low - NOISE_BOUND and z.max() < high + NOISE_BOUND, where
                if cls == "wall":  # a wall is a vertical plane from floor to ceiling at the room's edge
                    assert to_wall.max() < NOISE_BOUND and z.min() < 0.2 * height and z.max() > 0.8 * height, where
                elif cls == "column":  # floor to ceiling, against a wall (at most 0.6 m deep)
                    assert z.min() < 0.2 * height and z.max() > 0.8 * height, where
                    assert to_wall.max() < 0.6 + NOISE_BOUND, where
                elif cls == "beam":
                    assert z.min() > height - 0.5 - NOISE_BOUND and z.max() < height + NOISE_BOUND, where
                elif cls == "clutter":  # on the floor or a table (at most 0.4 m tall), or a light under the ceiling
                    low = z < obj.TABLE_HEIGHT + 0.4 + NOISE_BOUND
                    assert np.all(low | (z > height - 0.05 - NOISE_BOUND)), where
                    assert low.all() or (~low).all(), where
                elif cls in ("door", "window", "board"):  # thin slabs just in front of a wall
                    assert to_wall.max() < 0.1 + NOISE_BOUND, where
                if cls == "window":
                    assert z.min() > 0.8 - NOISE_BOUND and z.max() < height - 0.6 + NOISE_BOUND, where


def test_a_room_made_in_memory_is_the_room_synth_writes(tiny, manifest):
    """synth_room (the bench's and the PyG example's room) samples what `synth` writes, the stairs room
    included: the same points, and each point's class that of its annotation file (stairs as clutter)."""
    stairs = next(d["file"] for d in manifest["defects"] if d["kind"] == "stairs").split("/")[:2]
    for area, room in (("Area_1", "office_1"), tuple(stairs)):
        record = manifest["areas"][area][room]
        ann = tiny / area / room / "Annotations"
        written = np.concatenate([_points(ann / name)[:, :3] for name in record["files"]])
        classes = np.repeat([CLASS_NAMES.index(_class(name)) for name in record["files"]],
                            list(record["files"].values()))
        made = synth_room("tiny", int(area[5:]), list(manifest["areas"][area]).index(room))
        assert made.coord().dtype == np.float32 and made.labels().dtype == np.int64
        np.testing.assert_allclose(made.coord(), written, atol=1e-4)
        np.testing.assert_array_equal(made.labels(), classes)
    assert "stairs_1.txt" in record["files"]             # the last room checked was the stairs room
    expected = "expected Area_1..Area_6 and a room index 0..1 of synth --size tiny, got Area_7 room 0"
    with pytest.raises(ValueError, match=re.escape(expected)):
        synth_room("tiny", 7, 0)


def test_planted_defects_are_where_the_manifest_says(tiny, manifest):
    defects = {d["kind"]: d for d in manifest["defects"]}
    assert sorted(defects) == ["control_byte", "crlf", "stairs", "trailing_spaces"]
    assert len({d["file"] for d in manifest["defects"]}) == 4
    control = defects["control_byte"]
    assert control["file"].endswith("/Annotations/ceiling_1.txt")
    lines = (tiny / control["file"]).read_bytes().split(b"\n")
    assert lines[control["line"] - 1] == control["written"].encode()
    assert control["written"].encode().replace(b"\x10", b"") == control["original"].encode()
    assert sum(line.count(b"\x10") for line in lines) == 1
    area, room = control["file"].split("/")[:2]
    assert control["original"].encode() in (tiny / area / room / f"{room}.txt").read_bytes().split(b"\n")
    crlf = (tiny / defects["crlf"]["file"]).read_bytes()
    assert crlf.count(b"\r\n") == crlf.count(b"\n") == len(_points(tiny / defects["crlf"]["file"]))
    spaces = (tiny / defects["trailing_spaces"]["file"]).read_bytes()
    assert spaces.count(b"  \n") == spaces.count(b"\n") > 0
    stairs = defects["stairs"]
    assert stairs["maps_to"] == "clutter" and stairs["file"].endswith("/Annotations/stairs_1.txt")
    assert len(_points(tiny / stairs["file"])) == stairs["points"] > 0
    # no other file holds a defect
    planted = {d["file"] for d in manifest["defects"]}
    for path in tiny.glob("Area_*/*/Annotations/*.txt"):
        if str(path.relative_to(tiny)) not in planted:
            data = path.read_bytes()
            assert b"\r" not in data and b" \n" not in data and b"\x10" not in data, path


def test_no_defects_plants_nothing(tmp_path):
    out = tmp_path / "raw"
    manifest = _tiny(out, areas=1, defects=False)
    assert manifest["defects"] == []
    assert not list(out.glob("*/*/Annotations/stairs_*.txt"))
    for path in out.glob("*/*/Annotations/*.txt"):
        data = path.read_bytes()
        assert b"\r" not in data and b" \n" not in data and b"\x10" not in data


def test_synth_then_prepare_repairs_the_planted_defects(tiny, manifest, tmp_path, capsys):
    out = tmp_path / "prepared"
    assert cli(["prepare", str(tiny), str(out), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    control = next(d for d in manifest["defects"] if d["kind"] == "control_byte")
    assert f"{control['file']}:{control['line']}: repaired" in captured.err
    assert "stairs->clutter" in captured.out
    prepared = json.loads((out / "manifest.json").read_text())
    for area, rooms in manifest["areas"].items():
        for room, record in rooms.items():
            got = prepared["areas"][area]["rooms"][room]
            assert got["num_points"] == record["num_points"]
            assert got["class_counts"] == [record["class_counts"][c] for c in CLASS_NAMES], f"{area}/{room}"
    # the repaired line holds the original numbers
    area, room = control["file"].split("/")[:2]
    with h5py.File(out / f"{area}.h5", "r") as f:
        coord = f[room]["coord"][()]
    x, y, z = (float(v) for v in control["original"].split()[:3])
    assert np.any(np.all(np.isclose(coord, np.float32([x, y, z])), axis=1))


def test_one_writer_at_a_time_and_every_run_removes_the_leftovers(tmp_path, capsys):
    """Two runs into one OUT ended with a traceback (a room renamed over the other's) and the temporary room
    folder stayed for good: a complete OUT returned before looking for it."""
    import os

    from pointgeope.lock import folder_lock

    out = tmp_path / "raw"
    _tiny(out, areas=1)
    before = _tree(out)
    leftover = out / "Area_1" / ".office_1.tmp-99999"  # the temporary room of a writer that was killed
    (leftover / "Annotations").mkdir(parents=True)
    (leftover / "Annotations" / "wall_1.txt").write_text("1 2 3 4 5 6\n")
    with folder_lock(out, "another synth"):
        assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"pointgeope synth: error: {out} is being written by pid "
                                                   f"{os.getpid()} on "), err
        assert leftover.is_dir()  # the other writer's, as far as this run knows
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"removed the unfinished room {leftover}" in printed and "nothing to do" in printed
    assert not leftover.exists() and _tree(out) == before


def test_a_rerun_removes_the_temporary_manifest_of_a_killed_run(tmp_path, capsys):
    """A synth killed (SIGKILL) after it wrote its manifest's temporary file, before the rename: the rerun
    finished the dataset but left `.synth_manifest.json.<8 characters>.tmp.json` in OUT for good (the lock's
    take-over removed only the temporary room folders)."""
    out = tmp_path / "raw"
    _tiny(out, areas=1)
    before = _tree(out)
    killed = out / ".synth_manifest.json.c0f75f2f.tmp.json"  # atomic_path's name for the manifest
    (out / MANIFEST).rename(killed)
    half = out / ".synth_settings.json.0a1b2c3d.tmp.json"
    half.write_text("{")  # a half-written one
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 0
    printed = capsys.readouterr().out
    assert _tree(out) == before
    assert all(f"removed {path}, left by an interrupted run\n" in printed for path in (killed, half))


def test_a_run_killed_at_its_first_write_is_resumed_not_refused(tmp_path, capsys):
    """`kill -9` of synth while it wrote its first file (`.synth_settings.json`, through its temporary file) left
    OUT with that temporary file and the lock only; every rerun then refused OUT as another folder's data ("is
    not empty and holds no .synth_settings.json ... choose another OUT"). Those are the killed run's own: the
    rerun writes the dataset, the same bytes as a run never stopped."""
    import socket
    import subprocess
    import sys

    whole, out = tmp_path / "whole", tmp_path / "raw"
    assert cli(["synth", str(whole), "--size", "tiny", "--areas", "1"]) == 0
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)  # a pid that has ended, as the killed run's
    (out / ".lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(),
                                           "since": "2026-11-29 01:02:00", "command": "pointgeope synth"}))
    (out / "..synth_settings.json.d7d78893.tmp.json").write_text((whole / ".synth_settings.json").read_text()[:50])
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 0
    capsys.readouterr()
    assert _tree(out) == _tree(whole)


def test_files_named_as_temporary_files_without_a_killed_synths_lock_are_not_its_leftovers(tmp_path, capsys):
    """A folder counted as new is cleared of the files named as atomic temporary files. Without a lock file
    (which a synth takes before its first write, and a `kill -9` leaves), such files are not a killed synth's: a
    user's `.notes.20261129.tmp.txt` was deleted and the folder filled with synthetic rooms; another command's
    temporary file being written there would have gone the same way. The folder is refused, nothing deleted."""
    out = tmp_path / "mine"
    out.mkdir()
    notes = out / ".notes.20261129.tmp.txt"
    notes.write_text("my notes")
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 2
    assert "is not empty and holds no .synth_settings.json" in capsys.readouterr().err
    assert sorted(out.iterdir()) == [notes] and notes.read_text() == "my notes"


def test_a_data_root_prepared_inside_the_synth_folder_is_not_cleared_by_a_rerun(tmp_path, capsys):
    """`prepare raw raw/h5` makes a data root, with its own locks, inside the synth folder: a synth rerun (the
    dataset complete, nothing to do) removed the temporary files in it, which a prepare may be writing now."""
    out = tmp_path / "raw"
    _tiny(out, areas=1)
    (out / "h5").mkdir()
    (out / "h5" / ".readers.lock").write_text("")
    being_written = out / "h5" / ".Area_1.h5.0a1b2c3d.tmp.h5"
    being_written.write_bytes(b"prepare's")
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert being_written.read_bytes() == b"prepare's"
