"""data_prep/prepare.py end to end: real rooms point for point, planted defects, zip input, reruns, --jobs
(kills and resumes: test_prepare_resume.py)."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import data_prep.room
from data_prep.prepare import PrepareConfig, prepare
from pointgeope import h5
from pointgeope.cli import main as cli
from pointgeope.constants import CLASS_NAMES
from tests.data_prep.raw_trees import DEFECT_FILES, OUTPUT_FILES, five_rooms, output_bytes, reference_room, write_tree

LOAD_ROOM = data_prep.room.load_room


class Killed(Exception):
    """Stands for the end of a killed process."""


def _count_parsed(monkeypatch, fail_after: int | None = None) -> list[str]:
    """Record the rooms that get parsed (in-process, --jobs 1); optionally die after `fail_after` rooms."""
    parsed = []

    def load_room(source, room, limits):
        if fail_after is not None and len(parsed) == fail_after:
            raise Killed
        parsed.append(f"{room.area}/{room.name}")
        return LOAD_ROOM(source, room, limits)

    monkeypatch.setattr(data_prep.room, "load_room", load_room)
    return parsed


def test_real_rooms_match_a_loadtxt_reading_point_for_point(s3dis_real, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli(["prepare", str(s3dis_real), str(out), "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    for area, room in [("Area_1", "office_2"), ("Area_2", "office_resampled")]:
        expected = reference_room(s3dis_real / area / room)
        got = h5.read_room(out / f"{area}.h5", room)
        for key in ("coord", "color", "label", "instance"):
            assert got[key].dtype == expected[key].dtype
            np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{area}/{room} {key}")
        counts = np.bincount(expected["label"], minlength=len(CLASS_NAMES)).tolist()
        assert manifest["areas"][area]["rooms"][room] == {"num_points": len(expected["label"]), "class_counts": counts}
        assert f"{area}: 1 room (1 parsed: " in printed
    assert h5.list_rooms(out / "Area_2.h5") == {"office_resampled": 44_032}
    assert manifest["totals"]["num_points"] == 44_132
    assert json.loads((out / "folds.json").read_text()) == {"version": 1, "folds": {
        "1": {"test": ["Area_1"], "train": ["Area_2"]}, "2": {"test": ["Area_2"], "train": ["Area_1"]}}}
    assert not (out / ".work").exists()

    # --jobs 1 writes the same bytes
    assert cli(["prepare", str(s3dis_real), str(tmp_path / "one"), "--jobs", "1"]) == 0
    assert output_bytes(tmp_path / "one") == output_bytes(out)


def test_planted_defects_are_repaired_dropped_and_reported(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    assert cli(["prepare", str(raw), str(tmp_path / "out"), "--jobs", "1"]) == 0
    printed = capsys.readouterr()
    room = h5.read_room(tmp_path / "out/Area_1.h5", "room_a")
    # instances: ceiling_1, chair_2, chair_10, door_1 (empty), stairs_1, wall_1
    np.testing.assert_array_equal(room["coord"], np.array([
        [1, 2, 3], [4.5, 5.5, 6.5], [103.0, 1.25, 2.5],      # CRLF, tabs, trailing spaces; stray \x10 repaired
        [0.125, 0.25, 0.375], [-1.5, -2.5, -3.5],
        [9, 9, 9], [8, 8, 8], [7, 7, 7],
        [0.5, 0.5, 0.5], [0.25, 0.75, 1.5],                   # wall_1 lines 2, 4 and 5 dropped
    ], dtype=np.float32))
    np.testing.assert_array_equal(room["color"], [[10, 20, 30], [40, 50, 60], [70, 80, 90], [5, 6, 7],
                                                  [13, 255, 0], [100] * 3, [101] * 3, [102] * 3, [1, 2, 3], [4, 5, 6]])
    # S3DIS ids written out (tests/test_constants.py): ceiling 0, chair 8, wall 2; stairs -> clutter 12
    np.testing.assert_array_equal(room["label"], [0, 0, 0, 8, 8, 12, 12, 12, 2, 2])
    np.testing.assert_array_equal(room["instance"], [0, 0, 0, 1, 2, 4, 4, 4, 5, 5])

    with h5py.File(tmp_path / "out/Area_1.h5") as f:
        attrs = f["room_a"].attrs
        assert list(attrs["objects"]) == ["ceiling_1", "chair_2", "chair_10", "door_1", "stairs_1", "wall_1"]
        assert (attrs["repaired_lines"], attrs["dropped_lines"], attrs["clipped_colors"]) == (1, 3, 2)
        assert list(attrs["empty_files"]) == ["Area_1/room_a/Annotations/door_1.txt"]
        assert json.loads(attrs["remapped_to_clutter"]) == {"stairs": 3}
        assert attrs["num_points"] == 10 and attrs["source"] == f"{raw.resolve()}/Area_1/room_a"
        assert list(attrs["class_counts"]) == np.bincount(room["label"], minlength=13).tolist()
        assert len(attrs["issues"]) == 6

    wall = "Area_1/room_a/Annotations/wall_1.txt"
    for message in ["Area_1/room_a/Annotations/ceiling_1.txt:3: repaired: dropped 1 stray byte: "
                    r"'103.0\x100000' -> 103.00000",
                    f"{wall}:2: dropped: expected 6 values, got 5", f"{wall}:4: dropped: non-numeric value 'abc'",
                    f"{wall}:5: dropped: expected 6 values, got 7",
                    "Area_1/room_a/Annotations/door_1.txt: skipped: empty file",
                    # its file and line, and the summary's unit (it said "1 of 10 points" beside "clipped colours 2")
                    "Area_1/room_a: colours outside 0..255 clipped: 2 colour values of 1 of 10 points (first "
                    "Area_1/room_a/Annotations/chair_10.txt:1: 12.6 300 -4); too few above 255 for 16-bit colours; "
                    "if the file's colours have another range, rescale them to 0..255"]:
        assert f"warning: {message}" in printed.err
    assert ("repaired lines 1, dropped lines 3, empty files 1, binary files 0, lost objects 1, "
            "ignored folders in Annotations 0 (0 files), "
            "clipped colour values 2, rooms with 0..1 colours scaled 0, refused rooms 0, "
            "unknown classes: stairs->clutter 3 points") in printed.out
    assert "Area_2: 1 room (1 parsed: 43 B at " in printed.out


@pytest.mark.parametrize("top", ["", "Stanford3dDataset_v1.2_Aligned_Version/"])
def test_zip_gives_the_arrays_of_the_folder(tmp_path, top):
    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    prepare(PrepareConfig(raw, tmp_path / "from_folder", progress=False))
    with zipfile.ZipFile(tmp_path / "s3dis.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in DEFECT_FILES.items():
            zf.writestr(top + name, data)
    prepare(PrepareConfig(tmp_path / "s3dis.zip", tmp_path / "from_zip", jobs=2, progress=False))
    for area, room in [("Area_1", "room_a"), ("Area_2", "room_b")]:
        a = h5.read_room(tmp_path / "from_folder" / f"{area}.h5", room)
        b = h5.read_room(tmp_path / "from_zip" / f"{area}.h5", room)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    with h5py.File(tmp_path / "from_zip/Area_1.h5") as f:
        assert f["room_a"].attrs["source"] == f"{(tmp_path / 's3dis.zip').resolve()}/{top}Area_1/room_a"
        assert f["room_a"].attrs["repaired_lines"] == 1


def test_bad_input_is_an_error_and_writes_nothing(tmp_path, capsys):
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("Area_1/r/Annotations/wall_1.txt", b"1 2 3 4 5 6\n")
        zf.writestr("../outside.txt", b"x")
    assert cli(["prepare", str(tmp_path / "evil.zip"), str(tmp_path / "out")]) == 2
    assert "refusing zip member '../outside.txt'" in capsys.readouterr().err
    write_tree(tmp_path / "raw", {"Area_1/ok/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                  "Area_1/office_7/office_7.txt": b"1 2 3 4 5 6\n"})
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 2
    assert "1 room without: Area_1/office_7 (no Annotations folder: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_rerun_skips_and_a_changed_room_alone_is_reparsed(tmp_path, monkeypatch, capsys):
    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    stamps = {name: (out / name).stat().st_mtime_ns for name in OUTPUT_FILES[:2]}
    capsys.readouterr()
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    assert parsed == []
    assert {name: (out / name).stat().st_mtime_ns for name in OUTPUT_FILES[:2]} == stamps
    assert f"Area_1: 1 room (all up to date), 10 points; {out / 'Area_1.h5'} unchanged" in capsys.readouterr().out

    (raw / "Area_2/room_b/Annotations/table_1.txt").write_bytes(b"0.5 0.5 0.75 3 3 3\n0.5 0.5 0.5 4 4 4\n")
    prepare(PrepareConfig(raw, out, progress=False))
    assert parsed == ["Area_2/room_b"]
    assert (out / "Area_1.h5").stat().st_mtime_ns == stamps["Area_1.h5"]
    assert h5.list_rooms(out / "Area_2.h5") == {"room_b": 4}
    prepare(PrepareConfig(raw, out, force=True, progress=False))
    assert parsed == ["Area_2/room_b", "Area_1/room_a", "Area_2/room_b"]
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    assert output_bytes(out) == output_bytes(tmp_path / "fresh")


def test_jobs_do_not_change_the_bytes(tmp_path):
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "one", jobs=1, progress=False))
    prepare(PrepareConfig(raw, tmp_path / "three", jobs=3, progress=False))
    assert output_bytes(tmp_path / "one") == output_bytes(tmp_path / "three")


def test_the_prepare_pipeline_and_the_synthetic_data_do_not_import_each_other():
    """data_prep/ is the prepare pipeline, data_prep/synth/ writes raw files for it: neither imports the other."""
    import ast

    import data_prep

    root = Path(data_prep.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 13
    for path in files:
        in_synth = "synth" in path.relative_to(root).parts
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)  # from M import x: "M.x"
                     else [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if in_synth:
                    assert not (name.startswith("data_prep") and not name.startswith("data_prep.synth")), \
                        f"{path}: imports {name}"
                else:
                    assert not name.startswith("data_prep.synth"), f"{path}: imports {name}"


def test_an_area_whose_rooms_are_all_refused_now_is_moved_aside(tmp_path, capsys):
    """Its previous Area_N.h5 stayed, and every reader still accepted the rooms prepare had just refused."""
    from pointgeope.data.check import check_area_file

    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    for path in (raw / "Area_2/room_b/Annotations").iterdir():
        path.write_bytes(b"")
    capsys.readouterr()
    prepare(PrepareConfig(raw, out, progress=False))
    err = capsys.readouterr().err
    aside = out / "Area_2.h5.refused"
    assert (f"warning: Area_2: every room is refused now; moved the previous {out / 'Area_2.h5'} to {aside}, "
            "which no reader opens (delete it, or fix the rooms and prepare again)") in err.splitlines()
    assert "also holds" not in err
    assert not (out / "Area_2.h5").exists() and h5.list_rooms(aside) == {"room_b": 3}
    with pytest.raises(Exception, match=re.escape("Area_2.h5")):
        check_area_file(out / "Area_2.h5")
    assert json.loads((out / "folds.json").read_text())["folds"] == {"1": {"test": ["Area_1"], "train": []}}


@pytest.mark.parametrize("entry", [{}, [], 7])
def test_a_damaged_checksum_in_the_manifest_rebuilds_the_area(tmp_path, monkeypatch, capsys, entry):
    """A manifest whose checksum of an area is no string ({} or []: a hand edit, another tool) stopped the
    rerun with a TypeError traceback (a set of unhashable entries): it is no checksum, and the area is rebuilt
    with its warning, to the bytes of a fresh prepare."""
    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["checksums"]["Area_1"] = entry
    (out / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    assert parsed == ["Area_1/room_a"]
    err = capsys.readouterr().err
    assert f"warning: {out / 'Area_1.h5'} has no checksum in {out / 'manifest.json'}; rebuilding it" in err
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    assert output_bytes(out) == output_bytes(tmp_path / "fresh")
