"""pointgeope/data/identity.py and checksum.points_checksum: the same raw data prepared from another path (a
moved folder, its zip) holds the same points in a file of another checksum; runs use it, other points not."""
from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest

from data_prep.prepare import PrepareConfig, prepare
from pointgeope.checksum import file_checksum, points_checksum
from pointgeope.engine.checkpoint import CheckpointError
from pointgeope.engine.trained_data import check_data
from tests.data_prep.raw_trees import write_tree, zip_tree

FILES = {"Area_1/office_1/Annotations/wall_1.txt": b"1 2 3 4 5 6\n1.5 2 3 4 5 6\n",
         "Area_1/office_1/Annotations/chair_1.txt": b"0.5 0.5 0.5 9 9 9\n",
         "Area_2/hall_1/Annotations/floor_1.txt": b"2 2 0 1 1 1\n3 3 0 2 2 2\n",
         "Area_2/hall_1/Annotations/stairs_1.txt": b"2 2 1 1 1 1\n"}


def _prepare(raw, out):
    prepare(PrepareConfig(raw, out, progress=False))
    return json.loads((out / "manifest.json").read_text())


def test_points_checksum_ignores_provenance_and_sees_every_measured_array(tmp_path):
    """Only where the file was prepared from (source, signature), the parse report and the normals (derived
    from coord, named by normal_k and normal_version) may differ: a change to any measured array of a room
    (coordinates, colours, labels, instances), its origin, its name or an attribute of the file changes the
    points checksum."""
    manifest = _prepare(write_tree(tmp_path / "raw", FILES), tmp_path / "out")
    path = tmp_path / "out" / "Area_1.h5"
    assert manifest["points"]["Area_1"] == points_checksum(path) != points_checksum(tmp_path / "out" / "Area_2.h5")
    copy = tmp_path / "copy.h5"

    def edited(edit):
        shutil.copy(path, copy)
        with h5py.File(copy, "r+") as f:
            edit(f["office_1"])
        return file_checksum(copy), points_checksum(copy)

    for key, value in (("source", "/elsewhere/Area_1/office_1"), ("signature", "0" * 40), ("issues", ["x"]),
                       ("normal_version", 7)):
        checksum, points = edited(lambda g: g.attrs.__setitem__(key, value))  # noqa: B023 - called at once
        assert checksum != file_checksum(path) and points == points_checksum(path), key
    checksum, points = edited(lambda g: g["normal"].__setitem__(Ellipsis, -g["normal"][()]))  # another estimate
    assert checksum != file_checksum(path) and points == points_checksum(path)
    with h5py.File(path, "r") as f:
        arrays = {name: f["office_1"][name][()] for name in f["office_1"]}
        top = dict(f.attrs)
    assert {"coord", "color", "label"} <= arrays.keys()

    def changed(name):                                      # the array with its first value changed
        value = arrays[name].copy()
        value.flat[0] = value.flat[0] + 1 if value.dtype.kind == "f" else (value.flat[0] + 1) % 13
        return lambda g: g[name].__setitem__(Ellipsis, value)

    edits = {name: changed(name) for name in arrays if name != "normal"}
    edits["origin"] = lambda g: g.attrs.__setitem__("origin", np.array([512345.0, 4181234.0, -13.0]))
    edits["room name"] = lambda g: g.file.move("office_1", "office_9")

    def other(value):                                       # another value of the attribute's type
        if isinstance(value, (str, bytes)):
            return value + type(value)("x")
        value = np.array(value)
        if value.dtype.kind in "iuf":
            return value + 1
        value.flat[0] = value.flat[0] + type(value.flat[0])("x")         # names: the first one changed
        return value

    edits.update({f"file attribute {key}": (lambda g, key=key: g.file.attrs.__setitem__(key, other(top[key])))
                  for key in top if key != "schema_version"})   # another schema is refused, not compared
    assert len(edits) >= 6
    for what, edit in edits.items():
        assert edited(edit)[1] != points_checksum(path), what


@pytest.mark.parametrize("how", ["moved", "zip"])
def test_the_same_raw_data_from_another_path_has_the_same_points(tmp_path, how):
    """The auditor's case: the folder and a moved copy (or its zip) gave other Area_N.h5 checksums."""
    raw = write_tree(tmp_path / "raw", FILES)
    first = _prepare(raw, tmp_path / "a")
    other = shutil.copytree(raw, tmp_path / "moved") if how == "moved" else zip_tree(tmp_path / "raw.zip", FILES)
    second = _prepare(other, tmp_path / "b")
    assert first["points"] == second["points"] and first["checksums"] != second["checksums"]
    assert first["same_points"] == second["same_points"] == {}
    again = _prepare(other, tmp_path / "a")                      # into the first folder: replaced, same points
    assert again["checksums"] == second["checksums"]
    assert again["same_points"] == {a: [first["checksums"][a]] for a in ("Area_1", "Area_2")}
    assert _prepare(other, tmp_path / "a")["same_points"] == again["same_points"]  # a rerun keeps the list
    (raw / "Area_2/hall_1/Annotations/floor_1.txt").write_bytes(b"2 2 0 1 1 1\n")
    changed = _prepare(raw, tmp_path / "a")  # back from raw: Area_1 is the first file again; Area_2's list is gone
    assert changed["checksums"]["Area_1"] == first["checksums"]["Area_1"]
    assert changed["same_points"] == {"Area_1": [second["checksums"]["Area_1"]]}


