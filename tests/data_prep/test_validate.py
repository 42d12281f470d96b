"""What prepare refuses to write: coordinates beyond float32, outliers, huge or empty rooms, bad zips, bad names.

Each case runs the real command (``pointgeope prepare``) and checks the files written, the message (file
and line) and the exit code; the training side of the same defects is ``tests/data/test_check.py``.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from pointgeope import checksum, h5
from pointgeope.cli import main as cli
from pointgeope.data.check import check_areas
from tests.data_prep.raw_trees import write_tree

GOOD = b"0 0 0 1 2 3\n1 1 1 4 5 6\n2 2 2 7 8 9\n"


def _prepare(raw: Path, out: Path, *extra: str) -> int:
    return cli(["prepare", str(raw), str(out), "--jobs", "1", *extra])


def test_coordinate_beyond_float32_is_dropped_with_its_line(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": GOOD + b"1e39 0 0 1 1 1\n3 3 3 1 1 1\n",
                                        "Area_2/r/Annotations/wall_1.txt": GOOD})
    assert _prepare(raw, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "warning: Area_1/r/Annotations/wall_1.txt:4: dropped: coordinate beyond float32: 1e+39 0 0" in err
    room = h5.read_room(tmp_path / "out/Area_1.h5", "r")
    np.testing.assert_array_equal(room["coord"], [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3]])
    assert np.isfinite(room["coord"]).all()
    with h5py.File(tmp_path / "out/Area_1.h5") as f:
        assert f["r"].attrs["dropped_lines"] == 1
    check_areas(tmp_path / "out", ["Area_1", "Area_2"])  # what training checks passes


def test_far_point_is_dropped_or_its_room_refused(tmp_path, capsys):
    files = {"Area_1/r/Annotations/wall_1.txt": GOOD,
             "Area_1/r/Annotations/chair_1.txt": b"0.5 0.5 0.5 1 1 1\n1e20 2 3 1 1 1\n",
             "Area_1/ok/Annotations/wall_1.txt": GOOD, "Area_2/r/Annotations/wall_1.txt": GOOD}
    raw = write_tree(tmp_path / "raw", files)
    assert _prepare(raw, tmp_path / "drop") == 0
    err = capsys.readouterr().err
    assert ("warning: Area_1/r/Annotations/chair_1.txt:2: dropped: point (1e+20 2 3) is 1e+20 m from the room's "
            "median, more than --max-extent 1000 m") in err
    assert h5.list_rooms(tmp_path / "drop/Area_1.h5") == {"ok": 3, "r": 4}

    assert _prepare(raw, tmp_path / "refuse", "--outliers", "refuse") == 0
    captured = capsys.readouterr()
    assert ("warning: Area_1/r: refused, not written: points farther than --max-extent 1000 m from the room's "
            "median (first at Area_1/r/Annotations/chair_1.txt:2)") in captured.err
    assert h5.list_rooms(tmp_path / "refuse/Area_1.h5") == {"ok": 3}
    assert "refused rooms 1" in captured.out and "2 rooms (1 refused)" in captured.out
    manifest = json.loads((tmp_path / "refuse/manifest.json").read_text())
    assert list(manifest["refused"]["Area_1"]) == ["r"] and manifest["totals"]["num_rooms"] == 2


def test_room_larger_than_the_limit_is_refused(tmp_path, capsys):
    spread = b"".join(f"{x} 0 0 1 1 1\n".encode() for x in range(0, 1600, 100))  # 1.5 km, no single outlier
    raw = write_tree(tmp_path / "raw", {"Area_1/big/Annotations/floor_1.txt": spread,
                                        "Area_1/ok/Annotations/wall_1.txt": GOOD})
    assert _prepare(raw, tmp_path / "out") == 0
    assert ("warning: Area_1/big: refused, not written: spans 1500 m along x, more than --max-extent 1000 m"
            in capsys.readouterr().err)
    assert h5.list_rooms(tmp_path / "out/Area_1.h5") == {"ok": 3}
    assert _prepare(raw, tmp_path / "wide", "--max-extent", "2000") == 0  # a real 1.5 km room: raise the limit
    assert h5.list_rooms(tmp_path / "wide/Area_1.h5") == {"big": 16, "ok": 3}
    with h5py.File(tmp_path / "wide/Area_1.h5") as f:
        assert f.attrs["max_extent"] == 2000.0
    check_areas(tmp_path / "wide", ["Area_1"])  # checked against the limit it was prepared with



def test_a_room_or_point_just_past_the_limit_reads_past_it(tmp_path, capsys):
    """A room spanning 1000.001 m (no single point 1000 m from its median) and a point 1000.0001 m from its
    room's median, against --max-extent 1000: both refused, and both refusals said "1000 m, more than
    --max-extent 1000 m" (``:g``'s 6 digits), two numbers that read the same."""
    spread = b"0 0 0 1 1 1\n500 0 0 1 1 1\n1000.001 0 0 1 1 1\n"
    far = b"0 0 0 1 1 1\n0 1 0 1 1 1\n0 2 0 1 1 1\n1000.0001 0 0 1 1 1\n"
    raw = write_tree(tmp_path / "raw", {"Area_1/wide/Annotations/floor_1.txt": spread,
                                        "Area_1/far/Annotations/floor_1.txt": far,
                                        "Area_1/ok/Annotations/wall_1.txt": GOOD})
    assert _prepare(raw, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert ("warning: Area_1/wide: refused, not written: spans 1000.001 m along x, more than --max-extent 1000 m"
            in err)
    assert ("Area_1/far/Annotations/floor_1.txt:4: dropped: point (1000 0 0) is 1000.0001 m from the room's median, "
            "more than --max-extent 1000 m") in err
    assert h5.list_rooms(tmp_path / "out/Area_1.h5") == {"far": 3, "ok": 3}


@pytest.mark.parametrize("content, why", [(b"", "empty file"), (bytes(range(256)) * 40, "not a text file (binary)")])
def test_room_with_no_valid_point_is_not_written(tmp_path, capsys, content, why):
    raw = write_tree(tmp_path / "raw", {"Area_1/bad/Annotations/wall_1.txt": content,
                                        "Area_1/ok/Annotations/wall_1.txt": GOOD,
                                        "Area_2/bad/Annotations/wall_1.txt": content})
    assert _prepare(raw, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert f"warning: Area_1/bad/Annotations/wall_1.txt: skipped: {why}" in captured.err
    assert ("warning: Area_1/bad: refused, not written: no valid point (every file empty, binary or with every "
            "line dropped)") in captured.err
    assert f"warning: Area_2: every room was refused; {tmp_path / 'out/Area_2.h5'} not written" in captured.err
    assert h5.list_rooms(tmp_path / "out/Area_1.h5") == {"ok": 3}
    assert not (tmp_path / "out/Area_2.h5").exists()
    assert json.loads((tmp_path / "out/folds.json").read_text())["folds"] == {"1": {"test": ["Area_1"], "train": []}}
    assert "prepared 1 area, 1 room (2 refused)" in captured.out
    # a rerun remembers the refused rooms (same files): nothing parsed, nothing rewritten
    stamp = (tmp_path / "out/Area_1.h5").stat().st_mtime_ns
    assert _prepare(raw, tmp_path / "out") == 0
    assert "1 room (all up to date)" in capsys.readouterr().out
    assert (tmp_path / "out/Area_1.h5").stat().st_mtime_ns == stamp


def test_no_valid_room_at_all_is_an_error(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"\x00\x01\x02"})
    assert _prepare(raw, tmp_path / "out") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"pointgeope prepare: error: {raw.resolve()}: no room holds a valid point, nothing written "
                       "(see the warnings above); check the files or the limits (--max-extent, --outliers)")
    assert not list((tmp_path / "out").glob("*.h5"))


