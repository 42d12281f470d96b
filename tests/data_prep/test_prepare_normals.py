"""The normals prepare stores (``/<room>/normal``), and folders prepared before them: read as before, refused
by name where normals are asked for, and completed by a prepare into them (resumably), runs on them kept valid."""
from __future__ import annotations

import json
import re
import shutil

import h5py
import numpy as np
import pytest

import data_prep.renormal
import data_prep.room
from data_prep.prepare import PrepareConfig, prepare
from pointgeope import h5
from pointgeope.checksum import file_checksum, points_checksum
from pointgeope.data.check import check_area_file
from pointgeope.data.identity import same_points
from pointgeope.data.normals import K_NORMAL, NORMAL_VERSION, estimate_normals
from tests.data.points_rules import measured_points as _measured_points, points_with_normals
from tests.data_prep.raw_trees import five_rooms, output_bytes
from tests.data_prep.test_prepare import Killed, _count_parsed

RENORMAL_ROOM = data_prep.renormal.renormal_room


def _older_prepare(monkeypatch) -> None:
    """Prepare as a version before normals did: rooms without ``normal`` and without ``normal_k``."""
    monkeypatch.setattr(data_prep.room, "add_normals", lambda arrays, attrs: 0.0)


def test_every_prepared_room_holds_the_normals_of_its_coordinates(s3dis_real, tmp_path, capsys):
    out = tmp_path / "out"
    prepare(PrepareConfig(s3dis_real, out, progress=False))
    printed = capsys.readouterr().out  # their time apart from the parsing's (the larger part, see prepare.md)
    assert "Area_2: 1 room (1 parsed: " in printed and " MB/s per worker, normals " in printed
    assert "; normals " in printed and " s of the workers' time); wrote " in printed
    for area, room in [("Area_1", "office_2"), ("Area_2", "office_resampled")]:
        got = h5.read_room(out / f"{area}.h5", room, fields=("coord", "normal"))
        assert got["normal"].dtype == np.float16 and got["normal"].shape == got["coord"].shape
        np.testing.assert_array_equal(got["normal"], estimate_normals(got["coord"]).astype(np.float16))
        norm = np.linalg.norm(got["normal"].astype(np.float64), axis=1)
        assert np.abs(norm - 1).max() < 1e-3  # float16 keeps unit length to 1e-3
        with h5py.File(out / f"{area}.h5") as f:
            assert f[room].attrs["normal_k"] == K_NORMAL
        assert check_area_file(out / f"{area}.h5") == h5.list_rooms(out / f"{area}.h5")


def test_a_folder_of_an_older_prepare_is_read_without_normals_and_refused_with_them(tmp_path, monkeypatch):
    raw = five_rooms(tmp_path / "raw")
    _older_prepare(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "old", progress=False))
    path = tmp_path / "old/Area_2.h5"
    assert set(h5.read_room(path, "room_b")) == {"coord", "color", "label", "instance"}  # PTv1 reads as before
    assert check_area_file(path) == {"room_b": 3}
    with pytest.raises(h5.SchemaError) as err:
        h5.read_room(path, "room_b", fields=("coord", "normal"))
    assert str(err.value) == (f"{path}: room 'room_b' has no normals (prepared by an older pointgeope); run "
                              "`pointgeope prepare RAW OUT` again into its folder, which adds them")
    with pytest.raises(h5.SchemaError, match=r"room 'room_b': expected datasets \['coord', 'weight'\], missing"):
        h5.read_room(path, "room_b", fields=("coord", "weight"))


def _renormalled(monkeypatch, fail_after: int | None = None) -> list[str]:
    """Record the rooms whose normals prepare estimates again from their stored points; optionally die after
    ``fail_after`` rooms."""
    done, real = [], RENORMAL_ROOM

    def renormal_room(path, room):
        if fail_after is not None and len(done) == fail_after:
            raise Killed
        done.append(room)
        return real(path, room)

    monkeypatch.setattr(data_prep.renormal, "renormal_room", renormal_room)
    return done


