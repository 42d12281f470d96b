"""The float32 coordinates warning of `predict` (pointgeope/scans/precision.py) against float32's definition:
24 significant bits, so the step at |x| in [2^e, 2^(e+1)) is 2^(e - 23)."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.scans.precision import float32_note, float32_steps


def utm_room(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (np.array([5.0e5, 4.2e6, 100.0]) + rng.random((500, 3)) * 4).astype(dtype).astype(np.float64)


def test_the_step_is_float32s_at_the_largest_coordinate():
    assert float32_steps(utm_room(np.float32)) == 2.0 ** (22 - 23)          # 4.2e6 m in [2^22, 2^23): 0.5 m
    assert float32_steps(np.array([[0.5, -70000.25, 3.0]])) == 2.0 ** (16 - 23)   # 70000 in [2^16, 2^17)
    assert float32_steps(utm_room(np.float64)) == 0.0                           # values float32 cannot hold
    assert float32_steps(np.array([[4200000.0, 1.0, 2.0]])) == 0.0              # integers: not a sign of float32
    assert float32_steps(np.zeros((0, 3))) == 0.0


@pytest.mark.parametrize(("reach", "warned"), [(65535.5, False), (65536.5, True)])
def test_steps_past_an_eighth_of_a_voxel_are_warned(reach, warned):
    """At grid 0.04 m an eighth is 5 mm: float32 steps 2^-8 m below 65,536 m, 2^-7 m (7.8 mm) from there."""
    note = float32_note("scan.ply", np.array([[reach, 0.25, 1.0]]), 1.0, 0.04)
    assert (note is not None) == warned
    if warned:
        assert note == ("warning: scan.ply: its coordinates are float32 values, which 6.55e+04 m from 0 come in "
                        "steps of 0.00781 m (the model's voxels: 0.04 m): a file that kept them in float32 has lost "
                        "their detail; export them in float64 (a PLY 'double' property, a float64 .npy) or minus an "
                        "offset near the scan")


def test_scale_applies_to_the_step():
    """Millimetres read with --scale 0.001: 4.2e9 mm in float32 are steps of 256 mm = 0.256 m."""
    coord = np.array([[4.2e9, 1.5, 2.0]], dtype=np.float32).astype(np.float64)
    assert "steps of 0.256 m" in float32_note("s.npy", coord, 0.001, 0.04)
    near = np.array([[4200.123, 1.5, 2.0]], dtype=np.float32).astype(np.float64)
    assert float32_steps(near) == 2.0 ** (12 - 23) and float32_note("s.npy", near, 1.0, 0.04) is None   # 0.49 mm


def test_integers_from_2_to_the_24_are_no_excuse():
    """From 2^24 every float32 value is an integer, so integer coordinates there are float32's rounding, not a
    lattice: a float32 file of millimetres at 4.2e9 / 6e8 / 4.7e9 mm (ECEF-like, every axis past 2^24) is in steps
    of 256 mm. It was taken for an integer lattice and not warned; below 2^24 integers still are not."""
    ecef = np.array([[4.2e9, 6.0e8, 4.7e9], [4.2e9 + 1234.5, 6.0e8 + 77, 4.7e9 + 999]], np.float32).astype(np.float64)
    assert np.array_equal(np.floor(ecef), ecef)                                   # all integers
    assert float32_steps(ecef) == 2.0 ** (32 - 23)                                # 4.7e9 in [2^32, 2^33): 512
    assert "steps of 0.512 m" in float32_note("ecef.npy", ecef, 0.001, 0.04)
    assert float32_steps(np.array([[2.0 ** 24 - 1, 3.0, 5.0]])) == 0.0           # the last exact integer lattice
    assert float32_steps(np.array([[2.0 ** 24, 3.0, 5.0]])) == 2.0                # 2^24: steps of 2