def _zip(path: Path, members: list[tuple[str, bytes]], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_zip_member_beyond_the_limits_is_refused_by_name(tmp_path, capsys):
    big = _zip(tmp_path / "big.zip", [("Area_1/r/Annotations/wall_1.txt", GOOD * 100)], zipfile.ZIP_STORED)
    assert _prepare(big, tmp_path / "out", "--zip-max-member", "1K") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: {big.resolve()}: member 'Area_1/r/Annotations/"
                                  f"wall_1.txt' unpacks to 3,600 bytes, more than --zip-max-member 1,024; raise "
                                  "the limit if it is real")
    bomb = _zip(tmp_path / "bomb.zip", [("Area_1/r/Annotations/wall_1.txt", b"0 0 0 0 0 0\n" * 200_000)])
    assert _prepare(bomb, tmp_path / "out") == 2
    message = _one_error(capsys)
    assert "member 'Area_1/r/Annotations/wall_1.txt' is compressed" in message and "--zip-max-ratio 100" in message
    assert _prepare(bomb, tmp_path / "out", "--zip-max-ratio", "10000") == 0  # a real file: raise the limit
    assert not (tmp_path / "out" / ".lock").exists()


@pytest.mark.parametrize("option, value, message", [
    ("--zip-max-ratio", "nan", "expected --zip-max-ratio > 0 (a finite compression ratio), got nan"),
    ("--zip-max-ratio", "inf", "expected --zip-max-ratio > 0 (a finite compression ratio), got inf"),
    ("--zip-max-ratio", "-1", "expected --zip-max-ratio > 0 (a finite compression ratio), got -1.0"),
    ("--zip-max-ratio", "0", "expected --zip-max-ratio > 0 (a finite compression ratio), got 0.0"),
    ("--zip-max-member", "0", "expected --zip-max-member > 0 bytes (a size such as 8G or 500M), got 0"),
    ("--zip-max-member", "-1K", "expected --zip-max-member > 0 bytes (a size such as 8G or 500M), got -1024"),
])
def test_zip_limits_out_of_range_are_refused_before_any_work(tmp_path, capsys, option, value, message):
    """--zip-max-ratio nan turned the zip-bomb guard off (every comparison with nan is false: exit 0 on a
    zip bomb); -1 or 0 were refused only when the first member was read, as if the zip were at fault."""
    bomb = _zip(tmp_path / "bomb.zip", [("Area_1/r/Annotations/wall_1.txt", b"0 0 0 0 0 0\n" * 200_000)])
    assert _prepare(bomb, tmp_path / "out", f"{option}={value}") == 2
    assert _one_error(capsys) == f"pointgeope prepare: error: {message}"
    assert not (tmp_path / "out").exists()


