"""data_prep/prepare.py interrupted: a run killed (in-process or as a process) at each step resumes to the same
files, damaged or older work files are parsed again, the manifest written last."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import data_prep.room
from data_prep.prepare import PrepareConfig, prepare
from tests.data_prep.raw_trees import five_rooms, output_bytes, write_tree
from tests.data_prep.test_prepare import Killed, _count_parsed


def test_interrupted_run_resumes_to_the_same_files(tmp_path, monkeypatch):
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "clean", progress=False))
    parsed = _count_parsed(monkeypatch, fail_after=2)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert len(parsed) == 2 and not (tmp_path / "out/Area_1.h5").exists()
    assert len(list((tmp_path / "out/.work").rglob("*.h5"))) == 2
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert len(parsed) == 3  # 5 rooms, 2 taken from the work files
    assert output_bytes(tmp_path / "out") == output_bytes(tmp_path / "clean")
    assert not (tmp_path / "out/.work").exists()


@pytest.mark.parametrize("member", ["link", "loop", "group", "room link"])
def test_a_damaged_work_file_is_parsed_again(tmp_path, monkeypatch, member):
    """A work file of an interrupted run whose room's ``label`` is a link that points nowhere (or a group): the
    resume took the room from it and ended in h5py's KeyError (a traceback), or in a line that said to run
    prepare again, which took it again; the room is now parsed again and the files are those of a clean run.
    So is one whose room is a link to a group of another name (``room link``), which prepare never writes, and
    which the resume took as it was, and one whose ``label`` is a link to itself (``loop``): HDF5's RuntimeError
    "too many links" ended the resume (a traceback)."""
    raw = five_rooms(tmp_path / "raw")
    prepare(PrepareConfig(raw, tmp_path / "clean", progress=False))
    _count_parsed(monkeypatch, fail_after=2)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    work = next(p for p in sorted((tmp_path / "out/.work").rglob("*.h5")) if not p.name.startswith("."))
    with h5py.File(work, "a") as f:
        (room,) = list(f)
        if member == "room link":
            f.move(room, "held")
            f[room] = h5py.SoftLink("/held")
            f["held/label"][0] = (f["held/label"][0] + 1) % 13  # a room taken from it would differ from RAW
        else:
            del f[f"{room}/label"]
        if member in ("link", "loop"):
            f[f"{room}/label"] = h5py.SoftLink("/gone" if member == "link" else f"/{room}/label")
        elif member == "group":
            f[room].create_group("label")
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert len(parsed) == 4  # 5 rooms, 1 taken from the work file left whole
    assert output_bytes(tmp_path / "out") == output_bytes(tmp_path / "clean")


def test_georeferenced_rooms_keep_their_origin_through_work_files_and_a_resume(tmp_path, monkeypatch):
    """The origin attribute (a room 16,384 m or more from 0 stored minus it) reaches the area file through the work
    file of a killed run, and predict reads the room back in the raw file's coordinates."""
    from pointgeope.scans.sources import ScanRef, read_scan

    rng = np.random.default_rng(8)
    raw = {}
    for room in ("office_1", "office_2"):
        xyz = np.round(rng.random((60, 3)) * [6, 5, 3] + [500123.456, 4000321.987, 0.25], 3)
        raw[room] = xyz
        write_tree(tmp_path / "raw", {f"Area_1/{room}/Annotations/wall_1.txt": "".join(
            f"{x:.3f} {y:.3f} {z:.3f} 10 20 30\n" for x, y, z in xyz).encode()})
    _count_parsed(monkeypatch, fail_after=1)
    with pytest.raises(Killed):
        prepare(PrepareConfig(tmp_path / "raw", tmp_path / "out", progress=False))
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(tmp_path / "raw", tmp_path / "out", progress=False))
    assert parsed == ["Area_1/office_2"]   # office_1 from its work file
    for room, xyz in raw.items():
        scan = read_scan(ScanRef(tmp_path / "out/Area_1.h5", "h5", f"Area_1/{room}", room))
        np.testing.assert_allclose(scan.coord, xyz, rtol=0, atol=1e-6)
        with h5py.File(tmp_path / "out/Area_1.h5") as f:
            np.testing.assert_array_equal(f[room].attrs["origin"], np.floor(xyz.min(axis=0)))  # floor of the minimum


