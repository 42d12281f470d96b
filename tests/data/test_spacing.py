"""Tests of pointgeope/data/spacing.py: the median nearest-neighbour distance, exact on a grid, the same on
a slab of a large cloud as on the whole, and the reference of prepared rooms."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.data.spacing import median_spacing, rooms_spacing


def test_a_regular_grid_has_its_step():
    h = 0.013
    i, j = np.meshgrid(np.arange(300), np.arange(200), indexing="ij")
    coord = np.stack([i.ravel() * h, j.ravel() * h, np.full(i.size, 2.0)], 1)   # 60k points
    assert median_spacing(coord) == pytest.approx(h, rel=1e-9)
    assert median_spacing(coord, max_points=5000) == pytest.approx(h, rel=1e-9)  # a slab: the same density
    assert median_spacing(coord * 1000) == pytest.approx(h * 1000, rel=1e-9)     # millimetres: 1000x
    assert np.isnan(median_spacing(coord[:1]))


def test_slab_estimate_matches_the_whole_cloud():
    rng = np.random.default_rng(0)
    coord = np.c_[rng.random((400_000, 2)) * [40.0, 10.0], np.zeros(400_000)]  # random points on a plane
    whole = median_spacing(coord, max_points=400_000)
    # Poisson points of density rho: median NN distance sqrt(ln 2 / (pi rho))
    assert whole == pytest.approx(np.sqrt(np.log(2) / (np.pi * 1000.0)), rel=0.02)
    assert median_spacing(coord, max_points=20_000) == pytest.approx(whole, rel=0.05)


def test_rooms_spacing_of_prepared_areas(tmp_path):
    from tests.viz.conftest import write_area

    i, j = np.meshgrid(np.arange(40), np.arange(30), indexing="ij")
    grid = np.stack([i.ravel(), j.ravel(), np.zeros(i.size)], 1)
    write_area(tmp_path / "Area_1.h5", "Area_1", {
        "a": {"coord": grid * 0.02, "label": np.zeros(len(grid))},
        "b": {"coord": grid * 0.04, "label": np.zeros(len(grid))},
        "c": {"coord": grid * 0.05, "label": np.zeros(len(grid))}})
    assert rooms_spacing(tmp_path, ["Area_1"]) == pytest.approx(0.04, rel=1e-6)   # median of 0.02, 0.04, 0.05
    assert rooms_spacing(tmp_path, ["Area_1"], num_rooms=1) == pytest.approx(0.02, rel=1e-6)


def test_repeated_points_do_not_shrink_the_spacing():
    """A scan with each point of a grid repeated 3 times had a median spacing of 0 (the nearest other point
    of a copy is its twin): predict warned "spacing 0 ... is 0 times the training rooms'". The spacing is
    that of the distinct points; fewer than 2 of them have none (nan)."""
    h = 0.02
    i, j = np.meshgrid(np.arange(50), np.arange(40), indexing="ij")
    coord = np.stack([i.ravel() * h, j.ravel() * h, np.zeros(i.size)], 1)
    assert median_spacing(np.repeat(coord, 3, axis=0)) == pytest.approx(h, rel=1e-9)
    assert np.isnan(median_spacing(np.repeat(coord[:1], 5, axis=0)))