def test_a_size_too_large_for_an_integer_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:        # argparse's usage error; it was OverflowError's traceback
        _prepare(tmp_path / "raw", tmp_path / "out", "--zip-max-member", "infG")
    assert exit_.value.code == 2
    assert "--zip-max-member: expected a size such as 8G or 500M, got 'infG'" in capsys.readouterr().err


def test_corrupt_zip_member_is_an_error_naming_it(tmp_path, capsys):
    data = b"".join(f"{i} {i} {i} 1 2 3\n".encode() for i in range(2000))
    path = _zip(tmp_path / "s3dis.zip", [("Area_1/r/Annotations/wall_1.txt", data)])
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # a flipped byte inside the deflate stream
    path.write_bytes(bytes(raw))
    assert _prepare(path, tmp_path / "out") == 2
    message = _one_error(capsys)
    assert message.startswith(f"pointgeope prepare: error: {path.resolve()}: member 'Area_1/r/Annotations/"
                              "wall_1.txt' is corrupt (")
    assert message.endswith("); download the zip again")


def test_duplicate_zip_member_is_an_error_not_doubled_points(tmp_path, capsys):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it writes
        path = _zip(tmp_path / "dup.zip", [("Area_1/r/Annotations/wall_1.txt", GOOD)] * 2)
    assert _prepare(path, tmp_path / "out") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: {path.resolve()}: member 'Area_1/r/Annotations/"
                                  "wall_1.txt' is in the archive twice; expected each file once (re-create the zip)")


def test_names_that_are_not_utf8_are_refused_by_name_and_utf8_names_work(tmp_path, capsys):
    raw = tmp_path / "raw"
    write_tree(raw, {"Area_1/büro_1/Annotations/wall_1.txt": GOOD})  # UTF-8: works
    assert _prepare(raw, tmp_path / "out") == 0
    assert h5.list_rooms(tmp_path / "out/Area_1.h5") == {"büro_1": 3}
    bad = os.path.join(os.fsencode(raw / "Area_1"), b"b\xfcro_2")  # latin-1: not UTF-8
    os.makedirs(os.path.join(bad, b"Annotations"))
    with open(os.path.join(bad, b"Annotations", b"wall_1.txt"), "wb") as f:
        f.write(GOOD)
    capsys.readouterr()
    assert _prepare(raw, tmp_path / "out") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: {raw.resolve()}: the name 'Area_1/b\\\\xfcro_2' is not "
                                  "valid UTF-8; rename it (room and file names become HDF5 group names)")
    # a zip from an old tool: a byte name without the UTF-8 flag could be cp437 ("ü"), cp850 ("ü") or latin-1
    # ("\x81"): nothing tells them apart, so it is refused by name rather than guessed (issue 21)
    _zip(tmp_path / "cp437.zip", [("Area_1/bXro_3/Annotations/wall_1.txt", GOOD)])
    zipped = (tmp_path / "cp437.zip").read_bytes()
    (tmp_path / "cp437.zip").write_bytes(zipped.replace(b"bXro_3", b"b\x81ro_3"))  # both headers
    assert _prepare(tmp_path / "cp437.zip", tmp_path / "zipped") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: {(tmp_path / 'cp437.zip').resolve()}: the member name "
                                  "'Area_1/b\\\\x81ro_3/Annotations/wall_1.txt' is not valid UTF-8 (a zip without the "
                                  "UTF-8 flag: cp437, cp850 or latin-1?); rename it, or unpack the zip and give the "
                                  "folder")
    # UTF-8 bytes without the flag (zip tools that do not set it) are UTF-8
    (tmp_path / "utf8.zip").write_bytes(zipped.replace(b"bXro_3", "büo_3".encode()))
    assert _prepare(tmp_path / "utf8.zip", tmp_path / "zipped") == 0
    assert h5.list_rooms(tmp_path / "zipped/Area_1.h5") == {"büo_3": 3}


