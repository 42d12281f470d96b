"""``pointgeope viz``'s outputs and option mix-ups are refused before anything is read or drawn
(pointgeope/viz/show.py ``check_options``, ``check_outputs``): one line, exit code 2, nothing written."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pointgeope.cli import main


@pytest.fixture
def copies(synthetic_area, tmp_path):
    """Copies of the session's area and predictions files (a failing test may write over them)."""
    area, preds = synthetic_area
    (tmp_path / "data").mkdir()
    return (shutil.copy(area, tmp_path / "data" / "Area_9.h5"), shutil.copy(preds, tmp_path / "data" / "pred.h5"))


def _error(capsys, argv) -> str:
    assert main(["viz", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before the legend: nothing read
    return captured.err.removeprefix("pointgeope viz: error: ").rstrip("\n")


def test_ply_over_the_area_or_the_predictions_being_read_is_refused(copies, tmp_path, capsys, monkeypatch):
    """Before: `--ply AREA` replaced the prepared area by a PLY ("wrote ...", exit 0): the data was gone."""
    area, preds = (str(p) for p in copies)
    before = {p: Path(p).read_bytes() for p in (area, preds)}
    err = _error(capsys, [area, "--room", "grid_1", "--ply", area])
    assert err == (f"--ply {area}: that is the area file being read ({area}); give a new file name, such as "
                   f"{tmp_path / 'data' / 'Area_9_view.ply'}")
    monkeypatch.chdir(tmp_path / "data")  # another spelling of the same file, and a link to it
    os.symlink("pred.h5", "link.ply")
    for out in ("./Area_9.h5", "link.ply", "../data/pred.h5"):
        err = _error(capsys, [area, "--room", "grid_1", "--pred", preds, "--ply", out])
        assert err.startswith(f"--ply {out}: that is the "), err
    assert _error(capsys, [preds, "--ply", preds]).startswith(f"--ply {preds}: that is the area file being read")
    assert _error(capsys, [area, "--room", "grid_1", "--pred", preds, "--screenshot", "link.ply"]).startswith(
        "--screenshot link.ply: that is the --pred file being read")
    assert {p: Path(p).read_bytes() for p in (area, preds)} == before


def test_ply_not_named_ply_is_refused(copies, tmp_path, capsys):
    area, _ = copies
    for name, got in (("x.txt", "'.txt'"), ("x", "'no suffix'")):
        assert _error(capsys, [str(area), "--room", "grid_1", "--ply", str(tmp_path / name)]) == (
            f"--ply {tmp_path / name}: expected a file name ending in .ply (a binary PLY is written), got {got}")
    assert main(["viz", str(area), "--room", "tiny_2", "--ply", str(tmp_path / "X.PLY")]) == 0  # any case


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_ply_onto_a_fifo_is_refused_and_the_fifo_kept(copies, tmp_path, capsys):
    """Before: the rename turned the FIFO into a regular file (as root, /dev/null likewise)."""
    area, _ = copies
    fifo = tmp_path / "f.ply"
    os.mkfifo(fifo)
    assert _error(capsys, [str(area), "--room", "grid_1", "--ply", str(fifo)]) == (
        f"{fifo}: expected a regular file to write (or nothing there), found a named pipe (FIFO); nothing was "
        "written; give a file name")
    assert fifo.is_fifo()


@pytest.mark.parametrize("extra, named", [
    (["--room", "grid_1"], "--room"),
    (["--screenshot", "L.png"], "--screenshot"),
    (["--ply", "L.ply", "--hide", "nonsense"], "--ply, --hide"),
    (["--mode", "gt", "--voxel", "0.1"], "--mode, --voxel"),
])
def test_list_with_drawing_options_is_refused(copies, tmp_path, capsys, monkeypatch, extra, named):
    """Before: --list printed the table and dropped --screenshot/--ply/--room/--hide silently (exit 0)."""
    monkeypatch.chdir(tmp_path)
    area, _ = copies
    err = _error(capsys, [str(area), "--list", *extra])
    assert err == (f"--list only lists the rooms; leave out {named}, or drop --list to draw "
                   + ("room grid_1" if "--room" in extra else "a room (--room ROOM)"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.parametrize("size", ["0.2", "0.99"])
def test_point_size_below_one_pixel_is_refused(copies, tmp_path, capsys, size):
    """Before: accepted, and drawn as 1 pixel (Open3D's smallest point): the image of --point-size 1."""
    area, _ = copies
    assert _error(capsys, [str(area), "--room", "grid_1", "--point-size", size, "--ply", str(tmp_path / "v.ply")]) == (
        f"expected --point-size >= 1 pixel (Open3D draws no point smaller), got {size}")


@pytest.mark.parametrize("suffix", [".h5", ".xbm", ".msp", ".palm", ".grib", ".ico", ".webp", ".PDF"])
def test_screenshot_formats_that_cannot_hold_the_image_are_refused_before_rendering(copies, tmp_path, capsys,
                                                                                     suffix):
    """Before: PIL's registered save suffixes passed; .h5/.xbm/.msp/.palm/.grib rendered, then a traceback
    (exit 1), and .ico said "wrote x.ico: 320x240" of an image of 128x96."""
    area, _ = copies
    out = tmp_path / f"x{suffix}"
    assert _error(capsys, [str(area), "--room", "grid_1", "--screenshot", str(out)]) == (
        f"--screenshot {out}: expected an image file name ending in .png (or .jpg, .jpeg, .bmp, .tif, .tiff), "
        f"got {suffix!r}")
    assert not out.exists()
