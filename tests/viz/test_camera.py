"""Tests of pointgeope/viz/camera.py: look-at frames, the fitted view of a room, projection."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pointgeope.viz.camera import fit_camera, look_at, project


def test_look_at_frame():
    ext = look_at(eye=(0, -5, 0), center=(0, 0, 0))                   # looking north (+y), z up
    np.testing.assert_allclose(ext[:3, :3], [[1, 0, 0], [0, 0, -1], [0, 1, 0]], atol=1e-12)
    np.testing.assert_allclose(ext @ [0, 0, 0, 1], [0, 0, 5, 1], atol=1e-12)  # the centre is 5 m ahead
    assert np.isclose(np.linalg.det(ext[:3, :3]), 1.0)                  # a rotation, right-handed
    with pytest.raises(ValueError, match="not parallel"):
        look_at((0, 0, 5), (0, 0, 0), up=(0, 0, 1))


def _room(rng):
    return rng.random((5000, 3)) * np.array([7.0, 4.0, 3.0]) + np.array([10.0, -3.0, 0.0])


@pytest.mark.parametrize("elevation, azimuth", [(45, -60), (90, -90), (30, 120), (10, 0)])
@pytest.mark.parametrize("size", [(320, 240), (200, 400)])
def test_fit_camera_frames_the_whole_room(elevation, azimuth, size):
    rng = np.random.default_rng(0)
    coord = _room(rng)
    w, h = size
    cam = fit_camera(coord, w, h, elevation=elevation, azimuth=azimuth, margin=0.05)
    # the camera looks from the requested direction
    e, a = math.radians(elevation), math.radians(azimuth)
    np.testing.assert_allclose(-cam.forward, [math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)],
                               atol=1e-9)
    # every point projects inside the image, outside the 5% margin, in front of the camera
    uv, depth = project(cam, coord)
    # the image of the points is centred (to a tenth of a pixel)
    np.testing.assert_allclose((uv.min(0) + uv.max(0)) / 2, [cam.cx, cam.cy], atol=0.1)
    assert (depth > 0).all()
    assert (uv[:, 0] >= cam.cx - 0.95 * w / 2 - 1e-6).all() and (uv[:, 0] <= cam.cx + 0.95 * w / 2 + 1e-6).all()
    assert (uv[:, 1] >= cam.cy - 0.95 * h / 2 - 1e-6).all() and (uv[:, 1] <= cam.cy + 0.95 * h / 2 + 1e-6).all()
    # the distance is the smallest one: some point touches the margin
    reach = max(np.abs(uv[:, 0] - cam.cx).max() / (0.95 * w / 2), np.abs(uv[:, 1] - cam.cy).max() / (0.95 * h / 2))
    assert reach == pytest.approx(1.0, abs=1e-9)


def test_fit_camera_of_a_flat_floor_from_the_top():
    """A plane seen from the top has no 2-D hull across the line of sight: the fit uses all points."""
    g = np.stack(np.meshgrid(np.linspace(0, 4, 30), np.linspace(0, 2, 20), [0.0]), -1).reshape(-1, 3)
    cam = fit_camera(g, 240, 160, elevation=90, azimuth=-90)
    uv, _ = project(cam, g)
    np.testing.assert_allclose(uv.min(0), [cam.cx - 0.95 * 120, cam.cy - 0.95 * 120 / 2], atol=1e-6)
    np.testing.assert_allclose(uv.max(0), [cam.cx + 0.95 * 120, cam.cy + 0.95 * 120 / 2], atol=1e-6)
    np.testing.assert_allclose(cam.forward, [0, 0, -1], atol=1e-12)


def test_fit_camera_up_is_up():
    """At 45 degrees, higher points of the room appear higher in the image (smaller row v)."""
    coord = np.array([[0, 0, 0], [4, 3, 0], [2, 1.5, 0], [2, 1.5, 2.5]], dtype=float)
    cam = fit_camera(coord, 320, 240)
    uv, _ = project(cam, coord)
    assert uv[3, 1] < uv[2, 1]
    np.testing.assert_allclose(cam.intrinsic, [[cam.focal, 0, 159.5], [0, cam.focal, 119.5], [0, 0, 1]])
    assert cam.focal == pytest.approx(120 / math.tan(math.radians(30)))


def test_fit_camera_bad_input():
    with pytest.raises(ValueError, match="non-empty coord"):
        fit_camera(np.zeros((0, 3)), 320, 240)
    with pytest.raises(ValueError, match="field of view"):
        fit_camera(np.zeros((2, 3)), 320, 240, fov=120)
    with pytest.raises(ValueError, match="at least 8x8"):
        fit_camera(np.zeros((2, 3)), 4, 240)


def test_the_drawing_frame_is_a_similarity_that_float32_holds():
    """``drawing_frame``: the points shifted to their box centre, and scaled by a power of two only where they
    span more than MAX_DRAWN_EXTENT; the camera fitted to them frames the same image (pixel for pixel)."""
    from pointgeope.viz.camera import MAX_DRAWN_EXTENT, drawing_frame

    rng = np.random.default_rng(1)
    room = _room(rng) + np.array([4.0e5, 0.0, 0.0])              # far from the origin: shifted only
    drawn = drawing_frame(room)
    assert drawn.dtype == np.float32
    centre = (room.min(0) + room.max(0)) / 2
    np.testing.assert_allclose(drawn, room - centre, atol=1e-6)
    uv_room = project(fit_camera(room, 320, 240), room)[0]
    uv_drawn = project(fit_camera(drawn, 320, 240), drawn.astype(np.float64))[0]
    np.testing.assert_allclose(uv_drawn, uv_room, atol=1e-3)

    wide = np.vstack([rng.random((99, 3)) * 3, [[3e38, -3e38, 1e38]]]).astype(np.float32)
    drawn = drawing_frame(wide)
    extent = drawn.max(0).astype(np.float64) - drawn.min(0)
    assert np.isfinite(drawn).all() and extent.max() <= MAX_DRAWN_EXTENT and extent.max() > MAX_DRAWN_EXTENT / 2
    scale = (wide.max(0).astype(np.float64) - wide.min(0))[0] / extent[0]
    assert scale == 2.0 ** round(math.log2(scale))              # a power of two
    cam = fit_camera(drawn, 320, 240)
    uv, depth = project(cam, drawn)
    assert (depth > 0).all() and (uv >= 0).all() and (uv[:, 0] <= 319).all() and (uv[:, 1] <= 239).all()