def test_dangling_annotation_link_is_an_error_naming_it(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": GOOD})
    (raw / "Area_1/r/Annotations/door_1.txt").symlink_to(tmp_path / "missing.txt")
    assert _prepare(raw, tmp_path / "out") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: {raw.resolve()}/Area_1/r/Annotations/door_1.txt: "
                                  "cannot be read (No such file or directory); check that it exists and is readable")


def test_out_that_is_a_file_is_an_error(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": GOOD})
    (tmp_path / "out").write_text("a file")
    assert _prepare(raw, tmp_path / "out") == 2
    assert _one_error(capsys) == (f"pointgeope prepare: error: OUT {tmp_path / 'out'}: expected a folder, found a "
                                  "file; remove it or give another folder name")


def test_rerun_rebuilds_an_area_file_that_fails_its_checksum(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": GOOD,
                                        "Area_2/r/Annotations/wall_1.txt": GOOD})
    out = tmp_path / "out"
    assert _prepare(raw, out) == 0
    clean = (out / "Area_1.h5").read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["checksums"]) == {"Area_1", "Area_2"}
    assert all(v.startswith("sha256:") for v in manifest["checksums"].values())
    damaged = bytearray(clean)
    damaged[-20] ^= 0x01  # same size, one bit flipped (in the data of the last dataset)
    (out / "Area_1.h5").write_bytes(bytes(damaged))
    capsys.readouterr()
    assert _prepare(raw, out) == 0
    captured = capsys.readouterr()
    assert f"warning: {out / 'Area_1.h5'} does not match its checksum in {out / 'manifest.json'}; rebuilding it" \
        in captured.err
    assert "Area_1: 1 room (1 parsed" in captured.out and "Area_2: 1 room (all up to date)" in captured.out
    assert (out / "Area_1.h5").read_bytes() == clean


def test_a_room_within_the_limit_in_float64_passes_the_check_as_stored_in_float32(tmp_path):
    """x from -41.10643598 to -31.10643659 spans 9.99999939 m (prepare measures the parsed float64 values), within
    --max-extent 10; stored as float32 the two ends are 10.0000019 m apart. Every train refused the file ("spans
    10 m, more than the 10 m it was prepared with; run `pointgeope prepare` again") and a rerun kept it."""
    lines = b"-41.10643598 0 0 1 1 1\n-31.10643659 1 1 1 1 1\n-35 2 2 1 1 1\n-33 0 2 1 1 1\n"
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": lines})
    assert _prepare(raw, tmp_path / "out", "--max-extent", "10") == 0
    with h5py.File(tmp_path / "out/Area_1.h5") as f:
        x = f["r/coord"][:, 0]
    assert np.float64(-31.10643659) - np.float64(-41.10643598) <= 10.0 < x.max() - x.min()  # the case it is
    assert check_areas(tmp_path / "out", ["Area_1"]) == {"Area_1": {"r": 4}}


def test_a_damaged_file_that_matches_its_checksum_is_to_be_deleted_and_that_is_enough(tmp_path, capsys):
    """A room refused by the check in a file whose checksum manifest.json lists (what an older prepare wrote and
    recorded): a rerun keeps the file (its rooms are up to date), so the line says to delete it; doing so works."""
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": GOOD})
    out = tmp_path / "out"
    assert _prepare(raw, out) == 0
    area = out / "Area_1.h5"
    with h5py.File(area, "r+") as f:
        f["r/label"][0] = 13
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["checksums"]["Area_1"] = checksum.file_checksum(area)
    (out / "manifest.json").write_text(json.dumps(manifest))
    advice = (f"{area}: room 'r': label 13 found, expected labels below 13; delete {area} and run `pointgeope "
              "prepare` again (the file matches its checksum in manifest.json, so a rerun alone keeps it)")
    with pytest.raises(h5.SchemaError) as refused:
        check_areas(out, ["Area_1"])
    assert str(refused.value) == advice
    assert _prepare(raw, out) == 0  # prepare again, as the line used to say: the file stays
    with pytest.raises(h5.SchemaError) as again:
        check_areas(out, ["Area_1"])
    assert str(again.value) == advice
    area.unlink()
    assert _prepare(raw, out) == 0
    assert check_areas(out, ["Area_1"]) == {"Area_1": {"r": 3}}
