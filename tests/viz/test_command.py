"""Tests of ``pointgeope viz`` (pointgeope/commands/viz.py, pointgeope/viz/show.py) that need no display:
--list, --hide, --ply, errors, and the message when Open3D is missing."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from pointgeope.cli import main
from pointgeope.constants import CLASS_NAMES, PALETTE
from pointgeope.viz.render import require_open3d
from tests.viz.conftest import synthetic_room, unlabelled_scan
from tests.viz.test_ply import _read_ply


def test_list_rooms(synthetic_area, capsys):
    area, _ = synthetic_area
    assert main(["viz", str(area), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    n = len(synthetic_room()[1])
    assert [line.split() for line in lines] == [["room", "points"], ["grid_1", f"{n:,}"], ["tiny_2", "4"],
                                               ["2", "rooms,", f"{n + 4:,}", "points"]]


def test_list_rooms_with_predictions_worst_first(synthetic_area, capsys):
    # tiny_2: IoU 1/2 and 2/3 -> mIoU 58.3;  grid_1: floor 1, ceiling 1, table 0, chair 1/2 -> mIoU 62.5
    area, preds = synthetic_area
    assert main(["viz", str(area), "--list", "--pred", str(preds)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["room", "points", "mIoU", "%"]
    assert lines[1].split()[::2] == ["tiny_2", "58.3"] and lines[2].split()[::2] == ["grid_1", "62.5"]


def test_list_rooms_with_partial_predictions(synthetic_area, tmp_path, capsys):
    from tests.viz.conftest import write_predictions

    area, _ = synthetic_area
    preds = write_predictions(tmp_path / "partial.h5", {"tiny_2": np.array([0, 0, 1, 1])})
    assert main(["viz", str(area), "--list", "--pred", str(preds)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"note: 1 room has no predictions in {preds}"
    assert lines[2].split()[::2] == ["tiny_2", "100.0"] and lines[3].split()[::2] == ["grid_1", "-"]


def test_unknown_hidden_class_lists_the_valid_ones(synthetic_area, capsys):
    area, _ = synthetic_area
    assert main(["viz", str(area), "--room", "grid_1", "--hide", "ceiling,roof", "--ply", "x.ply"]) == 2
    err = capsys.readouterr().err
    assert "unknown class name 'roof'" in err and all(name in err for name in CLASS_NAMES)


@pytest.mark.parametrize("argv, message", [
    (["--room", "nope"], "--room 'nope': no such room in"),
    ([], "expected --room ROOM or --list; rooms in"),
    (["--room", "grid_1", "--mode", "error"], "--mode error needs --pred"),
    (["--room", "grid_1", "--voxel", "-1"], "expected --voxel from 1e-06 to 1000 metres"),
    (["--room", "grid_1", "--hide", ",".join(CLASS_NAMES)], "no point left to draw"),
])
def test_user_errors(synthetic_area, capsys, argv, message):
    area, _ = synthetic_area
    assert main(["viz", str(area), *argv]) == 2
    assert message in capsys.readouterr().err


def test_missing_area_file(tmp_path, capsys):
    assert main(["viz", str(tmp_path / "Area_3.h5"), "--list"]) == 2
    assert "expected a prepared area file" in capsys.readouterr().err


def test_ply_export_with_hidden_ceiling_and_legend(synthetic_area, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "open3d", None)  # the PLY export and the legend need no Open3D
    area, preds = synthetic_area
    out = tmp_path / "grid.ply"
    assert main(["viz", str(area), "--room", "grid_1", "--pred", str(preds), "--hide", "ceiling",
                 "--mode", "pred", "--ply", str(out)]) == 0
    text = capsys.readouterr().out
    room, pred = synthetic_room()
    n_ceiling = int((room["label"] == 0).sum())
    assert f"note: hidden ceiling: {n_ceiling:,} points" in text
    assert "room: mIoU 62.5 % of the 4 classes present, OA" in text
    from tests.viz.test_ply import _read_ply

    _, rec, _ = _read_ply(out)
    assert len(rec) == len(pred) - n_ceiling
    colors = np.stack([rec["red"], rec["green"], rec["blue"]], axis=1)
    np.testing.assert_array_equal(colors, np.asarray(PALETTE, np.uint8)[rec["pred"]])
    np.testing.assert_array_equal(rec["pred"], pred[room["label"] != 0])


def test_hide_in_a_room_without_ground_truth_hides_by_prediction(tmp_path, capsys, monkeypatch):
    """``viz SCAN_pred.h5 --hide floor`` hid "0 points" (by ground truth, which a scan's predictions lack)
    while --mode switched to pred; it hides by prediction there now, and says so. A room with neither
    ground truth nor predictions (no file viz reads holds one) has nothing to hide by."""
    from pointgeope.scans.outputs import write_h5
    from pointgeope.scans.scan import Scan
    from pointgeope.viz import VizError
    from pointgeope.viz.scene import RoomView, prepare_view

    monkeypatch.setitem(sys.modules, "open3d", None)
    rng = np.random.default_rng(0)
    coord, pred = rng.random((50, 3)) * 4, rng.integers(0, 4, 50).astype(np.uint8)
    write_h5(tmp_path / "scan_pred.h5", Scan("scan", "scan.npy", coord, None, None), pred, list(CLASS_NAMES))
    out = tmp_path / "kept.ply"
    assert main(["viz", str(tmp_path / "scan_pred.h5"), "--hide", "floor,wall", "--ply", str(out)]) == 0
    hidden = np.isin(pred, [1, 2])                                          # floor, wall
    said = capsys.readouterr().out
    assert f"note: hidden floor,wall by prediction (no ground truth): {hidden.sum():,} points" in said
    _, rec, _ = _read_ply(out)
    np.testing.assert_array_equal(rec["pred"], pred[~hidden])
    bare = RoomView("bare_1", coord.astype(np.float32), np.zeros((50, 3), np.uint8), np.full(50, 255, np.uint8))
    with pytest.raises(VizError, match=r"^--hide floor: room 'bare_1' has neither ground truth nor predictions to "
                                       r"hide by; give --pred, or leave out --hide$"):
        prepare_view(bare, hidden=(1,))


def test_missing_open3d_says_how_to_install(synthetic_area, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "open3d", None)  # `import open3d` now raises ImportError
    with pytest.raises(ImportError, match="pip install open3d"):
        require_open3d()
    area, _ = synthetic_area
    assert main(["viz", str(area), "--room", "tiny_2", "--screenshot", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "needs Open3D" in err and "pip install open3d" in err and "apt-get install libusb-1.0-0" in err
    assert not (tmp_path / "a.png").exists()


def test_cli_does_not_import_open3d():
    import subprocess

    code = "import sys, pointgeope.cli; print('open3d' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the DISPLAY check is for X11 (Linux)")
def test_window_without_display_says_what_to_do(synthetic_area, capsys, monkeypatch):
    pytest.importorskip("open3d", reason="Open3D is not installed")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    area, _ = synthetic_area
    assert main(["viz", str(area), "--room", "tiny_2"]) == 2
    captured = capsys.readouterr()
    assert "keys:" in captured.out  # the key help is printed before the window opens
    assert "needs a display (DISPLAY is not set); use --screenshot PNG" in captured.err


def test_screenshot_to_a_folder_or_an_unknown_suffix_is_refused_before_rendering(synthetic_area, tmp_path, capsys):
    """It rendered, then failed with "unknown file extension: .tmp" (the suffix of the temporary file)."""
    area, _ = synthetic_area
    assert main(["viz", str(area), "--room", "tiny_2", "--screenshot", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"pointgeope viz: error: --screenshot {tmp_path}: expected an image "
                                               f"file name such as {tmp_path / 'view.png'}, got a folder")
    assert main(["viz", str(area), "--room", "tiny_2", "--screenshot", str(tmp_path / "view.xyz")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"pointgeope viz: error: --screenshot {tmp_path / 'view.xyz'}: expected an image file name ending in .png "
        "(or .jpg, .jpeg, .bmp, .tif, .tiff), got '.xyz'")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--room", ""], "--room '': no such room in {area}; its rooms: grid_1, tiny_2"),   # drew the first room
    (["--point-size", "nan"], "expected --point-size >= 1 pixel (Open3D draws no point smaller), got nan"),
    (["--point-size", "0"], "expected --point-size >= 1 pixel (Open3D draws no point smaller), got 0"),
    (["--max-points", "-5"], "expected --max-points >= 0 (0: no cap), got -5"),
    (["--voxel", "inf"], "expected --voxel from 1e-06 to 1000 metres (a micrometre: finer than an area file's "
                         "coordinates resolve; a kilometre: a whole building), got inf"),
    # drew the room as 1 or 2 points, exit 0: voxel indices beyond int64 cast to one value
    (["--voxel", "1e-300"], "expected --voxel from 1e-06 to 1000 metres (a micrometre: finer than an area file's "
                            "coordinates resolve; a kilometre: a whole building), got 1e-300"),
    # numpy's overflow warnings, the distances to the voxel's centre infinite
    (["--voxel", "1e308"], "expected --voxel from 1e-06 to 1000 metres (a micrometre: finer than an area file's "
                           "coordinates resolve; a kilometre: a whole building), got 1e+308"),
    (["--azimuth", "nan"], "expected a finite --azimuth in degrees, got nan"),
    (["--elevation", "91"], "expected --elevation in [-90, 90] degrees, got 91"),
    (["--width", "20000", "--height", "20000"],                                          # a segmentation fault
     "expected --width and --height in [8, 16384] pixels (the largest image the renderer makes), got 20000x20000"),
])
def test_every_option_is_checked_before_anything_is_drawn(synthetic_area, tmp_path, capsys, argv, message):
    area, _ = synthetic_area
    argv = argv if argv[0] == "--room" else ["--room", "grid_1", *argv]
    assert main(["viz", str(area), *argv, "--ply", str(tmp_path / "v.ply")]) == 2
    assert capsys.readouterr().err == f"pointgeope viz: error: {message.format(area=area)}\n"
    assert not (tmp_path / "v.ply").exists()


def test_the_finest_voxel_keeps_every_point_and_one_point_is_one_point(synthetic_area, tmp_path, capsys):
    """At --voxel 1e-6 each of tiny_2's 4 points is its own voxel (below it, indices overflowed into one voxel);
    a PLY of one point said "1 points"."""
    area, _ = synthetic_area
    out = tmp_path / "v.ply"
    assert main(["viz", str(area), "--room", "tiny_2", "--voxel", "1e-6", "--ply", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"wrote {out}: 4 points coloured by gt"
    assert len(_read_ply(out)[1]) == 4
    out.unlink()
    assert main(["viz", str(area), "--room", "tiny_2", "--max-points", "1", "--ply", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"wrote {out}: 1 point coloured by gt"


def test_a_room_thinned_to_one_point_says_one_point_in_every_line(synthetic_area, tmp_path, capsys):
    """Before: with --voxel 1000 (the largest voxel taken) tiny_2's 4 points are one, and the note above the PLY's
    line said "voxel 1000 m: 4 -> 1 points"."""
    area, _ = synthetic_area
    out = tmp_path / "v.ply"
    assert main(["viz", str(area), "--room", "tiny_2", "--voxel", "1000", "--ply", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "note: voxel 1000 m: 4 -> 1 point" in lines and lines[-1] == f"wrote {out}: 1 point coloured by gt", lines
    assert len(_read_ply(out)[1]) == 1


def test_pred_without_predictions_and_an_unwritable_target_name_the_file(synthetic_area, tmp_path, capsys):
    """--pred on a file without predictions said "object 'pred' doesn't exist" (which file?); a PLY into a
    place that cannot be written named its temporary file, not the target."""
    area, _ = synthetic_area
    assert main(["viz", str(area), "--room", "grid_1", "--pred", str(area), "--ply", str(tmp_path / "v.ply")]) == 2
    assert capsys.readouterr().err == (
        f"pointgeope viz: error: {area}: room 'grid_1' holds no predictions (no 'pred' array); expected "
        "RUN/area_N/predictions/Area_N.h5 or a file of pointgeope predict --format h5\n")
    (tmp_path / "a_file").write_text("not a folder")
    target = tmp_path / "a_file" / "v.ply"
    assert main(["viz", str(area), "--room", "grid_1", "--ply", str(target)]) == 2
    assert capsys.readouterr().err == (f"pointgeope viz: error: {target}: cannot be written (File exists: "
                                       f"{tmp_path / 'a_file'}); give a path in a folder you can write\n")


@pytest.mark.parametrize("place", ["room", "pred"])
def test_a_link_that_points_nowhere_in_a_predictions_file_is_one_line(synthetic_area, tmp_path, capsys, place):
    """A fold's predictions file whose room (or its ``pred``) is a soft link to a path the file lacks: ``viz
    --list --pred`` and ``viz --room`` ended in h5py's bare "KeyError: Unable to synchronously open object
    (component not found)", a traceback."""
    import shutil

    import h5py

    area, preds = synthetic_area
    damaged = shutil.copy(preds, tmp_path / preds.name)
    with h5py.File(damaged, "r+") as f:
        name = "tiny_2" if place == "room" else "tiny_2/pred"
        del f[name]
        f[name] = h5py.SoftLink("/gone")
    expected = ("expected room 'tiny_2' to be a group of predictions" if place == "room" else
                "room 'tiny_2': expected 'pred' to be integer labels of shape (N,)")
    line = (f"pointgeope viz: error: {damaged}: {expected}, found a link to '/gone', which the file does not hold; "
            "expected RUN/area_N/predictions/Area_N.h5 or a file of pointgeope predict --format h5\n")
    assert main(["viz", str(area), "--list", "--pred", str(damaged)]) == 2
    assert capsys.readouterr().err == line
    assert main(["viz", str(area), "--room", "tiny_2", "--pred", str(damaged), "--ply", str(tmp_path / "v.ply")]) == 2
    assert capsys.readouterr().err == line


def test_missing_fold_predictions_say_which_command_writes_them(synthetic_area, tmp_path, capsys):
    """Before: "found nothing at ..." with no fix; rerunning the training skips a complete fold, and
    `pointgeope evaluate RUN/area_N` is what writes its predictions."""
    area, _ = synthetic_area
    fold = tmp_path / "run" / "area_1"
    (fold / "predictions").mkdir(parents=True)
    (fold / "last.pt").write_bytes(b"")             # a trained fold (only its name is looked at)
    missing = fold / "predictions" / "Area_1.h5"
    assert main(["viz", str(area), "--list", "--pred", str(missing)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "pointgeope viz: error: expected a predictions file (RUN/area_N/predictions/Area_N.h5 or a file of "
        f"pointgeope predict --format h5), found nothing at {missing}; `pointgeope evaluate {fold}` writes it"]
    other = tmp_path / "preds.h5"                    # no fold folder: nothing to suggest
    assert main(["viz", str(area), "--list", "--pred", str(other)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"found nothing at {other}")


def test_the_window_of_an_unlabelled_scan_offers_no_ground_truth_key(tmp_path, capsys, monkeypatch):
    """Keys 2 (gt) and 4 (error) of an unlabelled scan's window drew every point black: they are not in the
    key help, and pressing one changes nothing and says why in one line. The window itself is Open3D's
    (replaced here: no display); its key table is what it registers."""
    from types import SimpleNamespace

    from pointgeope.viz import render

    pred = unlabelled_scan(tmp_path / "scan_pred.h5")
    shown = {}
    monkeypatch.setattr(render, "show", lambda coord, colors, mode, camera, size, title, missing=None:
                        shown.update(colors=colors, mode=mode, missing=missing))
    assert main(["viz", str(tmp_path / "scan_pred.h5"), "--max-points", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    keys_at = out.index("keys:")
    assert [line.split()[:2] for line in out[keys_at + 1:keys_at + 3]] == [["1", "rgb"], ["3", "pred"]]
    assert not any(line.split()[:1] in (["2"], ["4"]) for line in out[keys_at:])
    assert shown["mode"] == "pred" and sorted(shown["colors"]) == ["pred", "rgb"]

    said, recoloured = [], []
    fake_o3d = SimpleNamespace(utility=SimpleNamespace(Vector3dVector=np.asarray))
    pcd, vis = SimpleNamespace(colors=None), SimpleNamespace(update_geometry=recoloured.append)
    keys = render.mode_callbacks(fake_o3d, pcd, shown["colors"], announce=said.append, missing=shown["missing"])
    for key in "24":
        assert keys[ord(key)](vis) is False and pcd.colors is None and not recoloured
    assert said == ["mode gt: not available (this room has no ground truth)",
                    "mode error: not available (this room has no ground truth)"]
    assert keys[ord("3")](vis) is True and said[-1] == "mode pred" and recoloured == [pcd]
    assert sorted(map(tuple, np.rint(pcd.colors * 255).astype(int))) == sorted(tuple(PALETTE[c]) for c in pred)


def test_an_unlabelled_scan_is_drawn_by_its_predictions_and_gt_is_refused(tmp_path, capsys):
    """The predictions of an unlabelled scan (`predict --format h5`) were drawn by `gt` by default, every point
    black, and `--mode gt` / `--mode error` too, without a word. The default is now `pred`; the two modes
    that need ground truth are refused in one line."""
    n, path = 200, tmp_path / "scan_pred.h5"
    pred = unlabelled_scan(path, n)
    assert main(["viz", str(path), "--ply", str(tmp_path / "v.ply"), "--max-points", "0"]) == 0
    assert f"wrote {tmp_path / 'v.ply'}: {n} points coloured by pred" in capsys.readouterr().out
    _, rec, _ = _read_ply(tmp_path / "v.ply")            # each point in its predicted class's colour
    np.testing.assert_array_equal(np.c_[rec["red"], rec["green"], rec["blue"]],
                                  np.asarray(PALETTE, np.uint8)[rec["pred"]])
    assert sorted(rec["pred"]) == sorted(pred)
    for mode in ("gt", "error"):
        assert main(["viz", str(path), "--mode", mode, "--ply", str(tmp_path / f"{mode}.ply")]) == 2
        assert capsys.readouterr().err == (f"pointgeope viz: error: --mode {mode}: room 'scan' of {path} has no "
                                           "ground truth (every label is unlabelled, as in the predictions of a "
                                           "scan); use --mode pred or rgb\n")
        assert not (tmp_path / f"{mode}.ply").exists()


def test_ply_export_of_a_georeferenced_room_adds_its_origin(tmp_path, capsys):
    """prepare stores a room beyond 16,384 m as ``coord - origin``; ``viz --ply`` wrote the local float32
    coordinates (the export landed ~4,000 km from its scan), where ``predict`` writes them in place."""
    import h5py

    from tests.viz.conftest import write_area

    coord = np.array([[5.504, 1.131, 2.988], [0.25, 0.5, 0.75], [1.0, 2.0, 3.0]], dtype=np.float32)
    origin = np.array([512345.0, 4181234.0, -13.0])
    area = write_area(tmp_path / "Area_1.h5", "Area_1", {"office_2": {"coord": coord, "label": np.zeros(3)}})
    with h5py.File(area, "a") as f:
        f["office_2"].attrs["origin"] = origin
    assert main(["viz", str(area), "--ply", str(tmp_path / "geo.ply"), "--mode", "rgb"]) == 0
    assert "in place (origin 512345, 4181234, -13 added)" in capsys.readouterr().out
    header, rec, _ = _read_ply(tmp_path / "geo.ply")
    assert "property double x" in header
    np.testing.assert_array_equal(np.stack([rec["x"], rec["y"], rec["z"]], 1), coord.astype(np.float64) + origin)