def test_rooms_an_older_prepare_stored_without_their_origin_are_parsed_again(tmp_path, monkeypatch, capsys):
    """Rooms far from 0 were stored as float32 as they came (25 cm steps at y = 4e6 m) before they were stored
    minus an origin; their signature is the same, so a rerun kept them (in an area file or a killed run's work
    file) and did not give the files of a fresh prepare. A room near 0 stays up to date."""
    rng = np.random.default_rng(9)
    files = {}
    for room, n, shift in (("Area_1/geo_a", 60, [500123.456, 4000321.987, 0.25]),
                           ("Area_1/geo_b", 60, [500100, 4000300, 0]), ("Area_2/near", 20, [0, 0, 0])):  # near: last
        xyz = np.round(rng.random((n, 3)) * [6, 5, 3] + shift, 3)
        files[f"{room}/Annotations/wall_1.txt"] = "".join(f"{x:.3f} {y:.3f} {z:.3f} 10 20 30\n"
                                                               for x, y, z in xyz).encode()
    raw = write_tree(tmp_path / "raw", files)
    monkeypatch.setattr(data_prep.room, "float32_origin", lambda values: None)  # the older prepare
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    _count_parsed(monkeypatch, fail_after=1)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, tmp_path / "killed", progress=False))
    assert len(list((tmp_path / "killed/.work").rglob("*.h5"))) == 1
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    capsys.readouterr()
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert sorted(parsed) == ["Area_1/geo_a", "Area_1/geo_b"]
    err = capsys.readouterr().err
    assert "warning: Area_1/geo_a: stored by an older prepare with coordinates up to 4,000,327 m" in err
    prepare(PrepareConfig(raw, tmp_path / "killed", progress=False))
    assert len(parsed) == 5  # the work file's room as well as the two not parsed before the kill
    assert output_bytes(tmp_path / "out") == output_bytes(tmp_path / "fresh") == output_bytes(tmp_path / "killed")
    prepare(PrepareConfig(raw, tmp_path / "out", progress=False))
    assert len(parsed) == 5  # now up to date


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_files(s3dis_real, tmp_path):
    """SIGKILL a real `pointgeope prepare` after its first room is written; the rerun gives the same bytes."""
    raw = tmp_path / "raw"
    big = s3dis_real / "Area_2/office_resampled/Annotations"
    (raw / "Area_1/office_0/Annotations").mkdir(parents=True)
    for f in big.iterdir():  # the real room's lines 8 times over: an 8 MB room
        (raw / "Area_1/office_0/Annotations" / f.name).write_bytes(f.read_bytes() * 8)
    # two more such rooms (symlinks) in Area_1, parsed after the first is written, as the kill comes (the kill needs
    # one); the small real room in Area_2
    for k in range(1, 3):
        (raw / f"Area_1/office_{k}").mkdir(parents=True)
        (raw / f"Area_1/office_{k}/Annotations").symlink_to(raw / "Area_1/office_0/Annotations")
    (raw / "Area_2/office_2").mkdir(parents=True)
    (raw / "Area_2/office_2/Annotations").symlink_to(s3dis_real / "Area_1/office_2/Annotations")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pointgeope", "prepare", str(raw), str(out), "--jobs", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not [p for p in (out / ".work").rglob("*.h5") if not p.name.startswith(".")]:
        assert proc.poll() is None and time.monotonic() < deadline, "prepare ended before writing a room"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "Area_1.h5").exists(), "the kill came too late to test a resume"
    prepare(PrepareConfig(raw, out, progress=False))
    prepare(PrepareConfig(raw, tmp_path / "clean", progress=False))
    assert output_bytes(out) == output_bytes(tmp_path / "clean")
    assert not (out / ".work").exists()


def _kill_at(monkeypatch, where: str) -> None:
    """End prepare (Killed) right after it has recorded the first area's checksum, after the first area file
    has replaced the old one, or before manifest.json."""
    import shutil

    import data_prep.prepare
    import data_prep.writer

    def killed(*args, **kwargs):
        raise Killed

    if where == "manifest":
        monkeypatch.setattr(data_prep.prepare, "_write_manifests", killed)
    elif where == "record":
        write_json = data_prep.writer.write_json

        def record_then_die(path, obj):
            write_json(path, obj)
            raise Killed

        monkeypatch.setattr(data_prep.writer, "write_json", record_then_die)
    else:
        rmtree = shutil.rmtree
        monkeypatch.setattr(shutil, "rmtree", lambda path, **kw: killed() if path.parent.name == ".work"
                            else rmtree(path, **kw))


@pytest.mark.parametrize("where", ["record", "replace", "manifest"])
def test_a_run_killed_before_its_manifest_resumes_without_parsing_or_warning(tmp_path, monkeypatch, capsys, where):
    """Killed after assembling an area but before manifest.json: the rerun distrusted the new area file
    (its checksum was not recorded yet), warned that it did not match, and parsed its rooms again."""
    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    (raw / "Area_1/office_1/Annotations/table_1.txt").write_bytes(b"7 1 2 3 4 5\n")  # Area_1 and Area_2 change
    (raw / "Area_2/room_b/Annotations/table_1.txt").write_bytes(b"0.5 0.5 0.75 3 3 3\n0.5 0.5 0.5 4 4 4\n")
    _kill_at(monkeypatch, where)
    parsed = _count_parsed(monkeypatch)
    with pytest.raises(Killed):
        prepare(PrepareConfig(raw, out, progress=False))
    assert sorted(parsed) == ["Area_1/office_1", "Area_2/room_b"]
    monkeypatch.undo()
    capsys.readouterr()
    parsed = _count_parsed(monkeypatch)
    prepare(PrepareConfig(raw, out, progress=False))
    assert parsed == [] and "warning" not in capsys.readouterr().err
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    assert output_bytes(out) == output_bytes(tmp_path / "fresh")
    assert not (out / ".work").exists()
