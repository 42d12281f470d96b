"""Tests of pointgeope/scans/sources.py: what the inputs name, and reading npy, raw rooms and prepared rooms."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pointgeope.scans.scan import ScanError
from pointgeope.scans.sources import ScanRef, find_scans, read_scan
from tests.viz.conftest import write_area


def raw_room(folder, parts):
    """A raw S3DIS room: ``parts`` = {file stem: (n, 6) values}, written as Annotations/<stem>.txt."""
    (folder / "Annotations").mkdir(parents=True)
    for stem, values in parts.items():
        np.savetxt(folder / "Annotations" / f"{stem}.txt", values, fmt="%.3f %.3f %.3f %d %d %d")
    return folder


def test_inputs_expand_by_kind(tmp_path):
    d = tmp_path / "scans"
    d.mkdir()
    np.save(d / "b.npy", np.zeros((3, 3)))
    (d / "a.ply").write_text("ply\n")
    (d / "notes.md").write_text("not a scan")                      # skipped inside a folder
    raw_room(d / "office_9", {"wall_1": np.zeros((2, 6))})
    write_area(tmp_path / "Area_7.h5", "Area_7", {r: {"coord": np.zeros((2, 3)), "label": np.zeros(2)}
                                                  for r in ("office_2", "hall_1")})
    (tmp_path / "x.foo").write_text("1 2 3")
    refs, errors = find_scans([d, tmp_path / "Area_7.h5", tmp_path / "missing.las", tmp_path / "x.foo"])
    assert [(r.kind, r.name) for r in refs] == [("raw", "scans/office_9"), ("ply", "a"), ("npy", "b"),
                                                ("h5", "Area_7/hall_1"), ("h5", "Area_7/office_2")]
    assert refs[3].source == f"{tmp_path / 'Area_7.h5'}:hall_1"
    assert errors == [f"{tmp_path / 'missing.las'}: expected a scan file or folder, found nothing",
                      f"{tmp_path / 'x.foo'}: unknown extension '.foo'; expected one of .csv, .h5, .las, .laz, "
                      ".npy, .ply, .pts, .txt, .xyz, a raw S3DIS room folder or a folder of such files"]
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    refs, errors = find_scans([tmp_path / "empty", tmp_path / "bad.h5"])
    assert refs == [] and errors[0].startswith(f"{tmp_path / 'empty'}: a folder without scans")
    assert errors[1].startswith(f"{tmp_path / 'bad.h5'}: not a readable HDF5 file (")  # as training says it


def test_a_raw_s3dis_root_names_its_rooms_by_area_as_a_prepared_root_does(tmp_path):
    """A raw S3DIS root (``Area_N/<room>/Annotations``) was "a folder without scans"; its rooms are found one
    level down now and named ``Area_N/<room>`` (outputs DIR/Area_N/<room>_pred.*, as for ``Area_N.h5``)."""
    root = tmp_path / "Stanford3dDataset"
    for area, room in (("Area_2", "office_1"), ("Area_1", "hallway_3"), ("Area_1", "office_1")):
        raw_room(root / area / room, {"wall_1": np.zeros((2, 6))})
    (root / "Area_1" / "notes").mkdir()                           # a sub-folder that is no room: nothing
    (root / "docs").mkdir()
    refs, errors = find_scans([root])
    assert errors == []
    assert [(r.kind, r.name, r.path) for r in refs] == [
        ("raw", "Area_1/hallway_3", root / "Area_1" / "hallway_3"),
        ("raw", "Area_1/office_1", root / "Area_1" / "office_1"),
        ("raw", "Area_2/office_1", root / "Area_2" / "office_1")]
    assert [r.name for r in find_scans([root / "Area_1"])[0]] == ["Area_1/hallway_3", "Area_1/office_1"]  # as before


def test_npy_shapes(tmp_path):
    rng = np.random.default_rng(0)
    values = np.c_[rng.random((50, 3)), rng.integers(0, 256, (50, 3))]
    np.save(tmp_path / "c.npy", values)
    scan = read_scan(ScanRef(tmp_path / "c.npy", "npy", "c"))
    np.testing.assert_array_equal(scan.coord, values[:, :3])
    np.testing.assert_array_equal(scan.color, values[:, 3:])
    np.save(tmp_path / "f.npy", values[:, :3].astype(np.float32))
    assert read_scan(ScanRef(tmp_path / "f.npy", "npy", "f")).color is None
    np.save(tmp_path / "w.npy", values[:, :4])
    with pytest.raises(ScanError, match=r"shape \(N, 3\) or \(N, 6\) .*got float64 \(50, 4\)"):
        read_scan(ScanRef(tmp_path / "w.npy", "npy", "w"))
    (tmp_path / "t.npy").write_text("nope")
    with pytest.raises(ScanError, match=re.escape("not a readable .npy array")):
        read_scan(ScanRef(tmp_path / "t.npy", "npy", "t"))


def test_npy_with_a_damaged_or_lying_header_is_one_scan_error(tmp_path):
    """A .npy header that does not parse (numpy's tokenizer error went through as a traceback), one whose shape
    needs more bytes than the file holds (4 TiB: a MemoryError before; a few bytes: numpy's "failed to read"),
    and an array of Python objects are each a ScanError naming the file."""
    def npy(name: str, header: bytes, data: bytes) -> Path:
        header = header + b" " * (117 - len(header)) + b"\n"  # 10 + 118 bytes: numpy's 64-byte alignment
        path = tmp_path / name
        path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data)
        return path

    data = np.arange(12, dtype="<f4").tobytes()
    good = npy("good.npy", b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", data)
    np.testing.assert_array_equal(read_scan(ScanRef(good, "npy", "good")).coord, np.arange(12).reshape(4, 3))
    cases = {"open.npy": (b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), ", "header does not parse"),
             "huge.npy": (b"{'descr': '<f4', 'fortran_order': False, 'shape': (400000000000, 3), }", "truncated"),
             "short.npy": (b"{'descr': '<f4', 'fortran_order': False, 'shape': (5, 3), }", "truncated"),
             "objects.npy": (b"{'descr': '|O', 'fortran_order': False, 'shape': (4, 3), }", "Python objects")}
    for name, (header, words) in cases.items():
        path = npy(name, header, data)
        with pytest.raises(ScanError, match=f"^{re.escape(str(path))}: .*{words}"):
            read_scan(ScanRef(path, "npy", name))



def test_an_npy_that_cannot_be_opened_or_mapped_is_not_said_to_have_a_damaged_header(tmp_path, monkeypatch):
    """A .npy without read permission is "cannot read it (Permission denied)", as every other scan, not a header
    that "does not parse"; one on a file system that cannot map files (ENODEV) is read. ``np.load`` stands in for
    the operating system (tests run as root, and tmp_path can map files); the file itself is a good .npy."""
    import errno

    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "a.npy", values)
    load = np.load

    def denied(path, mmap_mode=None, allow_pickle=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(np, "load", denied)
    with pytest.raises(ScanError) as err:
        read_scan(ScanRef(tmp_path / "a.npy", "npy", "a"))
    assert "cannot read it (Permission denied)" in str(err.value) and "parse" not in str(err.value)

    def unmappable(path, mmap_mode=None, allow_pickle=False):
        if mmap_mode is not None:
            raise OSError(errno.ENODEV, "No such device")
        return load(path, allow_pickle=allow_pickle)

    monkeypatch.setattr(np, "load", unmappable)
    np.testing.assert_array_equal(read_scan(ScanRef(tmp_path / "a.npy", "npy", "a")).coord, values)


def test_raw_room_is_read_in_prepare_order_with_labels(tmp_path):
    rng = np.random.default_rng(1)
    parts = {stem: np.c_[np.round(rng.random((n, 3)) * 4, 3), rng.integers(0, 256, (n, 3))]
             for stem, n in (("wall_1", 5), ("chair_10", 3), ("chair_2", 4), ("stairs_1", 2))}
    room = raw_room(tmp_path / "Area_3" / "office_4", parts)
    scan = read_scan(ScanRef(room, "raw", "office_4"))
    order = ["chair_2", "chair_10", "stairs_1", "wall_1"]  # by class, then number (chair_2 before chair_10)
    np.testing.assert_allclose(scan.coord, np.concatenate([parts[s][:, :3] for s in order]), atol=1e-6)
    np.testing.assert_array_equal(scan.color, np.concatenate([parts[s][:, 3:] for s in order]))
    np.testing.assert_array_equal(scan.label, [8] * 7 + [12] * 2 + [2] * 5)  # stairs -> clutter


def test_prepared_room(tmp_path):
    coord = np.arange(12, dtype=np.float32).reshape(4, 3)
    write_area(tmp_path / "Area_2.h5", "Area_2", {"wc_1": {"coord": coord, "label": np.array([0, 1, 2, 3]),
                                                           "color": np.full((4, 3), 7)}})
    scan = read_scan(ScanRef(tmp_path / "Area_2.h5", "h5", "Area_2/wc_1", "wc_1"))
    assert scan.coord.dtype == np.float64 and scan.source == f"{tmp_path / 'Area_2.h5'}:wc_1"
    np.testing.assert_array_equal(scan.coord, coord)
    np.testing.assert_array_equal(scan.label, [0, 1, 2, 3])


def test_georeferenced_raw_and_prepared_rooms_come_back_in_their_coordinates(tmp_path):
    """A raw room folder given to predict went through prepare's float32 and lost its millimetres (500006.097 came
    back as 500006.093750); a prepared room stored minus its ``origin`` comes back plus it."""
    import h5py

    rng = np.random.default_rng(2)
    values = np.c_[np.round(rng.random((30, 3)) * 5 + [500006.0, 4000004.0, 0.5], 3), rng.integers(0, 256, (30, 3))]
    room = raw_room(tmp_path / "Area_1" / "office_1", {"wall_1": values})
    scan = read_scan(ScanRef(room, "raw", "office_1"))
    np.testing.assert_allclose(scan.coord, values[:, :3], rtol=0, atol=1e-5)
    origin = np.array([500006.0, 4000004.0, 0.0])
    write_area(tmp_path / "Area_1.h5", "Area_1", {"office_1": {"coord": values[:, :3] - origin,
                                                               "label": np.zeros(30)}})
    with h5py.File(tmp_path / "Area_1.h5", "a") as f:
        f["office_1"].attrs["origin"] = origin
    scan = read_scan(ScanRef(tmp_path / "Area_1.h5", "h5", "Area_1/office_1", "office_1"))
    np.testing.assert_allclose(scan.coord, values[:, :3], rtol=0, atol=1e-5)


def test_a_bad_origin_is_refused_under_python_O_too(tmp_path):
    """The check was an assert, which ``python -O`` strips: a scalar origin then shifted every coordinate by it."""
    import h5py

    write_area(tmp_path / "Area_1.h5", "Area_1", {"office_2": {"coord": np.zeros((4, 3)), "label": np.zeros(4)}})
    with h5py.File(tmp_path / "Area_1.h5", "a") as f:
        f["office_2"].attrs["origin"] = 5.0
    code = ("import sys; from pointgeope.scans.sources import ScanRef, read_scan\n"
            "try:\n    read_scan(ScanRef(__import__('pathlib').Path(sys.argv[1]), 'h5', 'Area_1/office_2', "
            "'office_2'))\n"
            "except Exception as err:\n    print(type(err).__name__, err)\nelse:\n    print('read')")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    for flags in ([], ["-O"]):
        out = subprocess.run([sys.executable, *flags, "-c", code, str(tmp_path / "Area_1.h5")], env=env,
                             capture_output=True, text=True, check=True).stdout
        assert out.startswith(f"ScanError {tmp_path / 'Area_1.h5'}:office_2: expected the room's 'origin' attribute "
                              "to be 3 finite numbers, got ") and out.endswith("; prepare it again\n"), (flags, out)


@pytest.mark.parametrize("origin", [np.array([[1.0, 2.0], [3.0, 4.0]]), np.zeros(100)])
def test_a_bad_origin_is_said_on_one_bounded_line(tmp_path, origin):
    """An origin attribute of rows, or of many values, was said as numpy's repr writes it: a line a row (the
    error of several lines), and all of it (a thousand values: 8 kB). Now on one line, cut to 80 characters."""
    import h5py

    from pointgeope.viz import VizError
    from pointgeope.viz.scene import room_origin

    write_area(tmp_path / "Area_1.h5", "Area_1", {"office_2": {"coord": np.zeros((4, 3)), "label": np.zeros(4)}})
    with h5py.File(tmp_path / "Area_1.h5", "a") as f:
        f["office_2"].attrs["origin"] = origin
    said = "array([[1., 2.], [3., 4.]])" if origin.ndim == 2 else "array([" + ", ".join(["0."] * 100) + "])"
    said = said if len(said) <= 80 else f"{said[:77]}... ({len(said)} characters)"
    with pytest.raises(ScanError) as err:
        read_scan(ScanRef(tmp_path / "Area_1.h5", "h5", "Area_1/office_2", "office_2"))
    assert str(err.value) == (f"{tmp_path / 'Area_1.h5'}:office_2: expected the room's 'origin' attribute to be 3 "
                              f"finite numbers, got {said}; prepare it again")
    with pytest.raises(VizError) as err:
        room_origin(tmp_path / "Area_1.h5", "office_2")
    assert str(err.value) == (f"{tmp_path / 'Area_1.h5'}: room 'office_2': expected its 'origin' attribute to be 3 "
                              f"finite numbers, got {said}; prepare it again")


def test_no_note_for_a_prepared_roots_own_files_or_the_out_folder(tmp_path):
    """A prepared root's manifest.json and folds.json were named as files left out, and the --out folder inside the
    input folder as a sub-folder to predict ('give <folder>/pred as an input')."""
    from data_prep.prepare import PrepareConfig, prepare

    raw_room(tmp_path / "raw" / "Area_1" / "office_1", {"wall_1": np.c_[np.eye(3), np.ones((3, 3))]})
    root = tmp_path / "prepared"
    prepare(PrepareConfig(tmp_path / "raw", root, progress=False))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["Area_1.h5", "folds.json",
                                                                                    "manifest.json"]
    scans = tmp_path / "scans"
    (scans / "pred").mkdir(parents=True)
    np.save(scans / "a.npy", np.zeros((3, 3)))
    for inputs, out in (([root], None), ([scans], scans / "pred"), ([scans], "scans/pred")):
        cwd = os.getcwd()
        os.chdir(tmp_path)  # --out as typed, relative to where predict runs
        try:
            refs, errors = find_scans(inputs, out=out)
        finally:
            os.chdir(cwd)
        assert errors == [] and len(refs) == 1 and refs[0].notes == (), (inputs, out)
    (tmp_path / "elsewhere").mkdir()
    refs, _ = find_scans([scans], out=tmp_path / "elsewhere")   # not the out folder: named
    assert refs[0].notes[0].startswith(f"{scans}: left out 1 sub-folder not searched (pred/)")


def test_an_empty_folder_whose_path_holds_a_colon_says_what_it_left_out(tmp_path):
    """The message was cut at the first ': ' of the folder's own path ('/data/scan: old/...')."""
    d = tmp_path / "scan: old"
    (d / "more").mkdir(parents=True)
    np.save(d / "more" / "b.npy", np.zeros((3, 3)))
    assert find_scans([d])[1] == [
        f"{d}: a folder without scans (expected files .csv, .h5, .las, .laz, .npy, .ply, .pts, .txt, .xyz in it, or "
        "raw S3DIS rooms with Annotations/ in it or one level down); left out 1 sub-folder not searched (more/); "
        f"a folder's scans are taken from it, not from its sub-folders (raw rooms excepted): give {d / 'more'} as an "
        "input to predict its scans"]


