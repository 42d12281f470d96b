"""PTv3's transforms: input untouched, readable repr, each against its definition written out here, the
random ones by their statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pointgeope.data.ptv3_transforms import (
    CenterShift,
    GridSample,
    NormalizeColor,
    RandomDropout,
    RandomRotate,
    SphereCrop,
    pointcept_grid,
    ptv3_train_transform,
)


def make_sample(n: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "coord": (rng.random((n, 3)) * [4.0, 3.0, 2.5] + [10.0, -3.0, 0.7]).astype(np.float32),
        "color": rng.integers(20, 200, (n, 3)).astype(np.float32),
        "label": np.arange(n, dtype=np.int64),          # the label names the original row
    }


ALL = [CenterShift(True), CenterShift(False), RandomDropout(0.2, p=1.0), RandomRotate(axis="x", p=1.0),
       RandomRotate(axis="z", center=(0, 0, 0), p=1.0), NormalizeColor(), SphereCrop(point_max=100),
       SphereCrop(point_max=None, sample_rate=0.6), GridSample(0.1), ptv3_train_transform(0.1, 0.6, 150)]


@pytest.mark.parametrize("transform", ALL, ids=lambda t: type(t).__name__)
def test_transform_returns_a_new_sample_and_leaves_its_input_alone(transform):
    sample = make_sample()
    before = {k: v.copy() for k, v in sample.items()}
    out = transform(sample, np.random.default_rng(0))
    assert out is not sample and set(sample) == set(before)
    for key, value in before.items():
        np.testing.assert_array_equal(sample[key], value)
    rows = out["label"]                                    # every array keeps its rows together
    assert out["coord"].shape == (rows.shape[0], 3) and out["color"].shape == (rows.shape[0], 3)


def test_reprs_name_their_parameters():
    assert repr(RandomRotate((-1 / 64, 1 / 64), axis="y", p=0.5)) == \
        "RandomRotate(angle=(-0.015625, 0.015625), axis='y', center=None, p=0.5)"
    assert repr(SphereCrop(sample_rate=0.6)) == "SphereCrop(point_max=80000, sample_rate=0.6, mode='random')"
    assert repr(RandomDropout(0.2, p=0.2)) == "RandomDropout(ratio=0.2, p=0.2)"
    assert repr(GridSample(0.02)) == "GridSample(grid_size=0.02)"
    text = repr(ptv3_train_transform())
    assert text.count("RandomRotate(") == 3 and "ChromaticJitter(p=0.95, std=0.05)" in text
    assert text.index("GridSample(grid_size=0.02)") < text.index("SphereCrop(point_max=80000, sample_rate=0.6")


def test_center_shift_puts_the_box_centre_at_the_origin_and_the_floor_at_zero():
    coord = make_sample()["coord"].astype(np.float64)
    out = CenterShift(apply_z=True)({"coord": coord})["coord"]
    lo, hi = out.min(0), out.max(0)
    np.testing.assert_allclose([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, lo[2]], 0.0, atol=1e-12)
    flat = CenterShift(apply_z=False)({"coord": coord})["coord"]
    np.testing.assert_array_equal(flat[:, 2], coord[:, 2])
    np.testing.assert_allclose(flat[:, :2], out[:, :2], atol=1e-12)


def test_random_rotate_angles_cover_their_range_and_p_applies_about_half():
    coord = np.array([[1.0, 0.0, 0.0]], dtype=np.float32)
    t = RandomRotate((-1 / 64, 1 / 64), axis="z", center=(0, 0, 0), p=0.5)
    angles = np.array([math.atan2(*t({"coord": coord}, np.random.default_rng(i))["coord"][0, [1, 0]])
                       for i in range(2000)])
    turned = np.abs(angles) > 0
    assert 0.45 < turned.mean() < 0.55
    assert np.abs(angles).max() <= math.pi / 64 + 1e-6
    assert angles[turned].min() < -0.9 * math.pi / 64 and angles[turned].max() > 0.9 * math.pi / 64


def test_random_dropout_keeps_a_subset_of_the_right_size_with_probability_p():
    sample = make_sample(n=1000)
    outs = [RandomDropout(0.2, p=0.2)(sample, np.random.default_rng(i)) for i in range(1000)]
    sizes = np.array([out["label"].shape[0] for out in outs])
    assert set(sizes) == {800, 1000}
    assert 0.17 < (sizes == 800).mean() < 0.23
    for out in outs[:50]:
        k = out["label"]
        assert np.unique(k).shape == k.shape                         # without replacement
        np.testing.assert_array_equal(out["coord"], sample["coord"][k])
        np.testing.assert_array_equal(out["color"], sample["color"][k])


def test_sphere_crop_keeps_the_nearest_points_to_one_of_them():
    sample = make_sample(n=500)
    out = SphereCrop(point_max=None, sample_rate=0.6)(sample, np.random.default_rng(1))
    assert out["label"].shape == (300,)
    coord = sample["coord"].astype(np.float64)
    inside = np.zeros(500, bool)
    inside[out["label"]] = True
    # some point of the crop is its centre: every kept point is at least as near to it as every dropped one
    found = False
    for c in out["label"]:
        d = np.linalg.norm(coord - coord[c], axis=1)
        if d[inside].max() <= d[~inside].min() + 1e-6:
            found = True
            break
    assert found
    small = SphereCrop(point_max=1000)(sample, np.random.default_rng(1))
    np.testing.assert_array_equal(small["label"], sample["label"])
    with pytest.raises(ValueError, match="sample_rate"):
        SphereCrop(sample_rate=1.5)


def test_normalize_color_divides_by_255():
    color = np.array([[0, 51, 255]], dtype=np.float32)
    np.testing.assert_allclose(NormalizeColor()({"color": color})["color"], [[0.0, 0.2, 1.0]], rtol=1e-7)


def test_pointcept_grid_is_anchored_at_the_origin_not_at_the_minimum():
    coord = np.array([[0.05, 0.0, -0.01], [0.11, 0.19, 0.0], [0.21, 0.0, 0.3]], dtype=np.float32)
    expected = [[int(math.floor(float(c) / 0.1)) for c in row] for row in coord.astype(np.float64)]
    expected = np.array(expected) - np.min(expected, axis=0)
    np.testing.assert_array_equal(pointcept_grid(coord, 0.1).T, expected)
    np.testing.assert_array_equal(pointcept_grid(coord, 0.1).T, [[0, 0, 0], [1, 1, 1], [2, 0, 4]])
    # anchored at the minimum (PTv1's grid), x of the second point would fall in voxel 0
    with pytest.raises(ValueError, match="grid_size"):
        pointcept_grid(coord, 0.0)


def test_grid_sample_keeps_one_point_per_voxel_with_its_grid_coord():
    sample = make_sample(n=3000)
    out = GridSample(0.25)(sample, np.random.default_rng(0))
    grid = pointcept_grid(sample["coord"], 0.25).T
    occupied = {tuple(g) for g in grid}
    kept = [tuple(g) for g in out["grid_coord"]]
    assert len(kept) == len(set(kept)) == len(occupied)
    np.testing.assert_array_equal(out["grid_coord"], grid[out["label"]])      # each point's own voxel
    assert out["grid_coord"].dtype == np.int64
    # uniform choice inside a voxel: over many draws every point of a voxel of 2+ points is picked
    counts = {}
    for g in grid:
        counts[tuple(g)] = counts.get(tuple(g), 0) + 1
    big = max(counts, key=counts.get)
    members = np.flatnonzero((grid == big).all(1))
    picks = [int(np.intersect1d(GridSample(0.25)(sample, np.random.default_rng(i))["label"], members)[0])
             for i in range(60 * len(members))]
    assert set(picks) == set(members.tolist())


def test_pipeline_gives_centred_unit_colour_blocks_with_grid_coord():
    sample = make_sample(n=3000)
    out = ptv3_train_transform(0.1, 0.6, 800)(sample, np.random.default_rng(7))
    assert out["coord"].shape[0] <= 800 and out["grid_coord"].shape == (out["coord"].shape[0], 3)
    lo, hi = out["coord"].min(0), out["coord"].max(0)
    np.testing.assert_allclose((lo[:2] + hi[:2]) / 2, 0.0, atol=1e-5)
    assert out["color"].min() >= 0.0 and out["color"].max() <= 1.0
    assert len({tuple(g) for g in out["grid_coord"]}) == out["grid_coord"].shape[0]