def _other_estimate(monkeypatch) -> None:
    """Prepare as a version of another normal estimate did: other normals (flipped), ``normal_version`` 0."""
    from pointgeope.data import normals

    monkeypatch.setattr(normals, "NORMAL_VERSION", 0)
    real = normals.estimate_normals
    monkeypatch.setattr(normals, "estimate_normals", lambda coord, k=K_NORMAL: -real(coord, k))


def _before_the_version(monkeypatch) -> None:
    """Prepare as a version before ``normal_version`` did: the same normals, ``normal_k`` alone."""
    real = data_prep.room.add_normals

    def add_normals(arrays, attrs):
        seconds = real(arrays, attrs)
        del attrs["normal_version"]
        return seconds

    monkeypatch.setattr(data_prep.room, "add_normals", add_normals)


@pytest.mark.parametrize("older", [_older_prepare, _other_estimate, _before_the_version],
                         ids=["no normals", "another estimate", "no normal_version"])
def test_prepare_into_an_older_folder_estimates_the_normals_again_resumably(tmp_path, monkeypatch, capsys, older):
    """Their signatures match, but rooms without this version's normals are not up to date: a prepare into the
    folder estimates them again from the rooms' stored points, parsing no raw file (a kill in between resumes
    from the work files), and ends with the files of a fresh prepare; the points checksums are those of the
    older files (the normals are no part of them), and manifest.json lists the older files as of the same
    points, so that runs trained on them stay valid."""
    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    older(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    old = {area: (file_checksum(out / f"{area}.h5"),
                  points_checksum(out / f"{area}.h5")) for area in ("Area_1", "Area_2")}
    monkeypatch.undo()
    capsys.readouterr()
    parsed, done = _count_parsed(monkeypatch), _renormalled(monkeypatch, fail_after=2)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, out, progress=False))
    assert ("note: Area_1: 4 rooms stored without this version's normals (an older prepare): estimating them "
            f"again from their stored points (k={K_NORMAL}, version {NORMAL_VERSION}), their raw files not parsed "
            "again") in capsys.readouterr().err
    done = _renormalled(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    assert len(done) == 3 and parsed == []  # 5 rooms, 2 from the killed run's work files; no raw file parsed
    printed = capsys.readouterr().out
    assert "Area_1: 4 rooms (normals " in printed and " s, 3 with normals estimated again), 16 points; " in printed
    assert " parsed: " not in printed.split("prepared 2 areas")[0]
    last = printed.strip().splitlines()[-1]  # it parsed nothing: no "parsed 0 B ... 0.0 MB/s"
    assert re.fullmatch(r"prepared 2 areas, 5 rooms \(0 refused\), 19 points in [\d.]+ s; parsed nothing; "
                        r"estimated the normals of 3 rooms again from their stored points in [\d.]+ s \(--jobs 1; "
                        rf"normals [\d.]+ s of the workers' time\); wrote {re.escape(str(out))}/manifest.json, "
                        r".*/folds.json", last), last
    prepare(PrepareConfig(raw, out, progress=False))
    assert len(done) == 3 and parsed == []  # now up to date
    assert "points in " in (last := capsys.readouterr().out.strip().splitlines()[-1]) and \
        "; parsed nothing (every room up to date); wrote " in last, last
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    fresh = output_bytes(tmp_path / "fresh")
    now = output_bytes(out)
    assert {k: now[k] for k in ("Area_1.h5", "Area_2.h5", "folds.json")} == \
        {k: fresh[k] for k in ("Area_1.h5", "Area_2.h5", "folds.json")}
    with h5py.File(out / "Area_1.h5") as f:
        assert {(int(f[r].attrs["normal_k"]), int(f[r].attrs["normal_version"])) for r in f} == \
            {(K_NORMAL, NORMAL_VERSION)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["same_points"] == {area: [checksum] for area, (checksum, _) in old.items()}
    assert json.loads(fresh["manifest.json"])["same_points"] == {}
    for area, (checksum, points) in old.items():
        assert points == manifest["points"][area] == _measured_points(out / f"{area}.h5")
        assert same_points(area, checksum, out) is True  # by the manifest's list
        # a run that recorded the older file's points, checked against a fresh folder (no list): the same points
        assert same_points(area, checksum, tmp_path / "fresh", {area: points}) is True


@pytest.mark.parametrize("normal, message", [
    (np.full((3, 3), np.nan, dtype=np.float16), "a non-finite normal"),
    (np.zeros((3, 3), dtype=np.float32), r"expected normal float16 of shape \(3, 3\), got float32 \(3, 3\)"),
    (np.zeros((2, 3), dtype=np.float16), r"expected normal float16 of shape \(3, 3\), got float16 \(2, 3\)"),
    (np.array([[0, 0, 1], [0, 0, 0], [0, 0, 1]], dtype=np.float16),
     r"1 normal not of unit length \(point 1: length 0\)"),
    (np.array([[0.6, 0.8, 0], [0, 0, 1], [0, 2, 0]], dtype=np.float16),
     r"1 normal not of unit length \(point 2: length 2\)"),
    (np.array([[0, 0, 0], [0, 0, 1], [0, 2, 0]], dtype=np.float16),
     r"2 normals not of unit length \(point 0: length 0\)"),
])
def test_the_check_of_area_files_refuses_a_damaged_normal(tmp_path, normal, message):
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    path = tmp_path / "out/Area_2.h5"
    (tmp_path / "out/manifest.json").unlink()  # no checksum to trip first: the room check itself
    with h5py.File(path, "a") as f:
        del f["room_b/normal"]
        f["room_b"].create_dataset("normal", data=normal)
    with pytest.raises(h5.SchemaError, match=f"room 'room_b': {message}"):
        check_area_file(path)


def test_a_scan_predictions_file_keeps_the_normals_it_is_given(tmp_path):
    from pointgeope.h5_predictions import write_scan_predictions

    arrays = {"coord": np.zeros((2, 3), np.float32), "color": np.zeros((2, 3), np.uint8),
              "label": np.zeros(2, np.uint8), "instance": np.zeros(2, np.int32),
              "normal": np.array([[0, 0, 1], [0.6, 0.8, 0]], np.float32)}
    write_scan_predictions(tmp_path / "a_pred.h5", "Area_0", "a", arrays, np.zeros(2), ["ceiling"], "a.ply", {})
    got = h5.read_room(tmp_path / "a_pred.h5", "a", fields=("normal",))["normal"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, arrays["normal"].astype(np.float16))
    del arrays["normal"]
    write_scan_predictions(tmp_path / "b_pred.h5", "Area_0", "b", arrays, np.zeros(2), ["ceiling"], "b.ply", {})
    with h5py.File(tmp_path / "b_pred.h5") as f:
        assert "normal" not in f["b"]


@pytest.mark.parametrize("value", ["1", 1.5, True, np.array([1, 2])])
def test_a_damaged_estimate_attribute_has_the_normals_estimated_again(tmp_path, value):
    """normal_version (or normal_k) that is no integer names no estimate: prepare estimates the room's normals
    again (before: int() of it, a ValueError or TypeError traceback, or a damaged version taken as current)."""
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    fresh = (tmp_path / "out/Area_2.h5").read_bytes()
    with h5py.File(tmp_path / "out/Area_2.h5", "r+") as f:
        f["room_b"].attrs["normal_version"] = value
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())  # a file the manifest trusts
    manifest["checksums"]["Area_2"] = file_checksum(tmp_path / "out/Area_2.h5")
    (tmp_path / "out/manifest.json").write_text(json.dumps(manifest))
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert (tmp_path / "out/Area_2.h5").read_bytes() == fresh


def test_a_run_recorded_before_the_estimate_record_is_warned_of_the_normals_estimated_again(tmp_path, monkeypatch):
    """A run of data.normal recorded before "data_normals" read version 1 (k = 30, the estimate of every version
    before the record), in a folder of normal_k alone. Prepared again by this version, the folder holds the same
    points with this version's normals: the run is recognised on them, and told of the other estimate."""
    from pointgeope.engine.trained_data import check_data_of

    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    _other_estimate(monkeypatch)
    _before_the_version(monkeypatch)  # version 1's folders: other normals, normal_k alone
    prepare(PrepareConfig(raw, out, progress=False))
    monkeypatch.undo()
    areas = ("Area_1", "Area_2")
    trained = json.loads((out / "manifest.json").read_text())["checksums"]
    ckpt = {"config": {"data": {"normal": True, "root": str(out)}}, "data": trained,  # no "data_normals"
            "data_points": {a: points_with_normals(out / f"{a}.h5") for a in areas}}
    prepare(PrepareConfig(raw, out, progress=False))
    now = json.loads((out / "manifest.json").read_text())["checksums"]
    assert all(now[a] != trained[a] for a in areas)
    lines = []
    check_data_of("last.pt", ckpt, now, out, lines.append)
    assert len(lines) == 2 and "), of the same points: " in lines[0], lines
    assert lines[1].startswith(f"warning: last.pt read normals of another estimate than the files hold now "
                               f"(Area_1 k={K_NORMAL}, version 1 then, k={K_NORMAL}, version {NORMAL_VERSION} "
                               "now; Area_2 "), lines


@pytest.mark.parametrize("where", ["replace", "manifest"])
def test_a_kill_after_an_area_file_is_replaced_keeps_the_older_files_as_of_the_same_points(tmp_path, monkeypatch,
                                                                                            where):
    """A prepare into an older folder, killed after it replaced an area file but before manifest.json: the rerun
    trusts the new file (assembled.json), but only the replaced file told that both hold the same points, and
    the rerun wrote same_points without it ({} or one area of two), so runs trained on the older files that
    records no points checksum (or one that hashed the normals they read) were refused on the same points."""
    from tests.data_prep.test_prepare_resume import _kill_at

    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    _other_estimate(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    monkeypatch.undo()
    old = {area: file_checksum(out / f"{area}.h5") for area in ("Area_1", "Area_2")}
    shutil.copytree(out, tmp_path / "straight")
    prepare(PrepareConfig(raw, tmp_path / "straight", progress=False))  # the same, not interrupted
    _kill_at(monkeypatch, where)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, out, progress=False))
    monkeypatch.undo()
    prepare(PrepareConfig(raw, out, progress=False))
    assert output_bytes(out)["manifest.json"] == output_bytes(tmp_path / "straight")["manifest.json"] \
        .replace(str(tmp_path / "straight").encode(), str(out).encode())
    assert json.loads((out / "manifest.json").read_text())["same_points"] == {a: [c] for a, c in old.items()}
    assert not (out / ".work").exists()
    for area, checksum in old.items():
        assert same_points(area, checksum, out) is True


