"""data_prep/synth/geometry.py: box faces, exact quarter-turn placement, uniform sampling, occlusion boxes."""
from __future__ import annotations

import numpy as np
import pytest

from data_prep.synth.geometry import box, inside_any, place, place_box, point_count, rect, rotation_z, sample


def test_box_faces_cover_the_surface_and_skip_what_is_asked():
    lo, hi = np.array([1.0, 2.0, 0.0]), np.array([1.5, 4.0, 0.3])
    sx, sy, sz = hi - lo
    full = box(lo, hi)
    assert len(full) == 6
    assert full.areas().sum() == pytest.approx(2 * (sx * sy + sy * sz + sx * sz))
    np.testing.assert_allclose(full.bounds(), [lo, hi])
    no_bottom = box(lo, hi, skip=("-z", "-y"))
    assert len(no_bottom) == 4
    assert no_bottom.areas().sum() == pytest.approx(full.areas().sum() - sx * sy - sx * sz)
    with pytest.raises(ValueError, match="expected faces among"):
        box(lo, hi, skip=("bottom",))
    with pytest.raises(ValueError, match="lo <= hi"):
        box(hi, lo)


def test_samples_lie_on_the_box_surface_in_proportion_to_area():
    lo, hi = np.zeros(3), np.array([1.0, 2.0, 3.0])
    pts = sample(box(lo, hi), 60_000, np.random.default_rng(0))
    assert pts.shape == (60_000, 3)
    assert np.all((pts >= lo - 1e-12) & (pts <= hi + 1e-12))
    on_face = np.isclose(pts, lo) | np.isclose(pts, hi)  # (N, 3)
    assert on_face.any(axis=1).all()
    # share of points on the two faces normal to z: 2 * 1 * 2 / 22 of the surface
    share = on_face[:, 2].mean()
    assert share == pytest.approx(4 / 22, abs=0.01)


def test_quarter_turns_are_exact_rotations_and_place_matches_place_box():
    for turns in range(4):
        rot = rotation_z(turns)
        np.testing.assert_array_equal(rot @ rot.T, np.eye(3))
        assert np.linalg.det(rot) == 1
    np.testing.assert_array_equal(rotation_z(1) @ [1, 0, 0], [0, 1, 0])
    lo, hi, shift = np.array([0.0, 0.0, 0.0]), np.array([2.0, 0.5, 1.0]), np.array([10.0, -3.0, 0.0])
    for turns in range(4):
        placed = place(box(lo, hi), turns, shift)
        np.testing.assert_allclose(placed.bounds(), place_box(lo, hi, turns, shift), atol=1e-12)
        assert placed.areas().sum() == pytest.approx(box(lo, hi).areas().sum())


def test_inside_any_matches_a_brute_force_loop():
    rng = np.random.default_rng(3)
    pts = rng.uniform(-1, 3, size=(2000, 3))
    boxes = np.array([[[0, 0, 0], [1, 1, 1]], [[0.5, 1.5, -1], [2.5, 2.0, 0.2]]], float)
    expected = np.array([any(np.all((p >= b[0] - 0.05) & (p <= b[1] + 0.05)) for b in boxes) for p in pts])
    np.testing.assert_array_equal(inside_any(pts, boxes, margin=0.05), expected)
    assert not inside_any(pts, np.zeros((0, 2, 3)), margin=0.1).any()


def test_point_count_and_rect():
    assert point_count(2.0, 100.0, minimum=12) == 200
    assert point_count(0.01, 100.0, minimum=12) == 12
    r = rect([0, 0, 3], [4, 0, 0], [0, 5, 0])
    assert r.areas().tolist() == [20.0]
    pts = sample(r, 500, np.random.default_rng(1))
    assert np.all(pts[:, 2] == 3) and pts[:, 0].max() <= 4 and pts[:, 1].max() <= 5
