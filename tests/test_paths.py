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
