"""``viz --screenshot`` of a scene without extent (one point, or every point at one place) wrote a blank
white image and exited 0 (issue 38, class 10): Open3D takes its near and far planes from the bounding box
and clips such a scene to nothing. Now it is one line, exit code 2, and no image; a scene with any extent
is drawn as before."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.cli import main
from tests.viz.conftest import write_area


def _room(coord):
    n = len(coord)
    return {"coord": np.asarray(coord, np.float32), "color": np.full((n, 3), 200, np.uint8),
            "label": np.zeros(n, np.uint8), "instance": np.zeros(n, np.int32)}


@pytest.mark.parametrize("points", [1, 50])
def test_a_scene_at_one_place_is_refused_in_one_line(points, tmp_path, capsys):
    area = write_area(tmp_path / "Area_9.h5", "Area_9", {"dot_1": _room(np.tile([[1.5, 2.0, 0.5]], (points, 1)))})
    shot = tmp_path / "dot.png"
    assert main(["viz", str(area), "--screenshot", str(shot), "--width", "64", "--height", "48"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    counted = "1 point" if points == 1 else "50 points"
    assert err == [f"pointgeope viz: error: the {counted} to draw all lie at one place (1.5 2 0.5): a view "
                   "of a scene without extent is blank, nothing to frame; --ply PLY writes them"]
    assert not shot.exists()
    assert main(["viz", str(area), "--ply", str(tmp_path / "dot.ply")]) == 0  # the points themselves are fine


def test_two_points_apart_are_drawn(tmp_path, capsys):
    from PIL import Image

    pytest.importorskip("open3d")
    area = write_area(tmp_path / "Area_9.h5", "Area_9", {"pair_1": _room([[1.5, 2.0, 0.5], [1.5, 2.0, 0.6]])})
    shot = tmp_path / "pair.png"
    try:
        code = main(["viz", str(area), "--screenshot", str(shot), "--width", "64", "--height", "48"])
    except RuntimeError as err:
        pytest.skip(f"no rendering here: {err}")
    assert code == 0
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert (image != 255).any(axis=2).sum() >= 2


def _far_scan(path, far):
    """A scan's predictions file (``predict --format h5``): 199 points in a 3 m box and one stray at ``far``."""
    from pointgeope import h5_predictions
    from pointgeope.constants import CLASS_NAMES

    rng = np.random.default_rng(0)
    coord = np.vstack([rng.random((199, 3)) * 3, [far]]).astype(np.float32)
    arrays = {"coord": coord, "color": np.full((200, 3), 90, np.uint8), "label": np.full(200, 255, np.uint8),
              "instance": np.zeros(200, np.int32)}
    h5_predictions.write_scan_predictions(path, "scans/far", "far", arrays, np.zeros(200, np.uint8),
                                          list(CLASS_NAMES), "far.npy", {"num_points": 200})
    return coord


def test_a_scan_with_a_point_near_float32s_limit_is_written_to_ply(tmp_path, capsys):
    """A scan whose stray point lies at 3e38 (predict writes it: --format h5 holds it in float32): viz's
    camera raised "ValueError: expected eye and center to differ" (centre + unit direction == centre in
    float64), even for --ply, which needs no camera. The PLY keeps the coordinates; the image frames every
    point (drawn scaled down: Open3D draws in float32)."""
    coord = _far_scan(tmp_path / "far_pred.h5", [3e38, 3e38, 3e38])
    ply = tmp_path / "far.ply"
    assert main(["viz", str(tmp_path / "far_pred.h5"), "--ply", str(ply)]) == 0
    from pointgeope.scans.ply import read_ply

    np.testing.assert_array_equal(read_ply(ply).coord, coord)


def test_a_scan_with_a_point_near_float32s_limit_is_drawn(tmp_path):
    from PIL import Image

    pytest.importorskip("open3d")
    _far_scan(tmp_path / "far_pred.h5", [3e38, 3e38, 3e38])
    shot = tmp_path / "far.png"
    try:
        code = main(["viz", str(tmp_path / "far_pred.h5"), "--screenshot", str(shot), "--width", "64",
                     "--height", "48", "--point-size", "3"])
    except RuntimeError as err:
        pytest.skip(f"no rendering here: {err}")
    assert code == 0
    drawn = np.argwhere((np.asarray(Image.open(shot).convert("RGB")) != 255).any(axis=2))
    # two blobs in opposite corners (the box and the stray point), each in the image
    assert drawn[:, 0].max() - drawn[:, 0].min() > 30 and drawn[:, 1].max() - drawn[:, 1].min() > 40
