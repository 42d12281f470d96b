"""Which data a run trained on, now that the points checksum leaves the estimated normals out: runs recorded by
either older rule recognised on the same points, other points still told apart."""
from __future__ import annotations

import json
import shutil

import h5py
import pytest

from data_prep.prepare import PrepareConfig, prepare
from pointgeope.checksum import file_checksum, points_checksum
from pointgeope.data.identity import same_points
from tests.data.points_rules import measured_points as _measured_points, points_with_normals
from tests.data_prep.raw_trees import five_rooms
from tests.data_prep.test_prepare_normals import _before_the_version, _older_prepare, _other_estimate


def test_runs_on_other_points_are_still_told_apart(tmp_path, monkeypatch):
    """The comparison without normals is no blanket pass: a run whose older file held other points is refused."""
    raw = five_rooms(tmp_path / "raw")
    _older_prepare(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "old", progress=False))
    monkeypatch.undo()
    (raw / "Area_2/room_b/Annotations/table_1.txt").write_bytes(b"0.5 0.5 0.25 3 3 3\n")  # other points now
    prepare(PrepareConfig(raw, tmp_path / "new", progress=False))
    old_points = points_checksum(tmp_path / "old/Area_2.h5")
    assert same_points("Area_2", file_checksum(tmp_path / "old/Area_2.h5"), tmp_path / "new",
                       {"Area_2": old_points}) is False
    assert same_points("Area_1", file_checksum(tmp_path / "old/Area_1.h5"), tmp_path / "new",
                       {"Area_1": points_checksum(tmp_path / "old/Area_1.h5")}) is True


def test_runs_recorded_by_either_older_rule_are_recognised_on_the_same_points(tmp_path, monkeypatch):
    """The points checksum leaves the normals out now. Runs recorded them otherwise: before normals (files without
    them: the same rule), and between normals and now (``normal`` hashed too, built here by that rule written
    apart). Each is recognised on a copy of the same raw data prepared from another path (other file checksums),
    the files it trained on gone, so that the recorded points alone tell: a note, no refusal. Other points are
    still refused; a copy with another estimate of the normals is no other data."""
    from pointgeope.engine.checkpoint import CheckpointError
    from pointgeope.engine.trained_data import check_data

    raw = five_rooms(tmp_path / "raw")
    areas = ("Area_1", "Area_2")
    _older_prepare(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "before", progress=False))  # a prepare before normals
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "since", progress=False))
    recorded = {"before": {a: points_with_normals(tmp_path / f"before/{a}.h5") for a in areas},  # no normal in it
                "since": {a: points_with_normals(tmp_path / f"since/{a}.h5") for a in areas}}
    trained = {name: json.loads((tmp_path / name / "manifest.json").read_text())["checksums"] for name in recorded}
    assert recorded["before"] != recorded["since"]  # the rule of the versions since normals hashed them
    moved = shutil.copytree(raw, tmp_path / "moved")
    copies = {"same estimate": tmp_path / "copy"}
    prepare(PrepareConfig(moved, copies["same estimate"], progress=False))
    _other_estimate(monkeypatch)
    prepare(PrepareConfig(moved, tmp_path / "other_estimate", progress=False))
    monkeypatch.undo()
    copies["another estimate"] = tmp_path / "other_estimate"
    for name in recorded:
        for path in (tmp_path / name).glob("Area_*.h5"):
            path.unlink()  # the files it trained on are gone
    for name, points in recorded.items():
        for kind, copy in copies.items():
            now = json.loads((copy / "manifest.json").read_text())["checksums"]
            assert all(now[a] != trained[name][a] for a in areas)
            notes = []
            if name == "since" and kind == "another estimate":  # its checksum holds the normals it read: they
                with pytest.raises(CheckpointError, match="their points differ"):  # are gone, nothing tells
                    check_data("last.pt", trained[name], now, copy, notes.append, points, tmp_path / name)
                continue
            check_data("last.pt", trained[name], now, copy, notes.append, points, tmp_path / name)
            assert len(notes) == 1 and "), of the same points: only where they were prepared from" in notes[0], \
                (name, kind, notes)
    (raw / "Area_2/room_b/Annotations/table_1.txt").write_bytes(b"0.5 0.5 0.25 3 3 3\n")  # other points now
    prepare(PrepareConfig(raw, tmp_path / "other", progress=False))
    other = json.loads((tmp_path / "other/manifest.json").read_text())["checksums"]
    for name, points in recorded.items():
        with pytest.raises(CheckpointError, match=r"\(Area_2.h5 trained on [^;]*\): their points differ"):
            check_data("last.pt", trained[name], other, tmp_path / "other", print, points, tmp_path / name)


def test_the_points_checksum_leaves_the_normals_out(tmp_path, monkeypatch):
    """The rule, against the one written apart: a file with normals, and one of another estimate of them, have
    the points checksum of a file without them; a measured array changed changes it."""
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "now", progress=False))
    _other_estimate(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "other", progress=False))
    monkeypatch.undo()
    _older_prepare(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "none", progress=False))
    for area in ("Area_1", "Area_2"):
        got = {name: points_checksum(tmp_path / name / f"{area}.h5") for name in ("now", "other", "none")}
        assert set(got.values()) == {_measured_points(tmp_path / f"now/{area}.h5")}, area
        assert points_with_normals(tmp_path / f"now/{area}.h5") != got["now"]
    with h5py.File(tmp_path / "now/Area_2.h5", "a") as f:
        f["room_b/color"][0, 0] ^= 1
    assert points_checksum(tmp_path / "now/Area_2.h5") == _measured_points(tmp_path / "now/Area_2.h5") != got["now"]


@pytest.mark.parametrize("normal", [True, False], ids=["data.normal", "ptv1"])
def test_a_run_whose_points_checksum_holds_its_normals_is_not_told_its_points_differ(tmp_path, monkeypatch,
                                                                                   normal):
    """A data.normal run recorded before "data_normals" hashed the normals it read into its points checksums; on
    a copy of the same raw data with normals of another estimate (its own files gone) nothing tells whether only
    those normals differ, and the refusal said "their points differ" as a fact. It says that the normals may be
    all; a run that read none (PTv1) is refused as before, with no word of normals."""
    from pointgeope.engine.checkpoint import CheckpointError
    from pointgeope.engine.trained_data import check_data_of

    raw = five_rooms(tmp_path / "raw")
    areas = ("Area_1", "Area_2")
    _before_the_version(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "trained", progress=False))
    monkeypatch.undo()
    ckpt = {"config": {"data": {"normal": normal, "root": str(tmp_path / "trained")}},
            "data": json.loads((tmp_path / "trained/manifest.json").read_text())["checksums"],
            "data_points": {a: points_with_normals(tmp_path / f"trained/{a}.h5") for a in areas}}
    _other_estimate(monkeypatch)
    prepare(PrepareConfig(shutil.copytree(raw, tmp_path / "moved"), tmp_path / "copy", progress=False))
    monkeypatch.undo()
    shutil.rmtree(tmp_path / "trained")
    now = json.loads((tmp_path / "copy/manifest.json").read_text())["checksums"]
    with pytest.raises(CheckpointError) as err:
        check_data_of("last.pt", ckpt, now, tmp_path / "copy", print)
    message = str(err.value).replace(str(tmp_path), "TMP")
    assert ": their points differ, not only where they were prepared from" in message
    clause = ", or only the normals it read, which the checksums of its points hold too (recorded by an older " \
             "pointgeope); restore"
    assert (clause in message) is normal and ("normal" in message) is normal