def test_a_folder_says_what_it_left_out(tmp_path):
    """Files of other extensions and sub-folders of scans were left out without a word ("predicted 1 of 1")."""
    d = tmp_path / "mixdir"
    (d / "more").mkdir(parents=True)
    np.save(d / "a.npy", np.zeros((3, 3)))
    np.save(d / "more" / "b.npy", np.zeros((3, 3)))
    (d / "c.pcd").write_text("# .PCD v0.7\n")
    (d / "d.xyzrgb").write_text("1 2 3 4 5 6\n")
    (d / ".DS_Store").write_text("")                                   # hidden: not worth a word
    raw_room(d / "Area_1" / "office_1", {"wall_1": np.zeros((2, 6))})  # raw rooms one level down: taken
    refs, errors = find_scans([d])
    assert errors == [] and [r.name for r in refs] == ["Area_1/office_1", "a"]
    note = (f"{d}: left out 2 files of unknown type (c.pcd, d.xyzrgb) and 1 sub-folder not searched (more/); "
            f"a folder's scans are taken from it, not from its sub-folders (raw rooms excepted): give {d / 'more'} "
            "as an input to predict its scans; known extensions: .csv, .h5, .las, .laz, .npy, .ply, .pts, .txt, .xyz")
    assert [r.notes for r in refs] == [(note,), ()]
    assert read_scan(refs[0]).meta["notes"][0] == note                 # predict prints a scan's notes
    refs, errors = find_scans([d / "more", tmp_path])                  # named: found; nothing left out
    assert [r.name for r in refs] == ["b"] and refs[0].notes == ()
    assert errors == [f"{tmp_path}: a folder without scans (expected files .csv, .h5, .las, .laz, .npy, .ply, .pts, "
                      ".txt, .xyz in it, or raw S3DIS rooms with Annotations/ in it or one level down); left out 1 "
                      "sub-folder not searched (mixdir/); a folder's scans are taken from it, not from its "
                      f"sub-folders (raw rooms excepted): give {d} as an input to predict its scans"]