def test_a_room_of_a_prepare_before_the_colour_record_gets_it_with_its_normals(tmp_path, monkeypatch):
    """A folder of a version that recorded neither this estimate nor ``no_color``: the prepare that estimates its
    rooms' normals again records their colour too (read anyway), so that the files end as a fresh prepare's,
    byte for byte, and train can name a room without colour (before: the rooms stayed without the record)."""
    from pointgeope.data.color_record import NO_COLOR

    real = data_prep.room._room_attrs

    def before_the_record(*args, **kwargs):
        attrs = real(*args, **kwargs)
        del attrs[NO_COLOR]
        return attrs

    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    _older_prepare(monkeypatch)
    monkeypatch.setattr(data_prep.room, "_room_attrs", before_the_record)
    prepare(PrepareConfig(raw, out, progress=False))
    with h5py.File(out / "Area_1.h5") as f:
        assert not any(NO_COLOR in f[r].attrs for r in f)      # the older folder, as simulated
    monkeypatch.undo()
    prepare(PrepareConfig(raw, out, progress=False))
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    for area in ("Area_1.h5", "Area_2.h5"):
        with h5py.File(out / area) as f:
            assert all(f[r].attrs[NO_COLOR] == False for r in f), area  # noqa: E712 (numpy's bool)
        assert (out / area).read_bytes() == (tmp_path / "fresh" / area).read_bytes(), area
