"""pointgeope/paths.py: the one check that a written path lies inside its command's output folder."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pointgeope.paths import OutsideError, inside


def test_a_path_inside_passes_and_every_way_out_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert inside(out, out / "a" / "b_pred.npy", "scan.ply") == out / "a" / "b_pred.npy"
    monkeypatch.chdir(tmp_path)
    assert inside("out", "out/x/../y.npy", "scan.ply") == Path("out/x/../y.npy")   # still inside
    out.mkdir()
    os.symlink(tmp_path, out / "elsewhere")
    assert inside(out, out / "elsewhere" / "z.npy", "s") == out / "elsewhere" / "z.npy"   # a link put inside is
                                                                                          # the user's to follow
    for path in ("out/../x_pred.npy", "/x_pred.npy", "out", "out/.", "outer/x.npy", "x.npy"):
        with pytest.raises(OutsideError, match=rf"^scan.ply: its name would put {path} outside --out out; rename it"):
            inside("out", path, "scan.ply", "--out")


def test_same_file_is_the_file_after_links_and_spellings(tmp_path):
    """One rule for 'an output is one of the inputs' (viz's --ply, predict's outputs): another spelling, a
    symbolic link and a hard link of a file are that file; another file with the same bytes, and a path with
    nothing there, are not."""
    from pointgeope.paths import file_key, same_file

    a = tmp_path / "a.ply"
    a.write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.ply").symlink_to(a)
    os.link(a, tmp_path / "hard.ply")
    (tmp_path / "copy.ply").write_bytes(b"x")
    for other in (tmp_path / "sub" / ".." / "a.ply", tmp_path / "link.ply", tmp_path / "hard.ply"):
        assert same_file(other, a) and same_file(a, other)
    assert not same_file(tmp_path / "copy.ply", a)
    assert not same_file(tmp_path / "none.ply", tmp_path / "none.ply") and file_key(tmp_path / "none.ply") is None
