"""Rotations about an axis (pointgeope/data/rotate.py) and the transforms of both recipes built on them
(``transforms.RandomRotate``, PTv3's three rotations, and PTv1's ``RandomRotateZ``), each seeded output
against the rotation written out here from its definition: Rodrigues' matrix about the axis's unit vector
by the angle drawn as the authors' code draws it (first the coin ``rng.random() < p``, then
``rng.uniform(lo, hi) * pi``), about the given centre or the box centre."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pointgeope.data.ptv3_transforms import ptv3_train_transform
from pointgeope.data.rotate import rotate_about
from pointgeope.data.transforms import RandomRotate, RandomRotateZ

UNIT = {"x": np.array([1.0, 0, 0]), "y": np.array([0, 1.0, 0]), "z": np.array([0, 0, 1.0])}


def rodrigues(axis: str, theta: float) -> np.ndarray:
    """``cos I + sin [e]_x + (1 - cos) e e^T`` for the unit vector ``e`` of ``axis``."""
    e = UNIT[axis]
    cross = np.array([[0, -e[2], e[1]], [e[2], 0, -e[0]], [-e[1], e[0], 0]])
    return math.cos(theta) * np.eye(3) + math.sin(theta) * cross + (1 - math.cos(theta)) * np.outer(e, e)


def make_coord(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * [4.0, 3.0, 2.5] + [10.0, -3.0, 0.7]).astype(np.float32)


def test_turns_are_right_handed_and_other_axes_refused():
    # a quarter turn: z takes x to y, x takes y to z, y takes z to x (right-handed)
    for axis, p, q in (("z", [1, 0, 0], [0, 1, 0]), ("x", [0, 1, 0], [0, 0, 1]), ("y", [0, 0, 1], [1, 0, 0])):
        np.testing.assert_allclose(rotate_about(np.array([p], dtype=np.float64), axis, math.pi / 2, (0, 0, 0)),
                                   [q], atol=1e-12)
    for bad in (lambda: RandomRotate(axis="w"), lambda: rotate_about(make_coord(), "", 0, 0)):
        with pytest.raises(ValueError, match="rotation axis 'x', 'y' or 'z', got"):
            bad()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", ["x", "y", "z"])
def test_rotate_about_is_the_rotation_about_the_centre(axis, dtype):
    coord = make_coord().astype(dtype)
    centre = np.array([11.0, -1.5, 2.0])
    out = rotate_about(coord, axis, 0.7, centre)
    expected = (coord.astype(np.float64) - centre) @ rodrigues(axis, 0.7).T + centre
    assert out.dtype == dtype and out is not coord
    np.testing.assert_allclose(out, expected, rtol=0, atol=2e-6 if dtype == np.float32 else 1e-12)
    a = "xyz".index(axis)
    np.testing.assert_array_equal(out[:, a], coord[:, a])                    # the axis coordinate, exactly


RECIPES = {   # name: (transform, axis, (lo, hi), centre or None for the box centre, p)
    "ptv3 z": (ptv3_train_transform().transforms[2], "z", (-1.0, 1.0), (0.0, 0.0, 0.0), 0.5),
    "ptv3 x": (ptv3_train_transform().transforms[3], "x", (-1 / 64, 1 / 64), None, 0.5),
    "ptv3 y": (ptv3_train_transform().transforms[4], "y", (-1 / 64, 1 / 64), None, 0.5),
    "x whole turn": (RandomRotate(axis="x", p=1.0), "x", (-1.0, 1.0), None, 1.0),
    "ptv1 z": (RandomRotateZ(p=0.5), "z", (-1.0, 1.0), None, 0.5),
    "ptv1 z quarter": (RandomRotateZ(angle=(0.25, 0.75), p=1.0), "z", (0.25, 0.75), None, 1.0),
}


@pytest.mark.parametrize("name", list(RECIPES))
def test_seeded_outputs_are_the_definitions(name):
    """For 40 seeds: the output equals the rotation of the definition by the angle the seed draws (or the
    input, when the coin says no), the axis coordinate is kept exactly, and the generator has made exactly the
    draws the definition makes (its next number is the same)."""
    transform, axis, (lo, hi), centre, p = RECIPES[name]
    assert (transform.axis, transform.angle, transform.center, transform.p) == (axis, (lo, hi), centre, p)
    coord = make_coord()
    lo_hi = np.stack([coord.astype(np.float64).min(0), coord.astype(np.float64).max(0)])
    c = lo_hi.mean(0) if centre is None else np.array(centre)
    turned = 0
    for seed in range(40):
        rng, ref = np.random.default_rng(seed), np.random.default_rng(seed)
        out = transform({"coord": coord}, rng)["coord"]
        assert out.dtype == np.float32
        if ref.random() < p:
            theta = ref.uniform(lo, hi) * math.pi
            expected = (coord.astype(np.float64) - c) @ rodrigues(axis, theta).T + c
            ulp = float(np.spacing(np.float32(np.abs(expected).max())))     # float32's step at the largest
            np.testing.assert_allclose(out, expected, rtol=0, atol=3 * ulp)    # centre and result rounded
            np.testing.assert_array_equal(out[:, "xyz".index(axis)], coord[:, "xyz".index(axis)])
            turned += 1
        else:
            np.testing.assert_array_equal(out, coord)
        assert rng.random() == ref.random()
    assert (turned == 40) if p == 1.0 else (8 < turned < 32)


def test_ptv1_rotate_z_is_its_previous_arithmetic_bit_for_bit():
    """PTv1's ``RandomRotateZ`` now runs through ``rotate_about``; its outputs are pinned to the bits of its own
    former six lines: the box centre and ``p - c`` in float32, the turn in float64
    (``x' = cx + cos (x - cx) - sin (y - cy)``, ``y' = cy + sin (x - cx) + cos (y - cy)``), one cast to float32."""
    coord = make_coord(n=2000, seed=3)
    for seed in range(10):
        rng, ref = np.random.default_rng(seed), np.random.default_rng(seed)
        out = RandomRotateZ(p=1.0)({"coord": coord}, rng)["coord"]
        ref.random()                                                          # the coin
        theta = ref.uniform(-1.0, 1.0) * np.pi
        c, s = np.float64(np.cos(theta)), np.float64(np.sin(theta))
        center = (coord.min(0) + coord.max(0)) / 2                            # float32
        x = (coord[:, 0] - center[0]).astype(np.float64)
        y = (coord[:, 1] - center[1]).astype(np.float64)
        expected = coord.copy()
        expected[:, 0] = (c * x - s * y + np.float64(center[0])).astype(np.float32)
        expected[:, 1] = (s * x + c * y + np.float64(center[1])).astype(np.float32)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, expected)
