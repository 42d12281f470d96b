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