def _roots(tmp_path):
    """Two roots of the same raw data from two paths, and a third of other points in Area_2."""
    raw = write_tree(tmp_path / "raw", FILES)
    a, b = _prepare(raw, tmp_path / "a"), _prepare(shutil.copytree(raw, tmp_path / "moved"), tmp_path / "b")
    (raw / "Area_2/hall_1/Annotations/floor_1.txt").write_bytes(b"2 2 0 1 1 1\n")
    c = _prepare(raw, tmp_path / "c")
    return a, b, c


def test_a_run_uses_a_file_of_the_same_points_with_a_note(tmp_path):
    a, b, c = _roots(tmp_path)
    notes = []
    check_data("last.pt", a["checksums"], b["checksums"], tmp_path / "b", notes.append, a["points"])
    short = {area: f"{a['checksums'][area][:19]}..., now {b['checksums'][area][:19]}..." for area in a["points"]}
    assert notes == [f"note: last.pt trained on other files than {tmp_path / 'b'} holds now (Area_1.h5 trained on "
                     f"{short['Area_1']}; Area_2.h5 trained on {short['Area_2']}), of the same points: only where they "
                     "were prepared from differs (the rooms' source and signature attributes, or a record a later "
                     "prepare adds beside them: no_color); using them"]
    with pytest.raises(CheckpointError, match=r"\(Area_2.h5 trained on sha256:.*\): their points differ, not only "
                                              r"where they were prepared from; restore"):
        check_data("last.pt", a["checksums"], c["checksums"], tmp_path / "c", notes.append, a["points"])


def test_an_older_run_compares_the_files_it_trained_on_where_they_are(tmp_path):
    """A checkpoint of an older version records no points: its own files, still at its data.root, tell;
    where they are gone nothing does, and the refusal says so."""
    a, b, c = _roots(tmp_path)
    notes = []
    check_data("last.pt", a["checksums"], b["checksums"], tmp_path / "b", notes.append, None, tmp_path / "a")
    assert len(notes) == 1 and "Area_1.h5 trained on" in notes[0] and "Area_2.h5 trained on" in notes[0]
    with pytest.raises(CheckpointError, match="their points differ"):
        check_data("last.pt", a["checksums"], c["checksums"], tmp_path / "c", notes.append, None, tmp_path / "a")
    shutil.rmtree(tmp_path / "a")
    with pytest.raises(CheckpointError, match=r"it records no checksum of their points \(written by an older "
                                              r"pointgeope\), so whether Area_1, Area_2 differ only in where it "
                                              r"was prepared from \(the source and signature attributes"):
        check_data("last.pt", a["checksums"], b["checksums"], tmp_path / "b", notes.append, None, tmp_path / "a")


def test_an_older_run_uses_its_area_prepared_again_in_place_from_a_moved_folder(tmp_path):
    """The rerun of prepare after the raw folder moved rewrote every file: every checkpoint was refused.
    manifest.json's same_points now lists the replaced files of the same points."""
    raw = write_tree(tmp_path / "raw", FILES)
    a = _prepare(raw, tmp_path / "out")
    now = _prepare(shutil.copytree(raw, tmp_path / "moved"), tmp_path / "out")
    notes = []
    check_data("last.pt", a["checksums"], now["checksums"], tmp_path / "out", notes.append)
    assert len(notes) == 1 and "), of the same points: only where they were prepared from differs" in notes[0]


def test_a_file_that_is_gone_is_named_without_a_word_of_points(tmp_path):
    a, _, _ = _roots(tmp_path)
    with pytest.raises(CheckpointError,
                       match=r"\(Area_2.h5 trained on sha256:[0-9a-f]{12}\.\.\., now nothing\); restore"):
        check_data("last.pt", a["checksums"], {**a["checksums"], "Area_2": None}, tmp_path / "a", print, a["points"])


def test_area_points_are_computed_once_per_file_as_it_is(tmp_path, monkeypatch):
    """train --cv asks for every area's points at each fold's start; a root whose manifest lists none had each
    file read and hashed again, on every rank (now rank 0, once per file until the file changes)."""
    from pointgeope.data import identity

    _prepare(write_tree(tmp_path / "raw", FILES), tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    del manifest["points"]
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    calls = []
    monkeypatch.setattr(identity, "points_checksum", lambda path: calls.append(path) or f"p:{path}")
    identity._computed_once.cache_clear()
    first = identity.area_points(tmp_path / "out", ["Area_1", "Area_2"])
    assert identity.area_points(tmp_path / "out", ["Area_1", "Area_2"]) == first and len(calls) == 2
    path = tmp_path / "out" / "Area_1.h5"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))      # the file changed: read again
    identity.area_points(tmp_path / "out", ["Area_1"])
    assert len(calls) == 3
    identity._computed_once.cache_clear()