def test_an_area_folder_leaves_out_its_alignment_angles(tmp_path):
    """``Area_5/Area_5_alignmentAngle.txt`` of the release (room names and angles) was read as a scan and
    failed ("'hallway_6' is not a number"); beside raw rooms it is left out, with the folder's note."""
    area = tmp_path / "Area_5"
    raw_room(area / "hallway_6", {"wall_1": np.zeros((2, 6))})
    (area / "Area_5_alignmentAngle.txt").write_text(
        "## Global alignment angle per disjoint space in Area_5 ##\n"
        "## Disjoint Space Name Global Alignment Angle ##\nhallway_6 180\n")
    refs, errors = find_scans([area])
    assert errors == [] and [r.name for r in refs] == ["Area_5/hallway_6"]
    assert refs[0].notes == (f"{area}: left out 1 S3DIS alignment file, not scans (Area_5_alignmentAngle.txt)",)
    (tmp_path / "scans").mkdir()                                     # no raw room beside it: a text scan as any
    (tmp_path / "scans" / "Area_5_alignmentAngle.txt").write_text("1 2 3\n")
    assert [r.kind for r in find_scans([tmp_path / "scans"])[0]] == ["text"]


def test_a_raw_rooms_notes_name_its_files_under_the_room(tmp_path):
    """A repaired line of a raw room was named ``Annotations/ceiling_1.txt:4``, the same in every room."""
    for room in ("office_1", "office_3"):
        raw_room(tmp_path / "Area_1" / room, {"wall_1": np.zeros((2, 6))})
        (tmp_path / "Area_1" / room / "Annotations" / "ceiling_1.txt").write_bytes(
            b"1 2 3 4 5 6\n1 2 3 4 5 6\n1 2 3 4 5 6\n5.2\x1066 1 2 3 4 5\n")
    refs, errors = find_scans([tmp_path])
    notes = [read_scan(ref).meta["notes"] for ref in refs]
    assert errors == [] and [n[0].split(": repaired:")[0] for n in notes] == [
        f"{tmp_path / 'Area_1' / room / 'Annotations' / 'ceiling_1.txt'}:4" for room in ("office_1", "office_3")]


