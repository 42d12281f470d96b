"""`pointgeope predict` with any file name a file system allows (non-ASCII, spaces, a newline, bytes that
are not UTF-8): every output readable, no raw name where a format forbids it, one failure stops nothing,
and the closing summary names what failed (issue 38, class 1)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.h5_predictions import read_predictions
from pointgeope.scans.ply import read_ply

NAMES = ["ünïcödé_点云", "with space", "new\nline", os.fsdecode(b"raw\xff")]


def test_any_file_name_is_predicted_and_its_ply_reads_back(tiny_run, tmp_path, capsys):
    """Before: the non-ASCII name ended in UnicodeEncodeError in the PLY header (rc 1, the later inputs
    never tried) and the newline wrote a header that neither reader could read (rc 0)."""
    rng = np.random.default_rng(0)
    cloud = np.c_[rng.random((300, 3)) * [3, 3, 2], rng.integers(0, 256, (300, 3))]
    for name in NAMES:
        np.save(tmp_path / f"{name}.npy", cloud)
    (tmp_path / "broken.npy").write_bytes(b"not numpy")
    inputs = [str(tmp_path / f"{n}.npy") for n in NAMES[:2]] + [str(tmp_path / "broken.npy")] + \
        [str(tmp_path / f"{n}.npy") for n in NAMES[2:]]
    out = tmp_path / "o"
    code = cli(["predict", str(tiny_run), *inputs, "--out", str(out), "--format", "npy,ply,h5,txt"])
    stdout, stderr = capsys.readouterr()
    assert code == 2, stderr
    errors = stderr.splitlines()
    assert len(errors) == 1 and "broken.npy: not a readable .npy array" in errors[0], errors
    first = np.load(out / f"{NAMES[0]}_pred.npy")
    for name in NAMES:
        np.testing.assert_array_equal(np.load(out / f"{name}_pred.npy"), first)
        room = name.encode("utf-8", "backslashreplace").decode()  # HDF5 names are UTF-8: raw\udcff
        np.testing.assert_array_equal(read_predictions(out / f"{name}_pred.h5", room), first)
        ply = out / f"{name}_pred.ply"
        header = ply.read_bytes().split(b"end_header\n")[0]
        assert header.isascii() and header.count(b"\n") == 11, header  # ply, format, comment, element, 7 props
        scan = read_ply(ply)
        np.testing.assert_allclose(scan.coord, cloud[:, :3], rtol=1e-6)
        o3d = pytest.importorskip("open3d")
        np.testing.assert_allclose(o3d.t.io.read_point_cloud(str(ply)).point.positions.numpy(), cloud[:, :3],
                                   rtol=1e-6)
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(f"predicted 4 of 5 inputs into {out}; 1 failed: ") and "broken.npy" in last, last


def test_a_raw_room_named_in_non_ascii_is_predicted(tiny_run, tiny_root, tmp_path, capsys):
    """A raw S3DIS room folder ``bürö_1`` (its name is the scan's): before, UnicodeEncodeError in the PLY."""
    room = tmp_path / "bürö_1"
    room.mkdir()
    (room / "Annotations").symlink_to(tiny_root.parent / "raw" / "Area_1" / "office_1" / "Annotations")
    assert cli(["predict", str(tiny_run), str(room), "--out", str(tmp_path / "o")]) == 0
    scan = read_ply(tmp_path / "o" / "bürö_1_pred.ply")
    assert len(scan.coord) == len(np.load(tmp_path / "o" / "bürö_1_pred.npy")) > 0
    assert b"b\\xfcr\\xf6_1" in (tmp_path / "o" / "bürö_1_pred.ply").read_bytes()[:400]


def test_the_ply_comment_escapes_what_the_header_cannot_hold(tmp_path):
    """The header is ASCII lines: a comment keeps its printable ASCII and escapes the rest as Python does
    (``ascii()``), so that the name can still be read from it."""
    from pointgeope.scans.ply import write_vertices

    comment = "of /d/ünï\ncö dé\\x\udcff"
    path = write_vertices(tmp_path / "a.ply", [("x", np.zeros(2, np.float32))], comment=comment)
    header = path.read_bytes().split(b"end_header\n")[0].decode("ascii").splitlines()
    assert header[2] == "comment of /d/\\xfcn\\xef\\nc\\xf6 d\\xe9\\\\x\\udcff"