def test_a_room_whose_annotations_folder_is_spelt_otherwise_says_to_rename_it(tmp_path):
    """``office_2/annotations/`` (a re-zip on a case-insensitive disk): the room file was predicted without
    labels, with only "1 sub-folder not searched" to say why."""
    room = raw_room(tmp_path / "office_2", {"wall_1": np.zeros((2, 6))})
    (room / "Annotations").rename(room / "annotations")
    np.savetxt(room / "office_2.txt", np.zeros((2, 6)), fmt="%.3f %.3f %.3f %d %d %d")
    refs, errors = find_scans([room])
    assert errors == [] and [r.kind for r in refs] == ["text"]
    assert refs[0].notes == (f"{room}: left out 1 sub-folder not searched (annotations/); {room / 'annotations'} "
                             f"is spelt annotations: rename it Annotations to read {room} as a raw room (its objects, "
                             "with their labels); known extensions: .csv, .h5, .las, .laz, .npy, .ply, .pts, .txt, "
                             ".xyz",)


def test_a_folds_predictions_file_is_no_data_root_to_read_lock(tmp_path):
    """``evaluate`` names a fold's predictions ``Area_K.h5``, as prepare names an area file: predict read-locked
    ``RUN/area_K/predictions``, whose ``.readers.lock`` stayed. A file of that name that is no fold's predictions
    (an area, or one that cannot be read, which find_scans reports) still names its folder."""
    from pointgeope.h5_predictions import write_predictions
    from pointgeope.scans.sources import prepared_roots

    preds = tmp_path / "run" / "area_1" / "predictions"
    preds.mkdir(parents=True)
    write_predictions(preds / "Area_1.h5", "Area_1", {"office_1": np.zeros(3, np.uint8)}, {})
    (tmp_path / "data").mkdir()
    write_area(tmp_path / "data" / "Area_2.h5", "Area_2", {"office_1": {"coord": np.eye(3), "label": np.zeros(3)}})
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "Area_3.h5").write_bytes(b"not hdf5")
    got = prepared_roots([preds / "Area_1.h5", preds, tmp_path / "data" / "Area_2.h5", tmp_path / "copy"])
    assert got == [tmp_path / "data", tmp_path / "copy"]
